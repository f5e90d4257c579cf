"""The consistency audit against the real broker's answers (expected.json) on every fixture store,
and the Delta audit tables it writes (jobs/audit.py).

Expected values are computed here independently of the code under test: the consume queues before
recovery from the input CQ files, after recovery from expected.json, lost messages from the written
messages and the raw commitlog bytes.
"""
from __future__ import annotations

import functools
import os
import shutil
import struct
import zlib

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from jobs import audit as audit_job
from jobs import findings as fnd
from jobs._spark.deltasink import read_table
from schemas import audit as A
from store_reader import open_store
from store_reader.broker import prediction, versions
from store_reader.formats.consumequeue import list_queue_files, list_queues, read_queue_file
from support import broker_conf, case_id, expected, input_store, scenarios

LOADED = [c for c in scenarios() if expected(*c)["afterLoad"]["loadResult"]]
REMOVED = {"removed_beyond_truncation", "removed_below_min", "removed_by_cq_recovery"}
MAGICS = (0xDAA320A7, 0xDAA320AB)


def _version(case) -> str:
    return versions.V49 if "4.9" in case[0] else versions.V53


@functools.lru_cache(maxsize=None)
def _audit(case, spark):
    store = open_store(input_store(*case), broker_conf(*case))
    summaries = store.summaries(store.scan_options(broker_5x=_version(case) == versions.V53))
    pred = prediction.predict(store, _version(case), summaries)
    return store, pred, fnd.audit(spark, store, pred, summaries)


def _expand(t: pa.Table, kinds) -> set[tuple[str, int, int]]:
    """Offsets covered by the range-encoded rows of ``kinds``."""
    out = set()
    for r in t.to_pylist():
        if r["kind"] in kinds:
            out |= {(r["topic"], r["queue_id"], o) for o in range(r["from_offset"], r["to_offset"])}
    return out


def _disk_entries(case) -> dict[tuple[str, int, int], tuple[int, int, int]]:
    """Non-zero slots of the input's CQ files, read directly."""
    store = open_store(input_store(*case), broker_conf(*case))
    out = {}
    for ref in list_queues(store.root):
        for f in list_queue_files(ref.path, store.config.cq_file_size, rocketmq5=_version(case) == versions.V53):
            e = read_queue_file(f.path)
            for i, (phy, size, tags) in enumerate(zip(e.phy_offset, e.size, e.tags_code)):
                if phy or size or tags:
                    out[(ref.topic, ref.queue_id, f.start // 20 + i)] = (int(phy), int(size), int(tags))
    return out


def _broker_entries(case) -> dict[tuple[str, int, int], tuple[int, int, int]]:
    cqs = expected(*case)["afterRecovery"]["consumeQueues"]
    return {(t, int(q), e[0]): (e[1], e[2], e[3]) for t, qs in cqs.items() for q, v in qs.items()
            for e in v["entries"]}


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.parametrize("case", LOADED, ids=case_id)
def test_queue_findings_explain_the_broker_recovery(case, spark):
    """Applying the disk->broker kinds to the CQ files as they are gives exactly the consume
    queues the real broker ended with."""
    _, _, f = _audit(case, spark)
    q = f.tables["queue_findings"]
    d, b = _disk_entries(case), _broker_entries(case)
    assert _expand(q, REMOVED) == set(d) - set(b)
    assert _expand(q, {"redispatched"}) == set(b) - set(d)
    assert _expand(q, {"replaced"}) == {k for k in set(d) & set(b) if d[k] != b[k]}
    for r in q.to_pylist():         # every run is maximal and counted right
        assert r["count"] == r["to_offset"] - r["from_offset"] or r["kind"] == "queue_missing"


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.parametrize("case", LOADED, ids=case_id)
def test_consumer_offset_findings_reproduce_the_broker(case, spark):
    _, _, f = _audit(case, spark)
    co = f.tables["consumer_offset_findings"]
    got = {(r["group"], r["topic"], r["queue_id"]): r for r in co.to_pylist()
           if r["source"] == "consumerOffset.json"}
    want = expected(*case)["afterRecovery"]["consumerOffsetChecks"]
    assert len(got) == len(want)
    for w in want:
        r = got[(w["group"], w["topic"], w["queueId"])]
        assert (r["committed_offset"], r["status"], r["next_begin_offset"], r["min_after"], r["max_after"]) == \
            (w["committedOffset"], w["getMessageStatus"], w["nextBeginOffset"], w["minOffset"], w["maxOffset"])
        assert r["at_risk"] == (r["redelivered"] > 0 or r["skipped"] > 0)
        if w["getMessageStatus"] == "OFFSET_OVERFLOW_BADLY":
            assert r["redelivered"] == w["committedOffset"] - w["nextBeginOffset"]


def _intact_on_disk(root, m, file_size: int) -> bool:
    """The written message's bytes are still whole at its phy offset: size, magic, body CRC."""
    phy, size = m["phyOffset"], m["size"]
    path = os.path.join(root, "commitlog", "%020d" % (phy - phy % file_size))
    if not os.path.exists(path):
        return False
    with open(path, "rb") as fh:
        fh.seek(phy % file_size)
        rec = fh.read(size)
    if len(rec) < size:
        return False
    total, magic = struct.unpack(">iI", rec[:8])
    tail = 2 + len(m["propertiesString"].encode()) + (2 if magic == MAGICS[1] else 1) + len(m["topic"].encode())
    body = rec[size - tail - m["bodyLen"]: size - tail]
    return total == size and magic in MAGICS and zlib.crc32(body) & 0x7FFFFFFF == m["bodyCRC"]


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.parametrize("case", LOADED, ids=case_id)
def test_lost_messages_are_the_intact_unsurvived_ones(case, spark):
    store, _, f = _audit(case, spark)
    lost = f.tables["lost_messages"]
    written = expected(*case)["writtenMessages"]
    want = {m["phyOffset"]: m for m in written
            if not m["survived"] and _intact_on_disk(store.root, m, store.config.mappedFileSizeCommitLog)}
    got = {r["phy_offset"]: r for r in lost.to_pylist()}
    assert set(got) == set(want)
    for phy, m in want.items():
        r = got[phy]
        assert (r["topic"], r["queue_id"], r["queue_offset"], r["total_size"], r["msg_id"]) == \
            (m["topic"], m["queueId"], m["queueOffset"], m["size"], m["msgId"])
        assert (r["keys"], r["uniq_key"]) == (m["keys"], m["uniqKey"])
        assert len(r["body"]) == m["bodyLen"] and zlib.crc32(r["body"]) & 0x7FFFFFFF == m["bodyCRC"]
        assert r["reason"] in ("behind_cut", "deleted_file")


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.parametrize("case", LOADED, ids=case_id)
def test_index_findings_count_what_the_broker_leaves(case, spark):
    """Dangling and duplicate entries of the recovered index equal what the real broker's raw
    queries return (OBSERVATIONS 3, 4, 7, 10, 11); unfindable keys equal the written keys its
    queries miss."""
    store, pred, f = _audit(case, spark)
    ix = f.tables["index_findings"]
    after = expected(*case)["afterRecovery"]
    lo, hi = after["minPhyOffset"], after["maxPhyOffset"]
    queries = after["index"]["queries"]

    def total(kind):
        if not ix.num_rows:
            return 0
        sel = ix.filter(pc.and_(pc.equal(ix["kind"], kind), pc.equal(ix["index"], "recovered")))
        return pc.sum(sel["count"]).as_py() or 0

    assert total("dangling_beyond_end") == sum(p >= hi for q in queries for p in q["indexPhyOffsets"])
    assert total("dangling_below_min") == sum(p < lo for q in queries for p in q["indexPhyOffsets"])
    assert total("duplicate_entry") == sum(len(q["indexPhyOffsets"]) - len(set(q["indexPhyOffsets"]))
                                           for q in queries)
    # keys of surviving records (below the truncation point) the broker's index cannot find
    holders: dict[tuple[str, str], set[int]] = {}
    for m in after["commitLogScan"]:
        if "phyOffset" not in m or m.get("sysFlag", 0) & 0xC == 0xC:      # ROLLBACK is not indexed
            continue
        keys = [k for k in (m.get("keys") or "").split(" ") if k] + ([m["uniqKey"]] if m.get("uniqKey") else [])
        for k in keys:
            holders.setdefault((m["topic"], k), set()).add(m["phyOffset"])
    missing = sum(len(holders.get((q["topic"], q["key"]), set()) - set(q["indexPhyOffsets"])) for q in queries)
    assert total("unfindable_key") == missing


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.parametrize("version", ["rocketmq-4.9.7", "rocketmq-5.3.3"])
@pytest.mark.parametrize("damage", ["crc", "magic"])
def test_damage_the_normal_path_never_reads_is_served(version, damage, spark, tmp_path):
    """A record broken in the second commitlog file of a cleanly shut down store: the normal
    recovery starts later (4.9.7: third-last file, 5.x: the file of the CQ maximum), keeps its
    entry and serves it (OBSERVATIONS 17): corrupt_served, or unbacked when its magic is gone."""
    case = (version, "clean")
    store = tmp_path / "store"
    shutil.copytree(input_store(*case), store)
    written = expected(*case)["writtenMessages"]
    fsize = 65536
    victim = next(m for m in written if fsize <= m["phyOffset"] < 2 * fsize)
    followers = [m for m in written if victim["phyOffset"] < m["phyOffset"] < 2 * fsize
                 and m["sysFlag"] & 0xC in (0, 8)]
    path = store / "commitlog" / ("%020d" % fsize)
    data = bytearray(path.read_bytes())
    pos = victim["phyOffset"] - fsize
    if damage == "crc":
        tail = 2 + len(victim["propertiesString"].encode()) + 1 + len(victim["topic"].encode())
        if data[pos + 4: pos + 8] == bytes.fromhex("daa320ab"):
            tail += 1
        data[pos + victim["size"] - tail - victim["bodyLen"]] ^= 0xFF
    else:
        data[pos + 4: pos + 8] = bytes.fromhex("deadbeef")
    path.write_bytes(bytes(data))
    st = open_store(store, broker_conf(*case))
    summaries = st.summaries(st.scan_options(broker_5x=_version(case) == versions.V53))
    pred = prediction.predict(st, _version(case), summaries)
    assert pred.max_phy_offset == expected(*case)["afterRecovery"]["maxPhyOffset"]   # nothing cut
    q = fnd.audit(spark, st, pred, summaries).tables["queue_findings"]
    served = _expand(q, {"corrupt_served"})
    unbacked = _expand(q, {"unbacked"})
    victim_key = {(victim["topic"], victim["queueId"], victim["queueOffset"])}
    if damage == "crc":
        assert served == victim_key and not unbacked
    else:       # its header is gone: the entry points at no record; the records after it are
        assert unbacked == victim_key     # found only by resync, behind a bad record
        assert served == {(m["topic"], m["queueId"], m["queueOffset"]) for m in followers}


# -- the tables --------------------------------------------------------------------------------------------

TORN = ("rocketmq-5.3.3", "torn-middle-crc")


@pytest.fixture(scope="module")
def audited(tmp_path_factory, spark):
    """A copy of a torn store audited twice with the same run id, then with --since-last."""
    root = tmp_path_factory.mktemp("audit")
    store = root / "store"
    shutil.copytree(input_store(*TORN), store)
    path = str(root / "audit")
    args = ["--store", str(store), "--broker-config", str(broker_conf(*TORN)), "--audit-path", path]
    codes = [audit_job.main(args)]
    counts = {t: read_table(f"{path}/{t}").num_rows for t in A.TABLES}
    codes.append(audit_job.main(args))
    again = {t: read_table(f"{path}/{t}").num_rows for t in A.TABLES}
    codes.append(audit_job.main(args + ["--since-last"]))
    return store, path, codes, counts, again


@pytest.mark.spark
@pytest.mark.slow
def test_tables_are_delta_with_the_declared_schemas(audited):
    _, path, codes, counts, again = audited
    assert codes[:2] == [1, 1]
    assert counts == again                     # same run id: replaced, not duplicated
    assert counts["lost_messages"] == 20 and counts["runs"] == 1
    for name, schema in A.TABLES.items():
        t = read_table(f"{path}/{name}")
        for field in schema.arrow():
            assert t.schema.field(field.name).type == field.type, (name, field.name)
        assert t.schema.field("audited_at").type == pa.timestamp("us", tz="UTC")


@pytest.mark.spark
@pytest.mark.slow
def test_since_last_on_an_unchanged_store_reads_only_the_flush_window(audited):
    """A crashed ASYNC_FLUSH store: an unchanged store's segments are carried over up to the first
    one holding records stored after a checkpoint flush time (the flush window at risk needs
    them), which the run reads to the end; its flush window is the full run's. (An unchanged store
    with nothing at risk scans nothing: test_audit_state.py.)"""
    _, path, codes, _, _ = audited
    e = expected(*TORN)
    stamp = min(e["input"]["checkpoint"][k] for k in ("physicMsgTimestamp", "logicsMsgTimestamp",
                                                       "indexMsgTimestamp"))
    first = min(r["phyOffset"] for r in e["afterRecovery"]["commitLogScan"]
                if "phyOffset" in r and r["storeTimestamp"] > stamp) // 65536 * 65536
    runs = read_table(f"{path}/runs").to_pylist()
    since = [r for r in runs if r["mode"] == "since_last"]
    full = [r for r in runs if r["mode"] == "full"][0]
    assert len(since) == 1 and since[0]["scan_phy_from"] == first
    assert since[0]["segments_scanned"] == full["segments_total"] - first // 65536
    assert since[0]["truncation_point"] == full["truncation_point"] == 812977
    assert since[0]["flush_window_records"] == full["flush_window_records"] > 0
    segs = read_table(f"{path}/segments").filter(pc.equal(read_table(f"{path}/segments")["run_id"],
                                                          since[0]["run_id"]))
    assert segs.num_rows == full["segments_total"]
    assert sorted(int(s) for s, scanned in zip(segs["segment"].to_pylist(), segs["scanned"].to_pylist())
                  if not scanned) == list(range(0, first, 65536))
    fw = read_table(f"{path}/flush_window")
    by_run = [sorted(map(repr, fw.filter(pc.equal(fw["run_id"], r["run_id"])).drop_columns(
        ["run_id", "audited_at"]).to_pylist())) for r in (full, since[0])]
    assert by_run[0] == by_run[1] and by_run[0]


@pytest.mark.spark
@pytest.mark.slow
def test_spark_reads_the_tables(audited, spark):
    """Spark reads each table's current Delta snapshot (its data files) and gets the rows delta-rs
    reads; with delta-spark on the classpath it reads the table itself."""
    from chispa import assert_df_equality
    from deltalake import DeltaTable

    from jobs._spark.deltasink import has_delta

    _, path, _, _, _ = audited
    for name in ("runs", "queue_findings", "consumer_offset_findings", "lost_messages"):
        dt = DeltaTable(f"{path}/{name}")
        via_rs = spark.createDataFrame(dt.to_pyarrow_table().combine_chunks())
        via_spark = (spark.read.format("delta").load(f"{path}/{name}") if has_delta(spark)
                     else spark.read.parquet(*dt.file_uris()))
        cols = [c for c in via_rs.columns if c != "properties"]     # maps cannot be sorted
        assert_df_equality(via_spark.select(cols), via_rs.select(cols), ignore_row_order=True,
                           ignore_nullable=True)


@pytest.mark.spark
@pytest.mark.slow
def test_delta_spark_writer(spark, tmp_path):
    from jobs._spark.deltasink import has_delta

    if not has_delta(spark):
        pytest.skip("delta-spark jars are not on this session's classpath (no Maven repository "
                    "reachable); the delta-rs writer is tested above")
    from jobs._spark.deltasink import write_run_rows
    import datetime as dt

    rows = pa.table({"run_id": ["r"], "store_id": ["s"],
                     "audited_at": pa.array([dt.datetime.now(dt.timezone.utc)], pa.timestamp("us", tz="UTC"))})
    write_run_rows(str(tmp_path / "t"), rows, "r", spark=spark)
    write_run_rows(str(tmp_path / "t"), rows, "r", spark=spark)
    assert spark.read.format("delta").load(str(tmp_path / "t")).count() == 1


@pytest.mark.spark
@pytest.mark.slow
def test_a_repaired_finding_shows_as_resolved(audited, tmp_path, spark):
    """recover --apply on the audited store, audit again: the lost messages and the truncated queue
    entries are gone from the new run, and the history says since when."""
    from jobs import recover

    store, path, _, _, _ = audited
    args = ["--store", str(store), "--broker-config", str(broker_conf(*TORN))]
    assert recover.main(args + ["--out", str(tmp_path / "repaired"), "--apply",
                                "--backup", str(tmp_path / "backup")]) == 0
    assert audit_job.main(args + ["--audit-path", path]) in (0, 1)
    hist = audit_job.history(path, str(store))
    gone = [h for h in hist if h["kind"] == "removed_beyond_truncation"]
    assert gone and all(h["resolved_in"] is not None for h in gone)


@pytest.mark.spark
def test_exit_codes_and_read_only(spark, tmp_path):
    """0 on a clean store (no consumers), 1 with findings, 2 when the store cannot be read; the
    store's files are never touched."""
    from store_reader.testing.synthetic import CrashSpec, SyntheticStoreSpec, write_store

    spec = SyntheticStoreSpec(total_bytes=1 << 20, segment_size=256 << 10, cq_file_size=6000,
                              max_hash_slot_num=512, max_index_num=4096, broker="4.9")
    clean = write_store(tmp_path / "clean", spec, keep_messages=False).root
    (clean / "config" / "consumerOffset.json").unlink()
    crashed = write_store(tmp_path / "crashed", spec, CrashSpec(abort=True, corrupt="crc"),
                          keep_messages=False).root
    before = {p: (p.stat().st_mtime_ns, p.stat().st_size) for p in crashed.rglob("*")}
    for root, code in ((clean, 0), (crashed, 1)):
        assert audit_job.main(["--store", str(root), "--broker-config", str(root / "broker.conf"),
                               "--audit-path", str(tmp_path / "a")]) == code
    assert before == {p: (p.stat().st_mtime_ns, p.stat().st_size) for p in crashed.rglob("*")}
    assert audit_job.main(["--store", str(tmp_path / "nope")]) == 2
