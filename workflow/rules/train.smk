rule sft:
    input:
        stage_code("sft"),
        "data/prepared/train.jsonl",
    output:
        directory("results/sft/team"),
        directory("results/sft/single"),
        "results/sft/history.csv",
        "results/sft/metrics.json",
    params:
        seed=config["seed"],
        model=config["model"],
        sampling=config["sampling"],
        env=config["env"],
        train=config["train"],
        sft=config["sft"],
        option=params_option,
    conda:
        "../../environment.yml"
    threads: 2  # torch uses every core: one model stage at a time on a 2-core laptop
    log:
        "logs/sft.log",
    shell:
        "python -m orchestry{params.option} --log {log} sft"


rule smoke:
    input:
        stage_code("smoke"),
        "data/prepared/train.jsonl",
    output:
        "results/smoke/smoke.json",
    params:
        seed=config["seed"],
        model=config["model"],
        sampling=config["sampling"],
        sandbox=config["sandbox"],
        env=config["env"],
        reward=config["reward"],
        train=config["train"],
        smoke=config["smoke"],
        option=params_option,
    conda:
        "../../environment.yml"
    threads: 2  # torch uses every core: one model stage at a time on a 2-core laptop
    log:
        "logs/smoke.log",
    shell:
        "python -m orchestry{params.option} --log {log} smoke"


rule train:
    input:
        stage_code("train"),
        "data/prepared/train.jsonl",
        "results/smoke/smoke.json",
        "results/sft/team",
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
        env=config["env"],
        reward=config["reward"],
        train=config["train"],
        anthropic=config["anthropic"],
        sft=config["sft"],
        option=params_option,
    conda:
        "../../environment.yml"
    threads: 2  # torch uses every core: one model stage at a time on a 2-core laptop
    log:
        "logs/train.log",
    shell:
        "python -m orchestry{params.option} --log {log} train"


rule train_single:
    input:
        stage_code("train_single"),
        "data/prepared/train.jsonl",
        "results/smoke/smoke.json",
        "results/sft/single",
    output:
        directory("results/train_single/adapters"),
        "results/train_single/history.csv",
        "results/train_single/metrics.json",
    params:
        seed=config["seed"],
        model=config["model"],
        sampling=config["sampling"],
        sandbox=config["sandbox"],
        env=config["env"],
        reward=config["reward"],
        train=config["train"],
        anthropic=config["anthropic"],
        sft=config["sft"],
        option=params_option,
    conda:
        "../../environment.yml"
    threads: 2  # torch uses every core: one model stage at a time on a 2-core laptop
    log:
        "logs/train_single.log",
    shell:
        "python -m orchestry{params.option} --log {log} train_single"
