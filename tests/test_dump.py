"""jobs/dump.py: verification of every fixture store against what the real broker did, the output of
each file kind against store_reader and expected.json, bad input, and the Spark-free start.

Expected anomalies are derived, never listed per fixture: from ``expected.json`` (the broker's
recovered commitlog end and files, the messages written and surviving, the consume queues after
recovery), from the damage column of ``fixtures/README.md``, and from the input files read with
``store_reader`` as an independent oracle (consume queue and index entries).
"""
from __future__ import annotations

import base64
import contextlib
import functools
import io
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import zlib
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

import support
from jobs import dump
from store_reader.dump.printer import iso_ms
from store_reader import open_store
from store_reader.formats.checkpoint import Checkpoint, write_checkpoint
from store_reader.formats.commitlog import SegmentScan
from store_reader.formats.config import read_consumer_offsets
from store_reader.formats.consumequeue import (CQ_STORE_UNIT_SIZE, ENTRY_VALID, classify_entries, list_queues,
                                               parse_file_name, read_queue_file, write_queue)
from store_reader.formats.indexfile import HASH_SLOT_SIZE, INDEX_ENTRY_SIZE, INDEX_HEADER_SIZE, IndexFile, read_header
from store_reader.testing.synthetic import encode_message

V4, V5 = support.VERSIONS
CASES = support.scenarios()
ROOT = Path(__file__).resolve().parent.parent
TRAN_MASK, ROLLBACK = 0xC, 0xC
DISPATCHED_TRAN = (0x0, 0x8)        # NOT and COMMIT get a consume queue entry (R§5.3)


# -- running the dump ----------------------------------------------------------------------------

def run(*argv: object) -> tuple[int, str, str]:
    """``main(argv)`` in-process: (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = dump.main([str(a) for a in argv])
    return rc, out.getvalue(), err.getvalue()


def json_lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines()]


@functools.lru_cache(maxsize=None)
def verified(case: tuple[str, str]) -> tuple[int, tuple[dict, ...]]:
    """``--verify --json`` on a fixture's input store: (exit code, anomalies)."""
    rc, out, _ = run(support.input_store(*case), "--verify", "--json",
                     "--broker-config", support.broker_conf(*case))
    lines = json_lines(out)
    assert lines[-1]["type"] == "summary" and lines[-1]["exit_code"] == rc
    return rc, tuple(x for x in lines if x["type"] == "anomaly")


def kinds(anomalies) -> Counter:
    return Counter(a["kind"] for a in anomalies)


# -- what the broker did, from expected.json and the README ------------------------------------

@functools.lru_cache(maxsize=None)
def readme_damage() -> dict[tuple[str, str], str]:
    """The ``damage`` column of the scenario tables in fixtures/README.md."""
    out, version = {}, None
    for line in (support.FIXTURES / "README.md").read_text(encoding="utf-8").splitlines():
        m = re.match(r"## Scenarios, (\S+)", line)
        if m:
            version = f"rocketmq-{m.group(1)}"
        m = re.match(r"\| `([^`]+)` .*\| ([^|]+) \|$", line)
        if m and version:
            out[(version, m.group(1))] = m.group(2).strip()
    return out


def written(case) -> list[dict]:
    return support.expected(*case)["writtenMessages"]


def broker_end(case) -> tuple[int, int]:
    """(min, max) phy offset of the commitlog as the broker recovered it."""
    cl = support.expected(*case)["afterLoad"]["commitLog"]
    return cl["minOffset"], cl["maxOffset"]


def input_paths(case, prefix: str) -> dict[str, int]:
    return {f["path"]: f["length"] for f in support.expected(*case)["input"]["files"]
            if f["path"].startswith(prefix)}


def loaded(case) -> bool:
    return support.expected(*case)["afterLoad"]["loadResult"]


def keyed(m: dict) -> bool:
    return bool(m["uniqKey"]) or bool((m["keys"] or "").strip())


def key_count(m: dict) -> int:
    """Index entries the broker puts for a message (F§7.4): UNIQ_KEY, then every KEYS token."""
    return (1 if m["uniqKey"] else 0) + len([k for k in (m["keys"] or "").split(" ") if k])


def cq_oracle(case) -> list[tuple[str, int, int, int, int]]:
    """Every valid entry in the input consume queue files: (topic, queue, queue offset, phy, size)."""
    out = []
    for ref in list_queues(support.input_store(*case)):
        for name in sorted(os.listdir(ref.path)):
            path = os.path.join(ref.path, name)
            e = read_queue_file(path)
            kind = classify_entries(e.phy_offset, e.size, e.tags_code)
            start = parse_file_name(path) // CQ_STORE_UNIT_SIZE
            out += [(ref.topic, ref.queue_id, start + int(i), int(e.phy_offset[i]), int(e.size[i]))
                    for i in np.flatnonzero(kind == ENTRY_VALID)]
    return out


def index_oracle(case) -> list[np.ndarray]:
    """Phy offsets of the entries in use of every input index file."""
    cfg = support.expected(*case)["storeConfig"]
    d = support.input_store(*case) / "index"
    out = []
    for name in sorted(os.listdir(d)) if d.is_dir() else []:
        with IndexFile(d / name, cfg["maxHashSlotNum"], cfg["maxIndexNum"]) as f:
            out.append(f.entries[1:f.header.entries_in_use + 1]["phy_offset"].astype(np.int64).copy())
    return out


def cq_offsets(anomalies, kind: str) -> set[tuple[str, int, int]]:
    """The (topic, queue, queue offset) slots a kind of consume queue anomaly covers, recomputed
    from file, byte position and count (the details must agree)."""
    out = set()
    for a in anomalies:
        if a["kind"] != kind:
            continue
        path = Path(a["file"])
        first = (parse_file_name(path) + a["position"]) // CQ_STORE_UNIT_SIZE
        topic, qid = path.parent.parent.name, int(path.parent.name)
        assert (a["details"]["topic"], a["details"]["queue_id"]) == (topic, qid)
        assert a["details"]["queue_offsets"] == [first, first + a["count"] - 1]
        out |= {(topic, qid, q) for q in range(first, first + a["count"])}
    return out


# -- verification of every fixture -----------------------------------------------------------------

@pytest.mark.parametrize("case", CASES, ids=support.case_id)
def test_verify_reports_exactly_what_the_broker_acts_on(case):
    rc, anomalies = verified(case)
    exp = support.expected(*case)
    expected_kinds: Counter = Counter()

    # 1. commitlog: the broker deleted segments <=> it cut the commitlog at a bad record or at valid
    #    data ending without an end-of-file marker
    if loaded(case):
        lo, hi = broker_end(case)
        before = {Path(p).name for p in input_paths(case, "commitlog/")}
        after = {f["name"] for f in exp["afterLoad"]["commitLog"]["files"]}
        if before - after:
            at_cut = [m for m in written(case) if m["phyOffset"] == hi]
            kind = "commitlog.bad_record" if at_cut and not at_cut[0]["survived"] else \
                "commitlog.no_eof_marker"
            expected_kinds[kind] += 1
            (cut,) = [a for a in anomalies if a["kind"] == kind]
            segment = max(s for s in before if int(s) <= hi)
            assert (Path(cut["file"]).name, cut["position"], cut["phy_offset"]) == \
                (segment, hi - int(segment), hi)
            assert cut["details"]["broker_cut"]
    # 2. consume queues against the broker's end (R§5.2, R§7.2) and its rebuilt queues
    if loaded(case):
        lo, hi = broker_end(case)
        entries = cq_oracle(case)
        beyond = {(t, q, o) for t, q, o, p, _ in entries if p >= hi}
        below = {(t, q, o) for t, q, o, p, _ in entries if p < lo}
        assert cq_offsets(anomalies, "cq.beyond_max") == beyond
        assert cq_offsets(anomalies, "cq.below_min") == below
        expected_kinds["cq.beyond_max"] += kinds(anomalies)["cq.beyond_max"] if beyond else 0
        expected_kinds["cq.below_min"] += kinds(anomalies)["cq.below_min"] if below else 0
        # dispatched records the broker's queues lack after recovery: not rebuilt (OBSERVATIONS 5)
        served = {(t, int(q), e[0]) for t, qs in exp["afterRecovery"]["consumeQueues"].items()
                  for q, st in qs.items() for e in st["entries"]}
        lost = {(m["topic"], m["queueId"], m["queueOffset"]) for m in written(case)
                if m["survived"] and m["sysFlag"] & TRAN_MASK in DISPATCHED_TRAN} - served
        if input_paths(case, "consumequeue/"):
            assert cq_offsets(anomalies, "cq.missing_entries") == lost
            expected_kinds["cq.missing_entries"] += \
                kinds(anomalies)["cq.missing_entries"] if lost else 0
        elif written(case) and input_paths(case, "commitlog/"):
            expected_kinds["cq.all_missing"] += 1
    for path, length in input_paths(case, "consumequeue/").items():
        if length != exp["storeConfig"]["mappedFileSizeConsumeQueue"]:
            expected_kinds["cq.file_size"] += 1
            (bad,) = [a for a in anomalies if a["kind"] == "cq.file_size"]
            assert bad["file"].endswith(path) and bad["position"] == length
    # 3. index files
    if loaded(case):
        lo, hi = broker_end(case)
        phys = index_oracle(case)
        n_beyond = sum(int(np.count_nonzero(p >= hi)) for p in phys)
        n_below = sum(int(np.count_nonzero(p < lo)) for p in phys)
        assert sum(a["count"] for a in anomalies if a["kind"] == "index.beyond_max") == n_beyond
        assert sum(a["count"] for a in anomalies if a["kind"] == "index.below_min") == n_below
        expected_kinds["index.beyond_max"] += kinds(anomalies)["index.beyond_max"] if n_beyond else 0
        expected_kinds["index.below_min"] += kinds(anomalies)["index.below_min"] if n_below else 0
        with_keys = [m for m in written(case) if m["survived"] and keyed(m)
                     and m["sysFlag"] & TRAN_MASK != ROLLBACK]
        if not phys and with_keys:
            expected_kinds["index.all_missing"] += 1
        elif phys:
            # keyed records dispatched (to a consume queue on disk) beyond the last index entry
            indexed_until = max(int(p.max()) for p in phys if p.size)
            dispatched = max((p + s for *_, p, s in cq_oracle(case)), default=-1)
            unindexed = [m for m in with_keys if indexed_until < m["phyOffset"]
                         and m["phyOffset"] + m["size"] <= min(dispatched, hi)]
            if unindexed:
                expected_kinds["index.missing_entries"] += 1
                (gap,) = [a for a in anomalies if a["kind"] == "index.missing_entries"]
                assert (gap["phy_offset"], gap["count"]) == (unindexed[0]["phyOffset"], len(unindexed))
    # 4. checkpoint
    if not exp["input"]["checkpoint"]["exists"] and input_paths(case, "commitlog/"):
        expected_kinds["checkpoint.missing"] += 1

    assert kinds(anomalies) == +expected_kinds
    assert rc == (1 if anomalies else 0)
    for a in anomalies:
        assert a["file"].startswith(str(support.input_store(*case)))


@pytest.mark.parametrize("case", [c for c in CASES if c[1] in ("clean", "clean-sync")],
                         ids=support.case_id)
def test_clean_stores_exit_zero(case):
    rc, out, err = run(support.input_store(*case), "--verify",
                       "--broker-config", support.broker_conf(*case))
    assert rc == 0 and err == ""
    assert out.splitlines()[-1].startswith("verify: no anomalies")


@pytest.mark.parametrize("case", [c for c in CASES if "torn" in c[1]], ids=support.case_id)
def test_torn_middle_position_and_check_match_the_readme(case):
    """README: the magic code or the first body byte of the record at <file offset> (phy <phy>) was
    damaged; everything after it in the file is lost (written but not survived)."""
    damage = readme_damage()[case]
    m = re.search(r"(\d{20}) .*file offset (\d+) \(phy (\d+), size (\d+)", damage)
    segment, position, phy, size = m.group(1), *map(int, m.groups()[1:])
    check = "bad_magic" if "MAGIC CODE" in damage else "body_crc" if "BODY byte" in damage else None
    _, anomalies = verified(case)
    (cut,) = [a for a in anomalies if a["kind"] == "commitlog.bad_record"]
    assert (Path(cut["file"]).name, cut["position"], cut["phy_offset"]) == (segment, position, phy)
    assert (cut["details"]["check"], cut["details"]["declared_size"]) == (check, size)
    end = int(segment) + support.expected(*case)["storeConfig"]["mappedFileSizeCommitLog"]
    lost_behind = [w for w in written(case) if phy < w["phyOffset"] < end and not w["survived"]]
    assert cut["details"]["records_after_cut"] == len(lost_behind) > 0
    assert cut["details"]["resync_position"] == lost_behind[0]["phyOffset"] - int(segment)


@pytest.mark.parametrize("version", support.VERSIONS)
def test_readme_counts_of_dangling_index_entries(version):
    """README items 10 and 11: 267 entries below the min after retention, 936 when every commitlog
    file is gone; item 7: cq-dirty's index entries beyond the cut are those of the lost messages."""
    _, anomalies = verified((version, "oldest-deleted"))
    assert sum(a["count"] for a in anomalies if a["kind"] == "index.below_min") == 267
    _, anomalies = verified((version, "commitlog-all-deleted"))
    headers = support.expected(version, "commitlog-all-deleted")["afterLoad"]["indexFiles"]
    assert sum(a["count"] for a in anomalies if a["kind"] == "index.beyond_max") == \
        sum(h["indexCount"] - 1 for h in headers) == 936
    case = (version, "cq-dirty")
    _, anomalies = verified(case)
    _, hi = broker_end(case)
    lost_keys = sum(key_count(m) for m in written(case)
                    if m["phyOffset"] >= hi and m["sysFlag"] & TRAN_MASK != ROLLBACK)
    assert sum(a["count"] for a in anomalies if a["kind"] == "index.beyond_max") == lost_keys
    lost_entries = {(m["topic"], m["queueId"], m["queueOffset"]) for m in written(case)
                    if m["phyOffset"] >= hi and m["sysFlag"] & TRAN_MASK in DISPATCHED_TRAN}
    assert cq_offsets(anomalies, "cq.beyond_max") == lost_entries


@pytest.mark.parametrize("version", support.VERSIONS)
def test_single_file_verify_keeps_the_anomalies_of_that_file(version):
    case = (version, "torn-middle-crc")
    _, anomalies = verified(case)
    conf = support.broker_conf(*case)
    one_per_kind = {a["kind"]: a for a in anomalies}.values()
    for a in one_per_kind:
        rc, out, _ = run(a["file"], "--verify", "--json", "--broker-config", conf)
        mine = [x for x in json_lines(out) if x["type"] == "anomaly"]
        assert rc == 1 and mine == [x for x in anomalies if x["file"] == a["file"]]
    clean_file = support.input_store(*case) / "commitlog" / "00000000000000000000"
    rc, out, _ = run(clean_file, "--verify", "--broker-config", conf)
    assert rc == 0 and out.splitlines()[-1] == "verify: no anomalies (1 file checked)"


@pytest.mark.parametrize("version", support.VERSIONS)
def test_verify_index_only(version):
    case = (version, "cq-dirty")
    rc, out, _ = run(support.input_store(*case), "--verify-index-only", "--json",
                     "--broker-config", support.broker_conf(*case))
    anomalies = [x for x in json_lines(out) if x["type"] == "anomaly"]
    assert rc == 1 and set(kinds(anomalies)) == {"index.beyond_max"}
    assert anomalies == [a for a in verified(case)[1] if a["kind"].startswith("index.")]
    rc, _, err = run(support.input_store(*case) / "checkpoint", "--verify-index-only",
                     "--broker-config", support.broker_conf(*case))
    assert rc == 2 and "index file" in err


# -- damage made here (what a kill -9 or a disk leaves), on copies of the clean store ----------------

def _copy(case, tmp_path) -> Path:
    dest = tmp_path / "store"
    shutil.copytree(support.input_store(*case), dest)
    return dest


@pytest.mark.parametrize("version", support.VERSIONS)
def test_torn_tail_of_the_last_record_is_an_anomaly(version, tmp_path):
    """kill -9 while the last record was being copied into the mapped file: its header is there,
    the rest of it never reached the page cache (zeros). The broker truncates it."""
    case = (version, "clean")
    root = _copy(case, tmp_path)
    last = max(written(case), key=lambda m: m["phyOffset"])
    seg_size = support.expected(*case)["storeConfig"]["mappedFileSizeCommitLog"]
    segment = root / "commitlog" / f"{last['phyOffset'] - last['phyOffset'] % seg_size:020d}"
    position = last["phyOffset"] % seg_size
    data = bytearray(segment.read_bytes())
    data[position + 60:] = bytes(len(data) - position - 60)     # keep the first 60 header bytes
    segment.write_bytes(bytes(data))
    rc, out, _ = run(root, "--verify", "--json", "--broker-config", support.broker_conf(*case))
    anomalies = [x for x in json_lines(out) if x["type"] == "anomaly"]
    (torn,) = [a for a in anomalies if a["kind"] == "commitlog.bad_record"]
    assert rc == 1 and (torn["position"], torn["phy_offset"]) == (position, last["phyOffset"])
    assert torn["details"]["end_reason"] == "torn_tail" and torn["details"]["broker_cut"]
    assert torn["details"]["declared_size"] == last["size"]
    # the record's consume queue and index entries now point at the cut
    assert cq_offsets(anomalies, "cq.beyond_max") == \
        ({(last["topic"], last["queueId"], last["queueOffset"])}
         if last["sysFlag"] & TRAN_MASK in DISPATCHED_TRAN else set())
    assert sum(a["count"] for a in anomalies if a["kind"] == "index.beyond_max") == key_count(last)


@pytest.mark.parametrize("version", support.VERSIONS)
def test_blank_entry_in_the_middle_and_swapped_entries(version, tmp_path):
    """A zeroed entry in one of a queue's last three files, swapped entries after it: the broker's
    CQ recovery ends the queue at the zeroed slot (the real 4.9.7 and 5.3.3 brokers restarted on
    this store keep offsets 0..4: maxOffset 5), so the swapped entries are dropped with the rest
    and every record from the slot on is left without an entry (two runs: one per CQ file)."""
    case = (version, "clean")
    root = _copy(case, tmp_path)
    cq = root / "consumequeue" / "TopicA" / "0" / "00000000000000000000"
    data = bytearray(cq.read_bytes())
    u = CQ_STORE_UNIT_SIZE
    data[5 * u:6 * u] = bytes(u)                                       # entry 5: zeroed
    data[7 * u:8 * u], data[8 * u:9 * u] = data[8 * u:9 * u], data[7 * u:8 * u]   # 7 <-> 8
    cq.write_bytes(bytes(data))
    rc, out, _ = run(root, "--verify", "--json", "--broker-config", support.broker_conf(*case))
    anomalies = [x for x in json_lines(out) if x["type"] == "anomaly"]
    queued = support.expected(*case)["afterRecovery"]["consumeQueues"]["TopicA"]["0"]["maxOffset"]
    assert rc == 1 and kinds(anomalies) == Counter({"cq.blank_in_middle": 1, "cq.missing_entries": 2})
    assert cq_offsets(anomalies, "cq.blank_in_middle") == {("TopicA", 0, 5)}
    assert cq_offsets(anomalies, "cq.missing_entries") == {("TopicA", 0, q) for q in range(5, queued)}


@pytest.mark.parametrize("version", support.VERSIONS)
def test_swapped_entries(version, tmp_path):
    """Two entries swapped: the broker keeps them (the real brokers serve offset 7 -> the record
    stored at offset 8 and 8 -> 7), each a record of the queue served at another offset."""
    case = (version, "clean")
    root = _copy(case, tmp_path)
    cq = root / "consumequeue" / "TopicA" / "0" / "00000000000000000000"
    data = bytearray(cq.read_bytes())
    u = CQ_STORE_UNIT_SIZE
    data[7 * u:8 * u], data[8 * u:9 * u] = data[8 * u:9 * u], data[7 * u:8 * u]
    cq.write_bytes(bytes(data))
    rc, out, _ = run(root, "--verify", "--json", "--broker-config", support.broker_conf(*case))
    anomalies = [x for x in json_lines(out) if x["type"] == "anomaly"]
    assert rc == 1 and kinds(anomalies) == Counter({"cq.renumbered": 1})
    assert cq_offsets(anomalies, "cq.renumbered") == {("TopicA", 0, 7), ("TopicA", 0, 8)}
    (moved,) = anomalies
    assert "TopicA/0 queue offset 8" in moved["message"] and moved["file"] == str(cq)
    assert moved["finding"] == "renumbered" and moved["position"] == 7 * u


@pytest.mark.parametrize("version", support.VERSIONS)
def test_index_slot_chain_and_header_damage(version, tmp_path):
    case = (version, "clean")
    root = _copy(case, tmp_path)
    cfg = support.expected(*case)["storeConfig"]
    slots, num = cfg["maxHashSlotNum"], cfg["maxIndexNum"]
    path = sorted((root / "index").iterdir())[0]
    with IndexFile(path, slots, num) as f:
        used_slot = int(np.flatnonzero(f.slots)[0])
        count = f.header.index_count
    data = bytearray(path.read_bytes())
    # slot `used_slot` -> entry 9999 (beyond indexCount): its chain becomes unreachable
    struct.pack_into(">i", data, INDEX_HEADER_SIZE + used_slot * HASH_SLOT_SIZE, 9999)
    # endPhyOffset (header bytes 24..31) no longer that of the last entry
    struct.pack_into(">q", data, 24, 1)
    path.write_bytes(bytes(data))
    rc, out, _ = run(path, "--verify", "--json", "--broker-config", support.broker_conf(*case))
    anomalies = [x for x in json_lines(out) if x["type"] == "anomaly"]
    assert rc == 1
    by_kind = {a["kind"]: a for a in anomalies}
    assert by_kind["index.bad_header"]["position"] == 24
    chain = [a for a in anomalies if a["kind"] == "index.slot_chain"]
    assert chain[0]["position"] == INDEX_HEADER_SIZE + used_slot * HASH_SLOT_SIZE
    assert "9999" in chain[0]["message"]
    unreachable = [a for a in chain if "unreachable" in a["message"]]
    assert unreachable and all(INDEX_HEADER_SIZE + slots * HASH_SLOT_SIZE < a["position"]
                               <= INDEX_HEADER_SIZE + slots * HASH_SLOT_SIZE + count * INDEX_ENTRY_SIZE
                               for a in unreachable)


CONF_LMQ = ("mappedFileSizeCommitLog=65536\nmappedFileSizeConsumeQueue=600\nmaxHashSlotNum=100\n"
            "maxIndexNum=400\nenableMultiDispatch=true\nenableLmq=true\nmessageIndexEnable=false\n")


def _lmq_store(root: Path) -> list[tuple[int, int]]:
    """Five TopicL/1 records, each also dispatched to %LMQ%a (offsets 0..4) and %LMQ%b (5..9), and
    the consume queues a broker writes for them; returns (phy, size) per record."""
    (root / "commitlog").mkdir(parents=True)
    (root / "broker.conf").write_text(CONF_LMQ)
    buf, pos, recs = bytearray(65536), 0, []
    for i in range(5):
        rec = encode_message(topic="TopicL", queue_id=1, queue_offset=i, phy_offset=pos, body=b"x" * 10,
                             properties={"KEYS": f"k{i}", "INNER_MULTI_DISPATCH": "%LMQ%a,%LMQ%b",
                                         "INNER_MULTI_QUEUE_OFFSET": f"{i},{5 + i}"},
                             store_timestamp=1_700_000_000_000 + i, trailing_separator=True)
        buf[pos:pos + len(rec)] = rec
        recs.append((pos, len(rec)))
        pos += len(rec)
    (root / "commitlog" / f"{0:020d}").write_bytes(bytes(buf))
    phy, size = [p for p, _ in recs], [s for _, s in recs]
    for topic, qid, first in (("TopicL", 1, 0), ("%LMQ%a", 0, 0), ("%LMQ%b", 0, 5)):
        write_queue(root / "consumequeue" / topic / str(qid), phy, size, [0] * 5, first, 600)
    write_checkpoint(root / "checkpoint", Checkpoint(1_700_000_000_004, 1_700_000_000_004, 0))
    return recs


def test_lmq_copies_are_expected_in_their_queues(tmp_path):
    root = tmp_path / "store"
    recs = _lmq_store(root)
    rc, out, _ = run(root, "--verify", "--json")
    assert rc == 0, out
    # the LMQ queue loses its last entry: a dispatched copy without an entry
    lmq = root / "consumequeue" / "%LMQ%a" / "0" / f"{0:020d}"
    data = bytearray(lmq.read_bytes())
    data[4 * CQ_STORE_UNIT_SIZE:5 * CQ_STORE_UNIT_SIZE] = bytes(CQ_STORE_UNIT_SIZE)
    lmq.write_bytes(bytes(data))
    rc, out, _ = run(root, "--verify", "--json")
    anomalies = [x for x in json_lines(out) if x["type"] == "anomaly"]
    assert rc == 1 and [a["kind"] for a in anomalies] == ["cq.missing_entries"]
    assert cq_offsets(anomalies, "cq.missing_entries") == {("%LMQ%a", 0, 4)}
    assert anomalies[0]["phy_offset"] == recs[4][0]


def test_pure_python_scanner_gives_the_same_verdict(monkeypatch):
    case = (V5, "torn-middle-magic")
    monkeypatch.setenv("STORE_READER_PURE", "1")
    rc, out, _ = run(support.input_store(*case), "--verify", "--json",
                     "--broker-config", support.broker_conf(*case))
    assert (rc, tuple(x for x in json_lines(out) if x["type"] == "anomaly")) == verified(case)


# -- output of each file kind ---------------------------------------------------------------------

RECORD_LINE = re.compile(r"offset: (\d+) position: (\d+) size: (\d+) topic: (\S+) queueId: (\d+) "
                         r"queueOffset: (\d+) storeTime: (\S+) keys: (.*) msgId: ([0-9A-F]+) "
                         r"crc (ok|BAD)")


def _segments(case) -> list[Path]:
    return sorted((support.input_store(*case) / "commitlog").iterdir())


def _scan_log(case) -> dict[int, dict]:
    return {m["phyOffset"]: m for m in support.expected(*case)["afterRecovery"]["commitLogScan"]
            if "phyOffset" in m}


@pytest.mark.parametrize("version", support.VERSIONS)
def test_commitlog_text_lines_match_the_broker_scan(version):
    case = (version, "clean")
    scan = _scan_log(case)
    seen = 0
    for seg in _segments(case):
        rc, out, _ = run(seg, "--broker-config", support.broker_conf(*case))
        assert rc == 0
        for line in out.splitlines():
            m = RECORD_LINE.fullmatch(line)
            if not m:
                assert line.startswith("# ") or (line.startswith("offset: ") and "END-OF-FILE" in line)
                continue
            phy, pos, size, topic, qid, qoff, iso, keys, msg_id, crc = m.groups()
            b = scan[int(phy)]
            assert (int(phy) - int(pos), int(size), topic, int(qid), int(qoff), msg_id, crc) == \
                (int(seg.name), b["size"], b["topic"], b["queueId"], b["queueOffset"], b["msgId"], "ok")
            assert keys == (b["keys"] or "-") and iso == iso_ms(b["storeTimestamp"])
            seen += 1
    assert seen == len(scan)


@pytest.mark.parametrize("version", support.VERSIONS)
def test_commitlog_json_deep_and_bodies_match(version):
    case = (version, "clean")
    scan = _scan_log(case)
    seg = _segments(case)[0]
    opts = open_store(support.input_store(*case), support.broker_conf(*case)).scan_options()
    library = [r for b in SegmentScan(seg, opts, include_lost=True) for r in b.to_pylist()]
    rc, out, _ = run(seg, "--deep", "--print-body", "--json",
                     "--broker-config", support.broker_conf(*case))
    records = [x for x in json_lines(out) if x["type"] == "record"]
    assert rc == 0 and len(records) == len(library) > 0
    for rec, lib in zip(records, library):
        for name, value in lib.items():
            if name == "properties":
                assert rec[name] == dict(value)
            else:
                assert rec[name] == value, name
        b = scan[rec["phy_offset"]]
        assert rec["properties"] == b["properties"] and rec["tags"] == b["tags"]
        assert rec["born_host"] == b["bornHost"].lstrip("/") and rec["body_length"] == b["bodyLen"]
        body = (rec["body"].encode("utf-8") if rec["body_encoding"] == "utf8"
                else base64.b64decode(rec["body"]))
        assert zlib.crc32(body) & 0x7FFFFFFF == b["bodyCRC"] and len(body) == b["bodyLen"]
    assert {r["body_encoding"] for r in records} == {"utf8", "base64"}   # text and random bodies
    end = [x for x in json_lines(out) if x["type"] == "segment"][0]
    blank = next(m for m in support.expected(*case)["afterRecovery"]["commitLogScan"] if "blankAt" in m)
    assert end["end_reason"] == "eof_marker" and end["valid_bytes"] == blank["blankAt"]


@pytest.mark.parametrize("version", support.VERSIONS)
def test_max_bytes_stops_the_listing(version):
    case = (version, "clean")
    seg = _segments(case)[0]
    scan = sorted(p for p in _scan_log(case) if p < int(seg.name) + 65536)
    limit = scan[5]                              # records 0..4 end at or before the 6th one's start
    rc, out, _ = run(seg, "--max-bytes", limit, "--json", "--broker-config", support.broker_conf(*case))
    lines = json_lines(out)
    assert rc == 0 and [x["phy_offset"] for x in lines if x["type"] == "record"] == scan[:5]
    assert lines[-1] == {"type": "stopped", "file": str(seg), "max_bytes": limit}


@pytest.mark.parametrize("version", support.VERSIONS)
def test_corrupt_segment_listing_shows_the_cut_and_the_lost_records(version):
    case = (version, "torn-middle-magic")
    seg = support.input_store(*case) / "commitlog" / "00000000000000786432"
    rc, out, _ = run(seg, "--json", "--broker-config", support.broker_conf(*case))
    lines = json_lines(out)
    _, hi = broker_end(case)
    cut = next(i for i, x in enumerate(lines) if x["type"] == "segment_end")
    assert lines[cut]["phy_offset"] == hi and lines[cut]["end_check"] == "bad_magic"
    assert all(x["valid_prefix"] for x in lines[:cut])
    lost = [x for x in lines[cut + 1:] if x["type"] == "record"]
    assert lost and not any(x["valid_prefix"] for x in lost)
    gone = {m["phyOffset"] for m in written(case) if not m["survived"] and m["phyOffset"] > hi}
    assert {x["phy_offset"] for x in lost} == gone
    rc, text, _ = run(seg, "--broker-config", support.broker_conf(*case))
    assert f"offset: {hi} position: {hi - 786432} INVALID bad_magic" in text


@pytest.mark.parametrize("version", support.VERSIONS)
def test_consume_queue_file_text_and_json(version):
    case = (version, "clean")
    st = support.expected(*case)["afterRecovery"]["consumeQueues"]["TopicA"]["0"]
    rows = {e[0]: e for e in st["entries"]}
    d = support.input_store(*case) / "consumequeue" / "TopicA" / "0"
    file_size = support.expected(*case)["storeConfig"]["mappedFileSizeConsumeQueue"]
    per_file = file_size // CQ_STORE_UNIT_SIZE
    for path in sorted(d.iterdir()):
        rc, out, _ = run(path, "--json")
        lines = json_lines(out)
        entries = [x for x in lines if x["type"] == "cq_entry"]
        assert rc == 0 and entries
        for x in entries:
            assert [x["queue_offset"], x["phy_offset"], x["size"], x["tags_code"]] == \
                rows[x["queue_offset"]]
            assert x["position"] == (x["queue_offset"] * CQ_STORE_UNIT_SIZE) % file_size
        blanks = sum(x["count"] for x in lines if x["type"] == "cq_blank")
        assert len(entries) + blanks == per_file
        rc, text, _ = run(path)
        first = entries[0]
        assert text.splitlines()[0] == (
            f"queueOffset: {first['queue_offset']} position: {first['position']} "
            f"phyOffset: {first['phy_offset']} size: {first['size']} tagsCode: {first['tags_code']}")
    assert sorted(rows) == list(range(st["minOffset"], st["maxOffset"]))


@pytest.mark.parametrize("version", support.VERSIONS)
def test_index_file_header_and_entries(version):
    case = (version, "clean")
    exp = {h["name"]: h for h in support.expected(*case)["afterRecovery"]["indexFiles"]}
    cfg = support.expected(*case)["storeConfig"]
    for path in sorted((support.input_store(*case) / "index").iterdir()):
        rc, out, _ = run(path, "--json", "--deep", "--broker-config", support.broker_conf(*case))
        lines = json_lines(out)
        header = lines[0]
        h = exp[path.name]
        names = ("begin_timestamp", "end_timestamp", "begin_phy_offset", "end_phy_offset",
                 "hash_slot_count", "index_count")
        assert rc == 0 and [header[k] for k in names] == \
            [h["beginTimestamp"], h["endTimestamp"], h["beginPhyOffset"], h["endPhyOffset"],
             h["hashSlotCount"], h["indexCount"]]
        entries = [x for x in lines if x["type"] == "index_entry"]
        with IndexFile(path, cfg["maxHashSlotNum"], cfg["maxIndexNum"]) as f:
            table = f.entries_table().to_pylist()
        assert len(entries) == len(table) == h["indexCount"] - 1
        for x, t in zip(entries, table):
            assert {k: x[k] for k in t if k != "file"} == {k: v for k, v in t.items() if k != "file"}
            assert x["position"] == (INDEX_HEADER_SIZE + cfg["maxHashSlotNum"] * HASH_SLOT_SIZE
                                     + t["entry_number"] * INDEX_ENTRY_SIZE)
            assert x["time"] == h["beginTimestamp"] + t["time_diff"] * 1000
        slots = [x for x in lines if x["type"] == "index_slot"]
        assert len(slots) == h["hashSlotCount"]


@pytest.mark.parametrize("case", [c for c in CASES if c[1] in ("clean", "crash-tail")],
                         ids=support.case_id)
def test_checkpoint_and_config(case):
    root = support.input_store(*case)
    rc, out, _ = run(root / "checkpoint", "--json")
    (ck,) = json_lines(out)
    want = support.expected(*case)["input"]["checkpoint"]
    assert rc == 0 and ck["file_length"] == want["fileLength"]
    for name in ("physicMsgTimestamp", "logicsMsgTimestamp", "indexMsgTimestamp"):
        assert ck[re.sub(r"([A-Z])", r"_\1", name).lower()] == want[name]
    assert ck["min_timestamp"] == \
        max(0, min(want["physicMsgTimestamp"], want["logicsMsgTimestamp"]) - 3000)
    rc, out, _ = run(root / "config" / "consumerOffset.json", "--json")
    doc, load = json_lines(out)
    rows = read_consumer_offsets(root).value.to_pylist()
    assert rc == 0 and load["verdict"].startswith("current")
    assert sorted((r["topic"] + "@" + r["group"], str(r["queue_id"]), r["offset"]) for r in rows) == \
        sorted((tg, q, off) for tg, qs in doc["content"]["offsetTable"].items()
               for q, off in qs.items())


@pytest.mark.parametrize("case", [c for c in CASES if c[1] in ("clean", "torn-middle-crc")],
                         ids=support.case_id)
def test_store_overview(case):
    root = support.input_store(*case)
    rc, out, _ = run(root, "--json", "--broker-config", support.broker_conf(*case))
    lines = json_lines(out)
    by_type = Counter(x["type"] for x in lines)
    exp = support.expected(*case)
    assert rc == 0 and by_type["segment"] == len(input_paths(case, "commitlog/"))
    assert by_type["consume_queue"] == len(list_queues(root))
    headers = {x["name"]: x for x in lines if x["type"] == "index_file"}
    assert set(headers) == {Path(p).name for p in input_paths(case, "index/")}
    for name, x in headers.items():
        assert x["index_count"] == read_header(root / "index" / name).index_count
    (state,) = [x for x in lines if x["type"] == "process_state"]
    assert state["abort"] == exp["input"]["abortFileExists"] and not state["lock_held"]
    # intact records: those the broker kept, plus the lost ones except the damaged record at the cut
    segments = [x for x in lines if x["type"] == "segment"]
    _, hi = broker_end(case)
    kept = [m for m in exp["afterRecovery"]["commitLogScan"] if "phyOffset" in m]
    lost_intact = [m for m in written(case) if not m["survived"] and m["phyOffset"] != hi]
    assert sum(s["records"] + s["records_after_cut"] for s in segments) == len(kept) + len(lost_intact)
    rc, text, _ = run(root, "--broker-config", support.broker_conf(*case))
    assert text.startswith(f"store: {root} ") and "layout: mappedFileSizeCommitLog: 65536" in text


# -- bad input ------------------------------------------------------------------------------------

def _assert_refused(rc: int, err: str, path: Path, position: int | None) -> None:
    assert rc == 2 and "Traceback" not in err and str(path) in err
    if position is not None:
        assert f"@ byte {position}:" in err


def test_missing_path(tmp_path):
    rc, out, err = run(tmp_path / "nope")
    _assert_refused(rc, err, tmp_path / "nope", None)
    assert "does not exist" in err and out == ""


def test_random_bytes_in_a_commitlog_segment(tmp_path):
    case = (V4, "clean")
    root = _copy(case, tmp_path)
    seg = _segments(case)[3]
    target = root / "commitlog" / seg.name
    target.write_bytes(np.random.default_rng(7).integers(0, 256, 65536, dtype=np.uint8)
                       .tobytes().replace(b"\xda\xa3\x20", b"\x00\x00\x00"))   # no V1/V2 magic
    rc, _, err = run(target, "--broker-config", support.broker_conf(*case))
    _assert_refused(rc, err, target, 0)
    assert "not a commitlog segment" in err
    rc, out, err = run(root, "--verify", "--broker-config", support.broker_conf(*case))
    assert rc == 2 and f"UNREADABLE {target} @ byte 0" in out and out.splitlines()[-1].startswith(
        "verify: INCOMPLETE")


def test_truncated_consume_queue_and_index_files(tmp_path):
    case = (V5, "clean")
    root = _copy(case, tmp_path)
    cq = root / "consumequeue" / "TopicA" / "0" / "00000000000000000000"
    cq.write_bytes(cq.read_bytes()[:310])                  # 15 entries and 10 bytes of the 16th
    rc, _, err = run(cq)
    _assert_refused(rc, err, cq, 300)
    index = sorted((root / "index").iterdir())[0]
    index.write_bytes(index.read_bytes()[:1000])
    rc, _, err = run(index, "--broker-config", support.broker_conf(*case))
    _assert_refused(rc, err, index, 1000)
    assert "8440" in err
    rc, out, err = run(root, "--verify", "--json", "--broker-config", support.broker_conf(*case))
    errors = {(x["file"], x["position"]) for x in json_lines(out) if x["type"] == "error"}
    assert rc == 2 and errors == {(str(cq), 300), (str(index), 1000)}


def test_index_file_of_other_settings_names_the_settings(tmp_path):
    case = (V4, "clean")
    index = sorted((support.input_store(*case) / "index").iterdir())[0]
    rc, _, err = run(index)                       # broker defaults: 5,000,000 slots
    _assert_refused(rc, err, index, 8440)
    assert "broker.conf" in err


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_unreadable_file_chmod(tmp_path):
    case = (V4, "clean")
    root = _copy(case, tmp_path)
    target = root / "consumequeue" / "TopicA" / "0" / "00000000000000000000"
    target.chmod(0)
    try:
        rc, _, err = run(target)
    finally:
        target.chmod(0o644)
    _assert_refused(rc, err, target, None)


def test_unreadable_file_io_error(tmp_path, monkeypatch):
    """An I/O error while opening (what a permission or disk failure gives, also as root)."""
    case = (V4, "clean")
    root = _copy(case, tmp_path)
    target = root / "consumequeue" / "TopicA" / "0" / "00000000000000000000"
    real_open = open

    def failing_open(file, *args, **kwargs):
        if os.fspath(file) == str(target):
            raise PermissionError(13, "Permission denied", str(target))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr("builtins.open", failing_open)
    rc, _, err = run(target)
    _assert_refused(rc, err, target, None)
    assert "Permission denied" in err
    rc, out, _ = run(root, "--verify", "--broker-config", support.broker_conf(*case))
    assert rc == 2 and f"UNREADABLE {target}" in out


def test_not_a_store_file_and_not_a_store(tmp_path):
    stray = tmp_path / "notes.txt"
    stray.write_text("hello")
    rc, _, err = run(stray)
    _assert_refused(rc, err, stray, None)
    assert "not a store file" in err
    rc, _, err = run(tmp_path)
    _assert_refused(rc, err, tmp_path, None)
    assert "not a RocketMQ store root" in err


def test_garbage_config_file(tmp_path):
    case = (V5, "clean")
    root = _copy(case, tmp_path)
    conf = root / "config" / "topics.json"
    data = b'{"topicConfigTable": {"A": \x00\x01'
    conf.write_bytes(data)
    rc, _, err = run(conf)
    _assert_refused(rc, err, conf, data.index(b"\x00"))
    rc, out, _ = run(root, "--verify", "--json", "--broker-config", support.broker_conf(*case))
    (bad,) = [x for x in json_lines(out) if x["type"] == "anomaly"]
    assert rc == 1 and bad["kind"] == "config.undecodable" and bad["file"] == str(conf)


def test_usage_errors_exit_2(capsys):
    assert dump.main(["--max-bytes", "-1", "x"]) == 2
    assert dump.main([]) == 2
    assert "usage" in capsys.readouterr().err


# -- as operators run it ---------------------------------------------------------------------------

def _subprocess(*args: object, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *map(str, args)], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=300)


def test_command_line_verify_and_bad_input():
    case = (V4, "torn-middle-magic")
    m = re.search(r"(\d{20}) .*file offset (\d+) \(phy (\d+)", readme_damage()[case])
    p = _subprocess("-m", "jobs.dump", support.input_store(*case), "--verify",
                    "--broker-config", support.broker_conf(*case))
    assert p.returncode == 1 and p.stderr == ""
    assert p.stdout.splitlines()[-1].startswith("verify: ")
    segment = support.input_store(*case) / "commitlog" / m.group(1)
    assert (f"ANOMALY commitlog.bad_record {segment} @ byte {m.group(2)} (phy {m.group(3)}): "
            "first record failing a check: bad_magic") in p.stdout
    p = _subprocess("-m", "jobs.dump", "/nonexistent/store/checkpoint")
    assert p.returncode == 2 and "Traceback" not in p.stderr and "does not exist" in p.stderr


def test_never_imports_pyspark():
    """The dump must start without Spark: nothing under pyspark is imported, directly or not."""
    case = (V4, "clean")
    p = _subprocess("-X", "importtime", "-m", "jobs.dump", support.input_store(*case) / "checkpoint")
    assert p.returncode == 0
    imported = {line.split("|")[-1].strip() for line in p.stderr.splitlines() if "|" in line}
    assert "jobs.dump" in imported or "store_reader" in imported
    assert not [m for m in imported if m.split(".")[0] in ("pyspark", "py4j", "delta")]


# -- issue 40: messages that say what is wrong ---------------------------------------------------

def test_a_symbolic_link_that_leads_nowhere_says_so(tmp_path):
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    (tmp_path / "dangling").symlink_to(tmp_path / "gone")
    assert run(tmp_path / "a")[::2] == (2, f"dump: error: {tmp_path / 'a'}: is a symbolic link loop "
                                           "(it leads back to itself)\n")
    assert run(tmp_path / "dangling")[::2] == (2, f"dump: error: {tmp_path / 'dangling'}: is a symbolic "
                                                  f"link to {tmp_path / 'gone'}, which does not exist\n")
    assert run(tmp_path / "missing")[::2] == (2, f"dump: error: {tmp_path / 'missing'}: does not exist\n")


def test_a_checkpoint_longer_than_the_broker_maps_is_described_as_such(tmp_path):
    """A 1 GiB checkpoint (sparse): the broker maps its first 4096 bytes and ignores the rest."""
    case = (support.VERSIONS[0], "clean")
    store = tmp_path / "store"
    shutil.copytree(support.input_store(*case), store)
    os.truncate(store / "checkpoint", 1 << 30)
    rc, out, _ = run(store, "--verify", "--json", "--broker-config", support.broker_conf(*case))
    (found,) = [a for a in json_lines(out) if a.get("kind") == "checkpoint.file_size"]
    assert found["message"] == (f"checkpoint is {1 << 30} bytes, not 4096: the broker maps its first 4096 "
                                f"and ignores the {(1 << 30) - 4096} bytes after them")


@pytest.mark.parametrize("first", ["maxHashSlotNum", "mappedFileSizeCommitLog"])
def test_a_broker_conf_with_a_byte_order_mark_is_named(tmp_path, first):
    """The broker reads broker.conf as ISO-8859-1: a UTF-8 byte order mark makes its first key
    another key, and that setting keeps its default, for the broker and for this tool alike. The
    message about sizes that do not fit then says so."""
    case = (support.VERSIONS[0], "clean")
    lines = [line for line in support.broker_conf(*case).read_text().splitlines() if line and line[0] != "#"]
    lines.sort(key=lambda line: not line.startswith(first + "="))
    conf = tmp_path / "broker.conf"
    conf.write_text("\ufeff" + "\n".join(lines) + "\n", encoding="utf-8")
    rc, out, err = run(support.input_store(*case), "--verify", "--broker-config", conf)
    assert rc == 2
    assert f"{conf} starts with a UTF-8 byte order mark: the broker, like this tool, does not see its first " \
           f"setting {lines[0]} and uses the default; remove the mark" in out + err
