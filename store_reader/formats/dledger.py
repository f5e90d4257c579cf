"""A DLedger store's own recovery and what a restart of its broker keeps (R§16, F§16).

``recover(store)`` replays ``DLedgerMmapFileStore#recover`` of DLedger 0.3.1.2 (the version 4.9.7
and 5.3.3 pin; 5.4.0's 0.3.2 and 5.5.1's 0.3.3.4 recover alike) on the files of a store opened with
``open_store(read_dledger=True)``: the start file, the walk over entry headers (no CRC, no look
inside a body), the comparison with the index units and where they are rewritten, the end of the log (``ledgerEndIndex``/``ledgerEndTerm``), the
data and index files the truncation deletes, and the committed index the checkpoint gives back.
``restart_keeps`` then says which messages a one-member group's broker serves after the restart:
every surviving entry is committed by the new leader and its message dispatched (R§16.3, R§16.5).
Only the header bytes are read here; the messages come from the scanners' DLedger framing.
"""
from __future__ import annotations

import dataclasses
import re
import struct
from array import array
from dataclasses import dataclass, field
from typing import Any, Iterator

from store_reader.formats import recordformat as rf
from store_reader.formats.brokerconf import parse_properties
from store_reader.exceptions import UnsupportedStoreError
from store_reader.formats.mappedfile import MappedFile, list_mapped_files
from store_reader.broker.recovery import NO_FILE_ENTRY
from store_reader.io.storefs import SegmentBuffer, location

# DLedgerConfig#mappedFileSizeForEntryIndex: never set by DLedgerCommitLog (F§16.1)
INDEX_FILE_SIZE = rf.DLEDGER_INDEX_UNIT.size * 5 * 1024 * 1024
_LONG = re.compile(r"[+-]?[0-9]+")


@dataclass
class DLedgerRecovery:
    """What ``DLedgerMmapFileStore#recover`` leaves (R§16.1), in DLedger's own terms."""

    ledger_begin_index: int = -1
    ledger_end_index: int = -1
    ledger_end_term: int = -1
    process_offset: int = 0
    """Where the data's write position is set: the end of the last entry walked (or of the file
    whose blank ended the walk)."""
    start_file: str | None = None
    walk_end: str = "no_data"
    """Why the walk ended: ``last_file`` (a blank in the last file), ``zero_size`` (an entry of
    size 0: unwritten space), ``entry`` (an entry failed a check, ``walk_end_check``) or
    ``no_data``."""
    walk_end_check: str | None = None
    walk_end_position: int | None = None
    index_rewritten_from: int | None = None
    """The first entry whose index unit did not match (units rewritten from there), or None."""
    data_files_deleted: list[str] = field(default_factory=list)
    index_files_deleted: list[str] = field(default_factory=list)
    committed_index: int = -1
    """After load: the checkpoint's committedIndex, clamped to ``ledger_end_index`` (R§16.1 step 7)."""
    committed_pos: int = -1
    checkpoint_committed_index: str | None = None
    curr_term: int = 0
    """``currterm``'s currTerm (the term the member restarts in before its election)."""
    last_entry_end: int = 0
    """End of the last surviving entry: the committed position once the restarted leader commits."""
    refused: str | None = None
    """Why the broker stops in its recovery (``System.exit``), or None."""

    @property
    def index_write_position(self) -> int:
        return (self.ledger_end_index + 1) * rf.DLEDGER_INDEX_UNIT.size

    def as_dict(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d["index_write_position"] = self.index_write_position
        return d


class _Files:
    """A sequence of mapped files read by phy offset (``MmapFileList#findMappedFileByOffset``)."""

    def __init__(self, files: list[MappedFile], size: int, what: str) -> None:
        self.files, self.size, self.what = files, size, what
        self._open: dict[str, SegmentBuffer] = {}

    def data(self, f: MappedFile) -> Any:
        """The file's bytes (mapped; a remote file read once)."""
        b = self._open.get(f.name)
        if b is None:
            b = self._open[f.name] = SegmentBuffer(f.path, self.what)
        return b.buf

    def close(self) -> None:
        for b in self._open.values():
            b.close()
        self._open.clear()

    def find(self, offset: int) -> MappedFile | None:
        if not self.files:
            return None
        first = self.files[0].start
        if offset < first or offset >= self.files[-1].start + self.size:
            return None
        i = offset // self.size - first // self.size
        f = self.files[i] if 0 <= i < len(self.files) else None
        return f if f is not None and f.start <= offset < f.start + self.size else None


def _unit(index: _Files, entry_index: int) -> tuple | None:
    """The index unit of ``entry_index`` as ``indexFileList.getData`` returns it, or None."""
    off = entry_index * rf.DLEDGER_INDEX_UNIT.size
    f = index.find(off)
    if f is None:
        return None
    pos = off - f.start
    buf = index.data(f)
    if pos + rf.DLEDGER_INDEX_UNIT.size > len(buf):
        return None
    return rf.DLEDGER_INDEX_UNIT.unpack_from(buf, pos)


def _header(buf: bytes, pos: int) -> tuple | None:
    if pos + rf.DLEDGER_HEADER.size > len(buf):
        return None
    return rf.DLEDGER_HEADER.unpack_from(buf, pos)


def _properties(path) -> dict[str, str] | None:
    loc = location(path)
    if not loc.is_file():
        return None
    return parse_properties(loc.read_bytes().decode("utf-8", "replace"))


def recover(store) -> DLedgerRecovery:
    """``DLedgerMmapFileStore#recover`` on ``store`` (opened with ``read_dledger=True``), R§16.1."""
    if store.dledger is None:
        raise ValueError("not a DLedger store (open_store(read_dledger=True))")
    if store.load_problems:       # DLedgerMmapFileStore#load: System.exit(-1)
        raise store.load_problems[0]
    size = store.config.mappedFileSizeCommitLog
    problems: list = []
    index_files = list_mapped_files(store.dledger / "index", INDEX_FILE_SIZE, "DLedger index",
                                    "mappedFileSizeForEntryIndex", problems, [])
    if problems:
        raise problems[0]
    data = _Files(list(store.commitlog_files), size, "DLedger data file")
    index = _Files(index_files, INDEX_FILE_SIZE, "DLedger index file")
    try:
        return _walk(store, data, index)
    finally:
        data.close()
        index.close()


def entries_with_units(store) -> Iterator[tuple[Any, int, tuple, tuple | None, Any]]:
    """Every entry of the data files by its header, file by file whatever ``recover`` keeps:
    (data file, position in it, header, the index unit of the header's index or None, the file's
    bytes: valid until the next entry of another file). A file's
    entries end at DLedger's blank, unwritten space or a header that does not frame an entry
    there (magic, size, pos)."""
    if store.dledger is None:
        raise ValueError("not a DLedger store (open_store(read_dledger=True))")
    problems: list = []
    index_files = list_mapped_files(store.dledger / "index", INDEX_FILE_SIZE, "DLedger index",
                                    "mappedFileSizeForEntryIndex", problems, [])
    data = _Files(list(store.commitlog_files), store.config.mappedFileSizeCommitLog, "DLedger data file")
    index = _Files(index_files, INDEX_FILE_SIZE, "DLedger index file")
    try:
        for f in data.files:
            buf, p = data.data(f), 0
            while (h := _header(buf, p)) is not None:
                magic, size, entry_index, _, pos = h[:5]
                if magic != rf.DLEDGER_MAGIC or size <= rf.DLEDGER_HEADER_SIZE or pos != f.start + p \
                        or p + size > len(buf):
                    break
                yield f, p, h, _unit(index, entry_index) if entry_index >= 0 else None, buf
                p += size
    finally:
        data.close()
        index.close()


def _walk(store, data: _Files, index: _Files) -> DLedgerRecovery:
    size = data.size
    r = DLedgerRecovery()
    term = _properties(store.dledger / "currterm") or {}
    if _LONG.fullmatch(term.get("currTerm", "0").strip()):
        r.curr_term = int(term.get("currTerm", "0").strip())
    for files, what in ((data.files, "data"), (index.files, "index")):
        for a, b in zip(files, files[1:]):
            if b.start - a.start != (size if what == "data" else INDEX_FILE_SIZE):
                raise UnsupportedStoreError(
                    f"DLedger {what} files not one file apart (checkSelf fails: the broker does not "
                    f"start)", str(b.path))
    if not data.files:
        r.index_files_deleted = [f.name for f in index.files]
        return r

    def unit_matches(h: tuple, at: int) -> bool:
        u = _unit(index, h[2])
        return u is not None and u[0] == h[0] and u[2] == h[1] and u[3] == h[2] and u[4] == h[3] \
            and u[1] == at

    # 1. the start file: from the third-to-last down, the first whose first entry checks (step 2)
    start = max(len(data.files) - 3, 0)
    for i in range(start, -1, -1):
        f = data.files[i]
        h = _header(data.data(f), 0)
        start = i
        if h is not None and h[0] != rf.DLEDGER_BLANK_MAGIC and h[0] >= rf.DLEDGER_MAGIC \
                and h[1] > rf.DLEDGER_HEADER_SIZE and h[4] == f.start \
                and h[8] + rf.DLEDGER_BODY_OFFSET == h[1] and unit_matches(h, f.start):
            break
    # 2. the walk (step 3)
    k = start
    f = data.files[k]
    r.start_file = f.name
    buf, p = data.data(f), 0
    last_index = last_term = -1
    process = f.start
    rewriting = rebuilt = False
    ends = array("q")          # end of each walked entry: what a unit the walk wrote says
    first_walked = -1
    while True:
        at = f.start + p
        if p + 4 > len(buf):
            r.walk_end, r.walk_end_check = "entry", "out_of_bounds"
            break
        magic = struct.unpack_from(">i", buf, p)[0]
        if magic == rf.DLEDGER_BLANK_MAGIC:
            process = f.start + size
            k += 1
            if k >= len(data.files):
                r.walk_end = "last_file"
                break
            f = data.files[k]
            buf, p, process = data.data(f), 0, f.start
            continue
        if p + 8 > len(buf):
            r.walk_end, r.walk_end_check = "entry", "out_of_bounds"
            break
        esize = struct.unpack_from(">i", buf, p + 4)[0]
        if esize == 0:
            r.walk_end = "zero_size"
            break
        h = _header(buf, p)
        if h is None or (h[4] == at and h[8] + rf.DLEDGER_BODY_OFFSET == esize
                         and not 0 <= p + esize <= len(buf)):   # position(p + size) throws
            r.walk_end, r.walk_end_check = "entry", "out_of_bounds"
            break
        _, _, e_index, e_term, e_pos, _, _, _, body_size = h
        check = None
        if e_pos != at:
            check = "pos"
        elif body_size + rf.DLEDGER_BODY_OFFSET != esize:
            check = "body_size"
        elif not rf.DLEDGER_MAGIC <= magic <= rf.DLEDGER_MAGIC:
            check = "magic"
        elif last_index != -1 and e_index != last_index + 1:
            check = "index"
        elif e_term < last_term:
            check = "term"
        elif esize <= rf.DLEDGER_HEADER_SIZE:
            check = "size"
        if check is not None:
            r.walk_end, r.walk_end_check = "entry", check
            break
        if not rewriting and not unit_matches(h, at):
            rewriting = True
            r.index_rewritten_from = e_index
            # no index file holds its unit: rebuildWithPos drops every index file and starts one there
            rebuilt = index.find(e_index * rf.DLEDGER_INDEX_UNIT.size) is None
        if first_walked == -1:
            first_walked = e_index
        ends.append(at + esize)
        last_index, last_term = e_index, e_term
        p += esize
        process += esize
        r.last_entry_end = at + esize
    r.walk_end_position = f.start + p if r.walk_end != "last_file" else None
    last = data.files[-1]
    if last.start - process > size:
        r.refused = (f"DLedger's recovery ended at {process}, more than a file before the last data "
                     f"file {last.name}: the broker exits (System.exit)")
    r.process_offset = process
    r.ledger_end_index, r.ledger_end_term = last_index, last_term
    if last_index != -1:
        first = _header(data.data(data.files[0]), 0)
        r.ledger_begin_index = first[2] if first is not None else -1
    # 3. truncation (step 6): files wholly past the end are deleted
    r.data_files_deleted = [x.name for x in data.files if x.start > process]
    index_end = (last_index + 1) * rf.DLEDGER_INDEX_UNIT.size
    begin = max(r.ledger_begin_index, 0) * rf.DLEDGER_INDEX_UNIT.size   # resetOffset: before the begin
    r.index_files_deleted = [x.name for x in index.files if rebuilt or x.start > index_end
                             or x.start + INDEX_FILE_SIZE <= begin]
    # 4. the committed index from the checkpoint (step 7)
    cp = _properties(store.dledger / "checkpoint") or {}
    raw = cp.get("committedIndex")
    r.checkpoint_committed_index = raw
    if raw is not None and raw.strip():
        if not _LONG.fullmatch(raw.strip()) or not -2**63 <= int(raw.strip()) < 2**63:
            raise UnsupportedStoreError(f"DLedger checkpoint committedIndex={raw!r} is not a long: "
                                        "Long.valueOf throws in the recovery", str(store.dledger / "checkpoint"))
        want = int(raw.strip())
        if want != -1 and last_index != -1 and want >= -1 and want >= r.ledger_begin_index:
            r.committed_index = min(want, last_index)
            if r.committed_index >= first_walked:
                r.committed_pos = ends[r.committed_index - first_walked]
            else:          # before the walk's start file: its unit as stored
                u = None if rebuilt else _unit(index, r.committed_index)
                if u is None:
                    raise UnsupportedStoreError(
                        f"the DLedger checkpoint's committedIndex {r.committed_index} has no index unit "
                        "after the recovery rebuilt the index: the recovery throws (not predicted)",
                        str(store.dledger / "checkpoint"))
                r.committed_pos = u[1] + u[2]
    return r


KEPT_COLUMNS = ("phy_offset", "total_size", "topic", "queue_id", "queue_offset")


@dataclass
class Kept:
    """The messages a one-member group's broker serves after a restart (R§16.3, R§16.5)."""

    messages: Any
    """``pyarrow.Table`` of ``KEPT_COLUMNS``: one row per surviving entry, in log order."""
    unreadable: list[int] = field(default_factory=list)
    """Phy offsets of surviving entries whose record the broker's dispatch cannot read: what its
    reput does then (R§16.4) is not predicted here."""

    def queues(self) -> dict[tuple[str, int], list[tuple[int, int, int]]]:
        """(topic, queue id) -> [(queue offset, phy offset, size)] in queue-offset order."""
        out: dict[tuple[str, int], list[tuple[int, int, int]]] = {}
        t = self.messages.to_pydict()
        for phy, size, topic, qid, q in zip(*(t[c] for c in KEPT_COLUMNS)):
            out.setdefault((topic, qid), []).append((q, phy, size))
        return {k: sorted(v) for k, v in out.items()}


def restart_keeps(store, rec: DLedgerRecovery) -> Kept:
    """The messages of every entry ``rec`` keeps, read through the scanners' DLedger framing with
    the reput's settings (no CRC check): a one-member group commits them all after its election
    and dispatches each message at its phy offset (``pos + 48``)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from store_reader.formats.commitlog import SegmentScan

    opts = dataclasses.replace(store.scan_options(), check_crc=False, compute_crc=False)
    parts, unreadable = [], []
    deleted = set(rec.data_files_deleted)
    for f in store.commitlog_files:
        if f.name in deleted or f.start >= rec.last_entry_end:
            continue
        scan = SegmentScan(f.path, opts, columns=list(KEPT_COLUMNS))
        for b in scan:
            parts.append(pa.Table.from_batches([b]).select(list(KEPT_COLUMNS)))
        s = scan.summary
        stop = f.start + s.valid_bytes
        if s.end_reason in ("corrupt", "torn_tail") and stop < rec.last_entry_end:
            unreadable.append(stop + rf.DLEDGER_BODY_OFFSET)
    table = pa.concat_tables(parts) if parts else pa.table(
        {c: pa.array([], type=t) for c, t in zip(KEPT_COLUMNS, (pa.int64(), pa.int32(), pa.string(),
                                                                 pa.int32(), pa.int64()))})
    table = table.filter(pc.less(table["phy_offset"], rec.last_entry_end))
    return Kept(table, unreadable)


@dataclass
class BrokerRestart:
    """The broker's side of a DLedger store's restart (R§16.2-§16.4), one version."""

    version: str
    recovery_path: str
    max_phy_offset_of_consume_queue: int = -1
    abnormal_walk_start: str | None = None
    """5.3+ abnormal path: the data file its dispatching walk starts from."""
    abnormal_walk_end: int | None = None
    """Where that walk stopped (the phy offset of the entry it could not read)."""
    abnormal_process_offset: int | None = None
    """The walk's processOffset: message sizes summed without the 48-byte headers (R§16.2)."""
    dispatched_past_end: int = 0
    """Messages that walk dispatched from entries past DLedger's end (bytes DLedger truncated)."""
    cq_truncated_at: int | None = None
    reput_from: int = 0
    queues: dict = field(default_factory=dict)
    """(topic, queue id) -> ``recovery.ConsumeQueueState`` after the reput."""
    min_phy_offset: int = 0
    """``DLedgerCommitLog#getMinOffset``: where the first data file starts."""
    load_problems: list[str] = field(default_factory=list)
    """[5.3, 5.4] ``correctMinOffset`` throwing on a queue whose last file is empty (R§7)."""
    index_files: list = field(default_factory=list)
    """``recovery.PredictedIndexFile``: the index files after the dispatch (R§8)."""
    checkpoint: Any = None
    """The broker's checkpoint after the dispatch (``recovery.predict``'s step 8)."""

    def served(self) -> dict[tuple[str, int], list[tuple[int, int, int]]]:
        """(topic, queue id) -> [(queue offset, phy offset, size)] from min to max offset (an
        offset in a missing CQ file serves nothing: left out)."""
        out = {}
        for key, q in self.queues.items():
            e = q.entries()
            if len(e):
                out[key] = [(q.min_offset + i, int(p), int(s))
                            for i, (p, s) in enumerate(zip(e["phy_offset"], e["size"]))
                            if (p, s, 0) != NO_FILE_ENTRY]
        return out


def _abnormal_start(store, data: _Files, ckpt, version: str, cq_max: int) -> int:
    """``DLedgerCommitLog#isMmapFileMatchedRecover`` from the last data file down (5.3+): the first
    entry's body has magic V1 and a store time; then [5.3] that time against the checkpoint, [5.4+]
    the index's and the consume queues' test the commitlog's search uses (no CRC check here)."""
    from store_reader.broker.recovery import V54, queue_store_matches, since

    cfg = store.config
    limit = ckpt.min_timestamp_index if cfg.messageIndexEnable and cfg.messageIndexSafe else ckpt.min_timestamp
    body = rf.DLEDGER_BODY_OFFSET
    for i in range(len(data.files) - 1, -1, -1):
        buf = data.data(data.files[i])
        if len(buf) < body + rf.SYSFLAG_POS + 4:
            continue
        if struct.unpack_from(">i", buf, body + 4)[0] != rf.MAGIC_V1:
            continue
        sys_flag = struct.unpack_from(">i", buf, body + rf.SYSFLAG_POS)[0]
        ts = struct.unpack_from(">q", buf, body + rf.store_timestamp_pos(sys_flag))[0]
        if ts == 0:
            continue
        if not since(version, V54):
            if ts <= limit:
                return i
        elif queue_store_matches(version, cfg, True, ckpt, cq_max, ts,
                                 struct.unpack_from(">q", buf, body + rf.PHYSICALOFFSET_POS)[0]):
            return i
    return 0


def _abnormal_walk(store, data: _Files, start: int, opts: rf.ScanOptions, columns: list[str]):
    """5.3+ ``dledgerRecoverAbnormally`` walk: each entry's record read at ``pos + 48`` with the
    recovery's CRC setting and no look at the entry header, DLedger's blank to the next file,
    stepping by TOTALSIZE + 48; stops at the first record that fails. Returns (batches, the
    position it stopped at, its processOffset)."""
    import pyarrow as pa

    from store_reader.formats.commitlog import _batch, _native_opts, scanner_impl

    impl = scanner_impl()
    native = impl.__name__.endswith("_native")
    classic = dataclasses.replace(opts, dledger=False)
    iopts = _native_opts(classic) if native else classic
    schema = __import__("schemas").MESSAGE.arrow(columns)
    names = tuple(c for c in schema.names if c != "valid_prefix")
    batches = []
    k = start
    f = data.files[k]
    buf, p, summed = data.data(f), 0, 0
    while True:
        if p + 8 <= len(buf):
            magic, second = struct.unpack_from(">ii", buf, p)
            if second in (rf.BLANK_MAGIC, rf.MAGIC_V1, rf.MAGIC_V2):
                raise UnsupportedStoreError("a classic record inside DLedger data (the abnormal walk "
                                            "would read it as one): not predicted", str(f.path))
            if magic == rf.DLEDGER_BLANK_MAGIC:
                k += 1
                if k >= len(data.files):
                    return batches, f.start + len(buf), f.start + summed
                f = data.files[k]
                buf, p, summed = data.data(f), 0, 0
                continue
        cols, n, _, _, _ = impl.scan(buf, f.start, p + rf.DLEDGER_BODY_OFFSET, len(buf), 1, iopts, names)
        if n != 1:
            return batches, f.start + p, f.start + summed
        b = _batch(schema, cols, 1, True)
        size = b["total_size"][0].as_py()
        batches.append(pa.Table.from_batches([b]))
        summed += size
        p += rf.DLEDGER_BODY_OFFSET + size


def broker_restart(store, rec: DLedgerRecovery, version: str, scratch: str | None = None) -> BrokerRestart:
    """The consume queues and index files a one-member group's broker serves once it has recovered
    ``store``, committed every surviving entry and dispatched them (R§16.2-§16.4): the queues as
    loaded and recovered (R§2), the index files ``IndexService#load`` keeps (R§8), [5.3+, abnormal
    path] the dispatching walk, the truncation of every queue past the recovered end, then the reput
    from the queues' max phy offset to the committed end, and the min offsets (R§7). ``scratch``:
    where the index files it builds are written (``recovery.ScratchDir``)."""
    import pyarrow as pa

    from store_reader.formats.checkpoint import read_checkpoint
    from store_reader.broker.recovery import (V53, V54, V55, Dispatched, ScratchDir, _dispatch_to_queues,
                                              add_delay_level_queues, correct_min_offset_throws, dispatch_records,
                                              index_files_at_load, index_tag_keys, load_consume_queues, predict_index,
                                              resolve_version, since)

    version = resolve_version(version)
    if store.abort_exists and since(version, V55) and store.config.enableAcceleratedRecovery:
        # the dispatch offset the recovery starts from would be checked against it: not modelled
        raise UnsupportedStoreError("enableAcceleratedRecovery=true: a DLedger store's abnormal recovery "
                                    "under the broker 5.5 rules is not predicted", store.config.source)
    if since(version, V54) and store.config.rocksdbCQDoubleWriteEnable:
        # DLedgerCommitLog's start-file search and dispatch go through CombineConsumeQueueStore
        raise UnsupportedStoreError("rocksdbCQDoubleWriteEnable=true on a DLedger store: a 5.4+ broker's "
                                    "DLedger recovery then looks back for its RocksDB consume queue too "
                                    "(CombineConsumeQueueStore), which this tool models for the commitlog "
                                    "only (R§15.2)", store.config.source)
    broker_5x = since(version, V53)
    out = BrokerRestart(version, "abnormal" if store.abort_exists else "normal")
    queues, problems = load_consume_queues(store, broker_5x)
    if problems:
        raise problems[0]
    if not broker_5x:
        add_delay_level_queues(store.config, queues)
    for q in queues.values():
        q.recover()
    cq_max = max((q.max_physic_offset for q in queues.values()), default=-1)
    out.max_phy_offset_of_consume_queue = cq_max
    opts = store.scan_options(broker_5x=broker_5x, index_tags=index_tag_keys(version))
    cut = rec.process_offset
    ckpt = read_checkpoint(store.checkpoint_path)
    kept_index, index_dispatch = index_files_at_load(store, store.abort_exists, ckpt.index_msg_timestamp,
                                                     ScratchDir(scratch), opts.index_tags)
    dispatched = Dispatched(index=index_dispatch)
    # the recovery's dispatchFromPhyOffset: the CQs' max phy offset; [5.5, abnormal path] the
    # checkpoint's logicsPhysicalOffset (ConsumeQueueStore#getDispatchFromPhyOffset)
    dispatch_from = ckpt.logics_physical_offset if since(version, V55) and store.abort_exists else cq_max
    if broker_5x and store.abort_exists and store.commitlog_files:
        size = store.config.mappedFileSizeCommitLog
        # the files DLedger's recovery kept: those it deleted are no longer in its list
        kept = [f for f in store.commitlog_files if f.name not in set(rec.data_files_deleted)]
        data = _Files(kept, size, "DLedger data file")
        try:
            start = _abnormal_start(store, data, ckpt, version, cq_max)
            cols = ["phy_offset", "stored_phy_offset", "total_size", "topic", "queue_id",
                    "queue_offset", "sys_flag", "tags_code", "store_timestamp", "uniq_key", "key_list"]
            cols += ["tags"] if opts.index_tags else []
            cols += ["properties"] if store.config.enableMultiDispatch else []
            walked, stop, cut = _abnormal_walk(store, data, start, opts, cols)
        finally:
            data.close()
        out.abnormal_walk_start, out.abnormal_walk_end = kept[start].name, stop
        out.abnormal_process_offset = cut
        if walked:
            t = pa.concat_tables(walked)
            out.dispatched_past_end = int((t["phy_offset"].to_numpy() >= rec.last_entry_end).sum())
            for b in t.to_batches():
                dispatched.add(b)
                _dispatch_to_queues(store.config, True, b, queues, dispatched, False)
    if dispatch_from >= cut:
        out.cq_truncated_at = cut
        for q in queues.values():
            q.truncate_dirty_logic_files(cut)
    first = store.commitlog_files[0].start if store.commitlog_files else 0
    if broker_5x and not store.config.recheckReputOffsetFromCq:
        # [5.3+] start(): the reput from getConfirmOffset(), DLedgerCommitLog#getMaxOffset: the
        # committed position after load, else where the data files begin (recheckReputOffsetFromCq
        # off, its default); the repeats by phy are then no CQ put, but the record at the index's
        # endPhyOffset is indexed again
        out.reput_from = rec.committed_pos if rec.committed_pos > 0 else first
    else:
        out.reput_from = max([first] + [q.max_physic_offset for q in queues.values()])
    if rec.last_entry_end > out.reput_from:
        reput = dataclasses.replace(opts, check_crc=False)
        dispatch_records(store, store.summaries(reput), 0, out.reput_from, rec.last_entry_end, None,
                         queues, reput, dispatched)
    out.min_phy_offset = store.commitlog_files[0].start if store.commitlog_files else 0
    if broker_5x and not since(version, V55):
        out.load_problems = [str(p) for p in correct_min_offset_throws(queues)]
    for q in queues.values():
        q.correct_min_offset(out.min_phy_offset, version)
    out.queues = queues
    out.index_files, index_msg_ts = predict_index(kept_index, ckpt.index_msg_timestamp, dispatched)
    out.checkpoint = dataclasses.replace(
        ckpt, index_msg_timestamp=index_msg_ts,
        logics_msg_timestamp=(dispatched.last_cq_store_timestamp if dispatched.last_cq_store_timestamp
                              is not None else ckpt.logics_msg_timestamp),
        logics_physical_offset=(dispatched.last_cq_phy_offset if since(version, V55) and
                                dispatched.last_cq_phy_offset is not None else ckpt.logics_physical_offset))
    return out


def predict(store, version: str, scratch: str | None = None):
    """The broker's restart of a DLedger store as a ``recovery.Prediction`` (what the classic
    audit compares the store with): DLedger's recovery (``recover``), then ``broker_restart``.
    The commitlog files are the data files DLedger keeps, written to its processOffset; the max
    phy offset is the end of the last surviving entry, which the one-member group commits."""
    from store_reader.broker.recovery import CommitLogFileState, Prediction, resolve_version

    version = resolve_version(version)
    rec = recover(store)
    pred = Prediction(broker_version=version, load_result=rec.refused is None,
                      load_problems=[rec.refused] if rec.refused else [], dledger=rec,
                      recovery_path="abnormal" if store.abort_exists else "normal", start_file=rec.start_file)
    size = store.config.mappedFileSizeCommitLog
    deleted = set(rec.data_files_deleted)
    pred.commitlog_files = [CommitLogFileState(f.name, f.start, size, min(size, rec.process_offset - f.start))
                            for f in store.commitlog_files if f.name not in deleted]
    pred.deleted_commitlog_files = list(rec.data_files_deleted)
    pred.max_phy_offset = rec.last_entry_end
    if rec.refused is not None:
        return pred
    b = broker_restart(store, rec, version, scratch)
    pred.min_phy_offset = b.min_phy_offset
    pred.load_problems += b.load_problems
    pred.load_result = not b.load_problems
    pred.max_phy_offset_of_consume_queue = b.max_phy_offset_of_consume_queue
    pred.reput_from_offset = b.reput_from
    pred.cq_truncated = b.cq_truncated_at is not None
    pred.consume_queues = b.queues
    pred.index_files = b.index_files
    pred.checkpoint = b.checkpoint
    return pred


def check_auditable(store, pred) -> None:
    """The audit's views hold no queue entry past the log's end; a broker that serves such entries
    (5.5 keeps them unless the checkpoint's logicsPhysicalOffset reaches the end, R§16.2) is
    refused by name: their records are past what DLedger keeps, and the audit would call them lost."""
    past = sorted(f"{t}/{q}" for (t, q), cq in pred.consume_queues.items() if cq.max_physic_offset > pred.max_phy_offset)
    if past:
        raise UnsupportedStoreError(
            f"the {pred.broker_version} broker would serve consume queue entries past DLedger's end "
            f"{pred.max_phy_offset} ({', '.join(past[:3])}{' ...' if len(past) > 3 else ''}): records DLedger "
            "truncated, still served; the audit does not predict them (jobs.recover --dry-run lists them)",
            str(store.dledger / "data"))


# DLedgerMmapFileStore's own files beside data/ and index/ (written by IOUtils#string2File)
CHECKPOINT_FILE, CURRTERM_FILE = "checkpoint", "currterm"


def checkpoint_bytes(end_index: int, committed_index: int) -> bytes:
    """``DLedgerMmapFileStore#persistCheckPoint``'s file: ``properties2String`` of endIndex and
    committedIndex, in the order a broker's JVM iterates them (read back from the real ones)."""
    return f"committedIndex={committed_index}\nendIndex={end_index}\n".encode()


def currterm_bytes(term: int, vote_for: str | None) -> bytes:
    """``MemberState#persistTerm``'s file: currTerm and voteLeader (empty: no vote), in the order
    a broker's JVM iterates them (read back from the real ones)."""
    return f"voteLeader={vote_for or ''}\ncurrTerm={term}\n".encode()


def recovered_index_units(store, rec: DLedgerRecovery) -> Iterator[tuple[int, bytes]]:
    """(entry index, unit) of every index unit DLedger's recovery writes (R§16.1 step 3): from
    the first entry whose unit did not match to the end of the log, each from its entry's header."""
    if rec.index_rewritten_from is None:
        return
    for f, p, h, _, _ in entries_with_units(store):
        at = f.start + p
        if at >= rec.last_entry_end:
            return
        if h[2] >= rec.index_rewritten_from:
            yield h[2], rf.encode_dledger_index_unit(at, h[1], h[2], h[3])


def recovered_index_files(store, rec: DLedgerRecovery) -> list[tuple[str, int, Any]]:
    """(name, start, input MappedFile or None) of the index files DLedger's recovery leaves: the
    input's it keeps, and those its rewrite creates (``rebuildWithPos`` or appends past the last
    file) up to the end of the log's units."""
    problems: list = []
    files = list_mapped_files(store.dledger / "index", INDEX_FILE_SIZE, "DLedger index",
                              "mappedFileSizeForEntryIndex", problems, [])
    gone = set(rec.index_files_deleted)
    out = {f.start: (f.name, f.start, f) for f in files if f.name not in gone}
    if rec.index_rewritten_from is not None and rec.ledger_end_index >= rec.index_rewritten_from:
        first = rec.index_rewritten_from * rf.DLEDGER_INDEX_UNIT.size
        for start in range(first - first % INDEX_FILE_SIZE, rec.index_write_position, INDEX_FILE_SIZE):
            out.setdefault(start, (f"{start:020d}", start, None))
    return [out[k] for k in sorted(out)]
