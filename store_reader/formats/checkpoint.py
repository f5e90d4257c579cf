"""The checkpoint file, the ``abort`` marker and the ``lock`` file of a store root.

Spec ``store-format.md`` §8 (checkpoint layout and derived values) and §9 (abort, lock);
``recovery.md`` §4.1 (how minTimestamp / minTimestampIndex choose the abnormal-recovery start file).

All three are read through ``storefs`` (a remote store root works); the lock probe needs a local
file and reports "unknown" for a remote one.
"""
from __future__ import annotations

import errno
import fcntl
import os
import struct
import sys
from dataclasses import dataclass

import pyarrow as pa

from schemas import CHECKPOINT

from store_reader.exceptions import UnreadableFileError
from store_reader.io.storefs import PathRef, StoreLocation, location

__all__ = [
    "CHECKPOINT_FILE_SIZE",
    "USED_BYTES_4",
    "USED_BYTES_5",
    "CHECKPOINT_STRUCT",
    "Checkpoint",
    "read_checkpoint",
    "write_checkpoint",
    "abort_exists",
    "LockStatus",
    "lock_status",
]

# -- layout (store-format §8) -------------------------------------------------------------------
# 4096 bytes (one OS page), big-endian:
#   offset 0  i64 physicMsgTimestamp
#   offset 8  i64 logicsMsgTimestamp
#   offset 16 i64 indexMsgTimestamp
#   offset 24 i64 masterFlushedOffset    5.x only
#   offset 32 i64 confirmPhyOffset       5.x only
#   offset 40 i64 logicsPhysicalOffset   5.5 only (R§4.1: the abnormal start file)
#   offset 48 .. 4095 unused (zeros)
_FIELDS = (("physic_msg_timestamp", "q"), ("logics_msg_timestamp", "q"), ("index_msg_timestamp", "q"),
           ("master_flushed_offset", "q"), ("confirm_phy_offset", "q"))
CHECKPOINT_STRUCT = struct.Struct(">" + "".join(c for _, c in _FIELDS))
USED_BYTES_4 = struct.calcsize(">" + "".join(c for _, c in _FIELDS[:3]))  # 4.9.7 writes 24 bytes
USED_BYTES_5 = CHECKPOINT_STRUCT.size                                     # 5.x writes 40 bytes
CHECKPOINT_FILE_SIZE = 4096                                               # OS_PAGE_SIZE
assert (USED_BYTES_4, USED_BYTES_5) == (24, 40)
LOGICS_PHYSICAL_OFFSET = struct.Struct(">q")     # at USED_BYTES_5, written by 5.5.0 and later

_I64 = 1 << 64


def _java_long(x: int) -> int:
    """Wrap to a Java ``long`` (two's complement overflow)."""
    x &= _I64 - 1
    return x - _I64 if x >= (1 << 63) else x


@dataclass(frozen=True)
class Checkpoint:
    """Values of ``<root>/checkpoint`` (``StoreCheckpoint``).

    Attributes
    ----------
    physic_msg_timestamp, logics_msg_timestamp, index_msg_timestamp
        Store times (ms) written by every version.
    master_flushed_offset, confirm_phy_offset
        5.x fields (bytes 24..39); 0 in a 4.9.7 file.
    logics_physical_offset
        5.5 field (bytes 40..47): PHYSICALOFFSET of the last record put into a consume queue when
        the consume queues were last flushed in full; 0 when an older broker wrote the file.
    exists
        False when the file is missing: the broker then starts from an all-zero checkpoint (E#13).
    file_length
        Length on disk (None when missing). The broker maps 4096 bytes whatever the length; missing
        bytes read as zeros.
    path
        The file read, if any (a ``storefs.StoreLocation`` for a remote store).
    """

    physic_msg_timestamp: int = 0
    logics_msg_timestamp: int = 0
    index_msg_timestamp: int = 0
    master_flushed_offset: int = 0
    confirm_phy_offset: int = 0
    logics_physical_offset: int = 0
    exists: bool = True
    file_length: int | None = None
    path: str | StoreLocation | None = None

    @property
    def used_bytes(self) -> int:
        """40 when a 5.x field is non-zero, else 24.

        A 5.x file whose two extra fields are still zero cannot be told from a 4.9.7 file by its
        bytes; this reports what the content shows, not which broker wrote it.
        """
        return USED_BYTES_5 if (self.master_flushed_offset or self.confirm_phy_offset) else USED_BYTES_4

    @property
    def min_timestamp(self) -> int:
        """``StoreCheckpoint#getMinTimestamp``: ``max(0, min(physic, logics) - 3000)`` (Java long math)."""
        m = _java_long(min(self.physic_msg_timestamp, self.logics_msg_timestamp) - 3000)
        return m if m > 0 else 0

    @property
    def min_timestamp_index(self) -> int:
        """``StoreCheckpoint#getMinTimestampIndex``: ``min(minTimestamp, indexMsgTimestamp)``."""
        return min(self.min_timestamp, self.index_msg_timestamp)

    def values(self) -> tuple[int, int, int, int, int]:
        return tuple(getattr(self, name) for name, _ in _FIELDS)  # type: ignore[return-value]

    def pack(self, *, rocketmq5: bool = True) -> bytes:
        """The 4096 bytes ``StoreCheckpoint#flush`` writes (4.9.7: the 5.x fields stay zero)."""
        vals = list(self.values())
        if not rocketmq5:
            vals[3:] = [0, 0]
        tail = LOGICS_PHYSICAL_OFFSET.pack(self.logics_physical_offset) if rocketmq5 else b""
        return (CHECKPOINT_STRUCT.pack(*vals) + tail).ljust(CHECKPOINT_FILE_SIZE, b"\0")

    def to_table(self, *, rocketmq5: bool | None = None) -> pa.Table:
        """One-row ``CHECKPOINT`` table; the 5.x columns are null for a 4.9.7 reading.

        Parameters
        ----------
        rocketmq5
            Which layout to report; None = what :attr:`used_bytes` shows.
        """
        five = (self.used_bytes == USED_BYTES_5) if rocketmq5 is None else rocketmq5
        row = {name: [getattr(self, name)] for name, _ in _FIELDS}
        if not five:
            row["master_flushed_offset"] = [None]
            row["confirm_phy_offset"] = [None]
        return pa.table(row, schema=CHECKPOINT.arrow())


def read_checkpoint(path: PathRef) -> Checkpoint:
    """Read a checkpoint file (or ``<root>/checkpoint`` when given a store root).

    A missing file gives all zeros with ``exists=False``, which is what the broker starts from. A short
    file is padded with zeros (the broker's 4096-byte mapping reads zeros there too).

    Raises
    ------
    UnreadableFileError
        The file exists but cannot be read.
    """
    loc = location(path)
    try:
        if loc.is_dir():
            loc = loc / "checkpoint"
        with loc.open_reader() as r:
            data = r.read_at(0, CHECKPOINT_FILE_SIZE)
            length = r.size
    except FileNotFoundError:
        return Checkpoint(exists=False, file_length=None, path=loc.ref)
    except OSError as exc:
        raise UnreadableFileError(f"cannot read checkpoint: {exc.strerror}", str(loc)) from None
    data = data.ljust(USED_BYTES_5 + LOGICS_PHYSICAL_OFFSET.size, b"\0")
    vals = CHECKPOINT_STRUCT.unpack_from(data, 0)
    logics_phy = LOGICS_PHYSICAL_OFFSET.unpack_from(data, USED_BYTES_5)[0]
    return Checkpoint(*vals, logics_physical_offset=logics_phy, exists=True, file_length=length, path=loc.ref)


def write_checkpoint(path: str | os.PathLike[str], checkpoint: Checkpoint, *, rocketmq5: bool = True) -> None:
    """Write the 4096-byte checkpoint file at ``path`` (only that file is written).

    Parameters
    ----------
    rocketmq5
        False writes the 4.9.7 form (bytes 24..39 zero).
    """
    with open(os.fspath(path), "wb") as fh:
        fh.write(checkpoint.pack(rocketmq5=rocketmq5))


# -- abort (store-format §9) ---------------------------------------------------------------------

def abort_exists(store_root: PathRef) -> bool:
    """``DefaultMessageStore#isTempFileExist``: does ``<root>/abort`` exist (=> abnormal recovery).

    Only ``abort`` counts. 5.x leaves an ``abort.bak`` behind after writing the PID into ``abort``
    (``MixAll.string2File``); it survives a clean shutdown and is not a marker (fixtures, item 15).
    """
    abort = location(store_root) / "abort"
    try:
        return abort.exists()
    except OSError as exc:
        raise UnreadableFileError(f"cannot look for the abort file: {exc.strerror}", str(abort)) from None


# -- lock (store-format §9) ----------------------------------------------------------------------

# struct flock as the C library lays it out (native alignment). Linux: l_type, l_whence, l_start,
# l_len, l_pid; the BSDs/macOS put the two offsets and the pid first.
if sys.platform.startswith(("darwin", "freebsd", "openbsd", "netbsd")):
    _FLOCK = struct.Struct("@qqihh")
    _FLOCK_FIELDS = ("l_start", "l_len", "l_pid", "l_type", "l_whence")
else:
    _FLOCK = struct.Struct("@hhqqi")
    _FLOCK_FIELDS = ("l_type", "l_whence", "l_start", "l_len", "l_pid")
_FLOCK_SIZE = -(-_FLOCK.size // 8) * 8  # sizeof(struct flock) includes tail padding


def _flock(**values: int) -> bytes:
    return _FLOCK.pack(*(values.get(f, 0) for f in _FLOCK_FIELDS)).ljust(_FLOCK_SIZE, b"\0")


@dataclass(frozen=True)
class LockStatus:
    """Result of :func:`lock_status`.

    Attributes
    ----------
    path
        The ``lock`` file tested.
    exists
        Whether it exists (a store that was never started by a broker has none).
    locked
        Another process holds a lock that conflicts with a write lock on byte 0: a broker is running
        on this store (``FileChannel.tryLock(0, 1, false)``). None = unknown: the file exists but is
        not on a local filesystem, where ``F_GETLK`` cannot ask (see ``detail``).
    pid
        The holder's PID as the kernel reports it (may be meaningless across containers/NFS), or None.
    detail
        Why ``locked`` is unknown, else None.
    """

    path: str | StoreLocation
    exists: bool
    locked: bool | None
    pid: int | None
    detail: str | None = None


def lock_status(store_root: PathRef) -> LockStatus:
    """Test for a live broker on ``store_root`` without writing, creating or taking any lock.

    Opens ``<root>/lock`` **read-only** and asks ``fcntl(F_GETLK)`` whether a write lock on byte 0
    could be placed. F_GETLK only reports; it never acquires, so a broker starting concurrently is not
    disturbed, and this process's own locks are never reported (POSIX semantics).

    If the kernel refuses F_GETLK for a write-lock request on a read-only descriptor (Linux accepts
    it; POSIX leaves the check to the implementation, EBADF/EINVAL), the query is repeated for a
    **read** lock instead: that also conflicts with the broker's exclusive lock, and a read-only
    descriptor is always allowed to ask for it. The only lock such a fallback could miss is a foreign
    shared lock, which a broker never takes. The file is never opened for writing.

    A remote store root (``storefs``) cannot be probed: an existing ``lock`` there is reported with
    ``locked=None`` (unknown) and the reason in ``detail``.

    Raises
    ------
    UnreadableFileError
        The lock file exists but cannot be opened, or the kernel refuses both queries.
    """
    loc = location(store_root) / "lock"
    if loc.filesystem is not None:
        try:
            exists = loc.is_file()
        except OSError as exc:
            raise UnreadableFileError(f"cannot look for the lock file: {exc.strerror}", str(loc)) from None
        if not exists:
            return LockStatus(loc.ref, False, False, None)
        return LockStatus(loc.ref, True, None, None,
                          f"{loc} is on a {loc.filesystem.type_name} filesystem, not a local one: "
                          "F_GETLK cannot probe it, so whether a broker holds it is unknown")
    path = loc.path
    try:
        # non-blocking: a FIFO named lock must not block the open (record locks apply to any file)
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        return LockStatus(path, False, False, None)
    except OSError as exc:
        raise UnreadableFileError(f"cannot open lock file read-only: {exc.strerror}", path) from None
    try:
        result = None
        for lock_type in (fcntl.F_WRLCK, fcntl.F_RDLCK):
            try:
                result = fcntl.fcntl(fd, fcntl.F_GETLK,
                                     _flock(l_type=lock_type, l_whence=os.SEEK_SET, l_start=0, l_len=1))
                break
            except OSError as exc:
                if exc.errno not in (errno.EBADF, errno.EINVAL) or lock_type == fcntl.F_RDLCK:
                    raise UnreadableFileError(f"fcntl(F_GETLK) failed: {exc.strerror}", path, 0) from None
        assert result is not None
        got = dict(zip(_FLOCK_FIELDS, _FLOCK.unpack_from(result)))
    finally:
        os.close(fd)
    if got["l_type"] == fcntl.F_UNLCK:
        return LockStatus(path, True, False, None)
    return LockStatus(path, True, True, got["l_pid"])
