"""Export the intact records a broker's recovery would discard, ready for a producer to send again.

    spark-submit jobs/salvage.py --store DIR --out FILE [--broker-config FILE]
                                 [--broker-version 4.9|5.3|5.4|5.5|5.x] [--format jsonl|parquet] [--overwrite]
    python -m jobs.salvage ...            (embedded local Spark, settings from spark-conf/local.conf)

Reads the store only (local or a URI ``storefs`` reads). Passes:
  1. check the output (a new local file, or ``--overwrite``), before any work;
  2. scan segments, one Spark task per commitlog file, and predict the broker's recovery
     (``jobs._spark.scan.scan_segments``, ``store_reader.broker.prediction.predict``): the truncation point; a
     DLedger store's data files are read through the DLedger framing and its end is DLedger's
     (``dledger_end``, R§16.1);
  3. one Spark task per commitlog file reaching past it: its lost records (``store_reader.repair.salvage``,
     the rule of the audit's ``lost_messages``) into a part file of their own;
  4. the parts joined in commitlog order into a temporary file beside ``--out``, fsync'd and renamed
     into place.
One row per lost record (``schemas/salvage.py``): the topic and queue the producer addressed, keys,
tags, UNIQ_KEY, flag, properties, born and store host and time, the original phy and queue offset,
the body as the producer sent it (decompressed; base64 in JSON lines) and ``replay``: ``send`` or
``skip`` with the reason (transaction half/op, PREPARED, ROLLBACK, system topics).
Exit codes: 0 done (also when nothing is lost: an empty file), 2 could not salvage, with one
``error:`` line on stderr.
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from dataclasses import dataclass

import pyarrow as pa

from store_reader import open_store
from store_reader.broker import prediction, versions
from store_reader.repair import publish
from store_reader.repair import salvage as sv
from store_reader.exceptions import StoreReaderError
from jobs import console
from jobs._spark.taskerrors import reports_store_errors

log = logging.getLogger("jobs.salvage")


@dataclass
class SalvageReport:
    store: str
    out: str
    broker_version: str
    truncation_point: int
    segments: list[str]
    send: int
    skip: int
    seconds: float


def export_parts(spark, segments: list[sv.LostSegment], end: int, opts, parts_dir: str, fmt: str
                 ) -> list[tuple[str, dict[str, int]]]:
    """Pass 3: one task per file, each writing ``parts_dir/<segment>.<fmt>``; (part path, counts)
    in commitlog order."""
    def task(seg: sv.LostSegment) -> tuple[str, dict[str, int]]:
        path = os.path.join(parts_dir, f"{seg.segment}.{fmt}")
        return path, sv.write_part(sv.salvage_segment(seg, end, opts), path, fmt)

    if not segments:
        return []
    return spark.sparkContext.parallelize(segments, len(segments)).map(task).collect()


def dledger_end(store) -> tuple[int, str | None]:
    """A DLedger store's end as DLedger's recovery sets it (R§16.1) and the data file it cuts:
    the messages of entries at or past it are lost (entries past a bad header, a term going back,
    a file of them deleted), whatever the broker version."""
    from store_reader.broker import dledger
    from store_reader.exceptions import UnsupportedStoreError

    rec = dledger.recover(store)
    if rec.refused is not None:
        raise UnsupportedStoreError(rec.refused, str(store.dledger))
    size = store.config.mappedFileSizeCommitLog
    cut = None if rec.process_offset % size == 0 else f"{rec.process_offset - rec.process_offset % size:020d}"
    return rec.process_offset, cut


def salvage(spark, store_path: str, out: str, broker_config: str | None = None,
            broker_version: str | None = None, fmt: str = "jsonl", overwrite: bool = False
            ) -> SalvageReport:
    """Passes 1-4 (module docstring)."""
    from store_reader.audit.plan import audit_scan_options
    from jobs._spark.scan import scan_segments

    started = time.monotonic()
    out = os.path.abspath(out)
    publish.check_output_file(out, overwrite, "salvage file")
    store = open_store(store_path, broker_config, read_dledger=True)
    publish.check_outside_store(store.root, out, "salvage file")
    version = versions.resolve_version(broker_version or store.broker_version())
    broker_5x = versions.is_5x(version)
    summaries = scan_segments(spark, store, store.scan_options(broker_5x=broker_5x))
    if store.dledger is not None:
        end, cut = dledger_end(store)
    else:
        pred = prediction.predict(store, version, summaries=summaries)
        end, cut = pred.max_phy_offset, sv.cut_segment(pred)
    segments = sv.lost_segments(summaries, end, cut)
    # beside --out: the rename into place stays on one filesystem; one a killed run left is
    # removed (``publish.work_directory``)
    try:
        with publish.work_directory(f".{os.path.basename(out)}.tmp-", str(os.getpid()),
                                    os.path.dirname(out)) as work:
            parts = export_parts(spark, segments, end, audit_scan_options(store, version), work, fmt)
            tmp = os.path.join(work, "assembled")
            sv.assemble([p for p, _ in parts], tmp, fmt)
            publish.publish_file(tmp, out, overwrite)
    except OSError as exc:       # on the driver (a task's comes back through store_error)
        raise StoreReaderError(f"{exc.strerror or exc} while writing the salvage file",
                               exc.filename or out) from None
    return SalvageReport(str(store.root), out, version, end, [s.segment for s in segments],
                         sum(c["send"] for _, c in parts), sum(c["skip"] for _, c in parts),
                         time.monotonic() - started)


def reappend(spark, store, pred: prediction.Prediction, summaries, out_root: str, queues) -> sv.Reappended:
    """``jobs.recover --salvage``: the lost records whose verdict is ``send`` put back into the
    repaired store being built at ``out_root`` (``queues``: its rebuilt queues, ``queues.queue_table``),
    after everything else is written (``store_reader.repair.salvage.reappend``). One Spark task per file
    past the cut finds them (no bodies); the driver writes them in commitlog order."""
    from store_reader.audit.plan import audit_scan_options

    end, cfg = pred.max_phy_offset, store.config
    if any(f.start + f.wrote > end for f in pred.commitlog_files):
        raise StoreReaderError(f"--salvage: the broker keeps records after its truncation point {end}; "
                               "appending there would overwrite records it serves", store.commitlog_dirs[0])
    broker_5x = versions.is_5x(pred.broker_version)
    segments = sv.lost_segments(summaries, end, sv.cut_segment(pred))
    opts = audit_scan_options(store, pred.broker_version)
    tables = spark.sparkContext.parallelize(segments, len(segments)).map(
        lambda s: sv.resend_records(s, end, opts)).collect() if segments else []
    records = pa.concat_tables(tables) if tables else sv.empty_resend()
    queue_next = {(t, q): hi for t, q, hi in zip(*(queues.column(c).to_pylist()
                                                   for c in ("topic", "queue_id", "max_offset")))}
    return sv.reappend(records, {s.file_start: s.path for s in segments}, out_root, end,
                       cfg.mappedFileSizeCommitLog, queue_next, cfg, broker_5x, opts.index_tags)


def audit_rows(r: sv.Reappended, run_id: str, store_id: str, audited_at) -> pa.Table:
    """The ``salvaged_messages`` audit table's rows: every re-appended record's old and new place."""
    from jobs._spark.deltasink import audit_rows as rows
    from schemas.audit import SALVAGED_MESSAGES

    return rows(SALVAGED_MESSAGES, r.records, run_id, store_id, audited_at)


def print_reappended(r: sv.Reappended, out) -> None:
    n = r.records.num_rows
    where = f" at phy {r.records['new_phy_offset'][0].as_py()}..{r.end}" if n else ""
    print(f"  salvaged           {n} lost records re-appended{where} (old and new places in "
          f"MANIFEST.json)", file=out)


def print_report(r: SalvageReport, out=None) -> None:
    out = out or sys.stdout
    print(f"salvage: store {r.store} (broker {r.broker_version})", file=out)
    print(f"  truncation point   phy {r.truncation_point}", file=out)
    print(f"  files past it      {len(r.segments)} {r.segments}", file=out)
    print(f"  lost records       {r.send + r.skip}: {r.send} to send again, {r.skip} to skip", file=out)
    print(f"  written            {r.out} ({r.seconds:.1f}s)", file=out)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = console.parser("jobs.salvage", __doc__, "0 done (also when nothing is lost: an empty file), 2 could "
                        "not salvage, with one error: line on stderr",
                        "python -m jobs.salvage --store /data/store --broker-config broker.conf --out lost.jsonl",
                        "docs/salvage.md")
    ap.add_argument("--store", required=True, help="store root (storePathRootDir), a path or URI")
    ap.add_argument("--out", required=True, help="the file to write (must not exist)")
    ap.add_argument("--broker-config", help="the broker's broker.conf (sizes, CRC check, ...)")
    ap.add_argument("--broker-version", choices=[*versions.VERSIONS, versions.V5X],
                    help=f"recovery rules of broker {', '.join(versions.VERSIONS)} ({versions.V5X}: "
                         "the newest); default: guessed from the store")
    ap.add_argument("--format", choices=sv.FORMATS, default="jsonl",
                    help="jsonl (bodies base64) or parquet (bodies binary); default jsonl")
    ap.add_argument("--overwrite", action="store_true", help="replace an existing output file")
    return ap.parse_args(argv)


@reports_store_errors()
def main(argv: list[str] | None = None) -> int:
    from jobs._spark.sparkutil import configure_logging, get_spark

    configure_logging()
    args = parse_args(argv)
    publish.check_output_file(args.out, args.overwrite, "salvage file")     # before Spark starts
    spark = get_spark("rocketmq-salvage", session=False)
    report = salvage(spark, args.store, args.out, args.broker_config, args.broker_version,
                     args.format, args.overwrite)
    print_report(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
