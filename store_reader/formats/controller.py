"""Controller mode (5.x ``enableControllerMode``): the epoch file and the confirm offset the broker's
recovery keeps (spec ``recovery.md`` §4.4, §4.5, §6, §7.1, §14; ``store-format.md`` §8, §11).

A controller-mode broker loads its store fenced (``ReplicasManager#setFenced(true)`` before
``DefaultMessageStore#load``), so ``CommitLog#getConfirmOffset`` is the checkpoint's
``confirmPhyOffset`` (bytes 32..39) all through recovery and the reput that follows it. The
recovery clamps it (``correct_confirm_offset``); the reput starts at it and ends at it, so records
past it stay in the commitlog undispatched until the controller decides: a master's
``changeToMaster`` sets it to the commitlog's end (they are served), a slave's HA client truncates
to the master (they are dropped). A tail that comes back after a slave's truncation was undone by a
crash is apache/rocketmq #10666.

The epoch file (``epochFileCheckpoint``, ``CheckpointFile`` with ``EpochEntrySerializer``): one
line with the entry count, one with the CRC32 of the entry lines, then ``<epoch>-<startOffset>``
per line; read falls back to ``.bak`` when the file is missing, empty of entries or fails its
count or CRC check.
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass, field

from store_reader.io.storefs import PathRef, location

EPOCH_FILE = "epochFileCheckpoint"          # MessageStoreConfig#getStorePathEpochFile
NOT_CHECK_CRC = 0                           # CheckpointFile.NOT_CHECK_CRC_MAGIC_CODE


@dataclass(frozen=True)
class EpochEntry:
    epoch: int
    start_offset: int


@dataclass
class EpochFile:
    """What ``EpochFileCache#initCacheFromFile`` reads (``CheckpointFile#read``)."""

    path: str
    entries: list[EpochEntry] = field(default_factory=list)
    read_from: str | None = None
    """``epochFileCheckpoint`` or ``epochFileCheckpoint.bak``: the file the entries came from."""
    problems: list[tuple[str, str]] = field(default_factory=list)
    """(file, why the broker does not take it) for each file it passed over."""
    start_fails: str | None = None
    """Why the broker's start throws (a count or CRC line that is not a number: the
    ``NumberFormatException`` passes ``initCacheFromFile``, which catches only ``IOException``)."""


class _Unreadable(Exception):
    """CheckpointFile#read's IOException: the count or the CRC does not match."""


class _StartFails(Exception):
    """A NumberFormatException out of CheckpointFile#read."""


def _java_int(text: str | None) -> int:
    """``Integer.parseInt``."""
    if text is None or not text.strip("+-").isdigit() or text != text.strip():
        raise _StartFails(f"{text!r} is not a number")
    value = int(text)
    if not -(1 << 31) <= value < (1 << 31):
        raise _StartFails(f"{text!r} is out of int range")
    return value


def _parse(data: bytes) -> list[EpochEntry]:
    """``CheckpointFile#read(filePath)`` of an existing file."""
    lines = data.decode("utf-8", "replace").splitlines()
    expected = _java_int(lines[0] if lines else None)
    crc = _java_int(lines[1] if len(lines) > 1 else None)
    entries, body = [], ""
    for line in lines[2:]:
        body += line + "\n"                                   # System.lineSeparator() on Linux
        parts = line.split("-")
        if len(parts) == 2:                                   # EpochEntrySerializer#fromLine
            epoch = _java_int(parts[0])
            try:
                start = int(parts[1])                         # Long.parseLong
            except ValueError:
                raise _StartFails(f"{parts[1]!r} is not a number") from None
            entries.append(EpochEntry(epoch, start))
    if len(entries) != expected:
        raise _Unreadable(f"the file says {expected} entries, {len(entries)} found")
    truth = zlib.crc32(body.encode()) & 0x7FFFFFFF             # UtilAll#crc32
    if crc != NOT_CHECK_CRC and truth != crc:
        raise _Unreadable(f"entries CRC32 {truth} does not match the file's {crc}")
    return entries


def read_epoch_file(path: PathRef) -> EpochFile:
    """The epoch entries the broker loads from ``path`` (or its ``.bak``)."""
    loc = location(path)
    out = EpochFile(str(loc))
    for candidate in (loc, loc.parent / f"{loc.name}.bak"):
        try:
            with candidate.open_reader() as r:
                data = r.read_at(0, r.size)
        except FileNotFoundError:
            continue                                          # an absent file reads as no entries
        try:
            entries = _parse(data)
        except _Unreadable as exc:
            out.problems.append((str(candidate), str(exc)))
            continue
        except _StartFails as exc:
            out.start_fails = f"{candidate}: {exc}"
            return out
        if entries:
            out.entries, out.read_from = entries, candidate.name
            return out
    return out


def epoch_file_bytes(entries: list[EpochEntry]) -> bytes:
    """``CheckpointFile#write``: the count, the CRC32 of the entry lines, the entry lines."""
    body = "".join(f"{e.epoch}-{e.start_offset}\n" for e in entries)
    crc = zlib.crc32(body.encode()) & 0x7FFFFFFF
    return f"{len(entries)}\n{crc}\n{body}".encode()


# Controller-mode files of the store root a repaired store carries (MessageStoreConfig)
IDENTITY_FILES = ("brokerIdentity", "brokerIdentity.bak")
# ReplicasManager's TempBrokerMetadata while it registers (not carried into a repaired store)
IDENTITY_TEMP_FILE = "brokerIdentity-temp"


@dataclass(frozen=True)
class ConfirmOffset:
    """The confirm offset through a controller-mode recovery (R§4.5)."""

    checkpoint: int
    """``confirmPhyOffset`` as loaded (checkpoint bytes 32..39)."""
    corrected: int
    """After recovery: clamped into [minPhyOffset, processOffset] (abnormal: the end of the last
    record dispatched, ``lastConfirmValidMsgPhyOffset``): where the reput starts and ends."""
    end: int
    """Where the commitlog ends after recovery (``processOffset``)."""

    @property
    def unconfirmed_bytes(self) -> int:
        return max(0, self.end - self.corrected)


def correct_confirm_offset(checkpoint: int, min_phy_offset: int, end: int,
                           last_confirm_valid: int | None) -> ConfirmOffset:
    """``CommitLog#recoverNormally`` / ``#recoverAbnormally`` in controller mode (5.3.3): below
    the commitlog's min offset it becomes the min offset, past ``processOffset`` (abnormal: past
    ``lastConfirmValidMsgPhyOffset``, ``last_confirm_valid``) it becomes that; then
    ``truncateDirtyFiles(processOffset)`` lowers it to the end."""
    bound = end if last_confirm_valid is None else last_confirm_valid
    corrected = min_phy_offset if checkpoint < min_phy_offset else min(checkpoint, bound)
    return ConfirmOffset(checkpoint, min(corrected, end), end)


def epoch_problems(epochs: EpochFile, end: int) -> list[tuple[str, int | None, str]]:
    """(file, byte or None, message) for what the epoch entries say against the commitlog as the
    broker recovers it: entries out of order (``appendEntry`` would never write them) and entries
    starting past the commitlog's end (the epochs claim data the commitlog lost)."""
    out: list[tuple[str, int | None, str]] = []
    for path, why in epochs.problems:
        out.append((path, None, f"the broker does not take this epoch file ({why})"
                    + ("; it reads the .bak" if path == epochs.path else "")))
    if epochs.start_fails:
        out.append((epochs.path, None, f"the broker's start throws reading the epoch file "
                                       f"({epochs.start_fails})"))
    where = epochs.path if epochs.read_from is None or not epochs.read_from.endswith(".bak") \
        else epochs.path + ".bak"
    for a, b in zip(epochs.entries, epochs.entries[1:]):
        if b.epoch <= a.epoch or b.start_offset <= a.start_offset:
            out.append((where, None, f"epoch {b.epoch} starting at {b.start_offset} does not follow "
                                     f"epoch {a.epoch} starting at {a.start_offset}"))
    for e in epochs.entries:
        if e.start_offset > end:
            out.append((where, None, f"epoch {e.epoch} starts at phy {e.start_offset}, past the "
                                     f"commitlog's end {end} after recovery: the epochs claim data "
                                     "the commitlog does not hold"))
    return out
