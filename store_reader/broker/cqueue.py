"""A consume queue as the broker holds it in memory (``ConsumeQueue``): loaded, recovered (R§2),
truncated (R§5.1, R§5.2), put to (R§5.3) and its min offset corrected (R§7.2); the queue stores it is
loaded from (files, RocksDB, both: R§15).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

import numpy as np

from store_reader.formats import recordformat as rf
from store_reader.formats.consumequeue import (CQ_ENTRY_DTYPE, CQ_STORE_UNIT_SIZE, PRE_BLANK_SIZE, list_queue_files,
                                               list_queues, read_queue_head, read_queue_slots)
from store_reader.exceptions import StoreReaderError, UnsupportedStoreError
from store_reader.formats.inventory import ROCKSDB_CQ_DOUBLE_WRITE
from store_reader.io.storefs import location
from store_reader.broker.versions import V54, V55, is_5x, since

if TYPE_CHECKING:
    from store_reader.formats.brokerconf import BrokerConfig
    from store_reader.io.storefs import PathRef
    from store_reader.store import Store


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

    def head(self) -> tuple[np.ndarray, int]:
        """The slots up to the last one not all zero, and the file's slot count: what a walk that
        stops at the first invalid slot needs, without the file's zero tail copied into memory
        (``read_queue_head``; the held slots when they are)."""
        if self._slots is not None or self.path is None:
            return self.slots, len(self.slots)
        return read_queue_head(self.path)

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
            # a slot past the head is all zero (size 0): invalid, so the walk ends in the head
            slots, capacity = f.head()
            phys, sizes = slots["phy_offset"], slots["size"]
            n = _leading(len(phys), lambda lo, hi: (phys[lo:hi] >= 0) & (sizes[lo:hi] > 0))
            if n:
                last = slots[n - 1]
                self.max_physic_offset = int(last["phy_offset"]) + int(last["size"])
            process = f.start + n * CQ_STORE_UNIT_SIZE
            if n < capacity:
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
