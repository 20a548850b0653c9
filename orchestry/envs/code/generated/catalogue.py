"""Every primitive and family, and the fixed partition of the families into the two task sets.

`gen` holds the problems of the trained families; `gen_unseen` those of the held-out families,
which are never trained on. Each held-out family is a new composition of patterns that trained
families contain (a running fold beside `fold`, grouping-then-mapping beside `group_by`'s
cousin `group_map`, ...), so `gen_unseen` measures whether the team carries its cooperation over
to a composition it has not seen, on the primitives it has. Changing the partition changes both
sets: it is part of the data, like a file under data/.
"""

from __future__ import annotations

from orchestry.envs.code.generated.family import Family
from orchestry.envs.code.generated.list_families import LIST_FAMILIES
from orchestry.envs.code.generated.number_primitives import NUMBER_PRIMITIVES
from orchestry.envs.code.generated.pipeline_families import PIPELINE_FAMILIES
from orchestry.envs.code.generated.primitive import Primitive
from orchestry.envs.code.generated.text_families import TEXT_FAMILIES
from orchestry.envs.code.generated.text_primitives import TEXT_PRIMITIVES

PRIMITIVES: tuple[Primitive, ...] = (*NUMBER_PRIMITIVES, *TEXT_PRIMITIVES)
FAMILIES: tuple[Family, ...] = (*LIST_FAMILIES, *TEXT_FAMILIES, *PIPELINE_FAMILIES)

HELD_OUT_FAMILIES: tuple[str, ...] = (
    "running",  # trained: fold (the same combination, every prefix kept)
    "group_by",  # trained: group_map (grouping with a step), arg_max and sort_by (keys)
    "numbers_in_text",  # trained: parse_pairs (integers read from text), filter
    "first_map",  # trained: first_match, filter_map
    "pairwise_filter",  # trained: pairwise, map_filter
)
"""Families whose problems form `gen_unseen` (test only)."""
TRAINED_FAMILIES: tuple[str, ...] = tuple(
    f.name for f in FAMILIES if f.name not in HELD_OUT_FAMILIES
)
"""Families whose problems form `gen`."""

GEN_SETS: tuple[str, ...] = ("gen", "gen_unseen")


def set_of_family(family: str) -> str:
    """The task set a family's problems belong to: `gen` or `gen_unseen`."""
    if family in HELD_OUT_FAMILIES:
        return "gen_unseen"
    if family in TRAINED_FAMILIES:
        return "gen"
    raise ValueError(f"unknown family {family!r}; families are {[f.name for f in FAMILIES]}")


def _check_catalogue() -> None:
    names = [f.name for f in FAMILIES]
    if len(set(names)) != len(names):
        raise ValueError(f"duplicate family names in {names}")
    unknown = sorted(set(HELD_OUT_FAMILIES) - set(names))
    if unknown:
        raise ValueError(f"HELD_OUT_FAMILIES names unknown families {unknown}")
    primitive_names = [p.name for p in PRIMITIVES]
    if len(set(primitive_names)) != len(primitive_names):
        raise ValueError("duplicate primitive names")


_check_catalogue()
