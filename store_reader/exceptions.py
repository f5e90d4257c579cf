"""One exception hierarchy for everything that reads or writes store bytes.

Every error names the file and, where it applies, the byte position, so an operator can look at the
exact spot with ``jobs.dump``. Nothing in this package lets a raw ``IndexError``/``struct.error``
escape on bad input.
"""
from __future__ import annotations

import os


class StoreReaderError(Exception):
    """Base class of every error raised by ``store_reader``.

    Parameters
    ----------
    message
        What is wrong, in the operator's terms.
    path
        The file or directory concerned, if any.
    position
        Byte position inside ``path``, if any.
    """

    def __init__(self, message: str, path: str | os.PathLike[str] | None = None,
                 position: int | None = None) -> None:
        self.path = os.fspath(path) if path is not None else None
        self.position = position
        where = ""
        if self.path is not None:
            where = f"{self.path}"
            if position is not None:
                where += f" @ byte {position}"
            where += ": "
        super().__init__(where + message)
        self.reason = message


class NotAStoreError(StoreReaderError):
    """The directory is missing or does not look like a RocketMQ store root."""


class UnsupportedStoreError(StoreReaderError):
    """The store uses a layout this tool deliberately does not handle (e.g. RocksDB consume queue)."""


class FileSizeError(StoreReaderError):
    """A mapped file's length disagrees with the configured size (the broker refuses to load it)."""


class StrayFileError(StoreReaderError):
    """A file name inside a mapped-file directory is not what the broker writes."""


class UnreadableFileError(StoreReaderError):
    """A file exists but cannot be opened or read (permissions, I/O error)."""


class CorruptEntryError(StoreReaderError):
    """Bytes that cannot be decoded as the format they are supposed to be."""


class ConfigError(StoreReaderError):
    """A broker setting or config JSON file is invalid or contradicts what the files show."""
