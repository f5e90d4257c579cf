"""The consistency audit on Spark: what is inconsistent in a store, and what a broker restart would
lose, duplicate or rewind (``jobs.audit`` and the audit inside ``jobs.recover``).

The checks are Spark-free (``store_reader.audit``: ``plan`` says what every task needs, ``records``
is stage 1, ``compare`` stage 2 and the merge); this module runs them as ONE Spark job of two
stages and turns the findings into the audit tables' rows.
"""
from __future__ import annotations

import json
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from jobs.exchange import exchange
from store_reader import recovery
from store_reader.audit.compare import audit_partition, audit_tables, lost_table
from store_reader.audit.files import store_file_findings
from store_reader.audit.kinds import INDEX_KINDS, INFO_KINDS, QUEUE_KINDS
from store_reader.audit.plan import AuditPlan, FlushRisk, audit_plan, flush_risk
from store_reader.audit.records import driver_items, index_source_items, segment_items
from store_reader.commitlog import SegmentSummary
from store_reader.scanned import lost_columns_cover
from store_reader.store import Store


def run_audit_job(spark, plan: AuditPlan, scan: Sequence[SegmentSummary], driver_items: list,
                  records: dict[str, str] | None = None,
                  on_lost: Callable[[pa.Table], None] | None = None) -> list:
    """The audit's two stages: stage 1 (a task per segment and per index file part, then the
    driver's items) exchanged by key into stage 2 (``audit_partition``, a task per key); returns
    stage 2's results in key order. A segment whose kept ``records`` lack lost messages' columns
    it needs is read again. ``on_lost``: given the lost messages as soon as stage 1 is done."""
    sc = spark.sparkContext
    kept = records or {}
    files = [(s.path, s.segment, s.file_start + s.file_size > plan.end,
              kept.get(s.segment) if lost_columns_cover(s, plan.end) else None) for s in scan]
    disk_parts = [(i, lo, hi) for i, s in enumerate(plan.index_sources) if s.path is not None
                  for lo, hi in s.parts(plan.index_part_entries, plan.config.maxIndexNum)]
    # one task per segment, then one per index file part
    tasks = [("segment", f) for f in files] + [("index", p) for p in disk_parts]

    def stage1(task):
        kind, args = task
        return segment_items(*args[:3], plan, args[3]) if kind == "segment" \
            else index_source_items(args[0], plan, None, args[1], args[2])
    rdd = sc.parallelize(tasks, max(1, len(tasks))).flatMap(stage1)
    early = None if on_lost is None else \
        (lambda items: on_lost(lost_table(value for kind, value in items if kind == "lost")))
    return exchange(spark, plan.work_dir, rdd, driver_items, plan.partitions,
                    lambda key, items: audit_partition(key, items, plan), to_driver=plan.driver_key,
                    on_driver=early)


# -- segments ----------------------------------------------------------------------------------------------

def segment_rows(summaries: Sequence[SegmentSummary], pred: recovery.Prediction,
                 mtimes: dict[str, int], scanned: set[str], fingerprints: dict[str, str]) -> list[dict]:
    import datetime as dt

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


# -- all of it -------------------------------------------------------------------------------------------


@dataclass
class Findings:
    """The audit's tables (rows without the run keys) and the counts the run summary prints."""

    tables: dict[str, pa.Table] = field(default_factory=dict)
    scope: tuple[int, int] | None = None
    flush: FlushRisk | None = None

    def count(self, table: str, where=None) -> int:
        t = self.tables.get(table)
        if t is None or not t.num_rows:
            return 0
        return t.num_rows if where is None else int(pc.sum(where(t)).as_py() or 0)


def audit(spark, store: Store, pred: recovery.Prediction, summaries: Sequence[SegmentSummary],
          scan: Sequence[SegmentSummary] | None = None, records: dict[str, str] | None = None,
          work_dir: str | None = None, on_lost: Callable[[pa.Table], None] | None = None) -> Findings:
    """Every finding for ``store`` given the broker's predicted recovery. ``scan``: the segments
    whose records are read (default all; --since-last passes only the new ones). ``records``: where
    the run's scan kept each segment's records (``store_reader.scanned``; the others are read).
    ``work_dir``: the run's scan directory, where the stages exchange their tables
    (``jobs.exchange``; default: a temporary directory, which only local executors see).
    ``on_lost``: given the ``lost_messages`` table as soon as the audit has it (while its second
    stage runs), e.g. to start writing it."""
    scan = list(summaries if scan is None else scan)
    out = Findings()
    if len(scan) < len(summaries):       # --since-last: records read only in the new segments
        last = summaries[-1].file_start + summaries[-1].file_size if summaries else 0
        out.scope = (scan[0].file_start, last) if scan else (last, last)
    out.tables["store_findings"] = store_file_findings(store, pred.broker_version == recovery.V5X, summaries, pred)
    out.flush = flush_risk(store)
    if not pred.load_result:
        return out
    plan = audit_plan(spark.sparkContext.defaultParallelism, store, pred, summaries, scan, out.scope, work_dir)
    out.tables.update(audit_tables(store, pred, plan, run_audit_job(spark, plan, scan, driver_items(plan, pred),
                                                                    records, on_lost)))
    return out


def passes_json(passes: Sequence[tuple[str, float, str]]) -> str:
    return json.dumps({name: round(secs, 3) for name, secs, _ in passes})



# -- the run: rows with their keys, the summary, the exit status -----------------------------------------


def alerting_counts(f: Findings) -> dict[str, int]:
    """What makes an audit exit 1: counts per table of findings that need an operator."""
    q = f.tables.get("queue_findings", pa.table({}))
    return {
        "queue_findings": f.count("queue_findings", lambda t: pc.invert(pc.is_in(t["kind"], pa.array(sorted(INFO_KINDS)))))
        if q.num_rows else 0,
        "index_findings": f.count("index_findings"),
        "lost_messages": f.count("lost_messages"),
        "consumer_offsets_at_risk": f.count("consumer_offset_findings", lambda t: t["at_risk"]),
        "store_findings": f.count("store_findings", lambda t: pc.equal(t["severity"], "anomaly")),
    }


def bad_segments(summaries: Sequence[SegmentSummary]) -> list[SegmentSummary]:
    """Segments whose valid data ends at a corrupt record or a torn tail."""
    return [s for s in summaries if s.end_reason in ("corrupt", "torn_tail")]


def run_status(pred: recovery.Prediction, summaries: Sequence[SegmentSummary], f: Findings) -> str:
    """``runs.status``: refused (the broker would not load the store), findings, or clean."""
    if not pred.load_result:
        return "refused"
    return "findings" if any(alerting_counts(f).values()) or bad_segments(summaries) else "clean"


def run_row(job: str, mode: str, status: str, pred: recovery.Prediction, summaries, scanned, f: Findings,
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
    from jobs.deltasink import audit_rows
    from schemas import audit as A

    return audit_rows(A.TABLES[name], t if t is not None and t.num_rows else [], run_id, store_id, audited_at)


def run_tables(f: Findings, run: dict, segments: list[dict], run_id: str, store_id: str,
               audited_at) -> dict[str, pa.Table]:
    """Every audit table's rows for this run (``schemas.audit``), run keys filled in."""
    from jobs.deltasink import audit_rows
    from schemas import audit as A

    out = {"runs": audit_rows(A.RUNS, [run], run_id, store_id, audited_at),
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
    then waits for them instead of writing them, and still commits ``runs`` last."""

    def __init__(self, audit_path: str, run_id: str, store_id: str, audited_at, spark=None) -> None:
        self.audit_path, self.run_id, self.store_id, self.audited_at = audit_path, run_id, store_id, audited_at
        self.spark = spark
        self.futures: dict[str, Future] = {}

    def lost(self, table: pa.Table) -> None:
        from jobs.deltasink import table_uri, write_run_rows

        rows = table_rows("lost_messages", table, self.run_id, self.store_id, self.audited_at)
        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="delta-early")
        self.futures["lost_messages"] = pool.submit(
            write_run_rows, table_uri(self.audit_path, "lost_messages"), rows, self.run_id, self.spark)
        pool.shutdown(wait=False)          # its one thread ends with the write


def write_audit(audit_path: str, tables: dict[str, pa.Table], run_id: str, spark=None,
                early: EarlyWrites | None = None) -> list[str]:
    """Each table to ``<audit_path>/<table>`` (Delta), replacing the rows of ``run_id``; ``runs``
    last, so a run row exists only once all its findings are committed. ``early``: the tables
    already being written."""
    from jobs.deltasink import write_tables

    return write_tables(audit_path, tables, run_id, spark, written=early.futures if early else None)


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
    if f.flush is not None and f.flush.windows:
        n = f.count("flush_window", lambda t: pc.if_else(pc.equal(t["window"], "commitlog"), t["records"], 0))
        print(f"    flush   {n} records stored after the checkpoint's commitlog flush time: "
              f"{f.flush.text}", file=out)
    elif f.flush is not None:
        print(f"    flush   {f.flush.text}", file=out)
    sf = f.tables.get("store_findings")
    for r in sf.to_pylist() if sf is not None else ():
        where = r["file"] + (f" @ byte {r['position']}" if r["position"] is not None else "")
        print(f"    file    {r['kind']} {where}: {r['detail']}", file=out)
