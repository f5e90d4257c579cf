"""Consume queues kept only in RocksDB (``storeType=defaultRocksDB``) against the real 5.3.3, 5.4.0
and 5.5.1 brokers (``compat/src/v5/oracle/RocksDBRun`` via ``tests/oracle.py``: the broker's
``RocksDBMessageStore``): the RocksDB queue is read read-only (``store_reader.formats.rocksdbcq``), the
restart predicted from it (R§15.1) and compared with what the restarted broker serves; the input
store is left byte for byte as it was; the dry run's audit reads the RocksDB units as the queues'
disk view and the committed offsets from RocksDB; ``--out`` writes the RocksDB queue as the
broker's restart leaves it (with ``--keep-consumer-offsets``: RocksDB offsets are not rewritten,
refused by name without it) and the real broker restarted on the repaired store changes nothing.
About 2.5 minutes (the Spark session included).
"""
from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from jobs import dump
from jobs import recover as recover_job
from store_reader.formats import config, inventory, rocksdbcq
from store_reader import open_store
from store_reader.broker import prediction, versions
from store_reader.exceptions import UnsupportedStoreError
from tests.test_controller_oracle import predicted_queues, served_queues

pytestmark = [pytest.mark.slow, pytest.mark.oracle]

CONF = """mappedFileSizeCommitLog=65536
mappedFileSizeConsumeQueue=600
maxHashSlotNum=100
maxIndexNum=400
storeType=defaultRocksDB
"""
RULES = {"5.3.3": versions.V53, "5.4.0": versions.V54, "5.5.1": versions.V55}


def digests(root: Path) -> dict[str, str]:
    """Every file of the tree and its hash (names included: a file added shows)."""
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def repaired_restart(version: str, store: Path, conf: Path, tmp_path: Path, got: dict) -> None:
    """``--out`` (offsets kept: this project does not rewrite RocksDB offsets) writes the RocksDB
    queue as the broker's restart ``got`` left it, and no file queue; the real broker loads the
    repaired store on the normal path, serves what ``got`` served, and changes no commitlog or
    index byte."""
    from tests import oracle

    out = tmp_path / "out"
    assert recover_job.main(["--store", str(store), "--out", str(out), "--broker-config", str(conf),
                             "--broker-version", RULES[version], "--keep-consumer-offsets"]) == 0
    assert not [p for p in (out / "consumequeue").iterdir() if p.is_dir()]
    again = tmp_path / "again"
    shutil.copytree(out, again)
    before = {k: v for k, v in digests(again).items() if k.startswith(("commitlog/", "index/"))}
    after = oracle.run(version, "oracle.RocksDBRun", "restart", again, conf)
    assert (after["loadResult"], after["recoveryPath"]) == (True, "normal")
    assert {k: v for k, v in digests(again).items() if k.startswith(("commitlog/", "index/"))} == before
    assert served_queues(after) == served_queues(got)
    mins = {(t, q): e["minOffset"] for t, qs in got["queues"].items() for q, e in qs.items()}
    assert {(t, q): e["minOffset"] for t, qs in after["queues"].items() for q, e in qs.items()} == mins


def compare(pred: prediction.Prediction, got: dict) -> None:
    """The broker's restart, as RocksDBRun printed it, against the prediction."""
    assert got["loadResult"] and pred.load_result
    assert got["recoveryPath"] == pred.recovery_path
    assert got["maxPhyOffset"] == pred.max_phy_offset
    predicted = {k: v for k, v in predicted_queues(pred).items() if v}
    assert served_queues(got) == predicted
    mins = {(t, int(q)): e["minOffset"] for t, qs in got["queues"].items() for q, e in qs.items()}
    assert mins == {k: pred.consume_queues[k].min_offset for k in predicted}


@pytest.mark.parametrize("version", list(RULES))
def test_rocksdb_queue_after_a_kill_is_predicted(spark, tmp_path, capsys, version):
    """80 puts, the RocksDB queue flushed, 40 more, kill -9: RocksDB (no WAL) holds what it
    flushed; the broker starts from the file its stored max phy offset points into and
    dispatches again from there."""
    from tests import oracle

    conf = tmp_path / "broker.conf"
    conf.write_text(CONF)
    store = tmp_path / "store"
    w = oracle.run(version, "oracle.RocksDBRun", "write", store, conf, 80, 5, "halt", 40)
    assert (store / "consumequeue" / "CURRENT").is_file() and (store / "abort").is_file()
    before = digests(store)
    db = rocksdbcq.read_consume_queue(store / "consumequeue")
    assert 0 < db.max_phy_offset < w["maxPhyOffset"]
    units = sum(len(q.units) for q in db.queues.values())
    assert 0 < units < len(w["written"])
    opened = open_store(store, conf)
    assert opened.inventory.cq_served_by == "rocksdb" and opened.inventory.has(inventory.ROCKSDB_CQ)
    pred = prediction.predict(opened, RULES[version])
    assert pred.max_phy_offset_of_consume_queue == db.max_phy_offset
    capsys.readouterr()
    assert dump.main([str(store), "--json", "--broker-config", str(conf)]) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines() if x.startswith("{")]
    units = {(x["topic"], x["queue_id"]): x["units"] for x in lines if x["type"] == "rocksdb_consume_queue"}
    assert units == {k: len(q.units) for k, q in db.queues.items()}
    assert digests(store) == before              # read-only: not even rocksdict's own file
    copy = tmp_path / "restarted"
    shutil.copytree(store, copy)
    got = oracle.run(version, "oracle.RocksDBRun", "restart", copy, conf)
    compare(pred, got)
    assert sum(map(len, served_queues(got).values())) == len(w["written"])
    repaired_restart(version, store, conf, tmp_path, got)


# the jobs (offsets, audit, --out) run on one release's store: they read it the same for each
@pytest.mark.parametrize("version, jobs", [("5.3.3", True), ("5.4.0", False), ("5.5.1", False)])
def test_rocksdb_queue_ahead_of_a_cut_commitlog(spark, tmp_path, capsys, version, jobs):
    """A clean shutdown (every unit in RocksDB), then the commitlog's tail lost: the broker's
    truncateDirty moves each queue's max offset back below the cut (the units stay in RocksDB,
    no longer served). The dry run's audit reads the committed offsets from RocksDB
    (config/consumerOffsets, written by the release's ConfigRocksDBStorage); --out is refused
    naming the RocksDB queue."""
    from tests import oracle

    conf = tmp_path / "broker.conf"
    conf.write_text(CONF)
    store = tmp_path / "store"
    w = oracle.run(version, "oracle.RocksDBRun", "write", store, conf, 80, 5, "shutdown")
    last = max(p.name for p in (store / "commitlog").iterdir())
    start = int(last)
    cut = min(r["phy"] for r in w["written"] if r["phy"] > start + 15000)
    with open(store / "commitlog" / last, "r+b") as f:
        f.seek(cut - start)
        f.write(b"\0" * (65536 - (cut - start)))
    ends = {}
    for r in w["written"]:
        ends[(r["topic"], r["queueId"])] = max(ends.get((r["topic"], r["queueId"]), 0), r["queueOffset"] + 1)
    before = digests(store)
    pred = prediction.predict(open_store(store, conf), RULES[version])
    assert pred.max_phy_offset == cut and pred.max_phy_offset_of_consume_queue == w["maxPhyOffset"]
    assert pred.cq_truncated
    copy = tmp_path / "restarted"
    shutil.copytree(store, copy)
    got = oracle.run(version, "oracle.RocksDBRun", "restart", copy, conf)
    compare(pred, got)
    kept = sum(1 for r in w["written"] if r["phy"] < cut)
    assert sum(map(len, served_queues(got).values())) == kept < len(w["written"])
    assert digests(store) == before
    repaired_restart(version, store, conf, tmp_path, got)
    if not jobs:
        return
    # committed offsets as RocksDBConsumerOffsetManager keeps them: each queue's end before the cut
    by_topic: dict[str, list[str]] = {}
    for (t, q), n in sorted(ends.items()):
        by_topic.setdefault(t, []).append(f"{q}:{n}")
    oracle.run(version, "oracle.RocksDBOffsetsRun", store / "config" / "consumerOffsets",
               *(f"{t}@g1={','.join(qs)}" for t, qs in by_topic.items()))
    before = digests(store)
    out = tmp_path / "refused"
    assert recover_job.main(["--store", str(store), "--out", str(out), "--broker-config", str(conf)]) == 2
    assert not out.exists()         # offsets in RocksDB: --out needs --keep-consumer-offsets
    # the dry run's audit reads the RocksDB units as the queue's disk view: those past the cut
    report = recover_job.recover(spark, str(store), None, str(conf), version, dry_run=True)
    queue_rows = report.findings.tables["queue_findings"].to_pylist()
    kinds = {r["kind"] for r in queue_rows}
    assert "queue_missing" not in kinds and "redispatched" not in kinds
    beyond = sum(r["count"] for r in queue_rows if r["kind"] == "removed_beyond_truncation")
    assert beyond == len(w["written"]) - kept
    # the committed offsets come from RocksDB; the queue ends after the restart are the real broker's
    offsets = report.findings.tables["consumer_offset_findings"].to_pylist()
    assert {(r["topic"], r["queue_id"]): r["committed_offset"] for r in offsets} == ends
    assert {r["source"] for r in offsets} == {config.ROCKSDB_CONSUMER_OFFSETS}
    served = {(t, int(q)): e["maxOffset"] for t, qs in got["queues"].items() for q, e in qs.items()}
    assert {(r["topic"], r["queue_id"]): r["max_after"] for r in offsets} == served
    assert sum(1 for r in offsets if r["committed_offset"] > r["max_after"]) == \
        sum(1 for k in ends if ends[k] > served[k]) > 0
    assert digests(store) == before
    # dump --verify takes the RocksDB queue's max phy offset for the cut, no file queue is missing
    capsys.readouterr()
    dump.main([str(store), "--verify", "--json", "--broker-config", str(conf)])
    verified = [json.loads(x) for x in capsys.readouterr().out.splitlines() if x.startswith("{")]
    assert not [x for x in verified if "cq." in str(x.get("kind", ""))]
    assert [x["phy_offset"] for x in verified if x.get("kind") == "index.beyond_max"] == [cut]
    assert digests(store) == before
    # a consumerOffset.json beside them: which one the broker takes depends on data versions
    (store / "config" / "consumerOffset.json").write_text('{"offsetTable":{}}')
    with pytest.raises(UnsupportedStoreError, match="consumerOffset.json beside"):
        open_store(store, conf)


def test_empty_rocksdb_queue_on_a_clean_restart(spark, tmp_path, version="5.3.3"):
    """A kill -9 before any flush leaves the RocksDB queue empty; without the abort file the
    broker takes the normal path and dispatches only records past the stored max phy offset (0):
    the record at phy 0 is never dispatched again (R§4.4, E#20); the repaired store's RocksDB
    queue is as that restart leaves it, so the broker restarted on it serves the same 79."""
    from tests import oracle

    conf = tmp_path / "broker.conf"
    conf.write_text(CONF)
    store = tmp_path / "store"
    w = oracle.run(version, "oracle.RocksDBRun", "write", store, conf, 80, 5, "halt")
    (store / "abort").unlink()
    assert rocksdbcq.read_consume_queue(store / "consumequeue").max_phy_offset == 0
    pred = prediction.predict(open_store(store, conf), RULES[version])
    copy = tmp_path / "restarted"
    shutil.copytree(store, copy)
    got = oracle.run(version, "oracle.RocksDBRun", "restart", copy, conf)
    compare(pred, got)
    served = [e for q in served_queues(got).values() for e in q]
    assert len(served) == len(w["written"]) - 1 and 0 not in {phy for phy, _, _ in served}
    repaired_restart(version, store, conf, tmp_path, got)


def test_rocksdb_consumer_offsets_are_read(tmp_path):
    """config/consumerOffsets written by each release's ConfigRocksDBStorage, read back read-only."""
    from tests import oracle

    for version in RULES:
        path = tmp_path / version / "consumerOffsets"
        oracle.run(version, "oracle.RocksDBOffsetsRun", path, "TopicA@g1=0:5,1:6", "%RETRY%g2@g2=0:12")
        names = sorted(p.name for p in path.iterdir())
        assert rocksdbcq.read_consumer_offsets(path) == {"TopicA@g1": {0: 5, 1: 6}, "%RETRY%g2@g2": {0: 12}}
        assert sorted(p.name for p in path.iterdir()) == names
