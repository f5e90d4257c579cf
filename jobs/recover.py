"""Broker-exact recovery of a RocketMQ store into a new, repaired store.

    spark-submit jobs/recover.py --store DIR --out DIR [--broker-config FILE]
                                 [--broker-version 4.9|5.x|both] [--dry-run] [--overwrite]
                                 [--apply --backup DIR] [--audit-path URI]
                                 [--keep-consumer-offsets] [--commitlog-gone] [--link] [--salvage]
                                 [--json]
    python -m jobs.recover ...            (embedded local Spark, settings from spark-conf/local.conf)
    python -m jobs.recover --demo DIR     (a sample store with a simulated crash, made and recovered)
    python -m jobs.recover --store DIR --dry-run --broker-version both [--json]
                                          (what-if: the 4.9 and 5.x predictions side by side)

Passes (each a function the notebooks can call):
  1. discover the store, refuse a store a live broker holds (its ``lock``) or one without commitlog
     files (unless ``--commitlog-gone``); check every output target and lock the output
     (``publish.claim_outputs``), before any work;
  2. scan segments in parallel, one Spark task per commitlog file, each walked once
     (``store_reader.scanned``): its summary, and its records kept (Arrow, under ``--scan-dir``)
     for every later pass, none of which reads a segment again;
  3. decide on the driver what the broker would do (``store_reader.recovery.predict``; its replay
     reads the kept records);
  4. rebuild consume queues from every record below the cut: CQ files as parts packed into a bounded
     number of tasks (a huge queue is split by file, small queues share a task; a queue whose files
     do not join up into one sequential put is rebuilt whole);
  5. rebuild index files from the same records, one task per index file;
  6. audit: what is inconsistent and what the broker's own restart would lose or rewind
     (``jobs/findings.py``, the same findings ``jobs/audit.py`` reports), side by side with 4-5
     and 7 (both only read the input store and the prediction);
  7. write the repaired store into a temporary directory of this run's own (the commitlog placed
     by a task per file, ``store_reader.placement``: cloned, copied or with ``--link`` hard-linked,
     the cut file rewritten, each hashed for the manifest; each committed consumer offset moved
     where the consumer's next pull on the rebuilt queues would move it, the originals in the
     manifest) and, once the audit succeeded too, check it against its manifest and rename it
     into place, all under the output's lock (``store_reader.publish``);
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
from collections import Counter
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Callable, Sequence


from store_reader import open_store, recovery
from store_reader.checkpoint import lock_status
from store_reader.config import read_consumer_offsets
from store_reader.exceptions import StoreReaderError
from store_reader.store import Store
from store_reader import placement, publish, repair, scanned
from jobs import audit as audit_job
from jobs import findings as fnd
from jobs import deltasink
from jobs import salvage as salvage_job
from jobs.deltasink import store_id_for
from jobs.recoverreport import RunReport, manifest, prediction_summary, print_report
from jobs.rebuild import index_put_counts, rebuild_consume_queues, rebuild_index_files
from jobs.scan import records_dir, scan_once
from jobs.sparkutil import Passes, await_tasks, cancel_job_group, join_job_group, reports_store_errors

log = logging.getLogger("jobs.recover")


def _digests(root: Path, sub: str) -> dict[str, str]:
    """SHA-256 of every file under ``root/sub`` by path relative to ``root`` (for the manifest)."""
    files = repair.tree_files(str(root / sub))
    got = repair.sha256_files(p for _, p in files)
    return {os.path.join(sub, rel): got[p] for rel, p in files}


def place_commitlog(spark, store: Store, kept: Sequence[recovery.CommitLogFileState], dest_dir: str,
                    link: bool) -> list[placement.PlacedSegment]:
    """The repaired store's commitlog files under ``dest_dir``, one task per kept file
    (``placement.place_segment``: cloned, copied or linked, the cut file rewritten), so no
    segment's bytes pass through the driver; returns each file's digest and how it was placed."""
    srcs = {c.name: c.path for c in store.commitlog_files}
    tasks = [(srcs[p.name], os.path.join(dest_dir, p.name), p.keep, p.file_size, p.link)
             for p in placement.plan(kept, link)]
    if not tasks:
        return []
    return spark.sparkContext.parallelize(tasks, len(tasks)).map(lambda t: placement.place_segment(*t)).collect()


def build_repaired_store(spark, store: Store, report: RunReport, out: Path,
                         cancel: threading.Event | None = None, group: str | None = None,
                         queued: threading.Event | None = None) -> Path:
    """Passes 4-7 into this invocation's own ``<out>.tmp-<run id>-<nonce>``, MANIFEST.json
    included; returns that directory, still marked incomplete (``publish.TMP_MARKER``) until
    ``place_repaired_store`` renames it into place.
    On any failure nothing is left behind. ``cancel``: set when another pass of the run failed (no
    further Spark job starts); ``group``: the Spark job group of this
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
        # passes 4-5 and the commitlog placement write disjoint parts of tmp and run side by side:
        # once the index puts are counted, the index files' job first (FIFO: its long tasks start
        # at once), the consume queue job and the placement (a task per kept file) next to it;
        # each hashes its own files for the manifest as soon as it is done
        (tmp / "consumequeue").mkdir()
        (tmp / "index").mkdir()
        (tmp / "commitlog").mkdir()
        expected = sum(s.records for s in report.summaries if s.file_start < end)
        records = report.records if report.records and scanned.serves_rebuild(cfg, version_5x) else None
        index_submitted = threading.Event()
        with ThreadPoolExecutor(max_workers=3, thread_name_prefix="recover-write") as pool:
            passes = Passes(spark, pool, group, cancel)

            def commitlog() -> dict[str, str]:
                while not index_submitted.wait(0.05):   # queued behind the index files' long tasks
                    passes.check()
                passes.check()
                t = time.monotonic()
                placed = place_commitlog(spark, store, pred.commitlog_files, str(tmp / "commitlog"),
                                         report.link_commitlog)
                hows = Counter(p.how for p in placed)
                report.log_pass("write commitlog", t, f"{len(pred.commitlog_files)} files kept ("
                                f"{', '.join(f'{n} {how}' for how, n in sorted(hows.items()))}), end at "
                                f"phy {end}, {len(pred.deleted_commitlog_files)} dropped")
                return {f"commitlog/{f.name}": p.sha256 for f, p in zip(pred.commitlog_files, placed)}

            def index_files(counts: list[tuple[int, int]], t: float):
                index_submitted.set()  # the queue job builds its RDD first: this job is queued ahead
                passes.check()
                headers = rebuild_index_files(spark, store, end, version_5x, str(tmp / "index"), counts, records)
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
                rebuilt = rebuild_consume_queues(spark, store, end, version_5x, str(tmp), expected, kept, records)
                report.log_pass("rebuild consume queues", t, f"{rebuilt.queues.num_rows} queues, "
                                f"{sum(rebuilt.queues['entries'].to_pylist())} entries, {rebuilt.parts} "
                                f"parts in {rebuilt.tasks} tasks, {len(rebuilt.rebuilt_whole)} rebuilt whole, "
                                f"{sum(hi - lo for _, _, lo, hi, _ in rebuilt.fillers)} filler units")
                return rebuilt.queues, _digests(tmp, "consumequeue")

            copying = passes.submit(commitlog)
            t = time.monotonic()
            counts = passes.result(passes.submit(index_put_counts, spark, store, report.summaries, end,
                                                 version_5x, records))
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
    schedules FIFO across threads). The repaired store is placed only once both succeeded; when
    either fails the other is cancelled (its Spark job group), nothing is left behind and the
    first failure is raised."""
    pred = report.prediction

    def audit(group: str | None, after: Callable[[], object] | None = None) -> None:
        join_job_group(spark, group)
        if after is not None:
            after()
        t = time.monotonic()
        report.findings = fnd.audit(spark, store, pred, report.summaries, records=report.records or None)
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


def recover(spark, store_path: str, out: str | None, broker_config: str | None = None,
            broker_version: str | None = None, dry_run: bool = False, overwrite: bool = False,
            backup: str | None = None, audit_path: str | None = None,
            keep_consumer_offsets: bool = False, commitlog_gone: bool = False,
            scan_dir: str | None = None, link_commitlog: bool = False, salvage: bool = False) -> RunReport:
    """The whole run (passes 1-7); ``dry_run`` writes no repaired store (audit rows still go to
    ``audit_path`` when given). The repaired store's committed consumer offsets are moved where
    the consumers' next pull on it would move them, unless ``keep_consumer_offsets``. A store
    without commitlog files is refused unless ``commitlog_gone`` (the operator says it is really
    gone, not on a volume that is not mounted). ``scan_dir``: where the scan keeps the segments'
    records for the run (default: the system's temporary directory). ``link_commitlog``: the
    repaired store hard-links the commitlog files it keeps whole instead of copying them
    (``placement.linkable``)."""
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
    with publish.claim_outputs(store.root, None if dry_run else out, overwrite,
                               backup if not dry_run else None, audit_path,
                               lambda done: log.info("output: %s", done)):
        return _recover(spark, store, out, broker_version, dry_run, overwrite, backup, audit_path,
                        keep_consumer_offsets, started, scan_dir, link_commitlog, salvage)


def _recover(spark, store: Store, out: str | None, broker_version: str | None, dry_run: bool,
             overwrite: bool, backup: str | None, audit_path: str | None, keep_consumer_offsets: bool,
             started: float, scan_dir: str | None, link_commitlog: bool = False,
             salvage: bool = False) -> RunReport:
    t = started
    audited_at = dt.datetime.now(dt.timezone.utc)
    version = broker_version or (recovery.V5X if store.looks_5x() else recovery.V49)
    mode = "dry_run" if dry_run or out is None else "apply" if backup is not None else "write"
    run_id = audit_job.run_id_for("recover", store, version, mode)
    log.info("pass %-22s %7.2fs  %d commitlog files, version %s, abort=%s", "discover",
             time.monotonic() - t, len(store.commitlog_files), version, store.abort_exists)
    # pass 2 on Spark (a task per commitlog file, each walked once), pass 3 the broker's predicted
    # recovery on the driver, its replay reading the records the scan kept
    with records_dir(run_id, scan_dir) as kept:
        return _recover_scanned(spark, store, out, version, mode, run_id, dry_run, overwrite, backup,
                                audit_path, keep_consumer_offsets, started, audited_at, kept, link_commitlog,
                                salvage)


def _recover_scanned(spark, store: Store, out: str | None, version: str, mode: str, run_id: str,
                     dry_run: bool, overwrite: bool, backup: str | None, audit_path: str | None,
                     keep_consumer_offsets: bool, started: float, audited_at, kept: str,
                     link_commitlog: bool = False, salvage: bool = False) -> RunReport:
    t = time.monotonic()
    opts = store.scan_options(broker_5x=version == recovery.V5X)
    scan = scan_once(spark, store, opts, kept)
    summaries = scan.summaries
    scan_done = time.monotonic()
    pred = recovery.predict(store, version, summaries=summaries, records=scanned.prefix_source(scan.records, opts))
    report = RunReport(run_id, str(store.root), out, version, pred, summaries,
                       keep_consumer_offsets=keep_consumer_offsets, link_commitlog=link_commitlog,
                       records=scan.records, scans=dict(scan.scans),
                       salvage=salvage and not dry_run and out is not None)
    report.left_out, report.resized = store.left_out, repair.resized_commitlog_files(store)
    report.log_pass("scan", t, f"{sum(s.records for s in summaries)} records", ended=scan_done)
    t = scan_done
    if pred.load_result:
        offsets = read_consumer_offsets(store.root).value
        report.offset_checks = recovery.consumer_offset_checks(pred, store.config, offsets)
    report.log_pass("plan", t, f"{pred.recovery_path} path, start {pred.start_file}, "
                    f"truncation point {pred.max_phy_offset}")
    writing = not dry_run and out is not None
    if writing:
        repair.check_repairable(store, pred, summaries)
    report.count_reads(store.config, writing)
    warming: threading.Thread | None = None
    if audit_path:      # delta-rs starts up while the audit runs, not at the commit
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
    ap.add_argument("--scan-dir", help="where the scan keeps each commitlog file's records for the "
                                       "run's later passes, removed at its end (about a tenth of "
                                       "the commitlog; default: the system's temporary directory; "
                                       "on a cluster, a directory the driver and every executor see)")
    ap.add_argument("--link", action="store_true",
                    help="hard-link the commitlog files the repaired store keeps whole (all below the "
                         "cut but the last kept file) instead of copying them: fast and no extra disk, "
                         "but the two stores then share those files. The broker never writes into "
                         "them, but anything else that does changes both stores; with --apply the "
                         "backup shares them with the store put in its place. Falls back to a copy "
                         "where a link cannot be made (another filesystem, a remote store)")
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
    if args.link and args.dry_run:
        ap.error("--link places a repaired store's commitlog: it needs --out, not --dry-run")
    if args.broker_version == "both" and (not args.dry_run or args.demo):
        ap.error("--broker-version both is a what-if: it needs --dry-run")
    return args


@reports_store_errors()
def main(argv: list[str] | None = None) -> int:
    from jobs.sparkutil import configure_logging, get_spark

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

        reports = recover_both(spark, args.store, args.broker_config, args.audit_path, args.commitlog_gone)
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
    report = recover(spark, args.store, args.out, args.broker_config, args.broker_version,
                     args.dry_run, args.overwrite, args.backup if args.apply else None,
                     args.audit_path, args.keep_consumer_offsets, args.commitlog_gone, args.scan_dir,
                     args.link, args.salvage)
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
