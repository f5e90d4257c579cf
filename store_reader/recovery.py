"""The broker's recovery, predicted: what a RocketMQ broker would do if restarted on this store.

Pure functions over what the scanners report (per-segment summaries, decoded records), the consume
queue files, the checkpoint and the ``abort`` flag, following ``recovery.md`` step by step, bugs and
losses included. Nothing here "fixes" anything: the repaired store is built elsewhere; this module
says what the broker itself would end up with, so the audit can report the difference.

Versions: ``"4.9"`` (rocketmq-all-4.9.7) and ``"5.x"`` (5.3.3 semantics).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Sequence

import numpy as np
import pyarrow as pa

from . import recordformat as rf
from . import storefs
from .brokerconf import BrokerConfig
from .checkpoint import Checkpoint, read_checkpoint
from .commitlog import SegmentSummary
from .consumequeue import (CQ_ENTRY_DTYPE, CQ_STORE_UNIT_SIZE, PRE_BLANK_SIZE, list_queue_files,
                           list_queues, read_queue_file)
from .exceptions import StoreReaderError
from .indexfile import (IndexFile, IndexHeader, build_index_files, list_index_files, query_key_hash,
                        read_header)
from .javahash import index_key, index_key_hash, index_key_hashes, tags_hash
from .javalang import java_parse_int, java_split
from .store import Store

V49, V5X = "4.9", "5.x"
_CQ_TYPES = (rf.TRANSACTION_NOT_TYPE, rf.TRANSACTION_COMMIT_TYPE)


# -- a consume queue as the broker holds it in memory ------------------------------------------------

@dataclass
class _CQFile:
    start: int               # logic offset of the file's first byte
    slots: np.ndarray        # CQ_ENTRY_DTYPE, one per slot of the file
    wrote: int               # write position in bytes


@dataclass
class ConsumeQueueState:
    """One queue through the broker's recovery (``ConsumeQueue``); offsets in bytes unless named."""

    topic: str
    queue_id: int
    file_size: int
    files: list[_CQFile] = field(default_factory=list)
    min_logic_offset: int = 0
    max_physic_offset: int = -1
    deleted_files: list[int] = field(default_factory=list)
    skipped_repeats: int = 0           # "Build consume queue repeatedly"
    order_warnings: int = 0            # "[BUG]logic queue order maybe wrong"

    @property
    def per_file(self) -> int:
        return self.file_size // CQ_STORE_UNIT_SIZE

    @property
    def max_offset(self) -> int:
        """``getMaxOffsetInQueue``: (last file start + write position) / 20."""
        if not self.files:
            return 0
        last = self.files[-1]
        return (last.start + last.wrote) // CQ_STORE_UNIT_SIZE

    @property
    def min_offset(self) -> int:
        return self.min_logic_offset // CQ_STORE_UNIT_SIZE

    def entries(self) -> np.ndarray:
        """Entries from min to max offset (what ``getIndexBuffer`` serves), queue offset order."""
        out = [f.slots[: f.wrote // CQ_STORE_UNIT_SIZE] for f in self.files]
        allv = np.concatenate(out) if out else np.zeros(0, CQ_ENTRY_DTYPE)
        first = self.files[0].start // CQ_STORE_UNIT_SIZE if self.files else 0
        return allv[max(0, self.min_offset - first):]

    # R§2 ConsumeQueue#recover
    def recover(self) -> None:
        if not self.files:
            return
        index = max(0, len(self.files) - 3)
        process = self.files[index].start
        for f in self.files[index:]:
            valid = (f.slots["phy_offset"] >= 0) & (f.slots["size"] > 0)
            bad = np.flatnonzero(~valid)
            n = int(bad[0]) if bad.size else len(valid)
            if n:
                last = f.slots[n - 1]
                self.max_physic_offset = int(last["phy_offset"]) + int(last["size"])
            process = f.start + n * CQ_STORE_UNIT_SIZE
            if n < len(valid):
                break
        self._truncate_dirty_files(process)

    # R§5.1 MappedFileQueue#truncateDirtyFiles
    def _truncate_dirty_files(self, offset: int) -> None:
        kept = []
        for f in self.files:
            if f.start + self.file_size > offset:
                if offset >= f.start:
                    f.wrote = offset % self.file_size
                    kept.append(f)
                else:
                    self.deleted_files.append(f.start)
            else:
                kept.append(f)
        self.files = kept

    # R§5.2 ConsumeQueue#truncateDirtyLogicFiles
    def truncate_dirty_logic_files(self, phy_offset: int) -> None:
        self.max_physic_offset = phy_offset
        while self.files:
            f = self.files[-1]
            f.wrote = 0
            for i in range(self.per_file):
                e = f.slots[i]
                phy, size = int(e["phy_offset"]), int(e["size"])
                if i == 0:
                    if phy >= phy_offset:      # entry 0 is not validity-checked (E#22)
                        self.deleted_files.append(f.start)
                        self.files.pop()
                        break
                    f.wrote = CQ_STORE_UNIT_SIZE
                    self.max_physic_offset = phy + size
                    continue
                if phy >= 0 and size > 0:
                    if phy >= phy_offset:
                        return
                    f.wrote = (i + 1) * CQ_STORE_UNIT_SIZE
                    self.max_physic_offset = phy + size
                    if f.wrote == self.file_size:
                        return
                else:
                    return
            else:
                return

    # R§5.3 ConsumeQueue#putMessagePositionInfo
    def put(self, phy: int, size: int, tags_code: int, cq_offset: int) -> None:
        if phy + size <= self.max_physic_offset:
            self.skipped_repeats += 1
            return
        expect = cq_offset * CQ_STORE_UNIT_SIZE
        first_create = False
        if not self.files:
            self.files.append(_CQFile(expect - expect % self.file_size,
                                      np.zeros(self.per_file, CQ_ENTRY_DTYPE), 0))
            first_create = True
        elif self.files[-1].wrote >= self.file_size:
            self.files.append(_CQFile(self.files[-1].start + self.file_size,
                                      np.zeros(self.per_file, CQ_ENTRY_DTYPE), 0))
        f = self.files[-1]
        if first_create and cq_offset != 0 and f.wrote == 0:
            self.min_logic_offset = expect
            n = (expect % self.file_size) // CQ_STORE_UNIT_SIZE
            f.slots[:n] = np.array([(0, PRE_BLANK_SIZE, 0)], CQ_ENTRY_DTYPE)   # fillPreBlank
            f.wrote = n * CQ_STORE_UNIT_SIZE
        if cq_offset != 0:
            current = f.start + f.wrote
            if expect < current:
                self.skipped_repeats += 1
                return
            if expect != current:
                self.order_warnings += 1
        self.max_physic_offset = phy + size
        f.slots[f.wrote // CQ_STORE_UNIT_SIZE] = (phy, size, tags_code)
        f.wrote += CQ_STORE_UNIT_SIZE

    # R§7.2 ConsumeQueue#correctMinOffset
    def correct_min_offset(self, min_phy: int, version: str) -> None:
        if not self.files:
            return
        first = self.files[0]
        readable = first.wrote // CQ_STORE_UNIT_SIZE
        if version == V49:
            phys = first.slots["phy_offset"][:readable]
            hit = np.flatnonzero(phys >= min_phy)
            if hit.size:
                self.min_logic_offset = first.start + int(hit[0]) * CQ_STORE_UNIT_SIZE
            return
        max_logic = self.files[-1].start + self.files[-1].wrote
        if self.min_logic_offset >= max_logic:
            return
        last = self.files[-1]
        if last.wrote and int(last.slots[last.wrote // CQ_STORE_UNIT_SIZE - 1]["phy_offset"]) < min_phy:
            self.min_logic_offset = last.start + last.wrote
            return
        start = self.min_logic_offset - first.start
        intact = start >= 0
        start = max(start, 0)
        phys = first.slots["phy_offset"][:readable]
        i0 = start // CQ_STORE_UNIT_SIZE
        if intact and i0 < readable and phys[i0] >= min_phy:
            return
        hit = np.flatnonzero(phys[i0:] >= min_phy)     # the binary search finds the first such entry
        if hit.size:
            self.min_logic_offset = first.start + (i0 + int(hit[0])) * CQ_STORE_UNIT_SIZE


def multi_dispatch_targets(config: BrokerConfig, broker_5x: bool, topic: str, queue_id: int,
                           properties: dict[str, str] | None) -> list[tuple[str, int, int]]:
    """The LMQ / multi-dispatch copies of a record's CQ entry (R§5.3, E#33): (queue topic,
    queue id, queue offset) from ``INNER_MULTI_DISPATCH`` / ``INNER_MULTI_QUEUE_OFFSET``."""
    if not config.enableMultiDispatch or not properties:
        return []
    names = properties.get(rf.PROPERTY_INNER_MULTI_DISPATCH, "")
    offsets = properties.get(rf.PROPERTY_INNER_MULTI_QUEUE_OFFSET, "")
    if not names.strip() or not offsets.strip():
        return []
    if broker_5x and (topic.startswith("%RETRY%") or topic.startswith("rmq_sys_")
                      or topic == rf.SCHEDULE_TOPIC):
        return []
    queue_names, queue_offsets = java_split(names, ","), java_split(offsets, ",")
    if len(queue_names) != len(queue_offsets):
        return []
    out = []
    for name, off in zip(queue_names, queue_offsets):
        if broker_5x and "/" in name:
            continue
        offset = java_parse_int(off, 64)
        if offset is None:      # Long.parseLong throws: the broker logs it and this copy is lost
            continue
        qid = 0 if config.enableLmq and name.startswith("%LMQ%") else queue_id
        out.append((name, qid, offset))
    return out


def load_consume_queues(store: Store, broker_5x: bool) -> tuple[dict[tuple[str, int], ConsumeQueueState],
                                                                list[StoreReaderError]]:
    """Every queue as ``load()`` maps it; files of the wrong size are load failures (OBSERVATIONS 9)."""
    size = store.config.cq_file_size
    queues: dict[tuple[str, int], ConsumeQueueState] = {}
    problems: list[StoreReaderError] = []
    for ref in list_queues(store.root):
        q = ConsumeQueueState(ref.topic, ref.queue_id, size)
        try:
            files = list_queue_files(ref.path, size, rocketmq5=broker_5x)
        except StoreReaderError as exc:
            problems.append(exc)
            continue
        for f in files:
            if f.size == 0:
                continue
            e = read_queue_file(f.path)
            slots = np.zeros(q.per_file, CQ_ENTRY_DTYPE)
            slots["phy_offset"], slots["size"], slots["tags_code"] = e.phy_offset, e.size, e.tags_code
            q.files.append(_CQFile(f.start, slots, size))
        if q.files:
            q.min_logic_offset = q.files[0].start
        queues[(ref.topic, ref.queue_id)] = q
    return queues, problems


# -- the commitlog side -------------------------------------------------------------------------------

@dataclass
class CommitLogFileState:
    name: str
    start: int
    size: int
    wrote: int


@dataclass
class Prediction:
    """What the broker would do if restarted on the store now (fields in the broker's terms)."""

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
    confirm_offset: int | None = None
    reput_from_offset: int | None = None
    consume_queues: dict[tuple[str, int], ConsumeQueueState] = field(default_factory=dict)
    cq_truncated: bool = False
    index_files: list["PredictedIndexFile"] = field(default_factory=list)
    checkpoint: Checkpoint | None = None

    def topic_queue_table(self) -> dict[str, int]:
        return {f"{t}-{q}": s.max_offset for (t, q), s in self.consume_queues.items()}


def _start_file_abnormal(summaries: Sequence[SegmentSummary], version: str, config: BrokerConfig,
                         min_ts: int, min_ts_index: int) -> int:
    """R§4.1 abnormal (4.9.7 / 5.3.3): newest file whose first record's header passes
    ``isMappedFileMatchedRecover``; only magic, STORETIMESTAMP != 0 and the checkpoint bound count."""
    magics = (rf.MAGIC_V1, rf.MAGIC_V2) if version == V5X else (rf.MAGIC_V1,)
    bound = min_ts_index if config.messageIndexEnable and config.messageIndexSafe else min_ts
    for i in range(len(summaries) - 1, -1, -1):
        s = summaries[i]
        ts = s.first_store_timestamp_raw
        if s.first_magic in magics and ts and ts <= bound:
            return i
    return 0


def _start_file_normal(summaries: Sequence[SegmentSummary], version: str, cq_max: int) -> int:
    if version == V49:                                  # the third-last file
        return max(0, len(summaries) - 3)
    index = len(summaries) - 1                          # 5.3.3: file holding the CQ max
    while index > 0 and summaries[index].file_start > cq_max:
        index -= 1
    return index


def predict_commitlog(summaries: Sequence[SegmentSummary], version: str, config: BrokerConfig,
                      abnormal: bool, checkpoint_min_ts: int, checkpoint_min_ts_index: int,
                      cq_max: int) -> tuple[int, int, list[CommitLogFileState], list[str]]:
    """R§4: (start index, recovered end, files after truncation, deleted file names)."""
    if not summaries:
        return 0, 0, [], []
    if abnormal:
        start = _start_file_abnormal(summaries, version, config, checkpoint_min_ts,
                                     checkpoint_min_ts_index)
    else:
        start = _start_file_normal(summaries, version, cq_max)
    end = summaries[start].file_start
    for i in range(start, len(summaries)):           # R§4.2: a blank marker moves on to the next file
        s = summaries[i]
        end = s.file_start + s.valid_bytes
        if s.end_reason != "eof_marker":
            break
    files, deleted = [], []
    for s in summaries:                               # R§5.1 truncateDirtyFiles(end)
        if s.file_start + s.file_size > end:
            if end >= s.file_start:
                files.append(CommitLogFileState(s.segment, s.file_start, s.file_size, end - s.file_start))
            else:
                deleted.append(s.segment)
        else:
            files.append(CommitLogFileState(s.segment, s.file_start, s.file_size, s.file_size))
    return start, end, files, deleted


@dataclass
class Dispatched:
    """Records handed to ``doDispatch``, in order: what the index builder and checkpoint need."""

    stored_phy: list[int] = field(default_factory=list)
    store_timestamp: list[int] = field(default_factory=list)
    topic: list[str] = field(default_factory=list)
    keys: list[list[str]] = field(default_factory=list)      # UNIQ_KEY first, then KEYS tokens
    sys_flag: list[int] = field(default_factory=list)
    last_cq_store_timestamp: int | None = None
    early_delivery: list[tuple[int, int]] = field(default_factory=list)
    """(schedule queue id, phy) of delayed records given the TAGS hash as tags code (E#30b)."""


def dispatch_records(store: Store, summaries: Sequence[SegmentSummary], from_index: int, begin: int,
                     end: int, min_stored_phy: int | None,
                     queues: dict[tuple[str, int], ConsumeQueueState], opts: rf.ScanOptions,
                     out: Dispatched, no_delay_levels: bool = False) -> None:
    """Feed VALID records in ``[begin, end)`` of files ``from_index..`` to the CQ builder in
    commitlog order and remember them for the index builder (R§4.4, R§6;
    ``DefaultMessageStore#doDispatch``). With ``min_stored_phy``, only records whose stored
    PHYSICALOFFSET is greater are dispatched (5.x normal recovery, E#20). ``no_delay_levels``:
    4.9.7 recovers before ``ScheduleMessageService#load``, so a schedule-topic record gets its
    TAGS hash as tags code, not its deliver time (E#30b)."""
    from .commitlog import SegmentScan

    cols = ["phy_offset", "stored_phy_offset", "total_size", "topic", "queue_id", "queue_offset",
            "sys_flag", "tags_code", "store_timestamp", "uniq_key", "key_list", "tags",
            "delay_level"] + (["properties"] if store.config.enableMultiDispatch else [])
    for s in summaries[from_index:]:
        if s.file_start + s.file_size <= begin or s.file_start >= end:
            continue
        for batch in SegmentScan(s.path, opts, columns=cols):
            d = batch.to_pydict()
            for i in range(batch.num_rows):
                pos = d["phy_offset"][i]
                if pos < begin or pos >= end:
                    continue
                stored = d["stored_phy_offset"][i]
                if min_stored_phy is not None and stored <= min_stored_phy:
                    continue
                uniq = d["uniq_key"][i]
                out.stored_phy.append(stored)
                out.store_timestamp.append(d["store_timestamp"][i])
                out.topic.append(d["topic"][i])
                out.keys.append(([uniq] if uniq is not None else []) + d["key_list"][i])
                out.sys_flag.append(d["sys_flag"][i])
                if d["sys_flag"][i] & rf.TRANSACTION_MASK not in _CQ_TYPES:
                    continue
                out.last_cq_store_timestamp = d["store_timestamp"][i]
                key = (d["topic"][i], d["queue_id"][i])
                tags_code = d["tags_code"][i]
                if no_delay_levels and key[0] == rf.SCHEDULE_TOPIC and d["delay_level"][i] is not None:
                    tags_code = tags_hash(d["tags"][i])
                    out.early_delivery.append((key[1], stored))
                targets = [(key, d["queue_offset"][i])]
                if store.config.enableMultiDispatch:
                    props = dict(d["properties"][i] or [])
                    targets += [((t, qid), off) for t, qid, off in multi_dispatch_targets(
                        store.config, opts.broker_5x, key[0], key[1], props)]
                for target, cq_offset in targets:
                    q = queues.get(target)
                    if q is None:
                        q = queues[target] = ConsumeQueueState(*target, store.config.cq_file_size)
                    q.put(stored, d["total_size"][i], tags_code, cq_offset)


def predict(store: Store, broker_version: str | None = None,
            summaries: Sequence[SegmentSummary] | None = None) -> Prediction:
    """The broker's recovery on ``store`` (R§1 phases 2-11) for ``broker_version``.

    Parameters
    ----------
    store
        An opened store.
    broker_version
        ``"4.9"`` or ``"5.x"``; None = from the store's version hints.
    summaries
        Segment summaries scanned with the broker's options (computed here when None).
    """
    version = broker_version or (V5X if store.looks_5x() else V49)
    if version not in (V49, V5X):
        raise ValueError(f"broker_version must be {V49!r} or {V5X!r}, got {version!r}")
    broker_5x = version == V5X
    opts = store.scan_options(broker_5x=broker_5x)
    pred = Prediction(broker_version=version, load_result=store.loadable,
                      load_problems=[str(p) for p in store.load_problems])
    queues, cq_problems = load_consume_queues(store, broker_5x)
    if not broker_5x and store.notes and any("zero-length last file" in n for n in store.notes):
        pred.load_problems.append("zero-length last commitlog file: 4.9.7's load() fails on it")
    pred.load_problems += [str(p) for p in cq_problems]
    if not broker_5x:
        # 4.9.7's ScheduleMessageService#load (correctDelayOffset) looks up the schedule queue of
        # every delay level, which creates the empty ones (OBSERVATIONS 15).
        for level in range(1, len(store.config.delay_levels_ms) + 1):
            key = (rf.SCHEDULE_TOPIC, level - 1)
            queues.setdefault(key, ConsumeQueueState(*key, store.config.cq_file_size))
    pred.load_result = not pred.load_problems
    if not pred.load_result:
        return pred
    pred.recovery_path = "abnormal" if store.abort_exists else "normal"
    if summaries is None:
        summaries = store.summaries(opts)
    ckpt = read_checkpoint(store.checkpoint_path)
    # 1. consume queues recover on their own, before the commitlog is looked at (R§2)
    for q in queues.values():
        q.recover()
    cq_max = max((q.max_physic_offset for q in queues.values()), default=-1)
    pred.max_phy_offset_of_consume_queue = cq_max
    # 2. start file and scan (R§4.1, R§4.2)
    abnormal = store.abort_exists
    start, end, files, deleted = predict_commitlog(
        summaries, version, store.config, abnormal, ckpt.min_timestamp, ckpt.min_timestamp_index, cq_max)
    pred.start_file = summaries[start].segment if summaries else None
    pred.max_phy_offset, pred.commitlog_files, pred.deleted_commitlog_files = end, files, deleted
    if not summaries:           # R§4.6: every consume queue is destroyed (the queues stay, empty)
        for q in queues.values():
            q.deleted_files += [f.start for f in q.files]
            q.files, q.min_logic_offset, q.max_physic_offset = [], 0, -1
        pred.consume_queues = queues
        pred.min_phy_offset = -1
        pred.reput_from_offset = 0
        pred.index_files, _ = predict_index(store, abnormal, ckpt.index_msg_timestamp, Dispatched())
        pred.checkpoint = ckpt
        return pred
    pred.min_phy_offset = files[0].start if files else -1
    # 3. dispatch during the scan (R§4.4)
    dispatched = Dispatched()
    if abnormal:
        dispatch_records(store, summaries, start, summaries[start].file_start, end, None, queues,
                         opts, dispatched, no_delay_levels=not broker_5x)
    elif broker_5x:
        dispatch_records(store, summaries, start, summaries[start].file_start, end, cq_max, queues,
                         opts, dispatched)
    if broker_5x and summaries:
        pred.confirm_offset = end
    # 4. consume queue entries beyond the recovered end (R§4.5, R§5.2)
    if cq_max >= end:
        pred.cq_truncated = True
        for q in queues.values():
            q.truncate_dirty_logic_files(end)
    # 5. start(): the reput catches up (R§6)
    if broker_5x:
        pred.reput_from_offset = end
    else:
        reput = max(pred.min_phy_offset, max((q.max_physic_offset for q in queues.values()), default=-1))
        reput = max(reput, 0)
        pred.reput_from_offset = reput
        first = next(i for i, s in enumerate(summaries) if s.file_start + s.file_size > reput) \
            if reput < end else len(summaries)
        dispatch_records(store, summaries, first, reput, end, None, queues, opts, dispatched)
    # 6. queue tables and min offsets (R§7)
    for q in queues.values():
        q.correct_min_offset(pred.min_phy_offset, version)
    pred.consume_queues = queues
    # 7. index files: dropped at load after a crash, then fed by the same dispatch (R§8)
    pred.index_files, index_msg_ts = predict_index(store, abnormal, ckpt.index_msg_timestamp, dispatched)
    # 8. the checkpoint the broker holds afterwards
    pred.checkpoint = replace(
        ckpt,
        logics_msg_timestamp=(dispatched.last_cq_store_timestamp
                              if dispatched.last_cq_store_timestamp is not None
                              else ckpt.logics_msg_timestamp),
        index_msg_timestamp=index_msg_ts)
    return pred


@dataclass
class PredictedIndexFile:
    """An index file after recovery: kept as it was, continued, or created by the re-dispatch."""

    name: str | None                  # None for a file the broker would create (named by its clock)
    header: IndexHeader
    data: np.ndarray | None = None    # file bytes when built here; None = unchanged on disk
    path: str | None = None

    def view(self, config: BrokerConfig) -> IndexFile:
        if self.data is not None:
            return IndexFile.from_buffer(self.data, config.maxHashSlotNum, config.maxIndexNum,
                                         name=self.name or "<new>")
        return IndexFile(self.path, config.maxHashSlotNum, config.maxIndexNum)


def predict_index(store: Store, abnormal: bool, index_msg_timestamp: int, dispatched: Dispatched
                  ) -> tuple[list[PredictedIndexFile], int]:
    """R§8 and F§7.4: (index files after recovery, checkpoint indexMsgTimestamp)."""
    cfg = store.config
    files = []
    for ref in list_index_files(store.index_dir, cfg.index_file_size, strict=False):
        header = read_header(ref.path)
        if abnormal and header.end_timestamp > index_msg_timestamp:
            continue                                  # IndexService#load(lastExitOK=false)
        files.append(PredictedIndexFile(ref.name, header, path=ref.path))
    if not cfg.messageIndexEnable or not dispatched.stored_phy:
        return files, index_msg_timestamp
    last = files[-1] if files else None
    full = last is not None and last.header.loaded_index_count >= cfg.maxIndexNum
    base = None
    if last is None:
        start_header = IndexHeader().successor()        # a fresh first file: indexCount 1
    elif full:
        start_header = last.header.successor()
    else:
        start_header = last.header
        base = storefs.location(last.path).read_bytes()      # local or remote store alike
    # IndexService#buildIndex: skip a record below the current file's endPhyOffset, and ROLLBACK ones
    end_phy = start_header.end_phy_offset
    keys, phys, stamps = [], [], []
    for phy, ts, topic, rec_keys, flag in zip(dispatched.stored_phy, dispatched.store_timestamp,
                                              dispatched.topic, dispatched.keys, dispatched.sys_flag):
        if phy < end_phy or flag & rf.TRANSACTION_MASK == rf.TRANSACTION_ROLLBACK_TYPE or not rec_keys:
            continue
        keys += [index_key(topic, k) for k in rec_keys]
        phys += [phy] * len(rec_keys)
        stamps += [ts] * len(rec_keys)
        end_phy = phy
    if not keys:
        return files, index_msg_timestamp
    built = build_index_files(index_key_hashes(keys), np.array(phys, np.int64), np.array(stamps, np.int64),
                              hash_slot_num=cfg.maxHashSlotNum, index_num=cfg.maxIndexNum,
                              start_header=start_header if base is None else None, base=base)
    if base is not None:
        files.pop()
    for b in built:
        if b.continued:
            files.append(PredictedIndexFile(last.name, b.header, data=b.data, path=last.path))
        else:
            # the file before a new one was full: IndexService#flush moves indexMsgTimestamp
            if files:
                index_msg_timestamp = files[-1].header.end_timestamp
            files.append(PredictedIndexFile(None, b.header, data=b.data))
    return files, index_msg_timestamp


def query_index(pred: Prediction, config: BrokerConfig, topic: str, key: str,
                max_num: int | None = None) -> list[int]:
    """``IndexService#queryOffset`` on the predicted index files (hash candidates, newest first)."""
    views = [f.view(config) for f in pred.index_files]
    return query_key_hash(views, index_key_hash(index_key(topic, key)),
                          hash_slot_num=config.maxHashSlotNum, index_num=config.maxIndexNum,
                          max_num=max_num or config.maxMsgsNumBatch)


def query_message(pred: Prediction, config: BrokerConfig, topic: str, key: str,
                  max_num: int | None = None) -> list[int]:
    """``DefaultMessageStore#queryMessage``: the candidates sorted, keeping those that resolve to
    bytes of the recovered commitlog (dangling entries are dropped silently, OBSERVATIONS 7, 10)."""
    lo, hi = pred.min_phy_offset, pred.max_phy_offset
    return [p for p in sorted(query_index(pred, config, topic, key, max_num)) if lo <= p < hi]


# -- consumer offsets: what a pull at the committed offset answers (R§9.2) -------------------------

@dataclass(frozen=True)
class OffsetCheck:
    """``DefaultMessageStore#getMessage(group, topic, queueId, committed, 1)`` after recovery."""

    topic: str
    group: str | None
    queue_id: int
    committed_offset: int
    min_offset: int
    max_offset: int
    status: str
    next_begin_offset: int


def _readable(pred: Prediction, phy: int, size: int) -> bool:
    """``CommitLog#getMessage(phy, size)``: the bytes lie inside a file's readable region."""
    for f in pred.commitlog_files:
        if f.start <= phy < f.start + f.size:
            return phy - f.start + size <= f.wrote
    return False


def check_offset(pred: Prediction, config: BrokerConfig, topic: str, group: str | None,
                 queue_id: int, offset: int) -> OffsetCheck:
    """Pull status and corrected offset on a master for one committed offset (R§9.2)."""
    q = pred.consume_queues.get((topic, queue_id))
    lo, hi = (q.min_offset, q.max_offset) if q is not None else (0, 0)

    def result(status: str, nxt: int) -> OffsetCheck:
        return OffsetCheck(topic, group, queue_id, offset, lo, hi, status, nxt)

    if hi == 0:
        return result("NO_MESSAGE_IN_QUEUE", 0)
    if offset < lo:
        return result("OFFSET_TOO_SMALL", lo)
    if offset == hi:
        return result("OFFSET_OVERFLOW_ONE", offset)
    if offset > hi:
        return result("OFFSET_OVERFLOW_BADLY", hi)
    # getIndexBuffer: the rest of the CQ file holding the offset, at most 16000 bytes scanned
    logic = offset * CQ_STORE_UNIT_SIZE
    f = next((f for f in q.files if f.start <= logic < f.start + f.wrote), None)
    if f is None:
        next_file = logic + q.file_size - logic % q.file_size
        return result("OFFSET_FOUND_NULL", next_file // CQ_STORE_UNIT_SIZE)
    first = (logic - f.start) // CQ_STORE_UNIT_SIZE
    slots = f.slots[first: min(f.wrote // CQ_STORE_UNIT_SIZE, first + 16000 // CQ_STORE_UNIT_SIZE)]
    status, next_phy_file = "NO_MATCHED_MESSAGE", None
    fsize = config.mappedFileSizeCommitLog
    for i, e in enumerate(slots):
        phy, size = int(e["phy_offset"]), int(e["size"])
        if next_phy_file is not None and phy < next_phy_file:
            continue
        if _readable(pred, phy, size):
            return result("FOUND", offset + i + 1)      # one message asked for: the batch is full
        status = "MESSAGE_WAS_REMOVING"
        next_phy_file = phy + fsize - phy % fsize       # CommitLog#rollNextFile
    return result(status, offset + len(slots))


def consumer_offset_checks(pred: Prediction, config: BrokerConfig, offsets: pa.Table) -> list[OffsetCheck]:
    """``check_offset`` for every committed offset (``config.read_consumer_offsets(...).value``)."""
    return [check_offset(pred, config, r["topic"], r["group"], r["queue_id"], r["offset"])
            for r in offsets.to_pylist()]
