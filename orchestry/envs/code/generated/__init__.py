"""Procedurally generated cooperative problems: training data at scale, and held-out compositions.

A *primitive* is what the helper writes as `aux` (a predicate, transform, key or combiner over
integers or strings: number_primitives.py, text_primitives.py); a *family* is what main does around
it (map, filter, count, fold, arg-max, group-by, windows, per word, parsing, ...: list_families.py,
text_families.py; pipeline_families.py takes a second primitive that main carries out itself).
generator.py composes every (family, primitives) pair once, makes its tests by running the
reference, and keeps only problems whose tests pass the reference and catch aux's wrong variant.
catalogue.py fixes which families are trained on (`gen`) and which are held out (`gen_unseen`);
heldout.py the sets of the team-vs-single comparison (`gen_train`, `gen_compose`,
`gen_unseen_balanced`: issue 57).
docs/generated_problems.md describes the sets and how to select them in params.yaml.
"""

from orchestry.envs.code.generated.catalogue import (
    GEN_SETS,
    HELD_OUT_FAMILIES,
    TRAINED_FAMILIES,
)
from orchestry.envs.code.generated.generator import (
    GENERATOR_SEED,
    Generated,
    generate_problems,
    generated_set,
)
from orchestry.envs.code.generated.heldout import COMPARISON_SETS, comparison_set

__all__ = [
    "COMPARISON_SETS",
    "GENERATOR_SEED",
    "GEN_SETS",
    "HELD_OUT_FAMILIES",
    "TRAINED_FAMILIES",
    "Generated",
    "comparison_set",
    "generate_problems",
    "generated_set",
]
