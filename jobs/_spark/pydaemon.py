"""Spark's Python worker daemon with the jobs' modules loaded once, before it forks workers.

    spark.python.daemon.module  jobs._spark.pydaemon        (spark-conf/local.conf, cluster.conf.example)

Spark starts one daemon per executor and forks a worker from it for each Python task that finds no
idle worker (concurrent jobs, a task that ends without reading all of its input). pyspark's own
daemon imports nothing before it forks, so every worker imported pyspark.worker, pyarrow, pandas
(pyarrow imports it the first time ``pa.array`` is given a NumPy array), NumPy and this project
again (benchmarks/README.md). Imported here, every fork shares them.

The JVM puts its ``pyspark.zip``, py4j zip and Spark's core jar first on the workers'
``PYTHONPATH``. Modules imported from a zip are compiled from source every time (zip imports keep
no bytecode), and every task re-reads the archives' directories when pyspark invalidates the
import caches (the core jar alone holds thousands of entries). When this
Python has the same pyspark and py4j installed (the embedded session, or an environment archive
that bundles them), the archives are taken off ``sys.path`` and the installed packages, with their
bytecode, are imported instead; otherwise they stay.

A worker whose task is cancelled (the JVM closes its socket) ends without printing the broken
connection's traceback (``worker``).

pyspark's daemon runs a full ``gc.collect()`` after every task of a reused worker: the imported
modules' objects are frozen (``gc.freeze``, as pre-fork servers do), so that collection walks
only what the task left.

Forking after these imports is safe: OpenBLAS' thread pool is never started (the jobs use no BLAS)
and jemalloc's background thread is handled by jemalloc's own fork handlers.
"""
import gc

if __name__ == "__main__":
    gc.disable()    # collecting while importing walks only what is about to be frozen (gc.freeze below)

import os  # noqa: E402
import re  # noqa: E402
import sys  # noqa: E402
import zipfile  # noqa: E402
from importlib import metadata  # noqa: E402

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")   # before NumPy loads OpenBLAS: no thread to fork past


def _zip_version(path: str) -> str | None:
    """The pyspark or py4j version an archive on the JVM's PYTHONPATH holds, None if it is neither.
    Spark's core jar counts as pyspark of its version: Spark puts it there for Python files a build
    may package into it."""
    name = os.path.basename(path)
    if name == "pyspark.zip":
        with zipfile.ZipFile(path) as z:
            m = re.search(r"""__version__.*?=\s*['"]([^'"]+)""", z.read("pyspark/version.py").decode())
        return m and f"pyspark {m.group(1)}"
    m = re.fullmatch(r"spark-core_[0-9.]+-(.+)\.jar", name)
    if m:
        return f"pyspark {m.group(1)}"
    m = re.fullmatch(r"py4j-(.+)-src\.zip", name)
    return m and f"py4j {m.group(1)}"


def _installed(dist: str, path: list[str]) -> str | None:
    """``dist``'s version as installed on ``path`` (searched without the zips: metadata lookups
    through a zip read its whole directory)."""
    found = next(iter(metadata.distributions(name=dist, path=path)), None)
    return found and f"{dist} {found.version}"


def without_jvm_zips(path: list[str]) -> list[str]:
    """``path`` without the JVM's pyspark and py4j zips when this Python has the same versions
    installed; unchanged otherwise."""
    zips = {p: _zip_version(p) for p in path if p.endswith((".zip", ".jar")) and os.path.isfile(p)}
    zips = {p: v for p, v in zips.items() if v is not None}
    rest = [p for p in path if p not in zips]
    if zips and set(zips.values()) <= {_installed("pyspark", rest), _installed("py4j", rest)}:
        return rest
    return path


def _inside(path: str, archives: list[str]) -> bool:
    return any(path == a or path.startswith(a + os.sep) for a in archives)


_kept = without_jvm_zips(sys.path)
_dropped = [p for p in sys.path if p not in _kept]
sys.path[:] = _kept
# their importers too, the archives' own and those of packages inside them (``<jar>/org``): each
# task's importlib.invalidate_caches() (pyspark's setup_spark_files) would re-read the dropped
# archives' directories (Spark's core jar among them); and namespace packages found only inside
# them (``org``, where ``copy`` and ``pickle`` look for Jython's classes), whose paths would make
# those importers again
for _entry in [p for p in sys.path_importer_cache if _inside(p, _dropped)]:
    del sys.path_importer_cache[_entry]
for _name in [n for n, m in sys.modules.items() if getattr(m, "__file__", None) is None
              and list(getattr(m, "__path__", None) or ()) and all(_inside(p, _dropped) for p in m.__path__)]:
    del sys.modules[_name]

import numpy  # noqa: E402,F401
import pyarrow  # noqa: E402,F401
import pyarrow.compute  # noqa: E402,F401

try:
    import pandas  # noqa: F401  (pyarrow imports it in every worker anyway when it is installed)
except ImportError:
    pass

import pyspark.worker  # noqa: E402,F401
from pyspark import daemon  # noqa: E402

import jobs.recover  # noqa: E402,F401  (store_reader, the audit and the rebuilds with it)
import jobs.replicas  # noqa: E402,F401

_worker = daemon.worker


def worker(sock, authenticated: bool) -> int:
    """pyspark's ``daemon.worker``; a worker whose JVM side hung up (its task was cancelled or
    killed because another task of the job failed) ends quietly instead of printing the broken
    connection's traceback to the executor's stderr (the job reports the failure that caused it).
    Whatever a task raises is reported to the JVM inside; only the connection's end gets here."""
    try:
        return _worker(sock, authenticated)
    except (BrokenPipeError, ConnectionResetError, EOFError):
        return 1


daemon.worker = worker

if __name__ == "__main__":
    gc.freeze()
    gc.enable()
    daemon.manager()
