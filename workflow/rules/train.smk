TRAIN_CODE = [
    "orchestry/stages/train.py",
    "orchestry/eval/metrics.py",
    "orchestry/algos/tree.py",
    "orchestry/envs/code/prompts.py",
    "orchestry/algos/magrpo.py",
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


rule smoke:
    input:
        "orchestry/stages/smoke.py",
        TRAIN_CODE,
        "data/prepared/train.jsonl",
    output:
        "results/smoke/smoke.json",
    params:
        seed=config["seed"],
        model=config["model"],
        sampling=config["sampling"],
        sandbox=config["sandbox"],
        reward=config["reward"],
        train=config["train"],
        smoke=config["smoke"],
    conda:
        "../../environment.yml"
    threads: 2  # torch uses every core: one model stage at a time on a 2-core laptop
    log:
        "logs/smoke.log",
    shell:
        "python -m orchestry --log {log} smoke"


rule train:
    input:
        TRAIN_CODE,
        "data/prepared/train.jsonl",
        "results/smoke/smoke.json",
    output:
        directory("results/train/adapters"),
        "results/train/rollouts.jsonl",
        directory("results/train/live"),
        "results/train/history.csv",
        "results/train/metrics.json",
    params:
        seed=config["seed"],
        model=config["model"],
        sampling=config["sampling"],
        sandbox=config["sandbox"],
        reward=config["reward"],
        train=config["train"],
        anthropic=config["anthropic"],
    conda:
        "../../environment.yml"
    threads: 2  # torch uses every core: one model stage at a time on a 2-core laptop
    log:
        "logs/train.log",
    shell:
        "python -m orchestry --log {log} train"
