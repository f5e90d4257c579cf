"""Salvage: the intact records the broker's recovery discards, exported for a producer
(``jobs.salvage``, ``store_reader.repair.salvage``).

Expectations come from outside the code under test: the real broker's written messages and their
``survived`` flags (expected.json) on the fixtures' torn-middle stores, and records written here
with the record encoder after a synthetic store's cut (every kind the verdict distinguishes, bodies
compressed with zlib, lz4 and zstd, LMQ and ``__CRC32#`` records).
"""
from __future__ import annotations

import base64
import re
import shutil
import json
import os
import subprocess
import sys
import zlib
from pathlib import Path

import lz4.frame
import pyarrow.parquet as pq
import pytest
import zstandard

from jobs import salvage as salvage_job
from store_reader.formats import recordformat as rf
from store_reader.repair import salvage as sv
from store_reader.testing.synthetic import CrashSpec, SyntheticStoreSpec, encode_message, write_store
import support
from support import ROOT, broker_conf, case_id, expected, input_store

TORN_MIDDLE = [(v, s) for v in ("rocketmq-4.9.7", "rocketmq-5.3.3")
               for s in ("torn-middle-crc", "torn-middle-crc-normal", "torn-middle-magic")]
TEXT = b"the body as the producer sent it " * 20


# -- the verdict and the bodies, record by record ----------------------------------------------------

@pytest.mark.parametrize("topic, sys_flag, props, kind, send", [
    ("TopicA", 0, {}, "normal", True),
    (rf.SCHEDULE_TOPIC, 0, {"REAL_TOPIC": "TopicA", "DELAY": "3"}, "delayed", True),
    ("rmq_sys_wheel_timer", 0, {"REAL_TOPIC": "TopicA"}, "timer", True),
    ("%RETRY%G", 0, {}, "retry", True),
    ("%DLQ%G", 0, {}, "dlq", True),
    ("TopicA", rf.TRANSACTION_COMMIT_TYPE, {"TRAN_MSG": "true"}, "transaction_commit", True),
    ("RMQ_SYS_TRANS_HALF_TOPIC", 0, {"TRAN_MSG": "true"}, "transaction_half", False),
    ("RMQ_SYS_TRANS_OP_HALF_TOPIC", 0, {}, "transaction_op", False),
    ("TopicA", rf.TRANSACTION_PREPARED_TYPE, {}, "prepared", False),
    ("TopicA", rf.TRANSACTION_ROLLBACK_TYPE, {}, "rollback", False),
    ("RMQ_SYS_TRACE_TOPIC", 0, {}, "system", False),
    ("rmq_sys_SYNC_BROKER_MEMBER_x", 0, {}, "system", False),
    (rf.SCHEDULE_TOPIC, 0, {}, "system", False),
])
def test_classify(topic, sys_flag, props, kind, send):
    got, skip = sv.classify(topic, sys_flag, props)
    assert got == kind and (skip is None) == send


@pytest.mark.parametrize("type_bits, compress, name", [
    (0, lambda b: zlib.compress(b), "zlib"),                        # 4.9.7 clients: no type bits
    (3 << 8, lambda b: zlib.compress(b, 9), "zlib"),
    (1 << 8, lambda b: lz4.frame.compress(b), "lz4"),
    (2 << 8, lambda b: zstandard.ZstdCompressor().compress(b), "zstd"),
    # ZstdOutputStream writes no content size in the frame header
    (2 << 8, lambda b: zstandard.ZstdCompressor(write_content_size=False).compress(b), "zstd"),
])
def test_decompress_every_compression_type(type_bits, compress, name):
    assert sv.decompress(compress(TEXT), rf.COMPRESSED_FLAG | type_bits) == (name, TEXT)


def test_a_body_that_does_not_decompress_is_an_error():
    with pytest.raises(ValueError, match="lz4"):
        sv.decompress(b"not lz4 at all", rf.COMPRESSED_FLAG | 1 << 8)
    with pytest.raises(ValueError, match="unknown compression type 5"):
        sv.decompress(b"x", rf.COMPRESSED_FLAG | 5 << 8)


# -- the fixtures: what the real broker lost ---------------------------------------------------------

def _salvage(spark, store, conf, out, fmt="jsonl", **kw):
    return salvage_job.salvage(spark, str(store), str(out), str(conf), fmt=fmt, **kw)


def read_jsonl(path) -> list[dict]:
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh]


@pytest.mark.spark
@pytest.mark.parametrize("case", TORN_MIDDLE, ids=case_id)
def test_fixture_export_is_every_intact_record_the_broker_lost(case, spark, tmp_path):
    report = _salvage(spark, input_store(*case), broker_conf(*case), tmp_path / "lost.jsonl")
    rows = read_jsonl(tmp_path / "lost.jsonl")
    lost = [m for m in expected(*case)["writtenMessages"] if not m["survived"]]
    got = {r["phy_offset"]: r for r in rows}
    # the one record that broke the recovery is not intact; every other one is salvaged
    assert len(got) == len(rows) == len(lost) - 1 == report.send + report.skip
    assert [r["phy_offset"] for r in rows] == sorted(got)
    for m in lost:
        r = got.get(m["phyOffset"])
        if r is None:
            continue
        body = base64.b64decode(r["body"])
        assert (r["topic"], r["queue_id"], r["queue_offset"], r["msg_id"], r["uniq_key"], r["keys"],
                r["tags"], r["flag"], r["total_size"]) == \
            (m["origTopic"] or m["topic"], m["origQueueId"] if m["origTopic"] else m["queueId"],
             m["queueOffset"], m["msgId"], m["uniqKey"], m["keys"], m["tags"], m["flag"], m["size"])
        assert len(body) == m["bodyLen"] and zlib.crc32(body) & 0x7FFFFFFF == m["bodyCRC"] == r["body_crc"]
        assert r["replay"] == "send" and r["skip_reason"] is None
    missing = [m for m in lost if m["phyOffset"] not in got]
    assert len(missing) == 1


@pytest.mark.spark
def test_parquet_holds_the_same_rows_with_binary_bodies(spark, tmp_path):
    case = ("rocketmq-5.3.3", "torn-middle-crc")
    _salvage(spark, input_store(*case), broker_conf(*case), tmp_path / "a.jsonl")
    _salvage(spark, input_store(*case), broker_conf(*case), tmp_path / "a.parquet", fmt="parquet")
    t = pq.read_table(tmp_path / "a.parquet")
    rows = read_jsonl(tmp_path / "a.jsonl")
    assert t.num_rows == len(rows) > 0
    assert t.column("body").to_pylist() == [base64.b64decode(r["body"]) for r in rows]
    assert t.column("uniq_key").to_pylist() == [r["uniq_key"] for r in rows]
    assert [dict(p) for p in t.column("properties").to_pylist()] == [r["properties"] for r in rows]


@pytest.mark.spark
def test_nothing_lost_is_an_empty_file(spark, tmp_path):
    case = ("rocketmq-5.3.3", "clean")
    report = _salvage(spark, input_store(*case), broker_conf(*case), tmp_path / "none.jsonl")
    assert report.send == report.skip == 0 and (tmp_path / "none.jsonl").read_bytes() == b""


def _job(args: list[str]) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "jobs.salvage", *args], capture_output=True, text=True,
                          env=env, timeout=600, cwd=ROOT)


def test_cli_refuses_an_existing_file_and_overwrites_with_the_flag(tmp_path):
    case = ("rocketmq-4.9.7", "torn-middle-magic")
    out = tmp_path / "lost.jsonl"
    out.write_text("earlier\n")
    args = ["--store", str(input_store(*case)), "--broker-config", str(broker_conf(*case)), "--out", str(out)]
    p = _job(args)
    errors = [line for line in p.stderr.splitlines() if line.startswith("error:")]
    assert p.returncode == 2 and errors == [f"error: {out}: output file exists (use --overwrite)"]
    assert out.read_text() == "earlier\n"
    p = _job(args + ["--overwrite"])
    assert p.returncode == 0, p.stderr
    assert len(read_jsonl(out)) == 20 and "20 to send again" in p.stdout
    assert sorted(os.listdir(tmp_path)) == ["lost.jsonl"]      # no temporary left


def test_cli_bad_store_is_one_error_line(tmp_path):
    p = _job(["--store", str(tmp_path / "nope"), "--out", str(tmp_path / "x.jsonl")])
    errors = [line for line in p.stderr.splitlines() if line.startswith("error:")]
    assert p.returncode == 2 and len(errors) == 1 and "Traceback" not in p.stderr
    assert not (tmp_path / "x.jsonl").exists()


# -- a synthetic store with every kind of lost record --------------------------------------------------

def lost_kinds_store(root: Path, broker: str = "5.3") -> tuple[Path, list[dict]]:
    """A synthetic store cut by a corrupt record, with records of every kind the salvage tells apart
    written after its last record (so behind the cut). Returns the root and what was appended
    (``encode_message`` arguments plus the expected kind and body)."""
    spec = SyntheticStoreSpec(total_bytes=3 << 20, segment_size=1 << 20, broker=broker,
                              append_prop_crc=broker == "5.3", topics=(("TopicA", 4), ("TopicB", 2)))
    info = write_store(root, spec, CrashSpec(corrupt="crc", preallocated_next=True))
    conf = root / "broker.conf"
    conf.write_text(conf.read_text() + "enableMultiDispatch=true\nenableLmq=true\n")
    five = broker == "5.3"
    base = {"born_host": "10.0.1.10:40000", "store_host": "10.0.0.1:10911", "trailing_separator": five,
            "append_crc32": spec.append_prop_crc}
    ts = info.checkpoint.physic_msg_timestamp + 60_000

    def props(n, **extra):
        return {"KEYS": f"S{n}", "TAGS": "TagA", "UNIQ_KEY": f"AC1100000000SALVAGE{n:013X}",
                "CLUSTER": spec.cluster, **extra}

    z = zlib.compress(TEXT)
    recs = [
        dict(topic="TopicA", queue_id=1, body=TEXT, properties=props(0), kind="normal"),
        dict(topic="TopicB", queue_id=0, body=z, sys_flag=rf.COMPRESSED_FLAG | (3 << 8 if five else 0),
             properties=props(1), kind="normal"),
        dict(topic=rf.SCHEDULE_TOPIC, queue_id=2, body=TEXT, kind="delayed", real=("TopicA", 3),
             properties=props(2, DELAY="3", REAL_TOPIC="TopicA", REAL_QID="3")),
        dict(topic="%RETRY%GroupX", queue_id=0, body=TEXT, reconsume_times=1, kind="retry",
             properties=props(3, RETRY_TOPIC="TopicA")),
        dict(topic="RMQ_SYS_TRANS_HALF_TOPIC", queue_id=0, body=TEXT, kind="transaction_half",
             properties=props(4, TRAN_MSG="true", PGROUP="P", REAL_TOPIC="TopicA", REAL_QID="0")),
        dict(topic="TopicA", queue_id=0, body=TEXT, sys_flag=rf.TRANSACTION_COMMIT_TYPE,
             kind="transaction_commit", properties=props(5, TRAN_MSG="true", PGROUP="P")),
        dict(topic="TopicA", queue_id=2, body=TEXT, sys_flag=rf.TRANSACTION_PREPARED_TYPE, kind="prepared",
             properties=props(6, TRAN_MSG="true")),
        dict(topic="TopicA", queue_id=2, body=TEXT, sys_flag=rf.TRANSACTION_ROLLBACK_TYPE, kind="rollback",
             properties=props(7)),
        dict(topic="RMQ_SYS_TRANS_OP_HALF_TOPIC", queue_id=0, body=b"12,", kind="transaction_op",
             properties={"TAGS": "d", "WAIT": "true"}),
        dict(topic="TopicA", queue_id=3, body=TEXT, kind="normal",
             properties=props(9, INNER_MULTI_DISPATCH="%LMQ%a,%LMQ%b", INNER_MULTI_QUEUE_OFFSET="0,0")),
    ]
    if five:
        recs += [
            dict(topic="TopicB", queue_id=1, body=lz4.frame.compress(TEXT), kind="normal",
                 sys_flag=rf.COMPRESSED_FLAG | 1 << 8, properties=props(10)),
            dict(topic="TopicB", queue_id=1, body=zstandard.ZstdCompressor().compress(TEXT), kind="normal",
                 sys_flag=rf.COMPRESSED_FLAG | 2 << 8, properties=props(11)),
        ]
    seg = spec.segment_size
    phy = info.written_end
    for i, r in enumerate(recs):
        args = {k: v for k, v in r.items() if k not in ("kind", "real")}
        data = encode_message(**base, **args, phy_offset=phy, queue_offset=1000 + i, store_timestamp=ts + i,
                              born_timestamp=ts + i - 3)
        assert phy % seg + len(data) + 8 <= seg, "the appended records fit the last file"
        with open(root / "commitlog" / f"{phy - phy % seg:020d}", "r+b") as fh:
            fh.seek(phy % seg)
            fh.write(data)
        r.update(phy=phy, size=len(data), store_timestamp=ts + i)
        phy += len(data)
    return root, recs


@pytest.mark.spark
@pytest.mark.parametrize("broker", ["5.3", "4.9"])
def test_synthetic_kinds_compression_lmq_and_crc32(broker, spark, tmp_path):
    root, recs = lost_kinds_store(tmp_path / "store", broker)
    report = _salvage(spark, root, root / "broker.conf", tmp_path / "lost.parquet", fmt="parquet")
    t = pq.read_table(tmp_path / "lost.parquet")
    got = {r["phy_offset"]: r for r in t.to_pylist()}
    assert report.send + report.skip == t.num_rows > len(recs)      # the generator's own too
    for r in recs:
        row = got[r["phy"]]
        assert row["kind"] == r["kind"]
        want_send = r["kind"] in ("normal", "delayed", "retry", "transaction_commit")
        assert (row["replay"] == "send") == want_send and (row["skip_reason"] is None) == want_send
        assert row["body"] == TEXT if r["kind"] != "transaction_op" else row["body"] == b"12,"
        assert row["uniq_key"] == r["properties"].get("UNIQ_KEY")
        assert row["store_time"].timestamp() * 1000 == r["store_timestamp"]
        if r["kind"] == "delayed":
            assert (row["topic"], row["queue_id"], row["stored_topic"], row["delay_level"]) == \
                ("TopicA", 3, rf.SCHEDULE_TOPIC, 3)
            assert row["deliver_time"].timestamp() * 1000 == r["store_timestamp"] + 10_000
        else:
            assert (row["topic"], row["queue_id"]) == (r["topic"], r["queue_id"])
        if r["body"] != TEXT and r["kind"] == "normal":
            assert row["compression"] in ("zlib", "lz4", "zstd")
        assert (rf.PROPERTY_CRC32 in dict(row["properties"])) == (broker == "5.3")


# -- the re-append: jobs.recover --salvage ------------------------------------------------------------

def _recover(spark, store, conf, out, version, salvage=True):
    from jobs.recover import recover

    return recover(spark, str(store), str(out), str(conf), version, salvage=salvage)


def _records(root: Path, conf, version: str) -> dict[int, dict]:
    """Every record of a store's commitlog by phy offset, as the scanner decodes it (CRCs computed),
    with where each file's valid prefix ended."""
    from store_reader import open_store

    store = open_store(root, conf)
    opts = store.scan_options(broker_5x=version == "5.3")
    t = store.scan_commitlog(columns=["phy_offset", "stored_phy_offset", "total_size", "topic", "queue_id",
                                      "queue_offset", "uniq_key", "body_crc_ok", "record_crc_ok", "body",
                                      "properties", "valid_prefix"], opts=opts, include_lost=True)
    return {r["phy_offset"]: r for b in t for r in b.to_pylist()}


def _cq_entry(root: Path, topic: str, qid: int, offset: int, cq_file_size: int) -> tuple[int, int, int]:
    from store_reader.formats.consumequeue import CQ_STORE_UNIT_SIZE, decode_entries, file_name

    per = cq_file_size // CQ_STORE_UNIT_SIZE
    path = root / "consumequeue" / topic / str(qid) / file_name((offset - offset % per) * CQ_STORE_UNIT_SIZE)
    with open(path, "rb") as fh:
        fh.seek(offset % per * CQ_STORE_UNIT_SIZE)
        e = decode_entries(fh.read(CQ_STORE_UNIT_SIZE))
    return int(e.phy_offset[0]), int(e.size[0]), int(e.tags_code[0])


def assert_reappended(spark, out: Path, conf, version: str, report, sent: list[dict]) -> None:
    """The repaired store holds every ``send`` record (``sent``: export rows) once more, in order,
    as the broker's put would have written it; a second run changes nothing."""
    from store_reader import open_store
    from store_reader.formats.indexfile import list_index_files, query

    manifest = json.loads((out / "MANIFEST.json").read_text())
    moved = manifest["salvaged"]["moved"]
    assert [m["oldPhyOffset"] for m in moved] == [r["phy_offset"] for r in sent]
    assert manifest["salvaged"]["records"] == len(sent)
    recs = _records(out, conf, version)
    end = report.prediction.max_phy_offset
    cfg = open_store(out, conf).config
    # every record of the repaired store lies in its files' valid prefixes, up to the new end
    assert all(r["valid_prefix"] and r["stored_phy_offset"] == phy for phy, r in recs.items())
    assert max(phy + r["total_size"] for phy, r in recs.items()) == manifest["salvaged"]["newMaxPhyOffset"]
    prev_end = end
    for m, row in zip(moved, sent):
        r = recs[m["newPhyOffset"]]
        assert m["newPhyOffset"] >= prev_end       # in order, after the cut (a blank marker may lie between)
        prev_end = m["newPhyOffset"] + r["total_size"]
        assert (r["topic"], r["queue_id"], r["queue_offset"], r["uniq_key"]) == \
            (row["stored_topic"], row["stored_queue_id"], m["newQueueOffset"], row["uniq_key"])
        assert r["body_crc_ok"] and r["record_crc_ok"] in (None, True)
        phy, size, _ = _cq_entry(out, r["topic"], r["queue_id"], m["newQueueOffset"], cfg.cq_file_size)
        assert (phy, size) == (m["newPhyOffset"], r["total_size"])
        if r["uniq_key"] and cfg.messageIndexEnable:
            files = list_index_files(out / "index", cfg.index_file_size)
            got = query(files, r["topic"], r["uniq_key"], hash_slot_num=cfg.maxHashSlotNum,
                        index_num=cfg.maxIndexNum)
            assert m["newPhyOffset"] in got
    # queue offsets continue each queue: none reused, none skipped
    by_queue: dict[tuple[str, int], list[int]] = {}
    for m in moved:
        by_queue.setdefault((m["topic"], m["queueId"]), []).append(m["newQueueOffset"])
    for offsets in by_queue.values():
        assert offsets == list(range(offsets[0], offsets[0] + len(offsets)))
    # a second run (the job on the salvaged store) finds nothing to change
    again = out.parent / (out.name + "-again")
    rerun = _recover(spark, out, conf, again, version)
    assert rerun.prediction.max_phy_offset == manifest["salvaged"]["newMaxPhyOffset"]
    assert rerun.salvaged.records.num_rows == 0
    for sub in ("commitlog", "consumequeue", "index"):
        assert support_digest(again / sub) == support_digest(out / sub), sub
    assert (again / "checkpoint").read_bytes() == (out / "checkpoint").read_bytes()
    lost = rerun.findings.tables.get("lost_messages")
    assert lost is None or lost.num_rows == 0


def support_digest(root: Path) -> str:
    import support

    return support.tree_digest(root)


@pytest.mark.spark
@pytest.mark.parametrize("case", TORN_MIDDLE, ids=case_id)
def test_fixture_salvage_reappends_every_send_record(case, spark, tmp_path):
    version = "5.3" if case[0].endswith("5.3.3") else "4.9"
    conf = broker_conf(*case)
    _salvage(spark, input_store(*case), conf, tmp_path / "lost.jsonl", broker_version=version)
    sent = [r for r in read_jsonl(tmp_path / "lost.jsonl") if r["replay"] == "send"]
    assert len(sent) == 20
    report = _recover(spark, input_store(*case), conf, tmp_path / "out", version)
    assert_reappended(spark, tmp_path / "out", conf, version, report, sent)
    # without --salvage the repaired store is what it always was
    plain = _recover(spark, input_store(*case), conf, tmp_path / "plain", version, salvage=False)
    assert plain.salvaged is None and "salvaged" not in json.loads((tmp_path / "plain/MANIFEST.json").read_text())


@pytest.mark.spark
@pytest.mark.parametrize("broker", ["5.3", "4.9"])
def test_synthetic_salvage_of_every_kind_lmq_and_crc32(broker, spark, tmp_path):
    root, recs = lost_kinds_store(tmp_path / "store", broker)
    conf = root / "broker.conf"
    _salvage(spark, root, conf, tmp_path / "lost.parquet", fmt="parquet", broker_version=broker)
    rows = pq.read_table(tmp_path / "lost.parquet").to_pylist()
    sent = [r for r in rows if r["replay"] == "send"]
    report = _recover(spark, root, conf, tmp_path / "out", broker)
    assert_reappended(spark, tmp_path / "out", conf, broker, report, sent)
    manifest = json.loads((tmp_path / "out/MANIFEST.json").read_text())
    moved = {m["oldPhyOffset"]: m for m in manifest["salvaged"]["moved"]}
    out_recs = _records(tmp_path / "out", conf, broker)
    for r in recs:
        if r["kind"] not in ("normal", "delayed", "retry", "transaction_commit"):
            assert r["phy"] not in moved, r["kind"]
            continue
        new = out_recs[moved[r["phy"]]["newPhyOffset"]]
        # the body as stored (compressed bodies stay compressed), properties kept
        assert new["body"] == r["body"]
        props = dict(new["properties"])
        assert props["UNIQ_KEY"] == r["properties"]["UNIQ_KEY"]
        if "INNER_MULTI_DISPATCH" in r["properties"]:
            # LMQ copies at the next offsets of their queues, the property rewritten to say so
            offsets = [int(o) for o in props["INNER_MULTI_QUEUE_OFFSET"].split(",")]
            assert moved[r["phy"]]["lmqOffsets"] == props["INNER_MULTI_QUEUE_OFFSET"]
            for name, o in zip(("%LMQ%a", "%LMQ%b"), offsets):
                phy, size, _ = _cq_entry(tmp_path / "out", name, 0, o, 300_000 * 20)
                assert phy == moved[r["phy"]]["newPhyOffset"]
        if broker == "5.3":
            assert new["record_crc_ok"] is True       # __CRC32# recomputed for the new place


def _corrupt_middle_of_second_file(tmp_path: Path) -> tuple[Path, int]:
    """A synthetic 5.x store (1 MiB files) with a body byte flipped in the middle of its second
    file: the broker's abnormal recovery (stale checkpoint) cuts there, and what follows (half a
    file and two more files) cannot fit the rest of the cut file when re-appended."""
    spec = SyntheticStoreSpec(total_bytes=3 << 20, segment_size=1 << 20, ipv6_fraction=0.0)
    info = write_store(tmp_path / "store", spec, CrashSpec(checkpoint_fraction=0.3))
    m = info.messages.to_pylist()
    victim = next(r for r in m if r["phy_offset"] >= (3 << 19) and r["kind"] == "normal")
    path = tmp_path / "store" / "commitlog" / f"{1 << 20:020d}"
    with open(path, "r+b") as fh:
        fh.seek(victim["phy_offset"] - (1 << 20) + 88)        # first body byte (V1, IPv4 hosts)
        b = fh.read(1)
        fh.seek(-1, os.SEEK_CUR)
        fh.write(bytes([b[0] ^ 0xFF]))
    return tmp_path / "store", victim["phy_offset"]


@pytest.mark.spark
def test_salvage_across_the_file_boundary(spark, tmp_path):
    root, cut = _corrupt_middle_of_second_file(tmp_path)
    conf = root / "broker.conf"
    _salvage(spark, root, conf, tmp_path / "lost.jsonl", broker_version="5.3")
    sent = [r for r in read_jsonl(tmp_path / "lost.jsonl") if r["replay"] == "send"]
    report = _recover(spark, root, conf, tmp_path / "out", "5.3")
    assert report.prediction.max_phy_offset == cut
    assert_reappended(spark, tmp_path / "out", conf, "5.3", report, sent)
    names = sorted(os.listdir(tmp_path / "out" / "commitlog"))
    assert len(names) >= 3                           # the records went on into new files
    # each file the re-append filled ends with a blank marker, none crossed
    import struct
    for name in names[1:-1]:
        data = (tmp_path / "out" / "commitlog" / name).read_bytes()
        recs = _records(tmp_path / "out", conf, "5.3")
        start = int(name)
        last = max(p for p in recs if start <= p < start + len(data))
        pos = last - start + recs[last]["total_size"]
        assert struct.unpack_from(">ii", data, pos) == (len(data) - pos, rf.BLANK_MAGIC)


@pytest.mark.spark
def test_salvaged_messages_audit_table_and_cli(spark, tmp_path):
    """``python -m jobs.recover --salvage --audit-path``: the report line, and one
    ``salvaged_messages`` row per re-appended record with its old and new place (as the manifest)."""
    from jobs._spark.deltasink import read_table

    case = ("rocketmq-4.9.7", "torn-middle-magic")
    out, audit = tmp_path / "out", tmp_path / "audit"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.run([sys.executable, "-m", "jobs.recover", "--store", str(input_store(*case)), "--broker-config",
                        str(broker_conf(*case)), "--out", str(out), "--audit-path", str(audit), "--salvage"],
                       capture_output=True, text=True, env=env, timeout=600, cwd=ROOT)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "salvaged           20 lost records re-appended at phy" in p.stdout
    moved = json.loads((out / "MANIFEST.json").read_text())["salvaged"]["moved"]
    rows = read_table(str(audit / "salvaged_messages")).sort_by("new_phy_offset").to_pylist()
    assert [(r["old_phy_offset"], r["new_phy_offset"], r["old_queue_offset"], r["new_queue_offset"], r["uniq_key"])
            for r in rows] == [(m["oldPhyOffset"], m["newPhyOffset"], m["oldQueueOffset"], m["newQueueOffset"],
                                m["uniqKey"]) for m in moved]


# -- issue 40: a full filesystem and a killed salvage ------------------------------------------------

@pytest.fixture
def small_tmpfs(tmp_path):
    """A 4 KiB tmpfs mounted for the test: too small for the salvage file."""
    with support.mounted_tmpfs(tmp_path / "full", "4k") as mnt:
        yield mnt


@pytest.mark.slow
def test_a_full_filesystem_is_one_error_line_naming_the_file(small_tmpfs):
    case = ("rocketmq-4.9.7", "torn-middle-magic")
    out = small_tmpfs / "lost.jsonl"
    p = _job(["--store", str(input_store(*case)), "--broker-config", str(broker_conf(*case)), "--out", str(out)])
    errors = [line for line in p.stderr.split("\n") if "error:" in line]
    assert p.returncode == 2 and len(errors) == 1, p.stderr
    # its own line (a progress bar before it ended first), naming the file being written
    assert re.match(rf"error: {small_tmpfs}/\S+: No space left on device while writing the salvage file",
                    errors[0]), errors
    assert "Traceback" not in p.stderr
    assert os.listdir(small_tmpfs) == []                       # nothing left, hidden or not


@pytest.mark.slow
@pytest.mark.skipif(not shutil.which("strace"), reason="strace is not installed (scripts/test.sh installs it)")
def test_a_killed_salvages_hidden_temporary_is_removed_by_the_next_run(tmp_path):
    """Killed by the kernel at the link that publishes the file (strace fault injection): its
    hidden ``.<out>.tmp-*`` is left; the next run removes it and writes the file."""
    case = ("rocketmq-4.9.7", "torn-middle-magic")
    out = tmp_path / "lost.jsonl"
    args = ["--store", str(input_store(*case)), "--broker-config", str(broker_conf(*case)), "--out", str(out)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    killed = subprocess.run([shutil.which("strace"), "-f", "-qq", "-o", "/dev/null",
                             "-e", "trace=link,linkat", "-e", "inject=link,linkat:signal=KILL:when=1",
                             sys.executable, "-m", "jobs.salvage", *args], capture_output=True, text=True,
                            env=env, timeout=600, cwd=ROOT)
    assert killed.returncode != 0
    left = [n for n in os.listdir(tmp_path) if n.startswith(".lost.jsonl.tmp-")]
    assert left and not out.exists(), os.listdir(tmp_path)
    p = _job(args)
    assert p.returncode == 0, p.stderr
    assert sorted(os.listdir(tmp_path)) == ["lost.jsonl"] and len(read_jsonl(out)) == 20
