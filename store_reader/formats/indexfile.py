"""Index files: header, listing, entries as a table, broker-exact query, and a vectorised builder.

Spec ``store-format.md`` §7 (layout §7.1, naming §7.2, hash and slot §7.3, put and query rules §7.4,
worked example §7.5); ``recovery.md`` §8 (load, rebuild only through dispatch).

The hashSlotNum / indexNum of a file are not stored in it (§7.2): every function takes them from the
caller (``BrokerConfig.maxHashSlotNum`` / ``maxIndexNum``).

Reading goes through ``storefs``: a local file is memory-mapped, a remote one is read range by range
as a query walks its slot chains (header, one slot, the chain's entries). Writing is local only.
"""
from __future__ import annotations

import datetime as _dt
import mmap
import os
import re
import struct
from dataclasses import dataclass, replace
from typing import Iterator, NamedTuple, Sequence
from zoneinfo import ZoneInfo

import numpy as np
import pyarrow as pa

from schemas import INDEX_ENTRY, INDEX_HEADER

from store_reader.exceptions import CorruptEntryError, FileSizeError, StrayFileError, UnreadableFileError
from store_reader.io.fsutil import list_dir
from store_reader.formats.javahash import index_key, index_key_hash
from store_reader.kernels import native_kernel
from store_reader.ranges import stable_order
from store_reader.io.storefs import FileReader, PathRef, RangedRecords, StoreLocation, location

__all__ = [
    "INDEX_HEADER_SIZE",
    "HASH_SLOT_SIZE",
    "INDEX_ENTRY_SIZE",
    "HEADER_STRUCT",
    "HEADER_POSITION",
    "ENTRY_DTYPE",
    "INT64_MAX",
    "IndexHeader",
    "IndexFileRef",
    "IndexFile",
    "BuiltIndexFile",
    "IndexPuts",
    "unmap_entries",
    "create_index_file",
    "index_file_size",
    "slot_position",
    "entry_position",
    "index_file_name",
    "next_index_file_name",
    "list_index_files",
    "read_header",
    "write_header",
    "read_entries",
    "query",
    "query_key_hash",
    "build_index_files",
    "write_index_file",
]

INT32_MAX = (1 << 31) - 1
INT64_MAX = (1 << 63) - 1

# -- layout (store-format §7.1) -----------------------------------------------------------------
# [ header 40 B ][ hashSlotNum x 4 B slots ][ indexNum x 20 B entries ], all big-endian.
#
# IndexHeader:
#   offset 0  i64 beginTimestamp     store time of the first key put (or inherited, §7.2)
#   offset 8  i64 endTimestamp       store time of the last key put
#   offset 16 i64 beginPhyOffset
#   offset 24 i64 endPhyOffset
#   offset 32 i32 hashSlotCount      slots that went from empty to used
#   offset 36 i32 indexCount         NEXT entry number (entries in use = indexCount - 1)
_HEADER_FIELDS = (("begin_timestamp", "q"), ("end_timestamp", "q"), ("begin_phy_offset", "q"),
                  ("end_phy_offset", "q"), ("hash_slot_count", "i"), ("index_count", "i"))
HEADER_STRUCT = struct.Struct(">" + "".join(c for _, c in _HEADER_FIELDS))
INDEX_HEADER_SIZE = HEADER_STRUCT.size
HEADER_POSITION = {name: struct.calcsize(">" + "".join(c for _, c in _HEADER_FIELDS[:i]))
               for i, (name, _) in enumerate(_HEADER_FIELDS)}
assert INDEX_HEADER_SIZE == 40 and HEADER_POSITION["index_count"] == 36

# Slot s: i32 at 40 + 4*s = entry number of the newest entry of that slot, 0 = empty.
HASH_SLOT_SIZE = struct.calcsize(">i")

# Entry n (n >= 1; entry 0 is never used) at 40 + 4*hashSlotNum + 20*n:
#   offset 0  i32 keyHash     non-negative hash of topic#key (§7.3)
#   offset 4  i64 phy offset of the message
#   offset 12 i32 timeDiff    seconds since the header's beginTimestamp (§7.4)
#   offset 16 i32 prevIndex   previous entry number in the same slot chain, 0 = end
_ENTRY_FIELDS = (("key_hash", "i"), ("phy_offset", "q"), ("time_diff", "i"), ("prev_index", "i"))
_ENTRY_STRUCT = struct.Struct(">" + "".join(c for _, c in _ENTRY_FIELDS))
INDEX_ENTRY_SIZE = _ENTRY_STRUCT.size
_ENTRY_POS = [struct.calcsize(">" + "".join(c for _, c in _ENTRY_FIELDS[:i]))
              for i in range(len(_ENTRY_FIELDS))]
ENTRY_DTYPE = np.dtype({
    "names": [n for n, _ in _ENTRY_FIELDS],
    "formats": [">" + np.dtype(c).str[1:] for _, c in _ENTRY_FIELDS],
    "offsets": _ENTRY_POS,
    "itemsize": INDEX_ENTRY_SIZE,
})
assert INDEX_ENTRY_SIZE == 20 and _ENTRY_POS == [0, 4, 12, 16]

_SLOT_DTYPE = np.dtype(">i4")
_NAME = re.compile(r"[0-9]{17}")


def index_file_size(hash_slot_num: int, index_num: int) -> int:
    """``40 + 4*hashSlotNum + 20*indexNum`` (420,000,040 with the defaults)."""
    return entry_position(hash_slot_num, index_num)


def slot_position(slot: int) -> int:
    """Byte position of hash slot ``slot`` (``slot == hashSlotNum``: where the entries start)."""
    return INDEX_HEADER_SIZE + slot * HASH_SLOT_SIZE


def entry_position(hash_slot_num: int, n: int) -> int:
    """Byte position of entry ``n`` in a file of ``hash_slot_num`` slots."""
    return slot_position(hash_slot_num) + n * INDEX_ENTRY_SIZE


# -- header -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class IndexHeader:
    """The 40-byte ``IndexHeader`` (names as in the spec, snake_case)."""

    begin_timestamp: int = 0
    end_timestamp: int = 0
    begin_phy_offset: int = 0
    end_phy_offset: int = 0
    hash_slot_count: int = 0
    index_count: int = 0

    @classmethod
    def unpack(cls, data: bytes | memoryview, *, path: str | os.PathLike[str] | None = None) -> "IndexHeader":
        """Decode the first 40 bytes of ``data``; :class:`CorruptEntryError` if there are fewer."""
        if len(data) < INDEX_HEADER_SIZE:
            raise CorruptEntryError(f"index header needs {INDEX_HEADER_SIZE} bytes, got {len(data)}",
                                    path, len(data))
        return cls(*HEADER_STRUCT.unpack_from(data, 0))

    def pack(self) -> bytes:
        return HEADER_STRUCT.pack(self.begin_timestamp, self.end_timestamp, self.begin_phy_offset,
                                  self.end_phy_offset, self.hash_slot_count, self.index_count)

    @property
    def loaded_index_count(self) -> int:
        """``IndexHeader#load``: a stored indexCount <= 0 is read as 1."""
        return self.index_count if self.index_count > 0 else 1

    @property
    def entries_in_use(self) -> int:
        """Entries 1 .. indexCount-1 (after the load rule)."""
        return self.loaded_index_count - 1

    @classmethod
    def first(cls) -> "IndexHeader":
        """Header of the first index file before its first put (``IndexFile`` constructor with no
        predecessor): all zero, indexCount 1 in memory."""
        return cls().successor()

    def room(self, index_num: int) -> int:
        """Puts this file still takes: an index file holds entry numbers 1 .. indexNum - 1 (entry 0
        is never written; ``IndexFile#isWriteFull`` at indexCount >= indexNum)."""
        return max(index_num - self.loaded_index_count, 0)

    def is_full(self, index_num: int) -> bool:
        return self.room(index_num) == 0

    def after_load(self, index_num: int) -> "tuple[IndexHeader, bool]":
        """Where puts go after ``IndexService#load`` when this is the last index file's stored
        header: into this file, its indexCount as the load reads it (True), or, when it is full,
        into the fresh file the broker creates at once (False)."""
        loaded = replace(self, index_count=self.loaded_index_count)
        return (loaded, True) if not loaded.is_full(index_num) else (loaded.successor(), False)

    def successor(self) -> "IndexHeader":
        """Header of the next file the broker creates after this one fills (``IndexFile`` constructor).

        beginPhyOffset = endPhyOffset = this endPhyOffset, and beginTimestamp = endTimestamp = this
        endTimestamp, each only if > 0; counts start fresh (indexCount 1 in memory).
        """
        phy = self.end_phy_offset if self.end_phy_offset > 0 else 0
        ts = self.end_timestamp if self.end_timestamp > 0 else 0
        return IndexHeader(ts, ts, phy, phy, 0, 1)

    def to_dict(self) -> dict[str, int]:
        return {name: getattr(self, name) for name, _ in _HEADER_FIELDS}


def read_header(path: PathRef) -> IndexHeader:
    """Read the header of an index file."""
    loc = location(path)
    try:
        data = loc.read_bytes(0, INDEX_HEADER_SIZE)
    except OSError as exc:
        raise UnreadableFileError(f"cannot read index file: {exc.strerror}", str(loc)) from None
    return IndexHeader.unpack(data, path=str(loc))


def write_header(path: str | os.PathLike[str], header: IndexHeader) -> None:
    """Overwrite bytes 0..39 of an existing index file with ``header`` (nothing else is touched)."""
    with open(path, "r+b") as fh:
        fh.write(header.pack())


# -- naming and listing (store-format §7.2) ------------------------------------------------------

def index_file_name(epoch_ms: int, tz: str | _dt.tzinfo | None = None) -> str:
    """``UtilAll#timeMillisToHumanString``: ``yyyyMMddHHmmssSSS`` of ``epoch_ms`` in ``tz``.

    Parameters
    ----------
    epoch_ms
        Milliseconds since the epoch (the broker uses the file's creation time).
    tz
        IANA name or tzinfo of the broker JVM's zone; None = this process's local zone.
    """
    if isinstance(tz, str):
        tz = ZoneInfo(tz)
    seconds, ms = divmod(int(epoch_ms), 1000)
    # tz None: naive local time, like a JVM running in this process's default zone
    t = _dt.datetime.fromtimestamp(seconds, tz=tz)
    return f"{t.year:04d}{t.month:02d}{t.day:02d}{t.hour:02d}{t.minute:02d}{t.second:02d}{ms:03d}"


def next_index_file_name(first_put_ms: int, previous: str | None) -> str:
    """The name of an index file the project creates: its first put's store time (UTC, as the
    broker names a file by its creation time), made later than ``previous`` (the name of the
    file before it, if any) so names stay unique and sort in creation order."""
    name = index_file_name(first_put_ms, "UTC")
    if previous is not None and name <= previous:
        t = _dt.datetime.strptime(previous, "%Y%m%d%H%M%S%f").replace(tzinfo=_dt.timezone.utc)
        name = index_file_name(int(t.replace(microsecond=0).timestamp()) * 1000 + t.microsecond // 1000 + 1, "UTC")
    return name


@dataclass(frozen=True)
class IndexFileRef:
    """One index file on disk: full path (a ``storefs.StoreLocation`` if remote), 17-digit name, length."""

    path: str | StoreLocation
    name: str
    size: int


def list_index_files(index_dir: PathRef, file_size: int, *,
                     strict: bool = True) -> list[IndexFileRef]:
    """Index files sorted by name (= creation order), sizes checked against the configuration.

    Parameters
    ----------
    index_dir
        ``<root>/index``. Missing = no index files.
    file_size
        ``BrokerConfig.index_file_size``.
    strict
        True: a name that is not 17 digits raises :class:`StrayFileError`. False: do what
        ``IndexService#load`` does, i.e. skip names ``Long.parseLong`` rejects and accept any other
        all-digit name.

    Raises
    ------
    FileSizeError
        A file whose length differs from ``file_size``. (The broker itself would map it anyway,
        growing a short file with zeros; a different length means the file was written with other
        hashSlotNum/indexNum values or was damaged, and would be misread.)
    StrayFileError
        A sub-directory, or (strict) a foreign name.
    """
    entries = list_dir(index_dir, "index")
    out = []
    for e in entries:
        where = str(e.location)
        if e.is_dir():
            raise StrayFileError("directory inside the index directory (the broker fails to load it)",
                                 where)
        if not _NAME.fullmatch(e.name):
            if strict:
                raise StrayFileError(f"index file name {e.name!r} is not yyyyMMddHHmmssSSS", where)
            if not re.fullmatch(r"[+-]?[0-9]{1,19}", e.name):
                continue  # IndexService#load: NumberFormatException -> logged and skipped
        try:
            size = e.size()
        except OSError as exc:
            raise UnreadableFileError(f"cannot stat: {exc.strerror}", where) from None
        if size != file_size:
            raise FileSizeError(f"length {size} != configured index file size {file_size} "
                                "(40 + 4*maxHashSlotNum + 20*maxIndexNum)", where)
        out.append(IndexFileRef(e.path, e.name, size))
    return out


# -- reading ------------------------------------------------------------------------------------

class IndexFile:
    """Read-only view of one index file (memory-mapped; a 420 MB file costs nothing until touched).

    A remote file is not mapped: ``slots`` and ``entries`` then read the ranges they are indexed
    with (``storefs.RangedRecords``), so a query costs a few small reads, not the whole file.

    Parameters
    ----------
    path
        The file (local path, ``storefs.StoreLocation`` or URI).
    hash_slot_num, index_num
        ``maxHashSlotNum`` / ``maxIndexNum`` the file was written with.
    """

    def __init__(self, path: PathRef, hash_slot_num: int, index_num: int, *,
                 data: np.ndarray | bytes | None = None) -> None:
        loc = location(path)
        self.path = loc.ref
        self.name = loc.name
        self.hash_slot_num = hash_slot_num
        self.index_num = index_num
        self._reader: FileReader | None = None
        size = index_file_size(hash_slot_num, index_num)
        base = slot_position(hash_slot_num)
        if data is None and loc.filesystem is not None:
            try:
                self._reader = loc.open_reader()
            except OSError as exc:
                raise UnreadableFileError(f"cannot open index file: {exc.strerror}", str(loc)) from None
            if self._reader.size != size:
                self._reader.close()
                raise FileSizeError(f"length {self._reader.size} != index file size {size} for "
                                    f"hashSlotNum {hash_slot_num}, indexNum {index_num}", str(loc))
            self._data = None
            self.slots: np.ndarray | RangedRecords = RangedRecords(
                self._reader, INDEX_HEADER_SIZE, _SLOT_DTYPE, hash_slot_num, "index file slots")
            self.entries: np.ndarray | RangedRecords = RangedRecords(
                self._reader, base, ENTRY_DTYPE, index_num, "index file entries")
            try:
                head = self._reader.read_at(0, INDEX_HEADER_SIZE)
            except OSError as exc:
                self._reader.close()
                raise UnreadableFileError(f"cannot read index file: {exc.strerror}", str(loc)) from None
            self.header = IndexHeader.unpack(head, path=str(loc))
            return
        if data is None:
            try:
                actual = os.path.getsize(loc.path)
            except OSError as exc:
                raise UnreadableFileError(f"cannot stat index file: {exc.strerror}", loc.path) from None
        else:
            actual = len(data)
        if actual != size:
            raise FileSizeError(f"length {actual} != index file size {size} for hashSlotNum "
                                f"{hash_slot_num}, indexNum {index_num}", str(loc))
        if data is not None:
            self._data = np.frombuffer(data, dtype=np.uint8) if not isinstance(data, np.ndarray) \
                else data.view(np.uint8)
        else:
            try:
                self._data = np.memmap(loc.path, dtype=np.uint8, mode="r")
            except OSError as exc:
                raise UnreadableFileError(f"cannot map index file: {exc.strerror}", loc.path) from None
        self.header = IndexHeader.unpack(self._data[:INDEX_HEADER_SIZE].tobytes(), path=str(loc))
        self.slots = self._data[INDEX_HEADER_SIZE:base].view(_SLOT_DTYPE)
        self.entries = self._data[base:].view(ENTRY_DTYPE)  # entries[n] = entry number n

    @classmethod
    def from_buffer(cls, data: np.ndarray | bytes, hash_slot_num: int, index_num: int,
                    name: str = "<memory>") -> "IndexFile":
        """View over index file bytes held in memory (e.g. a :class:`BuiltIndexFile` before writing)."""
        return cls(name, hash_slot_num, index_num, data=data)

    @classmethod
    def of(cls, f: "IndexFile | IndexFileRef | BuiltIndexFile | PathRef", hash_slot_num: int,
           index_num: int) -> "IndexFile":
        if isinstance(f, IndexFile):
            return f
        if isinstance(f, BuiltIndexFile):
            return cls.from_buffer(f.data, hash_slot_num, index_num)
        return cls(f.path if isinstance(f, IndexFileRef) else f, hash_slot_num, index_num)

    def is_time_matched(self, begin: int, end: int) -> bool:
        """``IndexFile#isTimeMatched``: does [begin, end] overlap the header's time range."""
        b, e = self.header.begin_timestamp, self.header.end_timestamp
        return (begin < b and end > e) or (b <= begin <= e) or (b <= end <= e)

    def select_phy_offsets(self, key_hash: int, out: list[int], max_num: int, begin: int, end: int) -> None:
        """``IndexFile#selectPhyOffset``: walk the slot chain of ``key_hash``, appending to ``out``.

        Stop rules (§7.4 query side): slot empty/out of range or indexCount <= 1 -> nothing; during the
        walk stop at ``len(out) >= max_num``, a negative timeDiff, prev <= 0, prev > indexCount,
        prev == current, or an entry time < begin. An entry matches on keyHash and begin <= time <= end.
        """
        count = self.header.loaded_index_count
        slot = _java_rem(key_hash, self.hash_slot_num)
        if slot < 0:
            return  # Java would throw on the negative position; the broker logs and returns nothing
        n = int(self.slots[slot])
        if n <= 0 or n > count or count <= 1:
            return
        begin_ts = self.header.begin_timestamp
        while True:
            if len(out) >= max_num:
                break
            if n >= len(self.entries):
                break  # beyond the file: Java's buffer read throws, caught and logged
            e = self.entries[n]
            time_diff = int(e["time_diff"])
            prev = int(e["prev_index"])
            if time_diff < 0:
                break
            time_read = _java_long(begin_ts + time_diff * 1000)
            if int(e["key_hash"]) == key_hash and begin <= time_read <= end:
                out.append(int(e["phy_offset"]))
            if prev <= 0 or prev > count or prev == n or time_read < begin:
                break
            n = prev

    def entry_chunks(self, chunk: int = 1 << 20, first: int = 1, end: int | None = None
                     ) -> Iterator[tuple[int, np.ndarray]]:
        """Entries ``first`` .. ``end - 1`` (default: 1 .. indexCount-1) in entry order, ``chunk`` at
        a time, each with the number of its first entry (``ENTRY_DTYPE`` arrays). A mapped file's
        pages of a chunk are handed back once the next is asked for, so a reader holds about one
        chunk of the file (~20 MiB), not all of it (~420 MB at the default size)."""
        used = min(self.header.entries_in_use, self.index_num - 1)
        end = used + 1 if end is None else min(end, used + 1)
        for lo in range(first, end, chunk):
            hi = min(lo + chunk, end)
            yield lo, self.entries[lo:hi]
            if self._data is not None:
                unmap_entries(self._data, self.hash_slot_num, lo, hi)

    def entries_table(self) -> pa.Table:
        """Entries 1 .. indexCount-1 as an ``INDEX_ENTRY`` table (vectorised)."""
        used = min(self.header.entries_in_use, self.index_num - 1)
        e = self.entries[1:1 + used]
        key_hash = e["key_hash"].astype(np.int32)
        n = len(e)
        return pa.table([
            pa.repeat(pa.scalar(self.name, pa.string()), n),
            pa.array(np.arange(1, n + 1, dtype=np.int32)),
            pa.array(key_hash),
            pa.array(e["phy_offset"].astype(np.int64)),
            pa.array(e["time_diff"].astype(np.int32)),
            pa.array(e["prev_index"].astype(np.int32)),
            pa.array(np.fmod(key_hash, np.int32(self.hash_slot_num)).astype(np.int32)),
        ], schema=INDEX_ENTRY.arrow())

    def header_table(self) -> pa.Table:
        h = self.header
        return pa.table({"file": [self.name], **{k: [v] for k, v in h.to_dict().items()}},
                        schema=INDEX_HEADER.arrow())

    def close(self) -> None:
        mm = getattr(self._data, "_mmap", None)
        self.slots = self.entries = None  # type: ignore[assignment]
        self._data = None  # type: ignore[assignment]
        if self._reader is not None:
            self._reader.close()
            self._reader = None
        if mm is not None:
            try:
                mm.close()
            except BufferError:
                pass  # a caller still holds a view; the map goes away with it

    def __enter__(self) -> "IndexFile":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _java_long(x: int) -> int:
    """Wrap to a Java ``long`` (the broker's timestamp arithmetic overflows silently)."""
    x &= (1 << 64) - 1
    return x - (1 << 64) if x >> 63 else x


def _java_rem(a: int, b: int) -> int:
    """Java ``%`` (sign of the dividend)."""
    r = abs(a) % abs(b)
    return -r if a < 0 else r


def read_entries(path: PathRef, hash_slot_num: int, index_num: int) -> pa.Table:
    """Entries in use of one index file as an ``INDEX_ENTRY`` table."""
    with IndexFile(path, hash_slot_num, index_num) as f:
        return f.entries_table()


def query_key_hash(files: Sequence["IndexFile | IndexFileRef | BuiltIndexFile | PathRef"],
                   key_hash: int, *,
                   hash_slot_num: int, index_num: int, max_num: int = INT32_MAX, begin: int = 0,
                   end: int = INT64_MAX) -> list[int]:
    """``IndexService#queryOffset`` for an already computed keyHash.

    Files are walked from the **last** to the first of ``files`` (pass them in name order, as the
    broker's list is); a file is searched only if its time range overlaps [begin, end]; the walk stops
    after a file whose beginTimestamp < begin, or once ``max_num`` offsets were found.

    Returns
    -------
    list of int
        Phy offsets in the broker's order (newest file first, newest entry first within a file).
        They are hash candidates: the caller must compare the real keys (§7.4).
    """
    out: list[int] = []
    for f in reversed(list(files)):
        idx = IndexFile.of(f, hash_slot_num, index_num)
        if idx.is_time_matched(begin, end):
            idx.select_phy_offsets(key_hash, out, max_num, begin, end)
        if idx.header.begin_timestamp < begin:
            break
        if len(out) >= max_num:
            break
    return out


def query(files: Sequence["IndexFile | IndexFileRef | BuiltIndexFile | PathRef"], topic: str,
          key: str, *,
          hash_slot_num: int, index_num: int, max_num: int = INT32_MAX, begin: int = 0,
          end: int = INT64_MAX) -> list[int]:
    """``IndexService#queryOffset(topic, key, maxNum, begin, end)``: phy offsets exactly as the broker.

    Parameters
    ----------
    files
        Index files in name order (paths, :class:`IndexFileRef`, open :class:`IndexFile`, or
        :class:`BuiltIndexFile` results).
    topic, key
        The key is looked up as ``topic#key``.
    hash_slot_num, index_num
        Configured ``maxHashSlotNum`` / ``maxIndexNum``.
    max_num
        The broker caps this at ``maxMsgsNumBatch`` (default 64); pass ``min(maxNum, maxMsgsNumBatch)``
        to reproduce a broker answer.
    begin, end
        Store-time range in ms (the broker's queryMessage defaults: 0 .. Long.MAX_VALUE).
    """
    return query_key_hash(files, index_key_hash(index_key(topic, key)), hash_slot_num=hash_slot_num,
                          index_num=index_num, max_num=max_num, begin=begin, end=end)


# -- building (store-format §7.4) --------------------------------------------------------------

@dataclass
class IndexPuts:
    """Index puts in put order (F§7.4): keyHash, phy offset and store time of every key (what
    ``build_index_files`` writes; made by the broker's rule, ``broker.dispatch.index_puts``)."""

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


class BuiltIndexFile(NamedTuple):
    """One index file produced by :func:`build_index_files`."""

    header: IndexHeader
    data: np.ndarray     # uint8, the complete file bytes
    first_put: int       # position in the input arrays of this file's first new entry
    puts: int            # number of new entries written into this file
    continued: bool      # True: this is ``base`` with entries appended, not a fresh file


def build_index_files(key_hash: np.ndarray | Sequence[int], phy_offset: np.ndarray | Sequence[int],
                      store_timestamp: np.ndarray | Sequence[int], *, hash_slot_num: int, index_num: int,
                      start_header: IndexHeader | None = None,
                      base: bytes | bytearray | memoryview | np.ndarray | None = None,
                      ) -> list[BuiltIndexFile]:
    """Bytes of the index file(s) a sequence of ``IndexFile#putKey`` calls produces, without a put loop.

    By default the puts go into fresh files: the first starts from ``start_header`` (the values the
    ``IndexFile`` constructor gave it, i.e. ``previous_file_header.successor()``, or all zeros for the
    very first index file). With ``base`` the puts first continue that existing file, as the broker does
    with the last non-full file. Each file takes entries up to number ``index_num - 1``; the next one
    starts from ``successor()`` of the full one.

    Per file, with new entry numbers n0..n0+m-1 in put order (NumPy, no per-entry Python):

    * slot = keyHash % hashSlotNum; prev = the previous entry number with the same slot (stable
      argsort by slot, shift within each run); the first put of a run takes the slot's existing value
      if it is valid (``0 < v <= entry number``), else 0; slot table = last entry of every run;
    * hashSlotCount += runs whose first put found the slot empty/invalid; indexCount = n0 + m;
    * timeDiff: against the header's beginTimestamp; in a file without entries the first put is
      computed against the inherited value (0 when <= 0) and then becomes the begin for the rest;
      ``(ts - begin) / 1000`` truncated, clamped to [0, Integer.MAX_VALUE];
    * begin (phy, ts) set by the file's first put ever, end = the last put.

    Parameters
    ----------
    key_hash
        Non-negative keyHash per put (:func:`store_reader.formats.javahash.index_key_hashes`).
    phy_offset, store_timestamp
        Message phy offset and store time per put.
    hash_slot_num, index_num
        ``maxHashSlotNum`` / ``maxIndexNum``.
    start_header
        Header of the first fresh file before its first put (only begin/end values matter); ignored
        when ``base`` is given.
    base
        Complete bytes of an existing index file to continue (copied, never modified).

    Returns
    -------
    list of BuiltIndexFile
        Empty when there is nothing to put. Dedup (``phy < endPhyOffset`` skip) and key selection
        (UNIQ_KEY, then KEYS tokens, no ROLLBACK) are the caller's job.
    """
    kh = np.asarray(key_hash, dtype=np.int64)
    phy = np.asarray(phy_offset, dtype=np.int64)
    ts = np.asarray(store_timestamp, dtype=np.int64)
    if not (kh.shape == phy.shape == ts.shape) or kh.ndim != 1:
        raise ValueError("key_hash/phy/store_timestamp must be 1-d of one length: "
                         f"{kh.shape} {phy.shape} {ts.shape}")
    if kh.size and (kh.min() < 0 or kh.max() > INT32_MAX):
        raise ValueError("keyHash values must be non-negative i32 (IndexFile#indexKeyHashMethod)")
    if hash_slot_num <= 0 or index_num <= 1:
        raise ValueError(f"hashSlotNum {hash_slot_num} / indexNum {index_num} cannot hold an entry")
    size = index_file_size(hash_slot_num, index_num)
    data: np.ndarray | None = None
    header = start_header or IndexHeader.first()
    if base is not None:
        raw = np.frombuffer(base, dtype=np.uint8) if not isinstance(base, np.ndarray) else base.view(np.uint8)
        if len(raw) != size:
            raise FileSizeError(f"base is {len(raw)} bytes, index file size is {size}")
        header, continued = IndexHeader.unpack(raw[:INDEX_HEADER_SIZE].tobytes()).after_load(index_num)
        if continued:
            data = raw.copy()
    out = []
    lo = 0
    while lo < len(kh):
        fresh = data is None
        if fresh:
            data = np.zeros(size, dtype=np.uint8)
        hi = min(len(kh), lo + header.room(index_num))
        header = _put_all(data, header, kh[lo:hi], phy[lo:hi], ts[lo:hi], hash_slot_num)
        out.append(BuiltIndexFile(header, data, lo, hi - lo, not fresh))
        header, data, lo = header.successor(), None, hi
    return out


def _put_all(data: np.ndarray, start: IndexHeader, kh: np.ndarray, phy: np.ndarray, ts: np.ndarray,
             hash_slot_num: int) -> IndexHeader:
    """Apply ``putKey`` for every element to ``data`` (in place); returns the resulting header."""
    m = len(kh)
    n0 = start.index_count                             # entry number of the first put
    time_diff = np.zeros(m, dtype=np.int64)
    begin_ts, begin_phy = start.begin_timestamp, start.begin_phy_offset
    rest = 0
    if n0 <= 1:
        # the file's first put: timeDiff computed against the inherited begin, then begin reset
        if begin_ts > 0:
            time_diff[0] = _clamp_diff(ts[:1] - np.int64(begin_ts))[0]
        begin_ts, begin_phy = int(ts[0]), int(phy[0])
        rest = 1
    if begin_ts > 0:
        with np.errstate(over="ignore"):  # Java long arithmetic wraps as NumPy's does
            time_diff[rest:] = _clamp_diff(ts[rest:] - np.int64(begin_ts))

    native = native_kernel("index_put_all")         # else its NumPy twin, _put_entries
    if native is not None:
        invalid = native(data, INDEX_HEADER_SIZE, slot_position(hash_slot_num), hash_slot_num, n0,
                         np.ascontiguousarray(kh, np.int64), np.ascontiguousarray(phy, np.int64), time_diff)
    else:
        invalid = _put_entries(data, n0, kh, phy, time_diff, hash_slot_num)
    header = IndexHeader(begin_ts, int(ts[-1]), begin_phy, int(phy[-1]), start.hash_slot_count + invalid, n0 + m)
    data[:INDEX_HEADER_SIZE] = np.frombuffer(header.pack(), dtype=np.uint8)
    return header


def _put_entries(data: np.ndarray, n0: int, kh: np.ndarray, phy: np.ndarray, time_diff: np.ndarray,
                 hash_slot_num: int) -> int:
    """The puts' entries and slot heads, vectorised: each slot's puts as one run, the first one
    chained to the slot's head when ``putKey``'s validity test accepts it. Returns how many puts
    found their slot invalid."""
    m = len(kh)
    slots_view = data[INDEX_HEADER_SIZE:slot_position(hash_slot_num)].view(_SLOT_DTYPE)
    entries_view = data[slot_position(hash_slot_num):].view(ENTRY_DTYPE)

    slot = kh % hash_slot_num
    entry_no = np.arange(n0, n0 + m, dtype=np.int64)
    order = stable_order(slot)                      # runs of equal slots, put order inside a run
    run_slot = slot[order]
    first_of_run = np.empty(m, dtype=bool)
    first_of_run[0] = True
    first_of_run[1:] = run_slot[1:] != run_slot[:-1]
    last_of_run = np.empty(m, dtype=bool)
    last_of_run[-1] = True
    last_of_run[:-1] = first_of_run[1:]

    prev = np.zeros(m, dtype=np.int64)
    inner = np.flatnonzero(~first_of_run)
    prev[order[inner]] = entry_no[order[inner - 1]]
    # first put of each run: the slot's current value, if putKey's validity test accepts it
    heads = order[first_of_run]
    existing = slots_view[run_slot[first_of_run]].astype(np.int64)
    valid = (existing > 0) & (existing <= entry_no[heads])
    prev[heads] = np.where(valid, existing, 0)
    slots_view[run_slot[last_of_run]] = entry_no[order[last_of_run]]  # slot -> newest entry

    e = entries_view[n0:n0 + m]
    e["key_hash"] = kh
    e["phy_offset"] = phy
    e["time_diff"] = time_diff
    e["prev_index"] = prev
    return int(np.count_nonzero(~valid))


def unmap_entries(data: np.ndarray, hash_slot_num: int, lo: int, hi: int) -> None:
    """Hand back this process's pages of entries ``[lo, hi)`` of an index file mapped shared
    (``np.memmap``; nothing to do for bytes in memory): they stay in the page cache and the file,
    written or not, and are read again from there if touched."""
    mm = getattr(data, "_mmap", None)
    if mm is None or hi <= lo:
        return
    base = slot_position(hash_slot_num)
    a = (base + lo * ENTRY_DTYPE.itemsize) // mmap.PAGESIZE * mmap.PAGESIZE
    mm.madvise(mmap.MADV_DONTNEED, a, base + hi * ENTRY_DTYPE.itemsize - a)


def create_index_file(path: str, size: int, header: IndexHeader | None = None, mode: str = "xb") -> None:
    """A new index file of ``size`` bytes to be written through a map (``header`` at its start, or
    zeros), its blocks allocated now: a write through a map to a block the filesystem cannot
    allocate kills the process (SIGBUS) where this raises ``OSError``."""
    with open(path, mode) as fh:
        if header is not None:
            fh.write(header.pack())
            fh.flush()
        os.posix_fallocate(fh.fileno(), 0, size)


def append_puts(path: str, hash_slot_num: int, index_num: int, key_hash: np.ndarray, phy: np.ndarray,
                store_timestamp: np.ndarray, start: IndexHeader | None = None) -> tuple[IndexHeader, int]:
    """``putKey`` for the puts that fit (a file is full at ``index_num`` entries) into the index file
    at ``path``, in place: an existing one continued from its header, or, with ``start``, a new one
    created with that header (``IndexHeader.successor`` of the file before it). Returns the file's
    header and how many puts went in."""
    if start is not None:
        create_index_file(path, index_file_size(hash_slot_num, index_num), start)
    with open(path, "r+b") as fh, mmap.mmap(fh.fileno(), 0) as mm:
        data = np.frombuffer(mm, np.uint8)
        header = IndexHeader.unpack(mm[:INDEX_HEADER_SIZE], path=path)
        header = replace(header, index_count=header.loaded_index_count)
        n = max(0, min(header.room(index_num), len(key_hash)))
        if n:
            header = _put_all(data, header, np.asarray(key_hash[:n], np.int64), np.asarray(phy[:n], np.int64),
                              np.asarray(store_timestamp[:n], np.int64), hash_slot_num)
        del data
        mm.flush()
    return header, n


def _clamp_diff(diff_ms: np.ndarray) -> np.ndarray:
    """``timeDiff = diff / 1000`` then clamp to [0, Integer.MAX_VALUE].

    Java truncates toward zero, NumPy floors; they differ only for negative diffs, which clamp to 0.
    """
    return np.clip(diff_ms // 1000, 0, INT32_MAX)


def write_index_file(path: str | os.PathLike[str], built: BuiltIndexFile | np.ndarray, *,
                     overwrite: bool = False) -> None:
    """Write one built index file (only ``path`` is written; placement/renames are the caller's)."""
    data = built.data if isinstance(built, BuiltIndexFile) else built
    with open(path, "wb" if overwrite else "xb") as fh:
        fh.write(memoryview(data))
