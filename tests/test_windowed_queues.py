"""The audit's queue buckets take a queue a CQ file's window of offsets at a time
(``compare.compare_windows``): the same findings, ranges, written consume queue files, parts and
digests as the whole queue at once, on queues spanning several CQ files; queues it cannot take
that way (puts out of order, entries on disk at one phy offset in two windows) go whole."""
from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from store_reader import open_store
from store_reader.audit import compare
from store_reader.broker.prediction import predict
from store_reader.broker.versions import V49, V53
from store_reader.formats.consumequeue import CQ_ENTRY_DTYPE, list_queue_files, list_queues, slots_per_file
from store_reader.repair import queues
from store_reader.testing.synthetic import CrashSpec, SyntheticStoreSpec, write_store
from test_rebuilt_view import _hand_store, audit_buckets


def _buckets(store, pred, out: Path) -> tuple[list, dict, list, dict[str, str], dict[str, bytes]]:
    """Every queue bucket of a recovery's audit, Spark-free, writing the consume queues under
    ``out``: the queue findings (in the table's order), the ranges, the parts and digests written
    and the files' bytes."""
    cfg = store.config
    plan, items = audit_buckets(store, pred, queues.QueueTarget(
        str(out), store.consume_queue_dir, cfg.cq_file_size, cfg.mappedFileSizeCommitLog,
        {k: (q.min_offset, q.max_offset) for k, q in pred.consume_queues.items()}))
    rows, ranges, parts, digests = [], {}, [], {}
    for bucket in range(plan.buckets):
        for kind, value in compare.audit_partition(bucket, items[bucket], plan):
            if kind == "queue_findings":
                rows += value.to_pylist()
            elif kind == "ranges":
                ranges.update({k: (d, r) for k, d, r in value})
            elif kind == "queues_written":
                for ps, d in value:
                    parts += ps
                    digests.update(d)
    rows.sort(key=lambda r: (r["topic"], r["queue_id"], r["kind"], r["from_offset"]))
    files = {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}
    return rows, ranges, sorted(parts, key=lambda p: (p.topic, p.queue_id, p.first_offset)), digests, files


def _same_both_ways(store, pred, tmp_path: Path, monkeypatch) -> dict[tuple[str, int], bool]:
    """Both ways give the same; returns per queue whether it was taken a window at a time."""
    taken: dict[tuple[str, int], bool] = {}
    windowed = compare.compare_windows

    def spy(key, *args):
        got = windowed(key, *args)
        taken[key] = got is not None
        return got
    monkeypatch.setattr(compare, "compare_windows", spy)
    by_window = _buckets(store, pred, tmp_path / "windows")
    monkeypatch.setattr(compare, "compare_windows", lambda *args: None)
    whole = _buckets(store, pred, tmp_path / "whole")
    for got, want in zip(by_window, whole):
        assert got == want
    assert by_window[4] and by_window[0]
    return taken


def _spanning(store) -> set[tuple[str, int]]:
    """The queues of the input whose entries span several CQ files."""
    return {(r.topic, r.queue_id) for r in list_queues(store.root)
            if len(list_queue_files(r.path, store.config.cq_file_size)) > 1}


def test_hand_store_queues(tmp_path, monkeypatch):
    """Queues of 5-slot CQ files: in order, with a gap across a file's end (fillers), and with
    a repeat, a repeat by phy and a put below the start, and LMQ copies with a second claim (whole);
    no consume queue on disk."""
    root = _hand_store(tmp_path / "store")
    store = open_store(root, root / "broker.conf")
    taken = _same_both_ways(store, predict(store, V53), tmp_path, monkeypatch)
    assert taken == {("Regular", 0): True, ("Gap", 0): True, ("Repeat", 0): False, ("Backwards", 0): False,
                     ("Below", 0): False, ("%LMQ%r", 0): False}


SPEC = SyntheticStoreSpec(total_bytes=1 << 20, segment_size=256 << 10, cq_file_size=600, max_hash_slot_num=512,
                          max_index_num=4096, topics=(("TopicA", 2), ("TopicB", 1)))


@pytest.mark.parametrize("broker, crash", [
    ("4.9", CrashSpec(torn_tail=True, corrupt="crc")),
    ("5.x", CrashSpec(cq_ahead=40, zeroed_span="second_last")),
    ("5.x", CrashSpec(missing_file=True, cq_behind=30)),
], ids=["4.9-torn-crc", "5.x-cq-ahead-zeroed", "5.x-missing-file-cq-behind"])
def test_synthetic_queues(tmp_path, monkeypatch, broker, crash):
    spec = SyntheticStoreSpec(**{**SPEC.__dict__, "broker": broker})
    root = write_store(tmp_path / "store", spec, crash, keep_messages=False).root
    store = open_store(root, root / "broker.conf")
    taken = _same_both_ways(store, predict(store, V49 if broker == "4.9" else V53), tmp_path, monkeypatch)
    assert _spanning(store) and all(taken.get(k) for k in _spanning(store))


def test_entry_on_disk_twice_is_compared_whole(tmp_path, monkeypatch):
    """An entry on disk copied into a later CQ file of its queue (one phy offset at two queue
    offsets, in two windows): the windows find it and the queue is compared whole
    (``duplicate_phy_on_disk``), its files still written a window at a time."""
    spec = SyntheticStoreSpec(**{**SPEC.__dict__, "broker": "5.x"})
    root = write_store(tmp_path / "made", spec, CrashSpec(torn_tail=True), keep_messages=False).root
    shutil.copytree(root, tmp_path / "store")
    root = tmp_path / "store"
    store = open_store(root, root / "broker.conf")
    ref = next(r for r in list_queues(root) if r.topic == "TopicA")
    files = list_queue_files(ref.path, store.config.cq_file_size)
    assert len(files) > 2
    first = np.fromfile(files[0].path, CQ_ENTRY_DTYPE)
    later = np.fromfile(files[1].path, CQ_ENTRY_DTYPE)
    later[3] = first[3]
    later.tofile(files[1].path)
    pred = predict(store, V53)
    taken = _same_both_ways(store, pred, tmp_path, monkeypatch)
    assert taken[(ref.topic, ref.queue_id)]
    rows, *_ = _buckets(store, pred, tmp_path / "again")
    dup = [r for r in rows if r["kind"] == "duplicate_phy_on_disk" and r["topic"] == ref.topic]
    per_file = slots_per_file(store.config.cq_file_size)
    assert {r["from_offset"] for r in dup} == {3, per_file + 3}


@pytest.mark.parametrize("version", [V49, V53])
def test_lmq_queues(tmp_path, monkeypatch, version):
    """LMQ copies in 3-slot CQ files: a copy queue starting inside a window (pre-blank head)."""
    from test_lmq import _lmq_store

    root = _lmq_store(tmp_path / "store", version == V53)
    conf = root / "broker.conf"
    conf.write_text(conf.read_text().replace("mappedFileSizeConsumeQueue=600", "mappedFileSizeConsumeQueue=60"))
    store = open_store(root, conf)
    taken = _same_both_ways(store, predict(store, version), tmp_path, monkeypatch)
    assert all(taken[k] for k in (("TopicL", 1), ("%LMQ%a", 0), ("%LMQ%b", 0)))
