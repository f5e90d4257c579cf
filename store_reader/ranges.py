"""Range encoding: a sorted set of queue offsets, entry numbers or record numbers as runs of
consecutive values, the form every finding that spans many of them is reported in."""
from __future__ import annotations

import numpy as np


def consecutive_runs(values: np.ndarray) -> list[tuple[int, int]]:
    """``[lo, hi)`` index bounds of each run of consecutive integers in sorted ``values`` (a repeated
    value starts a new run)."""
    if not len(values):
        return []
    cut = np.flatnonzero(np.diff(values) != 1) + 1
    bounds = np.concatenate([[0], cut, [len(values)]]).tolist()
    return list(zip(bounds[:-1], bounds[1:]))
