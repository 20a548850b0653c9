"""The cooperation-scheme classifier: each definition, and its accuracy on a labelled set."""

from __future__ import annotations

import textwrap
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

from orchestry.analysis import schemes
from orchestry.analysis.schemes import (
    LABELS,
    OUTCOMES,
    PRECEDENCE,
    SCHEMES,
    SchemeResult,
    classify_pair,
    scheme_counts,
)

LABELLED = Path(__file__).parent / "data" / "scheme_labels.yaml"
DOUBLE = "def aux(x):\n    return x * 2\n"
MIN_ACCURACY = 0.90


def _load_labelled() -> list[dict[str, Any]]:
    with LABELLED.open(encoding="utf-8") as handle:
        return yaml.safe_load(handle)


def _classify(entry: dict[str, Any]) -> SchemeResult:
    return classify_pair(
        entry["aux"],
        entry["main"],
        aux_name=entry.get("aux_name", "aux"),
        main_name=entry.get("main_name"),
    )


def _confusion_table(pairs: list[tuple[str, str]]) -> str:
    """Rows: expected primary label; columns: predicted (abbreviated to 6 characters)."""
    counts = Counter(pairs)
    width = max(len(label) for label in LABELS)
    header = " " * width + " | " + " ".join(f"{label[:6]:>6}" for label in LABELS) + " |  n"
    lines = [header, "-" * len(header)]
    for expected in LABELS:
        row = [counts[(expected, predicted)] for predicted in LABELS]
        cells = " ".join(f"{n:>6}" if n else f"{'.':>6}" for n in row)
        lines.append(f"{expected:>{width}} | {cells} | {sum(row):>2}")
    return "\n".join(lines)


# --- the labelled set -------------------------------------------------------------------------


def test_labelled_set_is_well_formed() -> None:
    entries = _load_labelled()
    assert len(entries) >= 48
    assert len({e["id"] for e in entries}) == len(entries), "ids must be unique"
    for entry in entries:
        assert entry["primary"] in LABELS, entry["id"]
        assert set(entry["flags"]) <= set(LABELS), entry["id"]
        first = next(label for label in PRECEDENCE if label in entry["flags"])
        assert first == entry["primary"], f"{entry['id']}: primary must follow the precedence"
    primaries = Counter(e["primary"] for e in entries)
    assert all(primaries[label] >= 3 for label in LABELS), primaries
    assert sum(e["origin"] == "smollm2-135m" for e in entries) >= 10


def test_accuracy_on_labelled_set(capsys: pytest.CaptureFixture[str]) -> None:
    entries = _load_labelled()
    results = [_classify(entry) for entry in entries]
    pairs = [(e["primary"], r.primary) for e, r in zip(entries, results, strict=True)]
    accuracy = sum(expected == got for expected, got in pairs) / len(pairs)
    flag_match = sum(
        frozenset(e["flags"]) == r.flags for e, r in zip(entries, results, strict=True)
    ) / len(entries)
    subsets = {
        "held-out hand pairs": [e.get("heldout", False) for e in entries],
        "smollm2-135m pairs": [e["origin"] == "smollm2-135m" for e in entries],
    }
    subset_lines = []
    for name, mask in subsets.items():
        chosen = [pair for pair, keep in zip(pairs, mask, strict=True) if keep]
        right = sum(expected == got for expected, got in chosen)
        subset_lines.append(f"  {name}: {right}/{len(chosen)}")
    misses = [
        f"  {e['id']}: expected {e['primary']}, got {r.primary} {sorted(r.flags)}"
        for e, r in zip(entries, results, strict=True)
        if e["primary"] != r.primary
    ]
    report = (
        f"\nscheme classifier on {len(entries)} labelled pairs: primary accuracy "
        f"{accuracy:.1%}, exact flag-set match {flag_match:.1%}\n"
        + "\n".join(subset_lines)
        + "\nconfusion (rows: expected primary, columns: predicted)\n"
        + _confusion_table(pairs)
        + ("\nmisclassified:\n" + "\n".join(misses) if misses else "")
    )
    with capsys.disabled():
        print(report)
    assert accuracy >= MIN_ACCURACY, report


# --- one minimal example per definition -------------------------------------------------------

MINIMAL = {
    "fallback": (
        "def main(x):\n    try:\n        return aux(x)\n    except ValueError:\n        return x\n"
    ),
    "decorator": "def main(s):\n    return aux(s.strip()).upper()\n",
    "coordinator": "def main(xs):\n    return sum(aux(x) for x in xs)\n",
    "strategy_filter": "def main(xs):\n    return [x for x in xs if aux(x)]\n",
    "thin_wrapper": "def main(x):\n    return aux(x)\n",
    "ignored_result": "def main(x):\n    aux(x)\n    return x\n",
    "no_call": "def main(x):\n    return x + 1\n",
}


@pytest.mark.parametrize("label", sorted(MINIMAL))
def test_minimal_example_per_definition(label: str) -> None:
    result = classify_pair(DOUBLE, MINIMAL[label])
    assert result == SchemeResult(flags=frozenset({label}), primary=label)


@pytest.mark.parametrize(
    ("main", "label"),
    [
        (
            "def main(x):\n    r = aux(x)\n    if r is None:\n        r = -x\n    return r\n",
            "fallback",
        ),
        ("def main(x):\n    return aux(x) or 0\n", "fallback"),
        ("def main(xs):\n    if not xs:\n        return 0\n    return aux(xs)\n", "decorator"),
        ("def main(x):\n    r = aux(x)\n    return r * 10\n", "decorator"),
        ("def main(s):\n    h = len(s) // 2\n    return aux(s[:h]) + aux(s[h:])\n", "coordinator"),
        ("def main(xs):\n    return list(map(aux, xs))\n", "coordinator"),
        ("def main(xs):\n    return sorted(xs, key=aux)\n", "strategy_filter"),
        ("def main(xs):\n    return list(filter(aux, xs))\n", "strategy_filter"),
        ("def main(x):\n    if aux(x):\n        return 1\n    return 2\n", "strategy_filter"),
        ("def main(x):\n    r = aux(x)\n    return r\n", "thin_wrapper"),
        ("def main(x):\n    r = aux(x)\n    return x\n", "ignored_result"),
    ],
)
def test_other_forms_of_each_definition(main: str, label: str) -> None:
    assert classify_pair(DOUBLE, main).primary == label


def _docstring_examples() -> dict[str, str]:
    """label -> the code example under its bullet in the module docstring."""
    examples = {}
    for bullet in (schemes.__doc__ or "").split("\n- ``")[1:]:
        label, _, rest = bullet.partition("``")
        if "::\n\n" in rest:
            block = rest.split("::\n\n", 1)[1].split("\n\n", 1)[0]
            examples[label] = textwrap.dedent(block) + "\n"
    return examples


def test_docstring_examples_classify_as_documented() -> None:
    examples = _docstring_examples()
    assert set(examples) == set(LABELS)
    for label, code in examples.items():
        if label == "no_aux":
            result = classify_pair(code, MINIMAL["thin_wrapper"])
        else:
            result = classify_pair(DOUBLE, code)
        assert result.flags == {label}, (label, code)


def test_outcomes_from_the_code_itself() -> None:
    good_main = MINIMAL["decorator"]
    assert classify_pair("def aux(x):\n    pass\n", good_main).primary == "no_aux"
    assert classify_pair("def other(x):\n    return x\n", good_main).primary == "no_aux"
    assert classify_pair("aux = 3\n", good_main).primary == "no_aux"
    assert classify_pair("def aux(x:\n", good_main).primary == "unparsable"
    assert classify_pair(DOUBLE, "def main(x) return aux(x)\n").primary == "unparsable"
    assert classify_pair(DOUBLE, "value = aux(2)\n").primary == "unparsable"


def test_an_outcome_is_the_only_flag() -> None:
    assert classify_pair("def aux(x):\n    pass\n", MINIMAL["coordinator"]).flags == {"no_aux"}
    assert classify_pair(DOUBLE, MINIMAL["thin_wrapper"]).flags == {"thin_wrapper"}


def test_aliases_partials_and_lambdas_count_as_calls() -> None:
    alias = "def main(xs):\n    f = aux\n    return [f(x) for x in xs]\n"
    partial = (
        "import functools\n\n\ndef main(xs):\n"
        "    g = functools.partial(aux)\n    return sum(g(x) for x in xs)\n"
    )
    module_alias = "f = aux\n\n\ndef main(x):\n    return f(x)\n"
    lambda_key = "def main(xs):\n    return max(xs, key=lambda v: aux(v))\n"
    assert classify_pair(DOUBLE, alias).primary == "coordinator"
    assert classify_pair(DOUBLE, partial).primary == "coordinator"
    assert classify_pair(DOUBLE, module_alias).primary == "thin_wrapper"
    assert classify_pair(DOUBLE, lambda_key).primary == "strategy_filter"


def test_dead_code_and_shadowing_do_not_count() -> None:
    after_return = "def main(x):\n    return x\n    aux(x)\n"
    if_false = "def main(x):\n    if False:\n        return aux(x)\n    return x\n"
    while_false = "def main(x):\n    while 0:\n        x = aux(x)\n    return x\n"
    else_of_true = (
        "def main(x):\n    if True:\n        return x\n    else:\n        return aux(x)\n"
    )
    parameter = "def main(x, aux):\n    return aux(x)\n"
    local_def = "def main(x):\n    def aux(v):\n        return v\n\n    return aux(x)\n"
    for main in (after_return, if_false, while_false, else_of_true, parameter, local_def):
        assert classify_pair(DOUBLE, main).primary == "no_call", main


def test_nested_calls_are_composition_not_decomposition() -> None:
    result = classify_pair(DOUBLE, "def main(x):\n    return aux(aux(x))\n")
    assert result.flags == {"decorator"}


def test_recursion_inside_aux_is_irrelevant() -> None:
    recursive = "def aux(n):\n    return 1 if n <= 1 else n * aux(n - 1)\n"
    assert classify_pair(recursive, MINIMAL["thin_wrapper"]).primary == "thin_wrapper"


def test_exclusive_branches_are_not_a_decomposition() -> None:
    branches = "def main(x):\n    if x < 0:\n        return aux(-x)\n    return aux(x)\n"
    assert "coordinator" not in classify_pair(DOUBLE, branches).flags


def test_several_schemes_are_all_flagged_and_precedence_picks_one() -> None:
    main = (
        "def main(items):\n    out = []\n    for item in items:\n        try:\n"
        "            out.append(aux(item))\n        except ValueError:\n"
        "            out.append(0)\n    return out\n"
    )
    result = classify_pair(DOUBLE, main)
    assert result.flags == {"fallback", "coordinator"}
    assert result.primary == "fallback"


def test_names_come_from_the_arguments() -> None:
    helper = "def helper_fn(x):\n    return x + 1\n\n\ndef aux(x):\n    return x\n"
    calls_aux_literally = "def main(xs):\n    return [aux(x) for x in xs]\n"
    calls_helper = "def main(xs):\n    return [helper_fn(x) for x in xs]\n"
    assert classify_pair(helper, calls_aux_literally, aux_name="helper_fn").primary == "no_call"
    assert classify_pair(helper, calls_helper, aux_name="helper_fn").primary == "coordinator"
    # With the default name the literal `aux` is the helper again.
    assert classify_pair(helper, calls_aux_literally).primary == "coordinator"


def test_main_name_selects_the_function() -> None:
    code = "def first(x):\n    return x\n\n\ndef solve(x):\n    return aux(x)\n"
    assert classify_pair(DOUBLE, code).primary == "no_call"
    assert classify_pair(DOUBLE, code, main_name="solve").primary == "thin_wrapper"
    assert classify_pair(DOUBLE, code, main_name="missing").primary == "unparsable"


def test_label_tuples_and_counts() -> None:
    assert LABELS == SCHEMES + OUTCOMES
    assert set(PRECEDENCE) == set(LABELS)
    results = [classify_pair(DOUBLE, MINIMAL[k]) for k in ("fallback", "fallback", "no_call")]
    counts = scheme_counts(results)
    assert list(counts) == list(LABELS)
    assert counts["fallback"] == 2
    assert counts["no_call"] == 1
    assert sum(counts.values()) == 3
