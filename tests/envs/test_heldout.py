"""The compositional held-out set and the balanced new-family draw (issue #57), on the real sets."""

from collections import Counter

import pytest

from orchestry.envs.code.generated import generated_set
from orchestry.envs.code.generated.heldout import (
    COMPOSE_PROBLEMS,
    MAX_FAMILY_SHARE,
    MIN_FAMILIES,
    UNSEEN_MAX_FAMILY_SHARE,
    UNSEEN_PROBLEMS,
    balanced_draw,
    compositional_pairs,
    family_of,
    pair_of,
    primitives_of,
)


@pytest.fixture(scope="module")
def gen():
    return generated_set("gen")


def test_the_compositional_set_is_large_spread_and_made_of_trained_pieces(gen):
    held = compositional_pairs(gen)
    test = [p for p in gen if pair_of(p) in held]
    train = [p for p in gen if pair_of(p) not in held]
    assert len(test) == len(held) == COMPOSE_PROBLEMS >= 200
    families = Counter(family_of(p) for p in test)
    assert len(families) >= MIN_FAMILIES
    assert max(families.values()) <= MAX_FAMILY_SHARE * len(test)
    # new compositions of seen pieces: each family and each primitive is still trained on
    trained_families = Counter(family_of(p) for p in train)
    trained_primitives = {prim for p in train for prim in primitives_of(p)}
    assert all(trained_families[f] >= n for f, n in families.items())
    assert all(prim in trained_primitives for p in test for prim in primitives_of(p))
    assert not {pair_of(p) for p in train} & held


def test_the_compositional_set_is_data_fixed_by_the_generator_seed(gen):
    assert compositional_pairs(gen) == compositional_pairs(list(reversed(gen)))
    assert compositional_pairs(gen, seed=1) != compositional_pairs(gen)


def test_too_large_a_set_is_refused_with_the_numbers(gen):
    with pytest.raises(ValueError, match="pairs that can be held out, not 5000"):
        compositional_pairs(gen, n=5000)


def test_the_new_family_draw_keeps_every_family_under_its_share():
    unseen = generated_set("gen_unseen")
    n = UNSEEN_PROBLEMS
    drawn = balanced_draw(unseen, n, UNSEEN_MAX_FAMILY_SHARE, seed=0)
    assert len({p.id for p in drawn}) == n
    families = Counter(family_of(p) for p in drawn)
    assert len(families) == 5 and max(families.values()) <= UNSEEN_MAX_FAMILY_SHARE * n
    assert balanced_draw(unseen, n, UNSEEN_MAX_FAMILY_SHARE, seed=0) == drawn
    # one more cannot be drawn under the share: the error names the numbers
    with pytest.raises(ValueError, match=f"cannot draw {n + 1} problems with at most 40%"):
        balanced_draw(unseen, n + 1, UNSEEN_MAX_FAMILY_SHARE, seed=0)
