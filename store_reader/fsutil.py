"""Directory listing with the package's error policy: a missing directory is empty, any other
failure is an ``UnreadableFileError`` naming the directory."""
from __future__ import annotations

import os

from .exceptions import UnreadableFileError


def list_dir(directory: str | os.PathLike[str], what: str) -> list[os.DirEntry[str]]:
    """Entries of ``directory`` sorted by name (mapped files sort by start offset this way)."""
    try:
        return sorted(os.scandir(directory), key=lambda e: e.name)
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise UnreadableFileError(f"cannot list {what} directory: {exc.strerror}", directory) from None
