"""jobs/recover.py end to end on every real-broker fixture: the repaired store against the broker's
own recovered store (expected-store) and against the surviving records (commitLogScan)."""
from __future__ import annotations

import hashlib
import json
import os

import pytest

import support
from jobs.recover import recover
from store_reader import open_store
from store_reader.formats.consumequeue import decode_entries
from store_reader.formats.indexfile import list_index_files, query
from store_reader.broker.prediction import predict

pytestmark = [pytest.mark.spark, pytest.mark.slow]

LOADED = [c for c in support.scenarios() if support.expected(*c)["afterLoad"]["loadResult"]]


def _version(case):
    return "5.3" if case[0].endswith("5.3.3") else "4.9"


def _queue_entries(queue_dir: str) -> list[tuple[int, int, int]]:
    out = []
    for name in sorted(os.listdir(queue_dir)):
        with open(os.path.join(queue_dir, name), "rb") as fh:
            e = decode_entries(fh.read())
        out += list(zip(e.phy_offset.tolist(), e.size.tolist(), e.tags_code.tolist()))
    return out


@pytest.fixture(scope="module")
def repaired(spark, tmp_path_factory):
    cache = {}

    def get(case):
        if case not in cache:
            out = tmp_path_factory.mktemp("repaired") / "store"
            src = support.input_store(*case)
            before = support.tree_digest(src)
            report = recover(spark, str(src), str(out), str(support.broker_conf(*case)), _version(case),
                             commitlog_gone=case[1] == "commitlog-all-deleted")
            assert support.tree_digest(src) == before, "the input store was modified"
            cache[case] = (out, report)
        return cache[case]
    return get


@pytest.mark.parametrize("case", LOADED, ids=support.case_id)
def test_repaired_store_matches_the_broker(case, repaired):
    out, report = repaired(case)
    assert_matches_broker(out, case, report.prediction.max_phy_offset)


def assert_matches_broker(out, case, max_phy_offset: int) -> None:
    """The repaired store at ``out`` against the real broker's recovery of ``case``."""
    exp = support.expected(*case)
    rec = exp["afterRecovery"]
    end = rec["maxPhyOffset"]
    assert max_phy_offset == end
    # commitlog: the broker's bytes up to the truncation point, zeros after it
    exp_store = support.expected_store(*case)
    names = sorted(os.listdir(out / "commitlog"))
    assert names == [f["name"] for f in rec["commitLog"]["files"]]
    for name in names:
        ours = (out / "commitlog" / name).read_bytes()
        theirs = (exp_store / "commitlog" / name).read_bytes()
        keep = max(0, min(len(ours), end - int(name)))
        assert len(ours) == len(theirs) and ours[:keep] == theirs[:keep] and not any(ours[keep:])
    assert not (out / "abort").exists()
    # consume queues: every dispatchable surviving record, in queue offset order
    scan = [m for m in rec["commitLogScan"] if "phyOffset" in m and m["tranType"] in (0, 8)]
    want: dict[tuple[str, int], list] = {}
    for m in sorted(scan, key=lambda m: m["phyOffset"]):
        want.setdefault((m["topic"], m["queueId"]), []).append((m["phyOffset"], m["size"], m["tagsCode"]))
    got = {}
    for topic in os.listdir(out / "consumequeue"):
        for qid in os.listdir(out / "consumequeue" / topic):
            entries = _queue_entries(str(out / "consumequeue" / topic / qid))
            # slots below the queue's min offset (pre-blank fillers, or entries for commitlog files
            # retention deleted, kept as the broker keeps them) are never served
            real = [e for e in entries if e[1] > 0 and e[1] != 0x7FFFFFFF and e[0] >= rec["minPhyOffset"]]
            got[(topic, int(qid))] = real
    assert got == want
    # byte-identical to the broker's CQ files wherever the broker kept the queue complete
    for (topic, qid), entries in want.items():
        broker = rec["consumeQueues"].get(topic, {}).get(str(qid))
        if broker and [tuple(e[1:]) for e in broker["entries"]] == entries:
            qdir = out / "consumequeue" / topic / str(qid)
            for name in os.listdir(qdir):
                ours = (qdir / name).read_bytes()
                theirs = (exp_store / "consumequeue" / topic / str(qid) / name).read_bytes()
                used = max(0, min(len(ours), broker["maxOffset"] * 20 - int(name)))
                assert ours[:used] == theirs[:used], (topic, qid, name)


@pytest.mark.parametrize("case", LOADED, ids=support.case_id)
def test_repaired_index_answers_every_key(case, repaired):
    out, _ = repaired(case)
    rec = support.expected(*case)["afterRecovery"]
    cfg = open_store(out, support.broker_conf(*case)).config
    files = list_index_files(out / "index", cfg.index_file_size)
    survivors = [m for m in rec["commitLogScan"] if "phyOffset" in m and m["tranType"] != 12]
    for q in rec["index"]["queries"]:
        hits = set(query(files, q["topic"], q["key"], hash_slot_num=cfg.maxHashSlotNum,
                         index_num=cfg.maxIndexNum, max_num=1 << 30))
        match = {m["phyOffset"] for m in survivors if m["topic"] == q["topic"] and (
            q["key"] == m["uniqKey"] or q["key"] in (m["keys"] or "").split(" "))}
        assert match <= hits, q
        # no dangling candidates: every hit is a surviving record
        assert hits <= {m["phyOffset"] for m in survivors}, q


@pytest.mark.parametrize("case", LOADED, ids=support.case_id)
def test_manifest_lists_every_output_file_as_written(case, repaired):
    """Digests taken while copying (commitlog) or right after each rebuild (index, consume queues)
    are those of the files on disk, and every file but the manifest itself is listed."""
    out, report = repaired(case)
    manifest = json.loads((out / "MANIFEST.json").read_text())
    assert manifest["runId"] == report.run_id
    files = sorted(os.path.relpath(os.path.join(d, f), out) for d, _, fs in os.walk(out) for f in fs)
    assert [e["path"] for e in manifest["outputs"]] == [f for f in files if f != "MANIFEST.json"]
    for e in manifest["outputs"]:
        data = (out / e["path"]).read_bytes()
        assert (e["size"], e["sha256"]) == (len(data), hashlib.sha256(data).hexdigest()), e["path"]


@pytest.mark.parametrize("case", LOADED, ids=support.case_id)
def test_second_run_finds_nothing_to_change(case, repaired):
    out, report = repaired(case)
    store = open_store(out, support.broker_conf(*case))
    again = predict(store, _version(case))
    assert again.recovery_path == "normal" and again.load_result
    assert again.max_phy_offset == report.prediction.max_phy_offset
    assert not again.deleted_commitlog_files
    assert all(not q.deleted_files for q in again.consume_queues.values())
    summaries = store.summaries(store.scan_options(broker_5x=_version(case) == "5.3"))
    assert not any(s.end_reason in ("corrupt", "torn_tail") for s in summaries)


def test_rerun_is_byte_identical(spark, tmp_path):
    case = ("rocketmq-5.3.3", "torn-middle-crc")
    a, b = tmp_path / "a", tmp_path / "b"
    for out in (a, b):
        recover(spark, str(support.input_store(*case)), str(out), str(support.broker_conf(*case)), "5.3")
    assert support.tree_digest(a) == support.tree_digest(b)
