"""The audit tables' rows of a run (``schemas.audit``): its ``runs`` row, a ``segments`` row per
commitlog file and the findings (``jobs.findings``), keyed by the run; written to Delta
(``jobs._spark.deltasink``) with ``runs`` last, ``lost_messages`` already while the audit goes on
(``EarlyWrites``). Shared by ``jobs.audit`` and the audit inside ``jobs.recover``.
"""
from __future__ import annotations

import datetime as dt
import json
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Sequence

import pyarrow as pa
import pyarrow.compute as pc

from jobs.findings import Findings, alerting_counts, run_status
from store_reader.broker import prediction
from store_reader.formats.commitlog import SegmentSummary
from store_reader.store import Store


def segment_rows(summaries: Sequence[SegmentSummary], pred: prediction.Prediction,
                 mtimes: dict[str, int], scanned: set[str], fingerprints: dict[str, str]) -> list[dict]:
    kept = {f.name: f.wrote for f in pred.commitlog_files} if pred.load_result else {}   # refused: keeps none

    def ts(ms):
        return None if ms is None else dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc)

    out = []
    for s in summaries:
        row = s.as_row()
        row.update(first_store_time=ts(s.first_store_timestamp), last_store_time=ts(s.last_store_timestamp),
                   end_phy_offset=s.end_phy_offset, broker_keeps_bytes=kept.get(s.segment),
                   file_mtime_ns=mtimes.get(s.segment), fingerprint=fingerprints.get(s.segment),
                   scanned=s.segment in scanned)
        out.append(row)
    return out


def summary_from_row(row: dict) -> SegmentSummary:
    """A segment summary carried over from an earlier run's ``segments`` row (--since-last)."""
    from schemas import SEGMENT

    return SegmentSummary(**{k: row[k] for k in SEGMENT.names if k != "trailing_bytes"})


def passes_json(passes: Sequence[tuple[str, float, str]]) -> str:
    return json.dumps({name: round(secs, 3) for name, secs, _ in passes})



# -- the run: rows with their keys, the summary, the exit status -----------------------------------------


def run_row(job: str, mode: str, status: str, pred: prediction.Prediction, summaries, scanned, f: Findings,
            counts: dict[str, int], started: float, passes, repaired: str | None) -> dict:
    fw = f.tables.get("flush_window")
    flush = 0 if fw is None or not fw.num_rows else \
        pc.sum(fw.filter(pc.equal(fw["window"], "commitlog"))["records"]).as_py() or 0
    return {"job": job, "mode": mode, "status": status, "broker_version": pred.broker_version,
            "load_result": pred.load_result,
            "recovery_path": pred.recovery_path if pred.load_result else None,
            "start_file": pred.start_file if pred.load_result else None, "truncation_point": pred.max_phy_offset if pred.load_result else None,
            "min_phy_offset": pred.min_phy_offset if pred.load_result else None,
            "segments_total": len(summaries), "segments_scanned": len(scanned),
            "bytes_scanned": sum(s.file_size for s in scanned),
            "scan_phy_from": f.scope[0] if f.scope else None,
            "queue_findings": counts["queue_findings"], "index_findings": counts["index_findings"],
            "consumer_offsets_at_risk": counts["consumer_offsets_at_risk"],
            "lost_messages": counts["lost_messages"], "store_findings": counts["store_findings"],
            "flush_window_records": flush, "flush_risk": f.flush.reason if f.flush else None,
            "repaired_store": repaired, "duration_ms": int((time.monotonic() - started) * 1000),
            "passes": passes_json(passes),
            "detail": "; ".join(pred.load_problems) or None}


def table_rows(name: str, t: pa.Table | None, run_id: str, store_id: str, audited_at) -> pa.Table:
    """A findings table's rows for this run (``schemas.audit``), run keys filled in."""
    from jobs._spark.deltasink import audit_rows
    from schemas import audit as A

    return audit_rows(A.TABLES[name], t if t is not None and t.num_rows else [], run_id, store_id, audited_at)


def run_tables(job: str, mode: str, store: Store, pred: prediction.Prediction,
               summaries: Sequence[SegmentSummary], scanned: Sequence[SegmentSummary], f: Findings,
               started: float, passes, repaired: str | None, run_id: str, store_id: str,
               audited_at) -> dict[str, pa.Table]:
    """Every audit table's rows for this run (``schemas.audit``), run keys filled in: its ``runs``
    row, a ``segments`` row per commitlog file (``scanned``: the summaries this run scanned, each
    file's written fingerprint) and every findings table."""
    from jobs._spark.deltasink import audit_rows
    from schemas import audit as A
    from store_reader.audit import state

    row = run_row(job, mode, run_status(pred, summaries, f), pred, summaries, scanned, f, alerting_counts(f),
                  started, passes, repaired)
    row["store_modes"] = store.inventory.modes_text()
    written = state.written_fingerprints(store, {s.segment: s.valid_bytes for s in summaries})
    segments = segment_rows(summaries, pred, state.commitlog_mtimes(store), {s.segment for s in scanned}, written)
    out = {"runs": audit_rows(A.RUNS, [row], run_id, store_id, audited_at),
           "segments": audit_rows(A.SEGMENTS, segments, run_id, store_id, audited_at)}
    # every table each run, empty ones included: a re-run's rows replace its earlier rows in all of
    # them (salvaged_messages has rows only from recover --salvage, which fills it in afterwards)
    for name in ("queue_findings", "index_findings", "consumer_offset_findings", "lost_messages",
                 "flush_window", "store_findings", "salvaged_messages"):
        out[name] = table_rows(name, f.tables.get(name), run_id, store_id, audited_at)
    return out


class EarlyWrites:
    """Audit tables committed while the run goes on: ``lost_messages``, the largest (the lost
    bodies), as soon as the audit's first stage has it (``audit(on_lost=...)``). ``write_audit``
    then waits for them instead of writing them, and still commits ``runs`` last. delta-rs starts
    up (``deltasink.warm_up``) while the run goes on, not at the commit."""

    def __init__(self, audit_path: str, run_id: str, store_id: str, audited_at, spark=None) -> None:
        from jobs._spark.deltasink import warm_up

        self.audit_path, self.run_id, self.store_id, self.audited_at = audit_path, run_id, store_id, audited_at
        self.spark = spark
        self.futures: dict[str, Future] = {}
        self.warming = threading.Thread(target=warm_up, args=(spark,), name="delta-warm-up", daemon=True)
        self.warming.start()

    def lost(self, parts: list) -> Future:
        """Start writing the lost messages: ``parts``, the tables stage 1's tasks wrote away
        (``jobs._spark.exchange.Stored``). With Spark's Delta writer, Spark tasks read them and
        write the rows, bodies included: the driver never holds a body. The delta-rs fallback
        commits from the driver (its rows are collected there, as every table's)."""
        from jobs._spark.deltasink import has_delta, table_uri, write_run_rows
        from store_reader.audit.compare import lost_table

        uri = table_uri(self.audit_path, "lost_messages")
        keys = (self.run_id, self.store_id, self.audited_at)
        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="delta-early")
        if self.spark is not None and has_delta(self.spark):
            self.futures["lost_messages"] = pool.submit(_write_lost_by_tasks, self.spark, uri, parts, *keys)
        else:
            from jobs._spark.exchange import read_stored

            self.futures["lost_messages"] = pool.submit(
                lambda: write_run_rows(uri, table_rows("lost_messages", lost_table(map(read_stored, parts)), *keys),
                                       self.run_id, self.spark))
        pool.shutdown(wait=False)          # its one thread ends with the write
        return self.futures["lost_messages"]


def _write_lost_by_tasks(spark, uri: str, parts: list, run_id: str, store_id: str, audited_at) -> None:
    """The ``lost_messages`` rows of ``parts`` (stage 1's tables, each a segment's rows in
    commitlog order) written by Spark's Delta writer from Spark tasks, a task per part."""
    from jobs._spark.deltasink import audit_rows, spark_schema, write_run_frame, write_run_rows
    from jobs._spark.exchange import stored_frame
    from schemas import audit as A
    from store_reader.audit.compare import LOST_ORDER

    if not parts:               # no task to run: the run's old rows still go
        write_run_rows(uri, table_rows("lost_messages", None, run_id, store_id, audited_at), run_id, spark)
        return
    schema = spark_schema(A.LOST_MESSAGES.arrow())
    write_run_frame(spark, uri, lambda: stored_frame(
        spark, parts, schema, lambda t: audit_rows(A.LOST_MESSAGES, t.select(LOST_ORDER), run_id, store_id,
                                                   audited_at)), schema, run_id)


def write_audit(audit_path: str, tables: dict[str, pa.Table], run_id: str, spark=None,
                early: EarlyWrites | None = None) -> list[str]:
    """Each table to ``<audit_path>/<table>`` (Delta), replacing the rows of ``run_id``; ``runs``
    last, so a run row exists only once all its findings are committed. ``early``: the tables
    already being written."""
    from jobs._spark.deltasink import write_tables

    if early is not None:
        early.warming.join()
    return write_tables(audit_path, tables, run_id, spark, written=early.futures if early else None)
