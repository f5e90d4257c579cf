"""One answer to "what a queue holds" (issue 35): the audit's REBUILT view and ``dump --verify``'s
expected entries are the repaired store's consume queues, entry for entry: every REBUILT row equals
the slot the repair writes at its queue offset, and every entry the repair writes (fillers and the
pre-blank head aside) is a REBUILT row; the audit's queue buckets, which write a recovery's consume
queues as they compare them, write those very files, and so does ``jobs.recover`` through Spark. On
a hand-made store where the repair's put rules drop or pass over puts (a repeat by phy, a put below
the queue's start, a second claim on an offset, LMQ copies with a gap: fillers) and on real-broker
fixtures."""
from __future__ import annotations

import hashlib
from collections import defaultdict
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from jobs.recover import recover
from store_reader import open_store
from store_reader.repair import queues
from store_reader.audit.plan import audit_plan
from store_reader.audit.queues import compare_queue, rebuilt_entries, rebuilt_puts, rebuilt_queue
from store_reader.audit.compare import audit_partition
from store_reader.audit.records import driver_items, segment_items
from store_reader.audit.view import StoreView
from store_reader.formats.consumequeue import CQ_ENTRY_DTYPE, CQ_STORE_UNIT_SIZE
from store_reader.formats.recordformat import ScanOptions
from store_reader.broker.versions import V53
from store_reader.broker.prediction import predict
from store_reader.testing.synthetic import encode_message
from support import broker_conf, input_store

# 64 KiB commitlog files, consume queue files of 5 slots, LMQ copies dispatched
CONF = ("mappedFileSizeCommitLog=65536\nmappedFileSizeConsumeQueue=100\nmaxHashSlotNum=64\nmaxIndexNum=16\n"
        "enableMultiDispatch=true\nenableLmq=true\n")

PUTS = {  # queue offsets in commitlog order; (offset, stored PHYSICALOFFSET) where it is not the position
    "Regular": list(range(12)),
    "Repeat": list(range(6)) + [5] + list(range(6, 9)),        # a second claim on offset 5
    "Backwards": list(range(6)) + [(6, 0)] + list(range(7, 10)),  # offset 6's put: a repeat by phy
    "Below": [3, 4, 2, 5, 6, 7],                               # offset 2: below the queue's start
    "Gap": list(range(5)) + list(range(7, 11)),
}
# Regular's records also go to an LMQ queue: a gap there (fillers) and a second claim on offset 9
LMQ_OFFSETS = [0, 1, 2, 3, 7, 8, 9, 9, 10, 11, 12, 13]


def _hand_store(root: Path) -> Path:
    (root / "commitlog").mkdir(parents=True)
    (root / "broker.conf").write_text(CONF)
    streams = [[(topic, p) for p in puts] for topic, puts in PUTS.items()]
    buf, pos, i = bytearray(65536), 0, 0
    for n in range(max(map(len, streams))):
        for topic, put in (s[n] for s in streams if n < len(s)):
            offset, stored = put if isinstance(put, tuple) else (put, pos)
            props = {"KEYS": f"k{i}", "TAGS": f"t{i % 4}"}
            if topic == "Regular":
                props.update(INNER_MULTI_DISPATCH="%LMQ%r", INNER_MULTI_QUEUE_OFFSET=str(LMQ_OFFSETS[n]))
            rec = encode_message(topic=topic, queue_offset=offset, phy_offset=stored, body=b"x" * (20 + i % 13),
                                 properties=props,
                                 store_timestamp=1_700_000_000_000 + i)
            buf[pos:pos + len(rec)] = rec
            pos, i = pos + len(rec), i + 1
    (root / "commitlog" / "00000000000000000000").write_bytes(bytes(buf))
    return root


def _repaired_queues(store, end: int, out: Path) -> dict[tuple[str, int], tuple[int, np.ndarray, int]]:
    """The repair's consume queues (``dispatch_entries``, ``rebuild_queue``, ``write_repaired_queue``),
    read back from the files written: per queue (first slot's offset, slots, min offset)."""
    opts = ScanOptions(check_crc=False, compute_crc=False, broker_5x=True,
                       delay_levels_ms=tuple(store.config.delay_levels_ms))
    puts: dict[tuple[str, int], list[pa.Table]] = defaultdict(list)
    for f in store.commitlog_files:
        if f.start < end:
            for t in queues.dispatch_entries(f.path, opts, end, store.config, True):
                for key in set(zip(t["topic"].to_pylist(), t["queue_id"].to_pylist())):
                    mask = (np.array(t["topic"].to_pylist(), object) == key[0]) & (t["queue_id"].to_numpy() == key[1])
                    puts[key].append(t.filter(pa.array(mask)))
    got = {}
    for (topic, qid), tables in puts.items():
        q = queues.rebuild_queue(topic, qid, pa.concat_tables(tables), store.config.cq_file_size,
                                 store.config.mappedFileSizeCommitLog)
        qdir = out / topic / str(qid)
        queues.write_repaired_queue(q, str(qdir))
        files = sorted(qdir.iterdir())
        first = int(files[0].name) // CQ_STORE_UNIT_SIZE
        slots = np.concatenate([np.fromfile(p, CQ_ENTRY_DTYPE) for p in files])
        got[(topic, qid)] = (first, slots, q.min_offset)
    return got


def _audit_rows(store, pred) -> dict[tuple[str, int], pa.Table]:
    """The audit's stage 1 over every commitlog file: each queue's ``QUEUE_ROWS`` as its compare sees them."""
    summaries = store.summaries()
    plan = audit_plan(1, store, pred, summaries, summaries, None, None)
    rows: dict[tuple[str, int], list[pa.Table]] = defaultdict(list)
    for f, s in zip(store.commitlog_files, summaries):
        for _, item in segment_items(f.path, s.segment, s.file_start + s.file_size > pred.max_phy_offset, plan):
            if item[0] == "queue":
                rows[item[1]].append(item[2])
    return {k: pa.concat_tables(v) for k, v in rows.items()}


def audit_buckets(store, pred, target: queues.QueueTarget) -> tuple:
    """A recovery's audit, Spark-free, up to its queue buckets: the plan writing the consume queues
    to ``target``, and every bucket's items (stage 1 over every commitlog file, then the driver's)."""
    summaries = store.summaries()
    plan = audit_plan(1, store, pred, summaries, summaries, None, None, target)
    items: dict[int, list] = defaultdict(list)
    for f, s in zip(store.commitlog_files, summaries):
        for key, item in segment_items(f.path, s.segment, s.file_start + s.file_size > pred.max_phy_offset, plan):
            items[key].append((key, item))
    for key, item in driver_items(plan, pred):
        items[key].append((key, item))
    return plan, items


def _audit_written(store, pred, out: Path) -> dict[str, str]:
    """Every queue bucket of a recovery's audit (``audit_buckets``) writing the consume queues under
    ``out`` (``QueueTarget``, no queue the broker keeps past its records: the repair's files above
    are not extended either); returns the digests the buckets gave for the files they wrote."""
    cfg = store.config
    plan, items = audit_buckets(store, pred, queues.QueueTarget(str(out), store.consume_queue_dir, cfg.cq_file_size,
                                                                cfg.mappedFileSizeCommitLog, {}))
    digests = {}
    for bucket in range(plan.buckets):
        for kind, value in audit_partition(bucket, items[bucket], plan):
            if kind == "queues_written":
                for _, d in value:
                    digests.update(d)
    return digests


def _check(store, tmp_path: Path) -> dict[tuple[str, int], tuple]:
    pred = predict(store, V53)
    repaired = _repaired_queues(store, pred.max_phy_offset, tmp_path / "consumequeue")
    # the audit's queue buckets write the same files, byte for byte, and hash what they wrote
    digests = _audit_written(store, pred, tmp_path / "audited")
    files = sorted(p.relative_to(tmp_path) for p in (tmp_path / "consumequeue").rglob("*") if p.is_file())
    assert files and sorted(Path(k) for k in digests) == files
    for rel in files:
        data = (tmp_path / "audited" / rel).read_bytes()
        assert data == (tmp_path / rel).read_bytes(), rel
        assert digests[str(rel)] == hashlib.sha256(data).hexdigest(), rel
    rows = _audit_rows(store, pred)
    expected = StoreView(store).queue_records()
    assert set(rows) == set(repaired) and repaired
    views = {}
    for key, (first, slots, min_offset) in repaired.items():
        puts = rebuilt_puts(rows[key])
        rebuilt = rebuilt_entries(puts, rebuilt_queue(*key, puts, store.config))
        (off, phy, size, tags, _, _), dup = rebuilt
        # every REBUILT row is the slot written at its queue offset ...
        at = off - first
        assert (at >= 0).all() and (at < len(slots)).all(), key
        assert phy.tolist() == slots["phy_offset"][at].tolist(), key
        assert size.tolist() == slots["size"][at].tolist(), key
        assert tags.tolist() == slots["tags_code"][at].tolist(), key
        # ... and every entry written is a REBUILT row (not the fillers, the pre-blank head, the
        # zeros past the last one)
        written = np.flatnonzero((slots["size"] != queues.FILLER_SIZE) & (slots["size"] > 0)) + first
        assert written.tolist() == off.tolist() and (off >= min_offset).all(), key
        # dump --verify expects the same records at the same offsets
        e = expected[key]
        assert (e.queue_offset.tolist(), e.size.tolist()) == (off.tolist(), size.tolist()), key
        views[key] = (off, phy, dup, rows[key], pred, rebuilt)
    return views


def test_rebuilt_view_is_the_repaired_queue_where_the_put_rules_apply(tmp_path):
    root = _hand_store(tmp_path / "store")
    store = open_store(root, root / "broker.conf")
    views = _check(store, tmp_path)
    offsets = {k[0]: v[0].tolist() for k, v in views.items()}
    assert offsets["Backwards"] == [0, 1, 2, 3, 4, 5, 7, 8, 9]      # the repeat by phy holds nothing
    assert offsets["Below"] == [3, 4, 5, 6, 7]                       # nor the put below the start
    assert offsets["Gap"] == [0, 1, 2, 3, 4, 7, 8, 9, 10]
    assert offsets["%LMQ%r"] == [0, 1, 2, 3, 7, 8, 9, 10, 11, 12, 13]      # the LMQ copies: a gap, a second claim
    # the second claims (Repeat's offset 5, the LMQ queue's 9) are duplicates; the repeat by phy and
    # the put below the start are not
    assert {k[0]: v[2].tolist() for k, v in views.items() if len(v[2])} == {"Repeat": [5], "%LMQ%r": [9]}
    off, phy, dup, t, pred, rebuilt = views[("Repeat", 0)]
    kinds = {r["kind"] for r in compare_queue("Repeat", 0, t, pred.max_phy_offset, None, False, None, rebuilt)}
    assert "duplicate_queue_offset" in kinds


@pytest.mark.parametrize("case", [("rocketmq-4.9.7", "crash-tail"), ("rocketmq-5.3.3", "torn-middle-crc")],
                         ids=lambda c: f"{c[0].split('-')[1]}/{c[1]}")
def test_rebuilt_view_is_the_repaired_queue_on_real_broker_stores(tmp_path, case):
    store = open_store(input_store(*case), broker_conf(*case))
    assert _check(store, tmp_path)


def _written_slots(qdir: Path) -> tuple[int, np.ndarray]:
    """A queue's CQ files as written: (queue offset of the first slot, every slot)."""
    files = sorted(qdir.iterdir())
    return (int(files[0].name) // CQ_STORE_UNIT_SIZE,
            np.concatenate([np.fromfile(p, CQ_ENTRY_DTYPE) for p in files]))


@pytest.mark.spark
def test_recovery_writes_the_audits_rebuilt_view_and_dump_sees_it(spark, tmp_path):
    """``jobs.recover`` through Spark on the hand-made store (duplicates, a repeat by phy, a put
    below the start, holes: fillers, LMQ copies): every REBUILT row of its audit is the slot the
    recovery wrote at its queue offset (phy, size, tags), every entry written is a REBUILT row, and
    ``dump --verify``'s view of each queue is the audit's."""
    root = _hand_store(tmp_path / "store")
    out = tmp_path / "out"
    recover(spark, str(root), str(out), str(root / "broker.conf"), "5.3")
    store = open_store(root, root / "broker.conf")
    pred = predict(store, V53)
    rows = _audit_rows(store, pred)
    dumped = StoreView(store).queue_records()
    written = {(p.parent.name, int(p.name)) for p in (out / "consumequeue").glob("*/*")}
    assert set(rows) == written == set(dumped) and {"%LMQ%r", "Gap", "Repeat"} <= {k[0] for k in rows}
    fillers = 0
    for key, t in rows.items():
        puts = rebuilt_puts(t)
        (off, phy, size, tags, _, record_phy), _ = rebuilt_entries(puts, rebuilt_queue(*key, puts, store.config))
        first, slots = _written_slots(out / "consumequeue" / key[0] / str(key[1]))
        at = off - first
        assert (at >= 0).all() and (at < len(slots)).all(), key
        assert (slots["phy_offset"][at].tolist(), slots["size"][at].tolist(), slots["tags_code"][at].tolist()) \
            == (phy.tolist(), size.tolist(), tags.tolist()), key
        entry = (slots["size"] > 0) & (slots["size"] != queues.FILLER_SIZE)
        assert (np.flatnonzero(entry) + first).tolist() == off.tolist(), key
        fillers += int(np.count_nonzero(slots["size"][off[0] - first:] == queues.FILLER_SIZE))
        d = dumped[key]
        assert (d.queue_offset.tolist(), d.phy.tolist(), d.size.tolist()) \
            == (off.tolist(), record_phy.tolist(), size.tolist()), key
    assert fillers == 2 + 1 + 3    # Gap's offsets 5..6, Backwards' 6 (its put repeats by phy), the LMQ queue's 4..6
