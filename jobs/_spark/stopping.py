"""A job stopped by a signal (Ctrl-C's SIGINT, SIGTERM): one line and the cleanup of a failed run.

Every job's ``main`` runs under ``exits_on_signals`` (``jobs._spark.taskerrors.reports_store_errors``
applies it; ``jobs.dump`` directly):
SIGINT and SIGTERM raise ``Stopped`` in the main thread, so the run unwinds as on a failure (its
temporary output, its lock, its scan directory removed by the code that made them), then its Spark
context and driver JVM are stopped (``stop_spark``: no JVM left behind, no task's error logged) and
``main`` returns 128 + the signal's number after one ``error:`` line. Py4J's and pyspark's logging
of the calls the signal broke is silenced from the signal on: those calls failing is the stop, not
news. A second signal while stopping is ignored (the first one's cleanup finishes).
"""
from __future__ import annotations

import functools
import logging
import signal
import sys
import threading
import time
import traceback
from contextlib import contextmanager
from typing import Callable, Iterator

SIGNALS = (signal.SIGINT, signal.SIGTERM)
# how long the driver JVM gets to exit once its stdin (pyspark's lifeline) is closed
JVM_EXIT_SECONDS = 20.0


class Stopped(BaseException):
    """The job got ``signum``: raised in the main thread, wherever it was."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


_received: list[int] = []
_active = threading.Event()


# A SIGTERM to the process group ends the driver JVM at once: the threads talking to it fail (and
# py4j and pyspark's accumulator server print it) before the main thread, which may be blocked on
# the JVM's socket until the JVM has exited, gets to the signal's handler. Their complaints are
# held until either the job is stopping or the JVM is gone (both: the stop explains them, or the
# job's own error will), at most this long, and only then printed.
HOLD_SECONDS = 10.0


def jvm_gone() -> bool:
    """The driver JVM has exited (a signal to the process group reaches it too)."""
    if "pyspark" not in sys.modules:
        return False
    from pyspark import SparkContext

    proc = getattr(SparkContext._gateway, "proc", None)
    return proc is not None and proc.poll() is not None


def _after_hold(complain) -> None:
    """``complain()`` once it is clear that neither a stop signal nor the JVM's end explains it."""
    def later() -> None:
        deadline = time.monotonic() + HOLD_SECONDS
        while time.monotonic() < deadline:
            if _received or jvm_gone():
                return
            time.sleep(0.05)
        complain()
    threading.Thread(target=later, name="held-complaint", daemon=True).start()


class _Quiet(logging.Filter):
    """py4j's records (it logs on the root logger too): dropped once the job is stopping, held a
    moment before (``HOLD_SECONDS``)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "held", False) or not ("py4j" in record.pathname or record.name.startswith("py4j")):
            return True
        if not _received:
            record.held = True
            _after_hold(lambda: logging.getLogger(record.name).handle(record))
        return False


class _Py4jRecords(logging.Filter):
    """Drops py4j's records (``stop_spark`` while the JVM goes away)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not ("py4j" in record.pathname or record.name.startswith("py4j"))


def hold_accumulator_errors(sc) -> None:
    """pyspark's accumulator server (a thread of the driver) prints the traceback of a connection
    the JVM dropped: held a moment like py4j's logging, dropped when the job is stopping."""
    server = getattr(sc, "_accumulatorServer", None)
    if server is None:
        return
    def handle_error(request, address) -> None:
        text = f"error on the accumulator connection from {address}:\n{traceback.format_exc()}"
        _after_hold(lambda: print(text, file=sys.stderr, end=""))
    server.handle_error = handle_error


_deferring = threading.Event()


def _on_signal(signum: int, frame) -> None:
    if _received:
        return                      # already stopping: let the first one's cleanup finish
    _received.append(signum)
    if not _deferring.is_set():
        raise Stopped(signum)


@contextmanager
def deferred() -> Iterator[None]:
    """A stop signal during the block is raised at its end: for the start of the driver JVM,
    which pyspark cannot interrupt without leaving the JVM running for ever (its connection file's
    directory removed under it, the JVM never learns of the driver's end). A KeyboardInterrupt
    from pyspark's own SIGINT handler, installed by the context before ``install`` replaces it,
    counts as the SIGINT it is."""
    _deferring.set()
    try:
        yield
    except KeyboardInterrupt:
        if _active.is_set() and not _received:
            _received.append(signal.SIGINT)
        if not _received:
            raise
    finally:
        _deferring.clear()
    if _active.is_set() and _received:
        raise Stopped(_received[0])


def install() -> None:
    """(Re)install the handlers while a job runs under ``stops_on_signals``: pyspark's
    SparkContext replaces SIGINT's with its own (which logs py4j's broken call), so the session
    calls this again once it is made (``jobs._spark.sparkutil.get_spark``)."""
    if _active.is_set() and threading.current_thread() is threading.main_thread():
        for s in SIGNALS:
            signal.signal(s, _on_signal)


def received() -> Stopped | None:
    """The stop, once a signal came (whatever exception the unwinding ended with)."""
    return Stopped(_received[0]) if _received else None


@contextmanager
def stops_on_signals() -> Iterator[None]:
    """SIGINT and SIGTERM raise ``Stopped`` while the block runs (main thread only; the
    handlers before are restored after)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = {s: signal.getsignal(s) for s in SIGNALS}
    quiet = _Quiet()
    logging.getLogger().addFilter(quiet)
    for name in ("py4j", "py4j.java_gateway", "py4j.clientserver"):
        logging.getLogger(name).addFilter(quiet)
    _received.clear()
    _active.set()
    install()
    try:
        yield
    finally:
        _active.clear()
        for s, h in before.items():
            signal.signal(s, h)
        logging.getLogger().removeFilter(quiet)
        for name in ("py4j", "py4j.java_gateway", "py4j.clientserver"):
            logging.getLogger(name).removeFilter(quiet)


def stop_spark(stopped_too: bool = False) -> None:
    """Stop the active SparkContext and its driver JVM, waiting for the JVM to exit (it would
    otherwise outlive this process, or die mid-task printing Java stack traces). ``stopped_too``:
    also the JVM of a context stopped already (a notebook's ``spark.stop()``), which lives on
    until this process exits and then deletes Spark's directories in its shutdown hooks."""
    if "pyspark" not in sys.modules:
        return
    from pyspark import SparkContext

    from jobs._spark.taskerrors import clear_progress_bar, quiet_scheduler_stop

    sc = SparkContext._active_spark_context
    if sc is None and not stopped_too:
        return
    proc = getattr(SparkContext._gateway, "proc", None)
    # a JVM that is gone, or going (a signal to the process group, or the stop itself while a
    # pass's thread still calls it), cannot be asked; it is stopped anyway: neither the error nor
    # py4j's log of it (on the root logger) is news
    drop = _Py4jRecords()
    loggers = [logging.getLogger(n) for n in ("", "py4j", "py4j.java_gateway", "py4j.clientserver")]
    for lg in loggers:
        lg.addFilter(drop)
    try:
        if sc is not None and (proc is None or proc.poll() is None):
            try:
                clear_progress_bar()
                quiet_scheduler_stop(sc)
                sc.stop()
            except BaseException:
                pass
        if proc is not None and proc.poll() is None:
            try:
                proc.stdin.close()      # the gateway's lifeline: the JVM exits when it closes
                proc.wait(JVM_EXIT_SECONDS)
            except BaseException:
                proc.kill()
                proc.wait()
    finally:
        for lg in loggers:
            lg.removeFilter(drop)
    client = getattr(SparkContext._gateway, "_gateway_client", None)
    if client is not None and proc is not None and proc.poll() is not None:
        # the JVM is gone: a Java object's Python proxy freed later (at the interpreter's exit
        # too) would ask it to free the object, and py4j logs the dead connection on the root
        # logger; a client that is not connected skips that silently
        client.is_connected = False
    if stopped_too:                 # the next session launches a JVM of its own
        SparkContext._gateway = SparkContext._jvm = None


def exits_on_signals(main: Callable[..., int]) -> Callable[..., int]:
    """Decorator of a job's ``main`` (``jobs._spark.taskerrors.reports_store_errors`` applies it): a stop
    signal ends the run as a failure does (whatever exception the unwinding ends with), then
    stops Spark, prints one line and returns 128 + the signal's number."""
    @functools.wraps(main)
    def run(*args, **kwargs) -> int:
        with stops_on_signals():
            try:
                return main(*args, **kwargs)
            except BaseException:
                stop = received()
                if stop is None:
                    raise
            stop_spark()            # its calls to a JVM that is gone are logged: still quiet here
        return _report(stop)
    return run


def _report(stop: Stopped) -> int:
    """The one line a stopped job prints; its exit code."""
    print(f"error: stopped by {signal.Signals(stop.signum).name}; what the run had not finished is removed",
          file=sys.stderr)
    return stop.exit_code
