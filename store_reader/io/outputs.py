"""An output directory on the local filesystem: its lock, the siblings a killed run leaves beside
it, and the atomic exchange of two directories. ``publish`` (a repaired store made visible) and
``apply`` (the repaired store swapped into the input's place) both build on these.
"""
from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import re
import sys
from pathlib import Path
from contextlib import contextmanager
from typing import Iterator

from store_reader.exceptions import OutputError, StoreReaderError


class OutputLock:
    """An exclusive, non-blocking ``flock`` on ``<target>.lock`` (created beside ``target``, its
    parent directories too), holding this process's pid; released and removed on exit. A lock
    left by a killed run is free again (the kernel drops a dead process's ``flock``)."""

    def __init__(self, target: Path, what: str = "output") -> None:
        self.target = Path(os.path.abspath(target))
        self.path = self.target.parent / f"{self.target.name}.lock"
        self.what = what
        self._fd: int | None = None

    def __enter__(self) -> "OutputLock":
        try:
            self.target.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreReaderError(f"cannot create the {self.what}'s directory: {exc.strerror}",
                                   exc.filename or self.target.parent) from None
        while True:
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            except OSError as exc:
                raise StoreReaderError(f"cannot write beside the {self.what} (its lock file): "
                                       f"{exc.strerror}", self.path) from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 64, 0).decode("ascii", "replace").strip() or "unknown"
                os.close(fd)
                raise StoreReaderError(f"another run holds this {self.what}'s lock (pid {holder}); "
                                       "wait for it to finish", self.path) from None
            # the holder before us may have removed the file between our open and our lock
            try:
                same = os.stat(self.path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd
        return self

    def __exit__(self, *exc_info) -> None:
        if self._fd is not None:
            try:
                os.unlink(self.path)        # while still locked: a waiter sees a new inode
            except OSError:
                pass
            os.close(self._fd)
            self._fd = None


def siblings(out: Path, kind: str) -> list[Path]:
    pattern = re.compile(re.escape(out.name) + r"\." + kind + r"-[0-9A-Za-z-]+$")
    try:
        names = os.listdir(out.parent)
    except FileNotFoundError:
        return []
    return sorted(out.parent / n for n in names if pattern.match(n))


_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


def exchange(a: Path, b: Path) -> None:
    """Atomically swap two paths (Linux ``renameat2(RENAME_EXCHANGE)``); ``OSError`` where the
    system or filesystem cannot."""
    fn = getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None) if sys.platform == "linux" else None
    if fn is None:
        raise OSError(errno.ENOSYS, "renameat2 is not available")
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    if fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), str(a))


def unsupported_exchange(exc: OSError) -> bool:
    """``exchange`` failed because the system or the filesystem lacks it (not for the paths)."""
    return exc.errno in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP)


@contextmanager
def writing(path: str, what: str) -> Iterator[None]:
    """An ``OSError`` while writing ``path`` as an ``OutputError`` naming it: on an executor (a full
    disk under a rebuild task) the driver gets one line naming the file, not a trace."""
    try:
        yield
    except OSError as exc:
        raise OutputError(f"cannot write {what}: {exc.strerror or exc}", exc.filename or path) from None
