# Opt-in (not in `rule all`): snakemake --cores N orchestrate. dvc: dvc repro optional/dvc.yaml.


rule orchestrate:
    input:
        stage_code("orchestrate"),
        "data/prepared/train.jsonl",
        "data/prepared/test.jsonl",
        "results/train/adapters",
    output:
        "results/orchestrate/metrics.json",
        "results/orchestrate/episodes.jsonl",
        "results/orchestrate/history.csv",
        "reports/orchestrate/results.md",
        "reports/orchestrate/cost_accuracy.png",
        "reports/orchestrate/transitions.png",
        "reports/orchestrate/manifest.json",
    params:
        seed=config["seed"],
        model=config["model"],
        sampling=config["sampling"],
        sandbox=config["sandbox"],
        env=config["env"],
        reward=config["reward"],
        train=config["train"],
        evaluate=config["evaluate"],
        anthropic=config["anthropic"],
        orchestrate=config["orchestrate"],
        option=params_option,
    conda:
        "../../environment.yml"
    threads: 2  # torch uses every core: one model stage at a time on a 2-core laptop
    log:
        "logs/orchestrate.log",
    shell:
        "python -m orchestry{params.option} --log {log} orchestrate"
