"""The records a predicted recovery hands to ``DefaultMessageStore#doDispatch`` (the recovery's own walk
and the reput, R§4.4, R§6): each to its consume queues, LMQ copies included, and to the index
dispatch; what the checkpoint needs of them.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Iterable, Iterator, Sequence

import numpy as np
import pyarrow as pa

from store_reader.formats import recordformat as rf
from store_reader.formats.commitlog import SegmentSummary
from store_reader.broker.dispatch import dispatchable, queue_puts
from store_reader.formats.javahash import java_string_hashes
from store_reader.broker.cqueue import ConsumeQueueState

if TYPE_CHECKING:
    from store_reader.formats.brokerconf import BrokerConfig
    from store_reader.formats.indexfile import IndexPuts
    from store_reader.store import Store
    from store_reader.broker.indexservice import IndexDispatch


@dataclass
class Dispatched:
    """Records handed to ``doDispatch``, in order: what the checkpoint needs, and the index
    dispatch they feed (None when ``messageIndexEnable`` is off)."""

    index: IndexDispatch | None = None
    records: int = 0
    last_cq_store_timestamp: int | None = None
    last_cq_phy_offset: int | None = None       # [5.5] the checkpoint's logicsPhysicalOffset
    early_delivery: list[tuple[int, int]] = field(default_factory=list)
    """(schedule queue id, phy) of delayed records given the TAGS hash as tags code (E#30b)."""
    last_end: int | None = None
    """Where the last record dispatched ends (controller mode: ``lastConfirmValidMsgPhyOffset``)."""

    def add(self, batch: pa.RecordBatch, puts: IndexPuts | None = None) -> None:
        """Dispatched records (columns phy_offset, stored_phy_offset, store_timestamp, sys_flag,
        topic, uniq_key, key_list, tags) to the index: every record but a ROLLBACK one puts
        ``topic#UNIQ_KEY`` then ``topic#token`` per KEYS token, then (5.4+) ``topic#T#TAGS``
        (F§7.4); ``puts``: those keys as
        the run's scan hashed them (``IndexDispatch._add``)."""
        self.records += batch.num_rows
        if batch.num_rows and "total_size" in batch.schema.names:
            self.last_end = int(batch["phy_offset"][-1].as_py()) + int(batch["total_size"][-1].as_py())
        if self.index is not None:
            self.index.add(batch, puts)


# A segment's valid prefix, as the broker's walk reads it: (summary, columns) -> record batches.
RecordSource = Callable[[SegmentSummary, Sequence[str]], Iterable[pa.RecordBatch]]
# The index puts of those batches' records, a batch of puts per batch of records, where the run's
# scan kept them (None: that segment's keys are built and hashed by the replay).
PutsSource = Callable[[SegmentSummary], "Iterator[IndexPuts] | None"]

# Records per scanned batch on the driver's dispatch: large enough that the per-batch NumPy work
# dominates the per-batch Python overhead, small enough to stay a few MB.
DISPATCH_BATCH = 65536


def dispatched_again(phy: np.ndarray, stored_phy: np.ndarray, size: np.ndarray | None, cq_max: int,
                     recovery_walk: bool) -> np.ndarray:
    """Which records a restart dispatches again past the consume queues' max phy offset ``cq_max``:
    the reput ([4.9], R§6) starts at it, so every record ending past it; 5.x's normal recovery walk
    (``recovery_walk``, R§4.4) takes only records whose stored PHYSICALOFFSET is strictly greater,
    so not the record starting exactly at it (E#20)."""
    return stored_phy > cq_max if recovery_walk else phy + size > cq_max


def dispatch_records(store: Store, summaries: Sequence[SegmentSummary], from_index: int, begin: int,
                     end: int, min_stored_phy: int | None,
                     queues: dict[tuple[str, int], ConsumeQueueState], opts: rf.ScanOptions,
                     out: Dispatched, no_delay_levels: bool = False,
                     records: RecordSource | None = None, puts: PutsSource | None = None,
                     confirm: int | None = None) -> None:
    """Feed VALID records in ``[begin, end)`` of files ``from_index..`` to the CQ builder in
    commitlog order and remember them for the index builder (R§4.4, R§6;
    ``DefaultMessageStore#doDispatch``). With ``min_stored_phy``, only records whose stored
    PHYSICALOFFSET is greater are dispatched (5.x normal recovery, E#20); with ``confirm``, only
    records ending at or before it (5.x abnormal recovery in controller mode). ``no_delay_levels``:
    4.9.7 recovers before ``ScheduleMessageService#load``, so a schedule-topic record gets its
    TAGS hash as tags code, not its deliver time (E#30b).

    Vectorised per batch: queues are independent, so each queue gets its puts of the batch in
    one ``ConsumeQueueState.put_many`` (in commitlog order within the queue). ``records``: where
    a segment's valid prefix is read from (default: the segment, walked again); ``puts``: the
    index puts that came with them (only with ``records``)."""
    from store_reader.formats.commitlog import SegmentScan

    cols = ["phy_offset", "stored_phy_offset", "total_size", "topic", "queue_id", "queue_offset",
            "sys_flag", "tags_code", "store_timestamp", "uniq_key", "key_list"]
    cols += ["tags"] if no_delay_levels or opts.index_tags else []
    cols += ["delay_level"] if no_delay_levels else []
    cols += ["properties"] if store.config.enableMultiDispatch else []
    for s in summaries[from_index:]:
        if s.file_start + s.file_size <= begin or s.file_start >= end:
            continue
        kept_puts = None if records is None or puts is None else puts(s)
        for batch in (SegmentScan(s.path, opts, columns=cols, batch_size=DISPATCH_BATCH) if records is None
                      else records(s, cols)):
            batch_puts = None if kept_puts is None else next(kept_puts)
            pos = batch["phy_offset"].to_numpy()
            keep = (pos >= begin) & (pos < end)
            if min_stored_phy is not None:
                keep &= dispatched_again(pos, batch["stored_phy_offset"].to_numpy(), None, min_stored_phy,
                                         recovery_walk=True)
            if confirm is not None:
                keep &= pos + batch["total_size"].to_numpy() <= confirm
            if not keep.all():
                batch = batch.filter(pa.array(keep))
            if batch.num_rows:
                out.add(batch, batch_puts)
                _dispatch_to_queues(store.config, opts.broker_5x, batch, queues, out, no_delay_levels)


def _dispatch_to_queues(config: BrokerConfig, broker_5x: bool, batch: pa.RecordBatch,
                        queues: dict[tuple[str, int], ConsumeQueueState], out: Dispatched,
                        no_delay_levels: bool) -> None:
    """The CQ puts of one batch of dispatched records (``dispatch.queue_puts``: NOT / COMMIT types,
    LMQ copies included)."""
    rows = np.flatnonzero(dispatchable(batch["sys_flag"].to_numpy()))
    if not rows.size:
        return
    b = batch.drop_columns([c for c in ("uniq_key", "key_list") if c in batch.schema.names])   # the index's
    b = b if len(rows) == b.num_rows else b.take(pa.array(rows))
    out.last_cq_store_timestamp = int(b["store_timestamp"][-1].as_py())
    phy, size = b["stored_phy_offset"].to_numpy(), b["total_size"].to_numpy().astype(np.int64)
    out.last_cq_phy_offset = int(phy[-1])
    tags_code = b["tags_code"].to_numpy().copy()
    p = queue_puts(config, broker_5x, b)       # every row of b is put
    names, qid = p.topics, p.queue_id
    if no_delay_levels:
        import pyarrow.compute as pc

        delayed = np.flatnonzero((p.topic[:p.own] == (names.index(rf.SCHEDULE_TOPIC)
                                                      if rf.SCHEDULE_TOPIC in names else -1))
                                 & pc.is_valid(b["delay_level"]).to_numpy(zero_copy_only=False))
        if delayed.size:
            tags_code[delayed] = java_string_hashes(b["tags"].take(pa.array(delayed)))
            out.early_delivery += list(zip(qid[delayed].tolist(), phy[delayed].tolist()))
    # one group per target queue: (topic number, queue id) of the record, then its LMQ copies
    group = p.topic << 32 | (qid.astype(np.int64) & 0xFFFFFFFF)
    order = p.row
    if p.own < len(p.row):
        phy, size, tags_code = phy[p.row], size[p.row], tags_code[p.row]
    sort = np.lexsort((order, group))           # by queue, then commitlog order (base put first)
    group = group[sort]
    cut = np.flatnonzero(np.diff(group)) + 1
    for lo, hi in zip(np.concatenate([[0], cut]).tolist(), np.concatenate([cut, [len(group)]]).tolist()):
        i = sort[lo:hi]
        key = (names[int(p.topic[i[0]])], int(qid[i[0]]))
        q = queues.get(key)
        if q is None:
            q = queues[key] = ConsumeQueueState(*key, config.cq_file_size)
        q.put_many(phy[i], size[i], tags_code[i], p.queue_offset[i])
