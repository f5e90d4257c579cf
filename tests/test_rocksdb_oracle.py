"""RocksDB double-write against the real 5.3.3 broker store (``compat/src/v5/oracle/DoubleWriteRun``
via ``tests/oracle.py``: ``rocksdbCQDoubleWriteEnable`` wired as ``BrokerController`` wires it, the
RocksDB consume queue in ``consumequeue/`` beside the topic directories, kill -9): the store is
recovered from its file queues exactly as the broker serves them, and the broker restarted on the
repaired store (which leaves RocksDB out) changes no commitlog, file queue or index byte; a 5.4+
double-write store is refused by name. About 40 s.
"""
from __future__ import annotations

import shutil

import pytest

from jobs import recover as recover_job
from store_reader import inventory, open_store, recovery
from store_reader.exceptions import UnsupportedStoreError
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
    pred = recovery.predict(opened, recovery.V5X)
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


@pytest.mark.parametrize("version", ["5.4.0", "5.5.1"])
def test_combined_double_write_store_is_refused_by_name(tmp_path, version):
    """5.4+ (CombineConsumeQueueStore; rocksdbstore/ is made by every 5.4+ store): the broker
    dispatches again from where its RocksDB queue ends (an empty one: from the start, and the
    index takes the last record's keys again, seen on the real broker), so the store is refused."""
    from tests import oracle

    conf = tmp_path / "broker.conf"
    conf.write_text(CONF)
    store = tmp_path / "store"
    oracle.run(version, "oracle.DoubleWriteRun", "write", store, conf, 80, 5, "halt")
    assert (store / "rocksdbstore").is_dir() and (store / "consumequeue" / "CURRENT").is_file()
    with pytest.raises(UnsupportedStoreError, match="RocksDB double-write on a 5.4\\+ broker") as err:
        open_store(store, conf)
    assert err.value.path == f"{store}/consumequeue"
