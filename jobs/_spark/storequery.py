"""The store an audit run names, read through Spark for the investigation notebooks.

Everything is read with the ``rocketmq`` data source (``store_reader.datasource``: one task per
commitlog segment, consume queue file or index file, filters pushed down to prune files), so only
the rows a finding names reach the driver. What the broker's predicted recovery holds (its queues,
the index files its re-dispatch builds) is already in the driver's memory and is taken from there.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Iterable, Sequence

import numpy as np
import pandas as pd
import pyarrow as pa

from store_reader.broker import prediction, versions
from store_reader.formats.indexfile import list_index_files
from store_reader.store import Store

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

MESSAGE_COLUMNS = ["phy_offset", "topic", "queue_id", "queue_offset", "sys_flag", "store_timestamp",
                   "born_timestamp", "keys", "tags", "uniq_key", "msg_id", "body_crc_ok", "record_crc_ok",
                   "valid_prefix"]
# What a message table shows of each record (the rest stays in the scan).
SHOWN_RECORD_COLUMNS = ["msg_id", "keys", "uniq_key", "tags", "store_time", "born_time", "intact"]
CQ_ENTRY_COLUMNS = ["queue_offset", "phy_offset", "size", "tags_code"]


def read_store(spark: "SparkSession", store: Store, table: str, columns: Sequence[str],
               broker_5x: bool | None = None) -> "DataFrame":
    """``table`` of the ``rocketmq`` data source on ``store`` with its broker settings. Messages are
    read as the audit reads them (header checks, CRCs computed, intact records behind a bad one
    included with ``valid_prefix`` false)."""
    import store_reader

    store_reader.register(spark)
    options = {"path": str(store.root), "table": table, "columns": ",".join(dict.fromkeys(columns))}
    if store.config.source is not None:
        options["brokerConfig"] = store.config.source
    if broker_5x is not None:
        options["brokerVersion"] = store.broker_version() if broker_5x else versions.V49
    if table == "messages":
        options.update(includeLost="true", verifyCrc="false", computeCrc="true")
    return spark.read.format("rocketmq").options(**options).load()


def messages(spark: "SparkSession", store: Store, broker_5x: bool,
             columns: Sequence[str] = MESSAGE_COLUMNS) -> "DataFrame":
    """Every record of the commitlog (``read_store``), ``phy_offset`` and ``valid_prefix`` always."""
    return read_store(spark, store, "messages", [*columns, "phy_offset", "valid_prefix"], broker_5x)


def to_pandas(df: "DataFrame") -> pd.DataFrame:
    """A (filtered, small) Spark result on the driver, through Arrow."""
    return df.toArrow().to_pandas()


def _records_frame(table: pa.Table) -> pd.DataFrame:
    """Scanned records as pandas, with store/born times as UTC timestamps and ``intact``: no CRC
    (body, or the ``__CRC32#`` property) failed."""
    df = table.to_pandas()
    for col in ("store_timestamp", "born_timestamp"):
        if col in df:
            df[col.replace("timestamp", "time")] = pd.to_datetime(df[col], unit="ms", utc=True)
    if "body_crc_ok" in df and "record_crc_ok" in df:
        df["intact"] = df["body_crc_ok"].ne(False) & df["record_crc_ok"].ne(False)
    return df


def records_at(spark: "SparkSession", store: Store, broker_5x: bool, phy_offsets: Iterable[int],
               columns: Sequence[str] = MESSAGE_COLUMNS) -> pd.DataFrame:
    """The records starting at ``phy_offsets`` (the filter prunes the segments not holding them);
    an offset no record starts at is absent from the result."""
    from pyspark.sql import functions as F

    phys = np.unique(np.fromiter((int(p) for p in phy_offsets), dtype=np.int64)).tolist()
    df = messages(spark, store, broker_5x, columns)
    return _records_frame(df.where(F.col("phy_offset").isin(phys) if phys else F.lit(False)).toArrow())


def _broker_queue_entries(pred: prediction.Prediction, topic: str, queue_id: int) -> pd.DataFrame:
    """The entries of the broker's recovered queue (the prediction, on the driver)."""
    q = pred.consume_queues.get((topic, queue_id))
    if q is None:
        return pd.DataFrame(columns=CQ_ENTRY_COLUMNS)
    e = q.entries()
    return pd.DataFrame({"queue_offset": np.arange(q.min_offset, q.min_offset + len(e), dtype=np.int64),
                         "phy_offset": e["phy_offset"].astype(np.int64), "size": e["size"],
                         "tags_code": e["tags_code"]})


def queue_entries(spark: "SparkSession", store: Store, pred: prediction.Prediction,
                  runs: pd.DataFrame, broker_view: bool) -> pd.DataFrame:
    """CQ entries (queue_offset, phy_offset, size, tags_code) with a positive size of each run
    (``topic``, ``queue_id``, ``from_offset``, ``to_offset``; its other columns are kept) in run
    order: of the broker's recovered queue (``broker_view``) or of the CQ files as they are on disk
    (one Spark query; the queues' filters prune the other CQ files)."""
    from pyspark.sql import functions as F

    cols = CQ_ENTRY_COLUMNS
    parts = []
    if broker_view:
        for i, r in enumerate(runs.itertuples(index=False)):
            e = _broker_queue_entries(pred, r.topic, int(r.queue_id))
            parts.append(e[(e["queue_offset"] >= r.from_offset) & (e["queue_offset"] < r.to_offset)]
                         .assign(run=i))
    elif len(runs):
        cq = read_store(spark, store, "consume_queue", ["topic", "queue_id", *cols],
                        versions.is_5x(pred.broker_version))
        wanted = F.lit(False)
        for r in runs.itertuples(index=False):
            wanted = wanted | ((F.col("topic") == r.topic) & (F.col("queue_id") == int(r.queue_id))
                               & (F.col("queue_offset") >= int(r.from_offset))
                               & (F.col("queue_offset") < int(r.to_offset)))
        disk = to_pandas(cq.where(F.col("topic").isin(sorted(set(runs["topic"])))
                                  & F.col("queue_id").isin(sorted({int(q) for q in runs["queue_id"]}))
                                  & wanted)).sort_values(["topic", "queue_id", "queue_offset"])
        for i, r in enumerate(runs.itertuples(index=False)):
            sel = (disk["topic"] == r.topic) & (disk["queue_id"] == int(r.queue_id)) \
                & (disk["queue_offset"] >= r.from_offset) & (disk["queue_offset"] < r.to_offset)
            parts.append(disk.loc[sel, cols].assign(run=i))
    if not parts:
        return pd.DataFrame(columns=[*runs.columns, *cols])
    e = pd.concat(parts, ignore_index=True)
    e = e[e["size"] > 0]
    meta = runs.reset_index(drop=True).drop(columns=[c for c in cols if c in runs.columns])
    return e.join(meta, on="run").drop(columns="run").reset_index(drop=True)


def repeated_index_entries(spark: "SparkSession", store: Store, pred: prediction.Prediction,
                           lens: str) -> pd.DataFrame:
    """The entries of the lens' index files that repeat an earlier (key hash, phy offset) in put
    order (file order, then entry number): file, key_hash, phy_offset, times_indexed (how often
    the pair is indexed in all). Files on disk are read by Spark; files the broker's predicted
    re-dispatch builds are in the prediction (the driver's memory) and go to Spark from there."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    cfg = store.config
    cols = ["file", "entry_number", "key_hash", "phy_offset"]
    if lens == "on_disk":
        disk = {r.name: i for i, r in enumerate(list_index_files(store.index_dir, cfg.index_file_size,
                                                                 strict=False))}
        built = []
    else:
        disk = {f.name: i for i, f in enumerate(pred.index_files) if f.built is None and f.path}
        built = [(i, f) for i, f in enumerate(pred.index_files) if f.built is not None]
    parts = []
    if disk:
        order = F.create_map(*[F.lit(x) for name, i in disk.items() for x in (name, i)])
        parts.append(read_store(spark, store, "index", cols).where(F.col("file").isin(list(disk)))
                     .withColumn("file_order", order[F.col("file")]))
    for i, f in built:
        with f.view(cfg) as idx:
            t = idx.entries_table().select(cols).to_pandas().assign(file=f.name, file_order=i)
        if len(t):
            parts.append(spark.createDataFrame(t[[*cols, "file_order"]], "file string, entry_number int, "
                                               "key_hash int, phy_offset long, file_order int"))
    if not parts:
        return pd.DataFrame(columns=["file", "key_hash", "phy_offset", "times_indexed"])
    e = parts[0]
    for p in parts[1:]:
        e = e.unionByName(p)
    pair = Window.partitionBy("key_hash", "phy_offset")
    e = e.withColumn("nth", F.row_number().over(pair.orderBy("file_order", "entry_number"))) \
        .withColumn("times_indexed", F.count(F.lit(1)).over(pair))
    again = e.where(F.col("nth") > 1).select("file", "file_order", "entry_number", "key_hash", "phy_offset",
                                             "times_indexed")
    return to_pandas(again).sort_values(["file_order", "entry_number"]).reset_index(drop=True)
