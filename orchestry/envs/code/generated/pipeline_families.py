"""The two-primitive families: aux is the first primitive, and main carries out the second (its
*step*) itself, as described in its docstring, around its calls to aux.

filter then map, map then filter, map then map, first match then map, filtered arg-max, filtered
sort, filtered fold, neighbouring pairs then filter, group by key then map, count with two
predicates, count over mapped values, fold of mapped values. The step is written as a
function nested in main's reference under the step's own name (family.render_main).
"""

from __future__ import annotations

from orchestry.envs.code.generated.family import Composition, Family
from orchestry.envs.code.generated.list_families import (
    COMBINER,
    KEY,
    PREDICATE,
    VALUE,
    items_of,
    list_param,
)
from orchestry.envs.code.generated.primitive import Primitive


def _filter_map(aux: Primitive, step: Primitive) -> Composition:
    it = items_of(aux)
    v = it.var
    return Composition(
        name=f"{step.word}_when_{aux.word}",
        params=(list_param(aux),),
        returns=f"list[{step.out_type}]",
        does=f"Return {step.says(v)}, for each {it.noun} {v} of {it.param} with aux({v}) True, in "
        "order.",
        task=f"For the {it.noun}s {v} of a list for which {aux.says(v)}, compute {step.says(v)}.",
        body=f"return [{step.name}({v}) for {v} in {it.param} if aux({v})]",
    )


def _map_filter(aux: Primitive, step: Primitive) -> Composition:
    it = items_of(aux)
    return Composition(
        name=f"{aux.word}_values_{step.word}",
        params=(list_param(aux),),
        returns=f"list[{aux.out_type}]",
        does=f"Return the values v = aux({it.var}) of the {it.noun}s {it.var} of {it.param}, in "
        f"order, keeping only those for which {step.says('v')}.",
        task=f"Compute {aux.says(it.var)} for every {it.noun} {it.var} of a list and keep the "
        f"results v for which {step.says('v')}.",
        body=f"return [v for v in map(aux, {it.param}) if {step.name}(v)]",
    )


def _map_map(aux: Primitive, step: Primitive) -> Composition:
    it = items_of(aux)
    return Composition(
        name=f"{aux.word}_then_{step.word}",
        params=(list_param(aux),),
        returns=f"list[{step.out_type}]",
        does=f"Return {step.says('v')}, where v = aux({it.var}), for each {it.noun} {it.var} of "
        f"{it.param}, in order.",
        task=f"For every {it.noun} {it.var} of a list, take v = {aux.says(it.var)} and compute "
        f"{step.says('v')}.",
        body=f"return [{step.name}(aux({it.var})) for {it.var} in {it.param}]",
    )


def _first_map(aux: Primitive, step: Primitive) -> Composition:
    it = items_of(aux)
    v = it.var
    return Composition(
        name=f"{step.word}_of_first_{aux.word}",
        params=(list_param(aux),),
        returns=f"{step.out_type} | None",
        does=f"Return {step.says(v)} for the first {it.noun} {v} of {it.param} with aux({v}) True, "
        "or None when there is none.",
        task=f"Find the first {it.noun} {v} of a list for which {aux.says(v)} and compute "
        f"{step.says(v)}.",
        body=f"""
        for {v} in {it.param}:
            if aux({v}):
                return {step.name}({v})
        return None
        """,
    )


def _filter_max(aux: Primitive, step: Primitive) -> Composition:
    it = items_of(aux)
    v = it.var
    return Composition(
        name=f"max_{aux.word}_by_{step.word}",
        params=(list_param(aux),),
        returns=f"{it.annotation} | None",
        does=f"Return, among the {it.noun}s {v} of {it.param} with aux({v}) True, the one with the "
        f"largest value of {step.says(v)} (the first such on a tie), or None when there is none.",
        task=f"Among the {it.noun}s {v} of a list for which {aux.says(v)}, find the one with the "
        f"largest value of {step.says(v)}.",
        body=f"""
        best = None
        for {v} in {it.param}:
            if aux({v}) and (best is None or {step.name}({v}) > {step.name}(best)):
                best = {v}
        return best
        """,
    )


def _filter_sort(aux: Primitive, step: Primitive) -> Composition:
    it = items_of(aux)
    v = it.var
    return Composition(
        name=f"sort_{step.word}_by_{aux.word}",
        params=(list_param(aux),),
        returns=f"list[{it.annotation}]",
        does=f"Return the {it.noun}s {v} of {it.param} for which {step.says(v)}, sorted by "
        f"aux({v}), smallest first ({it.noun}s with equal aux({v}) keep their original order).",
        task=f"Keep the {it.noun}s {v} of a list for which {step.says(v)} and sort them by "
        f"{aux.says(v)}.",
        body=f"return sorted(({v} for {v} in {it.param} if {step.name}({v})), key=aux)",
    )


def _filter_fold(aux: Primitive, step: Primitive) -> Composition:
    it = items_of(aux)
    v = it.var
    return Composition(
        name=f"fold_{aux.word}_{step.word}",
        params=(list_param(aux),),
        returns=f"{it.annotation} | None",
        does=f"Return the {it.noun}s {v} of {it.param} for which {step.says(v)}, combined from "
        "left to right with aux (aux(aux(first, second), third) and so on); a single one is "
        "returned as it is, and None when there is none.",
        task=f"Combine the {it.noun}s {v} of a list for which {step.says(v)} from left to "
        f"right, each step turning a (the result so far) and b (the next one) into "
        f"{aux.says('a', 'b')}.",
        body=f"""
        result = None
        for {v} in {it.param}:
            if {step.name}({v}):
                result = {v} if result is None else aux(result, {v})
        return result
        """,
    )


def _pairwise_filter(aux: Primitive, step: Primitive) -> Composition:
    it = items_of(aux)
    return Composition(
        name=f"pairwise_{aux.word}_{step.word}",
        params=(list_param(aux),),
        returns=f"list[{it.annotation}]",
        does=f"Return the values r = aux(a, b) for every two neighbouring {it.noun}s a, b of "
        f"{it.param} (a just before b), in order, keeping only those for which {step.says('r')}.",
        task=f"For every two neighbouring {it.noun}s a, b of a list compute r = "
        f"{aux.says('a', 'b')}, and keep the results for which {step.says('r')}.",
        body=f"""
        results = [aux(a, b) for a, b in zip({it.param}, {it.param}[1:])]
        return [r for r in results if {step.name}(r)]
        """,
    )


def _group_map(aux: Primitive, step: Primitive) -> Composition:
    it = items_of(aux)
    v = it.var
    return Composition(
        name=f"group_{step.word}_by_{aux.word}",
        params=(list_param(aux),),
        returns=f"dict[{aux.out_type}, list[{step.out_type}]]",
        does=f"Return a dict mapping each value aux({v}) to the list of {step.says(v)} for the "
        f"{it.noun}s {v} of {it.param} that give that value, in their original order ({{}} for "
        "an empty list).",
        task=f"Group the {it.noun}s {v} of a list by {aux.says(v)}, keeping {step.says(v)} for "
        "each.",
        body=f"""
        groups = {{}}
        for {v} in {it.param}:
            groups.setdefault(aux({v}), []).append({step.name}({v}))
        return groups
        """,
    )


def _filter_count(aux: Primitive, step: Primitive) -> Composition:
    it = items_of(aux)
    v = it.var
    return Composition(
        name=f"count_{aux.word}_and_{step.word}",
        params=(list_param(aux),),
        returns="int",
        does=f"Return how many {it.noun}s {v} of {it.param} have aux({v}) True and {step.says(v)}.",
        task=f"Count the {it.noun}s {v} of a list for which both {aux.says(v)} and {step.says(v)}.",
        body=f"return sum(1 for {v} in {it.param} if aux({v}) and {step.name}({v}))",
    )


def _map_count(aux: Primitive, step: Primitive) -> Composition:
    it = items_of(aux)
    return Composition(
        name=f"count_{aux.word}_{step.word}",
        params=(list_param(aux),),
        returns="int",
        does=f"Return how many {it.noun}s {it.var} of {it.param} give a value v = aux({it.var}) "
        f"for which {step.says('v')}.",
        task=f"Count the {it.noun}s {it.var} of a list whose v = {aux.says(it.var)} is such "
        f"that {step.says('v')}.",
        body=f"return sum(1 for {it.var} in {it.param} if {step.name}(aux({it.var})))",
    )


def _map_fold(aux: Primitive, step: Primitive) -> Composition:
    it = items_of(aux)
    return Composition(
        name=f"{step.word}_of_{aux.word}",
        params=(list_param(aux),),
        returns=f"{aux.out_type} | None",
        does=f"Return the values aux({it.var}) of the {it.noun}s {it.var} of {it.param} "
        f"combined from left to right, each step turning a (the result so far) and b (the next "
        f"value) into {step.says('a', 'b')}; a single value is returned as it is, and an empty "
        "list gives None.",
        task=f"Compute v = {aux.says(it.var)} for every {it.noun} {it.var} of a list and combine "
        "these values from left to right, each step turning a (the result so far) and b (the "
        f"next value) into {step.says('a', 'b')}.",
        body=f"""
        result = None
        for value in map(aux, {it.param}):
            result = value if result is None else {step.name}(result, value)
        return result
        """,
    )


def _same_element(aux: Primitive, step: Primitive) -> bool:
    """The step takes the same elements as aux."""
    return step.in_type == aux.in_type


def _chained(aux: Primitive, step: Primitive) -> bool:
    """The step takes aux's results."""
    return step.in_type == aux.out_type


PIPELINE_FAMILIES: tuple[Family, ...] = (
    Family("filter_map", 0, (PREDICATE, VALUE), _filter_map, _same_element),
    Family("map_filter", 0, (VALUE, PREDICATE), _map_filter, _chained),
    Family("map_map", 0, (VALUE, VALUE), _map_map, _chained),
    Family("first_map", 1, (PREDICATE, VALUE), _first_map, _same_element),
    Family("filter_max", 1, (PREDICATE, KEY), _filter_max, _same_element),
    Family("filter_sort", 1, (KEY, PREDICATE), _filter_sort, _same_element),
    Family("filter_fold", 1, (COMBINER, PREDICATE), _filter_fold, _same_element),
    Family("pairwise_filter", 1, (COMBINER, PREDICATE), _pairwise_filter, _chained),
    Family("group_map", 2, (KEY, VALUE), _group_map, _same_element),
    Family("filter_count", 0, (PREDICATE, PREDICATE), _filter_count, _same_element),
    Family("map_count", 0, (VALUE, PREDICATE), _map_count, _chained),
    Family("map_fold", 1, (VALUE, COMBINER), _map_fold, _chained),
)
