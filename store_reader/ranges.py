"""Range encoding: a sorted set of queue offsets, entry numbers or record numbers as runs of
consecutive values, the form every finding that spans many of them is reported in; and the
stable grouping of rows by an integer key that precedes it (with whether they are in order already)."""
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


def ascending(values: np.ndarray) -> bool:
    """Whether ``values`` never decrease (sorted, repeats allowed): rows that come in commitlog
    order usually are, and then need no sort."""
    return len(values) < 2 or bool((values[1:] >= values[:-1]).all())


def stable_order(keys: np.ndarray) -> np.ndarray:
    """The permutation that sorts integer ``keys`` stably (equal keys keep their order): a plain
    sort of ``key << b | position``, distinct values that NumPy's fastest sort orders, where that
    fits in 63 bits; a stable argsort otherwise."""
    n = len(keys)
    bits = max(n - 1, 0).bit_length()
    k = np.asarray(keys).astype(np.int64, copy=False)
    if n and (int(k.min()) < 0 or int(k.max()) >= 1 << (63 - bits)):
        return np.argsort(k, kind="stable")
    return np.sort((k << bits) | np.arange(n, dtype=np.int64)) & ((1 << bits) - 1)
