"""Broker-exact recovery of a RocketMQ store into a new, repaired store.

    spark-submit jobs/recover.py --store DIR --out DIR [--broker-config FILE]
                                 [--broker-version 4.9|5.x|both] [--dry-run] [--overwrite]
                                 [--apply --backup DIR] [--audit-path URI]
                                 [--keep-consumer-offsets] [--commitlog-gone] [--salvage] [--json]
    python -m jobs.recover ...            (embedded local Spark, settings from spark-conf/local.conf)
    python -m jobs.recover --demo DIR     (a sample store with a simulated crash, made and recovered)
    python -m jobs.recover --store DIR --dry-run --broker-version both [--json]
                                          (what-if: the 4.9 and 5.x predictions side by side)

Passes (each a function the notebooks can call):
  1. discover the store, refuse a store a live broker holds (its ``lock``) or one without commitlog
     files (unless ``--commitlog-gone``); check every output target and lock the output
     (``claim_outputs``), before any work;
  2. scan segments in parallel, one Spark task per commitlog file -> scan summaries;
  3. decide on the driver what the broker would do (``store_reader.recovery.predict``);
  4. rebuild consume queues from every record below the cut: CQ files as parts packed into a bounded
     number of tasks (a huge queue is split by file, small queues share a task; a queue whose files
     do not join up into one sequential put is rebuilt whole);
  5. rebuild index files from the same records, one task per index file;
  6. audit: what is inconsistent and what the broker's own restart would lose or rewind
     (``jobs/findings.py``, the same findings ``jobs/audit.py`` reports), side by side with 4-5
     and 7 (both only read the input store and the prediction);
  7. write the repaired store into a temporary directory of this run's own (the commitlog copied
     and hashed for the manifest in one read; each committed consumer offset moved where the
     consumer's next pull on the rebuilt queues would move it, the originals in the manifest) and,
     once the audit succeeded too, check it against its manifest and rename it into place, all
     under the output's lock (``store_reader.publish``);
     ``--apply`` then moves the input store to ``--backup`` and the repaired store into its place;
  7b. with ``--salvage``, before the checkpoint and the manifest: the lost records a producer would
     send again re-appended after the truncation point and dispatched (``jobs.salvage.reappend``);
  8. with ``--audit-path``, the findings and this run (what it changed: ``runs.repaired_store``)
     to the Delta audit tables, keyed by the run id (a re-run replaces its rows).
A store the broker refuses to start on (a file of the wrong size, a stray entry in ``commitlog/``,
5.3.3's correctMinOffset throw) still gets a repaired store it starts on: the refusal is printed
(and a ``warning:`` line on stderr), the repaired store follows the broker's recovery of the store
without what it refuses (``recovery.Prediction``), the entries left out are listed.
Exit codes: 0 done, 2 could not recover (bad input, disk full, an output another run holds),
with one ``error:`` line on stderr.
"""
from __future__ import annotations

import argparse
import datetime as dt
import errno
import json
import logging
import os
import shutil
import sys
import threading
import time
import uuid
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import pyarrow as pa

from store_reader import open_store, recovery
from store_reader.checkpoint import lock_status
from store_reader.config import read_consumer_offsets
from store_reader.commitlog import SegmentSummary, summarize_segment
from store_reader.exceptions import StoreReaderError
from store_reader.fsutil import walk_files
from store_reader.consumequeue import CQ_STORE_UNIT_SIZE
from store_reader.indexfile import IndexHeader
from store_reader.recordformat import ScanOptions
from store_reader.salvage import Reappended
from store_reader.store import Store
from store_reader.storefs import StoreLocation
from store_reader import publish, repair
from jobs import audit as audit_job
from jobs import findings as fnd
from jobs import deltasink
from jobs import salvage as salvage_job
from jobs.deltasink import store_id_for

log = logging.getLogger("jobs.recover")


# -- pass 2: scan -----------------------------------------------------------------------------------

def scan_segments(spark, store: Store, opts: ScanOptions, paths: list[str] | None = None
                  ) -> list[SegmentSummary]:
    """One Spark task per commitlog file (all, or ``paths``); the summaries in file order."""
    paths = [f.path for f in store.commitlog_files] if paths is None else paths
    if not paths:
        return []
    rdd = spark.sparkContext.parallelize(paths, len(paths))
    return rdd.map(lambda p: summarize_segment(p, opts)).collect()


# -- passes 4-5: consume queues and index files -----------------------------------------------------

# Consume queue entries per rebuild task (a bucket of CQ files and small queues, ~60 bytes an entry
# in memory): bounds a task's memory and keeps the tasks few, however many queues there are.
ENTRIES_PER_REBUILD_TASK = 1_000_000


def _rebuild_scan_options(store: Store, broker_5x: bool) -> ScanOptions:
    # records below the cut passed the broker's checks already: headers only (no CRC)
    return ScanOptions(check_crc=False, compute_crc=False, broker_5x=broker_5x,
                       delay_levels_ms=tuple(store.config.delay_levels_ms))


def surviving_records(spark, store: Store, end: int, broker_5x: bool, buckets: int,
                      only: set[tuple[str, int]] | None = None):
    """RDD of the consume queue puts of every record below the truncation point ``end``
    (``repair.ENTRY_SCHEMA`` tables: dispatchable records and their LMQ copies), one Spark task per
    commitlog file, cut into rebuild parts and keyed by rebuild task:
    ``(bucket, ((topic, queue id, CQ file number), entries))``. With ``only``, whole queues
    (file number -1) of those queues alone.

    The puts travel as Arrow tables, a few per commitlog file and task, never as Spark rows."""
    files = [f.path for f in store.commitlog_files if f.start < end]
    opts, cfg = _rebuild_scan_options(store, broker_5x), store.config
    per_file = cfg.cq_file_size // CQ_STORE_UNIT_SIZE

    def scan(path: str):
        tables = list(repair.dispatch_entries(path, opts, end, cfg, broker_5x))
        if not tables:
            return
        cut_by = per_file if only is None else None
        for key, part in repair.queue_parts(pa.concat_tables(tables), cut_by):
            if only is None or key[:2] in only:
                yield repair.part_bucket(*key, buckets), (key, part)

    return spark.sparkContext.parallelize(files, max(1, len(files))).flatMap(scan)


@dataclass
class QueueRebuild:
    """What ``rebuild_consume_queues`` did: one row per queue (topic, queue_id, min/max offset,
    entries, last store time), the rebuild tasks, the parts they built, the queues that had to
    be rebuilt in one piece and the filler units written for queue offsets whose records are gone
    (topic, queue id, first offset, end offset, phy; ``repair.place_entries``)."""

    queues: pa.Table
    tasks: int
    parts: int
    rebuilt_whole: list[tuple[str, int]]
    fillers: list[tuple[str, int, int, int, int]]


def rebuild_consume_queues(spark, store: Store, end: int, broker_5x: bool, out_root: str,
                           expected_entries: int,
                           kept_queues: dict[tuple[str, int], tuple[int, int]] | None = None) -> QueueRebuild:
    """Write every queue's CQ files under ``out_root/consumequeue`` (LMQ copies included when
    ``enableMultiDispatch``) from the records below ``end``, each entry at its record's own
    queue offset (``repair.place_entries``). ``kept_queues``: (min, max) offset of each queue the
    broker keeps; where its max is past the rebuilt queue's (the last records are gone), the
    offsets up to it get filler units (``repair.extend_queue``).

    One task per bucket of parts, ``expected_entries / ENTRIES_PER_REBUILD_TASK`` buckets (at least
    one per core): a huge queue is split by CQ file, its files spread over the buckets, and many
    small queues are packed into few tasks. A queue whose files do not join up into the broker's
    sequential put (a gap, a repeat or a reordering across a file boundary,
    ``repair.irregular_queues``) is rebuilt again in one piece, so the bytes never depend on the
    split."""
    cfg = store.config
    buckets = max(spark.sparkContext.defaultParallelism, -(-expected_entries // ENTRIES_PER_REBUILD_TASK))
    queue_dirs = store.consume_queue_dir

    def build(items):
        parts: dict[tuple[str, int, int], list[pa.Table]] = {}
        for _, (key, table) in items:
            parts.setdefault(key, []).append(table)
        for key in sorted(parts):
            topic, qid, file_no = key
            yield repair.rebuild_queue_part(
                topic, qid, file_no, pa.concat_tables(parts.pop(key)), cfg.cq_file_size,
                os.path.join(out_root, "consumequeue", topic, str(qid)), queue_dirs / topic / str(qid),
                cfg.mappedFileSizeCommitLog)

    def run(only: set[tuple[str, int]] | None) -> list[repair.QueuePart]:
        rdd = surviving_records(spark, store, end, broker_5x, buckets, only)
        return rdd.partitionBy(buckets, lambda bucket: bucket).mapPartitions(build).collect()

    parts = run(None)
    irregular = repair.irregular_queues(parts)
    if irregular:
        log.info("rebuild consume queues: %d queue(s) do not split by CQ file, rebuilt whole: %s",
                 len(irregular), sorted(irregular)[:10])
        for topic, qid in irregular:
            shutil.rmtree(os.path.join(out_root, "consumequeue", topic, str(qid)), ignore_errors=True)
        parts = [p for p in parts if (p.topic, p.queue_id) not in irregular] + run(irregular)
    table = repair.queue_table(parts)
    rebuilt = {(t, q): (lo, hi) for t, q, lo, hi in zip(*(table[c].to_pylist() for c in (
        "topic", "queue_id", "min_offset", "max_offset")))}
    for key, (lo, hi) in sorted((kept_queues or {}).items()):
        have = rebuilt.get(key)
        if hi > (lo if have is None else have[1]):
            parts.append(repair.extend_queue(*key, os.path.join(out_root, "consumequeue", key[0], str(key[1])),
                                             cfg.cq_file_size, have, (lo, hi)))
    fillers = sorted((p.topic, p.queue_id, *run) for p in parts for run in p.fillers)
    return QueueRebuild(repair.queue_table(parts), buckets, len(parts), sorted(irregular), fillers)


def index_put_counts(spark, store: Store, summaries: Sequence[SegmentSummary], end: int,
                     broker_5x: bool) -> list[tuple[int, int]]:
    """Per commitlog file below ``end``: its records' index puts and their latest store time,
    which cut the puts into index files (``repair.index_file_plan``). From the scan's summaries;
    a file the rebuild reads past its valid prefix is counted again, a task each."""
    files = [f.path for f in store.commitlog_files if f.start < end]
    opts = _rebuild_scan_options(store, broker_5x)

    def recount(again: list[int]) -> list[tuple[int, int]]:
        return spark.sparkContext.parallelize([files[i] for i in again], len(again)).map(
            lambda p: repair.segment_index_counts(p, opts, end)).collect()

    return repair.index_put_counts(summaries, end, recount)


def rebuild_index_files(spark, store: Store, end: int, broker_5x: bool, index_dir: str,
                        counts: list[tuple[int, int]]) -> list[IndexHeader]:
    """Fresh index files under ``index_dir`` from every record below ``end`` (``counts``: from
    ``index_put_counts``); returns their headers in creation order.

    One task per index file reads the commitlog files its puts come from and writes the file
    (memory: the hash slots and a few batches), so nothing per record reaches the driver."""
    cfg = store.config
    if not cfg.messageIndexEnable or not counts:
        return []
    files = [f.path for f in store.commitlog_files if f.start < end]
    opts = _rebuild_scan_options(store, broker_5x)
    plan = repair.index_file_plan([n for n, _ in counts], cfg.maxIndexNum)
    tasks = [(k, [(files[i], lo, hi) for i, lo, hi in ranges]) for k, ranges in enumerate(plan)]
    if not tasks:
        return []
    written = spark.sparkContext.parallelize(tasks, len(tasks)).map(lambda t: repair.write_index_file_part(
        os.path.join(index_dir, f".building-{t[0]:06d}"), t[1], opts, end, cfg, t[0] == 0)).collect()
    for w, name in zip(written, repair.name_index_files(written)):
        os.rename(w.path, os.path.join(index_dir, name))
    return [w.header for w in written]


# -- the run ------------------------------------------------------------------------------------------

@dataclass
class RunReport:
    run_id: str
    store: str
    out: str | None
    broker_version: str
    prediction: recovery.Prediction
    summaries: list[SegmentSummary]
    offset_checks: list[recovery.OffsetCheck] = field(default_factory=list)
    passes: list[tuple[str, float, str]] = field(default_factory=list)
    written: bool = False
    applied_backup: str | None = None
    findings: fnd.Findings | None = None
    audit_tables: list[str] = field(default_factory=list)
    keep_consumer_offsets: bool = False
    offsets_moved: list[dict] = field(default_factory=list)
    """Committed offsets the repaired store carries moved, originals included (repair.correct_consumer_offsets)."""
    left_out: list[str] = field(default_factory=list)
    """Entries of the commitlog directories the broker skips or cannot map: not in the repaired store."""
    resized: list[tuple[str, int, int]] = field(default_factory=list)
    """(file, length, mappedFileSizeCommitLog) of commitlog files the repaired store holds resized."""
    config_left_out: list[str] = field(default_factory=list)
    salvage: bool = False
    """--salvage: the lost records a producer would send again are re-appended (jobs.salvage)."""
    salvaged: Reappended | None = None

    def log_pass(self, name: str, started: float, detail: str, ended: float | None = None) -> None:
        secs = (time.monotonic() if ended is None else ended) - started
        self.passes.append((name, secs, detail))
        log.info("pass %-22s %7.2fs  %s", name, secs, detail)


def _check_paths(store_root: Path | StoreLocation, out: Path) -> None:
    if not isinstance(store_root, Path):      # a remote store is never a local directory
        return
    s, o = store_root.resolve(), out.resolve()
    if o == s or s in o.parents or o in s.parents:
        raise StoreReaderError(f"output {o} must not be the store, inside it or contain it", store_root)


class Cancelled(Exception):
    """Another pass of the run failed: this one stopped early."""


def join_job_group(spark, group: str | None) -> None:
    """Run this thread's Spark jobs in ``group``, so that ``cancel_job_group`` stops them."""
    if group is not None:
        spark.sparkContext.setJobGroup(group, f"jobs.recover {group}", interruptOnCancel=True)


def cancel_job_group(spark, group: str) -> None:
    """Cancel ``group``'s running jobs and every job it submits later (Spark 4's
    ``cancelJobGroupAndFutureJobs``: a pass between two jobs stops at the next one); older
    Spark: the running jobs."""
    from py4j.protocol import Py4JError

    try:
        spark.sparkContext._jsc.sc().cancelJobGroupAndFutureJobs(group)
    except Py4JError:
        spark.sparkContext.cancelJobGroup(group)


def await_tasks(spark, group: str, timeout: float = 120.0) -> None:
    """Wait until no task of ``group``'s jobs runs any more. A cancelled or failed job returns to
    its caller at once while its running tasks end a little later (a killed Python worker after
    ``spark.python.task.killTimeout``): their output may only be removed after that."""
    tracker = spark.sparkContext.statusTracker()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        stages = [sid for job in tracker.getJobIdsForGroup(group)
                  for sid in (getattr(tracker.getJobInfo(job), "stageIds", None) or [])]
        if all(getattr(tracker.getStageInfo(sid), "numActiveTasks", 0) == 0 for sid in stages):
            return
        time.sleep(0.05)
    log.warning("tasks of %s still running after %.0fs", group, timeout)


class Passes:
    """Passes running side by side on a thread pool, their Spark jobs in one job group: the first
    failure stops the others (``cancel`` for the driver-side work between files, the job group for
    Spark) and is the one raised, not the cancellations it caused."""

    def __init__(self, spark, pool: ThreadPoolExecutor, group: str, cancel: threading.Event) -> None:
        self.spark, self.pool, self.group, self.cancel = spark, pool, group, cancel
        self.failure: BaseException | None = None
        self._lock = threading.Lock()

    def check(self) -> None:
        if self.cancel.is_set():
            raise Cancelled("another pass of the run failed")

    def fail(self, exc: BaseException) -> None:
        """Record a pass's failure; the first one stops the others."""
        with self._lock:
            first, self.failure = self.failure is None, self.failure or exc
        if first:
            self.cancel.set()
            cancel_job_group(self.spark, self.group)

    def submit(self, fn, *args) -> Future:
        def run():
            join_job_group(self.spark, self.group)
            try:
                return fn(*args)
            except BaseException as exc:
                self.fail(exc)
                raise
        return self.pool.submit(run)

    def result(self, future: Future):
        try:
            return future.result()
        except BaseException:
            if self.failure is not None:
                raise self.failure from None
            raise


def _digests(root: Path, sub: str) -> dict[str, str]:
    """SHA-256 of every file under ``root/sub`` by path relative to ``root`` (for the manifest)."""
    files = repair.tree_files(str(root / sub))
    got = repair.sha256_files(p for _, p in files)
    return {os.path.join(sub, rel): got[p] for rel, p in files}


def build_repaired_store(spark, store: Store, report: RunReport, out: Path,
                         cancel: threading.Event | None = None, group: str | None = None,
                         queued: threading.Event | None = None) -> Path:
    """Passes 4-7 into this invocation's own ``<out>.tmp-<run id>-<nonce>``, MANIFEST.json
    included; returns that directory, still marked incomplete (``publish.TMP_MARKER``) until
    ``place_repaired_store`` renames it into place.
    On any failure nothing is left behind. ``cancel``: set when another pass of the run failed (the
    copy stops between files, no further Spark job starts); ``group``: the Spark job group of this
    build's jobs, which run on threads of their own; ``queued``: set once the rebuild jobs are
    being submitted."""
    pred = report.prediction
    version_5x = pred.broker_version == recovery.V5X
    cfg = store.config
    end = pred.max_phy_offset
    cancel = cancel or threading.Event()
    group = group or f"{report.run_id}-write-{uuid.uuid4().hex[:8]}"
    tmp = publish.new_temporary(out, report.run_id)
    try:
        # passes 4-5 and the commitlog copy write disjoint parts of tmp and run side by side: the
        # copy (hashing as it goes) on driver threads from the start; once the index puts are
        # counted, the index files' job first (FIFO: its long tasks start at once) and the consume
        # queue job next to it; each hashes its own files for the manifest as soon as it is done
        (tmp / "consumequeue").mkdir()
        (tmp / "index").mkdir()
        (tmp / "commitlog").mkdir()
        expected = sum(s.records for s in report.summaries if s.file_start < end)
        srcs = {c.name: c.path for c in store.commitlog_files}
        index_submitted = threading.Event()
        with ThreadPoolExecutor(max_workers=3, thread_name_prefix="recover-write") as pool:
            passes = Passes(spark, pool, group, cancel)

            def copy(name: str, keep: int, size: int) -> str:
                passes.check()
                try:
                    return repair.copy_commitlog_file(srcs[name], str(tmp / "commitlog" / name), keep, size)
                except BaseException as exc:
                    passes.fail(exc)      # the files not copied yet are not tried
                    raise

            def commitlog() -> dict[str, str]:
                t = time.monotonic()
                with ThreadPoolExecutor(max_workers=2) as copies:
                    copied = [copies.submit(copy, f.name, f.wrote, f.size) for f in pred.commitlog_files]
                digests = {f"commitlog/{f.name}": c.result() for f, c in zip(pred.commitlog_files, copied)}
                report.log_pass("write commitlog", t, f"{len(pred.commitlog_files)} files kept, end at "
                                f"phy {end}, {len(pred.deleted_commitlog_files)} dropped")
                return digests

            def index_files(counts: list[tuple[int, int]], t: float):
                index_submitted.set()  # the queue job builds its RDD first: this job is queued ahead
                passes.check()
                headers = rebuild_index_files(spark, store, end, version_5x, str(tmp / "index"), counts)
                report.log_pass("rebuild index", t, f"{len(headers)} files, "
                                f"{sum(h.index_count - 1 for h in headers)} entries")
                return headers, _digests(tmp, "index")

            def consume_queues():
                while not index_submitted.wait(0.05):
                    passes.check()
                passes.check()
                if queued is not None:
                    queued.set()
                t = time.monotonic()
                kept = {k: (q.min_offset, q.max_offset) for k, q in pred.consume_queues.items()}
                rebuilt = rebuild_consume_queues(spark, store, end, version_5x, str(tmp), expected, kept)
                report.log_pass("rebuild consume queues", t, f"{rebuilt.queues.num_rows} queues, "
                                f"{sum(rebuilt.queues['entries'].to_pylist())} entries, {rebuilt.parts} "
                                f"parts in {rebuilt.tasks} tasks, {len(rebuilt.rebuilt_whole)} rebuilt whole, "
                                f"{sum(hi - lo for _, _, lo, hi, _ in rebuilt.fillers)} filler units")
                return rebuilt.queues, _digests(tmp, "consumequeue")

            copying = passes.submit(commitlog)
            t = time.monotonic()
            counts = passes.result(passes.submit(index_put_counts, spark, store, report.summaries, end,
                                                 version_5x))
            indexing = passes.submit(index_files, counts, t)
            queueing = passes.submit(consume_queues)
            headers, index_digests = passes.result(indexing)
            queues, queue_digests = passes.result(queueing)
            commitlog_digests = passes.result(copying)
        if report.salvage:
            t = time.monotonic()
            report.salvaged = salvage_job.reappend(spark, store, pred, report.summaries, str(tmp), queues)
            report.log_pass("salvage", t, f"{report.salvaged.records.num_rows} lost records re-appended, "
                            f"end at phy {report.salvaged.end}")
        last_ts = max((ts for _, ts in counts), default=0)
        last_cq_ts = max(queues["last_store_timestamp"].to_pylist(), default=0)
        confirm = next((s.file_start + s.last_record_position for s in reversed(report.summaries)
                        if s.last_record_position is not None and
                        s.file_start + s.last_record_position < end), 0)
        if report.salvaged is not None:
            last_ts, last_cq_ts, headers, confirm = report.salvaged.checkpoint_inputs(last_ts, last_cq_ts,
                                                                                      headers, confirm)
        ckpt = repair.repaired_checkpoint(int(last_ts), int(last_cq_ts),
                                          repair.full_index_end_timestamp(headers, cfg.maxIndexNum),
                                          confirm, version_5x)
        repair.write_checkpoint_file(tmp, ckpt, version_5x)
        report.config_left_out = repair.copy_config(store.root, tmp)
        for line in report.config_left_out:
            log.warning("config file left out of the repaired store (the broker reads its .bak "
                        "instead): %s", line)
        if not report.keep_consumer_offsets:
            ranges = {(r["topic"], r["queue_id"]): (r["min_offset"], r["max_offset"]) for r in
                      queues.select(["topic", "queue_id", "min_offset", "max_offset"]).to_pylist()}
            report.offsets_moved = repair.correct_consumer_offsets(tmp / "config", ranges)
        passes.check()
        t = time.monotonic()
        known = {k: v for k, v in {**commitlog_digests, **index_digests, **queue_digests}.items()
                 if report.salvaged is None or k not in report.salvaged.touched}
        repair.write_manifest(str(tmp), manifest(store, report, repair.tree_manifest(
            str(tmp), skip={publish.TMP_MARKER}, known=known)))
        report.log_pass("write manifest", t, f"sizes and SHA-256 of every output file "
                        f"({len(known)} hashed as they were written)")
        return tmp
    except BaseException as exc:
        # a failed or cancelled job returns before its running tasks end: they may still write
        await_tasks(spark, group)
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
            raise StoreReaderError("disk full while writing the repaired store; nothing was left "
                                   "behind", tmp) from None
        raise


def place_repaired_store(tmp: Path, out: Path, overwrite: bool) -> None:
    """Pass 7's end: the complete ``tmp`` (``build_repaired_store``) synced, checked against its
    manifest and renamed to ``out`` (``publish.publish``); on failure ``tmp`` is removed."""
    publish.publish(tmp, out, overwrite)


def audit_and_write(spark, store: Store, report: RunReport, out: Path | None, overwrite: bool) -> None:
    """Pass 6 (the audit) and, with ``out``, passes 4-7 side by side: both only read the input
    store and the prediction. Their Spark jobs share the cores, the write's queued first (Spark
    schedules FIFO across threads), the commitlog copy is driver I/O. The repaired store is placed
    only once both succeeded; when either fails the other is cancelled (its Spark job group, and
    the copy between files), nothing is left behind and the first failure is raised."""
    pred = report.prediction

    def audit(group: str | None, after: Callable[[], object] | None = None) -> None:
        join_job_group(spark, group)
        if after is not None:
            after()
        t = time.monotonic()
        report.findings = fnd.audit(spark, store, pred, report.summaries)
        report.log_pass("audit", t, ", ".join(f"{v} {k}" for k, v in
                                              fnd.alerting_counts(report.findings).items()))

    if out is None:
        audit(None)
        return
    tag = uuid.uuid4().hex[:8]
    groups = {"audit": f"{report.run_id}-audit-{tag}", "write": f"{report.run_id}-write-{tag}"}
    cancel, queued = threading.Event(), threading.Event()

    def write_queued() -> None:
        while not queued.wait(0.05) and not building.done():
            pass

    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="recover") as pool:
        # the write's jobs first (Spark runs jobs FIFO): its single long task per index file
        # starts at once, and the write never trails the audit; the audit's tasks fill the rest
        building = pool.submit(build_repaired_store, spark, store, report, out, cancel, groups["write"],
                               queued)
        auditing = pool.submit(audit, groups["audit"], write_queued)
        futures = {building: "write", auditing: "audit"}
        first: BaseException | None = None
        try:
            done, _ = wait(futures, return_when=FIRST_EXCEPTION)
            first = next((f.exception() for f in done if f.exception() is not None), None)
        except BaseException as exc:       # interrupted while waiting
            first = exc
        if first is not None:
            cancel.set()
            for f, name in futures.items():
                if not f.done():
                    cancel_job_group(spark, groups[name])
        wait(futures)
    if first is None:
        first = next((f.exception() for f in futures if f.exception() is not None), None)
    if first is not None:
        if building.exception() is None:   # complete, but the run failed: it goes too
            shutil.rmtree(building.result(), ignore_errors=True)
        raise first
    t = time.monotonic()
    place_repaired_store(building.result(), out, overwrite)
    report.log_pass("place repaired store", t, f"fsync'd, renamed to {out}")
    report.written = True


def prediction_summary(pred: recovery.Prediction, report: RunReport | None = None) -> dict:
    return {
        "brokerVersion": pred.broker_version,
        "loadResult": pred.load_result,
        "loadProblems": pred.load_problems,
        **({"leftOut": report.left_out,
            "resized": [{"path": f, "length": n, "mappedFileSize": m} for f, n, m in report.resized]}
           if report is not None and (report.left_out or report.resized) else {}),
        "recoveryPath": pred.recovery_path,
        "startFile": pred.start_file,
        "maxPhyOffset": pred.max_phy_offset,
        "minPhyOffset": pred.min_phy_offset,
        "deletedCommitLogFiles": pred.deleted_commitlog_files,
        "commitLogFiles": [{"name": f.name, "wrotePosition": f.wrote} for f in pred.commitlog_files],
        "topicQueueTable": dict(sorted(pred.topic_queue_table().items())),
        "indexFiles": [{"name": f.name, **f.header.to_dict()} for f in pred.index_files],
    }


def _resolved(path: str | None) -> str | None:
    return path if path is None or publish.is_uri(path) else str(Path(path).resolve())


def manifest(store: Store, report: RunReport, outputs: list[dict]) -> dict:
    inputs = [{"path": rel, "size": size} for rel, size, _ in walk_files(store.root)]
    # resolved: the same store and config give the same manifest however they were spelled
    return {"runId": report.run_id, "store": _resolved(str(store.root)),
            "brokerConfig": _resolved(store.config.source),
            "inputs": sorted(inputs, key=lambda e: e["path"]), "outputs": outputs,
            "prediction": prediction_summary(report.prediction, report),
            "consumerOffsets": {"keptAsTheyWere": report.keep_consumer_offsets, "moved": report.offsets_moved},
            **({"salvaged": report.salvaged.to_manifest()} if report.salvaged is not None else {})}


def claim_outputs(stack: ExitStack, store: Store, out: str | None, overwrite: bool,
                  backup: str | None, audit_path: str | None) -> None:
    """Pass 1's checks of every output target, before any work: the audit path writable, the
    output local, not the store, locked for this run (``publish.OutputLock``, which also proves its
    directory writable), leftovers of killed runs cleaned up, an existing output replaceable; with
    ``backup`` (``--apply``) the backup new and the store locked as well. ``out``: None for a dry
    run."""
    if audit_path:
        publish.check_writable(audit_path, "audit path")
    if out is None:
        return
    if publish.is_uri(out):
        raise StoreReaderError("the repaired store is written to a local directory, not a URI", out)
    _check_paths(store.root, Path(out))
    stack.enter_context(publish.OutputLock(Path(out)))
    for done in publish.recover_leftovers(Path(out)):
        log.info("output: %s", done)
    publish.check_output(Path(out), overwrite)
    if backup is not None:
        _check_paths(store.root, Path(backup))
        if os.path.lexists(backup):
            raise StoreReaderError("backup directory exists; choose a new one", backup)
        if not Path(backup).parent.is_dir():
            raise StoreReaderError("the backup's directory does not exist", Path(backup).parent)
        publish.check_writable(str(Path(backup).parent), "backup's directory")
        stack.enter_context(publish.OutputLock(Path(store.root), "store"))


def recover(spark, store_path: str, out: str | None, broker_config: str | None = None,
            broker_version: str | None = None, dry_run: bool = False, overwrite: bool = False,
            backup: str | None = None, audit_path: str | None = None,
            keep_consumer_offsets: bool = False, commitlog_gone: bool = False, salvage: bool = False) -> RunReport:
    """The whole run (passes 1-7); ``dry_run`` writes no repaired store (audit rows still go to
    ``audit_path`` when given). The repaired store's committed consumer offsets are moved where
    the consumers' next pull on it would move them, unless ``keep_consumer_offsets``. A store
    without commitlog files is refused unless ``commitlog_gone`` (the operator says it is really
    gone, not on a volume that is not mounted)."""
    started = time.monotonic()
    # absolute: Spark tasks write under it, whatever their working directory
    out, backup = (p if p is None or publish.is_uri(p) else os.path.abspath(p) for p in (out, backup))
    store = open_store(store_path, broker_config)
    lock = lock_status(store.root)
    if lock.locked:
        raise StoreReaderError(f"a running broker holds the store's lock (pid {lock.pid}); "
                               "stop it or recover a copy", lock.path)
    if backup is not None and not isinstance(store.root, Path):
        raise StoreReaderError("--apply swaps directories by renaming them: a remote store cannot "
                               "be replaced (write --out and copy it back)", str(store.root))
    if not store.commitlog_files and not commitlog_gone:
        raise StoreReaderError(f"{store.missing_commitlog()}: recovering would drop every message "
                               "and consume queue entry (a wrong --store or an unmounted volume?); "
                               "pass --commitlog-gone if the commitlog is really gone",
                               store.commitlog_dirs[0])
    with ExitStack() as stack:
        claim_outputs(stack, store, None if dry_run else out, overwrite,
                      backup if not dry_run else None, audit_path)
        return _recover(spark, store, out, broker_version, dry_run, overwrite, backup, audit_path,
                        keep_consumer_offsets, started, salvage)


def _recover(spark, store: Store, out: str | None, broker_version: str | None, dry_run: bool,
             overwrite: bool, backup: str | None, audit_path: str | None, keep_consumer_offsets: bool,
             started: float, salvage: bool = False) -> RunReport:
    t = started
    audited_at = dt.datetime.now(dt.timezone.utc)
    version = broker_version or (recovery.V5X if store.looks_5x() else recovery.V49)
    mode = "dry_run" if dry_run or out is None else "apply" if backup is not None else "write"
    run_id = audit_job.run_id_for("recover", store, version, mode)
    log.info("pass %-22s %7.2fs  %d commitlog files, version %s, abort=%s", "discover",
             time.monotonic() - t, len(store.commitlog_files), version, store.abort_exists)
    # pass 2 on Spark (a task per commitlog file), pass 3 the broker's predicted recovery on the driver
    t = time.monotonic()
    summaries = scan_segments(spark, store, store.scan_options(broker_5x=version == recovery.V5X))
    scanned = time.monotonic()
    pred = recovery.predict(store, version, summaries=summaries)
    report = RunReport(run_id, str(store.root), out, version, pred, summaries,
                       keep_consumer_offsets=keep_consumer_offsets, salvage=salvage)
    report.left_out, report.resized = store.left_out, repair.resized_commitlog_files(store)
    report.log_pass("scan", t, f"{sum(s.records for s in summaries)} records", ended=scanned)
    t = scanned
    if pred.load_result:
        offsets = read_consumer_offsets(store.root).value
        report.offset_checks = recovery.consumer_offset_checks(pred, store.config, offsets)
    report.log_pass("plan", t, f"{pred.recovery_path} path, start {pred.start_file}, "
                    f"truncation point {pred.max_phy_offset}")
    writing = not dry_run and out is not None
    if writing:
        repair.check_repairable(store, pred, summaries)
    warming: threading.Thread | None = None
    if audit_path:      # delta-rs starts up (~0.3 s) while the audit runs, not at the commit
        warming = threading.Thread(target=deltasink.warm_up, args=(spark,), name="delta-warm-up", daemon=True)
        warming.start()
    audit_and_write(spark, store, report, Path(out) if writing else None, overwrite)
    if writing:
        if backup is not None:
            publish.apply_repaired(store.root, Path(out), Path(backup))
            report.applied_backup = backup
    if audit_path:
        t = time.monotonic()
        if warming is not None:
            warming.join()
        counts = fnd.alerting_counts(report.findings)
        row = audit_job.run_row("recover", mode, fnd.run_status(pred, summaries, report.findings), pred,
                                summaries, summaries, report.findings, counts, started, report.passes,
                                repaired=str(Path(out).resolve()) if report.written else None)
        store_id = store_id_for(str(store.root))
        mtimes = audit_job.mtimes(store)
        written = audit_job.fingerprints(store, {s.segment: s.valid_bytes for s in summaries if s.segment in mtimes})
        tables = fnd.run_tables(report.findings, row,
                                fnd.segment_rows(summaries, pred, mtimes, {s.segment for s in summaries}, written),
                                run_id, store_id, audited_at)
        if report.salvaged is not None:
            tables["salvaged_messages"] = salvage_job.audit_rows(report.salvaged, run_id, store_id, audited_at)
        report.audit_tables = fnd.write_audit(audit_path, tables, run_id, spark)
        report.log_pass("write audit tables", t, audit_path)
    return report


def recover_both(spark, store_path: str, broker_config: str | None = None,
                 audit_path: str | None = None, commitlog_gone: bool = False) -> list[RunReport]:
    """The dry run for 4.9 and for 5.x (a scan and an audit each: the versions' record checks
    differ), for ``whatif``."""
    return [recover(spark, store_path, None, broker_config, v, dry_run=True, audit_path=audit_path,
                    commitlog_gone=commitlog_gone) for v in (recovery.V49, recovery.V5X)]


def print_report(report: RunReport, out=None) -> None:
    out = out or sys.stdout
    pred = report.prediction
    p = print
    p(f"run {report.run_id}: store {report.store} (broker {report.broker_version})", file=out)
    if not pred.load_result:
        p("  the broker would REFUSE to start on this store as it is:", file=out)
        for problem in pred.load_problems:
            p(f"    - {problem}", file=out)
        p("  what follows is its recovery of the store as repaired: consume queues and index files "
          "rebuilt from the commitlog", file=out)
        for path, length, size in report.resized:
            how = f"zeros from byte {length} on, as never written (any records there are lost)" \
                if length < size else f"the {length - size} bytes past it dropped (never mapped)"
            p(f"    resized            {path}: {length} -> {size} bytes, {how}", file=out)
        dropped = sum(s.records for s in report.summaries if s.segment in pred.deleted_commitlog_files)
        p(f"    lost               {dropped} records in the commitlog files after the cut, "
          f"{sum(s.records_after_cut for s in report.summaries if s.file_start + s.file_size > pred.max_phy_offset)} "
          "intact records behind a bad one",
          file=out)
    for path in report.left_out:
        p(f"  left out           {path} (the broker skips it or cannot map it)", file=out)
    end = pred.max_phy_offset
    # a bad record in a file the broker keeps whole (one its recovery does not re-read) loses nothing
    lost = sum(s.records_after_cut for s in report.summaries if s.file_start + s.file_size > end)
    p(f"  recovery path      {pred.recovery_path} (start file {pred.start_file})", file=out)
    p(f"  truncation point   phy {end} (min {pred.min_phy_offset})", file=out)
    p(f"  commitlog files    {len(pred.commitlog_files)} kept, "
      f"{len(pred.deleted_commitlog_files)} deleted {pred.deleted_commitlog_files}", file=out)
    for s in report.summaries:
        if s.end_reason in ("corrupt", "torn_tail"):
            kept = "kept by the broker, not re-read; " if s.file_start + s.file_size <= end else ""
            p(f"  {s.end_reason:<18} {s.path} @ byte {s.valid_bytes} ({s.end_check}); {kept}"
              f"{s.records_after_cut} intact records behind it", file=out)
    p(f"  records lost       {lost} intact records behind a bad one", file=out)
    p(f"  consume queues     {len(pred.consume_queues)} after the broker's recovery", file=out)
    moved = [c for c in report.offset_checks if c.status not in ("FOUND", "OFFSET_OVERFLOW_ONE")]
    p(f"  consumer offsets   {len(report.offset_checks)} committed, {len(moved)} the broker would "
      f"move at the next pull", file=out)
    for c in moved[:10]:
        p(f"    {c.group}@{c.topic}/{c.queue_id}: committed {c.committed_offset} -> {c.status}, "
          f"next {c.next_begin_offset} (queue {c.min_offset}..{c.max_offset})", file=out)
    if report.written and report.keep_consumer_offsets:
        p("  repaired offsets   kept as they were (--keep-consumer-offsets)", file=out)
    elif report.written:
        p(f"  repaired offsets   {len(report.offsets_moved)} moved where the repaired queues serve "
          f"them (originals in MANIFEST.json)", file=out)
    if report.findings is not None:
        p("  audit", file=out)
        fnd.print_summary(report.findings, out)
    if report.audit_tables:
        p(f"  audit tables       {os.path.dirname(report.audit_tables[0])} "
          f"({', '.join(os.path.basename(u) for u in report.audit_tables)})", file=out)
    for line in report.config_left_out:
        p(f"  config left out    {line} (unreadable: the broker falls back to its .bak)", file=out)
    if report.applied_backup:
        p(f"  applied            repaired store now at {report.store}; input kept at "
          f"{report.applied_backup}", file=out)
    elif report.written:
        p(f"  repaired store     {report.out}", file=out)
    if report.written and report.salvaged is not None:
        salvage_job.print_reappended(report.salvaged, out)
    elif report.out:
        p("  dry run: nothing written", file=out)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="jobs.recover", description=__doc__.split("\n")[0])
    ap.add_argument("--store", help="store root (storePathRootDir)")
    ap.add_argument("--out", help="directory for the repaired store (must not exist)")
    ap.add_argument("--broker-config", help="the broker's broker.conf (sizes, CRC check, ...)")
    ap.add_argument("--broker-version", choices=[recovery.V49, recovery.V5X, "both"],
                    help="recovery semantics; default: detected from the store; both (with "
                         "--dry-run): the two versions' predictions side by side")
    ap.add_argument("--dry-run", action="store_true", help="print the plan, write nothing")
    ap.add_argument("--overwrite", action="store_true", help="replace an earlier repaired store")
    ap.add_argument("--apply", action="store_true",
                    help="swap the repaired store into the input's place (needs --backup)")
    ap.add_argument("--backup", help="with --apply: where the input store is kept")
    ap.add_argument("--audit-path", help="directory or URI of the Delta audit tables (findings, "
                                         "what the repair changed); none: printed only")
    ap.add_argument("--keep-consumer-offsets", action="store_true",
                    help="copy the committed consumer offsets as they are (default: each moved where "
                         "the consumer's next pull on the repaired store would move it)")
    ap.add_argument("--commitlog-gone", action="store_true",
                    help="the store's commitlog is really gone (deleted, not merely unmounted): "
                         "recover without it, dropping every consume queue entry; without this "
                         "flag a store with no commitlog files is refused")
    ap.add_argument("--salvage", action="store_true",
                    help="append the intact records the broker's recovery discards (those jobs.salvage "
                         "exports with replay=send) to the repaired store, at new phy and queue offsets, "
                         "dispatched into its consume queues and index; MANIFEST.json and the "
                         "salvaged_messages audit table say where each went")
    ap.add_argument("--json", action="store_true", help="print the prediction as JSON")
    ap.add_argument("--demo", metavar="DIR",
                    help="make a sample store with a simulated crash in DIR and recover it")
    args = ap.parse_args(argv)
    if not args.demo and not args.store:
        ap.error("--store is required (or --demo DIR)")
    if args.apply and not args.backup:
        ap.error("--apply needs --backup DIR: the input store is only replaced once it is kept")
    if args.apply and args.dry_run:
        ap.error("--apply and --dry-run exclude each other")
    if not args.dry_run and not args.demo and not args.out:
        ap.error("--out is required unless --dry-run")
    if args.broker_version == "both" and (not args.dry_run or args.demo):
        ap.error("--broker-version both is a what-if: it needs --dry-run")
    return args


def main(argv: list[str] | None = None) -> int:
    from jobs.sparkutil import configure_logging, get_spark, store_error

    configure_logging()
    args = parse_args(argv)

    if args.demo:
        from jobs.demo import make_demo_store

        args.store, args.broker_config, args.out = make_demo_store(args.demo)
        args.overwrite = True
        args.audit_path = args.audit_path or os.path.join(args.demo, "audit")
    spark = get_spark("rocketmq-recover", session=False)
    if args.broker_version == "both":
        from jobs import whatif

        try:
            reports = recover_both(spark, args.store, args.broker_config, args.audit_path,
                                   args.commitlog_gone)
        except StoreReaderError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        doc = whatif.compare_json(reports[0].store, [whatif.Side(r.broker_version, r.prediction, r.summaries,
                                                                 r.findings) for r in reports])
        if args.json:
            print(json.dumps(doc, indent=2))
        else:
            whatif.print_side_by_side(doc, sys.stdout)
        refused = [r for r in reports if not r.prediction.load_result]
        if refused:
            print(f"error: broker {refused[0].broker_version} would refuse to load this store: "
                  f"{refused[0].prediction.load_problems[0]}", file=sys.stderr)
            return 2
        return 0
    try:
        report = recover(spark, args.store, args.out, args.broker_config, args.broker_version,
                         args.dry_run, args.overwrite, args.backup if args.apply else None,
                         args.audit_path, args.keep_consumer_offsets, args.commitlog_gone, args.salvage)
    except Exception as exc:
        error = store_error(exc)
        if error is None:
            raise
        print(f"error: {error}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(prediction_summary(report.prediction, report), indent=2))
    else:
        print_report(report)
    if not report.prediction.load_result:
        for problem in report.prediction.load_problems:
            print(f"warning: the broker would not start on this store: {problem}", file=sys.stderr)
        if report.written:
            print(f"warning: repaired store {report.out} written; the broker starts on it, not on "
                  f"{report.store}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
