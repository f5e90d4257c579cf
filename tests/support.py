"""Access to the real-broker fixture stores in ``../shared/fixtures`` (read-only).

Archives are extracted once per test run into a temporary directory, removed when the run ends;
nothing is ever written under ``../shared``. Every helper here is plain Python so test modules can parametrize at collection time.
"""
from __future__ import annotations

import atexit
import contextlib
import functools
import hashlib
import json
import os
import shutil
import signal
import subprocess
import tarfile
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("ROCKETMQ_SHARED", ROOT.parent / "shared"))
FIXTURES = SHARED / "fixtures"
VERSIONS = ("rocketmq-4.9.7", "rocketmq-5.3.3")

_EXTRACT_ROOT = Path(tempfile.mkdtemp(prefix="rmq-fixtures-"))
atexit.register(shutil.rmtree, _EXTRACT_ROOT, ignore_errors=True)


def scenarios(version: str | None = None) -> list[tuple[str, str]]:
    """Every (version, scenario) pair shipped in ../shared/fixtures."""
    out = []
    for v in VERSIONS if version is None else (version,):
        vdir = FIXTURES / v
        if vdir.is_dir():
            out += [(v, s.name) for s in sorted(vdir.iterdir()) if (s / "expected.json").is_file()]
    return out


def case_id(case: tuple[str, str]) -> str:
    return f"{case[0].split('-')[1]}/{case[1]}"


def fixture_dir(version: str, scenario: str) -> Path:
    return FIXTURES / version / scenario


@functools.lru_cache(maxsize=None)
def expected(version: str, scenario: str) -> dict:
    with open(fixture_dir(version, scenario) / "expected.json", encoding="utf-8") as fh:
        return json.load(fh)


def broker_conf(version: str, scenario: str) -> Path:
    return fixture_dir(version, scenario) / "broker.conf"


@functools.lru_cache(maxsize=None)
def _extract(version: str, scenario: str, which: str) -> Path:
    archive = fixture_dir(version, scenario) / f"{which}.tar.gz"
    dest = _EXTRACT_ROOT / version / scenario / which
    dest.mkdir(parents=True)
    with tarfile.open(archive) as tar:
        tar.extractall(dest, filter="data")
    (top,) = [p for p in dest.iterdir()]
    return top


def input_store(version: str, scenario: str) -> Path:
    """The damaged store exactly as handed to the broker (shared extraction: treat as read-only)."""
    return _extract(version, scenario, "input")


def expected_store(version: str, scenario: str) -> Path:
    """The store after the real broker's recovery and clean shutdown."""
    return _extract(version, scenario, "expected-store")


def tree_digest(root: Path) -> str:
    """Checksum of every file's relative path, size and bytes under ``root`` (and empty dirs)."""
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in sorted(os.walk(root)):
        dirnames.sort()
        rel = os.path.relpath(dirpath, root)
        h.update(f"D {rel}\n".encode())
        for name in sorted(filenames):
            p = os.path.join(dirpath, name)
            h.update(f"F {rel}/{name} {os.path.getsize(p)}\n".encode())
            with open(p, "rb") as fh:
                for chunk in iter(lambda: fh.read(1 << 20), b""):
                    h.update(chunk)
    return h.hexdigest()


def kill_at_pause(proc, point: str) -> None:
    """SIGKILL the process group of ``proc`` (started with ``start_new_session``, stderr piped as
    text) once it reports ``paused at <point>`` (``publish.PAUSE_ENV``)."""
    for line in proc.stderr:
        if line.strip() == f"paused at {point}":
            break
    else:
        raise AssertionError(f"the process ended (rc {proc.wait()}) before reaching {point}")
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


@contextlib.contextmanager
def mounted_tmpfs(mnt: Path, size: str):
    """A tmpfs of ``size`` mounted at ``mnt`` for the block (another filesystem, or a full one);
    the test is skipped where mounting needs root and the run is not root (CI runs as root)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root (CI runs as root)")
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mnt)], check=True)
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=True)


@contextlib.contextmanager
def scanner(pure: bool):
    """Select the scanner the driver uses (``STORE_READER_PURE``: the pure-Python twin or the native
    one) for the duration of a block."""
    old = os.environ.get("STORE_READER_PURE")
    os.environ["STORE_READER_PURE"] = "1" if pure else "0"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("STORE_READER_PURE", None)
        else:
            os.environ["STORE_READER_PURE"] = old


def scan_both(path: Path, opts, columns: list[str] | None, **kw) -> list[tuple]:
    """``commitlog.scan_segment`` of ``path`` by the pure-Python twin, then by the native scanner:
    ``[(table, summary) pure, (table, summary) native]``, intact records behind a bad one included
    (``columns`` None: the scanner's default)."""
    from store_reader.formats import commitlog

    out = []
    for pure in (True, False):
        with scanner(pure):
            out.append(commitlog.scan_segment(path, opts, columns=columns, include_lost=True, **kw))
    return out
