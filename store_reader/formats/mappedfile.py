"""Mapped-file sequences (spec ``store-format.md`` §2): the commitlog's and each consume queue's
files, named by the offset of their first byte, loaded as the broker's ``MappedFileQueue#load`` does.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from store_reader.exceptions import FileSizeError, StoreReaderError, StrayFileError, UnreadableFileError
from store_reader.io.fsutil import list_dir
from store_reader.formats.javalang import java_parse_int
from store_reader.io.storefs import PathRef, StoreLocation, location

# ``UtilAll#offset2FileName``: the start offset in decimal, zero-padded to 20 digits
MAPPED_FILE_NAME = re.compile(r"[0-9]{20}")


@dataclass(frozen=True)
class MappedFile:
    """One file of a mapped-file sequence (commitlog, consume queue).

    Attributes
    ----------
    path
        Full path (a ``storefs.StoreLocation`` for a remote store).
    name
        File name: the offset of its first byte (20 digits, or any form ``Long.parseLong`` takes).
    start
        That offset (``Long.parseLong(name)``).
    size
        Length on disk in bytes.
    """

    path: str | StoreLocation
    name: str
    start: int
    size: int


def file_name(offset: int) -> str:
    """``UtilAll#offset2FileName``: the offset in decimal, zero-padded to 20 digits."""
    if offset < 0:
        raise ValueError(f"a mapped file cannot start at negative offset {offset}")
    return f"{offset:020d}"


def parse_file_name(path: PathRef) -> int:
    """Start offset encoded in a mapped file's name; :class:`StrayFileError` if it is not 20 digits."""
    loc = location(path)
    if not MAPPED_FILE_NAME.fullmatch(loc.name):
        raise StrayFileError(f"file name {loc.name!r} is not a 20-digit offset; the broker cannot load it",
                             str(loc))
    return int(loc.name)


def list_mapped_files(directory: PathRef, expected_size: int, what: str, size_key: str,
                      problems: list[StoreReaderError], notes: list[str],
                      broker_5x: bool | None = None,
                      problems_49: list[StoreReaderError] | None = None) -> list[MappedFile]:
    """A mapped-file directory as the broker's ``MappedFileQueue#load`` sees it (F§2): the files it
    maps, in name order; why it would refuse the directory goes to ``problems``.

    ``doLoad`` takes the entries sorted by name and, for each: [5.x] skips a directory; [5.x]
    deletes a zero-length entry that sorts last (directories count in "last"); refuses one whose
    ``File.length()`` is not ``expected_size`` (a directory's length too, in 4.9.7); then maps it
    at ``Long.parseLong(name)``, which throws on a name that is not a number (the load fails). A
    name that parses but is not the 20-digit form (``851968``) is mapped at that offset, in name
    order. The returned files leave out what the broker skips or cannot map (a directory, an
    unparseable name, a zero-length last entry): exactly what a repaired store leaves out.

    ``broker_5x`` None (version not known yet): the refusals only 4.9.7 has (a directory, a
    zero-length last file) go to ``problems_49``.
    """
    entries = list_dir(directory, what)
    only_49 = problems if broker_5x is False else problems_49 if problems_49 is not None else []
    files: list[MappedFile] = []
    for i, e in enumerate(entries):
        if e.is_dir():
            if broker_5x is not True:
                only_49.append(StrayFileError(
                    f"sub-directory in the {what} directory: 4.9.7's MappedFileQueue#load does not "
                    f"skip directories, its File.length() ({_entry_size(e)}) is not {size_key} "
                    f"({expected_size}) and the broker refuses to load (5.x skips it)", str(e.location)))
            if broker_5x is not False:
                notes.append(f"{e.path}: sub-directory in the {what} directory, skipped by 5.x")
            continue
        size = _entry_size(e)
        if size == 0 and i == len(entries) - 1:
            if broker_5x is not True:
                only_49.append(FileSizeError(
                    f"zero-length last {what} file: 4.9.7's MappedFileQueue#load refuses its length 0 "
                    f"({size_key} is {expected_size}) and the broker fails to start (5.x deletes it)",
                    str(e.location), 0))
            if broker_5x is not False:
                notes.append(f"{e.path}: zero-length last file (5.x deletes it at load)")
            continue
        start = java_parse_int(e.name, 64)
        if size != expected_size:
            problems.append(FileSizeError(
                f"{what} file is {size} bytes but {size_key} is {expected_size}: the broker "
                f"refuses to load it", str(e.location), min(size, expected_size)))
        elif start is None:
            problems.append(StrayFileError(
                f"stray file in the {what} directory: its name is not a number, so MappedFile#init's "
                f"Long.parseLong throws NumberFormatException and the broker fails to load",
                str(e.location)))
        if start is None:
            continue
        if not MAPPED_FILE_NAME.fullmatch(e.name):
            notes.append(f"{e.path}: name is not the 20-digit form; the broker maps it at offset "
                         f"{start} (Long.parseLong), in name order")
        files.append(MappedFile(path=e.path, name=e.name, start=start, size=size))
    for a, b in zip(files, files[1:]):
        if b.start - a.start != expected_size:
            notes.append(f"{b.path}: gap or overlap after {a.name} (start offsets differ by "
                         f"{b.start - a.start}, file size {expected_size}); the broker only logs it")
    return files


def _entry_size(e) -> int:
    try:
        return e.size()
    except OSError as exc:
        raise UnreadableFileError(f"cannot stat: {exc.strerror}", str(e.location)) from None
