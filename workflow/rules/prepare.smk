rule prepare:
    input:
        "orchestry/stages/prepare.py",
        "orchestry/envs/code/problems.py",
        "data/coop",
        "data/coop3",
    output:
        "data/prepared/train.jsonl",
        "data/prepared/test.jsonl",
        "data/prepared/summary.json",
    params:
        seed=config["seed"],
        prepare=config["prepare"],
    conda:
        "../../environment.yml"
    log:
        "logs/prepare.log",
    shell:
        "python -m orchestry --log {log} prepare"
