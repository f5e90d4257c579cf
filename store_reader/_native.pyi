"""Typed stub of the native commitlog scanner and its kernels (``store_reader/_native/scanner.c``).

The scanner has the semantics of its pure-Python twin ``store_reader.formats._pyscan``, except that
``opts`` is the tuple built by ``commitlog._native_opts`` and columns come back as Arrow buffers
(little-endian ``bytes`` for ``pa.Array.from_buffers``) instead of Python lists.
"""
from typing import Optional, Tuple, Union

from typing_extensions import Buffer

# (check_crc, compute_crc, force_verify_prop_crc, check_dup_info, broker_5x, delay levels 1..n as
#  little-endian int64 bytes, DLedger framing)
NativeOpts = Tuple[bool, bool, bool, bool, bool, bytes, bool]

# fixed width: (validity | None, data); bool: (validity | None, bit-packed data);
# string/binary: (validity | None, int32 offsets, data);
# list<string>: (None, list offsets, child offsets, child data);
# map<string,string>: (validity | None, map offsets, key offsets, key data, value offsets, value data)
ColumnBuffers = Union[
    Tuple[Optional[bytes], bytes],
    Tuple[Optional[bytes], bytes, bytes],
    Tuple[None, bytes, bytes, bytes],
    Tuple[Optional[bytes], bytes, bytes, bytes, bytes, bytes],
]

# (outcome, check code, declared TOTALSIZE or None): recordformat.OUTCOMES / CHECKS indices
Stop = Tuple[int, int, Optional[int]]
# (first store timestamp, last store timestamp, position of the last record, CRC failures, index
# puts, largest store timestamp)
Stats = Tuple[Optional[int], Optional[int], Optional[int], int, int, Optional[int]]

CHECKS: Tuple[str, ...]
OUTCOMES: Tuple[str, ...]
LAYOUT: dict[str, int]
CRC32_IMPL: str

def scan(buf: Buffer, file_start: int, pos: int, end: int, max_records: int, opts: NativeOpts,
         columns: Tuple[str, ...]) -> Tuple[dict[str, ColumnBuffers], int, int, Optional[Stop], Stats]:
    """Decode up to ``max_records`` VALID records of ``buf[pos:end]`` (recovery.md §3)."""

def is_zero(buf: Buffer, start: int, end: int) -> bool:
    """True when every byte of ``buf[start:end]`` is zero."""

def resync(buf: Buffer, file_start: int, start: int, end: int, opts: NativeOpts, search_end: int = -1) -> int:
    """First position >= ``start`` of a VALID record whose PHYSICALOFFSET equals its phy offset,
    or -1 (edge-cases E#3). Records are checked against ``end``; only magic codes starting below
    ``search_end`` (default, or negative: ``end``) are candidates. DLedger framing (F§16.2): the
    position of the entry holding that record."""

def java_hashes(offsets: Buffer, data: Buffer, length: int, offset: int, mode: int) -> bytes:
    """Native int32 per string of a StringArray: mode 0 ``String.hashCode``, mode 1 index keyHash."""

def index_put_all(data: Buffer, slots_pos: int, entries_pos: int, hash_slot_num: int, first_entry: int,
                  key_hash: Buffer, phy_offset: Buffer, time_diff: Buffer) -> int:
    """``IndexFile#putKey`` for every put in order into the writable index file image ``data``
    (entry ``first_entry + i``; int64 inputs); returns how many puts found their slot invalid."""

def index_pairs_repeated(key_hash: Buffer, phy_offset: Buffer) -> bytes:
    """A byte per (key hash, phy offset) pair: 1 where an earlier pair is equal (key hashes as 32
    bits; int64 arrays, in put order within each phy offset, the phy offsets ascending)."""

def index_pairs_held(have_key_hash: Buffer, have_phy_offset: Buffer, key_hash: Buffer,
                     phy_offset: Buffer) -> bytes:
    """A byte per (key_hash, phy_offset) pair: 1 where the have pairs hold an equal one (key
    hashes as 32 bits; int64 arrays, each side's phy offsets ascending)."""

def _crc32(data: Buffer) -> int:
    """``UtilAll#crc32`` (CRC-32 & 0x7FFFFFFF) with the kernel the scanner uses (tests)."""

