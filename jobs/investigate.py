"""What the investigation notebooks (``notebooks/``) compute, kept out of their cells.

One run of the Delta audit tables is read with delta-rs (``load_run``); the messages its findings
name are looked up in the store itself through Spark, with the ``rocketmq`` data source
(``store_reader.datasource``: one task per commitlog segment, consume queue file or index file,
filters pushed down to prune files), so only the rows a finding names reach the driver; the charts
are ``matplotlib.figure.Figure`` objects that never touch pyplot's global state, so they render the
same under any backend (the notebooks select ``Agg``).
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable, Sequence

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from jobs.deltasink import read_table, store_id_for
from jobs.findings import flush_risk
from schemas import audit as A
from store_reader import recovery
from store_reader.audit.kinds import QUEUE_KINDS
from store_reader.checkpoint import read_checkpoint
from store_reader.indexfile import list_index_files
from store_reader.store import Store

if TYPE_CHECKING:
    from matplotlib.figure import Figure
    from pyspark.sql import DataFrame, SparkSession

DUPLICATE_QUEUE_KINDS = ("duplicate_phy", "duplicate_phy_on_disk", "redispatched", "replaced")
# Queue kinds read from the broker's recovered queues; the others from the CQ files on disk.
BROKER_VIEW_KINDS = frozenset({"duplicate_phy", "redispatched", "replaced"})
# The broker loads consumerOffset.json and falls back to the .bak only when it cannot.
PRIMARY_OFFSETS = "consumerOffset.json"
BACKUP_OFFSETS = "consumerOffset.json.bak"
MESSAGE_COLUMNS = ["phy_offset", "topic", "queue_id", "queue_offset", "sys_flag", "store_timestamp",
                   "born_timestamp", "keys", "tags", "uniq_key", "msg_id", "body_crc_ok", "record_crc_ok",
                   "valid_prefix"]
# What a message table shows of each record (the rest stays in the scan).
SHOWN_RECORD_COLUMNS = ["msg_id", "keys", "uniq_key", "tags", "store_time", "born_time", "intact"]
FINDING_TABLES = ("segments", "queue_findings", "index_findings", "consumer_offset_findings",
                  "lost_messages", "flush_window")


# -- the audit run --------------------------------------------------------------------------------

@dataclass
class AuditRun:
    """One run's row of ``runs`` and its rows of every findings table (pandas, run keys dropped)."""

    run: dict
    tables: dict[str, pd.DataFrame]

    def __getitem__(self, table: str) -> pd.DataFrame:
        return self.tables[table]

    @property
    def run_id(self) -> str:
        return self.run["run_id"]

    @property
    def truncation_point(self) -> int:
        if self.run["truncation_point"] is None:
            raise ValueError(f"run {self.run_id}: the broker would refuse to load the store "
                             f"({self.run['detail']}); it truncates nothing")
        return int(self.run["truncation_point"])

    @property
    def broker_version(self) -> str:
        return self.run["broker_version"]

    def describe(self) -> pd.Series:
        """The run's headline fields, for display."""
        keys = ["run_id", "job", "mode", "status", "audited_at", "broker_version", "recovery_path",
                "start_file", "truncation_point", "min_phy_offset", "queue_findings", "index_findings",
                "consumer_offsets_at_risk", "lost_messages", "flush_window_records", "repaired_store"]
        return pd.Series({k: self.run.get(k) for k in keys}, name=self.run["store_id"])


def _read(audit_path: str, table: str) -> pa.Table:
    from deltalake.exceptions import TableNotFoundError

    try:
        return read_table(audit_path.rstrip("/") + "/" + table)
    except TableNotFoundError:           # a run that wrote nothing yet: the table's empty schema
        return A.TABLES[table].arrow().empty_table()


def load_run(audit_path: str, store: Store | str | None = None, run_id: str | None = None) -> AuditRun:
    """The audit run ``run_id``, or else the latest run (``audited_at``) of ``store`` (a ``Store``
    or its ``store_id``), or else the latest run in the tables."""
    runs = _read(audit_path, "runs")
    if run_id is not None:
        runs = runs.filter(pc.equal(runs["run_id"], run_id))
    elif store is not None:
        sid = store_id_for(str(store.root)) if isinstance(store, Store) else store
        runs = runs.filter(pc.equal(runs["store_id"], sid))
    if not runs.num_rows:
        raise LookupError(f"no audit run for {run_id or store or 'any store'} in {audit_path}")
    run = runs.sort_by([("audited_at", "descending")]).slice(0, 1).to_pylist()[0]
    tables = {}
    for name in FINDING_TABLES:
        t = _read(audit_path, name)
        t = t.filter(pc.equal(t["run_id"], run["run_id"]))
        tables[name] = t.drop_columns(["run_id", "store_id", "audited_at"]).to_pandas()
    return AuditRun(run, tables)


def predict(store: Store, run: AuditRun) -> recovery.Prediction:
    """The broker's recovery as the audit run predicted it (same broker version)."""
    pred = recovery.predict(store, run.broker_version)
    if pred.load_result and pred.max_phy_offset != run.truncation_point:
        raise ValueError(f"the store changed since run {run.run_id}: truncation point now "
                         f"{pred.max_phy_offset}, the run found {run.truncation_point}")
    return pred


# -- records, looked up in the store ---------------------------------------------------------------

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
        options["brokerVersion"] = recovery.V5X if broker_5x else recovery.V49
    if table == "messages":
        options.update(includeLost="true", verifyCrc="false", computeCrc="true")
    return spark.read.format("rocketmq").options(**options).load()


def messages(spark: "SparkSession", store: Store, broker_5x: bool,
             columns: Sequence[str] = MESSAGE_COLUMNS) -> "DataFrame":
    """Every record of the commitlog (``read_store``), ``phy_offset`` and ``valid_prefix`` always."""
    return read_store(spark, store, "messages", [*columns, "phy_offset", "valid_prefix"], broker_5x)


def _to_pandas(df: "DataFrame") -> pd.DataFrame:
    return df.toArrow().to_pandas()


def records_at(spark: "SparkSession", store: Store, broker_5x: bool, phy_offsets: Iterable[int],
               columns: Sequence[str] = MESSAGE_COLUMNS) -> pd.DataFrame:
    """The records starting at ``phy_offsets`` (the filter prunes the segments not holding them);
    an offset no record starts at is absent from the result."""
    from pyspark.sql import functions as F

    phys = np.unique(np.fromiter((int(p) for p in phy_offsets), dtype=np.int64)).tolist()
    df = messages(spark, store, broker_5x, columns)
    return _records_frame(df.where(F.col("phy_offset").isin(phys) if phys else F.lit(False)).toArrow())


def _broker_queue_entries(pred: recovery.Prediction, topic: str, queue_id: int) -> pd.DataFrame:
    """The entries of the broker's recovered queue (the prediction, on the driver)."""
    q = pred.consume_queues.get((topic, queue_id))
    if q is None:
        return pd.DataFrame(columns=["queue_offset", "phy_offset", "size", "tags_code"])
    e = q.entries()
    return pd.DataFrame({"queue_offset": np.arange(q.min_offset, q.min_offset + len(e), dtype=np.int64),
                         "phy_offset": e["phy_offset"].astype(np.int64), "size": e["size"],
                         "tags_code": e["tags_code"]})


def queue_entries(spark: "SparkSession", store: Store, pred: recovery.Prediction,
                  runs: pd.DataFrame, broker_view: bool) -> pd.DataFrame:
    """CQ entries (queue_offset, phy_offset, size, tags_code) with a positive size of each run
    (``topic``, ``queue_id``, ``from_offset``, ``to_offset``; its other columns are kept) in run
    order: of the broker's recovered queue (``broker_view``) or of the CQ files as they are on disk
    (one Spark query; the queues' filters prune the other CQ files)."""
    from pyspark.sql import functions as F

    cols = ["queue_offset", "phy_offset", "size", "tags_code"]
    parts = []
    if broker_view:
        for i, r in enumerate(runs.itertuples(index=False)):
            e = _broker_queue_entries(pred, r.topic, int(r.queue_id))
            parts.append(e[(e["queue_offset"] >= r.from_offset) & (e["queue_offset"] < r.to_offset)]
                         .assign(run=i))
    elif len(runs):
        cq = read_store(spark, store, "consume_queue", ["topic", "queue_id", *cols],
                        pred.broker_version == recovery.V5X)
        wanted = F.lit(False)
        for r in runs.itertuples(index=False):
            wanted = wanted | ((F.col("topic") == r.topic) & (F.col("queue_id") == int(r.queue_id))
                               & (F.col("queue_offset") >= int(r.from_offset))
                               & (F.col("queue_offset") < int(r.to_offset)))
        disk = _to_pandas(cq.where(F.col("topic").isin(sorted(set(runs["topic"])))
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


# -- duplicates ---------------------------------------------------------------------------------------

def duplicate_queue_findings(run: AuditRun) -> pd.DataFrame:
    """Queue findings of the kinds that deliver a message twice, with what each kind means."""
    q = run["queue_findings"]
    q = q[q["kind"].isin(DUPLICATE_QUEUE_KINDS)].copy()
    q["meaning"] = q["kind"].map(QUEUE_KINDS)
    return q.reset_index(drop=True)


def queue_finding_messages(spark: "SparkSession", store: Store, pred: recovery.Prediction,
                           findings: pd.DataFrame) -> pd.DataFrame:
    """Every CQ entry of ``findings``' runs (the broker's view or the disk's, by kind) with the
    record it points at: keys, msgId, store/born time (null where no record starts there)."""
    cols = ["kind", "topic", "queue_id", "queue_offset", "phy_offset"]
    runs = findings[["kind", "topic", "queue_id", "from_offset", "to_offset"]].reset_index(drop=True)
    runs["queue_id"] = runs["queue_id"].astype("int64")
    broker = runs["kind"].isin(BROKER_VIEW_KINDS)
    parts = [queue_entries(spark, store, pred, runs[sel].assign(order=np.flatnonzero(sel)), view)
             for view, sel in ((True, broker.to_numpy()), (False, ~broker.to_numpy())) if sel.any()]
    entries = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()
    if entries.empty:
        return pd.DataFrame(columns=cols + SHOWN_RECORD_COLUMNS)
    # findings' order, each run's entries in queue offset order
    entries = entries.sort_values(["order", "queue_offset"], kind="stable")[cols].reset_index(drop=True)
    entries["queue_id"] = entries["queue_id"].astype(int)
    rec = records_at(spark, store, pred.broker_version == recovery.V5X,
                     entries["phy_offset"])[["phy_offset", *SHOWN_RECORD_COLUMNS]]
    return entries.merge(rec, on="phy_offset", how="left")


def consumer_offsets(run: AuditRun) -> pd.DataFrame:
    """The committed offsets the broker loads: ``consumerOffset.json``, or its ``.bak`` when the
    audit found no offsets in it."""
    co = run["consumer_offset_findings"]
    if co.empty:
        return co
    primary = co[co["source"] == PRIMARY_OFFSETS]
    return (primary if len(primary) else co[co["source"] == BACKUP_OFFSETS]).reset_index(drop=True)


def redelivered_offsets(run: AuditRun) -> pd.DataFrame:
    """Groups whose committed offset the truncation rewinds: queue offsets
    ``[next_begin_offset, committed_offset)`` they already consumed and are served again."""
    co = consumer_offsets(run)
    cols = ["group", "topic", "queue_id", "committed_offset", "status", "next_begin_offset",
            "max_before", "max_after", "redelivered"]
    if co.empty:
        return pd.DataFrame(columns=cols)
    return co[co["redelivered"] > 0][cols].reset_index(drop=True)


def redelivered_messages(spark: "SparkSession", store: Store, run: AuditRun,
                         redelivered: pd.DataFrame) -> pd.DataFrame:
    """The records a rewound group consumed at the queue offsets it is served again, found by their
    own QUEUEOFFSET in the commitlog. ``served_again``: the record survives the truncation, so
    the group gets the same message twice; otherwise the record is lost (or, not ``intact``, the
    damaged one the broker cut at) and a new message will take its queue offset."""
    from pyspark.sql import functions as F

    cols = ["group", "topic", "queue_id", "queue_offset", "phy_offset", "served_again", *SHOWN_RECORD_COLUMNS]
    if redelivered.empty:
        return pd.DataFrame(columns=cols)
    broker_5x = run.broker_version == recovery.V5X
    groups = redelivered[["group", "topic", "queue_id", "next_begin_offset", "committed_offset"]]
    # 1. the rewound queues' records at those queue offsets (only NOT/COMMIT types are in a CQ)
    rewound = F.lit(False)
    for g in groups.itertuples(index=False):
        rewound = rewound | ((F.col("topic") == g.topic) & (F.col("queue_id") == int(g.queue_id))
                             & (F.col("queue_offset") >= int(g.next_begin_offset))
                             & (F.col("queue_offset") < int(g.committed_offset)))
    df = messages(spark, store, broker_5x, ["topic", "queue_id", "queue_offset", "sys_flag"]).where(
        F.col("topic").isin(sorted(set(groups["topic"]))) & F.col("sys_flag").bitwiseAND(0xC).isin(0x0, 0x8)
        & rewound)
    df = _to_pandas(df).sort_values("phy_offset", kind="stable")
    m = groups.merge(df, on=["topic", "queue_id"])
    found = m[(m["queue_offset"] >= m["next_begin_offset"]) & (m["queue_offset"] < m["committed_offset"])]
    # 2. their keys, msgId and times, by phy offset
    rec = records_at(spark, store, broker_5x, found["phy_offset"])[["phy_offset", *SHOWN_RECORD_COLUMNS]]
    out = found.merge(rec, on="phy_offset", how="left")
    out = out.assign(served_again=out["phy_offset"] < run.truncation_point)
    return out[cols].sort_values(["group", "topic", "queue_id", "queue_offset"]).reset_index(drop=True)


def duplicate_index_findings(run: AuditRun) -> pd.DataFrame:
    ix = run["index_findings"]
    return ix[ix["kind"] == "duplicate_entry"].reset_index(drop=True)


def _repeated_index_entries(spark: "SparkSession", store: Store, pred: recovery.Prediction,
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
        disk = {f.name: i for i, f in enumerate(pred.index_files) if f.data is None and f.path}
        built = [(i, f) for i, f in enumerate(pred.index_files) if f.data is not None]
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
    return _to_pandas(again).sort_values(["file_order", "entry_number"]).reset_index(drop=True)


def duplicate_index_messages(spark: "SparkSession", store: Store, pred: recovery.Prediction,
                             findings: pd.DataFrame) -> pd.DataFrame:
    """The index entries behind ``duplicate_entry`` findings (a (key hash, phy offset) indexed
    again, so ``queryMessage`` by that key returns the message twice) with their records."""
    cols = ["index", "file", "key_hash", "phy_offset", "times_indexed"]
    rows = []
    for lens, group in findings.groupby("index"):
        again = _repeated_index_entries(spark, store, pred, lens)
        for r in group.itertuples(index=False):
            sel = again[(again["phy_offset"] >= r.phy_from) & (again["phy_offset"] < r.phy_to)]
            sel = sel[sel["file"].isna()] if r.file is None or pd.isna(r.file) else sel[sel["file"] == r.file]
            rows.append(sel.assign(index=lens)[cols])
    if not rows:
        return pd.DataFrame(columns=cols)
    dup = pd.concat(rows, ignore_index=True).drop_duplicates()
    rec = records_at(spark, store, pred.broker_version == recovery.V5X, dup["phy_offset"])
    rec = rec[["phy_offset", "topic", "queue_id", "queue_offset", *SHOWN_RECORD_COLUMNS]]
    return dup.merge(rec, on="phy_offset", how="left")


def per_queue(*counts: pd.Series) -> pd.DataFrame:
    """Named count series indexed by (topic, queue_id) side by side, zeros filled, one row per queue
    labelled ``topic/queue_id`` in (topic, queue id) order."""
    counts = tuple(c for c in counts if len(c))
    if not counts:
        return pd.DataFrame(dtype="int64")
    df = pd.concat(counts, axis=1).fillna(0).astype("int64").sort_index()
    df.index = [f"{t}/{q}" for t, q in df.index]
    return df


def _by_queue(df: pd.DataFrame, value: str, name: str) -> pd.Series:
    if df.empty:
        return pd.Series(dtype="int64", name=name)
    return df.groupby(["topic", "queue_id"])[value].sum().rename(name)


def duplicates_per_queue(dup_queue: pd.DataFrame, redelivered_msgs: pd.DataFrame) -> pd.DataFrame:
    """Per queue: entries of each duplicate kind and the messages rewound groups are served again as
    the same message (``served_again``, summed over the groups). A rewound offset whose record is
    lost is no duplicate: the next message sent to the queue takes it."""
    kinds = [_by_queue(dup_queue[dup_queue["kind"] == k], "count", k) for k in DUPLICATE_QUEUE_KINDS]
    again = redelivered_msgs[redelivered_msgs["served_again"].astype(bool)].assign(n=1)
    return per_queue(*kinds, _by_queue(again, "n", "served_again"))


def duplicates_title(summary: dict) -> str:
    """The per-queue chart's title: what is delivered twice, and the rewound offsets apart (they are
    served again with other messages, not duplicated)."""
    rewound, again = summary["redelivered"], summary["redelivered_served_again"]
    return (f"Duplicates per queue: {summary['duplicate_queue_entries']} duplicate CQ entries, "
            f"{again} messages served again after a rewind, {summary['index_duplicates']} duplicate index "
            f"entries\n({rewound - again} of {rewound} rewound queue offsets are taken by new messages: "
            f"not duplicates)")


def duplicate_summary(run: AuditRun, dup_queue: pd.DataFrame, queue_messages: pd.DataFrame,
                      redelivered: pd.DataFrame, redelivered_msgs: pd.DataFrame, dup_index: pd.DataFrame,
                      index_messages: pd.DataFrame, counts: pd.DataFrame) -> dict:
    """The numbers the duplicates notebook shows and plots (``write_summary``; the notebook adds
    ``plots``: each PNG's path and title)."""
    kinds = {k: int(dup_queue.loc[dup_queue["kind"] == k, "count"].sum()) for k in DUPLICATE_QUEUE_KINDS}
    return {
        "run_id": run.run_id, "store_id": run.run["store_id"],
        "queue_kinds": kinds, "duplicate_queue_entries": sum(kinds.values()),
        "queue_finding_messages": len(queue_messages),
        "queue_finding_messages_found": int(queue_messages["msg_id"].notna().sum()),
        "redelivered": int(redelivered["redelivered"].sum()), "redelivered_groups": len(redelivered),
        "redelivered_messages": len(redelivered_msgs),
        "redelivered_messages_intact": int(redelivered_msgs["intact"].sum()),
        "redelivered_served_again": int(redelivered_msgs["served_again"].sum()),
        "index_duplicates": int(dup_index["count"].sum()),
        "index_duplicate_phy_offsets": sorted(int(p) for p in index_messages["phy_offset"].unique()),
        "per_queue": counts.to_dict(orient="index"),
    }


# -- lost messages and the flush window ---------------------------------------------------------------

def flush_window_totals(run: AuditRun) -> pd.DataFrame:
    """Per window (commitlog, consume_queue, index): its checkpoint time and the records stored
    after it."""
    fw = run["flush_window"]
    if fw.empty:
        return pd.DataFrame(columns=["checkpoint_time", "records", "queues"])
    return fw.groupby("window").agg(checkpoint_time=("checkpoint_time", "first"), records=("records", "sum"),
                                    queues=("queue_id", "size"))


def at_risk_count(run: AuditRun) -> int:
    """Records below the truncation point stored after the checkpoint's commitlog flush time."""
    fw = run["flush_window"]
    return int(fw.loc[fw["window"] == "commitlog", "records"].sum()) if len(fw) else 0


def lost_and_at_risk_per_queue(run: AuditRun) -> pd.DataFrame:
    """Per queue: lost messages and records at risk under ASYNC_FLUSH (commitlog window)."""
    lost = run["lost_messages"].assign(n=1)
    fw = run["flush_window"]
    return per_queue(_by_queue(lost, "n", "lost"), _by_queue(fw[fw["window"] == "commitlog"], "records", "at_risk"))


def consumers_beyond_max(run: AuditRun) -> pd.DataFrame:
    """Groups whose committed offset lies past the queue's max offset after recovery, with the
    queue offsets they are served again (``[next_begin_offset, committed_offset)``) and the range
    of lost messages they never received (``skipped_from``..``skipped_to``)."""
    co = consumer_offsets(run)
    cols = ["group", "topic", "queue_id", "committed_offset", "max_before", "max_after", "status",
            "next_begin_offset", "redelivered", "skipped", "skipped_from", "skipped_to"]
    if co.empty:
        return pd.DataFrame(columns=cols)
    beyond = co[co["committed_offset"] > co["max_after"]]
    return _with_skipped_range(beyond, run["lost_messages"])[cols].reset_index(drop=True)


def skipping_consumers(run: AuditRun) -> pd.DataFrame:
    """Every group that will never receive some messages (``skipped`` > 0), with the range."""
    co = consumer_offsets(run)
    cols = ["group", "topic", "queue_id", "committed_offset", "status", "next_begin_offset", "skipped",
            "skipped_from", "skipped_to"]
    if co.empty:
        return pd.DataFrame(columns=cols)
    return _with_skipped_range(co[co["skipped"] > 0], run["lost_messages"])[cols].reset_index(drop=True)


def _with_skipped_range(co: pd.DataFrame, lost: pd.DataFrame) -> pd.DataFrame:
    """``skipped_from``/``skipped_to`` (exclusive): the queue offsets a group jumps over, i.e.
    ``[committed, next)`` when it pulls below the new min offset, and the lost dispatchable
    messages at or past its committed offset."""
    lost = lost[(lost["sys_flag"] & 0xC).isin((0x0, 0x8))] if len(lost) else lost
    lo, hi = [], []
    for r in co.itertuples(index=False):
        offs = []
        if r.status == "OFFSET_TOO_SMALL":
            offs += [r.committed_offset, r.next_begin_offset - 1]
        if len(lost):
            q = lost[(lost["topic"] == r.topic) & (lost["queue_id"] == r.queue_id)
                     & (lost["queue_offset"] >= r.committed_offset)]["queue_offset"]
            offs += [q.min(), q.max()] if len(q) else []
        lo.append(min(offs) if offs else None)
        hi.append(max(offs) + 1 if offs else None)
    return co.assign(skipped_from=pd.array(lo, dtype="Int64"), skipped_to=pd.array(hi, dtype="Int64"))


@dataclass
class Timeline:
    """The store time and phy offset of the records a chart draws, classified as the audit
    classifies them (every record past the truncation point or at risk, a sample of the kept
    ones), and how many records of the store are in each state."""

    records: pd.DataFrame            # phy_offset, store_time, state
    truncation_point: int
    flush_time: pd.Timestamp | None  # the checkpoint's commitlog flush time (physicMsgTimestamp)
    totals: dict[str, int]           # records per state, the whole store

    def counts(self) -> dict[str, int]:
        return dict(self.totals)


TIMELINE_STATES = ("kept", "at_risk", "lost", "discarded")


def timeline(spark: "SparkSession", store: Store, run: AuditRun, max_kept_points: int = 200_000) -> Timeline:
    """Classify every record, in Spark: ``lost`` (a lost message of the run), ``discarded`` (past
    the truncation point, damaged or not intact), ``at_risk`` (kept, but stored after the commitlog
    flush time while that is at risk, ``findings.flush_risk``: an OS crash may still take it) or
    ``kept``. Only the records drawn reach the driver: every one past the truncation point or at
    risk, and about ``max_kept_points`` of the kept ones (chosen by a hash of the phy offset)."""
    from pyspark.sql import functions as F

    end = run.truncation_point
    flush_ms = read_checkpoint(store.checkpoint_path).physic_msg_timestamp
    risky = dict(flush_risk(store).windows).get("commitlog") is not None
    t = messages(spark, store, run.broker_version == recovery.V5X, ["store_timestamp"])
    # 1. below the truncation point: kept or at risk, counted in Spark
    at_risk = (F.col("valid_prefix") & (F.col("store_timestamp") > flush_ms)) if risky else F.lit(False)
    t = t.withColumn("state", F.when(F.col("phy_offset") >= end, F.lit("past"))
                     .when(at_risk, F.lit("at_risk")).otherwise(F.lit("kept")))
    totals = {s: 0 for s in TIMELINE_STATES}
    totals.update({r["state"]: int(r["count"]) for r in t.groupBy("state").count().collect()})
    step = max(1, -(-totals["kept"] // max_kept_points))
    # 2. the records drawn; past the truncation point each is lost (a lost message) or discarded
    drawn = t.where((F.col("state") != "kept") | (F.pmod(F.xxhash64("phy_offset"), F.lit(step)) == 0))
    df = _to_pandas(drawn.select("phy_offset", "store_timestamp", "state")).sort_values("phy_offset")
    past = df["state"].to_numpy() == "past"
    lost = past & np.isin(df["phy_offset"].to_numpy(), run["lost_messages"]["phy_offset"].to_numpy())
    df["state"] = np.where(lost, "lost", np.where(past, "discarded", df["state"].to_numpy()))
    totals["lost"] = int(lost.sum())
    totals["discarded"] = int(past.sum()) - totals["lost"]
    totals.pop("past", None)
    records = pd.DataFrame({"phy_offset": df["phy_offset"].to_numpy(),
                            "store_time": pd.to_datetime(df["store_timestamp"].to_numpy(), unit="ms", utc=True),
                            "state": df["state"].to_numpy()})
    flush = pd.Timestamp(flush_ms, unit="ms", tz="UTC") if flush_ms else None
    return Timeline(records, end, flush, totals)


# -- charts ---------------------------------------------------------------------------------------------

_COLOURS = {"kept": "#9e9e9e", "at_risk": "#f28e2b", "lost": "#d62728", "discarded": "#7b3294",
            "redelivered": "#4e79a7", "duplicate_phy": "#59a14f", "duplicate_phy_on_disk": "#8cd17d",
            "redispatched": "#b07aa1", "replaced": "#edc948"}


def _new_figure(width: float, height: float) -> "Figure":
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), layout="constrained")


def plot_per_queue(counts: pd.DataFrame, title: str, stacked: bool = True) -> "Figure":
    """Horizontal bars, one row per queue, one colour per column of ``counts``."""
    rows = counts[(counts != 0).any(axis=1)] if len(counts) else counts
    fig = _new_figure(10, max(3.0, 0.28 * len(rows) + 1.5))
    ax = fig.add_subplot()
    ax.set_title(title)
    if rows.empty:
        ax.text(0.5, 0.5, "nothing to show: no queue is affected", ha="center", va="center",
                transform=ax.transAxes)
        ax.set_axis_off()
        return fig
    y = np.arange(len(rows))
    left = np.zeros(len(rows))
    height = 0.8 if stacked else 0.8 / len(rows.columns)
    for i, col in enumerate(rows.columns):
        vals = rows[col].to_numpy()
        pos = y if stacked else y - 0.4 + height * (i + 0.5)
        ax.barh(pos, vals, height=height, left=left if stacked else None, label=col,
                color=_COLOURS.get(col))
        if stacked:
            left = left + vals
    ax.set_yticks(y, rows.index)
    ax.invert_yaxis()
    ax.set_xlabel("messages")
    ax.legend(loc="best")
    return fig


def plot_timeline(tl: Timeline, title: str, max_kept_points: int = 200_000) -> "Figure":
    """Store time (x) against phy offset (y): the truncation point as a horizontal line, the
    checkpoint's commitlog flush time as a vertical one; left the whole store, right from the flush
    time on. Kept records are thinned to ``max_kept_points`` (every other state is drawn whole;
    ``timeline`` already thins them)."""
    from matplotlib.ticker import StrMethodFormatter

    fig = _new_figure(14, 6)
    fig.suptitle(title)
    axes = fig.subplots(1, 2)
    df = tl.records
    kept = df[df["state"] == "kept"]
    if len(kept) > max_kept_points:
        kept = kept.iloc[:: -(-len(kept) // max_kept_points)]
    zoom_from = tl.flush_time if tl.flush_time is not None else (df["store_time"].min() if len(df) else None)
    for ax, zoom in zip(axes, (False, True)):
        for state in TIMELINE_STATES:
            pts = kept if state == "kept" else df[df["state"] == state]
            if zoom and zoom_from is not None:
                pts = pts[pts["store_time"] >= zoom_from - pd.Timedelta(seconds=1)]
            few = state == "discarded"         # usually a record or two: drawn large enough to see
            ax.scatter(pts["store_time"], pts["phy_offset"], s=30 if few else 3, marker="x" if few else "o",
                       color=_COLOURS[state], rasterized=True, label=f"{state} ({tl.totals[state]})")
        ax.axhline(tl.truncation_point, color="black", linestyle="--", linewidth=1,
                   label=f"truncation point (phy {tl.truncation_point})")
        if tl.flush_time is not None:
            shown = tl.flush_time.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]       # milliseconds
            ax.axvline(tl.flush_time, color="#1f77b4", linestyle=":", linewidth=1.5,
                       label=f"checkpoint commitlog flush {shown} UTC")
        ax.set_xlabel("store time (UTC)")
        ax.set_ylabel("phy offset")
        ax.yaxis.set_major_formatter(StrMethodFormatter("{x:,.0f}"))
        ax.set_title("from the checkpoint flush time on" if zoom else "whole commitlog")
        ax.tick_params(axis="x", labelrotation=30)
    legend = axes[0].legend(loc="upper left", fontsize="small")
    for handle in legend.legend_handles:
        if hasattr(handle, "set_sizes"):        # the scatter marks, one readable size
            handle.set_sizes([30])
    return fig


def lost_summary(run: AuditRun, tl: "Timeline", beyond: pd.DataFrame, skipping: pd.DataFrame,
                 counts: pd.DataFrame) -> dict:
    """The numbers the lost-offsets notebook shows and plots (``write_summary``; the notebook adds
    ``plots``)."""
    lost, fw, co = run["lost_messages"], run["flush_window"], consumer_offsets(run)
    return {
        "run_id": run.run_id, "store_id": run.run["store_id"],
        "truncation_point": run.truncation_point,
        "flush_time": None if tl.flush_time is None else tl.flush_time.isoformat(),
        "lost_messages": len(lost),
        "lost_by_reason": {k: int(v) for k, v in lost.groupby("reason").size().items()},
        "at_risk": at_risk_count(run),
        "at_risk_by_window": {k: int(v) for k, v in fw.groupby("window")["records"].sum().items()},
        "consumers_beyond_max": len(beyond), "skipping_consumers": len(skipping),
        "skipped_messages": int(co["skipped"].sum()) if len(co) else 0,
        "timeline": tl.counts(), "per_queue": counts.to_dict(orient="index"),
    }


def save_png(fig: "Figure", out_dir: str, name: str) -> str:
    """Write ``fig`` to ``out_dir/name`` (Agg canvas, whatever the backend) and return the path."""
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, name)
    fig.savefig(path, dpi=100)
    return path


def _json_scalar(value: object) -> object:
    if isinstance(value, np.generic):      # numpy ints and bools from pandas
        return value.item()
    raise TypeError(f"not JSON serializable: {value!r}")


def write_summary(out_dir: str, notebook: str, summary: dict) -> str:
    """Merge ``summary`` under ``notebook`` into ``out_dir/summary.json`` (the numbers a notebook
    printed and plotted, for a test or a scheduler to read back)."""
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, "summary.json")
    data = {}
    if os.path.exists(path):
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    data[notebook] = summary
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(data, fh, indent=2, sort_keys=True, default=_json_scalar)
    os.replace(tmp, path)
    return path
