"""What ``notebooks/timer_schedule.ipynb`` computes: the 5.x timer store's pending deliveries by
time, and what the broker's restart on this store does to each of them (delivered, lost to the
commitlog's cut, delivered twice); the units are read through Spark (``rocketmq`` table
``timer_log``), the verdicts are ``store_reader.audit.timer.predict_timer``'s.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from jobs.auditrun import AuditRun
from jobs._spark.storequery import read_store, to_pandas
from store_reader.broker import prediction as broker_prediction
from store_reader.audit.timer import FATE_COLOURS, FATES, TimerPrediction, predict_timer, timer_queue_range
from store_reader.store import Store

if TYPE_CHECKING:
    from matplotlib.figure import Figure
    from pyspark.sql import SparkSession


def prediction(store: Store, run: AuditRun, pred: broker_prediction.Prediction) -> TimerPrediction:
    """The timer store through the broker's restart, at the run's truncation point."""
    tp = predict_timer(store, run.truncation_point, timer_queue_range(pred))
    if tp is None:
        raise ValueError(f"{store.root} has no timer store (timerWheelEnable off, or no timerlog)")
    return tp


def units(spark: SparkSession, store: Store, tp: TimerPrediction) -> pd.DataFrame:
    """Every timer log unit (Spark, table ``timer_log``) with its deliver time and its fate."""
    df = to_pandas(read_store(spark, store, "timer_log",
                              ["pos", "file", "magic", "delayed_time_ms", "offset_py", "size_py"]))
    df = df.sort_values("pos", ignore_index=True)
    assert np.array_equal(df["pos"].to_numpy(), tp.scan.pos), "the store changed while read"
    df["deliver_time"] = pd.to_datetime(df["delayed_time_ms"], unit="ms", utc=True)
    df["pending"] = tp.pending()
    df["fate"] = pd.Categorical(tp.fates(), categories=FATES)
    return df


def schedule(df: pd.DataFrame, bucket: str = "1min") -> pd.DataFrame:
    """Pending units per deliver-time bucket and fate (columns in ``FATES`` order)."""
    pending = df[df["pending"]]
    if pending.empty:
        return pd.DataFrame(columns=list(FATES))
    return (pending.groupby([pd.Grouper(key="deliver_time", freq=bucket), "fate"], observed=False)
            .size().unstack("fate").reindex(columns=list(FATES), fill_value=0).fillna(0).astype(int))


def plot_schedule(counts: pd.DataFrame, title: str) -> Figure:
    """Stacked bars: pending deliveries per time bucket, coloured by what the restart does."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11, 4), layout="constrained")
    ax = fig.add_subplot()
    ax.set_title(title)
    if counts.empty:
        ax.text(0.5, 0.5, "nothing pending", ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()
        return fig
    labels = [t.strftime("%m-%d %H:%M") for t in counts.index]
    bottom = np.zeros(len(counts))
    for fate in FATES:
        vals = counts[fate].to_numpy()
        if vals.any():
            ax.bar(np.arange(len(counts)), vals, bottom=bottom, label=fate, color=FATE_COLOURS[fate])
            bottom += vals
    step = max(1, len(labels) // 12)
    ax.set_xticks(np.arange(len(labels))[::step], labels[::step], rotation=30, ha="right")
    ax.set_ylabel("timer messages")
    ax.set_xlabel("deliver time (UTC)")
    ax.legend(loc="best")
    return fig


def summary(df: pd.DataFrame, tp: TimerPrediction) -> dict:
    """The numbers the notebook prints, for ``summary.json``."""
    pending = df[df["pending"]]
    return {"units": int(len(df)), "pending": int(len(pending)),
            "by_fate": {f: int((pending["fate"] == f).sum()) for f in FATES},
            "resume_queue_offset": tp.recover.curr_queue_offset,
            "enqueued_again": tp.recover.enqueued_again, "never_enqueued": tp.recover.never_enqueued}
