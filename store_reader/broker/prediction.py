"""The broker's recovery, predicted: what a RocketMQ broker would do if restarted on this store.

Pure functions over what the scanners report (per-segment summaries, decoded records), the consume
queue files, the checkpoint and the ``abort`` flag, following ``recovery.md`` step by step, bugs and
losses included. Nothing here "fixes" anything: the repaired store is built elsewhere; this module
says what the broker itself would end up with, so the audit can report the difference. The steps
live beside: ``cqueue`` (the consume queues), ``cut`` (the commitlog), ``replay`` (the dispatch),
``indexservice`` (the index files), ``versions`` (the rules by release).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Callable, Sequence

import pyarrow as pa

from store_reader.formats.checkpoint import read_checkpoint
from store_reader.formats.controller import correct_confirm_offset
from store_reader.exceptions import UnsupportedStoreError
from store_reader.broker.cqueue import (add_delay_level_queues, combined_rocksdb_max, correct_min_offset_throws,
                                        load_consume_queues, load_rocksdb_consume_queues)
from store_reader.broker.cut import predict_commitlog, start_file
from store_reader.broker.indexservice import ScratchDir, index_files_at_load, predict_index
from store_reader.broker.replay import DISPATCH_BATCH, Dispatched, dispatch_records
from store_reader.broker.versions import V54, V55, index_tag_keys, is_5x, resolve_version, since

if TYPE_CHECKING:
    from store_reader.formats import recordformat as rf
    from store_reader.formats.checkpoint import Checkpoint
    from store_reader.formats.commitlog import SegmentSummary
    from store_reader.formats.controller import ConfirmOffset
    from store_reader.broker.bounded import Segments
    from store_reader.broker.dledger import DLedgerRecovery
    from store_reader.store import Store
    from store_reader.broker.cqueue import ConsumeQueueState
    from store_reader.broker.cut import CommitLogFileState
    from store_reader.broker.indexservice import PredictedIndexFile
    from store_reader.broker.replay import PutsSource, RecordSource


@dataclass
class Prediction:
    """What the broker would do if restarted on the store now (fields in the broker's terms).

    ``load_result`` False: the broker refuses the store or throws while loading it, for the
    reasons in ``load_problems`` (each naming file and byte). The recovery fields then describe
    the broker's recovery of the store as a repaired store holds it: what its ``load()`` skips
    or cannot map left out (``Store.commitlog_files``), a commitlog file of the wrong size as
    ``mappedFileSizeCommitLog`` bytes (the missing tail never written), a refused consume queue
    as absent (the repair rebuilds every queue from the commitlog).
    """

    broker_version: str
    load_result: bool
    load_problems: list[str] = field(default_factory=list)
    recovery_path: str = "normal"
    start_file: str | None = None
    max_phy_offset: int = 0
    min_phy_offset: int = -1
    commitlog_files: list[CommitLogFileState] = field(default_factory=list)
    deleted_commitlog_files: list[str] = field(default_factory=list)
    max_phy_offset_of_consume_queue: int = -1
    rocksdb_beside_max_phy_offset: int | None = None
    """[5.4+] double-write: the max phy offset of the RocksDB queue beside the served file one (R§15.2)."""
    dispatched_from: int | None = None
    """Where the recovery's dispatch starts: every record at or past it up to the recovered end is
    handed to the dispatchers (the RocksDB queue beside the file one included, R§15.2)."""
    confirm_offset: int | None = None
    reput_from_offset: int | None = None
    consume_queues: dict[tuple[str, int], ConsumeQueueState] = field(default_factory=dict)
    cq_truncated: bool = False
    index_files: list["PredictedIndexFile"] = field(default_factory=list)
    checkpoint: Checkpoint | None = None
    controller_mode: bool = False
    """5.x with ``enableControllerMode``: the broker loads fenced and keeps a confirm offset."""
    controller: ConfirmOffset | None = None
    """Controller mode: the confirm offset as loaded and as the recovery corrects it."""
    unconfirmed: "Unconfirmed | None" = None
    """Controller mode: the records kept past the confirm offset, undispatched while fenced."""
    compensated: dict[str, int] = field(default_factory=dict)
    """Controller mode: queue offsets advanced past the records after the confirm offset."""
    dledger: "DLedgerRecovery | None" = None
    """A DLedger store: DLedger's own recovery (``dledger.DLedgerRecovery``) the broker's follows."""

    @property
    def broker_5x(self) -> bool:
        """A 5.x broker's prediction (``is_5x``)."""
        return is_5x(self.broker_version)

    def topic_queue_table(self) -> dict[str, int]:
        table = {f"{t}-{q}": s.max_offset for (t, q), s in self.consume_queues.items()}
        return {**table, **self.compensated}


def predict(store: Store, broker_version: str | None = None,
            summaries: Sequence[SegmentSummary] | None = None,
            records: RecordSource | None = None, puts: PutsSource | None = None,
            on_cut: Callable[[Prediction], None] | None = None, scratch: str | None = None,
            segments: "Segments | None" = None) -> Prediction:
    """The broker's recovery on ``store`` (R§1 phases 2-11) for ``broker_version``.

    Parameters
    ----------
    store
        An opened store.
    broker_version
        One of ``VERSIONS`` (or a spelling ``resolve_version`` takes); None = the store's guess
        (``Store.broker_version``).
    summaries
        Segment summaries scanned with the broker's options (computed here when None).
    records
        Where the replay reads a segment's valid prefix (``dispatch_records``; default: the
        segment itself).
    puts
        The index puts of those records, where the run's scan kept them.
    on_cut
        Called once the commitlog's fate is known (the cut, the files kept and deleted, the start
        file: step 2), before the replay, with the prediction so far; the rest of it is filled in
        by the time ``predict`` returns.
    scratch
        The directory the replay writes the index files it builds in (a run's scan directory:
        executors read them there); default a temporary one, removed with the prediction.
    segments
        A bounded run (``store_reader.broker.bounded``): instead of ``summaries``, the commitlog files
        walked only where the broker's recovery reads them (its start file search, the files from
        the start file on, the 4.9 reput's and the confirm offset's); ``segments.summaries`` holds
        the rest unwalked.
    """
    version = resolve_version(broker_version or store.broker_version())
    broker_5x = is_5x(version)
    rocksdb = store.inventory.cq_served_by == "rocksdb"
    if store.abort_exists and since(version, V55) and store.config.enableAcceleratedRecovery:
        # the walk would start inside the start file, at the checkpoint's logicsPhysicalOffset
        raise UnsupportedStoreError("enableAcceleratedRecovery=true: a 5.5 broker's abnormal recovery "
                                    "then starts at the checkpoint's logicsPhysicalOffset, which this "
                                    "tool does not model (R§12)", store.config.source)
    if rocksdb and since(version, V54) and not since(version, V55) and store.config.enableAcceleratedRecovery:
        # [5.4] CommitLog#recoverNormally/#recoverAbnormally with isEnableRocksDBStore
        raise UnsupportedStoreError("enableAcceleratedRecovery=true with a RocksDB consume queue: a 5.4 "
                                    "broker's recovery then starts inside the start file, at the queue's "
                                    "max phy offset, which this tool does not model (R§12)", store.config.source)
    if since(version, V55) and (store.config.indexRocksDBEnable or store.config.transRocksDBEnable):
        # DefaultMessageStore#recover dispatches from the lowest of every registered store's offset
        raise UnsupportedStoreError("indexRocksDBEnable/transRocksDBEnable=true: a 5.5 broker then "
                                    "dispatches again from the lowest offset of its RocksDB index and "
                                    "transaction stores (commitLogDispatchStores), which this tool does not "
                                    "model (R§15.1)", store.config.source)
    opts = store.scan_options(broker_5x=broker_5x, index_tags=index_tag_keys(version))
    if rocksdb and not broker_5x:
        raise UnsupportedStoreError(f"consume queues kept in RocksDB (storeType=defaultRocksDB): a "
                                    f"{version} broker has no RocksDB consume queue (5.x only)",
                                    os.path.join(store.root, store.inventory.rocksdb_cq_dir or "consumequeue"))
    if rocksdb:
        (queues, rocksdb_max), cq_problems = load_rocksdb_consume_queues(store), []
    else:
        queues, cq_problems = load_consume_queues(store, broker_5x)
    problems = store.load_problems_for(broker_5x) + cq_problems
    pred = Prediction(broker_version=version, load_result=not problems,
                      load_problems=[str(p) for p in problems])
    if not broker_5x:
        add_delay_level_queues(store.config, queues)
    pred.recovery_path = "abnormal" if store.abort_exists else "normal"
    pred.controller_mode = controller = broker_5x and store.config.enableControllerMode
    if segments is not None:
        summaries = segments.summaries
    elif summaries is None:
        summaries = store.summaries(opts)
    ckpt = read_checkpoint(store.checkpoint_path)
    # 1. consume queues recover on their own, before the commitlog is looked at (R§2)
    if rocksdb:     # RocksDBConsumeQueueStore#recover: nothing; its max phy offset is stored (R§15.1)
        cq_max = rocksdb_max
    else:
        for q in queues.values():
            q.recover()
        cq_max = max((q.max_physic_offset for q in queues.values()), default=-1)
    pred.max_phy_offset_of_consume_queue = cq_max
    # 2. start file and scan (R§4.1, R§4.2)
    abnormal = store.abort_exists
    rocksdb_beside = combined_rocksdb_max(store, version)
    pred.rocksdb_beside_max_phy_offset = rocksdb_beside
    if segments is not None and summaries:
        # the search reads first records only; the walk starts at the start file (R§4.1)
        segments.walk_from(start_file(segments.heads, version, store.config, abnormal, ckpt, cq_max, rocksdb,
                                      rocksdb_beside))
    start, end, files, deleted = predict_commitlog(summaries, version, store.config, abnormal, ckpt, cq_max,
                                                   opts, rocksdb, rocksdb_beside)
    pred.start_file = summaries[start].segment if summaries else None
    pred.max_phy_offset, pred.commitlog_files, pred.deleted_commitlog_files = end, files, deleted
    pred.min_phy_offset = files[0].start if files else -1
    kept_index, index_dispatch = index_files_at_load(store, abnormal, ckpt.index_msg_timestamp,
                                                     ScratchDir(scratch), opts.index_tags)
    if on_cut is not None:
        on_cut(pred)
    if not summaries:           # R§4.6: every consume queue is destroyed (the queues stay, empty)
        for q in queues.values():
            q.deleted_files += [f.start for f in q.files]
            q.files, q.min_logic_offset, q.max_physic_offset = [], 0, -1
        pred.consume_queues = queues
        pred.reput_from_offset = 0
        pred.index_files, _ = predict_index(kept_index, ckpt.index_msg_timestamp, Dispatched())
        pred.checkpoint = ckpt
        return pred
    # 3. dispatch during the scan (R§4.4); the index is built alongside (R§8); a controller-mode
    # broker loads fenced: the checkpoint's confirm offset bounds the abnormal path's dispatch
    dispatched = Dispatched(index=index_dispatch)
    if abnormal:
        pred.dispatched_from = summaries[start].file_start
        dispatch_records(store, summaries, start, summaries[start].file_start, end, None, queues,
                         opts, dispatched, no_delay_levels=not broker_5x, records=records, puts=puts,
                         confirm=ckpt.confirm_phy_offset if controller else None)
    elif broker_5x:
        # getDispatchFromPhyOffset: [5.4+] the lowest of the combine store's queues (R§15.2)
        dispatch_from = cq_max if rocksdb_beside is None else min(cq_max, rocksdb_beside)
        pred.dispatched_from = max(summaries[start].file_start, dispatch_from + 1)     # doDispatch: strictly past it
        dispatch_records(store, summaries, start, summaries[start].file_start, end, dispatch_from, queues,
                         opts, dispatched, records=records, puts=puts)
    if broker_5x and summaries:
        pred.confirm_offset = end
    if controller and summaries:
        last_confirm_valid = (dispatched.last_end if dispatched.last_end is not None
                              else summaries[start].file_start) if abnormal else None
        pred.controller = correct_confirm_offset(ckpt.confirm_phy_offset, summaries[0].file_start, end,
                                                 last_confirm_valid)
        pred.confirm_offset = pred.controller.corrected
        if segments is not None and pred.confirm_offset < end:
            segments.walk_from(segments.index_of(pred.confirm_offset))
        pred.unconfirmed = records_between(store, summaries, pred.confirm_offset, end, opts, records)
    # 4. consume queue entries beyond the recovered end (R§4.5, R§5.2); [5.4] the CQ max is
    # taken after the scan's dispatch
    cq_max_now = max((q.max_physic_offset for q in queues.values()), default=-1) \
        if since(version, V54) and not rocksdb else cq_max
    if cq_max_now >= end:
        pred.cq_truncated = True
        for q in queues.values():
            q.truncate_dirty_logic_files(end)
    # 5. start(): the reput catches up (R§6), in controller mode from and to the confirm offset
    if controller and summaries:
        pred.reput_from_offset = pred.confirm_offset
    elif broker_5x:
        pred.reput_from_offset = end
    else:
        reput = max(pred.min_phy_offset, max((q.max_physic_offset for q in queues.values()), default=-1))
        reput = max(reput, 0)
        pred.reput_from_offset = reput
        first = next(i for i, s in enumerate(summaries) if s.file_start + s.file_size > reput) \
            if reput < end else len(summaries)
        if segments is not None:            # the reput reads on from the consume queues' max
            segments.walk_from(first)
        dispatch_records(store, summaries, first, reput, end, None, queues, opts, dispatched,
                         records=records, puts=puts)
    # 6. queue tables and min offsets (R§7); 5.3.3 and 5.4.0 throw on a queue whose last file is
    # empty (fixed in 5.5.0)
    if broker_5x and not since(version, V55):
        thrown = [str(p) for p in correct_min_offset_throws(queues)]
        pred.load_problems += thrown
        pred.load_result = pred.load_result and not thrown
    for q in queues.values():
        q.correct_min_offset(pred.min_phy_offset, version)
        q.release()
    pred.consume_queues = queues
    if pred.unconfirmed is not None:     # R§7.1 compensateForHA: queue offsets past the confirm offset
        pred.compensated = {f"{t}-{q}": n for (t, q), n in pred.unconfirmed.next_queue_offsets.items()}
    # 7. index files: dropped at load after a crash, then fed by the same dispatch (R§8)
    pred.index_files, index_msg_ts = predict_index(kept_index, ckpt.index_msg_timestamp, dispatched)
    # 8. the checkpoint the broker holds afterwards
    pred.checkpoint = replace(
        ckpt,
        logics_msg_timestamp=(dispatched.last_cq_store_timestamp
                              if dispatched.last_cq_store_timestamp is not None
                              else ckpt.logics_msg_timestamp),
        logics_physical_offset=(dispatched.last_cq_phy_offset
                                if since(version, V55) and dispatched.last_cq_phy_offset is not None
                                else ckpt.logics_physical_offset),
        index_msg_timestamp=index_msg_ts,
        confirm_phy_offset=pred.confirm_offset if controller and summaries else ckpt.confirm_phy_offset)
    return pred


@dataclass
class Unconfirmed:
    """The records a controller-mode broker keeps past its confirm offset (the stale tail of
    apache/rocketmq #10666 when a slave's truncation came back after a crash)."""

    records: int = 0
    first_phy: int | None = None
    next_queue_offsets: dict[tuple[str, int], int] = field(default_factory=dict)
    """Per queue, the queue offset after its last record there (``compensateForHA``)."""


def records_between(store: Store, summaries: Sequence[SegmentSummary], begin: int, end: int,
                    opts: rf.ScanOptions, records: RecordSource | None = None) -> Unconfirmed:
    """The valid records in ``[begin, end)`` and the queue offset after each one's, per queue
    (``ConsumeQueueStore#compensateForHA`` takes every record's, LMQ copies aside)."""
    from store_reader.formats.commitlog import SegmentScan

    out = Unconfirmed()
    cols = ["phy_offset", "topic", "queue_id", "queue_offset"]
    for s in summaries:
        if s.file_start + s.file_size <= begin or s.file_start >= end:
            continue
        for batch in (SegmentScan(s.path, opts, columns=cols, batch_size=DISPATCH_BATCH) if records is None
                      else records(s, cols)):
            pos = batch["phy_offset"].to_numpy()
            keep = (pos >= begin) & (pos < end)
            if not keep.any():
                continue
            batch = batch.filter(pa.array(keep))
            out.records += batch.num_rows
            if out.first_phy is None:
                out.first_phy = int(batch["phy_offset"][0].as_py())
            for t, q, o in zip(batch["topic"].to_pylist(), batch["queue_id"].to_pylist(),
                               batch["queue_offset"].to_pylist()):
                out.next_queue_offsets[(t, q)] = o + 1     # every record, whatever its type
    return out
