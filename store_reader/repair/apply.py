"""``--apply``: the repaired store put in the input store's place, the input kept at the backup,
so that whatever instant the run is killed at, nothing is lost and the next run finishes the job.

What a kill at any instant leaves:

- the store path holds the input store or the repaired store, each complete: never a mix, and
  never nothing where the filesystem can exchange two directories (``renameat2(RENAME_EXCHANGE)``;
  without it, for the instant between two renames the path is empty and the journal says where
  the input is);
- the backup is complete under its own name, or visibly incomplete: ``<backup>.tmp-<nonce>``
  holding ``BACKUP_MARKER``;
- a journal, ``<store>.apply`` beside the store, written (and fsync'd) under the store's lock before
  the first change: the next ``--apply`` on that store reads it and finishes the swap (``finish``),
  or rolls it back when it cannot (the repaired store is gone, or the store changed since).

The steps (``apply_repaired``; ``_advance`` carries them on from whatever state a kill left):

1. backup on another filesystem: the store copied to ``<backup>.tmp-<nonce>``, fsync'd, checked
   file by file (path, size, SHA-256) against the store, unmarked and renamed to the backup; the
   store is not touched;
2. the swap, on the store's own filesystem: one ``RENAME_EXCHANGE`` of the repaired store and the
   store; without it, the store renamed aside (to the backup, or to ``<store>.apply-old``), then
   the repaired store renamed in;
3. the input, now where the repaired store was built: renamed to the backup (same filesystem), or,
   its copy at the backup being complete, renamed to ``<store>.apply-old`` and deleted, the last
   step;
4. the journal removed.

Directories are told apart by identity (device and inode), which renames keep. The tests kill a
real process at each of these steps' syscalls (``tests/test_apply_kills.py``).
"""
from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import uuid
from contextlib import ExitStack
from dataclasses import asdict, dataclass
from pathlib import Path

from store_reader.io import fsync, manifest
from store_reader.formats.checkpoint import lock_status
from store_reader.exceptions import StoreReaderError
from store_reader.io.outputs import OutputLock, exchange, siblings, unsupported_exchange

BACKUP_MARKER = ".backup-incomplete"
JOURNAL_SUFFIX = ".apply"


@dataclass(frozen=True)
class Journal:
    """What an ``--apply`` run is doing, beside the store (``<store>.apply``)."""

    store: str
    repaired: str                 # where the repaired store was published (``--out``)
    backup: str
    input_id: tuple[int, int]     # (st_dev, st_ino) of the input store's directory
    repaired_id: tuple[int, int]
    fingerprint: str              # the input store's files as they were (``_fingerprint``)
    backup_elsewhere: bool        # the backup is on another filesystem: copied, not renamed

    @property
    def path(self) -> Path:
        return journal_path(Path(self.store))

    @property
    def aside(self) -> Path:
        """Where the input goes on the store's filesystem when the backup is a copy elsewhere."""
        return Path(f"{self.store}.apply-old")

    def write(self) -> None:
        tmp = self.path.with_name(self.path.name + ".new")
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(asdict(self), fh, indent=2)
            fh.flush()
            os.fsync(fh.fileno())
        os.rename(tmp, self.path)
        fsync.sync_path(str(self.path.parent))

    @classmethod
    def read(cls, path: Path) -> "Journal":
        try:
            with open(path, encoding="utf-8") as fh:
                d = json.load(fh)
            return cls(**{**d, "input_id": tuple(d["input_id"]), "repaired_id": tuple(d["repaired_id"])})
        except (OSError, ValueError, TypeError, KeyError) as exc:
            raise StoreReaderError(f"the journal of an interrupted --apply cannot be read ({exc}); "
                                   "look at the store, its backup and the repaired store by hand, "
                                   "then remove it", path) from None


def _remove_unwritten_journal(store: Path) -> None:
    """A journal a kill left half-written (never renamed into place: the run had changed nothing)."""
    try:
        os.unlink(journal_path(store).with_name(journal_path(store).name + ".new"))
    except FileNotFoundError:
        pass


def journal_path(store: Path) -> Path:
    store = Path(os.path.abspath(store))
    return store.parent / f"{store.name}{JOURNAL_SUFFIX}"


def _identity(path: Path | str) -> tuple[int, int] | None:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    return st.st_dev, st.st_ino


def _fingerprint(root: Path) -> str:
    """Every entry under ``root`` with its type, mode, size and mtime: what the broker or anything
    else writing into the store changes (the bytes themselves are the backup copy's check)."""
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(dirnames + filenames):
            st = os.lstat(os.path.join(dirpath, name))
            rel = os.path.relpath(os.path.join(dirpath, name), root)
            h.update(f"{rel}\0{st.st_mode}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def same_filesystem(store: Path, target_dir: Path) -> bool:
    """A directory beside ``store`` can be renamed into ``target_dir`` (an existing directory):
    probed with an empty directory, since two mounts of one device share ``st_dev`` but refuse
    the rename. The probe's names are fixed per store, so a probe a kill left is removed by the
    next one (both run under the store's lock)."""
    name = f".{store.name}.apply-probe"
    here, there = store.parent / name, target_dir / name
    for p in (here, there):
        if os.path.isdir(p) and not os.path.islink(p):
            os.rmdir(p)
    os.mkdir(here)
    try:
        os.rename(here, there)
    except OSError as exc:
        os.rmdir(here)
        if exc.errno == errno.EXDEV:
            return False
        raise
    os.rmdir(there)
    return True


def check_apply_targets(store: Path, repaired: Path, backup: Path) -> None:
    """Under the store's lock, before any work: the repaired store is built on the store's
    filesystem (the swap is a rename) and no interrupted ``--apply`` waits to be finished."""
    store = Path(os.path.abspath(store))
    _remove_unwritten_journal(store)
    if journal_path(store).exists():
        raise StoreReaderError("an interrupted --apply of this store is not finished; run the same "
                               "command again to finish it", journal_path(store))
    same_filesystem(store, Path(os.path.abspath(backup)).parent)      # its leftovers cleaned too
    if not same_filesystem(store, Path(os.path.abspath(repaired)).parent):
        raise StoreReaderError("with --apply, --out must be on the store's filesystem (the repaired "
                               "store is renamed into its place)", repaired)


def apply_repaired(store_root: Path, repaired: Path, backup: Path) -> None:
    """Put the published repaired store at ``repaired`` in the place of ``store_root``, keeping the
    input complete at ``backup`` (the caller holds the store's ``OutputLock``): module docstring."""
    store_root, repaired, backup = (Path(os.path.abspath(p)) for p in (store_root, repaired, backup))
    if os.path.lexists(backup):
        raise StoreReaderError("backup directory exists; choose a new one", backup)
    lock = lock_status(store_root)
    if lock.locked:
        raise StoreReaderError(f"a running broker holds the store's lock (pid {lock.pid})", lock.path)
    journal = Journal(str(store_root), str(repaired), str(backup), _identity(store_root), _identity(repaired),
                      _fingerprint(store_root), not same_filesystem(store_root, backup.parent))
    journal.write()
    _advance(journal)


@dataclass(frozen=True)
class Finished:
    """What ``finish`` did about an interrupted ``--apply``."""

    journal: Journal
    lines: list[str]
    completed: bool               # finished (True) or rolled back

    def same_command(self, repaired: str | None, backup: str | None) -> bool:
        """The interrupted run had this ``--out`` and ``--backup``."""
        pairs = ((repaired, self.journal.repaired), (backup, self.journal.backup))
        return all(p is not None and os.path.abspath(p) == q for p, q in pairs)


def finish(store: Path) -> Finished | None:
    """Under the store's and the repaired store's locks: finish the ``--apply`` a kill interrupted
    on ``store`` (its journal), or roll it back where it cannot be finished. None when no
    ``--apply`` was interrupted."""
    path = journal_path(store)
    if not path.exists():
        return None
    with ExitStack() as stack:
        stack.enter_context(OutputLock(Path(os.path.abspath(store)), "store"))
        if not path.exists():            # finished by the run that held the lock before us
            return None
        journal = Journal.read(path)
        stack.enter_context(OutputLock(Path(journal.repaired)))
        done = [f"removed {p.name} (an incomplete backup)" for p in _remove_incomplete_backups(journal)]
        try:
            _advance(journal)
        except _CannotFinish as exc:
            path.unlink()
            fsync.sync_path(str(path.parent))
            return Finished(journal, done + [f"rolled back an interrupted --apply: {exc}; "
                                             f"{journal.store} is the store as it was"], False)
        return Finished(journal, done + [f"finished an interrupted --apply: {journal.store} is the "
                                         f"repaired store, the input kept at {journal.backup}"], True)


class _CannotFinish(Exception):
    """The swap was not made and cannot be: the input store stays where it is."""


def _remove_incomplete_backups(journal: Journal) -> list[Path]:
    """Copies a kill interrupted (marked, or complete but not yet renamed): made again if needed."""
    removed = siblings(Path(journal.backup), "tmp")
    for p in removed:
        shutil.rmtree(p)
    return removed


def _advance(j: Journal) -> None:
    """Carry the swap on from whatever state it is in (module docstring, steps 1-4)."""
    store, repaired, backup = Path(j.store), Path(j.repaired), Path(j.backup)
    aside = j.aside if j.backup_elsewhere else backup
    if _identity(store) == j.input_id:
        # not swapped yet: only forward if the repaired store and the input are as they were
        if _identity(repaired) != j.repaired_id:
            raise _CannotFinish(f"the repaired store {repaired} is gone")
        if lock_status(store).locked:
            raise _CannotFinish("a running broker holds the store's lock")
        if _fingerprint(store) != j.fingerprint:
            raise _CannotFinish("the store changed since the repaired store was made from it")
        if j.backup_elsewhere and not backup.exists():
            _copy_backup(store, backup)
        _swap(store, repaired, aside)
    if _identity(store) is None and _identity(aside) == j.input_id and _identity(repaired) == j.repaired_id:
        os.rename(repaired, store)            # killed between the two renames of a swap without exchange
        _sync_dirs(store, repaired)
    if _identity(store) != j.repaired_id:
        raise StoreReaderError(f"the store is neither the input nor the repaired store the --apply of "
                               f"{j.path} made; look at it, {repaired} and {aside} by hand", store)
    if _identity(repaired) == j.input_id:
        os.rename(repaired, aside)
        _sync_dirs(repaired, aside)
    if j.backup_elsewhere and os.path.lexists(aside):
        shutil.rmtree(aside)                  # its copy at the backup is complete
    j.path.unlink()
    fsync.sync_path(str(j.path.parent))


def _swap(store: Path, repaired: Path, aside: Path) -> None:
    try:
        exchange(repaired, store)
    except OSError as exc:
        if not unsupported_exchange(exc):
            raise
        os.rename(store, aside)
        _sync_dirs(store, aside)
        os.rename(repaired, store)
    _sync_dirs(store, repaired)


def _sync_dirs(*paths: Path) -> None:
    for d in {str(Path(p).parent) for p in paths}:
        fsync.sync_path(d)


def _copy_backup(store: Path, backup: Path) -> None:
    """Step 1: the store copied to the backup's filesystem under a temporary name marked
    incomplete, fsync'd, checked against the store file by file, then renamed to ``backup``."""
    tmp = backup.parent / f"{backup.name}.tmp-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    (tmp / BACKUP_MARKER).write_text(str(store))
    shutil.copytree(store, tmp, symlinks=True, dirs_exist_ok=True)
    fsync.sync_tree(str(tmp))
    if manifest.tree_manifest(str(store)) != manifest.tree_manifest(str(tmp), skip={BACKUP_MARKER}):
        shutil.rmtree(tmp)
        raise StoreReaderError("the backup copy does not match the store; nothing changed", backup)
    (tmp / BACKUP_MARKER).unlink()
    shutil.copystat(store, tmp)               # the marker's removal touched the top directory
    fsync.sync_path(str(tmp))
    os.rename(tmp, backup)
    fsync.sync_path(str(backup.parent))
