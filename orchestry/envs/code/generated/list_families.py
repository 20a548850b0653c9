"""The one-primitive families over a list: main walks the list and calls aux on its elements.

map, filter, count, all, first match, index of the first match, fold, running fold, neighbouring
pairs, sliding windows, arg-max, arg-min, sort by key, group by key, count over a threshold.
"""

from __future__ import annotations

from dataclasses import dataclass

from orchestry.envs.code.generated.family import Composition, Family, Param
from orchestry.envs.code.generated.inputs import LIMIT, LISTS, WINDOW
from orchestry.envs.code.generated.primitive import Primitive

PREDICATE, TRANSFORM, KEY, COMBINER = ("predicate",), ("transform",), ("key",), ("combiner",)
VALUE = ("transform", "key")  # a function of one element whose result main keeps


@dataclass(frozen=True)
class Items:
    """How a composition names a list of one element type."""

    param: str
    """The list parameter: nums / words."""
    var: str
    """One element: n / w."""
    noun: str
    """number / word."""
    annotation: str
    """int / str."""


def items_of(p: Primitive) -> Items:
    """The naming of the list whose elements `p` takes."""
    if p.in_type == "int":
        return Items("nums", "n", "number", "int")
    return Items("words", "w", "word", "str")


def list_param(p: Primitive) -> Param:
    return Param(items_of(p).param, LISTS[p.in_type])


def _map(p: Primitive) -> Composition:
    it = items_of(p)
    return Composition(
        name=f"map_{p.word}",
        params=(list_param(p),),
        returns=f"list[{p.out_type}]",
        does=f"Return the list of aux({it.var}) for every {it.noun} {it.var} of {it.param}, in order.",
        task=f"For every {it.noun} {it.var} of a list, compute {p.says(it.var)}.",
        body=f"return [aux({it.var}) for {it.var} in {it.param}]",
    )


def _filter(p: Primitive) -> Composition:
    it = items_of(p)
    return Composition(
        name=f"keep_{p.word}",
        params=(list_param(p),),
        returns=f"list[{it.annotation}]",
        does=f"Return the {it.noun}s {it.var} of {it.param} for which aux({it.var}) is True, "
        "in their original order.",
        task=f"Keep the {it.noun}s {it.var} of a list for which {p.says(it.var)}.",
        body=f"return [{it.var} for {it.var} in {it.param} if aux({it.var})]",
    )


def _count(p: Primitive) -> Composition:
    it = items_of(p)
    return Composition(
        name=f"count_{p.word}",
        params=(list_param(p),),
        returns="int",
        does=f"Return how many {it.noun}s {it.var} of {it.param} have aux({it.var}) True.",
        task=f"Count the {it.noun}s {it.var} of a list for which {p.says(it.var)}.",
        body=f"return sum(1 for {it.var} in {it.param} if aux({it.var}))",
    )


def _every(p: Primitive) -> Composition:
    it = items_of(p)
    return Composition(
        name=f"all_{p.word}",
        params=(list_param(p),),
        returns="bool",
        does=f"Return True when aux({it.var}) is True for every {it.noun} {it.var} of "
        f"{it.param}, else False (True for an empty list).",
        task=f"Tell whether {p.says(it.var)} for every {it.noun} {it.var} of a list.",
        body=f"""
        for {it.var} in {it.param}:
            if not aux({it.var}):
                return False
        return True
        """,
    )


def _first(p: Primitive) -> Composition:
    it = items_of(p)
    return Composition(
        name=f"first_{p.word}",
        params=(list_param(p),),
        returns=f"{it.annotation} | None",
        does=f"Return the first {it.noun} {it.var} of {it.param} for which aux({it.var}) is "
        "True, or None when there is none.",
        task=f"Find the first {it.noun} {it.var} of a list for which {p.says(it.var)}.",
        body=f"""
        for {it.var} in {it.param}:
            if aux({it.var}):
                return {it.var}
        return None
        """,
    )


def _index(p: Primitive) -> Composition:
    it = items_of(p)
    return Composition(
        name=f"index_of_{p.word}",
        params=(list_param(p),),
        returns="int",
        does=f"Return the index of the first {it.noun} {it.var} of {it.param} for which "
        f"aux({it.var}) is True, or -1 when there is none.",
        task=f"Find the position of the first {it.noun} {it.var} of a list for which "
        f"{p.says(it.var)}.",
        body=f"""
        for i, {it.var} in enumerate({it.param}):
            if aux({it.var}):
                return i
        return -1
        """,
    )


def _fold(p: Primitive) -> Composition:
    it = items_of(p)
    xs = it.param
    return Composition(
        name=f"fold_{p.word}",
        params=(list_param(p),),
        returns=f"{it.annotation} | None",
        does=f"Return the {it.noun}s of {xs} combined from left to right with aux: "
        f"aux(aux({xs}[0], {xs}[1]), {xs}[2]) and so on; a single {it.noun} is returned as it "
        "is, and an empty list gives None.",
        task=f"Combine the {it.noun}s of a list from left to right, each step turning a (the "
        f"result so far) and b (the next {it.noun}) into {p.says('a', 'b')}.",
        body=f"""
        if not {xs}:
            return None
        result = {xs}[0]
        for {it.var} in {xs}[1:]:
            result = aux(result, {it.var})
        return result
        """,
    )


def _running(p: Primitive) -> Composition:
    it = items_of(p)
    xs = it.param
    return Composition(
        name=f"running_{p.word}",
        params=(list_param(p),),
        returns=f"list[{it.annotation}]",
        does=f"Return the running combination of {xs} with aux: {xs}[0], then "
        f"aux({xs}[0], {xs}[1]), then aux(that result, {xs}[2]), and so on, one value per "
        f"{it.noun} ([] for an empty list).",
        task=f"Combine the {it.noun}s of a list from left to right, each step turning a (the "
        f"result so far) and b (the next {it.noun}) into {p.says('a', 'b')}; keep every "
        "intermediate result.",
        body=f"""
        out = []
        for {it.var} in {xs}:
            out.append({it.var} if not out else aux(out[-1], {it.var}))
        return out
        """,
    )


def _pairwise(p: Primitive) -> Composition:
    it = items_of(p)
    return Composition(
        name=f"pairwise_{p.word}",
        params=(list_param(p),),
        returns=f"list[{it.annotation}]",
        does=f"Return aux(a, b) for every two neighbouring {it.noun}s a, b of {it.param} (a just "
        f"before b), in order; fewer than two {it.noun}s give [].",
        task=f"For every two neighbouring {it.noun}s a, b of a list, compute {p.says('a', 'b')}.",
        body=f"return [aux(a, b) for a, b in zip({it.param}, {it.param}[1:])]",
    )


def _window(p: Primitive) -> Composition:
    it = items_of(p)
    xs = it.param
    return Composition(
        name=f"window_{p.word}",
        params=(list_param(p), Param("k", WINDOW)),
        returns=f"list[{it.annotation}]",
        does=f"Return one value per run of k neighbouring {it.noun}s of {xs} (left to right): the "
        "run combined from left to right with aux (aux(aux(first, second), third) and so on); "
        f"[] when k < 1 or k > len({xs}).",
        task=f"For every window of k neighbouring {it.noun}s of a list, combine its {it.noun}s "
        f"from left to right, each step turning a (the result so far) and b (the next "
        f"{it.noun}) into {p.says('a', 'b')}.",
        body=f"""
        if k < 1:
            return []
        out = []
        for start in range(len({xs}) - k + 1):
            value = {xs}[start]
            for {it.var} in {xs}[start + 1 : start + k]:
                value = aux(value, {it.var})
            out.append(value)
        return out
        """,
    )


def _best(p: Primitive, largest: bool) -> Composition:
    it = items_of(p)
    most, better = ("largest", ">") if largest else ("smallest", "<")
    return Composition(
        name=f"{'max' if largest else 'min'}_by_{p.word}",
        params=(list_param(p),),
        returns=f"{it.annotation} | None",
        does=f"Return the {it.noun} {it.var} of {it.param} with the {most} aux({it.var}); on a "
        f"tie the first such {it.noun}; None for an empty list.",
        task=f"Find the {it.noun} {it.var} of a list with the {most} value of {p.says(it.var)}.",
        body=f"""
        best = None
        for {it.var} in {it.param}:
            if best is None or aux({it.var}) {better} aux(best):
                best = {it.var}
        return best
        """,
    )


def _sort(p: Primitive) -> Composition:
    it = items_of(p)
    return Composition(
        name=f"sort_by_{p.word}",
        params=(list_param(p),),
        returns=f"list[{it.annotation}]",
        does=f"Return the {it.noun}s of {it.param} sorted by aux({it.var}), smallest first; "
        f"{it.noun}s with equal aux({it.var}) keep their original order.",
        task=f"Sort the {it.noun}s {it.var} of a list by {p.says(it.var)}.",
        body=f"return sorted({it.param}, key=aux)",
    )


def _group(p: Primitive) -> Composition:
    it = items_of(p)
    return Composition(
        name=f"group_by_{p.word}",
        params=(list_param(p),),
        returns=f"dict[{p.out_type}, list[{it.annotation}]]",
        does=f"Return a dict mapping each value aux({it.var}) to the list of the {it.noun}s "
        f"{it.var} of {it.param} that give it, in their original order ({{}} for an empty list).",
        task=f"Group the {it.noun}s {it.var} of a list by {p.says(it.var)}.",
        body=f"""
        groups = {{}}
        for {it.var} in {it.param}:
            groups.setdefault(aux({it.var}), []).append({it.var})
        return groups
        """,
    )


def _count_over(p: Primitive) -> Composition:
    it = items_of(p)
    return Composition(
        name=f"count_{p.word}_over",
        params=(list_param(p), Param("limit", LIMIT)),
        returns="int",
        does=f"Return how many {it.noun}s {it.var} of {it.param} have aux({it.var}) greater "
        "than limit.",
        task=f"Count the {it.noun}s {it.var} of a list for which {p.says(it.var)} is more than "
        "a limit.",
        body=f"return sum(1 for {it.var} in {it.param} if aux({it.var}) > limit)",
    )


LIST_FAMILIES: tuple[Family, ...] = (
    Family("map", 0, (VALUE,), _map),
    Family("filter", 0, (PREDICATE,), _filter),
    Family("count", 0, (PREDICATE,), _count),
    Family("all", 1, (PREDICATE,), _every),
    Family("first_match", 1, (PREDICATE,), _first),
    Family("index_of", 1, (PREDICATE,), _index),
    Family("fold", 1, (COMBINER,), _fold),
    Family("running", 1, (COMBINER,), _running),
    Family("pairwise", 1, (COMBINER,), _pairwise),
    Family("window", 2, (COMBINER,), _window),
    Family("arg_max", 1, (KEY,), lambda p: _best(p, largest=True)),
    Family("arg_min", 1, (KEY,), lambda p: _best(p, largest=False)),
    Family("sort_by", 1, (KEY,), _sort),
    Family("group_by", 2, (KEY,), _group),
    Family("count_over", 0, (KEY,), _count_over, lambda p: p.out_type == "int"),
)
