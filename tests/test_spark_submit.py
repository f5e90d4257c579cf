"""Cluster readiness: ``jobs/recover.py`` through the real ``spark-submit`` with executors running the
environment archive of ``scripts/build_env_archive.sh``, and the ``spark-conf/`` files against the
pins.

The submit runs on ``local-cluster[1,2,1024]``, Spark's one-machine standalone cluster, not on
``local[2]``: under ``local[N]`` Spark unpacks ``--archives`` into its ``userFiles-<uuid>`` directory
but starts Python workers in spark-submit's own working directory (PythonWorkerFactory sets a
worker directory only for Spark Connect sessions), so ``./environment/bin/python`` cannot resolve.
A local cluster's executor is a JVM of its own whose working directory receives the fetched and
unpacked archive, as on YARN, Kubernetes or a standalone cluster, so the submit line is the
cluster's. The driver runs in client mode on this machine with the test's interpreter (the
project's .venv, editable install), as ``spark.pyspark.driver.python`` does in client mode on a
cluster.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Iterator

import pytest

import support
import test_recover_job as recover_checks
from jobs._spark.sparkutil import SPARK_CONF_DIR, read_conf

ROOT = support.ROOT
BUILD_SCRIPT = ROOT / "scripts" / "build_env_archive.sh"
ARCHIVE = ROOT / "dist" / "rocketmq-store-env.tar.gz"
CASE = ("rocketmq-5.3.3", "torn-middle-crc")     # abnormal recovery: a CRC break mid-store
LOG4J2 = ROOT / "spark-conf" / "log4j2.properties"
SPARK_INFO = re.compile(r"^\d\d/\d\d/\d\d \d\d:\d\d:\d\d INFO ")    # log4j's console layout
BUILD_TIMEOUT_S = 1800       # a fresh machine downloads pyarrow, deltalake, pandas, numpy
SUBMIT_TIMEOUT_S = 900

# Python's startup hook, put on the executors' Python path only: every Python process the
# executor starts writes down its interpreter and the native scanner it loads, then goes on as usual.
PROBE = '''\
"""Spark Python worker probe written by tests/test_spark_submit.py."""
import json
import os
import sys

import store_reader._native

with open(os.path.join(os.environ["RMQ_PROBE_OUT"], f"{os.getpid()}.json"), "w") as fh:
    json.dump({"executable": sys.executable, "prefix": sys.prefix, "cwd": os.getcwd(),
               "native": store_reader._native.__file__, "argv": sys.orig_argv}, fh)
'''


def _pins() -> dict[str, str]:
    with open(ROOT / "pyproject.toml", "rb") as fh:
        deps = tomllib.load(fh)["project"]["dependencies"]
    return dict(d.split("==", 1) for d in deps if "==" in d)


def test_conf_files_follow_the_pins():
    """The cluster loads the jars the embedded session does (``jobs._spark.sparkjars``: delta-spark at the
    pinned version, hadoop-aws at the Hadoop of pyspark's jars) with the same Delta settings."""
    from jobs._spark import sparkjars

    assert _pins()["delta-spark"] == sparkjars.delta_version()
    delta = {"spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
             "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog"}
    local = read_conf(SPARK_CONF_DIR / "local.conf")
    assert {k: v for k, v in read_conf(SPARK_CONF_DIR / "delta.conf").items() if k in delta} == delta
    cluster = read_conf(SPARK_CONF_DIR / "cluster.conf.example")
    assert {k: cluster.get(k) for k in delta} == delta
    assert cluster["spark.jars.packages"] == ",".join(sparkjars.coordinates())
    assert cluster["spark.archives"] == f"{ARCHIVE.relative_to(ROOT)}#environment"
    assert cluster["spark.pyspark.python"] == "./environment/bin/python"
    assert cluster["spark.sql.execution.arrow.pyspark.enabled"] == "true"
    # a mapped segment counts against a capped Python address space: never set the cap
    assert "spark.executor.pyspark.memory" not in cluster
    assert cluster["spark.python.daemon.module"] == local["spark.python.daemon.module"] == "jobs._spark.pydaemon"


def _tail(path: Path, lines: int = 60) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def _run(cmd: list[str], *, cwd: Path, env: dict[str, str], timeout: float, log: Path) -> int:
    """Run ``cmd`` in its own process group with stdout and stderr to ``log``; on a timeout the
    whole group (spark-submit's JVM, the Python driver, executors) is killed and the test fails."""
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            return proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            pytest.fail(f"{cmd[0]} still running after {timeout:.0f}s; last output:\n{_tail(log)}")


def _java_home() -> str:
    if os.environ.get("JAVA_HOME"):
        return os.environ["JAVA_HOME"]
    java = shutil.which("java")
    assert java, "spark-submit needs Java 17 (scripts/bootstrap.sh checks for it)"
    return str(Path(os.path.realpath(java)).parent.parent)


def _spark_env(spark_home: Path) -> dict[str, str]:
    """This environment less anything that would steer Spark or Python elsewhere (a test session's
    SPARK_TESTING, a user's SPARK_CONF_DIR, PYTHONPATH), plus what spark-submit needs."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SPARK_", "PYSPARK_", "_PYSPARK")) and k != "PYTHONPATH"}
    env.update(JAVA_HOME=_java_home(), SPARK_HOME=str(spark_home),
               PYSPARK_PYTHON="./environment/bin/python", PYSPARK_DRIVER_PYTHON=sys.executable)
    return env


@pytest.fixture
def spark_home(tmp_path) -> Iterator[Path]:
    """A Spark home made of links into the pyspark package, so that the local cluster's worker
    directory (SPARK_HOME/work: where executors fetch and unpack the archive) is in ``tmp_path``,
    not inside .venv."""
    import pyspark

    package = Path(pyspark.__file__).parent
    home = tmp_path / "spark-home"
    home.mkdir()
    for name in ("bin", "jars", "python"):
        (home / name).symlink_to(package / name, target_is_directory=True)
    yield home
    # the executors' unpacked environments (400 MB each; pytest keeps its last three temp
    # directories); their logs stay
    for unpacked in (home / "work").glob("app-*/*/environment"):
        shutil.rmtree(unpacked)


@pytest.fixture(scope="module")
def env_archive(tmp_path_factory) -> Path:
    """The archive, built now or reused: the script itself skips the build while a hash of the
    sources, pyproject.toml, setup.py and itself is unchanged."""
    log = tmp_path_factory.mktemp("env-archive") / "build.log"
    rc = _run(["bash", str(BUILD_SCRIPT)], cwd=ROOT, env=dict(os.environ), timeout=BUILD_TIMEOUT_S,
              log=log)
    assert rc == 0, f"{BUILD_SCRIPT.name} exited {rc}:\n{_tail(log)}"
    assert f"environment archive: {ARCHIVE} (" in log.read_text(), _tail(log)
    return ARCHIVE


@pytest.mark.slow
@pytest.mark.timeout(BUILD_TIMEOUT_S + SUBMIT_TIMEOUT_S + 120)
def test_recover_job_through_spark_submit_on_the_archive(env_archive, spark_home, tmp_path):
    store = tmp_path / "input"
    shutil.copytree(support.input_store(*CASE), store, symlinks=True)
    before = support.tree_digest(store)
    out = tmp_path / "repaired"
    probe, records = tmp_path / "probe", tmp_path / "probe-records"
    probe.mkdir()
    records.mkdir()
    (probe / "sitecustomize.py").write_text(PROBE)
    cmd = [str(spark_home / "bin" / "spark-submit"),
           "--master", "local-cluster[1,2,1024]",
           "--archives", f"{env_archive}#environment",
           "--conf", "spark.pyspark.python=./environment/bin/python",
           "--conf", f"spark.pyspark.driver.python={sys.executable}",
           "--conf", f"spark.executorEnv.PYTHONPATH={probe}",
           "--conf", f"spark.executorEnv.RMQ_PROBE_OUT={records}",
           "--conf", "spark.ui.enabled=false",
           "--conf", "spark.python.daemon.module=jobs._spark.pydaemon",
           "--conf", f"spark.driver.extraJavaOptions=-Dlog4j2.configurationFile={LOG4J2}",
           str(ROOT / "jobs" / "recover.py"),
           "--store", str(store), "--out", str(out),
           "--broker-config", str(support.broker_conf(*CASE)),
           "--broker-version", recover_checks._version(CASE)]
    log = tmp_path / "spark-submit.log"
    rc = _run(cmd, cwd=tmp_path, env=_spark_env(spark_home), timeout=SUBMIT_TIMEOUT_S, log=log)
    assert rc == 0, f"spark-submit exited {rc}:\n{_tail(log)}"
    # the console: the job's own lines, Spark's only at WARN and above (spark-conf/log4j2.properties)
    console = log.read_text(errors="replace").splitlines()
    assert [ln for ln in console if SPARK_INFO.match(ln)] == []
    assert any(ln.startswith("  repaired store ") for ln in console)
    assert any(" jobs.recover pass " in ln for ln in console)

    # every Python process the executor started ran the archive Spark unpacked into the
    # executor's working directory, and loaded the archive's native scanner
    seen = [json.loads(p.read_text()) for p in sorted(records.iterdir())]
    assert seen, f"no Python worker started on an executor:\n{_tail(log)}"
    work = (spark_home / "work").resolve()
    for w in seen:
        env_dir = Path(w["cwd"]) / "environment"
        assert Path(w["prefix"]) == env_dir, w
        assert Path(w["cwd"]).resolve().is_relative_to(work), w
        assert Path(w["executable"]).parent == env_dir / "bin", w
        assert Path(w["native"]).resolve().is_relative_to(env_dir.resolve()), w
    # the workers were forked from the project's daemon (jobs/_spark/pydaemon.py), run from the archive
    assert any(w["argv"][1:3] == ["-m", "jobs._spark.pydaemon"] for w in seen), seen

    # the repaired store is the broker's own recovered store: the in-process job test's own check
    # (commitlog bytes, consume queue entries and files), fed from the job's MANIFEST.json
    assert support.tree_digest(store) == before, "the input store was modified"
    manifest = json.loads((out / "MANIFEST.json").read_text())
    recover_checks.assert_matches_broker(out, CASE, manifest["prediction"]["maxPhyOffset"])


@pytest.mark.slow
@pytest.mark.timeout(BUILD_TIMEOUT_S + 300)
def test_archive_runs_where_the_build_python_is_not(env_archive, tmp_path):
    """A node without the build machine's Python (its prefix and the project's .venv hidden by
    empty mounts in a private mount namespace) and another Python 3.11 on PATH: the unpacked
    archive's bin/python runs that one, with the archive's packages and native scanner."""
    if shutil.which("unshare") is None or subprocess.run(["unshare", "-m", "true"]).returncode:
        pytest.skip("needs a private mount namespace (unshare -m) to hide the build's Python")
    build_prefix = os.path.realpath(sys.base_prefix)
    other = [p for p in ("/usr/bin/python3.11", "/usr/local/bin/python3.11")
             if os.path.exists(p) and not os.path.realpath(p).startswith(build_prefix + os.sep)]
    assert other, "this check needs a second Python 3.11 besides the build's"
    env_dir = tmp_path / "node" / "environment"
    env_dir.mkdir(parents=True)
    subprocess.run(["tar", "-xzf", str(env_archive), "-C", str(env_dir)], check=True)
    empty = tmp_path / "empty"
    empty.mkdir()
    hidden = sorted({build_prefix, os.path.realpath(sys.prefix)})
    probe = ("import json, os, sys, jobs.recover, pyarrow, store_reader._native; "
             "print(json.dumps({'version': sys.version, 'prefix': sys.prefix, 'base': sys.base_prefix, "
             "'stdlib': os.__file__, 'native': store_reader._native.__file__, 'pyarrow': pyarrow.__file__, "
             "'hidden': [os.listdir(p) for p in sys.argv[1:]]}))")
    script = "".join(f"mount --bind {empty} {p} && " for p in hidden) + \
        f"cd {env_dir.parent} && ./environment/bin/python -I -c \"$0\" \"$@\""
    env = {"PATH": f"{os.path.dirname(other[0])}:/usr/bin:/bin", "HOME": str(tmp_path)}
    done = subprocess.run(["unshare", "-m", "bash", "-c", script, probe, *hidden], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    assert got["hidden"] == [[] for _ in hidden]            # the build's Python really was gone
    assert os.path.realpath(got["prefix"]) == str(env_dir.resolve())
    assert not os.path.realpath(got["base"]).startswith(build_prefix)
    assert not got["stdlib"].startswith(build_prefix) and got["version"] != sys.version
    for mod in ("native", "pyarrow"):
        assert os.path.realpath(got[mod]).startswith(str(env_dir.resolve()) + os.sep), got
