"""The consistency audit on Spark: what is inconsistent in a store, and what a broker restart would
lose, duplicate or rewind (``jobs.audit`` and the audit inside ``jobs.recover``).

The checks are Spark-free (``store_reader.audit``: ``plan`` says what every task needs, ``records``
is stage 1, ``compare`` stage 2 and the merge); this module runs them as ONE Spark job of two
stages (the audit tables' rows: ``jobs.audittables``).
"""
from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Callable, Iterable, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from jobs._spark.exchange import exchange
from jobs.rebuild import AuditedQueues
from store_reader.broker import prediction, versions
from store_reader.audit import offsets
from store_reader.audit.compare import audit_partition, audit_tables
from store_reader.audit.files import store_file_findings
from store_reader.audit.kinds import INDEX_KINDS, INFO_KINDS, QUEUE_KINDS
from store_reader.audit.plan import AuditPlan, FlushRisk, audit_plan, flush_risk
from store_reader.audit.records import driver_items, index_source_items, segment_items
from store_reader.formats.commitlog import SegmentSummary
from store_reader.repair.scanned import lost_columns_cover
from store_reader.store import Store


def run_audit_job(spark, plan: AuditPlan, scan: Sequence[SegmentSummary], driver_items: Iterable,
                  records: dict[str, str] | None = None,
                  on_lost: Callable[[list], Future] | None = None) -> list:
    """The audit's two stages: stage 1 (a task per segment and per index file part, then the
    driver's items) exchanged by key into stage 2 (``audit_partition``, a task per key); returns
    stage 2's results in key order. A segment whose kept ``records`` lack lost messages' columns
    it needs is read again. ``on_lost``: given the lost messages' parts as soon as stage 1 is done,
    as stage 1 wrote them away (``jobs._spark.exchange.Stored``), to write them (the future it
    returns is waited for); the driver's rows then lack the ``body``."""
    sc = spark.sparkContext
    kept = records or {}
    files = [(s.path, s.segment, s.file_start + s.file_size > plan.end,
              kept.get(s.segment) if lost_columns_cover(s, plan.end) else None) for s in scan]
    index_parts = [(i, lo, hi) for i, s in enumerate(plan.index_sources)
                   for lo, hi in s.parts(plan.index_part_entries, plan.config.maxIndexNum)]
    # one task per segment, then one per index file part
    tasks = [("segment", f) for f in files] + [("index", p) for p in index_parts]

    def stage1(task):
        kind, args = task
        return segment_items(*args[:3], plan, args[3]) if kind == "segment" \
            else index_source_items(args[0], plan, args[1], args[2])
    rdd = sc.parallelize(tasks, max(1, len(tasks))).flatMap(stage1)
    early = None if on_lost is None else \
        (lambda items: on_lost([value for kind, value in items if kind == "lost"]))
    results = exchange(spark, plan.work_dir, rdd, driver_items, plan.partitions,
                       lambda key, items: audit_partition(key, items, plan), to_driver=plan.driver_key,
                       on_driver=early)
    if on_lost is None:
        return results
    # the bodies went to the Delta table from the tasks: the driver keeps the rest of each row
    # (its tables are mapped from the exchange's files: a body column dropped is never read)
    return [(kind, value.drop_columns(["body"])) if kind == "lost" else (kind, value) for kind, value in results]


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


def audit(spark, store: Store, pred: prediction.Prediction, summaries: Sequence[SegmentSummary],
          scan: Sequence[SegmentSummary] | None = None, records: dict[str, str] | None = None,
          work_dir: str | None = None, on_lost: Callable[[list], Future] | None = None,
          queues: AuditedQueues | None = None) -> Findings:
    """Every finding for ``store`` given the broker's predicted recovery. ``scan``: the segments
    whose records are read (default all; --since-last passes only the new ones). ``records``: where
    the run's scan kept each segment's records (``store_reader.repair.scanned``; the others are read).
    ``work_dir``: the run's scan directory, where the stages exchange their tables
    (``jobs._spark.exchange``; default: a temporary directory, which only local executors see).
    ``on_lost``: given the ``lost_messages`` parts as soon as the audit has them (while its second
    stage runs), to start writing them (``jobs.audittables.EarlyWrites``); the table the driver
    keeps then has no ``body`` column. ``queues``: a recovery's consume queues, when its write
    offered them: the queue buckets write them as they compare them, and ``queues`` is given what
    they wrote as soon as the exchange is done."""
    scan = list(summaries if scan is None else scan)
    out = Findings()
    if len(scan) < len(summaries):       # --since-last: records read only in the new segments
        last = summaries[-1].file_start + summaries[-1].file_size if summaries else 0
        out.scope = (scan[0].file_start, last) if scan else (last, last)
    out.tables["store_findings"] = store_file_findings(store, versions.is_5x(pred.broker_version), summaries, pred)
    out.flush = flush_risk(store)
    if not pred.load_result:
        return out
    target = None if queues is None else queues.target(store, pred)
    plan = audit_plan(spark.sparkContext.defaultParallelism, store, pred, summaries, scan, out.scope, work_dir,
                      target)
    results = run_audit_job(spark, plan, scan, driver_items(plan, pred), records, on_lost)
    if target is not None:
        queues.deliver([w for kind, value in results if kind == "queues_written" for w in value], plan.buckets)
    out.tables.update(audit_tables(store, pred, plan, results))
    return out


def alerting_counts(f: Findings) -> dict[str, int]:
    """What makes an audit exit 1: counts per table of findings that need an operator."""
    q = f.tables.get("queue_findings", pa.table({}))
    return {
        "queue_findings": f.count("queue_findings", lambda t: pc.invert(pc.is_in(t["kind"], pa.array(sorted(INFO_KINDS)))))
        if q.num_rows else 0,
        "index_findings": f.count("index_findings"),
        "lost_messages": f.count("lost_messages"),
        "consumer_offsets_at_risk": sum(x.at_risk for x in offsets.offset_facts(f.tables.get("consumer_offset_findings"))),
        "store_findings": f.count("store_findings", lambda t: pc.equal(t["severity"], "anomaly")),
    }


def count_line(f: Findings) -> str:
    """The alerting counts in a few words (a pass line); the consumer offsets in the words of
    ``store_reader.audit.offsets``, not as a count of their own."""
    counts = alerting_counts(f)
    counts.pop("consumer_offsets_at_risk")
    facts = offsets.offset_facts(f.tables.get("consumer_offset_findings"))
    return ", ".join([*(f"{v} {k}" for k, v in counts.items()), f"consumer offsets: {offsets.short(facts)}"])


def bad_segments(summaries: Sequence[SegmentSummary]) -> list[SegmentSummary]:
    """Segments whose valid data ends at a corrupt record or a torn tail."""
    return [s for s in summaries if s.end_reason in ("corrupt", "torn_tail")]


def run_status(pred: prediction.Prediction, summaries: Sequence[SegmentSummary], f: Findings) -> str:
    """``runs.status``: refused (the broker would not load the store), findings, or clean."""
    if not pred.load_result:
        return "refused"
    return "findings" if any(alerting_counts(f).values()) or bad_segments(summaries) else "clean"


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
