"""The repaired store's consume queues, rebuilt from every surviving record: the puts of a commitlog
file (LMQ copies included), cut into rebuild parts; ``place_entries``, the one rule of what a
repaired queue holds (every entry at its own queue offset, fillers where records are gone); the CQ
files written; the RocksDB consume queue a 5.4+ broker's restart leaves beside them.

Spark-free building blocks; ``jobs/repairwrite.py`` runs them in parallel (one task per bucket of CQ
files or queues; the audit's queue buckets write a queue whose puts are in order a CQ file at a
time, ``QueueWriter``). Everything here writes only below the directory it is given, and holds at
most one segment's records or one bucket's queue entries in memory, whatever the store's size.
"""
from __future__ import annotations

import os
import struct
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Iterator

import numpy as np
import pyarrow as pa

from schemas.repair import DISPATCH_ENTRY, REPAIRED_QUEUE

from store_reader.formats import recordformat as rf
from store_reader.formats.consumequeue import (CQ_ENTRY_DTYPE, PRE_BLANK_SIZE, logic_offset_of, slots_per_file,
                                               write_queue_files, write_queue_slots)
from store_reader.broker.dispatch import queue_puts
from store_reader.formats.mappedfile import file_name as cq_file_name
from store_reader.ranges import stable_order
from store_reader.io.storefs import location
from store_reader.io.outputs import writing

if TYPE_CHECKING:
    from store_reader.formats.brokerconf import BrokerConfig
    from store_reader.io.storefs import PathRef


# Records per batch a rebuild scans a commitlog file in.
SCAN_BATCH = 65536

# Columns of a record the consume queue rebuild reads (schemas.MESSAGE names).
DISPATCH_COLUMNS = ["phy_offset", "stored_phy_offset", "total_size", "topic", "queue_id", "queue_offset",
                    "sys_flag", "tags_code", "store_timestamp"]


ENTRY_SCHEMA = DISPATCH_ENTRY.arrow()


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
    offsets inside it whose records are gone: ``(first offset, end offset, filler phy offset)``;
    which of the puts it was placed from its entries are (``held``, indices ascending by queue
    offset: the audit's REBUILT view is those slots) and the offsets several kept puts claimed.

    What a correct store holds, built from the commitlog alone: never the broker's put state
    machine (``cqueue.ConsumeQueueState``), whose renumbering after a gap it must not inherit."""

    topic: str
    queue_id: int
    file_size: int
    first: int
    slots: np.ndarray
    min_offset: int
    fillers: list[tuple[int, int, int]]
    held: np.ndarray
    duplicates: np.ndarray
    """Queue offsets claimed by more than one kept put (``duplicate_queue_offset``)."""

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
        return RepairedQueue(topic, queue_id, cq_file_size, 0, np.zeros(0, CQ_ENTRY_DTYPE), 0, [], put, put)
    claims, count = np.unique(queue_offset[put], return_counts=True)
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
    fillers = _place_fillers(slots, base, offsets, stored_phy[rows], np.flatnonzero(np.diff(offsets) > 1),
                             commitlog_file_size)
    return RepairedQueue(topic, queue_id, cq_file_size, base, slots, start, fillers, rows, claims[count > 1])


def _place_fillers(slots: np.ndarray, base: int, offsets: np.ndarray, phys: np.ndarray, gaps: np.ndarray,
                   commitlog_file_size: int) -> list[tuple[int, int, int]]:
    """The fillers of ``place_entries`` between held entries ``g`` and ``g + 1`` for each of
    ``gaps`` (``offsets``, ``phys``: the held entries in queue offset order), written into
    ``slots`` (from queue offset ``base``); returns them as ``RepairedQueue.fillers``."""
    fillers: list[tuple[int, int, int]] = []
    if not gaps.size:
        return fillers
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
    return fillers


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


@dataclass(frozen=True)
class QueueTarget:
    """Where a task holding whole queues (the audit's queue buckets) writes them into the repaired
    store (``write_whole_queue``): the output root, the input store's consume queue directory (the
    slots below a queue's min are kept from its files), the file sizes, and the (min, max) offset
    of every queue the broker keeps (``extend_queue``)."""

    out_root: str
    input_dir: Any
    cq_file_size: int
    commitlog_file_size: int
    kept: dict[tuple[str, int], tuple[int, int]]

    def queue_dir(self, topic: str, queue_id: int) -> str:
        return os.path.join(self.out_root, "consumequeue", topic, str(queue_id))


def write_whole_queue(target: QueueTarget, topic: str, queue_id: int, q: RepairedQueue | None,
                      record_phy: np.ndarray, stored_phy: np.ndarray, size: np.ndarray, queue_offset: np.ndarray,
                      last_store_timestamp: int) -> tuple[list[QueuePart], dict[str, str]]:
    """A queue of the repaired store, ``q`` (``place_entries`` over its puts in commitlog order;
    ``record_phy``: where each put's record lies; None: no puts, a queue the broker keeps whose
    records are all gone), written in one piece, then fillers up to the max of the queue the broker
    keeps (``extend_queue``); each of its files hashed by the task that wrote it. Returns the parts
    as ``jobs.rebuild.rebuild_consume_queues`` reports them and each file's SHA-256 by its path
    below the output root."""
    queue_dir = target.queue_dir(topic, queue_id)
    parts = []
    if q is not None:
        write_repaired_queue(q, queue_dir, target.input_dir / topic / str(queue_id))
        stored_phy, queue_offset = np.asarray(stored_phy, np.int64), np.asarray(queue_offset, np.int64)
        ends = stored_phy + np.asarray(size, np.int64)
        parts.append(QueuePart(topic, queue_id, -1, False, len(queue_offset), int(queue_offset[0]),
                               int(queue_offset[-1]), (int(record_phy[0]), 0), (int(record_phy[-1]), 0),
                               int(ends[0]), int(ends[-1]), q.min_offset, q.max_offset, last_store_timestamp,
                               q.fillers))
    return _finish_queue(target, topic, queue_id, parts)


def _finish_queue(target: QueueTarget, topic: str, queue_id: int, parts: list[QueuePart]
                  ) -> tuple[list[QueuePart], dict[str, str]]:
    """A queue placed (``parts``: its rebuilt part, if it has puts) extended with fillers up to the
    max of the queue the broker keeps (``extend_queue``), and its files hashed."""
    from store_reader.io.hashing import sha256_file

    queue_dir = target.queue_dir(topic, queue_id)
    rebuilt = (parts[0].min_offset, parts[0].max_offset) if parts else None
    kept = target.kept.get((topic, queue_id))
    if kept is not None and kept[1] > (kept[0] if rebuilt is None else rebuilt[1]):
        parts.append(extend_queue(topic, queue_id, queue_dir, target.cq_file_size, rebuilt, kept,
                                  target.commitlog_file_size))
    rel = os.path.relpath(queue_dir, target.out_root)
    names = sorted(os.listdir(queue_dir)) if os.path.isdir(queue_dir) else []
    return parts, {os.path.join(rel, n): sha256_file(os.path.join(queue_dir, n)) for n in names}


def puts_in_order(stored_phy: np.ndarray, size: np.ndarray, queue_offset: np.ndarray,
                  last: tuple[int, int, int] | None) -> tuple[bool, tuple[int, int, int] | None]:
    """Whether a queue's puts (in commitlog order, continuing puts whose last was ``last``: its
    queue offset, phy offset and end) each land at their own queue offset one after the other:
    queue offsets (from 0), phy offsets and ends strictly increasing. Then ``held_puts`` holds
    every one of them and no rule looks back past the previous entry and the last one in an
    earlier commitlog file, so the queue can be placed a window at a time (``QueueWriter``).
    Returns it and the new ``last``."""
    if not len(queue_offset):
        return True, last
    off = np.asarray(queue_offset, np.int64)
    phy = np.asarray(stored_phy, np.int64)
    ends = phy + np.asarray(size, np.int64)
    if last is not None:
        off, phy, ends = (np.concatenate([[v], a]) for v, a in zip(last, (off, phy, ends)))
    ok = bool(off[0] >= 0 and (np.diff(off) > 0).all() and (np.diff(phy) > 0).all() and (np.diff(ends) > 0).all())
    return ok, (int(off[-1]), int(phy[-1]), int(ends[-1]))


class QueueWriter:
    """``write_whole_queue`` of a queue whose puts are in order (``puts_in_order``), given a window
    of queue offsets at a time (ascending, each window's puts in commitlog order): the same files,
    parts and hashes, holding one window's puts and slots, never the whole queue's."""

    def __init__(self, target: QueueTarget, topic: str, queue_id: int) -> None:
        self.target, self.topic, self.queue_id = target, topic, queue_id
        self.queue_dir = target.queue_dir(topic, queue_id)
        # the held entries a later filler's phy can depend on: (queue offset, phy) of the last one
        # in an earlier commitlog file than the last, and of the last (``place_entries``)
        self.carry = (np.zeros(0, np.int64), np.zeros(0, np.int64))
        self.start: int | None = None
        self.entries = 0
        self.first: tuple[int, int, int] = (0, 0, 0)      # queue offset, record phy, end of the first put
        self.last: tuple[int, int, int] = (0, 0, 0)
        self.fillers: list[tuple[int, int, int]] = []

    def add(self, record_phy: np.ndarray, stored_phy: np.ndarray, size: np.ndarray, tags_code: np.ndarray,
            queue_offset: np.ndarray) -> None:
        if not len(queue_offset):
            return
        t = self.target
        per_file = slots_per_file(t.cq_file_size)
        phy, off = np.asarray(stored_phy, np.int64), np.asarray(queue_offset, np.int64)
        ends = phy + np.asarray(size, np.int64)
        n = len(self.carry[0])
        if self.start is None:
            self.start = int(off[0])
            self.first = (self.start, int(record_phy[0]), int(ends[0]))
            lo = self.start - self.start % per_file
        else:
            lo = int(self.carry[0][-1]) + 1
        offsets, phys = np.concatenate([self.carry[0], off]), np.concatenate([self.carry[1], phy])
        slots = np.zeros(int(off[-1]) + 1 - lo, CQ_ENTRY_DTYPE)
        head = self.start - lo
        if head > 0:
            slots[:head] = (0, PRE_BLANK_SIZE, 0)
            old = kept_head(lo, self.start, t.cq_file_size, t.input_dir / self.topic / str(self.queue_id))
            if old is not None:
                slots[:head] = old
        at = off - lo
        slots["phy_offset"][at] = phy
        slots["size"][at] = size
        slots["tags_code"][at] = tags_code
        gaps = np.flatnonzero(np.diff(offsets) > 1)
        self.fillers += _place_fillers(slots, lo, offsets, phys, gaps[gaps >= n - 1], t.commitlog_file_size)
        with writing(self.queue_dir, "consume queue file"):
            write_queue_slots(self.queue_dir, lo, slots, t.cq_file_size)
        self.entries += len(off)
        self.last = (int(off[-1]), int(record_phy[-1]), int(ends[-1]))
        last_file = phys[-1] - phys[-1] % t.commitlog_file_size
        below = int(np.searchsorted(phys, last_file, "left")) - 1
        keep = [below, len(phys) - 1] if below >= 0 else [len(phys) - 1]
        self.carry = (offsets[keep], phys[keep])

    def finish(self, last_store_timestamp: int) -> tuple[list[QueuePart], dict[str, str]]:
        """The queue's parts and its files' SHA-256 (``write_whole_queue``)."""
        parts = []
        if self.start is not None:
            (o0, p0, e0), (o1, p1, e1) = self.first, self.last
            parts.append(QueuePart(self.topic, self.queue_id, -1, False, self.entries, o0, o1, (p0, 0), (p1, 0),
                                   e0, e1, self.start, o1 + 1, last_store_timestamp, self.fillers))
        return _finish_queue(self.target, self.topic, self.queue_id, parts)


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
    old = kept_head(q.first, q.min_offset, q.file_size, input_queue_dir)
    if old is not None:
        slots = slots.copy()
        slots[:len(old)] = old
    with writing(queue_dir, "consume queue file"):
        return write_queue_files(queue_dir, q.first, slots, q.file_size)


def kept_head(first: int, min_offset: int, cq_file_size: int, input_queue_dir: PathRef | None) -> np.ndarray | None:
    """The slots ``[first, min_offset)`` of a queue starting inside its first file (``first``: that
    file's first slot) as the input's file holds them (``write_repaired_queue``), None when there
    are none or the input has no such file."""
    head = min_offset - first
    if head <= 0 or input_queue_dir is None:
        return None
    old = location(input_queue_dir) / cq_file_name(logic_offset_of(first))
    if not (old.is_file() and old.size() == cq_file_size):
        return None
    return np.frombuffer(old.read_bytes(0, logic_offset_of(head)), dtype=CQ_ENTRY_DTYPE)


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
