"""jobs/_spark/pydaemon.py: the daemon the Python workers are forked from (spark.python.daemon.module)."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import zipfile
from importlib import metadata
from pathlib import Path

import py4j
import pyspark

from jobs._spark.pydaemon import without_jvm_zips

PYSPARK, PY4J = metadata.version("pyspark"), metadata.version("py4j")
SITE = str(Path(pyspark.__file__).parent.parent)     # where this Python has them installed


def _jvm_zips(root: Path, pyspark_version: str, py4j_version: str) -> list[str]:
    """A pyspark.zip and a py4j source zip as the JVM puts them on a worker's PYTHONPATH."""
    root.mkdir()
    spark_zip, py4j_zip = root / "pyspark.zip", root / f"py4j-{py4j_version}-src.zip"
    with zipfile.ZipFile(spark_zip, "w") as z:
        z.writestr("pyspark/version.py", f'__version__: str = "{pyspark_version}"\n')
    with zipfile.ZipFile(py4j_zip, "w") as z:
        z.writestr("py4j/__init__.py", "")
    return [str(spark_zip), str(py4j_zip)]


def test_the_jvm_zips_go_only_when_the_same_versions_are_installed(tmp_path):
    other = tmp_path / "python311.zip"          # any other zip on the path stays where it is
    with zipfile.ZipFile(other, "w") as z:
        z.writestr("os.py", "")
    same = _jvm_zips(tmp_path / "same", PYSPARK, PY4J)
    core = tmp_path / f"spark-core_2.13-{PYSPARK}.jar"      # Spark's core jar, of pyspark's version
    with zipfile.ZipFile(core, "w") as z:
        z.writestr("org/apache/spark/SparkContext.class", "")
    path = [same[0], same[1], str(core), "", str(other), SITE]
    assert without_jvm_zips(path) == ["", str(other), SITE]
    old_core = str(tmp_path / "spark-core_2.13-0.0.1.jar")
    (tmp_path / "spark-core_2.13-0.0.1.jar").write_bytes(core.read_bytes())
    assert without_jvm_zips([*same, old_core, SITE]) == [*same, old_core, SITE]
    assert without_jvm_zips([*same, ""]) == [*same, ""]     # the path left would not have them

    for name, versions in {"pyspark differs": ("0.0.1", PY4J), "py4j differs": (PYSPARK, "0.0.1")}.items():
        zips = _jvm_zips(tmp_path / name.replace(" ", "-"), *versions)
        path = [*zips, "", SITE]
        assert without_jvm_zips(path) == path, name
    assert without_jvm_zips(["", SITE]) == ["", SITE]


def test_workers_run_the_installed_pyspark_with_the_jobs_preloaded(spark):
    """Every worker imports pyspark and py4j from this environment, not from the JVM's zips
    (compiled from source at every import), keeps no importer of the JVM's archives (every task
    re-reads the directories of those), and has the jobs' modules before its first task."""
    assert spark.sparkContext.getConf().get("spark.python.daemon.module") == "jobs._spark.pydaemon"

    def probe(_):
        import sys

        import py4j as worker_py4j
        import pyspark as worker_pyspark

        jvm_archives = [p for p in sys.path_importer_cache                  # files a task added stay
                        if re.search(r"/(pyspark\.zip|py4j-[^/]*-src\.zip|spark-core_[^/]*\.jar)(/|$)", p)]
        return (worker_pyspark.__file__, worker_py4j.__file__, "jobs.findings" in sys.modules,
                os.environ.get("OPENBLAS_NUM_THREADS"), jvm_archives)

    seen = {(*r[:4], tuple(r[4])) for r in spark.sparkContext.parallelize(range(8), 8).map(probe).collect()}
    assert seen == {(pyspark.__file__, py4j.__file__, True, "1", ())}


def test_no_importer_inside_the_dropped_archives_survives_the_daemon(tmp_path):
    """A namespace package looked up while Spark's core jar was on the path (``copy`` and ``pickle``
    look for Jython's ``org.python.core``: the jar holds ``org/``) leaves a package importer inside
    the jar; the daemon drops it and the package with it, or each task's
    ``importlib.invalidate_caches()`` would re-read the jar's directory (benchmarks.taskcpu's
    daemon imported ``copy`` before this one: 0.9 of the 1.61 GB store's 3.7 profiled scan CPU-s)."""
    core = Path(pyspark.__file__).parent / "jars" / f"spark-core_2.13-{PYSPARK}.jar"
    assert core.is_file(), core
    probe = ("import json, sys\n"
             "inside = lambda: sorted(p for p in sys.path_importer_cache if p.startswith(sys.argv[1]))\n"
             "sys.modules.pop('copy', None); import copy\n"
             "before = inside()\n"
             "import jobs._spark.pydaemon\n"
             "after = inside()\n"
             "sys.modules.pop('pickle', None); import pickle\n"
             "print(json.dumps([before, after, 'org' in sys.modules, inside()]))\n")
    root = str(Path(__file__).resolve().parent.parent)
    out = subprocess.run([sys.executable, "-c", probe, str(core)], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join([str(core), root]),
                              "SPARK_PYTHON_RUNTIME": "PYTHON_WORKER"}, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    before, after, org, later = json.loads(out.stdout)
    assert f"{core}/org" in before          # the case this guards against happened
    assert (after, org, later) == ([], False, [])
