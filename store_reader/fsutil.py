"""Directory listing with the package's error policy: a missing directory is empty, any other
failure is an ``UnreadableFileError`` naming the directory. Local directories are listed with
``os.scandir``, remote ones (``storefs.StoreLocation``) with ``pyarrow.fs`` (one request)."""
from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.fs as pafs

from .exceptions import UnreadableFileError
from .storefs import PathRef, StoreLocation, location


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
    entries = [DirEntry(StoreLocation(loc.filesystem, i.path), info=i) for i in infos]
    return sorted(entries, key=lambda e: e.name)
