"""RocksDB double-write against the real broker (``compat/src/v5/oracle/DoubleWriteRun`` via
``tests/oracle.py``: ``rocksdbCQDoubleWriteEnable`` wired as ``BrokerController`` wires it, the
RocksDB consume queue in ``consumequeue/`` beside the topic directories).

- 5.3.3 (an extra dispatcher): recovered from its file queues exactly as the broker serves them;
  the repaired store leaves RocksDB out and the broker restarted on it changes no commitlog, file
  queue or index byte.
- 5.4.0 and 5.5.1 (``CombineConsumeQueueStore``, R§15.2): kill -9 with the RocksDB queue behind,
  a queue behind by files, a dropped queue with a corrupt record where only 5.4's search reaches
  it, a torn tail after a clean shutdown (the RocksDB queue past the cut): prediction (and the
  bounded dry run's) == the broker's restart; the repaired store (with the RocksDB queue as that
  restart leaves it) loads on the normal path and its restart changes nothing.

The index is compared entry by entry, the 5.4+ tag keys (``topic#T#tags``, F§7.4) included.
About 3-4 minutes.
"""
from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path

import pytest

from jobs import recover as recover_job
from store_reader.broker import bounded, prediction, versions
from store_reader.formats import inventory, rocksdbcq
from store_reader import open_store
from store_reader.formats.indexfile import read_entries
from store_reader.formats.javahash import index_key_hash
from tests.test_controller_oracle import predicted_queues, served_queues, tree_digests

pytestmark = pytest.mark.slow

CONF = """mappedFileSizeCommitLog=65536
mappedFileSizeConsumeQueue=600
maxHashSlotNum=100
maxIndexNum=400
rocksdbCQDoubleWriteEnable=true
"""


def test_double_write_store_is_recovered_from_its_file_queues(spark, tmp_path, version="5.3.3"):
    from tests import oracle

    conf = tmp_path / "broker.conf"
    conf.write_text(CONF)
    store = tmp_path / "store"
    w = oracle.run(version, "oracle.DoubleWriteRun", "write", store, conf, 80, 5, "halt")
    assert (store / "consumequeue" / "CURRENT").is_file()
    opened = open_store(store, conf)
    assert opened.inventory.modes == (inventory.ROCKSDB_CQ_DOUBLE_WRITE,)
    pred = prediction.predict(opened, versions.V53)
    copy = tmp_path / "restarted"
    shutil.copytree(store, copy)
    got = oracle.run(version, "oracle.DoubleWriteRun", "restart", copy, conf)
    assert got["recoveryPath"] == pred.recovery_path == "abnormal"
    assert got["maxPhyOffset"] == pred.max_phy_offset == w["maxPhyOffset"]
    assert served_queues(got) == predicted_queues(pred)
    out = tmp_path / "out"
    assert recover_job.main(["--store", str(store), "--out", str(out), "--broker-config", str(conf)]) == 0
    assert not any(inventory.is_rocksdb_file(p.name) for p in (out / "consumequeue").iterdir())
    again = tmp_path / "again"
    shutil.copytree(out, again)
    queues = [p.relative_to(again).as_posix() for p in (again / "consumequeue").iterdir() if p.is_dir()]
    before = tree_digests(again, "commitlog", "index", *queues)
    after = oracle.run(version, "oracle.DoubleWriteRun", "restart", again, conf)
    assert tree_digests(again, "commitlog", "index", *queues) == before
    assert after["recoveryPath"] == "normal" and served_queues(after) == served_queues(got)


# 5.4+ (CombineConsumeQueueStore, R§15.2): each case writes the store with the real broker
# (writes: puts then "shutdown" or "halt" as a kill -9), then acts on it: "save"/"restore" the
# RocksDB queue's files (restored: the queue behind the commitlog by files), "drop" them (the
# setting just turned on, or the database lost), "corrupt<k>" a record inside commitlog file k,
# "tear<n>" the last record's last n bytes
COMBINED = {
    "kill9-rocksdb-behind": [(60, "shutdown"), "save", (120, "halt"), "restore"],
    "rocksdb-behind-files": [(20, "shutdown"), "save", (150, "shutdown"), "restore"],
    "rocksdb-dropped-corrupt": [(150, "shutdown"), "drop", "corrupt4"],
    "torn-tail-rocksdb-ahead": [(100, "shutdown"), "tear1500"],
}
# the tags the writer sets: T0..T4 (compat/src/common/oracle/Write.java)
TAG_KEYS = {index_key_hash(f"{t}#T#T{i}") for t in ("TopicA", "TopicB", "TopicBig") for i in range(5)}


def _rocksdb_files(d: Path) -> list[Path]:
    return [p for p in d.iterdir() if p.is_file() and inventory.is_rocksdb_file(p.name)]


def _combined_store(version: str, tmp_path: Path, steps) -> tuple[Path, Path, int]:
    """The store, its broker.conf, and the max phy offset its last write reported."""
    from tests import oracle

    conf = tmp_path / "broker.conf"
    conf.write_text(CONF)
    store, saved = tmp_path / "store", tmp_path / "saved"
    saved.mkdir()
    written = None
    for seed, step in enumerate(steps):
        cq = store / "consumequeue"
        if isinstance(step, tuple):
            written = oracle.run(version, "oracle.DoubleWriteRun", "write", store, conf, step[0], seed + 5, step[1])
        elif step in ("drop", "restore"):
            for p in _rocksdb_files(cq):
                p.unlink()
            for p in (_rocksdb_files(saved) if step == "restore" else []):
                shutil.copy2(p, cq / p.name)
        elif step == "save":
            for p in _rocksdb_files(cq):
                shutil.copy2(p, saved / p.name)
        elif step.startswith("corrupt"):
            with open(sorted((store / "commitlog").iterdir())[int(step[7:])], "r+b") as f:
                f.seek(30000)
                b = f.read(1)
                f.seek(30000)
                f.write(bytes([b[0] ^ 0xFF]))
        else:       # tear<n>
            end, n = written["maxPhyOffset"], int(step[4:])
            last = [p for p in sorted((store / "commitlog").iterdir()) if int(p.name) < end][-1]
            with open(last, "r+b") as f:
                f.seek(end - int(last.name) - n)
                f.write(bytes(n))
    return store, conf, written["maxPhyOffset"]


def _index_puts(paths) -> Counter:
    """(keyHash, phy) of every index entry."""
    out = Counter()
    for p in paths:
        t = read_entries(str(p), 100, 400)
        out.update(zip(t["key_hash"].to_pylist(), t["phy_offset"].to_pylist()))
    return out


@pytest.mark.parametrize("case", sorted(COMBINED))
@pytest.mark.parametrize("version", ["5.4.0", "5.5.1"])
def test_combined_double_write_store_against_the_real_broker(spark, tmp_path, version, case):
    """A 5.4+ double-write store recovered from its file consume queue as the broker does: the
    prediction (start-file search over both queues, dispatch from the lower one) equals the real
    broker's restart (path, max phy offset, every served entry, the index's entries); the
    repaired store, with the RocksDB queue as that restart leaves it, is loaded by the real broker
    on the normal path and its restart changes no commitlog, file queue or index byte."""
    from tests import oracle

    store, conf, written = _combined_store(version, tmp_path, COMBINED[case])
    opened = open_store(store, conf)
    assert opened.inventory.modes == (inventory.ROCKSDB_CQ_DOUBLE_WRITE, inventory.ROCKSDB_MESSAGE)
    pred = prediction.predict(opened, version)
    bounded_pred, _ = bounded.predict(opened, version)       # the dry run's, from the files the restart reads
    assert (bounded_pred.start_file, bounded_pred.max_phy_offset) == (pred.start_file, pred.max_phy_offset)
    assert predicted_queues(bounded_pred) == predicted_queues(pred)
    copy = tmp_path / "restarted"
    shutil.copytree(store, copy)
    got = oracle.run(version, "oracle.DoubleWriteRun", "restart", copy, conf)
    assert (got["recoveryPath"], got["maxPhyOffset"]) == (pred.recovery_path, pred.max_phy_offset)
    assert served_queues(got) == predicted_queues(pred)
    served_index = _index_puts(sorted((copy / "index").iterdir()))
    assert served_index == _index_puts([f.built or f.path for f in pred.index_files])
    assert TAG_KEYS & {k for k, _ in served_index}           # the tag keys are in the comparison
    # the damage cuts the torn record; the corrupt one in file 4 only where the search's
    # count-down reaches it (5.4: 3 files behind the file queue's start; 5.5 skips an empty queue)
    counted_down = case == "rocksdb-dropped-corrupt" and version == "5.4.0"
    assert (pred.max_phy_offset < written) == (case == "torn-tail-rocksdb-ahead" or counted_down)
    if counted_down:
        files = sorted(int(p.name) for p in (store / "commitlog").iterdir())
        assert files[4] < pred.max_phy_offset < files[5]
    out = tmp_path / "out"
    assert recover_job.main(["--store", str(store), "--out", str(out), "--broker-config", str(conf),
                             "--broker-version", version]) == 0
    assert (out / "consumequeue" / "CURRENT").is_file()
    assert rocksdbcq.stored_max_phy_offset(out / "consumequeue") == pred.max_phy_offset
    # the repair's index holds every entry the broker's does for the records it keeps, tag keys
    # too (once: a restart may put a record's keys again, the ``index.duplicate_entry`` finding)
    assert set(_index_puts(sorted((out / "index").iterdir()))) == \
        {e for e in served_index if e[1] < pred.max_phy_offset}
    again = tmp_path / "again"
    shutil.copytree(out, again)
    queues = [p.relative_to(again).as_posix() for p in (again / "consumequeue").iterdir() if p.is_dir()]
    before = tree_digests(again, "commitlog", "index", *queues)
    after = oracle.run(version, "oracle.DoubleWriteRun", "restart", again, conf)
    assert (after["loadResult"], after["recoveryPath"]) == (True, "normal")
    assert tree_digests(again, "commitlog", "index", *queues) == before
    assert served_queues(after) == served_queues(got)
