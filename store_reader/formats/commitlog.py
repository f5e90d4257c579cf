"""Commitlog segments -> Arrow record batches and per-segment scan summaries.

One segment (commitlog file) is the unit of work: a record never spans two files (spec F§3.10).
The scan walks the segment exactly as the broker's recovery does (R§3, R§4.2) and reports where and
why its valid prefix ends; with ``include_lost`` it also resyncs past a bad record (E#3) and yields
the intact records the broker would discard, flagged ``valid_prefix = false``.

Memory is bounded by ``batch_size`` records: a local segment is mmapped read-only, a remote one
(``storefs``) is read into one buffer, and only the requested columns are materialised (bodies
only when ``body`` is selected).
"""
from __future__ import annotations

import hashlib
import mmap
import struct
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import pyarrow as pa

from schemas import MESSAGE, SEGMENT

from store_reader.formats import recordformat as rf
from store_reader.kernels import use_pure
from store_reader.exceptions import UnreadableFileError
from store_reader.io.storefs import FileReader, PathRef, SegmentBuffer, StoreLocation, location

DEFAULT_BATCH_SIZE = 16384

# Columns the scanners materialise (everything but the driver's own ``valid_prefix``).
SCANNED_COLUMNS = tuple(n for n in MESSAGE.names if n != "valid_prefix")


def scanner_impl() -> Any:
    """The native scanner, or the pure-Python twin when ``STORE_READER_PURE=1``."""
    if use_pure():
        from store_reader.formats import _pyscan
        return _pyscan
    from store_reader import _native  # built by the package build; no silent fallback to the slow twin
    return _native


def _native_opts(opts: rf.ScanOptions) -> tuple:
    return (opts.check_crc, opts.compute_crc, opts.force_verify_prop_crc, opts.check_dup_info,
            opts.broker_5x, struct.pack(f"<{len(opts.delay_levels_ms)}q", *opts.delay_levels_ms),
            opts.dledger, opts.index_tags)


def _column_array(name: str, data: Any, n: int) -> pa.Array:
    """One column from a scanner: Python values (twin) or Arrow buffers (native)."""
    f = MESSAGE.field(name).to_arrow()
    if isinstance(data, list):
        return pa.array(data, type=f.type)
    t = f.type
    if pa.types.is_list(t):
        validity, offsets, child_offsets, child_data = data
        child = pa.Array.from_buffers(t.value_type, offsets_last(offsets, n),
                                      [None, pa.py_buffer(child_offsets), pa.py_buffer(child_data)])
        return pa.ListArray.from_buffers(t, n, [_buf(validity), pa.py_buffer(offsets)],
                                         children=[child])
    if pa.types.is_map(t):
        validity, offsets, k_off, k_data, v_off, v_data = data
        pairs = offsets_last(offsets, n)
        keys = pa.Array.from_buffers(pa.string(), pairs, [None, pa.py_buffer(k_off), pa.py_buffer(k_data)])
        items = pa.Array.from_buffers(pa.string(), pairs, [None, pa.py_buffer(v_off), pa.py_buffer(v_data)])
        entries = pa.StructArray.from_arrays([keys, items], fields=[t.key_field, t.item_field])
        return pa.Array.from_buffers(t, n, [_buf(validity), pa.py_buffer(offsets)], children=[entries])
    return pa.Array.from_buffers(t, n, [_buf(b) for b in data])


def offsets_last(offsets: bytes, n: int) -> int:
    return struct.unpack_from("<i", offsets, 4 * n)[0]


def _buf(b: bytes | None) -> pa.Buffer | None:
    return None if b is None else pa.py_buffer(b)


def _batch(schema: pa.Schema, cols: dict[str, Any], n: int, valid_prefix: bool) -> pa.RecordBatch:
    arrays = []
    for f in schema:
        if f.name == "valid_prefix":      # one value for the whole batch: no Python list
            arrays.append(pa.array(np.full(n, valid_prefix, dtype=np.bool_), type=pa.bool_()))
        else:
            arrays.append(_column_array(f.name, cols[f.name], n))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


@dataclass(frozen=True)
class ZeroTail:
    """A mapped segment whose bytes from ``data_end`` on are a hole (``SegmentBuffer.data_end``),
    zeros by definition: the zero checks and the resync search stop there instead of faulting the
    hole in page by page (a broker's last, preallocated file is mostly hole). ``data_end`` is the
    size where that is not known."""

    impl: Any
    buf: Any
    size: int
    data_end: int

    def is_zero(self, start: int) -> bool:
        """Whether ``[start, size)`` reads as zeros."""
        end = min(self.size, self.data_end)
        return start >= end or self.impl.is_zero(self.buf, start, end)

    def resync(self, file_start: int, start: int, opts: Any) -> int:
        """The resync anchor at or after ``start`` (``impl.resync``): no record starts in the
        hole (its magic code would read as zeros), so only codes below ``data_end`` are looked at."""
        return self.impl.resync(self.buf, file_start, start, self.size, opts, self.data_end)


@dataclass
class SegmentSummary:
    """Where and why a segment's valid prefix ended (one row of ``schemas.SEGMENT``)."""

    segment: str
    path: str | StoreLocation
    file_start: int
    file_size: int
    valid_bytes: int = 0
    records: int = 0
    first_store_timestamp: int | None = None
    last_store_timestamp: int | None = None
    last_record_position: int | None = None
    end_reason: str = "file_end"
    end_check: str | None = None
    end_declared_size: int | None = None
    blank_declared_size: int | None = None
    nonzero_after_marker: bool | None = None
    first_magic: int | None = None
    first_sys_flag: int | None = None
    first_store_timestamp_raw: int | None = None
    first_stored_phy_offset: int | None = None
    first_record_valid: bool = False
    resync_position: int | None = None
    records_after_cut: int = 0
    crc_failures: int = 0
    lost_ranges: list[tuple[int, int]] = field(default_factory=list)
    """[start, end) positions of intact record runs found after the cut (not a table column)."""
    index_puts: int = 0
    """Index entries the valid prefix's records put: UNIQ_KEY and KEYS tokens (and TAGS with
    ``ScanOptions.index_tags``), ROLLBACK records aside (not a table column)."""
    max_store_timestamp: int | None = None
    """The valid prefix's largest store timestamp (not a table column)."""
    walked: bool = True
    """False: the file was not walked (a bounded run, ``store_reader.broker.bounded``): only its first
    record's fields are known, and only where the start file search read it (not a table column)."""

    def count_run(self, in_prefix: bool, n: int, pos: int, pos_next: int, stats: tuple) -> None:
        """Count a scanner run of ``n`` records over ``[pos, pos_next)`` (``stats``: the scanner's
        timestamps, last position and index puts): into the valid prefix's figures, or as intact
        records after the cut."""
        if not n:
            return
        first_ts, last_ts, last_pos, _, puts, max_ts = stats
        if not in_prefix:
            self.records_after_cut += n
            self.lost_ranges.append((pos, pos_next))
            return
        if self.first_store_timestamp is None:
            self.first_store_timestamp = first_ts
        self.last_store_timestamp, self.last_record_position = last_ts, last_pos
        if self.max_store_timestamp is None or max_ts > self.max_store_timestamp:
            self.max_store_timestamp = max_ts
        self.records += n
        self.index_puts += puts

    def end_prefix(self, tail: ZeroTail, pos: int, stop: tuple, opts: Any) -> int | None:
        """Where and why the valid prefix, stopped at ``pos`` by ``stop``, ended: an end-of-file
        marker, the file's end, clean zero padding, a torn tail or corruption. Returns the
        position of the first intact record behind a corrupt one, else None."""
        self.first_record_valid = self.records > 0
        self.valid_bytes = pos
        outcome, check, declared = stop
        if outcome == rf.END_OF_FILE:
            self.end_reason = "eof_marker"
            self.blank_declared_size = declared
            self.nonzero_after_marker = not tail.is_zero(min(pos + 8, tail.size))
            return None
        self.end_declared_size = declared
        if pos >= tail.size:
            self.end_reason = "file_end"
            return None
        if tail.is_zero(pos):
            self.end_reason = "zero_padding"
            return None
        self.end_check = rf.CHECKS[check]
        q = tail.resync(self.file_start, pos + 1, opts)
        if q < 0:
            self.end_reason = "torn_tail"
            return None
        self.end_reason = "corrupt"
        self.resync_position = q
        return q

    @property
    def trailing_bytes(self) -> int:
        return self.file_size - self.valid_bytes

    @property
    def end_phy_offset(self) -> int:
        return self.file_start + self.valid_bytes

    def as_row(self) -> dict[str, Any]:
        row = {name: getattr(self, name) for name in SEGMENT.names}
        row["path"] = str(self.path)
        return row


# Read-ahead hint for the mmap of a local segment (a remote one is read into memory instead): a
# scan reads each segment front to back (records, then the padding/marker check). MADV_SEQUENTIAL
# only: on a cold segment MADV_WILLNEED and MAP_POPULATE read the whole file before the scan starts
# instead of overlapping I/O with it (benchmarks/README.md). Advisory only: results never depend
# on it.
_SCAN_MADVICE = getattr(mmap, "MADV_SEQUENTIAL", None)


def _first_record_fields(buf: Any, size: int, s: SegmentSummary) -> None:
    """Raw header fields of the record at position 0, read by position whatever they hold: the
    abnormal start-file choice looks only at these (R§4.1)."""
    if size >= rf.SIZE_AND_MAGIC.size:
        s.first_magic = rf.SIZE_AND_MAGIC.unpack_from(buf, 0)[1]
    if size >= rf.SYSFLAG_POS + 4:
        s.first_stored_phy_offset = struct.unpack_from(">q", buf, rf.PHYSICALOFFSET_POS)[0]
        s.first_sys_flag = struct.unpack_from(">i", buf, rf.SYSFLAG_POS)[0]
        ts_pos = rf.store_timestamp_pos(s.first_sys_flag)
        if size >= ts_pos + 8:
            s.first_store_timestamp_raw = struct.unpack_from(">q", buf, ts_pos)[0]


class SegmentScan:
    """Iterate the record batches of one commitlog segment; ``summary`` is complete afterwards.

    Parameters
    ----------
    path
        The segment file (its name is its 20-digit start offset unless ``file_start`` is given):
        a local path, a ``storefs.StoreLocation`` or a URI.
    opts
        Validation settings (``ScanOptions.for_broker``).
    columns
        Message columns to materialise (``schemas.MESSAGE`` names); None = all but ``body``.
    batch_size
        Records per batch: bounds memory.
    include_lost
        Also yield intact records found after the cut (resync, spec E#3).
    """

    def __init__(self, path: PathRef, opts: rf.ScanOptions,
                 columns: Sequence[str] | None = None, batch_size: int = DEFAULT_BATCH_SIZE,
                 include_lost: bool = False, file_start: int | None = None) -> None:
        self._location = location(path)
        self.path = self._location.ref
        name = self._location.name
        self.file_start = int(name) if file_start is None else file_start
        self.opts = opts
        if columns is None:
            columns = [c for c in MESSAGE.names if c != "body"]
        self.schema = MESSAGE.arrow(columns)
        self.columns = tuple(c for c in self.schema.names if c != "valid_prefix")
        self.batch_size = batch_size
        self.include_lost = include_lost
        self.summary = SegmentSummary(segment=name, path=self.path, file_start=self.file_start,
                                      file_size=0)

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        impl = scanner_impl()
        native = impl.__name__.endswith("_native")
        opts = _native_opts(self.opts) if native else self.opts
        m = SegmentBuffer(self._location, "commitlog segment", _SCAN_MADVICE)
        try:
            self._tail = ZeroTail(impl, m.buf, m.size, m.data_end())
            yield from self._walk(impl, opts, m.buf, m.size)
        finally:
            m.close()

    def _run(self, impl: Any, opts: Any, buf: Any, pos: int, end: int, in_prefix: bool
             ) -> Iterator[pa.RecordBatch | tuple]:
        """Scan VALID records from ``pos``; yields batches, then the final (pos, stop) tuple."""
        s = self.summary
        while True:
            cols, n, pos_next, stop, stats = impl.scan(
                buf, self.file_start, pos, end, self.batch_size, opts, self.columns)
            s.crc_failures += stats[3]
            s.count_run(in_prefix, n, pos, pos_next, stats)
            if n and len(self.schema) and (in_prefix or self.include_lost):
                yield _batch(self.schema, cols, n, in_prefix)
            pos = pos_next
            if stop is not None:
                yield (pos, stop)
                return

    def _walk(self, impl: Any, opts: Any, buf: Any, size: int) -> Iterator[pa.RecordBatch]:
        s = self.summary
        s.file_size = size
        _first_record_fields(buf, size, s)
        # 1. the valid prefix, exactly as the broker's recovery walks it
        pos, stop = 0, None
        for item in self._run(impl, opts, buf, 0, size, True):
            if isinstance(item, tuple):
                pos, stop = item
            else:
                yield item
        # 2. classify how it ended: marker, clean zero padding, torn tail or corruption
        tail = self._tail
        q = s.end_prefix(tail, pos, stop, opts)
        # 3. intact records behind the bad one (lost by the broker's recovery)
        while q is not None and q >= 0:
            for item in self._run(impl, opts, buf, q, size, False):
                if isinstance(item, tuple):
                    pos, (outcome, _, _) = item
                else:
                    yield item
            if outcome == rf.END_OF_FILE or pos >= size or tail.is_zero(pos):
                return
            q = tail.resync(self.file_start, pos + 1, opts)


# Checks only the broker's own walk makes (``checkCRCOnRecover``): where its valid prefix stops on
# one, the records the rebuild and the audit read go on through that record.
_CRC_CHECKS = frozenset({rf.CHECK_CODE["body_crc"], rf.CHECK_CODE["record_crc"]})


class OnePassScan(SegmentScan):
    """The run's one walk of a segment: ``summary`` is the broker's (``opts``, as
    ``summarize_segment``), the batches are the records the rebuild and the audit read, exactly
    those of ``SegmentScan(path, without_crc_checks(opts), include_lost=True)`` with its
    ``valid_prefix`` flags, in the same order.

    The two walks are one as long as they agree: the broker's stops on a CRC check, the readers'
    walk takes that one record and both go on from the same position. Where they part (a resync
    landing on a different record), each walks the rest on its own: ``rewalked`` counts the bytes
    the broker's summary then walked a second time (summary only, nothing materialised).

    ``columns`` are materialised for every record, ``lost_columns`` (bodies ...) only for the records
    past the broker's valid prefix (null before it): only those can lie past the truncation point.
    ``after_walk``: called with the segment's buffer once the walk is done, before it is closed,
    while the pages just read are in memory; what it returns is ``walked``."""

    def __init__(self, path: PathRef, opts: rf.ScanOptions, columns: Sequence[str],
                 lost_columns: Sequence[str] = (), batch_size: int = DEFAULT_BATCH_SIZE,
                 after_walk: Callable[[SegmentBuffer, SegmentSummary], Any] | None = None) -> None:
        wanted = [*columns, *lost_columns]
        super().__init__(path, opts, columns=wanted + ["valid_prefix"] * ("valid_prefix" not in wanted),
                         batch_size=batch_size, include_lost=True)
        self.reader_opts = without_crc_checks(opts)
        lost = set(lost_columns)
        self.prefix_columns = tuple(c for c in self.columns if c not in lost)
        self.rewalked = 0
        self.after_walk = after_walk
        self.walked: Any = None

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        impl = scanner_impl()
        native = impl.__name__.endswith("_native")
        self._impl = impl
        self._bopts = _native_opts(self.opts) if native else self.opts
        self._aopts = _native_opts(self.reader_opts) if native else self.reader_opts
        m = SegmentBuffer(self._location, "commitlog segment", _SCAN_MADVICE)
        try:
            self._tail = ZeroTail(impl, m.buf, m.size, m.data_end())
            yield from self._one_walk(m.buf, m.size)
            if self.after_walk is not None:
                self.walked = self.after_walk(m, self.summary)
        finally:
            m.close()

    def _batch_of(self, cols: dict[str, Any], n: int, flag: bool) -> pa.RecordBatch:
        arrays = []
        for f in self.schema:
            if f.name == "valid_prefix":
                arrays.append(pa.array(np.full(n, flag, dtype=np.bool_), type=pa.bool_()))
            elif f.name in cols:
                arrays.append(_column_array(f.name, cols[f.name], n))
            else:
                arrays.append(pa.nulls(n, f.type))
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)

    def _step(self, buf: Any, pos: int, end: int, opts: Any, columns: tuple, broker: str | None,
              flag: bool | None):
        """Records from ``pos`` until a stop: counted in the broker's summary as ``broker``
        ("prefix", "lost", None: not at all), yielded with ``valid_prefix = flag`` (None: not
        yielded). Returns (stop position, stop)."""
        s = self.summary
        while True:
            cols, n, pos_next, stop, stats = \
                self._impl.scan(buf, self.file_start, pos, end, self.batch_size, opts, columns)
            if broker is not None:
                s.crc_failures += stats[3]
                s.count_run(broker == "prefix", n, pos, pos_next, stats)
            if n and flag is not None:
                yield self._batch_of(cols, n, flag)
            pos = pos_next
            if stop is not None:
                return pos, stop

    def _next_run(self, buf: Any, pos: int, size: int, stop: tuple, opts: Any) -> int | None:
        """Where a walk goes on after a run stopped at ``pos``: the resync position, or None."""
        outcome = stop[0]
        if outcome == rf.END_OF_FILE or pos >= size or self._tail.is_zero(pos):
            return None
        q = self._tail.resync(self.file_start, pos + 1, opts)
        return q if q >= 0 else None

    def _end_prefix(self, pos: int, stop: tuple) -> int | None:
        """The broker's summary at the end of its valid prefix (as ``SegmentScan._walk``)."""
        return self.summary.end_prefix(self._tail, pos, stop, self._bopts)

    def _one_walk(self, buf: Any, size: int) -> Iterator[pa.RecordBatch]:
        s = self.summary
        s.file_size = size
        _first_record_fields(buf, size, s)
        pos, broker, flag = 0, "prefix", True
        while True:
            cols = self.prefix_columns if broker == "prefix" else self.columns
            pos, stop = yield from self._step(buf, pos, size, self._bopts, cols, broker, flag)
            # the readers' walk at this stop: only a CRC check does not stop it
            a_next, a_flag = None, False
            if stop[0] == rf.INVALID and stop[1] in _CRC_CHECKS:
                got, n, a_pos, a_stop, _ = self._impl.scan(buf, self.file_start, pos, size, 1,
                                                           self._aopts, self.columns)
                if n:
                    yield self._batch_of(got, n, flag)
                    a_next, a_flag = a_pos, flag
                if a_stop is not None:
                    a_next, a_flag = self._next_run(buf, a_pos, size, a_stop, self._aopts), False
            else:
                a_next = self._next_run(buf, pos, size, stop, self._aopts)
            b_next = self._end_prefix(pos, stop) if broker == "prefix" \
                else self._next_run(buf, pos, size, stop, self._bopts)
            broker = "lost"
            if a_next == b_next:
                if a_next is None:
                    return
                pos, flag = a_next, a_flag
                continue
            # the walks part: each its own way to the end of the file
            while a_next is not None:
                a_pos, a_stop = yield from self._step(buf, a_next, size, self._aopts, self.columns,
                                                      None, a_flag)
                a_next, a_flag = self._next_run(buf, a_pos, size, a_stop, self._aopts), False
            while b_next is not None:
                b_pos, b_stop = yield from self._step(buf, b_next, size, self._bopts, (), "lost", None)
                self.rewalked += b_pos - b_next
                b_next = self._next_run(buf, b_pos, size, b_stop, self._bopts)
            return


def without_crc_checks(opts: rf.ScanOptions) -> rf.ScanOptions:
    """What the rebuild and the audit walk with: the broker's checks but CRCs (computed, to flag
    damage, not enforced)."""
    from dataclasses import replace

    return replace(opts, check_crc=False, compute_crc=True)


FINGERPRINT_BYTES = 4096


def written_fingerprint(reader: FileReader, written: int) -> str:
    """SHA-256 of what a segment's scan summary rests on, cheap to read: the file's size, where its
    valid records end (``written``, the summary's ``valid_bytes``), its first ``FINGERPRINT_BYTES``
    (the first record, which recovery's start file choice reads) and the ``FINGERPRINT_BYTES``
    either side of ``written`` (the last records, then the end-of-file marker or the zeros the next
    record would be written into). ``reader``: the file opened through ``storefs``.

    A segment rewritten or appended to changes one of these, whatever its mtime says; a change
    strictly between the two ends, with everything at the ends intact, does not (only a full scan
    sees it)."""
    size = reader.size
    h = hashlib.sha256(f"{size}:{written}\n".encode())
    for lo, hi in ((0, FINGERPRINT_BYTES), (written - FINGERPRINT_BYTES, written + FINGERPRINT_BYTES)):
        lo, hi = max(0, min(lo, size)), max(0, min(hi, size))
        h.update(reader.read_at(lo, hi - lo))
    return h.hexdigest()


def scan_segment(path: PathRef, opts: rf.ScanOptions, **kwargs: Any
                 ) -> tuple[pa.Table, SegmentSummary]:
    """Scan a whole segment into one table (convenience for small files and tests)."""
    scan = SegmentScan(path, opts, **kwargs)
    batches = list(scan)
    return pa.Table.from_batches(batches, schema=scan.schema), scan.summary


# What a head read takes first: the first record's header and, for most records, all of it.
HEAD_BYTES = 4096


def head_summary(path: PathRef, opts: rf.ScanOptions, file_start: int, file_size: int) -> SegmentSummary:
    """A file's first record alone, as the broker's start file search reads it (R§4.1): its raw
    header fields and whether it passes the broker's checks, from the first few KiB (the whole
    record when it is longer). The rest of the file is not read (``walked`` False)."""
    loc = location(path)
    s = SegmentSummary(segment=loc.name, path=loc.ref, file_start=file_start, file_size=file_size, walked=False)
    try:
        with FileReader(loc) as reader:
            buf = reader.read_at(0, HEAD_BYTES)
            if len(buf) >= 4:
                total = struct.unpack_from(">i", buf, 0)[0]
                if total > len(buf):
                    buf = reader.read_at(0, total)
    except OSError as exc:
        raise UnreadableFileError(f"cannot read commitlog segment: {exc.strerror or exc}", str(loc)) from None
    _first_record_fields(buf, len(buf), s)
    impl = scanner_impl()
    native = impl.__name__.endswith("_native")
    _, n, _, _, _ = impl.scan(buf, file_start, 0, len(buf), 1, _native_opts(opts) if native else opts, ())
    s.first_record_valid = n > 0
    return s


def summarize_segment(path: PathRef, opts: rf.ScanOptions) -> SegmentSummary:
    """The segment summary alone (no columns materialised)."""
    scan = SegmentScan(path, opts, columns=[])
    for _ in scan:
        pass
    return scan.summary


def summaries_table(summaries: Sequence[SegmentSummary]) -> pa.Table:
    return pa.Table.from_pylist([s.as_row() for s in summaries], schema=SEGMENT.arrow())
