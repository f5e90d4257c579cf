"""Index files (spec store-format §7; recovery.md §8): layout, query, builder, fixtures."""
from __future__ import annotations

import os
import struct

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import support
from schemas import INDEX_ENTRY
from store_reader import _native
from store_reader.formats import indexfile as ix
from store_reader.formats.brokerconf import load_broker_config
from store_reader.exceptions import CorruptEntryError, FileSizeError, StrayFileError
from store_reader.formats.javahash import index_key, index_key_hashes

pytestmark = pytest.mark.reader

CASES = [c for c in support.scenarios() if support.expected(*c)["afterLoad"]["loadResult"]]
# Stores whose index files were written by one uninterrupted dispatch of the commitlog as it is now
# (index untouched or fully rebuilt, nothing truncated): their put order is recoverable from the records.
PUT_ORDER_RECOVERABLE = [c for c in CASES if c[1] in ("clean", "clean-sync", "cq-lost", "derived-all-lost")]


def _config(case):
    return load_broker_config(support.broker_conf(*case))


def _open_all(root, cfg):
    refs = ix.list_index_files(os.path.join(root, "index"), cfg.index_file_size)
    return [ix.IndexFile(r.path, cfg.maxHashSlotNum, cfg.maxIndexNum) for r in refs]


# -- layout and header --------------------------------------------------------------------------

HEADER_BYTES = bytes.fromhex(
    "0000018bcfe5687b"   # beginTimestamp 1700000000123
    "0000018bcfe57c03"   # endTimestamp   1700000005123
    "0000000000000000"   # beginPhyOffset 0
    "00000000000000a8"   # endPhyOffset   168
    "00000003"           # hashSlotCount  3
    "00000005"           # indexCount     5 (next entry number)
)


def test_layout_constants():
    assert (ix.INDEX_HEADER_SIZE, ix.HASH_SLOT_SIZE, ix.INDEX_ENTRY_SIZE) == (40, 4, 20)
    assert ix.index_file_size(5_000_000, 20_000_000) == 420_000_040
    assert ix.index_file_size(100, 400) == 8440
    assert [ix.ENTRY_DTYPE.fields[n][1] for n in ("key_hash", "phy_offset", "time_diff", "prev_index")] \
        == [0, 4, 12, 16]


def test_header_round_trip(tmp_path):
    h = ix.IndexHeader.unpack(HEADER_BYTES)
    assert h == ix.IndexHeader(1700000000123, 1700000005123, 0, 168, 3, 5)
    assert h.pack() == HEADER_BYTES and h.entries_in_use == 4
    assert ix.IndexHeader(index_count=0).loaded_index_count == 1       # IndexHeader#load: <= 0 -> 1
    assert h.successor() == ix.IndexHeader(1700000005123, 1700000005123, 168, 168, 0, 1)
    assert ix.IndexHeader().successor() == ix.IndexHeader(0, 0, 0, 0, 0, 1)
    p = tmp_path / "20231114221320123"
    p.write_bytes(bytes(8440))
    ix.write_header(p, h)
    assert ix.read_header(p) == h and p.read_bytes()[40:] == bytes(8400)
    with pytest.raises(CorruptEntryError):
        ix.IndexHeader.unpack(HEADER_BYTES[:39], path="x")


def test_spec_worked_example():
    """store-format §7.5 with the default sizes (5,000,000 slots, 20,000,000 entries)."""
    keys = ["TopicTest#7F0000010B8C18B4AAC2123456780000", "TopicTest#k1", "TopicTest#k2", "TopicTest#k1"]
    phy = [0, 0, 0, 168]
    ts = [1700000000123] * 3 + [1700000005123]
    (built,) = ix.build_index_files(index_key_hashes(keys), phy, ts, hash_slot_num=5_000_000,
                                    index_num=20_000_000)
    d = built.data
    assert len(d) == 420_000_040
    assert bytes(d[:40]) == HEADER_BYTES
    entry = {n: bytes(d[40 + 4 * 5_000_000 + 20 * n:][:20]) for n in range(1, 5)}
    assert 40 + 4 * 5_000_000 + 20 * 1 == 20_000_060
    assert entry[1] == bytes.fromhex("10a556db" "0000000000000000" "00000000" "00000000")
    assert entry[2] == bytes.fromhex("0029e6a8" "0000000000000000" "00000000" "00000000")
    assert entry[3] == bytes.fromhex("0029e6a9" "0000000000000000" "00000000" "00000000")
    #                                 keyHash    phy 168             timeDiff 5  prev = entry 2
    assert entry[4] == bytes.fromhex("0029e6a8" "00000000000000a8" "00000005" "00000002")
    slot = {pos: struct.unpack(">i", bytes(d[pos:pos + 4]))[0]
            for pos in (17_084_564, 10_984_136, 10_984_140)}
    assert slot == {17_084_564: 1, 10_984_136: 4, 10_984_140: 3}
    assert np.count_nonzero(d[40:20_000_040]) == 3                   # no other slot touched
    f = ix.IndexFile.from_buffer(d, 5_000_000, 20_000_000)
    kw = dict(hash_slot_num=5_000_000, index_num=20_000_000)
    assert ix.query([f], "TopicTest", "k1", **kw) == [168, 0]         # newest first
    assert ix.query([f], "TopicTest", "k2", **kw) == [0]
    assert ix.query([f], "TopicTest", "k3", **kw) == []
    assert ix.query([f], "TopicTest", "k1", max_num=1, **kw) == [168]
    assert ix.query([f], "TopicTest", "k1", begin=1700000001000, **kw) == [168]   # time < begin stops
    assert ix.query([f], "TopicTest", "k1", end=1700000004000, **kw) == [0]


def test_names_and_listing(tmp_path):
    assert ix.index_file_name(1700000000123, "UTC") == "20231114221320123"
    assert ix.index_file_name(1700000000123, "Asia/Shanghai") == "20231115061320123"
    assert len(ix.index_file_name(1700000000123)) == 17
    d = tmp_path / "index"
    d.mkdir()
    for name in ("20231115061320123", "20231114221320123"):
        (d / name).write_bytes(bytes(8440))
    assert [r.name for r in ix.list_index_files(d, 8440)] == ["20231114221320123", "20231115061320123"]
    (d / "notes.txt").write_bytes(b"")
    with pytest.raises(StrayFileError):
        ix.list_index_files(d, 8440)
    assert len(ix.list_index_files(d, 8440, strict=False)) == 2      # IndexService#load skips it
    (d / "notes.txt").unlink()
    (d / "20231116000000000").write_bytes(bytes(8000))
    with pytest.raises(FileSizeError) as err:
        ix.list_index_files(d, 8440)
    assert "8000" in str(err.value) and "8440" in str(err.value)
    with pytest.raises(FileSizeError):
        ix.IndexFile(d / "20231116000000000", 100, 400)
    assert ix.list_index_files(tmp_path / "none", 8440) == []


# -- query stop rules (store-format §7.4 query side, IndexFile#selectPhyOffset) -------------------

def _raw_file(slots: dict[int, int], entries: dict[int, tuple[int, int, int, int]], header: ix.IndexHeader,
              hash_slot_num=10, index_num=10) -> ix.IndexFile:
    data = np.zeros(ix.index_file_size(hash_slot_num, index_num), dtype=np.uint8)
    data[:40] = np.frombuffer(header.pack(), np.uint8)
    for s, v in slots.items():
        data[40 + 4 * s:44 + 4 * s] = np.frombuffer(struct.pack(">i", v), np.uint8)
    base = 40 + 4 * hash_slot_num
    for n, e in entries.items():
        data[base + 20 * n:base + 20 * n + 20] = np.frombuffer(struct.pack(">iqii", *e), np.uint8)
    return ix.IndexFile.from_buffer(data, hash_slot_num, index_num)


@pytest.mark.parametrize("prev, expect", [
    (3, [300]),      # prev == current entry: stop after it
    (9, [300]),      # prev > indexCount: stop
    (-1, [300]),     # prev <= 0: stop
    (2, [300, 200, 100]),
])
def test_query_chain_stops(prev, expect):
    h = ix.IndexHeader(1000, 5000, 100, 300, 1, 4)
    f = _raw_file({3: 3}, {1: (3, 100, 0, 0), 2: (3, 200, 1, 1), 3: (3, 300, 2, prev)}, h)
    assert ix.query_key_hash([f], 3, hash_slot_num=10, index_num=10) == expect


def test_query_other_rules():
    h = ix.IndexHeader(1000, 5000, 100, 300, 1, 4)
    # collisions: same slot, other keyHash -> walked but not returned
    f = _raw_file({3: 3}, {1: (3, 100, 0, 0), 2: (13, 200, 1, 1), 3: (3, 300, 2, 2)}, h)
    assert ix.query_key_hash([f], 3, hash_slot_num=10, index_num=10) == [300, 100]
    assert ix.query_key_hash([f], 13, hash_slot_num=10, index_num=10) == [200]
    # a negative timeDiff ends the walk before the entry is looked at
    f = _raw_file({3: 3}, {1: (3, 100, 0, 0), 2: (3, 200, -1, 1), 3: (3, 300, 2, 2)}, h)
    assert ix.query_key_hash([f], 3, hash_slot_num=10, index_num=10) == [300]
    # slot value beyond indexCount, or indexCount <= 1: nothing
    f = _raw_file({3: 7}, {1: (3, 100, 0, 0)}, h)
    assert ix.query_key_hash([f], 3, hash_slot_num=10, index_num=10) == []
    f = _raw_file({3: 1}, {1: (3, 100, 0, 0)}, ix.IndexHeader(1000, 5000, 100, 300, 1, 1))
    assert ix.query_key_hash([f], 3, hash_slot_num=10, index_num=10) == []


def test_query_walks_files_newest_first_and_checks_time_ranges():
    older = _raw_file({3: 1}, {1: (3, 100, 0, 0)}, ix.IndexHeader(1000, 2000, 100, 100, 1, 2))
    newer = _raw_file({3: 1}, {1: (3, 900, 0, 0)}, ix.IndexHeader(8000, 9000, 900, 900, 1, 2))
    kw = dict(hash_slot_num=10, index_num=10)
    assert ix.query_key_hash([older, newer], 3, **kw) == [900, 100]
    assert ix.query_key_hash([older, newer], 3, begin=3000, **kw) == [900]   # older begins before 3000: stop
    assert ix.query_key_hash([older, newer], 3, end=2500, **kw) == [100]     # newer's range not matched
    assert ix.query_key_hash([older, newer], 3, max_num=1, **kw) == [900]


# -- builder ------------------------------------------------------------------------------------

def test_builder_time_diff_rules():
    kw = dict(hash_slot_num=10, index_num=10)
    # first entry against the inherited begin (previous file's end), the rest against entry 1
    start = ix.IndexHeader(1000, 1000, 50, 50, 0, 1)
    (b,) = ix.build_index_files([1, 2, 3], [60, 70, 80], [5500, 5400, 4000], start_header=start, **kw)
    f = ix.IndexFile.from_buffer(b.data, 10, 10)
    assert f.entries_table()["time_diff"].to_pylist() == [4, 0, 0]     # (5500-1000)/1000; negatives -> 0
    assert b.header == ix.IndexHeader(5500, 4000, 60, 80, 3, 4)
    # begin <= 0 -> 0; huge -> Integer.MAX_VALUE
    (b,) = ix.build_index_files([1, 1], [1, 2], [5, (1 << 62)], **kw)
    assert ix.IndexFile.from_buffer(b.data, 10, 10).entries_table()["time_diff"].to_pylist() \
        == [0, (1 << 31) - 1]
    (b,) = ix.build_index_files([1, 1], [1, 2], [0, 50_000], **kw)
    assert ix.IndexFile.from_buffer(b.data, 10, 10).entries_table()["time_diff"].to_pylist() == [0, 0]


def test_builder_capacity_and_successor():
    kw = dict(hash_slot_num=3, index_num=4)   # 3 entries per file
    built = ix.build_index_files([0, 1, 3, 4, 6, 7, 9], list(range(10, 80, 10)),
                                 [1000 * i for i in range(1, 8)], **kw)
    assert [b.puts for b in built] == [3, 3, 1] and [b.first_put for b in built] == [0, 3, 6]
    assert built[0].header == ix.IndexHeader(1000, 3000, 10, 30, 2, 4)   # slots 0,1,0 -> 2 used
    assert built[1].header == ix.IndexHeader(4000, 6000, 40, 60, 2, 4)
    f1 = ix.IndexFile.from_buffer(built[1].data, 3, 4)
    assert f1.entries_table()["time_diff"].to_pylist() == [1, 1, 2]      # entry 1 vs inherited 3000
    assert f1.entries_table()["prev_index"].to_pylist() == [0, 0, 1]
    # every key is found, newest file first
    assert ix.query_key_hash(built, 0, **kw) == [10]
    assert ix.query_key_hash(built, 9, **kw) == [70]


@given(puts=st.lists(st.tuples(st.integers(0, 40), st.integers(0, 1 << 40), st.integers(1, 10_000)),
                     min_size=1, max_size=60),
       slots=st.integers(1, 8), index_num=st.integers(2, 12), split=st.integers(0, 60))
def test_builder_parses_back_and_every_key_is_queryable(puts, slots, index_num, split):
    kh, phy, dts = (np.array(x, dtype=np.int64) for x in zip(*puts))
    ts = 1_700_000_000_000 + np.cumsum(dts)                 # store times never go backwards here
    kw = dict(hash_slot_num=slots, index_num=index_num)
    built = ix.build_index_files(kh, phy, ts, **kw)
    assert sum(b.puts for b in built) == len(kh)
    files = [ix.IndexFile.from_buffer(b.data, slots, index_num) for b in built]
    for b, f in zip(built, files):
        t = f.entries_table()
        part = slice(b.first_put, b.first_put + b.puts)
        assert t["key_hash"].to_numpy().tolist() == kh[part].tolist()
        assert t["phy_offset"].to_numpy().tolist() == phy[part].tolist()
        assert f.header == b.header and b.header.index_count == b.puts + 1
        assert b.header.hash_slot_count == len(set((kh[part] % slots).tolist()))
    for h in set(kh.tolist()):
        assert ix.query_key_hash(files, h, **kw) == [int(p) for k, p in zip(kh[::-1], phy[::-1]) if k == h]
    # continuing a partly filled file gives the same bytes as one build
    cut = min(split, len(kh))
    first = ix.build_index_files(kh[:cut], phy[:cut], ts[:cut], **kw)
    if first:
        rest = ix.build_index_files(kh[cut:], phy[cut:], ts[cut:], base=first[-1].data, **kw)
        if not rest:
            pieces = first
        elif rest[0].continued:                  # appended to the base
            pieces = first[:-1] + rest
        else:                                    # base was full: the broker starts a fresh file
            pieces = first + rest
        assert [bytes(p.data) for p in pieces] == [bytes(b.data) for b in built]


@given(puts=st.lists(st.tuples(st.integers(0, (1 << 31) - 1), st.integers(0, 1 << 50), st.integers(0, 1 << 31)),
                     min_size=1, max_size=80),
       slots=st.integers(1, 9),
       heads=st.lists(st.one_of(st.integers(-2, 130), st.integers(-(1 << 31), (1 << 31) - 1)), min_size=9, max_size=9),
       first=st.integers(1, 40), batches=st.integers(1, 4))
def test_native_puts_give_the_bytes_of_the_numpy_twin(puts, slots, heads, first, batches):
    """``_native.index_put_all`` and ``_put_entries`` on the same image: slot heads already there
    (valid, negative, past the entry count), several batches continuing one another."""
    native = _native.index_put_all        # the package build always compiles it (STORE_READER_PURE aside)
    kh, phy, td = (np.array(x, dtype=np.int64) for x in zip(*puts))
    start = ix.INDEX_HEADER_SIZE
    size = start + 4 * slots + 20 * (first + len(kh))
    images = [np.zeros(size, np.uint8) for _ in range(2)]
    for image in images:
        image[start:start + 4 * slots] = np.frombuffer(np.array(heads[:slots], ">i4").tobytes(), np.uint8)
    invalid = [0, 0]
    for part in np.array_split(np.arange(len(kh)), batches):
        if not len(part):
            continue
        n0 = first + int(part[0])
        invalid[0] += native(images[0], start, start + 4 * slots, slots, n0, kh[part], phy[part], td[part])
        invalid[1] += ix._put_entries(images[1], n0, kh[part], phy[part], td[part], slots)
    assert invalid[0] == invalid[1]
    assert bytes(images[0]) == bytes(images[1])


def test_native_puts_refuse_an_image_too_small():
    native = _native.index_put_all
    one = np.ones(1, np.int64)
    with pytest.raises(ValueError, match="outside the index file image"):
        native(np.zeros(ix.INDEX_HEADER_SIZE + 4 * 10 + 20, np.uint8), ix.INDEX_HEADER_SIZE,
               ix.INDEX_HEADER_SIZE + 40, 10, 1, one, one, one)        # entry 1 ends past the image
    with pytest.raises(ValueError, match="one length"):
        native(np.zeros(1000, np.uint8), ix.INDEX_HEADER_SIZE, ix.INDEX_HEADER_SIZE + 40, 10, 1, one,
               np.ones(2, np.int64), one)


def test_builder_rejects_bad_input():
    with pytest.raises(ValueError):
        ix.build_index_files([-1], [0], [0], hash_slot_num=10, index_num=10)
    with pytest.raises(ValueError):
        ix.build_index_files([1, 2], [0], [0], hash_slot_num=10, index_num=10)
    with pytest.raises(FileSizeError):
        ix.build_index_files([1], [0], [0], hash_slot_num=10, index_num=10, base=bytes(10))
    assert ix.build_index_files([], [], [], hash_slot_num=10, index_num=10) == []


def test_write_index_file(tmp_path):
    (b,) = ix.build_index_files([5], [7], [1000], hash_slot_num=10, index_num=10)
    p = tmp_path / ix.index_file_name(1000, "UTC")
    ix.write_index_file(p, b)
    assert p.read_bytes() == bytes(b.data)
    with pytest.raises(FileExistsError):
        ix.write_index_file(p, b)
    t = ix.read_entries(p, 10, 10)
    assert t.schema == INDEX_ENTRY.arrow()
    assert t.to_pylist() == [{"file": p.name, "entry_number": 1, "key_hash": 5, "phy_offset": 7,
                              "time_diff": 0, "prev_index": 0, "slot": 5}]


# -- fixtures -----------------------------------------------------------------------------------

@pytest.mark.parametrize("case", CASES, ids=support.case_id)
def test_fixture_headers(case):
    cfg = _config(case)
    files = _open_all(support.expected_store(*case), cfg)
    got = [f.header.to_dict() for f in files]
    want = [{"begin_timestamp": h["beginTimestamp"], "end_timestamp": h["endTimestamp"],
             "begin_phy_offset": h["beginPhyOffset"], "end_phy_offset": h["endPhyOffset"],
             "hash_slot_count": h["hashSlotCount"], "index_count": h["indexCount"]}
            for h in support.expected(*case)["afterRecovery"]["indexFiles"]]
    assert got == want
    for f in files:
        t = f.entries_table()
        assert t.num_rows == f.header.index_count - 1
        assert (t["slot"].to_numpy() == t["key_hash"].to_numpy() % cfg.maxHashSlotNum).all()
        assert (t["prev_index"].to_numpy() < t["entry_number"].to_numpy()).all()


@pytest.mark.parametrize("case", CASES, ids=support.case_id)
def test_fixture_entry_chunks_are_the_entries_in_order(case):
    """Entries read a few at a time (their pages handed back as it goes) join up to every entry, in
    entry order, from a mapped file and from bytes in memory alike."""
    cfg = _config(case)
    for f in _open_all(support.input_store(*case), cfg):
        with f:
            want = f.entries_table()
            with open(f.path, "rb") as fh:
                held = ix.IndexFile.from_buffer(fh.read(), cfg.maxHashSlotNum, cfg.maxIndexNum)
            for source in (f, held):
                chunks = list(source.entry_chunks(3))
                assert [lo for lo, _ in chunks] == list(range(1, len(want) + 1, 3))
                assert all(len(c) <= 3 for _, c in chunks)
                got = np.concatenate([c for _, c in chunks]) if chunks else np.zeros(0, ix.ENTRY_DTYPE)
                if len(want) > 4:
                    part = np.concatenate([c for _, c in source.entry_chunks(2, 3, len(want) - 1)])
                    assert part["key_hash"].tolist() == got["key_hash"][2:-2].tolist()
                assert got["key_hash"].astype(np.int32).tolist() == want["key_hash"].to_pylist()
                assert got["phy_offset"].astype(np.int64).tolist() == want["phy_offset"].to_pylist()
                assert got["prev_index"].astype(np.int32).tolist() == want["prev_index"].to_pylist()


@pytest.mark.parametrize("case", CASES, ids=support.case_id)
def test_fixture_queries(case):
    """Every (topic, key) query gives IndexService#queryOffset's raw answer, same order."""
    cfg = _config(case)
    files = _open_all(support.expected_store(*case), cfg)
    queries = support.expected(*case)["afterRecovery"]["index"]["queries"]
    got = [ix.query(files, q["topic"], q["key"], hash_slot_num=cfg.maxHashSlotNum,
                    index_num=cfg.maxIndexNum) for q in queries]
    assert got == [q["indexPhyOffsets"] for q in queries]


@pytest.mark.parametrize("case", CASES, ids=support.case_id)
def test_fixture_rebuild_each_file_from_its_entries(case):
    """(keyHash, phy, storeTs) of a file's entries, in entry order, with the inherited header -> same bytes.

    Store times are not in the file; begin + timeDiff*1000 reproduces every timeDiff, and the first
    and last entries' exact times are the header's begin/end timestamps.
    """
    cfg = _config(case)
    kw = dict(hash_slot_num=cfg.maxHashSlotNum, index_num=cfg.maxIndexNum)
    previous = None
    for f in _open_all(support.expected_store(*case), cfg):
        t = f.entries_table()
        ts = f.header.begin_timestamp + t["time_diff"].to_numpy().astype(np.int64) * 1000
        ts[0], ts[-1] = f.header.begin_timestamp, f.header.end_timestamp
        start = previous.successor() if previous is not None else ix.IndexHeader(0, 0, 0, 0, 0, 1)
        (b,) = ix.build_index_files(t["key_hash"].to_numpy(), t["phy_offset"].to_numpy(), ts,
                                    start_header=start, **kw)
        assert bytes(b.data) == bytes(f._data), f.name
        previous = f.header


def _puts_from_records(records, min_phy=0):
    """IndexService#buildIndex key order: UNIQ_KEY, then KEYS split on ' ' (non-empty); no ROLLBACK."""
    keys, phy, ts = [], [], []
    for m in records:
        if "phyOffset" not in m or m["tranType"] == 0xC or m["phyOffset"] < min_phy:
            continue
        ks = ([m["uniqKey"]] if m.get("uniqKey") is not None else []) + \
             [k for k in (m.get("keys") or "").split(" ") if k]
        for k in ks:
            keys.append(index_key(m["topic"], k))
            phy.append(m["phyOffset"])
            ts.append(m["storeTimestamp"])
    return index_key_hashes(keys), phy, ts


@pytest.mark.parametrize("case", PUT_ORDER_RECOVERABLE, ids=support.case_id)
def test_fixture_rebuild_from_commitlog_put_order(case):
    """Index built from the recovered records in commitlog order == the broker's files, byte for byte."""
    cfg = _config(case)
    kh, phy, ts = _puts_from_records(support.expected(*case)["afterRecovery"]["commitLogScan"])
    built = ix.build_index_files(kh, phy, ts, hash_slot_num=cfg.maxHashSlotNum, index_num=cfg.maxIndexNum)
    files = _open_all(support.expected_store(*case), cfg)
    assert len(built) == len(files)
    assert [bytes(b.data) == bytes(f._data) for b, f in zip(built, files)] == [True] * len(files)


@pytest.mark.parametrize("version", [v for v, s in support.scenarios() if s == "cq-all-lost"])
def test_fixture_continue_last_file(version):
    """cq-all-lost: reput from 0 appends to the kept, non-full last index file; only the record at its
    endPhyOffset passes the ``phy < endPhyOffset`` skip, so its keys are indexed a second time."""
    case = (version, "cq-all-lost")
    cfg = _config(case)
    last = _open_all(support.input_store(*case), cfg)[-1]
    kh, phy, ts = _puts_from_records(support.expected(*case)["afterRecovery"]["commitLogScan"],
                                     min_phy=last.header.end_phy_offset)
    built = ix.build_index_files(kh, phy, ts, hash_slot_num=cfg.maxHashSlotNum,
                                 index_num=cfg.maxIndexNum, base=last._data)
    assert [b.continued for b in built] == [True]
    assert bytes(built[0].data) == bytes(_open_all(support.expected_store(*case), cfg)[-1]._data)


def _mapped_kib(path) -> int:
    """Resident KiB of this process's mapping of ``path`` (``/proc/self/smaps``)."""
    rss, inside = 0, False
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            if "-" in line.split(" ", 1)[0]:
                inside = line.rstrip("\n").endswith(" " + str(path))
            elif inside and line.startswith("Rss:"):
                rss += int(line.split()[1])
    return rss


def test_entries_written_through_a_shared_map_are_handed_back_and_kept(tmp_path):
    """``unmap_entries``: the pages of entries written through a shared mapping leave the process
    (what the replay's index dispatch does behind its write position) and read back unchanged."""
    slots, index_num = 1024, 200_000
    path = tmp_path / "index"
    path.write_bytes(b"")
    os.truncate(path, ix.index_file_size(slots, index_num))
    data = np.memmap(path, np.uint8, mode="r+")
    rng = np.random.default_rng(7)
    kh, phy = rng.integers(0, 1 << 31, index_num - 1), np.arange(1, index_num, dtype=np.int64) * 100
    header = ix._put_all(data, ix.IndexHeader.first(), kh, phy, phy, slots)
    written = _mapped_kib(path)
    assert written * 1024 >= ix.ENTRY_DTYPE.itemsize * (index_num - 1)
    ix.unmap_entries(data, slots, 0, header.index_count)
    assert _mapped_kib(path) * 1024 <= 4 * slots + 2 * 4096 + ix.INDEX_HEADER_SIZE
    data.flush()
    del data
    with ix.IndexFile(path, slots, index_num) as f:
        assert f.header == header
        e = f.entries[1:index_num]
        assert np.array_equal(e["key_hash"], kh) and np.array_equal(e["phy_offset"], phy)


@pytest.fixture
def small_filesystem(tmp_path):
    """A real 1 MiB filesystem (tmpfs), where this process may mount one."""
    import subprocess

    mnt = tmp_path / "small"
    mnt.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)], capture_output=True)
    if done.returncode:
        pytest.skip(f"cannot mount a small filesystem here: {done.stderr.decode().strip()}")
    yield mnt
    subprocess.run(["umount", str(mnt)], check=True)


def test_an_index_file_the_filesystem_cannot_hold_is_refused_when_created(small_filesystem):
    """``create_index_file`` allocates the blocks: a 2 MB file on a 1 MiB filesystem is an
    ``OSError`` at once (a sparse file would be created and its writes through the map would kill
    the process later); one that fits is created whole, header first."""
    import errno

    with pytest.raises(OSError) as exc:
        ix.create_index_file(str(small_filesystem / "big"), 2_000_040, ix.IndexHeader.first())
    assert exc.value.errno == errno.ENOSPC
    path = small_filesystem / "fits"
    ix.create_index_file(str(path), 500_040, ix.IndexHeader.first())
    assert path.stat().st_size == 500_040 and path.stat().st_blocks * 512 >= 500_040
    assert ix.read_header(path) == ix.IndexHeader.first()
