"""The embedded driver JVM's class-data-sharing archive: where it is for this JVM and these Spark
jars, and whether it is whole.

An embedded session's driver JVM maps Spark's classes from the archive when one was built
(``python -m jobs.buildcds``, once per machine and environment): the classes a run loads are then
mapped from one file instead of being read from the jars, parsed and verified at every start, which
is most of the session start and of the first Spark SQL query's cost. ``ROCKETMQ_CDS=off`` disables
it; ``ROCKETMQ_CDS_DIR`` moves the archives (default ``$XDG_CACHE_HOME/rocketmq-store-recovery``).
The JVM checks an archive against its own version and class path and ignores one that does not
match (with a warning), so a stale archive costs nothing but the saving; an archive is only used
whole (its size as built), since a JVM that maps a file cut short dies of SIGBUS instead of
ignoring it.
"""
from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path


def _java() -> Path | None:
    """The java that spark-submit runs: ``$JAVA_HOME/bin/java``, else the one on the PATH."""
    home = os.environ.get("JAVA_HOME")
    java = os.path.join(home, "bin", "java") if home else shutil.which("java")
    return Path(os.path.realpath(java)) if java and os.path.isfile(java) else None


def _spark_jars() -> Path:
    home = os.environ.get("SPARK_HOME")
    if home:
        return Path(home) / "jars"
    import pyspark

    return Path(pyspark.__file__).resolve().parent / "jars"


def archive_path() -> Path | None:
    """Where the driver's class-data-sharing archive for this JVM and these Spark jars is (or would
    be): keyed by both, so a new JDK or Spark gets an archive of its own. None when disabled
    (``ROCKETMQ_CDS=off``) or without a java."""
    if os.environ.get("ROCKETMQ_CDS", "").lower() in ("off", "0", "false", "no"):
        return None
    java, jars = _java(), _spark_jars()
    if java is None or not jars.is_dir():
        return None
    key = hashlib.sha256()
    for p in [java, *sorted(jars.iterdir())]:
        st = p.stat()
        key.update(f"{p}:{st.st_size}:{st.st_mtime_ns}\n".encode())
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    root = Path(os.environ.get("ROCKETMQ_CDS_DIR") or os.path.join(cache, "rocketmq-store-recovery"))
    return root / f"driver-{key.hexdigest()[:16]}.jsa"


def _size_file(archive: Path) -> Path:
    return archive.with_name(archive.name + ".size")


def archive_ready(archive: Path) -> bool:
    """True when ``archive`` is one ``install`` put in place, whole: its recorded size matches.
    A JVM maps an archive cut short without checking its length and dies of SIGBUS, so a damaged
    file must never reach it."""
    try:
        return _size_file(archive).read_text().strip() == str(archive.stat().st_size)
    except OSError:
        return False


def install(part: Path, archive: Path) -> None:
    """Rename ``part``, an archive the JVM was checked to map, to ``archive`` and record its size
    (``archive_ready``); the old record goes first, so no instant pairs it with the new file."""
    size = part.stat().st_size
    _size_file(archive).unlink(missing_ok=True)
    os.replace(part, archive)
    record = archive.with_name(f"{archive.name}.{os.getpid()}.size.part")
    record.write_text(f"{size}\n")
    os.replace(record, _size_file(archive))
