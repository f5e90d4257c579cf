"""jobs/recover.py as operators run it: bad input, refusals, --apply, and a real kill -9."""
from __future__ import annotations

import errno
import os
import random
import shutil
import signal
import subprocess
import sys
import time

import pytest

import support
from jobs import recover as job
from store_reader import publish
from store_reader.exceptions import StoreReaderError

pytestmark = pytest.mark.spark
V4, V5 = support.VERSIONS


def _copy(case, tmp_path):
    dest = tmp_path / "store"
    shutil.copytree(support.input_store(*case), dest)
    return dest


def test_store_the_broker_refuses_is_reported_and_nothing_written(spark, tmp_path, capsys):
    case = (V4, "cq-file-short")
    out = tmp_path / "out"
    report = job.recover(spark, str(support.input_store(*case)), str(out),
                         str(support.broker_conf(*case)), "4.9")
    assert not report.prediction.load_result and not out.exists()
    assert any("600" in p and "00000000000000000600" in p for p in report.prediction.load_problems)
    rc = job.main(["--store", str(support.input_store(*case)), "--out", str(out),
                   "--broker-config", str(support.broker_conf(*case))])
    assert rc == 2 and not out.exists()
    assert "REFUSE" in capsys.readouterr().out


def test_refusals(spark, tmp_path):
    case = (V5, "clean")
    src = support.input_store(*case)
    conf = str(support.broker_conf(*case))
    with pytest.raises(StoreReaderError, match="must not be the store"):
        job.recover(spark, str(src), str(src / "repaired"), conf, "5.x")
    existing = tmp_path / "exists"
    existing.mkdir()
    with pytest.raises(StoreReaderError, match="output directory exists"):
        job.recover(spark, str(src), str(existing), conf, "5.x")
    (existing / "precious.txt").write_text("x")
    with pytest.raises(StoreReaderError, match="not a repaired store"):
        job.recover(spark, str(src), str(existing), conf, "5.x", overwrite=True)
    assert (existing / "precious.txt").exists()
    assert job.main(["--store", str(tmp_path / "missing"), "--out", str(tmp_path / "o")]) == 2


def test_overwrite_replaces_an_earlier_repaired_store(spark, tmp_path):
    case = (V5, "clean")
    out = tmp_path / "out"
    args = (str(support.input_store(*case)), str(out), str(support.broker_conf(*case)), "5.x")
    job.recover(spark, *args)
    first = support.tree_digest(out)
    job.recover(spark, *args, overwrite=True)
    assert support.tree_digest(out) == first
    assert not [p for p in tmp_path.iterdir() if p.name != "out"]


def test_disk_full_cleans_up(spark, tmp_path, monkeypatch):
    case = (V4, "crash-tail")
    out = tmp_path / "out"

    def full(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(job.repair, "copy_commitlog_file", full)
    with pytest.raises(StoreReaderError, match="disk full"):
        job.recover(spark, str(support.input_store(*case)), str(out), str(support.broker_conf(*case)), "4.9")
    assert list(tmp_path.iterdir()) == []


def test_dry_run_writes_nothing(spark, tmp_path):
    case = (V4, "torn-middle-magic")
    out = tmp_path / "out"
    report = job.recover(spark, str(support.input_store(*case)), str(out),
                         str(support.broker_conf(*case)), "4.9", dry_run=True)
    assert report.prediction.max_phy_offset == support.expected(*case)["afterRecovery"]["maxPhyOffset"]
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_apply_with_backup(spark, tmp_path):
    case = (V4, "torn-middle-crc")
    store = _copy(case, tmp_path)
    before = support.tree_digest(store)
    out, backup = tmp_path / "repaired", tmp_path / "backup"
    rc = job.main(["--store", str(store), "--out", str(out), "--apply", "--backup", str(backup),
                   "--broker-config", str(support.broker_conf(*case))])
    assert rc == 0
    assert support.tree_digest(backup) == before            # the input, complete and unchanged
    assert (store / "MANIFEST.json").exists() and not (store / "abort").exists()
    assert not out.exists()
    with pytest.raises(SystemExit):
        job.parse_args(["--store", str(store), "--out", str(out), "--apply"])


@pytest.mark.slow
def test_killed_runs_leave_nothing_that_looks_complete(tmp_path):
    case = (V5, "crash-ckpt-mid-torn-crc")
    src = str(support.input_store(*case))
    conf = str(support.broker_conf(*case))
    reference = tmp_path / "reference"
    cmd = [sys.executable, "-m", "jobs.recover", "--store", src, "--broker-config", conf]
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
    first = subprocess.run(cmd + ["--out", str(reference)], check=True, env=env, capture_output=True,
                           text=True)
    # the log is the job's pass lines, not py4j's line per closed connection
    assert " jobs.recover pass scan " in first.stderr and " py4j." not in first.stderr
    out = tmp_path / "out"
    rng = random.Random(1)
    for delay in sorted(rng.uniform(2.0, 12.0) for _ in range(3)):
        proc = subprocess.Popen(cmd + ["--out", str(out), "--overwrite"], env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
        time.sleep(delay)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)       # the job and its Spark JVM, mid-run
        proc.wait()
        # whatever was left is either the complete output or not there under the final name
        if out.exists():
            assert support.tree_digest(out) == support.tree_digest(reference)
    subprocess.run(cmd + ["--out", str(out), "--overwrite"], check=True, env=env, capture_output=True)
    assert support.tree_digest(out) == support.tree_digest(reference)
    leftovers = [p.name for p in tmp_path.iterdir() if p.name not in ("out", "reference")]
    assert leftovers == [], leftovers


def test_store_held_by_a_running_broker_is_refused(spark, tmp_path):
    case = (V4, "clean")
    store = _copy(case, tmp_path)
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import fcntl, sys, time\n"
         "fh = open(sys.argv[1], 'r+b'); fcntl.lockf(fh, fcntl.LOCK_EX, 1, 0)\n"
         "print('locked', flush=True); time.sleep(60)", str(store / "lock")],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"   # as the broker's FileChannel.tryLock
        with pytest.raises(StoreReaderError, match="running broker holds the store's lock"):
            job.recover(spark, str(store), str(tmp_path / "out"), str(support.broker_conf(*case)), "4.9")
        with pytest.raises(StoreReaderError, match="running broker"):
            publish.apply_repaired(store, tmp_path / "whatever", tmp_path / "backup")
    finally:
        holder.kill()
        holder.wait()
    assert not (tmp_path / "out").exists() and not (tmp_path / "backup").exists()
