"""One exception hierarchy for everything that reads or writes store bytes.

Every error names the file and, where it applies, the byte position, so an operator can look at the
exact spot with ``jobs.dump``. Nothing in this package lets a raw ``IndexError``/``struct.error``
escape on bad input.

An error raised inside a Spark task reaches the driver only as text (the task's Python traceback
inside a ``Py4JJavaError`` or ``PythonException``). So that the driver can rebuild it, every error
carries a note (PEP 678: printed after the exception line of any traceback) holding its class,
file, byte position and reason as one marked JSON line; ``StoreReaderError.from_text`` finds it.
"""
from __future__ import annotations

import json
import os
import re
import sys

# Starts the note that encodes an error (``StoreReaderError.marker``); stable: drivers parse it.
MARKER = "store_reader.error: "
# An OSError's line in a Python traceback: ``FileNotFoundError: [Errno 2] No such file...: '/x'``.
_OS_ERROR_LINE = re.compile(r"^(?:\w+\.)*\w*Error: \[Errno (\d+)\] ([^\n]*?)(?:: '([^\n]*)')?$", re.M)


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
        self.add_note(self.marker())

    def marker(self) -> str:
        """This error as one line the driver can find in a task's traceback (``from_text``)."""
        return MARKER + json.dumps({"type": type(self).__name__, "path": self.path,
                                    "position": self.position, "reason": self.reason})

    @classmethod
    def from_text(cls, text: str) -> "StoreReaderError | None":
        """The first error encoded in ``text`` (a task's traceback, as Spark passes it on),
        rebuilt as its own class; else an ``OSError`` the task raised (a write on a full disk) as
        an error naming its file; None when there is neither."""
        at = text.find(MARKER)
        if at >= 0:
            try:
                fields, _ = json.JSONDecoder().raw_decode(text, at + len(MARKER))
                kind = getattr(sys.modules[__name__], fields["type"], None)
                if not (isinstance(kind, type) and issubclass(kind, StoreReaderError)):
                    kind = StoreReaderError
                return kind(fields["reason"], fields["path"], fields["position"])
            except (ValueError, KeyError, TypeError):
                pass
        m = _OS_ERROR_LINE.search(text)
        if m is None:
            return None
        return StoreReaderError(f"{m.group(2)} (errno {m.group(1)}, in a Spark task)", m.group(3))


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


class OutputError(StoreReaderError):
    """An output file cannot be written (disk full, read-only or failing filesystem)."""


class CorruptEntryError(StoreReaderError):
    """Bytes that cannot be decoded as the format they are supposed to be."""


class ConfigError(StoreReaderError):
    """A broker setting or config JSON file is invalid or contradicts what the files show."""


class CannotRead(StoreReaderError):
    """A file is not the store format its place in the store says it has (``jobs.dump``)."""
