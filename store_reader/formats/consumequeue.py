"""Consume queue files: list, decode, classify, read as a table, and write broker-identical files.

Spec ``store-format.md`` §4 (entry layout, pre-blank filler), §2 (mapped-file naming, sizes, load
rules), §1 (directory tree, RocksDB detection); ``recovery.md`` §2 (validity test) and §5.3 (how the
broker writes entries, pre-blank fill of a queue's first file).

Everything on the hot path (decoding a whole file, encoding a whole file) is one NumPy operation over a
big-endian structured view; nothing loops per entry. Reading goes through ``storefs`` (a remote store
works like a local one, its paths are ``storefs.StoreLocation`` values); writing is local only.
"""
from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from typing import NamedTuple, Sequence

import numpy as np
import pyarrow as pa

from schemas import CONSUME_QUEUE_ENTRY

from store_reader.exceptions import (
    CorruptEntryError,
    UnreadableFileError,
)
from store_reader.io.fsutil import list_dir
from store_reader.formats.javalang import java_parse_int
from store_reader.formats.mappedfile import MappedFile, file_name, list_mapped_files, parse_file_name
from store_reader.io.storefs import PathRef, SegmentBuffer, StoreLocation, location

__all__ = [
    "CQ_STORE_UNIT_SIZE",
    "CQ_ENTRY",
    "CQ_ENTRY_DTYPE",
    "PRE_BLANK_SIZE",
    "ENTRY_INVALID",
    "ENTRY_VALID",
    "ENTRY_PRE_BLANK",
    "QueueRef",
    "CQEntries",
    "file_name",
    "parse_file_name",
    "list_queue_files",
    "file_start_offsets",
    "find_gaps",
    "decode_entries",
    "encode_entries",
    "read_queue_file",
    "read_queue_head",
    "read_queue_slots",
    "classify_entries",
    "valid_mask",
    "valid_prefix_length",
    "range_status",
    "read_queue",
    "list_queues",
    "write_queue",
    "write_queue_files",
]

# -- layout (store-format §4) -------------------------------------------------------------------
# One CQ entry, big-endian:
#   offset 0  i64  phy offset of the record in the commitlog
#   offset 8  i32  record size (TOTALSIZE)
#   offset 12 i64  tags code (§3.9) or a CQ-ext address (§5)
_CQ_FIELDS = (("phy_offset", "q"), ("size", "i"), ("tags_code", "q"))
CQ_ENTRY = struct.Struct(">" + "".join(code for _, code in _CQ_FIELDS))
_CQ_OFFSETS = [struct.calcsize(">" + "".join(code for _, code in _CQ_FIELDS[:i]))
               for i in range(len(_CQ_FIELDS))]
CQ_STORE_UNIT_SIZE = CQ_ENTRY.size  # 20 (ConsumeQueue.CQ_STORE_UNIT_SIZE)
CQ_ENTRY_DTYPE = np.dtype({
    "names": [name for name, _ in _CQ_FIELDS],
    "formats": [">" + np.dtype(code).str[1:] for _, code in _CQ_FIELDS],
    "offsets": _CQ_OFFSETS,
    "itemsize": CQ_STORE_UNIT_SIZE,
})
assert CQ_STORE_UNIT_SIZE == 20 and _CQ_OFFSETS == [0, 8, 12]


def slots_per_file(cq_file_size: int) -> int:
    """How many entries a consume queue file of ``cq_file_size`` bytes holds."""
    return cq_file_size // CQ_STORE_UNIT_SIZE


def slot_of(logic_offset):
    """The queue offset of the entry at a logic (byte) offset, e.g. a CQ file's first entry's."""
    return logic_offset // CQ_STORE_UNIT_SIZE


def logic_offset_of(queue_offset):
    """The logic (byte) offset of a queue offset's entry: where a CQ file names its first."""
    return queue_offset * CQ_STORE_UNIT_SIZE

# ConsumeQueue#fillPreBlank writes (phy 0, size Integer.MAX_VALUE, tags 0) into every slot before the
# first real entry of a queue's first file.
PRE_BLANK_SIZE = 0x7FFFFFFF

# classify_entries() codes
ENTRY_INVALID = 0    # not (phy >= 0 and size > 0): recovery stops at the first one
ENTRY_VALID = 1      # an ordinary entry
ENTRY_PRE_BLANK = 2  # pre-blank filler; "valid" by the broker's own test

# -- naming and listing (store-format §2) ------------------------------------------------------

@dataclass(frozen=True)
class QueueRef:
    """A queue directory ``consumequeue/<topic>/<queueId>/`` as the broker would load it."""

    topic: str
    queue_id: int
    path: str | StoreLocation


class CQEntries(NamedTuple):
    """Decoded entries of one buffer, as native-endian NumPy arrays of equal length."""

    phy_offset: np.ndarray  # int64
    size: np.ndarray        # int32
    tags_code: np.ndarray   # int64


def list_queue_files(queue_dir: PathRef, cq_file_size: int, *,
                     rocketmq5: bool = False) -> list[MappedFile]:
    """The files of one queue directory, sorted by name, checked the way ``MappedFileQueue#doLoad`` does.

    Parameters
    ----------
    queue_dir
        ``consumequeue/<topic>/<queueId>``. A missing directory is a queue with no files.
    cq_file_size
        ``BrokerConfig.cq_file_size`` (already rounded up to a multiple of 20).
    rocketmq5
        Apply the 5.x leniency of ``doLoad``: sub-directories are skipped and a zero-length file that
        sorts last is ignored (the 5.x broker deletes it; this reader never deletes anything).

    Returns
    -------
    list of MappedFile
        Sorted by name (= by start offset, thanks to the padding). Gaps between files are not an
        error (the broker only logs them); see :func:`find_gaps`.

    Raises
    ------
    StrayFileError
        A name that is not a number, or (4.9.7) a sub-directory (``mappedfile.list_mapped_files``, the
        one ``MappedFileQueue#load`` rule).
    FileSizeError
        A file whose length is not ``cq_file_size``: the broker refuses to start.
    UnreadableFileError
        The directory cannot be listed.
    """
    problems: list = []
    files = list_mapped_files(queue_dir, cq_file_size, "consume queue", "mappedFileSizeConsumeQueue",
                              problems, [], broker_5x=rocketmq5)
    if problems:
        raise problems[0]
    return files


def file_start_offsets(files: Sequence[MappedFile]) -> np.ndarray:
    """Logic start offset of every file (int64), in list order."""
    return np.fromiter((f.start for f in files), dtype=np.int64, count=len(files))


def find_gaps(files: Sequence[MappedFile], file_size: int) -> list[tuple[MappedFile, MappedFile]]:
    """Adjacent pairs whose starts differ by something other than ``file_size``.

    ``MappedFileQueue#checkSelf`` only logs these (``[BUG]The mappedFile queue's data is damaged``);
    reporting them is the auditor's business.
    """
    starts = file_start_offsets(files)
    bad = np.nonzero(np.diff(starts) != file_size)[0]
    return [(files[i], files[i + 1]) for i in bad.tolist()]


# -- decoding ---------------------------------------------------------------------------------

def decode_entries(data: bytes | bytearray | memoryview | np.ndarray, *,
                   path: str | os.PathLike[str] | None = None) -> CQEntries:
    """Decode a whole buffer of consecutive 20-byte entries at once.

    Parameters
    ----------
    data
        Bytes starting at an entry boundary (normally a whole CQ file).
    path
        File the bytes came from, for error messages.

    Raises
    ------
    CorruptEntryError
        The length is not a multiple of 20; the position of the partial entry is reported.
    """
    raw = np.frombuffer(data, dtype=np.uint8) if not isinstance(data, np.ndarray) else data.view(np.uint8)
    whole, rest = divmod(len(raw), CQ_STORE_UNIT_SIZE)
    if rest:
        raise CorruptEntryError(f"{rest} trailing bytes do not form a {CQ_STORE_UNIT_SIZE}-byte entry",
                                path, whole * CQ_STORE_UNIT_SIZE)
    view = raw.view(CQ_ENTRY_DTYPE)
    return CQEntries(view["phy_offset"].astype(np.int64),
                     view["size"].astype(np.int32),
                     view["tags_code"].astype(np.int64))


def encode_entries(phy_offset: np.ndarray | Sequence[int], size: np.ndarray | Sequence[int],
                   tags_code: np.ndarray | Sequence[int]) -> bytes:
    """The 20-byte big-endian form of the given entries, concatenated (inverse of decode_entries)."""
    return _structured(phy_offset, size, tags_code).tobytes()


def _structured(phy_offset, size, tags_code) -> np.ndarray:
    phy = np.asarray(phy_offset, dtype=np.int64)
    sz = np.asarray(size)
    tags = np.asarray(tags_code, dtype=np.int64)
    if not (phy.shape == sz.shape == tags.shape) or phy.ndim != 1:
        raise ValueError(f"phy/size/tags must be 1-d of one length, got {phy.shape} {sz.shape} {tags.shape}")
    if sz.size and (sz.min() < -(1 << 31) or sz.max() > (1 << 31) - 1):
        raise ValueError("size does not fit the i32 field of a consume queue entry")
    out = np.empty(len(phy), dtype=CQ_ENTRY_DTYPE)
    out["phy_offset"] = phy
    out["size"] = sz.astype(np.int32)
    out["tags_code"] = tags
    return out


def read_queue_file(path: PathRef) -> CQEntries:
    """Read and decode one CQ file (every slot, whatever it holds)."""
    loc = location(path)
    try:
        data = loc.read_bytes()
    except OSError as exc:
        raise UnreadableFileError(f"cannot read consume queue file: {exc.strerror}", str(loc)) from None
    return decode_entries(data, path=str(loc))


def written_length(raw: np.ndarray) -> int:
    """Length of ``raw`` (uint8) up to and including its last non-zero byte: from the end, one
    block at a time, as 64-bit words where they fit."""
    block = 1 << 17
    for end in range(len(raw), 0, -block):
        lo = max(0, end - block)
        chunk = raw[lo:end]
        whole = len(chunk) // 8 * 8
        if chunk[:whole].view(np.uint64).any() or chunk[whole:].any():
            return lo + int(np.flatnonzero(chunk)[-1]) + 1
    return 0


def read_queue_head(path: PathRef) -> tuple[np.ndarray, int]:
    """One CQ file's slots up to the last one that is not all zero, and the file's slot count.

    The broker preallocates a queue's file whole (6 MB by default) and writes it from the front,
    so every slot past the head is zero. Copying and decoding only the head keeps reading a
    queue proportional to its entries rather than to its files' size.

    Returns
    -------
    (head, slots)
        ``head``: a ``CQ_ENTRY_DTYPE`` copy of slots ``[0, len(head))``; every slot from there
        to ``slots`` is all zero.

    Raises
    ------
    CorruptEntryError
        The length is not a multiple of 20.
    UnreadableFileError
        The file cannot be opened or read.
    """
    with SegmentBuffer(path, "consume queue file") as seg:
        slots, rest = divmod(seg.size, CQ_STORE_UNIT_SIZE)
        if rest:
            raise CorruptEntryError(f"{rest} trailing bytes do not form a {CQ_STORE_UNIT_SIZE}-byte entry",
                                    str(seg.location), slots * CQ_STORE_UNIT_SIZE)
        raw = np.frombuffer(seg.buf, np.uint8) if seg.size else np.zeros(0, np.uint8)
        used = -(-written_length(raw[:seg.data_end()]) // CQ_STORE_UNIT_SIZE)    # a tail hole is zeros
        head = raw[:used * CQ_STORE_UNIT_SIZE].view(CQ_ENTRY_DTYPE).copy()
        del raw     # the map closes only once no array points into it
    return head, slots


def read_queue_slots(path: PathRef) -> np.ndarray:
    """One CQ file's slots as a ``CQ_ENTRY_DTYPE`` array (writable: a broker-side copy). The zero
    tail is fresh zeroed memory, which the OS supplies only where it is touched."""
    head, slots = read_queue_head(path)
    out = np.zeros(slots, CQ_ENTRY_DTYPE)
    out[:len(head)] = head
    return out


def valid_mask(phy_offset: np.ndarray, size: np.ndarray) -> np.ndarray:
    """The broker's validity test (``ConsumeQueue#recover``): ``phy >= 0 and size > 0``."""
    return (np.asarray(phy_offset) >= 0) & (np.asarray(size) > 0)


def classify_entries(phy_offset: np.ndarray, size: np.ndarray, tags_code: np.ndarray) -> np.ndarray:
    """Kind of every entry: :data:`ENTRY_VALID`, :data:`ENTRY_PRE_BLANK` or :data:`ENTRY_INVALID` (int8).

    A pre-blank filler ``(0, 0x7FFFFFFF, 0)`` passes the broker's validity test; it gets its own code
    so callers can tell fillers from real entries.
    """
    phy = np.asarray(phy_offset)
    sz = np.asarray(size)
    tags = np.asarray(tags_code)
    kind = np.where(valid_mask(phy, sz), ENTRY_VALID, ENTRY_INVALID).astype(np.int8)
    kind[(phy == 0) & (sz == PRE_BLANK_SIZE) & (tags == 0)] = ENTRY_PRE_BLANK
    return kind


def valid_prefix_length(phy_offset: np.ndarray, size: np.ndarray) -> int:
    """Number of leading valid entries (where ``ConsumeQueue#recover`` stops in a file)."""
    bad = np.flatnonzero(~valid_mask(phy_offset, size))
    return int(bad[0]) if bad.size else len(np.asarray(phy_offset))


def range_status(min_offset: int, max_offset: int, offset: int) -> tuple[str | None, int]:
    """The checks of a pull's offset against the queue's range, in the broker's order (R§9.2, the
    same in 4.9.7 and 5.3.3): ``(GetMessageStatus, nextBeginOffset on a master)``, or ``(None,
    offset)`` when the offset lies inside the queue. The second value is where the consumer's
    next pull leaves its committed offset (PULL_OFFSET_MOVED persists it)."""
    if max_offset == 0:
        return "NO_MESSAGE_IN_QUEUE", 0
    if offset < min_offset:
        return "OFFSET_TOO_SMALL", min_offset
    if offset == max_offset:
        return "OFFSET_OVERFLOW_ONE", offset
    if offset > max_offset:
        return "OFFSET_OVERFLOW_BADLY", max_offset
    return None, offset


def read_queue(queue_dir: PathRef, topic: str, queue_id: int, cq_file_size: int, *,
               files: Sequence[MappedFile] | None = None, rocketmq5: bool = False) -> pa.Table:
    """Every slot of every file of one queue as a ``CONSUME_QUEUE_ENTRY`` table.

    Raw: invalid and pre-blank slots are included, nothing is cut at the recovered end (use
    :func:`classify_entries` / :func:`valid_prefix_length`, or the recovery module, for that).
    ``queue_offset`` is the logic offset / 20 (``file.start + position``).

    Parameters
    ----------
    queue_dir, topic, queue_id
        The queue's directory and the names it is reported under.
    cq_file_size
        Configured file size (``BrokerConfig.cq_file_size``).
    files
        Already listed files (skips :func:`list_queue_files`).
    rocketmq5
        See :func:`list_queue_files`.
    """
    if files is None:
        files = list_queue_files(queue_dir, cq_file_size, rocketmq5=rocketmq5)
    schema = CONSUME_QUEUE_ENTRY.arrow()
    if not files:
        return schema.empty_table()
    batches = []
    for f in files:
        e = read_queue_file(f.path)
        n = len(e.phy_offset)
        position = np.arange(n, dtype=np.int64) * CQ_STORE_UNIT_SIZE
        batches.append(pa.record_batch([
            pa.repeat(pa.scalar(topic, pa.string()), n),
            pa.repeat(pa.scalar(queue_id, pa.int32()), n),
            pa.array((f.start + position) // CQ_STORE_UNIT_SIZE, pa.int64()),
            pa.array(e.phy_offset, pa.int64()),
            pa.array(e.size, pa.int32()),
            pa.array(e.tags_code, pa.int64()),
            pa.repeat(pa.scalar(f.name, pa.string()), n),
            pa.array(position.astype(np.int32), pa.int32()),
        ], schema=schema))
    return pa.Table.from_batches(batches, schema=schema)


def list_queues(store_root: PathRef, *, consumequeue_dir: PathRef | None = None) -> list[QueueRef]:
    """Every queue directory the broker would load, sorted by (topic, queue id).

    ``consumequeue/<topic>/<queueId>/``: topic directories are taken verbatim; a queue directory whose
    name is not a Java int is skipped, as ``DefaultMessageStore#loadConsumeQueue`` (4.9.7) /
    ``ConsumeQueueStore#loadConsumeQueues`` (5.x) skip it. Plain files at either level are ignored.

    A RocksDB consume queue sharing ``consumequeue/`` (double-write) leaves its files there: plain
    files, ignored as the broker ignores them; a store whose RocksDB consume queue is the one served
    is read through ``rocksdbcq`` instead (``Inventory.cq_served_by``).

    Raises
    ------
    UnreadableFileError
        A directory cannot be listed.
    """
    cq_dir = location(consumequeue_dir) if consumequeue_dir is not None else \
        location(store_root) / "consumequeue"
    topics = list_dir(cq_dir, "consume queue root")
    out: list[QueueRef] = []
    for t in topics:
        if not t.is_dir():
            continue
        for q in list_dir(t.location, "topic"):
            qid = java_parse_int(q.name) if q.is_dir() else None
            if qid is None:
                continue  # Integer.parseInt throws NumberFormatException -> the broker skips it
            out.append(QueueRef(t.name, qid, q.path))
    out.sort(key=lambda r: (r.topic, r.queue_id, r.path))
    return out


# -- writing (recovery.md §5.3) ---------------------------------------------------------------

def write_queue(directory: str | os.PathLike[str], phy_offset: np.ndarray | Sequence[int],
                size: np.ndarray | Sequence[int], tags_code: np.ndarray | Sequence[int],
                first_queue_offset: int, cq_file_size: int, *, overwrite: bool = False) -> list[str]:
    """Write the CQ files of one queue exactly as the broker's ``putMessagePositionInfo`` leaves them.

    Entry ``i`` goes to queue offset ``first_queue_offset + i``. Files are ``cq_file_size`` bytes,
    zero-filled past the last entry, named by their logic start offset (20 digits); a file is only
    created when an entry falls into it. When the queue starts at a non-zero offset, the slots of the
    first file before it hold pre-blank fillers (``ConsumeQueue#fillPreBlank``), as the broker writes
    them when it creates the first file of a queue that has none.

    Parameters
    ----------
    directory
        Target queue directory (created if missing). Only this directory is written; atomic
        placement (temp dir + rename) is the caller's job.
    phy_offset, size, tags_code
        Entry values, one per consecutive queue offset.
    first_queue_offset
        Queue offset of the first entry (``minOffset``).
    cq_file_size
        ``BrokerConfig.cq_file_size`` (a multiple of 20).
    overwrite
        Replace files that already exist (otherwise :class:`FileExistsError`).

    Returns
    -------
    list of str
        Paths written, in offset order. Empty when there are no entries (the broker has no file then).
    """
    if cq_file_size <= 0 or cq_file_size % CQ_STORE_UNIT_SIZE:
        raise ValueError(f"cq_file_size {cq_file_size} is not a positive multiple of {CQ_STORE_UNIT_SIZE}")
    if first_queue_offset < 0:
        raise ValueError(f"first_queue_offset {first_queue_offset} is negative")
    entries = _structured(phy_offset, size, tags_code)
    if len(entries) == 0:
        return []
    per_file = cq_file_size // CQ_STORE_UNIT_SIZE
    first = first_queue_offset - first_queue_offset % per_file      # the first file's first slot
    slots = np.zeros(first_queue_offset - first + len(entries), dtype=CQ_ENTRY_DTYPE)
    slots[:first_queue_offset - first] = (0, PRE_BLANK_SIZE, 0)
    slots[first_queue_offset - first:] = entries
    return write_queue_files(directory, first, slots, cq_file_size, overwrite=overwrite)


def write_queue_files(directory: str | os.PathLike[str], first_slot: int, slots: np.ndarray,
                      cq_file_size: int, *, overwrite: bool = False) -> list[str]:
    """The CQ files holding ``slots`` (``CQ_ENTRY_DTYPE``) at queue offsets ``first_slot`` on, where
    ``first_slot`` is a file's first slot: one file per ``cq_file_size`` bytes, named by its logic
    start offset, each as long as the broker preallocates it, zero past its last slot (a sparse
    tail: a queue with few entries does not cost a whole file of writes).

    Returns the paths written, in offset order; an ``OSError`` names the file it failed on."""
    per_file = cq_file_size // CQ_STORE_UNIT_SIZE
    if first_slot % per_file:
        raise ValueError(f"queue offset {first_slot} is not the first slot of a {cq_file_size}-byte CQ file")
    directory = os.fspath(directory)
    os.makedirs(directory, exist_ok=True)
    written = []
    for lo in range(0, len(slots), per_file):
        path = os.path.join(directory, file_name((first_slot + lo) * CQ_STORE_UNIT_SIZE))
        try:
            with open(path, "wb" if overwrite else "xb") as fh:
                fh.write(slots[lo:lo + per_file].tobytes())
                fh.truncate(cq_file_size)
        except OSError as exc:
            raise OSError(exc.errno, exc.strerror, path) from None
        written.append(path)
    return written


def write_queue_slots(directory: str | os.PathLike[str], first_slot: int, slots: np.ndarray,
                      cq_file_size: int) -> list[str]:
    """``slots`` (``CQ_ENTRY_DTYPE``) written in place at queue offsets ``first_slot`` on, continuing
    the CQ files under ``directory`` (``write_queue_files`` writes whole new ones): a file that is
    missing is created as the broker preallocates it, its other slots zeros. Returns the paths
    written, in offset order; an ``OSError`` names the file it failed on."""
    per_file = cq_file_size // CQ_STORE_UNIT_SIZE
    directory = os.fspath(directory)
    os.makedirs(directory, exist_ok=True)
    written, i = [], 0
    while i < len(slots):
        at = first_slot + i
        base = at - at % per_file
        n = min(len(slots) - i, base + per_file - at)
        path = os.path.join(directory, file_name(base * CQ_STORE_UNIT_SIZE))
        try:
            with open(path, "r+b" if os.path.exists(path) else "xb") as fh:
                fh.seek((at - base) * CQ_STORE_UNIT_SIZE)
                fh.write(slots[i:i + n].tobytes())
                fh.truncate(cq_file_size)
        except OSError as exc:
            raise OSError(exc.errno, exc.strerror, path) from None
        written.append(path)
        i += n
    return written

