"""Grouping and range encoding of integer keys (``store_reader.ranges``)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from store_reader.ranges import ascending, consecutive_runs, stable_order

pytestmark = pytest.mark.reader


@given(st.lists(st.integers(-3, 3), max_size=8))
def test_ascending_allows_repeats_but_not_a_step_down(values):
    assert ascending(np.array(values, np.int64)) == (values == sorted(values))


@given(st.lists(st.integers(-(1 << 62), (1 << 62) - 1), max_size=200), st.integers(1, 64))
def test_stable_order_is_a_stable_argsort(values, spread):
    """Equal keys keep their order, whatever the keys: few distinct ones, negative ones, and keys too
    wide to pack with their position (the stable argsort then)."""
    for keys in (np.array(values, np.int64), np.array(values, np.int64) % spread,
                 np.abs(np.array(values, np.int64)) >> 40):
        assert np.array_equal(stable_order(keys), np.argsort(keys, kind="stable"))


def test_stable_order_of_nothing_and_of_one():
    assert stable_order(np.zeros(0, np.int64)).tolist() == []
    assert stable_order(np.array([7])).tolist() == [0]


def test_consecutive_runs():
    assert consecutive_runs(np.array([1, 2, 3, 5, 6, 6, 9])) == [(0, 3), (3, 5), (5, 6), (6, 7)]
    assert consecutive_runs(np.zeros(0, np.int64)) == []
