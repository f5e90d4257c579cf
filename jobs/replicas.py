"""Compare a master's commitlog with its slaves' copies: can a slave be promoted without losing messages?

    spark-submit jobs/replicas.py --master STORE --slave STORE [--slave STORE ...] --audit-path URI
                                  [--broker-config FILE] [--range-size 1MiB]
    python -m jobs.replicas ...           (embedded local Spark, settings from spark-conf/local.conf)
    python -m jobs.replicas --member STORE=BROKER_CONF --member ... [--group-size N] [--json]
                 (a DLedger group's members: no Spark, printed; store_reader.broker.dledgerreplicas)
    spark-submit --properties-file spark-conf/cluster.conf --load-spark-defaults jobs/replicas.py ...
                 (cluster: executors run the archive of scripts/build_env_archive.sh, see
                  spark-conf/cluster.conf.example and docs/remote-stores-and-clusters.md)

Passes (functions the notebooks can call):
  1. open the stores on the driver (read-only; the ``lock`` is never taken) and pair their commitlog
     files (``store_reader.broker.replicas.plan_segments``);
  2. compare every segment pair in its own Spark task (``compare_segment``: range checksums, bytes
     only where they differ, records scanned from the first difference on);
  3. assemble each pair's verdict on the driver (``assemble``): data ends, common prefix, first
     divergent phy offset, records on one side only, queue ranges, consumer offsets at risk;
  4. write ``<audit-path>/replica_findings`` (run id from the inputs: a re-run replaces its rows) and
     print a summary.
Exit codes: 0 every slave in sync, 1 a slave diverged, behind or ahead, 2 could not compare (bad input).
"""
from __future__ import annotations

import datetime as dt
import hashlib
import logging
import os
import sys
import time
from typing import Any, Sequence

import pyarrow.compute as pc

from jobs import console
from jobs._spark import deltasink
from jobs._spark.deltasink import audit_rows, store_id_for, write_run_rows
from jobs._spark.taskerrors import reports_store_errors
from schemas.replicas import REPLICA_FINDINGS
from store_reader import open_store
from store_reader.repair import publish
from store_reader.broker import replicas
from store_reader.formats.checkpoint import lock_status
from store_reader.io.fsutil import hash_tree
from store_reader.formats.recordformat import ScanOptions
from store_reader.store import Store
from store_reader.testing.synthetic import parse_size

log = logging.getLogger("jobs.replicas")
TABLE = "replica_findings"


# -- pass 2 ---------------------------------------------------------------------------------------

def compare_on_spark(spark, master: Store, slaves: Sequence[Store], opts: ScanOptions,
                     range_size: int = replicas.DEFAULT_RANGE_SIZE) -> list[replicas.ReplicaComparison]:
    """One Spark task per segment pair (all slaves in one job); the verdicts are assembled on the
    driver from the tasks' range-encoded results."""
    plans = [replicas.plan_segments(master, s) for s in slaves]
    tasks = [(i, p) for i, plan in enumerate(plans) for p in plan]
    results: list[tuple[int, replicas.SegmentComparison]] = []
    if tasks:
        rdd = spark.sparkContext.parallelize(tasks, len(tasks))
        results = rdd.map(lambda t: (t[0], replicas.compare_segment(t[1], opts, range_size,
                                                                    keep_records=False))).collect()
    return [replicas.assemble(master, slave, [r for i, r in results if i == k], opts, range_size)
            for k, slave in enumerate(slaves)]


# -- pass 4 ---------------------------------------------------------------------------------------

def finding_rows(c: replicas.ReplicaComparison) -> list[dict[str, Any]]:
    """``replica_findings`` rows of one pair (without the run keys), in a stable order."""
    base = {"slave_store": store_id_for(c.slave)}
    rows: list[dict[str, Any]] = [{
        **base, "kind": "pair", "status": c.status,
        "master_min": c.master_min, "master_max": c.master_max,
        "slave_min": c.slave_min, "slave_max": c.slave_max,
        "phy_offset_from": c.first_divergent_offset, "common_prefix_bytes": c.common_prefix_bytes,
        "ahead_bytes": c.ahead_bytes, "master_only_records": c.count(replicas.MASTER_ONLY),
        "slave_only_records": c.count(replicas.SLAVE_ONLY),
        "differing_records": c.count(replicas.CONTENT_DIFFERS), "bytes_read": c.bytes_read,
        "detail": "; ".join(c.notes) or None,
    }]
    for s in c.segments:
        rows.append({
            **base, "kind": "segment", "status": s.status, "segment": s.pair.name,
            "phy_offset_from": s.first_difference, "phy_offset_to": s.divergence,
            "master_max": s.master.data_end, "slave_max": s.slave.data_end,
            "records": sum(v for k, v in s.counts.items() if k != replicas.IDENTICAL),
            "master_only_records": s.counts.get(replicas.MASTER_ONLY),
            "slave_only_records": s.counts.get(replicas.SLAVE_ONLY),
            "differing_records": s.counts.get(replicas.CONTENT_DIFFERS),
            "bytes_read": s.bytes_read, "detail": _segment_detail(s),
        })
    for r in c.runs.to_pylist():
        cq = r["consume_queue"]          # PREPARED/ROLLBACK records: no queue offsets
        rows.append({
            **base, "kind": "records", "status": r["kind"], "side": r["side"], "topic": r["topic"],
            "queue_id": r["queue_id"], "queue_offset_from": r["queue_offset_from"] if cq else None,
            "queue_offset_to": r["queue_offset_to"] if cq else None,
            "phy_offset_from": r["phy_offset_from"],
            "phy_offset_to": r["phy_offset_to"], "records": r["records"],
            "first_store_timestamp": r["first_store_timestamp"],
            "last_store_timestamp": r["last_store_timestamp"],
        })
    for q in c.queues:
        rows.append({**base, "kind": "queue", "status": q.status, "topic": q.topic,
                     "queue_id": q.queue_id, **_ranges(q)})
    for o in c.consumer_offsets:
        rows.append({**base, "kind": "consumer_offset", "status": o.status, "side": o.side,
                     "topic": o.topic, "queue_id": o.queue_id, "consumer_group": o.group,
                     "committed_offset": o.committed_offset, **_ranges(o.queue)})
    return rows


def _ranges(q: replicas.QueueRange) -> dict[str, int]:
    return {"master_min": q.master_min, "master_max": q.master_max, "slave_min": q.slave_min,
            "slave_max": q.slave_max}


def _segment_detail(s: replicas.SegmentComparison) -> str | None:
    if s.status == replicas.IDENTICAL:
        return None
    parts = []
    if s.first_difference is not None:
        parts.append(f"first differing byte at file position {s.first_difference - s.pair.file_start}")
    for which in (replicas.MASTER, replicas.SLAVE):
        side = s.side(which)
        if side.present and side.data_end is not None:
            check = f" ({side.end_check})" if side.end_check else ""
            parts.append(f"{which} records end at phy {side.data_end}: {side.end_reason}{check}")
    return "; ".join(parts)


def run_id_for(master: Store, slaves: Sequence[Store], range_size: int) -> str:
    """Same stores (every file's path, size and mtime) and settings -> same run id."""
    h = hashlib.sha256(f"replicas:{range_size}".encode())
    for role, store in [("master", master)] + sorted((("slave", s) for s in slaves),
                                                     key=lambda p: str(p[1].root)):
        h.update(f"{role} {store_id_for(str(store.root))}\n".encode())
        hash_tree(h, store.inventory.files)
    return h.hexdigest()[:16]


def table_uri(audit_path: str) -> str:
    return deltasink.table_uri(audit_path, TABLE)


def write_findings(audit_path: str, comparisons: Sequence[replicas.ReplicaComparison], run_id: str,
                   master: Store, audited_at: dt.datetime, spark=None) -> int:
    """Replace this run's rows of ``replica_findings``; returns the number of rows written."""
    rows = [r for c in comparisons for r in finding_rows(c)]
    table = audit_rows(REPLICA_FINDINGS, rows, run_id, store_id_for(str(master.root)), audited_at)
    write_run_rows(table_uri(audit_path), table, run_id, spark=spark)
    return table.num_rows


# -- the run ------------------------------------------------------------------------------------

def open_stores(master_path: str, slave_paths: Sequence[str], broker_config: str | None
                ) -> tuple[Store, list[Store]]:
    master = open_store(master_path, broker_config)
    return master, [open_store(p, broker_config) for p in slave_paths]


def live_broker_notes(stores: Sequence[Store]) -> list[str]:
    """A store a running broker holds is still compared (read-only), but the result is a snapshot."""
    out = []
    for s in stores:
        if isinstance(s.root, os.PathLike) and lock_status(s.root).locked:
            out.append(f"{s.root}: a running broker holds this store; the comparison is a snapshot")
    return out


def print_summary(comparisons: Sequence[replicas.ReplicaComparison], run_id: str, seconds: float,
                  table: str | None, out=None) -> None:
    out = out or sys.stdout

    def p(text: str = "") -> None:
        print(text, file=out)

    if comparisons:
        c = comparisons[0]
        p(f"run {run_id}: master {c.master} (phy {c.master_min}..{c.master_max})")
    for c in comparisons:
        verdict = {
            replicas.IN_SYNC: "IN SYNC",
            replicas.SLAVE_BEHIND: f"SLAVE BEHIND by {-c.ahead_bytes} bytes",
            replicas.SLAVE_AHEAD: f"SLAVE AHEAD by {c.ahead_bytes} bytes",
            replicas.DIVERGED: f"DIVERGED at phy {c.first_divergent_offset}",
        }[c.status]
        p(f"  slave {c.slave} (phy {c.slave_min}..{c.slave_max}): {verdict}")
        compared = [s for s in c.segments if s.master.present and s.slave.present]
        p(f"    common prefix    {c.common_prefix_bytes} bytes from phy {c.overlap_start} "
          f"({len(compared)} segments on both sides, "
          f"{sum(s.status != replicas.IDENTICAL for s in compared)} differing)")
        if c.first_difference is not None:
            f = next(s.pair for s in c.segments
                     if s.pair.file_start <= c.first_difference < s.pair.file_start + s.pair.file_size)
            p(f"    first difference phy {c.first_difference} ({f.name} @ byte "
              f"{c.first_difference - f.file_start})")
        for kind, what in ((replicas.MASTER_ONLY, "lost if the slave is promoted"),
                           (replicas.SLAVE_ONLY, "written on the slave only"),
                           (replicas.CONTENT_DIFFERS, "same phy offset, different bytes")):
            n = c.count(kind)
            runs = c.runs.filter(pc.equal(c.runs["kind"], kind)).to_pylist()
            p(f"    {kind:<16} {n} records{' (' + what + ')' if n else ''}")
            for r in runs[:8]:
                where = (f"queue offsets {r['queue_offset_from']}..{r['queue_offset_to']}"
                         if r["consume_queue"] else "no consume queue entries (PREPARED/ROLLBACK)")
                p(f"      {r['side']}: {r['topic']}/{r['queue_id']} {where} (phy "
                  f"{r['phy_offset_from']}..{r['phy_offset_to']}, {r['records']} records)")
            if len(runs) > 8:
                p(f"      ... {len(runs) - 8} more runs")
        differing = [q for q in c.queues if q.status != "same"]
        p(f"    queues           {len(c.queues)}, {len(differing)} with different ranges")
        for q in differing[:8]:
            p(f"      {q.topic}/{q.queue_id}: master {q.master_min}..{q.master_max}, "
              f"slave {q.slave_min}..{q.slave_max}")
        p(f"    consumer offsets {len(c.consumer_offsets)} outside what the other side holds")
        for o in c.consumer_offsets[:8]:
            p(f"      {o.group}@{o.topic}/{o.queue_id} committed {o.committed_offset} on the "
              f"{o.side}: {o.status}")
        for note in c.notes:
            p(f"    note: {note}")
    read = sum(c.bytes_read for c in comparisons)
    p(f"compared in {seconds:.2f}s, {read / 1e9:.3f} GB read"
      + (f"; findings in {table}" if table else ""))



def dledger_group(members: list[str], group_size: int | None, as_json: bool) -> int:
    """The members of one DLedger group compared (``store_reader.broker.dledgerreplicas``): 0 when their
    logs are equal, 1 when they differ."""
    import json

    from store_reader.broker import dledgerreplicas

    read = []
    for spec in members:
        root, conf = spec.split("=", 1)
        store = open_store(root, conf, read_dledger=True)
        read.append(dledgerreplicas.read_member(store.config.dLegerSelfId, store))
    c = dledgerreplicas.compare_group(read, group_size)
    if as_json:
        print(json.dumps(c.as_dict(), indent=2))
    else:
        for m in c.members:
            print(f"{m.name}: entries {m.begin}..{m.end}, last term {m.rec.ledger_end_term}, committed "
                  f"index {m.rec.committed_index}, {len(c.only_on[m.name])} entries no other member holds")
        for (a, b), i in c.divergence.items():
            print(f"  {a} / {b}: " + ("equal" if i is None else f"diverge at index {i}"))
        print(f"can win an election (of {c.group_size}): {', '.join(c.candidates) or 'none'}")
        for leader, ts in c.truncations.items():
            for t in ts:
                what = (f"truncated at {t.truncate_index}, drops {len(t.dropped)} entries "
                        f"({t.dropped[0]}..{t.dropped[-1]})" if t.dropped else "nothing dropped")
                print(f"  if {leader} leads: {t.follower} {what}, appended from {t.appended_from}")
    return 0 if all(i is None for i in c.divergence.values()) else 1


@reports_store_errors("could not compare: ")
def main(argv: list[str] | None = None) -> int:
    from jobs._spark.sparkutil import configure_logging, get_spark

    configure_logging()
    ap = console.parser("jobs.replicas", __doc__, "0 every slave in sync, 1 a slave diverged, behind or ahead, "
                        "2 could not compare (bad input)",
                        "python -m jobs.replicas --master /data/master/store --slave /data/slave/store "
                        "--audit-path /data/audit", "docs/audit-and-tables.md")
    ap.add_argument("--master", help="the master's store root")
    ap.add_argument("--slave", action="append", help="a slave's store root (repeatable)")
    ap.add_argument("--audit-path", help="root of the Delta audit tables (replica_findings is written under it)")
    ap.add_argument("--broker-config", help="broker.conf (mappedFileSizeCommitLog, CRC check, ...)")
    ap.add_argument("--range-size", default="1MiB", help="bytes per checksummed range (default 1MiB)")
    ap.add_argument("--member", action="append", metavar="STORE=BROKER_CONF",
                    help="a DLedger group's member: its store root and its broker.conf (its dLegerSelfId); "
                         "repeatable, instead of --master/--slave (no Spark, no table: printed)")
    ap.add_argument("--group-size", type=int, help="DLedger: the peers in dLegerPeers (default: the members given)")
    ap.add_argument("--json", action="store_true", help="DLedger: print the comparison as JSON")
    args = ap.parse_args(argv)
    if args.member:
        if args.master or args.slave or len(args.member) < 2 or any("=" not in m for m in args.member):
            ap.error("--member STORE=BROKER_CONF at least twice, without --master/--slave")
        return dledger_group(args.member, args.group_size, args.json)
    if not (args.master and args.slave and args.audit_path):
        ap.error("--master, --slave and --audit-path are required (or --member for a DLedger group)")
    range_size = parse_size(args.range_size)
    if range_size <= 0:
        ap.error("--range-size must be positive")

    audited_at = dt.datetime.now(dt.timezone.utc)
    master, slaves = open_stores(args.master, args.slave, args.broker_config)
    for store in (master, *slaves):
        publish.check_outside_store(store.root, args.audit_path, "audit path")
    run_id = run_id_for(master, slaves, range_size)
    for note in live_broker_notes([master, *slaves]):
        log.warning("%s", note)
    spark = get_spark("rocketmq-replicas", session=False)
    t = time.monotonic()
    comparisons = compare_on_spark(spark, master, slaves, master.scan_options(), range_size)
    seconds = time.monotonic() - t
    rows = write_findings(args.audit_path, comparisons, run_id, master, audited_at, spark)
    log.info("wrote %d rows of run %s to %s", rows, run_id, table_uri(args.audit_path))
    print_summary(comparisons, run_id, seconds, table_uri(args.audit_path))
    return 0 if all(c.in_sync for c in comparisons) else 1


if __name__ == "__main__":
    sys.exit(main())
