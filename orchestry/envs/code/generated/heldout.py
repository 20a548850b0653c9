"""The compositional held-out set and a balanced draw of the new-family set (issue #57).

A supervised warm start on the trained families' references lifts pass@1 on *new compositions* of
those families (a trained family with primitives it was never paired with in training) from 0.01 to
0.69, and not on new families (about 0.01; measured outside the pipeline). So a team-vs-single
comparison can be made on new compositions, with the new families reported beside them as a floor.

`compositional_pairs` fixes which (family, primitives) pairs of the trained families (`gen`) form the
compositional held-out set, `gen_compose`: drawn round-robin over the families in an order fixed by
a hash of `GENERATOR_SEED` and the pair, so each family gives about the same number of problems (at
least `MIN_FAMILIES` families, none over `MAX_FAMILY_SHARE`), each family keeps most of its pairs
for training, and every primitive of a held-out pair is still written in some training pair. Like
the catalogue's partition, it is part of the data: the same pairs whatever `seed` in params.yaml.

`balanced_draw` draws n problems of a set with no family over a share (the new-family set, at most
`UNSEEN_MAX_FAMILY_SHARE`), round-robin in the same hashed order.

`comparison_set` makes the three task sets the comparison reads (`COMPARISON_SETS`, selected in
`prepare.sets`): `gen_train`, the `gen` problems whose pair is not held out (ids `gen/...`);
`gen_compose`, the held-out pairs, each problem renamed `gen_compose/<family>/<primitives>` with that
source, so results group by it (`eval/paired.heldout_set` reads the id's prefix); and
`gen_unseen_balanced`, the balanced draw of `gen_unseen` (ids `gen_unseen/...`, reported as such).
`gen` and `gen_unseen` stay as they are.
"""

from __future__ import annotations

import functools
import hashlib
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace

from orchestry.envs.code.generated.generator import GENERATOR_SEED, generated_set
from orchestry.envs.code.problems import Problem

TRAIN_SET = "gen_train"
COMPOSE_SET = "gen_compose"
UNSEEN_SET = "gen_unseen_balanced"
COMPARISON_SETS = (TRAIN_SET, COMPOSE_SET, UNSEEN_SET)
COMPOSE_PROBLEMS = 240
"""Problems in the compositional held-out set (the issue asks for at least 200)."""
MIN_FAMILIES = 10
MAX_FAMILY_SHARE = 0.25
UNSEEN_MAX_FAMILY_SHARE = 0.40
UNSEEN_DRAW_SEED = 0
"""The seed of `gen_unseen_balanced`'s draw (the pre-registration's; not `seed` in params.yaml)."""
UNSEEN_PROBLEMS = 190
"""The new-family set's size: the most a draw holds with no family over 40% (first_map has 324 of
the 456 problems, pairwise_filter 94, the other three 38 together: 76 + 76 + 38)."""
KEEP_FOR_TRAINING = 0.5
"""At least this share of each family's pairs stays in the training set."""


def family_of(problem: Problem) -> str:
    """`gen/map_fold/square+add` -> `map_fold` (ids as `generator.problem_id` writes them)."""
    return problem.id.split("/")[1]


def pair_of(problem: Problem) -> str:
    """`gen/map_fold/square+add` -> `map_fold/square+add`: the pair, whatever the set's name."""
    return problem.id.split("/", 1)[1]


def primitives_of(problem: Problem) -> tuple[str, ...]:
    """`gen/map_fold/square+add` -> (`square`, `add`)."""
    return tuple(problem.id.split("/")[2].split("+"))


def _rank(key: str, seed: int) -> str:
    return hashlib.sha256(f"{seed}:{key}".encode()).hexdigest()


def _by_family(problems: Sequence[Problem], seed: int) -> dict[str, list[Problem]]:
    """Each family's problems in hashed order, the families in hashed order too."""
    families: dict[str, list[Problem]] = {}
    for p in sorted(problems, key=lambda p: _rank(pair_of(p), seed)):
        families.setdefault(family_of(p), []).append(p)
    return {f: families[f] for f in sorted(families, key=lambda f: _rank(f, seed))}


def compositional_pairs(
    trained: Sequence[Problem], n: int = COMPOSE_PROBLEMS, seed: int = GENERATOR_SEED
) -> frozenset[str]:
    """The pairs (`pair_of`) of `trained` (the `gen` set's problems) held out as `gen_compose`."""
    families = _by_family(trained, seed)
    cap = int(MAX_FAMILY_SHARE * n)
    room = {f: min(cap, int(len(ps) * (1 - KEEP_FOR_TRAINING))) for f, ps in families.items()}
    written = Counter(prim for p in trained for prim in set(primitives_of(p)))
    chosen: list[Problem] = []
    taken: Counter[str] = Counter()
    while len(chosen) < n:
        before = len(chosen)
        for family, candidates in families.items():
            if len(chosen) == n:
                break
            while candidates and taken[family] < room[family]:
                p = candidates.pop(0)
                prims = set(primitives_of(p))
                if all(written[prim] > 1 for prim in prims):  # still written in training
                    written.subtract(prims)
                    chosen.append(p)
                    taken[family] += 1
                    break
        if len(chosen) == before:
            raise ValueError(
                f"the trained families hold {len(chosen)} pairs that can be held out, not {n} "
                f"(at most {MAX_FAMILY_SHARE:.0%} a family, {KEEP_FOR_TRAINING:.0%} kept to train)"
            )
    if len(taken) < MIN_FAMILIES:
        raise ValueError(f"{COMPOSE_SET} spans {len(taken)} families, fewer than {MIN_FAMILIES}")
    return frozenset(pair_of(p) for p in chosen)


def balanced_draw(
    problems: Sequence[Problem], n: int, max_share: float, seed: int
) -> list[Problem]:
    """n of `problems`, round-robin over their families in `seed`'s hashed order, so that no
    family is over `max_share` of the n (an error naming the numbers when that cannot be)."""
    families = _by_family(problems, seed)
    cap = int(max_share * n)
    if sum(min(cap, len(ps)) for ps in families.values()) < n:
        raise ValueError(
            f"cannot draw {n} problems with at most {max_share:.0%} ({cap}) of each family from "
            f"{len(problems)} problems of {len(families)} families"
        )
    drawn: list[Problem] = []
    depth = 0
    while len(drawn) < n:
        for candidates in families.values():
            if depth < min(cap, len(candidates)) and len(drawn) < n:
                drawn.append(candidates[depth])
        depth += 1
    return drawn


def comparison_set(name: str) -> list[Problem]:
    """The problems of one of `COMPARISON_SETS`, made from the generated sets at `GENERATOR_SEED`
    (once per process)."""
    if name not in COMPARISON_SETS:
        raise ValueError(f"unknown comparison set {name!r}; sets are {', '.join(COMPARISON_SETS)}")
    return list(_comparison_sets()[name])


@functools.cache
def _comparison_sets() -> dict[str, tuple[Problem, ...]]:
    trained = generated_set("gen")
    held = compositional_pairs(trained)
    unseen = generated_set("gen_unseen")
    drawn = balanced_draw(unseen, UNSEEN_PROBLEMS, UNSEEN_MAX_FAMILY_SHARE, UNSEEN_DRAW_SEED)
    return {
        TRAIN_SET: tuple(p for p in trained if pair_of(p) not in held),
        COMPOSE_SET: tuple(
            replace(p, id=f"{COMPOSE_SET}/{pair_of(p)}", source=COMPOSE_SET)
            for p in trained
            if pair_of(p) in held
        ),
        UNSEEN_SET: tuple(drawn),
    }
