"""SHA-256 of the files a run writes, holes hashed as the zeros they read as without reading them.
"""
from __future__ import annotations

import errno
import hashlib
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Iterable

from store_reader.io.storefs import data_extents


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


def sha256_file(path: str) -> str:
    """SHA-256 of a file, its holes hashed as the zeros they read as without reading them: the
    outputs are full-size preallocated files (an index file is 400+ MB) holding little data, and
    reading a hole makes the kernel zero fresh pages for it."""
    h = hashlib.sha256()
    with open(path, "rb", buffering=0) as fh:
        fd = fh.fileno()
        size = os.fstat(fd).st_size
        pos = 0
        for start, end in data_extents(fd, size):
            update_zeros(h, start - pos)
            while start < end:
                chunk = os.pread(fd, min(COPY_CHUNK, end - start), start)
                if not chunk:
                    raise OSError(errno.EIO, f"file shrank while being hashed at byte {start}", path)
                h.update(chunk)
                start += len(chunk)
            pos = end
        update_zeros(h, size - pos)
    return h.hexdigest()


def sha256_files(paths: Iterable[str]) -> dict[str, str]:
    """SHA-256 of each file, two at a time (hashlib releases the GIL on large reads)."""
    paths = list(paths)
    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(zip(paths, pool.map(sha256_file, paths)))
