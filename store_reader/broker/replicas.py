"""Master/slave commitlog comparison (spec ``recovery.md`` §10, project issue 6).

Classic HA ships raw commitlog bytes, so a healthy slave's commitlog is a byte-identical copy of a
contiguous range ``[slaveStart, slaveMax)`` of the master's: same phy offsets, same file names, blank
markers and the bytes after them included. Comparing a pair therefore needs no decoding where the two
agree, and decoding only where they do not:

1. **Plan** (:func:`plan_segments`): pair the commitlog files by name from the later of the two first
   files on (older files exist on one side only by retention or because the slave started late).
2. **Compare each segment** (:func:`compare_segment`, one Spark task per pair): CRC-32 of aligned
   fixed-size ranges of both mmaps until the first range whose checksums differ; bytes are compared
   only inside that range to find the first differing byte; the record holding it is found from a
   nearby resync anchor (E#3) and a TOTALSIZE walk over the still-identical bytes; from that record on
   both sides are scanned with the project's scanner and their records are diffed by phy offset. A
   file present on one side only is scanned whole. In the common case (in sync, or a slave that lags)
   each byte is read once, plus at most two ranges around the first difference. Equal checksums are
   taken as equal bytes (a CRC-32 collision, 2^-32 per range, would hide a difference).
3. **Assemble** (:func:`assemble`, on the driver): each side's data end (end of its last valid
   record), the common prefix, the first divergent phy offset, who is ahead and by how much, records
   on one side only as runs of queue offsets, per-queue offset ranges (consume queues up to the shared
   end, extended by the records scanned past it) and consumer offsets that point past (or before)
   what the other side holds.

Nothing here writes to either store: files are mapped ``ACCESS_READ`` and the ``lock`` is never taken.
"""
from __future__ import annotations

import functools
import mmap
import os
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from schemas.replicas import RECORD_RUN, REPLICA_RECORD

from store_reader.formats import recordformat as rf
from store_reader.formats.commitlog import DEFAULT_BATCH_SIZE, SegmentScan, _native_opts, scanner_impl
from store_reader.formats.config import read_consumer_offsets
from store_reader.formats.consumequeue import slot_of
from store_reader.broker.dispatch import dispatchable
from store_reader.exceptions import FileSizeError, StoreReaderError
from store_reader.broker.versions import V49, V53
from store_reader.broker.cqueue import load_consume_queues
from store_reader.store import Store
from store_reader.io.storefs import PathRef, SegmentBuffer

DEFAULT_RANGE_SIZE = 1 << 20
"""Bytes per checksummed range: large enough for CRC-32 to run at memory speed, small enough that
the range re-read around the first difference is negligible."""

# pair status
IN_SYNC, SLAVE_BEHIND, SLAVE_AHEAD, DIVERGED = "in_sync", "slave_behind", "slave_ahead", "diverged"
# segment status
IDENTICAL, DIFFERS, MASTER_ONLY, SLAVE_ONLY = "identical", "differs", "master_only", "slave_only"
# record kinds (MASTER_ONLY / SLAVE_ONLY as for segments)
CONTENT_DIFFERS = "content_differs"
MASTER, SLAVE = "master", "slave"

RECORD_SCHEMA = REPLICA_RECORD.arrow()
RECORD_COLUMNS = tuple(RECORD_SCHEMA.names[2:])      # after kind, side: the scanned columns
RUN_SCHEMA = RECORD_RUN.arrow()

_RUN_KEYS = ("kind", "side", "topic", "queue_id", "consume_queue")
_WHAT = "commitlog segment"
# Checksumming reads each mapped segment front to back (advisory, as for scans).
_MADVICE = getattr(mmap, "MADV_SEQUENTIAL", None)
_MESSAGE_MAGICS = (rf.MAGIC_V1, rf.MAGIC_V2)


# -- plan ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class SegmentPair:
    """One commitlog file name to compare; a path is None where that side lacks the file."""

    name: str
    file_start: int
    file_size: int
    master_path: PathRef | None
    slave_path: PathRef | None


def _check_loadable(store: Store, role: str) -> None:
    if store.load_problems:
        problem = store.load_problems[0]
        raise type(problem)(f"{role} store cannot be compared: {problem.reason}", problem.path,
                            problem.position)


def _same_root(a: Store, b: Store) -> bool:
    if isinstance(a.root, os.PathLike) and isinstance(b.root, os.PathLike):
        return os.path.realpath(a.root) == os.path.realpath(b.root)
    return str(a.root) == str(b.root)


def plan_segments(master: Store, slave: Store) -> list[SegmentPair]:
    """The segment pairs to compare, in commitlog order.

    Files starting before the later of the two first files are left out: they exist on one side only
    because of retention (``CleanCommitLogService``) or because the slave started from the master's
    last file (R§10), and say nothing about replication.

    Raises
    ------
    StoreReaderError
        A store the broker would refuse to load, or a file whose size differs between the sides
        (names the slave's file and the first byte that exists on one side only).
    """
    _check_loadable(master, "master")
    _check_loadable(slave, "slave")
    if _same_root(master, slave):
        raise StoreReaderError("master and slave are the same store", str(slave.root))
    m = {f.name: f for f in master.commitlog_files}
    s = {f.name: f for f in slave.commitlog_files}
    firsts = [files[0].start for files in (master.commitlog_files, slave.commitlog_files) if files]
    lo = max(firsts, default=0)
    pairs = []
    for name in sorted(set(m) | set(s)):
        mf, sf = m.get(name), s.get(name)
        f = mf or sf
        assert f is not None
        if f.start < lo:
            continue
        if mf is not None and sf is not None and mf.size != sf.size:
            raise FileSizeError(f"commitlog file is {sf.size} bytes on the slave but {mf.size} on the "
                                f"master ({mf.path}); the two cannot be aligned", str(sf.path),
                                min(mf.size, sf.size))
        pairs.append(SegmentPair(name, f.start, f.size, mf.path if mf else None,
                                 sf.path if sf else None))
    return pairs


# -- one segment -----------------------------------------------------------------------------------

@dataclass
class SideResult:
    """What one side's copy of a segment showed.

    ``data_end`` (phy) is where its valid records end, known wherever records were scanned; for an
    identical, unscanned segment it stays None and ``last_nonzero`` (position of the last checksum
    range holding a non-zero byte, None if all zero) lets the driver find it cheaply if needed.
    """

    present: bool
    data_end: int | None = None
    end_reason: str | None = None
    end_check: str | None = None
    last_nonzero: int | None = None
    records: int = 0
    bytes_read: int = 0


@dataclass
class SegmentComparison:
    """Result of :func:`compare_segment` (picklable: it travels back from a Spark task)."""

    pair: SegmentPair
    status: str
    ranges_checksummed: int = 0
    first_difference: int | None = None
    """Phy offset of the first byte that differs (both sides present)."""
    divergence: int | None = None
    """Phy offset of the record (or blank marker) holding ``first_difference``; records are compared
    from here on. For a one-sided segment: its start."""
    master: SideResult = field(default_factory=lambda: SideResult(False))
    slave: SideResult = field(default_factory=lambda: SideResult(False))
    counts: dict[str, int] = field(default_factory=dict)
    """master_only, slave_only, content_differs, identical (same bytes at the same phy after the
    divergence)."""
    runs: pa.Table = field(default_factory=RUN_SCHEMA.empty_table)
    records: pa.Table | None = None
    tail_queues: dict[tuple[str, str, int], tuple[int, int]] = field(default_factory=dict)
    """(side, topic, queue id) -> (min queue offset, max queue offset + 1) of the dispatchable
    records scanned in this segment (CQ types NOT and COMMIT)."""

    def side(self, which: str) -> SideResult:
        return self.master if which == MASTER else self.slave

    @property
    def bytes_read(self) -> int:
        return self.master.bytes_read + self.slave.bytes_read


def _impl_opts(opts: rf.ScanOptions) -> tuple[Any, Any]:
    """The scanner in use and ``opts`` in the form it takes (as ``SegmentScan`` does)."""
    impl = scanner_impl()
    return impl, (_native_opts(opts) if impl.__name__.endswith("_native") else opts)


class RegionScan(SegmentScan):
    """``SegmentScan`` that starts at a known record boundary ``start`` instead of position 0.

    Yields the VALID records from ``start`` until the first record that is not; ``summary.valid_bytes``
    is then that position and ``summary.end_reason`` says why (eof_marker, zero_padding, torn_tail,
    corrupt or file_end). Intact records behind a bad one are not scanned: the broker's recovery would
    not keep them, so they are not what a side "holds". ``buf``: the segment already open (an mmap or
    a fetched remote file), so it is not opened or fetched a second time.
    """

    def __init__(self, path: PathRef, opts: rf.ScanOptions, start: int,
                 columns: Sequence[str] | None = None, batch_size: int = DEFAULT_BATCH_SIZE,
                 file_start: int | None = None, buf: Any = None) -> None:
        super().__init__(path, opts, columns=columns, batch_size=batch_size, file_start=file_start)
        self.start = start
        self._buf = buf

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        if self._buf is None:
            yield from super().__iter__()
            return
        impl, opts = _impl_opts(self.opts)
        yield from self._walk(impl, opts, self._buf, len(self._buf))

    def _walk(self, impl: Any, opts: Any, buf: Any, size: int) -> Iterator[pa.RecordBatch]:
        s = self.summary
        s.file_size = size
        if self.start >= size:
            s.valid_bytes, s.end_reason = size, "file_end"
            return
        pos, stop = self.start, None
        for item in self._run(impl, opts, buf, self.start, size, True):
            if isinstance(item, tuple):
                pos, stop = item
            else:
                yield item
        s.valid_bytes = pos
        outcome, check, declared = stop
        if outcome == rf.END_OF_FILE:
            s.end_reason, s.blank_declared_size = "eof_marker", declared
            return
        s.end_declared_size = declared
        if pos >= size:
            s.end_reason = "file_end"
        elif impl.is_zero(buf, pos, size):
            s.end_reason = "zero_padding"
        else:
            s.end_check = rf.CHECKS[check]
            q = impl.resync(buf, self.file_start, pos + 1, size, opts)
            s.end_reason = "corrupt" if q >= 0 else "torn_tail"
            s.resync_position = q if q >= 0 else None


@functools.lru_cache(maxsize=8)
def _zero_crc(n: int) -> int:
    return zlib.crc32(bytes(n))


def _first_difference(a: Any, b: Any, size: int, range_size: int
                      ) -> tuple[int | None, int, int | None, int]:
    """Checksum aligned ranges of ``a`` and ``b`` until the first that differs.

    Returns (position of the first differing byte or None, ranges checksummed, start of the last
    range holding a non-zero byte among those checksummed, bytes read from each side).
    """
    last_nonzero = None
    ranges = read = 0
    with memoryview(a) as va, memoryview(b) as vb:
        for r0 in range(0, size, range_size):
            r1 = min(size, r0 + range_size)
            ranges += 1
            read += r1 - r0
            ca, cb = zlib.crc32(va[r0:r1]), zlib.crc32(vb[r0:r1])
            if ca == cb:
                if ca != _zero_crc(r1 - r0):
                    last_nonzero = r0
                continue
            # bytes only inside the range whose checksums differ
            diff = np.frombuffer(va[r0:r1], np.uint8) != np.frombuffer(vb[r0:r1], np.uint8)
            read += r1 - r0
            return r0 + int(np.argmax(diff)), ranges, last_nonzero, read
    return None, ranges, last_nonzero, read


def record_start_before(buf: Any, file_start: int, target: int, opts: rf.ScanOptions,
                        range_size: int = DEFAULT_RANGE_SIZE) -> tuple[int, int]:
    """Start of the record (or blank marker) holding byte ``target`` of a segment, reading only
    bytes before ``target``; returns (position, bytes read).

    A resync anchor (a VALID record whose PHYSICALOFFSET equals its position, E#3) ending before
    ``target`` is looked for in the checksum range holding ``target``, then one range further back
    each time, down to position 0 (always a record boundary); from the anchor the chain of TOTALSIZE
    fields is followed while the record ends at or before ``target``.
    """
    impl, iopts = _impl_opts(opts)
    q = 0
    w = (max(target - 1, 0) // range_size) * range_size
    while w > 0:
        found = impl.resync(buf, file_start, w, target, iopts)
        if found >= 0:
            q = found
            break
        w -= range_size
    read = target - w
    s = q
    while s + rf.SIZE_AND_MAGIC.size <= target:
        total, magic = rf.SIZE_AND_MAGIC.unpack_from(buf, s)
        if magic not in _MESSAGE_MAGICS or total <= 0 or s + total > target:
            break
        s += total
    return s, read


def _scan_from(path: PathRef, start: int, file_start: int, opts: rf.ScanOptions, buf: Any = None
               ) -> tuple[pa.Table, Any]:
    scan = RegionScan(path, opts, start, columns=RECORD_COLUMNS, file_start=file_start, buf=buf)
    table = pa.Table.from_batches(list(scan), schema=scan.schema)
    return table, scan.summary


def _with_kind(table: pa.Table, kinds: np.ndarray, side: str) -> pa.Table:
    n = table.num_rows
    cols = [pa.array(kinds.tolist() if n else [], pa.string()), pa.array([side] * n, pa.string())]
    return pa.Table.from_arrays(cols + [table[name] for name in RECORD_SCHEMA.names[2:]],
                                schema=RECORD_SCHEMA)


def _in_consume_queue(sys_flag: pa.ChunkedArray | pa.Array) -> pa.Array:
    """``dispatch.dispatchable`` of a column, as an Arrow mask."""
    return pa.array(dispatchable(sys_flag.to_numpy()))


def _queue_extents(table: pa.Table, side: str) -> dict[tuple[str, str, int], tuple[int, int]]:
    t = table.filter(_in_consume_queue(table["sys_flag"]))
    if not t.num_rows:
        return {}
    g = t.group_by(["topic", "queue_id"]).aggregate([("queue_offset", "min"), ("queue_offset", "max")])
    return {(side, topic, qid): (lo, hi + 1) for topic, qid, lo, hi in zip(
        g["topic"].to_pylist(), g["queue_id"].to_pylist(), g["queue_offset_min"].to_pylist(),
        g["queue_offset_max"].to_pylist())}


def _side_from_scan(summary: Any, file_start: int, bytes_read: int) -> SideResult:
    return SideResult(True, data_end=file_start + summary.valid_bytes, end_reason=summary.end_reason,
                      end_check=summary.end_check, records=summary.records, bytes_read=bytes_read)


def compare_segment(pair: SegmentPair, opts: rf.ScanOptions, range_size: int = DEFAULT_RANGE_SIZE,
                    keep_records: bool = True) -> SegmentComparison:
    """Compare one commitlog file of the master with the slave's copy (one Spark task).

    ``keep_records=False`` drops the per-record table after range-encoding it into ``runs`` (what a
    Spark job sends back to the driver); the in-process API keeps it.
    """
    fs = pair.file_start
    if pair.master_path is None or pair.slave_path is None:
        # 1. a file on one side only: every record in it is on that side only
        which = MASTER if pair.master_path is not None else SLAVE
        path = pair.master_path or pair.slave_path
        assert path is not None
        table, summary = _scan_from(path, 0, fs, opts)
        kind = MASTER_ONLY if which == MASTER else SLAVE_ONLY
        records = _with_kind(table, np.full(table.num_rows, kind, object), which)
        out = SegmentComparison(pair, kind, divergence=fs,
                                counts={kind: table.num_rows},
                                tail_queues=_queue_extents(table, which))
        setattr(out, which, _side_from_scan(summary, fs, summary.file_size))
        return _finish(out, records, keep_records)

    m = SegmentBuffer(pair.master_path, _WHAT, _MADVICE)
    try:
        s = SegmentBuffer(pair.slave_path, _WHAT, _MADVICE)
    except BaseException:
        m.close()
        raise
    try:
        if m.size != s.size:      # the file changed size since planning (a live store)
            raise FileSizeError(f"commitlog file is {s.size} bytes on the slave but {m.size} on the "
                                f"master; the two cannot be aligned", str(pair.slave_path),
                                min(m.size, s.size))
        # 2. checksums of aligned ranges, bytes only where they differ
        diff, ranges, last_nonzero, read = _first_difference(m.buf, s.buf, m.size, range_size)
        out = SegmentComparison(pair, IDENTICAL, ranges_checksummed=ranges, first_difference=None,
                                master=SideResult(True, last_nonzero=last_nonzero, bytes_read=read),
                                slave=SideResult(True, last_nonzero=last_nonzero, bytes_read=read))
        if diff is None:
            return _finish(out, None, keep_records)
        out.status, out.first_difference = DIFFERS, fs + diff
        # 3. the record holding the first difference, from the bytes both sides still share
        start, walked = record_start_before(m.buf, fs, diff, opts, range_size)
        out.divergence = fs + start
        # 4. both sides' records from there on, diffed by phy offset
        mt, msum = _scan_from(pair.master_path, start, fs, opts, m.buf)
        st, ssum = _scan_from(pair.slave_path, start, fs, opts, s.buf)
        out.master = _side_from_scan(msum, fs, read + walked + m.size - start)
        out.slave = _side_from_scan(ssum, fs, read + m.size - start)
        records, counts = _diff_records(mt, st, m.buf, s.buf, fs)
        out.counts = counts
        out.tail_queues = {**_queue_extents(mt, MASTER), **_queue_extents(st, SLAVE)}
        return _finish(out, records, keep_records)
    finally:
        m.close()
        s.close()


def _diff_records(mt: pa.Table, st: pa.Table, mbuf: Any, sbuf: Any, file_start: int
                  ) -> tuple[pa.Table, dict[str, int]]:
    """Records of both sides from the divergence on, matched by phy offset."""
    m_phy, s_phy = mt["phy_offset"].to_numpy(), st["phy_offset"].to_numpy()
    m_size, s_size = mt["total_size"].to_numpy(), st["total_size"].to_numpy()
    in_s, in_m = np.isin(m_phy, s_phy), np.isin(s_phy, m_phy)
    same_m, same_s = np.zeros(len(m_phy), bool), np.zeros(len(s_phy), bool)
    s_row = {int(p): j for j, p in enumerate(s_phy)}
    for i in np.flatnonzero(in_s):
        j = s_row[int(m_phy[i])]
        n = int(m_size[i])
        pos = int(m_phy[i]) - file_start
        if n == int(s_size[j]) and mbuf[pos:pos + n] == sbuf[pos:pos + n]:
            same_m[i] = same_s[j] = True
    m_kind = np.where(in_s, CONTENT_DIFFERS, MASTER_ONLY).astype(object)
    s_kind = np.where(in_m, CONTENT_DIFFERS, SLAVE_ONLY).astype(object)
    records = pa.concat_tables([_with_kind(mt.filter(pa.array(~same_m)), m_kind[~same_m], MASTER),
                                _with_kind(st.filter(pa.array(~same_s)), s_kind[~same_s], SLAVE)])
    counts = {MASTER_ONLY: int((~in_s).sum()), SLAVE_ONLY: int((~in_m).sum()),
              CONTENT_DIFFERS: int((in_s & ~same_m).sum()), IDENTICAL: int(same_m.sum())}
    return records, counts


def _finish(out: SegmentComparison, records: pa.Table | None, keep_records: bool) -> SegmentComparison:
    if records is not None:
        out.runs = record_runs(records)
        out.records = records if keep_records else None
    elif keep_records:
        out.records = RECORD_SCHEMA.empty_table()
    return out


# -- range encoding --------------------------------------------------------------------------------

def record_runs(records: pa.Table) -> pa.Table:
    """Range-encode ``RECORD_SCHEMA`` rows: one row per kind, side and queue for each stretch of
    consecutive queue offsets (in phy order)."""
    if not records.num_rows:
        return RUN_SCHEMA.empty_table()
    records = records.append_column("consume_queue", _in_consume_queue(records["sys_flag"]))
    t = records.sort_by([(k, "ascending") for k in _RUN_KEYS] + [("phy_offset", "ascending")])
    n = t.num_rows
    qo = t["queue_offset"].to_numpy()
    brk = np.ones(n, bool)
    if n > 1:
        same = np.ones(n - 1, bool)
        for k in _RUN_KEYS:
            col = t[k].combine_chunks()
            same &= pc.equal(col.slice(1), col.slice(0, n - 1)).to_numpy(zero_copy_only=False)
        in_cq = t["consume_queue"].to_numpy(zero_copy_only=False)[1:]
        brk[1:] = ~(same & (~in_cq | (qo[1:] == qo[:-1] + 1)))
    starts = np.flatnonzero(brk)
    ends = np.append(starts[1:], n) - 1
    phy = t["phy_offset"].to_numpy()
    end = phy + t["total_size"].to_numpy().astype(np.int64)
    ts = t["store_timestamp"].to_numpy()
    first = t.take(pa.array(starts))
    return pa.Table.from_arrays([
        *(first[k] for k in _RUN_KEYS),
        pa.array(np.minimum.reduceat(qo, starts)), pa.array(np.maximum.reduceat(qo, starts) + 1),
        pa.array(phy[starts]), pa.array(np.maximum.reduceat(end, starts)),
        pa.array((ends - starts + 1).astype(np.int64)),
        pa.array(np.minimum.reduceat(ts, starts)), pa.array(np.maximum.reduceat(ts, starts)),
    ], schema=RUN_SCHEMA)


def merge_runs(tables: Sequence[pa.Table]) -> pa.Table:
    """Join per-segment runs that continue across a file boundary (same key, next queue offset)."""
    t = pa.concat_tables([RUN_SCHEMA.empty_table(), *tables]).sort_by(
        [(k, "ascending") for k in _RUN_KEYS] + [("phy_offset_from", "ascending")])
    rows: list[dict[str, Any]] = []
    for r in t.to_pylist():
        prev = rows[-1] if rows else None
        if prev is not None and all(prev[k] == r[k] for k in _RUN_KEYS) \
                and (not r["consume_queue"] or prev["queue_offset_to"] == r["queue_offset_from"]):
            prev["queue_offset_from"] = min(prev["queue_offset_from"], r["queue_offset_from"])
            prev["queue_offset_to"] = max(prev["queue_offset_to"], r["queue_offset_to"])
            prev["phy_offset_to"] = max(prev["phy_offset_to"], r["phy_offset_to"])
            prev["records"] += r["records"]
            prev["first_store_timestamp"] = min(prev["first_store_timestamp"], r["first_store_timestamp"])
            prev["last_store_timestamp"] = max(prev["last_store_timestamp"], r["last_store_timestamp"])
        else:
            rows.append(dict(r))
    return pa.Table.from_pylist(rows, schema=RUN_SCHEMA)


# -- the pair ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class QueueRange:
    """Queue offsets ``[min, max)`` each side holds for one queue (0, 0 where it has none)."""

    topic: str
    queue_id: int
    master_min: int
    master_max: int
    slave_min: int
    slave_max: int

    @property
    def status(self) -> str:
        if self.slave_max < self.master_max:
            return SLAVE_BEHIND
        if self.slave_max > self.master_max:
            return SLAVE_AHEAD
        return "same" if self.slave_min == self.master_min else "range_differs"


@dataclass(frozen=True)
class ConsumerOffsetFinding:
    """A committed offset in ``side``'s ``consumerOffset.json`` outside what the other side holds.

    ``past_<other>_max``: after a switch to the other side the pull answers OFFSET_OVERFLOW_BADLY and
    the consumer is moved back to its max; messages written there up to the committed offset are
    skipped (R§9.4). ``before_<other>_min``: messages from the committed offset up to the other side's
    min are not there to be consumed.
    """

    side: str
    topic: str
    group: str | None
    queue_id: int
    committed_offset: int
    status: str
    queue: QueueRange


@dataclass
class ReplicaComparison:
    """A master/slave pair compared (:func:`compare_stores` / :func:`assemble`); offsets are phy."""

    master: str
    slave: str
    status: str
    master_min: int | None
    master_max: int | None
    slave_min: int | None
    slave_max: int | None
    overlap_start: int
    common_prefix_bytes: int
    first_difference: int | None
    first_divergent_offset: int | None
    segments: list[SegmentComparison]
    runs: pa.Table
    records: pa.Table | None
    queues: list[QueueRange]
    consumer_offsets: list[ConsumerOffsetFinding]
    notes: list[str] = field(default_factory=list)

    @property
    def ahead_bytes(self) -> int:
        """Slave data end minus master data end: > 0 slave ahead, < 0 slave behind (a side without
        commitlog files counts as ending where the comparison starts)."""
        def end(e: int | None) -> int:
            return self.overlap_start if e is None else e
        return end(self.slave_max) - end(self.master_max)

    @property
    def in_sync(self) -> bool:
        return self.status == IN_SYNC

    def count(self, kind: str) -> int:
        return sum(s.counts.get(kind, 0) for s in self.segments)

    @property
    def bytes_read(self) -> int:
        return sum(s.bytes_read for s in self.segments)


def file_data_end(path: PathRef, file_start: int, opts: rf.ScanOptions, last_nonzero: int | None = None,
                  range_size: int = DEFAULT_RANGE_SIZE) -> tuple[int, str]:
    """(phy offset where a segment's valid records end, why) read from its tail only.

    ``last_nonzero`` is the start of its last range holding a non-zero byte (from the checksums);
    when None it is found by testing ranges backwards from the end. The walk starts from the record
    holding that position, so a corrupt record further up the file is not seen (both sides share it
    when this is called for an identical segment).
    """
    impl, iopts = _impl_opts(opts)
    with SegmentBuffer(path, _WHAT) as m:
        if last_nonzero is None:
            r0 = ((m.size - 1) // range_size) * range_size if m.size else -1
            while r0 >= 0 and impl.is_zero(m.buf, r0, min(m.size, r0 + range_size)):
                r0 -= range_size
            if r0 < 0:
                return file_start, "zero_padding"
            last_nonzero = r0
        start, _ = record_start_before(m.buf, file_start, last_nonzero, opts, range_size)
        scan = RegionScan(path, opts, start, columns=[], file_start=file_start, buf=m.buf)
        for _ in scan:
            pass
    return file_start + scan.summary.valid_bytes, scan.summary.end_reason


def _data_end(store: Store, results: dict[str, SegmentComparison], which: str, opts: rf.ScanOptions,
              range_size: int) -> tuple[int | None, str | None]:
    """End of the valid records in ``store``'s last file that has any (R§4.2's end, read from the
    tail: a preallocated all-zero last file is passed over)."""
    for f in reversed(store.commitlog_files):
        r = results.get(f.name)
        side = r.side(which) if r is not None else None
        if side is not None and side.data_end is not None:
            end, reason = side.data_end, side.end_reason
        elif side is not None and r is not None and r.status == IDENTICAL and side.last_nonzero is None:
            continue                                  # checksums say: all zero
        else:
            end, reason = file_data_end(f.path, f.start, opts,
                                        side.last_nonzero if side is not None else None, range_size)
        if end > f.start:
            return end, reason
    return (store.commitlog_files[0].start, None) if store.commitlog_files else (None, None)


def _queue_ranges(store: Store, side: str, min_phy: int | None, data_end: int,
                  scanned: Sequence[tuple[int, int]],
                  tails: dict[tuple[str, str, int], tuple[int, int]], broker_5x: bool
                  ) -> dict[tuple[str, int], tuple[int, int]]:
    """Per queue ``[min, max)`` a side holds: its consume queue entries for records below its
    ``data_end`` outside the ``scanned`` phy ranges (a segment pair's bytes from its divergence on:
    the records scanned there, ``tails``, replace the entries pointing into them; the byte-identical
    segments around them hold the same records on both sides), min corrected to the side's first
    commitlog file (R§7.2), then extended by ``tails``."""
    queues, problems = load_consume_queues(store, broker_5x)
    if problems:
        raise problems[0]
    out: dict[tuple[str, int], tuple[int, int]] = {}
    for key, q in queues.items():
        q.recover()
        if not q.files:
            continue
        phy = np.concatenate([f.slots[: slot_of(f.wrote)] for f in q.files])["phy_offset"]
        # each file's slots at its own queue offsets (a missing file in between holds none)
        offset = np.concatenate([slot_of(f.start) + np.arange(slot_of(f.wrote)) for f in q.files])
        held = phy < data_end
        for a, b in scanned:
            held &= (phy < a) | (phy >= b)
        kept = np.flatnonzero(held)
        hi = int(offset[kept[-1]]) + 1 if kept.size else slot_of(q.files[0].start)
        if min_phy is not None:
            q.correct_min_offset(min_phy, V53 if broker_5x else V49)
        out[key] = (min(q.min_offset, hi), hi)
    for (s, topic, qid), (lo, hi) in tails.items():
        if s != side:
            continue
        old = out.get((topic, qid))
        if old is None or old[0] == old[1]:
            out[(topic, qid)] = (lo, hi)
        elif hi > old[1]:
            out[(topic, qid)] = (old[0], hi)
    return out


def _consumer_offset_findings(store: Store, side: str, queues: dict[tuple[str, int], QueueRange]
                              ) -> list[ConsumerOffsetFinding]:
    other = SLAVE if side == MASTER else MASTER
    out = []
    for r in read_consumer_offsets(store.root).value.to_pylist():
        q = queues.get((r["topic"], r["queue_id"])) or QueueRange(r["topic"], r["queue_id"], 0, 0, 0, 0)
        lo, hi = (q.slave_min, q.slave_max) if other == SLAVE else (q.master_min, q.master_max)
        if r["offset"] > hi:
            status = f"past_{other}_max"
        elif r["offset"] < lo:
            status = f"before_{other}_min"
        else:
            continue
        out.append(ConsumerOffsetFinding(side, r["topic"], r["group"], r["queue_id"], r["offset"],
                                         status, q))
    return out


def assemble(master: Store, slave: Store, results: Sequence[SegmentComparison], opts: rf.ScanOptions,
             range_size: int = DEFAULT_RANGE_SIZE) -> ReplicaComparison:
    """The pair's verdict from its per-segment results (driver side; reads only file tails, consume
    queues and ``consumerOffset.json``)."""
    by_name = {r.pair.name: r for r in results}
    firsts = [s.commitlog_files[0].start for s in (master, slave) if s.commitlog_files]
    lo = max(firsts, default=0)
    # 1. each side's data end
    m_end, m_reason = _data_end(master, by_name, MASTER, opts, range_size)
    s_end, s_reason = _data_end(slave, by_name, SLAVE, opts, range_size)
    m_min = master.commitlog_files[0].start if master.commitlog_files else None
    s_min = slave.commitlog_files[0].start if slave.commitlog_files else None
    common_end = max(lo, min(lo if e is None else e for e in (m_end, s_end)))
    # 2. where the shared bytes stop and whether that is before either side's end
    first_diff = first_div = None
    for r in results:
        if r.status == IDENTICAL:
            continue
        d = r.first_difference if r.status == DIFFERS else r.pair.file_start
        if d is not None and (first_diff is None or d < first_diff):
            first_diff = d
        if r.divergence is not None and r.divergence < common_end \
                and (first_div is None or r.divergence < first_div):
            first_div = r.divergence
    m_e, s_e = (lo if e is None else e for e in (m_end, s_end))
    if first_div is not None:
        status = DIVERGED
    elif s_e < m_e:
        status = SLAVE_BEHIND
    elif s_e > m_e:
        status = SLAVE_AHEAD
    else:
        status = IN_SYNC
    prefix_end = common_end if first_diff is None else min(first_diff, common_end)
    # 3. records on one side only, range-encoded
    runs = merge_runs([r.runs for r in results])
    kept = [r.records for r in results if r.records is not None]
    records = pa.concat_tables([RECORD_SCHEMA.empty_table(), *kept]).sort_by(
        [("side", "ascending"), ("phy_offset", "ascending")]) if len(kept) == len(results) else None
    # 4. queue offset ranges and consumer offsets: each side's entries up to its own end, those
    # pointing where the pairs were scanned replaced by the records scanned there
    tails: dict[tuple[str, str, int], tuple[int, int]] = {}
    scanned = []
    for r in results:
        if r.divergence is not None:
            scanned.append((r.divergence, r.pair.file_start + r.pair.file_size))
        for k, (a, b) in r.tail_queues.items():
            old = tails.get(k)
            tails[k] = (a, b) if old is None else (min(old[0], a), max(old[1], b))
    mq = _queue_ranges(master, MASTER, m_min, m_e, scanned, tails, opts.broker_5x)
    sq = _queue_ranges(slave, SLAVE, s_min, s_e, scanned, tails, opts.broker_5x)
    queues = {k: QueueRange(k[0], k[1], *mq.get(k, (0, 0)), *sq.get(k, (0, 0)))
              for k in sorted(set(mq) | set(sq))}
    offsets = (_consumer_offset_findings(master, MASTER, queues)
               + _consumer_offset_findings(slave, SLAVE, queues))
    notes = []
    if m_min is not None and m_min < lo:
        notes.append(f"master files before phy {lo} (from {m_min}) have no slave copy and were not "
                     f"compared")
    if s_min is not None and s_min < lo:
        notes.append(f"slave files before phy {lo} (from {s_min}) are older than the master's first "
                     f"file and were not compared")
    if not slave.commitlog_files:
        notes.append("the slave has no commitlog files")
    for which, reason, end in ((MASTER, m_reason, m_end), (SLAVE, s_reason, s_end)):
        if reason in ("torn_tail", "corrupt"):
            notes.append(f"{which} data ends at phy {end} on a {reason.replace('_', ' ')} record")
    return ReplicaComparison(
        master=str(master.root), slave=str(slave.root), status=status,
        master_min=m_min, master_max=m_end, slave_min=s_min, slave_max=s_end, overlap_start=lo,
        common_prefix_bytes=max(0, prefix_end - lo), first_difference=first_diff,
        first_divergent_offset=first_div, segments=sorted(results, key=lambda r: r.pair.file_start),
        runs=runs, records=records, queues=list(queues.values()), consumer_offsets=offsets,
        notes=notes)


def compare_stores(master: Store, slave: Store, opts: rf.ScanOptions | None = None,
                   range_size: int = DEFAULT_RANGE_SIZE, workers: int = 2,
                   keep_records: bool = True) -> ReplicaComparison:
    """Compare a master and a slave store in this process (segments on ``workers`` threads: CRC-32
    releases the GIL, so checksumming runs in parallel).

    ``opts`` default to the master's recovery validation (``Store.scan_options``): the slave's bytes
    are the master's, so one validation applies to both.
    """
    opts = opts or master.scan_options()
    pairs = plan_segments(master, slave)
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        results = list(pool.map(lambda p: compare_segment(p, opts, range_size, keep_records), pairs))
    return assemble(master, slave, results, opts, range_size)


def in_scope_bytes(pairs: Sequence[SegmentPair]) -> int:
    """Bytes of both sides' files that a comparison covers (for throughput figures)."""
    return sum(p.file_size * ((p.master_path is not None) + (p.slave_path is not None)) for p in pairs)


__all__ = [
    "DEFAULT_RANGE_SIZE", "RECORD_COLUMNS", "RECORD_SCHEMA", "RUN_SCHEMA",
    "IN_SYNC", "SLAVE_BEHIND", "SLAVE_AHEAD", "DIVERGED",
    "IDENTICAL", "DIFFERS", "MASTER_ONLY", "SLAVE_ONLY", "CONTENT_DIFFERS", "MASTER", "SLAVE",
    "SegmentPair", "SideResult", "SegmentComparison", "RegionScan", "QueueRange",
    "ConsumerOffsetFinding", "ReplicaComparison",
    "plan_segments", "compare_segment", "record_start_before", "file_data_end", "record_runs",
    "merge_runs", "assemble", "compare_stores", "in_scope_bytes",
]
