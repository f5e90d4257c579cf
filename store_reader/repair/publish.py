"""Publishing a repaired store: nothing half-written is ever visible under the output's name.

The protocol, like git writing its index:

0. ``claim_outputs``, before any work: every output target checked (writable, not the store),
   then steps 1 and 2 under the locks it holds for the run.
1. ``OutputLock``: an exclusive ``flock`` on ``<out>.lock`` beside the output (``<store>.lock``
   beside the store for ``--apply``), held for the whole run; a second run on the same output
   stops at once, naming the holder's pid. Creating the lock file is also the check that the
   output's directory is writable, before any work.
2. ``recover_leftovers``, under the lock: temporaries (``<out>.tmp-*``) of runs that died are
   removed, and an overwrite a kill interrupted is finished or rolled back (``<out>.old-*``).
3. ``new_temporary``: every invocation builds into its own ``<out>.tmp-<run id>-<nonce>``, marked
   incomplete (``TMP_MARKER``) until it is published.
4. ``publish``: fsync the tree, check it against its ``MANIFEST.json`` (every listed file there
   with its size, nothing else), then one rename; an existing output is replaced by an atomic
   exchange (``renameat2(RENAME_EXCHANGE)``) where the filesystem has one, else by renaming it
   aside first, which step 2 of the next run completes or rolls back after a kill.

A run's work directory (the scan's kept records, ``work_directory``) follows the same rule: a
``flock`` held for the run's life, and what a killed run left is removed by the next.

``STORE_READER_PAUSE_AT=<point>`` makes the process announce ``paused at <point>`` on stderr and
stop at that instant of the protocol (``unmarked``, ``moved-aside``, ``replaced``), so tests can kill
a real process exactly there.
"""
from __future__ import annotations

import errno
import fcntl
import json
import os
import re
import shutil
import sys
import tempfile
import time
import uuid
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Callable, Iterator

from store_reader.io import fsync, manifest
from store_reader.exceptions import StoreReaderError
from store_reader.io.outputs import OutputLock, exchange, siblings, unsupported_exchange
from store_reader.io.storefs import StoreLocation

TMP_MARKER = ".recover-incomplete"
MANIFEST = "MANIFEST.json"
PAUSE_ENV = "STORE_READER_PAUSE_AT"


def pause_point(name: str) -> None:
    """The fault-injection point ``name`` (see the module docstring): a no-op unless asked for."""
    if os.environ.get(PAUSE_ENV) == name:
        print(f"paused at {name}", file=sys.stderr, flush=True)
        while True:
            time.sleep(60)


def is_uri(target: str) -> bool:
    return re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", target) is not None


# -- 0. every output target, before any work --------------------------------------------------------

@contextmanager
def claim_outputs(store_root: Path | StoreLocation, out: str | None, overwrite: bool, backup: str | None,
                  audit_path: str | None, log_done: Callable[[str], object],
                  scan_dir: str | None = None) -> Iterator[None]:
    """Held for the run: every output target checked before any work. None of them the store or
    inside it (``check_outside_store``), the audit path writable, the output local, locked
    (``OutputLock``, which also proves its directory writable), leftovers of killed runs cleaned
    up (``log_done`` gets a line for each), an existing output replaceable; with ``backup``
    (``--apply``) the backup new, the output on the store's filesystem and the store locked as
    well. ``out``: None for a dry run."""
    for target, what in ((out, "output"), (backup, "backup"), (audit_path, "audit path"), (scan_dir, "scan dir")):
        if target is not None:
            check_outside_store(store_root, target, what)
    if audit_path:
        check_writable(audit_path, "audit path")
    with ExitStack() as stack:
        if out is not None:
            if is_uri(out):
                raise StoreReaderError("the repaired store is written to a local directory, not a URI", out)
            stack.enter_context(OutputLock(Path(out)))
            for done in recover_leftovers(Path(out)):
                log_done(done)
            if backup is not None and made_from(Path(out), store_root):
                # an --apply killed between publishing and its journal: its own output, made again
                log_done(f"replacing {out}: a repaired store of this store an --apply did not swap in")
                overwrite = True
            check_output(Path(out), overwrite)
            if backup is not None:
                from store_reader.repair.apply import check_apply_targets

                if os.path.lexists(backup):
                    raise StoreReaderError("backup directory exists; choose a new one", backup)
                if not Path(backup).parent.is_dir():
                    raise StoreReaderError("the backup's directory does not exist", Path(backup).parent)
                check_writable(str(Path(backup).parent), "backup's directory")
                stack.enter_context(OutputLock(Path(store_root), "store"))
                check_apply_targets(Path(store_root), Path(out), Path(backup))
        yield


# Outputs that may hold the store: the run writes only into directories of its own under them.
_MAY_CONTAIN_STORE = ("scan dir", "audit path")


def check_outside_store(store_root: Path | StoreLocation | str, target: str, what: str) -> None:
    """The one guard of every output option of every job, before any work: refuse a ``target``
    (the ``what``: output, backup, audit path, scan dir, salvage file) that is the store or lies
    inside it, or (a directory the run replaces) contains it. The input is never written
    through an option. A URI target is compared with a remote store's URI by prefix."""
    if isinstance(store_root, StoreLocation) and not store_root.is_local:
        store, tgt = str(store_root).rstrip("/"), target.rstrip("/")
        inside = tgt == store or tgt.startswith(store + "/")
        contains = store.startswith(tgt + "/")
    else:
        if is_uri(target):
            if not target.startswith("file://"):
                return                          # a remote target is never inside a local store
            target = target[len("file://"):]
        s = Path(os.path.abspath(str(store_root.path if isinstance(store_root, StoreLocation) else store_root)))
        s, o = s.resolve(), Path(os.path.abspath(target)).resolve()
        inside, contains = o == s or s in o.parents, o in s.parents
    may_contain = what in _MAY_CONTAIN_STORE
    if inside or (contains and not may_contain):
        rule = "the store or inside it" if may_contain else "the store, inside it or contain it"
        raise StoreReaderError(f"{what} {target} must not be {rule}", store_root)


# -- 1. the lock: ``outputs.OutputLock`` ----------------------------------------------------------

# -- 2. leftovers of killed runs --------------------------------------------------------------------

# A run's work directory holds a ``flock`` on this file for as long as the run lives.
WORK_OWNER = ".owner"


@contextmanager
def work_directory(kind: str, run_id: str, parent: str | None = None) -> Iterator[str]:
    """A directory of this run's own, ``<kind><run id>-<nonce>`` under ``parent`` (default: the
    system's temporary directory), removed with everything in it when the run ends. A killed run
    cannot remove its own: each run holds a ``flock`` on its directory's owner file, and first
    removes the directories of its ``kind`` whose lock is free (their runs are dead)."""
    path, fd = claim_work_directory(kind, run_id, parent)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
        os.close(fd)


def claim_work_directory(kind: str, run_id: str, parent: str | None = None) -> tuple[str, int]:
    """``work_directory`` made and locked, for an owner that outlives a ``with`` block: returns
    the directory and the descriptor whose ``flock`` claims it (the owner removes the directory
    and then closes it)."""
    root = parent or tempfile.gettempdir()
    remove_abandoned(root, kind)
    path = tempfile.mkdtemp(prefix=f"{kind}{run_id}-", dir=root)
    # locked before it is named: another run's cleanup never finds it unlocked
    fd = os.open(os.path.join(path, WORK_OWNER + ".new"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            pass        # a filesystem without locks: the directory is left alone by other runs
        os.rename(os.path.join(path, WORK_OWNER + ".new"), os.path.join(path, WORK_OWNER))
    except BaseException:
        shutil.rmtree(path, ignore_errors=True)
        os.close(fd)
        raise
    return path, fd


def remove_abandoned(root: str, kind: str) -> list[str]:
    """Remove the work directories of ``kind`` under ``root`` whose owner's lock is free (the
    kernel drops a dead process's ``flock``); returns them. Directories without an owner file (being
    made, or not ours) are left alone."""
    try:
        names = sorted(n for n in os.listdir(root) if n.startswith(kind))
    except OSError:
        return []
    removed = []
    for name in names:
        try:
            fd = os.open(os.path.join(root, name, WORK_OWNER), os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            continue        # its run is alive
        else:
            shutil.rmtree(os.path.join(root, name), ignore_errors=True)
            removed.append(name)
        finally:
            os.close(fd)
    return removed


def recover_leftovers(out: Path) -> list[str]:
    """Under the output's lock: remove the temporaries of dead runs (no live run can own one: it
    would hold the lock) and finish or roll back an interrupted overwrite. Returns what was done,
    one line each."""
    done = []
    olds = siblings(out, "old")
    if olds and not out.exists():
        # killed between moving the published store aside and renaming the new one into place
        restorable = [p for p in olds if (p / MANIFEST).is_file()]
        if not restorable:
            raise StoreReaderError("the output is missing and its earlier version is incomplete; "
                                   "nothing to restore", olds[-1])
        os.rename(restorable[-1], out)
        fsync.sync_path(str(out.parent))
        done.append(f"restored {out} from {restorable[-1].name} (an overwrite was interrupted)")
    for p in siblings(out, "old") + siblings(out, "tmp"):
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        else:
            os.unlink(p)
        done.append(f"removed {p.name} (left by a run that did not finish)")
    return done


def check_output(out: Path, overwrite: bool) -> None:
    """Refuse an output that exists unless it is an earlier repaired store and ``overwrite``."""
    if not os.path.lexists(out):
        return
    if not overwrite:
        raise StoreReaderError("output directory exists (use --overwrite)", out)
    if out.is_symlink() or not out.is_dir() or not (out / MANIFEST).is_file():
        raise StoreReaderError("output directory exists and is not a repaired store; "
                               "refusing to replace it", out)


def made_from(out: Path, store_root: Path | StoreLocation) -> bool:
    """``out`` is a repaired store made from ``store_root`` (its manifest's ``store``)."""
    try:
        with open(out / MANIFEST, encoding="utf-8") as fh:
            made = json.load(fh).get("store")
    except (OSError, ValueError, AttributeError):
        return False
    return isinstance(store_root, Path) and made == str(Path(store_root).resolve())


def check_writable(target: str, what: str) -> None:
    """Before any work: a local ``target`` directory (existing or to be created) can be written.
    URIs other than ``file://`` are written by their own client with its own credentials; they are
    not probed here."""
    if is_uri(target):
        if not target.startswith("file://"):
            return
        target = target[len("file://"):]
    p = Path(os.path.abspath(target))
    if os.path.lexists(p) and not p.is_dir():
        raise StoreReaderError(f"{what} exists and is not a directory", p)
    probe = p
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir():
        raise StoreReaderError(f"{what} cannot be created: {probe} is not a directory", p)
    try:
        _probe_write(probe)
    except OSError as exc:
        raise StoreReaderError(f"{what} is not writable: {exc.strerror}", probe) from None


def _probe_write(directory: Path) -> None:
    """Create a file in ``directory`` and let it go: an unnamed ``O_TMPFILE`` where the filesystem
    has it (nothing is ever left), else a named one removed at once. Mode bits alone do not say
    it: root passes them, not a read-only mount or a pseudo filesystem."""
    try:
        fd = os.open(directory, os.O_TMPFILE | os.O_WRONLY, 0o600)
    except OSError as exc:
        if exc.errno not in (errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL):
            raise
        name = directory / f".write-probe-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.unlink(name)
    os.close(fd)


# -- 3. the temporary tree --------------------------------------------------------------------------

def new_temporary(out: Path, run_id: str) -> Path:
    """This invocation's own ``<out>.tmp-<run id>-<nonce>``, marked incomplete."""
    tmp = out.parent / f"{out.name}.tmp-{run_id}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir(parents=True)
    (tmp / TMP_MARKER).write_text(run_id)
    return tmp


def verify_against_manifest(tmp: Path) -> None:
    """Every file ``MANIFEST.json`` lists is there with its size, and no other file is."""
    try:
        with open(tmp / MANIFEST, encoding="utf-8") as fh:
            listed = {e["path"]: e["size"] for e in json.load(fh)["outputs"]}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise StoreReaderError(f"the built store has no readable manifest ({exc}); not published",
                               tmp / MANIFEST) from None
    found = {rel: os.path.getsize(p) for rel, p in manifest.tree_files(str(tmp), skip={MANIFEST, TMP_MARKER})}
    missing = sorted(set(listed) - set(found))
    extra = sorted(set(found) - set(listed))
    resized = sorted(r for r in set(listed) & set(found) if listed[r] != found[r])
    if missing or extra or resized:
        detail = "; ".join(f"{what} {names[:3]}" for what, names in
                           (("missing", missing), ("not listed", extra), ("size differs", resized)) if names)
        raise StoreReaderError(f"the built store does not match its manifest ({detail}); not published", tmp)


# -- 4. publishing ----------------------------------------------------------------------------------

def publish(tmp: Path, out: Path, overwrite: bool) -> None:
    """The complete ``tmp`` synced, verified against its manifest and renamed to ``out`` (an
    earlier repaired store there replaced when ``overwrite``); on failure ``tmp`` is removed."""
    try:
        fsync.sync_tree(str(tmp))            # every byte on disk before the rename publishes it
        verify_against_manifest(tmp)
        (tmp / TMP_MARKER).unlink()
        fsync.sync_path(str(tmp))
        pause_point("unmarked")
        if os.path.lexists(out):
            check_output(out, overwrite)
            _replace(tmp, out)
        else:
            os.rename(tmp, out)
        fsync.sync_path(str(out.parent))
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _replace(tmp: Path, out: Path) -> None:
    try:
        exchange(tmp, out)                   # out is never absent
    except OSError as exc:
        if not unsupported_exchange(exc):
            raise
        # no exchange here: out is absent for an instant; recover_leftovers restores old after a kill
        old = out.parent / f"{out.name}.old-{tmp.name.rsplit('-', 1)[-1]}"
        os.rename(out, old)
        fsync.sync_path(str(out.parent))
        pause_point("moved-aside")
        os.rename(tmp, out)
        fsync.sync_path(str(out.parent))
        pause_point("replaced")
        shutil.rmtree(old)
        return
    fsync.sync_path(str(out.parent))
    pause_point("replaced")
    shutil.rmtree(tmp)                        # the earlier store, now under the temporary name


def check_output_file(out: str, overwrite: bool, what: str) -> None:
    """Before any work: ``out`` (a single output file, ``what``) is a local path, new unless
    ``overwrite``, in a directory that exists and can be written."""
    if is_uri(out):
        raise StoreReaderError(f"the {what} is written to a local path, not a URI", out)
    if os.path.isdir(out):
        raise StoreReaderError("output is a directory, not a file", out)
    if os.path.lexists(out) and not overwrite:
        raise StoreReaderError("output file exists (use --overwrite)", out)
    parent = os.path.dirname(os.path.abspath(out))
    if not os.path.isdir(parent):
        raise StoreReaderError("the output's directory does not exist", parent)
    check_writable(parent, "the output's directory")


def publish_file(tmp: str, out: str, overwrite: bool) -> None:
    """Put the complete file ``tmp`` at ``out`` atomically: replacing an earlier file only with
    ``overwrite``, never one that appeared meanwhile otherwise (a hard link fails if it exists)."""
    if overwrite:
        os.replace(tmp, out)
    else:
        try:
            os.link(tmp, out)
        except FileExistsError:
            raise StoreReaderError("output file exists (use --overwrite)", out) from None
        os.unlink(tmp)
    fsync.sync_path(os.path.dirname(os.path.abspath(out)))
