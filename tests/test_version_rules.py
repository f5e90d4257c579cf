"""The recovery rules that changed after 5.3.3 (issue 38 part 3, R§12): small synthetic stores on
which the 5.3 and the 5.4 / 5.5 predictions differ, each test saying which rule makes them differ.

Every store is written once per module (``store_reader.testing.synthetic``, 64 KiB commitlog files) and
copied per test before it is damaged.
"""
from __future__ import annotations

import shutil
import struct

import pytest

from store_reader import open_store
from store_reader.broker import indexservice, prediction, versions
from store_reader.formats.checkpoint import read_checkpoint, write_checkpoint
from store_reader.testing.synthetic import CrashSpec, SyntheticStoreSpec, write_store

pytestmark = [pytest.mark.reader]

SEGMENT = 64 << 10
FILES = 14                      # more than commitLogRecoverMaxNum (10)
V53, V54, V55 = versions.V53, versions.V54, versions.V55


def _spec(broker: str, **kw) -> SyntheticStoreSpec:
    return SyntheticStoreSpec(total_bytes=SEGMENT * (FILES - 1), segment_size=SEGMENT, cq_file_size=6000,
                              message_size=512, topics=(("TopicA", 2), ("TopicB", 1)), broker=broker,
                              seed=5, **kw)


def write_stores(base):
    """name -> (root, info): a clean shutdown's store, and a crashed one (abort, stale checkpoint)
    written by a 5.5 broker at 50 messages/s, so that the checkpoint's 3 s margin spans files."""
    clean = CrashSpec(abort=False, stale_checkpoint=False, preallocated_next=False)
    out = {"clean": write_store(base / "clean", _spec("5.x"), clean),
           "crashed-5.5": write_store(base / "crashed", _spec("5.5", messages_per_second=50),
                                      CrashSpec(checkpoint_fraction=0.7))}
    return {k: (v.root, v) for k, v in out.items()}


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    return write_stores(tmp_path_factory.mktemp("version-rules"))


def _copy(stores, name, tmp_path):
    root, info = stores[name]
    dest = tmp_path / name
    shutil.copytree(root, dest)
    return dest, info


def _predict(root, version, **conf):
    store = open_store(root, root / "broker.conf")
    if conf:
        store.config = store.config.replace(**conf)
    return prediction.predict(store, version)


def _files(root):
    return sorted(p.name for p in (root / "commitlog").iterdir())


def _flip(root, phy: int, at: int) -> None:
    """XOR one byte ``at`` bytes into the record at ``phy`` (8: its BODYCRC: the CRC check fails)."""
    path = root / "commitlog" / f"{phy - phy % SEGMENT:020d}"
    with open(path, "r+b") as fh:
        fh.seek(phy % SEGMENT + at)
        b = fh.read(1)
        fh.seek(phy % SEGMENT + at)
        fh.write(bytes([b[0] ^ 0xFF]))


def _records_in(info, segment: str):
    start = int(segment)
    return [r for r in info.messages.to_pylist() if start <= r["phy_offset"] < start + SEGMENT]


def test_versions_and_spellings():
    assert versions.resolve_version("5.x") == V55 and versions.resolve_version("4.9.8") == versions.V49
    assert versions.versions_of("all") == list(versions.VERSIONS)
    assert versions.versions_of("5.3,5.5.1,5.x") == ["5.3", "5.5.1"]          # one per version
    with pytest.raises(ValueError):
        versions.resolve_version("5.2")


def test_normal_recovery_looks_back_ten_files_at_most(stores, tmp_path):
    """[5.4] commitLogRecoverMaxNum (default 10): with every consume queue gone, no file's first
    record is at or below the CQ max (-1), so 5.3.3 starts at the first file while 5.4/5.5 take
    the 10th file from the end unmatched: the records before it never get consume queue entries
    (the queue starts with pre-blank fillers)."""
    root, info = _copy(stores, "clean", tmp_path)
    shutil.rmtree(root / "consumequeue")
    names = _files(root)
    assert len(names) == FILES
    p53, p54, p55 = (_predict(root, v) for v in (V53, V54, V55))
    assert p53.start_file == names[0]
    assert p54.start_file == p55.start_file == names[FILES - 10]
    assert p53.max_phy_offset == p54.max_phy_offset == info.written_end
    q53, q54 = p53.consume_queues[("TopicA", 0)], p54.consume_queues[("TopicA", 0)]
    assert q53.max_offset == q54.max_offset and q53.min_offset == 0
    first_kept = min(r["queue_offset"] for r in info.messages.to_pylist()
                     if (r["topic"], r["queue_id"]) == ("TopicA", 0) and r["phy_offset"] >= int(names[FILES - 10])
                     and r["kind"] not in ("prepared", "rollback"))          # no CQ entry (queue offset 0)
    assert q54.min_offset == first_kept > 0
    # a larger commitLogRecoverMaxNum reaches back further; <= 0 means 10
    assert _predict(root, V54, commitLogRecoverMaxNum=20).start_file == names[0]
    assert _predict(root, V54, commitLogRecoverMaxNum=0).start_file == names[FILES - 10]


def test_abnormal_recovery_looks_back_ten_files_at_most(stores, tmp_path):
    """[5.4] the same limit on the abnormal path: a missing checkpoint (all zeros) matches no
    file; 5.3.3 re-dispatches from the first file, 5.4/5.5 from the 10th-last. The abnormal load
    dropped every index file (their end is after the zero indexMsgTimestamp), so only the records
    5.4 re-dispatches are found by key again."""
    root, info = _copy(stores, "clean", tmp_path)
    (root / "checkpoint").unlink()
    (root / "abort").write_bytes(b"")
    names = _files(root)
    p53, p54, p55 = (_predict(root, v) for v in (V53, V54, V55))
    assert p53.recovery_path == "abnormal" and p53.start_file == names[0]
    assert p54.start_file == p55.start_file == names[FILES - 10]
    assert p53.max_phy_offset == p54.max_phy_offset == p55.max_phy_offset
    store = open_store(root, root / "broker.conf")
    old = next(r for r in info.messages.to_pylist() if r["keys"] and r["phy_offset"] < int(names[1]))
    key = old["keys"].split(" ")[0]
    assert old["phy_offset"] in indexservice.query_message(p53, store.config, old["topic"], key)
    assert old["phy_offset"] not in indexservice.query_message(p54, store.config, old["topic"], key)


def test_normal_start_file_needs_a_valid_first_record(stores, tmp_path):
    """[5.4] the normal path's start file is the newest whose first record passes the full check,
    CRC included (5.3.3: the newest starting at or below the CQ max, its first record unread). A
    bad CRC on the newest file's first record sends 5.4 one file back, where a second bad record
    (in a file 5.3.3 never reads) now ends the commitlog."""
    root, info = _copy(stores, "clean", tmp_path)
    names = _files(root)
    _flip(root, int(names[-1]), 8)
    second = _records_in(info, names[-2])[len(_records_in(info, names[-2])) // 2]
    _flip(root, second["phy_offset"], 8)
    p53, p54, p55 = (_predict(root, v) for v in (V53, V54, V55))
    assert p53.start_file == names[-1] and p53.max_phy_offset == int(names[-1])
    assert p54.start_file == p55.start_file == names[-2]
    assert p54.max_phy_offset == p55.max_phy_offset == second["phy_offset"]
    # without the checkCRCOnRecover the first record passes: 5.4 starts where 5.3.3 does
    assert _predict(root, V54, checkCRCOnRecover=False).start_file == names[-1]


def test_abnormal_start_file_from_the_checkpoint_logics_physical_offset(stores, tmp_path):
    """[5.5] abnormal recovery starts at the newest file whose first record's PHYSICALOFFSET is at
    or below the checkpoint's logicsPhysicalOffset (5.3.3/5.4: STORETIMESTAMP at or below
    min(physic, logics) - 3 s, files earlier). A corrupt record between the two start files ends
    5.3's and 5.4's commitlog there; 5.5 never reads it and keeps everything."""
    root, info = _copy(stores, "crashed-5.5", tmp_path)
    ckpt = read_checkpoint(root)
    names = _files(root)
    assert ckpt.logics_physical_offset > 0
    p53, p54, p55 = (_predict(root, v) for v in (V53, V54, V55))
    i53, i54, i55 = (names.index(p.start_file) for p in (p53, p54, p55))
    assert i53 == i54 < i55
    assert int(names[i55]) <= ckpt.logics_physical_offset < int(names[i55 + 1])
    victim = _records_in(info, names[i55 - 1])[3]
    _flip(root, victim["phy_offset"], 8)
    p53, p54, p55 = (_predict(root, v) for v in (V53, V54, V55))
    assert p53.max_phy_offset == p54.max_phy_offset == victim["phy_offset"]
    assert p55.max_phy_offset == info.truncation_offset > victim["phy_offset"]
    # a checkpoint without logicsPhysicalOffset (an older broker's): STORETIMESTAMP at or below
    # logicsMsgTimestamp, with no 3 s margin: still later than 5.4's start
    write_checkpoint(root / "checkpoint", ckpt.__class__(ckpt.physic_msg_timestamp, ckpt.logics_msg_timestamp,
                                                         ckpt.index_msg_timestamp))
    p55 = _predict(root, V55)
    first_ts = [r["store_timestamp"] for r in (_records_in(info, n)[0] for n in names if _records_in(info, n))]
    want = max(i for i, ts in enumerate(first_ts) if ts <= ckpt.logics_msg_timestamp)
    assert names.index(p55.start_file) == want > i54


def test_post_recovery_checkpoint_holds_the_logics_physical_offset(stores, tmp_path):
    """[5.5] the recovery's consume queue puts move the checkpoint's logicsPhysicalOffset to the
    last record put (5.3/5.4 have no such field: unchanged)."""
    root, info = _copy(stores, "crashed-5.5", tmp_path)
    p54, p55 = _predict(root, V54), _predict(root, V55)
    last_put = max(r["phy_offset"] for r in info.messages.to_pylist()
                   if r["survived"] and r["kind"] in ("normal",) and r["phy_offset"] < p55.max_phy_offset)
    assert p55.checkpoint.logics_physical_offset >= last_put
    assert p54.checkpoint.logics_physical_offset == read_checkpoint(root).logics_physical_offset


def test_offset_check_on_abnormal_recovery(stores, tmp_path):
    """[5.5] checkCommitLogOffsetOnRecover (#10018, default false): on the abnormal path a VALID
    record whose stored PHYSICALOFFSET lies outside its file ends the commitlog there."""
    root, info = _copy(stores, "crashed-5.5", tmp_path)
    p55 = _predict(root, V55)
    newest = [n for n in _files(root) if _records_in(info, n)][-1]    # both paths' walks read it
    victim = _records_in(info, newest)[-1]
    at = victim["phy_offset"]
    path = root / "commitlog" / newest
    with open(path, "r+b") as fh:                  # PHYSICALOFFSET (byte 28): two files too far
        fh.seek(at % SEGMENT + 28)
        fh.write(struct.pack(">q", at + 2 * SEGMENT))
    assert _predict(root, V55).max_phy_offset == p55.max_phy_offset             # off by default
    assert _predict(root, V55, checkCommitLogOffsetOnRecover=True).max_phy_offset == at
    assert _predict(root, V54, checkCommitLogOffsetOnRecover=True).max_phy_offset == p55.max_phy_offset
    (root / "abort").unlink()                                                   # abnormal path only
    normal = _predict(root, V55, checkCommitLogOffsetOnRecover=True)
    assert int(normal.start_file) <= at and normal.max_phy_offset == p55.max_phy_offset


def test_negative_blank_marker_size(stores, tmp_path):
    """[5.5.1] checkMessageAndReturnSize rejects a negative TOTALSIZE before the magic: a blank
    marker whose size turned negative ends the commitlog (5.3/5.4: it still moves on to the next
    file). No checkpoint: the abnormal walk starts 10 files back and passes the marker."""
    root, info = _copy(stores, "clean", tmp_path)
    names = _files(root)
    last = _records_in(info, names[-2])[-1]
    marker = last["phy_offset"] + last["total_size"]
    path = root / "commitlog" / names[-2]
    with open(path, "r+b") as fh:
        fh.seek(marker % SEGMENT)
        fh.write(struct.pack(">i", -8))
    (root / "checkpoint").unlink()
    (root / "abort").write_bytes(b"")
    p54, p55 = _predict(root, V54), _predict(root, V55)
    assert p54.max_phy_offset == info.written_end
    assert p55.max_phy_offset == marker


def test_accelerated_recovery_is_refused_by_name(stores, tmp_path):
    """[5.5] enableAcceleratedRecovery starts the abnormal walk inside the start file: not modelled,
    so a 5.5 prediction of a crashed store with it on is refused naming the setting (5.4.0 applies
    it to RocksDB consume queues only, which are refused anyway)."""
    from store_reader.exceptions import UnsupportedStoreError

    root, _ = _copy(stores, "crashed-5.5", tmp_path)
    with pytest.raises(UnsupportedStoreError, match="enableAcceleratedRecovery"):
        _predict(root, V55, enableAcceleratedRecovery=True)
    assert _predict(root, V54, enableAcceleratedRecovery=True).load_result


@pytest.mark.parametrize("setting", ["indexRocksDBEnable", "transRocksDBEnable"])
def test_rocksdb_dispatch_stores_are_refused_by_name(stores, tmp_path, setting):
    """[5.5.1] a RocksDB index or transaction store registers as a dispatch store: the recovery
    dispatches again from the lowest of their offsets (DefaultMessageStore#recover). Not modelled,
    so refused naming the setting on both paths; 5.4 has no such stores."""
    from store_reader.exceptions import UnsupportedStoreError

    root, _ = _copy(stores, "crashed-5.5", tmp_path)
    with pytest.raises(UnsupportedStoreError, match=setting.replace("Enable", "")):
        _predict(root, V55, **{setting: True})
    (root / "abort").unlink(missing_ok=True)
    with pytest.raises(UnsupportedStoreError, match="commitLogDispatchStores"):
        _predict(root, V55, **{setting: True})
    assert _predict(root, V54, **{setting: True}).load_result


def test_version_guessed_from_the_store(stores):
    """Without a version: 5.5 when the checkpoint holds a logicsPhysicalOffset (only 5.5 writes
    one), else 5.3 for a 5.x store (5.3.3, 5.4.0 and a young 5.5 store look alike)."""
    crashed, clean = (open_store(stores[k][0], stores[k][0] / "broker.conf") for k in ("crashed-5.5", "clean"))
    assert (crashed.broker_version(), clean.broker_version()) == (V55, V53)
    assert prediction.predict(crashed).broker_version == V55
