"""Stage `figures`: the paper's figures (PNG + PDF) and results tables from the metrics files.

Figures: training curves (return and each reward level vs step, smoothed, with a band across seeds when
several runs exist), baseline comparison (pass@1 and return with 95% CIs), scheme distribution per
method, scheme evolution over training; speed (tokens/s, response time) beside the timing records in
logs/timings/, out of git (a timing differs between two runs of the same code). `reports/results.md` holds
the methods x metrics tables (with the paper's normalised columns) and the paired differences of the
team against each method, also in `reports/paired.csv`.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

from orchestry import io, paths  # noqa: E402
from orchestry.bookkeeping.provenance import MANIFEST, stage_manifest, write_run_record  # noqa: E402
from orchestry.eval.normalised import paper_columns  # noqa: E402
from orchestry.eval.paired import paired_csv, paired_markdown, paired_rows  # noqa: E402
from orchestry.eval.tables import (  # noqa: E402
    ROLE_RATES,
    comparison_csv,
    fractions,
    results_markdown,
)
from orchestry.eval.text_tables import (  # noqa: E402
    text_comparison_csv,
    text_results_markdown,
)
from orchestry.params import Params  # noqa: E402
from orchestry.stages.timings import plot_speed  # noqa: E402

HISTORY = paths.HISTORY
log = logging.getLogger("orchestry.stages.figures")
SCHEMES = paths.SCHEMES / "summary.json"
FIG_DIR = paths.FIGURES
RESULTS_MD = paths.RESULTS_MD
COMPARISON_CSV = paths.COMPARISON_CSV
METHOD_LABELS = {
    "single": "Single model",
    "naive_concat": "Naive concat.",
    "sequential": "Sequential",
    "discussion": "Discussion",
    "single_grpo": "Single agent (GRPO)",
    "magrpo": "MAGRPO (ours)",
    "prompt_policy": "Prompt policy",
    "beam": "Beam search*",
    "best_of": "Best-of-M*",
}
# methods for teams whose weights do not change (stages prompt_policy and beam)
FROZEN_METHODS = ("prompt_policy", "beam", "best_of")
LEVELS = [
    ("structure", "Structure"),
    ("syntax", "Syntax"),
    ("tests", "Tests"),
    ("cooperation", "Cooperation"),
]


def metric_paths() -> dict[str, Path]:
    return {n: paths.metrics(n) for n in METHOD_LABELS}  # every method, in the tables' order


def _style() -> None:
    sns.set_theme(context="paper", style="whitegrid", palette="colorblind", font_scale=1.2)
    plt.rcParams.update({"figure.dpi": 150, "savefig.bbox": "tight", "axes.titleweight": "bold"})


def _save(fig: plt.Figure, name: str, folder: Path | None = None) -> None:
    folder = FIG_DIR if folder is None else folder
    folder.mkdir(parents=True, exist_ok=True)
    for ext in ("png", "pdf"):
        fig.savefig(
            folder / f"{name}.{ext}",
            metadata={"CreationDate": None} if ext == "pdf" else {"Software": None},
        )
    plt.close(fig)


def plot_training(
    runs: list[pd.DataFrame],
    smoothing: int,
    panels: list[tuple[str, str]] | None = None,
    folder: Path | None = None,
) -> None:
    """Return and each reward level against the step (code levels unless `panels` names others),
    the mean of the runs with their range as a band (the seed runs' report draws several)."""
    if panels is None:
        panels = [("return_mean", "Return (max 4.0)")]
        panels += [(f"reward/{k}", label) for k, label in LEVELS]
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.6), sharex=True)
    colors = sns.color_palette("colorblind", len(panels))
    # Only runs as long as this one (the first) make the band: a history from another config
    # (other max_steps) would mix in steps this run does not have.
    same = [r for r in runs if len(r) == len(runs[0])]
    if len(same) < len(runs):
        log.info(
            "training curves: %d seed run(s) of another length left out", len(runs) - len(same)
        )
    for ax, (col, label), color in zip(axes, panels, colors, strict=True):
        curves = np.stack(
            [r[col].rolling(smoothing, min_periods=1).mean().to_numpy() for r in same if col in r]
        )
        steps = np.arange(curves.shape[1])
        mean = curves.mean(axis=0)
        ax.plot(steps, mean, color=color, lw=2, label=f"mean of {len(curves)} run(s)")
        if len(curves) > 1:
            ax.fill_between(
                steps,
                curves.min(axis=0),
                curves.max(axis=0),
                color=color,
                alpha=0.25,
                label="min-max across seeds",
            )
        ax.set_title(label)
        ax.set_xlabel("Training step")
        ax.set_ylabel("Reward (points)")
    axes[0].legend(loc="lower right", fontsize=9, frameon=True)
    fig.suptitle(f"MAGRPO training (moving average over {smoothing} steps)", y=1.03)
    fig.tight_layout()
    _save(fig, "training_curves", folder)


def plot_comparison(table: pd.DataFrame) -> None:
    panels = [
        ("pass@1", "pass@1_ci95", "pass@1 (fraction of problems)"),
        ("test_pass_rate", None, "Asserts passed (fraction)"),
        ("return_mean", "return_ci95", "Mean return (max 4.0)"),
    ]
    fig, axes = plt.subplots(1, len(panels), figsize=(16, 4.2))
    colors = sns.color_palette("colorblind", len(table))
    for ax, (col, ci, label) in zip(axes, panels, strict=True):
        vals = table[col].to_numpy()
        err = None
        if ci is not None:
            lo = vals - table[ci].map(lambda c: c[0]).to_numpy()
            hi = table[ci].map(lambda c: c[1]).to_numpy() - vals
            err = [lo, hi]
        ax.bar(table["label"], vals, yerr=err, capsize=5, color=colors, edgecolor="black")
        ax.set_ylabel(label)
        ax.set_xlabel("Method")
        ax.tick_params(axis="x", rotation=25)
        tops = vals if err is None else vals + err[1]  # labels sit above the error-bar caps
        top = max(float(np.max(tops)), 1e-9)
        ax.set_ylim(0, top * 1.25 if col != "pass@1" else max(1.0, top * 1.25))
        for x, (v, y) in enumerate(zip(vals, tops, strict=True)):
            ax.annotate(
                f"{v:.2f}",
                (x, y),
                xytext=(0, 4),
                textcoords="offset points",
                ha="center",
                fontsize=9,
            )
        if not np.any(vals > 0):  # say so rather than leave an empty-looking panel
            ax.text(
                0.5,
                0.55,
                "0 for every method:\nno held-out problem\nfully solved",
                transform=ax.transAxes,
                ha="center",
                va="center",
                fontsize=10,
                bbox={"boxstyle": "round", "facecolor": "white", "edgecolor": "0.6"},
            )
    fig.suptitle("Test split: methods (error bars: 95% bootstrap CIs over problems)", y=1.02)
    fig.tight_layout()
    _save(fig, "baseline_comparison")


def plot_cost(table: pd.DataFrame) -> None:
    """Return against cost: the mean tokens generated for one answer (a search counts all of its
    candidates), one point per method with its 95% CI."""
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    colors = sns.color_palette("colorblind", len(table))
    for color, (_, r) in zip(colors, table.iterrows(), strict=True):
        lo, hi = r["return_ci95"]
        y = r["return_mean"]
        x = r["new_tokens_mean"]
        ax.errorbar(x, y, yerr=[[y - lo], [hi - y]], fmt="o", capsize=4, color=color)
        ax.annotate(r["label"], (x, y), xytext=(6, 4), textcoords="offset points", fontsize=9)
    ax.set_xscale("log")
    ax.set_xlabel("Tokens generated per answer (log scale)")
    ax.set_ylabel("Mean return")
    ax.set_title("Test split: return against cost (error bars: 95% CIs over tasks)")
    fig.tight_layout()
    _save(fig, "method_cost")


def plot_schemes(summary: dict[str, Any]) -> None:
    labels = summary["labels"]
    colors = sns.color_palette("colorblind", len(labels))
    methods = list(summary["per_method"])
    fig, ax = plt.subplots(figsize=(10, 0.6 * len(methods) + 2))
    left = np.zeros(len(methods))
    fr = np.array([fractions(summary["per_method"][m]["primary"], labels) for m in methods])
    for j, label in enumerate(labels):
        ax.barh(
            methods,
            fr[:, j],
            left=left,
            color=colors[j],
            label=label.replace("_", " "),
            edgecolor="white",
        )
        left += fr[:, j]
    ax.set_xlabel("Fraction of (aux, main) pairs (primary label)")
    ax.set_xlim(0, 1)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), title="Scheme", frameon=False)
    ax.set_title("Cooperation schemes per method")
    fig.tight_layout()
    _save(fig, "scheme_distribution")

    windows = summary["training_windows"]
    fig, ax = plt.subplots(figsize=(10, 4))
    if windows:
        names = [f"{w['steps'][0]}-{w['steps'][1]}" for w in windows]
        fr = np.array([fractions(w["primary"], labels) for w in windows])
        bottom = np.zeros(len(windows))
        for j, label in enumerate(labels):
            ax.bar(
                names,
                fr[:, j],
                bottom=bottom,
                color=colors[j],
                label=label.replace("_", " "),
                edgecolor="white",
            )
            bottom += fr[:, j]
    ax.set_xlabel("Training steps (window)")
    ax.set_ylabel("Fraction of pairs")
    ax.set_ylim(0, 1)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), title="Scheme", frameon=False)
    ax.set_title("Evolution of cooperation schemes during training")
    fig.tight_layout()
    _save(fig, "scheme_evolution")


def plot_roles_training(history: pd.DataFrame, smoothing: int) -> None:
    """The role instruments over training (this run), one line each."""
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    for col, label in [*ROLE_RATES, ("correct_rate", "all tests pass")]:
        if col in history and history[col].notna().any():
            ax.plot(history[col].rolling(smoothing, min_periods=1).mean(), lw=2, label=label)
    ax.set_xlabel("Training step")
    ax.set_ylabel("Fraction of joint actions")
    ax.set_ylim(-0.02, 1.02)
    ax.legend(fontsize=8, loc="upper left", frameon=True)
    ax.set_title(f"Each role on its own during training (moving average, {smoothing} steps)")
    _save(fig, "roles_training")


def plot_roles_by_method(table: pd.DataFrame) -> None:
    """The role instruments per method on the test split, with 95% bootstrap CIs over problems."""
    fig, ax = plt.subplots(figsize=(11, 4.2))
    width = 0.8 / len(table)
    for i, (_, row) in enumerate(table.iterrows()):
        xs, vals, errs = [], [], [[], []]
        for j, (col, _) in enumerate(ROLE_RATES):
            if row.get(col) is None or pd.isna(row[col]):
                continue  # n/a for this method
            xs.append(j + (i - (len(table) - 1) / 2) * width)
            vals.append(row[col])
            errs[0].append(row[col] - row[f"{col}_ci95"][0])
            errs[1].append(row[f"{col}_ci95"][1] - row[col])
        ax.bar(xs, vals, width, yerr=errs, capsize=3, label=row["label"], edgecolor="black")
    ax.set_xticks(range(len(ROLE_RATES)), [label for _, label in ROLE_RATES])
    ax.set_ylabel("Fraction of samples")
    ax.set_ylim(0, 1.05)
    ax.legend(fontsize=8, ncols=len(table), loc="upper center", bbox_to_anchor=(0.5, -0.12))
    ax.set_title("Test split: each role on its own (95% bootstrap CIs over problems)")
    _save(fig, "roles_by_method")


def load_table() -> pd.DataFrame:
    """Every method's metrics; the frozen-team methods only where their stages ran (an experiment
    run with `--only` may leave them out)."""
    rows = []
    for method, path in metric_paths().items():
        if not path.is_file() and method in FROZEN_METHODS:
            log.info("%s: no metrics (stage not run), left out of the tables", method)
            continue
        if not path.is_file():
            raise FileNotFoundError(f"{path} is missing; run the baseline/evaluate stages first")
        rows.append(
            {"method": method, "label": METHOD_LABELS[method], **json.loads(path.read_text())}
        )
    return pd.DataFrame(rows)


def run(params: Params) -> None:
    """The figures and tables, then the folder's manifest (code hash and params: the same for the
    same code and params) and the run's record (machine, date, wall time) in logs/, out of git."""
    started = time.time()
    draw(params)
    io.write_json(FIG_DIR / MANIFEST, stage_manifest("figures", params.model_dump(mode="json")))
    write_run_record("figures", started, Path.cwd())


def draw(params: Params) -> None:
    _style()
    table = load_table()
    if "pass@1" not in table.columns:  # a text environment (story, writing): no tests to pass
        run_text(params, table)
        return
    summary = json.loads(SCHEMES.read_text())
    train = json.loads(paths.TRAIN_METRICS.read_text())
    runs = {"this run": pd.read_csv(HISTORY)}  # other seeds: reports/seed_runs/ (variant_runs)
    plot_training(list(runs.values()), params.figures.smoothing)
    plot_comparison(table)
    plot_speed(table["method"], table["label"])
    plot_cost(table)
    plot_schemes(summary)
    plot_roles_training(runs["this run"], params.figures.smoothing)
    plot_roles_by_method(table)
    rows = load_rows(table)
    weights = params.reward.model_dump()
    paper = [paper_columns(rows[m], weights) for m in table["method"]]
    table = pd.concat([table, pd.DataFrame(paper, index=table.index)], axis=1)
    paired = paired_rows(rows, params.evaluate.bootstrap, params.seed)
    io.write_text(paths.PAIRED_CSV, paired_csv(paired))
    io.write_text(COMPARISON_CSV, comparison_csv(table))
    io.write_text(RESULTS_MD, results_markdown(table, train, summary, runs, weights, paired))


def load_rows(table: pd.DataFrame) -> dict[str, list[dict[str, Any]]]:
    """The generations.jsonl rows of each method in the table."""
    return {method: io.read_jsonl(paths.generations(method)) for method in table["method"]}


def run_text(params: Params, table: pd.DataFrame) -> None:
    """A text environment's report: training curves and method bars of the return and each part of
    its reward (95% CIs over tasks), speed, comparison.csv, paired.csv and results.md."""
    parts = list(table["reward_parts"].iloc[0])
    history = pd.read_csv(HISTORY)
    panels = [("return_mean", "Return")] + [(f"reward/{p}", p.capitalize()) for p in parts]
    plot_training([history], params.figures.smoothing, panels)
    bars = [("return", "Mean return")] + [(p, f"{p.capitalize()} (mean)") for p in parts]
    fig, axes = plt.subplots(1, len(bars), figsize=(4.6 * len(bars), 4.2))
    colors = sns.color_palette("colorblind", len(table))
    for ax, (key, label) in zip(axes, bars, strict=True):
        vals = table[f"{key}_mean"].to_numpy()
        ci = table[f"{key}_ci95"]
        err = [vals - ci.map(lambda c: c[0]).to_numpy(), ci.map(lambda c: c[1]).to_numpy() - vals]
        ax.bar(table["label"], vals, yerr=err, capsize=5, color=colors, edgecolor="black")
        ax.set_ylabel(label)
        ax.tick_params(axis="x", rotation=25)
    fig.suptitle("Test split: methods (error bars: 95% bootstrap CIs over tasks)", y=1.02)
    fig.tight_layout()
    _save(fig, "baseline_comparison")
    plot_speed(table["method"], table["label"])
    plot_cost(table)
    train = json.loads(paths.TRAIN_METRICS.read_text())
    io.write_text(COMPARISON_CSV, text_comparison_csv(table, parts))
    paired = paired_rows(load_rows(table), params.evaluate.bootstrap, params.seed)
    io.write_text(paths.PAIRED_CSV, paired_csv(paired))
    labels = dict(zip(table["method"], table["label"], strict=True))
    md = text_results_markdown(table, parts, train, history)
    io.write_text(RESULTS_MD, md + "\n" + paired_markdown(paired, labels))
