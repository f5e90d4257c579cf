"""``jobs.dump --verify``'s consume queue findings: the audit's own comparison of every queue
(``queues.compare_queue``, run in this process by ``StoreView.queue_findings``) located by file and
byte position under dump's names (``kinds.DUMP_ALIASES``), and the files' own checks (their sizes,
R§2). The messages say what the entries on disk and the REBUILT view (``StoreView.queue_records``)
hold there."""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import numpy as np

from store_reader.audit.report import (Findings, count_of, join_path, range_text, report_runs, runs,
                                       span_text)
from store_reader.audit.kinds import DUMP_ALIASES
from store_reader.audit.view import QueueRecords, StoreView
from store_reader.formats.brokerconf import BrokerConfig
from store_reader.formats.consumequeue import (QueueRef, file_name, list_queues, logic_offset_of, read_queue_file,
                                               slot_of)
from store_reader.exceptions import FileSizeError, StoreReaderError
from store_reader.broker.dispatch import dispatchable
from store_reader.formats.mappedfile import MappedFile, list_mapped_files
from store_reader.broker.cqueue import cq_recovery_start
from store_reader.store import Store
from store_reader.io.storefs import location

# the audit's queue kinds dump locates in the CQ files, and its name for each (``queue_missing``,
# a row per queue, is dump's ``cq.all_missing`` only when no queue has a file: ``verify_consume_queues``)
LOCATED = {kind: name for name, kind in DUMP_ALIASES.items() if name.startswith("cq.") and kind != "queue_missing"}


@dataclass
class _QueueFile:
    """One decoded consume queue file of a queue."""

    ref: QueueRef
    file: MappedFile
    phy: np.ndarray
    size: np.ndarray

    @property
    def first_slot(self) -> int:
        return slot_of(self.file.start)

    def entries(self, offsets: np.ndarray) -> np.ndarray:
        """The indices in this file of the sorted queue ``offsets`` its slots hold."""
        lo, hi = np.searchsorted(offsets, [self.first_slot, self.first_slot + len(self.phy)])
        return offsets[lo:hi] - self.first_slot

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


def verify_queue(view: StoreView, found: Findings, ref: QueueRef, located: dict[str, np.ndarray]) -> int:
    """One queue's files against its configured size, and the audit's findings of the queue
    (``located``: each dump name's queue offsets, ``located_offsets``) located in them; returns
    how many files the queue has."""
    files = queue_files(ref, view.config, view.broker_5x, found)
    found.files_checked += len(files)
    loaded: list[_QueueFile] = []
    for f in files:
        try:
            e = read_queue_file(f.path)
        except StoreReaderError as exc:
            found.unreadable.append(exc)
            continue
        loaded.append(_QueueFile(ref, f, e.phy_offset, e.size))
    none = np.zeros(0, np.int64)
    for fi, qf in enumerate(loaded):
        _blank_in_middle(found, qf, qf.entries(located.get("cq.blank_in_middle", none)),
                         fi >= cq_recovery_start(len(files)))
    for qf in loaded:
        _dangling_entries(view, found, qf, *(qf.entries(located.get(n, none)) for n in ("cq.beyond_max", "cq.below_min")))
        _slot_mismatches(view, found, qf, *(qf.entries(located.get(n, none))
                                            for n in ("cq.slot_mismatch", "cq.renumbered", "cq.unbacked")))
    records = view.queue_records().get((ref.topic, ref.queue_id))
    if records is not None and len(loaded) == len(files):   # an unreadable file is not "missing"
        _missing_entries(view, found, ref, records, located.get("cq.missing_entries", none))
    return len(files)


def _blank_in_middle(found: Findings, qf: _QueueFile, idx: np.ndarray, recovered: bool) -> None:
    """Invalid entries with valid ones after them (``hole``); ``recovered``: the file is one of
    the last three, which the broker's recovery reads."""
    effect = ("the broker's recovery ends the queue at the first one and drops the valid entries "
              "after it (R§2)" if recovered else
              "before the last three files, so recovery goes on; pulls here find nothing")
    report_runs(found, "cq.blank_in_middle", qf.file.path, idx, lambda a, b:
                qf.run(a, b, "invalid entry", f"with valid entries after them: {effect}"))


def _dangling_entries(view: StoreView, found: Findings, qf: _QueueFile, beyond: np.ndarray,
                      below: np.ndarray) -> None:
    """Entries pointing outside the commitlog as the broker will recover it
    (``removed_beyond_truncation``, ``removed_below_min``)."""
    no_files = "" if view.store.commitlog_files else " (the commitlog has no files: R§4.6)"
    for kind, idx, bound, effect in (
            ("cq.beyond_max", beyond,
             f"at or beyond the commitlog max phy offset {view.max_phy}{no_files}",
             "removed by the broker's recovery (R§5.2)"),
            ("cq.below_min", below,
             f"below the commitlog min phy offset {view.min_phy}",
             "the records are gone and the queue's min offset moves past (R§7.2)")):
        report_runs(found, kind, qf.file.path, idx,
                    lambda a, b, bound=bound, effect=effect: qf.run(
                        a, b, "entry", f"pointing {bound}: {effect}", int(qf.phy[a]),
                        f", phy {range_text(int(qf.phy[a]), int(qf.phy[b]))}"))


def _slot_mismatches(view: StoreView, found: Findings, qf: _QueueFile, mismatched: np.ndarray,
                     renumbered: np.ndarray, unbacked: np.ndarray) -> None:
    """Entries whose slot does not hold the record the repaired queue holds there
    (``wrong_entry``), or holds a record of the queue stored at another queue offset
    (``renumbered``), and those pointing where no record starts at offsets no record of the queue
    holds (``unbacked``)."""
    table = view.records

    def record_at(a: int) -> tuple[int, int]:
        phy = int(qf.phy[a])
        return phy, int(table.find(np.array([phy]))[0])

    def mismatch(a: int, b: int) -> tuple[int, str, int | None, dict[str, Any]]:
        phy, row = record_at(a)
        what = (f"no record starts at phy {phy}" if row < 0
                else f"the record at phy {phy} is {table.describe(row)}")
        return qf.run(a, b, "entry", f"not matching the commitlog: the first has size "
                      f"{int(qf.size[a])} but {what}", phy)

    def moved(a: int, b: int) -> tuple[int, str, int | None, dict[str, Any]]:
        phy, row = record_at(a)
        return qf.run(a, b, "entry", f"serving records of the queue stored at other queue offsets: the "
                      f"first points at phy {phy}, {table.describe(row)}", phy)

    report_runs(found, "cq.slot_mismatch", qf.file.path, mismatched, mismatch)
    report_runs(found, "cq.renumbered", qf.file.path, renumbered, moved)
    report_runs(found, "cq.unbacked", qf.file.path, unbacked, lambda a, b: qf.run(
        a, b, "entry", f"pointing where no record starts (phy {int(qf.phy[a])}) at queue offsets no "
        "record of the queue holds: the broker serves them and a pull finds no message", int(qf.phy[a])))


def _missing_entries(view: StoreView, found: Findings, ref: QueueRef, records: QueueRecords,
                     offsets: np.ndarray) -> None:
    """Records the repaired queue holds at ``offsets`` that the broker's queue leaves without an
    entry (``not_restored``): dispatched records whose slot holds no valid entry."""
    at = np.searchsorted(records.queue_offset, offsets)
    hit = at < records.queue_offset.size
    hit[hit] = records.queue_offset[at[hit]] == offsets[hit]
    size = view.config.cq_file_size
    by_offset = {int(o): int(r) for o, r in zip(offsets[hit], at[hit])}
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


def located_offsets(rows: list[dict]) -> dict[tuple[str, int], dict[str, np.ndarray]]:
    """The audit's ``queue_findings`` rows of the kinds dump locates in CQ files, as each queue's
    sorted queue offsets per dump name (``kinds.DUMP_ALIASES``)."""
    got: dict[tuple[str, int], dict[str, list[np.ndarray]]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        name = LOCATED.get(r["kind"])
        if name is not None:
            got[(r["topic"], r["queue_id"])][name].append(np.arange(r["from_offset"], r["to_offset"], dtype=np.int64))
    return {key: {name: np.unique(np.concatenate(parts)) for name, parts in names.items()}
            for key, names in got.items()}


def verify_consume_queues(view: StoreView, found: Findings, only: tuple[str, int] | None = None
                          ) -> None:
    """Every queue on disk, plus queues the commitlog says should exist (``only``: one queue),
    with the audit's findings of each (``view.queue_findings``) located in its files. A RocksDB
    consume queue has no files to check one by one: the audit compares its units (R§15.1)."""
    if view.store.inventory.cq_served_by == "rocksdb":
        return
    cq_dir = view.store.consume_queue_dir
    refs = {(r.topic, r.queue_id): r for r in list_queues(view.store.root)}
    located = located_offsets(view.queue_findings())
    for key in [*view.queue_records(), *located]:
        if key not in refs:                              # a deleted queue directory
            refs[key] = QueueRef(key[0], key[1], join_path(cq_dir, key[0], str(key[1])))
    files = sum(verify_queue(view, found, refs[key], located.get(key, {})) for key in sorted(refs)
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
