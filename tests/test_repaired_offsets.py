"""The repaired store's committed consumer offsets (issue 18 part 2): each one is an offset the
repaired queue serves, moved exactly as the broker's next pull on the repaired store would move it
(R§9.2), the originals kept in MANIFEST.json; ``--keep-consumer-offsets`` copies them as they are."""
from __future__ import annotations

import json
import shutil

import pytest

import support
from jobs import audit as audit_job
from jobs import recover as job
from store_reader import open_store
from store_reader.formats import config as cf
from store_reader.broker.pull import check_offset
from store_reader.broker.prediction import predict
from store_reader.repair.config import correct_consumer_offsets

V4, V5 = support.VERSIONS
# fixtures whose truncation point leaves committed offsets past the new queue ends
CUT = [(v, s) for v in (V4, V5) for s in ("crash-tail", "torn-middle-crc", "torn-middle-magic")]


def _version(case):
    return "5.3" if case[0] == V5 else "4.9"


def test_each_committed_offset_is_moved_as_the_next_pull_would(tmp_path):
    config = tmp_path / "config"
    config.mkdir()
    text = ('{\n\t"offsetTable":{\n\t\t"T@G":{0:3,1:9,2:12,3:20,4:7\n\t\t},\n'
            '\t\t"Gone@G":{0:4\n\t\t},\n\t\t"Gone@H":{0:0\n\t\t}\n\t}\n}')
    (config / "consumerOffset.json").write_text(text)
    (config / "consumerOffset.json.bak").write_text(text.replace("{0:3,", "{0:1,"))
    (config / "lmqConsumerOffset.json").write_text('{"lmqOffsetTable":{"%LMQ%a@%LMQ%g":9}}')
    (config / "consumerOffset.json.tmp").write_text("{")        # never read by the broker: left alone
    ranges = {("T", 0): (5, 10), ("T", 1): (5, 10), ("T", 2): (5, 10), ("T", 3): (0, 20),
              ("T", 4): (0, 8), ("%LMQ%a", 0): (0, 6)}
    moved = correct_consumer_offsets(config, ranges)
    got = {(m["file"], m["topic"], m["group"], m["queueId"]): (m["committedOffset"], m["status"],
                                                               m["repairedOffset"]) for m in moved}
    assert got == {
        ("config/consumerOffset.json", "T", "G", 0): (3, "OFFSET_TOO_SMALL", 5),
        ("config/consumerOffset.json", "T", "G", 2): (12, "OFFSET_OVERFLOW_BADLY", 10),
        ("config/consumerOffset.json", "Gone", "G", 0): (4, "NO_MESSAGE_IN_QUEUE", 0),
        ("config/consumerOffset.json.bak", "T", "G", 0): (1, "OFFSET_TOO_SMALL", 5),
        ("config/consumerOffset.json.bak", "T", "G", 2): (12, "OFFSET_OVERFLOW_BADLY", 10),
        ("config/consumerOffset.json.bak", "Gone", "G", 0): (4, "NO_MESSAGE_IN_QUEUE", 0),
        ("config/lmqConsumerOffset.json", "%LMQ%a", "%LMQ%g", 0): (9, "OFFSET_OVERFLOW_BADLY", 6),
    }
    # served offsets stay: inside the queue (T/1), caught up (T/3 == max), 0 of an empty queue
    assert (config / "consumerOffset.json").read_text() == text.replace(
        "{0:3,1:9,2:12", "{0:5,1:9,2:10").replace('"Gone@G":{0:4', '"Gone@G":{0:0')
    assert (config / "consumerOffset.json.tmp").read_text() == "{"
    assert cf.read_lmq_consumer_offsets(config.parent).value["offset"].to_pylist() == [6]


def _served(store_root, version: str, conf) -> list:
    """Every committed offset of the store's offset files the broker would move at the next pull."""
    store = open_store(store_root, conf)
    pred = predict(store, version)
    bad = []
    for name in ("consumerOffset.json", "consumerOffset.json.bak"):
        if (store.config_dir / name).is_file():
            for r in cf.read_consumer_offsets(store.config_dir / name).value.to_pylist():
                c = check_offset(pred, store.config, r["topic"], r["group"], r["queue_id"], r["offset"])
                if c.status not in ("FOUND", "OFFSET_OVERFLOW_ONE") and c.next_begin_offset != r["offset"]:
                    bad.append(c)
    return bad


def _offsets(root) -> dict:
    return {(r["topic"], r["group"], r["queue_id"]): r["offset"]
            for r in cf.read_consumer_offsets(root).value.to_pylist()}


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.parametrize("case", CUT, ids=support.case_id)
def test_audit_of_the_repaired_store_is_clean(spark, tmp_path, case):
    src, conf = support.input_store(*case), str(support.broker_conf(*case))
    out = tmp_path / "repaired"
    report = job.recover(spark, str(src), str(out), conf, _version(case))
    assert report.offsets_moved, "a cut that moves no committed offset tests nothing here"
    before = _served(src, _version(case), conf)
    assert before                                                  # the input's offsets are moved
    assert _served(out, _version(case), conf) == []                # the repaired store's are not
    # the manifest keeps each original; everything else is as it was
    manifest = json.loads((out / "MANIFEST.json").read_text())["consumerOffsets"]
    assert manifest["keptAsTheyWere"] is False
    moved = {(m["topic"], m["group"], m["queueId"]): m for m in manifest["moved"]
             if m["file"] == "config/consumerOffset.json"}
    original, repaired = _offsets(src), _offsets(out)
    assert {k for k in original if original[k] != repaired[k]} == set(moved)
    for k, m in moved.items():
        assert (m["committedOffset"], m["repairedOffset"]) == (original[k], repaired[k])
    # the audit's rows keep the originals, and the repaired queue ranges the rebuild wrote
    rows = {(r["topic"], r["group"], r["queue_id"]): r
            for r in report.findings.tables["consumer_offset_findings"].to_pylist()
            if r["source"] == "consumerOffset.json"}
    for k, m in moved.items():
        assert (rows[k]["committed_offset"], rows[k]["repaired_min"], rows[k]["repaired_max"]) == \
            (m["committedOffset"], m["repairedMin"], m["repairedMax"])
    # the broker's own correction on the input where the repaired queue is the broker's queue
    for k, m in moved.items():
        c = rows[k]
        if (c["min_after"], c["max_after"]) == (m["repairedMin"], m["repairedMax"]):
            assert (c["status"], c["next_begin_offset"]) == (m["status"], m["repairedOffset"])
    assert audit_job.main(["--store", str(out), "--broker-config", conf,
                           "--broker-version", _version(case)]) == 0


@pytest.mark.spark
@pytest.mark.slow
def test_keep_consumer_offsets_and_apply(spark, tmp_path, capsys):
    case = (V5, "crash-tail")
    src, conf = support.input_store(*case), str(support.broker_conf(*case))
    kept = tmp_path / "kept"
    assert job.main(["--store", str(src), "--out", str(kept), "--broker-config", conf,
                     "--keep-consumer-offsets"]) == 0
    assert "kept as they were (--keep-consumer-offsets)" in capsys.readouterr().out
    assert (kept / "config" / "consumerOffset.json").read_bytes() == \
        (src / "config" / "consumerOffset.json").read_bytes()
    assert json.loads((kept / "MANIFEST.json").read_text())["consumerOffsets"] == \
        {"keptAsTheyWere": True, "moved": []}
    assert audit_job.main(["--store", str(kept), "--broker-config", conf]) == 1   # offsets at risk
    # --apply'd: the store in the input's place audits clean
    store = tmp_path / "store"
    shutil.copytree(src, store)
    assert job.main(["--store", str(store), "--out", str(tmp_path / "out"), "--apply",
                     "--backup", str(tmp_path / "backup"), "--broker-config", conf]) == 0
    assert "moved where the repaired queues serve them" in capsys.readouterr().out
    assert audit_job.main(["--store", str(store), "--broker-config", conf]) == 0


@pytest.mark.spark
def test_lmq_consumer_offsets_follow_the_rebuilt_lmq_queues(spark, tmp_path):
    from test_lmq import _lmq_store

    root = _lmq_store(tmp_path / "store", True)
    (root / "config").mkdir()
    (root / "config" / "consumerOffset.json").write_text('{\n\t"offsetTable":{\n\t\t"TopicL@G":{1:8\n\t\t}\n\t}\n}')
    (root / "config" / "lmqConsumerOffset.json").write_text(
        '{\n\t"lmqOffsetTable":{\n\t\t"%LMQ%a@%LMQ%g":9,\n\t\t"%LMQ%b@%LMQ%g":2\n\t}\n}')
    out = tmp_path / "out"
    report = job.recover(spark, str(root), str(out), str(root / "broker.conf"), "5.3")
    # past the end of TopicL/1 (0..6) and %LMQ%a (0..5); below %LMQ%b's first entry (5: its file
    # starts with pre-blank fillers at 0..4, which no pull is served from)
    want = {"TopicL": (8, 6, "OFFSET_OVERFLOW_BADLY"), "%LMQ%a": (9, 5, "OFFSET_OVERFLOW_BADLY"),
            "%LMQ%b": (2, 5, "OFFSET_TOO_SMALL")}
    assert {m["topic"]: (m["committedOffset"], m["repairedOffset"], m["status"])
            for m in report.offsets_moved} == want
    pred = predict(open_store(out, root / "broker.conf"), "5.3")    # the repaired queues, as loaded
    for topic, qid in (("TopicL", 1), ("%LMQ%a", 0), ("%LMQ%b", 0)):
        q = pred.consume_queues[(topic, qid)]
        assert q.min_offset <= want[topic][1] <= q.max_offset
    assert {r["topic"]: r["offset"] for r in cf.read_lmq_consumer_offsets(out).value.to_pylist()} == \
        {"%LMQ%a": 5, "%LMQ%b": 5}
    assert (out / "config" / "lmqConsumerOffset.json").read_text() == \
        '{\n\t"lmqOffsetTable":{\n\t\t"%LMQ%a@%LMQ%g":5,\n\t\t"%LMQ%b@%LMQ%g":5\n\t}\n}'
