"""Build the embedded driver JVM's class-data-sharing archive for this JVM and these Spark jars.

    python -m jobs.buildcds               build it (once per machine and environment), print its path
    python -m jobs.buildcds --if-missing  the same, unless a whole archive is already in place
                                          (scripts/bootstrap.sh: the set-up of both README commands)
    python -m jobs.buildcds --path        print where it is (or that class-data sharing is off)

What the archive saves and when a session uses it: ``jobs._spark.cds``.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from jobs._spark import cds
from jobs._spark.sparkutil import JAVA_OPTIONS, get_spark


# what --path and --if-missing print when there is no archive to have (ROCKETMQ_CDS=off, no java)
OFF = "class-data sharing is off"


def build_cds_archive(path: Path | None = None) -> Path:
    """Build the archive at ``path`` (default ``cds.archive_path()``).

    1. A child process starts an embedded session whose JVM writes the classes it loaded when it
       exits (``-XX:ArchiveClassesAtExit``), recovers a small synthetic crashed store with the
       audit tables (Python tasks, shuffles, Arrow, Spark SQL: the classes a job loads), ends its
       JVM and waits for it.
    2. Another child starts a session that must map the archive (``-Xshare:on``: a JVM that cannot
       does not start) and runs a Python task.
    3. Only then is the archive put in place (``cds.install``).
    """
    path = path or cds.archive_path()
    if path is None:
        raise RuntimeError("no archive path: ROCKETMQ_CDS is off or there is no java")
    path.parent.mkdir(parents=True, exist_ok=True)
    part = path.with_name(f"{path.name}.{os.getpid()}.part")
    env = dict(os.environ, ROCKETMQ_CDS="off")
    cwd = Path(__file__).resolve().parent.parent
    try:
        subprocess.run([sys.executable, "-m", "jobs.buildcds", "--cds-workload", str(part)],
                       check=True, env=env, cwd=cwd)
        if not part.is_file() or not part.stat().st_size:
            raise RuntimeError(f"the JVM wrote no archive at {part}")
        checked = subprocess.run([sys.executable, "-m", "jobs.buildcds", "--cds-check", str(part)],
                                 env=env, cwd=cwd, capture_output=True, text=True)
        if checked.returncode != 0:
            raise RuntimeError(f"the JVM cannot map the archive it wrote ({part}):\n"
                               + checked.stderr[-2000:])
        cds.install(part, path)
    finally:
        part.unlink(missing_ok=True)
    return path


def _cds_workload(part: str) -> None:
    """Step 1 of ``build_cds_archive``."""
    from pyspark import SparkContext

    from jobs.demo import make_demo_store
    from jobs.recover import recover

    spark = get_spark("rocketmq-cds", extra={JAVA_OPTIONS: f"-XX:ArchiveClassesAtExit={part} -Xlog:cds*=error",
                                             "spark.ui.showConsoleProgress": "false"})
    with tempfile.TemporaryDirectory(prefix="rocketmq-cds-") as work:
        store, conf, out = make_demo_store(work)
        recover(spark, store, out, conf, audit_path=os.path.join(work, "audit"))
    spark.stop()
    # the JVM ends when its stdin closes and writes the archive as it exits
    jvm = SparkContext._gateway.proc
    SparkContext._gateway.shutdown()
    jvm.stdin.close()
    jvm.wait(timeout=600)


def _cds_check(part: str) -> None:
    """Step 2 of ``build_cds_archive``: raises unless a session on the archive runs a task."""
    spark = get_spark("rocketmq-cds-check", extra={JAVA_OPTIONS: f"-Xshare:on -XX:SharedArchiveFile={part}",
                                                   "spark.ui.showConsoleProgress": "false"})
    if spark.sparkContext.parallelize(range(10), 2).sum() != 45:
        raise RuntimeError("a session on the archive computed a wrong sum")
    spark.stop()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="jobs.buildcds", description=__doc__.split("\n")[0])
    ap.add_argument("--path", action="store_true",
                    help="print where the archive for this JVM and Spark is, without building it")
    ap.add_argument("--if-missing", action="store_true",
                    help="build only when no whole archive for this JVM and Spark is in place")
    ap.add_argument("--cds-workload", metavar="PART", help=argparse.SUPPRESS)
    ap.add_argument("--cds-check", metavar="PART", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.cds_workload:
        _cds_workload(args.cds_workload)
    elif args.cds_check:
        _cds_check(args.cds_check)
    elif args.path:
        print(cds.archive_path() or OFF)
    elif args.if_missing and (have := cds.archive_path()) is None:
        print(OFF)                               # ROCKETMQ_CDS=off, or no java: nothing to build
    elif args.if_missing and cds.archive_ready(have):
        print(have)
    else:
        try:
            print(build_cds_archive())
        except (RuntimeError, OSError, subprocess.CalledProcessError) as exc:
            print(f"error: no class-data-sharing archive was built: {exc}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
