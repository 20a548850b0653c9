rule prepare:
    input:
        stage_code("prepare"),
        "data/coop",
        "data/coop3",
        "data/story",
        "data/writing",
    output:
        "data/prepared/train.jsonl",
        "data/prepared/test.jsonl",
        "data/prepared/summary.json",
    params:
        seed=config["seed"],
        sandbox=config["sandbox"],
        prepare=config["prepare"],
        env=config["env"],
        model=config["model"],  # prepare.drop_over_budget: model.name's tokenizer
        sampling=config["sampling"],  # and sampling.max_new_tokens
        option=params_option,
    conda:
        "../../environment.yml"
    log:
        "logs/prepare.log",
    shell:
        "python -m orchestry{params.option} --log {log} prepare"
