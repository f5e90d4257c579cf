"""Direct I/O (``O_DIRECT``) for the outputs nothing reads again but their hash: the placed
commitlog and the rebuilt index files.

Through the page cache every byte written is copied once more into a page the kernel must first
find, which on a store of many gigabytes means reclaiming the page cache the other passes read the
input from: several times the CPU of a direct write (benchmarks/README.md, "The placed commitlog
written with direct I/O" and "The index files written with direct I/O"). Where the filesystem or
the device refuses direct I/O, the same calls go through the page cache: the bytes are the same
either way.
"""
from __future__ import annotations

import errno
import fcntl
import mmap
import os

# Lengths and file offsets a direct transfer takes: a multiple of the largest logical block size
# of common devices (the buffers are anonymous maps: page-aligned).
DIRECT_ALIGN = 4096


def set_direct(fd: int, on: bool) -> bool:
    """Direct I/O on ``fd`` switched on or off; returns whether it is on (False where the
    filesystem has none, e.g. tmpfs before Linux 6.6)."""
    flags = fcntl.fcntl(fd, fcntl.F_GETFL)
    try:
        fcntl.fcntl(fd, fcntl.F_SETFL, (flags | os.O_DIRECT) if on else (flags & ~os.O_DIRECT))
    except OSError as exc:
        if exc.errno != errno.EINVAL:
            raise
        return False
    return on


def aligned_buffer(size: int) -> memoryview:
    """``size`` bytes of page-aligned memory, as a direct transfer needs."""
    return memoryview(mmap.mmap(-1, size))


class ChunkWriter:
    """Writes chunks of page-aligned memory to ``fd`` at the offsets given, with direct I/O while the
    device takes it: a chunk of a length it cannot take, or a refused write, goes through the page
    cache, and so does every chunk after it."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.direct = set_direct(fd, True)

    def __call__(self, data: memoryview, at: int) -> None:
        if self.direct and (len(data) % DIRECT_ALIGN or at % DIRECT_ALIGN):
            self.direct = set_direct(self.fd, False)
        written = 0
        while written < len(data):
            try:
                written += os.pwrite(self.fd, data[written:], at + written)
            except OSError as exc:
                if not (self.direct and exc.errno == errno.EINVAL):
                    raise
                self.direct = set_direct(self.fd, False)   # an alignment the device refuses


class ChunkReader:
    """Reads ``[start, end)`` of the file open at ``fd`` (at most ``chunk`` bytes a call) with direct
    I/O while the device takes it, else through the page cache: for a file written with
    ``ChunkWriter``, whose pages are not in the page cache, read once (to hash it) and never again.
    A returned view holds until the next call."""

    def __init__(self, fd: int, chunk: int) -> None:
        self.fd = fd
        self.direct = set_direct(fd, True)
        self._buf = aligned_buffer(chunk + 2 * DIRECT_ALIGN)

    def __call__(self, start: int, end: int) -> memoryview:
        if self.direct:
            lo = start - start % DIRECT_ALIGN
            hi = -(-end // DIRECT_ALIGN) * DIRECT_ALIGN
            try:
                n = os.preadv(self.fd, [self._buf[:hi - lo]], lo)
            except OSError as exc:
                if exc.errno != errno.EINVAL:
                    raise
                self.direct = set_direct(self.fd, False)   # an alignment the device refuses
            else:
                return self._buf[start - lo:max(start - lo, min(n, end - lo))]
        n = os.preadv(self.fd, [self._buf[:end - start]], start)
        return self._buf[:n]
