"""The Spark plumbing the jobs share: the session (local by default, configured from
``spark-conf/``; the driver JVM's class-data-sharing archive, ``jobs.cds``, when one was built),
errors raised inside Spark tasks turned back into the package's own, and passes run side by side
on a thread pool with their Spark jobs in one job group.
"""
from __future__ import annotations

import functools
import importlib
import logging
import os
import re
import sys
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Callable

from jobs import cds
from store_reader.exceptions import StoreReaderError

SPARK_CONF_DIR = Path(__file__).resolve().parent.parent / "spark-conf"
JAVA_OPTIONS = "spark.driver.extraJavaOptions"


def read_conf(path: str | os.PathLike[str]) -> dict[str, str]:
    """A Spark properties file (``key value`` or ``key=value`` per line, ``#`` comments)."""
    out: dict[str, str] = {}
    with open(path, encoding="utf-8") as fh:
        for raw in fh:
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            m = re.match(r"(\S+?)\s*[=\s]\s*(.*)$", line)
            if m:
                out[m.group(1)] = m.group(2).strip()
    return out


def configure_logging() -> None:
    """The jobs' log on stderr: their own lines at INFO, py4j's at WARNING (at INFO it logs a line
    each time one of its connections closes, which interleaves with the jobs' pass lines)."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("py4j").setLevel(logging.WARNING)


def get_spark(app_name: str = "rocketmq-store", conf_file: str | os.PathLike[str] | None = None,
              extra: dict[str, str] | None = None, *, session: bool = True):
    """Return the active SparkSession or build one; ``session=False``: a :class:`JobSpark`.

    Under ``spark-submit`` the session already carries the cluster's settings, so only the app name
    is set. Embedded (``python -m jobs.x``, tests) the settings come from ``spark-conf/local.conf``
    (or ``conf_file``) plus ``extra``, Python workers use this interpreter (otherwise they may
    start another Python that lacks this project's packages), and the driver JVM uses the
    class-data-sharing archive when there is one (``jobs.cds``).
    """
    from pyspark import SparkConf, SparkContext
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    conf = SparkConf().setAppName(app_name)
    if "SPARK_SUBMIT_OPTS" not in os.environ and not os.environ.get("SPARK_ENV_LOADED"):
        conf.setAll(list(embedded_settings(conf_file, extra).items()))
    elif "log4j2.configurationFile" not in (conf.get(JAVA_OPTIONS) or ""):
        # spark-submit without spark-conf/log4j2.properties: Spark's INFO lines (~450 a run) off
        # from the context's start on, unless the submit asks for them
        conf.setIfMissing("spark.log.level", "WARN")
    # pyspark's first py4j call, once the JVM is up, imports pyspark.testing.utils and pandas with
    # it (NumpyArrayConverter): imported here while this thread waits for the JVM to start
    threading.Thread(target=importlib.import_module, args=("pyspark.testing.utils",),
                     name="pyspark-imports", daemon=True).start()
    sc = SparkContext.getOrCreate(conf)
    quiet_task_failures(sc)
    return SparkSession.builder.getOrCreate() if session else JobSpark(sc)


class JobSpark:
    """A batch job's Spark: its SparkContext at once, a SparkSession only once something asks.

    The recovery, audit and replica jobs run RDD tasks; they use a SparkSession only to hand rows
    to delta-spark's writer. Spark 4 spends about a second of driver JVM time building one (it
    registers its ML functions through Scala reflection), on every run's critical path. Anything
    but ``sparkContext`` is the session's, which is built on first use.
    """

    def __init__(self, sc) -> None:
        self.sparkContext = sc

    @functools.cached_property
    def session(self):
        from pyspark.sql import SparkSession

        return SparkSession.builder.getOrCreate()

    def __getattr__(self, name: str):
        return getattr(self.session, name)

    def stop(self) -> None:
        if "session" in self.__dict__:
            self.session.stop()
        else:
            self.sparkContext.stop()


def embedded_settings(conf_file: str | os.PathLike[str] | None = None,
                      extra: dict[str, str] | None = None) -> dict[str, str]:
    """An embedded session's settings: ``conf_file`` (default ``spark-conf/local.conf``), this
    interpreter for the Python workers, ``extra``, and the driver JVM's class-data-sharing archive
    when one exists and no archive option is given already."""
    settings = read_conf(conf_file or SPARK_CONF_DIR / "local.conf")
    settings.setdefault("spark.pyspark.python", sys.executable)
    settings.setdefault("spark.pyspark.driver.python", sys.executable)
    settings.update(extra or {})
    archive = cds.archive_path()
    options = settings.get(JAVA_OPTIONS, "")
    if archive is not None and cds.archive_ready(archive) and "Archive" not in options:
        settings[JAVA_OPTIONS] = f"{options} -XX:SharedArchiveFile={archive}".strip()
    return settings


# -- errors raised inside Spark tasks ----------------------------------------------------------------

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
            _clear_progress_bar()
            found = StoreReaderError.from_text(_error_text(exc))
            if found is not None:
                return found
        exc = exc.__cause__ or exc.__context__
    return None


def reports_store_errors(what: str = "") -> Callable[[Callable[..., int]], Callable[..., int]]:
    """Decorator of a job's ``main``: an error that is the input's or the output's fault
    (``store_error``, wherever it was raised, in a Spark task included) is printed as one line,
    ``error: <what><error>`` on stderr, and ``main`` returns exit code 2; anything else is raised
    with its trace."""
    def wrap(main: Callable[..., int]) -> Callable[..., int]:
        @functools.wraps(main)
        def run(*args, **kwargs) -> int:
            try:
                return main(*args, **kwargs)
            except Exception as exc:
                error = store_error(exc)
                if error is None:
                    raise
                print(f"error: {what}{error}", file=sys.stderr)
                return 2
        return run
    return wrap


# Loggers that print a failed task's whole Python traceback (the executor's, once per task attempt,
# and the scheduler's "Lost task" warning): the driver gets the same error and the job prints it.
TASK_FAILURE_LOGGERS = ("org.apache.spark.executor.Executor", "org.apache.spark.scheduler.TaskSetManager")


def quiet_task_failures(sc) -> None:
    """Turn off the driver JVM's logging of failed tasks (in local mode the executors' too): a
    job reports a bad input in one line (``store_error``), and an unexpected failure is raised
    with its full trace anyway."""
    try:
        jvm = sc._jvm
        off = jvm.org.apache.logging.log4j.Level.OFF
        for name in TASK_FAILURE_LOGGERS:
            jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(name, off)
    except Exception as exc:  # a JVM without log4j 2 core: only the console gets noisier
        logging.getLogger("jobs.sparkutil").debug("task failure logging left on: %s", exc)


def _clear_progress_bar() -> None:
    """End the console progress bar of the active SparkContext (it may stand mid-line on stderr
    when a job fails), so that the job's error line starts a line of its own."""
    from pyspark import SparkContext

    sc = SparkContext._active_spark_context
    try:
        bar = sc._jsc.sc().progressBar() if sc is not None else None
        if bar is not None and bar.isDefined():
            bar.get().finishAll()
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


# -- passes side by side: threads, their Spark jobs in one job group -----------------------------------

class Cancelled(Exception):
    """Another pass of the run failed: this one stopped early."""


def join_job_group(spark, group: str | None) -> None:
    """Run this thread's Spark jobs in ``group``, so that ``cancel_job_group`` stops them."""
    if group is not None:
        spark.sparkContext.setJobGroup(group, f"rocketmq {group}", interruptOnCancel=True)


def cancel_job_group(spark, group: str) -> None:
    """Cancel ``group``'s running jobs and every job it submits later (Spark 4's
    ``cancelJobGroupAndFutureJobs``: a pass between two jobs stops at the next one); older
    Spark: the running jobs."""
    from py4j.protocol import Py4JError

    try:
        spark.sparkContext._jsc.sc().cancelJobGroupAndFutureJobs(group)
    except Py4JError:
        spark.sparkContext.cancelJobGroup(group)


def await_tasks(spark, group: str, timeout: float = 120.0) -> None:
    """Wait until no task of ``group``'s jobs runs any more. A cancelled or failed job returns to
    its caller at once while its running tasks end a little later (a killed Python worker after
    ``spark.python.task.killTimeout``): their output may only be removed after that."""
    tracker = spark.sparkContext.statusTracker()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        stages = [sid for job in tracker.getJobIdsForGroup(group)
                  for sid in (getattr(tracker.getJobInfo(job), "stageIds", None) or [])]
        if all(getattr(tracker.getStageInfo(sid), "numActiveTasks", 0) == 0 for sid in stages):
            return
        time.sleep(0.05)
    logging.getLogger("jobs.sparkutil").warning("tasks of %s still running after %.0fs", group, timeout)


class Passes:
    """Passes running side by side on a thread pool, their Spark jobs in one job group: the first
    failure stops the others (``cancel`` for the driver-side work between files, the job group for
    Spark) and is the one raised, not the cancellations it caused."""

    def __init__(self, spark, pool: ThreadPoolExecutor, group: str, cancel: threading.Event) -> None:
        self.spark, self.pool, self.group, self.cancel = spark, pool, group, cancel
        self.failure: BaseException | None = None
        self._lock = threading.Lock()

    def check(self) -> None:
        if self.cancel.is_set():
            raise Cancelled("another pass of the run failed")

    def fail(self, exc: BaseException) -> None:
        """Record a pass's failure; the first one stops the others."""
        with self._lock:
            first, self.failure = self.failure is None, self.failure or exc
        if first:
            self.cancel.set()
            cancel_job_group(self.spark, self.group)

    def submit(self, fn, *args) -> Future:
        def run():
            join_job_group(self.spark, self.group)
            try:
                return fn(*args)
            except BaseException as exc:
                self.fail(exc)
                raise
        return self.pool.submit(run)

    def result(self, future: Future):
        try:
            return future.result()
        except BaseException:
            if self.failure is not None:
                raise self.failure from None
            raise
