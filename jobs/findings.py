"""The consistency audit: what is inconsistent in a store, and what a broker restart would lose,
duplicate or rewind. Each finding is a Spark transformation over what ``store_reader`` reads, and
is range-encoded: one row per run of consecutive queue offsets (or phy offsets), never one per entry.

Three views of every consume queue entry, joined per (topic, queue id, queue offset):

``disk``
    the entry in the CQ files as they are (all-zero slots are absent);
``broker``
    the entry after the broker's own recovery (``store_reader.recovery.predict``);
``rebuilt``
    the entry the commitlog's records below the truncation point give (what the repaired store
    holds): every dispatchable record at its QUEUEOFFSET.

Queue finding kinds (``QUEUE_KINDS``): the first five explain exactly how the broker's recovery turns
the disk view into its own; the others say what the broker's result still gets wrong.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from store_reader import recordformat as rf
from store_reader import recovery
from store_reader.commitlog import SegmentScan, SegmentSummary
from store_reader.config import read_consumer_offsets
from store_reader.consumequeue import list_queue_files, list_queues, read_queue_file
from store_reader.indexfile import IndexFile
from store_reader.repair import index_puts, multi_dispatch_copies
from store_reader.store import Store

QUEUE_KINDS = {
    # disk -> broker: what a restart changes
    "removed_beyond_truncation": "on disk, pointing at or past the truncation point: the broker drops it",
    "removed_below_min": "on disk, below the queue's min offset after recovery: no longer served",
    "removed_by_cq_recovery": "on disk after an invalid entry or in a dropped file: the broker's CQ "
                              "recovery cuts it (and does not rebuild it on the normal path)",
    "redispatched": "not on disk: the broker's recovery dispatches it again",
    "replaced": "on disk and after recovery, with different content",
    # broker vs the commitlog: what a restart still gets wrong (the repaired store fixes it)
    "not_restored": "a record below the truncation point has no entry after the broker's recovery",
    "wrong_entry": "the broker serves an entry that differs from the record at that queue offset",
    "delayed_early": "SCHEDULE_TOPIC_XXXX entry whose tags code is not the deliver time: delivered "
                     "at once (E#30b)",
    "delayed_early_on_disk": "the same, in the CQ files as they are",
    "unbacked": "the broker serves an entry whose phy offset starts no record",
    "corrupt_served": "the broker serves an entry whose record fails its CRC check or lies behind a "
                      "bad record, in a file its recovery does not read (OBSERVATIONS 17-18)",
    "duplicate_queue_offset": "several records claim the same queue offset",
    # structure of the CQ files
    "hole": "invalid entries inside a queue on disk, valid ones after them",
    "blank": "pre-blank filler entries on disk (phy 0, size 2^31-1)",
    "duplicate_phy": "the same phy offset at more than one queue offset (after recovery)",
    "duplicate_phy_on_disk": "the same phy offset at more than one queue offset (on disk)",
    "queue_missing": "no CQ directory on disk for a queue the commitlog has records of",
}

INDEX_KINDS = {
    "unfindable_key": "a key of a record below the truncation point that the index cannot find",
    "dangling_below_min": "entry pointing below the commitlog's min offset (queryMessage drops it)",
    "dangling_beyond_end": "entry pointing at or past the truncation point (queryMessage drops it)",
    "duplicate_entry": "the same (key hash, phy offset) indexed again",
    "bad_header": "header inconsistent with the file's entries",
}

# Record columns the audit needs (schemas.MESSAGE names); bodies and properties only where lost.
RECORD_COLUMNS = ["phy_offset", "stored_phy_offset", "total_size", "topic", "queue_id", "queue_offset",
                  "sys_flag", "tags_code", "store_timestamp", "born_timestamp", "keys", "key_list",
                  "tags", "uniq_key", "msg_id", "body_crc", "body_crc_ok", "record_crc_ok",
                  "valid_prefix", "properties", "body"]
_LOST_ONLY = ("properties", "body")
_CQ_TYPES = (rf.TRANSACTION_NOT_TYPE, rf.TRANSACTION_COMMIT_TYPE)
_PRE_BLANK = 0x7FFFFFFF


def _record_schema():
    from schemas import MESSAGE

    return MESSAGE.arrow(RECORD_COLUMNS).append(pa.field("segment", pa.string(), nullable=False))


# -- the records -------------------------------------------------------------------------------------

def audit_scan_options(store: Store, broker_5x: bool) -> rf.ScanOptions:
    """Header checks only (as the broker's dispatch reads records), CRCs computed to flag damage."""
    return replace(store.scan_options(broker_5x=broker_5x), check_crc=False, compute_crc=True)


def records_df(spark, store: Store, end: int, broker_5x: bool,
               segments: Sequence[SegmentSummary]):
    """Every record of ``segments`` (one Spark task per file), intact ones behind a bad record
    included (``valid_prefix`` false). Bodies and properties are read only in files that reach
    past the truncation point ``end``, where records are lost."""
    schema = _record_schema()
    opts = audit_scan_options(store, broker_5x)
    files = [(s.path, s.segment, s.file_start + s.file_size > end) for s in segments]
    if not files:
        return spark.createDataFrame(schema.empty_table())

    def scan(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for b in batches:
            for path, name, lost in zip(*(b.column(i).to_pylist() for i in range(3))):
                cols = RECORD_COLUMNS if lost else [c for c in RECORD_COLUMNS if c not in _LOST_ONLY]
                for rb in SegmentScan(path, opts, columns=cols, include_lost=True):
                    n = rb.num_rows
                    arrays = [rb.column(c) if c in cols else pa.nulls(n, schema.field(c).type)
                              for c in schema.names[:-1]]
                    yield pa.RecordBatch.from_arrays(
                        arrays + [pa.repeat(pa.scalar(name, pa.string()), n)], schema=schema)

    df = spark.createDataFrame(files, "path string, segment string, lost boolean").repartition(len(files))
    return df.mapInArrow(scan, _spark_schema(schema))


def _spark_schema(schema: pa.Schema):
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(schema)


def rebuilt_entries(records, end: int, config, broker_5x: bool):
    """(topic, queue_id, queue_offset, phy_offset, size, tags_code) of every dispatchable record
    below ``end`` in a valid prefix: the consume queues the commitlog gives (LMQ copies included)."""
    from pyspark.sql import functions as F

    tran = F.col("sys_flag").bitwiseAND(rf.TRANSACTION_MASK)
    rec = records.where((F.col("phy_offset") < end) & F.col("valid_prefix") & tran.isin(*_CQ_TYPES))
    if config.enableMultiDispatch:
        cols = ["stored_phy_offset", "total_size", "topic", "queue_id", "queue_offset", "sys_flag",
                "tags_code", "properties"]
        base = rec.select(*cols)
        full = _record_schema()
        arrow_schema = pa.schema([full.field(c) for c in cols])
        copies = base.mapInArrow(
            lambda batches: (multi_dispatch_copies(b.cast(arrow_schema), config, broker_5x)
                             for b in batches), base.schema)
        rec = base.unionByName(copies)
    return rec.select("topic", "queue_id", "queue_offset", F.col("stored_phy_offset").alias("phy_offset"),
                      F.col("total_size").alias("size"), "tags_code")


# -- the consume queues as they are on disk ------------------------------------------------------------

CQ_SCHEMA = pa.schema([pa.field("topic", pa.string(), False), pa.field("queue_id", pa.int32(), False),
                       pa.field("queue_offset", pa.int64(), False), pa.field("phy_offset", pa.int64(), False),
                       pa.field("size", pa.int32(), False), pa.field("tags_code", pa.int64(), False)])


def disk_entries(spark, store: Store, broker_5x: bool):
    """Every non-zero slot of every CQ file (one Spark task per batch of files)."""
    files = []
    for ref in list_queues(store.root):
        for f in list_queue_files(ref.path, store.config.cq_file_size, rocketmq5=broker_5x):
            files.append((ref.topic, ref.queue_id, f.path, f.start))
    if not files:
        return spark.createDataFrame(CQ_SCHEMA.empty_table())

    def read(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for b in batches:
            for topic, qid, path, start in zip(*(b.column(i).to_pylist() for i in range(4))):
                e = read_queue_file(path)
                phy, size, tags = (np.asarray(e.phy_offset), np.asarray(e.size), np.asarray(e.tags_code))
                keep = np.flatnonzero((phy != 0) | (size != 0) | (tags != 0))
                n = len(keep)
                yield pa.RecordBatch.from_arrays([
                    pa.repeat(pa.scalar(topic, pa.string()), n),
                    pa.array(np.full(n, qid, np.int32)),
                    pa.array(start // 20 + keep.astype(np.int64)),
                    pa.array(phy[keep].astype(np.int64)), pa.array(size[keep].astype(np.int32)),
                    pa.array(tags[keep].astype(np.int64))], schema=CQ_SCHEMA)

    slices = max(1, min(len(files), spark.sparkContext.defaultParallelism * 4))
    df = spark.createDataFrame(files, "topic string, queue_id int, path string, start long")
    return df.repartition(slices).mapInArrow(read, _spark_schema(CQ_SCHEMA))


def broker_entries(spark, pred: recovery.Prediction):
    """The entries each queue serves after the broker's recovery, min to max offset."""
    parts = []
    for (topic, qid), q in sorted(pred.consume_queues.items()):
        e = q.entries()
        n = len(e)
        if not n:
            continue
        parts.append(pa.table([pa.repeat(pa.scalar(topic, pa.string()), n),
                               pa.array(np.full(n, qid, np.int32)),
                               pa.array(np.arange(q.min_offset, q.min_offset + n, dtype=np.int64)),
                               pa.array(e["phy_offset"].astype(np.int64)),
                               pa.array(e["size"].astype(np.int32)),
                               pa.array(e["tags_code"].astype(np.int64))], schema=CQ_SCHEMA))
    # one chunk: pyspark 4.2's createDataFrame(pa.Table) drops the rows after an empty chunk
    return spark.createDataFrame(pa.concat_tables(parts).combine_chunks() if parts else CQ_SCHEMA.empty_table())


# -- queue findings ----------------------------------------------------------------------------------------

def queue_findings(spark, disk, broker, rebuilt, records, pred: recovery.Prediction, disk_queues: set,
                   scope: tuple[int, int] | None = None) -> pa.Table:
    """``QUEUE_KINDS`` rows (without run keys): the four views of every queue (disk, broker,
    rebuilt, the records themselves) brought together by one shuffle, one group per queue, and
    compared there (``compare_queue``). ``scope`` = the phy range whose records were scanned
    (--since-last); kinds that need the records are judged only inside it."""
    from pyspark.sql import functions as F

    end = pred.max_phy_offset
    b_min = {k: q.min_offset for k, q in pred.consume_queues.items()}
    cols = ["topic", "queue_id", "queue_offset", "phy_offset", "size", "tags_code"]
    crc_ok = F.coalesce(F.col("body_crc_ok"), F.lit(True)) & F.coalesce(F.col("record_crc_ok"), F.lit(True))
    bad = F.when(crc_ok, 0).otherwise(1) + F.when(F.col("valid_prefix"), 0).otherwise(2)
    rec = records.select("topic", "queue_id", "queue_offset", "phy_offset",
                         F.col("total_size").alias("size"), "tags_code", F.lit(_REC).alias("src"),
                         bad.alias("flag"))
    views = [df.select(*cols).withColumn("src", F.lit(src)).withColumn("flag", F.lit(0))
             for df, src in ((disk, _DISK), (broker, _BROKER), (rebuilt, _REBUILT))]
    allv = views[0].unionByName(views[1]).unionByName(views[2]).unionByName(rec)
    schema = _spark_schema(QUEUE_FINDING_ROWS)

    def compare(t: pa.Table) -> pa.Table:
        topic, qid = t["topic"][0].as_py(), t["queue_id"][0].as_py()
        rows = compare_queue(topic, qid, t, end, b_min.get((topic, qid)), (topic, qid) in disk_queues, scope)
        return pa.Table.from_pylist(rows, schema=QUEUE_FINDING_ROWS)

    out = allv.groupBy("topic", "queue_id").applyInArrow(compare, schema).toArrow()
    return out.sort_by([("topic", "ascending"), ("queue_id", "ascending"), ("kind", "ascending"),
                        ("from_offset", "ascending")])


_DISK, _BROKER, _REBUILT, _REC = 0, 1, 2, 3
QUEUE_FINDING_ROWS = pa.schema([
    pa.field("kind", pa.string(), False), pa.field("topic", pa.string(), False),
    pa.field("queue_id", pa.int32(), False), pa.field("from_offset", pa.int64(), False),
    pa.field("to_offset", pa.int64(), False), pa.field("count", pa.int64(), False),
    pa.field("phy_from", pa.int64(), True), pa.field("phy_to", pa.int64(), True),
    pa.field("detail", pa.string(), True)])


def _runs(kind: str, topic: str, qid: int, offsets: np.ndarray, phy: np.ndarray | None = None,
          size: np.ndarray | None = None, detail: str | None = None) -> list[dict]:
    """Range-encode sorted ``offsets`` (with the phy/size of their entries) into rows."""
    if not len(offsets):
        return []
    cut = np.flatnonzero(np.diff(offsets) != 1) + 1
    rows = []
    for lo, hi in zip(np.concatenate([[0], cut]), np.concatenate([cut, [len(offsets)]])):
        row = {"kind": kind, "topic": topic, "queue_id": qid, "from_offset": int(offsets[lo]),
               "to_offset": int(offsets[hi - 1]) + 1, "count": int(hi - lo), "phy_from": None,
               "phy_to": None, "detail": detail}
        if phy is not None:
            row["phy_from"] = int(phy[lo:hi].min())
            row["phy_to"] = int((phy[lo:hi] + size[lo:hi]).max())
        rows.append(row)
    return rows


def compare_queue(topic: str, qid: int, t: pa.Table, end: int, b_min: int | None, on_disk: bool,
                  scope: tuple[int, int] | None) -> list[dict]:
    """Every ``QUEUE_KINDS`` finding of one queue from its entries: rows of ``t`` with ``src`` =
    disk / broker / rebuilt entry or a record (``flag`` 1: CRC mismatch, 2: behind a bad record)."""
    src = t["src"].to_numpy()
    off, phy = t["queue_offset"].to_numpy(), t["phy_offset"].to_numpy()
    size, tags = t["size"].to_numpy().astype(np.int64), t["tags_code"].to_numpy()
    flag = t["flag"].to_numpy()

    def view(s: int):
        i = np.flatnonzero(src == s)
        i = i[np.argsort(off[i], kind="stable")]
        return off[i], phy[i], size[i], tags[i], flag[i]

    d, b, r_all, rec = view(_DISK), view(_BROKER), view(_REBUILT), view(_REC)
    out: list[dict] = []
    # several records claiming one queue offset; the first (lowest phy) stands for it
    uniq, first, counts = np.unique(r_all[0], return_index=True, return_counts=True)
    dup = np.isin(r_all[0], uniq[counts > 1])
    r = tuple(a[first] for a in r_all)
    keys = np.union1d(np.union1d(d[0], b[0]), r[0])

    def align(v):
        """v's columns on ``keys`` and whether each key has an entry in v."""
        pos = np.searchsorted(v[0], keys)
        has = (pos < len(v[0])) & (v[0][np.minimum(pos, max(len(v[0]) - 1, 0))] == keys) if len(v[0]) \
            else np.zeros(len(keys), bool)
        pos = np.minimum(pos, max(len(v[0]) - 1, 0))
        cols = [c[pos] if len(c) else np.zeros(len(keys), np.int64) for c in v[1:4]]
        return has, cols

    (hd, (dp, ds, dt)), (hb, (bp, bs, bt)), (hr, (rp, rs, rt)) = align(d), align(b), align(r)
    # the flag of the record starting at each broker entry's phy offset, -1: none starts there
    order = np.argsort(rec[1], kind="stable")
    rphy, rflag = rec[1][order], rec[4][order]
    at = np.minimum(np.searchsorted(rphy, bp), max(len(rphy) - 1, 0))
    b_rec = np.where((len(rphy) > 0) & (rphy[at] == bp) if len(rphy) else np.zeros(len(bp), bool),
                     rflag[at] if len(rphy) else -1, -1)
    def scoped(p):
        return np.ones(len(p), bool) if scope is None else (p >= scope[0]) & (p < scope[1])

    lo = b_min if b_min is not None else 0
    blank_b = bs == _PRE_BLANK
    differs = lambda p1, s1, t1, p2, s2, t2: (p1 != p2) | (s1 != s2) | (t1 != t2)  # noqa: E731
    schedule = topic == rf.SCHEDULE_TOPIC
    early_b = schedule & hb & hr & (bp == rp) & (bs == rs) & (bt != rt)
    early_d = schedule & hd & hr & (dp == rp) & (ds == rs) & (dt != rt)
    kinds = [
        ("removed_beyond_truncation", hd & ~hb & (dp >= end), dp, ds),
        ("removed_below_min", hd & ~hb & (dp < end) & (keys < lo), dp, ds),
        ("removed_by_cq_recovery", hd & ~hb & (dp < end) & (keys >= lo), dp, ds),
        ("redispatched", ~hd & hb, bp, bs),
        ("replaced", hd & hb & differs(dp, ds, dt, bp, bs, bt), bp, bs),
        ("not_restored", hr & ~hb & scoped(rp), rp, rs),
        ("delayed_early", early_b & scoped(rp), bp, bs),
        ("delayed_early_on_disk", early_d & scoped(rp), dp, ds),
        ("wrong_entry", hb & hr & differs(bp, bs, bt, rp, rs, rt) & ~early_b & scoped(rp), bp, bs),
        ("unbacked", hb & ~blank_b & ~hr & (b_rec < 0) & (bp < end) & scoped(bp), bp, bs),
        ("corrupt_served", hb & ~blank_b & (b_rec > 0), bp, bs),
        ("blank", hd & (ds == _PRE_BLANK), dp, ds),
    ]
    for kind, mask, p, s in kinds:
        out += _runs(kind, topic, qid, keys[mask], p[mask], s[mask])
    if dup.any():
        out += _runs("duplicate_queue_offset", topic, qid, np.unique(r_all[0][dup]),
                     detail="several records at one queue offset")
    # holes: gaps between valid entries on disk
    valid = (d[1] >= 0) & (d[2] > 0)
    vo = d[0][valid]
    if len(vo) > 1:
        gaps = np.flatnonzero(np.diff(vo) > 1)
        for g in gaps:
            out += _runs("hole", topic, qid, np.arange(vo[g] + 1, vo[g + 1]))
    for kind, v, keep in (("duplicate_phy_on_disk", d, d[2] > 0), ("duplicate_phy", b, b[2] != _PRE_BLANK)):
        o, p, s = v[0][keep], v[1][keep], v[2][keep]
        vals, cnt = np.unique(p, return_counts=True)
        m = np.isin(p, vals[cnt > 1])
        out += _runs(kind, topic, qid, o[m], p[m], s[m], detail="phy offset at several queue offsets")
    if not on_disk and len(r[0]):           # one row for the queue: its whole range
        out.append({"kind": "queue_missing", "topic": topic, "queue_id": qid, "from_offset": int(r[0][0]),
                    "to_offset": int(r[0][-1]) + 1, "count": len(r[0]), "phy_from": int(r[1].min()),
                    "phy_to": int((r[1] + r[2]).max()), "detail": None})
    return out


# -- index findings ------------------------------------------------------------------------------------

INDEX_ENTRY_COLS = pa.schema([pa.field("file", pa.string(), True), pa.field("file_order", pa.int32(), False),
                              pa.field("entry_number", pa.int32(), False), pa.field("key_hash", pa.int32(), False),
                              pa.field("phy_offset", pa.int64(), False)])


def _index_entries(idx: IndexFile, order: int, name: str | None) -> pa.Table:
    t = idx.entries_table()
    n = t.num_rows
    return pa.table([pa.array([name] * n, pa.string()), pa.array(np.full(n, order, np.int32)),
                     t["entry_number"], t["key_hash"], t["phy_offset"]], schema=INDEX_ENTRY_COLS)


def header_problems(idx: IndexFile) -> list[str]:
    """What in an index file's header disagrees with its entries (IndexService trusts the header)."""
    h, out = idx.header, []
    t = idx.entries_table()
    if h.index_count > idx.index_num:
        out.append(f"indexCount {h.index_count} > maxIndexNum {idx.index_num}")
    if t.num_rows:
        phy = t["phy_offset"].to_numpy()
        if h.begin_phy_offset > phy.min() or h.end_phy_offset < phy.max():
            out.append(f"phy range [{h.begin_phy_offset}, {h.end_phy_offset}] does not cover its entries "
                       f"[{phy.min()}, {phy.max()}]")
        if (t["time_diff"].to_numpy() < 0).any():
            out.append("negative timeDiff in entries (queries stop there)")
    if h.begin_timestamp > h.end_timestamp and h.end_timestamp:
        out.append(f"beginTimestamp {h.begin_timestamp} > endTimestamp {h.end_timestamp}")
    slots = np.asarray(idx.slots)
    over = int(((slots < 0) | (slots > max(h.index_count, 0))).sum())
    if over:
        out.append(f"{over} hash slots point outside [0, indexCount]")
    return out


def index_findings(spark, store: Store, pred: recovery.Prediction, records) -> pa.Table:
    """``INDEX_KINDS`` rows for the index files on disk and after the broker's recovery.

    Dangling and duplicate entries and bad headers come from the index files themselves (read on
    the driver, vectorised); unfindable keys from every key the broker would index for the records
    below the truncation point, joined with the entries of each lens (Spark)."""
    from store_reader.indexfile import list_index_files

    cfg = store.config
    lo, end = pred.min_phy_offset, pred.max_phy_offset
    rows: list[dict] = []
    lenses: dict[str, pa.Table] = {}
    disk = []
    for ref in list_index_files(store.index_dir, cfg.index_file_size, strict=False):
        with IndexFile(ref.path, cfg.maxHashSlotNum, cfg.maxIndexNum) as idx:
            disk.append(_index_entries(idx, len(disk), ref.name))
            rows += [{"kind": "bad_header", "index": "on_disk", "file": ref.name, "count": 1, "detail": p}
                     for p in header_problems(idx)]
    recovered = [_index_entries(f.view(cfg), i, f.name) for i, f in enumerate(pred.index_files)]
    for lens, tables in (("on_disk", disk), ("recovered", recovered)):
        e = pa.concat_tables(tables) if tables else INDEX_ENTRY_COLS.empty_table()
        lenses[lens] = e
        rows += _entry_findings(e, lens, lo, end)
    rows += _unfindable(spark, records, lenses, end)
    return pa.Table.from_pylist(rows, schema=INDEX_FINDING_ROWS) if rows else INDEX_FINDING_ROWS.empty_table()


INDEX_FINDING_ROWS = pa.schema([
    pa.field("kind", pa.string(), False), pa.field("index", pa.string(), False),
    pa.field("file", pa.string(), True), pa.field("topic", pa.string(), True),
    pa.field("phy_from", pa.int64(), True), pa.field("phy_to", pa.int64(), True),
    pa.field("count", pa.int64(), False), pa.field("detail", pa.string(), True)])


def _entry_findings(e: pa.Table, lens: str, lo: int, end: int) -> list[dict]:
    """Dangling entries (below ``lo``, at or past ``end``) and repeated (key hash, phy offset)
    pairs, per index file."""
    if not e.num_rows:
        return []
    phy, kh = e["phy_offset"].to_numpy(), e["key_hash"].to_numpy().astype(np.int64)
    order = np.lexsort((e["entry_number"].to_numpy(), e["file_order"].to_numpy()))   # put order
    pair = (kh[order] << 40) ^ phy[order]
    _, first = np.unique(pair, return_index=True)
    repeat = np.ones(len(order), bool)
    repeat[first] = False
    masks = {"dangling_below_min": phy < lo, "dangling_beyond_end": phy >= end,
             "duplicate_entry": np.zeros(len(phy), bool)}
    masks["duplicate_entry"][order[repeat]] = True
    files = e["file"].to_pylist()
    file_order = e["file_order"].to_numpy()
    out = []
    for kind, m in masks.items():
        for fo in np.unique(file_order[m]):
            sel = m & (file_order == fo)
            out.append({"kind": kind, "index": lens, "file": files[int(np.flatnonzero(sel)[0])],
                        "topic": None, "phy_from": int(phy[sel].min()), "phy_to": int(phy[sel].max()) + 1,
                        "count": int(sel.sum()), "detail": None})
    return out


def _unfindable(spark, records, lenses: dict[str, pa.Table], end: int) -> list[dict]:
    """Keys of records below ``end`` whose (key hash, phy offset) no entry of a lens holds, as runs
    of consecutive indexed records of one topic (commitlog order), per lens.

    The executors compute every put; the driver, which holds the lenses already, looks the pairs
    up by sorting (``_held``: no join, no shuffle) and range-encodes per topic."""
    from pyspark.sql import functions as F

    cols = ["stored_phy_offset", "sys_flag", "uniq_key", "key_list", "topic", "store_timestamp"]
    rec = records.where((F.col("phy_offset") < end) & F.col("valid_prefix")).select(*cols)
    put_schema = pa.schema([pa.field("topic", pa.string(), False), pa.field("key_hash", pa.int32(), False),
                            pa.field("phy_offset", pa.int64(), False)])

    def puts(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for b in batches:
            p = index_puts(pa.Table.from_batches([b]))
            yield pa.RecordBatch.from_arrays([p.topic, pa.array(p.key_hash.astype(np.int32)),
                                              pa.array(p.phy)], schema=put_schema)

    wanted = rec.mapInArrow(puts, _spark_schema(put_schema)).toArrow()
    if not wanted.num_rows:
        return []
    kh, phy = wanted["key_hash"].to_numpy().astype(np.int64), wanted["phy_offset"].to_numpy()
    missing = {lens: ~_held(lenses[lens], kh, phy) for lens in lenses}
    topics = wanted["topic"].combine_chunks().dictionary_encode()
    code = topics.indices.to_numpy(zero_copy_only=False)
    rows = []
    for c, topic in sorted(enumerate(topics.dictionary.to_pylist()), key=lambda x: x[1]):
        sel = np.flatnonzero(code == c)
        uphy, inv = np.unique(phy[sel], return_inverse=True)
        for lens, miss_put in missing.items():
            miss = np.bincount(inv, weights=miss_put[sel], minlength=len(uphy))
            hit = np.flatnonzero(miss > 0)         # records (in phy order) missing a key
            if not len(hit):
                continue
            cut = np.flatnonzero(np.diff(hit) != 1) + 1
            for a, b in zip(np.concatenate([[0], cut]), np.concatenate([cut, [len(hit)]])):
                run = hit[a:b]
                rows.append({"kind": "unfindable_key", "index": lens, "file": None, "topic": topic,
                             "phy_from": int(uphy[run[0]]), "phy_to": int(uphy[run[-1]]) + 1,
                             "count": int(miss[run].sum()), "detail": f"{len(run)} records"})
    return rows


def _held(lens: pa.Table, key_hash: np.ndarray, phy: np.ndarray) -> np.ndarray:
    """Whether each (key hash, phy offset) pair is among the entries of ``lens``. Per 4 GiB window
    of phy offsets, (phy - window start) << 31 | key hash packs a pair into one int64 (key hashes
    are non-negative int32; a lens entry with a negative one matches nothing), so the lookup is a
    sort and a binary search; the puts and entries come in commitlog order, which the stable sort
    by window leaves nearly as it is."""
    out = np.zeros(len(key_hash), bool)
    lk = lens["key_hash"].to_numpy().astype(np.int64)
    lp = lens["phy_offset"].to_numpy().astype(np.int64)
    keep = lk >= 0
    lk, lp = lk[keep], lp[keep]
    if not len(lk) or not len(key_hash):
        return out
    lw, ww = lp >> 32, phy >> 32
    lorder, worder = np.argsort(lw, kind="stable"), np.argsort(ww, kind="stable")
    lw_sorted, ww_sorted = lw[lorder], ww[worder]
    for w in np.unique(ww_sorted[np.r_[0, np.flatnonzero(np.diff(ww_sorted)) + 1]]):
        li = lorder[np.searchsorted(lw_sorted, w):np.searchsorted(lw_sorted, w, "right")]
        wi = worder[np.searchsorted(ww_sorted, w):np.searchsorted(ww_sorted, w, "right")]
        if not len(li):
            continue
        base = int(w) << 32
        packed = np.sort(((lp[li] - base) << 31) | lk[li])
        want = ((phy[wi] - base) << 31) | key_hash[wi]
        at = np.minimum(np.searchsorted(packed, want), len(packed) - 1)
        out[wi] = packed[at] == want
    return out


# -- lost messages and the flush window --------------------------------------------------------------

def lost_messages(records, end: int, cut_segment: str | None) -> pa.Table:
    """Intact records at or past the truncation point: the broker's recovery discards them, those
    behind the bad record in the file it cuts and every record of the files it deletes."""
    from pyspark.sql import functions as F

    lost = records.where((F.col("phy_offset") >= end) & (F.col("stored_phy_offset") == F.col("phy_offset"))
                         & F.coalesce(F.col("body_crc_ok"), F.lit(True))
                         & F.coalesce(F.col("record_crc_ok"), F.lit(True)))
    return (lost.select(
        "phy_offset", "segment",
        F.when(F.col("segment") == F.lit(cut_segment), "behind_cut").otherwise("deleted_file").alias("reason"),
        "topic", "queue_id", "queue_offset", "total_size", "sys_flag",
        F.timestamp_millis("store_timestamp").alias("store_time"),
        F.timestamp_millis("born_timestamp").alias("born_time"),
        "keys", "tags", "uniq_key", "msg_id", "body_crc", "properties", "body")
        .orderBy("phy_offset").toArrow())


def flush_window(records, end: int, checkpoint) -> pa.Table:
    """Records below the truncation point stored after each checkpoint flush timestamp, per queue:
    what an OS crash or power loss under ASYNC_FLUSH may still take."""
    from pyspark.sql import functions as F

    tran = F.col("sys_flag").bitwiseAND(rf.TRANSACTION_MASK)
    windows = [("commitlog", checkpoint.physic_msg_timestamp, F.lit(True)),
               ("consume_queue", checkpoint.logics_msg_timestamp, tran.isin(*_CQ_TYPES)),
               ("index", checkpoint.index_msg_timestamp, tran != rf.TRANSACTION_ROLLBACK_TYPE)]
    ts = F.col("store_timestamp")
    inside = F.array(*[F.when(cond & (ts > stamp), F.struct(F.lit(name).alias("window"),
                                                            F.lit(stamp).alias("stamp")))
                       for name, stamp, cond in windows])
    rec = (records.where((F.col("phy_offset") < end) & F.col("valid_prefix"))
           .select("*", F.explode(inside).alias("w")).where(F.col("w").isNotNull()))
    return (rec.groupBy("w.window", "w.stamp", "topic", "queue_id")
            .agg(F.count(F.lit(1)).alias("records"), F.min("queue_offset").alias("from_offset"),
                 (F.max("queue_offset") + 1).alias("to_offset"), F.min("phy_offset").alias("phy_from"),
                 F.max(F.col("phy_offset") + F.col("total_size")).alias("phy_to"),
                 F.timestamp_millis(F.min(ts)).alias("first_store_time"),
                 F.timestamp_millis(F.max(ts)).alias("last_store_time"))
            .select("window", F.when(F.col("stamp") > 0, F.timestamp_millis("stamp")).alias("checkpoint_time"),
                    "topic", "queue_id", "records", "from_offset", "to_offset", "phy_from", "phy_to",
                    "first_store_time", "last_store_time")
            .orderBy("window", "topic", "queue_id").toArrow())


# -- consumer offsets --------------------------------------------------------------------------------------

def consumer_offset_findings(store: Store, pred: recovery.Prediction, disk_ranges: dict, rebuilt_ranges: dict,
                             lost: pa.Table) -> pa.Table:
    """Every committed offset of ``consumerOffset.json`` and its ``.bak``: the queue before and after
    recovery, the broker's pull status and corrected offset, and what the group loses or gets again."""
    lost_by_queue: dict[tuple[str, int], np.ndarray] = {}
    if lost.num_rows:
        tran = pc.bit_wise_and(lost["sys_flag"], rf.TRANSACTION_MASK).to_numpy()
        keep = np.isin(tran, _CQ_TYPES)
        for t, q, o in zip(np.asarray(lost["topic"].to_pylist(), dtype=object)[keep],
                           lost["queue_id"].to_numpy()[keep], lost["queue_offset"].to_numpy()[keep]):
            lost_by_queue.setdefault((t, int(q)), []).append(int(o))
    rows = []
    for source in ("consumerOffset.json", "consumerOffset.json.bak"):
        path = store.config_dir / source
        if not path.is_file():
            continue
        offsets = read_consumer_offsets(path).value
        for c in recovery.consumer_offset_checks(pred, store.config, offsets):
            key = (c.topic, c.queue_id)
            before = disk_ranges.get(key, (0, 0))
            repaired = rebuilt_ranges.get(key, (0, 0))
            redelivered = c.committed_offset - c.next_begin_offset \
                if c.status == "OFFSET_OVERFLOW_BADLY" else 0
            skipped = c.next_begin_offset - c.committed_offset if c.status == "OFFSET_TOO_SMALL" else 0
            skipped += sum(1 for o in lost_by_queue.get(key, ()) if o >= c.committed_offset)
            rows.append({"source": source, "group": c.group, "topic": c.topic, "queue_id": c.queue_id,
                         "committed_offset": c.committed_offset, "min_before": before[0],
                         "max_before": before[1], "min_after": c.min_offset, "max_after": c.max_offset,
                         "status": c.status, "next_begin_offset": c.next_begin_offset,
                         "repaired_min": repaired[0], "repaired_max": repaired[1],
                         "redelivered": max(redelivered, 0), "skipped": skipped,
                         "at_risk": redelivered > 0 or skipped > 0})
    return pa.Table.from_pylist(rows) if rows else pa.table({})


# -- segments ----------------------------------------------------------------------------------------------

def segment_rows(summaries: Sequence[SegmentSummary], pred: recovery.Prediction,
                 mtimes: dict[str, int], scanned: set[str]) -> list[dict]:
    import datetime as dt

    kept = {f.name: f.wrote for f in pred.commitlog_files}

    def ts(ms):
        return None if ms is None else dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc)

    out = []
    for s in summaries:
        row = s.as_row()
        row.update(first_store_time=ts(s.first_store_timestamp), last_store_time=ts(s.last_store_timestamp),
                   end_phy_offset=s.end_phy_offset, broker_keeps_bytes=kept.get(s.segment),
                   file_mtime_ns=mtimes.get(s.segment), scanned=s.segment in scanned)
        out.append(row)
    return out


def summary_from_row(row: dict) -> SegmentSummary:
    """A segment summary carried over from an earlier run's ``segments`` row (--since-last)."""
    from schemas import SEGMENT

    return SegmentSummary(**{k: row[k] for k in SEGMENT.names if k != "trailing_bytes"})


# -- all of it -------------------------------------------------------------------------------------------

@dataclass
class Findings:
    """The audit's tables (rows without the run keys) and the counts the run summary prints."""

    tables: dict[str, pa.Table] = field(default_factory=dict)
    scope: tuple[int, int] | None = None

    def count(self, table: str, where=None) -> int:
        t = self.tables.get(table)
        if t is None or not t.num_rows:
            return 0
        return t.num_rows if where is None else int(pc.sum(where(t)).as_py() or 0)


def _concat(tables: list[pa.Table]) -> pa.Table:
    tables = [t for t in tables if t.num_rows]
    if not tables:
        return pa.table({})
    return pa.concat_tables(tables, promote_options="permissive")


def _ranges(df) -> dict[tuple[str, int], tuple[int, int]]:
    from pyspark.sql import functions as F

    t = (df.where(F.col("size") > 0).groupBy("topic", "queue_id")
         .agg(F.min("queue_offset").alias("lo"), (F.max("queue_offset") + 1).alias("hi")).toArrow())
    return {(a, b): (c, d) for a, b, c, d in zip(*(t.column(i).to_pylist() for i in range(4)))}


def audit(spark, store: Store, pred: recovery.Prediction, summaries: Sequence[SegmentSummary],
          scan: Sequence[SegmentSummary] | None = None) -> Findings:
    """Every finding for ``store`` given the broker's predicted recovery. ``scan``: the segments
    whose records are read (default all; --since-last passes only the new ones)."""
    broker_5x = pred.broker_version == recovery.V5X
    scan = list(summaries if scan is None else scan)
    out = Findings()
    if len(scan) < len(summaries):       # --since-last: records read only in the new segments
        last = summaries[-1].file_start + summaries[-1].file_size if summaries else 0
        out.scope = (scan[0].file_start, last) if scan else (last, last)
    if not pred.load_result:
        return out
    end = pred.max_phy_offset
    records = records_df(spark, store, end, broker_5x, scan).cache()
    try:
        disk = disk_entries(spark, store, broker_5x).cache()
        broker = broker_entries(spark, pred).cache()
        rebuilt = rebuilt_entries(records, end, store.config, broker_5x).cache()
        disk_queues = {(r.topic, r.queue_id) for r in list_queues(store.root)}
        out.tables["queue_findings"] = queue_findings(spark, disk, broker, rebuilt, records, pred,
                                                      disk_queues, out.scope)
        out.tables["index_findings"] = index_findings(spark, store, pred, records)
        cut = next((f.name for f in pred.commitlog_files if f.wrote < f.size), None)
        out.tables["lost_messages"] = lost_messages(records, end, cut)
        from store_reader.checkpoint import read_checkpoint

        out.tables["flush_window"] = flush_window(records, end, read_checkpoint(store.checkpoint_path))
        out.tables["consumer_offset_findings"] = consumer_offset_findings(
            store, pred, _ranges(disk), _ranges(rebuilt), out.tables["lost_messages"])
        for df in (disk, broker, rebuilt):
            df.unpersist()
    finally:
        records.unpersist()
    return out


def passes_json(passes: Sequence[tuple[str, float, str]]) -> str:
    return json.dumps({name: round(secs, 3) for name, secs, _ in passes})


__all__ = ["QUEUE_KINDS", "INDEX_KINDS", "Findings", "audit", "records_df", "compare_queue"]


# -- the run: rows with their keys, the summary, the exit status -----------------------------------------

INFO_KINDS = {"blank"}          # normal broker behaviour, reported but not alerting


def alerting_counts(f: Findings) -> dict[str, int]:
    """What makes an audit exit 1: counts per table of findings that need an operator."""
    q = f.tables.get("queue_findings", pa.table({}))
    return {
        "queue_findings": f.count("queue_findings", lambda t: pc.invert(pc.is_in(t["kind"], pa.array(sorted(INFO_KINDS)))))
        if q.num_rows else 0,
        "index_findings": f.count("index_findings"),
        "lost_messages": f.count("lost_messages"),
        "consumer_offsets_at_risk": f.count("consumer_offset_findings", lambda t: t["at_risk"]),
    }


def bad_segments(summaries: Sequence[SegmentSummary]) -> list[SegmentSummary]:
    """Segments whose valid data ends at a corrupt record or a torn tail."""
    return [s for s in summaries if s.end_reason in ("corrupt", "torn_tail")]


def run_status(pred: recovery.Prediction, summaries: Sequence[SegmentSummary], f: Findings) -> str:
    """``runs.status``: refused (the broker would not load the store), findings, or clean."""
    if not pred.load_result:
        return "refused"
    return "findings" if any(alerting_counts(f).values()) or bad_segments(summaries) else "clean"


def run_tables(f: Findings, run: dict, segments: list[dict], run_id: str, store_id: str,
               audited_at) -> dict[str, pa.Table]:
    """Every audit table's rows for this run (``schemas.audit``), run keys filled in."""
    from jobs.deltasink import audit_rows
    from schemas import audit as A

    out = {"runs": audit_rows(A.RUNS, [run], run_id, store_id, audited_at),
           "segments": audit_rows(A.SEGMENTS, segments, run_id, store_id, audited_at)}
    for name in ("queue_findings", "index_findings", "consumer_offset_findings", "lost_messages",
                 "flush_window"):
        t = f.tables.get(name)
        rows = t if t is not None and t.num_rows else []
        out[name] = audit_rows(A.TABLES[name], rows, run_id, store_id, audited_at)
    return out


def write_audit(audit_path: str, tables: dict[str, pa.Table], run_id: str, spark=None) -> list[str]:
    """Each table to ``<audit_path>/<table>`` (Delta), replacing the rows of ``run_id``; ``runs``
    last, so a run row exists only once all its findings are committed."""
    from jobs.deltasink import write_run_rows

    written = []
    for name in [n for n in tables if n != "runs"] + ["runs"]:
        uri = audit_path.rstrip("/") + "/" + name
        write_run_rows(uri, tables[name], run_id, spark=spark)
        written.append(uri)
    return written


def print_summary(f: Findings, out) -> None:
    """Findings grouped by kind, one line each (the audit's human summary)."""
    q = f.tables.get("queue_findings")
    if q is not None and q.num_rows:
        agg = q.group_by("kind").aggregate([("count", "sum"), ("topic", "count_distinct")])
        for kind, n, topics in sorted(zip(*(agg.column(i).to_pylist() for i in range(3))),
                                      key=lambda r: r[0]):
            print(f"    queue   {kind:<26} {n:>8} entries in {topics} topic(s): {QUEUE_KINDS[kind]}", file=out)
    ix = f.tables.get("index_findings")
    if ix is not None and ix.num_rows:
        agg = ix.group_by(["kind", "index"]).aggregate([("count", "sum")])
        for kind, lens, n in sorted(zip(*(agg.column(i).to_pylist() for i in range(3)))):
            print(f"    index   {kind:<26} {n:>8} ({lens}): {INDEX_KINDS[kind]}", file=out)
    lost = f.tables.get("lost_messages")
    if lost is not None and lost.num_rows:
        print(f"    lost    {lost.num_rows} intact messages the broker's recovery discards "
              f"(phy {pc.min(lost['phy_offset']).as_py()}..{pc.max(lost['phy_offset']).as_py()})", file=out)
    fw = f.tables.get("flush_window")
    if fw is not None and fw.num_rows:
        cl = fw.filter(pc.equal(fw["window"], "commitlog"))
        if cl.num_rows:
            print(f"    flush   {pc.sum(cl['records']).as_py()} records stored after the checkpoint's "
                  f"commitlog flush time (at risk under ASYNC_FLUSH power loss)", file=out)
