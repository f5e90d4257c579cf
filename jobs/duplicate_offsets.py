"""What ``notebooks/duplicate_offsets.ipynb`` computes: the ways a consumer gets a message, or a
queue offset, twice after the broker's recovery, with the records involved (``jobs._spark.storequery``).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from jobs.auditrun import AuditRun, by_queue, consumer_offsets, per_queue
from jobs._spark.storequery import SHOWN_RECORD_COLUMNS, messages, queue_entries, records_at, \
    repeated_index_entries, to_pandas
from store_reader.formats import recordformat as rf
from store_reader.broker import prediction, versions
from store_reader.audit.kinds import QUEUE_KINDS
from store_reader.broker.dispatch import DISPATCHABLE_TRANSACTION_TYPES
from store_reader.store import Store

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

DUPLICATE_QUEUE_KINDS = ("duplicate_phy", "duplicate_phy_on_disk", "redispatched", "replaced")
# Queue kinds read from the broker's recovered queues; the others from the CQ files on disk.
BROKER_VIEW_KINDS = frozenset({"duplicate_phy", "redispatched", "replaced"})


def duplicate_queue_findings(run: AuditRun) -> pd.DataFrame:
    """Queue findings of the kinds that deliver a message twice, with what each kind means."""
    q = run["queue_findings"]
    q = q[q["kind"].isin(DUPLICATE_QUEUE_KINDS)].copy()
    q["meaning"] = q["kind"].map(QUEUE_KINDS)
    return q.reset_index(drop=True)


def queue_finding_messages(spark: "SparkSession", store: Store, pred: prediction.Prediction,
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
    rec = records_at(spark, store, versions.is_5x(pred.broker_version),
                     entries["phy_offset"])[["phy_offset", *SHOWN_RECORD_COLUMNS]]
    return entries.merge(rec, on="phy_offset", how="left")


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
    broker_5x = versions.is_5x(run.broker_version)
    groups = redelivered[["group", "topic", "queue_id", "next_begin_offset", "committed_offset"]]
    # 1. the rewound queues' records at those queue offsets (only dispatchable ones are in a CQ)
    rewound = F.lit(False)
    for g in groups.itertuples(index=False):
        rewound = rewound | ((F.col("topic") == g.topic) & (F.col("queue_id") == int(g.queue_id))
                             & (F.col("queue_offset") >= int(g.next_begin_offset))
                             & (F.col("queue_offset") < int(g.committed_offset)))
    dispatchable = F.col("sys_flag").bitwiseAND(rf.TRANSACTION_MASK).isin(*DISPATCHABLE_TRANSACTION_TYPES)
    df = messages(spark, store, broker_5x, ["topic", "queue_id", "queue_offset", "sys_flag"]).where(
        F.col("topic").isin(sorted(set(groups["topic"]))) & dispatchable & rewound)
    df = to_pandas(df).sort_values("phy_offset", kind="stable")
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


def duplicate_index_messages(spark: "SparkSession", store: Store, pred: prediction.Prediction,
                             findings: pd.DataFrame) -> pd.DataFrame:
    """The index entries behind ``duplicate_entry`` findings (a (key hash, phy offset) indexed
    again, so ``queryMessage`` by that key returns the message twice) with their records."""
    cols = ["index", "file", "key_hash", "phy_offset", "times_indexed"]
    rows = []
    for lens, group in findings.groupby("index"):
        again = repeated_index_entries(spark, store, pred, lens)
        for r in group.itertuples(index=False):
            sel = again[(again["phy_offset"] >= r.phy_from) & (again["phy_offset"] < r.phy_to)]
            sel = sel[sel["file"].isna()] if r.file is None or pd.isna(r.file) else sel[sel["file"] == r.file]
            rows.append(sel.assign(index=lens)[cols])
    if not rows:
        return pd.DataFrame(columns=cols)
    dup = pd.concat(rows, ignore_index=True).drop_duplicates()
    rec = records_at(spark, store, versions.is_5x(pred.broker_version), dup["phy_offset"])
    rec = rec[["phy_offset", "topic", "queue_id", "queue_offset", *SHOWN_RECORD_COLUMNS]]
    return dup.merge(rec, on="phy_offset", how="left")


def duplicates_per_queue(dup_queue: pd.DataFrame, redelivered_msgs: pd.DataFrame) -> pd.DataFrame:
    """Per queue: entries of each duplicate kind and the messages rewound groups are served again as
    the same message (``served_again``, summed over the groups). A rewound offset whose record is
    lost is no duplicate: the next message sent to the queue takes it."""
    kinds = [by_queue(dup_queue[dup_queue["kind"] == k], "count", k) for k in DUPLICATE_QUEUE_KINDS]
    again = redelivered_msgs[redelivered_msgs["served_again"].astype(bool)].assign(n=1)
    return per_queue(*kinds, by_queue(again, "n", "served_again"))


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
    """The numbers the duplicates notebook shows and plots (``charts.write_summary``; the notebook
    adds ``plots``: each PNG's path and title)."""
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
