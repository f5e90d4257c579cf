"""One opened store as ``jobs.dump --verify`` checks it in one process: the commitlog scanned once
into a table of every intact record, where the broker's recovery ends it, what each consume
queue should hold, and the audit's comparison of every queue. Spark-free; the Spark audit gets the
same facts from its own passes (each queue's from the same functions: ``records.queue_rows``,
``queues.rebuilt_queue``, ``compare.compare_queues``)."""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from store_reader.audit.compare import compare_queues
from store_reader.audit.plan import audit_plan
from store_reader.audit.queues import rebuilt_entries, rebuilt_puts, rebuilt_queue
from store_reader.audit.records import cut_rows, driver_items, queue_rows
from store_reader.broker import dledger
from store_reader.formats import recordformat as rf
from store_reader.broker import cqueue, cut as broker_cut, versions
from store_reader.broker.prediction import Prediction, predict
from store_reader.broker.replay import dispatched_again
from store_reader.formats.checkpoint import read_checkpoint
from store_reader.formats.commitlog import SegmentScan, SegmentSummary
from store_reader.formats.controller import ConfirmOffset, correct_confirm_offset
from store_reader.exceptions import StoreReaderError
from store_reader.formats.rocksdbcq import served_consume_queue
from store_reader.store import Store

# What the verifier keeps of every intact record: enough to check CQ and index entries against it.
VERIFY_COLUMNS = ["phy_offset", "stored_phy_offset", "total_size", "topic", "queue_id", "queue_offset",
                  "sys_flag", "uniq_key", "key_list", "tags", "valid_prefix", "tags_code", "body_crc_ok",
                  "record_crc_ok"]


@dataclass
class RecordTable:
    """Every intact record of the commitlog (valid prefix and lost ones), sorted by phy offset."""

    phy: np.ndarray
    stored_phy: np.ndarray        # PHYSICALOFFSET as stored (what a consume queue entry holds)
    size: np.ndarray
    topic: np.ndarray             # index into ``topics``
    topics: list[str]
    queue_id: np.ndarray
    queue_offset: np.ndarray
    tran: np.ndarray              # SYSFLAG & TRANSACTION_MASK
    keyed: np.ndarray             # has UNIQ_KEY, KEYS tokens or (5.4+) TAGS (what the index builder puts)
    valid_prefix: np.ndarray

    @classmethod
    def from_batches(cls, batches: list[pa.RecordBatch]) -> "RecordTable":
        if batches:
            t = pa.Table.from_batches(batches).combine_chunks()
        else:
            types = {"phy_offset": pa.int64(), "stored_phy_offset": pa.int64(), "total_size": pa.int32(), "topic": pa.string(),
                     "queue_id": pa.int32(), "queue_offset": pa.int64(), "sys_flag": pa.int32(),
                     "keyed": pa.bool_(), "valid_prefix": pa.bool_()}
            t = pa.table({name: pa.array([], type) for name, type in types.items()})
        topic = pc.dictionary_encode(t["topic"]).combine_chunks()
        order = np.argsort(t["phy_offset"].to_numpy(), kind="stable")

        def col(name: str) -> np.ndarray:
            return t[name].to_numpy(zero_copy_only=False)[order]

        return cls(phy=col("phy_offset"), stored_phy=col("stored_phy_offset"), size=col("total_size"),
                   topic=topic.indices.to_numpy(zero_copy_only=False)[order],
                   topics=topic.dictionary.to_pylist(), queue_id=col("queue_id"),
                   queue_offset=col("queue_offset"), tran=col("sys_flag") & rf.TRANSACTION_MASK,
                   keyed=col("keyed"), valid_prefix=col("valid_prefix"))

    def find(self, phy: np.ndarray) -> np.ndarray:
        """Row of the record starting at each phy offset, -1 where none starts."""
        phy = np.asarray(phy, dtype=np.int64)
        pos = np.searchsorted(self.phy, phy)
        hit = pos < len(self.phy)
        hit[hit] = self.phy[pos[hit]] == phy[hit]
        return np.where(hit, pos, -1)

    def describe(self, row: int) -> str:
        return (f"{self.topics[self.topic[row]]}/{self.queue_id[row]} queue offset "
                f"{self.queue_offset[row]}, TOTALSIZE {self.size[row]}, "
                f"{rf.TRAN_NAMES[int(self.tran[row])]}")


def verify_batch(batch: pa.RecordBatch, index_tags: bool) -> pa.RecordBatch:
    """A scanned batch reduced to what the checks need (``keyed`` instead of the key columns;
    ``index_tags``: a 5.4+ broker also indexes TAGS, ``dispatch.index_key_counts``)."""
    keyed = pc.or_(pc.is_valid(batch.column("uniq_key")),
                   pc.fill_null(pc.greater(pc.list_value_length(batch.column("key_list")), 0), False))
    if index_tags:
        keyed = pc.or_(keyed, pc.fill_null(pc.greater(pc.binary_length(batch.column("tags")), 0), False))
    keep = ["phy_offset", "stored_phy_offset", "total_size", "topic", "queue_id", "queue_offset", "sys_flag"]
    return pa.RecordBatch.from_arrays(
        [batch.column(n) for n in keep] + [keyed, batch.column("valid_prefix")],
        names=keep + ["keyed", "valid_prefix"])


@dataclass
class QueueRecords:
    """The records one consume queue should index, by queue offset (``phy`` -1 = none)."""

    queue_offset: np.ndarray
    phy: np.ndarray
    size: np.ndarray


class StoreView:
    """One opened store and everything the printers and verifiers share, computed once."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.config = store.config
        self.version = store.broker_version()
        self.broker_5x = versions.is_5x(self.version)
        self.opts = store.scan_options(broker_5x=self.broker_5x, index_tags=versions.index_tag_keys(self.version))
        self._summaries: list[SegmentSummary] | None = None
        self._records: RecordTable | None = None
        self._recovery: tuple[int, int, int, int] | None = None
        self._dledger: dledger.DLedgerRecovery | None = None
        self._queue_rows: dict[tuple[str, int], list[pa.Table]] = defaultdict(list)
        self._queues: dict[tuple[str, int], QueueRecords] | None = None
        self._prediction: Prediction | None = None
        self._queue_findings: list[dict] | None = None
        self.errors: list[StoreReaderError] = []
        """Files the shared passes could not read (reported with the verification)."""

    # 1. one pass over the commitlog: summaries, the record table and each queue's rows
    def scan(self, records: bool) -> None:
        if self._summaries is not None and (self._records is not None or not records):
            return
        summaries, batches = [], []
        columns = VERIFY_COLUMNS + (["properties"] if self.config.enableMultiDispatch else [])
        self._queue_rows.clear()
        for f in self.store.commitlog_files:
            scan = SegmentScan(f.path, self.opts, columns=columns if records else [], include_lost=records)
            for b in scan:
                batches.append(verify_batch(b, self.opts.index_tags))
                if records:     # every record's put: where the recovery cuts is known after the scan
                    queue_rows(b, self.config, self.broker_5x, np.ones(b.num_rows, bool), self._queue_rows)
            summaries.append(scan.summary)
        self._summaries = summaries
        if records:
            self._records = RecordTable.from_batches(batches)

    @property
    def summaries(self) -> list[SegmentSummary]:
        self.scan(records=False)
        assert self._summaries is not None
        return self._summaries

    @property
    def records(self) -> RecordTable:
        self.scan(records=True)
        assert self._records is not None
        return self._records

    # 2. where the broker's recovery ends the commitlog (R§2, R§4)
    def _recover(self) -> tuple[int, int, int, int]:
        if self._recovery is None:
            ckpt = read_checkpoint(self.store.checkpoint_path)
            rocksdb = self.store.inventory.cq_served_by == "rocksdb"
            try:
                if rocksdb:                     # its stored max phy offset (R§15.1)
                    cq_max = served_consume_queue(self.store).max_phy_offset
                else:
                    queues, _ = cqueue.load_consume_queues(self.store, self.broker_5x)
                    for q in queues.values():
                        q.recover()             # (reads each queue's last files)
                    cq_max = max((q.max_physic_offset for q in queues.values()), default=-1)
            except StoreReaderError as exc:
                # without every queue the broker's CQ max is unknown: -1 checks nothing as dispatched
                self.errors.append(exc)
                cq_max = -1
            if self.store.dledger is not None:
                # DLedger's recovery decides where the log ends (R§16.1): its last entry's end
                rec = self.dledger_recovery
                kept = [s for s in self.summaries if s.segment not in set(rec.data_files_deleted)]
                start = next((i for i, s in enumerate(self.summaries) if s.segment == rec.start_file), 0)
                end, min_phy = rec.last_entry_end, kept[0].file_start if kept else -1
            else:
                start, end, files, _ = broker_cut.predict_commitlog(
                    self.summaries, self.version, self.config, self.store.abort_exists, ckpt, cq_max,
                    self.opts, rocksdb)
                min_phy = files[0].start if files else -1
            self._recovery = (start, min_phy, end, cq_max)
        return self._recovery

    @property
    def dledger_recovery(self) -> "dledger.DLedgerRecovery":
        """A DLedger store: ``DLedgerMmapFileStore#recover`` on it (once)."""
        if self._dledger is None:
            self._dledger = dledger.recover(self.store)
        return self._dledger

    @property
    def start_index(self) -> int:
        """Index of the segment the broker's recovery starts from."""
        return self._recover()[0]

    @property
    def min_phy(self) -> int:
        """``CommitLog#getMinOffset`` after recovery (-1 without files)."""
        return self._recover()[1]

    @property
    def max_phy(self) -> int:
        """The recovered end of the commitlog (R§4.2)."""
        return self._recover()[2]

    @property
    def dispatched_until(self) -> int:
        """The consume queues' max phy offset (where the normal restart's dispatch resumes, R§6),
        capped at the recovered end: ``dispatched``."""
        return min(self._recover()[3], self.max_phy)

    def dispatched(self, phy: np.ndarray, stored_phy: np.ndarray, size: np.ndarray) -> np.ndarray:
        """Which records had been dispatched and a normal restart does not dispatch again: those
        not past ``dispatched_until`` by ``replay.dispatched_again`` ([5.x] the record starting
        exactly there too, E#20; the abnormal path's walk from its start file takes it)."""
        return ~dispatched_again(phy, stored_phy, size, self.dispatched_until,
                                 recovery_walk=self.broker_5x and not self.store.abort_exists)

    def controller_state(self) -> tuple[ConfirmOffset, int, int | None] | None:
        """Controller mode (5.x): the confirm offset as the broker's recovery corrects it, and the
        records kept past it (count, first phy); None outside controller mode."""
        if not (self.broker_5x and self.config.enableControllerMode and self.summaries):
            return None
        r, end = self.records, self.max_phy
        begin = self.summaries[self.start_index].file_start
        c0 = read_checkpoint(self.store.checkpoint_path).confirm_phy_offset
        walked = r.valid_prefix & (r.phy >= begin) & (r.phy < end)
        ends = r.phy[walked] + r.size[walked]
        last = int(ends[ends <= c0].max()) if (ends <= c0).any() else begin
        confirm = correct_confirm_offset(c0, self.summaries[0].file_start, end,
                                         last if self.store.abort_exists else None)
        past = np.flatnonzero(r.valid_prefix & (r.phy >= confirm.corrected) & (r.phy < end))
        return confirm, int(past.size), (int(r.phy[past[0]]) if past.size else None)

    # 3. what each consume queue should hold: what the repaired store's queue holds
    def queue_records(self) -> dict[tuple[str, int], QueueRecords]:
        """Per queue, the records whose entries the repaired store's queue holds (the audit's
        REBUILT view, ``queues.rebuilt_entries``, of the puts below the recovered end), by queue
        offset."""
        if self._queues is None:
            self.scan(records=True)
            out = {}
            for key, parts in self._queue_rows.items():
                puts = rebuilt_puts(cut_rows(pa.concat_tables(parts), self.max_phy))
                (off, _, size, _, _, record_phy), _ = rebuilt_entries(puts, rebuilt_queue(*key, puts, self.config))
                if len(off):
                    out[key] = QueueRecords(off, record_phy, size)
            self._queues = out
        return self._queues

    # 4. the audit's comparison of every queue, in this process
    @property
    def prediction(self) -> Prediction:
        """The broker's recovery on the store (``prediction.predict``, once)."""
        if self._prediction is None:
            self._prediction = predict(self.store, self.version)
        return self._prediction

    def queue_findings(self) -> list[dict]:
        """The audit's ``queue_findings`` rows of every queue: its stage 2 in this process
        (``compare.compare_queues``) over this scan's queue rows cut where the broker's recovery
        ends, the broker's recovered queues and the CQ files. No rows where the broker refuses the
        store, as in the audit (there is no recovered queue to compare to); what the prediction
        cannot read is in ``errors``."""
        if self._queue_findings is None:
            self.scan(records=True)
            self._queue_findings = []
            try:
                pred = self.prediction
                if pred.load_result:
                    plan = audit_plan(1, self.store, pred, self.summaries, self.summaries, None, None)
                    scanned = ((plan.queue_key(*key), ("queue", key, cut_rows(pa.concat_tables(parts), pred.max_phy_offset)))
                               for key, parts in self._queue_rows.items())
                    self._queue_findings = compare_queues(plan, [*scanned, *driver_items(plan, pred)])
            except StoreReaderError as exc:
                self.errors.append(exc)
        return self._queue_findings
