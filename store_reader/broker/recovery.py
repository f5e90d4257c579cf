"""The broker's recovery, predicted: what a RocketMQ broker would do if restarted on this store.

Pure functions over what the scanners report (per-segment summaries, decoded records), the consume
queue files, the checkpoint and the ``abort`` flag, following ``recovery.md`` step by step, bugs and
losses included. Nothing here "fixes" anything: the repaired store is built elsewhere; this module
says what the broker itself would end up with, so the audit can report the difference.

Versions: the releases whose recovery rules differ, ``VERSIONS`` (R§12): ``"4.9"`` (4.9.7 and
4.9.8), ``"5.3"`` (5.3.3), ``"5.4"`` (5.4.0), ``"5.5"`` (5.5.1); ``"5.x"`` spells the newest.
A rule that changed names the release that introduced it (``since``).
"""
from __future__ import annotations

import os
import shutil
import tempfile
import weakref
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Callable, Iterable, Iterator, Sequence

import numpy as np
import pyarrow as pa

from store_reader.formats import recordformat as rf
from store_reader.formats.brokerconf import BrokerConfig
from store_reader.formats.checkpoint import Checkpoint, read_checkpoint
from store_reader.formats.commitlog import SegmentSummary
from store_reader.formats.controller import ConfirmOffset, correct_confirm_offset
from store_reader.formats.consumequeue import (CQ_ENTRY_DTYPE, CQ_STORE_UNIT_SIZE, PRE_BLANK_SIZE, list_queue_files,
                                               list_queues, range_status, read_queue_slots)
from store_reader.broker.dispatch import dispatchable, index_put_keys, queue_puts
from store_reader.exceptions import OutputError, StoreReaderError, UnsupportedStoreError
from store_reader.formats.indexfile import (IndexFile, IndexHeader, _put_all, create_index_file, list_index_files,
                                            query_key_hash, read_header, unmap_entries)
from store_reader.formats.inventory import ROCKSDB_CQ_DOUBLE_WRITE
from store_reader.formats.javahash import index_key, index_key_hash, index_key_hashes_of, java_string_hashes
from store_reader.io.storefs import PathRef, location

if TYPE_CHECKING:            # annotations only: store.py reads the versions from here
    from store_reader.broker.bounded import Segments
    from store_reader.formats.dledger import DLedgerRecovery
    from store_reader.repair.write import IndexPuts
    from store_reader.store import Store

V49, V53, V54, V55 = "4.9", "5.3", "5.4", "5.5"
VERSIONS = (V49, V53, V54, V55)          # oldest first: ``since`` compares positions
V5X = "5.x"                              # a spelling of the newest 5.x
# 5.5.0 is not 5.5: it lacks 5.5.1's negative-TOTALSIZE check (R§12)
_SPELLINGS = {V5X: VERSIONS[-1], "4.9.7": V49, "4.9.8": V49, "5.3.3": V53, "5.4.0": V54, "5.5.1": V55}


def resolve_version(name: str) -> str:
    """The ``VERSIONS`` entry ``name`` spells (a release number or ``"5.x"`` = the newest)."""
    version = _SPELLINGS.get(name, name)
    if version not in VERSIONS:
        raise ValueError(f"broker version must be one of {', '.join(VERSIONS + (V5X,))}, got {name!r}")
    return version


def versions_of(spec: str) -> list[str]:
    """The versions a what-if compares, as spelled: ``all`` (``VERSIONS``), ``both`` (4.9 and 5.x,
    the newest) or a comma list of spellings (one per version)."""
    if spec == "all":
        return list(VERSIONS)
    if spec == "both":
        return [V49, V5X]
    out: list[str] = []
    for name in (n.strip() for n in spec.split(",")):
        if resolve_version(name) not in map(resolve_version, out):
            out.append(name)
    return out


def is_whatif(spec: str | None) -> bool:
    """Does a ``--broker-version`` value ask for several versions side by side?"""
    return spec is not None and (spec in ("all", "both") or "," in spec)


def is_5x(version: str) -> bool:
    """A 5.x broker: its store format and load rules (V2 records, 5.x checkpoint fields ...)."""
    return resolve_version(version) != V49


def since(version: str, introduced: str) -> bool:
    """Does ``version`` follow a rule ``introduced`` in that release (R§12)?"""
    return VERSIONS.index(resolve_version(version)) >= VERSIONS.index(introduced)


def index_tag_keys(version: str) -> bool:
    """Whether ``IndexService#buildIndex`` also puts ``topic#T#TAGS`` (5.4.0 on, F§7.4)."""
    return since(version, V54)


# -- a consume queue as the broker holds it in memory ------------------------------------------------

def cq_recovery_start(n_files: int) -> int:
    """``ConsumeQueue#recover`` (R§2): the index of the first of a queue's ``n_files`` files it
    reads, the third last; the files before it are loaded but never checked."""
    return max(0, n_files - 3)


class _CQFile:
    """One CQ file as the broker maps it. A file loaded from disk reads its slots on first use:
    the recovery looks at a queue's last three files only, so the older files of a large store
    never reach memory. ``dirty_from``: the first slot the recovery wrote (its puts), so what
    still equals the file on disk is known without comparing."""

    __slots__ = ("start", "wrote", "path", "dirty_from", "_capacity", "_slots")

    def __init__(self, start: int, capacity: int, wrote: int = 0, path: PathRef | None = None) -> None:
        self.start = start           # logic offset of the file's first byte
        self.wrote = wrote           # write position in bytes
        self.path = path             # the file on disk its slots are read from (None: created)
        self.dirty_from = capacity if path is not None else 0
        self._capacity = capacity
        self._slots: np.ndarray | None = None

    @property
    def slots(self) -> np.ndarray:
        """CQ_ENTRY_DTYPE, one per slot of the file."""
        if self._slots is None:
            self._slots = np.zeros(self._capacity, CQ_ENTRY_DTYPE) if self.path is None \
                else read_queue_slots(self.path)
        return self._slots

    def written(self, slot: int) -> None:
        """The recovery wrote from ``slot`` on."""
        self.dirty_from = min(self.dirty_from, slot)

    def read(self, lo: int, hi: int) -> np.ndarray:
        """Slots ``[lo, hi)``, read from the file unless the slots are held (a few entries looked
        at do not load a whole file)."""
        if self._slots is not None or self.path is None:
            return self.slots[lo:hi]
        raw = location(self.path).read_bytes(lo * CQ_STORE_UNIT_SIZE, (hi - lo) * CQ_STORE_UNIT_SIZE)
        out = np.zeros(hi - lo, CQ_ENTRY_DTYPE)
        got = np.frombuffer(raw, CQ_ENTRY_DTYPE, len(raw) // CQ_STORE_UNIT_SIZE)
        out[:len(got)] = got
        return out

    def release(self) -> None:
        """Forget the slots while they still equal the file on disk (read again if used): the
        recovery reads a queue's last three files, and all of them held would grow with the
        store's queues and files rather than with what the recovery writes."""
        if self.path is not None and self.dirty_from >= self._capacity:
            self._slots = None


def _leading(n: int, ok: Callable[[int, int], np.ndarray]) -> int:
    """How many of slots ``[0, n)`` pass ``ok`` (a test of slots ``[lo, hi)``) before the first that
    fails. Tested in growing chunks: the broker's walk stops where its writes did, usually far
    before a preallocated file ends."""
    lo, step = 0, 4096
    while lo < n:
        hi = min(n, lo + step)
        bad = np.flatnonzero(~ok(lo, hi))
        if bad.size:
            return lo + int(bad[0])
        lo, step = hi, step * 4
    return n


@dataclass(frozen=True)
class EntryRun:
    """A run of ``ConsumeQueueState.entries()``: the entries from queue offset ``first`` are slots
    ``[lo, hi)`` of the CQ file at ``path`` as it is on disk (``slots`` None), or ``slots``."""

    first: int
    path: PathRef | None
    lo: int
    hi: int
    slots: np.ndarray | None = None

    def read(self) -> np.ndarray:
        return read_queue_slots(self.path)[self.lo:self.hi] if self.slots is None else self.slots


# A queue offset inside a CQ file missing between two files of its queue (deleted, or never
# rebuilt): ``MappedFileQueue#findMappedFileByOffset`` finds no file, so the broker serves nothing
# there and no put refills it (puts only append to the last file) (R§2).
NO_FILE_ENTRY = (-1, 0, 0)


@dataclass
class ConsumeQueueState:
    """One queue through the broker's recovery (``ConsumeQueue``); offsets in bytes unless named."""

    topic: str
    queue_id: int
    file_size: int
    files: list[_CQFile] = field(default_factory=list)
    min_logic_offset: int = 0
    max_physic_offset: int = -1
    deleted_files: list[int] = field(default_factory=list)
    skipped_repeats: int = 0           # "Build consume queue repeatedly"
    order_warnings: int = 0            # "[BUG]logic queue order maybe wrong"

    @property
    def per_file(self) -> int:
        return self.file_size // CQ_STORE_UNIT_SIZE

    @property
    def max_offset(self) -> int:
        """``getMaxOffsetInQueue``: (last file start + write position) / 20."""
        if not self.files:
            return 0
        last = self.files[-1]
        return (last.start + last.wrote) // CQ_STORE_UNIT_SIZE

    @property
    def min_offset(self) -> int:
        return self.min_logic_offset // CQ_STORE_UNIT_SIZE

    def entries(self) -> np.ndarray:
        """One entry per queue offset from min to max offset (what ``getIndexBuffer`` serves), each
        at its file's own offset: an offset no file holds (a file missing between two others, R§2)
        is ``NO_FILE_ENTRY``. In native byte order (pandas takes no big-endian columns)."""
        native = CQ_ENTRY_DTYPE.newbyteorder("=")
        if not self.files:
            return np.zeros(0, native)
        first = self.files[0].start // CQ_STORE_UNIT_SIZE
        out = np.empty(max(0, self.max_offset - first), native)
        out[:] = NO_FILE_ENTRY
        for f in self.files:
            at, n = f.start // CQ_STORE_UNIT_SIZE - first, f.wrote // CQ_STORE_UNIT_SIZE
            out[at:at + n] = f.slots[:n]
        return out[max(0, self.min_offset - first):]

    def entry_runs(self) -> list[EntryRun]:
        """``entries()`` without reading what is still on disk: per file, the slots the recovery
        left as loaded by reference, the ones it wrote as values (offsets no file holds: no run)."""
        runs = []
        for f in self.files:
            n = f.wrote // CQ_STORE_UNIT_SIZE
            first = f.start // CQ_STORE_UNIT_SIZE       # queue offset of the file's slot 0
            lo = min(max(self.min_offset - first, 0), n)
            clean = lo if f.path is None else max(lo, min(n, f.dirty_from))
            if clean > lo:
                runs.append(EntryRun(first + lo, f.path, lo, clean))
            if n > clean:
                runs.append(EntryRun(first + clean, None, clean, n, f.slots[clean:n].copy()))
        return runs

    # R§2 ConsumeQueue#recover
    def recover(self) -> None:
        if not self.files:
            return
        index = cq_recovery_start(len(self.files))
        process = self.files[index].start
        for f in self.files[index:]:
            phys, sizes = f.slots["phy_offset"], f.slots["size"]
            n = _leading(len(phys), lambda lo, hi: (phys[lo:hi] >= 0) & (sizes[lo:hi] > 0))
            if n:
                last = f.slots[n - 1]
                self.max_physic_offset = int(last["phy_offset"]) + int(last["size"])
            process = f.start + n * CQ_STORE_UNIT_SIZE
            if n < len(phys):
                break
        self._truncate_dirty_files(process)
        self.release()

    def release(self) -> None:
        """``_CQFile.release`` for every file."""
        for f in self.files:
            f.release()

    # R§5.1 MappedFileQueue#truncateDirtyFiles
    def _truncate_dirty_files(self, offset: int) -> None:
        kept = []
        for f in self.files:
            if f.start + self.file_size > offset:
                if offset >= f.start:
                    f.wrote = offset % self.file_size
                    kept.append(f)
                else:
                    self.deleted_files.append(f.start)
            else:
                kept.append(f)
        self.files = kept

    # R§5.2 ConsumeQueue#truncateDirtyLogicFiles
    def truncate_dirty_logic_files(self, phy_offset: int) -> None:
        self.max_physic_offset = phy_offset
        while self.files:
            f = self.files[-1]
            phys, sizes = f.slots["phy_offset"], f.slots["size"]
            if int(phys[0]) >= phy_offset:        # entry 0 is not validity-checked (E#22)
                self.deleted_files.append(f.start)
                self.files.pop()
                continue
            # entries 1.. are kept while valid and below the cut; the first other one stops the walk
            rest_phys, rest_sizes = phys[1:], sizes[1:]
            kept = 1 + _leading(len(rest_phys), lambda lo, hi: (rest_phys[lo:hi] >= 0) & (rest_sizes[lo:hi] > 0)
                                & (rest_phys[lo:hi] < phy_offset))
            f.wrote = kept * CQ_STORE_UNIT_SIZE
            last = f.slots[kept - 1]
            self.max_physic_offset = int(last["phy_offset"]) + int(last["size"])
            f.release()
            return

    # R§5.3 ConsumeQueue#putMessagePositionInfo
    def put(self, phy: int, size: int, tags_code: int, cq_offset: int) -> None:
        if phy + size <= self.max_physic_offset:
            self.skipped_repeats += 1
            return
        expect = cq_offset * CQ_STORE_UNIT_SIZE
        first_create = False
        if not self.files:
            self.files.append(_CQFile(expect - expect % self.file_size, self.per_file))
            first_create = True
        elif self.files[-1].wrote >= self.file_size:
            self.files.append(_CQFile(self.files[-1].start + self.file_size, self.per_file))
        f = self.files[-1]
        if first_create and cq_offset != 0 and f.wrote == 0:
            self.min_logic_offset = expect
            n = (expect % self.file_size) // CQ_STORE_UNIT_SIZE
            f.slots[:n] = np.array([(0, PRE_BLANK_SIZE, 0)], CQ_ENTRY_DTYPE)   # fillPreBlank
            f.written(0)
            f.wrote = n * CQ_STORE_UNIT_SIZE
        if cq_offset != 0:
            current = f.start + f.wrote
            if expect < current:
                self.skipped_repeats += 1
                return
            if expect != current:
                self.order_warnings += 1
        self.max_physic_offset = phy + size
        f.slots[f.wrote // CQ_STORE_UNIT_SIZE] = (phy, size, tags_code)
        f.written(f.wrote // CQ_STORE_UNIT_SIZE)
        f.wrote += CQ_STORE_UNIT_SIZE

    @property
    def write_offset(self) -> int:
        """Queue offset the next put writes at (the last file's start + write position, / 20)."""
        return self.max_offset

    def put_many(self, phy: np.ndarray, size: np.ndarray, tags_code: np.ndarray,
                 cq_offset: np.ndarray) -> None:
        """``put`` for every element, in order, without a Python step per entry.

        The puts alternate between two kinds of runs, each applied at once and exact by
        construction: an accept run, where every put passes both of ``put``'s checks (its end is
        above the max phy offset, which is then the running max of the run's ends; its queue offset
        is 0 or not below the write position, which advances by one per put), and a skip run, where
        the state does not change and every put is a repeat. Runs are searched in windows that
        double while the run lasts, so a queue that keeps alternating still costs O(n).
        """
        phy = np.asarray(phy, dtype=np.int64)
        size = np.asarray(size, dtype=np.int64)
        tags_code = np.asarray(tags_code, dtype=np.int64)
        cq_offset = np.asarray(cq_offset, dtype=np.int64)
        ends = phy + size
        i, n = 0, len(phy)
        while i < n:
            if not self.files:            # the first put creates the queue's first file (pre-blank)
                self.put(int(phy[i]), int(size[i]), int(tags_code[i]), int(cq_offset[i]))
                i += 1
                continue
            i = self._accept_run(phy, size, tags_code, cq_offset, ends, i)
            if i < n:
                i = self._skip_run(cq_offset, ends, i)

    def _accept_run(self, phy: np.ndarray, size: np.ndarray, tags_code: np.ndarray,
                    cq_offset: np.ndarray, ends: np.ndarray, i: int) -> int:
        """Apply the puts from ``i`` while each one is accepted; returns where the run stopped."""
        window, n = 64, len(phy)
        while i < n:
            hi = min(n, i + window)
            e, c = ends[i:hi], cq_offset[i:hi]
            above = np.maximum.accumulate(np.concatenate(([self.max_physic_offset], e[:-1])))
            write = self.write_offset + np.arange(hi - i, dtype=np.int64)
            ok = (e > above) & ((c == 0) | (c >= write))
            bad = np.flatnonzero(~ok)
            m = int(bad[0]) if bad.size else hi - i
            if m:
                self.order_warnings += int(np.count_nonzero((c[:m] != 0) & (c[:m] != write[:m])))
                self._append(phy[i:i + m], size[i:i + m], tags_code[i:i + m])
                self.max_physic_offset = int(e[m - 1])
                i += m
            if bad.size:
                return i
            window *= 2
        return i

    def _skip_run(self, cq_offset: np.ndarray, ends: np.ndarray, i: int) -> int:
        """Count the repeats from ``i`` (state unchanged); returns the next accepted put."""
        window, n = 64, len(ends)
        top, write = self.max_physic_offset, self.write_offset
        while i < n:
            hi = min(n, i + window)
            c = cq_offset[i:hi]
            below = ends[i:hi] <= top
            repeat = below | ((c != 0) & (c < write))
            good = np.flatnonzero(~repeat)
            m = int(good[0]) if good.size else hi - i
            self.skipped_repeats += m
            if not below[:m].all() and self.files[-1].wrote >= self.file_size:
                # getLastMappedFile runs before the queue offset check: a full last file gets
                # its successor even though the put is then skipped
                last = self.files[-1]
                self.files.append(_CQFile(last.start + self.file_size, self.per_file))
            i += m
            if good.size:
                return i
            window *= 2
        return i

    def _append(self, phy: np.ndarray, size: np.ndarray, tags_code: np.ndarray) -> None:
        """Write entries at the write position, rolling to a new file when the last one is full."""
        done, m = 0, len(phy)
        while done < m:
            f = self.files[-1]
            if f.wrote >= self.file_size:
                f = _CQFile(f.start + self.file_size, self.per_file)
                self.files.append(f)
            at = f.wrote // CQ_STORE_UNIT_SIZE
            take = min(self.per_file - at, m - done)
            f.written(at)
            slots = f.slots[at:at + take]
            slots["phy_offset"] = phy[done:done + take]
            slots["size"] = size[done:done + take]
            slots["tags_code"] = tags_code[done:done + take]
            f.wrote += take * CQ_STORE_UNIT_SIZE
            done += take

    # R§7.2 ConsumeQueue#correctMinOffset
    def correct_min_offset(self, min_phy: int, version: str) -> None:
        if not self.files:
            return
        first = self.files[0]
        readable = first.wrote // CQ_STORE_UNIT_SIZE
        if not is_5x(version):
            phys = first.slots["phy_offset"][:readable]
            hit = np.flatnonzero(phys >= min_phy)
            if hit.size:
                self.min_logic_offset = first.start + int(hit[0]) * CQ_STORE_UNIT_SIZE
            return
        max_logic = self.files[-1].start + self.files[-1].wrote
        if self.min_logic_offset >= max_logic:
            return
        last = self.files[-1]
        if last.wrote and int(last.slots[last.wrote // CQ_STORE_UNIT_SIZE - 1]["phy_offset"]) < min_phy:
            self.min_logic_offset = last.start + last.wrote
            return
        start = self.min_logic_offset - first.start
        intact = start >= 0
        start = max(start, 0)
        phys = first.slots["phy_offset"][:readable]
        i0 = start // CQ_STORE_UNIT_SIZE
        if intact and i0 < readable and phys[i0] >= min_phy:
            return
        hit = np.flatnonzero(phys[i0:] >= min_phy)     # the binary search finds the first such entry
        if hit.size:
            self.min_logic_offset = first.start + (i0 + int(hit[0])) * CQ_STORE_UNIT_SIZE


def correct_min_offset_throws(queues: dict[tuple[str, int], ConsumeQueueState]) -> list[StoreReaderError]:
    """Queues on which 5.3.3's ``ConsumeQueue#correctMinOffset`` throws in ``recoverTopicQueueTable``,
    so that ``load()`` fails (apache/rocketmq #9728).

    Unless ``minLogicOffset >= getMaxOffset()`` (= last file start + read position), it reads the
    last entry with ``selectMappedBuffer(readPosition - 20, 20)``; with a read position below 20
    that position is negative, ``readPosition - 20 + 20 <= readPosition`` still holds, and
    ``ByteBuffer.position`` throws ``IllegalArgumentException: newPosition < 0`` (nothing catches
    it before ``load()``). The read position is 0 when the last file's first entry is not valid
    after CQ recovery (an empty file, or a first entry written only in part) and neither the
    truncation of dirty CQ entries (which keeps an entry 0 below the cut, E#22) nor the recovery's
    dispatch put anything there, i.e. the commitlog lost the records that file was for; and
    ``minLogicOffset`` (0 after load unless a pre-blank fill set it) is below the file's start
    whenever the queue has an earlier file or its only file is not named 0. 4.9.7 reads the first
    file with ``selectMappedBuffer(0)``, which checks the position: it never throws here."""
    out = []
    for (topic, qid), q in queues.items():
        if not q.files:
            continue
        last = q.files[-1]
        if last.wrote < CQ_STORE_UNIT_SIZE and q.min_logic_offset < last.start + last.wrote:
            out.append(StoreReaderError(
                f"ConsumeQueue#correctMinOffset throws IllegalArgumentException (newPosition < 0) in "
                f"recoverTopicQueueTable and the 5.x broker fails to start: the last file of "
                f"{topic}/{qid} holds no valid entry after recovery (the commitlog no longer has the "
                f"records it was written for) while the queue's min logic offset {q.min_logic_offset} "
                f"is below its max {last.start + last.wrote}",
                str(last.path) if last.path is not None else None, last.wrote))
    return out


def load_consume_queues(store: Store, broker_5x: bool) -> tuple[dict[tuple[str, int], ConsumeQueueState],
                                                                list[StoreReaderError]]:
    """Every queue as ``load()`` maps it; files of the wrong size are load failures (OBSERVATIONS 9)
    and their queue is left out (the repaired store rebuilds it from the commitlog). The min logic
    offset starts at 0, as the broker's field does, whatever the first file's name."""
    size = store.config.cq_file_size
    queues: dict[tuple[str, int], ConsumeQueueState] = {}
    problems: list[StoreReaderError] = []
    for ref in list_queues(store.root):
        q = ConsumeQueueState(ref.topic, ref.queue_id, size)
        try:
            files = list_queue_files(ref.path, size, rocketmq5=broker_5x)
        except StoreReaderError as exc:
            problems.append(exc)
            continue
        for f in files:
            if f.size == 0:
                continue
            q.files.append(_CQFile(f.start, q.per_file, size, f.path))
        queues[(ref.topic, ref.queue_id)] = q
    return queues, problems


def add_delay_level_queues(config: BrokerConfig, queues: dict[tuple[str, int], ConsumeQueueState]) -> None:
    """4.9's ``ScheduleMessageService#load`` (correctDelayOffset) looks up the schedule queue of
    every delay level, which creates the empty ones (OBSERVATIONS 15)."""
    for level in range(1, len(config.delay_levels_ms) + 1):
        key = (rf.SCHEDULE_TOPIC, level - 1)
        queues.setdefault(key, ConsumeQueueState(*key, config.cq_file_size))


def load_rocksdb_consume_queues(store: Store) -> tuple[dict[tuple[str, int], ConsumeQueueState], int]:
    """The RocksDB consume queue (``RocksDBConsumeQueueStore#load``, R§15.1) as the queues a file
    store would hold: per queue the units up to its ``max`` offset key (what
    ``getMaxOffsetInQueue`` serves), laid out in file-sized runs that are never written to disk;
    and the stored max phy offset (``CHECKPOINT_TOPIC``)."""
    from store_reader.formats.rocksdbcq import served_consume_queue, unit_array

    size = store.config.cq_file_size
    queues: dict[tuple[str, int], ConsumeQueueState] = {}
    db = served_consume_queue(store)
    for (topic, qid), rq in db.queues.items():
        if rq.max is None:          # units without a max key: getMaxOffsetInQueue serves none of them
            continue
        q = ConsumeQueueState(topic, qid, size)
        n = rq.max[1] + 1
        for lo in range(0, n, q.per_file):
            hi = min(n, lo + q.per_file)
            f = _CQFile(lo * CQ_STORE_UNIT_SIZE, q.per_file, (hi - lo) * CQ_STORE_UNIT_SIZE)
            f.slots[: hi - lo] = unit_array(rq.units, lo, hi)
            q.files.append(f)
        last = rq.units.get(rq.max[1])
        q.max_physic_offset = last[0] + last[1] if last is not None else -1
        if rq.min is not None:
            q.min_logic_offset = rq.min[1] * CQ_STORE_UNIT_SIZE
        queues[(topic, qid)] = q
    return queues, db.max_phy_offset


def combined_rocksdb_dir(cfg: BrokerConfig, version: str) -> str:
    """Where a 5.4+ double-write store keeps its RocksDB consume queue: [5.5]
    ``consumequeue_rocksdb/`` with ``useSeparateStorePathForRocksdbCQ``, else (and [5.4] always)
    ``consumequeue/``, beside the topic directories."""
    return "consumequeue_rocksdb" if since(version, V55) and cfg.useSeparateStorePathForRocksdbCQ else "consumequeue"


def combined_rocksdb_max(store: Store, version: str) -> int | None:
    """[5.4+] ``rocksdbCQDoubleWriteEnable`` with the file consume queue served
    (``CombineConsumeQueueStore``, R§15.2): the max phy offset of the RocksDB queue loaded beside
    it, read from the directory that release opens (0 when there is none yet: the broker creates
    it empty); None when no RocksDB queue is loaded beside the file one."""
    cfg = store.config
    if not (since(version, V54) and store.inventory.has(ROCKSDB_CQ_DOUBLE_WRITE)) or "defaultrocksdb" not in \
            [t.strip().lower() for t in cfg.combineCQLoadingCQTypes.split(";")]:
        return None
    from store_reader.formats.rocksdbcq import stored_max_phy_offset

    served = combined_rocksdb_dir(cfg, version)
    if not location(store.root).is_local:
        raise UnsupportedStoreError("a RocksDB consume queue beside the file ones (rocksdbCQDoubleWriteEnable) "
                                    "on a remote store: it is read through rocksdict, from a local directory "
                                    "only (R§15.2)", f"{str(store.root).rstrip('/')}/{served}")
    other = "consumequeue" if served != "consumequeue" else "consumequeue_rocksdb"
    # [5.5] a database in the other directory stops the RocksDBConsumeQueueStore constructor
    if since(version, V55) and os.path.isfile(os.path.join(store.root, other, "CURRENT")):
        raise UnsupportedStoreError(
            f"a RocksDB consume queue in {other}/ but useSeparateStorePathForRocksdbCQ="
            f"{str(cfg.useSeparateStorePathForRocksdbCQ).lower()} opens {served}/: a 5.5 broker refuses to start "
            "on it (find RocksDBConsumeQueue in original/separate path)", os.path.join(store.root, other))
    return stored_max_phy_offset(os.path.join(store.root, served))


# -- the commitlog side -------------------------------------------------------------------------------

@dataclass
class CommitLogFileState:
    name: str
    start: int
    size: int
    wrote: int


@dataclass
class Prediction:
    """What the broker would do if restarted on the store now (fields in the broker's terms).

    ``load_result`` False: the broker refuses the store or throws while loading it, for the
    reasons in ``load_problems`` (each naming file and byte). The recovery fields then describe
    the broker's recovery of the store as a repaired store holds it: what its ``load()`` skips
    or cannot map left out (``Store.commitlog_files``), a commitlog file of the wrong size as
    ``mappedFileSizeCommitLog`` bytes (the missing tail never written), a refused consume queue
    as absent (the repair rebuilds every queue from the commitlog).
    """

    broker_version: str
    load_result: bool
    load_problems: list[str] = field(default_factory=list)
    recovery_path: str = "normal"
    start_file: str | None = None
    max_phy_offset: int = 0
    min_phy_offset: int = -1
    commitlog_files: list[CommitLogFileState] = field(default_factory=list)
    deleted_commitlog_files: list[str] = field(default_factory=list)
    max_phy_offset_of_consume_queue: int = -1
    rocksdb_beside_max_phy_offset: int | None = None
    """[5.4+] double-write: the max phy offset of the RocksDB queue beside the served file one (R§15.2)."""
    dispatched_from: int | None = None
    """Where the recovery's dispatch starts: every record at or past it up to the recovered end is
    handed to the dispatchers (the RocksDB queue beside the file one included, R§15.2)."""
    confirm_offset: int | None = None
    reput_from_offset: int | None = None
    consume_queues: dict[tuple[str, int], ConsumeQueueState] = field(default_factory=dict)
    cq_truncated: bool = False
    index_files: list["PredictedIndexFile"] = field(default_factory=list)
    checkpoint: Checkpoint | None = None
    controller_mode: bool = False
    """5.x with ``enableControllerMode``: the broker loads fenced and keeps a confirm offset."""
    controller: ConfirmOffset | None = None
    """Controller mode: the confirm offset as loaded and as the recovery corrects it."""
    unconfirmed: "Unconfirmed | None" = None
    """Controller mode: the records kept past the confirm offset, undispatched while fenced."""
    compensated: dict[str, int] = field(default_factory=dict)
    """Controller mode: queue offsets advanced past the records after the confirm offset."""
    dledger: "DLedgerRecovery | None" = None
    """A DLedger store: DLedger's own recovery (``dledger.DLedgerRecovery``) the broker's follows."""

    @property
    def broker_5x(self) -> bool:
        """A 5.x broker's prediction (``is_5x``)."""
        return is_5x(self.broker_version)

    def topic_queue_table(self) -> dict[str, int]:
        table = {f"{t}-{q}": s.max_offset for (t, q), s in self.consume_queues.items()}
        return {**table, **self.compensated}


@dataclass
class CombineSearch:
    """[5.4+] ``CombineConsumeQueueStore#isMappedFileMatchedRecover`` (R§15.2): the file consume
    queue assigns queue offsets and is served; the RocksDB one beside it must match too, or the
    search moves back, at most ``extra`` more files over the whole search
    (``extraSearchCommitLogFilesForRecovery``, which counts down and is never reset)."""

    rocksdb_max: int
    """The RocksDB queue's ``dispatchFromPhyOffset``: its stored max phy offset (``CHECKPOINT_TOPIC``)."""
    extra: int
    """``combineCQMaxExtraSearchCommitLogFiles`` left."""
    lmq_rocksdb: bool = False
    """[5.5] ``combineCQUseRocksdbForLmq``: a RocksDB mismatch is never passed over."""

    def matches(self, version: str, stored_phy_offset: int) -> bool:
        """Once the file queue matched a file whose first record's PHYSICALOFFSET is given."""
        if since(version, V55) and self.rocksdb_max <= 0:       # "the store hasn't started before"
            return True
        if stored_phy_offset <= self.rocksdb_max:
            return True
        if since(version, V55) and self.lmq_rocksdb:
            return False
        self.extra -= 1                                            # getAndDecrement() <= 0
        return self.extra + 1 <= 0


def _first_record_matches(s: SegmentSummary, version: str, config: BrokerConfig, abnormal: bool,
                          ckpt: Checkpoint, cq_max: int, rocksdb: bool = False,
                          combine: CombineSearch | None = None) -> bool:
    """``CommitLog#isMappedFileMatchedRecover`` for one file (R§4.1); ``rocksdb``: the consume
    queue is ``RocksDBConsumeQueueStore`` and ``cq_max`` its max phy offset (R§15.1); ``combine``:
    the RocksDB queue beside the file one (R§15.2)."""
    ts = s.first_store_timestamp_raw
    if not since(version, V54):
        # 4.9.7 / 5.3.3 (abnormal path only): the first record's header, read by position
        magics = (rf.MAGIC_V1, rf.MAGIC_V2) if is_5x(version) else (rf.MAGIC_V1,)
        if rocksdb:     # [5.3.3] isEnableRocksDBStore: the stored PHYSICALOFFSET against the CQ max
            return s.first_magic in magics and s.first_stored_phy_offset <= cq_max
        bound = ckpt.min_timestamp_index if config.messageIndexEnable and config.messageIndexSafe \
            else ckpt.min_timestamp
        return s.first_magic in magics and bool(ts) and ts <= bound
    # [5.4] the first record passes the full check (CRC included) and has a store time
    if not s.first_record_valid or not ts:
        return False
    return queue_store_matches(version, config, abnormal, ckpt, cq_max, ts, s.first_stored_phy_offset, rocksdb,
                               combine)


def queue_store_matches(version: str, config: BrokerConfig, abnormal: bool, ckpt: Checkpoint, cq_max: int,
                        ts: int, stored_phy_offset: int, rocksdb: bool = False,
                        combine: CombineSearch | None = None) -> bool:
    """[5.4+] a file's first record (store time ``ts``, stored PHYSICALOFFSET) against the index and
    the consume queues: the test the commitlog's and DLedger's start-file searches share (R§4.1, R§16.2);
    ``rocksdb``: the consume queue is ``RocksDBConsumeQueueStore`` and ``cq_max`` its max phy offset;
    ``combine``: the file queue's test is followed by the RocksDB queue's (R§15.2)."""
    # IndexService: with messageIndexSafe, no later than the last full index file; [5.4] tested
    # before the queue store, [5.5] after it (a registered CommitLogDispatchStore), which matters
    # only for the combine store's count-down
    index_ok = not (config.messageIndexEnable and config.messageIndexSafe and ts > ckpt.index_msg_timestamp)
    if not index_ok and (combine is None or not since(version, V55)):
        return False
    # ConsumeQueueStore#isMappedFileMatchedRecover; RocksDBConsumeQueueStore's on both paths
    if not abnormal or rocksdb:
        matched = stored_phy_offset <= cq_max
    elif not since(version, V55):
        matched = ts <= ckpt.min_timestamp
    # [5.5] the checkpoint's logicsPhysicalOffset; a checkpoint without one: its logicsMsgTimestamp
    elif ckpt.logics_physical_offset <= 0:
        matched = ts <= ckpt.logics_msg_timestamp
    else:
        matched = stored_phy_offset <= ckpt.logics_physical_offset
    if matched and combine is not None:
        matched = combine.matches(version, stored_phy_offset)
    return matched and index_ok


def start_file(summaries: Sequence[SegmentSummary], version: str, config: BrokerConfig, abnormal: bool,
               ckpt: Checkpoint, cq_max: int, rocksdb: bool = False, rocksdb_beside: int | None = None) -> int:
    """R§4.1: the index of the file the commitlog recovery starts from; ``rocksdb_beside``: [5.4+]
    the max phy offset of a RocksDB queue beside the served file one (R§15.2)."""
    if not abnormal and not since(version, V53):          # 4.9.7: the third-last file
        return max(0, len(summaries) - 3)
    if not abnormal and not since(version, V54):          # 5.3.3: the file holding the CQ max
        index = len(summaries) - 1
        while index > 0 and summaries[index].file_start > cq_max:
            index -= 1
        return index
    combine = CombineSearch(rocksdb_beside, config.combineCQMaxExtraSearchCommitLogFiles,
                            config.combineCQUseRocksdbForLmq) \
        if rocksdb_beside is not None and since(version, V54) else None
    # from the newest file back; the normal path never tests the first file
    # [5.4] commitLogRecoverMaxNum: the n-th file from the end is taken whether it matches or not
    left = (config.commitLogRecoverMaxNum if config.commitLogRecoverMaxNum > 0 else 10) \
        if since(version, V54) else None
    lowest = 0 if abnormal else 1
    for index in range(len(summaries) - 1, lowest - 1, -1):
        if left is not None:
            left -= 1
        if _first_record_matches(summaries[index], version, config, abnormal, ckpt, cq_max, rocksdb, combine) \
                or (left is not None and left <= 0):
            return index
    return 0


def _offset_check_cut(summaries: Sequence[SegmentSummary], config: BrokerConfig, start: int, end: int,
                      opts: rf.ScanOptions) -> int:
    """[5.5] ``checkCommitLogOffsetOnRecover`` on the abnormal path: the first VALID record from
    ``start`` whose stored PHYSICALOFFSET lies outside ``[file start, file start + file size]``
    ends the walk where it starts (R§4.3); ``end`` when there is none."""
    from store_reader.formats.commitlog import SegmentScan

    size = config.mappedFileSizeCommitLog
    for s in summaries[start:]:
        if s.file_start >= end:
            break
        for batch in SegmentScan(s.path, opts, columns=["phy_offset", "stored_phy_offset"]):
            pos = batch["phy_offset"].to_numpy()
            stored = batch["stored_phy_offset"].to_numpy()
            bad = np.flatnonzero((pos < end) & ((stored < s.file_start) | (stored > s.file_start + size)))
            if bad.size:
                return int(pos[bad[0]])
    return end


def predict_commitlog(summaries: Sequence[SegmentSummary], version: str, config: BrokerConfig,
                      abnormal: bool, ckpt: Checkpoint, cq_max: int, opts: rf.ScanOptions | None = None,
                      rocksdb: bool = False, rocksdb_beside: int | None = None
                      ) -> tuple[int, int, list[CommitLogFileState], list[str]]:
    """R§4: (start index, recovered end, files after truncation, deleted file names); ``opts``:
    the options the summaries were scanned with (the broker's for ``config`` when None);
    ``rocksdb_beside``: ``start_file``'s."""
    if not summaries:
        return 0, 0, [], []
    start = start_file(summaries, version, config, abnormal, ckpt, cq_max, rocksdb, rocksdb_beside)
    end = summaries[start].file_start
    for i in range(start, len(summaries)):           # R§4.2: a blank marker moves on to the next file
        s = summaries[i]
        end = s.file_start + s.valid_bytes
        if s.end_reason != "eof_marker":
            break
        if since(version, V55) and s.blank_declared_size is not None and s.blank_declared_size < 0:
            break                                     # [5.5.1] a negative TOTALSIZE is INVALID first (R§3)
    if abnormal and since(version, V55) and config.checkCommitLogOffsetOnRecover:
        opts = opts or rf.ScanOptions.for_broker(config, True)
        end = _offset_check_cut(summaries, config, start, end, opts)
    return start, end, *commitlog_files_after(summaries, config, end)


def commitlog_files_after(summaries: Sequence[SegmentSummary], config: BrokerConfig, end: int
                          ) -> tuple[list[CommitLogFileState], list[str]]:
    """R§5.1 ``MappedFileQueue#truncateDirtyFiles(end)``: (files kept, names deleted)."""
    size = config.mappedFileSizeCommitLog    # a file of another length is refused; it maps this much
    files, deleted = [], []
    for s in summaries:
        if s.file_start + size > end:
            if end >= s.file_start:
                files.append(CommitLogFileState(s.segment, s.file_start, size, end - s.file_start))
            else:
                deleted.append(s.segment)
        else:
            files.append(CommitLogFileState(s.segment, s.file_start, size, size))
    return files, deleted


class ScratchDir:
    """Where the replay writes the index files it builds: a directory of the caller's (the run's
    scan directory, which executors see too) or, with None, a temporary one removed once nothing
    refers to this object (the predicted files built in it hold it)."""

    def __init__(self, path: str | None) -> None:
        if path is None:
            path = tempfile.mkdtemp(prefix="rocketmq-predict-")
            weakref.finalize(self, shutil.rmtree, path, True)
        self.path = path

    def new_file(self, stem: str) -> str:
        fd, path = tempfile.mkstemp(prefix=f"{stem}-", dir=self.path)
        os.close(fd)
        return path


@dataclass(frozen=True)
class _BuiltFile:
    header: IndexHeader
    path: str              # in the scratch directory
    continued: bool        # the last file kept at load, continued (else a fresh file)


class IndexDispatch:
    """``IndexService#buildIndex`` fed batch by batch as the records are dispatched (R§8, F§7.4),
    on a thread of its own so the key hashing and slot chains overlap the consume queue puts.

    Like the broker, it writes each index file through a shared mapping of a file (in
    ``scratch``): the entries are appended in order, so once a batch is in, its entries' pages are
    handed back to the page cache and the process holds the hash slots and one batch, whatever
    the number of records replayed.

    A record below the current file's endPhyOffset is skipped; that end is the phy of the last
    record that put keys and only grows, so it is a running max over the records with keys
    (ROLLBACK records and records without keys put nothing)."""

    PENDING = 4          # batches queued for the thread at most

    def __init__(self, config: BrokerConfig, start_header: IndexHeader, base: PathRef | None,
                 scratch: ScratchDir, tag_keys: bool) -> None:
        """``start_header``: where the puts start (``IndexHeader.after_load``); ``base``: the file
        it heads when that file is continued, None for a fresh file; ``tag_keys``: records put
        their tag key too (``dispatch.index_put_keys``)."""
        from concurrent.futures import ThreadPoolExecutor

        self.tag_keys = tag_keys

        self.hash_slot_num, self.index_num = config.maxHashSlotNum, config.maxIndexNum
        self.size = config.index_file_size
        self.end_phy = start_header.end_phy_offset
        self.scratch = scratch
        self.built: list[_BuiltFile] = []
        self.header, self.base = start_header, base
        self.path: str | None = None
        self.continued = False             # the open file is ``base`` continued
        self.data: np.ndarray | None = None
        self.released = 0                  # entries whose pages were handed back
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="index-dispatch")
        self._pending: list = []

    def add(self, batch: pa.RecordBatch, puts: IndexPuts | None = None) -> None:
        self._pending.append(self._pool.submit(self._add, batch, puts))
        if len(self._pending) > self.PENDING:
            self._pending.pop(0).result()

    def _add(self, batch: pa.RecordBatch, puts: IndexPuts | None) -> None:
        """``puts``: the keys of the batch's records as the run's scan hashed them (those of
        other records too), or None (built and hashed here)."""
        if puts is None:
            counts, rows, keys = index_put_keys(batch, self.tag_keys)
        else:
            puts, counts = puts.of_records(batch.column("phy_offset").to_numpy())
        cand = np.flatnonzero(counts > 0)
        if not cand.size:
            return
        phy = batch.column("stored_phy_offset").to_numpy()
        bound = np.maximum.accumulate(np.concatenate(([self.end_phy], phy[cand][:-1])))
        self.end_phy = max(self.end_phy, int(phy[cand].max()))
        indexed = np.zeros(len(phy), dtype=bool)
        indexed[cand] = phy[cand] >= bound
        if not indexed.any():
            return
        sel = None if indexed[cand].all() else np.repeat(indexed, counts)
        if puts is None:
            kh = index_key_hashes_of(batch.column("topic"), rows if sel is None else rows[sel],
                                     keys if sel is None else keys.filter(pa.array(sel)))
        else:
            kh = puts.key_hash if sel is None else puts.key_hash[sel]
        n = counts[indexed]
        self._put(kh.astype(np.int64), np.repeat(phy[indexed], n),
                  np.repeat(batch.column("store_timestamp").to_numpy()[indexed], n))

    def _open_file(self) -> None:
        self.path = self.scratch.new_file("index")
        self.continued = self.base is not None and not self.built   # the last file kept at load
        try:
            if self.continued:
                loc = location(self.base)
                if loc.is_local:
                    shutil.copyfile(loc.path, self.path)
                else:
                    with loc.open_input() as src, open(self.path, "wb") as dst:
                        shutil.copyfileobj(src, dst, 1 << 20)
            else:
                create_index_file(self.path, self.size, mode="wb")
        except OSError as exc:
            raise OutputError(f"cannot write the replayed index file: {exc.strerror or exc}", self.path) from None
        self.data = np.memmap(self.path, dtype=np.uint8, mode="r+")
        self.released = 0

    def _put(self, kh: np.ndarray, phy: np.ndarray, ts: np.ndarray) -> None:
        lo = 0
        while lo < len(kh):
            if self.data is None:
                self._open_file()
            hi = min(len(kh), lo + self.header.room(self.index_num))
            self.header = _put_all(self.data, self.header, kh[lo:hi], phy[lo:hi], ts[lo:hi],
                                   self.hash_slot_num)
            lo = hi
            if self.header.is_full(self.index_num):
                self._close_file()
            else:                          # the last entry's page is written again by the next batch
                unmap_entries(self.data, self.hash_slot_num, self.released, self.header.index_count - 1)
                self.released = self.header.index_count - 1

    def _close_file(self) -> None:
        assert self.data is not None and self.path is not None
        self.data.flush()                  # written through to the file for executors that read it
        self.built.append(_BuiltFile(self.header, self.path, self.continued))
        self.header, self.data, self.path = self.header.successor(), None, None

    def finish(self) -> list[_BuiltFile]:
        """The files that got puts, in creation order (the last one possibly not full)."""
        try:
            for f in self._pending:
                f.result()
        finally:
            self._pool.shutdown()
        if self.data is not None:
            self._close_file()
        return self.built


@dataclass
class Dispatched:
    """Records handed to ``doDispatch``, in order: what the checkpoint needs, and the index
    dispatch they feed (None when ``messageIndexEnable`` is off)."""

    index: IndexDispatch | None = None
    records: int = 0
    last_cq_store_timestamp: int | None = None
    last_cq_phy_offset: int | None = None       # [5.5] the checkpoint's logicsPhysicalOffset
    early_delivery: list[tuple[int, int]] = field(default_factory=list)
    """(schedule queue id, phy) of delayed records given the TAGS hash as tags code (E#30b)."""
    last_end: int | None = None
    """Where the last record dispatched ends (controller mode: ``lastConfirmValidMsgPhyOffset``)."""

    def add(self, batch: pa.RecordBatch, puts: IndexPuts | None = None) -> None:
        """Dispatched records (columns phy_offset, stored_phy_offset, store_timestamp, sys_flag,
        topic, uniq_key, key_list, tags) to the index: every record but a ROLLBACK one puts
        ``topic#UNIQ_KEY`` then ``topic#token`` per KEYS token, then (5.4+) ``topic#T#TAGS``
        (F§7.4); ``puts``: those keys as
        the run's scan hashed them (``IndexDispatch._add``)."""
        self.records += batch.num_rows
        if batch.num_rows and "total_size" in batch.schema.names:
            self.last_end = int(batch["phy_offset"][-1].as_py()) + int(batch["total_size"][-1].as_py())
        if self.index is not None:
            self.index.add(batch, puts)


# A segment's valid prefix, as the broker's walk reads it: (summary, columns) -> record batches.
RecordSource = Callable[[SegmentSummary, Sequence[str]], Iterable[pa.RecordBatch]]
# The index puts of those batches' records, a batch of puts per batch of records, where the run's
# scan kept them (None: that segment's keys are built and hashed by the replay).
PutsSource = Callable[[SegmentSummary], "Iterator[IndexPuts] | None"]

# Records per scanned batch on the driver's dispatch: large enough that the per-batch NumPy work
# dominates the per-batch Python overhead, small enough to stay a few MB.
DISPATCH_BATCH = 65536


def dispatch_records(store: Store, summaries: Sequence[SegmentSummary], from_index: int, begin: int,
                     end: int, min_stored_phy: int | None,
                     queues: dict[tuple[str, int], ConsumeQueueState], opts: rf.ScanOptions,
                     out: Dispatched, no_delay_levels: bool = False,
                     records: RecordSource | None = None, puts: PutsSource | None = None,
                     confirm: int | None = None) -> None:
    """Feed VALID records in ``[begin, end)`` of files ``from_index..`` to the CQ builder in
    commitlog order and remember them for the index builder (R§4.4, R§6;
    ``DefaultMessageStore#doDispatch``). With ``min_stored_phy``, only records whose stored
    PHYSICALOFFSET is greater are dispatched (5.x normal recovery, E#20); with ``confirm``, only
    records ending at or before it (5.x abnormal recovery in controller mode). ``no_delay_levels``:
    4.9.7 recovers before ``ScheduleMessageService#load``, so a schedule-topic record gets its
    TAGS hash as tags code, not its deliver time (E#30b).

    Vectorised per batch: queues are independent, so each queue gets its puts of the batch in
    one ``ConsumeQueueState.put_many`` (in commitlog order within the queue). ``records``: where
    a segment's valid prefix is read from (default: the segment, walked again); ``puts``: the
    index puts that came with them (only with ``records``)."""
    from store_reader.formats.commitlog import SegmentScan

    cols = ["phy_offset", "stored_phy_offset", "total_size", "topic", "queue_id", "queue_offset",
            "sys_flag", "tags_code", "store_timestamp", "uniq_key", "key_list"]
    cols += ["tags"] if no_delay_levels or opts.index_tags else []
    cols += ["delay_level"] if no_delay_levels else []
    cols += ["properties"] if store.config.enableMultiDispatch else []
    for s in summaries[from_index:]:
        if s.file_start + s.file_size <= begin or s.file_start >= end:
            continue
        kept_puts = None if records is None or puts is None else puts(s)
        for batch in (SegmentScan(s.path, opts, columns=cols, batch_size=DISPATCH_BATCH) if records is None
                      else records(s, cols)):
            batch_puts = None if kept_puts is None else next(kept_puts)
            pos = batch["phy_offset"].to_numpy()
            keep = (pos >= begin) & (pos < end)
            if min_stored_phy is not None:
                keep &= batch["stored_phy_offset"].to_numpy() > min_stored_phy
            if confirm is not None:
                keep &= pos + batch["total_size"].to_numpy() <= confirm
            if not keep.all():
                batch = batch.filter(pa.array(keep))
            if batch.num_rows:
                out.add(batch, batch_puts)
                _dispatch_to_queues(store.config, opts.broker_5x, batch, queues, out, no_delay_levels)


def _dispatch_to_queues(config: BrokerConfig, broker_5x: bool, batch: pa.RecordBatch,
                        queues: dict[tuple[str, int], ConsumeQueueState], out: Dispatched,
                        no_delay_levels: bool) -> None:
    """The CQ puts of one batch of dispatched records (``dispatch.queue_puts``: NOT / COMMIT types,
    LMQ copies included)."""
    rows = np.flatnonzero(dispatchable(batch["sys_flag"].to_numpy()))
    if not rows.size:
        return
    b = batch.drop_columns([c for c in ("uniq_key", "key_list") if c in batch.schema.names])   # the index's
    b = b if len(rows) == b.num_rows else b.take(pa.array(rows))
    out.last_cq_store_timestamp = int(b["store_timestamp"][-1].as_py())
    phy, size = b["stored_phy_offset"].to_numpy(), b["total_size"].to_numpy().astype(np.int64)
    out.last_cq_phy_offset = int(phy[-1])
    tags_code = b["tags_code"].to_numpy().copy()
    p = queue_puts(config, broker_5x, b)       # every row of b is put
    names, qid = p.topics, p.queue_id
    if no_delay_levels:
        import pyarrow.compute as pc

        delayed = np.flatnonzero((p.topic[:p.own] == (names.index(rf.SCHEDULE_TOPIC)
                                                      if rf.SCHEDULE_TOPIC in names else -1))
                                 & pc.is_valid(b["delay_level"]).to_numpy(zero_copy_only=False))
        if delayed.size:
            tags_code[delayed] = java_string_hashes(b["tags"].take(pa.array(delayed)))
            out.early_delivery += list(zip(qid[delayed].tolist(), phy[delayed].tolist()))
    # one group per target queue: (topic number, queue id) of the record, then its LMQ copies
    group = p.topic << 32 | (qid.astype(np.int64) & 0xFFFFFFFF)
    order = p.row
    if p.own < len(p.row):
        phy, size, tags_code = phy[p.row], size[p.row], tags_code[p.row]
    sort = np.lexsort((order, group))           # by queue, then commitlog order (base put first)
    group = group[sort]
    cut = np.flatnonzero(np.diff(group)) + 1
    for lo, hi in zip(np.concatenate([[0], cut]).tolist(), np.concatenate([cut, [len(group)]]).tolist()):
        i = sort[lo:hi]
        key = (names[int(p.topic[i[0]])], int(qid[i[0]]))
        q = queues.get(key)
        if q is None:
            q = queues[key] = ConsumeQueueState(*key, config.cq_file_size)
        q.put_many(phy[i], size[i], tags_code[i], p.queue_offset[i])


def predict(store: Store, broker_version: str | None = None,
            summaries: Sequence[SegmentSummary] | None = None,
            records: RecordSource | None = None, puts: PutsSource | None = None,
            on_cut: Callable[[Prediction], None] | None = None, scratch: str | None = None,
            segments: "Segments | None" = None) -> Prediction:
    """The broker's recovery on ``store`` (R§1 phases 2-11) for ``broker_version``.

    Parameters
    ----------
    store
        An opened store.
    broker_version
        One of ``VERSIONS`` (or a spelling ``resolve_version`` takes); None = the store's guess
        (``Store.broker_version``).
    summaries
        Segment summaries scanned with the broker's options (computed here when None).
    records
        Where the replay reads a segment's valid prefix (``dispatch_records``; default: the
        segment itself).
    puts
        The index puts of those records, where the run's scan kept them.
    on_cut
        Called once the commitlog's fate is known (the cut, the files kept and deleted, the start
        file: step 2), before the replay, with the prediction so far; the rest of it is filled in
        by the time ``predict`` returns.
    scratch
        The directory the replay writes the index files it builds in (a run's scan directory:
        executors read them there); default a temporary one, removed with the prediction.
    segments
        A bounded run (``store_reader.broker.bounded``): instead of ``summaries``, the commitlog files
        walked only where the broker's recovery reads them (its start file search, the files from
        the start file on, the 4.9 reput's and the confirm offset's); ``segments.summaries`` holds
        the rest unwalked.
    """
    version = resolve_version(broker_version or store.broker_version())
    broker_5x = is_5x(version)
    rocksdb = store.inventory.cq_served_by == "rocksdb"
    if store.abort_exists and since(version, V55) and store.config.enableAcceleratedRecovery:
        # the walk would start inside the start file, at the checkpoint's logicsPhysicalOffset
        raise UnsupportedStoreError("enableAcceleratedRecovery=true: a 5.5 broker's abnormal recovery "
                                    "then starts at the checkpoint's logicsPhysicalOffset, which this "
                                    "tool does not model (R§12)", store.config.source)
    if rocksdb and since(version, V54) and not since(version, V55) and store.config.enableAcceleratedRecovery:
        # [5.4] CommitLog#recoverNormally/#recoverAbnormally with isEnableRocksDBStore
        raise UnsupportedStoreError("enableAcceleratedRecovery=true with a RocksDB consume queue: a 5.4 "
                                    "broker's recovery then starts inside the start file, at the queue's "
                                    "max phy offset, which this tool does not model (R§12)", store.config.source)
    if since(version, V55) and (store.config.indexRocksDBEnable or store.config.transRocksDBEnable):
        # DefaultMessageStore#recover dispatches from the lowest of every registered store's offset
        raise UnsupportedStoreError("indexRocksDBEnable/transRocksDBEnable=true: a 5.5 broker then "
                                    "dispatches again from the lowest offset of its RocksDB index and "
                                    "transaction stores (commitLogDispatchStores), which this tool does not "
                                    "model (R§15.1)", store.config.source)
    opts = store.scan_options(broker_5x=broker_5x, index_tags=index_tag_keys(version))
    if rocksdb and not broker_5x:
        raise UnsupportedStoreError(f"consume queues kept in RocksDB (storeType=defaultRocksDB): a "
                                    f"{version} broker has no RocksDB consume queue (5.x only)",
                                    os.path.join(store.root, store.inventory.rocksdb_cq_dir or "consumequeue"))
    if rocksdb:
        (queues, rocksdb_max), cq_problems = load_rocksdb_consume_queues(store), []
    else:
        queues, cq_problems = load_consume_queues(store, broker_5x)
    problems = store.load_problems_for(broker_5x) + cq_problems
    pred = Prediction(broker_version=version, load_result=not problems,
                      load_problems=[str(p) for p in problems])
    if not broker_5x:
        add_delay_level_queues(store.config, queues)
    pred.recovery_path = "abnormal" if store.abort_exists else "normal"
    pred.controller_mode = controller = broker_5x and store.config.enableControllerMode
    if segments is not None:
        summaries = segments.summaries
    elif summaries is None:
        summaries = store.summaries(opts)
    ckpt = read_checkpoint(store.checkpoint_path)
    # 1. consume queues recover on their own, before the commitlog is looked at (R§2)
    if rocksdb:     # RocksDBConsumeQueueStore#recover: nothing; its max phy offset is stored (R§15.1)
        cq_max = rocksdb_max
    else:
        for q in queues.values():
            q.recover()
        cq_max = max((q.max_physic_offset for q in queues.values()), default=-1)
    pred.max_phy_offset_of_consume_queue = cq_max
    # 2. start file and scan (R§4.1, R§4.2)
    abnormal = store.abort_exists
    rocksdb_beside = combined_rocksdb_max(store, version)
    pred.rocksdb_beside_max_phy_offset = rocksdb_beside
    if segments is not None and summaries:
        # the search reads first records only; the walk starts at the start file (R§4.1)
        segments.walk_from(start_file(segments.heads, version, store.config, abnormal, ckpt, cq_max, rocksdb,
                                      rocksdb_beside))
    start, end, files, deleted = predict_commitlog(summaries, version, store.config, abnormal, ckpt, cq_max,
                                                   opts, rocksdb, rocksdb_beside)
    pred.start_file = summaries[start].segment if summaries else None
    pred.max_phy_offset, pred.commitlog_files, pred.deleted_commitlog_files = end, files, deleted
    pred.min_phy_offset = files[0].start if files else -1
    kept_index, index_dispatch = index_files_at_load(store, abnormal, ckpt.index_msg_timestamp,
                                                     ScratchDir(scratch), opts.index_tags)
    if on_cut is not None:
        on_cut(pred)
    if not summaries:           # R§4.6: every consume queue is destroyed (the queues stay, empty)
        for q in queues.values():
            q.deleted_files += [f.start for f in q.files]
            q.files, q.min_logic_offset, q.max_physic_offset = [], 0, -1
        pred.consume_queues = queues
        pred.reput_from_offset = 0
        pred.index_files, _ = predict_index(kept_index, ckpt.index_msg_timestamp, Dispatched())
        pred.checkpoint = ckpt
        return pred
    # 3. dispatch during the scan (R§4.4); the index is built alongside (R§8); a controller-mode
    # broker loads fenced: the checkpoint's confirm offset bounds the abnormal path's dispatch
    dispatched = Dispatched(index=index_dispatch)
    if abnormal:
        pred.dispatched_from = summaries[start].file_start
        dispatch_records(store, summaries, start, summaries[start].file_start, end, None, queues,
                         opts, dispatched, no_delay_levels=not broker_5x, records=records, puts=puts,
                         confirm=ckpt.confirm_phy_offset if controller else None)
    elif broker_5x:
        # getDispatchFromPhyOffset: [5.4+] the lowest of the combine store's queues (R§15.2)
        dispatch_from = cq_max if rocksdb_beside is None else min(cq_max, rocksdb_beside)
        pred.dispatched_from = max(summaries[start].file_start, dispatch_from + 1)     # doDispatch: strictly past it
        dispatch_records(store, summaries, start, summaries[start].file_start, end, dispatch_from, queues,
                         opts, dispatched, records=records, puts=puts)
    if broker_5x and summaries:
        pred.confirm_offset = end
    if controller and summaries:
        last_confirm_valid = (dispatched.last_end if dispatched.last_end is not None
                              else summaries[start].file_start) if abnormal else None
        pred.controller = correct_confirm_offset(ckpt.confirm_phy_offset, summaries[0].file_start, end,
                                                 last_confirm_valid)
        pred.confirm_offset = pred.controller.corrected
        if segments is not None and pred.confirm_offset < end:
            segments.walk_from(segments.index_of(pred.confirm_offset))
        pred.unconfirmed = records_between(store, summaries, pred.confirm_offset, end, opts, records)
    # 4. consume queue entries beyond the recovered end (R§4.5, R§5.2); [5.4] the CQ max is
    # taken after the scan's dispatch
    cq_max_now = max((q.max_physic_offset for q in queues.values()), default=-1) \
        if since(version, V54) and not rocksdb else cq_max
    if cq_max_now >= end:
        pred.cq_truncated = True
        for q in queues.values():
            q.truncate_dirty_logic_files(end)
    # 5. start(): the reput catches up (R§6), in controller mode from and to the confirm offset
    if controller and summaries:
        pred.reput_from_offset = pred.confirm_offset
    elif broker_5x:
        pred.reput_from_offset = end
    else:
        reput = max(pred.min_phy_offset, max((q.max_physic_offset for q in queues.values()), default=-1))
        reput = max(reput, 0)
        pred.reput_from_offset = reput
        first = next(i for i, s in enumerate(summaries) if s.file_start + s.file_size > reput) \
            if reput < end else len(summaries)
        if segments is not None:            # the reput reads on from the consume queues' max
            segments.walk_from(first)
        dispatch_records(store, summaries, first, reput, end, None, queues, opts, dispatched,
                         records=records, puts=puts)
    # 6. queue tables and min offsets (R§7); 5.3.3 and 5.4.0 throw on a queue whose last file is
    # empty (fixed in 5.5.0)
    if broker_5x and not since(version, V55):
        thrown = [str(p) for p in correct_min_offset_throws(queues)]
        pred.load_problems += thrown
        pred.load_result = pred.load_result and not thrown
    for q in queues.values():
        q.correct_min_offset(pred.min_phy_offset, version)
        q.release()
    pred.consume_queues = queues
    if pred.unconfirmed is not None:     # R§7.1 compensateForHA: queue offsets past the confirm offset
        pred.compensated = {f"{t}-{q}": n for (t, q), n in pred.unconfirmed.next_queue_offsets.items()}
    # 7. index files: dropped at load after a crash, then fed by the same dispatch (R§8)
    pred.index_files, index_msg_ts = predict_index(kept_index, ckpt.index_msg_timestamp, dispatched)
    # 8. the checkpoint the broker holds afterwards
    pred.checkpoint = replace(
        ckpt,
        logics_msg_timestamp=(dispatched.last_cq_store_timestamp
                              if dispatched.last_cq_store_timestamp is not None
                              else ckpt.logics_msg_timestamp),
        logics_physical_offset=(dispatched.last_cq_phy_offset
                                if since(version, V55) and dispatched.last_cq_phy_offset is not None
                                else ckpt.logics_physical_offset),
        index_msg_timestamp=index_msg_ts,
        confirm_phy_offset=pred.confirm_offset if controller and summaries else ckpt.confirm_phy_offset)
    return pred


@dataclass
class Unconfirmed:
    """The records a controller-mode broker keeps past its confirm offset (the stale tail of
    apache/rocketmq #10666 when a slave's truncation came back after a crash)."""

    records: int = 0
    first_phy: int | None = None
    next_queue_offsets: dict[tuple[str, int], int] = field(default_factory=dict)
    """Per queue, the queue offset after its last record there (``compensateForHA``)."""


def records_between(store: Store, summaries: Sequence[SegmentSummary], begin: int, end: int,
                    opts: rf.ScanOptions, records: RecordSource | None = None) -> Unconfirmed:
    """The valid records in ``[begin, end)`` and the queue offset after each one's, per queue
    (``ConsumeQueueStore#compensateForHA`` takes every record's, LMQ copies aside)."""
    from store_reader.formats.commitlog import SegmentScan

    out = Unconfirmed()
    cols = ["phy_offset", "topic", "queue_id", "queue_offset"]
    for s in summaries:
        if s.file_start + s.file_size <= begin or s.file_start >= end:
            continue
        for batch in (SegmentScan(s.path, opts, columns=cols, batch_size=DISPATCH_BATCH) if records is None
                      else records(s, cols)):
            pos = batch["phy_offset"].to_numpy()
            keep = (pos >= begin) & (pos < end)
            if not keep.any():
                continue
            batch = batch.filter(pa.array(keep))
            out.records += batch.num_rows
            if out.first_phy is None:
                out.first_phy = int(batch["phy_offset"][0].as_py())
            for t, q, o in zip(batch["topic"].to_pylist(), batch["queue_id"].to_pylist(),
                               batch["queue_offset"].to_pylist()):
                out.next_queue_offsets[(t, q)] = o + 1     # every record, whatever its type
    return out


@dataclass
class PredictedIndexFile:
    """An index file after recovery: kept as it was, continued, or created by the re-dispatch."""

    name: str | None                  # None for a file the broker would create (named by its clock)
    header: IndexHeader
    path: PathRef | None = None       # the file on disk it was loaded from
    built: str | None = None          # the file as the re-dispatch left it (None: unchanged on disk)
    scratch: ScratchDir | None = field(default=None, repr=False, compare=False)   # keeps ``built``

    @property
    def data(self) -> np.ndarray | None:
        """The built file's bytes, read whole (None for a file unchanged on disk)."""
        return None if self.built is None else np.fromfile(self.built, np.uint8)

    def view(self, config: BrokerConfig) -> IndexFile:
        return IndexFile(self.built or self.path, config.maxHashSlotNum, config.maxIndexNum)


def index_files_at_load(store: Store, abnormal: bool, index_msg_timestamp: int, scratch: ScratchDir,
                        tag_keys: bool) -> tuple[list[PredictedIndexFile], IndexDispatch | None]:
    """R§8: the index files ``IndexService#load`` keeps (after a crash, none that ends after the
    checkpoint's indexMsgTimestamp) and the index dispatch that continues them (None when
    ``messageIndexEnable`` is off): into the last file unless it is full. ``tag_keys``:
    ``index_tag_keys`` of the broker's version."""
    cfg = store.config
    files = []
    for ref in list_index_files(store.index_dir, cfg.index_file_size, strict=False):
        header = read_header(ref.path)
        if abnormal and header.end_timestamp > index_msg_timestamp:
            continue                                  # IndexService#load(lastExitOK=false)
        files.append(PredictedIndexFile(ref.name, header, path=ref.path))
    if not cfg.messageIndexEnable:
        return files, None
    last = files[-1] if files else None
    if last is None:
        return files, IndexDispatch(cfg, IndexHeader.first(), None, scratch, tag_keys)   # a fresh first file
    header, continued = last.header.after_load(cfg.maxIndexNum)
    return files, IndexDispatch(cfg, header, last.path if continued else None, scratch, tag_keys)


def predict_index(files: list[PredictedIndexFile], index_msg_timestamp: int, dispatched: Dispatched
                  ) -> tuple[list[PredictedIndexFile], int]:
    """R§8 and F§7.4: (index files after recovery, checkpoint indexMsgTimestamp), from the files
    kept at load (``index_files_at_load``) and what the dispatch built."""
    if dispatched.index is None:
        return files, index_msg_timestamp
    scratch = dispatched.index.scratch
    built = dispatched.index.finish()
    if not built:
        return files, index_msg_timestamp
    last = files[-1] if files else None
    files = list(files)
    for b in built:
        if b.continued:
            files[-1] = PredictedIndexFile(last.name, b.header, path=last.path, built=b.path, scratch=scratch)
        else:
            # the file before a new one was full: IndexService#flush moves indexMsgTimestamp
            if files:
                index_msg_timestamp = files[-1].header.end_timestamp
            files.append(PredictedIndexFile(None, b.header, built=b.path, scratch=scratch))
    return files, index_msg_timestamp


def query_index(pred: Prediction, config: BrokerConfig, topic: str, key: str,
                max_num: int | None = None) -> list[int]:
    """``IndexService#queryOffset`` on the predicted index files (hash candidates, newest first)."""
    views = [f.view(config) for f in pred.index_files]
    return query_key_hash(views, index_key_hash(index_key(topic, key)),
                          hash_slot_num=config.maxHashSlotNum, index_num=config.maxIndexNum,
                          max_num=max_num or config.maxMsgsNumBatch)


def query_message(pred: Prediction, config: BrokerConfig, topic: str, key: str,
                  max_num: int | None = None) -> list[int]:
    """``DefaultMessageStore#queryMessage``: the candidates sorted, keeping those that resolve to
    bytes of the recovered commitlog (dangling entries are dropped silently, OBSERVATIONS 7, 10)."""
    lo, hi = pred.min_phy_offset, pred.max_phy_offset
    return [p for p in sorted(query_index(pred, config, topic, key, max_num)) if lo <= p < hi]


# -- consumer offsets: what a pull at the committed offset answers (R§9.2) -------------------------

@dataclass(frozen=True)
class OffsetCheck:
    """``DefaultMessageStore#getMessage(group, topic, queueId, committed, 1)`` after recovery."""

    topic: str
    group: str | None
    queue_id: int
    committed_offset: int
    min_offset: int
    max_offset: int
    status: str
    next_begin_offset: int


def _readable(pred: Prediction, phy: int, size: int) -> bool:
    """``CommitLog#getMessage(phy, size)``: the bytes lie inside a file's readable region."""
    for f in pred.commitlog_files:
        if f.start <= phy < f.start + f.size:
            return phy - f.start + size <= f.wrote
    return False


def check_offset(pred: Prediction, config: BrokerConfig, topic: str, group: str | None,
                 queue_id: int, offset: int) -> OffsetCheck:
    """Pull status and corrected offset on a master for one committed offset (R§9.2)."""
    q = pred.consume_queues.get((topic, queue_id))
    lo, hi = (q.min_offset, q.max_offset) if q is not None else (0, 0)

    def result(status: str, nxt: int) -> OffsetCheck:
        return OffsetCheck(topic, group, queue_id, offset, lo, hi, status, nxt)

    status, nxt = range_status(lo, hi, offset)
    if status is not None:
        return result(status, nxt)
    # getIndexBuffer: the rest of the CQ file holding the offset, at most 16000 bytes scanned
    logic = offset * CQ_STORE_UNIT_SIZE
    f = next((f for f in q.files if f.start <= logic < f.start + f.wrote), None)
    if f is None:
        next_file = logic + q.file_size - logic % q.file_size
        return result("OFFSET_FOUND_NULL", next_file // CQ_STORE_UNIT_SIZE)
    first = (logic - f.start) // CQ_STORE_UNIT_SIZE
    slots = f.read(first, min(f.wrote // CQ_STORE_UNIT_SIZE, first + 16000 // CQ_STORE_UNIT_SIZE))
    status, next_phy_file = "NO_MATCHED_MESSAGE", None
    fsize = config.mappedFileSizeCommitLog
    for i, e in enumerate(slots):
        phy, size = int(e["phy_offset"]), int(e["size"])
        if next_phy_file is not None and phy < next_phy_file:
            continue
        if _readable(pred, phy, size):
            return result("FOUND", offset + i + 1)      # one message asked for: the batch is full
        status = "MESSAGE_WAS_REMOVING"
        next_phy_file = phy + fsize - phy % fsize       # CommitLog#rollNextFile
    return result(status, offset + len(slots))


def consumer_offset_checks(pred: Prediction, config: BrokerConfig, offsets: pa.Table) -> list[OffsetCheck]:
    """``check_offset`` for every committed offset (``config.read_consumer_offsets(...).value``)."""
    return [check_offset(pred, config, r["topic"], r["group"], r["queue_id"], r["offset"])
            for r in offsets.to_pylist()]
