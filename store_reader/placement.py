"""Place the repaired store's commitlog: each kept segment cloned, copied or (when asked) hard-linked,
and only the segment holding the cut rewritten with its tail zeroed (spec E#10).

One call per segment (``place_segment``), so the job runs them as executor tasks side by side and no
segment's bytes pass through the driver. Each returns the SHA-256 of the file as placed, for the
manifest:

- a segment kept whole is, in order of preference, hard-linked (``link``: the operator's choice),
  cloned (``FICLONE``: a reflink on XFS and btrfs, no data copied), copied in the kernel
  (``os.copy_file_range``: server-side on NFS 4.2, a splice elsewhere) or read and written. After a
  link, a clone or a kernel copy its digest is that of the source, read once: the scan has just
  read the source, so its pages are the ones in the page cache (a clone's are not), and holes
  (``repair.data_extents``) are hashed as zeros without being read. The read-and-write fallback
  hashes the buffer it writes.
- the cut segment, a segment shorter or longer than ``mappedFileSizeCommitLog``, and every segment
  of a remote store go through ``repair.copy_commitlog_file``: read once, hashed and written, the
  tail past the kept bytes a hole.

The output is byte-for-byte the same whichever way a segment was placed.
"""
from __future__ import annotations

import errno
import fcntl
import hashlib
import os
from dataclasses import dataclass
from typing import Sequence

from . import repair
from .exceptions import UnreadableFileError
from .storefs import PathRef, location

# linux/fs.h: _IOW(0x94, 9, int), "clone the whole of the source file into the destination"
FICLONE = 0x40049409

# How a segment was placed, as the job counts them.
LINKED, CLONED, KERNEL_COPIED, COPIED, REWRITTEN = "linked", "cloned", "copied in the kernel", "copied", \
    "rewritten"

# errno values meaning "not here" (another filesystem, a filesystem or kernel without the call):
# the next way is tried. Anything else (ENOSPC, EIO) is a real failure and raised.
_UNSUPPORTED = frozenset({errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.ENOTTY,
                          errno.EBADF, errno.ETXTBSY})
# ... and for a hard link: another filesystem, no links there, or too many links to the source.
_NO_LINK = frozenset({errno.EXDEV, errno.EPERM, errno.EOPNOTSUPP, errno.EMLINK})


@dataclass(frozen=True)
class SegmentPlacement:
    """One kept commitlog file: ``keep`` bytes of it stay, the file is ``file_size`` long in the
    repaired store; ``link``: it may be hard-linked (``linkable``)."""
    name: str
    keep: int
    file_size: int
    link: bool = False


@dataclass(frozen=True)
class PlacedSegment:
    sha256: str
    how: str


def plan(kept: Sequence, link: bool) -> list[SegmentPlacement]:
    """The placement of each kept commitlog file (``recovery.CommitLogFileState``: name, size,
    wrote), in order; with ``link``, the ones ``linkable`` marked so."""
    may_link = linkable(kept) if link else set()
    return [SegmentPlacement(f.name, min(f.wrote, f.size), f.size, f.name in may_link) for f in kept]


def linkable(kept: Sequence) -> set[str]:
    """Names of the kept commitlog files a repaired store may share with its input by a hard link:
    the ones kept whole, except the last kept file.

    The broker never writes into a commitlog file below its write position once recovered: it
    appends only to the last file (the cut one, or the next it creates) and deletes expired files
    by unlinking them. The last kept file is never linked even when the cut falls on its end: it is
    the file the broker's recovery truncates and its first append looks at, and sharing it would
    let a broker on either store change the other's bytes. The cut file is rewritten, never linked.
    ``place_segment`` also copies instead of linking a file whose length is not its mapped size."""
    whole = [f.name for f in kept if f.wrote >= f.size]
    last = kept[-1].name if kept else None
    return {name for name in whole if name != last}


def place_segment(src: PathRef, dest: str, keep: int, file_size: int, link: bool = False) -> PlacedSegment:
    """Write ``dest``, a new file holding ``[0, keep)`` of ``src`` and zeros up to ``file_size``;
    return its SHA-256 and how it was placed (module docstring). ``link``: a hard link to ``src``
    when the whole file is kept as it is, a copy otherwise."""
    keep = min(keep, file_size)
    loc = location(src)
    with repair.writing(dest, "commitlog file"):
        if loc.filesystem is not None:
            return PlacedSegment(repair.copy_commitlog_file(loc, dest, keep, file_size), REWRITTEN)
        return _place_local(loc.path, dest, keep, file_size, link)


def _place_local(src: str, dest: str, keep: int, file_size: int, link: bool) -> PlacedSegment:
    with open(src, "rb", buffering=0) as fin:
        if keep < file_size or os.fstat(fin.fileno()).st_size != file_size:
            return PlacedSegment(repair.copy_commitlog_file(src, dest, keep, file_size), REWRITTEN)
        if link:
            try:
                os.link(src, dest)
                return PlacedSegment(repair.sha256_file(src), LINKED)
            except OSError as exc:
                if exc.errno not in _NO_LINK:
                    raise
        with open(dest, "xb", buffering=0) as fout:
            how = _clone(fin.fileno(), fout.fileno()) or _kernel_copy(fin.fileno(), fout.fileno(), src, file_size)
            if how is None:
                digest = _copy_hashed(fin.fileno(), fout.fileno(), src, file_size)
                how = COPIED
            repair._write_behind(fout.fileno())
    if how != COPIED:
        digest = repair.sha256_file(src)
    return PlacedSegment(digest, how)


def _clone(src_fd: int, dest_fd: int) -> str | None:
    """The whole source cloned into the empty destination, or None where the filesystem cannot."""
    try:
        fcntl.ioctl(dest_fd, FICLONE, src_fd)
    except OSError as exc:
        if exc.errno not in _UNSUPPORTED:
            raise
        return None
    return CLONED


def _kernel_copy(src_fd: int, dest_fd: int, src: str, size: int) -> str | None:
    """``[0, size)`` copied by the kernel, or None where it cannot (the destination then holds
    nothing: a refusal comes on the first call)."""
    done = 0
    try:
        while done < size:
            n = os.copy_file_range(src_fd, dest_fd, size - done, done, done)
            if not n:
                raise _shrank(src, done)
            done += n
    except OSError as exc:
        if done or exc.errno not in _UNSUPPORTED:
            raise
        return None
    return KERNEL_COPIED


def _copy_hashed(src_fd: int, dest_fd: int, src: str, size: int) -> str:
    """``[0, size)`` read into a buffer, hashed there and written from it; returns the digest."""
    digest = hashlib.sha256()
    view = memoryview(bytearray(repair.HASH_CHUNK))
    done = 0
    while done < size:
        n = os.preadv(src_fd, [view[:min(len(view), size - done)]], done)
        if not n:
            raise _shrank(src, done)
        digest.update(view[:n])
        written = 0
        while written < n:
            written += os.pwrite(dest_fd, view[written:n], done + written)
        done += n
    return digest.hexdigest()


def _shrank(src: str, at: int) -> UnreadableFileError:
    return UnreadableFileError("commitlog file ended while being copied", src, at)
