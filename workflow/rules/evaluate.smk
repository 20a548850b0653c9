BASELINES = ["single", "naive_concat", "sequential", "discussion"]
EVAL_CODE = [
    "orchestry/eval/protocols.py",
    "orchestry/eval/metrics.py",
    "orchestry/envs/code/prompts.py",
    "orchestry/envs/code/reward.py",
    "orchestry/envs/code/sandbox/runner.py",
    "orchestry/envs/code/sandbox/harness.py",
    "orchestry/agents/lora/team.py",
    "orchestry/agents/lora/base_model.py",
    "orchestry/agents/lora/kv_prefix.py",
    "orchestry/agents/lora/stacked_lora.py",
    "orchestry/agents/lora/head_sampler.py",
    "orchestry/stages/from_params.py",
]


wildcard_constraints:
    baseline="|".join(BASELINES),


rule baseline:
    input:
        "orchestry/stages/baseline.py",
        EVAL_CODE,
        "data/prepared/test.jsonl",
    output:
        "results/baselines/{baseline}/generations.jsonl",
        "results/baselines/{baseline}/metrics.json",
    params:
        seed=config["seed"],
        model=config["model"],
        sampling=config["sampling"],
        sandbox=config["sandbox"],
        reward=config["reward"],
        evaluate=config["evaluate"],
        anthropic=config["anthropic"],
    conda:
        "../../environment.yml"
    threads: 2  # torch uses every core: one model stage at a time on a 2-core laptop
    log:
        "logs/baseline_{baseline}.log",
    shell:
        "python -m orchestry --log {log} baseline --name {wildcards.baseline}"


rule evaluate:
    input:
        "orchestry/stages/evaluate.py",
        EVAL_CODE,
        "data/prepared/test.jsonl",
        "results/train/adapters",
    output:
        "results/evaluate/generations.jsonl",
        "results/evaluate/metrics.json",
    params:
        seed=config["seed"],
        model=config["model"],
        sampling=config["sampling"],
        sandbox=config["sandbox"],
        reward=config["reward"],
        evaluate=config["evaluate"],
    conda:
        "../../environment.yml"
    threads: 2  # torch uses every core: one model stage at a time on a 2-core laptop
    log:
        "logs/evaluate.log",
    shell:
        "python -m orchestry --log {log} evaluate"
