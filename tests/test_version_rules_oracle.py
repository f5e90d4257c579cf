"""The real 5.3.3, 5.4.0 and 5.5.1 brokers (their release jars, ``tests/oracle.py``) restarted on the
stores of ``test_version_rules.py``, where the three rule sets predict different recoveries: each
broker must end exactly as its own version's prediction says (load result, max phy offset, every
queue's min and max, and, where the rule moves the re-dispatch, the index answers), and the
versions must differ where the rule says they do; and the 5.3.3 fixtures whose 5.4/5.5
predictions differ from 5.3's, restarted by the real 5.4.0 and 5.5.1 (an upgrade restart).

About 45 broker restarts of 5-9 s each: some 5 minutes on a shared 2-core machine (slow tier).
"""
from __future__ import annotations

import shutil
import struct

import pytest

import test_refused_stores as refused
import test_version_rules as vr
from store_reader import open_store
from store_reader.broker import indexservice, prediction, versions as broker_versions
from store_reader.formats.checkpoint import read_checkpoint, write_checkpoint

import oracle

pytestmark = [pytest.mark.slow, pytest.mark.oracle]

RELEASE = {broker_versions.V53: "5.3.3", broker_versions.V54: "5.4.0", broker_versions.V55: "5.5.1"}
ALL = tuple(RELEASE)


@pytest.fixture(scope="module")
def vr_stores(tmp_path_factory):
    return vr.write_stores(tmp_path_factory.mktemp("version-rules-oracle"))


def _both(root, tmp_path, versions=ALL, conf_extra: str = "", max_keys: int = 0, **conf):
    """version -> (prediction, the real broker's Restart report) for a copy of ``root`` each."""
    out = {}
    for v in versions:
        store = open_store(root, root / "broker.conf")
        if conf:
            store.config = store.config.replace(**conf)
        pred = prediction.predict(store, v)
        dest = tmp_path / f"broker-{v}"
        shutil.copytree(root, dest)
        if conf_extra:
            with open(dest / "broker.conf", "a", encoding="utf-8") as fh:
                fh.write(conf_extra)
        out[v] = pred, oracle.restart(RELEASE[v], dest, dest / "broker.conf", max_keys=max_keys)
    return out


def _assert_agrees(pred, real, store):
    assert pred.load_result == real["loadResult"], (pred.load_problems, real.get("loadException"))
    if not real["loadResult"]:
        return
    assert (pred.min_phy_offset, pred.max_phy_offset) == (real["minPhyOffset"], real["maxPhyOffset"])
    for topic, by_id in real["queues"].items():
        for qid, q in by_id.items():
            if q["inTable"]:
                mine = pred.consume_queues[(topic, int(qid))]
                assert [mine.min_offset, mine.max_offset] == [q["minOffset"], q["maxOffset"]], (topic, qid)
    for q in real.get("index", []):
        assert indexservice.query_message(pred, store.config, q["topic"], q["key"]) == sorted(q["phyOffsets"]), q


def _check(runs, root):
    store = open_store(root, root / "broker.conf")
    for pred, real in runs.values():
        _assert_agrees(pred, real, store)
    return {v: real for v, (_, real) in runs.items()}


def test_real_brokers_look_back_ten_files_at_most(vr_stores, tmp_path):
    """C2: consume queues gone, normal restart: 5.3.3 rebuilds TopicA/0 from the first file, 5.4.0
    and 5.5.1 from the 10th-last (min offset > 0). No checkpoint, abnormal restart: the records
    before the 10th-last file are no longer found by key."""
    root, _ = vr._copy(vr_stores, "clean", tmp_path / "in")
    shutil.rmtree(root / "consumequeue")
    real = _check(_both(root, tmp_path / "normal"), root)
    mins = {v: r["queues"]["TopicA"]["0"]["minOffset"] for v, r in real.items()}
    assert mins[broker_versions.V53] == 0 < mins[broker_versions.V54] == mins[broker_versions.V55]
    root, _ = vr._copy(vr_stores, "clean", tmp_path / "in2")
    (root / "checkpoint").unlink()
    (root / "abort").write_bytes(b"")
    real = _check(_both(root, tmp_path / "abnormal", max_keys=60), root)
    found = {v: sum(1 for q in r["index"] if q["phyOffsets"]) for v, r in real.items()}
    assert found[broker_versions.V53] == len(real[broker_versions.V53]["index"]) > found[broker_versions.V54] == found[broker_versions.V55]


def test_real_brokers_check_the_start_files_first_record(vr_stores, tmp_path):
    """C1: a bad CRC on the newest file's first record and on a record of the file before: 5.3.3
    cuts at the newest file's start, 5.4.0/5.5.1 at the earlier record."""
    root, info = vr._copy(vr_stores, "clean", tmp_path / "in")
    names = vr._files(root)
    vr._flip(root, int(names[-1]), 8)
    second = vr._records_in(info, names[-2])
    vr._flip(root, second[len(second) // 2]["phy_offset"], 8)
    real = _check(_both(root, tmp_path), root)
    assert real[broker_versions.V53]["maxPhyOffset"] == int(names[-1])
    assert real[broker_versions.V54]["maxPhyOffset"] == real[broker_versions.V55]["maxPhyOffset"] == second[len(second) // 2]["phy_offset"]


def test_real_brokers_start_from_the_logics_physical_offset(vr_stores, tmp_path):
    """C3: a 5.5 checkpoint's logicsPhysicalOffset starts 5.5.1's abnormal walk after a record
    damaged before it, which ends 5.3.3's and 5.4.0's commitlog; without the field 5.5.1 uses
    logicsMsgTimestamp with no margin."""
    root, info = vr._copy(vr_stores, "crashed-5.5", tmp_path / "in")
    names = vr._files(root)
    start55 = prediction.predict(open_store(root, root / "broker.conf"), broker_versions.V55).start_file
    victim = vr._records_in(info, names[names.index(start55) - 1])[3]["phy_offset"]
    vr._flip(root, victim, 8)
    real = _check(_both(root, tmp_path / "field"), root)
    assert real[broker_versions.V53]["maxPhyOffset"] == real[broker_versions.V54]["maxPhyOffset"] == victim
    assert real[broker_versions.V55]["maxPhyOffset"] == info.truncation_offset
    ckpt = read_checkpoint(root)
    write_checkpoint(root / "checkpoint", ckpt.__class__(ckpt.physic_msg_timestamp, ckpt.logics_msg_timestamp,
                                                         ckpt.index_msg_timestamp))
    real = _check(_both(root, tmp_path / "no-field", (broker_versions.V54, broker_versions.V55)), root)
    assert real[broker_versions.V54]["maxPhyOffset"] == victim < real[broker_versions.V55]["maxPhyOffset"]


def test_real_brokers_offset_check_on_recover(vr_stores, tmp_path):
    """C4: checkCommitLogOffsetOnRecover=true cuts 5.5.1's abnormal walk at a record whose
    PHYSICALOFFSET points two files ahead; 5.4.0 has no such check."""
    root, info = vr._copy(vr_stores, "crashed-5.5", tmp_path / "in")
    newest = [n for n in vr._files(root) if vr._records_in(info, n)][-1]
    at = vr._records_in(info, newest)[-1]["phy_offset"]
    with open(root / "commitlog" / newest, "r+b") as fh:
        fh.seek(at % vr.SEGMENT + 28)
        fh.write(struct.pack(">q", at + 2 * vr.SEGMENT))
    real = _check(_both(root, tmp_path, (broker_versions.V54, broker_versions.V55), conf_extra="checkCommitLogOffsetOnRecover=true\n",
                        checkCommitLogOffsetOnRecover=True), root)
    assert real[broker_versions.V55]["maxPhyOffset"] == at < real[broker_versions.V54]["maxPhyOffset"]


def test_real_brokers_negative_blank_marker_size(vr_stores, tmp_path):
    """C7: a blank marker with a negative TOTALSIZE ends 5.5.1's commitlog; 5.4.0 moves on."""
    root, info = vr._copy(vr_stores, "clean", tmp_path / "in")
    names = vr._files(root)
    last = vr._records_in(info, names[-2])[-1]
    marker = last["phy_offset"] + last["total_size"]
    with open(root / "commitlog" / names[-2], "r+b") as fh:
        fh.seek(marker % vr.SEGMENT)
        fh.write(struct.pack(">i", -8))
    (root / "checkpoint").unlink()
    (root / "abort").write_bytes(b"")
    real = _check(_both(root, tmp_path, (broker_versions.V54, broker_versions.V55)), root)
    assert real[broker_versions.V55]["maxPhyOffset"] == marker < real[broker_versions.V54]["maxPhyOffset"]


def test_real_brokers_on_an_empty_last_cq_file(tmp_path):
    """C5, C6: 5.3.3 throws in correctMinOffset and does not load; 5.4.0 runs the dirty-CQ cut
    after its dispatch, keeping the zeroed file's entry 0 (one more entry), and loads; 5.5.1 loads."""
    root, _ = refused._store(tmp_path, "5.x")
    (topic, qid), _ = refused._empty_last_cq_file(root)
    real = _check(_both(root, tmp_path), root)
    assert not real[broker_versions.V53]["loadResult"]
    q54, q55 = (real[v]["queues"][topic][str(qid)] for v in (broker_versions.V54, broker_versions.V55))
    assert q54["maxOffset"] == q55["maxOffset"]


# 5.3.3 fixtures whose 5.4 or 5.5 prediction differs from the 5.3 one (start file, queues, index):
# a 5.3.3 store restarted by a 5.4.0 / 5.5.1 broker (an upgrade restart)
UPGRADED = ("abort-on-clean", "cq-all-lost", "cq-dirty-abnormal", "crash-ckpt-mid", "crash-ckpt-mid-index-lost",
            "crash-ckpt-mid-torn-crc", "crash-no-checkpoint", "crash-tail", "crash-tail-sync", "derived-all-lost",
            "torn-middle-crc", "torn-middle-magic")


@pytest.mark.parametrize("scenario", UPGRADED)
def test_real_newer_brokers_on_the_533_fixtures(scenario, tmp_path):
    """Each fixture's damaged store as the real 5.4.0 and 5.5.1 restart it: their own predictions,
    index answers for 40 sampled keys included."""
    import support

    case = ("rocketmq-5.3.3", scenario)
    root, conf = support.input_store(*case), support.broker_conf(*case)
    for v in (broker_versions.V54, broker_versions.V55):
        store = open_store(root, conf)
        dest = tmp_path / v
        shutil.copytree(root, dest)
        _assert_agrees(prediction.predict(store, v), oracle.restart(RELEASE[v], dest, conf, max_keys=40), store)
