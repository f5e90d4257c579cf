"""The repaired store's write path: the commitlog copied and hashed in one read, the manifest built
from digests already known, the Delta audit tables written side by side with ``runs`` last, and
the audit running next to the write with clean failure handling (nothing left behind, the first
failure raised)."""
from __future__ import annotations

import datetime as dt
import errno
import fcntl
import hashlib
import json
import os
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import support
from jobs._spark import deltasink
from jobs import findings as fnd
from jobs import recover as job
from jobs import auditwrite, repairwrite
from jobs.recoverreport import RunReport
from jobs._spark.scan import scan_segments
from store_reader import open_store
from store_reader.repair import placement, publish
from store_reader.io import directio, fsync, hashing, manifest
from store_reader.broker import prediction, replay
from store_reader.io import storefs
from store_reader.exceptions import OutputError, StoreReaderError

V4, V5 = support.VERSIONS
TS = dt.datetime(2026, 11, 21, tzinfo=dt.timezone.utc)


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _source(tmp_path, size: int, seed: int = 1) -> tuple[str, bytes]:
    data = bytes((i * 131 + seed * 7 + (i >> 9)) % 251 for i in range(size))
    path = tmp_path / f"src-{seed}"
    path.write_bytes(data)
    return str(path), data


# -- commitlog copy (store_reader.repair.placement; the ways of placing a whole segment: test_placement.py) --

@pytest.mark.parametrize("keep", [0, 1, 4095, 4096, 10_000, 20_479, 20_480])
def test_copy_writes_the_kept_bytes_then_zeros_and_returns_their_digest(tmp_path, monkeypatch, keep):
    monkeypatch.setattr(placement, "HASH_CHUNK", 4096)        # many chunks, one partial
    monkeypatch.setattr(hashing, "_ZEROS", bytes(3000))        # zero tails fed in several pieces
    src, data = _source(tmp_path, 20_480)
    dest = tmp_path / "dest"
    digest = placement.place_segment(src, str(dest), keep, 20_480).sha256
    want = data[:keep] + bytes(20_480 - keep)
    assert dest.read_bytes() == want
    assert digest == _sha(want) == hashing.sha256_file(str(dest))


def test_copy_of_a_source_shorter_than_keep_zero_fills_to_the_file_size(tmp_path, monkeypatch):
    monkeypatch.setattr(placement, "HASH_CHUNK", 4096)
    src, data = _source(tmp_path, 9_000)
    dest = tmp_path / "dest"
    digest = placement.place_segment(src, str(dest), 12_000, 16_384).sha256
    want = data + bytes(16_384 - 9_000)
    assert dest.read_bytes() == want and digest == _sha(want)


def test_keep_past_the_file_size_is_cut_at_the_file_size(tmp_path):
    src, data = _source(tmp_path, 8_192)
    dest = tmp_path / "dest"
    assert placement.place_segment(src, str(dest), 8_192, 5_000).sha256 == _sha(data[:5_000])
    assert dest.read_bytes() == data[:5_000]


def test_copy_errors_are_raised_naming_the_file_written(tmp_path, monkeypatch):
    src, _ = _source(tmp_path, 8_192)

    def full(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "pwrite", full)
    with pytest.raises(OutputError, match="cannot write commitlog file: No space left on device") as exc:
        placement.place_segment(src, str(tmp_path / "dest"), 8_000, 8_192)
    assert exc.value.path == str(tmp_path / "dest")


@pytest.mark.parametrize("n", [0, 1, 2999, 3000, 3001, 9000, 10_001])
def test_update_zeros_is_the_digest_of_that_many_zero_bytes(monkeypatch, n):
    monkeypatch.setattr(hashing, "_ZEROS", bytes(3000))
    h = hashlib.sha256(b"head")
    hashing.update_zeros(h, n)
    assert h.hexdigest() == _sha(b"head" + bytes(n))


@pytest.mark.parametrize("layout", [
    [],                                          # all hole
    [(0, b"h" * 5000)],                          # data, then a hole to the end
    [(1 << 20, b"m" * 70_000)],                  # hole, data, hole
    [(0, b"a" * 10), (3 << 20, b"b" * 9), (5 << 20, b"c" * 4096)],   # several runs
    [(0, b"x" * (6 << 20))],                     # no hole at all
])
def test_file_digest_hashes_holes_as_zeros_without_reading_them(tmp_path, monkeypatch, layout):
    path = tmp_path / "sparse"
    size = 6 << 20
    with open(path, "wb") as fh:
        fh.truncate(size)
        for at, data in layout:
            fh.seek(at)
            fh.write(data)
    want = _sha(path.read_bytes())
    read = []
    real = os.pread
    monkeypatch.setattr(os, "pread", lambda fd, n, at: read.append(n) or real(fd, n, at))
    assert hashing.sha256_file(str(path)) == want
    with open(path, "rb") as fh:
        runs = list(storefs.data_extents(fh.fileno(), size))
    assert all(any(a <= at and at + len(d) <= b for a, b in runs) for at, d in layout)   # no data missed
    if os.stat(path).st_blocks * 512 < size // 2:    # a filesystem that keeps holes reads only data
        assert sum(read) < size // 2


def test_file_digest_reads_everything_where_holes_cannot_be_asked_for(tmp_path, monkeypatch):
    path = tmp_path / "f"
    path.write_bytes(b"d" * 100 + bytes(70_000) + b"e")
    real = os.lseek

    def no_seek_data(fd, pos, how):
        if how in (os.SEEK_DATA, os.SEEK_HOLE):
            raise OSError(errno.EINVAL, "not supported")
        return real(fd, pos, how)

    monkeypatch.setattr(os, "lseek", no_seek_data)
    with open(path, "rb") as fh:
        assert list(storefs.data_extents(fh.fileno(), 70_101)) == [(0, 70_101)]
    assert hashing.sha256_file(str(path)) == _sha(path.read_bytes())


def _takes_direct_io(path) -> bool:
    """Whether the filesystem holding ``path`` takes direct I/O (this machine's ext4 and tmpfs do)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        return directio.set_direct(fd, True)
    finally:
        os.close(fd)


@pytest.mark.parametrize("size, layout", [
    (6 << 20, [(0, b"h" * 5000)]),                       # the index file's shape: data, then a hole
    (6 << 20, [(1 << 20, b"m" * 70_000)]),
    ((9 << 20) + 123, [(0, b"x" * ((9 << 20) + 123))]),  # longer than a read, an unaligned end
    (5000, [(4000, b"t" * 1000)]),                       # a last piece shorter than a block
])
def test_file_digest_by_direct_reads_is_the_files_digest(tmp_path, monkeypatch, size, layout):
    """``sha256_file(direct=True)``, for a file written with direct I/O: aligned direct reads where
    the filesystem takes them, the same digest as a buffered read."""
    path = tmp_path / "f"
    with open(path, "wb") as fh:
        fh.truncate(size)
        for at, data in layout:
            fh.seek(at)
            fh.write(data)
    want = _sha(path.read_bytes())
    reads, real = [], os.preadv

    def preadv(fd, buffers, at):
        reads.append((at, sum(len(b) for b in buffers), bool(fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_DIRECT)))
        return real(fd, buffers, at)

    monkeypatch.setattr(os, "preadv", preadv)
    assert hashing.sha256_file(str(path), direct=True) == want
    assert reads and all(d == _takes_direct_io(path) for _, _, d in reads)
    assert all(at % directio.DIRECT_ALIGN == 0 and n % directio.DIRECT_ALIGN == 0 for at, n, d in reads if d)


def test_file_digest_by_direct_reads_falls_back_where_direct_io_is_refused(tmp_path, monkeypatch):
    path = tmp_path / "f"
    path.write_bytes(b"r" * 10_000)
    real = os.preadv

    def preadv(fd, buffers, at):
        if fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_DIRECT:
            raise OSError(errno.EINVAL, "Invalid argument")     # a device whose blocks are larger
        return real(fd, buffers, at)

    monkeypatch.setattr(os, "preadv", preadv)
    assert hashing.sha256_file(str(path), direct=True) == _sha(path.read_bytes())


# -- index files (store_reader.repair.index) -------------------------------------------------------

@pytest.mark.parametrize("refused", [False, True])
def test_an_index_file_is_written_in_whole_pages_with_direct_io_and_holds_the_puts_bytes(
        tmp_path, monkeypatch, refused):
    """``IndexFileWriter``: entries go out a page at a time as they fill (direct where the
    filesystem takes it), the header, slots and last entries' page at close; the file is the
    broker's bytes (``build_index_files``, the numpy twin) and its digest is theirs."""
    from store_reader.formats import indexfile as ix
    from store_reader.formats.brokerconf import BrokerConfig
    from store_reader.repair import index

    cfg = BrokerConfig(maxHashSlotNum=1000, maxIndexNum=5000)
    rng = np.random.default_rng(3)
    n = 4321
    kh, phy = rng.integers(0, 1 << 31, n), np.arange(1, n + 1, dtype=np.int64) * 1000
    ts = 1_700_000_000_000 + np.arange(n, dtype=np.int64)
    if refused:                                     # e.g. a filesystem without O_DIRECT
        real_fcntl = fcntl.fcntl

        def no_direct(fd, cmd, arg=0):
            if cmd == fcntl.F_SETFL and arg & os.O_DIRECT:
                raise OSError(errno.EINVAL, "Invalid argument")
            return real_fcntl(fd, cmd, arg)

        monkeypatch.setattr(fcntl, "fcntl", no_direct)
    writes, real_pwrite = [], os.pwrite

    def pwrite(fd, data, at):
        writes.append((at, len(data), bool(fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_DIRECT)))
        return real_pwrite(fd, data, at)

    monkeypatch.setattr(os, "pwrite", pwrite)
    path = tmp_path / "index"
    w = index.IndexFileWriter(str(path), cfg, ix.IndexHeader.first())
    for lo, hi in ((0, 1), (1, 700), (700, 3000), (3000, n)):
        w.put(kh[lo:hi], phy[lo:hi], ts[lo:hi])
    written = w.close()
    (want,) = ix.build_index_files(kh, phy, ts, hash_slot_num=1000, index_num=5000)
    assert path.read_bytes() == bytes(want.data) and written.header == want.header
    assert hashing.sha256_file(str(path), direct=True) == _sha(bytes(want.data))
    page = directio.DIRECT_ALIGN
    assert all(at % page == 0 and size % page == 0 for at, size, _ in writes)
    assert {d for _, _, d in writes} == {not refused and _takes_direct_io(path)}
    # entries' pages while putting, then the head (header, slots, first entries' page), then the last page
    head = -(-ix.slot_position(1000) // page) * page
    assert writes[-2] == (0, head, writes[-2][2]) and writes[-1][0] > head


# -- manifest --------------------------------------------------------------------------------------

def _tree(root):
    (root / "commitlog").mkdir(parents=True)
    (root / "consumequeue" / "T" / "0").mkdir(parents=True)
    files = {"commitlog/00000000000000000000": b"a" * 5000, "commitlog/00000000000000004096": b"",
             "consumequeue/T/0/00000000000000000000": b"q" * 40, "checkpoint": b"c" * 24,
             "config/topics.json": b"{}", ".recover-incomplete": b"run"}
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return files


def test_tree_manifest_takes_known_digests_and_reads_only_the_rest(tmp_path, monkeypatch):
    root = tmp_path / "out"
    files = _tree(root)
    want = [{"path": rel, "size": len(files[rel]), "sha256": _sha(files[rel])}
            for rel in sorted(files) if rel != ".recover-incomplete"]
    known = {rel: _sha(data) for rel, data in files.items() if rel.startswith("commitlog/")}
    read = []
    real = hashing.sha256_file
    monkeypatch.setattr(hashing, "sha256_file", lambda p: read.append(os.path.relpath(p, root)) or real(p))
    got = manifest.tree_manifest(str(root), skip={".recover-incomplete"}, known=known)
    assert got == want
    assert sorted(read) == sorted(rel for rel in files
                                  if rel not in known and rel != ".recover-incomplete")
    read.clear()
    assert manifest.tree_manifest(str(root), skip={".recover-incomplete"}) == want
    assert len(read) == len(want)


# -- Delta audit tables ----------------------------------------------------------------------------

def _rows(run_id: str, n: int, value: int = 0) -> pa.Table:
    return pa.table({"run_id": [run_id] * n, "store_id": ["s"] * n, "value": [value + i for i in range(n)],
                     "audited_at": pa.array([TS] * n, pa.timestamp("us", tz="UTC"))})


def test_write_tables_commits_every_table_and_runs_last(tmp_path, monkeypatch):
    tables = {"runs": _rows("r1", 1), **{f"t{i}": _rows("r1", i + 1, 10 * i) for i in range(6)}}
    events, lock = [], threading.Lock()
    real = deltasink.write_run_rows

    def recorded(uri, rows, run_id, spark=None, storage_options=None):
        with lock:
            events.append(("start", os.path.basename(uri)))
        real(uri, rows, run_id, spark, storage_options)
        with lock:
            events.append(("end", os.path.basename(uri)))

    monkeypatch.setattr(deltasink, "write_run_rows", recorded)
    uris = deltasink.write_tables(str(tmp_path / "audit"), tables, "r1")
    assert [os.path.basename(u) for u in uris] == [f"t{i}" for i in range(6)] + ["runs"]
    runs_start = events.index(("start", "runs"))
    assert {name for kind, name in events[:runs_start] if kind == "end"} == {f"t{i}" for i in range(6)}
    for name, rows in tables.items():
        assert deltasink.read_table(str(tmp_path / "audit" / name)).sort_by("value").equals(rows)
    # a re-run replaces its rows in every table
    again = {name: _rows("r1", 2, 100) for name in tables}
    deltasink.write_tables(str(tmp_path / "audit"), again, "r1")
    for name in tables:
        assert deltasink.read_table(str(tmp_path / "audit" / name))["value"].to_pylist() == [100, 101]


def test_write_tables_failure_leaves_no_run_row(tmp_path):
    tables = {"a": _rows("r1", 2), "b": _rows("other", 1), "runs": _rows("r1", 1)}
    with pytest.raises(ValueError, match="another run"):
        deltasink.write_tables(str(tmp_path / "audit"), tables, "r1")
    assert deltasink.read_table(str(tmp_path / "audit" / "a")).num_rows == 2   # committed anyway
    assert not (tmp_path / "audit" / "runs").exists()


# -- the run: audit next to the write --------------------------------------------------------------

def _report(spark, case, out):
    store = open_store(support.input_store(*case), support.broker_conf(*case))
    version = "5.3" if case[0] == V5 else "4.9"
    summaries = scan_segments(spark, store, store.scan_options(broker_5x=version == "5.3"))
    pred = prediction.predict(store, version, summaries=summaries)
    return store, RunReport("test-run", str(store.root), str(out), version, pred, summaries)


@pytest.mark.spark
def test_built_store_stays_marked_incomplete_until_placed(spark, tmp_path):
    """Each build has a temporary directory of its own, marked incomplete until it is placed; a
    killed build's directory is removed by the next run under the output's lock. The manifest never
    lists the marker and matches the files as written."""
    case = (V5, "torn-middle-crc")
    out = tmp_path / "out"
    store, report = _report(spark, case, out)
    killed = repairwrite.build_repaired_store(spark, store, report, out)
    assert (killed / publish.TMP_MARKER).read_text() == "test-run" and not out.exists()
    tmp = repairwrite.build_repaired_store(spark, store, report, out)   # the next run: its own directory
    assert tmp != killed and tmp.name.startswith("out.tmp-test-run-")
    with publish.OutputLock(out):
        done = publish.recover_leftovers(out)
    assert sorted(done) == sorted(f"removed {p.name} (left by a run that did not finish)" for p in (killed, tmp))
    assert not killed.exists() and not tmp.exists()
    tmp = repairwrite.build_repaired_store(spark, store, report, out)
    publish.publish(tmp, out, overwrite=False)
    assert not tmp.exists() and not (out / publish.TMP_MARKER).exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    outputs = json.loads((out / "MANIFEST.json").read_text())["outputs"]
    files = sorted(os.path.relpath(os.path.join(d, f), out) for d, _, fs in os.walk(out) for f in fs)
    assert [e["path"] for e in outputs] == [f for f in files if f != "MANIFEST.json"]
    for e in outputs:
        data = (out / e["path"]).read_bytes()
        assert e["size"] == len(data) and e["sha256"] == _sha(data), e["path"]


@pytest.mark.spark
def test_placed_store_is_synced_to_disk_before_the_rename_publishes_it(spark, tmp_path, monkeypatch):
    """Every file and directory of the built store is fsync'd while still under its temporary
    name, and the parent after the rename (a crash later cannot leave a published, partial store)."""
    case = (V5, "torn-middle-crc")
    out = tmp_path / "out"
    store, report = _report(spark, case, out)
    tmp = repairwrite.build_repaired_store(spark, store, report, out)
    synced = []
    real = fsync.sync_path
    monkeypatch.setattr(fsync, "sync_path", lambda p: (synced.append((p, out.exists())), real(p)))
    publish.publish(tmp, out, overwrite=False)
    before = {os.path.relpath(p, tmp) for p, placed in synced if not placed}
    files = {os.path.relpath(os.path.join(d, f), out) for d, _, fs in os.walk(out) for f in fs}
    dirs = {os.path.relpath(d, out) for d, _, _ in os.walk(out)}
    assert files | dirs <= before and len(files) > 10
    assert synced[-1] == (str(out.parent), True)


@pytest.mark.spark
def test_audit_failure_removes_the_finished_write(spark, tmp_path, monkeypatch):
    case = (V4, "crash-tail")
    out = tmp_path / "out"
    built = threading.Event()
    real = repairwrite.build_repaired_store

    def build(*a, **k):
        tmp = real(*a, **k)
        built.set()
        return tmp

    real_audit = fnd.audit

    def audit(*a, **k):
        real_audit(*a, **k)                     # its queue buckets write the consume queues
        assert built.wait(120)                  # fails only once the repaired store is complete
        raise StoreReaderError("audit could not read something", "somewhere")

    monkeypatch.setattr(auditwrite, "build_repaired_store", build)
    monkeypatch.setattr(fnd, "audit", audit)
    with pytest.raises(StoreReaderError, match="audit could not read"):
        job.recover(spark, str(support.input_store(*case)), str(out), str(support.broker_conf(*case)), "4.9")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.spark
def test_write_failure_cancels_the_audit_and_is_the_error_raised(spark, tmp_path, monkeypatch):
    case = (V4, "crash-tail")
    out = tmp_path / "out"
    write_failed, audit_cancelled = threading.Event(), threading.Event()
    real_audit = fnd.audit

    def audit(*a, **k):
        assert write_failed.wait(120)           # its jobs start as the write fails
        try:
            return real_audit(*a, **k)
        except Exception:
            audit_cancelled.set()
            raise

    def full(*a, **k):
        write_failed.set()
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(fnd, "audit", audit)
    monkeypatch.setattr(repairwrite, "rebuild_index_files", full)
    with pytest.raises(StoreReaderError, match="disk full"):
        job.recover(spark, str(support.input_store(*case)), str(out), str(support.broker_conf(*case)), "4.9")
    assert list(tmp_path.iterdir()) == []
    assert audit_cancelled.is_set()             # stopped, not run to its end
    monkeypatch.undo()
    # the session is fine afterwards: the same run succeeds and matches the broker
    report = job.recover(spark, str(support.input_store(*case)), str(out), str(support.broker_conf(*case)), "4.9")
    assert report.written and report.findings is not None
    from test_recover_job import assert_matches_broker
    assert_matches_broker(out, case, report.prediction.max_phy_offset)


@pytest.mark.spark
def test_tasks_still_running_after_a_failed_job_leave_nothing_behind(spark, tmp_path, monkeypatch):
    """A job that fails returns while its other tasks still run: the build waits for them before
    removing its output, so a straggler cannot recreate a directory in it."""
    case = (V5, "torn-middle-crc")
    work, sync = tmp_path / "work", tmp_path / "sync"
    work.mkdir()
    sync.mkdir()
    out = work / "out"

    def place_commitlog(spark_, store, kept, dest_dir, link, digests=None):
        out_root = os.path.dirname(dest_dir)
        started = str(sync / "straggler-started")

        def task(i):
            if i == 0:                          # fails once the other task runs
                while not os.path.exists(started):
                    time.sleep(0.01)
                raise RuntimeError("a commitlog placement task failed")
            open(started, "w").close()
            # the straggler: writes as soon as the output is gone (or after 10 s)
            deadline = time.monotonic() + 10
            while os.path.exists(out_root) and time.monotonic() < deadline:
                time.sleep(0.01)
            os.makedirs(os.path.join(out_root, "consumequeue", "Straggler", "0"), exist_ok=True)
            return i
        return spark_.sparkContext.parallelize([0, 1], 2).map(task).collect()

    monkeypatch.setattr(repairwrite, "place_commitlog", place_commitlog)
    with pytest.raises(Exception, match="a commitlog placement task failed"):
        job.recover(spark, str(support.input_store(*case)), str(out), str(support.broker_conf(*case)), "5.3")
    assert list(work.iterdir()) == []


# -- fixed costs: the driver's class-data-sharing archive, one class lookup per session -------------

def _fake_spark_home(tmp_path, monkeypatch):
    jars = tmp_path / "spark" / "jars"
    jars.mkdir(parents=True)
    for name in ("spark-core.jar", "spark-sql.jar"):
        (jars / name).write_bytes(b"jar")
    monkeypatch.setenv("SPARK_HOME", str(tmp_path / "spark"))
    monkeypatch.setenv("ROCKETMQ_CDS_DIR", str(tmp_path / "cds"))
    monkeypatch.delenv("ROCKETMQ_CDS", raising=False)
    return jars


def test_cds_archive_is_keyed_by_the_spark_jars_and_can_be_turned_off(tmp_path, monkeypatch):
    from jobs._spark import cds

    jars = _fake_spark_home(tmp_path, monkeypatch)
    first = cds.archive_path()
    assert first is not None and first.parent == tmp_path / "cds"
    assert cds.archive_path() == first
    (jars / "spark-sql.jar").write_bytes(b"a new spark")      # an upgrade: another archive
    assert cds.archive_path() not in (None, first)
    monkeypatch.setenv("ROCKETMQ_CDS", "off")
    assert cds.archive_path() is None


def test_embedded_settings_use_an_archive_only_when_one_exists(tmp_path, monkeypatch):
    from jobs._spark import cds, sparkutil

    _fake_spark_home(tmp_path, monkeypatch)
    conf = tmp_path / "local.conf"
    conf.write_text("spark.master local[2]\nspark.ui.enabled false\n")
    assert sparkutil.JAVA_OPTIONS not in sparkutil.embedded_settings(conf)
    archive = cds.archive_path()
    archive.parent.mkdir(parents=True)
    archive.write_bytes(b"archive")
    assert sparkutil.JAVA_OPTIONS not in sparkutil.embedded_settings(conf)   # not one a build checked
    (archive.parent / (archive.name + ".size")).write_text("7\n")
    got = sparkutil.embedded_settings(conf, {sparkutil.JAVA_OPTIONS: "-Dx=1"})
    assert got[sparkutil.JAVA_OPTIONS] == f"-Dx=1 -XX:SharedArchiveFile={archive}"
    assert got["spark.master"] == "local[2]" and got["spark.ui.enabled"] == "false"
    own = {sparkutil.JAVA_OPTIONS: "-XX:ArchiveClassesAtExit=/tmp/x.jsa"}   # building one: left alone
    assert sparkutil.embedded_settings(conf, own)[sparkutil.JAVA_OPTIONS] == own[sparkutil.JAVA_OPTIONS]
    archive.write_bytes(b"arch")                       # cut short: a JVM mapping it would crash
    assert sparkutil.JAVA_OPTIONS not in sparkutil.embedded_settings(conf)


def test_the_set_up_s_archive_build_says_why_it_built_none(tmp_path, monkeypatch, capsys):
    """``buildcds --if-missing`` as scripts/bootstrap.sh runs it: with class-data sharing off there
    is nothing to build (exit 0); a build that cannot write its archive is one error line and exit
    1 (the set-up then notes it and goes on), not a traceback."""
    from jobs import buildcds

    _fake_spark_home(tmp_path, monkeypatch)
    monkeypatch.setenv("ROCKETMQ_CDS", "off")
    assert buildcds.main(["--if-missing"]) == 0
    assert capsys.readouterr().out == "class-data sharing is off\n"
    monkeypatch.delenv("ROCKETMQ_CDS")
    (tmp_path / "not-a-dir").write_text("")
    monkeypatch.setenv("ROCKETMQ_CDS_DIR", str(tmp_path / "not-a-dir" / "cds"))
    assert buildcds.main(["--if-missing"]) == 1
    out = capsys.readouterr()
    assert out.out == "" and out.err.startswith("error: no class-data-sharing archive was built: ")
    assert out.err.count("\n") == 1 and "not-a-dir" in out.err


@pytest.mark.spark
def test_has_delta_asks_the_jvm_once_per_application(spark, monkeypatch):
    from jobs._spark import deltasink

    deltasink._HAS_DELTA.pop(spark.sparkContext.applicationId, None)
    first = deltasink.has_delta(spark)

    class NoJVM:
        def __getattr__(self, name):
            pytest.fail("asked the JVM again")

    monkeypatch.setattr(spark.sparkContext, "_jvm", NoJVM())
    assert deltasink.has_delta(spark) is first


def test_a_job_builds_a_spark_session_only_when_something_asks(tmp_path):
    """``get_spark(session=False)``: tasks run on the SparkContext alone, no session exists on the
    JVM until one is used, and the session built then carries the embedded settings."""
    import subprocess
    import sys

    code = ("from jobs._spark.sparkutil import JobSpark, get_spark\n"
            "s = get_spark('lazy-session', extra={'spark.ui.showConsoleProgress': 'false'}, session=False)\n"
            "assert isinstance(s, JobSpark), type(s)\n"
            "sessions = s.sparkContext._jvm.org.apache.spark.sql.SparkSession\n"
            "assert s.sparkContext.parallelize(range(10), 2).sum() == 45\n"
            "assert sessions.getDefaultSession().isEmpty()\n"
            "assert s.createDataFrame([(1,)], 'a int').count() == 1\n"
            "assert not sessions.getDefaultSession().isEmpty()\n"
            "print('ZONE', s.conf.get('spark.sql.session.timeZone'))\n"
            "s.stop()\n")
    ran = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=support.ROOT,
                         timeout=600)
    assert ran.returncode == 0 and "ZONE UTC" in ran.stdout, ran.stderr[-2000:]


@pytest.mark.slow
def test_built_cds_archive_is_one_the_driver_jvm_maps():
    """The archive the real build wrote (the test command's, ``buildcds --if-missing``; built here
    when it is not in place) is whole and accepted by the JVM: with ``-Xshare:on`` a session whose
    JVM cannot map it does not start at all."""
    import subprocess
    import sys

    from jobs._spark import cds

    env = dict(os.environ)
    env.pop("ROCKETMQ_CDS", None)
    built = subprocess.run([sys.executable, "-m", "jobs.buildcds", "--if-missing"], env=env, check=True,
                           capture_output=True, text=True, cwd=support.ROOT)
    archive = Path(built.stdout.strip().splitlines()[-1])
    assert cds.archive_ready(archive) and archive.stat().st_size > 1 << 20
    assert not [p.name for p in archive.parent.iterdir() if p.name.endswith(".part")]
    code = ("from jobs._spark import cds\n"
            "from jobs._spark.sparkutil import get_spark\n"
            "print('ARCHIVE', cds.archive_path())\n"
            "s = get_spark('cds-check', extra={'spark.driver.extraJavaOptions': '-Xshare:on'})\n"
            "print('SUM', s.sparkContext.parallelize(range(10), 2).sum())\n")
    # -Xshare:on holds no "Archive": get_spark adds the archive next to it
    ran = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         cwd=support.ROOT, timeout=600)
    assert f"ARCHIVE {archive}" in ran.stdout and "SUM 45" in ran.stdout, ran.stderr[-2000:]


@pytest.mark.spark
@pytest.mark.parametrize("version", ["4.9", "5.3"])
def test_the_write_starts_once_the_cut_is_known_while_the_replay_runs(spark, tmp_path, monkeypatch, version):
    """``prediction.predict(on_cut=...)``: the commitlog is placed while the broker's replay is still
    held back, and the repaired store is the one written after the whole prediction. (The bounded
    prediction the job logs first, before its scan, replays on its own: not counted.)"""
    case = (V4, "crash-tail") if version == "4.9" else (V5, "crash-tail")
    placed, predicted, replays = threading.Event(), threading.Event(), []
    real_place, real_dispatch, real_bounded = repairwrite.place_commitlog, replay.dispatch_records, \
        job._recover_bounded

    def place(*a, **k):
        got = real_place(*a, **k)
        placed.set()
        return got

    def bounded(*a, **k):
        got = real_bounded(*a, **k)
        predicted.set()
        return got

    def dispatch(*a, **k):
        if predicted.is_set():
            replays.append(placed.wait(60))     # False: the commitlog was not placed while the replay ran
        return real_dispatch(*a, **k)

    monkeypatch.setattr(repairwrite, "place_commitlog", place)
    monkeypatch.setattr(replay, "dispatch_records", dispatch)
    monkeypatch.setattr(prediction, "dispatch_records", dispatch)
    monkeypatch.setattr(job, "_recover_bounded", bounded)
    early = job.recover(spark, str(support.input_store(*case)), str(tmp_path / "early"),
                        str(support.broker_conf(*case)), version)
    monkeypatch.undo()
    late = job.recover(spark, str(support.input_store(*case)), str(tmp_path / "late"),
                       str(support.broker_conf(*case)), version)
    assert early.written and late.written and predicted.is_set() and replays and all(replays)
    assert manifest.tree_manifest(str(tmp_path / "early")) == manifest.tree_manifest(str(tmp_path / "late"))
