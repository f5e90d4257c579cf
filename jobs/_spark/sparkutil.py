"""The Spark plumbing the jobs share: the session (local by default, configured from
``spark-conf/``; the driver JVM's class-data-sharing archive, ``jobs._spark.cds``, when one was built),
and passes run side by side on a thread pool with their Spark jobs in one job group (errors raised
inside Spark tasks are turned back into the package's own by ``jobs._spark.taskerrors``).
"""
from __future__ import annotations

import atexit
import contextlib
import functools
import importlib
import logging
import os
import re
import shutil
import sys
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from jobs._spark import cds, sparkjars, stopping
from jobs import console
from jobs._spark.taskerrors import quiet_task_failures
from store_reader.repair import publish

SPARK_CONF_DIR = Path(__file__).resolve().parent.parent.parent / "spark-conf"
JAVA_OPTIONS = "spark.driver.extraJavaOptions"
LOCAL_DIR_KIND = "rocketmq-spark-"


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
    console.separate_streams()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("py4j").setLevel(logging.WARNING)


def get_spark(app_name: str = "rocketmq-store", conf_file: str | os.PathLike[str] | None = None,
              extra: dict[str, str] | None = None, *, session: bool = True):
    """Return the active SparkSession or build one; ``session=False``: a :class:`JobSpark`.

    Under ``spark-submit`` the session already carries the cluster's settings, so only the app name
    is set. Embedded (``python -m jobs.x``, tests) the settings come from ``spark-conf/local.conf``
    (or ``conf_file``) plus ``extra``, Python workers use this interpreter (otherwise they may
    start another Python that lacks this project's packages), and the driver JVM uses the
    class-data-sharing archive when there is one (``jobs._spark.cds``).
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    # no session before pyspark is imported: a job's mistakes are found without importing it
    if "pyspark.sql" in sys.modules:
        from pyspark.sql import SparkSession

        active = SparkSession.getActiveSession()
        if active is not None:
            return active
    if not session:
        return JobSpark(functools.partial(_context, app_name, conf_file, extra))
    from pyspark.sql import SparkSession

    _context(app_name, conf_file, extra)
    return SparkSession.builder.getOrCreate()


def _context(app_name: str, conf_file: str | os.PathLike[str] | None, extra: dict[str, str] | None):
    """Start the SparkContext (``get_spark``'s settings), the JVM's start-up lines kept off the
    console (``jobs.console``)."""
    from pyspark import SparkConf, SparkContext

    conf = SparkConf().setAppName(app_name)
    if "SPARK_SUBMIT_OPTS" not in os.environ and not os.environ.get("SPARK_ENV_LOADED"):
        conf.setAll(list(embedded_settings(conf_file, extra).items()))
        # spark-submit's launcher is a JVM of its own that only prints the driver's command line:
        # the JIT's C1 tier is all it needs (benchmarks/README.md)
        os.environ.setdefault("SPARK_LAUNCHER_OPTS", "-XX:TieredStopAtLevel=1")
        # Spark's loggers at WARN and its start-up lines off, as under spark-submit (a system
        # property: the class-data-sharing archive checks the class path, not these)
        options = conf.get(JAVA_OPTIONS) or ""
        if "log4j2.configurationFile" not in options:
            log4j = (SPARK_CONF_DIR / "log4j2.properties").as_uri()
            conf.set(JAVA_OPTIONS, f"{options} -Dlog4j2.configurationFile={log4j}".strip())
    elif "log4j2.configurationFile" not in (conf.get(JAVA_OPTIONS) or ""):
        # spark-submit without spark-conf/log4j2.properties: Spark's INFO lines (~450 a run) off
        # from the context's start on, unless the submit asks for them
        conf.setIfMissing("spark.log.level", "WARN")
    # pyspark's first py4j call, once the JVM is up, imports pyspark.testing.utils and pandas with
    # it (NumpyArrayConverter): imported here while this thread waits for the JVM to start
    threading.Thread(target=importlib.import_module, args=("pyspark.testing.utils",),
                     name="pyspark-imports", daemon=True).start()
    conf.setIfMissing("spark.ui.showConsoleProgress", console.progress_bar())
    started = time.monotonic()
    with stopping.deferred(), console.quiet_jvm_start():
        sc = SparkContext.getOrCreate(conf)
        stopping.install()          # pyspark's context replaced the SIGINT handler with its own
    stopping.hold_accumulator_errors(sc)
    quiet_task_failures(sc)
    logging.getLogger("jobs._spark.sparkutil").info("spark started in %.2fs (%s, %d cores)", time.monotonic() - started,
                                             sc.master, sc.defaultParallelism)
    return sc


class JobSpark:
    """A batch job's Spark: its SparkContext once a pass needs it, a SparkSession only once
    something asks.

    Nothing starts before the first use: a job checks its input and outputs first, so a mistake is
    reported before the JVM starts (in a fraction of the time). The recovery, audit and replica
    jobs run RDD tasks; they use a SparkSession only to hand rows to delta-spark's writer. Spark 4
    spends about a second of driver JVM time building one (it registers its ML functions through
    Scala reflection), on every run's critical path. Anything but ``sparkContext`` is the
    session's, which is built on first use.
    """

    def __init__(self, start) -> None:
        self._start = start

    @functools.cached_property
    def sparkContext(self):
        return self._start()

    @functools.cached_property
    def session(self):
        from pyspark.sql import SparkSession

        self.sparkContext           # started with the job's settings first
        return SparkSession.builder.getOrCreate()

    def __getattr__(self, name: str):
        return getattr(self.session, name)

    def stop(self) -> None:
        if "session" in self.__dict__:
            self.session.stop()
        elif "sparkContext" in self.__dict__:
            self.sparkContext.stop()


@functools.cache
def _local_dir() -> str:
    """This process's directory for its sessions' ``spark.local.dir`` (each session's JVM makes
    directories of its own in it), removed when the process exits (not when a forked child does)."""
    owner = os.getpid()
    path, fd = publish.claim_work_directory(LOCAL_DIR_KIND, str(owner))

    def remove() -> None:
        if os.getpid() == owner:
            # a session still running, or its JVM (a notebook's kernel at its shutdown): the JVM
            # removes its block manager's and temporary directories as it stops and exits; removed
            # under it instead, it prints "Failed to delete: ..." with a stack trace
            with contextlib.suppress(Exception):
                stopping.stop_spark(stopped_too=True)
            shutil.rmtree(path, ignore_errors=True)
            os.close(fd)
    atexit.register(remove)
    return path


def embedded_settings(conf_file: str | os.PathLike[str] | None = None,
                      extra: dict[str, str] | None = None) -> dict[str, str]:
    """An embedded session's settings: ``conf_file`` (default ``spark-conf/local.conf``), the
    Delta and hadoop-aws jars with ``spark-conf/delta.conf`` when they are installed
    (``jobs._spark.sparkjars``) and no ``spark.jars`` is given, this
    interpreter for the Python workers, ``extra``, the driver JVM's class-data-sharing archive
    when one exists and no archive option is given already, and unless one is given, a
    ``spark.local.dir`` of this process's own (``publish.claim_work_directory``): Spark's block manager
    and scratch files go there, and when the process is killed (its JVM with it, which would have
    removed its own) the next session removes them."""
    settings = read_conf(conf_file or SPARK_CONF_DIR / "local.conf")
    jars = sparkjars.jars()
    if jars and "spark.jars" not in settings and "spark.jars" not in (extra or {}):
        settings["spark.jars"] = ",".join(jars)
        settings.update(read_conf(SPARK_CONF_DIR / "delta.conf"))
    settings.setdefault("spark.pyspark.python", sys.executable)
    settings.setdefault("spark.pyspark.driver.python", sys.executable)
    settings.update(extra or {})
    if "spark.local.dir" not in settings and not os.environ.get("SPARK_LOCAL_DIRS"):
        settings["spark.local.dir"] = _local_dir()
    archive = cds.archive_path()
    options = settings.get(JAVA_OPTIONS, "")
    if archive is not None and cds.archive_ready(archive) and "Archive" not in options:
        settings[JAVA_OPTIONS] = f"{options} -XX:SharedArchiveFile={archive}".strip()
    return settings


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
    from py4j.protocol import Py4JError

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if stopping.jvm_gone():
            return      # a signal to the process group ended it: its workers end with their daemon
        try:
            tracker = spark.sparkContext.statusTracker()
            stages = [sid for job in tracker.getJobIdsForGroup(group)
                      for sid in (getattr(tracker.getJobInfo(job), "stageIds", None) or [])]
            if all(getattr(tracker.getStageInfo(sid), "numActiveTasks", 0) == 0 for sid in stages):
                return
        except (Py4JError, OSError):
            if stopping.jvm_gone() or stopping.received():
                return  # the JVM went while it was asked
            raise
        time.sleep(0.05)
    logging.getLogger("jobs._spark.sparkutil").warning("tasks of %s still running after %.0fs", group, timeout)


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

    def wait(self, event: threading.Event | None) -> None:
        """Wait for ``event`` (None: nothing to wait for), stopping as soon as another pass
        failed."""
        while event is not None and not event.wait(0.05):
            self.check()
        self.check()

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
