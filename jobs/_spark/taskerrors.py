"""Errors raised inside Spark tasks, turned back into the package's own in one place
(``store_error``), and each job's ``main`` reporting them as one line and exit 2
(``reports_store_errors``).
"""
from __future__ import annotations

import functools
import logging
import sys
from typing import Callable

from jobs._spark import stopping
from store_reader.exceptions import StoreReaderError


def store_error(exc: BaseException) -> StoreReaderError | None:
    """``exc`` as the package's own error, or None when it is not one: the one place that turns
    what a Spark task raised back into it.

    A task's error reaches the driver as text, its Python traceback inside a ``Py4JJavaError``
    (RDD jobs) or a ``PythonException`` (data source reads): the ``StoreReaderError`` is rebuilt
    from the note it carries (``StoreReaderError.from_text``: class, file, byte, reason); an
    ``OSError`` a task raised (a write on a full disk) becomes one naming its file. Each job's
    ``main`` reports what this returns through ``reports_store_errors``.
    """
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, StoreReaderError):
            return exc
        if _from_spark(exc):
            clear_progress_bar()
            found = StoreReaderError.from_text(_error_text(exc))
            if found is not None:
                return found
        exc = exc.__cause__ or exc.__context__
    return None


def reports_store_errors(what: str = "") -> Callable[[Callable[..., int]], Callable[..., int]]:
    """Decorator of a job's ``main``: an error that is the input's or the output's fault
    (``store_error``, wherever it was raised, in a Spark task included) is printed as one line,
    ``error: <what><error>`` on stderr, and ``main`` returns exit code 2; anything else is raised
    with its trace. A stop signal (``jobs._spark.stopping``) ends the run as a failure does, then stops
    Spark, prints one line and returns 128 + the signal's number."""
    def wrap(main: Callable[..., int]) -> Callable[..., int]:
        @functools.wraps(main)
        @stopping.exits_on_signals
        def run(*args, **kwargs) -> int:
            try:
                return main(*args, **kwargs)
            except Exception as exc:
                error = store_error(exc) if stopping.received() is None else None
                if error is None:
                    raise
                print(f"error: {what}{error}", file=sys.stderr)
                return 2
        return run
    return wrap


# Loggers that print a failed task's whole Python traceback (the executor's, once per task attempt,
# and the scheduler's "Lost task" warning): the driver gets the same error and the job prints it.
TASK_FAILURE_LOGGERS = ("org.apache.spark.executor.Executor", "org.apache.spark.scheduler.TaskSetManager")


# The scheduler, once the context is stopping: a task of a failed run that ends while the context
# stops (a killed Python worker reports late) reaches a result pool already shut down, and the
# scheduler logs "Exception in statusUpdate" with a Java trace. The run's own error is printed.
SCHEDULER_STOP_LOGGERS = ("org.apache.spark.scheduler.TaskSchedulerImpl",)


def quiet_task_failures(sc) -> None:
    """Turn off the driver JVM's logging of failed tasks (in local mode the executors' too): a
    job reports a bad input in one line (``store_error``), and an unexpected failure is raised
    with its full trace anyway."""
    _logging_off(sc, TASK_FAILURE_LOGGERS)


def quiet_scheduler_stop(sc) -> None:
    """Turn off the scheduler's logging for the context's stop (``SCHEDULER_STOP_LOGGERS``)."""
    _logging_off(sc, SCHEDULER_STOP_LOGGERS)


def _logging_off(sc, names: tuple[str, ...]) -> None:
    try:
        jvm = sc._jvm
        off = jvm.org.apache.logging.log4j.Level.OFF
        for name in names:
            jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(name, off)
    except Exception as exc:  # a JVM without log4j 2 core: only the console gets noisier
        logging.getLogger("jobs._spark.sparkutil").debug("logging of %s left on: %s", names, exc)


def clear_progress_bar() -> None:
    """End the console progress bar of the active SparkContext (it may stand mid-line on stderr
    when a job fails), so that the job's error line starts a line of its own: on a terminal the
    bar's line is blanked (the cursor back at its start), in a log file it is ended with a newline
    (a carriage return does not start a line there)."""
    from pyspark import SparkContext

    sc = SparkContext._active_spark_context
    try:
        bar = sc._jsc.sc().progressBar() if sc is not None else None
        if bar is not None and bar.isDefined():
            bar.get().finishAll()
            if not sys.stderr.isatty():
                print(file=sys.stderr)
    except Exception:  # py4j: a JVM that is gone has no bar either
        pass


def _from_spark(exc: BaseException) -> bool:
    """True for the exception types Spark and py4j wrap a task's failure in."""
    return any(c.__module__.startswith(("py4j", "pyspark")) for c in type(exc).__mro__)


def _error_text(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception:  # py4j asks the JVM for the text: a JVM that is gone has none to give
        return " ".join(map(str, exc.args))
