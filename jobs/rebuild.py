"""Passes 4-5 of a recovery: the consume queues and the index files of the repaired store, rebuilt
by Spark tasks from the records below the truncation point (as the run's scan kept them,
``jobs._spark.scan``, or read from the commitlog files), nothing per record on the driver."""
from __future__ import annotations

import logging
import os
import shutil
import threading
from dataclasses import dataclass
from typing import Callable, Sequence

import pyarrow as pa

from jobs._spark.exchange import exchange
from jobs._spark.scan import kept_puts, kept_reader
from store_reader.repair import index, queues as repair_queues, scanned
from store_reader.io import hashing
from store_reader.formats.commitlog import SegmentSummary
from store_reader.formats.consumequeue import slots_per_file
from store_reader.formats.indexfile import IndexHeader
from store_reader.formats.recordformat import ScanOptions
from store_reader.store import Store

log = logging.getLogger("jobs.recover")


# Consume queue entries per rebuild task (a bucket of CQ files and small queues, ~60 bytes an entry
# in memory): bounds a task's memory and keeps the tasks few, however many queues there are.
ENTRIES_PER_REBUILD_TASK = 1_000_000


def _rebuild_scan_options(store: Store, broker_5x: bool, index_tags: bool = False) -> ScanOptions:
    # records below the cut passed the broker's checks already: headers only (no CRC)
    return ScanOptions(check_crc=False, compute_crc=False, broker_5x=broker_5x,
                       delay_levels_ms=tuple(store.config.delay_levels_ms), index_tags=index_tags,
                       dledger=store.dledger is not None)


def surviving_records(spark, store: Store, end: int, broker_5x: bool, buckets: int,
                      only: set[tuple[str, int]] | None = None, records: dict[str, str] | None = None):
    """RDD of the consume queue puts of every record below the truncation point ``end``
    (``queues.ENTRY_SCHEMA`` tables: dispatchable records and their LMQ copies), one Spark task per
    commitlog file, cut into rebuild parts and keyed by rebuild task:
    ``(bucket, ((topic, queue id, CQ file number), entries))``. With ``only``, whole queues
    (file number -1) of those queues alone.

    The puts travel as Arrow tables, a few per commitlog file and task, never as Spark rows.
    ``records``: where the run's scan kept each file's records (default: read the files)."""
    files = [f.path for f in store.commitlog_files if f.start < end]
    opts, cfg = _rebuild_scan_options(store, broker_5x), store.config
    per_file = slots_per_file(cfg.cq_file_size)
    kept = kept_reader(records, repair_queues.dispatch_columns(cfg))

    def scan(path: str):
        tables = list(repair_queues.dispatch_entries(path, opts, end, cfg, broker_5x) if kept is None
                      else repair_queues.dispatch_batches(kept(path), end, cfg, broker_5x))
        if not tables:
            return
        cut_by = per_file if only is None else None
        for key, part in repair_queues.queue_parts(pa.concat_tables(tables), cut_by):
            if only is None or key[:2] in only:
                yield repair_queues.part_bucket(*key, buckets), (key, part)

    return spark.sparkContext.parallelize(files, max(1, len(files))).flatMap(scan)


@dataclass
class QueueRebuild:
    """What ``rebuild_consume_queues`` did: one row per queue (topic, queue_id, min/max offset,
    entries, last store time), the rebuild tasks, the parts they built, the queues that had to
    be rebuilt in one piece and the filler units written for queue offsets whose records are gone
    (topic, queue id, first offset, end offset, phy; ``queues.place_entries``)."""

    queues: pa.Table
    tasks: int
    parts: int
    rebuilt_whole: list[tuple[str, int]]
    fillers: list[tuple[str, int, int, int, int]]


def rebuild_consume_queues(spark, store: Store, end: int, broker_5x: bool, out_root: str,
                           expected_entries: int,
                           kept_queues: Callable[[], dict[tuple[str, int], tuple[int, int]]] | None = None,
                           records: dict[str, str] | None = None, work_dir: str | None = None) -> QueueRebuild:
    """Write every queue's CQ files under ``out_root/consumequeue`` (LMQ copies included when
    ``enableMultiDispatch``) from the records below ``end``, each entry at its record's own
    queue offset (``queues.place_entries``). ``kept_queues``: gives the (min, max) offset of each
    queue the broker keeps, asked once the rebuild's jobs are done (the broker's replay may still
    run while they do); where its max is past the rebuilt queue's (the last records are gone), the
    offsets up to it get filler units (``queues.extend_queue``).

    One task per bucket of parts, ``expected_entries / ENTRIES_PER_REBUILD_TASK`` buckets (at least
    one per core), the parts exchanged through ``work_dir`` (the run's scan directory,
    ``jobs._spark.exchange``): a huge queue is split by CQ file, its files spread over the buckets, and many
    small queues are packed into few tasks. A queue whose files do not join up into the broker's
    sequential put (a gap, a repeat or a reordering across a file boundary,
    ``queues.irregular_queues``) is rebuilt again in one piece, so the bytes never depend on the
    split."""
    cfg = store.config
    buckets = max(spark.sparkContext.defaultParallelism, -(-expected_entries // ENTRIES_PER_REBUILD_TASK))
    queue_dirs = store.consume_queue_dir

    def build(bucket: int, items):
        parts: dict[tuple[str, int, int], list[pa.Table]] = {}
        for _, (key, table) in items:
            parts.setdefault(key, []).append(table)
        for key in sorted(parts):
            topic, qid, file_no = key
            yield repair_queues.rebuild_queue_part(
                topic, qid, file_no, pa.concat_tables(parts.pop(key)), cfg.cq_file_size,
                os.path.join(out_root, "consumequeue", topic, str(qid)), queue_dirs / topic / str(qid),
                cfg.mappedFileSizeCommitLog)

    def run(only: set[tuple[str, int]] | None) -> list[repair_queues.QueuePart]:
        rdd = surviving_records(spark, store, end, broker_5x, buckets, only, records)
        return exchange(spark, work_dir, rdd, [], buckets, build)

    parts = run(None)
    irregular = repair_queues.irregular_queues(parts)
    if irregular:
        log.info("rebuild consume queues: %d queue(s) do not split by CQ file, rebuilt whole: %s",
                 len(irregular), sorted(irregular)[:10])
        for topic, qid in irregular:
            shutil.rmtree(os.path.join(out_root, "consumequeue", topic, str(qid)), ignore_errors=True)
        parts = [p for p in parts if (p.topic, p.queue_id) not in irregular] + run(irregular)
    table = repair_queues.queue_table(parts)
    rebuilt = {(t, q): (lo, hi) for t, q, lo, hi in zip(*(table[c].to_pylist() for c in (
        "topic", "queue_id", "min_offset", "max_offset")))}
    for key, (lo, hi) in sorted((kept_queues() if kept_queues else {}).items()):
        have = rebuilt.get(key)
        if hi > (lo if have is None else have[1]):
            parts.append(repair_queues.extend_queue(*key, os.path.join(out_root, "consumequeue", key[0], str(key[1])),
                                             cfg.cq_file_size, have, (lo, hi), cfg.mappedFileSizeCommitLog))
    fillers = sorted((p.topic, p.queue_id, *run) for p in parts for run in p.fillers)
    return QueueRebuild(repair_queues.queue_table(parts), buckets, len(parts), sorted(irregular), fillers)


def audit_writes_queues(store: Store, broker_5x: bool) -> bool:
    """Whether a recovery's audit writes its consume queues (``AuditedQueues``): where its records
    are the rebuild's (``scanned.serves_rebuild``: not past a malformed DUP_INFO under 5.x's
    ``duplicationEnable``, which the rebuild reads on and the audit's scan does not)."""
    return scanned.serves_rebuild(store.config, broker_5x)


class AuditedQueues:
    """A recovery's consume queues written by its audit (issue 35): the audit's one exchange keyed
    by queue bucket places each queue's REBUILT view (``queues.write_whole_queue``), compares it
    and hashes its files, so the write runs no exchange of its own for them. The write says where
    (``offer``), the audit gives back what it wrote (``deliver``) or, when it ran no queue
    buckets, nothing (``finish``: the write rebuilds them itself, ``rebuild_consume_queues``)."""

    def __init__(self) -> None:
        self.out_root: str | None = None
        self.result: tuple[QueueRebuild, dict[str, str]] | None = None
        self.done = threading.Event()

    def offer(self, out_root: str) -> None:
        self.out_root = out_root

    def target(self, store: Store, pred) -> repair_queues.QueueTarget | None:
        """Where the audit's queue buckets write (None: the write did not offer its queues)."""
        if self.out_root is None:
            return None
        cfg = store.config
        return repair_queues.QueueTarget(self.out_root, store.consume_queue_dir, cfg.cq_file_size,
                                         cfg.mappedFileSizeCommitLog,
                                         {k: (q.min_offset, q.max_offset) for k, q in pred.consume_queues.items()})

    def deliver(self, written: list[tuple[list[repair_queues.QueuePart], dict[str, str]]], tasks: int) -> None:
        parts = [p for ps, _ in written for p in ps]
        digests = {k: v for _, d in written for k, v in d.items()}
        fillers = sorted((p.topic, p.queue_id, *run) for p in parts for run in p.fillers)
        self.result = (QueueRebuild(repair_queues.queue_table(parts), tasks, len(parts), [], fillers), digests)
        self.done.set()

    def finish(self) -> None:
        self.done.set()


def index_put_counts(spark, store: Store, summaries: Sequence[SegmentSummary], end: int,
                     broker_5x: bool, index_tags: bool, records: dict[str, str] | None = None
                     ) -> list[tuple[int, int]]:
    """Per commitlog file below ``end``: its records' index puts and their latest store time,
    which cut the puts into index files (``index.index_file_plan``). From the scan's summaries
    (scanned with the same ``index_tags``); a file the rebuild reads past its valid prefix is
    counted again, a task each. ``index_tags``: ``versions.index_tag_keys`` of the version."""
    files = [f.path for f in store.commitlog_files if f.start < end]
    opts = _rebuild_scan_options(store, broker_5x, index_tags)
    kept = kept_reader(records, index.INDEX_COLUMNS)

    def count(path: str) -> tuple[int, int]:
        return index.segment_index_counts(path, opts, end) if kept is None \
            else index.index_counts_of(kept(path), end, index_tags)

    def recount(again: list[int]) -> list[tuple[int, int]]:
        return spark.sparkContext.parallelize([files[i] for i in again], len(again)).map(count).collect()

    return index.index_put_counts(summaries, end, recount)


def rebuild_index_files(spark, store: Store, end: int, broker_5x: bool, index_tags: bool, index_dir: str,
                        counts: list[tuple[int, int]], records: dict[str, str] | None = None,
                        digests: dict[str, str] | None = None) -> list[IndexHeader]:
    """Fresh index files under ``index_dir`` from every record below ``end`` (``counts``: from
    ``index_put_counts``); returns their headers in creation order. ``digests``: given each
    file's SHA-256 by name.

    One task per index file reads the commitlog files its puts come from, writes the file
    (memory: the hash slots and a few batches) and hashes it, so nothing per record reaches the
    driver and the driver reads no index file (a store's index files grow with its records:
    400+ MB each)."""
    cfg = store.config
    if not cfg.messageIndexEnable or not counts:
        return []
    files = [f.path for f in store.commitlog_files if f.start < end]
    opts = _rebuild_scan_options(store, broker_5x, index_tags)
    plan = index.index_file_plan([n for n, _ in counts], cfg.maxIndexNum)
    tasks = [(k, [(files[i], lo, hi) for i, lo, hi in ranges]) for k, ranges in enumerate(plan)]
    if not tasks:
        return []
    kept = kept_puts(records)

    def write(task) -> tuple[index.WrittenIndexFile, str]:
        w = index.write_index_file_part(os.path.join(index_dir, f".building-{task[0]:06d}"), task[1], opts, end,
                                         cfg, task[0] == 0, kept)
        return w, hashing.sha256_file(w.path, direct=True)

    done = spark.sparkContext.parallelize(tasks, len(tasks)).map(write).collect()
    written = [w for w, _ in done]
    for (w, digest), name in zip(done, index.name_index_files(written)):
        os.rename(w.path, os.path.join(index_dir, name))
        if digests is not None:
            digests[name] = digest
    return [w.header for w in written]
