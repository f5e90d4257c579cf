"""``--apply`` killed at every syscall that changes the store, its backup or the repaired store
(``store_reader/repair/apply.py``): a real process, killed by the kernel at the N-th call of each
syscall (``strace -e inject=SYSCALL:signal=KILL:when=N``), then the next run.

The promises checked after every kill:
1. the store path holds the input store (bytes, modes, mtimes as they were) or the repaired store,
   complete; it is empty only without ``RENAME_EXCHANGE``, between two renames, the journal
   beside it saying where the input is;
2. the backup is absent, or complete (the input as it was), and any ``<backup>.tmp-*`` is marked
   incomplete;
3. the input is complete somewhere (store, backup, repaired store's path, ``<store>.apply-old``);
and after the next run (``apply.finish``): the store is the repaired store, the backup the input
as it was, nothing else left beside them. Run same-filesystem and with the backup on a tmpfs this
test mounts, each with ``RENAME_EXCHANGE`` and without it (``renameat2`` failing with EINVAL,
injected the same way).
"""
from __future__ import annotations

import collections
import hashlib
import os
import re
import shutil
import stat
import subprocess
import sys
import textwrap
import time

import pytest

import support
from store_reader import open_store
from store_reader.exceptions import StoreReaderError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STRACE = shutil.which("strace")
# the syscalls by which apply changes anything (sendfile: shutil's copy of a file's bytes)
CHANGING = ("rename", "renameat2", "unlinkat", "mkdir", "rmdir", "fsync", "sendfile", "write")
# kill points per syscall: every call up to this many, else this many spread over them
PER_SYSCALL = 3

_APPLY = textwrap.dedent("""
    import sys
    from pathlib import Path
    from store_reader.repair import apply, publish

    store, out, backup = (Path(a) for a in sys.argv[1:4])
    with publish.OutputLock(out), publish.OutputLock(store, "store"):
        apply.check_apply_targets(store, out, backup)
        apply.apply_repaired(store, out, backup)
""")
_FINISH = textwrap.dedent("""
    import sys
    from pathlib import Path
    from store_reader.repair import apply, publish

    store, out, backup = (Path(a) for a in sys.argv[1:4])
    done = apply.finish(store)
    print("\\n".join(done.lines) if done else "nothing to finish")
    with publish.OutputLock(out), publish.OutputLock(store, "store"):     # as the next run claims
        apply.check_apply_targets(store, out, backup)
""")


def snapshot(root) -> dict[str, tuple]:
    """Every entry under ``root`` (itself included): type and mode, size, mtime and SHA-256."""
    st = os.lstat(root)
    out = {".": (st.st_mode, 0, st.st_mtime_ns, None)}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            digest = None
            if stat.S_ISREG(st.st_mode):
                with open(p, "rb") as fh:
                    digest = hashlib.sha256(fh.read()).hexdigest()
            out[os.path.relpath(p, root)] = (st.st_mode, st.st_size if digest else 0, st.st_mtime_ns, digest)
    return out


def _content(root) -> dict[str, tuple]:
    """The repaired store as its bytes (a copy made for each case has other mtimes)."""
    return {k: v[3] for k, v in snapshot(root).items() if k != "."}


@pytest.fixture(scope="module")
def repaired_reference(tmp_path_factory, spark):
    """The real job's repaired store of a crashed 4.9.7 store (abort, config/, offsets moved)."""
    from jobs import recover as job

    case = (support.VERSIONS[0], "crash-tail")
    out = tmp_path_factory.mktemp("reference") / "repaired"
    job.recover(spark, str(support.input_store(*case)), str(out), str(support.broker_conf(*case)), "4.9")
    return case, out


@pytest.fixture
def tmpfs(tmp_path):
    """A tmpfs mounted for the test: the backup on another filesystem."""
    with support.mounted_tmpfs(tmp_path / "tmpfs", "256m") as mnt:
        yield mnt


def _setup(base, case, reference) -> tuple:
    """A fresh input store and repaired store beside it, and where the backup goes."""
    if base.exists():
        shutil.rmtree(base)
    base.mkdir()
    store, out = base / "store", base / "out"
    shutil.copytree(support.input_store(*case), store, symlinks=True)
    shutil.copytree(reference, out, symlinks=True)
    return store, out


def _strace(args: list[str], inject: list[str], count: bool = False) -> subprocess.CompletedProcess:
    opts = [f"-e inject={i}" for i in inject]
    trace = ["-c", "-U", "name,calls"] if count else ["-qq", "-o", "/dev/null"]
    cmd = [STRACE, "-f", *trace, "-e", f"trace={','.join(CHANGING)}"]
    for o in opts:
        cmd += o.split(" ", 1)
    env = dict(os.environ, PYTHONPATH=ROOT, PYTHONDONTWRITEBYTECODE="1")
    return subprocess.run(cmd + [sys.executable, *args], capture_output=True, text=True, env=env, timeout=120)


def _counts(stderr: str) -> dict[str, int]:
    """``strace -c -U name,calls``' table."""
    found = {}
    for line in stderr.splitlines():
        m = re.match(r"\s*([a-z0-9_]+)\s+(\d+)\s*$", line)
        if m and m.group(1) in CHANGING:
            found[m.group(1)] = int(m.group(2))
    return found


def _kill_points(counts: dict[str, int]) -> list[tuple[str, int]]:
    points = []
    for name, n in sorted(counts.items()):
        picks = range(1, n + 1) if n <= PER_SYSCALL else \
            sorted({1 + round(i * (n - 1) / (PER_SYSCALL - 1)) for i in range(PER_SYSCALL)})
        points += [(name, k) for k in picks]
    return points


def _campaign(tmp_path, reference, backup_dir, exchange: bool) -> collections.Counter:
    case, repaired = reference
    want_repaired = _content(repaired)
    base = tmp_path / "case"
    inject = [] if exchange else ["renameat2:error=EINVAL"]
    store, out = _setup(base, case, repaired)
    want_input = snapshot(store)
    if backup_dir == tmp_path / "case":
        backup_dir = base
    backup = backup_dir / "backup"
    args = ["-c", _APPLY, str(store), str(out), str(backup)]
    done = _strace(args, inject, count=True)
    assert done.returncode == 0, done.stderr
    assert snapshot(backup) == want_input and _content(store) == want_repaired
    points = _kill_points(_counts(done.stderr))
    assert points
    tally = collections.Counter()
    for name, n in points:
        store, out = _setup(base, case, repaired)
        for p in backup_dir.iterdir() if backup_dir != base else ():
            shutil.rmtree(p) if p.is_dir() else p.unlink()
        killed = _strace(args, inject + [f"{name}:signal=KILL:when={n}"])
        where = f"killed at {name} #{n}"
        tally["cases"] += 1
        # 1. the store path: the input or the repaired store, complete; empty only between the two
        #    renames of a swap without exchange, the journal there
        if store.exists():
            now = snapshot(store)
            assert now == want_input or _content(store) == want_repaired, where
        else:
            assert not exchange and (base / "store.apply").exists(), where
            with pytest.raises(StoreReaderError, match="an --apply was interrupted between two renames"):
                open_store(store)
            tally["store path empty between two renames, the journal naming it"] += 1
        # 2. the backup: absent or complete; a temporary one marked incomplete
        if backup.exists():
            assert snapshot(backup) == want_input, where
        for p in backup_dir.iterdir():
            if p.name.startswith("backup.tmp-") and not (p / ".backup-incomplete").exists():
                # unmarked: checked complete, killed before its rename
                assert {k: v for k, v in snapshot(p).items() if k != "."} == \
                    {k: v for k, v in want_input.items() if k != "."}, where
        # 3. the input complete somewhere
        assert any(p.exists() and snapshot(p) == want_input
                   for p in (store, backup, out, base / "store.apply-old")), where
        # the next run finishes it (or, killed before the journal, there was nothing to do)
        rerun = subprocess.run([sys.executable, "-c", _FINISH, str(store), str(out), str(backup)], capture_output=True, text=True,
                               env=dict(os.environ, PYTHONPATH=ROOT), timeout=120)
        assert rerun.returncode == 0, (where, rerun.stderr)
        if rerun.stdout.strip() == "nothing to finish" and not backup.exists():
            # killed before the journal was written: nothing changed
            assert snapshot(store) == want_input and _content(out) == want_repaired, where
            tally["before the journal: nothing changed"] += 1
        elif rerun.stdout.strip() == "nothing to finish":
            # killed after the journal was removed: done
            assert _content(store) == want_repaired and snapshot(backup) == want_input, where
            tally["after the journal: done"] += 1
        else:
            assert rerun.stdout.startswith(("finished", "removed")), (where, rerun.stdout)
            assert _content(store) == want_repaired and snapshot(backup) == want_input, where
            assert not out.exists(), where
            tally["finished by the next run"] += 1
        left = sorted({p.name for d in (base, backup_dir) for p in d.iterdir()} - {"backup"})
        assert left in (["store"], ["out", "store"]), (where, left)
        tally["killed" if killed.returncode == -9 or "KILL" in killed.stderr else "ran to the end"] += 1
        tally["promises kept"] += 1
    return tally


pytestmark = [pytest.mark.spark, pytest.mark.slow,
              pytest.mark.skipif(STRACE is None, reason="strace is not installed (scripts/test.sh installs it)")]


@pytest.mark.parametrize("exchange", [True, False], ids=["exchange", "no-exchange"])
def test_apply_killed_at_every_change_same_filesystem(repaired_reference, tmp_path, exchange):
    started = time.monotonic()
    tally = _campaign(tmp_path, repaired_reference, tmp_path / "case", exchange)
    print(f"same filesystem, {'with' if exchange else 'without'} exchange: {dict(tally)}, "
          f"{time.monotonic() - started:.0f}s")
    assert tally["cases"] == tally["promises kept"]


@pytest.mark.parametrize("exchange", [True, False], ids=["exchange", "no-exchange"])
def test_apply_killed_at_every_change_backup_on_another_filesystem(repaired_reference, tmp_path, tmpfs,
                                                                   exchange):
    started = time.monotonic()
    tally = _campaign(tmp_path, repaired_reference, tmpfs, exchange)
    print(f"backup on a tmpfs, {'with' if exchange else 'without'} exchange: {dict(tally)}, "
          f"{time.monotonic() - started:.0f}s")
    assert tally["cases"] == tally["promises kept"]


# -- the real job, killed during --apply as the operator did, then run again --------------

@pytest.mark.parametrize("syscall, nth, elsewhere, in_apply", [
    ("unlinkat", 30, True, True),      # issue 40's first case: deleting the input's copy after the swap
    ("renameat2", 1, False, True),     # the exchange, same filesystem: the journal written, no swap yet
], ids=["unlinkat30-tmpfs", "exchange-same"])
def test_the_job_killed_during_apply_finishes_when_run_again(repaired_reference, tmp_path, syscall, nth,
                                                             elsewhere, in_apply, request):
    """The driver killed by the kernel at a syscall (its own calls only: the JVM is not traced),
    then the same command run again."""
    case, repaired = repaired_reference
    backup_dir = request.getfixturevalue("tmpfs") if elsewhere else tmp_path
    store, out, backup = tmp_path / "store", tmp_path / "out", backup_dir / "backup"
    shutil.copytree(support.input_store(*case), store, symlinks=True)
    want_input = snapshot(store)
    want_repaired = {k: v for k, v in _content(repaired).items() if k != "MANIFEST.json"}
    cmd = ["-m", "jobs.recover", "--store", str(store), "--broker-config", str(support.broker_conf(*case)),
           "--out", str(out), "--apply", "--backup", str(backup)]
    env = dict(os.environ, PYTHONPATH=ROOT, PYSPARK_PYTHON=sys.executable)
    killed = subprocess.run([STRACE, "-qq", "-o", "/dev/null", "-e", f"trace={syscall}",
                             "-e", f"inject={syscall}:signal=KILL:when={nth}", sys.executable, *cmd],
                            capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
    assert killed.returncode != 0, killed.stderr
    # at the kill: the store is the input or the repaired store, complete; the backup complete or absent
    if store.exists():
        assert snapshot(store) == want_input or \
            {k: v for k, v in _content(store).items() if k != "MANIFEST.json"} == want_repaired
    else:
        assert (tmp_path / "store.apply").exists()
    assert not backup.exists() or snapshot(backup) == want_input
    # the same command again: finished (or, killed before the swap began, run again) on its own
    again = subprocess.run([sys.executable, *cmd], capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
    assert again.returncode == 0, again.stderr
    assert again.stdout.startswith("finished an interrupted --apply") == in_apply, again.stdout
    assert {k: v for k, v in _content(store).items() if k != "MANIFEST.json"} == want_repaired
    assert snapshot(backup) == want_input
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "tmpfs") == \
        (["backup", "store"] if not elsewhere else ["store"])
