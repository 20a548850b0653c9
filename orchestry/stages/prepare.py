"""Stage `prepare`: the train and test splits of `env.name`'s task sets.

Code problems: each helper with a reference gets unit tests derived from a recorded run of the
reference program in the sandbox (envs/code/unit_tests.py), so "is aux right on its own" can be
measured later (the code_review workflow reads the same problems). Story themes and writing sources
are split as they are. Every set is split by the seeded shuffle (`split_problems`) except
`humaneval_paper`, whose split is the paper's, fixed by task index (envs/code/humaneval.py). The
generated sets (`gen`, `gen_unseen`, and the comparison's `gen_train`, `gen_compose`,
`gen_unseen_balanced`: envs/code/generated) are made here, at their fixed seed.

With `prepare.drop_over_budget`, a code problem is dropped from its split when an answer the warm
start teaches for it (a role's part, or the single agent's whole program: envs/code/answers.py) is
longer than the budget (`budget_tokens`: `prepare.budget_tokens`, else `sampling.max_new_tokens`) in
tokens of `model.name`'s tokenizer, its end of sequence included: no agent could write it whole.
The drop comes after each set's split, so the split is the one the flag off gives and its held-out
problems stay fixed whatever the budget (a drop only removes problems); summary.json keeps each
set's split sizes before the drop under `sets` and counts the drops, with their ids, under
`dropped_over_budget` (and the budget: `max_new_tokens`, or `budget_tokens` when that is set). With
the flag off nothing is counted, and the outputs are what they were before the flag existed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from orchestry import io, paths
from orchestry.envs.code.answers import over_budget_parts
from orchestry.envs.code.humaneval import paper_split
from orchestry.envs.code.problems import Problem, problem_to_dict, split_problems
from orchestry.envs.code.sandbox import SandboxLimits
from orchestry.envs.code.unit_tests import with_helper_tests
from orchestry.envs.registry import env_kind
from orchestry.params import Params


def split_set(
    name: str, tasks: list[Any], n_train: int, n_test: int, seed: int
) -> tuple[list[Any], list[Any]]:
    """A set's (train, test): the seeded shuffle, or the paper's fixed split for humaneval_paper."""
    if name == "humaneval_paper":
        return paper_split(tasks, n_train, n_test)
    return split_problems(tasks, n_train, n_test, seed)


def run(params: Params) -> None:
    env = params.env.name
    kind = env_kind(env)
    train: list[Any] = []
    test: list[Any] = []
    summary: dict[str, dict[str, int]] = {}
    dropped: dict[str, dict[str, Any]] = {}
    too_long = _over_budget_check(params, kind.code_problems)
    seed = params.seed if params.prepare.split_seed is None else params.prepare.split_seed
    for name, split in sorted(params.prepare.sets.items()):
        if split.n_train + split.n_test == 0 or name not in kind.tasks.SETS:
            continue
        tasks = kind.tasks.load_set(name)
        tr, te = split_set(name, tasks, split.n_train, split.n_test, seed)
        summary[name] = {"available": len(tasks), "train": len(tr), "test": len(te)}
        if too_long is not None:
            gone = {p.id for p in (*tr, *te) if too_long(p)}
            tr, te = [p for p in tr if p.id not in gone], [p for p in te if p.id not in gone]
            n_train, n_test = summary[name]["train"] - len(tr), summary[name]["test"] - len(te)
            dropped[name] = {"train": n_train, "test": n_test, "ids": sorted(gone)}
        train += tr
        test += te
    if not summary:
        raise ValueError(
            f"prepare.sets selects no task of env.name {env}; give one of its sets "
            f"({', '.join(kind.tasks.SETS)}) n_train or n_test > 0"
        )
    if not train and not test:
        raise ValueError(
            f"prepare.drop_over_budget dropped every selected problem: each has an answer longer "
            f"than the budget of {budget_tokens(params)} tokens (prepare.budget_tokens, or "
            "sampling.max_new_tokens when it is null)"
        )
    if kind.code_problems:  # code and code_review: helper tests from the reference runs
        rows = _with_helper_tests(params, train, test)
    else:
        to_dict = kind.tasks.to_dict
        rows = [to_dict(t) for t in train], [to_dict(t) for t in test]
    io.write_jsonl(paths.split("train"), rows[0])
    io.write_jsonl(paths.split("test"), rows[1])
    info: dict[str, Any] = {"seed": seed, "sets": summary}
    if env != "code":  # the code task's summary keeps its earlier form
        info["env"] = env
    if too_long is not None:
        info["dropped_over_budget"] = dropped
        info["max_new_tokens"] = params.sampling.max_new_tokens
        if params.prepare.budget_tokens is not None:  # else the budget is max_new_tokens
            info["budget_tokens"] = budget_tokens(params)
        info["tokenizer"] = params.model.name
    io.write_json(paths.PREPARED_SUMMARY, info)


def budget_tokens(params: Params) -> int:
    """The tokens a taught answer may take under `prepare.drop_over_budget`: `prepare.budget_tokens`,
    or `sampling.max_new_tokens` when it is null (a run with more new tokens can keep the sets of a
    smaller budget, so that every method answers the same problems)."""
    chosen = params.prepare.budget_tokens
    return params.sampling.max_new_tokens if chosen is None else chosen


def _over_budget_check(params: Params, code_problems: bool) -> Callable[[Problem], bool] | None:
    """With `prepare.drop_over_budget`: whether a problem has a taught answer over the budget
    (`over_budget_parts`, counted with `model.name`'s tokenizer); None with the flag off."""
    if not params.prepare.drop_over_budget:
        return None
    if not code_problems:
        raise ValueError(
            f"prepare.drop_over_budget counts code answers; env.name {params.env.name} has no "
            "code problems: set it false"
        )
    others = {a: m for a, m in params.model.agent_models.items() if m != params.model.name}
    if others:
        raise ValueError(
            f"prepare.drop_over_budget counts with model.name's tokenizer, but model.agent_models "
            f"gives {others}: leave agent_models empty or set drop_over_budget false"
        )
    n_tokens = _token_counter(params.model.name)
    budget = budget_tokens(params)
    return lambda problem: bool(over_budget_parts(problem, n_tokens, budget))


def _token_counter(model_name: str) -> Callable[[str], int]:
    """The number of tokens of a text in `model_name`'s tokenizer, special tokens left out (as
    `algos/sft.answer_ids` encodes an answer). Reads the tokenizer only, never the weights: the
    embedded model's from its GGUF file (the tokenizer its conversion saves beside the weights),
    any other name from its folder or the Hugging Face hub."""
    # the model stack only when the flag asks for it: prepare's default path imports none of it
    from transformers import AutoTokenizer

    from orchestry.agents.lora.base_model import (
        EMBEDDED_MODEL,
        ModelUnavailable,
        embedded_gguf_path,
    )

    try:
        if model_name == EMBEDDED_MODEL:
            gguf = embedded_gguf_path()
            tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        else:
            tokenizer = AutoTokenizer.from_pretrained(model_name)
    except OSError as err:  # what transformers raises for files it cannot fetch or read
        raise ModelUnavailable(
            f"prepare.drop_over_budget: could not read the tokenizer of model.name "
            f"{model_name!r}: {err}"
        ) from err
    return lambda text: len(tokenizer(text, add_special_tokens=False)["input_ids"])


def _with_helper_tests(
    params: Params, train: list[Problem], test: list[Problem]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    # the sandbox section as limits (stages/from_params.py would pull the model stack into prepare)
    limits = SandboxLimits(**params.sandbox.model_dump(exclude={"workers"}))
    workers = params.sandbox.worker_count()
    train = with_helper_tests(train, limits, workers)
    test = with_helper_tests(test, limits, workers)
    return [problem_to_dict(p) for p in train], [problem_to_dict(p) for p in test]
