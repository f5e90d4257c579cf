"""Directory listing with the package's error policy: a missing directory is empty, any other
failure is an ``UnreadableFileError`` naming the directory. Local directories are listed with
``os.scandir``, remote ones (``storefs.StoreLocation``) with ``pyarrow.fs`` (one request)."""
from __future__ import annotations

import os
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs

from store_reader.exceptions import UnreadableFileError
from store_reader.io.storefs import PathRef, StoreLocation, location


class DirEntry:
    """One entry of a listed directory, local or remote (the part of ``os.DirEntry`` used here)."""

    __slots__ = ("name", "location", "_local", "_info")

    def __init__(self, loc: StoreLocation, local: os.DirEntry[str] | None = None,
                 info: pafs.FileInfo | None = None) -> None:
        self.name = loc.name
        self.location = loc
        self._local = local
        self._info = info

    @property
    def path(self) -> str | StoreLocation:
        """The entry's path as the package hands it out (``StoreLocation.ref``)."""
        return self.location.ref

    def is_dir(self) -> bool:
        """Directory (a symlink to one counts, as with ``os.DirEntry.is_dir()``)."""
        if self._local is not None:
            try:
                return self._local.is_dir()
            except OSError:     # a symlink that cannot be followed (a loop): as os.path.isdir
                return False
        return self._info.type == pafs.FileType.Directory

    def is_file(self) -> bool:
        if self._local is not None:
            try:
                return self._local.is_file()
            except OSError:
                return False
        return self._info.type == pafs.FileType.File

    def size(self) -> int:
        """Length in bytes (``OSError`` if a local entry cannot be stat'ed)."""
        if self._local is not None:
            return self._local.stat().st_size
        return self._info.size or 0


def list_dir(directory: PathRef, what: str) -> list[DirEntry]:
    """Entries of ``directory`` sorted by name (mapped files sort by start offset this way)."""
    loc = location(directory)
    if loc.filesystem is None:
        try:
            return [DirEntry(StoreLocation(None, e.path), local=e)
                    for e in sorted(os.scandir(loc.path), key=lambda e: e.name)]
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise UnreadableFileError(f"cannot list {what} directory: {exc.strerror}", loc.path) from None
    try:
        infos = loc.filesystem.get_file_info(pafs.FileSelector(loc.path, allow_not_found=True))
    except FileNotFoundError:
        return []
    except (OSError, pa.ArrowException) as exc:
        reason = getattr(exc, "strerror", None) or str(exc)
        raise UnreadableFileError(f"cannot list {what} directory: {reason}", str(loc)) from None
    entries = [DirEntry(loc.at(i.path), info=i) for i in infos]
    return sorted(entries, key=lambda e: e.name)


def walk_tree(root: PathRef) -> tuple[list[tuple[str, int, int]], list[str]]:
    """Every file under ``root`` as (path relative to ``root``, size, mtime in ns), and every
    directory's relative path: one listing. A local tree is walked with ``os.walk`` (directories and
    files in name order, a directory's files before its sub-directories'), a remote one listed
    recursively in one request, sorted by path (an object store's modification time is the
    upload's; it lists a directory only where one was made)."""
    loc = location(root)
    files, dirs = [], []
    if loc.filesystem is None:
        for dirpath, dirnames, filenames in os.walk(loc.path):
            dirnames.sort()
            dirs += (os.path.relpath(os.path.join(dirpath, d), loc.path) for d in dirnames)
            for name in sorted(filenames):
                p = os.path.join(dirpath, name)
                try:
                    st = os.stat(p)
                except OSError:     # a link that cannot be followed (a loop, dangling): its own
                    st = os.lstat(p)  # stat; the broker treats such a file as unreadable, not fatal
                files.append((os.path.relpath(p, loc.path), st.st_size, st.st_mtime_ns))
        return files, dirs
    try:
        infos = loc.filesystem.get_file_info(pafs.FileSelector(loc.path, recursive=True))
    except (OSError, pa.ArrowException) as exc:
        reason = getattr(exc, "strerror", None) or str(exc)
        raise UnreadableFileError(f"cannot list: {reason}", str(loc)) from None
    prefix = loc.path.rstrip("/") + "/"

    def rel(i: pafs.FileInfo) -> str:
        return i.path[len(prefix):] if i.path.startswith(prefix) else i.path

    files = sorted((rel(i), i.size or 0, i.mtime_ns or 0) for i in infos if i.type == pafs.FileType.File)
    dirs = sorted(rel(i) for i in infos if i.type == pafs.FileType.Directory)
    return files, dirs


def walk_files(root: PathRef) -> list[tuple[str, int, int]]:
    """(path relative to ``root``, size, mtime in ns) of every file under ``root`` (``walk_tree``):
    what run ids and manifests fingerprint."""
    return walk_tree(root)[0]


def hash_tree(digest: Any, files: list[tuple[str, int, int]]) -> None:
    """Feed ``digest`` (a ``hashlib`` object) the path, size and mtime of every file of a tree
    (``walk_files``): the fingerprint of a store that any write, new file or removal changes."""
    for rel, size, mtime in files:
        digest.update(f"{rel}:{size}:{mtime}\n".encode())


def mtime_ns(path: PathRef) -> int:
    """Modification time of one file in ns (remote: as its filesystem reports it, 0 if none)."""
    loc = location(path)
    try:
        if loc.filesystem is None:
            return os.stat(loc.path).st_mtime_ns
        return loc.info().mtime_ns or 0
    except OSError as exc:
        raise UnreadableFileError(f"cannot stat: {exc.strerror}", str(loc)) from None
