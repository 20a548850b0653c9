FIGURES = [
    "training_curves",
    "baseline_comparison",
    "method_cost",
    "scheme_distribution",
    "scheme_evolution",
]


rule schemes:
    input:
        stage_code("schemes"),
        "results/train/rollouts.jsonl",
        expand(
            "results/baselines/{baseline}/generations.jsonl",
            baseline=["naive_concat", "sequential", "discussion"],
        ),
        "results/evaluate/generations.jsonl",
    output:
        "results/schemes/schemes.csv",
        "results/schemes/summary.json",
    params:
        schemes=config["schemes"],
        option=params_option,
    conda:
        "../../environment.yml"
    log:
        "logs/schemes.log",
    shell:
        "python -m orchestry{params.option} --log {log} schemes"


rule figures:
    input:
        stage_code("figures"),
        "results/train/history.csv",
        "results/train/metrics.json",
        expand("results/baselines/{baseline}/metrics.json", baseline=BASELINES),
        "results/baselines/single_grpo/metrics.json",
        "results/evaluate/metrics.json",
        expand(
            "results/baselines/{method}/metrics.json",
            method=["prompt_policy", "beam", "best_of"],
        ),
        expand("results/baselines/{baseline}/generations.jsonl", baseline=BASELINES),
        "results/baselines/single_grpo/generations.jsonl",
        "results/evaluate/generations.jsonl",
        expand(
            "results/baselines/{method}/generations.jsonl",
            method=["prompt_policy", "beam", "best_of"],
        ),
        "results/schemes/summary.json",
    output:
        report(
            directory("reports/figures"),
            patterns=["{name}.png"],
            caption="../report/figures.rst",
            category="Figures",
        ),
        report("reports/results.md", caption="../report/results.rst", category="Tables"),
        "reports/comparison.csv",
        "reports/paired.csv",
    params:
        seed=config["seed"],
        reward=config["reward"],
        evaluate=config["evaluate"],
        figures=config["figures"],
        option=params_option,
    conda:
        "../../environment.yml"
    log:
        "logs/figures.log",
    shell:
        "python -m orchestry{params.option} --log {log} figures"
