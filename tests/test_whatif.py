"""What-if for both broker versions at once (issue 18 part 4): ``jobs.recover --dry-run
--broker-version both`` and ``jobs.audit --broker-version both``, text and ``--json``."""
from __future__ import annotations

import json
import shutil
import sys

import pytest

import support
from jobs import audit as audit_job
from jobs import recover as job
from store_reader import open_store
from store_reader.formats.config import read_consumer_offsets
from store_reader.broker.pull import consumer_offset_checks
from store_reader.broker.prediction import predict

CASE = ("rocketmq-4.9.7", "torn-middle-crc-normal")
SPAN_FILE, SPAN_AT, SPAN_LEN = "00000000000000720896", 20000, 4096


@pytest.fixture
def zeroed_span(tmp_path):
    """A clean shutdown's store with 4 KiB zeroed in the middle of its third-last commitlog file:
    4.9's normal path starts at that file and cuts at the span; 5.x's starts one file later and
    keeps everything after it (issue 18 part 1's case)."""
    store = tmp_path / "store"
    shutil.copytree(support.input_store(*CASE), store)
    with open(store / "commitlog" / SPAN_FILE, "r+b") as fh:
        fh.seek(SPAN_AT)
        fh.write(bytes(SPAN_LEN))
    return store


def test_both_needs_a_dry_run():
    for argv in (["--store", "s", "--out", "o", "--broker-version", "both"],
                 ["--store", "s", "--out", "o", "--broker-version", "both", "--dry-run", "--apply",
                  "--backup", "b"]):
        with pytest.raises(SystemExit):
            job.parse_args(argv)
    assert job.parse_args(["--store", "s", "--dry-run", "--broker-version", "both"]).broker_version == "both"
    with pytest.raises(SystemExit):
        audit_job.parse_args(["--store", "s", "--broker-version", "both", "--since-last"])


@pytest.mark.spark
@pytest.mark.slow
def test_both_versions_side_by_side(spark, zeroed_span, tmp_path, capsys):
    conf = str(support.broker_conf(*CASE))
    args = ["--store", str(zeroed_span), "--broker-config", conf, "--broker-version", "both"]
    assert job.main(args + ["--dry-run", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["store"]            # nothing written
    v4, v5 = doc["versions"]["4.9"], doc["versions"]["5.x"]
    p4, p5 = v4["prediction"], v5["prediction"]
    assert (p4["recoveryPath"], p5["recoveryPath"]) == ("normal", "normal")
    assert (p4["startFile"], p5["startFile"]) == (SPAN_FILE, "00000000000000786432")
    assert p4["maxPhyOffset"] <= int(SPAN_FILE) + SPAN_AT < p5["maxPhyOffset"]
    diff = doc["differences"]
    assert {"startFile", "maxPhyOffset", "deletedCommitLogFiles"} <= set(diff["prediction"])
    assert diff["prediction"]["maxPhyOffset"] == {"4.9": p4["maxPhyOffset"], "5.x": p5["maxPhyOffset"]}
    # every committed offset, with the pull status and correction of each version's own prediction
    store = open_store(zeroed_span, conf)
    offsets = read_consumer_offsets(store.root).value
    for version, side in doc["versions"].items():
        want = {(c.group, c.topic, c.queue_id): (c.committed_offset, c.status, c.next_begin_offset)
                for c in consumer_offset_checks(predict(store, version), store.config, offsets)}
        got = {(r["group"], r["topic"], r["queue_id"]): (r["committed_offset"], r["status"],
                                                         r["next_begin_offset"])
               for r in side["consumerOffsets"] if r["source"] == "consumerOffset.json"}
        assert got == want and len(want) == offsets.num_rows
        assert all("body" not in r for r in side["findings"]["lost_messages"])
    # the corrections that differ: 4.9 moves GroupAhead@TopicA/1 back to its cut queue end; 5.x serves it
    ta1 = diff["consumerOffsets"]["consumerOffset.json:GroupAhead@TopicA/1"]
    assert ta1["4.9"] == {"committed": 60, "status": "OFFSET_OVERFLOW_BADLY",
                          "nextBeginOffset": v4["queues"]["TopicA/1"][1]}
    assert ta1["5.x"]["status"] == "FOUND"
    assert all(v["4.9"] != v["5.x"] for v in diff["consumerOffsets"].values())
    assert diff["queues"]["TopicA/1"] == {"4.9": v4["queues"]["TopicA/1"], "5.x": v5["queues"]["TopicA/1"]}
    # 4.9 loses the records after the span too: lost messages only it reports
    lost4, lost5 = diff["findings"]["lost_messages"].values()
    assert v4["recordsLost"] > v5["recordsLost"] and lost4
    assert all(r["phy_offset"] > int(SPAN_FILE) + SPAN_AT - 2048 for r in lost4)
    # the text: both columns, a star on what differs
    assert job.main(args + ["--dry-run"]) == 0
    text = capsys.readouterr().out
    assert "broker 4.9" in text and "broker 5.x" in text
    lines = {ln[2:].split("  ")[0].strip(): ln for ln in text.splitlines() if ln[:1] in "* "}
    assert lines["truncation point"].startswith("*") and str(p5["maxPhyOffset"]) in lines["truncation point"]
    assert lines["recovery path"].startswith(" ")
    assert "consumer-offset corrections that differ" in text and "GroupAhead@TopicA/1" in text
    # jobs.audit: the same two sides and differences, and an exit code for both
    assert audit_job.main(args + ["--json"]) == 1
    audited = json.loads(capsys.readouterr().out)
    assert audited["differences"] == diff
    assert audit_job.main(args) == 1
    assert "* truncation point" in capsys.readouterr().out


def test_any_list_of_versions_side_by_side(capsys):
    """``all`` or a comma list: one column per version, a star where any two differ, the
    differences keyed by every version (issue 38 part 3)."""
    from jobs import whatif

    assert job.parse_args(["--store", "s", "--dry-run", "--broker-version", "all"]).broker_version == "all"
    assert job.parse_args(["--store", "s", "--dry-run", "--broker-version", "5.3,5.5"]).broker_version == "5.3,5.5"
    for bad in (["--broker-version", "5.2"], ["--broker-version", "5.3,5.2", "--dry-run"],
                ["--broker-version", "all"]):                         # a what-if needs --dry-run
        with pytest.raises(SystemExit):
            job.parse_args(["--store", "s", "--out", "o", *bad])

    def side(max_phy: int, queue: list[int]) -> dict:
        p = {"loadResult": True, "loadProblems": [], "recoveryPath": "abnormal", "startFile": "0",
             "maxPhyOffset": max_phy, "minPhyOffset": 0, "deletedCommitLogFiles": [], "commitLogFiles": ["0"]}
        return {"prediction": p, "status": "findings", "recordsLost": 0, "queues": {"T/0": queue},
                "consumerOffsets": [], "consumerOffsetFacts": [], "findings": {}, "alerting": {}}

    sides = {"5.3": side(100, [0, 5]), "5.4": side(100, [2, 5]), "5.5": side(200, [2, 9])}
    diff = whatif.differences(sides)
    assert diff["prediction"] == {"maxPhyOffset": {"5.3": 100, "5.4": 100, "5.5": 200}}
    assert diff["queues"] == {"T/0": {"5.3": [0, 5], "5.4": [2, 5], "5.5": [2, 9]}}
    whatif.print_side_by_side({"store": "s", "versions": sides, "differences": diff}, sys.stdout)
    text = capsys.readouterr().out
    assert all(f"broker {v}" in text for v in sides)
    lines = {ln[2:].split("  ")[0].strip(): ln for ln in text.splitlines() if ln[:1] in "* "}
    assert lines["truncation point"].startswith("*") and lines["recovery path"].startswith(" ")
    queue = next(ln for ln in text.splitlines() if "T/0" in ln)
    assert queue.split() == ["*", "T/0", "0..5", "2..5", "2..9"]
