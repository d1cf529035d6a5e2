"""Reading token traces in tests (importable from every test folder: ``tests`` is on the pytest path)."""

from __future__ import annotations


def mask_runs(mask: list[int]) -> list[tuple[int, int]]:
    """(start, end) of each run of 1s in a loss mask: the turns the policy sampled."""
    runs, start = [], None
    for i, m in enumerate([*mask, 0]):
        if m and start is None:
            start = i
        elif not m and start is not None:
            runs.append((start, i))
            start = None
    return runs
