"""The audit's one Spark job (``jobs/findings.py``): its findings do not depend on how the store is
cut into tasks (queue buckets, phy ranges), and its per-task pieces join up exactly.

The fixture checks against the broker's answers live in ``test_audit.py``; here the same stores
are audited again with every queue in a bucket of its own and compared table by table, the
per-range index findings are checked against one range holding everything, and a synthetic
multi-segment store without index files checks that unfindable keys form one run per topic across
commitlog files.
"""
from __future__ import annotations

import shutil

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from jobs import findings as fnd
from store_reader import _native, open_store
from store_reader.broker import prediction, versions
from store_reader.audit import compare, index, plan, queues, records
from store_reader.audit.records import INDEX_PUTS
from store_reader.formats.commitlog import SegmentScan
from store_reader.testing.synthetic import CrashSpec, SyntheticStoreSpec, write_store
from support import broker_conf, case_id, expected, input_store, scenarios

CASES = [c for c in scenarios() if expected(*c)["afterLoad"]["loadResult"]
         and c[1] in ("torn-middle-crc", "cq-dirty", "index-lost", "crash-ckpt-mid", "oldest-deleted")]


def _rows(t: pa.Table) -> list:
    return sorted(map(repr, t.to_pylist()))


def _audit(spark, case):
    version = versions.V49 if "4.9" in case[0] else versions.V53
    store = open_store(input_store(*case), broker_conf(*case))
    summaries = store.summaries(store.scan_options(broker_5x=version == versions.V53))
    pred = prediction.predict(store, version, summaries)
    return fnd.audit(spark, store, pred, summaries)


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=[case_id(c) for c in CASES])
def test_findings_do_not_depend_on_how_they_are_cut(spark, case, monkeypatch):
    """Many small buckets (a queue or two each) and index files read a few entries at a time give
    the same tables as the default packing."""
    default = _audit(spark, case)
    monkeypatch.setattr(plan, "ENTRIES_PER_AUDIT_TASK", 40)
    monkeypatch.setattr(plan, "INDEX_ENTRIES_PER_PART", 7)
    split = _audit(spark, case)
    assert default.tables.keys() == split.tables.keys()
    assert default.tables["queue_findings"].num_rows or default.tables["index_findings"].num_rows
    for name, t in default.tables.items():
        assert _rows(t) == _rows(split.tables[name]), name


def test_queues_are_packed_by_weight():
    """Largest queue first into the lightest bucket: no bucket gets two big queues while one is empty."""
    weights = {("T", 0): 900, ("T", 1): 800, ("T", 2): 100, ("T", 3): 100, ("T", 4): 100}
    buckets = plan.pack_queues(weights, 2)
    load = [sum(w for k, w in weights.items() if buckets[k] == b) for b in range(2)]
    assert buckets[("T", 0)] != buckets[("T", 1)]
    assert sorted(load) == [1000, 1000]


@given(st.lists(st.integers(0, 60), min_size=0, max_size=40), st.lists(st.integers(0, 60), max_size=40),
       st.lists(st.integers(-5, 10**12), max_size=5))
def test_aligner_dense_and_sparse_agree(a, b, far):
    """Position lookup (dense offsets) and binary search (sparse ones) align views identically."""
    views = [np.unique(np.array(x, np.int64)) for x in (a, b, a + far)]
    keys, align = queues._aligner(*views)
    assert keys.tolist() == sorted(set().union(*map(set, (v.tolist() for v in views))))
    for v in views:
        cols = (v, v * 7, v * 3, v + 1)
        has, (p, s, t) = align(cols)
        assert has.tolist() == [k in set(v.tolist()) for k in keys.tolist()]
        assert (p[has] == keys[has] * 7).all() and (t[has] == keys[has] + 1).all()


@given(st.lists(st.sampled_from(["A", "B", "C", "%RETRY%G", "D"]), max_size=40),
       st.lists(st.integers(0, 39), max_size=60), st.lists(st.sampled_from(["B", "Z", "A"]), max_size=3, unique=True))
def test_topic_codes_number_topics_in_the_order_rows_first_name_them(topics, rows, known):
    """A put's topic code: the number the task gave its topic, topics new to the task numbered in
    the order the rows first name them (rows may repeat and go backwards)."""
    rows = np.array([r for r in rows if r < len(topics)], np.int64)
    topic_no = {name: i for i, name in enumerate(known)}
    want = dict(topic_no)
    for r in rows.tolist():
        want.setdefault(topics[r], len(want))
    codes = records._topic_codes(pa.array(topics, pa.string()), rows, topic_no)
    assert topic_no == want
    assert codes.tolist() == [want[topics[r]] for r in rows.tolist()]
    assert codes.dtype == np.int32


_KH = st.integers(-3, 3) | st.integers(-(1 << 31), (1 << 31) - 1)
_PAIRS = st.lists(st.tuples(_KH, st.integers(0, 6)), max_size=100)


@given(have=_PAIRS, want=_PAIRS, crowd=st.just([]) | st.lists(st.integers(-4, 40), min_size=33, max_size=90),
       in_phy_order=st.booleans())
def test_native_index_pair_checks_and_their_numpy_twins_agree_with_the_rule(have, want, crowd, in_phy_order):
    """``index.held`` and ``index.repeated_pairs``, native kernels and NumPy twins, against the rule
    itself: a pair is held when an entry is equal (a negative key hash never is), repeated when an
    earlier pair is. Pairs in phy order or not; ``crowd``: one phy offset with more pairs than
    the kernels search linearly."""
    have = have + [(k, 3) for k in crowd]
    want = want + [(k, 3) for k in reversed(crowd)]
    if in_phy_order:
        have, want = sorted(have, key=lambda p: p[1]), sorted(want, key=lambda p: p[1])

    def arrays(pairs):
        return (np.array([k for k, _ in pairs], np.int32), np.array([p for _, p in pairs], np.int64))

    (hk, hp), (wk, wp) = arrays(have), arrays(want)
    entries = set(have)
    held = [k >= 0 and (k, p) in entries for k, p in want]
    repeated = [(k, p) in set(have[:i]) for i, (k, p) in enumerate(have)]
    for pure in (False, True):
        with pytest.MonkeyPatch.context() as m:
            if pure:
                m.setenv("STORE_READER_PURE", "1")
            else:
                m.delenv("STORE_READER_PURE", raising=False)
            assert index.held(hk, hp, wk.astype(np.int64), wp).tolist() == held
            assert index.repeated_pairs(hk, hp).tolist() == repeated


def test_native_index_pair_kernels_refuse_pairs_out_of_phy_order():
    one, two = np.ones(1, np.int64), np.array([5, 4], np.int64)
    with pytest.raises(ValueError, match="ascending"):
        _native.index_pairs_repeated(two, two)
    with pytest.raises(ValueError, match="one length"):
        _native.index_pairs_held(one, one, one, two)


def _ranges_of(puts: pa.Table, lenses, cuts):
    """``compare.unfindable_runs`` of each phy range between ``cuts``, as the job's stage 2 makes them."""
    phy = puts["phy_offset"].to_numpy()
    parts = []
    for i, (lo, hi) in enumerate(zip(cuts[:-1], cuts[1:])):
        sel = (phy >= lo) & (phy < hi)
        if not sel.any():
            continue
        lens_sel = {k: (kh[(p >= lo) & (p < hi)], p[(p >= lo) & (p < hi)]) for k, (kh, p) in lenses.items()}
        parts.append((i, compare.unfindable_runs([(["A", "B"], puts.filter(pa.array(sel)))], lens_sel)))
    return compare.unfindable_rows(parts)


@given(st.lists(st.tuples(st.sampled_from([0, 1]), st.integers(1, 3), st.booleans()), min_size=1, max_size=60),
       st.lists(st.integers(0, 60), max_size=6))
def test_unfindable_runs_join_across_ranges(records, cut_at):
    """Runs cut at phy range borders join up into the runs one range holding everything gives."""
    topic, kh, phy = [], [], []
    held_kh, held_phy = [], []
    for i, (t, keys, indexed) in enumerate(records):
        for k in range(keys):
            topic.append(t)
            kh.append(1000 * i + k)
            phy.append(100 * i)
            if indexed or k:              # a record whose first key is missing when not indexed
                held_kh.append(1000 * i + k)
                held_phy.append(100 * i)
    puts = pa.table([pa.array(topic, pa.int32()), pa.array(kh, pa.int32()), pa.array(phy, pa.int64())],
                    schema=INDEX_PUTS)
    lenses = {"on_disk": (np.array(held_kh, np.int32), np.array(held_phy, np.int64)),
              "recovered": (np.zeros(0, np.int32), np.zeros(0, np.int64))}
    whole = _ranges_of(puts, lenses, [0, 10**9])
    cuts = sorted({0, 10**9} | {100 * c + 50 for c in cut_at})
    assert _ranges_of(puts, lenses, cuts) == whole
    missing = sum(1 for t, keys, indexed in records if not indexed)
    assert sum(r["count"] for r in whole if r["index"] == "on_disk") == missing
    assert sum(r["count"] for r in whole if r["index"] == "recovered") == len(kh)


@pytest.mark.slow
def test_unfindable_keys_span_commitlog_files(spark, tmp_path):
    """No index files on disk: every key of every record below the cut is unfindable in the on-disk
    lens, one run per topic over all the commitlog files (counted here from the records' own keys)."""
    root = tmp_path / "store"
    write_store(root, SyntheticStoreSpec(total_bytes=3 << 20, segment_size=1 << 20, message_size=1024, seed=7),
                CrashSpec(abort=False), keep_messages=False)
    shutil.rmtree(root / "index")
    (root / "index").mkdir()
    store = open_store(root)
    summaries = store.summaries(store.scan_options(broker_5x=store.looks_5x()))
    assert len(summaries) >= 3
    pred = prediction.predict(store, versions.V53 if store.looks_5x() else versions.V49, summaries)
    keys: dict[str, int] = {}
    records: dict[str, int] = {}
    for s in summaries:
        for b in SegmentScan(s.path, store.scan_options(), columns=["phy_offset", "topic", "sys_flag", "uniq_key",
                                                                   "key_list"]):
            cols = ("phy_offset", "topic", "sys_flag", "uniq_key", "key_list")
            for phy, topic, flag, uniq, key_list in zip(*(b.column(c).to_pylist() for c in cols)):
                n = 0 if (flag & 0xC) == 0xC else (uniq is not None) + len(key_list or [])
                if phy < pred.max_phy_offset and n:
                    keys[topic] = keys.get(topic, 0) + n
                    records[topic] = records.get(topic, 0) + 1
    rows = fnd.audit(spark, store, pred, summaries).tables["index_findings"].to_pylist()
    on_disk = [r for r in rows if r["kind"] == "unfindable_key" and r["index"] == "on_disk"]
    assert {r["topic"]: r["count"] for r in on_disk} == keys
    assert {r["topic"]: r["detail"] for r in on_disk} == {t: f"{n} records" for t, n in records.items()}
