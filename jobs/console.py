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

# printed by the java launcher for Spark's --add-modules, before log4j exists
JVM_NOISE = re.compile(rb"^WARNING: Using incubator modules: ")


def under_spark_submit() -> bool:
    """The driver JVM started this Python (``spark-submit``), not the other way round."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def separate_streams() -> None:
    """Under ``spark-submit``, point stderr (fd 2) back at the JVM's own stderr when Spark merged
    it into stdout. Anywhere else, or when the JVM's stderr cannot be reopened (not Linux, a
    socket), nothing changes."""
    if not under_spark_submit():
        return
    try:
        out, err = os.fstat(1), os.fstat(2)
        if (out.st_dev, out.st_ino) != (err.st_dev, err.st_ino) or not stat.S_ISFIFO(err.st_mode):
            return
        fd = os.open(f"/proc/{os.getppid()}/fd/2", os.O_WRONLY | os.O_APPEND)
    except OSError:
        return
    sys.stderr.flush()
    os.dup2(fd, 2)
    os.close(fd)


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
    """Copy ``read`` to ``dest`` line by line, dropping ``JVM_NOISE``; a partial line holding a
    carriage return (Spark's progress bar redrawing itself) is passed on at once."""
    pending = b""
    while True:
        try:
            chunk = os.read(read, 65536)
        except OSError:
            return
        if not chunk:
            break
        *lines, pending = (pending + chunk).split(b"\n")
        out = [line + b"\n" for line in lines if not JVM_NOISE.match(line)]
        if b"\r" in pending:
            out.append(pending)
            pending = b""
        if out and not _write_all(dest, b"".join(out)):
            return
    _write_all(dest, pending)


def _write_all(fd: int, data: bytes) -> bool:
    try:
        while data:
            data = data[os.write(fd, data):]
    except OSError:
        return False
    return True


def parser(prog: str, doc: str | None, exit_codes: str, example: str) -> argparse.ArgumentParser:
    """A job's argument parser: the first line of its docstring as description (without reST
    markup), then after the options its exit codes and one example."""
    first = re.sub(r"``(.*?)``", r"\1", (doc or "").strip().split("\n")[0])
    epilog = textwrap.fill(f"exit codes: {exit_codes}", 78, subsequent_indent="  ")
    return argparse.ArgumentParser(prog=prog, description=first,
                                   epilog=f"{epilog}\n\nexample:\n  {example}",
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
