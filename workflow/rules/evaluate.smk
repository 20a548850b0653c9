BASELINES = ["single", "naive_concat", "sequential", "discussion"]
EVAL_CODE = [
    "orchestry/protocols.py",
    "orchestry/metrics.py",
    "orchestry/env.py",
    "orchestry/rewards.py",
    "orchestry/sandbox.py",
    "orchestry/_sandbox_harness.py",
    "orchestry/policy.py",
    "orchestry/models.py",
    "orchestry/prefix.py",
    "orchestry/mixed_lora.py",
    "orchestry/sampling.py",
    "orchestry/build.py",
]


wildcard_constraints:
    baseline="|".join(BASELINES),


rule baseline:
    input:
        "orchestry/baselines.py",
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
        "orchestry/evaluate.py",
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
