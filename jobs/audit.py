"""Scheduled, read-only consistency audit of a RocketMQ store into Delta audit tables.

    spark-submit jobs/audit.py --store DIR --audit-path URI [--broker-config FILE]
                               [--broker-version 4.9|5.3|5.4|5.5|5.x|both|all|V,V..] [--since-last] [--json]
    python -m jobs.audit ...              (embedded local Spark, settings from spark-conf/local.conf)
    spark-submit --properties-file spark-conf/cluster.conf --load-spark-defaults jobs/audit.py ...
                 (cluster: executors run the archive of scripts/build_env_archive.sh, see
                  spark-conf/cluster.conf.example and docs/remote-stores-and-clusters.md)

Reads the store and never writes into it or takes its lock: safe on a live broker's store or on a
snapshot. What a restart of the broker would do is predicted (``store_reader.broker.prediction``), and the
difference to the files as they are, to the commitlog's records and to the consumers' committed
offsets is written to the audit tables (``schemas/audit.py``; ``jobs/findings.py`` for the kinds).

``--since-last`` reads the records only from the first segment that is new or changed since the
last run for this store, or that holds records in a flush window at risk, to the end; the other
segments' scan summaries come from the ``segments`` table (``store_reader.audit.state``). Findings
that need the records are then judged inside the scanned range only (``runs.scan_phy_from``); the
rest (consume queues vs the broker's recovery, index files, consumer offsets, the store's other
files) are judged in full every run.

``--broker-version both`` (``all``, ``5.3,5.5`` ..) audits the store as each version and prints them side by side
(``jobs/whatif.py``); ``--json`` prints everything (predictions, consumer offsets, findings).

Exit codes: 0 clean (both versions, with both), 1 findings, 2 could not audit (unreadable or
unsupported store).
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import logging
import sys
import time
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from jobs import audittables, console, htmlreport
from jobs import findings as fnd
from jobs import whatif
from jobs._spark.deltasink import read_table, store_id_for, table_uri
from jobs._spark.scan import SCAN_DIR_HELP, records_dir, scan_once
from jobs._spark.taskerrors import reports_store_errors
from store_reader.broker import dledgercommitlog
from store_reader import open_store
from store_reader.repair import publish
from store_reader.broker import prediction as broker_prediction, versions as broker_versions
from store_reader.repair import scanned as scanned_records
from store_reader.audit import offsets
from store_reader.audit import state as audit_state
from store_reader.formats.commitlog import SegmentSummary
from store_reader.exceptions import StoreReaderError, UnsupportedStoreError
from store_reader.store import Store

log = logging.getLogger("jobs.audit")


@dataclass
class AuditRun:
    """One audit: the prediction, the findings and the rows written."""

    run_id: str
    store_id: str
    audited_at: dt.datetime
    prediction: broker_prediction.Prediction
    summaries: list[SegmentSummary]
    scanned: list[str]
    findings: fnd.Findings
    tables: dict[str, pa.Table] = field(default_factory=dict)
    written: list[str] = field(default_factory=list)

    @property
    def status(self) -> str:
        return fnd.run_status(self.prediction, self.summaries, self.findings)

    @property
    def bad_segments(self) -> list[SegmentSummary]:
        return fnd.bad_segments(self.summaries)


def previous_segments(audit_path: str, store_id: str, spark=None) -> dict[str, dict]:
    """The segments rows of the latest earlier run for ``store_id`` (empty when there is none),
    read through ``spark`` (``deltasink.read_table``)."""
    from deltalake.exceptions import TableNotFoundError

    try:
        t = read_table(table_uri(audit_path, "segments"), spark=spark)
    except TableNotFoundError:
        return {}
    return audit_state.last_run_segments(t, store_id)


def plan_scan(store: Store, audit_path: str, store_id: str, since_last: bool, spark=None
              ) -> tuple[list, dict[str, SegmentSummary]]:
    """(commitlog files to scan, summaries carried over from the last run: ``audit.state``'s
    ``unchanged_segments``)."""
    files = list(store.commitlog_files)
    if not since_last:
        return files, {}
    prev = previous_segments(audit_path, store_id, spark)
    first = audit_state.unchanged_segments(store, prev)
    carried = {f.name: dataclasses.replace(audittables.summary_from_row(prev[f.name]), path=f.path)
               for f in files[:first]}
    return files[first:], carried


def run_audit(spark, store_path: str, audit_path: str | None, broker_config: str | None = None,
              broker_version: str | None = None, since_last: bool = False, scan_dir: str | None = None
              ) -> AuditRun:
    """The whole audit: discover, scan (new segments only with ``since_last``), predict, find,
    write the tables (when ``audit_path``). ``scan_dir``: where the run keeps its scan
    (``jobs._spark.scan.records_dir``)."""
    started = time.monotonic()
    audited_at = dt.datetime.now(dt.timezone.utc)
    store = open_store(store_path, broker_config, read_dledger=True)
    version = broker_versions.resolve_version(broker_version or store.broker_version())
    store_id = store_id_for(str(store.root))
    if since_last and store.dledger is not None:
        # its record findings, judged inside the scanned range, differ from a full run's
        raise UnsupportedStoreError("--since-last on a DLedger store: not the same findings as a full "
                                    "run; audit it without --since-last", str(store.dledger))
    if since_last and not audit_path:
        raise StoreReaderError("--since-last needs --audit-path (the state lives in its tables)", store_path)
    for target, what in ((audit_path, "audit path"), (scan_dir, "scan dir")):
        if target:
            publish.check_outside_store(store.root, target, what)
    if audit_path:
        publish.check_writable(audit_path, "audit path")     # before the scan, not after it
    to_scan, carried = plan_scan(store, audit_path or "", store_id, since_last, spark)
    run_id = audit_state.run_id("audit", store, version, "since_last" if since_last else "full")
    with records_dir(run_id, scan_dir) as kept:
        passes = []
        t = time.monotonic()
        opts = store.scan_options(broker_5x=broker_versions.is_5x(version), index_tags=broker_versions.index_tag_keys(version))
        scan = scan_once(spark, store, opts, kept, [f.path for f in to_scan])
        scanned = scan.summaries
        by_name = {s.segment: s for s in scanned}
        summaries = [by_name.get(f.name) or carried[f.name] for f in store.commitlog_files]
        if store.dledger is not None:      # DLedger's recovery first, then the broker's (R§16)
            pred = dledgercommitlog.predict(store, version, scratch=kept)
            dledgercommitlog.check_auditable(store, pred)
        else:
            pred = broker_prediction.predict(store, version, summaries=summaries,
                                    records=scanned_records.prefix_source(scan.records, opts),
                                    puts=scanned_records.prefix_puts(scan.records), scratch=kept)
        passes.append(("scan + plan", time.monotonic() - t, ""))
        log.info("pass %-22s %7.2fs  %d of %d segments scanned, truncation point %d", "scan + plan",
                 passes[-1][1], len(scanned), len(summaries), pred.max_phy_offset)
        t = time.monotonic()
        early = audittables.EarlyWrites(audit_path, run_id, store_id, audited_at, spark) if audit_path else None
        f = fnd.audit(spark, store, pred, summaries, scan=[by_name[f.name] for f in to_scan], records=scan.records,
                      work_dir=kept, on_lost=early.lost if early else None)
        passes.append(("findings", time.monotonic() - t, ""))
    log.info("pass %-22s %7.2fs", "findings", passes[-1][1])
    run = AuditRun(run_id, store_id, audited_at, pred, summaries, [s.segment for s in scanned], f)
    run.tables = audittables.run_tables("audit", "since_last" if since_last else "full", store, pred,
                                        summaries, scanned, f, started, passes, None, run.run_id, store_id,
                                        audited_at)
    if audit_path:
        t = time.monotonic()
        run.written = audittables.write_audit(audit_path, run.tables, run.run_id, spark, early)
        log.info("pass %-22s %7.2fs  %s", "write audit tables", time.monotonic() - t, audit_path)
    return run


def print_audit(run: AuditRun, audit_path: str | None, out=None) -> None:
    out = out or sys.stdout
    pred = run.prediction
    print(f"audit {run.run_id}: store {run.store_id} (broker {pred.broker_version}) -> {run.status.upper()}",
          file=out)
    if "runs" in run.tables:
        print(f"  store modes        {run.tables['runs']['store_modes'][0].as_py()}", file=out)
    print(f"  segments           {len(run.summaries)}, {len(run.scanned)} scanned this run", file=out)
    if not pred.load_result:
        print("  the broker would REFUSE to load this store:", file=out)
        for p in pred.load_problems:
            print(f"    - {p}", file=out)
    else:
        print(f"  a restart now      {pred.recovery_path} recovery from {pred.start_file}, commitlog ends at "
              f"phy {pred.max_phy_offset}", file=out)
        for s in run.bad_segments:
            print(f"  {s.end_reason:<18} {s.path} @ byte {s.valid_bytes} ({s.end_check}); "
                  f"{s.records_after_cut} intact records behind it", file=out)
        fnd.print_summary(run.findings, out)
        for i, line in enumerate(offsets.describe(offsets.offset_facts(
                run.findings.tables.get("consumer_offset_findings")))):
            print(f"  {'consumer offsets' if i == 0 else '':<18} {line}", file=out)
    if run.written:
        print(f"  audit tables       {audit_path} ({', '.join(sorted(run.tables))})", file=out)


def history(audit_path: str, store_id: str) -> list[dict]:
    """Queue and index findings of a store across its runs: per (table, kind, topic, queue id /
    index lens), the runs that reported it and ``resolved_in``, the first later run that did not
    (None while it is still reported)."""
    runs = read_table(table_uri(audit_path, "runs"))
    runs = runs.filter(pc.equal(runs["store_id"], store_id_for(store_id))).sort_by("audited_at")
    order = runs["run_id"].to_pylist()
    out = []
    for table, key in (("queue_findings", ("kind", "topic", "queue_id")), ("index_findings", ("kind", "index"))):
        t = read_table(table_uri(audit_path, table))
        t = t.filter(pc.equal(t["store_id"], store_id_for(store_id)))
        seen: dict[tuple, set[str]] = {}
        for r in t.select(["run_id", *key]).to_pylist():
            seen.setdefault(tuple(r[k] for k in key), set()).add(r["run_id"])
        for k, in_runs in sorted(seen.items(), key=lambda kv: str(kv[0])):
            last = max(order.index(r) for r in in_runs if r in order)
            resolved = next((r for r in order[last + 1:]), None)
            out.append({"table": table, **dict(zip(key, k)), "first_seen": order[min(order.index(r) for r in in_runs)],
                        "last_seen": order[last], "resolved_in": resolved})
    return out


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = console.parser("jobs.audit", __doc__, "0 clean, 1 findings (an operator should look), 2 could not "
                        "audit (unreadable or unsupported store), with one error: line on stderr",
                        "python -m jobs.audit --store /data/store --broker-config broker.conf --audit-path /data/audit",
                        "docs/audit-and-tables.md")
    ap.add_argument("--store", required=True, help="store root (storePathRootDir); never written")
    ap.add_argument("--audit-path", help="directory or URI of the Delta audit tables")
    ap.add_argument("--broker-config", help="the broker's broker.conf (sizes, CRC check, ...)")
    ap.add_argument("--broker-version", type=whatif.version_arg,
                    help=whatif.VERSION_HELP + whatif.WHATIF_HELP)
    ap.add_argument("--since-last", action="store_true",
                    help="scan only segments new or changed since the last audit of this store")
    ap.add_argument("--json", action="store_true",
                    help="print the prediction, consumer offsets and findings as JSON")
    ap.add_argument("--scan-dir", help=SCAN_DIR_HELP)
    ap.add_argument("--report", metavar="FILE.html",
                    help="write the audit as one self-contained HTML page (no network, figures inline)")
    args = ap.parse_args(argv)
    if broker_versions.is_whatif(args.broker_version) and args.report:
        ap.error(f"--report pages one version's audit: not with --broker-version {args.broker_version}")
    if broker_versions.is_whatif(args.broker_version) and args.since_last:
        # each version's run would carry the other's scan summaries over
        ap.error(f"--since-last audits one version: it cannot be used with --broker-version {args.broker_version}")
    return args


@reports_store_errors("could not audit: ")
def main(argv: list[str] | None = None) -> int:
    from jobs._spark.sparkutil import configure_logging, get_spark

    configure_logging()
    args = parse_args(argv)

    if args.report:
        htmlreport.check_target(args.report, args.store)
    spark = get_spark("rocketmq-audit", session=False)
    several = broker_versions.is_whatif(args.broker_version)
    versions = broker_versions.versions_of(args.broker_version) if several else [args.broker_version]
    runs = [run_audit(spark, args.store, args.audit_path, args.broker_config, v, args.since_last, args.scan_dir)
            for v in versions]
    sides = [whatif.Side(v or r.prediction.broker_version, r.prediction, r.summaries, r.findings)
             for v, r in zip(versions, runs)]
    if several:
        whatif.print_both(runs[0].store_id, sides, args.json, sys.stdout)
    elif args.json:
        print(json.dumps({"store": runs[0].store_id, "versions": {s.version: whatif.side_json(s)
                                                                  for s in sides}}, indent=2))
    else:
        print_audit(runs[0], args.audit_path)
    if args.report:
        page = htmlreport.write(args.report, htmlreport.audit_page(runs[0], args.store, args.broker_config))
        print(f"  report             {page}", file=sys.stderr if args.json else sys.stdout)
    for r in runs:
        for problem in r.prediction.load_problems:
            print(f"warning: the broker ({r.prediction.broker_version}) would not start on this store: "
                  f"{problem} (jobs.recover writes a repaired store it starts on)", file=sys.stderr)
    return 0 if all(r.status == "clean" for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
