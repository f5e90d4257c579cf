"""A job stopped by SIGINT (Ctrl-C: the whole process group) or SIGTERM (the group, or the driver
alone), at several instants of a real run (``jobs/_spark/stopping.py``): exit 128 + the signal, one
``error:`` line and no traceback (Python, Py4J or Java) on stderr, nothing of the run left (its
output's lock and temporary tree, its scan directory, its Spark directory), no process of it left
(the driver JVM stopped, not orphaned), the input store's bytes, modes and mtimes unchanged."""
from __future__ import annotations

import glob
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

import pytest

import support
from store_reader.repair import publish
from test_apply_kills import snapshot

pytestmark = [pytest.mark.spark, pytest.mark.slow]
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CASE = (support.VERSIONS[1], "crash-ckpt-mid-torn-crc")
NOISE = re.compile(r"Traceback|Exception|KeyboardInterrupt|Py4J|^\s+at [\w$.]+\(", re.M)


def _started(tmp_path, module: str, pause: str | None = None) -> tuple[subprocess.Popen, dict]:
    store = tmp_path / "store"
    if not store.exists():
        shutil.copytree(support.input_store(*CASE), store, symlinks=True)
    (tmp_path / "scan").mkdir(exist_ok=True)
    args = ["--store", str(store), "--broker-config", str(support.broker_conf(*CASE)),
            "--scan-dir", str(tmp_path / "scan")]
    args += ["--out", str(tmp_path / "out")] if module == "jobs.recover" else \
        ["--audit-path", str(tmp_path / "audit")]
    env = {k: v for k, v in os.environ.items() if k != publish.PAUSE_ENV}
    env.update(PYSPARK_PYTHON=sys.executable, PYTHONPATH=ROOT, **({publish.PAUSE_ENV: pause} if pause else {}))
    proc = subprocess.Popen([sys.executable, "-m", module, *args], env=env, cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    proc.err = []                   # stderr's lines, drained as they come
    threading.Thread(target=lambda: proc.err.extend(iter(proc.stderr.readline, "")), daemon=True).start()
    return proc, snapshot(store)


def _when(proc: subprocess.Popen, ready, what: str) -> None:
    deadline = time.monotonic() + 120
    while not ready():
        assert proc.poll() is None, f"the job ended (rc {proc.returncode}) before {what}"
        assert time.monotonic() < deadline, f"no {what} in 120 s"
        time.sleep(0.01)


def _instant(tmp_path, proc, point: str) -> None:
    """Wait for ``point``: the JVM starting (the run's Spark directory made), the scan running
    (its directory holds a segment's records), the repaired store being written (its
    temporary tree there), or paused before the rename that publishes it."""
    spark_dir = os.path.join(tempfile.gettempdir(), f"rocketmq-spark-{proc.pid}-*")
    if point == "starting":
        _when(proc, lambda: glob.glob(spark_dir), "Spark directory")
    elif point == "scanning":
        _when(proc, lambda: glob.glob(str(tmp_path / "scan" / "rocketmq-scan-*" / "*.arrow")), "scan")
    elif point == "writing":
        _when(proc, lambda: glob.glob(str(tmp_path / "out.tmp-*" / "commitlog" / "*")), "repaired store")
    else:
        _when(proc, lambda: f"paused at {point}\n" in proc.err, point)


@pytest.mark.parametrize("module, sig, to, point", [
    ("jobs.recover", signal.SIGINT, "group", "writing"),
    ("jobs.recover", signal.SIGTERM, "group", "writing"),        # the JVM ends with the driver
    ("jobs.recover", signal.SIGTERM, "driver", "starting"),      # the JVM half started
    ("jobs.recover", signal.SIGTERM, "driver", "unmarked"),      # the repaired store complete, unpublished
    ("jobs.audit", signal.SIGTERM, "driver", "scanning"),
], ids=lambda v: v.name if isinstance(v, signal.Signals) else str(v))
def test_a_stopped_job_says_one_line_and_leaves_nothing(tmp_path, module, sig, to, point):
    proc, before = _started(tmp_path, module, pause=point if point == "unmarked" else None)
    try:
        _instant(tmp_path, proc, point)
        (os.killpg if to == "group" else os.kill)(proc.pid, sig)
        rc = proc.wait(timeout=120)
        time.sleep(0.2)
        err = "".join(proc.err)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert rc == 128 + sig, err
    errors = [line for line in err.splitlines() if line.startswith("error")]
    assert errors == [f"error: stopped by {sig.name}; what the run had not finished is removed"], err
    assert not NOISE.search(err), err
    # nothing of the run left: no output, lock, temporary tree, scan directory, Spark directory
    assert sorted(p.name for p in tmp_path.iterdir()) == ["scan", "store"]
    assert list((tmp_path / "scan").iterdir()) == []
    assert glob.glob(os.path.join(tempfile.gettempdir(), f"rocketmq-spark-{proc.pid}-*")) == []
    # no process of its session (the JVM, Python workers) outlives it
    deadline = time.monotonic() + 10
    while (left := subprocess.run(["ps", "-o", "pid=,args=", "--sid", str(proc.pid)], capture_output=True,
                                  text=True).stdout.strip()) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert left == ""
    assert snapshot(tmp_path / "store") == before
