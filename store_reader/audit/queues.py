"""Consume queue checks, both engines' (one module, one vocabulary: ``kinds``).

``compare_queue``: the Spark audit's comparison of four views of every entry of one queue (the CQ
files as they are, the broker's recovered queue, the rebuilt queue, the records), one
``schemas.findings.QUEUE_ROW`` row per entry, ``src`` bits saying which views it belongs to.

``verify_consume_queues``: ``jobs.dump --verify``'s checks of each CQ file against the commitlog as
the broker will recover it (R§2, R§5.2, R§7), located by byte position in the file.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from store_reader.formats import recordformat as rf
from store_reader.audit.report import (Findings, count_of, join_path, range_text, report_runs, runs,
                                       span_text)
from store_reader.audit.view import QueueRecords, StoreView
from store_reader.formats.brokerconf import BrokerConfig
from store_reader.formats.consumequeue import (ENTRY_INVALID, ENTRY_VALID, PRE_BLANK_SIZE, QueueRef, classify_entries,
                                               file_name, list_queues, logic_offset_of, read_queue_file, slot_of)
from store_reader.exceptions import FileSizeError, StoreReaderError
from store_reader.broker.dispatch import dispatchable
from store_reader.formats.mappedfile import MappedFile, list_mapped_files
from store_reader.ranges import consecutive_runs
from store_reader.broker.cqueue import cq_recovery_start
from store_reader.repair.queues import RepairedQueue, place_entries
from store_reader.store import Store
from store_reader.io.storefs import location

# the views a queue row belongs to (bits: a record below the cut is both a record and its rebuilt entry)
DISK, BROKER, REBUILT, REC = 1, 2, 4, 8
# flag of a record row: 1 its CRC fails, 2 it lies behind a bad record (not in the valid prefix)
CRC_BAD, BEHIND_BAD = 1, 2


# -- the audit: one queue's views compared ------------------------------------------------------------

def _runs(kind: str, topic: str, qid: int, offsets: np.ndarray, phy: np.ndarray | None = None,
          size: np.ndarray | None = None, detail: str | None = None) -> list[dict]:
    """Range-encode sorted ``offsets`` (with the phy/size of their entries) into rows."""
    rows = []
    for lo, hi in consecutive_runs(offsets):
        row = {"kind": kind, "topic": topic, "queue_id": qid, "from_offset": int(offsets[lo]),
               "to_offset": int(offsets[hi - 1]) + 1, "count": int(hi - lo), "phy_from": None,
               "phy_to": None, "detail": detail}
        if phy is not None:
            row["phy_from"] = int(phy[lo:hi].min())
            row["phy_to"] = int((phy[lo:hi] + size[lo:hi]).max())
        rows.append(row)
    return rows


def _aligner(*offsets: np.ndarray):
    """The union of sorted, distinct queue offsets of several views, and a function giving a view's
    columns on it (with whether each offset has an entry in the view). Dense offsets (the usual
    queue) are looked up by position, sparse ones by binary search."""
    allo = np.concatenate(offsets)
    if not len(allo):
        keys = allo.astype(np.int64)
    else:
        lo, hi = int(allo.min()), int(allo.max())
        if hi - lo < 4 * len(allo) + 1024:
            present = np.zeros(hi - lo + 1, bool)
            present[allo - lo] = True
            keys = np.flatnonzero(present) + lo
            rank = np.cumsum(present) - 1          # offset -> position in keys

            def align(v):
                if np.array_equal(v[0], keys):     # the view holds every offset: nothing to gather
                    return np.ones(len(keys), bool), list(v[1:4])
                has = np.zeros(len(keys), bool)
                pos = np.zeros(len(keys), np.int64)
                at = rank[v[0] - lo]
                has[at] = True
                pos[at] = np.arange(len(v[0]))
                return has, [c[pos] if len(c) else np.zeros(len(keys), np.int64) for c in v[1:4]]
            return keys, align
        keys = np.unique(allo)

    def align(v):
        pos = np.searchsorted(v[0], keys)
        has = (pos < len(v[0])) & (v[0][np.minimum(pos, max(len(v[0]) - 1, 0))] == keys) if len(v[0]) \
            else np.zeros(len(keys), bool)
        pos = np.minimum(pos, max(len(v[0]) - 1, 0))
        return has, [c[pos] if len(c) else np.zeros(len(keys), np.int64) for c in v[1:4]]
    return keys, align


def rebuilt_puts(t: pa.Table, end: int | None = None) -> tuple[np.ndarray, ...]:
    """A queue's puts from its ``QUEUE_ROWS`` (the ``REBUILT`` rows) in commitlog order, as
    columns (queue offset, phy offset, size, tags code, flag, record phy): what the repair places
    (``queues.place_entries``). ``end``: only those of records below it (rows made with every
    record's put, before the cut was known)."""
    i = np.flatnonzero(t["src"].to_numpy() & REBUILT)
    rec_phy = t["record_phy"].to_numpy()[i]
    if end is not None:
        i, rec_phy = i[rec_phy < end], rec_phy[rec_phy < end]
    if len(i) > 1 and not (rec_phy[1:] >= rec_phy[:-1]).all():
        i = i[np.argsort(rec_phy, kind="stable")]
    return (t["queue_offset"].to_numpy()[i], t["phy_offset"].to_numpy()[i],
            t["size"].to_numpy()[i].astype(np.int64), t["tags_code"].to_numpy()[i], t["flag"].to_numpy()[i],
            t["record_phy"].to_numpy()[i])


def rebuilt_queue(topic: str, qid: int, puts: tuple[np.ndarray, ...], config: BrokerConfig
                  ) -> RepairedQueue | None:
    """The repaired store's queue placed from ``rebuilt_puts`` (``queues.place_entries``: what the
    repair writes), None without puts."""
    off, phy, size, tags = puts[:4]
    if not len(off):
        return None
    return place_entries(topic, qid, phy, size, tags, off, config.cq_file_size, config.mappedFileSizeCommitLog)


def rebuilt_entries(puts: tuple[np.ndarray, ...], q: RepairedQueue | None
                    ) -> tuple[tuple[np.ndarray, ...], np.ndarray, list[tuple[int, int, int]]]:
    """The rebuilt view of a queue: the slots of ``q`` (``rebuilt_queue`` over ``puts``) holding
    an entry, as columns (queue offset, phy offset, size, tags code, flag, record phy) ascending by
    queue offset; the queue offsets several of its kept puts claim (``duplicate_queue_offset``);
    and its runs of fillers (``RepairedQueue.fillers``)."""
    if q is None:
        none = np.zeros(0, np.int64)
        return (none,) * 6, none, []
    off = puts[0][q.held]
    slot = q.slots[off - q.first]
    return ((off, slot["phy_offset"].astype(np.int64), slot["size"].astype(np.int64),
             slot["tags_code"].astype(np.int64), puts[4][q.held], puts[5][q.held]), q.duplicates, q.fillers)


def compare_queue(topic: str, qid: int, t: pa.Table, end: int, b_min: int | None, on_disk: bool,
                  scope: tuple[int, int] | None,
                  rebuilt: tuple[tuple[np.ndarray, ...], np.ndarray, list[tuple[int, int, int]]]) -> list[dict]:
    """Every ``QUEUE_KINDS`` finding of one queue from its entries: ``QUEUE_ROWS`` whose ``src``
    bits say which views (disk, broker, rebuilt, record) a row belongs to (``flag`` of a record
    row: 1 CRC mismatch, 2 behind a bad record); ``rebuilt``: its ``rebuilt_entries`` (the
    REBUILT rows placed: the repaired store's queue)."""
    src = t["src"].to_numpy()
    off, phy = t["queue_offset"].to_numpy(), t["phy_offset"].to_numpy()
    size, tags = t["size"].to_numpy().astype(np.int64), t["tags_code"].to_numpy()
    flag = t["flag"].to_numpy()

    def view(s: int):
        """The view's rows by queue offset, then phy offset (rows equal in both in table order)."""
        i = np.flatnonzero(src & s)
        o = off[i]
        if len(o) > 1 and not (o[1:] > o[:-1]).all():      # out of order, or repeated offsets
            i = i[np.lexsort((phy[i], o))]
        return off[i], phy[i], size[i], tags[i], flag[i]

    d, b, rec = view(DISK), view(BROKER), view(REC)
    r, dup, fillers = rebuilt
    out: list[dict] = []
    keys, align = _aligner(d[0], b[0], r[0])

    (hd, (dp, ds, dt)), (hb, (bp, bs, bt)), (hr, (rp, rs, rt)) = align(d), align(b), align(r)
    # the flag of the record starting at each broker entry's phy offset, -1: none starts there
    order = np.argsort(rec[1], kind="stable")
    rphy, rflag = rec[1][order], rec[4][order]
    at = np.minimum(np.searchsorted(rphy, bp), max(len(rphy) - 1, 0))
    starts_rec = (rphy[at] == bp) if len(rphy) else np.zeros(len(bp), bool)
    b_rec = np.where(starts_rec, rflag[at] if len(rphy) else -1, -1)
    # the broker's entry points at a record of this queue stored with another queue offset
    renumbered = hb & (bs != PRE_BLANK_SIZE) & starts_rec & ((rec[0][order][at] if len(rphy) else -1) != keys)
    def scoped(p):
        return np.ones(len(p), bool) if scope is None else (p >= scope[0]) & (p < scope[1])

    lo = b_min if b_min is not None else 0
    blank_b = bs == PRE_BLANK_SIZE
    differs = lambda p1, s1, t1, p2, s2, t2: (p1 != p2) | (s1 != s2) | (t1 != t2)  # noqa: E731
    schedule = topic == rf.SCHEDULE_TOPIC
    early_b = schedule & hb & hr & (bp == rp) & (bs == rs) & (bt != rt)
    early_d = schedule & hd & hr & (dp == rp) & (ds == rs) & (dt != rt)
    kinds = [
        ("removed_beyond_truncation", hd & ~hb & (dp >= end), dp, ds),
        ("removed_below_min", hd & ~hb & (dp < end) & (keys < lo), dp, ds),
        ("removed_by_cq_recovery", hd & ~hb & (dp < end) & (keys >= lo), dp, ds),
        ("redispatched", ~hd & hb, bp, bs),
        ("replaced", hd & hb & differs(dp, ds, dt, bp, bs, bt), bp, bs),
        ("not_restored", hr & ~hb & scoped(rp), rp, rs),
        ("delayed_early", early_b & scoped(rp), bp, bs),
        ("delayed_early_on_disk", early_d & scoped(rp), dp, ds),
        ("wrong_entry", hb & hr & differs(bp, bs, bt, rp, rs, rt) & ~early_b & ~renumbered & scoped(rp), bp, bs),
        ("renumbered", renumbered & scoped(bp), bp, bs),
        ("unbacked", hb & ~blank_b & ~hr & (b_rec < 0) & (bp < end) & scoped(bp), bp, bs),
        ("corrupt_served", hb & ~blank_b & (b_rec > 0), bp, bs),
        ("blank", hd & (ds == PRE_BLANK_SIZE), dp, ds),
    ]
    for kind, mask, p, s in kinds:
        out += _runs(kind, topic, qid, keys[mask], p[mask], s[mask])
    if len(dup):
        out += _runs("duplicate_queue_offset", topic, qid, dup, detail="several records at one queue offset")
    # holes: gaps between valid entries on disk
    valid = (d[1] >= 0) & (d[2] > 0)
    vo = d[0][valid]
    if len(vo) > 1:
        gaps = np.flatnonzero(np.diff(vo) > 1)
        for g in gaps:
            out += _runs("hole", topic, qid, np.arange(vo[g] + 1, vo[g + 1]))
    for kind, v, keep in (("duplicate_phy_on_disk", d, (d[2] > 0) & (d[2] != PRE_BLANK_SIZE)),
                          ("duplicate_phy", b, b[2] != PRE_BLANK_SIZE)):
        o, p, s = v[0][keep], v[1][keep], v[2][keep]
        if len(p) < 2 or (np.diff(p) > 0).all():        # the usual queue: phy offsets ascend
            continue
        vals, cnt = np.unique(p, return_counts=True)
        m = np.isin(p, vals[cnt > 1])
        out += _runs(kind, topic, qid, o[m], p[m], s[m], detail="phy offset at several queue offsets")
    # offsets inside the rebuilt queue that no record holds: the repaired store's fillers
    for lo, hi, _ in fillers:
        g = int(np.searchsorted(r[0], lo)) - 1          # the entries either side of the run
        prev_end, nxt = int(r[1][g] + r[2][g]), int(r[1][g + 1])
        out.append({"kind": "filler", "topic": topic, "queue_id": qid, "from_offset": lo, "to_offset": hi,
                    "count": hi - lo, "phy_from": prev_end if prev_end <= nxt else None,
                    "phy_to": nxt if prev_end <= nxt else None,
                    "detail": "records gone between its neighbours' commitlog positions"})
    # ... and past the last record left, up to the max of the queue the broker keeps
    # (with a scope, judged only where the records were read: below it there are none to miss)
    tail = (b[0] > r[0][-1] if len(r[0]) else np.ones(len(b[0]), bool)) & scoped(b[1])
    out += _runs("filler", topic, qid, b[0][tail], b[1][tail], b[2][tail],
                 detail="the broker keeps these offsets past the queue's last record left")
    if not on_disk and len(r[0]):           # one row for the queue: its whole range
        out.append({"kind": "queue_missing", "topic": topic, "queue_id": qid, "from_offset": int(r[0][0]),
                    "to_offset": int(r[0][-1]) + 1, "count": len(r[0]), "phy_from": int(r[1].min()),
                    "phy_to": int((r[1] + r[2]).max()), "detail": None})
    return out


# -- dump --verify: each CQ file against the commitlog ------------------------------------------


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
    if records is not None and records.queue_offset.size:
        at = np.searchsorted(records.queue_offset, slots)
        hit = at < records.queue_offset.size
        hit[hit] = records.queue_offset[at[hit]] == slots[hit]
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

    report_runs(found, "cq.slot_mismatch", qf.file.path, idx[~ok], describe)


def _missing_entries(view: StoreView, found: Findings, ref: QueueRef, loaded: list[_QueueFile],
                     records: QueueRecords) -> None:
    """Dispatched records of this queue whose slot holds no valid entry."""
    want = (records.valid_prefix & (records.phy >= view.min_phy) & (records.phy < view.max_phy)
            & (records.phy + records.size <= view.dispatched_until))
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
            found.add("cq.missing_entries", path, logic % size,
                      f"{count_of(end - q + 1, 'record')} of {ref.topic}/{ref.queue_id} "
                      f"({span_text('queue offset', q, end)}, phy {range_text(a, b)}) were dispatched (they "
                      f"end at or below the consume queues' max phy offset {view.dispatched_until}) "
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

