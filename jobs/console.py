"""A job's console: the report on stdout alone; progress, warnings and errors on stderr, without
the JVM's start-up lines.

- ``separate_streams``: under ``spark-submit`` the Python driver's stderr is its stdout (Spark's
  ``PythonRunner`` merges the two into the JVM's stdout), which would mix the pass lines and an
  ``error:`` line into the report: stderr is reopened onto the JVM's own stderr.
- ``quiet_jvm_start``: around the start of the embedded driver JVM (``python -m jobs.x``): the
  JVM's stderr passes through a filter that drops the JVM's own start-up warning (``Using
  incubator modules``, printed before any logging is set up); Spark's start-up lines are kept out
  by ``spark-conf/log4j2.properties`` (its filters), which the embedded JVM is given too.
- ``progress_bar``: Spark's live progress bar only when stderr is a terminal; otherwise the jobs'
  one line per pass is the progress.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import re
import stat
import sys
import textwrap
import threading
from typing import Iterator

from jobs._spark import stopping

# printed by the java launcher for Spark's --add-modules, before log4j exists
JVM_NOISE = re.compile(rb"^WARNING: Using incubator modules: ")


def under_spark_submit() -> bool:
    """The driver JVM started this Python (``spark-submit``), not the other way round."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def separate_streams() -> None:
    """Under ``spark-submit``, point stderr (fd 2) back at the JVM's own stderr when Spark merged
    it into stdout. Anywhere else, or when the JVM's stderr cannot be reopened (not Linux, a
    socket), nothing changes; nor for a regular file the JVM writes without O_APPEND (``> log``):
    a second opening would write at its own offset, over the JVM's lines."""
    if not under_spark_submit():
        return
    jvm = f"/proc/{os.getppid()}/fd"
    try:
        out, err = os.fstat(1), os.fstat(2)
        if (out.st_dev, out.st_ino) != (err.st_dev, err.st_ino) or not stat.S_ISFIFO(err.st_mode):
            return
        fd = _jvm_stderr()
        if fd is not None:
            sys.stderr.flush()
            os.dup2(fd, 2)
            os.close(fd)
            return
        if stat.S_ISREG(os.stat(f"{jvm}/2").st_mode):
            with open(f"{jvm.replace('/fd', '/fdinfo')}/2", encoding="ascii") as fh:
                flags = next(int(line.split()[1], 8) for line in fh if line.startswith("flags:"))
            if not flags & os.O_APPEND:
                return
        fd = os.open(f"{jvm}/2", os.O_WRONLY | os.O_APPEND)
    except (OSError, StopIteration, ValueError):
        return
    sys.stderr.flush()
    os.dup2(fd, 2)
    os.close(fd)


def _jvm_stderr() -> int | None:
    """The JVM's own stderr, its very file description (``pidfd_getfd``, Linux 5.6: the same
    offset, so lines never overwrite each other in a file), or None where the kernel or its
    ptrace policy does not allow it."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        pidfd = libc.syscall(434, os.getppid(), 0)                 # SYS_pidfd_open (x86_64, arm64)
        if pidfd < 0:
            return None
        try:
            fd = libc.syscall(438, pidfd, 2, 0)                    # SYS_pidfd_getfd
        finally:
            os.close(pidfd)
        return fd if fd >= 0 else None
    except (OSError, AttributeError):
        return None


def progress_bar() -> str:
    """``spark.ui.showConsoleProgress``: the live bar only on a terminal."""
    return "true" if sys.stderr.isatty() else "false"


@contextlib.contextmanager
def quiet_jvm_start() -> Iterator[None]:
    """Start a JVM inside: it inherits a stderr whose lines are passed on to this process's
    stderr, but for ``JVM_NOISE``. Python's own stderr is the real one again on return."""
    if under_spark_submit():        # the JVM is up already
        yield
        return
    sys.stderr.flush()
    real = os.dup(2)
    read, write = os.pipe()
    threading.Thread(target=_forward, args=(read, real), name="jvm-stderr", daemon=True).start()
    os.dup2(write, 2)
    os.close(write)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(real, 2)


def _forward(read: int, dest: int) -> None:
    """Copy ``read`` to ``dest`` line by line, dropping ``JVM_NOISE``, and everything once the job
    is stopping on a signal (the JVM got it too: its schedulers' errors as it dies are no news; the
    job prints its one line); a partial line holding a carriage return (Spark's progress bar
    redrawing itself) is passed on at once."""
    pending = b""
    while True:
        try:
            chunk = os.read(read, 65536)
        except OSError:
            return
        if not chunk:
            break
        *lines, pending = (pending + chunk).split(b"\n")
        out = [] if stopping.received() else [line + b"\n" for line in lines if not JVM_NOISE.match(line)]
        if b"\r" in pending:
            out.append(pending)
            pending = b""
        if out and not _write_all(dest, b"".join(out)):
            return
    if not stopping.received():
        _write_all(dest, pending)


def _write_all(fd: int, data: bytes) -> bool:
    try:
        while data:
            data = data[os.write(fd, data):]
    except OSError:
        return False
    return True


def parser(prog: str, doc: str | None, exit_codes: str, example: str, page: str) -> argparse.ArgumentParser:
    """A job's argument parser: the first line of its docstring as description (without reST
    markup), then after the options its exit codes, one example and its page in ``docs/`` (which
    holds the same epilog: tests/test_readme_commands.py)."""
    first = re.sub(r"``(.*?)``", r"\1", (doc or "").strip().split("\n")[0])
    epilog = textwrap.fill(f"exit codes: {exit_codes}", 78, subsequent_indent="  ")
    return argparse.ArgumentParser(prog=prog, description=first,
                                   epilog=f"{epilog}\n\nexample:\n  {example}\n\nmore: {page}",
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
