"""Skew in the repaired store's rebuild (jobs/recover.py): one huge queue is split by CQ file, many
small queues are packed into few tasks, index files are built one task each, and none of it may
change a byte against the broker's sequential put (``ConsumeQueueState.put``) of whole queues."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from jobs.rebuild import index_put_counts, rebuild_consume_queues, rebuild_index_files, surviving_records
from jobs._spark.scan import scan_segments
from store_reader import open_store
from store_reader.repair import index, queues as repair_queues
from store_reader.formats.commitlog import scan_segment
from store_reader.formats.indexfile import build_index_files
from store_reader.formats.recordformat import ScanOptions
from store_reader.broker.versions import V53
from store_reader.broker.cqueue import ConsumeQueueState
from store_reader.broker.prediction import predict
from store_reader.testing.synthetic import CrashSpec, SyntheticStoreSpec, encode_message, write_store

KiB = 1 << 10


# -- the put rules, vectorised -------------------------------------------------------------------------

@st.composite
def put_sequences(draw):
    """A queue's puts as a crashed, re-dispatched or corrupt store feeds them: mostly consecutive
    queue offsets and growing phy offsets, with repeats, gaps, zeros and phy offsets going back."""
    n = draw(st.integers(1, 120))
    first = draw(st.integers(0, 40))
    jumps = draw(st.lists(st.sampled_from([0, 0, 0, 0, 1, -1, 3, -5]), min_size=n, max_size=n))
    offsets = first + np.arange(n) + np.cumsum(jumps)
    offsets[np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)))
            & (np.arange(n) % 7 == 3)] = 0
    sizes = np.array(draw(st.lists(st.integers(1, 50), min_size=n, max_size=n)))
    back = np.array(draw(st.lists(st.sampled_from([0, 0, 0, -200, -20]), min_size=n, max_size=n)))
    phy = np.cumsum(sizes) + draw(st.integers(-10, 100)) + back
    tags = np.array(draw(st.lists(st.integers(-3, 3), min_size=n, max_size=n)))
    per_file = draw(st.integers(1, 9))
    start = draw(st.sampled_from([-1, -1, 0, 150, 10_000]))
    cuts = sorted(draw(st.lists(st.integers(0, n), max_size=3)))
    return phy, sizes, tags, offsets, per_file, start, cuts


@given(put_sequences())
def test_put_many_is_the_put_sequence(case):
    phy, sizes, tags, offsets, per_file, start, cuts = case
    one, many = (ConsumeQueueState("T", 0, per_file * 20) for _ in range(2))
    one.max_physic_offset = many.max_physic_offset = start
    for args in zip(phy.tolist(), sizes.tolist(), tags.tolist(), offsets.tolist()):
        one.put(*args)
    for lo, hi in zip([0] + cuts, cuts + [len(phy)]):
        many.put_many(phy[lo:hi], sizes[lo:hi], tags[lo:hi], offsets[lo:hi])
    for attr in ("min_logic_offset", "max_physic_offset", "skipped_repeats", "order_warnings"):
        assert getattr(many, attr) == getattr(one, attr), attr
    assert [(f.start, f.wrote, f.slots.tobytes()) for f in many.files] == \
        [(f.start, f.wrote, f.slots.tobytes()) for f in one.files]


# -- stores ----------------------------------------------------------------------------------------------

def _synthetic(root: Path, topics, crash: CrashSpec | None, **spec) -> Path:
    write_store(root, SyntheticStoreSpec(segment_size=512 * KiB, message_size=256, topics=topics,
                                         **spec), crash, keep_messages=False)
    return root


def _trees(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _unsplit(store, end: int, out: Path) -> None:
    """The reference: every queue rebuilt in one piece (``queues.rebuild_queue``)."""
    opts = ScanOptions(check_crc=False, compute_crc=False, broker_5x=True,
                       delay_levels_ms=tuple(store.config.delay_levels_ms))
    queues: dict[tuple[str, int], list[pa.Table]] = {}
    for f in store.commitlog_files:
        if f.start >= end:
            continue
        for entries in repair_queues.dispatch_entries(f.path, opts, end, store.config, True):
            for topic, qid in set(zip(entries["topic"].to_pylist(), entries["queue_id"].to_pylist())):
                mask = pa.array((np.asarray(entries["topic"].to_pylist(), dtype=object) == topic)
                                & (entries["queue_id"].to_numpy() == qid))
                queues.setdefault((topic, qid), []).append(entries.filter(mask))
    for (topic, qid), tables in queues.items():
        q = repair_queues.rebuild_queue(topic, qid, pa.concat_tables(tables), store.config.cq_file_size,
                                 store.config.mappedFileSizeCommitLog)
        repair_queues.write_repaired_queue(q, str(out / "consumequeue" / topic / str(qid)),
                                 str(store.root / "consumequeue" / topic / str(qid)))


def _rebuild(spark, store, end: int, out: Path):
    (out / "consumequeue").mkdir(parents=True)
    expected = sum(s.records for s in store.summaries() if s.file_start < end)
    return rebuild_consume_queues(spark, store, end, True, str(out), expected)


@pytest.fixture(scope="module")
def hot_store(tmp_path_factory):
    """One dominant queue (about 94 % of the records; the rest schedule, retry and transaction
    queues) spread over ~30 CQ files of 400 entries, crashed with a torn tail and a corrupt record."""
    root = tmp_path_factory.mktemp("hot") / "store"
    _synthetic(root, (("Hot", 1),), CrashSpec(torn_tail=True, corrupt="crc"), total_bytes=3 << 20,
               cq_file_size=400 * 20, max_index_num=2500, max_hash_slot_num=300)
    store = open_store(root, root / "broker.conf")
    return store, predict(store, V53).max_phy_offset


@pytest.mark.spark
def test_one_dominant_queue_is_split_by_cq_file(spark, hot_store, tmp_path):
    store, end = hot_store
    buckets = spark.sparkContext.defaultParallelism
    keys = surviving_records(spark, store, end, True, buckets).map(lambda kv: (kv[0], kv[1][0])).collect()
    hot = {(bucket, key[2]) for bucket, key in keys if key[:2] == ("Hot", 0)}
    files = {f for _, f in hot}
    assert len(files) > 20                                  # one part per CQ file of the queue ...
    assert len({b for b, _ in hot}) == min(buckets, len(files))   # ... spread over every task
    rebuilt = _rebuild(spark, store, end, tmp_path / "split")
    assert rebuilt.rebuilt_whole == [] and rebuilt.parts > len(files)
    _unsplit(store, end, tmp_path / "unsplit")
    assert _trees(tmp_path / "split") == _trees(tmp_path / "unsplit")
    row = rebuilt.queues.filter(pa.compute.equal(rebuilt.queues["topic"], "Hot")).to_pylist()[0]
    assert (row["min_offset"], row["max_offset"]) == (0, row["entries"]) and row["entries"] > 8000


@pytest.mark.spark
def test_clean_store_rebuilds_the_writers_consume_queues(spark, tmp_path):
    """Independent answer: the synthetic writer's own CQ files of a cleanly shut down store."""
    root = _synthetic(tmp_path / "store", (("Hot", 1), ("Cold", 1)), None, total_bytes=2 << 20,
                      cq_file_size=300 * 20)
    store = open_store(root, root / "broker.conf")
    end = predict(store, V53).max_phy_offset
    rebuilt = _rebuild(spark, store, end, tmp_path / "out")
    assert rebuilt.parts > rebuilt.queues.num_rows                 # the big queues were split
    ours = _trees(tmp_path / "out" / "consumequeue")
    theirs = _trees(root / "consumequeue")
    assert ours.keys() == theirs.keys()
    for name, data in ours.items():
        # the writer stops a file at its last entry; the broker's (and our) files are preallocated
        assert data[:len(theirs[name])] == theirs[name] and not any(data[len(theirs[name]):]), name


@pytest.mark.spark
def test_many_small_queues_are_packed_into_few_tasks(spark, tmp_path):
    topics = tuple((f"T{i:02d}", 25) for i in range(40))         # 1,000 queues, a few entries each
    root = _synthetic(tmp_path / "store", topics, CrashSpec(torn_tail=True), total_bytes=3 << 20,
                      cq_file_size=1000 * 20)
    store = open_store(root, root / "broker.conf")
    end = predict(store, V53).max_phy_offset
    rebuilt = _rebuild(spark, store, end, tmp_path / "packed")
    assert rebuilt.queues.num_rows > 1000
    assert rebuilt.tasks == spark.sparkContext.defaultParallelism      # not one task per queue
    _unsplit(store, end, tmp_path / "unsplit")
    assert _trees(tmp_path / "packed") == _trees(tmp_path / "unsplit")


# -- queues that must not be split ---------------------------------------------------------------------

CONF = ("mappedFileSizeCommitLog=65536\nmappedFileSizeConsumeQueue=100\nmaxHashSlotNum=64\n"
        "maxIndexNum=16\n")


def _puts(n_files: int) -> list[tuple[str, int, int | None]]:
    """(topic, queue offset, stored PHYSICALOFFSET or None for the record's position) in commitlog
    order, 5 entries per CQ file: one regular queue and one per way a queue breaks the split."""
    regular = [("Regular", o, None) for o in range(5 * n_files - 2)]
    gap_inside = [("GapInside", o, None) for o in list(range(7)) + list(range(9, 15))]
    gap_at_file = [("GapAtFile", o, None) for o in list(range(5)) + list(range(6, 13))]
    repeat = [("Repeat", o, None) for o in list(range(6)) + [5] + list(range(6, 12))]
    zero = [("Zero", o, None) for o in [0, 1, 2, 3, 0] + list(range(4, 11))]
    backwards = [("Backwards", o, None) for o in range(12)]
    backwards[6] = ("Backwards", 6, 0)                         # PHYSICALOFFSET 0: a repeat by phy
    streams = [regular, gap_inside, gap_at_file, repeat, zero, backwards]
    out = []
    for i in range(max(map(len, streams))):
        out += [s[i] for s in streams if i < len(s)]
    # a queue whose later CQ file's records come first in the commitlog
    return out + [("Reorder", o, None) for o in list(range(5)) + list(range(10, 15)) + list(range(5, 10))]


def _hand_store(root: Path) -> tuple[Path, int]:
    (root / "commitlog").mkdir(parents=True)
    (root / "broker.conf").write_text(CONF)
    buf, pos = bytearray(65536), 0
    for i, (topic, offset, stored) in enumerate(_puts(4)):
        rec = encode_message(topic=topic, queue_offset=offset, phy_offset=pos if stored is None else stored,
                             body=b"x" * (20 + i % 13), properties={"KEYS": f"k{i} s{i % 3}", "TAGS": "t"},
                             store_timestamp=1_700_000_000_000 + i)
        buf[pos:pos + len(rec)] = rec
        pos += len(rec)
    (root / "commitlog" / "00000000000000000000").write_bytes(bytes(buf))
    return root, pos


@pytest.mark.spark
def test_queues_that_do_not_split_are_rebuilt_whole(spark, tmp_path):
    root, end = _hand_store(tmp_path / "store")
    store = open_store(root, root / "broker.conf")
    rebuilt = _rebuild(spark, store, end, tmp_path / "split")
    assert sorted(t for t, _ in rebuilt.rebuilt_whole) == \
        ["Backwards", "GapAtFile", "GapInside", "Reorder", "Repeat", "Zero"]
    _unsplit(store, end, tmp_path / "unsplit")
    assert _trees(tmp_path / "split") == _trees(tmp_path / "unsplit")
    # the broker's put would shift a queue after a gap (offset 6 at queue offset 5); the repaired
    # store keeps every entry at its own offset, and offset 5, whose record never was, a filler
    from store_reader.formats.consumequeue import decode_entries

    got = decode_entries((tmp_path / "split" / "consumequeue" / "GapAtFile" / "0" / "00000000000000000100").read_bytes())
    assert (got.size[0], got.tags_code[0]) == (repair_queues.FILLER_SIZE, 0)
    assert got.phy_offset[0] == 0           # its neighbours share the commitlog file: nothing earlier
    t = scan_segment(store.commitlog_files[0].path, ScanOptions(), columns=["phy_offset", "queue_offset"])[0]
    records = dict(zip(t["phy_offset"].to_pylist(), t["queue_offset"].to_pylist()))
    assert [records[int(p)] for p in got.phy_offset[1:5]] == [6, 7, 8, 9]
    # fillers where no record holds an offset: the gaps, and Backwards' offset 6, whose record is a
    # repeat by phy; Reorder's late records and the second claims of Repeat and Zero fill nothing
    assert [(t, lo, hi) for t, _, lo, hi, _ in rebuilt.fillers] == \
        [("Backwards", 6, 7), ("GapAtFile", 5, 6), ("GapInside", 7, 9)]


# -- index files, one task each ------------------------------------------------------------------------

@pytest.mark.spark
@pytest.mark.parametrize("damage", ["clean", "torn tail", "crc below the truncation point"])
def test_index_put_counts_from_the_scan_equal_a_recount(spark, tmp_path, damage):
    """The index plan's counts come from the scan's summaries. A body CRC failure in a file the
    broker's normal recovery never checks ends that file's valid prefix, but the rebuild (headers
    only) reads on past it: that file alone is counted again."""
    crash = CrashSpec(torn_tail=True) if damage == "torn tail" else None
    root = _synthetic(tmp_path / "store", (("Hot", 1), ("Cold", 2)), crash, total_bytes=3 << 20)
    store = open_store(root, root / "broker.conf")
    if damage.startswith("crc"):
        first = store.commitlog_files[0]
        third = scan_segment(first.path, ScanOptions(), columns=["phy_offset"])[0]["phy_offset"][2].as_py()
        with open(first.path, "r+b") as f:   # the third record's BODYCRC, in the first of 6 files
            f.seek(third - first.start + 8)
            crc = f.read(4)
            f.seek(-4, os.SEEK_CUR)
            f.write(bytes(b ^ 0xFF for b in crc))
    end = predict(store, V53).max_phy_offset
    summaries = scan_segments(spark, store, store.scan_options(True))
    opts = ScanOptions(check_crc=False, compute_crc=False, broker_5x=True)
    recount = [index.segment_index_counts(f.path, opts, end) for f in store.commitlog_files if f.start < end]
    assert len(recount) > 3 and all(n > 0 for n, _ in recount)
    assert index_put_counts(spark, store, summaries, end, True, False) == recount
    from_scan = [(s.index_puts, s.max_store_timestamp) for s in summaries[:len(recount)]]
    assert (from_scan[0] != recount[0]) == damage.startswith("crc")
    assert from_scan[1:] == recount[1:]


@pytest.mark.spark
def test_index_files_built_one_task_each_equal_one_sequential_build(spark, hot_store, tmp_path):
    store, end = hot_store
    cfg = store.config
    out = tmp_path / "index"
    out.mkdir()
    counts = index_put_counts(spark, store, scan_segments(spark, store, store.scan_options(True)), end, True, False)
    headers = rebuild_index_files(spark, store, end, True, False, str(out), counts)
    # reference: every put of the records below the cut in commitlog order, one build_index_files
    opts = ScanOptions(check_crc=False, compute_crc=False, broker_5x=True)
    kh, phy, ts, stamps = [], [], [], []
    for f in store.commitlog_files:
        if f.start < end:
            for p, t in index.segment_index_puts(f.path, opts, end):
                kh.append(p.key_hash)
                phy.append(p.phy)
                ts.append(p.store_timestamp)
                stamps.append(t)
    built = build_index_files(np.concatenate(kh), np.concatenate(phy), np.concatenate(ts),
                              hash_slot_num=cfg.maxHashSlotNum, index_num=cfg.maxIndexNum)
    assert len(built) == len(headers) > 3
    assert [b.header for b in built] == headers
    names = sorted(os.listdir(out))
    assert len(names) == len(built) and names == sorted(names, key=int)
    for name, b in zip(names, built):
        assert (out / name).read_bytes() == b.data.tobytes(), name
    assert max(ts for _, ts in counts) == max(stamps)
    assert sum(n for n, _ in counts) == sum(b.puts for b in built)
