"""The repaired store's index files, rebuilt from every surviving record (the broker's puts:
``dispatch.index_puts``, F§7.4): a commitlog file's index puts, how many go into which fresh file,
the files written (one task per index file in ``jobs/repairwrite.py``) and named.
"""
from __future__ import annotations

import mmap
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Sequence

import numpy as np
import pyarrow as pa

from store_reader.broker.dispatch import INDEX_COLUMNS, index_key_counts, index_puts
from store_reader.formats.indexfile import (IndexHeader, IndexPuts, _put_all, entry_position, index_file_size,
                                            next_index_file_name, slot_position)
from store_reader.io.directio import ChunkWriter
from store_reader.io.outputs import writing
from store_reader.repair.queues import SCAN_BATCH

if TYPE_CHECKING:
    from store_reader.formats import recordformat as rf
    from store_reader.formats.brokerconf import BrokerConfig
    from store_reader.formats.commitlog import SegmentSummary


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
    ``path`` as it fills: the entries are appended to the file a page at a time, with direct I/O
    (``directio``: nothing reads them again but the file's hash), and their memory handed back, so
    only the header and hash slots stay resident (what a put reads: a slot's current head), not
    the up to ``20 x maxIndexNum`` bytes of entries."""

    def __init__(self, path: str, config: BrokerConfig, start_header: IndexHeader) -> None:
        self.path, self.header = path, start_header
        self.hash_slot_num, self.index_num = config.maxHashSlotNum, config.maxIndexNum
        self.size = index_file_size(self.hash_slot_num, self.index_num)
        self.entries_pos = slot_position(self.hash_slot_num)
        self.first_put_timestamp: int | None = None
        # private anonymous memory: zero pages until touched, handed back by MADV_DONTNEED
        self._buf = mmap.mmap(-1, self.size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        self._data = np.frombuffer(self._buf, dtype=np.uint8)
        self._view = memoryview(self._buf)
        with writing(path, "index file"):
            self._fd: int | None = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        self._write = ChunkWriter(self._fd)
        # whole pages of entries are written as they fill; the page the slots end in, at close
        self._written = min(_page_up(self.entries_pos), self.size)
        self._released = self._written

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
        # the entries' whole pages go to the file; _put_all never reads or changes an older entry
        done = entry_position(self.hash_slot_num, self.header.index_count) // mmap.PAGESIZE * mmap.PAGESIZE
        if done > self._written:
            with writing(self.path, "index file"):
                self._write(self._view[self._written:done], self._written)
            self._written = done
            self._buf.madvise(mmap.MADV_DONTNEED, self._released, done - self._released)
            self._released = done

    def close(self) -> WrittenIndexFile:
        """Header and hash slots to the file, then the last entries' page (zeros past them, as the
        file holds there), the rest of it zeros (sparse); the file's size is the broker's index file
        size."""
        head = min(_page_up(self.entries_pos), self.size)
        tail = min(_page_up(entry_position(self.hash_slot_num, self.header.index_count)), self.size)
        with writing(self.path, "index file"):
            self._write(self._view[:head], 0)
            if tail > self._written:
                self._write(self._view[self._written:tail], self._written)
            os.ftruncate(self._fd, self.size)
            fd, self._fd = self._fd, None
            os.close(fd)
        self._release()
        return WrittenIndexFile(self.path, self.header, self.first_put_timestamp or 0)

    def abort(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            try:
                os.close(fd)
            except OSError:
                pass
        self._release()
        os.unlink(self.path)

    def _release(self) -> None:
        if not self._buf.closed:
            self._view.release()
            self._data = None
            self._buf.close()


def _page_up(n: int) -> int:
    return -(-n // mmap.PAGESIZE) * mmap.PAGESIZE


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


def full_index_end_timestamp(headers: Sequence[IndexHeader], index_num: int) -> int:
    """``indexMsgTimestamp`` after a full flush: end time of the last index file that is full."""
    full = [h.end_timestamp for h in headers if h.is_full(index_num)]
    return full[-1] if full else 0
