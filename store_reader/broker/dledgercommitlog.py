"""What a restart of a DLedger store's broker keeps (``DLedgerCommitLog``, R§16.2-§16.5).

``restart_keeps`` says which messages a one-member group's broker serves after the restart: every
entry DLedger's recovery keeps (``dledger.recover``) is committed by the new leader and its message
dispatched (R§16.3, R§16.5); ``broker_restart`` the consume queues and index files that dispatch
builds, ``predict`` the same as a ``prediction.Prediction``. The messages come from the scanners'
DLedger framing.
"""
from __future__ import annotations

import dataclasses
import struct
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from store_reader.formats import recordformat as rf
from store_reader.exceptions import UnsupportedStoreError
from store_reader.broker.cqueue import NO_FILE_ENTRY
from store_reader.broker.dledger import recover
from store_reader.formats.dledger import _Files

if TYPE_CHECKING:
    from store_reader.broker.dledger import DLedgerRecovery


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
    """(topic, queue id) -> ``cqueue.ConsumeQueueState`` after the reput."""
    min_phy_offset: int = 0
    """``DLedgerCommitLog#getMinOffset``: where the first data file starts."""
    load_problems: list[str] = field(default_factory=list)
    """[5.3, 5.4] ``correctMinOffset`` throwing on a queue whose last file is empty (R§7)."""
    index_files: list = field(default_factory=list)
    """``indexservice.PredictedIndexFile``: the index files after the dispatch (R§8)."""
    checkpoint: Any = None
    """The broker's checkpoint after the dispatch (``prediction.predict``'s step 8)."""

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
    from store_reader.broker.versions import V54, since
    from store_reader.broker.cut import queue_store_matches

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
    where the index files it builds are written (``indexservice.ScratchDir``)."""
    import pyarrow as pa

    from store_reader.formats.checkpoint import read_checkpoint
    from store_reader.broker.versions import V53, V54, V55, index_tag_keys, resolve_version, since
    from store_reader.broker.replay import Dispatched, _dispatch_to_queues, dispatch_records
    from store_reader.broker.indexservice import ScratchDir, index_files_at_load, predict_index
    from store_reader.broker.cqueue import add_delay_level_queues, correct_min_offset_throws, load_consume_queues

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
    """The broker's restart of a DLedger store as a ``prediction.Prediction`` (what the classic
    audit compares the store with): DLedger's recovery (``recover``), then ``broker_restart``.
    The commitlog files are the data files DLedger keeps, written to its processOffset; the max
    phy offset is the end of the last surviving entry, which the one-member group commits."""
    from store_reader.broker.cut import CommitLogFileState
    from store_reader.broker.prediction import Prediction
    from store_reader.broker.versions import resolve_version

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
