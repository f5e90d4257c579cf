"""Write a repaired store: the commitlog cut at the broker's truncation point, consume queues and
index files rebuilt from every surviving record, a consistent checkpoint, no ``abort``, committed
consumer offsets the rebuilt queues serve.

Spark-free building blocks; ``jobs/repairwrite.py`` runs them in parallel (consume queues: one task
per bucket of CQ files or queues; index: one task per index file) and places the result atomically.
Everything here writes only below the directory it is given, and holds at most one segment's
records, one bucket's queue entries or one index file's hash slots in memory, whatever the store's
size.
"""
from __future__ import annotations

import errno
import hashlib
import json
import mmap
import os
import shutil
import struct
import zlib
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Mapping, Sequence

import numpy as np
import pyarrow as pa

from schemas.repair import DISPATCH_ENTRY, REPAIRED_QUEUE

from store_reader.formats import recordformat as rf
from store_reader.formats.brokerconf import BrokerConfig
from store_reader.formats.checkpoint import Checkpoint, lock_status, write_checkpoint
from store_reader.formats.config import CONSUMER_OFFSET_FILES, rewrite_consumer_offsets
from store_reader.formats.controller import EPOCH_FILE, IDENTITY_FILES, epoch_file_bytes, read_epoch_file
from store_reader.formats.consumequeue import (CQ_ENTRY_DTYPE, PRE_BLANK_SIZE, logic_offset_of, range_status,
                                               slots_per_file, write_queue_files, write_queue_slots)
from store_reader.broker.dispatch import index_key_counts, index_put_keys, queue_puts
from store_reader.exceptions import OutputError, StoreReaderError, UnreadableFileError, UnsupportedStoreError
from store_reader.io.fsutil import walk_files
from store_reader.formats.indexfile import (IndexHeader, _put_all, entry_position, index_file_size,
                                            next_index_file_name, slot_position)
from store_reader.formats.javahash import index_key_hashes_of
from store_reader.formats.mappedfile import file_name as cq_file_name
from store_reader.ranges import stable_order
from store_reader.io.storefs import PathRef, StoreLocation, data_extents, location, open_regular

if TYPE_CHECKING:             # the repair reads the prediction's cut, never its state machines
    from store_reader.formats.commitlog import SegmentSummary
    from store_reader.broker.recovery import Prediction
    from store_reader.store import Store

# Read size when hashing a file; and a block of zeros hashed for zero tails (calloc'd: no memory is
# touched until it is read, and then only the kernel's zero page).
COPY_CHUNK = 8 << 20
_ZEROS = bytes(COPY_CHUNK)
SCAN_BATCH = 65536

# Columns of a record the consume queue rebuild reads (schemas.MESSAGE names).
DISPATCH_COLUMNS = ["phy_offset", "stored_phy_offset", "total_size", "topic", "queue_id", "queue_offset",
                    "sys_flag", "tags_code", "store_timestamp"]
# ... and the index rebuild.
INDEX_COLUMNS = ["phy_offset", "stored_phy_offset", "store_timestamp", "sys_flag", "topic", "uniq_key",
                 "key_list", "tags"]

ENTRY_SCHEMA = DISPATCH_ENTRY.arrow()


def resized_commitlog_files(store: Store) -> list[tuple[str, int, int]]:
    """(file, length, mappedFileSizeCommitLog) of the commitlog files whose length the broker
    refuses: the repaired store holds each at the configured size, by the broker's own rule for
    its bytes (a short file as its data then zeros, a preallocated file never written to the end;
    a long file as its first mappedFileSizeCommitLog bytes, all the broker ever maps)."""
    size = store.config.mappedFileSizeCommitLog
    return [(str(f.path), f.size, size) for f in store.commitlog_files if f.size != size]


def check_recoverable(store: Store, commitlog_gone: bool, replacing: bool) -> None:
    """Refuse, before any work, a store a running broker holds (its ``lock``), a remote one to be
    replaced by the repaired store (``replacing``: ``--apply``), and one without commitlog files
    unless ``commitlog_gone``: to the broker every message is deleted, far more often a wrong path
    or an unmounted volume."""
    lock = lock_status(store.root)
    if lock.locked:
        raise StoreReaderError(f"a running broker holds the store's lock (pid {lock.pid}); "
                               "stop it or recover a copy", lock.path)
    if replacing and not isinstance(store.root, Path):
        raise StoreReaderError("--apply swaps directories by renaming them: a remote store cannot "
                               "be replaced (write --out and copy it back)", str(store.root))
    if not store.commitlog_files and not commitlog_gone:
        raise StoreReaderError(f"{store.missing_commitlog()}: recovering would drop every message "
                               "and consume queue entry (a wrong --store or an unmounted volume?); "
                               "pass --commitlog-gone if the commitlog is really gone",
                               store.commitlog_dirs[0])


def check_repairable(store: Store, pred: Prediction, summaries: Sequence[SegmentSummary],
                     salvage: bool = False) -> None:
    """Refuse a repair whose cut this package cannot place: a commitlog file longer than the
    configured size whose valid records go on past that size (the broker maps only the first
    ``mappedFileSizeCommitLog`` bytes and would cut at the record that crosses it); a salvage in
    controller mode (re-appended records would lie past the confirm offset); a timer store
    scheduled in RocksDB (``timerrecovery.check_timer_store``)."""
    if salvage and pred.controller_mode:
        raise StoreReaderError("--salvage in controller mode: the re-appended records would lie past "
                               "the confirm offset, which the broker does not dispatch while fenced "
                               "and a slave truncates", store.root / EPOCH_FILE)
    rocksdb = pred.rocksdb_beside_max_phy_offset is not None or store.inventory.cq_served_by == "rocksdb"
    if salvage and rocksdb:
        raise UnsupportedStoreError("--salvage with a RocksDB consume queue: the re-appended records lie past "
                                    "the end its repaired database is written for (R§15.2)",
                                    os.path.join(str(store.root), store.inventory.rocksdb_cq_dir or "consumequeue"))
    if pred.rocksdb_beside_max_phy_offset is not None and pred.controller_mode:
        raise UnsupportedStoreError("rocksdbCQDoubleWriteEnable=true in controller mode: what a 5.4+ "
                                    "broker's RocksDB consume queue holds past the confirm offset is not "
                                    "modelled, so the repaired store's would not be the broker's (R§15.2)",
                                    store.config.source)
    from store_reader.broker.timerrecovery import check_timer_store
    check_timer_store(store.config, pred.broker_5x)
    size = store.config.mappedFileSizeCommitLog
    for s in summaries:
        if s.file_size > size and s.valid_bytes > size and s.segment not in pred.deleted_commitlog_files:
            raise StoreReaderError(
                f"commitlog file is {s.file_size} bytes, longer than mappedFileSizeCommitLog {size}, and "
                f"its records go on past that size: the broker maps only the first {size} bytes; "
                f"truncate it to {size} bytes (keep a copy) and run again", s.path, size)


@contextmanager
def writing(path: str, what: str) -> Iterator[None]:
    """An ``OSError`` while writing ``path`` as an ``OutputError`` naming it: on an executor (a full
    disk under a rebuild task) the driver gets one line naming the file, not a trace."""
    try:
        yield
    except OSError as exc:
        raise OutputError(f"cannot write {what}: {exc.strerror or exc}", exc.filename or path) from None


def update_zeros(digest: Any, n: int) -> None:
    """Feed ``n`` zero bytes to ``digest`` (a zero tail's share of a file's hash) without reading
    them from anywhere."""
    zeros = memoryview(_ZEROS)
    while n > 0:
        k = min(n, len(zeros))
        digest.update(zeros[:k])
        n -= k


# -- consume queues -----------------------------------------------------------------------------------

def dispatch_entries(path: str, opts: rf.ScanOptions, end: int, config: BrokerConfig,
                     broker_5x: bool) -> Iterator[pa.Table]:
    """The consume queue puts (``ENTRY_SCHEMA``) of one commitlog file's records below ``end``:
    dispatchable records (F§3.5) and their LMQ copies (R§5.3, E#33), batch by batch. Records
    behind bytes that are not a record (a zeroed span in a file the broker keeps, E#3) are
    records below ``end`` too: the broker keeps and serves them, so they keep their entries."""
    from store_reader.formats.commitlog import SegmentScan

    yield from dispatch_batches(SegmentScan(path, opts, columns=dispatch_columns(config), batch_size=SCAN_BATCH,
                                            include_lost=True), end, config, broker_5x)


def dispatch_columns(config: BrokerConfig) -> list[str]:
    """The record columns the consume queue puts are made of: ``properties`` too when LMQ copies
    are dispatched."""
    return DISPATCH_COLUMNS + (["properties"] if config.enableMultiDispatch else [])


def dispatch_batches(batches: Iterable[pa.RecordBatch], end: int, config: BrokerConfig,
                     broker_5x: bool) -> Iterator[pa.Table]:
    """``dispatch_entries`` of a commitlog file's records as read (``DISPATCH_COLUMNS``, and
    ``properties`` when ``enableMultiDispatch``; intact records behind a bad one included)."""
    for rb in batches:
        p = queue_puts(config, broker_5x, rb, rb.column("phy_offset").to_numpy() < end)
        if not p.own:
            continue
        b = rb if p.own == rb.num_rows else rb.take(pa.array(p.row[:p.own]))
        own = pa.table([b.column(c) if c != "copy" else pa.array(p.copy[:p.own])
                        for c in ENTRY_SCHEMA.names], schema=ENTRY_SCHEMA)
        yield own
        if p.own == len(p.row):
            continue
        copies = slice(p.own, None)
        base = own.take(pa.array(np.searchsorted(p.row[:p.own], p.row[copies])))
        replaced = {"topic": pa.array([p.topics[c] for c in p.topic[copies].tolist()], pa.string()),
                    "queue_id": pa.array(p.queue_id[copies]), "queue_offset": pa.array(p.queue_offset[copies]),
                    "copy": pa.array(p.copy[copies])}
        yield pa.table([replaced.get(c, base.column(c)) for c in ENTRY_SCHEMA.names], schema=ENTRY_SCHEMA)


def queue_parts(entries: pa.Table, per_file: int | None) -> Iterator[tuple[tuple[str, int, int], pa.Table]]:
    """``entries`` cut into rebuild parts: ``((topic, queue id, CQ file number), rows)`` with the
    file number ``queue_offset // per_file`` (the CQ file the entry lands in when its queue is
    regular), or -1 (whole queues) when ``per_file`` is None. A part's rows are in commitlog
    order, without the topic and queue id its key names."""
    if not entries.num_rows:
        return
    topics = entries.column("topic").combine_chunks().dictionary_encode()
    names = topics.dictionary.to_pylist()
    code = topics.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    qid = entries.column("queue_id").to_numpy()
    queue = (code << 32) | (qid.astype(np.int64) + (1 << 31))     # (topic, queue id) in order
    if per_file:
        file_no = entries.column("queue_offset").to_numpy() // per_file
        order = stable_order(file_no)
        order = order[stable_order(queue[order])]
        cut = np.flatnonzero((np.diff(queue[order]) != 0) | (np.diff(file_no[order]) != 0)) + 1
    else:
        file_no = np.full(entries.num_rows, -1, np.int64)
        order = stable_order(queue)
        cut = np.flatnonzero(np.diff(queue[order]) != 0) + 1
    # one take, then zero-copy slices
    grouped = entries.drop_columns(["topic", "queue_id"]).take(pa.array(order))
    for lo, hi in zip(np.concatenate([[0], cut]).tolist(), np.concatenate([cut, [len(order)]]).tolist()):
        i = order[lo]
        yield (names[code[i]], int(qid[i]), int(file_no[i])), grouped.slice(lo, hi - lo)


def part_bucket(topic: str, queue_id: int, file_no: int, buckets: int) -> int:
    """The rebuild task of a part: a queue's CQ files go to consecutive tasks (a huge queue is
    spread evenly), queues are packed by a stable hash (same on every worker)."""
    return (zlib.crc32(f"{topic}\x00{queue_id}".encode()) + max(file_no, 0)) % buckets


# A queue offset whose record is gone: the size of the broker's own filler unit (``fillPreBlank``).
# CQ recovery counts it valid, a pull never reads it (no commitlog range that long from a file's
# start, where its phy offset is: ``filler_phy_of``) and moves on.
FILLER_SIZE = PRE_BLANK_SIZE


@dataclass
class RepairedQueue:
    """A queue of the repaired store (``place_entries``): its slots from queue offset ``first``
    (the first slot of its first CQ file) to its max offset, its min offset, and the runs of queue
    offsets inside it whose records are gone: ``(first offset, end offset, filler phy offset)``.

    What a correct store holds, built from the commitlog alone: never the broker's put state
    machine (``recovery.ConsumeQueueState``), whose renumbering after a gap it must not inherit."""

    topic: str
    queue_id: int
    file_size: int
    first: int
    slots: np.ndarray
    min_offset: int
    fillers: list[tuple[int, int, int]]

    @property
    def max_offset(self) -> int:
        return self.first + len(self.slots)

    @property
    def filler_count(self) -> int:
        return sum(hi - lo for lo, hi, _ in self.fillers)


def filler_phy_of(phy, commitlog_file_size: int):
    """A filler's phy offset: the start of the commitlog file holding ``phy``. A pull reads an
    entry with ``MappedFile#selectMappedBuffer(phy % fileSize, size)``, whose bounds test
    ``pos + size <= readPosition`` is an int sum: with the filler's size 2^31-1 and a position
    above 0 it overflows, passes, and the read throws IllegalArgumentException (newLimit >
    capacity) out of ``DefaultMessageStore#getMessage`` (every release; seen on the real 5.4.0); at
    position 0 the test fails and the pull skips the filler as intended."""
    return phy - phy % commitlog_file_size


def held_puts(stored_phy: np.ndarray, size: np.ndarray, queue_offset: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray]:
    """Which of a queue's puts (in commitlog order) the repaired store's queue holds
    (``place_entries``, the one rule): ``(kept, held)``, indices of the puts that are neither a
    repeat by phy nor below the queue's start, and of those the first claim of each queue offset,
    ascending by queue offset. A kept put that is not held claims an offset already held
    (``duplicate_queue_offset``)."""
    stored_phy = np.asarray(stored_phy, dtype=np.int64)
    queue_offset = np.asarray(queue_offset, dtype=np.int64)
    # 1. repeats by phy: an end not past every earlier put's end
    ends = stored_phy + np.asarray(size, dtype=np.int64)
    put = np.flatnonzero(ends > np.maximum.accumulate(np.concatenate(([-1], ends[:-1]))))
    put = put[queue_offset[put] >= 0]
    if not put.size:
        return put, put
    # 2. the queue starts at its first put; each offset from there on is held by its first claim
    put = put[queue_offset[put] >= queue_offset[put[0]]]
    _, first_claim = np.unique(queue_offset[put], return_index=True)
    return put, put[first_claim]


def place_entries(topic: str, queue_id: int, stored_phy: np.ndarray, size: np.ndarray,
                  tags_code: np.ndarray, queue_offset: np.ndarray, cq_file_size: int,
                  commitlog_file_size: int) -> RepairedQueue:
    """The repaired store's queue from its puts in commitlog order: every entry at its record's
    own queue offset, never renumbered (a queue offset is a message's identity: consumers commit
    it, and the next put continues from the max).

    Kept from the broker's put (R§5.3): a put whose end is not past every earlier put's end is a
    repeat (dedup by phy); the queue starts at its first put's offset, the slots of its first
    CQ file before it pre-blank fillers (``fillPreBlank``); the first put claiming a queue offset
    holds it (later claims are ``duplicate_queue_offset`` findings), puts below the start are
    dropped. Not kept: the broker writes a put whose offset is past its write position at that
    position ("[BUG]logic queue order maybe wrong", E#23), which renumbers every later entry.
    Here the offsets between are fillers: size ``FILLER_SIZE``, tags 0, and as phy offset the
    queue's last entry before them in an earlier commitlog file than the entry after them (0 if
    there is none), rounded down to the start of its commitlog file (``filler_phy``). A pull
    that meets a filler gets nothing and skips every later entry of the filler's commitlog file
    (``DefaultMessageStore#getMessage``, ``rollNextFile``), so the phy must not share a file with
    the entries that follow; where it can, it shares the previous entry's file, so whether a phy
    offset is below the commitlog's min (a file start) does not change back and forth along the
    queue, as 5.x's ``ConsumeQueue#correctMinOffset`` binary search assumes (R§7.2). Entries on
    disk are not consulted: a queue offset holds what the commitlog says or a filler."""
    stored_phy = np.asarray(stored_phy, dtype=np.int64)
    size = np.asarray(size, dtype=np.int64)
    tags_code = np.asarray(tags_code, dtype=np.int64)
    queue_offset = np.asarray(queue_offset, dtype=np.int64)
    per_file = slots_per_file(cq_file_size)
    put, rows = held_puts(stored_phy, size, queue_offset)
    if not put.size:
        return RepairedQueue(topic, queue_id, cq_file_size, 0, np.zeros(0, CQ_ENTRY_DTYPE), 0, [])
    start = int(queue_offset[put[0]])
    offsets = queue_offset[rows]
    # 3. the slots from the start's CQ file on: pre-blank head, entries at their offsets, fillers
    base = start - start % per_file
    slots = np.zeros(int(offsets[-1]) + 1 - base, CQ_ENTRY_DTYPE)
    slots[:start - base] = (0, PRE_BLANK_SIZE, 0)
    at = offsets - base
    slots["phy_offset"][at] = stored_phy[rows]
    slots["size"][at] = size[rows]
    slots["tags_code"][at] = tags_code[rows]
    fillers = []
    gaps = np.flatnonzero(np.diff(offsets) > 1)
    if gaps.size:
        phys = stored_phy[rows]
        reached = np.maximum.accumulate(phys)
        after = phys[gaps + 1]
        file_of_after = after - after % commitlog_file_size
        # the last entry before the first one reaching the following entry's commitlog file
        before = np.minimum(np.searchsorted(reached, file_of_after, "left"), gaps + 1) - 1
        filler_phy = filler_phy_of(np.where(before >= 0, phys[np.maximum(before, 0)], 0), commitlog_file_size)
        for g, phy in zip(gaps.tolist(), filler_phy.tolist()):
            lo, hi = int(offsets[g]) + 1, int(offsets[g + 1])
            slots[lo - base:hi - base] = (phy, FILLER_SIZE, 0)
            fillers.append((lo, hi, phy))
    return RepairedQueue(topic, queue_id, cq_file_size, base, slots, start, fillers)


def rebuild_queue(topic: str, queue_id: int, records: pa.Table, cq_file_size: int,
                  commitlog_file_size: int) -> RepairedQueue:
    """A queue of the repaired store (``place_entries``) over ``records`` (the queue's
    dispatchable records or ``ENTRY_SCHEMA`` rows, any order; put in commitlog order)."""
    order = [(c, "ascending") for c in ("phy_offset", "copy") if c in records.column_names]
    t = records.sort_by(order or "stored_phy_offset")
    return place_entries(topic, queue_id, t.column("stored_phy_offset").to_numpy(),
                         t.column("total_size").to_numpy(), t.column("tags_code").to_numpy(),
                         t.column("queue_offset").to_numpy(), cq_file_size, commitlog_file_size)


@dataclass
class QueuePart:
    """What a rebuild task wrote for one part (a CQ file of a queue, or a whole queue), and what
    the driver needs to check that a queue cut into parts gives the bytes of one rebuild of the
    whole queue (``irregular_queues``)."""

    topic: str
    queue_id: int
    file_no: int                      # -1: the whole queue
    regular: bool                     # consecutive queue offsets, strictly increasing ends
    entries: int
    first_offset: int
    last_offset: int
    first_position: tuple[int, int]   # (phy_offset, copy) of the first and last put
    last_position: tuple[int, int]
    first_end: int                    # stored phy + size of the first and last put
    last_end: int
    min_offset: int
    max_offset: int
    last_store_timestamp: int
    fillers: list[tuple[int, int, int]] = field(default_factory=list)
    """(first offset, end offset, phy) of each run of filler units written (``place_entries``)."""


def rebuild_queue_part(topic: str, queue_id: int, file_no: int, entries: pa.Table, cq_file_size: int,
                       queue_dir: str, input_queue_dir: str | None, commitlog_file_size: int) -> QueuePart:
    """Rebuild one part and write its CQ file(s) under ``queue_dir``.

    A whole queue (``file_no`` -1) is ``place_entries`` over all its puts. A CQ file of a queue
    (``file_no`` >= 0) is written only if its puts are regular: queue offsets consecutive and
    ends strictly increasing in commitlog order, so that every put lands at its own queue
    offset and the file's bytes do not depend on the other files. Whether the neighbouring
    parts continue it is the driver's check."""
    pos, copy = entries.column("phy_offset").to_numpy(), entries.column("copy").to_numpy()
    step = np.diff(pos)
    in_order = bool(((step > 0) | ((step == 0) & (np.diff(copy) > 0))).all())
    t = entries if in_order else entries.sort_by([("phy_offset", "ascending"), ("copy", "ascending")])
    stored, size = t.column("stored_phy_offset").to_numpy(), t.column("total_size").to_numpy()
    offsets, ends = t.column("queue_offset").to_numpy(), stored + size.astype(np.int64)
    regular = bool(offsets[0] >= 0 and ends[0] > -1 and (np.diff(offsets) == 1).all()
                   and (np.diff(ends) > 0).all())
    min_offset = max_offset = 0
    fillers: list[tuple[int, int, int]] = []
    if file_no < 0 or regular:
        q = place_entries(topic, queue_id, stored, size, t.column("tags_code").to_numpy(), offsets,
                          cq_file_size, commitlog_file_size)
        min_offset, max_offset, fillers = q.min_offset, q.max_offset, q.fillers
        write_repaired_queue(q, queue_dir, input_queue_dir)
    pos, copy = t.column("phy_offset").to_numpy(), t.column("copy").to_numpy()
    return QueuePart(topic, queue_id, file_no, regular, t.num_rows, int(offsets[0]), int(offsets[-1]),
                     (int(pos[0]), int(copy[0])), (int(pos[-1]), int(copy[-1])), int(ends[0]),
                     int(ends[-1]), min_offset, max_offset,
                     int(t.column("store_timestamp").to_numpy().max()), fillers)


def extend_queue(topic: str, queue_id: int, queue_dir: str, cq_file_size: int, rebuilt: tuple[int, int] | None,
                 kept: tuple[int, int], commitlog_file_size: int) -> QueuePart:
    """Filler units from the rebuilt queue's max (``rebuilt``: its min and max offset, None when
    no record of the queue is left) to the max offset of the queue the broker keeps (``kept``:
    its min and max), written into the CQ files under ``queue_dir``. The broker served those
    offsets, consumers may have committed past them, and the next put continues from the max:
    the records behind them are gone (their entries point at zeroed bytes or a missing
    commitlog file), their queue offsets are not. The fillers' phy offset is the start of the
    commitlog file of the queue's last entry (``filler_phy_of``; nothing follows them that a
    pull could skip), 0 for a queue of fillers alone, whose first CQ file gets the pre-blank
    head below its min."""
    os.makedirs(queue_dir, exist_ok=True)
    per_file = slots_per_file(cq_file_size)
    min_offset, first = (kept[0], kept[0]) if rebuilt is None else rebuilt
    stop = kept[1]
    phy = 0
    if rebuilt is not None:
        last = first - 1
        with open(os.path.join(queue_dir, cq_file_name(logic_offset_of(last - last % per_file))), "rb") as fh:
            fh.seek(logic_offset_of(last % per_file))
            phy = filler_phy_of(int(np.frombuffer(fh.read(CQ_ENTRY_DTYPE.itemsize), CQ_ENTRY_DTYPE)[0]["phy_offset"]),
                                commitlog_file_size)
    if rebuilt is None:
        base = min_offset - min_offset % per_file
        head = np.zeros(min_offset - base, CQ_ENTRY_DTYPE)
        head[:] = (0, PRE_BLANK_SIZE, 0)
        write_queue_slots(queue_dir, base, head, cq_file_size)
    slots = np.zeros(max(stop - first, 0), CQ_ENTRY_DTYPE)
    slots[:] = (phy, FILLER_SIZE, 0)
    write_queue_slots(queue_dir, first, slots, cq_file_size)
    return QueuePart(topic, queue_id, -1, False, 0, first, stop - 1, (0, 0), (0, 0), 0, 0, min_offset, stop, 0,
                     [(first, stop, phy)])


def irregular_queues(parts: Iterable[QueuePart]) -> set[tuple[str, int]]:
    """Queues rebuilt file by file whose files do not join up into one sequential rebuild: a part
    that is not regular itself, or one that does not continue the previous file's queue offsets,
    commitlog positions and ends (a gap, a repeat or a reordering across a file boundary)."""
    by_queue: dict[tuple[str, int], list[QueuePart]] = {}
    for p in parts:
        if p.file_no >= 0:
            by_queue.setdefault((p.topic, p.queue_id), []).append(p)
    bad = set()
    for key, ps in by_queue.items():
        ps.sort(key=lambda p: p.file_no)
        if not all(p.regular for p in ps) or any(
                b.first_offset != a.last_offset + 1 or b.first_position <= a.last_position
                or b.first_end <= a.last_end for a, b in zip(ps, ps[1:])):
            bad.add(key)
    return bad


def queue_table(parts: Iterable[QueuePart]) -> pa.Table:
    """One row per rebuilt queue: topic, queue_id, min/max offset, entries, last store time."""
    by_queue: dict[tuple[str, int], list[QueuePart]] = {}
    for p in parts:
        by_queue.setdefault((p.topic, p.queue_id), []).append(p)
    rows = []
    for (topic, qid), ps in sorted(by_queue.items()):
        lo, hi = min(p.min_offset for p in ps), max(p.max_offset for p in ps)
        rows.append({"topic": topic, "queue_id": qid, "min_offset": lo, "max_offset": hi,
                     "entries": hi - lo, "last_store_timestamp": max(p.last_store_timestamp for p in ps)})
    return pa.Table.from_pylist(rows, schema=REPAIRED_QUEUE.arrow())


def write_repaired_queue(q: RepairedQueue, queue_dir: str, input_queue_dir: PathRef | None = None
                         ) -> list[str]:
    """The CQ files of ``q`` (``consumequeue.write_queue_files``).

    When the queue starts inside its first file (older commitlog files are gone), the slots before
    its min offset keep what the input's file holds there, as the broker keeps them (they are below
    the min offset and never served); pre-blank fillers are written only where the input has none.
    """
    slots = q.slots
    head = q.min_offset - q.first
    if head > 0 and input_queue_dir is not None:
        old = location(input_queue_dir) / cq_file_name(logic_offset_of(q.first))
        if old.is_file() and old.size() == q.file_size:
            slots = slots.copy()
            slots[:head] = np.frombuffer(old.read_bytes(0, logic_offset_of(head)), dtype=slots.dtype)
    with writing(queue_dir, "consume queue file"):
        return write_queue_files(queue_dir, q.first, slots, q.file_size)


@dataclass
class IndexPuts:
    """Index puts in put order (F§7.4): keyHash, phy offset and store time of every key."""

    key_hash: np.ndarray
    phy: np.ndarray
    store_timestamp: np.ndarray
    record_row: np.ndarray
    """Each put's record's row among the records the puts were made from (its topic is there)."""
    record_phy: np.ndarray
    """Where each put's record lies (its ``phy_offset``): what a pass's cut is compared with."""

    def of_records(self, record_phy: np.ndarray) -> tuple["IndexPuts", np.ndarray]:
        """The puts of the records at ``record_phy`` (in commitlog order, as these puts are) and
        how many each record puts."""
        lo = np.searchsorted(self.record_phy, record_phy, "left")
        counts = np.searchsorted(self.record_phy, record_phy, "right") - lo
        at = np.repeat(lo - (np.cumsum(counts) - counts), counts) + np.arange(int(counts.sum()))
        return IndexPuts(self.key_hash[at], self.phy[at], self.store_timestamp[at], self.record_row[at],
                         self.record_phy[at]), counts

    def below(self, end: int) -> "IndexPuts":
        """The puts of the records below ``end``."""
        keep = self.record_phy < end
        if keep.all():
            return self
        return IndexPuts(self.key_hash[keep], self.phy[keep], self.store_timestamp[keep], self.record_row[keep],
                         self.record_phy[keep])


def index_puts(records: pa.Table | pa.RecordBatch, tag_keys: bool, ordered: bool = False) -> IndexPuts:
    """``IndexService#buildIndex`` over records (sorted by stored phy offset unless ``ordered``),
    vectorised: every record but a ROLLBACK one puts ``topic#UNIQ_KEY`` then ``topic#token`` for
    each KEYS token, then with ``tag_keys`` (5.4+, ``ScanOptions.index_tags``) ``topic#T#TAGS``."""
    if not ordered:
        records = records.sort_by("stored_phy_offset")
    counts, rows, keys = index_put_keys(records, tag_keys)
    return IndexPuts(index_key_hashes_of(records.column("topic"), rows, keys),
                     np.repeat(records.column("stored_phy_offset").to_numpy(), counts),
                     np.repeat(records.column("store_timestamp").to_numpy(), counts), rows,
                     np.repeat(records.column("phy_offset").to_numpy(), counts))


def segment_index_puts(path: str, opts: rf.ScanOptions, end: int) -> Iterator[tuple[IndexPuts, int]]:
    """The index puts of one commitlog file's records below ``end``, batch by batch, in commitlog
    order, each with the largest store time of the batch's records (the checkpoint's
    physicMsgTimestamp is the store's latest). Records behind bytes that are not a record below
    ``end`` included, as for the consume queues (``dispatch_entries``)."""
    from store_reader.formats.commitlog import SegmentScan

    for rb in SegmentScan(path, opts, columns=INDEX_COLUMNS, batch_size=SCAN_BATCH, include_lost=True):
        pos = rb.column("phy_offset").to_numpy()
        if not len(pos):
            continue
        if pos[0] >= end:
            return
        b = rb if pos[-1] < end else rb.filter(pa.array(pos < end))
        yield index_puts(b, opts.index_tags, ordered=True), int(b.column("store_timestamp").to_numpy().max())


def segment_index_counts(path: str, opts: rf.ScanOptions, end: int) -> tuple[int, int]:
    """(index puts, largest store time) of one commitlog file's records below ``end``: per record
    but a ROLLBACK one, its UNIQ_KEY (if any), KEYS tokens and (``opts.index_tags``) tag key,
    counted without building keys."""
    from store_reader.formats.commitlog import SegmentScan

    cols = ["phy_offset", "sys_flag", "store_timestamp", "uniq_key", "key_list", "tags"]
    return index_counts_of(SegmentScan(path, opts, columns=cols, batch_size=SCAN_BATCH, include_lost=True), end,
                           opts.index_tags)


def index_counts_of(batches: Iterable[pa.RecordBatch], end: int, tag_keys: bool) -> tuple[int, int]:
    """``segment_index_counts`` of a commitlog file's records as read."""
    puts, last_ts = 0, 0
    for rb in batches:
        pos = rb.column("phy_offset").to_numpy()
        below = pos < end
        if not below.any():
            break
        uniq, tokens, tag = index_key_counts(rb, tag_keys)
        puts += int(uniq[below].sum()) + int(tokens[below].sum()) + int(tag[below].sum())
        last_ts = max(last_ts, int(rb.column("store_timestamp").to_numpy()[below].max()))
    return puts, last_ts


# Checks the rebuild's headers-only scan does not make: a file whose valid prefix ended on one of
# these holds records past it that the rebuild still reads when they are below the truncation point.
_CHECKS_THE_REBUILD_SKIPS = frozenset({"body_crc", "record_crc", "dup_info"})


def index_put_counts(summaries: Sequence[SegmentSummary], end: int,
                     recount: Callable[[list[int]], list[tuple[int, int]]]) -> list[tuple[int, int]]:
    """``segment_index_counts`` of every commitlog file below ``end`` (``summaries`` in file
    order), taken from the scan's summaries where the rebuild reads exactly a file's valid prefix
    (the usual case: no second pass). ``recount(indexes)`` counts the other files again: those
    whose prefix ended on a check the rebuild skips or runs past ``end``, and those the broker
    keeps whole with records behind a bad one (``dispatch_entries``)."""
    below = [s for s in summaries if s.file_start < end]
    counts = [(s.index_puts, s.max_store_timestamp or 0) for s in below]
    again = [i for i, s in enumerate(below)
             if s.end_check in _CHECKS_THE_REBUILD_SKIPS or s.end_phy_offset > end
             or (s.resync_position is not None and s.file_start + s.file_size <= end)]
    for i, c in zip(again, recount(again) if again else []):
        counts[i] = c
    return counts


def index_file_plan(puts_per_segment: Sequence[int], index_num: int) -> list[list[tuple[int, int, int]]]:
    """Which puts go into which fresh index file: file k holds puts [k(n-1), (k+1)(n-1)) of the
    store (an index file holds ``maxIndexNum - 1`` entries, its entry 0 is unused). Per file, the
    (segment, first put, end put) ranges to read, starting one put early for every file but the
    first: a file's header starts from its predecessor's last put (``IndexHeader.successor``)."""
    per_file = IndexHeader.first().room(index_num)
    starts = np.concatenate([[0], np.cumsum(puts_per_segment)]).astype(np.int64)
    total = int(starts[-1])
    plan = []
    for lo in range(0, total, per_file):
        hi = min(total, lo + per_file)
        first = max(lo - 1, 0)
        ranges = [(i, int(max(first, starts[i]) - starts[i]), int(min(hi, starts[i + 1]) - starts[i]))
                  for i in range(len(puts_per_segment)) if starts[i] < hi and starts[i + 1] > first]
        plan.append(ranges)
    return plan


@dataclass
class WrittenIndexFile:
    """An index file a task wrote (under a temporary name until the driver names it)."""

    path: str
    header: IndexHeader
    first_put_timestamp: int


class IndexFileWriter:
    """A fresh index file filled by successive batches of ``IndexFile#putKey`` calls and written to
    ``path`` as it fills: the entries are appended to the file batch by batch and their memory
    handed back, so only the header and hash slots stay resident (what a put reads: a slot's
    current head), not the up to ``20 x maxIndexNum`` bytes of entries."""

    def __init__(self, path: str, config: BrokerConfig, start_header: IndexHeader) -> None:
        self.path, self.header = path, start_header
        self.hash_slot_num, self.index_num = config.maxHashSlotNum, config.maxIndexNum
        self.size = index_file_size(self.hash_slot_num, self.index_num)
        self.entries_pos = slot_position(self.hash_slot_num)
        self.first_put_timestamp: int | None = None
        # private anonymous memory: zero pages until touched, handed back by MADV_DONTNEED
        self._buf = mmap.mmap(-1, self.size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        self._data = np.frombuffer(self._buf, dtype=np.uint8)
        with writing(path, "index file"):
            self._fh = open(path, "xb")
        self._written = self.entries_pos                  # file bytes written so far (after the slots)
        self._released = -(-self.entries_pos // mmap.PAGESIZE) * mmap.PAGESIZE

    @property
    def room(self) -> int:
        return self.header.room(self.index_num)

    def put(self, key_hash: np.ndarray, phy: np.ndarray, store_timestamp: np.ndarray) -> None:
        if not len(key_hash):
            return
        if len(key_hash) > self.room:
            raise ValueError(f"{len(key_hash)} puts do not fit the {self.room} entries left in {self.path}")
        if self.first_put_timestamp is None:
            self.first_put_timestamp = int(store_timestamp[0])
        self.header = _put_all(self._data, self.header, np.asarray(key_hash, dtype=np.int64),
                               np.asarray(phy, dtype=np.int64), np.asarray(store_timestamp, dtype=np.int64),
                               self.hash_slot_num)
        # the new entries go to the file; _put_all never reads an older entry back
        end = entry_position(self.hash_slot_num, self.header.index_count)
        with writing(self.path, "index file"):
            self._fh.seek(self._written)
            self._fh.write(self._data[self._written:end])
        self._written = end
        done = end // mmap.PAGESIZE * mmap.PAGESIZE
        if done > self._released:
            self._buf.madvise(mmap.MADV_DONTNEED, self._released, done - self._released)
            self._released = done

    def close(self) -> WrittenIndexFile:
        """Header and hash slots to the file, the rest of it zeros (sparse); the file's size is the
        broker's index file size."""
        with writing(self.path, "index file"):
            self._fh.seek(0)
            self._fh.write(self._data[:self.entries_pos])
            self._fh.truncate(self.size)
            self._fh.close()
        del self._data
        self._buf.close()
        return WrittenIndexFile(self.path, self.header, self.first_put_timestamp or 0)

    def abort(self) -> None:
        try:
            self._fh.close()
        except OSError:           # the write that failed is still buffered: the file goes anyway
            pass
        del self._data
        self._buf.close()
        os.unlink(self.path)


def _prefetched(items: Iterator[Any], depth: int = 2) -> Iterator[Any]:
    """``items`` produced on a thread of their own, at most ``depth`` ahead of the consumer: the
    scanner and the key hashing release the GIL, so they overlap the consumer's work."""
    import queue
    import threading

    q: queue.Queue = queue.Queue(maxsize=depth)
    done = object()
    stop = threading.Event()

    def produce() -> None:
        try:
            for item in items:
                if stop.is_set():
                    return
                q.put((item, None))
            q.put((done, None))
        except BaseException as exc:      # handed to the consumer, raised there
            q.put((done, exc))

    worker = threading.Thread(target=produce, daemon=True)
    worker.start()
    try:
        while True:
            item, exc = q.get()
            if exc is not None:
                raise exc
            if item is done:
                return
            yield item
    finally:
        stop.set()
        while worker.is_alive():          # unblock a producer waiting on a full queue
            try:
                q.get_nowait()
            except queue.Empty:
                worker.join(0.01)


def _range_puts(segments: Sequence[tuple[str, int, int]], opts: rf.ScanOptions, end: int,
                read: Callable[[str, int], Iterable[IndexPuts]] | None = None
                ) -> Iterator[tuple[IndexPuts, int, int]]:
    """(puts of a batch, first, end) for the puts ``[lo, hi)`` of each (commitlog file, lo, hi)."""
    for seg_path, lo, hi in segments:
        seen = 0
        puts = (p for p, _ in segment_index_puts(seg_path, opts, end)) if read is None else read(seg_path, end)
        for p in puts:
            n = len(p.key_hash)
            a, b = max(lo - seen, 0), min(hi - seen, n)
            seen += n
            if a < b:
                yield p, a, b
            if seen >= hi:
                break


def write_index_file_part(path: str, segments: Sequence[tuple[str, int, int]], opts: rf.ScanOptions,
                          end: int, config: BrokerConfig, first: bool,
                          read: Callable[[str, int], Iterable[IndexPuts]] | None = None) -> WrittenIndexFile:
    """One fresh index file from the puts ``[lo, hi)`` of each (commitlog file, lo, hi) in
    ``segments`` (``index_file_plan``), reading those files itself (scanned and hashed a little
    ahead, on a second thread): memory is a few batches plus the hash slots. Unless ``first``,
    the first put read is the previous file's last one, which only sets the starting header.
    ``read(file, end)``: the puts of a commitlog file's records below ``end`` as the run's scan
    kept them (``scanned.index_puts_below``; default: the file is read and its keys hashed)."""
    writer: IndexFileWriter | None = None
    skip = 0 if first else 1
    try:
        for p, a, b in _prefetched(_range_puts(segments, opts, end, read)):
            if writer is None:
                start = IndexHeader.first()
                if skip:
                    start = IndexHeader(end_timestamp=int(p.store_timestamp[a]),
                                        end_phy_offset=int(p.phy[a])).successor()
                    a += skip
                    skip = 0
                writer = IndexFileWriter(path, config, start)
            writer.put(p.key_hash[a:b], p.phy[a:b], p.store_timestamp[a:b])
        if writer is None:
            raise ValueError(f"no index puts in {segments}")
        return writer.close()
    except BaseException:
        if writer is not None:
            writer.abort()
        raise


def name_index_files(written: Sequence[WrittenIndexFile]) -> list[str]:
    """Broker-style names of fresh index files in creation order (their first put's store time,
    UTC), made strictly increasing so they sort in creation order."""
    names: list[str] = []
    for w in written:
        names.append(next_index_file_name(w.first_put_timestamp, names[-1] if names else None))
    return names


def sha256_file(path: str) -> str:
    """SHA-256 of a file, its holes hashed as the zeros they read as without reading them: the
    outputs are full-size preallocated files (an index file is 400+ MB) holding little data, and
    reading a hole makes the kernel zero fresh pages for it."""
    h = hashlib.sha256()
    with open(path, "rb", buffering=0) as fh:
        fd = fh.fileno()
        size = os.fstat(fd).st_size
        pos = 0
        for start, end in data_extents(fd, size):
            update_zeros(h, start - pos)
            while start < end:
                chunk = os.pread(fd, min(COPY_CHUNK, end - start), start)
                if not chunk:
                    raise OSError(errno.EIO, f"file shrank while being hashed at byte {start}", path)
                h.update(chunk)
                start += len(chunk)
            pos = end
        update_zeros(h, size - pos)
    return h.hexdigest()


def sha256_files(paths: Iterable[str]) -> dict[str, str]:
    """SHA-256 of each file, two at a time (hashlib releases the GIL on large reads)."""
    paths = list(paths)
    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(zip(paths, pool.map(sha256_file, paths)))


def sync_tree(root: str) -> None:
    """fsync every file under ``root``, then every directory, deepest first: once a rename
    publishes the tree, it survives a power loss or a kernel crash, not only this process dying.
    (Output files start their write-back as they are finished, so this mostly waits for the tail.)"""
    for dirpath, _, filenames in os.walk(root, topdown=False):
        for name in filenames:
            sync_path(os.path.join(dirpath, name))
        sync_path(dirpath)


def sync_path(path: str) -> None:
    """fsync one file or directory (a directory's entries: a rename or a new file in it)."""
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if os.path.isdir(path) else 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def tree_files(root: str, skip: Iterable[str] = ()) -> list[tuple[str, str]]:
    """(relative path, path) of every file under ``root`` but those in ``skip``, sorted by path."""
    skip = set(skip)
    files = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            p = os.path.join(dirpath, name)
            rel = os.path.relpath(p, root)
            if rel not in skip:
                files.append((rel, p))
    files.sort()
    return files


def tree_manifest(root: str, skip: Iterable[str] = (), known: Mapping[str, str] | None = None
                  ) -> list[dict]:
    """Relative path, size and SHA-256 of every file under ``root``, sorted by path. ``known``:
    digests already computed (relative path -> SHA-256, e.g. by ``placement.place_segment`` as
    it wrote the file); only the other files are read."""
    known = known or {}
    files = tree_files(root, skip)
    digests = sha256_files(p for rel, p in files if rel not in known)
    return [{"path": rel, "size": os.path.getsize(p), "sha256": known[rel] if rel in known else digests[p]}
            for rel, p in files]


def write_manifest(out_dir: str, content: dict) -> None:
    with open(os.path.join(out_dir, "MANIFEST.json"), "x", encoding="utf-8") as fh:
        json.dump(content, fh, indent=2, sort_keys=True)
        fh.write("\n")


def copy_controller_files(store: Store, dest_root: Path, end: int) -> None:
    """Controller mode: the broker identity as it is, and the epoch entries the broker loads
    (``controller.read_epoch_file``) without those starting past the repaired commitlog's end
    (``end``), which claim data it does not hold (``EpochFileCache#truncateSuffixByOffset``
    keeps an epoch that starts at the end). Unchanged entries are copied byte for byte, .bak
    included; an empty list writes no file, as ``CheckpointFile#write`` does not."""
    for name in IDENTITY_FILES:
        src = store.root / name
        if src.is_file():
            (dest_root / name).write_bytes(location(src).read_bytes())
    epochs = read_epoch_file(store.root / EPOCH_FILE)
    kept = [e for e in epochs.entries if e.start_offset <= end]
    if kept == epochs.entries and not epochs.problems and epochs.start_fails is None:
        for name in (EPOCH_FILE, EPOCH_FILE + ".bak"):
            src = store.root / name
            if src.is_file():
                (dest_root / name).write_bytes(location(src).read_bytes())
    elif kept:
        (dest_root / EPOCH_FILE).write_bytes(epoch_file_bytes(kept))


def rocksdb_puts(out_dir: Path, cfg: BrokerConfig, from_phy: int
                 ) -> tuple[dict[tuple[str, int], list[tuple[int, int, int, int, int]]],
                            dict[tuple[str, int], tuple[int, int]]]:
    """What a 5.4+ broker's restart leaves in the RocksDB consume queue beside the file one
    (R§15.2), from the repaired file queues (fillers left out: no record is dispatched for them):
    the units its recovery puts, every record from ``from_phy`` on as (queue offset, phy, size,
    tags code, store timestamp) per queue, each record's STORETIMESTAMP read from the repaired
    commitlog; and every queue's ``max`` key, (phy, queue offset) of its last unit (a put's, or
    where the truncation moves it back)."""
    from store_reader.formats.consumequeue import list_queue_files, list_queues, read_queue_slots, slot_of

    commitlog = out_dir / "commitlog"
    size = cfg.mappedFileSizeCommitLog
    puts: dict[tuple[str, int], list[tuple[int, int, int, int, int]]] = {}
    last: dict[tuple[str, int], tuple[int, int]] = {}
    handles: dict[int, Any] = {}
    try:
        for ref in list_queues(out_dir):
            units = []
            for f in list_queue_files(ref.path, cfg.cq_file_size, rocketmq5=True):
                slots = read_queue_slots(f.path)
                real = np.flatnonzero((slots["size"] > 0) & (slots["size"] != FILLER_SIZE))
                if real.size:
                    i = int(real[-1])
                    last[(ref.topic, ref.queue_id)] = (int(slots["phy_offset"][i]), slot_of(f.start) + i)
                for i in real[slots["phy_offset"][real] >= from_phy]:
                    phy = int(slots["phy_offset"][i])
                    start = phy - phy % size
                    if start not in handles:
                        handles[start] = open(commitlog / cq_file_name(start), "rb")
                    fh = handles[start]
                    fh.seek(phy - start + rf.SYSFLAG_POS)
                    sys_flag, = struct.unpack(">i", fh.read(4))
                    fh.seek(phy - start + rf.store_timestamp_pos(sys_flag))
                    ts, = struct.unpack(">q", fh.read(8))
                    units.append((slot_of(f.start) + int(i), phy, int(slots["size"][i]),
                                  int(slots["tags_code"][i]), ts))
            if units:
                puts[(ref.topic, ref.queue_id)] = units
    finally:
        for fh in handles.values():
            fh.close()
    return puts, last


def copy_config(src_root: Path | StoreLocation, dest_root: Path) -> list[str]:
    """``config/`` copied as it is (the broker's own fallback files included) and the ``lock`` file;
    from a remote store (``storefs``) file by file.

    A file that cannot be read is left out, as the broker's load treats it (``config.load_config``:
    it falls back to the ``.bak``), and returned as ``"<file>: <reason>"``; anything but a regular
    file or a directory (a FIFO would block the copy forever) is refused naming it."""
    left_out: list[str] = []
    if not isinstance(src_root, Path):
        if (src_root / "config").is_dir():
            for rel, _, _ in walk_files(src_root / "config"):
                (dest_root / "config" / rel).parent.mkdir(parents=True, exist_ok=True)
                (dest_root / "config" / rel).write_bytes((src_root / "config" / rel).read_bytes())
        if (src_root / "lock").is_file():
            (dest_root / "lock").write_bytes((src_root / "lock").read_bytes())
        return left_out

    def copy(src: str, dest: str) -> None:
        try:                    # config files are small: read whole, so only reading is forgiven
            with open_regular(src, "config file") as fin:
                data = fin.read()
        except OSError as exc:
            left_out.append(f"{src}: {exc.strerror}")
            return
        with open(dest, "xb") as fout:
            fout.write(data)
        shutil.copystat(src, dest)

    def copy_dir(src: str, dest: str) -> None:
        os.mkdir(dest)
        for entry in sorted(os.scandir(src), key=lambda e: e.name):
            try:
                is_dir = entry.is_dir()
            except OSError:     # a symlink that cannot be followed: the copy names why
                is_dir = False
            (copy_dir if is_dir else copy)(entry.path, os.path.join(dest, entry.name))
        shutil.copystat(src, dest)

    try:
        if (src_root / "config").is_dir():
            copy_dir(str(src_root / "config"), str(dest_root / "config"))
        if os.path.lexists(src_root / "lock"):
            copy(str(src_root / "lock"), str(dest_root / "lock"))
    except OSError as exc:      # a directory under config/ that cannot be listed (writing: as it is)
        if not os.fspath(exc.filename or "").startswith(os.fspath(src_root)):
            raise
        raise UnreadableFileError(f"cannot copy config: {exc.strerror}", exc.filename) from None
    return left_out


def correct_consumer_offsets(config_dir: Path, queue_ranges: Mapping[tuple[str, int], tuple[int, int]]
                             ) -> list[dict]:
    """Move every committed offset of the consumer offset files under ``config_dir`` (each
    generation, ``CONSUMER_OFFSET_FILES``) to where the consumer's next pull on the repaired store
    would move it: the broker's own correction (``consumequeue.range_status``) against
    ``queue_ranges``, (min, max) of each repaired queue (a queue not there is empty). An offset
    the queue serves stays; a file that does not decode stays as it is.

    Returns one dict per moved offset, the original value included (for the manifest)."""
    def serves(topic: str, queue_id: int, offset: int) -> tuple[int, int, str | None, int]:
        lo, hi = queue_ranges.get((topic, queue_id), (0, 0))
        return (lo, hi, *range_status(lo, hi, offset))

    moved: list[dict] = []
    for name in CONSUMER_OFFSET_FILES:
        path = config_dir / name
        if not path.is_file():
            continue
        changed = rewrite_consumer_offsets(path, lambda t, g, q, o: serves(t, q, o)[3],
                                           lmq=name.startswith("lmq"))
        for topic, group, qid, old, new in changed or ():
            lo, hi, status, _ = serves(topic, qid, old)
            moved.append({"file": f"config/{name}", "topic": topic, "group": group, "queueId": qid,
                          "committedOffset": old, "repairedOffset": new, "status": status,
                          "repairedMin": lo, "repairedMax": hi})
    return moved


def repaired_checkpoint(last_store_ts: int, last_cq_store_ts: int, index_msg_ts: int,
                        confirm_offset: int, broker_5x: bool) -> Checkpoint:
    """A checkpoint consistent with a store that is flushed and dispatched up to its end."""
    return Checkpoint(physic_msg_timestamp=last_store_ts, logics_msg_timestamp=last_cq_store_ts,
                      index_msg_timestamp=index_msg_ts, master_flushed_offset=0,
                      confirm_phy_offset=confirm_offset if broker_5x else 0)


def write_checkpoint_file(dest_root: Path, ckpt: Checkpoint, broker_5x: bool) -> None:
    write_checkpoint(dest_root / "checkpoint", ckpt, rocketmq5=broker_5x)


def full_index_end_timestamp(headers: Sequence[IndexHeader], index_num: int) -> int:
    """``indexMsgTimestamp`` after a full flush: end time of the last index file that is full."""
    full = [h.end_timestamp for h in headers if h.is_full(index_num)]
    return full[-1] if full else 0
