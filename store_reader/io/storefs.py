"""Where a store's files are read from: this machine's filesystem, or any ``pyarrow.fs`` filesystem.

Local stores are read exactly as before: ``os`` calls, ``open``, and a read-only ``mmap`` per
commitlog segment. A store on object storage or HDFS (``s3://bucket/store``, ``hdfs://...``, or a
``pyarrow.fs.FileSystem`` plus a path) cannot be mapped, so it is read through ranged reads:

* a commitlog segment is read whole into ONE buffer, in ``READ_CHUNK`` ranges, and handed to the
  same scanner the mmap feeds (both accept any buffer-protocol object): memory is bounded by one
  segment, and nothing is read ahead;
* consume queue, checkpoint, config and ``broker.conf`` files are small and read whole;
* an index file (420 MB with the broker's defaults) is read range by range as a query walks it.

Every path the package hands out for a remote store is a :class:`StoreLocation` (the filesystem and
the path on it): picklable, so a Spark task can be given one and read the file itself. For a local
store the same fields keep holding plain path strings (``Store.root`` a ``Path``), as before. Every
function that takes a path accepts a local path, a :class:`StoreLocation` or a URI; ``str()`` of a
remote location is a URI-style name for messages.
"""
from __future__ import annotations

import errno
import mmap
import operator
import os
import re
import stat
from dataclasses import dataclass
from typing import Any, Iterator, Union

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs

from store_reader.exceptions import UnreadableFileError

__all__ = ["READ_CHUNK", "StoreLocation", "PathRef", "location", "FileReader", "SegmentBuffer",
           "RangedRecords"]

# Bytes per ranged read when a remote segment is fetched: a 1 GiB segment is 32 requests, and a
# failed one is reported at the byte position it started from.
READ_CHUNK = 32 << 20

_URI = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
# pyarrow filesystem type name -> the URI scheme users write (for messages only)
_SCHEMES = {"gcs": "gs"}

_FS_ERRORS = (OSError, pa.ArrowException)


def _reason(exc: BaseException) -> str:
    return getattr(exc, "strerror", None) or str(exc) or type(exc).__name__


_KINDS = {stat.S_IFIFO: "a FIFO", stat.S_IFSOCK: "a socket", stat.S_IFCHR: "a character device",
          stat.S_IFBLK: "a block device"}


def _open_nonblocking(path: str, flags: int) -> int:
    return os.open(path, flags | os.O_NONBLOCK)


def open_regular(path: str, what: str) -> Any:
    """A local regular file opened for binary reading. Anything else named like a store file (a
    FIFO would block the open, or every read, forever) is refused naming the file; ``OSError`` if
    it cannot be opened (a directory: ``IsADirectoryError``, as ``open`` gives)."""
    fh = open(path, "rb", opener=_open_nonblocking)
    try:
        mode = os.fstat(fh.fileno()).st_mode
        if not stat.S_ISREG(mode):
            kind = _KINDS.get(stat.S_IFMT(mode), "a special file")
            raise UnreadableFileError(f"{what} is {kind}, not a regular file; refusing to read it", path)
        os.set_blocking(fh.fileno(), True)
        return fh
    except BaseException:
        fh.close()
        raise


@dataclass(frozen=True, eq=False)
class StoreLocation:
    """A file or directory: a ``pyarrow.fs`` filesystem and the path on it (None = local POSIX).

    Behaves like a small ``pathlib.Path``: ``/`` joins (an absolute right side replaces the path,
    on the same filesystem), ``name``, ``parent``, ``exists()``, ``is_dir()``, ``is_file()``.
    Methods raise ``OSError`` (``FileNotFoundError``, ``IsADirectoryError``, ...) as ``os`` does,
    with ``filename`` set; the package's modules turn them into ``StoreReaderError``.
    """

    filesystem: pafs.FileSystem | None
    path: str
    query: str = ""
    """The options of the URI it came from (``scheme=http&endpoint_override=...``), kept by every
    path derived from it, so that ``str()`` is a URI that opens the same filesystem again."""

    @property
    def is_local(self) -> bool:
        return self.filesystem is None

    @property
    def ref(self) -> "str | StoreLocation":
        """What the package hands back for this file: the local path string, or this location."""
        return self.path if self.filesystem is None else self

    @property
    def name(self) -> str:
        if self.filesystem is None:
            return os.path.basename(self.path)
        return self.path.rsplit("/", 1)[-1]

    @property
    def parent(self) -> "StoreLocation":
        if self.filesystem is None:
            return StoreLocation(None, os.path.dirname(self.path))
        head, sep, _ = self.path.rpartition("/")
        return self.at(head or sep)

    def __truediv__(self, name: str | os.PathLike[str]) -> "StoreLocation":
        name = os.fspath(name)
        if self.filesystem is None:
            return StoreLocation(None, os.path.join(self.path, name))
        if name.startswith("/"):
            return self.at(_normalized(name))
        base = self.path if not self.path or self.path.endswith("/") else self.path + "/"
        return self.at(_normalized(base + name))

    def suffixed(self, suffix: str) -> "StoreLocation":
        """This path with ``suffix`` appended to its name (``checkpoint`` -> ``checkpoint.bak``)."""
        return self.at(self.path + suffix)

    def at(self, path: str) -> "StoreLocation":
        """Another path on this filesystem: every path derived from a location is made here, so
        that it keeps the filesystem and the URI's options."""
        return StoreLocation(self.filesystem, path, self.query)

    def __str__(self) -> str:
        if self.filesystem is None:
            return self.path
        kind = self.filesystem.type_name
        return f"{_SCHEMES.get(kind, kind)}://{self.path}" + (f"?{self.query}" if self.query else "")

    def __repr__(self) -> str:
        return f"StoreLocation({str(self)!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, StoreLocation):
            return NotImplemented
        if other.path != self.path:
            return False
        if self.filesystem is None or other.filesystem is None:
            return self.filesystem is other.filesystem
        return self.filesystem.equals(other.filesystem)

    def __hash__(self) -> int:
        return hash(self.path)

    def __lt__(self, other: "StoreLocation") -> bool:
        return self.path < other.path

    # -- metadata ---------------------------------------------------------------------------------
    def info(self) -> pafs.FileInfo:
        """``get_file_info`` of a remote path."""
        assert self.filesystem is not None
        try:
            return self.filesystem.get_file_info(self.path)
        except _FS_ERRORS as exc:
            raise OSError(errno.EIO, _reason(exc), str(self)) from None

    def exists(self, follow_symlinks: bool = True) -> bool:
        if self.filesystem is None:
            return os.path.exists(self.path) if follow_symlinks else os.path.lexists(self.path)
        return self.info().type != pafs.FileType.NotFound

    def is_dir(self) -> bool:
        if self.filesystem is None:
            return os.path.isdir(self.path)
        return self.info().type == pafs.FileType.Directory

    def is_file(self) -> bool:
        if self.filesystem is None:
            return os.path.isfile(self.path)
        return self.info().type == pafs.FileType.File

    def size(self) -> int:
        if self.filesystem is None:
            return os.path.getsize(self.path)
        info = self.info()
        if info.type == pafs.FileType.NotFound:
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), str(self))
        if info.type != pafs.FileType.File:
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(self))
        return info.size

    # -- reading ----------------------------------------------------------------------------------
    def open_reader(self) -> "FileReader":
        return FileReader(self)

    def read_bytes(self, offset: int = 0, length: int | None = None) -> bytes:
        """Bytes ``[offset, offset + length)`` (to the end when ``length`` is None); fewer only
        where the file ends."""
        with self.open_reader() as r:
            return r.read_at(offset, max(0, r.size - offset) if length is None else length)

    def open_input(self) -> Any:
        """A ``pyarrow`` random-access file of a remote path; ``OSError`` by kind on failure."""
        assert self.filesystem is not None
        try:
            return self.filesystem.open_input_file(self.path)
        except _FS_ERRORS as exc:
            reason = _reason(exc)
        kind = self.info().type
        if kind == pafs.FileType.NotFound:
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), str(self))
        if kind == pafs.FileType.Directory:
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(self))
        raise OSError(errno.EIO, reason, str(self))


PathRef = Union[str, "os.PathLike[str]", StoreLocation]
"""What the package's functions accept as a path."""


def _normalized(path: str) -> str:
    """A remote path without trailing slashes ('/' itself stays)."""
    stripped = path.rstrip("/")
    return stripped or ("/" if path.startswith("/") else "")


def location(path: PathRef, filesystem: pafs.FileSystem | None = None) -> StoreLocation:
    """Resolve what a caller passed as a path.

    Parameters
    ----------
    path
        A :class:`StoreLocation` (returned as is), a path on ``filesystem``, a URI understood by
        ``pyarrow.fs.FileSystem.from_uri`` (``s3://``, ``gs://``, ``hdfs://``, ``file://``, ...), or
        a local path.
    filesystem
        The filesystem ``path`` is on. A plain ``pyarrow.fs.LocalFileSystem`` (and ``file://``)
        means this machine: such paths are read with ``os`` and ``mmap`` like any local path.
    """
    if isinstance(path, StoreLocation):
        if filesystem is not None:
            raise ValueError(f"{path!r} already names its filesystem; do not pass another")
        return path
    p = os.fspath(path)
    if isinstance(p, bytes):
        p = os.fsdecode(p)
    query = ""
    if filesystem is None and _URI.match(p):
        query = p.partition("?")[2]
        try:
            filesystem, p = pafs.FileSystem.from_uri(p)
        except _FS_ERRORS as exc:
            raise UnreadableFileError(f"cannot open the filesystem of this URI: {_reason(exc)}", p) from None
    if filesystem is None or isinstance(filesystem, pafs.LocalFileSystem):
        return StoreLocation(None, p)
    return StoreLocation(filesystem, _normalized(p), query)


def _short_read(loc: StoreLocation, at: int, size: int) -> UnreadableFileError:
    return UnreadableFileError(f"short read: no data at byte {at} although the file's size is {size} "
                               "(changed or truncated while being read)", str(loc), at)


class FileReader:
    """One open file for positional reads; ``size`` is its length when opened."""

    def __init__(self, loc: StoreLocation) -> None:
        self.location = loc
        if loc.filesystem is None:
            self._fh: Any = open_regular(loc.path, "file")
            self.size = os.fstat(self._fh.fileno()).st_size
            return
        self._fh = loc.open_input()
        try:
            self.size = self._fh.size()
        except _FS_ERRORS as exc:
            self._fh.close()
            raise OSError(errno.EIO, _reason(exc), str(loc)) from None

    def read_at(self, offset: int, length: int) -> bytes:
        """``length`` bytes at ``offset``, fewer only where the file ends (per its size).

        Raises
        ------
        OSError
            The read failed.
        UnreadableFileError
            The file delivered fewer bytes than its size promised (short read).
        """
        want = max(0, min(length, self.size - offset))
        if self.location.filesystem is None:
            self._fh.seek(offset)
            data = self._fh.read(want)
        else:
            data = b""
            while len(data) < want:
                try:
                    chunk = self._fh.read_at(want - len(data), offset + len(data))
                except _FS_ERRORS as exc:
                    raise OSError(errno.EIO, _reason(exc), str(self.location)) from None
                if not chunk:
                    break
                data += chunk
        if len(data) < want:
            raise _short_read(self.location, offset + len(data), self.size)
        return data

    def close(self) -> None:
        self._fh.close()

    def __enter__(self) -> "FileReader":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def data_extents(fd: int, size: int) -> Iterator[tuple[int, int]]:
    """``[start, end)`` of every run of a file that may hold data, in order (``SEEK_DATA`` /
    ``SEEK_HOLE``); everything between them is a hole. One run, the whole file, where the
    filesystem or the OS cannot tell."""
    if not hasattr(os, "SEEK_DATA"):
        yield 0, size
        return
    pos = 0
    while pos < size:
        try:
            start = os.lseek(fd, pos, os.SEEK_DATA)
        except OSError as exc:
            if exc.errno == errno.ENXIO:        # no data from pos on
                return
            if exc.errno != errno.EINVAL or pos:
                raise
            yield 0, size                       # no SEEK_DATA on this filesystem
            return
        end = min(os.lseek(fd, start, os.SEEK_HOLE), size)
        if start >= end:
            return
        yield start, end
        pos = end




class SegmentBuffer:
    """A whole file as one buffer for the commitlog scanners: ``buf`` and ``size``.

    Local: a read-only ``mmap`` (an empty file maps to ``b''``), hinted with ``madvise(advice)``.
    Remote: one buffer from the Arrow memory pool, filled by ranged reads of ``READ_CHUNK`` bytes
    and exposed as a read-only ``memoryview``; ``close()`` drops it.

    Parameters
    ----------
    path
        The file.
    what
        What it is, for error messages ("commitlog segment").
    advice
        ``mmap.MADV_*`` read-ahead hint for the local map, None for none. Advisory only.
    """

    def __init__(self, path: PathRef, what: str, advice: int | None = None) -> None:
        self.location = location(path)
        self._fh: Any = None
        if self.location.filesystem is None:
            self._map(what, advice)
        else:
            self._fetch(what)

    def _map(self, what: str, advice: int | None) -> None:
        path = self.location.path
        try:
            self._fh = open_regular(path, what)
        except OSError as exc:
            raise UnreadableFileError(f"cannot open {what}: {exc.strerror}", path) from None
        try:
            self.size = os.fstat(self._fh.fileno()).st_size
            self.buf: Any = (mmap.mmap(self._fh.fileno(), 0, access=mmap.ACCESS_READ)
                             if self.size else b"")
        except (OSError, ValueError) as exc:
            self._fh.close()
            raise UnreadableFileError(f"cannot map {what}: {exc}", path) from None
        if advice is not None and isinstance(self.buf, mmap.mmap):
            try:
                self.buf.madvise(advice)
            except (OSError, AttributeError):   # a hint: never a reason to fail
                pass

    def data_end(self) -> int:
        """Where the last run of the file that may hold data ends (``data_extents``): a local
        file reads as zeros from there on. The size where that is not known."""
        if self._fh is None or not self.size:
            return self.size
        return max((end for _, end in data_extents(self._fh.fileno(), self.size)), default=0)

    def _fetch(self, what: str) -> None:
        loc = self.location
        try:
            f = loc.open_input()
        except OSError as exc:
            raise UnreadableFileError(f"cannot open {what}: {exc.strerror}", str(loc)) from None
        with f:
            try:
                size = f.size()
            except _FS_ERRORS as exc:
                raise UnreadableFileError(f"cannot open {what}: {_reason(exc)}", str(loc)) from None
            if not size:
                self.size, self.buf = 0, b""
                return
            data = pa.allocate_buffer(size)
            with memoryview(data) as view:
                pos = 0
                while pos < size:
                    try:
                        n = f.readinto(view[pos:min(size, pos + READ_CHUNK)])
                    except _FS_ERRORS as exc:
                        raise UnreadableFileError(f"cannot read {what}: {_reason(exc)}", str(loc),
                                                  pos) from None
                    if not n:
                        raise _short_read(loc, pos, size)
                    pos += n
        self.size = size
        self.buf = memoryview(data).toreadonly()

    def fileno(self) -> int | None:
        """The mapped file's descriptor; None for a remote file (read into memory)."""
        return None if self._fh is None else self._fh.fileno()

    def close(self) -> None:
        if isinstance(self.buf, mmap.mmap):
            self.buf.close()
        self.buf = b""
        if self._fh is not None:
            self._fh.close()

    def __enter__(self) -> "SegmentBuffer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class RangedRecords:
    """``count`` fixed-size records of ``dtype`` at ``offset`` of an open file, read on demand.

    Indexed like the NumPy array a memory map would give: an int reads one record (a NumPy scalar
    or structured record), a slice with step 1 reads one range into an array.
    """

    def __init__(self, reader: FileReader, offset: int, dtype: np.dtype, count: int, what: str) -> None:
        self.reader, self.offset, self.dtype, self.count, self.what = reader, offset, dtype, count, what

    def __len__(self) -> int:
        return self.count

    def _read(self, first: int, n: int) -> np.ndarray:
        pos = self.offset + first * self.dtype.itemsize
        try:
            data = self.reader.read_at(pos, n * self.dtype.itemsize)
        except OSError as exc:
            raise UnreadableFileError(f"cannot read {self.what}: {exc.strerror}", str(self.reader.location),
                                      pos) from None
        return np.frombuffer(data, dtype=self.dtype, count=len(data) // self.dtype.itemsize)

    def __getitem__(self, key: int | slice) -> Any:
        if isinstance(key, slice):
            start, stop, step = key.indices(self.count)
            if step != 1:
                raise ValueError("only contiguous slices are read")
            return self._read(start, max(0, stop - start))
        i = operator.index(key)
        if i < 0:
            i += self.count
        if not 0 <= i < self.count:
            raise IndexError(f"record {key} out of range (0..{self.count - 1})")
        return self._read(i, 1)[0]
