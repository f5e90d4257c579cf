"""Place the repaired store's commitlog: each kept segment cloned, copied or (when asked) hard-linked,
the segment holding the cut rewritten with its tail zeroed (spec E#10).

One call per segment (``place_segment``), so the job runs them as executor tasks side by side and no
segment's bytes pass through the driver. Each returns the SHA-256 of the file as placed, for the
manifest, and the output is byte for byte the same whichever way a segment was placed:

- a segment kept whole, of its mapped size, is hard-linked (``link``: the operator's choice,
  ``linkable``) or cloned (``FICLONE``: a reflink on XFS and btrfs, no data copied). Its digest is
  then the source's: the one the run's scan took as it walked the file (``hashing.SourceDigest``,
  while the file's identity is unchanged), else the source read once, its holes
  (``storefs.data_extents``) hashed as zeros without being read.
- any other segment, or where the filesystem cannot clone, is read into a buffer, hashed there
  (unless the scan's digest holds for it) and written from it; the tail past the kept bytes is left
  a hole. The bytes have to be read for the copy, so ``copy_file_range`` would not spare that
  read: on a filesystem that cannot
  reflink it copies the pages a second time in the kernel, which costs more CPU than writing the
  buffer already read (benchmarks/README.md, "Commitlog placement"). The buffer is written with
  direct I/O (``O_DIRECT``) where the filesystem takes it: nothing reads the copy again, and
  through the page cache every written byte is copied once more into a page the kernel must first
  find, which on a store of many gigabytes means reclaiming the page cache the other passes read
  the input from. The last piece, of a length the device cannot take directly, goes through the
  page cache.
- a segment of a remote store (``storefs``) is read in ranges and written the same way.
"""
from __future__ import annotations

import errno
import fcntl
import hashlib
import os
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Sequence

from store_reader.io import hashing, outputs
from store_reader.io.directio import ChunkWriter, aligned_buffer
from store_reader.exceptions import UnreadableFileError
from store_reader.io.storefs import READ_CHUNK, PathRef, StoreLocation, location

# linux/fs.h: _IOW(0x94, 9, int), "share the source file's extents with the destination"
FICLONE = 0x40049409
# Bytes read, hashed and written at a time: small enough to stay in the core's cache between the
# read and the hash.
HASH_CHUNK = 1 << 20

# How a segment was placed, as the job counts them.
LINKED, CLONED, COPIED, REWRITTEN = "linked", "cloned", "copied", "rewritten"

# errno values of a clone the filesystem cannot make (another filesystem, no reflinks, a kernel
# without the ioctl): the segment is copied instead. Anything else (ENOSPC, EIO) is raised.
_NO_CLONE = frozenset({errno.EXDEV, errno.EINVAL, errno.EOPNOTSUPP, errno.ENOTTY, errno.ENOSYS,
                       errno.EBADF, errno.ETXTBSY, errno.EPERM})
# ... and of a hard link: another filesystem, no links there, too many links to the source.
_NO_LINK = frozenset({errno.EXDEV, errno.EPERM, errno.EOPNOTSUPP, errno.EMLINK})


@dataclass(frozen=True)
class SegmentPlacement:
    """One kept commitlog file: its first ``keep`` bytes stay, it is ``file_size`` long in the
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
    """The placement of each kept commitlog file (``cut.CommitLogFileState``), in order; with
    ``link``, the ones ``linkable`` marked so."""
    may_link = linkable(kept) if link else set()
    return [SegmentPlacement(f.name, min(f.wrote, f.size), f.size, f.name in may_link) for f in kept]


def linkable(kept: Sequence) -> set[str]:
    """Names of the kept commitlog files a repaired store may share with its input by a hard link:
    the ones kept whole, except the last kept file.

    Once recovered, the broker writes only at its write position: into the last file (the cut
    one, or a new one after it); the files below it are only read, and deleted (unlinked) when
    they expire. The last kept file is not linked even when the cut falls on its end: it is the
    one the broker's recovery truncates and its next append looks at, so a broker on either store
    could change the other's bytes. ``place_segment`` copies, rather than links, a file whose
    length is not its mapped size."""
    last = kept[-1].name if kept else None
    return {f.name for f in kept if f.wrote >= f.size and f.name != last}


def place_segment(src: PathRef, dest: str, keep: int, file_size: int, link: bool = False,
                  source: hashing.SourceDigest | None = None) -> PlacedSegment:
    """Write ``dest``, a new file holding ``[0, keep)`` of ``src`` and zeros up to ``file_size``
    (the source's own length may differ: what it lacks is zeros, what it has beyond is left out);
    return its SHA-256 and how it was placed (module docstring). ``link``: a hard link to ``src``
    when the whole file is kept as it is. ``source``: the digest of ``src`` as the run's scan
    read it, taken for a file placed whole while the source is unchanged (``holds_for``)
    instead of reading the source again. A failed write raises ``OutputError`` naming ``dest``."""
    keep = min(keep, file_size)
    loc = location(src)
    with outputs.writing(dest, "commitlog file"):
        if loc.filesystem is not None:
            return PlacedSegment(_copy_remote(loc, dest, keep, file_size),
                                 COPIED if keep == file_size else REWRITTEN)
        return _place_local(loc.path, dest, keep, file_size, link, source)


def _place_local(src: str, dest: str, keep: int, file_size: int, link: bool,
                 source: hashing.SourceDigest | None) -> PlacedSegment:
    with open(src, "rb", buffering=0) as fin:
        st = os.fstat(fin.fileno())
        whole = keep == file_size == st.st_size
        known = source.sha256 if whole and source is not None and source.holds_for(st) else None
        if whole and link:
            try:
                os.link(src, dest)
                return PlacedSegment(known or hashing.sha256_file(src), LINKED)
            except OSError as exc:
                if exc.errno not in _NO_LINK:
                    raise
        with open(dest, "xb", buffering=0) as fout:
            if whole and _clone(fin.fileno(), fout.fileno()):
                return PlacedSegment(known or hashing.sha256_file(src), CLONED)
            digest = None if known else hashlib.sha256()
            done = _copy(fin.fileno(), fout.fileno(), keep, digest)
            fout.truncate(file_size)
            _write_behind(fout.fileno())
        if known and not source.holds_for(os.fstat(fin.fileno())):
            known = None                        # changed while copied: hash what was written
    if digest is None:
        return PlacedSegment(known or hashing.sha256_file(dest, direct=True), COPIED)
    hashing.update_zeros(digest, file_size - done)
    return PlacedSegment(digest.hexdigest(), COPIED if whole else REWRITTEN)


def _clone(src_fd: int, dest_fd: int) -> bool:
    """The whole source cloned into the empty destination; False where the filesystem cannot."""
    try:
        fcntl.ioctl(dest_fd, FICLONE, src_fd)
    except OSError as exc:
        if exc.errno not in _NO_CLONE:
            raise
        return False
    return True


def _copy(src_fd: int, dest_fd: int, keep: int, digest: "hashlib._Hash | None") -> int:
    """``[0, keep)`` of the source read into a buffer, hashed there into ``digest`` (unless None)
    and written from it, up to where the source ends; returns the bytes copied.

    The writes run on a thread of their own, a chunk behind the reads: a direct write waits on the
    device, and meanwhile the next chunk is read and hashed (both leave the GIL), so one task keeps
    the disk and a core busy instead of each in turn."""
    # page-aligned, as direct I/O needs: one written while the other is read and hashed
    buffers = [aligned_buffer(HASH_CHUNK) for _ in range(2)]
    writes: deque[Future] = deque()          # in flight, oldest first: one per buffer at most
    write = ChunkWriter(dest_fd)
    done = chunk = 0
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="placement-write") as writer:
        while done < keep:
            if len(writes) == len(buffers):
                writes.popleft().result()          # the write of the buffer read into next
            view = buffers[chunk % len(buffers)]
            n = os.preadv(src_fd, [view[:min(len(view), keep - done)]], done)
            if not n:
                break                         # the source ends early: the rest is zeros as well
            if digest is not None:
                digest.update(view[:n])
            writes.append(writer.submit(write, view[:n], done))
            done += n
            chunk += 1
        for future in writes:
            future.result()
    return done


def _copy_remote(src: StoreLocation, dest: str, keep: int, file_size: int) -> str:
    """``place_segment`` of a segment on a remote filesystem: ranged reads of
    ``storefs.READ_CHUNK`` bytes, each hashed and written."""
    digest = hashlib.sha256()
    done = 0
    with src.open_reader() as fin, open(dest, "xb", buffering=0) as fout:
        while done < keep:
            try:
                data = fin.read_at(done, min(READ_CHUNK, keep - done))
            except OSError as exc:
                raise UnreadableFileError(f"cannot read commitlog segment: {exc.strerror}", str(src),
                                          done) from None
            if not data:
                break                     # the source ends early: the rest is zeros as well
            digest.update(data)
            view = memoryview(data)
            while view:
                view = view[os.pwrite(fout.fileno(), view, done + len(data) - len(view)):]
            done += len(data)
        fout.truncate(file_size)
        _write_behind(fout.fileno())
    hashing.update_zeros(digest, file_size - done)
    return digest.hexdigest()


def _write_behind(fd: int) -> None:
    """Start writing a finished output file back now and let its pages go once written: nothing
    reads it again (its digest is known), so it should neither pile up as dirty pages that stall
    a later commit nor push the input store, which other passes still scan, out of the page
    cache. A hint only (Linux: ``POSIX_FADV_DONTNEED`` starts write-back of dirty pages), given
    from a thread of the worker on a duplicate of ``fd``: the call waits on the disk's queue, and
    the task need not (the publish's fsync is what makes the file durable)."""
    if getattr(os, "posix_fadvise", None) is not None:
        _WRITE_BEHIND.submit(_advise_dontneed, os.dup(fd))


def _advise_dontneed(fd: int) -> None:
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    except OSError:
        pass
    finally:
        os.close(fd)


_WRITE_BEHIND = ThreadPoolExecutor(max_workers=1, thread_name_prefix="write-behind")
