"""``jobs.dump --verify``'s checks of each CQ file against the commitlog as the broker will recover it
(R§2, R§5.2, R§7), located by byte position in the file; what each queue should hold is the
audit's REBUILT view (``StoreView.queue_records``, ``queues.rebuilt_entries``)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from store_reader.audit.report import (Findings, count_of, join_path, range_text, report_runs, runs,
                                       span_text)
from store_reader.audit.view import QueueRecords, StoreView
from store_reader.formats.brokerconf import BrokerConfig
from store_reader.formats.consumequeue import (ENTRY_INVALID, ENTRY_VALID, QueueRef, classify_entries,
                                               file_name, list_queues, logic_offset_of, read_queue_file, slot_of)
from store_reader.exceptions import FileSizeError, StoreReaderError
from store_reader.broker.dispatch import dispatchable
from store_reader.formats.mappedfile import MappedFile, list_mapped_files
from store_reader.broker.cqueue import cq_recovery_start
from store_reader.store import Store
from store_reader.io.storefs import location

@dataclass
class _QueueFile:
    """One decoded consume queue file of a queue."""

    ref: QueueRef
    file: MappedFile
    phy: np.ndarray
    size: np.ndarray
    kind: np.ndarray

    @property
    def first_slot(self) -> int:
        return slot_of(self.file.start)

    def run(self, a: int, b: int, what: str, message: str, phy: int | None = None,
            aside: str = "") -> tuple[int, str, int | None, dict[str, Any]]:
        """A run of entries ``a..b`` (indices in this file) for ``report_runs``."""
        q0, q1 = self.first_slot + a, self.first_slot + b
        return (logic_offset_of(a),
                f"{count_of(b - a + 1, what, what[:-1] + 'ies' if what.endswith('y') else None)} "
                f"({span_text('queue offset', q0, q1)}{aside}) {message}", phy,
                {"topic": self.ref.topic, "queue_id": self.ref.queue_id, "queue_offsets": [q0, q1]})


def queue_files(ref: QueueRef, config: BrokerConfig, broker_5x: bool, found: Findings) -> list[MappedFile]:
    """A queue's files as the broker loads them; a file of the wrong size or a stray name is
    ``cq.file_size`` (the broker refuses to load the store)."""
    problems: list[StoreReaderError] = []
    files = list_mapped_files(ref.path, config.cq_file_size, "consume queue", "mappedFileSizeConsumeQueue",
                              problems, [], broker_5x=broker_5x)
    for problem in problems:
        path = problem.path or ref.path
        found.add("cq.file_size", path, location(path).size() if isinstance(problem, FileSizeError)
                  else None, problem.reason, topic=ref.topic, queue_id=ref.queue_id)
    return files


def verify_queue_files(store: Store, broker_5x: bool, found: Findings) -> None:
    """``cq.file_size`` of every queue on disk (names and sizes only: nothing is read)."""
    for ref in list_queues(store.root):
        queue_files(ref, store.config, broker_5x, found)


def verify_queue(view: StoreView, found: Findings, ref: QueueRef) -> int:
    """One queue's files against its configured size and the commitlog (module docstring);
    returns how many files the queue has."""
    files = queue_files(ref, view.config, view.broker_5x, found)
    found.files_checked += len(files)
    loaded: list[_QueueFile] = []
    for f in files:
        try:
            e = read_queue_file(f.path)
        except StoreReaderError as exc:
            found.unreadable.append(exc)
            continue
        loaded.append(_QueueFile(ref, f, e.phy_offset, e.size,
                                 classify_entries(e.phy_offset, e.size, e.tags_code)))
    _blank_in_middle(found, loaded, len(files))
    records = view.queue_records().get((ref.topic, ref.queue_id))
    for qf in loaded:
        _dangling_entries(view, found, qf)
        _slot_mismatches(view, found, qf, records)
    if records is not None and len(loaded) == len(files):   # an unreadable file is not "missing"
        _missing_entries(view, found, ref, loaded, records)
    return len(files)


def _blank_in_middle(found: Findings, loaded: list[_QueueFile], n_files: int) -> None:
    """Invalid entries with valid ones after them, anywhere in the queue."""
    last_valid = None
    for fi, qf in enumerate(loaded):
        v = np.flatnonzero(qf.kind != ENTRY_INVALID)
        if v.size:
            last_valid = (fi, int(v[-1]))
    if last_valid is None:
        return
    for fi, qf in enumerate(loaded[:last_valid[0] + 1]):
        bad = np.flatnonzero(qf.kind == ENTRY_INVALID)
        if fi == last_valid[0]:
            bad = bad[bad < last_valid[1]]
        effect = ("the broker's recovery ends the queue at the first one and drops the valid entries "
                  "after it (R§2)" if fi >= cq_recovery_start(n_files) else
                  "before the last three files, so recovery goes on; pulls here find nothing")
        report_runs(found, "cq.blank_in_middle", qf.file.path, bad, lambda a, b, qf=qf, effect=effect:
                    qf.run(a, b, "invalid entry", f"with valid entries after them: {effect}"))


def _dangling_entries(view: StoreView, found: Findings, qf: _QueueFile) -> None:
    """Entries pointing outside the commitlog as the broker will recover it."""
    valid = qf.kind == ENTRY_VALID
    no_files = "" if view.store.commitlog_files else " (the commitlog has no files: R§4.6)"
    for kind, mask, bound, effect in (
            ("cq.beyond_max", valid & (qf.phy >= view.max_phy),
             f"at or beyond the commitlog max phy offset {view.max_phy}{no_files}",
             "removed by the broker's recovery (R§5.2)"),
            ("cq.below_min", valid & (qf.phy < view.min_phy),
             f"below the commitlog min phy offset {view.min_phy}",
             "the records are gone and the queue's min offset moves past (R§7.2)")):
        report_runs(found, kind, qf.file.path, np.flatnonzero(mask),
                    lambda a, b, bound=bound, effect=effect: qf.run(
                        a, b, "entry", f"pointing {bound}: {effect}", int(qf.phy[a]),
                        f", phy {range_text(int(qf.phy[a]), int(qf.phy[b]))}"))


def _slot_mismatches(view: StoreView, found: Findings, qf: _QueueFile,
                     records: QueueRecords | None) -> None:
    """Entries inside [min, max) whose slot does not hold the record their phy offset names."""
    idx = np.flatnonzero((qf.kind == ENTRY_VALID) & (qf.phy >= view.min_phy) & (qf.phy < view.max_phy))
    if not idx.size:
        return
    slots = qf.first_slot + idx
    ok = np.zeros(idx.size, dtype=bool)
    held = np.zeros(idx.size, dtype=bool)     # a record of the queue holds the slot
    if records is not None and records.queue_offset.size:
        at = np.searchsorted(records.queue_offset, slots)
        hit = at < records.queue_offset.size
        hit[hit] = records.queue_offset[at[hit]] == slots[hit]
        held = hit
        ok[hit] = ((records.phy[at[hit]] == qf.phy[idx[hit]])
                   & (records.size[at[hit]] == qf.size[idx[hit]]))
    table = view.records

    def describe(a: int, b: int) -> tuple[int, str, int | None, dict[str, Any]]:
        phy = int(qf.phy[a])
        row = int(table.find(np.array([phy]))[0])
        what = (f"no record starts at phy {phy}" if row < 0
                else f"the record at phy {phy} is {table.describe(row)}")
        return qf.run(a, b, "entry", f"not matching the commitlog: the first has size "
                      f"{int(qf.size[a])} but {what}", phy)

    # an entry whose phy starts no record, at an offset no record of the queue holds: unbacked
    unbacked = ~ok & ~held
    unbacked[unbacked] = table.find(qf.phy[idx[unbacked]]) < 0
    report_runs(found, "cq.slot_mismatch", qf.file.path, idx[~ok & ~unbacked], describe)
    report_runs(found, "cq.unbacked", qf.file.path, idx[unbacked], lambda a, b: qf.run(
        a, b, "entry", f"pointing where no record starts (phy {int(qf.phy[a])}) at queue offsets no "
        "record of the queue holds: the broker serves them and a pull finds no message", int(qf.phy[a])))


def _missing_entries(view: StoreView, found: Findings, ref: QueueRef, loaded: list[_QueueFile],
                     records: QueueRecords) -> None:
    """Dispatched records of this queue whose slot holds no valid entry."""
    want = (records.valid_prefix & (records.phy >= view.min_phy) & (records.phy < view.max_phy)
            & view.dispatched(records.phy, records.stored_phy, records.size))
    present = np.concatenate([qf.first_slot + np.flatnonzero(qf.kind == ENTRY_VALID) for qf in loaded]
                             or [np.zeros(0, np.int64)])
    rows = np.flatnonzero(want)
    rows = rows[~np.isin(records.queue_offset[rows], present)]
    size = view.config.cq_file_size
    by_offset = {int(records.queue_offset[r]): int(r) for r in rows}
    for first, last in runs(np.array(sorted(by_offset), dtype=np.int64)):
        q = first
        while q <= last:             # split at file boundaries: each anomaly names its slots' file
            logic = logic_offset_of(q)
            file_start = logic - logic % size
            end = min(last, slot_of(file_start + size) - 1)
            path = join_path(ref.path, file_name(file_start))
            gone = "" if location(path).exists() else " (the file is missing)"
            a, b = int(records.phy[by_offset[q]]), int(records.phy[by_offset[end]])
            tail = by_offset[end]
            at_max = ("" if records.phy[tail] + records.size[tail] <= view.dispatched_until else
                      ", or start there: 5.x's recovery dispatches only records past it, E#20")
            found.add("cq.missing_entries", path, logic % size,
                      f"{count_of(end - q + 1, 'record')} of {ref.topic}/{ref.queue_id} "
                      f"({span_text('queue offset', q, end)}, phy {range_text(a, b)}) were dispatched (they "
                      f"end at or below the consume queues' max phy offset {view.dispatched_until}{at_max}) "
                      f"but have no entry{gone}: the normal path does not rebuild them (R§6)",
                      a, end - q + 1,
                      topic=ref.topic, queue_id=ref.queue_id, queue_offsets=[q, end])
            q = end + 1


def verify_consume_queues(view: StoreView, found: Findings, only: tuple[str, int] | None = None
                          ) -> None:
    """Every queue on disk, plus queues the commitlog says should exist (``only``: one queue). A
    RocksDB consume queue has no files to check one by one: the audit compares its units (R§15.1)."""
    if view.store.inventory.cq_served_by == "rocksdb":
        return
    cq_dir = view.store.consume_queue_dir
    refs = {(r.topic, r.queue_id): r for r in list_queues(view.store.root)}
    expected = view.queue_records()
    for key in expected:
        if key not in refs:                              # a deleted queue directory
            refs[key] = QueueRef(key[0], key[1], join_path(cq_dir, key[0], str(key[1])))
    files = sum(verify_queue(view, found, refs[key]) for key in sorted(refs)
                if only is None or key == only)
    if only is None and not files:
        r = view.records
        n = int(np.count_nonzero(r.valid_prefix & dispatchable(r.tran)
                                 & (r.phy >= view.min_phy) & (r.phy < view.max_phy)))
        if n:
            found.add("cq.all_missing", cq_dir, None,
                      f"no consume queue file at all, but the commitlog holds {n} dispatchable "
                      "records: the broker re-dispatches every queue from the commitlog min offset "
                      "(R§6)")

