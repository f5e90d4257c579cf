"""jobs/recover.py as operators run it: bad input, refusals, --apply, and a real kill -9."""
from __future__ import annotations

import errno
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest

import support
from jobs import recover as job
from jobs import repairwrite
from store_reader.repair import apply, publish
from store_reader.io import hashing
from store_reader.exceptions import StoreReaderError

pytestmark = pytest.mark.spark
V4, V5 = support.VERSIONS


def _copy(case, tmp_path):
    dest = tmp_path / "store"
    shutil.copytree(support.input_store(*case), dest)
    return dest


def test_refusals(spark, tmp_path):
    case = (V5, "clean")
    src = support.input_store(*case)
    conf = str(support.broker_conf(*case))
    with pytest.raises(StoreReaderError, match="must not be the store"):
        job.recover(spark, str(src), str(src / "repaired"), conf, "5.3")
    existing = tmp_path / "exists"
    existing.mkdir()
    with pytest.raises(StoreReaderError, match="output directory exists"):
        job.recover(spark, str(src), str(existing), conf, "5.3")
    (existing / "precious.txt").write_text("x")
    with pytest.raises(StoreReaderError, match="not a repaired store"):
        job.recover(spark, str(src), str(existing), conf, "5.3", overwrite=True)
    assert (existing / "precious.txt").exists()
    assert job.main(["--store", str(tmp_path / "missing"), "--out", str(tmp_path / "o")]) == 2


def test_overwrite_replaces_an_earlier_repaired_store(spark, tmp_path):
    case = (V5, "clean")
    out = tmp_path / "out"
    args = (str(support.input_store(*case)), str(out), str(support.broker_conf(*case)), "5.3")
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

    monkeypatch.setattr(repairwrite, "place_commitlog", full)
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


def test_report_names_the_repaired_store_and_says_dry_run_only_for_one(spark, tmp_path, capsys):
    case = (V4, "torn-middle-magic")
    args = ["--store", str(support.input_store(*case)), "--out", str(tmp_path / "out"),
            "--broker-config", str(support.broker_conf(*case))]
    assert job.main(args) == 0
    written = capsys.readouterr().out
    assert f"repaired store     {tmp_path / 'out'}" in written and "dry run" not in written
    assert job.main(args + ["--dry-run"]) == 0
    dry = capsys.readouterr().out
    assert dry.startswith("DRY RUN: nothing was written") and "repaired store     " not in dry


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
    scan = tmp_path / "scan"
    scan.mkdir()
    cmd = [sys.executable, "-m", "jobs.recover", "--store", src, "--broker-config", conf, "--scan-dir", str(scan)]
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
    leftovers = [p.name for p in tmp_path.iterdir() if p.name not in ("out", "reference", "scan")]
    assert leftovers == [], leftovers
    # the killed runs' kept records too: the last run removed them (their locks were free)
    assert list(scan.iterdir()) == []


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
            apply.apply_repaired(store, tmp_path / "whatever", tmp_path / "backup")
    finally:
        holder.kill()
        holder.wait()
    assert not (tmp_path / "out").exists() and not (tmp_path / "backup").exists()


# -- issue 19: every failure one line and exit 2, nothing partial published -------------------------

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _job(args, env_extra=None, module="jobs.recover", wrap=()) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != publish.PAUSE_ENV}
    env.update(PYSPARK_PYTHON=sys.executable, PYTHONPATH=ROOT, **(env_extra or {}))
    return subprocess.Popen([*wrap, sys.executable, "-m", module, *args], env=env, cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def _finish(proc: subprocess.Popen) -> tuple[int, str]:
    """Exit code and stderr of a job (its pipes drained while it runs)."""
    _, err = proc.communicate(timeout=600)
    return proc.returncode, err


def _errors(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error")]


def _assert_verified(out, reference):
    """``out`` is complete: every file its manifest lists, with that digest, and the same bytes as
    ``reference``."""
    publish.verify_against_manifest(out)
    for e in json.loads((out / "MANIFEST.json").read_text())["outputs"]:
        assert hashing.sha256_file(str(out / e["path"])) == e["sha256"], e["path"]
    assert support.tree_digest(out) == support.tree_digest(reference)


def test_what_if_refusal_prints_one_error_line_on_stderr(spark, tmp_path, capsys):
    case = (V4, "cq-file-short")
    rc = job.main(["--store", str(support.input_store(*case)), "--dry-run", "--broker-version", "both",
                   "--broker-config", str(support.broker_conf(*case))])
    errors = _errors(capsys.readouterr().err)
    assert rc == 2 and len(errors) == 1, errors
    assert errors[0].startswith("error: broker 4.9 would refuse to load this store: ")
    assert "00000000000000000600" in errors[0]


def test_missing_commitlog_is_refused_unless_the_operator_says_it_is_gone(spark, tmp_path, capsys):
    case = (V4, "clean")
    store = _copy(case, tmp_path)
    conf = str(support.broker_conf(*case))
    os.rename(store / "commitlog", tmp_path / "elsewhere")     # an unmounted volume, a wrong path
    for extra in ([], ["--dry-run"]):
        rc = job.main(["--store", str(store), "--out", str(tmp_path / "out"), "--broker-config", conf, *extra])
        err = capsys.readouterr().err
        assert rc == 2 and _errors(err) == [
            f"error: {store}/commitlog: the commitlog directory is missing: recovering "
            "would drop every message and consume queue entry (a wrong --store or an unmounted volume?); "
            "pass --commitlog-gone if the commitlog is really gone"]
    assert not (tmp_path / "out").exists()
    # the broker's all-deleted fixture: an empty commitlog/ needs the flag too, then recovers
    gone = (V5, "commitlog-all-deleted")
    args = ["--store", str(support.input_store(*gone)), "--out", str(tmp_path / "gone"),
            "--broker-config", str(support.broker_conf(*gone))]
    assert job.main(args) == 2
    assert "the commitlog directory holds no commitlog file" in capsys.readouterr().err
    assert job.main(args + ["--commitlog-gone"]) == 0
    assert (tmp_path / "gone" / "MANIFEST.json").exists()


def test_relative_and_absolute_spellings_give_byte_identical_output(spark, tmp_path, monkeypatch):
    case = (V4, "torn-middle-crc")
    src, conf = support.input_store(*case), support.broker_conf(*case)
    job.recover(spark, str(src), str(tmp_path / "absolute"), str(conf), "4.9")
    (tmp_path / "link").symlink_to(src.parent)
    monkeypatch.chdir(tmp_path)
    job.recover(spark, os.path.join("link", src.name), "relative", os.path.relpath(conf), "4.9")
    assert support.tree_digest(tmp_path / "absolute") == support.tree_digest(tmp_path / "relative")
    manifest = json.loads((tmp_path / "relative" / "MANIFEST.json").read_text())
    assert (manifest["store"], manifest["brokerConfig"]) == (str(src.resolve()), str(conf.resolve()))


def test_unreadable_config_file_is_left_out_as_the_broker_skips_it(spark, tmp_path, capsys):
    case = (V4, "clean")
    store = _copy(case, tmp_path)
    offsets = store / "config" / "consumerOffset.json"
    shutil.copyfile(offsets, str(offsets) + ".bak")
    offsets.unlink()
    offsets.symlink_to(offsets.name)              # unreadable even for root (ELOOP)
    out = tmp_path / "out"
    rc = job.main(["--store", str(store), "--out", str(out), "--broker-config", str(support.broker_conf(*case)),
                   "--keep-consumer-offsets"])          # copied as they are, to compare below
    captured = capsys.readouterr()
    printed = captured.out
    assert rc == 0, _errors(captured.err)
    assert f"config left out    {offsets}: Too many levels of symbolic links" in printed
    assert not os.path.lexists(out / "config" / "consumerOffset.json")
    # the broker reads the same offsets from either store: the .bak, as the input's file is unreadable
    from store_reader.formats.config import read_consumer_offsets
    got, want = read_consumer_offsets(out), read_consumer_offsets(store)
    assert got.generation == want.generation == "bak" and got.value.equals(want.value)


def test_non_regular_files_are_refused_not_waited_on(tmp_path):
    """A FIFO named like a store file would block its open (or the copy) forever."""
    case = (V5, "clean")
    runs = {}
    for name in ("checkpoint", "config/consumerOffset.json", "config/extra.json"):
        store = tmp_path / name.replace("/", "-") / "store"
        shutil.copytree(support.input_store(*case), store)
        if (store / name).exists():
            (store / name).unlink()
        os.mkfifo(store / name)
        runs[name] = (store, _job(["--store", str(store), "--out", str(store.parent / "out"),
                                   "--broker-config", str(support.broker_conf(*case))]))
    for name, (store, proc) in runs.items():
        try:
            _, err = proc.communicate(timeout=300)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
        errors = _errors(err)
        # the audit's config check or the copy, whichever reaches it first
        assert proc.returncode == 2 and len(errors) == 1 and re.fullmatch(
            rf"error: {re.escape(str(store / name))}: (config )?file is a FIFO, not a regular file; "
            "refusing to read it", errors[0]), err
        assert sorted(p.name for p in store.parent.iterdir()) == ["store"]


def _unshared_read_only(ro) -> tuple[str, ...]:
    """A command prefix: run in a private mount namespace where ``ro`` is a read-only bind mount
    (tests run as root, which file modes do not stop)."""
    return ("unshare", "-m", "sh", "-c", f'mount --bind {ro} {ro} && mount -o remount,bind,ro {ro} && exec "$@"',
            "sh")


def test_read_only_targets_are_refused_before_any_work(tmp_path):
    case = (V4, "crash-tail")
    ro = tmp_path / "ro"
    ro.mkdir()
    existing = tmp_path / "existing"
    existing.mkdir()
    base = ["--store", str(support.input_store(*case)), "--broker-config", str(support.broker_conf(*case))]
    runs = {
        "out": _job(base + ["--out", str(ro / "out")], wrap=_unshared_read_only(ro)),
        "recover audit path": _job(base + ["--out", str(tmp_path / "out"), "--audit-path", str(ro / "audit")],
                                   wrap=_unshared_read_only(ro)),
        "audit path": _job(base + ["--audit-path", str(ro / "audit")], module="jobs.audit",
                           wrap=_unshared_read_only(ro)),
        "overwrite": _job(base + ["--out", str(existing), "--overwrite"]),
    }
    want = {
        "out": f"error: {ro}/out.lock: cannot write beside the output (its lock file): Read-only file system",
        "recover audit path": f"error: {ro}: audit path is not writable: Read-only file system",
        "audit path": f"error: could not audit: {ro}: audit path is not writable: Read-only file system",
        "overwrite": f"error: {existing}: output directory exists and is not a repaired store; refusing "
                     "to replace it",
    }
    for name, proc in runs.items():
        rc, err = _finish(proc)
        assert (rc, _errors(err)) == (2, [want[name]]), err
        assert " pass scan " not in err and "Traceback" not in err    # refused before the scan
    assert sorted(p.name for p in tmp_path.iterdir()) == ["existing", "ro"]
    assert list(ro.iterdir()) == [] and list(existing.iterdir()) == []


@pytest.mark.slow
def test_two_runs_onto_one_output_publish_one_complete_store(tmp_path):
    """Two jobs on the same store and --out, the second started 0-3 s after the first: one
    publishes a complete, verified store, the other exits 2 with one error line."""
    case = (V5, "crash-ckpt-mid-torn-crc")
    base = ["--store", str(support.input_store(*case)), "--broker-config", str(support.broker_conf(*case))]
    reference = tmp_path / "reference"
    rc, err = _finish(_job(base + ["--out", str(reference)]))
    assert rc == 0, err
    rng = random.Random(19)
    for attempt, delay in enumerate([0.0, 1.0, rng.uniform(0, 3), 3.0]):
        out = tmp_path / f"out{attempt}"
        a = _job(base + ["--out", str(out)])
        time.sleep(delay)
        b = _job(base + ["--out", str(out)])
        results = [_finish(p) for p in (a, b)]
        codes = sorted(rc for rc, _ in results)
        assert codes == [0, 2], results
        loser = next(err for rc, err in results if rc == 2)
        assert len(_errors(loser)) == 1 and "Traceback" not in loser, loser
        assert ("another run holds this output's lock" in loser or "output directory exists" in loser), loser
        _assert_verified(out, reference)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out0", "out1", "out2", "out3", "reference"]


@pytest.mark.slow
def test_a_run_killed_at_the_rename_or_the_swap_is_finished_by_the_next(tmp_path):
    case = (V4, "crash-tail")
    base = ["--store", str(support.input_store(*case)), "--broker-config", str(support.broker_conf(*case))]
    reference = tmp_path / "reference"
    assert _finish(_job(base + ["--out", str(reference)]))[0] == 0
    out = tmp_path / "out"

    def killed_at(point, *extra):
        support.kill_at_pause(_job(base + ["--out", str(out), *extra], env_extra={publish.PAUSE_ENV: point}),
                              point)

    # killed with the temporary complete and unmarked, before the rename: nothing published; the
    # re-run does it again on its own
    killed_at("unmarked")
    assert not out.exists() and [p.name for p in tmp_path.iterdir() if ".tmp-" in p.name]
    rc, err = _finish(_job(base + ["--out", str(out)]))
    assert rc == 0, err
    _assert_verified(out, reference)
    # --overwrite killed right after the swap: the output is complete at every instant
    killed_at("replaced", "--overwrite")
    _assert_verified(out, reference)
    rc, err = _finish(_job(base + ["--out", str(out), "--overwrite"]))
    assert rc == 0, err
    _assert_verified(out, reference)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "reference"]
