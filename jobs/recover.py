"""Broker-exact recovery of a RocketMQ store into a new, repaired store.

    spark-submit jobs/recover.py --store DIR --out DIR [--broker-config FILE]
                                 [--broker-version 4.9|5.x] [--dry-run] [--overwrite]
                                 [--apply --backup DIR] [--audit-path URI]
    python -m jobs.recover ...            (embedded local Spark, settings from spark-conf/local.conf)
    python -m jobs.recover --demo DIR     (a sample store with a simulated crash, made and recovered)

Passes (each a function the notebooks can call):
  1. discover the store, refuse a store a live broker holds (its ``lock``);
  2. scan segments in parallel, one Spark task per commitlog file -> scan summaries;
  3. decide on the driver what the broker would do (``store_reader.recovery.predict``);
  4. rebuild consume queues, one task per (topic, queue id), from every record below the cut;
  5. rebuild index files from the same records;
  6. audit: what is inconsistent and what the broker's own restart would lose or rewind
     (``jobs/findings.py``, the same findings ``jobs/audit.py`` reports);
  7. write the repaired store into a temporary directory and rename it into place;
     ``--apply`` then moves the input store to ``--backup`` and the repaired store into its place;
  8. with ``--audit-path``, the findings and this run (what it changed: ``runs.repaired_store``)
     to the Delta audit tables, keyed by the run id (a re-run replaces its rows).
Exit codes: 0 done, 2 could not recover (bad input, store the broker would refuse, disk full).
"""
from __future__ import annotations

import argparse
import datetime as dt
import errno
import hashlib
import json
import logging
import os
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import pyarrow as pa

from schemas import MESSAGE
from store_reader import open_store, recovery
from store_reader.checkpoint import lock_status
from store_reader.config import read_consumer_offsets
from store_reader.commitlog import SegmentScan, SegmentSummary, summarize_segment
from store_reader.exceptions import StoreReaderError
from store_reader.indexfile import write_index_file
from store_reader.recordformat import ScanOptions
from store_reader.store import Store
from store_reader import repair
from jobs import audit as audit_job
from jobs import findings as fnd
from jobs.deltasink import store_id_for

log = logging.getLogger("jobs.recover")
TMP_MARKER = ".recover-incomplete"


# -- pass 2: scan -----------------------------------------------------------------------------------

def scan_segments(spark, store: Store, opts: ScanOptions, paths: list[str] | None = None
                  ) -> list[SegmentSummary]:
    """One Spark task per commitlog file (all, or ``paths``); the summaries in file order."""
    paths = [f.path for f in store.commitlog_files] if paths is None else paths
    if not paths:
        return []
    rdd = spark.sparkContext.parallelize(paths, len(paths))
    return rdd.map(lambda p: summarize_segment(p, opts)).collect()


def surviving_records(spark, store: Store, end: int, broker_5x: bool):
    """DataFrame of every record below the truncation point ``end`` (``repair.DISPATCH_COLUMNS``),
    one Spark task per commitlog file. Records below the cut passed the broker's checks already,
    so this pass validates headers only (no CRC)."""
    files = [(f.path, f.start) for f in store.commitlog_files if f.start < end]
    cols = repair.DISPATCH_COLUMNS + (["properties"] if store.config.enableMultiDispatch else [])
    schema = MESSAGE.arrow(cols)
    spark_schema = MESSAGE.spark(cols)
    if not files:
        return spark.createDataFrame([], spark_schema)
    opts = ScanOptions(check_crc=False, compute_crc=False, broker_5x=broker_5x,
                       delay_levels_ms=tuple(store.config.delay_levels_ms))

    def scan(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow.compute as pc

        for b in batches:
            for path, start in zip(b.column(0).to_pylist(), b.column(1).to_pylist()):
                for rb in SegmentScan(path, opts, columns=cols + ["phy_offset"]):
                    keep = pc.less(rb.column(rb.schema.get_field_index("phy_offset")), end)
                    yield pa.RecordBatch.from_arrays(
                        [rb.column(rb.schema.get_field_index(c)) for c in schema.names], schema=schema
                    ).filter(keep)

    df = spark.createDataFrame(files, "path string, start long").repartition(len(files))
    return df.mapInArrow(scan, spark_schema)


# -- pass 4: consume queues -----------------------------------------------------------------------------

def rebuild_consume_queues(records_df, out_root: str, config, broker_5x: bool, input_root: str
                           ) -> pa.Table:
    """Write every queue's CQ files under ``out_root/consumequeue``; one task per queue (LMQ
    copies included when ``enableMultiDispatch``). Returns one row per queue: topic, queue_id,
    min/max offset, entries, last store time."""
    cq_file_size = config.cq_file_size
    result_schema = ("topic string, queue_id int, min_offset long, max_offset long, "
                     "entries long, last_store_timestamp long")

    def build(table: pa.Table) -> Iterator[pa.RecordBatch] | pa.Table:
        topic = table["topic"][0].as_py()
        qid = table["queue_id"][0].as_py()
        q = repair.rebuild_queue(topic, qid, table, cq_file_size)
        repair.write_queue_state(q, os.path.join(out_root, "consumequeue", topic, str(qid)),
                                 os.path.join(input_root, "consumequeue", topic, str(qid)))
        return pa.table({"topic": [topic], "queue_id": pa.array([qid], pa.int32()),
                         "min_offset": [q.min_offset], "max_offset": [q.max_offset],
                         "entries": [q.max_offset - q.min_offset],
                         "last_store_timestamp": [max(table["store_timestamp"].to_pylist())]})

    from pyspark.sql import functions as F

    tran = F.col("sys_flag").bitwiseAND(0xC)
    dispatchable = records_df.where(tran.isin(0x0, 0x8))
    if config.enableMultiDispatch:
        arrow_schema = MESSAGE.arrow(dispatchable.columns)
        copies = dispatchable.mapInArrow(
            lambda batches: (repair.multi_dispatch_copies(b.cast(arrow_schema), config, broker_5x)
                             for b in batches), dispatchable.schema)
        dispatchable = dispatchable.unionByName(copies)
    return dispatchable.groupBy("topic", "queue_id").applyInArrow(build, result_schema).toArrow()


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

    def log_pass(self, name: str, started: float, detail: str) -> None:
        secs = time.monotonic() - started
        self.passes.append((name, secs, detail))
        log.info("pass %-22s %7.2fs  %s", name, secs, detail)


def plan(spark, store: Store, version: str) -> tuple[recovery.Prediction, list[SegmentSummary]]:
    """Passes 2-3: scan summaries in parallel, then the broker's predicted recovery."""
    opts = store.scan_options(broker_5x=version == recovery.V5X)
    summaries = scan_segments(spark, store, opts)
    return recovery.predict(store, version, summaries=summaries), summaries


def _check_paths(store_root: Path, out: Path) -> None:
    s, o = store_root.resolve(), out.resolve()
    if o == s or s in o.parents or o in s.parents:
        raise StoreReaderError(f"output {o} must not be the store, inside it or contain it", store_root)


def write_repaired_store(spark, store: Store, report: RunReport, out: Path, overwrite: bool) -> None:
    """Passes 4-6 into ``<out>.tmp-<run id>``, then an atomic rename to ``out``."""
    pred = report.prediction
    version_5x = pred.broker_version == recovery.V5X
    cfg = store.config
    end = pred.max_phy_offset
    tmp = out.parent / f"{out.name}.tmp-{report.run_id}"
    if tmp.exists():                      # left by a killed run of ours: start over
        if not (tmp / TMP_MARKER).exists():
            raise StoreReaderError("temporary output exists and is not ours; remove it", tmp)
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    (tmp / TMP_MARKER).write_text(report.run_id)
    try:
        t = time.monotonic()
        (tmp / "consumequeue").mkdir()
        records = surviving_records(spark, store, end, version_5x).cache()
        queues = rebuild_consume_queues(records, str(tmp), cfg, version_5x, str(store.root))
        report.log_pass("rebuild consume queues", t, f"{queues.num_rows} queues, "
                        f"{sum(queues['entries'].to_pylist())} entries")
        t = time.monotonic()
        rec_table = records.select("stored_phy_offset", "sys_flag", "uniq_key", "key_list", "topic",
                                   "store_timestamp").toArrow()
        records.unpersist()
        files = repair.build_index(repair.index_puts(rec_table), cfg) if cfg.messageIndexEnable else []
        (tmp / "index").mkdir()
        for name, built in files:
            write_index_file(tmp / "index" / name, built)
        report.log_pass("rebuild index", t, f"{len(files)} files, "
                        f"{sum(b.puts for _, b in files)} entries")
        t = time.monotonic()
        (tmp / "commitlog").mkdir()
        kept = 0
        for f in pred.commitlog_files:
            src = next(c.path for c in store.commitlog_files if c.name == f.name)
            repair.copy_commitlog_file(src, str(tmp / "commitlog" / f.name), f.wrote, f.size)
            kept += 1
        last_ts = rec_table["store_timestamp"].to_numpy().max() if rec_table.num_rows else 0
        last_cq_ts = max(queues["last_store_timestamp"].to_pylist(), default=0)
        confirm = next((s.file_start + s.last_record_position for s in reversed(report.summaries)
                        if s.last_record_position is not None and
                        s.file_start + s.last_record_position < end), 0)
        ckpt = repair.repaired_checkpoint(int(last_ts), int(last_cq_ts),
                                          repair.full_index_end_timestamp(files, cfg.maxIndexNum),
                                          confirm, version_5x)
        repair.write_checkpoint_file(tmp, ckpt, version_5x)
        repair.copy_config(store.root, tmp)
        report.log_pass("write commitlog", t, f"{kept} files kept, end at phy {end}, "
                        f"{len(pred.deleted_commitlog_files)} dropped")
        (tmp / TMP_MARKER).unlink()
        repair.write_manifest(str(tmp), manifest(store, report, repair.tree_manifest(str(tmp))))
        _place(tmp, out, overwrite)
        report.written = True
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        if exc.errno == errno.ENOSPC:
            raise StoreReaderError("disk full while writing the repaired store; nothing was left "
                                   "behind", tmp) from None
        raise
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _place(tmp: Path, out: Path, overwrite: bool) -> None:
    if out.exists():
        if not overwrite:
            raise StoreReaderError("output directory exists (use --overwrite)", out)
        if not (out / "MANIFEST.json").exists():
            raise StoreReaderError("output directory exists and is not a repaired store; "
                                   "refusing to replace it", out)
        trash = out.parent / f"{out.name}.old-{tmp.name.rsplit('-', 1)[-1]}"
        os.rename(out, trash)
        os.rename(tmp, out)
        shutil.rmtree(trash)
    else:
        os.rename(tmp, out)


def apply_repaired(store_root: Path, repaired: Path, backup: Path) -> None:
    """Swap the repaired store into the input's place, keeping the input complete at ``backup``.

    Same filesystem: two renames (the input's bytes are never rewritten). Otherwise the input is
    copied to ``backup`` and verified file by file before anything in its place changes.
    """
    if backup.exists():
        raise StoreReaderError("backup directory exists; choose a new one", backup)
    lock = lock_status(store_root)
    if lock.locked:
        raise StoreReaderError(f"a running broker holds the store's lock (pid {lock.pid})", lock.path)
    try:
        os.rename(store_root, backup)
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise
        shutil.copytree(store_root, backup, symlinks=True)
        if repair.tree_manifest(str(store_root)) != repair.tree_manifest(str(backup)):
            shutil.rmtree(backup)
            raise StoreReaderError("backup copy does not match the store; nothing changed", backup)
        shutil.rmtree(store_root)
    try:
        os.rename(repaired, store_root)
    except OSError:
        os.rename(backup, store_root)       # put the input back where it was
        raise


def prediction_summary(pred: recovery.Prediction) -> dict:
    return {
        "brokerVersion": pred.broker_version,
        "loadResult": pred.load_result,
        "loadProblems": pred.load_problems,
        "recoveryPath": pred.recovery_path,
        "startFile": pred.start_file,
        "maxPhyOffset": pred.max_phy_offset,
        "minPhyOffset": pred.min_phy_offset,
        "deletedCommitLogFiles": pred.deleted_commitlog_files,
        "commitLogFiles": [{"name": f.name, "wrotePosition": f.wrote} for f in pred.commitlog_files],
        "topicQueueTable": dict(sorted(pred.topic_queue_table().items())),
        "indexFiles": [{"name": f.name, **f.header.to_dict()} for f in pred.index_files],
    }


def manifest(store: Store, report: RunReport, outputs: list[dict]) -> dict:
    inputs = []
    for dirpath, dirnames, filenames in os.walk(store.root):
        dirnames.sort()
        for name in sorted(filenames):
            p = os.path.join(dirpath, name)
            inputs.append({"path": os.path.relpath(p, store.root), "size": os.path.getsize(p)})
    return {"runId": report.run_id, "store": str(store.root), "brokerConfig": store.config.source,
            "inputs": sorted(inputs, key=lambda e: e["path"]), "outputs": outputs,
            "prediction": prediction_summary(report.prediction)}


def recover(spark, store_path: str, out: str | None, broker_config: str | None = None,
            broker_version: str | None = None, dry_run: bool = False, overwrite: bool = False,
            backup: str | None = None, audit_path: str | None = None) -> RunReport:
    """The whole run (passes 1-7); ``dry_run`` writes no repaired store (audit rows still go to
    ``audit_path`` when given)."""
    t = started = time.monotonic()
    audited_at = dt.datetime.now(dt.timezone.utc)
    store = open_store(store_path, broker_config)
    lock = lock_status(store.root)
    if lock.locked:
        raise StoreReaderError(f"a running broker holds the store's lock (pid {lock.pid}); "
                               "stop it or recover a copy", lock.path)
    if out is not None:
        _check_paths(store.root, Path(out))
        if Path(out).exists() and not overwrite and not dry_run:
            raise StoreReaderError("output directory exists (use --overwrite)", out)
    version = broker_version or (recovery.V5X if store.looks_5x() else recovery.V49)
    mode = "dry_run" if dry_run or out is None else "apply" if backup is not None else "write"
    run_id = audit_job.run_id_for("recover", store, version, mode)
    log.info("pass %-22s %7.2fs  %d commitlog files, version %s, abort=%s", "discover",
             time.monotonic() - t, len(store.commitlog_files), version, store.abort_exists)
    t = time.monotonic()
    pred, summaries = plan(spark, store, version)
    report = RunReport(run_id, str(store.root), out, version, pred, summaries)
    if pred.load_result:
        offsets = read_consumer_offsets(store.root).value
        report.offset_checks = recovery.consumer_offset_checks(pred, store.config, offsets)
    report.log_pass("scan + plan", t, f"{pred.recovery_path} path, start {pred.start_file}, "
                    f"truncation point {pred.max_phy_offset}")
    t = time.monotonic()
    report.findings = fnd.audit(spark, store, pred, summaries)
    report.log_pass("audit", t, ", ".join(f"{v} {k}" for k, v in fnd.alerting_counts(report.findings).items()))
    if pred.load_result and not dry_run and out is not None:
        write_repaired_store(spark, store, report, Path(out), overwrite)
        if backup is not None:
            _check_paths(store.root, Path(backup))
            apply_repaired(store.root, Path(out), Path(backup))
            report.applied_backup = backup
    if audit_path:
        t = time.monotonic()
        counts = fnd.alerting_counts(report.findings)
        status = "refused" if not pred.load_result else \
            "findings" if any(counts.values()) or any(s.end_reason in ("corrupt", "torn_tail")
                                                      for s in summaries) else "clean"
        row = audit_job.run_row("recover", mode, status, pred, summaries, summaries, report.findings,
                                counts, started, report.passes,
                                repaired=str(Path(out).resolve()) if report.written else None)
        store_id = store_id_for(str(store.root))
        mtimes = {s.segment: os.stat(s.path).st_mtime_ns for s in summaries if os.path.exists(s.path)}
        tables = fnd.run_tables(report.findings, row,
                                fnd.segment_rows(summaries, pred, mtimes, {s.segment for s in summaries}),
                                run_id, store_id, audited_at)
        report.audit_tables = fnd.write_audit(audit_path, tables, run_id, spark)
        report.log_pass("write audit tables", t, audit_path)
    return report


def print_report(report: RunReport, out=None) -> None:
    out = out or sys.stdout
    pred = report.prediction
    p = print
    p(f"run {report.run_id}: store {report.store} (broker {report.broker_version})", file=out)
    if not pred.load_result:
        p("the broker would REFUSE to load this store:", file=out)
        for problem in pred.load_problems:
            p(f"  - {problem}", file=out)
        return
    lost = sum(s.records_after_cut for s in report.summaries)
    p(f"  recovery path      {pred.recovery_path} (start file {pred.start_file})", file=out)
    p(f"  truncation point   phy {pred.max_phy_offset} (min {pred.min_phy_offset})", file=out)
    p(f"  commitlog files    {len(pred.commitlog_files)} kept, "
      f"{len(pred.deleted_commitlog_files)} deleted {pred.deleted_commitlog_files}", file=out)
    for s in report.summaries:
        if s.end_reason in ("corrupt", "torn_tail"):
            p(f"  {s.end_reason:<18} {s.path} @ byte {s.valid_bytes} ({s.end_check}); "
              f"{s.records_after_cut} intact records behind it", file=out)
    p(f"  records lost       {lost} intact records behind a bad one", file=out)
    p(f"  consume queues     {len(pred.consume_queues)} after the broker's recovery", file=out)
    moved = [c for c in report.offset_checks if c.status not in ("FOUND", "OFFSET_OVERFLOW_ONE")]
    p(f"  consumer offsets   {len(report.offset_checks)} committed, {len(moved)} the broker would "
      f"move at the next pull", file=out)
    for c in moved[:10]:
        p(f"    {c.group}@{c.topic}/{c.queue_id}: committed {c.committed_offset} -> {c.status}, "
          f"next {c.next_begin_offset} (queue {c.min_offset}..{c.max_offset})", file=out)
    if report.findings is not None:
        p("  audit", file=out)
        fnd.print_summary(report.findings, out)
    if report.audit_tables:
        p(f"  audit tables       {os.path.dirname(report.audit_tables[0])} "
          f"({', '.join(os.path.basename(u) for u in report.audit_tables)})", file=out)
    if report.applied_backup:
        p(f"  applied            repaired store now at {report.store}; input kept at "
          f"{report.applied_backup}", file=out)
    elif report.written:
        p(f"  repaired store     {report.out}", file=out)
    elif report.out:
        p("  dry run: nothing written", file=out)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="jobs.recover", description=__doc__.split("\n")[0])
    ap.add_argument("--store", help="store root (storePathRootDir)")
    ap.add_argument("--out", help="directory for the repaired store (must not exist)")
    ap.add_argument("--broker-config", help="the broker's broker.conf (sizes, CRC check, ...)")
    ap.add_argument("--broker-version", choices=[recovery.V49, recovery.V5X],
                    help="recovery semantics; default: detected from the store")
    ap.add_argument("--dry-run", action="store_true", help="print the plan, write nothing")
    ap.add_argument("--overwrite", action="store_true", help="replace an earlier repaired store")
    ap.add_argument("--apply", action="store_true",
                    help="swap the repaired store into the input's place (needs --backup)")
    ap.add_argument("--backup", help="with --apply: where the input store is kept")
    ap.add_argument("--audit-path", help="directory or URI of the Delta audit tables (findings, "
                                         "what the repair changed); none: printed only")
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
    return args


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    args = parse_args(argv)
    from jobs.sparkutil import get_spark

    if args.demo:
        from jobs.demo import make_demo_store

        args.store, args.broker_config, args.out = make_demo_store(args.demo)
        args.overwrite = True
        args.audit_path = args.audit_path or os.path.join(args.demo, "audit")
    spark = get_spark("rocketmq-recover")
    try:
        report = recover(spark, args.store, args.out, args.broker_config, args.broker_version,
                         args.dry_run, args.overwrite, args.backup if args.apply else None,
                         args.audit_path)
    except StoreReaderError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(prediction_summary(report.prediction), indent=2))
    else:
        print_report(report)
    return 0 if report.prediction.load_result else 2


if __name__ == "__main__":
    sys.exit(main())
