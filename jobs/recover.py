"""Broker-exact recovery of a RocketMQ store into a new, repaired store.

    spark-submit jobs/recover.py --store DIR --out DIR [--broker-config FILE]
                                 [--broker-version 4.9|5.3|5.4|5.5|5.x|both|all|V,V..] [--dry-run] [--overwrite]
                                 [--apply --backup DIR] [--audit-path URI]
                                 [--keep-consumer-offsets] [--commitlog-gone] [--link] [--salvage]
                                 [--json]
    python -m jobs.recover ...            (embedded local Spark, settings from spark-conf/local.conf)
    python -m jobs.recover --demo DIR     (a sample store with a simulated crash, made and recovered)
    python -m jobs.recover --store DIR --dry-run --broker-version both|all|5.3,5.5 [--json]
                                          (what-if: the 4.9 and 5.x predictions side by side)

Passes (each a function the notebooks can call):
  1. discover the store, refuse a store a live broker holds (its ``lock``) or one without commitlog
     files (unless ``--commitlog-gone``: ``checks.check_recoverable``); check every output target
     and lock the output (``publish.claim_outputs``), before any work;
  1b. the answer first (logged as pass ``predict``): the broker's restart predicted on the driver
     from the files it reads (``store_reader.broker.bounded``), before any file is walked whole;
  2. scan segments in parallel, one Spark task per commitlog file, each walked once
     (``store_reader.repair.scanned``): its summary, and its records kept (Arrow, under ``--scan-dir``)
     for every later pass, none of which reads a segment again;
  3. decide on the driver what the broker would do (``store_reader.broker.prediction.predict``; its replay
     reads the kept records); passes 4-7 start as soon as it knows the cut, while its replay runs;
  4-7. the repaired store (``jobs.repairwrite``): consume queues (4) and index files (5) rebuilt
     from every record below the cut, the commitlog placed, with ``--salvage`` the lost records
     re-appended, the checkpoint, config and manifest (7), into a temporary directory of the run's
     own; side by side, the audit (6: what is inconsistent and what the broker's own restart would
     lose or rewind, the findings ``jobs/audit.py`` reports); once both succeeded, the repaired
     store renamed into place under the output's lock; ``--apply`` then swaps it into the input
     store's place, the input kept at ``--backup``, through a journal the same command run again
     after a kill finishes (``store_reader.repair.apply``);
  8. with ``--audit-path``, the findings and this run (what it changed: ``runs.repaired_store``)
     to the Delta audit tables, keyed by the run id (a re-run replaces its rows).
``--dry-run`` alone is bounded: passes 2-3 on the driver over the files the broker's restart reads
(``store_reader.broker.bounded``, docs/spec/recovery.md §17), no Spark and no audit; with ``--audit-path``,
``--report`` or a what-if it runs every pass but the writing.
A store the broker refuses to start on (a file of the wrong size, a stray entry in ``commitlog/``,
5.3.3's correctMinOffset throw) still gets a repaired store it starts on: the refusal is printed
(and a ``warning:`` line on stderr), the repaired store follows the broker's recovery of the store
without what it refuses (``prediction.Prediction``), the entries left out are listed.
Exit codes: 0 done, 2 could not recover (bad input, disk full, an output another run holds),
with one ``error:`` line on stderr.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import os
import sys
import threading
import time
from pathlib import Path

from store_reader.repair import apply, checks, publish, scanned
from store_reader.repair import dledger as dledger_repair
from store_reader.broker import dledgercommitlog
from store_reader.broker import bounded, prediction, versions as broker_versions
from store_reader import open_store
from store_reader.audit import offsets
from store_reader.audit import state as audit_state
from store_reader.exceptions import UnsupportedStoreError
from store_reader.store import Store
from jobs import audittables, console, htmlreport
from jobs import salvage as salvage_job
from jobs import whatif
from jobs._spark.deltasink import store_id_for
from jobs.recoverreport import RunReport, prediction_summary, print_report
from jobs.auditwrite import StartedWrite, abandon_write, audit_and_write, start_write
from jobs._spark.scan import SCAN_DIR_HELP, records_dir, scan_once
from jobs._spark.taskerrors import reports_store_errors

log = logging.getLogger("jobs.recover")


def recover(spark, store_path: str, out: str | None, broker_config: str | None = None,
            broker_version: str | None = None, dry_run: bool = False, overwrite: bool = False,
            backup: str | None = None, audit_path: str | None = None,
            keep_consumer_offsets: bool = False, commitlog_gone: bool = False,
            scan_dir: str | None = None, link_commitlog: bool = False, salvage: bool = False,
            bounded_run: bool = False) -> RunReport:
    """The whole run (passes 1-7); ``dry_run`` writes no repaired store (audit rows still go to
    ``audit_path`` when given). The repaired store's committed consumer offsets are moved where
    the consumers' next pull on it would move them, unless ``keep_consumer_offsets``. A store
    without commitlog files is refused unless ``commitlog_gone`` (the operator says it is really
    gone, not on a volume that is not mounted). ``scan_dir``: where the scan keeps the segments'
    records for the run (default: the system's temporary directory). ``link_commitlog``: the
    repaired store hard-links the commitlog files it keeps whole instead of copying them
    (``placement.linkable``). ``bounded_run`` (with ``dry_run``): the prediction alone, reading only
    what the broker's restart reads (``store_reader.broker.bounded``), on the driver: no Spark, no audit."""
    started = time.monotonic()
    # absolute: Spark tasks write under it, whatever their working directory
    out, backup = (p if p is None or publish.is_uri(p) else os.path.abspath(p) for p in (out, backup))
    store = open_store(store_path, broker_config, read_dledger=True)
    if store.dledger is not None and not dry_run and out is not None:
        dledger_repair.check_repairable(store, salvage)
    if not dry_run and out is not None and store.inventory.offsets_in == "rocksdb" and not keep_consumer_offsets:
        raise UnsupportedStoreError(
            "committed consumer offsets kept in RocksDB (storeType=defaultRocksDB): this project reads "
            "them but does not rewrite them; pass --keep-consumer-offsets (the broker moves an offset "
            "past its queue's end at the consumer's next pull)", os.path.join(store.root, "config", "consumerOffsets"))
    checks.check_recoverable(store, commitlog_gone, replacing=backup is not None)
    with publish.claim_outputs(store.root, None if dry_run else out, overwrite,
                               backup if not dry_run else None, audit_path,
                               lambda done: log.info("output: %s", done), scan_dir):
        audited_at = dt.datetime.now(dt.timezone.utc)
        version = broker_versions.resolve_version(broker_version or store.broker_version())
        mode = "dry_run" if dry_run or out is None else "apply" if backup is not None else "write"
        run_id = audit_state.run_id("recover", store, version, mode)
        log.info("pass %-22s %7.2fs  %d commitlog files, version %s, abort=%s", "discover",
                 time.monotonic() - started, len(store.commitlog_files), version, store.abort_exists)
        # pass 2 on Spark (a task per commitlog file, each walked once), pass 3 the broker's predicted
        # recovery on the driver, its replay reading the records the scan kept
        with records_dir(run_id, scan_dir) as kept:
            if bounded_run and dry_run:
                return _recover_bounded(store, version, run_id, keep_consumer_offsets, kept, count_offsets=True)
            if not dry_run and store.dledger is None:   # the answer first, from the files the broker's restart reads
                _recover_bounded(store, version, run_id, keep_consumer_offsets, None, "predict")
            return _recover_scanned(spark, store, out, version, mode, run_id, dry_run, overwrite, backup,
                                    audit_path, keep_consumer_offsets, started, audited_at, kept,
                                    link_commitlog, salvage)


def _recover_scanned(spark, store: Store, out: str | None, version: str, mode: str, run_id: str,
                     dry_run: bool, overwrite: bool, backup: str | None, audit_path: str | None,
                     keep_consumer_offsets: bool, started: float, audited_at, kept: str,
                     link_commitlog: bool = False, salvage: bool = False) -> RunReport:
    t = time.monotonic()
    opts = store.scan_options(broker_5x=broker_versions.is_5x(version), index_tags=broker_versions.index_tag_keys(version))
    writing = not dry_run and out is not None
    scan = scan_once(spark, store, opts, kept, digests=writing)
    summaries = scan.summaries
    scan_done = time.monotonic()
    replayed = threading.Event()
    report: RunReport | None = None
    write: StartedWrite | None = None

    def cut_known(pred: prediction.Prediction) -> None:
        # the repaired store is started as soon as the cut is known, while the broker's replay
        # (most of the plan) runs on: what it reads of the replay waits for ``replayed``
        nonlocal report, write
        report = RunReport(run_id, str(store.root), out, version, pred, summaries,
                           keep_consumer_offsets=keep_consumer_offsets, link_commitlog=link_commitlog,
                           records=scan.records, scan_dir=kept, scans=dict(scan.scans), digests=scan.digests,
                           salvage=salvage and writing)
        report.left_out, report.resized = store.left_out, checks.resized_commitlog_files(store)
        report.store_modes = store.inventory.modes_text()
        report.log_pass("scan", t, f"{sum(s.records for s in summaries)} records", ended=scan_done)
        if writing:
            checks.check_repairable(store, pred, summaries, salvage)
            write = start_write(spark, report, store, Path(out), replayed)

    try:
        if store.dledger is not None:      # DLedger's recovery first, then the broker's (R§16)
            pred = dledgercommitlog.predict(store, version, scratch=kept)
            dledgercommitlog.check_auditable(store, pred)
            if writing and pred.dledger.refused is not None:
                raise UnsupportedStoreError(f"{pred.dledger.refused}: no repaired store", str(store.dledger))
            cut_known(pred)
        else:
            pred = prediction.predict(store, version, summaries=summaries,
                                    records=scanned.prefix_source(scan.records, opts),
                                    puts=scanned.prefix_puts(scan.records), on_cut=cut_known, scratch=kept)
        replayed.set()
        report.log_pass("plan", scan_done, f"{pred.recovery_path} path, start {pred.start_file}, "
                        f"truncation point {pred.max_phy_offset}")
        report.count_reads(store.config, writing)
        early = audittables.EarlyWrites(audit_path, run_id, store_id_for(str(store.root)), audited_at, spark) \
            if audit_path else None
    except BaseException:
        if write is not None:
            abandon_write(spark, write)
        raise
    audit_and_write(spark, store, report, Path(out) if writing else None, overwrite,
                    on_lost=early.lost if early else None, write=write)
    if writing:
        if backup is not None:
            apply.apply_repaired(store.root, Path(out), Path(backup))
            report.applied_backup = backup
    if audit_path:
        t = time.monotonic()
        store_id = store_id_for(str(store.root))
        tables = audittables.run_tables("recover", mode, store, pred, summaries, summaries, report.findings,
                                        started, report.passes,
                                        str(Path(out).resolve()) if report.written else None,
                                        run_id, store_id, audited_at)
        if report.salvaged is not None:
            tables["salvaged_messages"] = salvage_job.audit_rows(report.salvaged, run_id, store_id, audited_at)
        report.audit_tables = audittables.write_audit(audit_path, tables, run_id, spark, early)
        report.log_pass("write audit tables", t, audit_path)
    return report


def _recover_bounded(store: Store, version: str, run_id: str, keep_consumer_offsets: bool,
                     scratch: str | None, name: str = "plan", count_offsets: bool = False) -> RunReport:
    """A bounded dry run: the broker's predicted recovery from the files its restart reads, on the
    driver (``store_reader.broker.bounded``; the replay's index files in ``scratch``, default a temporary
    directory), logged as pass ``name``; ``count_offsets``: and what it does to the committed
    consumer offsets (the lost records' queue offsets read from the files past the cut)."""
    t = time.monotonic()
    pred, segments = bounded.predict(store, version, scratch=scratch)
    report = RunReport(run_id, str(store.root), None, version, pred, segments.summaries,
                       keep_consumer_offsets=keep_consumer_offsets, scan_dir=scratch)
    report.left_out, report.resized = store.left_out, checks.resized_commitlog_files(store)
    report.store_modes = store.inventory.modes_text()
    walked = sum(s.walked for s in segments.summaries)
    lost = sum(s.records_after_cut for s in segments.summaries if s.file_start + s.file_size > pred.max_phy_offset)
    report.log_pass(name, t, f"{pred.recovery_path} path, start {pred.start_file}, truncation point "
                    f"{pred.max_phy_offset}, {len(pred.deleted_commitlog_files)} files deleted, {lost} intact "
                    f"records lost behind a bad one; {walked} of {len(segments.summaries)} commitlog files walked")
    if count_offsets and pred.load_result:
        t = time.monotonic()
        report.offset_rows = offsets.predicted_findings(store, pred, segments.summaries, segments.opts)
        report.log_pass("consumer offsets", t, offsets.short(report.offset_facts))
    return report


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = console.parser("jobs.recover", __doc__, "0 done (a repaired store written, or the dry run printed); "
                        "2 could not recover (bad input, disk full, an output another run holds), with one "
                        "error: line on stderr",
                        "python -m jobs.recover --store /data/store --broker-config broker.conf --dry-run",
                        "docs/recovery.md")
    which = ap.add_mutually_exclusive_group(required=True)
    which.add_argument("--store", help="store root (storePathRootDir); required, or --demo")
    which.add_argument("--demo", metavar="DIR",
                       help="make a sample store with a simulated crash in DIR and recover it")
    ap.add_argument("--out", help="directory for the repaired store (must not exist)")
    ap.add_argument("--broker-config", help="the broker's broker.conf (sizes, CRC check, ...)")
    ap.add_argument("--broker-version", type=whatif.version_arg,
                    help=whatif.VERSION_HELP + " (with --dry-run)" + whatif.WHATIF_HELP)
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
    ap.add_argument("--scan-dir", help=SCAN_DIR_HELP)
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
    ap.add_argument("--report", metavar="FILE.html",
                    help="write the run as one self-contained HTML page (no network, figures inline) to "
                         "FILE.html, e.g. beside the repaired store (--demo: DIR/report.html)")
    ap.add_argument("--json", action="store_true", help="print the prediction as JSON")
    args = ap.parse_args(argv)
    if args.apply and not args.backup:
        ap.error("--apply needs --backup DIR: the input store is only replaced once it is kept")
    if args.apply and args.dry_run:
        ap.error("--apply and --dry-run exclude each other")
    if not args.dry_run and not args.demo and not args.out:
        ap.error("--out is required unless --dry-run")
    if args.link and args.dry_run:
        ap.error("--link places a repaired store's commitlog: it needs --out, not --dry-run")
    if broker_versions.is_whatif(args.broker_version) and (not args.dry_run or args.demo):
        ap.error(f"--broker-version {args.broker_version} is a what-if: it needs --dry-run")
    if broker_versions.is_whatif(args.broker_version) and args.report:
        ap.error(f"--report pages one version's run: not with --broker-version {args.broker_version}")
    return args


def _dledger_dry_run(args: argparse.Namespace) -> bool:
    """A DLedger store's dry run (R§16): DLedger's recovery and the broker's restart printed,
    no Spark; False for any other store."""
    from store_reader.dump import dledger as dledgerreport
    from store_reader.formats import inventory

    store = open_store(args.store, args.broker_config, read_dledger=True)
    if store.dledger is None or not store.inventory.has(inventory.DLEDGER):
        return False
    out = list(dledgerreport.lines(store, dledgerreport.versions_for(store, args.broker_version)))
    if args.json:
        print(json.dumps([obj() for _, obj in out], indent=2))
    else:
        print(f"DLedger store {store.root} (dry run; --out writes the repaired store)")
        for text, _ in out:
            print(text)
    return True


@reports_store_errors()
def main(argv: list[str] | None = None) -> int:
    from jobs._spark.sparkutil import configure_logging, get_spark

    configure_logging()
    args = parse_args(argv)

    if args.demo:
        from jobs.demo import make_demo_store

        args.store, args.broker_config, args.out = make_demo_store(args.demo)
        args.overwrite = True
        args.audit_path = args.audit_path or os.path.join(args.demo, "audit")
        args.report = args.report or os.path.join(args.demo, "report.html")
    if args.apply:
        # an --apply a kill interrupted on this store: finished (or rolled back) first; the same
        # command run again has nothing else to do once it is finished
        finished = apply.finish(Path(args.store))
        if finished is not None:
            print("\n".join(finished.lines))
            if finished.completed and finished.same_command(args.out, args.backup):
                return 0
    if args.dry_run and _dledger_dry_run(args):
        return 0
    spark = get_spark("rocketmq-recover", session=False)
    if broker_versions.is_whatif(args.broker_version):
        # a scan and an audit per version: their record checks differ
        versions = broker_versions.versions_of(args.broker_version)
        reports = [recover(spark, args.store, None, args.broker_config, v, dry_run=True,
                           audit_path=args.audit_path, commitlog_gone=args.commitlog_gone)
                   for v in versions]
        whatif.print_both(reports[0].store, [whatif.Side(v, r.prediction, r.summaries, r.findings)
                                             for v, r in zip(versions, reports)], args.json, sys.stdout)
        refused = [r for r in reports if not r.prediction.load_result]
        if refused:
            print(f"error: broker {refused[0].broker_version} would refuse to load this store: "
                  f"{refused[0].prediction.load_problems[0]}", file=sys.stderr)
            return 2
        return 0
    page = args.report
    if page:
        htmlreport.check_target(page, args.store)
    report = recover(spark, args.store, args.out, args.broker_config, args.broker_version,
                     args.dry_run, args.overwrite, args.backup if args.apply else None,
                     args.audit_path, args.keep_consumer_offsets, args.commitlog_gone, args.scan_dir,
                     args.link, args.salvage, bounded_run=not (args.audit_path or page))
    if page:
        report.html_report = htmlreport.write(page, htmlreport.recover_page(report, args.broker_config))
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
