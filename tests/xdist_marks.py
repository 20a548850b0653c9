"""Marks that keep tests on one `make test` process (pytest-xdist `--dist loadgroup`); no heavy
imports, so a throwaway suite can use them (tests/test_xdist_groups.py)."""

import pytest


def one_process(module: str) -> pytest.MarkDecorator:
    """The mark of a module whose module-scoped fixtures take seconds to build (a server, a prepared
    set, sandboxed runs): an `xdist_group` named after it, so `make test` runs its tests on one process
    and builds each fixture once. Without it `--dist loadgroup` shares the module's tests out one by
    one, and both processes build the fixtures (twice 15 s for tests/stages/test_prepare_budget.py)."""
    return pytest.mark.xdist_group(module)
