BASELINES = ["single", "naive_concat", "sequential", "discussion"]


wildcard_constraints:
    baseline="|".join(BASELINES),


rule baseline:
    input:
        stage_code("baseline"),
        "data/prepared/test.jsonl",
    output:
        "results/baselines/{baseline}/generations.jsonl",
        "results/baselines/{baseline}/metrics.json",
    params:
        seed=config["seed"],
        model=config["model"],
        sampling=config["sampling"],
        sandbox=config["sandbox"],
        env=config["env"],
        reward=config["reward"],
        evaluate=config["evaluate"],
        anthropic=config["anthropic"],
        option=params_option,
    conda:
        "../../environment.yml"
    threads: 2  # torch uses every core: one model stage at a time on a 2-core laptop
    log:
        "logs/baseline_{baseline}.log",
    shell:
        "python -m orchestry{params.option} --log {log} baseline --name {wildcards.baseline}"


rule evaluate:
    input:
        stage_code("evaluate"),
        "data/prepared/test.jsonl",
        "results/train/adapters",
        "results/sft/team",
    output:
        "results/evaluate/generations.jsonl",
        "results/evaluate/metrics.json",
    params:
        seed=config["seed"],
        model=config["model"],
        sampling=config["sampling"],
        sandbox=config["sandbox"],
        env=config["env"],
        reward=config["reward"],
        evaluate=config["evaluate"],
        option=params_option,
    conda:
        "../../environment.yml"
    threads: 2  # torch uses every core: one model stage at a time on a 2-core laptop
    log:
        "logs/evaluate.log",
    shell:
        "python -m orchestry{params.option} --log {log} evaluate"


rule evaluate_single:
    input:
        stage_code("evaluate_single"),
        "data/prepared/test.jsonl",
        "results/train_single/adapters",
        "results/sft/single",
    output:
        "results/baselines/single_grpo/generations.jsonl",
        "results/baselines/single_grpo/metrics.json",
    params:
        seed=config["seed"],
        model=config["model"],
        sampling=config["sampling"],
        sandbox=config["sandbox"],
        env=config["env"],
        reward=config["reward"],
        evaluate=config["evaluate"],
        option=params_option,
    conda:
        "../../environment.yml"
    threads: 2  # torch uses every core: one model stage at a time on a 2-core laptop
    log:
        "logs/evaluate_single.log",
    shell:
        "python -m orchestry{params.option} --log {log} evaluate_single"


rule prompt_policy:
    input:
        stage_code("prompt_policy"),
        "data/prepared/train.jsonl",
        "data/prepared/test.jsonl",
    output:
        "results/baselines/prompt_policy/generations.jsonl",
        "results/prompt_policy/prompts.json",
        "results/prompt_policy/library.json",
        "results/prompt_policy/cost.json",
        "results/baselines/prompt_policy/metrics.json",
    params:
        seed=config["seed"],
        model=config["model"],
        sampling=config["sampling"],
        sandbox=config["sandbox"],
        env=config["env"],
        reward=config["reward"],
        evaluate=config["evaluate"],
        anthropic=config["anthropic"],
        prompt_policy=config["prompt_policy"],
        option=params_option,
    conda:
        "../../environment.yml"
    threads: 2  # torch uses every core: one model stage at a time on a 2-core laptop
    log:
        "logs/prompt_policy.log",
    shell:
        "python -m orchestry{params.option} --log {log} prompt_policy"


rule beam:
    input:
        stage_code("beam"),
        "data/prepared/test.jsonl",
    output:
        "results/baselines/beam/generations.jsonl",
        "results/baselines/best_of/generations.jsonl",
        "results/beam/cost.json",
        "results/baselines/beam/metrics.json",
        "results/baselines/best_of/metrics.json",
    params:
        seed=config["seed"],
        model=config["model"],
        sampling=config["sampling"],
        sandbox=config["sandbox"],
        env=config["env"],
        reward=config["reward"],
        evaluate=config["evaluate"],
        anthropic=config["anthropic"],
        beam=config["beam"],
        option=params_option,
    conda:
        "../../environment.yml"
    threads: 2  # torch uses every core: one model stage at a time on a 2-core laptop
    log:
        "logs/beam.log",
    shell:
        "python -m orchestry{params.option} --log {log} beam"
