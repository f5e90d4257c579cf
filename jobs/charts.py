"""The investigation notebooks' charts and the files they write (PNGs, ``summary.json``).

The charts are ``matplotlib.figure.Figure`` objects that never touch pyplot's global state, so they
render the same under any backend (the notebooks select ``Agg``).
"""
from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from jobs.lost_offsets import TIMELINE_STATES, Timeline

if TYPE_CHECKING:
    from matplotlib.figure import Figure

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
