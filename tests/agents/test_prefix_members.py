"""The rows each shared-prompt attention program takes (triton_decode.prefix_members)."""

from __future__ import annotations

import torch

from orchestry.agents.lora.triton_decode import PREFIX_ROWS, prefix_members


def test_each_row_is_in_one_entry_of_its_own_pair() -> None:
    """Pairs in order of first appearance, interleaved rows, a pair of more rows than an entry
    holds (split), a pair of one row; -1 elsewhere, and the shape of the row count alone."""
    big = 2 * PREFIX_ROWS + 3
    of_row = [0, 1] * 2 + [2] * big + [3] + [1] * 2
    members = prefix_members(of_row)
    assert members.shape == (len(of_row), PREFIX_ROWS) and members.dtype == torch.int32
    entries = [[r for r in entry if r >= 0] for entry in members.tolist()]
    used = [entry for entry in entries if entry]
    assert all(entries[: len(used)]) and not any(entries[len(used) :])  # entries packed first
    assert all(-1 not in row[: len(e)] for row, e in zip(members.tolist(), entries, strict=True))
    assert sorted(r for entry in used for r in entry) == list(range(len(of_row)))
    assert all(len({of_row[r] for r in entry}) == 1 for entry in used)
    assert [of_row[entry[0]] for entry in used] == [0, 1, 2, 2, 2, 3]
    assert [len(entry) for entry in used] == [2, 4, PREFIX_ROWS, PREFIX_ROWS, 3, 1]
    assert used[0] == [0, 2] and used[1] == [1, 3, len(of_row) - 2, len(of_row) - 1]


def test_every_row_its_own_pair_fills_every_entry() -> None:
    members = prefix_members(list(range(16)))
    assert members[:, 0].tolist() == list(range(16)) and (members[:, 1:] == -1).all()
