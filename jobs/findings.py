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
from store_reader.exceptions import StoreReaderError
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
    "corrupt_served": "the broker serves an entry whose record fails its CRC check",
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
    return spark.createDataFrame(pa.concat_tables(parts) if parts else CQ_SCHEMA.empty_table())


# -- range encoding --------------------------------------------------------------------------------------

def runs_of(df, offset: str = "queue_offset", keys: Sequence[str] = ("kind", "topic", "queue_id")):
    """Collapse rows (``keys``, ``offset``, phy_offset, size) into runs of consecutive offsets:
    from_offset, to_offset (exclusive), count, phy_from, phy_to. Gaps-and-islands: within a key,
    offset - row_number is constant along a run."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    w = Window.partitionBy(*keys).orderBy(offset)
    grouped = df.withColumn("_run", F.col(offset) - F.row_number().over(w))
    return (grouped.groupBy(*keys, "_run")
            .agg(F.min(offset).alias("from_offset"), (F.max(offset) + 1).alias("to_offset"),
                 F.count(F.lit(1)).alias("count"), F.min("phy_offset").alias("phy_from"),
                 F.max(F.col("phy_offset") + F.col("size")).alias("phy_to"),
                 F.first("detail", ignorenulls=True).alias("detail"))
            .drop("_run"))


# -- queue findings ----------------------------------------------------------------------------------------

def queue_findings(spark, disk, broker, rebuilt, records, pred: recovery.Prediction, disk_queues: set,
                   scope: tuple[int, int] | None = None) -> pa.Table:
    """``QUEUE_KINDS`` rows (without run keys). ``scope`` = the phy range whose records were scanned
    (--since-last); kinds that need the records are judged only inside it."""
    from pyspark.sql import functions as F

    end = pred.max_phy_offset
    d = disk.select("topic", "queue_id", "queue_offset", *[F.col(c).alias("d_" + c) for c in
                                                          ("phy_offset", "size", "tags_code")])
    b = broker.select("topic", "queue_id", "queue_offset", *[F.col(c).alias("b_" + c) for c in
                                                            ("phy_offset", "size", "tags_code")])
    r = (rebuilt.groupBy("topic", "queue_id", "queue_offset")
         .agg(F.min("phy_offset").alias("r_phy_offset"), F.first("size").alias("r_size"),
              F.first("tags_code").alias("r_tags_code"), F.count(F.lit(1)).alias("r_count")))
    mins = spark.createDataFrame([(t, q, s.min_offset) for (t, q), s in pred.consume_queues.items()],
                                 "topic string, queue_id int, b_min long")
    rec = records.select(F.col("phy_offset").alias("b_phy_offset"), F.lit(True).alias("rec_exists"),
                         F.col("body_crc_ok").alias("rec_crc_ok"), F.col("record_crc_ok").alias("rec_pcrc_ok"))
    j = (d.join(b, ["topic", "queue_id", "queue_offset"], "full")
         .join(r, ["topic", "queue_id", "queue_offset"], "full")
         .join(mins, ["topic", "queue_id"], "left")
         .join(rec, "b_phy_offset", "left"))
    has_d, has_b, has_r = (F.col("d_phy_offset").isNotNull(), F.col("b_phy_offset").isNotNull(),
                           F.col("r_phy_offset").isNotNull())
    b_blank = F.col("b_size") == _PRE_BLANK

    def differs(x: str, y: str):
        return ((F.col(f"{x}_phy_offset") != F.col(f"{y}_phy_offset")) | (F.col(f"{x}_size") != F.col(f"{y}_size"))
                | (F.col(f"{x}_tags_code") != F.col(f"{y}_tags_code")))

    def in_scope(col: str):
        if scope is None:
            return F.lit(True)
        return (F.col(col) >= scope[0]) & (F.col(col) < scope[1])

    schedule = F.col("topic") == rf.SCHEDULE_TOPIC
    same_record_other_tags = lambda x: ((F.col(f"{x}_phy_offset") == F.col("r_phy_offset"))  # noqa: E731
                                        & (F.col(f"{x}_size") == F.col("r_size"))
                                        & (F.col(f"{x}_tags_code") != F.col("r_tags_code")))
    kinds = [
        ("removed_beyond_truncation", has_d & ~has_b & (F.col("d_phy_offset") >= end), "d"),
        ("removed_below_min", has_d & ~has_b & (F.col("d_phy_offset") < end)
         & (F.col("queue_offset") < F.coalesce(F.col("b_min"), F.lit(0))), "d"),
        ("removed_by_cq_recovery", has_d & ~has_b & (F.col("d_phy_offset") < end)
         & (F.col("queue_offset") >= F.coalesce(F.col("b_min"), F.lit(0))), "d"),
        ("redispatched", ~has_d & has_b, "b"),
        ("replaced", has_d & has_b & differs("d", "b"), "b"),
        ("not_restored", has_r & ~has_b, "r"),
        ("delayed_early", has_b & has_r & schedule & same_record_other_tags("b"), "b"),
        ("delayed_early_on_disk", has_d & has_r & schedule & same_record_other_tags("d"), "d"),
        ("wrong_entry", has_b & has_r & differs("b", "r") & ~(schedule & same_record_other_tags("b")), "b"),
        ("unbacked", has_b & ~b_blank & ~has_r & F.col("rec_exists").isNull()
         & (F.col("b_phy_offset") < end) & in_scope("b_phy_offset"), "b"),
        ("corrupt_served", has_b & ~b_blank & ((F.col("rec_crc_ok") == F.lit(False))
                                               | (F.col("rec_pcrc_ok") == F.lit(False))), "b"),
        ("duplicate_queue_offset", F.col("r_count") > 1, "r"),
        ("blank", has_d & (F.col("d_size") == _PRE_BLANK), "d"),
    ]
    if scope is not None:        # judged against records only inside the scanned range
        kinds = [(k, cond & (in_scope(f"{src}_phy_offset") if k in ("not_restored", "wrong_entry",
                                                                     "delayed_early", "delayed_early_on_disk",
                                                                     "duplicate_queue_offset") else F.lit(True)),
                  src) for k, cond, src in kinds]
    found = F.array(*[F.when(cond, F.struct(F.lit(kind).alias("kind"),
                                            F.col(f"{src}_phy_offset").alias("phy_offset"),
                                            F.col(f"{src}_size").cast("long").alias("size")))
                      for kind, cond, src in kinds])
    per_entry = (j.select("topic", "queue_id", "queue_offset", F.explode(found).alias("f"))
                 .where(F.col("f").isNotNull())
                 .select(F.col("f.kind").alias("kind"), "topic", "queue_id", "queue_offset",
                         "f.phy_offset", "f.size", F.lit(None).cast("string").alias("detail")))
    parts = [per_entry]
    parts.append(_holes(disk))
    parts.append(_duplicate_phys(disk, "duplicate_phy_on_disk"))
    parts.append(_duplicate_phys(broker.where(F.col("size") != _PRE_BLANK), "duplicate_phy"))
    df = parts[0]
    for p in parts[1:]:
        df = df.unionByName(p)
    rows = runs_of(df)
    missing = [(t, q) for t, q in pred.consume_queues if (t, q) not in disk_queues]
    missing_rows = (rebuilt.join(spark.createDataFrame(missing, "topic string, queue_id int"),
                                 ["topic", "queue_id"])
                    .groupBy("topic", "queue_id")
                    .agg(F.min("queue_offset").alias("from_offset"), (F.max("queue_offset") + 1).alias("to_offset"),
                         F.count(F.lit(1)).alias("count"), F.min("phy_offset").alias("phy_from"),
                         F.max(F.col("phy_offset") + F.col("size")).alias("phy_to"))
                    .select(F.lit("queue_missing").alias("kind"), "topic", "queue_id", "from_offset",
                            "to_offset", "count", "phy_from", "phy_to",
                            F.lit(None).cast("string").alias("detail")))
    out = rows.unionByName(missing_rows).orderBy("topic", "queue_id", "kind", "from_offset")
    return out.toArrow()


def _holes(disk):
    """Runs of absent or invalid slots between valid entries of a queue on disk."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    valid = disk.where((F.col("phy_offset") >= 0) & (F.col("size") > 0))
    w = Window.partitionBy("topic", "queue_id").orderBy("queue_offset")
    gaps = (valid.withColumn("prev", F.lag("queue_offset").over(w))
            .where(F.col("queue_offset") - F.col("prev") > 1))
    return gaps.select(F.lit("hole").alias("kind"), "topic", "queue_id",
                       F.explode(F.sequence(F.col("prev") + 1, F.col("queue_offset") - 1)).alias("queue_offset"),
                       F.lit(None).cast("long").alias("phy_offset"), F.lit(None).cast("long").alias("size"),
                       F.lit(None).cast("string").alias("detail"))


def _duplicate_phys(entries, kind: str):
    """Every entry whose phy offset appears more than once in its queue."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    w = Window.partitionBy("topic", "queue_id", "phy_offset")
    return (entries.where(F.col("size") > 0)
            .withColumn("_n", F.count(F.lit(1)).over(w)).where(F.col("_n") > 1)
            .select(F.lit(kind).alias("kind"), "topic", "queue_id", "queue_offset", "phy_offset",
                    F.col("size").cast("long").alias("size"),
                    F.concat(F.lit("phy offset at "), F.col("_n").cast("string"),
                             F.lit(" queue offsets")).alias("detail")))


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
    """``INDEX_KINDS`` rows for the index files on disk and after the broker's recovery."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    cfg = store.config
    lo, end = pred.min_phy_offset, pred.max_phy_offset
    lenses = {"on_disk": [], "recovered": []}
    header_rows = []
    from store_reader.indexfile import list_index_files

    for i, ref in enumerate(list_index_files(store.index_dir, cfg.index_file_size, strict=False)):
        with IndexFile(ref.path, cfg.maxHashSlotNum, cfg.maxIndexNum) as idx:
            lenses["on_disk"].append(_index_entries(idx, i, ref.name))
            header_rows += [{"kind": "bad_header", "index": "on_disk", "file": ref.name, "count": 1,
                             "detail": p} for p in header_problems(idx)]
    for i, f in enumerate(pred.index_files):
        idx = f.view(cfg)
        lenses["recovered"].append(_index_entries(idx, i, f.name))
    wanted = _index_puts(records, end).cache()
    parts = []
    for lens, tables in lenses.items():
        if not tables:
            parts.append(_unfindable(records, wanted, None, lens, end))
            continue
        e = spark.createDataFrame(pa.concat_tables(tables)).withColumn("index", F.lit(lens))
        dangling = e.where((F.col("phy_offset") < lo) | (F.col("phy_offset") >= end)).select(
            F.when(F.col("phy_offset") < lo, "dangling_below_min").otherwise("dangling_beyond_end").alias("kind"),
            "index", "file", "phy_offset")
        w = Window.partitionBy("key_hash", "phy_offset").orderBy("file_order", "entry_number")
        dup = (e.withColumn("_n", F.row_number().over(w)).where(F.col("_n") > 1)
               .select(F.lit("duplicate_entry").alias("kind"), "index", "file", "phy_offset"))
        per_file = (dangling.unionByName(dup).groupBy("kind", "index", "file")
                    .agg(F.count(F.lit(1)).alias("count"), F.min("phy_offset").alias("phy_from"),
                         (F.max("phy_offset") + 1).alias("phy_to"))
                    .select("kind", "index", "file", F.lit(None).cast("string").alias("topic"),
                            "phy_from", "phy_to", "count", F.lit(None).cast("string").alias("detail")))
        parts.append(per_file)
        parts.append(_unfindable(records, wanted, e, lens, end))
    rows = [p.toArrow() for p in parts]
    wanted.unpersist()
    if header_rows:
        rows.append(pa.Table.from_pylist(header_rows))
    return _concat(rows)


def _index_puts(records, end: int):
    """(topic, key hash, phy offset) of every key the broker indexes for the records below ``end``."""
    from pyspark.sql import functions as F

    cols = ["stored_phy_offset", "sys_flag", "uniq_key", "key_list", "topic", "store_timestamp"]
    rec = records.where((F.col("phy_offset") < end) & F.col("valid_prefix")).select(*cols)
    schema = pa.schema([pa.field("topic", pa.string(), False), pa.field("key_hash", pa.int32(), False),
                        pa.field("phy_offset", pa.int64(), False)])

    def puts(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for b in batches:
            p = index_puts(pa.Table.from_batches([b]))
            yield pa.RecordBatch.from_arrays([p.topic, pa.array(p.key_hash.astype(np.int32)),
                                              pa.array(p.phy)], schema=schema)

    return rec.mapInArrow(puts, _spark_schema(schema))


def _unfindable(records, wanted, entries, lens: str, end: int):
    """Keys whose (key hash, phy offset) no entry of the lens' index files holds, as runs of
    consecutive indexed records of one topic (commitlog order)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    missing = wanted if entries is None else \
        wanted.join(entries.select("key_hash", "phy_offset").distinct(), ["key_hash", "phy_offset"], "left_anti")
    per_record = missing.groupBy("topic", "phy_offset").agg(F.count(F.lit(1)).alias("keys"))
    # a run = records missing keys with no indexed record of the topic in between
    rank = Window.partitionBy("topic").orderBy("phy_offset")
    indexed = wanted.select("topic", "phy_offset").distinct().withColumn("_all", F.row_number().over(rank))
    runs = (per_record.join(indexed, ["topic", "phy_offset"])
            .withColumn("_run", F.col("_all") - F.row_number().over(rank))
            .groupBy("topic", "_run").agg(F.sum("keys").alias("count"), F.min("phy_offset").alias("phy_from"),
                                          (F.max("phy_offset") + 1).alias("phy_to"),
                                          F.count(F.lit(1)).alias("records")))
    return runs.select(F.lit("unfindable_key").alias("kind"), F.lit(lens).alias("index"),
                       F.lit(None).cast("string").alias("file"), "topic", "phy_from", "phy_to", "count",
                       F.concat(F.col("records").cast("string"), F.lit(" records")).alias("detail"))


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

    rec = records.where((F.col("phy_offset") < end) & F.col("valid_prefix"))
    tran = F.col("sys_flag").bitwiseAND(rf.TRANSACTION_MASK)
    windows = [("commitlog", checkpoint.physic_msg_timestamp, F.lit(True)),
               ("consume_queue", checkpoint.logics_msg_timestamp, tran.isin(*_CQ_TYPES)),
               ("index", checkpoint.index_msg_timestamp, tran != rf.TRANSACTION_ROLLBACK_TYPE)]
    parts = []
    for name, ts, cond in windows:
        parts.append(rec.where(cond & (F.col("store_timestamp") > ts))
                     .groupBy("topic", "queue_id")
                     .agg(F.count(F.lit(1)).alias("records"), F.min("queue_offset").alias("from_offset"),
                          (F.max("queue_offset") + 1).alias("to_offset"), F.min("phy_offset").alias("phy_from"),
                          F.max(F.col("phy_offset") + F.col("total_size")).alias("phy_to"),
                          F.timestamp_millis(F.min("store_timestamp")).alias("first_store_time"),
                          F.timestamp_millis(F.max("store_timestamp")).alias("last_store_time"))
                     .select(F.lit(name).alias("window"),
                             (F.timestamp_millis(F.lit(ts)) if ts else F.lit(None).cast("timestamp"))
                             .alias("checkpoint_time"), "*"))
    df = parts[0].unionByName(parts[1]).unionByName(parts[2])
    return df.orderBy("window", "topic", "queue_id").toArrow()


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


__all__ = ["QUEUE_KINDS", "INDEX_KINDS", "Findings", "audit", "records_df", "runs_of", "StoreReaderError"]


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
