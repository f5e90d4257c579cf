"""Pass 2 of a recovery or an audit: one Spark task per commitlog file walks it once
(``store_reader.repair.scanned``), giving its summary (the broker's walk) and keeping its records for
every later pass of the run, none of which reads a segment again."""
from __future__ import annotations

import os
from dataclasses import dataclass, field

from store_reader.exceptions import StoreReaderError
from store_reader.repair import publish, scanned
from store_reader.io.hashing import SourceDigest
from store_reader.io.storefs import location
from store_reader.formats.commitlog import SegmentSummary, summarize_segment
from store_reader.formats.recordformat import ScanOptions
from store_reader.store import Store


def scan_segments(spark, store: Store, opts: ScanOptions, paths: list[str] | None = None
                  ) -> list[SegmentSummary]:
    """One Spark task per commitlog file (all, or ``paths``); the summaries in file order, no
    records kept."""
    paths = [f.path for f in store.commitlog_files] if paths is None else paths
    if not paths:
        return []
    rdd = spark.sparkContext.parallelize(paths, len(paths))
    return rdd.map(lambda p: summarize_segment(p, opts)).collect()


@dataclass
class Scan:
    """The summaries in file order, where each segment's records were kept, how often each
    segment's bytes were walked (1: once) and the digests of the files hashed as they were walked."""

    summaries: list[SegmentSummary]
    records: dict[str, str]
    scans: dict[str, float]
    digests: dict[str, SourceDigest] = field(default_factory=dict)


def scan_once(spark, store: Store, opts: ScanOptions, records_dir: str, paths: list[str] | None = None,
              digests: bool = False) -> Scan:
    """One Spark task per commitlog file (all, or ``paths``) walks it once: its summary and its
    records, kept under ``records_dir`` (``scanned.scan_segment``); ``digests``: and the digest of
    each file the repaired store may take as it is, for its placement."""
    paths = [f.path for f in store.commitlog_files] if paths is None else paths
    if not paths:
        return Scan([], {}, {})
    cols, lost = scanned.columns_for(store.config, opts.broker_5x, opts.index_tags)
    got = spark.sparkContext.parallelize(paths, len(paths)).map(
        lambda p: scanned.scan_segment(p, opts, records_dir, cols, lost, digests)).collect()
    return Scan([g.summary for g in got], {g.summary.segment: g.records_path for g in got},
                {g.summary.segment: g.scans for g in got},
                {g.summary.segment: g.digest for g in got if g.digest is not None})


SCAN_DIR_HELP = ("where the scan keeps each commitlog file's records and their index puts for the run's "
                 "later passes and the passes exchange their tables, removed at its end or, after a "
                 "kill, by the next run (about a quarter of the commitlog with 1 KiB messages and two "
                 "keys each, less with larger ones, plus the bodies of the records past the truncation "
                 "point; default: the system's temporary directory; on a cluster, a directory the "
                 "driver and every executor see)")


def records_dir(run_id: str, scan_dir: str | None):
    """A directory of the run's own for the kept records (under ``scan_dir``, default the
    system's temporary directory), removed with everything in it when the run ends, or by the
    next run when this one is killed (``publish.work_directory``). A ``scan_dir`` that is not there
    is not made: it may be a volume that is not mounted."""
    if scan_dir is not None and not os.path.isdir(scan_dir):
        raise StoreReaderError("the scratch directory does not exist or is not a directory", scan_dir)
    return publish.work_directory("rocketmq-scan-", run_id, scan_dir)


def kept_puts(records: dict[str, str] | None):
    """The index puts of a commitlog file's records below a cut as the scan kept them (by the
    file's path and the cut), or None (read the file itself)."""
    if records is None:
        return None
    return lambda path, end: scanned.index_puts_below(records[location(path).name], end)


def kept_reader(records: dict[str, str] | None, columns: list[str] | None = None):
    """A commitlog file's records as the scan kept them (by the file's path; ``columns`` of
    them, default all), or None (read the file itself)."""
    if records is None:
        return None
    return lambda path: scanned.read_records(records[location(path).name], columns)
