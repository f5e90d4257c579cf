"""What ``notebooks/lost_offsets.ipynb`` computes: the messages the broker's recovery loses, the
consumer groups that never receive some of them, the records at risk under ASYNC_FLUSH, and the
commitlog's records classified for the timeline chart (in Spark, ``jobs._spark.storequery``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from jobs.auditrun import AuditRun, by_queue, consumer_offsets, per_queue
from jobs._spark.storequery import messages, to_pandas
from store_reader.broker import versions
from store_reader.audit.plan import flush_risk
from store_reader.formats.checkpoint import read_checkpoint
from store_reader.broker.dispatch import dispatchable
from store_reader.store import Store

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

TIMELINE_STATES = ("kept", "at_risk", "lost", "discarded")


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
    return per_queue(by_queue(lost, "n", "lost"), by_queue(fw[fw["window"] == "commitlog"], "records", "at_risk"))


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
    lost = lost[dispatchable(lost["sys_flag"].to_numpy())] if len(lost) else lost
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


def timeline(spark: "SparkSession", store: Store, run: AuditRun, max_kept_points: int = 200_000) -> Timeline:
    """Classify every record, in Spark: ``lost`` (a lost message of the run), ``discarded`` (past
    the truncation point, damaged or not intact), ``at_risk`` (kept, but stored after the commitlog
    flush time while that is at risk, ``plan.flush_risk``: an OS crash may still take it) or
    ``kept``. Only the records drawn reach the driver: every one past the truncation point or at
    risk, and about ``max_kept_points`` of the kept ones (chosen by a hash of the phy offset)."""
    from pyspark.sql import functions as F

    end = run.truncation_point
    flush_ms = read_checkpoint(store.checkpoint_path).physic_msg_timestamp
    risky = dict(flush_risk(store).windows).get("commitlog") is not None
    t = messages(spark, store, versions.is_5x(run.broker_version), ["store_timestamp"])
    # 1. below the truncation point: kept or at risk, counted in Spark
    at_risk = (F.col("valid_prefix") & (F.col("store_timestamp") > flush_ms)) if risky else F.lit(False)
    t = t.withColumn("state", F.when(F.col("phy_offset") >= end, F.lit("past"))
                     .when(at_risk, F.lit("at_risk")).otherwise(F.lit("kept")))
    totals = {s: 0 for s in TIMELINE_STATES}
    totals.update({r["state"]: int(r["count"]) for r in t.groupBy("state").count().collect()})
    step = max(1, -(-totals["kept"] // max_kept_points))
    # 2. the records drawn; past the truncation point each is lost (a lost message) or discarded
    drawn = t.where((F.col("state") != "kept") | (F.pmod(F.xxhash64("phy_offset"), F.lit(step)) == 0))
    df = to_pandas(drawn.select("phy_offset", "store_timestamp", "state")).sort_values("phy_offset")
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


def lost_summary(run: AuditRun, tl: Timeline, beyond: pd.DataFrame, skipping: pd.DataFrame,
                 counts: pd.DataFrame) -> dict:
    """The numbers the lost-offsets notebook shows and plots (``charts.write_summary``; the notebook
    adds ``plots``)."""
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
