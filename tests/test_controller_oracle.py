"""Controller mode against the real 5.x brokers (``compat/src/v5/oracle/ControllerRun``, run by
``tests/oracle.py``; 5.3.3, 5.4.0 and 5.5.1): a store written in controller mode (two elections, a lone master's puts past
the confirm offset, kill -9), restarted fenced as the broker loads it, is what ``prediction.predict``
says (confirm offset, end, every queue's entries, the queue offset table); the repaired store,
restarted by the broker, comes back unchanged (commitlog, consume queues, index, confirm offset,
epochs). About 30 s per version.
"""
from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest

from jobs import recover as recover_job
from store_reader import open_store
from store_reader.broker import prediction, versions
from store_reader.formats.checkpoint import read_checkpoint

pytestmark = pytest.mark.slow

VERSIONS = ("5.3.3", "5.4.0", "5.5.1")
CONF = """mappedFileSizeCommitLog=65536
mappedFileSizeConsumeQueue=600
maxHashSlotNum=100
maxIndexNum=400
messageIndexEnable=true
flushDiskType=ASYNC_FLUSH
enableControllerMode=true
"""


def tree_digests(root: Path, *dirs: str) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for d in dirs for p in sorted((root / d).rglob("*")) if p.is_file()}


def served_queues(answer: dict) -> dict[tuple[str, int], list[tuple[int, int, int]]]:
    return {(t, int(q)): [(e["phy"], e["size"], e["tags"]) for e in v.get("entries", [])]
            for t, qs in answer["queues"].items() for q, v in qs.items()}


def predicted_queues(pred: prediction.Prediction) -> dict[tuple[str, int], list[tuple[int, int, int]]]:
    return {k: [(int(e["phy_offset"]), int(e["size"]), int(e["tags_code"])) for e in q.entries()]
            for k, q in pred.consume_queues.items()}


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """version -> (store, broker.conf, what ControllerRun wrote): each version's store written once."""
    from tests import oracle          # the oracle's driver (scripts/build_oracle.sh)

    stores: dict[str, tuple] = {}

    def write(version: str) -> tuple:
        if version not in stores:
            base = tmp_path_factory.mktemp(f"controller-{version}")
            conf = base / "broker.conf"
            conf.write_text(CONF)
            w = oracle.run(version, "oracle.ControllerRun", "write", base / "store", conf, 60, 40, 7)
            stores[version] = (base / "store", conf, w)
        return stores[version]

    return write


# every version after a crash that took the consume queues (the recovery's dispatch decides them);
# the first one also with its queues on disk
CASES = [(v, True) for v in VERSIONS] + [(VERSIONS[0], False)]


@pytest.mark.parametrize("version, queues_lost", CASES,
                         ids=[f"{v}-{'queues-lost' if lost else 'queues-on-disk'}" for v, lost in CASES])
def test_fenced_restart_is_predicted_and_the_repaired_store_is_kept(spark, written, tmp_path, version,
                                                                    queues_lost):
    from tests import oracle

    src, conf, w = written(version)
    store = tmp_path / "store"
    shutil.copytree(src, store)
    if queues_lost:                   # the crash took the consume queues: the recovery dispatches
        shutil.rmtree(store / "consumequeue")
    confirm = w["confirmOffsetAtSecondElection"]
    assert [e["startOffset"] for e in w["epochs"]] == [0, confirm] and w["maxPhyOffset"] > confirm
    pred = prediction.predict(open_store(store, conf), versions.V53)
    copy = tmp_path / "restarted"
    shutil.copytree(store, copy)
    got = oracle.run(version, "oracle.ControllerRun", "restart", copy, conf)
    assert got["recoveryPath"] == pred.recovery_path == "abnormal"
    assert got["confirmOffset"] == got["checkpointConfirmOffset"] == pred.confirm_offset == confirm
    assert got["maxPhyOffset"] == pred.max_phy_offset == w["maxPhyOffset"]
    assert got["topicQueueTable"] == pred.topic_queue_table()
    assert served_queues(got) == predicted_queues(pred)
    assert pred.unconfirmed.records > 0 and pred.unconfirmed.first_phy == confirm
    # the repaired store: the broker restarted on it changes nothing
    out = tmp_path / "out"
    assert recover_job.main(["--store", str(store), "--out", str(out), "--broker-config", str(conf)]) == 0
    assert read_checkpoint(out / "checkpoint").confirm_phy_offset == confirm
    again = tmp_path / "again"
    shutil.copytree(out, again)
    before = tree_digests(again, "commitlog", "consumequeue", "index")
    after_restart = oracle.run(version, "oracle.ControllerRun", "restart", again, conf)
    assert tree_digests(again, "commitlog", "consumequeue", "index") == before
    assert after_restart["recoveryPath"] == "normal"
    assert after_restart["confirmOffset"] == confirm and after_restart["epochs"] == w["epochs"]
    assert after_restart["topicQueueTable"] == got["topicQueueTable"]
    assert (again / "epochFileCheckpoint").read_bytes() == (src / "epochFileCheckpoint").read_bytes()
