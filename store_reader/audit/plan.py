"""The Spark audit's plan: what every task of its one job needs (``AuditPlan``, pickled once
with the job), built on the driver from the store and the broker's predicted recovery.

The audit compares four views of every consume queue entry per (topic, queue id)
(``queues.compare_queue``):

``disk``
    the entry in the CQ files as they are (all-zero slots are absent);
``broker``
    the entry after the broker's own recovery (``store_reader.broker.prediction.predict``);
``rebuilt``
    the entry the commitlog's records below the truncation point give (what the repaired store
    holds): every dispatchable record at its QUEUEOFFSET, LMQ copies included, records behind
    bytes that are not a record in a file the broker keeps included (``queues.place_entries``);
    an offset between two of them that no record holds is a filler there;
``rec``
    every record the scan finds, intact ones behind a bad record included, with its damage flag.

Stage 1 (``audit.records``): one task per commitlog file cuts its records into compact Arrow
tables keyed for the shuffle; one task per index file on disk does the same with its entries.
Stage 2 (``audit.compare``): one task per key compares a bucket of queues (in a recovery, writing
each queue's REBUILT view into the repaired store as it goes: ``AuditPlan.write_queues``), or the
index puts and entries of one commitlog file's phy range, or passes the rows for the driver
through. Memory per task is bounded by a bucket or a segment (a queue is compared and written a
CQ file's window of offsets at a time: ``compare.compare_windows``); the driver holds the prediction and
the findings, nothing per record. Every finding is range-encoded: one row per run of consecutive queue (or phy) offsets.
"""
from __future__ import annotations

import heapq
from collections import defaultdict
from dataclasses import dataclass, replace
from typing import Sequence

import numpy as np

from store_reader.formats import recordformat as rf
from store_reader.broker import cqueue, prediction, versions
from store_reader.formats.brokerconf import BrokerConfig
from store_reader.formats.checkpoint import read_checkpoint
from store_reader.formats.commitlog import SegmentSummary
from store_reader.formats.consumequeue import CQEntries, list_queue_files, list_queues, slots_per_file
from store_reader.formats.rocksdbcq import served_consume_queue
from store_reader.formats.indexfile import IndexHeader, list_index_files, read_header
from store_reader.repair.queues import QueueTarget, part_bucket
from store_reader.store import Store

# rows (records and the views' entries) per compare task: bounds a task's memory (~50 bytes a row)
ENTRIES_PER_AUDIT_TASK = 4_000_000
# Index file entries per stage-1 task (20 bytes each in the file, 12 shuffled): a task holds its
# part, not a whole index file (~420 MB at the default maxIndexNum; PySpark buffers a map task's
# output before the shuffle)
INDEX_ENTRIES_PER_PART = 2 << 20


@dataclass(frozen=True)
class FlushRisk:
    """What a power loss could still take from the page cache, judged from the broker's
    ``flushDiskType`` and its shutdown state (the ``abort`` file the broker creates at start and
    deletes at a clean shutdown).

    ``reason``: ``async_flush_unclean`` (ASYNC_FLUSH and not shut down cleanly: what was stored
    after each checkpoint flush time may exist only in the page cache), ``sync_flush`` (every put is
    flushed before it is acknowledged, and the consume queues and index files past their flush times
    are rebuilt from the flushed commitlog by the abnormal recovery) or ``clean_shutdown`` (the broker
    flushed everything before it removed ``abort``). ``windows``: (window, checkpoint timestamp) of
    the windows at risk, empty unless ``async_flush_unclean``."""

    reason: str
    windows: tuple[tuple[str, int], ...]

    TEXT = {
        "async_flush_unclean": "ASYNC_FLUSH and no clean shutdown (abort file): at risk if the OS "
                               "or the machine went down with it",
        "sync_flush": "nothing at risk: SYNC_FLUSH flushes every put before acknowledging it",
        "clean_shutdown": "nothing at risk: the broker shut down cleanly (no abort file) and "
                          "flushed everything",
    }

    @property
    def text(self) -> str:
        return self.TEXT[self.reason]


def flush_risk(store: Store) -> FlushRisk:
    """The flush windows at risk for ``store`` now (``FlushRisk``)."""
    if not store.abort_exists:
        return FlushRisk("clean_shutdown", ())
    if store.config.flushDiskType.strip().upper() == "SYNC_FLUSH":
        return FlushRisk("sync_flush", ())
    ckpt = read_checkpoint(store.checkpoint_path)
    return FlushRisk("async_flush_unclean", (
        ("commitlog", ckpt.physic_msg_timestamp), ("consume_queue", ckpt.logics_msg_timestamp),
        ("index", ckpt.index_msg_timestamp)))


def audit_scan_options(store: Store, version: str) -> rf.ScanOptions:
    """Header checks only (as the broker's dispatch reads records), CRCs computed to flag damage."""
    return replace(store.scan_options(broker_5x=versions.is_5x(version), index_tags=versions.index_tag_keys(version)),
                   check_crc=False, compute_crc=True)


@dataclass(frozen=True)
class IndexSource:
    """One index file whose entries the audit reads: its place in each lens (-1: not in it) and
    where its bytes are (``path``: the file on disk, or the one the predicted re-dispatch built
    in the run's scan directory)."""

    name: str | None
    on_disk: int
    recovered: int
    path: str
    header: IndexHeader

    def parts(self, per_part: int, index_num: int) -> list[tuple[int, int]]:
        """[first, end) entry numbers of the stage-1 tasks reading this file (one at least: it
        checks the hash slots of a file on disk)."""
        end = min(self.header.entries_in_use, index_num - 1) + 1
        return [(lo, min(lo + per_part, end)) for lo in range(1, end, per_part)] or [(1, 1)]


@dataclass(frozen=True)
class AuditPlan:
    """What every task of the audit job needs (pickled once with the job).

    Shuffle keys: ``[0, buckets)`` buckets of queues; then one key per commitlog file number from
    ``first_segment - 1`` to ``first_segment + segments`` (phy offsets below and past the files
    clamp to the ends); the last key, ``driver_key``, carries rows to the driver as they are."""

    end: int
    min_phy: int
    broker_5x: bool
    config: BrokerConfig
    opts: rf.ScanOptions
    buckets: int
    file_size: int
    first_segment: int
    segments: int
    scope: tuple[int, int] | None
    broker_min: dict[tuple[str, int], int]
    queue_buckets: dict[tuple[str, int], int]
    disk_queues: dict[tuple[str, int], list[tuple[str, int]]]
    broker_on_disk: dict[tuple[str, int], tuple[cqueue.EntryRun, ...]]
    """The broker's entries its recovery left in the CQ files as they are: read by the tasks."""
    disk_units: dict[tuple[str, int], tuple[np.ndarray, CQEntries]]
    """A RocksDB consume queue's units as stored (queue offsets, entries): its disk view (R§15.1)."""
    cut_segment: str | None
    windows: tuple[tuple[str, int], ...]
    index_sources: tuple[IndexSource, ...]
    index_part_entries: int
    work_dir: str | None
    """The run's scan directory, which the driver and every executor see: the stages exchange
    their tables there (``jobs._spark.exchange``)."""
    write_queues: QueueTarget | None = None
    """Where a recovery's queue buckets write the repaired store's consume queues as they compare
    them (``queues.QueueWriter`` a window at a time, or ``queues.write_whole_queue``); None: an
    audit only."""

    @property
    def driver_key(self) -> int:
        return self.buckets + self.segments + 2

    @property
    def partitions(self) -> int:
        return self.driver_key + 1

    def queue_key(self, topic: str, queue_id: int) -> int:
        key = self.queue_buckets.get((topic, queue_id))
        return part_bucket(topic, queue_id, 0, self.buckets) if key is None else key

    def phy_keys(self, phy: np.ndarray) -> np.ndarray:
        """The key of the commitlog file each phy offset points into (one below the first file, one
        past the last)."""
        starts = (self.first_segment + np.arange(self.segments + 1, dtype=np.int64)) * self.file_size
        return self.buckets + np.searchsorted(starts, phy, side="right")


def audit_plan(parallelism: int, store: Store, pred: prediction.Prediction, summaries: Sequence[SegmentSummary],
               scan: Sequence[SegmentSummary], scope: tuple[int, int] | None, work_dir: str | None,
               write_queues: QueueTarget | None = None) -> AuditPlan:
    broker_5x = versions.is_5x(pred.broker_version)
    cfg = store.config
    disk_queues = {(ref.topic, ref.queue_id): [(f.path, f.start) for f in
                                               list_queue_files(ref.path, cfg.cq_file_size, rocketmq5=broker_5x)]
                   for ref in list_queues(store.root)}
    disk_units = rocksdb_units(store) if store.inventory.cq_served_by == "rocksdb" else {}
    # a queue's rows: its broker entries, about as many records and rebuilt entries, its CQ files'
    # slots; queues are packed by that weight, largest first, into the lightest bucket
    per_file = slots_per_file(cfg.cq_file_size)
    weight: dict[tuple[str, int], int] = defaultdict(int)
    for key, q in pred.consume_queues.items():
        weight[key] += 3 * max(0, q.max_offset - q.min_offset)
    for key, files in disk_queues.items():
        weight[key] += per_file * len(files)
    for key, (offsets, _) in disk_units.items():
        weight[key] += len(offsets)
    entries = max(sum(weight.values()), 2 * sum(s.records for s in scan))
    buckets = max(parallelism, -(-entries // ENTRIES_PER_AUDIT_TASK))
    queue_buckets = pack_queues(weight, buckets)
    file_size = summaries[0].file_size if summaries else cfg.mappedFileSizeCommitLog
    first = summaries[0].file_start // file_size if summaries else 0
    last = (summaries[-1].file_start // file_size) if summaries else -1
    sources: list[IndexSource] = []
    recovered = {f.path: i for i, f in enumerate(pred.index_files) if f.built is None and f.path}
    for i, ref in enumerate(list_index_files(store.index_dir, cfg.index_file_size, strict=False)):
        sources.append(IndexSource(ref.name, i, recovered.get(ref.path, -1), ref.path, read_header(ref.path)))
    sources += [IndexSource(f.name, -1, i, f.built, f.header) for i, f in enumerate(pred.index_files)
                if f.built is not None]
    return AuditPlan(
        end=pred.max_phy_offset, min_phy=pred.min_phy_offset, broker_5x=broker_5x, config=cfg,
        opts=audit_scan_options(store, pred.broker_version), buckets=buckets, file_size=file_size,
        first_segment=first, segments=last - first + 1, scope=scope,
        broker_min={k: q.min_offset for k, q in pred.consume_queues.items()}, queue_buckets=queue_buckets,
        disk_queues=disk_queues, disk_units=disk_units,
        broker_on_disk={k: runs for k, q in pred.consume_queues.items()
                        if (runs := tuple(r for r in q.entry_runs() if r.slots is None))},
        cut_segment=next((f.name for f in pred.commitlog_files if f.wrote < f.size), None),
        windows=flush_risk(store).windows,
        index_sources=tuple(sources), index_part_entries=INDEX_ENTRIES_PER_PART, work_dir=work_dir,
        write_queues=write_queues)


def rocksdb_units(store: Store) -> dict[tuple[str, int], tuple[np.ndarray, CQEntries]]:
    """Every unit of the store's RocksDB consume queue (``rocksdbcq``), per queue in offset order."""
    db = served_consume_queue(store)
    out = {}
    for key, q in db.queues.items():
        if q.units:
            offsets = np.array(sorted(q.units), np.int64)
            u = np.array([q.units[o][:3] for o in offsets], np.int64).reshape(-1, 3)
            out[key] = (offsets, CQEntries(u[:, 0], u[:, 1].astype(np.int32), u[:, 2]))
    return out


def pack_queues(weight: dict[tuple[str, int], int], buckets: int) -> dict[tuple[str, int], int]:
    """Each queue's bucket: largest queue first, into the bucket with the least weight so far."""
    load = [(0, b) for b in range(buckets)]
    out = {}
    for key in sorted(weight, key=lambda k: (-weight[k], k)):
        w, b = heapq.heappop(load)
        out[key] = b
        heapq.heappush(load, (w + weight[key], b))
    return out

