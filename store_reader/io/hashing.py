"""SHA-256 of the files a run writes, holes hashed as the zeros they read as without reading them;
and of an input file as a scan has it mapped (``SourceDigest``), which its placement, when it puts
the file into the repaired store as it is, takes instead of reading the file a second time.
"""
from __future__ import annotations

import errno
import hashlib
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from store_reader.io.directio import ChunkReader
from store_reader.io.storefs import SegmentBuffer, data_extents


# Read size when hashing a file; and a block of zeros hashed for zero tails (calloc'd: no memory is
# touched until it is read, and then only the kernel's zero page).
COPY_CHUNK = 8 << 20
_ZEROS = bytes(COPY_CHUNK)


def update_zeros(digest: Any, n: int) -> None:
    """Feed ``n`` zero bytes to ``digest`` (a zero tail's share of a file's hash) without reading
    them from anywhere."""
    zeros = memoryview(_ZEROS)
    while n > 0:
        k = min(n, len(zeros))
        digest.update(zeros[:k])
        n -= k


def _sha256_extents(fd: int, size: int, read: Callable[[int, int], Any]) -> str:
    """SHA-256 of the ``size`` bytes of the file open at ``fd``: its data runs read through
    ``read(start, end)`` (at most ``COPY_CHUNK`` bytes, at least one), its holes as zeros."""
    h = hashlib.sha256()
    pos = 0
    for start, end in data_extents(fd, size):
        update_zeros(h, start - pos)
        while start < end:
            chunk = read(start, min(start + COPY_CHUNK, end))
            h.update(chunk)
            start += len(chunk)
        pos = end
    update_zeros(h, size - pos)
    return h.hexdigest()


def sha256_file(path: str, direct: bool = False) -> str:
    """SHA-256 of a file, its holes hashed as the zeros they read as without reading them: the
    outputs are full-size preallocated files (an index file is 400+ MB) holding little data, and
    reading a hole makes the kernel zero fresh pages for it. ``direct``: read with direct I/O, for
    a file just written with it (``directio``): its pages are not in the page cache, and a buffered
    read would put every one of them there to be read once."""
    with open(path, "rb", buffering=0) as fh:
        fd = fh.fileno()
        pread = ChunkReader(fd, COPY_CHUNK) if direct else (lambda start, end: os.pread(fd, end - start, start))

        def read(start: int, end: int) -> Any:
            chunk = pread(start, end)
            if not len(chunk):
                raise OSError(errno.EIO, f"file shrank while being hashed at byte {start}", path)
            return chunk
        return _sha256_extents(fd, os.fstat(fd).st_size, read)


def file_identity(st: os.stat_result) -> tuple[int, int, int, int]:
    """What tells a file's bytes have not changed since: device, inode, size, modification time."""
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


@dataclass(frozen=True)
class SourceDigest:
    """The SHA-256 of a local input file as it was read, and the file's identity then
    (``file_identity``): the digest holds for the file while its identity is unchanged."""

    sha256: str
    identity: tuple[int, int, int, int]

    def holds_for(self, st: os.stat_result) -> bool:
        return file_identity(st) == self.identity


def source_digest(m: SegmentBuffer) -> SourceDigest | None:
    """``SourceDigest`` of a local file from its map (a scan's ``SegmentBuffer``, open), whose
    pages the scan has just read; None for a remote one (its placement reads it anyway)."""
    fd = m.fileno()
    if fd is None:
        return None
    st = os.fstat(fd)
    if st.st_size != m.size:
        return None                          # changed since it was mapped: the placement hashes it
    with memoryview(m.buf) as view:
        return SourceDigest(_sha256_extents(fd, m.size, lambda start, end: view[start:end]), file_identity(st))


def sha256_files(paths: Iterable[str]) -> dict[str, str]:
    """SHA-256 of each file, two at a time (hashlib releases the GIL on large reads)."""
    paths = list(paths)
    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(zip(paths, pool.map(sha256_file, paths)))
