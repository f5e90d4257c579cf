"""Stores on a filesystem that cannot be memory-mapped (``store_reader.io.storefs``, issue 7).

The real fixture stores are served through ``pyarrow.fs`` two ways: a ``SubTreeFileSystem`` over the
extracted directory (pyarrow's own code path), and ``MemoryFS``, an in-memory ``FileSystemHandler``
that counts every byte read, every open file, and can return fewer bytes than a file's size. Every
result must equal what the local mmap path gives on the same store.
"""
from __future__ import annotations

import dataclasses
import io
import os
import pickle
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pytest

import support
from schemas import MESSAGE
from store_reader.formats import checkpoint as ck
from store_reader.formats import config as cf
from store_reader.formats import consumequeue as cq
from store_reader.formats import indexfile as ix
from store_reader.io import fsutil, storefs
from store_reader import open_store
from store_reader.broker import indexservice, prediction, versions
from store_reader.formats.commitlog import scan_segment, summarize_segment
from store_reader.exceptions import (CorruptEntryError, NotAStoreError, StoreReaderError,
                                     UnreadableFileError)

pytestmark = pytest.mark.reader

CASES = support.scenarios()
# the request's named scenarios, both versions: torn records in the middle, lost consume queues
NAMED = [c for c in CASES if c[1] in ("clean", "torn-middle-crc", "torn-middle-magic", "cq-lost",
                                      "crash-tail", "cq-file-short")]
ALL_COLUMNS = list(MESSAGE.names)
HEADER_COLUMNS = [c for c in MESSAGE.names if c != "body"]


# -- an in-memory filesystem that counts ---------------------------------------------------------

class _CountedFile(io.BytesIO):
    """File content for ``pa.PythonFile``; ``limit`` makes it end early while its size (seek to
    the end) still reports every byte: a short read."""

    def __init__(self, fs: "MemoryFS", path: str, data: bytes, limit: int | None) -> None:
        super().__init__(data)
        self.fs, self.path, self.limit = fs, path, limit
        fs.open_files += 1
        fs.max_open_files = max(fs.max_open_files, fs.open_files)

    def read(self, n: int | None = -1) -> bytes:
        if self.limit is not None:
            left = max(0, self.limit - self.tell())
            n = left if n is None or n < 0 else min(n, left)
        data = super().read(n)
        self.fs.reads.append((self.path, len(data)))
        return data

    def close(self) -> None:
        if not self.closed:
            self.fs.open_files -= 1
        super().close()


class MemoryFS(pafs.FileSystemHandler):
    """Read-only in-memory filesystem: ``files`` {path: bytes}, ``dirs`` (empty ones included)."""

    def __init__(self, files: dict[str, bytes], dirs: set[str]) -> None:
        self.files, self.dirs = files, dirs
        self.short: dict[str, int] = {}
        self.reads: list[tuple[str, int]] = []
        self.open_files = self.max_open_files = 0

    @classmethod
    def of_tree(cls, root: Path) -> tuple[pafs.PyFileSystem, "MemoryFS", str]:
        """The tree under ``root`` as ``<root name>/...``: (filesystem, handler, store path)."""
        files, dirs = {}, {root.name}
        for dirpath, dirnames, filenames in os.walk(root):
            rel = os.path.relpath(dirpath, root.parent)
            dirs.update(f"{rel}/{d}" for d in dirnames)
            for name in filenames:
                files[f"{rel}/{name}"] = Path(dirpath, name).read_bytes()
        handler = cls(files, dirs)
        return pafs.PyFileSystem(handler), handler, root.name

    def bytes_read(self, prefix: str) -> int:
        return sum(n for p, n in self.reads if p.startswith(prefix))

    def _info(self, path: str) -> pafs.FileInfo:
        if path in self.files:
            return pafs.FileInfo(path, pafs.FileType.File, size=len(self.files[path]))
        if path in self.dirs:
            return pafs.FileInfo(path, pafs.FileType.Directory)
        return pafs.FileInfo(path, pafs.FileType.NotFound)

    def get_type_name(self) -> str:
        return "mem"

    def get_file_info(self, paths: list[str]) -> list[pafs.FileInfo]:
        return [self._info(p) for p in paths]

    def get_file_info_selector(self, selector: pafs.FileSelector) -> list[pafs.FileInfo]:
        base = selector.base_dir.rstrip("/")
        if base not in self.dirs:
            if selector.allow_not_found:
                return []
            raise FileNotFoundError(base)
        children = {p for p in (*self.files, *self.dirs) if p.rpartition("/")[0] == base}
        return [self._info(p) for p in sorted(children)]

    def open_input_file(self, path: str) -> pa.NativeFile:
        if path not in self.files:
            raise FileNotFoundError(path)
        return pa.PythonFile(_CountedFile(self, path, self.files[path], self.short.get(path)), mode="r")

    def open_input_stream(self, path: str) -> pa.NativeFile:
        return self.open_input_file(path)

    def normalize_path(self, path: str) -> str:
        return path

    def equals(self, other: object) -> bool:
        return other is self

    def _read_only(self, *args: object) -> None:
        raise OSError("read-only filesystem")

    create_dir = delete_dir = delete_dir_contents = delete_root_dir_contents = delete_file = _read_only
    move = copy_file = open_output_stream = open_append_stream = _read_only


# -- helpers ----------------------------------------------------------------------------------------

def _subtree(root: Path) -> tuple[pafs.FileSystem, str]:
    return pafs.SubTreeFileSystem(str(root.parent), pafs.LocalFileSystem()), root.name


def _open_pair(case, kind: str):
    """(local store, remote store, MemoryFS handler or None) of a fixture's input store."""
    root = support.input_store(*case)
    conf = support.broker_conf(*case)
    handler = None
    if kind == "subtree":
        fs, path = _subtree(root)
    else:
        fs, handler, path = MemoryFS.of_tree(root)
    return open_store(root, conf), open_store(path, conf, filesystem=fs), handler


def _same_text(local, remote, local_root, remote_root) -> None:
    """Messages agree once the remote root's name is replaced by the local one."""
    assert [str(x).replace(str(remote_root), str(local_root)) for x in remote] == [str(x) for x in local]


def _without_path(summaries):
    return [dataclasses.replace(s, path=None) for s in summaries]


def _version(case) -> str:
    return versions.V53 if case[0].endswith("5.3.3") else versions.V49


# -- discovery, scans, consume queues, index files, checkpoint, config -------------------------------------

@pytest.mark.parametrize("kind", ["subtree", "memory"])
@pytest.mark.parametrize("case", CASES, ids=support.case_id)
def test_remote_store_reads_exactly_like_local(case, kind):
    local, remote, _ = _open_pair(case, kind)
    assert isinstance(local.root, Path) and isinstance(remote.root, storefs.StoreLocation)
    assert all(isinstance(f.path, str) for f in local.commitlog_files)
    assert all(isinstance(f.path, storefs.StoreLocation) for f in remote.commitlog_files)
    # discovery
    assert [(f.name, f.start, f.size) for f in remote.commitlog_files] == \
        [(f.name, f.start, f.size) for f in local.commitlog_files]
    assert (remote.abort_exists, remote.lock_exists, remote.loadable, remote.config) == \
        (local.abort_exists, local.lock_exists, local.loadable, local.config)
    _same_text(local.load_problems, remote.load_problems, local.root, remote.root)
    _same_text(local.notes, remote.notes, local.root, remote.root)
    assert remote.version_hints() == local.version_hints()
    # commitlog: every column (bodies included) and the records behind a cut
    opts = local.scan_options()
    want = pa.Table.from_batches(list(local.scan_commitlog(ALL_COLUMNS, opts, include_lost=True)),
                                 schema=MESSAGE.arrow(ALL_COLUMNS))
    got = pa.Table.from_batches(list(remote.scan_commitlog(ALL_COLUMNS, opts, include_lost=True)),
                                schema=MESSAGE.arrow(ALL_COLUMNS))
    assert got.equals(want)
    assert _without_path(remote.summaries(opts)) == _without_path(local.summaries(opts))
    assert remote.segment_summaries(opts).drop_columns(["path"]).equals(
        local.segment_summaries(opts).drop_columns(["path"]))
    # consume queues
    size = local.config.cq_file_size
    lqueues, rqueues = cq.list_queues(local.root), cq.list_queues(remote.root)
    assert [(r.topic, r.queue_id) for r in rqueues] == [(r.topic, r.queue_id) for r in lqueues]
    for lref, rref in zip(lqueues, rqueues):
        try:
            want_files = cq.list_queue_files(lref.path, size)
        except StoreReaderError as exc:               # a file of the wrong size: same refusal
            with pytest.raises(type(exc)) as err:
                cq.list_queue_files(rref.path, size)
            _same_text([exc], [err.value], local.root, remote.root)
            continue
        got_files = cq.list_queue_files(rref.path, size)
        assert [(f.name, f.start, f.size) for f in got_files] == \
            [(f.name, f.start, f.size) for f in want_files]
        assert cq.read_queue(rref.path, rref.topic, rref.queue_id, size).equals(
            cq.read_queue(lref.path, lref.topic, lref.queue_id, size))
        for lf, rf in zip(want_files, got_files):
            (lh, ln), (rh, rn) = cq.read_queue_head(lf.path), cq.read_queue_head(rf.path)
            assert (rh.tobytes(), rn) == (lh.tobytes(), ln)
    # index files: headers, entries, and the broker's queries
    cfg = local.config
    lrefs = ix.list_index_files(local.index_dir, cfg.index_file_size, strict=False)
    rrefs = ix.list_index_files(remote.index_dir, cfg.index_file_size, strict=False)
    assert [(r.name, r.size) for r in rrefs] == [(r.name, r.size) for r in lrefs]
    for lr, rr in zip(lrefs, rrefs):
        assert ix.read_header(rr.path) == ix.read_header(lr.path)
        assert ix.read_entries(rr.path, cfg.maxHashSlotNum, cfg.maxIndexNum).equals(
            ix.read_entries(lr.path, cfg.maxHashSlotNum, cfg.maxIndexNum))
    for q in support.expected(*case).get("afterRecovery", {}).get("index", {}).get("queries", []):
        args = dict(hash_slot_num=cfg.maxHashSlotNum, index_num=cfg.maxIndexNum)
        assert ix.query(rrefs, q["topic"], q["key"], **args) == ix.query(lrefs, q["topic"], q["key"], **args)
    # checkpoint, abort, config files
    lck, rck = ck.read_checkpoint(local.root), ck.read_checkpoint(remote.root)
    assert dataclasses.replace(rck, path=None) == dataclasses.replace(lck, path=None)
    assert ck.abort_exists(remote.root) == ck.abort_exists(local.root) == local.abort_exists
    for read in (cf.read_consumer_offsets, cf.read_topics, cf.read_delay_offsets,
                 cf.read_subscription_groups):
        lc, rc = read(local.root), read(remote.root)
        assert (rc.generation, rc.skipped_reason, rc.tmp_path) == \
            (lc.generation, lc.skipped_reason, lc.tmp_path)
        assert rc.value.equals(lc.value) if isinstance(lc.value, pa.Table) else rc.value == lc.value


@pytest.mark.parametrize("case", CASES, ids=support.case_id)
def test_predicted_recovery_is_the_same_over_a_remote_filesystem(case):
    local, remote, _ = _open_pair(case, "subtree")
    version = _version(case)
    want = prediction.predict(local, version)
    got = prediction.predict(remote, version)
    _same_text(want.load_problems, got.load_problems, local.root, remote.root)
    same = ("broker_version", "load_result", "recovery_path", "start_file", "max_phy_offset",
            "min_phy_offset", "commitlog_files", "deleted_commitlog_files",
            "max_phy_offset_of_consume_queue", "confirm_offset", "reput_from_offset", "cq_truncated")
    assert {k: getattr(got, k) for k in same} == {k: getattr(want, k) for k in same}
    assert got.topic_queue_table() == want.topic_queue_table()
    for key, q in want.consume_queues.items():
        assert got.consume_queues[key].entries().tobytes() == q.entries().tobytes()
    assert [(f.name, f.header) for f in got.index_files] == [(f.name, f.header) for f in want.index_files]
    for g, w in zip(got.index_files, want.index_files):
        assert (g.data is None and w.data is None) or g.data.tobytes() == w.data.tobytes()
    if want.checkpoint is not None:
        assert got.checkpoint.values() == want.checkpoint.values()
    exp = support.expected(*case)
    if not exp["afterLoad"]["loadResult"]:
        assert not got.load_result
        return
    after = exp["afterRecovery"]
    assert (got.max_phy_offset, got.min_phy_offset) == (after["maxPhyOffset"], after["minPhyOffset"])
    for q in after["index"]["queries"]:
        assert indexservice.query_message(got, remote.config, q["topic"], q["key"], max_num=100000) == \
            q["queryMessagePhyOffsets"], q


# -- what a Spark task is given --------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["subtree", "memory"])
@pytest.mark.parametrize("case", NAMED, ids=support.case_id)
def test_remote_paths_pickle_for_spark_tasks(case, kind):
    """A task receives the path (filesystem + path, no open handle) and reads the file itself."""
    local, remote, _ = _open_pair(case, kind)
    opts = local.scan_options()
    for lf, rf in zip(local.commitlog_files, remote.commitlog_files):
        shipped = pickle.loads(pickle.dumps(rf.path))
        assert str(shipped) == str(rf.path)
        summary = summarize_segment(shipped, opts)
        assert dataclasses.replace(summary, path=None) == \
            dataclasses.replace(summarize_segment(lf.path, opts), path=None)
        again = pickle.loads(pickle.dumps(summary))      # summaries come back to the driver
        table, _ = scan_segment(again.path, opts, columns=HEADER_COLUMNS)
        assert table.equals(scan_segment(lf.path, opts, columns=HEADER_COLUMNS)[0])
    for ref in cq.list_queues(remote.root)[:3]:
        shipped = pickle.loads(pickle.dumps(ref.path))
        assert [f.name for f in cq.list_queue_files(shipped, local.config.cq_file_size, rocketmq5=True)] == \
            [f.name for f in cq.list_queue_files(ref.path, local.config.cq_file_size, rocketmq5=True)]


# -- memory and read pattern -------------------------------------------------------------------------

@pytest.mark.parametrize("case", NAMED, ids=support.case_id)
def test_scan_holds_one_segment_and_reads_none_ahead(case, monkeypatch):
    local, remote, fs = _open_pair(case, "memory")
    seg = local.config.mappedFileSizeCommitLog
    monkeypatch.setattr(storefs, "READ_CHUNK", 4096)        # many ranged reads per segment
    opts = remote.scan_options()                            # (reads the first record's head)
    fs.reads.clear()
    pool = pa.default_memory_pool()
    baseline = pool.bytes_allocated()
    commitlog = f"{remote.root.path}/commitlog/"
    batches = 0
    for batch in remote.scan_commitlog(HEADER_COLUMNS, opts, include_lost=True):
        batches += 1
        # the batch's segment is the only one read so far beyond those before it
        current = max(batch.column("phy_offset").to_pylist()) // seg
        assert fs.bytes_read(commitlog) <= sum(f.size for f in local.commitlog_files
                                               if f.start // seg <= current)
        assert pool.bytes_allocated() - baseline < 2 * seg     # one segment buffer, never two
        assert fs.open_files == 0                              # the segment's file is closed once read
    assert batches > 0 or not local.commitlog_files
    assert fs.bytes_read(commitlog) == sum(f.size for f in local.commitlog_files)   # each byte once
    assert all(n <= 4096 for p, n in fs.reads if p.startswith(commitlog))
    assert fs.max_open_files == 1
    assert pool.bytes_allocated() - baseline < seg                # the last buffer is released too
    # and the chunked reads change nothing
    got = pa.Table.from_batches(list(remote.scan_commitlog(HEADER_COLUMNS, opts, include_lost=True)),
                                schema=MESSAGE.arrow(HEADER_COLUMNS))
    want = pa.Table.from_batches(list(local.scan_commitlog(HEADER_COLUMNS, opts, include_lost=True)),
                                 schema=MESSAGE.arrow(HEADER_COLUMNS))
    assert got.equals(want)


@pytest.mark.parametrize("case", [c for c in NAMED if c[1] == "clean"], ids=support.case_id)
def test_index_query_reads_ranges_not_files(case):
    """A query reads the header, one slot and the chain's entries of each file, never a whole file."""
    local, remote, fs = _open_pair(case, "memory")
    cfg = local.config
    refs = ix.list_index_files(remote.index_dir, cfg.index_file_size)
    assert refs
    fs.reads.clear()
    queries = support.expected(*case)["afterRecovery"]["index"]["queries"]
    for q in queries:
        assert ix.query(refs, q["topic"], q["key"], hash_slot_num=cfg.maxHashSlotNum,
                        index_num=cfg.maxIndexNum) == q["indexPhyOffsets"]
    sizes = {n for p, n in fs.reads if "/index/" in p}
    assert sizes and sizes <= {ix.INDEX_HEADER_SIZE, ix.HASH_SLOT_SIZE, ix.INDEX_ENTRY_SIZE}


# -- bad input through the remote path ----------------------------------------------------------------

def _local_copy(case, tmp_path) -> Path:
    dest = tmp_path / "store"
    shutil.copytree(support.input_store(*case), dest)
    return dest


def test_missing_segment_names_the_file_like_local(tmp_path):
    case = (support.VERSIONS[0], "clean")
    root = _local_copy(case, tmp_path)
    fs, handler, path = MemoryFS.of_tree(root)
    remote = open_store(path, support.broker_conf(*case), filesystem=pafs.PyFileSystem(handler))
    local = open_store(root, support.broker_conf(*case))
    victim = remote.commitlog_files[1]
    del handler.files[victim.path.path]
    os.remove(local.commitlog_files[1].path)
    with pytest.raises(UnreadableFileError) as lerr:
        scan_segment(local.commitlog_files[1].path, local.scan_options())
    with pytest.raises(UnreadableFileError) as rerr:
        scan_segment(victim.path, remote.scan_options())
    assert rerr.value.path == str(victim.path) and rerr.value.position is None
    assert rerr.value.reason == lerr.value.reason        # "cannot open commitlog segment: No such file ..."


@pytest.mark.parametrize("case", [c for c in NAMED if c[1] == "torn-middle-crc"], ids=support.case_id)
def test_short_read_names_file_and_position(case):
    _, remote, fs = _open_pair(case, "memory")
    seg = remote.commitlog_files[2]
    fs.short[seg.path.path] = 40000
    with pytest.raises(UnreadableFileError, match="short read") as err:
        scan_segment(seg.path, remote.scan_options())
    assert (err.value.path, err.value.position) == (str(seg.path), 40000)
    ref = cq.list_queues(remote.root)[0]
    f = cq.list_queue_files(ref.path, remote.config.cq_file_size, rocketmq5=True)[0]
    fs.short[f.path.path] = 130
    with pytest.raises(UnreadableFileError, match="short read") as err:
        cq.read_queue_file(f.path)
    assert (err.value.path, err.value.position) == (str(f.path), 130)
    with pytest.raises(UnreadableFileError, match="short read") as err:
        cq.read_queue_head(f.path)
    assert (err.value.path, err.value.position) == (str(f.path), 130)
    cfg = remote.config
    idx = ix.list_index_files(remote.index_dir, cfg.index_file_size)[-1]
    fs.short[idx.path.path] = 100                             # header and some slots, no entry
    with pytest.raises(UnreadableFileError, match="short read") as err:
        with ix.IndexFile(idx.path, cfg.maxHashSlotNum, cfg.maxIndexNum) as f:
            f.entries_table()
    entry_1 = ix.INDEX_HEADER_SIZE + cfg.maxHashSlotNum * ix.HASH_SLOT_SIZE + ix.INDEX_ENTRY_SIZE
    assert (err.value.path, err.value.position) == (str(idx.path), entry_1)


def test_corrupt_files_give_the_local_errors(tmp_path):
    """Bytes that are wrong (not I/O that fails) give the same error class, message and position."""
    case = (support.VERSIONS[1], "clean")
    root = _local_copy(case, tmp_path)
    ref = cq.list_queues(root)[0]
    cq_file = cq.list_queue_files(ref.path, 600)[0].path
    with open(cq_file, "r+b") as fh:
        fh.truncate(590)
    (root / "config" / "topics.json").write_text("{\"topicConfigTable\": {1,}")
    (root / "config" / "topics.json.bak").write_text("{broken")
    fs, handler, path = MemoryFS.of_tree(root)
    remote_root = storefs.StoreLocation(fs, path)
    remote_cq = remote_root / os.path.relpath(cq_file, root)
    with pytest.raises(CorruptEntryError) as lerr:
        cq.read_queue_file(cq_file)
    with pytest.raises(CorruptEntryError) as rerr:
        cq.read_queue_file(remote_cq)
    assert (rerr.value.reason, rerr.value.position, rerr.value.path) == \
        (lerr.value.reason, lerr.value.position, str(remote_cq))
    with pytest.raises(StoreReaderError) as lerr:
        cf.read_topics(root)
    with pytest.raises(StoreReaderError) as rerr:
        cf.read_topics(remote_root)
    assert (type(rerr.value), rerr.value.reason, rerr.value.position) == \
        (type(lerr.value), lerr.value.reason, lerr.value.position)
    assert rerr.value.path == str(remote_root / "config" / "topics.json.bak")


def test_not_a_store_and_missing_root(tmp_path):
    fs, path = _subtree(tmp_path)
    (tmp_path / "empty").mkdir()
    for name in ("nope", "empty"):
        with pytest.raises(NotAStoreError) as lerr:
            open_store(tmp_path / name)
        with pytest.raises(NotAStoreError) as rerr:
            open_store(f"{path}/{name}", filesystem=fs)
        assert rerr.value.reason == lerr.value.reason
        assert rerr.value.path == f"subtree://{path}/{name}"


# -- lock, URIs, local filesystem --------------------------------------------------------------------

@pytest.mark.parametrize("case", [c for c in NAMED if c[1] == "clean"], ids=support.case_id)
def test_lock_of_a_remote_store_is_unknown(case):
    local, remote, _ = _open_pair(case, "subtree")
    assert ck.lock_status(local.root).locked is False
    status = ck.lock_status(remote.root)
    assert status.exists and status.locked is None and status.pid is None
    assert "F_GETLK" in status.detail and "unknown" in status.detail
    assert status.path == remote.lock_path


def test_lock_missing_on_a_remote_store(tmp_path):
    fs, path = _subtree(tmp_path)
    assert ck.lock_status(storefs.StoreLocation(fs, path)) == \
        ck.LockStatus(storefs.StoreLocation(fs, f"{path}/lock"), False, False, None)


@pytest.mark.parametrize("case", [c for c in NAMED if c[1] == "crash-tail"], ids=support.case_id)
def test_file_uri_and_local_filesystem_stay_on_the_mmap_path(case):
    root = support.input_store(*case)
    conf = support.broker_conf(*case)
    local = open_store(root, conf)
    for store in (open_store(root.as_uri(), conf),
                  open_store(str(root), conf, filesystem=pafs.LocalFileSystem())):
        assert store.root == root and store.commitlog_files == local.commitlog_files
        assert store.summaries() == local.summaries()


def test_location_paths_join_like_pathlib():
    fs = pafs.SubTreeFileSystem("/", pafs.LocalFileSystem())
    loc = storefs.location("a/b/", fs)
    assert loc.path == "a/b" and (loc / "c").path == "a/b/c" and (loc / "/abs/d").path == "/abs/d"
    assert (loc / "c").name == "c" and (loc / "c").parent == loc and loc.suffixed(".bak").path == "a/b.bak"
    assert storefs.location("/", fs) / "x" == storefs.StoreLocation(fs, "/x")
    assert storefs.location(Path("/tmp/x")).ref == "/tmp/x"
    with pytest.raises(ValueError):
        storefs.location(loc, fs)


def test_every_path_derived_from_a_uri_keeps_its_options(s3_server, monkeypatch):
    """A store named by a URI with options (the server's endpoint, nothing in the environment):
    every location derived from its root (joins, parents, ``.bak`` names, directory listings, the
    store's own paths) keeps the options, and its ``str()`` opens the same filesystem again; the
    consumer offsets read from it equal the local store's."""
    for k in [k for k in os.environ if k.startswith("AWS_")]:
        monkeypatch.delenv(k)
    case = ("rocketmq-4.9.7", "oldest-deleted")
    local = support.input_store(*case)
    uri = s3_server.with_options(s3_server.upload(local, "stores", "options/store"))
    query = uri.partition("?")[2]
    store = open_store(uri, support.broker_conf(*case))
    derived = [store.root, store.config_dir / "consumerOffset.json", store.checkpoint_path.suffixed(".bak"),
               (store.consume_queue_dir / "x").parent, *(e.path for e in fsutil.list_dir(store.index_dir, "index")),
               *(f.path for f in store.commitlog_files)]
    for loc in derived:
        assert loc.query == query and str(loc).endswith("?" + query), loc
        again = storefs.location(str(loc))
        assert again == loc and again.query == query
    assert str(store.root) == uri
    assert cf.read_consumer_offsets(str(store.config_dir / "consumerOffset.json")).value == \
        cf.read_consumer_offsets(local / "config" / "consumerOffset.json").value
