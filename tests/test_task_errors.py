"""Errors raised inside Spark tasks reach the operator as one line and exit code 2 (issue 19.4).

A task's exception comes back to the driver wrapped (``Py4JJavaError`` for RDD jobs,
``PythonException`` for the data source); ``jobs._spark.taskerrors.store_error`` rebuilds the package's own
error from the note every ``StoreReaderError`` carries. The failures here are real: a commitlog
segment that is a UNIX socket (``open`` fails with ENXIO in the executor, also for root), one that
is a FIFO (must fail, not hang), and a repaired store's index file written by an executor onto a
2 MiB tmpfs (ENOSPC).
"""
from __future__ import annotations

import errno
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

import support
import store_reader
from jobs._spark.taskerrors import store_error
from store_reader.exceptions import OutputError, StoreReaderError, UnreadableFileError

CASE = ("rocketmq-4.9.7", "crash-tail")
BAD = "00000000000000131072"          # a segment in the middle of the commitlog


def _copy(tmp_path: Path) -> Path:
    dest = tmp_path / "store"
    shutil.copytree(support.input_store(*CASE), dest)
    return dest


def _socket_segment(root: Path) -> Path:
    path = root / "commitlog" / BAD
    path.unlink()
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(path))                 # the socket file stays after the socket is closed
    return path


def _one_error_line(p: subprocess.CompletedProcess, names: str) -> str:
    """The job's stderr holds exactly one ``error:`` line, naming ``names``, and no trace."""
    assert p.returncode == 2, p.stderr[-3000:]
    errors = [line for line in p.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, p.stderr[-3000:]
    assert names in errors[0]
    assert "Traceback" not in p.stderr and "\tat " not in p.stderr, p.stderr[-3000:]
    return errors[0]


def _job(module: str, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
    return subprocess.run([sys.executable, "-m", module, *args], env=env, capture_output=True, text=True,
                          timeout=timeout)


# -- the mechanism, in this process's Spark session ------------------------------------------------------

@pytest.mark.spark
def test_task_errors_are_rebuilt_on_the_driver(spark):
    sc = spark.sparkContext

    def unreadable(_):
        raise UnreadableFileError("cannot read commitlog segment: Input/output error",
                                  "/data/store: a/commitlog/00000000000000065536", 4096)

    with pytest.raises(Exception) as info:
        sc.parallelize([0], 1).map(unreadable).collect()
    assert not isinstance(info.value, StoreReaderError)         # what Spark raises: wrapped
    err = store_error(info.value)
    assert type(err) is UnreadableFileError
    assert (err.path, err.position) == ("/data/store: a/commitlog/00000000000000065536", 4096)
    assert str(err) == ("/data/store: a/commitlog/00000000000000065536 @ byte 4096: cannot read "
                        "commitlog segment: Input/output error")

    def full(_):
        raise OSError(errno.ENOSPC, "No space left on device", "/out/consumequeue/T/0/00000000000000000000")

    with pytest.raises(Exception) as info:
        sc.parallelize([0], 1).map(full).collect()
    err = store_error(info.value)
    assert err.path == "/out/consumequeue/T/0/00000000000000000000"
    assert "No space left on device" in str(err)

    def bug(_):
        raise ValueError("a bug, not bad input")

    with pytest.raises(Exception) as info:
        sc.parallelize([0], 1).map(bug).collect()
    assert store_error(info.value) is None                      # re-raised by the jobs, with its trace


@pytest.mark.spark
def test_data_source_errors_are_rebuilt(spark, tmp_path):
    root = _copy(tmp_path)
    bad = _socket_segment(root)
    store_reader.register(spark)
    df = spark.read.format("rocketmq").options(path=str(root), brokerConfig=str(support.broker_conf(*CASE))).load()
    with pytest.raises(Exception) as info:
        df.count()
    err = store_error(info.value)
    assert type(err) is UnreadableFileError and err.path == str(bad)
    assert "No such device or address" in err.reason


def test_writer_errors_name_their_file(tmp_path):
    from store_reader.io.outputs import writing

    with pytest.raises(OutputError) as info:
        with writing(str(tmp_path / "x"), "index file"):
            raise OSError(errno.ENOSPC, "No space left on device")
    assert str(info.value) == f"{tmp_path / 'x'}: cannot write index file: No space left on device"


# -- the jobs, as processes -------------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("job", ["recover", "audit", "replicas"])
def test_unreadable_segment_is_one_line_and_exit_2(job, tmp_path):
    root = _copy(tmp_path)
    bad = _socket_segment(root)
    conf = str(support.broker_conf(*CASE))
    if job == "recover":
        out = tmp_path / "out"
        p = _job("jobs.recover", "--store", str(root), "--broker-config", conf, "--out", str(out))
        assert not out.exists() and sorted(x.name for x in tmp_path.iterdir()) == ["store"]
    elif job == "audit":
        p = _job("jobs.audit", "--store", str(root), "--broker-config", conf)
    else:
        p = _job("jobs.replicas", "--master", str(root), "--slave", str(support.input_store(*CASE)),
                 "--broker-config", conf, "--audit-path", str(tmp_path / "audit"))
    line = _one_error_line(p, str(bad))
    # recover and audit open it in a scan task; replicas refuses the store on the driver (a
    # segment shorter than mappedFileSizeCommitLog) before any task runs
    assert ("refuses to load it" if job == "replicas" else "No such device or address") in line


@pytest.mark.slow
def test_fifo_segment_fails_instead_of_hanging(tmp_path):
    root = _copy(tmp_path)
    fifo = root / "commitlog" / BAD
    fifo.unlink()
    os.mkfifo(fifo)
    p = _job("jobs.audit", "--store", str(root), "--broker-config", str(support.broker_conf(*CASE)),
             timeout=300)
    assert "not a regular file" in _one_error_line(p, str(fifo))


@pytest.fixture
def small_tmpfs(tmp_path):
    """A 2 MiB tmpfs (root only: tests run as root), unmounted at the end."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)], check=True)
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=True)


@pytest.mark.slow
def test_disk_full_in_an_executor_is_one_line_and_exit_2(tmp_path, small_tmpfs):
    """The commitlog and consume queues fit; the index file an executor writes (its hash slots
    alone are 4 MB with ``maxHashSlotNum=1000000``) does not."""
    root = _copy(tmp_path)
    for f in (root / "index").iterdir():       # index files of the fixture's own size go: rebuilt
        f.unlink()
    conf = tmp_path / "broker.conf"
    conf.write_text(support.broker_conf(*CASE).read_text().replace("maxHashSlotNum=100\n",
                                                                     "maxHashSlotNum=1000000\n"))
    out = small_tmpfs / "out"
    p = _job("jobs.recover", "--store", str(root), "--broker-config", str(conf), "--out", str(out))
    line = _one_error_line(p, str(small_tmpfs / "out.tmp-"))
    assert "/index/" in line and line.endswith("cannot write index file: No space left on device")
    assert list(small_tmpfs.iterdir()) == []             # nothing half-written is left
