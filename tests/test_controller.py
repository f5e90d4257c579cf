"""Controller mode (5.x ``enableControllerMode``, ``store_reader.formats.controller``): the epoch file as
``CheckpointFile`` reads and writes it, the confirm offset as the fenced broker's recovery corrects
it, the records it keeps past it, and the repaired store's confirm offset and epoch file.

The epoch file bytes below are the real 5.3.3 store's (``compat/src/v5/oracle/ControllerRun``:
two elections, epoch 2 from phy 134808); the stores are the real-broker fixtures with the
checkpoint's confirm offset set where a controller-mode broker would have left it (the real-broker
runs are ``tests/test_controller_oracle.py``).
"""
from __future__ import annotations

import contextlib
import io
import json
import shutil
import struct

import numpy as np
import pytest

from jobs import dump
from jobs import recover as recover_job
from store_reader import open_store
from store_reader.broker import prediction, versions
from store_reader.audit.files import store_file_findings
from store_reader.formats.checkpoint import CHECKPOINT_STRUCT, read_checkpoint
from store_reader.formats.controller import (EpochEntry, correct_confirm_offset, epoch_file_bytes, epoch_problems,
                                             read_epoch_file)
from store_reader.exceptions import UnsupportedStoreError
from tests import support

V5 = "rocketmq-5.3.3"
# written by the real 5.3.3 AutoSwitchHAService (EpochFileCache over CheckpointFile)
REAL_EPOCH_FILE = b"2\n807160224\n1-0\n2-134808\n"
CONFIRM_AT = CHECKPOINT_STRUCT.size - 8          # checkpoint bytes 32..39


def test_epoch_file_bytes_are_the_brokers():
    entries = [EpochEntry(1, 0), EpochEntry(2, 134808)]
    assert epoch_file_bytes(entries) == REAL_EPOCH_FILE


def test_epoch_file_read_as_the_broker_reads_it(tmp_path):
    path = tmp_path / "epochFileCheckpoint"
    assert read_epoch_file(path).entries == []                       # absent: no entries
    path.write_bytes(REAL_EPOCH_FILE)
    got = read_epoch_file(path)
    assert got.entries == [EpochEntry(1, 0), EpochEntry(2, 134808)] and got.read_from == path.name
    # a CRC that does not match: IOException, the .bak is read instead
    path.write_bytes(REAL_EPOCH_FILE.replace(b"134808", b"134809"))
    (tmp_path / "epochFileCheckpoint.bak").write_bytes(b"1\n0\n1-0\n")   # CRC 0: not checked
    got = read_epoch_file(path)
    assert got.entries == [EpochEntry(1, 0)] and got.read_from == "epochFileCheckpoint.bak"
    assert "CRC32" in got.problems[0][1]
    # a count line that is not a number: NumberFormatException, the broker's start throws
    path.write_bytes(b"two\n0\n1-0\n")
    assert "not a number" in read_epoch_file(path).start_fails


def test_epochs_checked_against_the_commitlog(tmp_path):
    path = tmp_path / "epochFileCheckpoint"
    path.write_bytes(epoch_file_bytes([EpochEntry(1, 0), EpochEntry(3, 500), EpochEntry(2, 900)]))
    problems = [m for _, _, m in epoch_problems(read_epoch_file(path), 800)]
    assert any("epoch 2 starting at 900 does not follow epoch 3" in m for m in problems)
    assert any("epoch 2 starts at phy 900, past the commitlog's end 800" in m for m in problems)


@pytest.mark.parametrize("checkpoint, last_valid, want", [
    (500, None, 500),        # normal path: inside [min, end]
    (5000, None, 1000),      # past processOffset: processOffset
    (50, None, 100),         # below the min offset: the min offset
    (900, 700, 700),         # abnormal: past the last record dispatched
    (600, 700, 600),
])
def test_confirm_offset_corrected(checkpoint, last_valid, want):
    assert correct_confirm_offset(checkpoint, 100, 1000, last_valid).corrected == want


def _controller_store(tmp_path, case=(V5, "crash-tail"), drop_queues=True):
    """A fixture copy under a controller-mode broker.conf whose checkpoint confirms the commitlog
    up to the start of a record in its middle: (root, conf, that phy offset)."""
    root = tmp_path / "store"
    shutil.copytree(support.input_store(*case), root)
    conf = tmp_path / "broker.conf"
    conf.write_text(support.broker_conf(*case).read_text() + "\nenableControllerMode=true\n")
    store = open_store(root, conf)
    phys = np.sort(np.concatenate([b["phy_offset"].to_numpy() for b in store.scan_commitlog(["phy_offset"])]))
    confirm = int(phys[len(phys) // 2])
    with open(root / "checkpoint", "r+b") as f:
        f.seek(CONFIRM_AT)
        f.write(struct.pack(">q", confirm))
    (root / "epochFileCheckpoint").write_bytes(epoch_file_bytes([EpochEntry(1, 0), EpochEntry(2, confirm)]))
    if drop_queues:
        shutil.rmtree(root / "consumequeue")
    return root, conf, confirm


def test_abnormal_recovery_dispatches_up_to_the_confirm_offset(tmp_path):
    root, conf, confirm = _controller_store(tmp_path)
    store = open_store(root, conf)
    assert store.inventory.modes == ("controller",)
    pred = prediction.predict(store, versions.V53)
    assert pred.recovery_path == "abnormal" and pred.confirm_offset == confirm
    assert pred.reput_from_offset == confirm and pred.checkpoint.confirm_phy_offset == confirm
    ends = [int(e["phy_offset"]) + int(e["size"]) for q in pred.consume_queues.values() for e in q.entries()]
    assert ends and max(ends) <= confirm
    # every record from the confirm offset to the end is kept undispatched; the queue offset
    # table still counts them (compensateForHA)
    rows = [r for b in store.scan_commitlog(["phy_offset", "topic", "queue_id", "queue_offset"])
            for r in b.to_pylist() if confirm <= r["phy_offset"] < pred.max_phy_offset]
    assert pred.unconfirmed.records == len(rows) > 0 and pred.unconfirmed.first_phy == confirm
    table = pred.topic_queue_table()
    for r in rows:
        assert table[f"{r['topic']}-{r['queue_id']}"] >= r["queue_offset"] + 1
    # without controller mode the same files recover to the end
    plain = prediction.predict(open_store(root, support.broker_conf(V5, "crash-tail")), versions.V53)
    assert plain.controller is None and max(
        int(e["phy_offset"]) + int(e["size"]) for q in plain.consume_queues.values() for e in q.entries()) > confirm


def test_unconfirmed_tail_in_dump_verify_and_store_findings(tmp_path):
    root, conf, confirm = _controller_store(tmp_path)
    store = open_store(root, conf)
    pred = prediction.predict(store, versions.V53)
    rows = [r for r in store_file_findings(store, True, store.summaries(store.scan_options(True)), pred).to_pylist()
            if r["kind"].startswith("controller.")]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        dump.main([str(root), "--verify", "--json", "--broker-config", str(conf)])
    lines = [json.loads(x) for x in out.getvalue().splitlines()]
    verified = [x for x in lines if x.get("kind", "").startswith("controller.")]
    assert [(r["kind"], r["file"], r["position"], r["detail"]) for r in rows] == \
        [(x["kind"], x["file"], x["position"], x["message"]) for x in verified]
    assert [r["kind"] for r in rows] == ["controller.unconfirmed_tail"]
    assert f"past the confirm offset {confirm}" in rows[0]["detail"]


def test_controller_files_without_a_broker_conf_are_refused(tmp_path):
    root, _, _ = _controller_store(tmp_path, drop_queues=False)
    with pytest.raises(UnsupportedStoreError, match="pass the broker's broker.conf"):
        open_store(root)


def test_repaired_store_keeps_the_confirm_offset_and_the_epochs_it_holds(spark, tmp_path):
    root, conf, confirm = _controller_store(tmp_path)
    end = prediction.predict(open_store(root, conf), versions.V53).max_phy_offset
    # an epoch past the commitlog's end: the epochs claim data it does not hold
    (root / "epochFileCheckpoint").write_bytes(epoch_file_bytes(
        [EpochEntry(1, 0), EpochEntry(2, confirm), EpochEntry(3, end + 4096)]))
    (root / "brokerIdentity").write_bytes(b"brokerId=1\n")
    out = tmp_path / "out"
    assert recover_job.main(["--store", str(root), "--out", str(out), "--broker-config", str(conf)]) == 0
    assert read_checkpoint(out / "checkpoint").confirm_phy_offset == confirm
    assert (out / "epochFileCheckpoint").read_bytes() == epoch_file_bytes([EpochEntry(1, 0), EpochEntry(2, confirm)])
    assert (out / "brokerIdentity").read_bytes() == b"brokerId=1\n"
    rc = recover_job.main(["--store", str(root), "--out", str(tmp_path / "s"), "--broker-config", str(conf),
                           "--salvage"])
    assert rc == 2 and not (tmp_path / "s").exists()
