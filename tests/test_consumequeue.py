"""Consume queue files (store-format §4, §2; recovery.md §2, §5.3) against byte literals and fixtures."""
from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import support
from schemas import CONSUME_QUEUE_ENTRY
from store_reader.formats import consumequeue as cq
from store_reader.formats.brokerconf import load_broker_config
from store_reader.exceptions import (
    CorruptEntryError,
    FileSizeError,
    StrayFileError,
    UnreadableFileError,
)

pytestmark = pytest.mark.reader

# store-format §3.13 / §4: the CQ entry of the worked example record (phy 0, size 168, tags "TagA")
SPEC_ENTRY = bytes.fromhex(
    "0000000000000000"   # phy offset 0
    "000000a8"           # size 168
    "000000000027a807"   # tags code 2598919 = "TagA".hashCode()
)
# §4: pre-blank filler written by ConsumeQueue#fillPreBlank
PRE_BLANK = bytes.fromhex("0000000000000000" "7fffffff" "0000000000000000")

CASES = [c for c in support.scenarios() if support.expected(*c)["afterLoad"]["loadResult"]]


def _config(case):
    return load_broker_config(support.broker_conf(*case))


# -- byte literals ------------------------------------------------------------------------------

def test_layout_is_20_bytes():
    assert cq.CQ_STORE_UNIT_SIZE == cq.CQ_ENTRY.size == cq.CQ_ENTRY_DTYPE.itemsize == 20
    assert [cq.CQ_ENTRY_DTYPE.fields[n][1] for n in ("phy_offset", "size", "tags_code")] == [0, 8, 12]


def test_spec_entry_decodes_and_encodes():
    e = cq.decode_entries(SPEC_ENTRY)
    assert (e.phy_offset.tolist(), e.size.tolist(), e.tags_code.tolist()) == ([0], [168], [2598919])
    assert cq.CQ_ENTRY.unpack(SPEC_ENTRY) == (0, 168, 2598919)
    assert cq.encode_entries([0], [168], [2598919]) == SPEC_ENTRY
    assert cq.classify_entries(e.phy_offset, e.size, e.tags_code).tolist() == [cq.ENTRY_VALID]


def test_classification():
    raw = (PRE_BLANK
           + bytes(20)                                                        # all zero: invalid
           + bytes.fromhex("ffffffffffffffff" "00000010" "0000000000000000")  # phy -1: invalid
           + bytes.fromhex("0000000000000064" "80000000" "0000000000000000")  # size < 0: invalid
           + bytes.fromhex("0000000000000064" "00000010" "ffffffff80000000")  # tags -2^31: valid
           + bytes(20))
    e = cq.decode_entries(raw)
    assert e.tags_code.tolist()[4] == -(1 << 31)
    assert cq.classify_entries(*e).tolist() == [cq.ENTRY_PRE_BLANK, cq.ENTRY_INVALID, cq.ENTRY_INVALID,
                                                cq.ENTRY_INVALID, cq.ENTRY_VALID, cq.ENTRY_INVALID]
    # pre-blank fillers pass the broker's own validity test (recovery.md §2)
    assert cq.valid_mask(e.phy_offset, e.size).tolist() == [True, False, False, False, True, False]
    assert cq.valid_prefix_length(e.phy_offset, e.size) == 1


def test_partial_entry_is_reported_with_position():
    with pytest.raises(CorruptEntryError) as err:
        cq.decode_entries(SPEC_ENTRY + b"\0" * 7, path="/x/cq")
    assert err.value.position == 20 and "/x/cq @ byte 20" in str(err.value)


def test_file_names():
    assert cq.file_name(0) == "00000000000000000000"
    assert cq.file_name(6_000_000) == "00000000000006000000"
    assert cq.parse_file_name("/a/00000000000000000600") == 600
    with pytest.raises(StrayFileError):
        cq.parse_file_name("/a/600")


# -- writer -------------------------------------------------------------------------------------

def test_writer_pre_blank_fill(tmp_path):
    # 3 entries from queue offset 35 with 30 entries per file (600 bytes): the first file is 600
    # (offsets 30..59); slots 30..34 get pre-blanks, 35..37 the entries, the rest stays zero.
    paths = cq.write_queue(tmp_path, [100, 200, 300], [10, 20, 30], [1, -1, 0], 35, 600)
    assert [os.path.basename(p) for p in paths] == ["00000000000000000600"]
    data = open(paths[0], "rb").read()
    assert len(data) == 600
    assert data[:100] == PRE_BLANK * 5
    assert data[100:160] == bytes.fromhex(
        "0000000000000064" "0000000a" "0000000000000001"    # offset 35: phy 100, size 10, tags 1
        "00000000000000c8" "00000014" "ffffffffffffffff"    # offset 36: phy 200, size 20, tags -1
        "000000000000012c" "0000001e" "0000000000000000")   # offset 37: phy 300, size 30, tags 0
    assert data[160:] == bytes(440)


def test_writer_spans_files_and_starts_at_file_boundary(tmp_path):
    n = 65
    phy = np.arange(n, dtype=np.int64) * 1000
    paths = cq.write_queue(tmp_path, phy, np.full(n, 99), np.arange(n), 30, 600)
    # offsets 30..94 -> files 600 (30..59), 1200 (60..89), 1800 (90..94); 30 is a file start: no filler
    assert [os.path.basename(p) for p in paths] == [cq.file_name(x) for x in (600, 1200, 1800)]
    t = cq.read_queue(tmp_path, "T", 0, 600)
    assert t["queue_offset"].to_pylist() == list(range(30, 120))
    assert t["phy_offset"].to_pylist()[:n] == phy.tolist()
    assert cq.classify_entries(*cq.read_queue_file(paths[-1])).tolist() == [1] * 5 + [0] * 25


@pytest.mark.parametrize("slots, last", [
    ([SPEC_ENTRY, bytes(20), PRE_BLANK], 3),              # a zero slot inside the head stays in it
    ([SPEC_ENTRY] + [bytes(20)] * 7000, 1),               # a long zero tail, several blocks of it
    ([bytes(20)] * 9 + [bytes(19) + b"\x01"], 10),        # one non-zero byte, in the last slot
    ([bytes(20)] * 50, 0),                                # all zero
    ([], 0),                                              # empty
])
def test_head_is_every_slot_up_to_the_last_non_zero_one(tmp_path, slots, last):
    path = tmp_path / "00000000000000000000"
    path.write_bytes(b"".join(slots))
    head, count = cq.read_queue_head(path)
    assert (len(head), count) == (last, len(slots))
    assert head.tobytes() == b"".join(slots[:last])
    full = cq.read_queue_slots(path)
    assert full.tobytes() == b"".join(slots) and full.flags.writeable
    every = cq.read_queue_file(path)
    assert all((a == b).all() for a, b in zip(every, cq.decode_entries(full)))


def test_head_refuses_a_partial_entry(tmp_path):
    path = tmp_path / "00000000000000000000"
    path.write_bytes(SPEC_ENTRY + b"\x01" * 7)
    with pytest.raises(CorruptEntryError, match="7 trailing bytes") as err:
        cq.read_queue_head(path)
    assert (err.value.path, err.value.position) == (str(path), 20)


def test_writer_edge_cases(tmp_path):
    assert cq.write_queue(tmp_path / "none", [], [], [], 7, 600) == []
    assert not (tmp_path / "none").exists() or not os.listdir(tmp_path / "none")
    p = cq.write_queue(tmp_path, [1], [2], [3], 0, 600)
    with pytest.raises(FileExistsError):
        cq.write_queue(tmp_path, [1], [2], [3], 0, 600)
    assert cq.write_queue(tmp_path, [4], [5], [6], 0, 600, overwrite=True) == p
    with pytest.raises(ValueError):
        cq.write_queue(tmp_path, [1], [2], [3], 0, 610)
    with pytest.raises(ValueError):
        cq.write_queue(tmp_path, [1, 2], [2], [3], 0, 600)


@given(entries=st.lists(st.tuples(st.integers(-(1 << 63), (1 << 63) - 1),
                                  st.integers(-(1 << 31), (1 << 31) - 1),
                                  st.integers(-(1 << 63), (1 << 63) - 1)), min_size=1, max_size=80),
       first=st.integers(0, 200), per_file=st.integers(1, 20))
def test_write_then_read_round_trip(tmp_path_factory, entries, first, per_file):
    d = tmp_path_factory.mktemp("cq")
    size = per_file * 20
    phy, sz, tags = (list(x) for x in zip(*entries))
    paths = cq.write_queue(d, phy, sz, tags, first, size)
    files = cq.list_queue_files(d, size)
    assert [f.path for f in files] == paths
    assert all(f.size == size and f.start % size == 0 for f in files)
    t = cq.read_queue(d, "T", 3, size, files=files)
    q = t["queue_offset"].to_numpy()
    body = (q >= first) & (q < first + len(entries))
    assert t["phy_offset"].to_numpy()[body].tolist() == phy
    assert t["size"].to_numpy()[body].tolist() == sz
    assert t["tags_code"].to_numpy()[body].tolist() == tags
    kinds = cq.classify_entries(t["phy_offset"].to_numpy(), t["size"].to_numpy(), t["tags_code"].to_numpy())
    assert (kinds[q < first] == cq.ENTRY_PRE_BLANK).all()       # fillers before the first entry
    assert (kinds[q >= first + len(entries)] == cq.ENTRY_INVALID).all()  # zeros after the last
    assert q[0] == files[0].start // 20 and files[0].start <= first * 20 < files[0].start + size


# -- listing ------------------------------------------------------------------------------------

def test_list_queue_files_errors(tmp_path):
    q = tmp_path / "q"
    q.mkdir()
    (q / "00000000000000000000").write_bytes(bytes(600))
    (q / "00000000000000000600").write_bytes(bytes(300))
    with pytest.raises(FileSizeError) as err:
        cq.list_queue_files(q, 600)
    assert "300" in str(err.value) and "600" in str(err.value) and "00000000000000000600" in str(err.value)

    (q / "00000000000000000600").write_bytes(b"")
    with pytest.raises(FileSizeError):             # 4.9.7: a zero-length last file fails the load too
        cq.list_queue_files(q, 600)
    assert [f.name for f in cq.list_queue_files(q, 600, rocketmq5=True)] == ["00000000000000000000"]

    (q / "sub").mkdir()
    with pytest.raises(FileSizeError):              # no longer last: refused by its length in 5.x too
        cq.list_queue_files(q, 600, rocketmq5=True)
    (q / "00000000000000000600").unlink()
    with pytest.raises(StrayFileError, match="does not skip directories"):
        cq.list_queue_files(q, 600)
    assert [f.name for f in cq.list_queue_files(q, 600, rocketmq5=True)] == ["00000000000000000000"]
    (q / "sub").rmdir()
    (q / "00000000000000000600.bak").write_bytes(bytes(600))
    with pytest.raises(StrayFileError, match="NumberFormatException") as err:
        cq.list_queue_files(q, 600)
    assert err.value.path.endswith("00000000000000000600.bak")
    (q / "00000000000000000600.bak").unlink()

    (q / "00000000000000001200").symlink_to(tmp_path / "gone")   # dangling: cannot be read
    with pytest.raises(UnreadableFileError):
        cq.list_queue_files(q, 600)
    with pytest.raises(UnreadableFileError):
        cq.read_queue_file(q / "00000000000000001200")
    assert cq.list_queue_files(tmp_path / "missing", 600) == []


def test_gaps_are_reported_not_rejected(tmp_path):
    for start in (0, 600, 1800):
        (tmp_path / cq.file_name(start)).write_bytes(bytes(600))
    files = cq.list_queue_files(tmp_path, 600)
    assert cq.file_start_offsets(files).tolist() == [0, 600, 1800]
    assert [(a.start, b.start) for a, b in cq.find_gaps(files, 600)] == [(600, 1800)]


def test_list_queues(tmp_path):
    root = tmp_path
    for d in ("TopicA/0", "TopicA/12", "TopicA/+3", "TopicA/x1", "TopicA/99999999999", "%RETRY%g/0"):
        (root / "consumequeue" / d).mkdir(parents=True)
    (root / "consumequeue" / "TopicA" / "7").write_bytes(b"")    # a plain file is not a queue dir
    (root / "consumequeue" / "stray.txt").write_bytes(b"")
    got = [(r.topic, r.queue_id) for r in cq.list_queues(root)]
    assert got == [("%RETRY%g", 0), ("TopicA", 0), ("TopicA", 3), ("TopicA", 12)]
    assert cq.list_queues(tmp_path / "nothing") == []


@pytest.mark.parametrize("marker", ["CURRENT", "000005.sst"])
def test_rocksdb_files_beside_the_queues_are_skipped(tmp_path, marker):
    """A double-write RocksDB consume queue shares consumequeue/ with the file queues: its files
    are plain files the broker's file queue load skips (the refusal of a store served from
    RocksDB is ``inventory``'s: tests/test_inventory.py)."""
    (tmp_path / "consumequeue" / "TopicA" / "0").mkdir(parents=True)
    (tmp_path / "consumequeue" / marker).write_bytes(b"x")
    assert [(r.topic, r.queue_id) for r in cq.list_queues(tmp_path)] == [("TopicA", 0)]


def test_read_queue_table_schema(tmp_path):
    cq.write_queue(tmp_path, [5, 6], [7, 8], [9, 10], 1, 60)
    t = cq.read_queue(tmp_path, "TopicX", 2, 60)
    assert t.schema == CONSUME_QUEUE_ENTRY.arrow()
    assert t.to_pylist()[1] == {"topic": "TopicX", "queue_id": 2, "queue_offset": 1, "phy_offset": 5,
                                "size": 7, "tags_code": 9, "file": "00000000000000000000", "position": 20}
    assert cq.read_queue(tmp_path / "empty", "T", 0, 60).num_rows == 0


# -- fixtures -----------------------------------------------------------------------------------

@pytest.mark.parametrize("case", CASES, ids=support.case_id)
def test_fixture_queues_decode_to_expected_entries(case):
    """expected-store's CQ files hold exactly the broker's entries between minOffset and maxOffset."""
    root = support.expected_store(*case)
    cfg = _config(case)
    expected = support.expected(*case)["afterRecovery"]["consumeQueues"]
    found = set()
    for ref in cq.list_queues(root):
        exp = expected[ref.topic][str(ref.queue_id)]   # every queue on disk is one the broker loaded
        found.add((ref.topic, str(ref.queue_id)))
        t = cq.read_queue(ref.path, ref.topic, ref.queue_id, cfg.cq_file_size)
        assert t.schema == CONSUME_QUEUE_ENTRY.arrow()
        q = t["queue_offset"].to_numpy()
        sel = (q >= exp["minOffset"]) & (q < exp["maxOffset"])
        got = np.stack([q[sel], t["phy_offset"].to_numpy()[sel], t["size"].to_numpy()[sel],
                        t["tags_code"].to_numpy()[sel]], axis=1).tolist()
        assert got == exp["entries"], (ref.topic, ref.queue_id)
        # position/file columns agree with the logic offset
        starts = np.array([int(n) for n in t["file"].to_pylist()])
        assert (starts + t["position"].to_numpy() == q * 20).all()
    missing = {(tp, qid) for tp, qs in expected.items() for qid, e in qs.items()
               if e["maxOffset"] > 0 and (tp, qid) not in found}
    assert not missing


@pytest.mark.parametrize("case", CASES, ids=support.case_id)
def test_fixture_queues_rewrite_byte_identical(case, tmp_path):
    """Re-writing the recovered entries with write_queue gives the broker's bytes.

    The files are compared whole wherever the broker's file is zero past the last entry. Where
    recovery truncated a queue, the bytes after the new end are stale (not zeroed on disk,
    recovery.md §5.1, E#10); there the entries region must match and the writer's tail is zero.
    """
    root = support.expected_store(*case)
    cfg = _config(case)
    fs = cfg.cq_file_size
    expected = support.expected(*case)["afterRecovery"]["consumeQueues"]
    for ref in cq.list_queues(root):
        files = cq.list_queue_files(ref.path, fs)
        if not files:
            continue
        end = expected[ref.topic][str(ref.queue_id)]["maxOffset"] * 20      # logic end of data
        first = files[0].start                                               # written from the file start
        t = cq.read_queue(ref.path, ref.topic, ref.queue_id, fs, files=files)
        keep = t["queue_offset"].to_numpy() < end // 20
        out = tmp_path / ref.topic / str(ref.queue_id)
        written = cq.write_queue(out, t["phy_offset"].to_numpy()[keep], t["size"].to_numpy()[keep],
                                 t["tags_code"].to_numpy()[keep], first // 20, fs)
        real = {f.name: f for f in files}
        for path in written:
            mine = open(path, "rb").read()
            theirs = open(real.pop(os.path.basename(path)).path, "rb").read()
            start = int(os.path.basename(path))
            cut = max(0, min(fs, end - start))
            assert mine[:cut] == theirs[:cut], (ref.topic, ref.queue_id, path)
            assert mine[cut:] == bytes(fs - cut)
            if any(theirs[cut:]):
                stale = cq.decode_entries(theirs[cut:])   # stale entries only, never a pre-blank
                assert (cq.classify_entries(*stale) != cq.ENTRY_PRE_BLANK).all()
        # files the writer did not produce may only hold stale data past the end
        assert all(f.start >= end for f in real.values())


@pytest.mark.parametrize("version", [v for v, s in support.scenarios() if s == "cq-file-short"])
def test_fixture_short_cq_file_refused(version):
    """cq-file-short: a 300-byte CQ file with a 600-byte configuration -> the broker refuses to load."""
    root = support.input_store(version, "cq-file-short")
    cfg = _config((version, "cq-file-short"))
    with pytest.raises(FileSizeError) as err:
        for ref in cq.list_queues(root):
            cq.list_queue_files(ref.path, cfg.cq_file_size)
    assert err.value.path.endswith(os.path.join("TopicA", "0", "00000000000000000600"))
    assert "300" in err.value.reason and "600" in err.value.reason
