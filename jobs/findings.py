"""The consistency audit: what is inconsistent in a store, and what a broker restart would lose,
duplicate or rewind. Every finding is range-encoded: one row per run of consecutive queue offsets
(or phy offsets), never one per entry.

Four views of every consume queue entry meet per (topic, queue id) and are compared there
(``compare_queue``):

``disk``
    the entry in the CQ files as they are (all-zero slots are absent);
``broker``
    the entry after the broker's own recovery (``store_reader.recovery.predict``);
``rebuilt``
    the entry the commitlog's records below the truncation point give (what the repaired store
    holds): every dispatchable record at its QUEUEOFFSET, LMQ copies included, records behind
    bytes that are not a record in a file the broker keeps included (``repair.place_entries``);
    an offset between two of them that no record holds is a filler there;
``rec``
    every record the scan finds, intact ones behind a bad record included, with its damage flag.

The audit is ONE Spark job of two stages. Stage 1: one task per commitlog file scans its records
once and cuts them into compact Arrow tables keyed for the shuffle; one task per index file on disk
does the same with its entries. Stage 2: one task per key (``AuditPlan``) compares a bucket of
queues, or the index puts and entries of one commitlog file's phy range, or passes the rows for the
driver through. Memory per task is bounded by a bucket or a segment, and the driver holds only the
prediction and the findings: nothing per record.

Queue finding kinds (``QUEUE_KINDS``): the first five explain exactly how the broker's recovery turns
the disk view into its own; the others say what the broker's result still gets wrong.
"""
from __future__ import annotations

import heapq
import json
from collections import defaultdict
from dataclasses import dataclass, field, replace
from typing import Iterable, Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from store_reader import recordformat as rf
from schemas.findings import INDEX_FILE_ENTRY, INDEX_FINDING_ROW, INDEX_PUT, QUEUE_FINDING_ROW, QUEUE_ROW
from store_reader import dispatch, recovery
from store_reader.audit.files import store_file_findings
from store_reader.audit.index import entry_findings as _entry_findings
from store_reader.audit.index import header_problems
from store_reader.audit.kinds import INDEX_KINDS, INFO_KINDS, QUEUE_KINDS
from store_reader.audit.queues import (BEHIND_BAD as _BEHIND_BAD, BROKER as _BROKER, CRC_BAD as _CRC_BAD,
                                       DISK as _DISK, REBUILT as _REBUILT, REC as _REC, compare_queue)
from store_reader.brokerconf import BrokerConfig
from store_reader.checkpoint import read_checkpoint
from store_reader.commitlog import SegmentScan, SegmentSummary
from store_reader.scanned import lost_columns_cover, read_records
from store_reader.config import read_consumer_offsets
from store_reader.consumequeue import (CQEntries, decode_entries, list_queue_files, list_queues,
                                       read_queue_head)
from store_reader.indexfile import IndexFile, IndexHeader, list_index_files, read_header
from store_reader.ranges import consecutive_runs
from store_reader.repair import index_puts, part_bucket
from store_reader.salvage import lost_mask
from store_reader.store import Store


# What the scan reads: headers and keys always; bodies and properties only in files reaching past
# the truncation point (lost messages), properties also when LMQ copies are dispatched.
_SCAN_COLUMNS = ["phy_offset", "stored_phy_offset", "total_size", "topic", "queue_id", "queue_offset",
                 "sys_flag", "tags_code", "store_timestamp", "uniq_key", "key_list", "body_crc_ok",
                 "record_crc_ok", "valid_prefix"]
_LOST_COLUMNS = ["born_timestamp", "keys", "tags", "msg_id", "body_crc", "properties", "body"]
# rows (records and the views' entries) per compare task: bounds a task's memory (~50 bytes a row)
ENTRIES_PER_AUDIT_TASK = 4_000_000
# Index file entries per stage-1 task (20 bytes each in the file, 12 shuffled): a task holds its
# part, not a whole index file (~420 MB at the default maxIndexNum; PySpark buffers a map task's
# output before the shuffle)
INDEX_ENTRIES_PER_PART = 2 << 20
DRIVER_SLICE_BYTES = 32 << 20

QUEUE_ROWS, INDEX_ENTRIES, INDEX_PUTS = QUEUE_ROW.arrow(), INDEX_FILE_ENTRY.arrow(), INDEX_PUT.arrow()
_TS = pa.timestamp("us", tz="UTC")


@dataclass(frozen=True)
class FlushRisk:
    """What a power loss could still take from the page cache, judged from the broker's
    ``flushDiskType`` and its shutdown state (the ``abort`` file the broker creates at start and
    deletes at a clean shutdown).

    ``reason``: ``async_flush_unclean`` (ASYNC_FLUSH and not shut down cleanly: what was stored
    after each checkpoint flush time may exist only in the page cache), ``sync_flush`` (every put is
    flushed before it is acknowledged, and the consume queues and index files past their flush times
    are rebuilt from the flushed commitlog by the abnormal recovery) or ``clean_shutdown`` (the broker
    flushed everything before it removed ``abort``). ``windows``: (window, checkpoint timestamp) of
    the windows at risk, empty unless ``async_flush_unclean``."""

    reason: str
    windows: tuple[tuple[str, int], ...]

    TEXT = {
        "async_flush_unclean": "ASYNC_FLUSH and no clean shutdown (abort file): at risk if the OS "
                               "or the machine went down with it",
        "sync_flush": "nothing at risk: SYNC_FLUSH flushes every put before acknowledging it",
        "clean_shutdown": "nothing at risk: the broker shut down cleanly (no abort file) and "
                          "flushed everything",
    }

    @property
    def text(self) -> str:
        return self.TEXT[self.reason]


def flush_risk(store: Store) -> FlushRisk:
    """The flush windows at risk for ``store`` now (``FlushRisk``)."""
    if not store.abort_exists:
        return FlushRisk("clean_shutdown", ())
    if store.config.flushDiskType.strip().upper() == "SYNC_FLUSH":
        return FlushRisk("sync_flush", ())
    ckpt = read_checkpoint(store.checkpoint_path)
    return FlushRisk("async_flush_unclean", (
        ("commitlog", ckpt.physic_msg_timestamp), ("consume_queue", ckpt.logics_msg_timestamp),
        ("index", ckpt.index_msg_timestamp)))


def audit_scan_options(store: Store, broker_5x: bool) -> rf.ScanOptions:
    """Header checks only (as the broker's dispatch reads records), CRCs computed to flag damage."""
    return replace(store.scan_options(broker_5x=broker_5x), check_crc=False, compute_crc=True)


@dataclass(frozen=True)
class IndexSource:
    """One index file whose entries the audit reads: its place in each lens (-1: not in it) and
    where its bytes are (``path`` on disk; None: built by the predicted re-dispatch, read on the
    driver)."""

    name: str | None
    on_disk: int
    recovered: int
    path: str | None
    header: IndexHeader | None = None     # read by the driver for a file on disk

    def parts(self, per_part: int, index_num: int) -> list[tuple[int, int]]:
        """[first, end) entry numbers of the stage-1 tasks reading this file on disk (one at least:
        it checks the hash slots)."""
        end = min(self.header.entries_in_use, index_num - 1) + 1 if self.header else 1
        return [(lo, min(lo + per_part, end)) for lo in range(1, end, per_part)] or [(1, 1)]


@dataclass(frozen=True)
class AuditPlan:
    """What every task of the audit job needs (pickled once with the job).

    Shuffle keys: ``[0, buckets)`` buckets of queues; then one key per commitlog file number from
    ``first_segment - 1`` to ``first_segment + segments`` (phy offsets below and past the files
    clamp to the ends); the last key, ``driver_key``, carries rows to the driver as they are."""

    end: int
    min_phy: int
    broker_5x: bool
    config: BrokerConfig
    opts: rf.ScanOptions
    buckets: int
    file_size: int
    first_segment: int
    segments: int
    scope: tuple[int, int] | None
    broker_min: dict[tuple[str, int], int]
    queue_buckets: dict[tuple[str, int], int]
    disk_queues: dict[tuple[str, int], list[tuple[str, int]]]
    broker_on_disk: dict[tuple[str, int], tuple[recovery.EntryRun, ...]]
    """The broker's entries its recovery left in the CQ files as they are: read by the tasks."""
    cut_segment: str | None
    windows: tuple[tuple[str, int], ...]
    index_sources: tuple[IndexSource, ...]
    index_part_entries: int

    @property
    def driver_key(self) -> int:
        return self.buckets + self.segments + 2

    @property
    def partitions(self) -> int:
        return self.driver_key + 1

    def queue_key(self, topic: str, queue_id: int) -> int:
        key = self.queue_buckets.get((topic, queue_id))
        return part_bucket(topic, queue_id, 0, self.buckets) if key is None else key

    def phy_keys(self, phy: np.ndarray) -> np.ndarray:
        seg = phy // self.file_size - self.first_segment + 1
        return self.buckets + np.clip(seg, 0, self.segments + 1)


def _keyed(keys: np.ndarray, table: pa.Table) -> Iterator[tuple[int, pa.Table]]:
    """``table``'s rows grouped by ``keys`` (one int per row), each group in row order."""
    if not table.num_rows:
        return
    order = np.argsort(keys, kind="stable")
    k = keys[order]
    cut = np.flatnonzero(np.diff(k)) + 1
    for lo, hi in zip(np.r_[0, cut], np.r_[cut, len(k)]):
        yield int(k[lo]), table.take(pa.array(order[lo:hi]))


# -- stage 1: one commitlog file ----------------------------------------------------------------------

def _column(rb: pa.RecordBatch, name: str) -> np.ndarray:
    return rb.column(name).to_numpy(zero_copy_only=False)


def _queue_rows(rb: pa.RecordBatch, plan: AuditPlan, below: np.ndarray,
                out: dict[tuple[str, int], list[pa.Table]]) -> None:
    """The batch's records as ``QUEUE_ROWS`` per queue: every record (``_REC``, with its damage
    flag) and the rebuilt entry of each dispatchable one below the cut (at its stored phy offset;
    the same row when that is where it lies), LMQ copies in their own queues."""
    phy, stored = _column(rb, "phy_offset"), _column(rb, "stored_phy_offset")
    size, tags = _column(rb, "total_size").astype(np.int32), _column(rb, "tags_code")
    qoff, qid = _column(rb, "queue_offset"), _column(rb, "queue_id")
    ok = pc.fill_null(pc.and_(pc.fill_null(rb.column("body_crc_ok"), True),
                              pc.fill_null(rb.column("record_crc_ok"), True)), True)
    flag = np.where(ok.to_numpy(zero_copy_only=False), 0, _CRC_BAD) \
        + np.where(_column(rb, "valid_prefix"), 0, _BEHIND_BAD)
    rebuilt = below & dispatch.dispatchable(_column(rb, "sys_flag"))
    same = rebuilt & (stored == phy)
    extra = np.flatnonzero(rebuilt & ~same)
    topics = rb.column("topic").dictionary_encode()
    code = topics.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    names = topics.dictionary.to_pylist()
    cols = [np.concatenate([qoff, qoff[extra]]), np.concatenate([phy, stored[extra]]),
            np.concatenate([size, size[extra]]), np.concatenate([tags, tags[extra]]),
            np.concatenate([np.where(same, _REC | _REBUILT, _REC), np.full(len(extra), _REBUILT)]),
            np.concatenate([flag, np.zeros(len(extra), np.int64)])]
    code, qids = np.concatenate([code, code[extra]]), np.concatenate([qid, qid[extra]])
    if plan.config.enableMultiDispatch and rebuilt.any():
        rows = np.flatnonzero(rebuilt)
        copies = dispatch.multi_dispatch_rows(plan.config, plan.broker_5x, rb.take(pa.array(rows)))
        if copies:
            at = rows[np.array([c[0] for c in copies], dtype=np.int64)]
            for name in {c[1] for c in copies} - set(names):
                names.append(name)
            index = {n: i for i, n in enumerate(names)}
            cols = [np.concatenate([cols[0], np.array([c[3] for c in copies], np.int64)]),
                    np.concatenate([cols[1], stored[at]]), np.concatenate([cols[2], size[at]]),
                    np.concatenate([cols[3], tags[at]]), np.concatenate([cols[4], np.full(len(at), _REBUILT)]),
                    np.concatenate([cols[5], np.zeros(len(at), np.int64)])]
            code = np.concatenate([code, np.array([index[c[1]] for c in copies], np.int64)])
            qids = np.concatenate([qids, np.array([c[2] for c in copies], np.int64)])
    table = pa.table([pa.array(c.astype(f.type.to_pandas_dtype())) for c, f in zip(cols, QUEUE_ROWS)],
                     schema=QUEUE_ROWS)
    for key, part in _keyed((code << 32) | (qids.astype(np.int64) & 0xFFFFFFFF), table):
        qid32 = np.int64(key & 0xFFFFFFFF).astype(np.uint32).astype(np.int32)
        out[(names[key >> 32], int(qid32))].append(part)


def _lost_rows(rb: pa.RecordBatch, segment: str, plan: AuditPlan) -> pa.Table:
    """Intact records at or past the truncation point (the broker's recovery discards them)."""
    b = rb.filter(pa.array(lost_mask(rb, plan.end)))
    n = b.num_rows
    reason = "behind_cut" if segment == plan.cut_segment else "deleted_file"
    return pa.table({
        "phy_offset": b.column("phy_offset"), "segment": pa.array([segment] * n, pa.string()),
        "reason": pa.array([reason] * n, pa.string()), "topic": b.column("topic"),
        "queue_id": b.column("queue_id"), "queue_offset": b.column("queue_offset"),
        "total_size": b.column("total_size"), "sys_flag": b.column("sys_flag"),
        "store_time": _timestamps(b.column("store_timestamp")),
        "born_time": _timestamps(b.column("born_timestamp")),
        **{c: b.column(c) for c in ("keys", "tags", "uniq_key", "msg_id", "body_crc", "properties", "body")}})


def _timestamps(ms) -> pa.Array:
    return pc.cast(pc.cast(ms, pa.int64()).cast(pa.timestamp("ms", tz="UTC")), _TS)


def _flush_partials(rb: pa.RecordBatch, plan: AuditPlan) -> list[pa.Table]:
    """Per (flush window, queue): how many of the batch's records (below the cut, in the valid
    prefix) were stored after the checkpoint's timestamp of that window, their offsets and times."""
    sys_flag = _column(rb, "sys_flag")
    ts = _column(rb, "store_timestamp")
    conds = {"commitlog": np.ones(len(ts), bool), "consume_queue": dispatch.dispatchable(sys_flag),
             "index": dispatch.indexable(sys_flag)}
    phy, size = _column(rb, "phy_offset"), _column(rb, "total_size").astype(np.int64)
    out = []
    for window, stamp in plan.windows:
        keep = conds[window] & (ts > stamp)
        if not keep.any():
            continue
        t = pa.table({"topic": rb.column("topic").filter(pa.array(keep)),
                      "queue_id": rb.column("queue_id").filter(pa.array(keep)),
                      "queue_offset": rb.column("queue_offset").filter(pa.array(keep)),
                      "phy_from": pa.array(phy[keep]), "phy_to": pa.array(phy[keep] + size[keep]),
                      "ts": pa.array(ts[keep])})
        g = t.group_by(["topic", "queue_id"]).aggregate([
            ("queue_offset", "count"), ("queue_offset", "min"), ("queue_offset", "max"), ("phy_from", "min"),
            ("phy_to", "max"), ("ts", "min"), ("ts", "max")])
        out.append(g.append_column("window", pa.array([window] * g.num_rows, pa.string())))
    return out


def scan_segment(path: str, segment: str, lost: bool, plan: AuditPlan, records: str | None = None
                 ) -> Iterator[tuple[int, tuple]]:
    """Stage 1 for one commitlog file: its records once, cut into shuffle items (``AuditPlan``).
    ``lost``: the file reaches past the truncation point (bodies are read for the lost messages).
    ``records``: the run's scan kept them there (``store_reader.scanned``): not read again."""
    cols = _SCAN_COLUMNS + (_LOST_COLUMNS if lost else ["properties"] if plan.config.enableMultiDispatch else [])
    queues: dict[tuple[str, int], list[pa.Table]] = defaultdict(list)
    puts, lost_rows, flush = [], [], []
    topic_no: dict[str, int] = {}
    batches = SegmentScan(path, plan.opts, columns=cols, include_lost=True, batch_size=65536) if records is None \
        else read_records(records)
    for rb in batches:
        # records below the cut: the broker keeps their bytes, behind a bad record too (a file it
        # does not re-read); the flush window counts the valid prefix (what was written in order)
        kept = _column(rb, "phy_offset") < plan.end
        below = kept & _column(rb, "valid_prefix")
        _queue_rows(rb, plan, kept, queues)
        if lost:
            lost_rows.append(_lost_rows(rb, segment, plan))
        if below.any():
            flush += _flush_partials(rb.filter(pa.array(below)), plan)
        if kept.any():
            p = index_puts(rb.filter(pa.array(kept)), ordered=True)
            topics = p.topic.dictionary_encode()
            code = np.array([topic_no.setdefault(t, len(topic_no)) for t in topics.dictionary.to_pylist()]
                            or [0], np.int32)[topics.indices.to_numpy(zero_copy_only=False)]
            puts.append(pa.table([pa.array(code), pa.array(p.key_hash.astype(np.int32)), pa.array(p.phy)],
                                 schema=INDEX_PUTS))
    for (topic, qid), parts in queues.items():
        yield plan.queue_key(topic, qid), ("queue", (topic, qid), pa.concat_tables(parts))
    if puts:
        t = pa.concat_tables(puts)
        names = list(topic_no)
        for key, part in _keyed(plan.phy_keys(t["phy_offset"].to_numpy()), t):
            yield key, ("puts", names, part)
    if lost_rows:
        yield plan.driver_key, ("lost", pa.concat_tables(lost_rows))
    if flush:
        yield plan.driver_key, ("flush", pa.concat_tables(flush))


def index_source_items(source: int, plan: AuditPlan, idx: IndexFile | None = None, first: int = 1,
                       end: int | None = None) -> Iterator[tuple[int, tuple]]:
    """Stage 1 for an index file's entries ``[first, end)`` (default all): keyed by the commitlog
    file they point into, each part with the number of its chunk's first entry (entry order across
    tasks). For a file on disk, what its header is checked against goes to the driver: the part's
    phy range and negative timeDiffs, and (from the part starting at entry 1) the hash slots
    pointing outside ``[0, indexCount]``."""
    src = plan.index_sources[source]
    own = idx is None
    if own:
        idx = IndexFile(src.path, plan.config.maxHashSlotNum, plan.config.maxIndexNum)
    try:
        lows, highs, negative = [], [], False
        for lo, e in idx.entry_chunks(plan.index_part_entries, first, end):
            phy = e["phy_offset"].astype(np.int64)
            if len(phy):
                lows.append(int(phy.min()))
                highs.append(int(phy.max()))
                negative = negative or bool((e["time_diff"] < 0).any())
            t = pa.table([pa.array(e["key_hash"].astype(np.int32)), pa.array(phy)], schema=INDEX_ENTRIES)
            for key, part in _keyed(plan.phy_keys(phy), t):      # entry order kept
                yield key, ("entries", (source, lo), part)
        if src.on_disk >= 0:
            over = 0
            if first == 1:
                slots, count = np.asarray(idx.slots), max(idx.header.index_count, 0)
                over = int(((slots < 0) | (slots > count)).sum())
            yield plan.driver_key, ("index_part", (source, min(lows, default=None), max(highs, default=None),
                                                   negative, over))
    finally:
        if own:
            idx.close()


# -- stage 2 -------------------------------------------------------------------------------------------

def audit_partition(key: int, items: Iterable[tuple[int, tuple]], plan: AuditPlan) -> Iterator[tuple]:
    """Stage 2 for one shuffle key: a bucket of queues, one commitlog file's phy range, or the
    driver's rows."""
    if key < plan.buckets:
        yield from _compare_bucket(key, items, plan)
    elif key < plan.driver_key:
        yield from _index_range(key, items, plan)
    else:
        for _, item in items:
            yield item


def _entry_rows(first_offset: int | np.ndarray, e: CQEntries, src: int) -> pa.Table:
    """``QUEUE_ROWS`` of entries ``e`` at queue offsets ``first_offset + i`` (or the given offsets)
    seen by view ``src``."""
    n = len(e.phy_offset)
    off = first_offset + np.arange(n, dtype=np.int64) if np.isscalar(first_offset) else first_offset
    return pa.table([pa.array(np.asarray(off, dtype=np.int64)), pa.array(np.asarray(e.phy_offset, np.int64)),
                     pa.array(np.asarray(e.size, np.int32)), pa.array(np.asarray(e.tags_code, np.int64)),
                     pa.array(np.full(n, src, np.int8)), pa.array(np.zeros(n, np.int8))], schema=QUEUE_ROWS)


def _queue_file_rows(key: tuple[str, int], plan: AuditPlan) -> list[pa.Table]:
    """A queue's rows from its CQ files: every non-zero slot (the disk view) and the broker's
    entries its recovery leaves as they are on disk; each file's head read and decoded once."""
    heads: dict[str, CQEntries] = {}

    def head(path) -> CQEntries:
        if str(path) not in heads:
            heads[str(path)] = decode_entries(read_queue_head(path)[0])
        return heads[str(path)]

    out = []
    for path, start in plan.disk_queues.get(key, ()):
        e = head(path)
        keep = np.flatnonzero((e.phy_offset != 0) | (e.size != 0) | (e.tags_code != 0))
        out.append(_entry_rows(start // 20 + keep, CQEntries(*(c[keep] for c in e)), _DISK))
    for r in plan.broker_on_disk.get(key, ()):
        e = head(r.path)
        zeros = max(0, r.hi - max(r.lo, len(e.size)))    # slots past the head are all zero
        out.append(_entry_rows(r.first, CQEntries(*(np.concatenate([c[r.lo:r.hi], np.zeros(zeros, c.dtype)])
                                                    for c in e)), _BROKER))
    return out


def _range(t: pa.Table, view: int) -> tuple[int, int] | None:
    """[min, max + 1) of the queue offsets of ``view``'s entries with a positive size."""
    src, size = t["src"].to_numpy(), t["size"].to_numpy()
    off = t["queue_offset"].to_numpy()[((src & view) != 0) & (size > 0)]
    return (int(off.min()), int(off.max()) + 1) if len(off) else None


def _compare_bucket(bucket: int, items: Iterable[tuple[int, tuple]], plan: AuditPlan) -> Iterator[tuple]:
    queues: dict[tuple[str, int], list[pa.Table]] = defaultdict(list)
    for _, (_, key, table) in items:
        queues[key].append(table)
    # a queue's CQ files are read when it is compared: a task holds one queue's files at a time
    on_disk = [k for k in (*plan.disk_queues, *plan.broker_on_disk) if plan.queue_key(*k) == bucket]
    for key in on_disk:
        queues.setdefault(key, [])
    rows, ranges = [], []
    for key in sorted(queues):
        parts = queues.pop(key) + _queue_file_rows(key, plan)
        if not parts:
            continue
        t = pa.concat_tables(parts)
        if not t.num_rows:
            continue
        rows += compare_queue(key[0], key[1], t, plan.end, plan.broker_min.get(key), key in plan.disk_queues,
                              plan.scope)
        ranges.append((key, _range(t, _DISK), _range(t, _REBUILT)))
    yield "queue_findings", pa.Table.from_pylist(rows, schema=QUEUE_FINDING_ROWS)
    yield "ranges", ranges


def _index_range(key: int, items: Iterable[tuple[int, tuple]], plan: AuditPlan) -> Iterator[tuple]:
    """The index entries pointing into one commitlog file's phy range, per lens: dangling and
    repeated entries (a (key hash, phy) pair lives in one range), and which index puts of the
    range's records no entry holds (unfindable keys, as runs numbered within the range)."""
    entries, puts = [], []
    for _, (kind, meta, table) in items:
        (entries if kind == "entries" else puts).append((meta, table))
    source = np.concatenate([np.full(t.num_rows, i, np.int64) for (i, _), t in entries] or [np.zeros(0, np.int64)])
    # a part holds at most its chunk's entries, in entry order: numbers that order the entries of a file
    entry_number = np.concatenate([lo + np.arange(t.num_rows) for (_, lo), t in entries]
                                  or [np.zeros(0, np.int64)])
    kh = np.concatenate([t["key_hash"].to_numpy() for _, t in entries] or [np.zeros(0, np.int32)])
    phy = np.concatenate([t["phy_offset"].to_numpy() for _, t in entries] or [np.zeros(0, np.int64)])
    rows, lenses = [], {}
    for lens in ("on_disk", "recovered"):
        order = np.array([getattr(s, lens) for s in plan.index_sources] or [-1], np.int64)
        names = {getattr(s, lens): s.name for s in plan.index_sources}
        file_order = order[source]
        sel = file_order >= 0
        rows += _entry_findings(kh[sel], phy[sel], entry_number[sel], file_order[sel], names, lens,
                                plan.min_phy, plan.end)
        lenses[lens] = (kh[sel], phy[sel])
    yield "index_rows", rows
    if puts:
        yield "unfindable", (key, _unfindable_runs(puts, lenses))


# -- index findings ------------------------------------------------------------------------------------


def _bad_header_rows(plan: AuditPlan, parts: Sequence[tuple]) -> list[dict]:
    by_source: dict[int, list[tuple]] = defaultdict(list)
    for p in parts:
        by_source[p[0]].append(p)
    rows = []
    for i, src in enumerate(plan.index_sources):
        if src.on_disk >= 0:
            rows += [{"kind": "bad_header", "index": "on_disk", "file": src.name, "count": 1, "detail": d}
                     for d in header_problems(src.header, plan.config.maxIndexNum, by_source[i])]
    return rows


INDEX_FINDING_ROWS = INDEX_FINDING_ROW.arrow()


def _unfindable_runs(puts: list[tuple[list[str], pa.Table]], lenses: dict[str, tuple[np.ndarray, np.ndarray]]
                     ) -> dict:
    """For one phy range: per topic, how many indexed records it has (distinct phy offsets) and,
    per lens, the runs of consecutive ones (numbered from 0 in phy order) with a key no entry holds."""
    kh = np.concatenate([t["key_hash"].to_numpy() for _, t in puts]).astype(np.int64)
    phy = np.concatenate([t["phy_offset"].to_numpy() for _, t in puts])
    topic_no: dict[str, int] = {}
    code = np.concatenate([np.array([topic_no.setdefault(n, len(topic_no)) for n in names] or [0], np.int64)
                           [t["topic"].to_numpy()] for names, t in puts])
    missing = {lens: ~_held(lk, lp, kh, phy) for lens, (lk, lp) in lenses.items()}
    records, runs = {}, []
    for topic, c in topic_no.items():
        sel = np.flatnonzero(code == c)
        uphy, inv = np.unique(phy[sel], return_inverse=True)
        records[topic] = len(uphy)
        for lens, miss_put in missing.items():
            miss = np.bincount(inv, weights=miss_put[sel], minlength=len(uphy))
            hit = np.flatnonzero(miss > 0)         # records (in phy order) missing a key
            for a, b in consecutive_runs(hit):
                run = hit[a:b]
                runs.append((lens, topic, int(run[0]), int(run[-1]) + 1, int(uphy[run[0]]),
                             int(uphy[run[-1]]) + 1, int(miss[run].sum())))
    return {"records": records, "runs": runs}


def _unfindable_rows(parts: list[tuple[int, dict]]) -> list[dict]:
    """The per-range runs joined up in phy order: a run that ends at a range's last record of a
    topic continues into the next range's run that starts at that topic's first record."""
    base: dict[str, int] = defaultdict(int)
    merged: dict[tuple[str, str], list[list]] = defaultdict(list)
    for _, part in sorted(parts, key=lambda p: p[0]):
        for lens, topic, lo, hi, phy_from, phy_to, count in part["runs"]:
            lo, hi = lo + base[topic], hi + base[topic]
            runs = merged[(lens, topic)]
            if runs and runs[-1][1] == lo:
                runs[-1][1], runs[-1][3] = hi, phy_to
                runs[-1][4] += count
            else:
                runs.append([lo, hi, phy_from, phy_to, count])
        for topic, n in part["records"].items():
            base[topic] += n
    return [{"kind": "unfindable_key", "index": lens, "file": None, "topic": topic, "phy_from": r[2],
             "phy_to": r[3], "count": r[4], "detail": f"{r[1] - r[0]} records"}
            for (lens, topic), runs in sorted(merged.items(), key=lambda x: (x[0][1], x[0][0]))
            for r in runs]


def _merge_entry_findings(rows: list[dict]) -> list[dict]:
    """Per-range dangling/duplicate rows summed per (kind, lens, index file)."""
    total: dict[tuple, dict] = {}
    for r in rows:
        k = (r["index"], r["kind"], r["file_order"])
        if k not in total:
            total[k] = dict(r)
        else:
            t = total[k]
            t["phy_from"], t["phy_to"] = min(t["phy_from"], r["phy_from"]), max(t["phy_to"], r["phy_to"])
            t["count"] += r["count"]
    lens_order = {"on_disk": 0, "recovered": 1}
    kind_order = {"dangling_below_min": 0, "dangling_beyond_end": 1, "duplicate_entry": 2}
    out = sorted(total.values(), key=lambda r: (lens_order[r["index"]], kind_order[r["kind"]], r["file_order"]))
    for r in out:
        del r["file_order"]
    return out


def _held(lens_kh: np.ndarray, lens_phy: np.ndarray, key_hash: np.ndarray, phy: np.ndarray) -> np.ndarray:
    """Whether each (key hash, phy offset) pair is among a lens's entries. Per 4 GiB window of phy
    offsets, (phy - window start) << 31 | key hash packs a pair into one int64 (key hashes are
    non-negative int32; an entry with a negative one matches nothing), so the lookup is a sort and
    a binary search; puts and entries come in commitlog order, which the stable sort by window
    leaves nearly as it is."""
    out = np.zeros(len(key_hash), bool)
    lk, lp = lens_kh.astype(np.int64), lens_phy.astype(np.int64)
    keep = lk >= 0
    lk, lp = lk[keep], lp[keep]
    if not len(lk) or not len(key_hash):
        return out
    lw, ww = lp >> 32, phy >> 32
    lorder, worder = np.argsort(lw, kind="stable"), np.argsort(ww, kind="stable")
    lw_sorted, ww_sorted = lw[lorder], ww[worder]
    for w in np.unique(ww_sorted[np.r_[0, np.flatnonzero(np.diff(ww_sorted)) + 1]]):
        li = lorder[np.searchsorted(lw_sorted, w):np.searchsorted(lw_sorted, w, "right")]
        wi = worder[np.searchsorted(ww_sorted, w):np.searchsorted(ww_sorted, w, "right")]
        if not len(li):
            continue
        base = int(w) << 32
        packed = np.sort(((lp[li] - base) << 31) | lk[li])
        want = ((phy[wi] - base) << 31) | key_hash[wi]
        at = np.minimum(np.searchsorted(packed, want), len(packed) - 1)
        out[wi] = packed[at] == want
    return out


# -- the driver: plan, run, merge ----------------------------------------------------------------------

def audit_plan(spark, store: Store, pred: recovery.Prediction, summaries: Sequence[SegmentSummary],
               scan: Sequence[SegmentSummary], scope: tuple[int, int] | None) -> AuditPlan:
    broker_5x = pred.broker_version == recovery.V5X
    cfg = store.config
    disk_queues = {(ref.topic, ref.queue_id): [(f.path, f.start) for f in
                                               list_queue_files(ref.path, cfg.cq_file_size, rocketmq5=broker_5x)]
                   for ref in list_queues(store.root)}
    # a queue's rows: its broker entries, about as many records and rebuilt entries, its CQ files'
    # slots; queues are packed by that weight, largest first, into the lightest bucket
    per_file = cfg.cq_file_size // 20
    weight: dict[tuple[str, int], int] = defaultdict(int)
    for key, q in pred.consume_queues.items():
        weight[key] += 3 * max(0, q.max_offset - q.min_offset)
    for key, files in disk_queues.items():
        weight[key] += per_file * len(files)
    entries = max(sum(weight.values()), 2 * sum(s.records for s in scan))
    buckets = max(spark.sparkContext.defaultParallelism, -(-entries // ENTRIES_PER_AUDIT_TASK))
    queue_buckets = pack_queues(weight, buckets)
    file_size = summaries[0].file_size if summaries else cfg.mappedFileSizeCommitLog
    first = summaries[0].file_start // file_size if summaries else 0
    last = (summaries[-1].file_start // file_size) if summaries else -1
    sources: list[IndexSource] = []
    recovered = {f.path: i for i, f in enumerate(pred.index_files) if f.data is None and f.path}
    for i, ref in enumerate(list_index_files(store.index_dir, cfg.index_file_size, strict=False)):
        sources.append(IndexSource(ref.name, i, recovered.get(ref.path, -1), ref.path, read_header(ref.path)))
    sources += [IndexSource(f.name, -1, i, None) for i, f in enumerate(pred.index_files) if f.data is not None]
    return AuditPlan(
        end=pred.max_phy_offset, min_phy=pred.min_phy_offset, broker_5x=broker_5x, config=cfg,
        opts=audit_scan_options(store, broker_5x), buckets=buckets, file_size=file_size,
        first_segment=first, segments=last - first + 1, scope=scope,
        broker_min={k: q.min_offset for k, q in pred.consume_queues.items()}, queue_buckets=queue_buckets,
        disk_queues=disk_queues,
        broker_on_disk={k: runs for k, q in pred.consume_queues.items()
                        if (runs := tuple(r for r in q.entry_runs() if r.slots is None))},
        cut_segment=next((f.name for f in pred.commitlog_files if f.wrote < f.size), None),
        windows=flush_risk(store).windows,
        index_sources=tuple(sources), index_part_entries=INDEX_ENTRIES_PER_PART)


def pack_queues(weight: dict[tuple[str, int], int], buckets: int) -> dict[tuple[str, int], int]:
    """Each queue's bucket: largest queue first, into the bucket with the least weight so far."""
    load = [(0, b) for b in range(buckets)]
    out = {}
    for key in sorted(weight, key=lambda k: (-weight[k], k)):
        w, b = heapq.heappop(load)
        out[key] = b
        heapq.heappush(load, (w + weight[key], b))
    return out


def _driver_items(plan: AuditPlan, pred: recovery.Prediction) -> list[tuple[int, tuple]]:
    """The shuffle items only the driver has: the entries the broker's predicted recovery wrote
    into its queues (the rest are read from the CQ files, ``AuditPlan.broker_on_disk``) and the
    index files its re-dispatch builds (in memory)."""
    items = []
    for key, q in pred.consume_queues.items():
        wrote = [_entry_rows(r.first, decode_entries(r.slots), _BROKER)
                 for r in q.entry_runs() if r.slots is not None]
        if wrote:
            items.append((plan.queue_key(*key), ("queue", key, pa.concat_tables(wrote))))
    for i, src in enumerate(plan.index_sources):
        if src.path is None:
            with pred.index_files[src.recovered].view(plan.config) as idx:
                items += index_source_items(i, plan, idx)
    return items


def _pack(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema, options=pa.ipc.IpcWriteOptions(compression="zstd")) as w:
        w.write_table(table)
    return sink.getvalue().to_pybytes()


def _unpack(data: bytes) -> pa.Table:
    return pa.ipc.open_stream(data).read_all()


def run_audit_job(spark, plan: AuditPlan, scan: Sequence[SegmentSummary], driver_items: list,
                  records: dict[str, str] | None = None) -> list:
    """The audit's one Spark job: stage 1 (segments, index files, the driver's items) shuffled by
    key into stage 2 (``audit_partition``); returns stage 2's results in key order. A segment
    whose kept ``records`` lack lost messages' columns it needs is read again."""
    sc = spark.sparkContext
    kept = records or {}
    files = [(s.path, s.segment, s.file_start + s.file_size > plan.end,
              kept.get(s.segment) if lost_columns_cover(s, plan.end) else None) for s in scan]
    rdds = []
    if files:
        rdds.append(sc.parallelize(files, len(files)).flatMap(lambda f: scan_segment(*f[:3], plan, f[3])))
    disk_parts = [(i, lo, hi) for i, s in enumerate(plan.index_sources) if s.path is not None
                  for lo, hi in s.parts(plan.index_part_entries, plan.config.maxIndexNum)]
    if disk_parts:
        rdds.append(sc.parallelize(disk_parts, len(disk_parts))
                    .flatMap(lambda p: index_source_items(p[0], plan, None, p[1], p[2])))
    if driver_items:
        # slices of about DRIVER_SLICE_BYTES: a worker holds one slice, not the store's share. The
        # JVM keeps what the driver parallelizes until the job ends, so the tables go compressed
        # (zstd; decompressed as a task reads them)
        size = sum(item[-1].nbytes for _, item in driver_items)
        slices = min(len(driver_items), max(sc.defaultParallelism, -(-size // DRIVER_SLICE_BYTES)))
        packed = [(key, item[:-1], _pack(item[-1])) for key, item in driver_items]
        rdds.append(sc.parallelize(packed, slices).map(lambda p: (p[0], (*p[1], _unpack(p[2])))))
    if not rdds:
        return []
    return (sc.union(rdds).partitionBy(plan.partitions, lambda k: k)
            .mapPartitionsWithIndex(lambda k, items: audit_partition(k, items, plan)).collect())


LOST_ORDER = ["phy_offset", "segment", "reason", "topic", "queue_id", "queue_offset", "total_size", "sys_flag",
              "store_time", "born_time", "keys", "tags", "uniq_key", "msg_id", "body_crc", "properties", "body"]


def _flush_window(partials: list[pa.Table], windows: tuple[tuple[str, int], ...]) -> pa.Table:
    """The per-batch flush partials summed per (window, queue)."""
    if not partials:
        return pa.table({})
    g = pa.concat_tables(partials).group_by(["window", "topic", "queue_id"]).aggregate([
        ("queue_offset_count", "sum"), ("queue_offset_min", "min"), ("queue_offset_max", "max"),
        ("phy_from_min", "min"), ("phy_to_max", "max"), ("ts_min", "min"), ("ts_max", "max")])
    stamps = dict(windows)
    stamp = [stamps[w] for w in g["window"].to_pylist()]
    out = pa.table({
        "window": g["window"],
        "checkpoint_time": _timestamps(pa.array([s if s > 0 else None for s in stamp], pa.int64())),
        "topic": g["topic"], "queue_id": g["queue_id"], "records": g["queue_offset_count_sum"],
        "from_offset": g["queue_offset_min_min"], "to_offset": pc.add(g["queue_offset_max_max"], 1),
        "phy_from": g["phy_from_min_min"], "phy_to": g["phy_to_max_max"],
        "first_store_time": _timestamps(g["ts_min_min"]), "last_store_time": _timestamps(g["ts_max_max"])})
    return out.sort_by([("window", "ascending"), ("topic", "ascending"), ("queue_id", "ascending")])


# -- consumer offsets ----------------------------------------------------------------------------------

QUEUE_FINDING_ROWS = QUEUE_FINDING_ROW.arrow()


def consumer_offset_findings(store: Store, pred: recovery.Prediction, disk_ranges: dict, rebuilt_ranges: dict,
                             lost: pa.Table) -> pa.Table:
    """Every committed offset of ``consumerOffset.json`` and its ``.bak``: the queue before and after
    recovery, the broker's pull status and corrected offset, and what the group loses or gets again."""
    lost_by_queue: dict[tuple[str, int], np.ndarray] = {}
    if lost.num_rows:
        keep = dispatch.dispatchable(lost["sys_flag"].to_numpy())
        for t, q, o in zip(np.asarray(lost["topic"].to_pylist(), dtype=object)[keep],
                           lost["queue_id"].to_numpy()[keep], lost["queue_offset"].to_numpy()[keep]):
            lost_by_queue.setdefault((t, int(q)), []).append(int(o))
    rows = []
    for source in ("consumerOffset.json", "consumerOffset.json.bak"):
        path = store.config_dir / source
        if not path.is_file():
            continue
        offsets = read_consumer_offsets(path).value
        for c in recovery.consumer_offset_checks(pred, store.config, offsets):
            key = (c.topic, c.queue_id)
            before = disk_ranges.get(key, (0, 0))
            repaired = rebuilt_ranges.get(key, (0, 0))
            redelivered = c.committed_offset - c.next_begin_offset \
                if c.status == "OFFSET_OVERFLOW_BADLY" else 0
            skipped = c.next_begin_offset - c.committed_offset if c.status == "OFFSET_TOO_SMALL" else 0
            skipped += sum(1 for o in lost_by_queue.get(key, ()) if o >= c.committed_offset)
            rows.append({"source": source, "group": c.group, "topic": c.topic, "queue_id": c.queue_id,
                         "committed_offset": c.committed_offset, "min_before": before[0],
                         "max_before": before[1], "min_after": c.min_offset, "max_after": c.max_offset,
                         "status": c.status, "next_begin_offset": c.next_begin_offset,
                         "repaired_min": repaired[0], "repaired_max": repaired[1],
                         "redelivered": max(redelivered, 0), "skipped": skipped,
                         "at_risk": redelivered > 0 or skipped > 0})
    return pa.Table.from_pylist(rows) if rows else pa.table({})


# -- segments ----------------------------------------------------------------------------------------------

def segment_rows(summaries: Sequence[SegmentSummary], pred: recovery.Prediction,
                 mtimes: dict[str, int], scanned: set[str], fingerprints: dict[str, str]) -> list[dict]:
    import datetime as dt

    kept = {f.name: f.wrote for f in pred.commitlog_files} if pred.load_result else {}   # refused: keeps none

    def ts(ms):
        return None if ms is None else dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc)

    out = []
    for s in summaries:
        row = s.as_row()
        row.update(first_store_time=ts(s.first_store_timestamp), last_store_time=ts(s.last_store_timestamp),
                   end_phy_offset=s.end_phy_offset, broker_keeps_bytes=kept.get(s.segment),
                   file_mtime_ns=mtimes.get(s.segment), fingerprint=fingerprints.get(s.segment),
                   scanned=s.segment in scanned)
        out.append(row)
    return out


def summary_from_row(row: dict) -> SegmentSummary:
    """A segment summary carried over from an earlier run's ``segments`` row (--since-last)."""
    from schemas import SEGMENT

    return SegmentSummary(**{k: row[k] for k in SEGMENT.names if k != "trailing_bytes"})


# -- all of it -------------------------------------------------------------------------------------------


@dataclass
class Findings:
    """The audit's tables (rows without the run keys) and the counts the run summary prints."""

    tables: dict[str, pa.Table] = field(default_factory=dict)
    scope: tuple[int, int] | None = None
    flush: FlushRisk | None = None

    def count(self, table: str, where=None) -> int:
        t = self.tables.get(table)
        if t is None or not t.num_rows:
            return 0
        return t.num_rows if where is None else int(pc.sum(where(t)).as_py() or 0)


def audit(spark, store: Store, pred: recovery.Prediction, summaries: Sequence[SegmentSummary],
          scan: Sequence[SegmentSummary] | None = None, records: dict[str, str] | None = None) -> Findings:
    """Every finding for ``store`` given the broker's predicted recovery. ``scan``: the segments
    whose records are read (default all; --since-last passes only the new ones). ``records``: where
    the run's scan kept each segment's records (``store_reader.scanned``; the others are read)."""
    scan = list(summaries if scan is None else scan)
    out = Findings()
    if len(scan) < len(summaries):       # --since-last: records read only in the new segments
        last = summaries[-1].file_start + summaries[-1].file_size if summaries else 0
        out.scope = (scan[0].file_start, last) if scan else (last, last)
    out.tables["store_findings"] = store_file_findings(store, pred.broker_version == recovery.V5X, summaries, pred)
    out.flush = flush_risk(store)
    if not pred.load_result:
        return out
    plan = audit_plan(spark, store, pred, summaries, scan, out.scope)
    results = run_audit_job(spark, plan, scan, _driver_items(plan, pred), records)
    by_kind: dict[str, list] = defaultdict(list)
    for kind, value in results:
        by_kind[kind].append(value)
    queue = pa.concat_tables(by_kind["queue_findings"]) if by_kind["queue_findings"] \
        else QUEUE_FINDING_ROWS.empty_table()
    out.tables["queue_findings"] = queue.sort_by([("topic", "ascending"), ("queue_id", "ascending"),
                                                  ("kind", "ascending"), ("from_offset", "ascending")])
    rows = [r for part in by_kind["index_rows"] for r in part]
    index_rows = _bad_header_rows(plan, by_kind["index_part"]) + _merge_entry_findings(rows) \
        + _unfindable_rows(by_kind["unfindable"])
    out.tables["index_findings"] = pa.Table.from_pylist(index_rows, schema=INDEX_FINDING_ROWS) \
        if index_rows else INDEX_FINDING_ROWS.empty_table()
    lost = [t for t in by_kind["lost"] if t.num_rows]
    out.tables["lost_messages"] = pa.concat_tables(lost).select(LOST_ORDER).sort_by("phy_offset") if lost \
        else pa.table({})
    out.tables["flush_window"] = _flush_window(by_kind["flush"], plan.windows)
    disk_ranges = {k: d for part in by_kind["ranges"] for k, d, _ in part if d is not None}
    rebuilt_ranges = {k: r for part in by_kind["ranges"] for k, _, r in part if r is not None}
    out.tables["consumer_offset_findings"] = consumer_offset_findings(
        store, pred, disk_ranges, rebuilt_ranges, out.tables["lost_messages"])
    return out


def passes_json(passes: Sequence[tuple[str, float, str]]) -> str:
    return json.dumps({name: round(secs, 3) for name, secs, _ in passes})


__all__ = ["QUEUE_KINDS", "INDEX_KINDS", "Findings", "audit", "compare_queue"]


# -- the run: rows with their keys, the summary, the exit status -----------------------------------------


def alerting_counts(f: Findings) -> dict[str, int]:
    """What makes an audit exit 1: counts per table of findings that need an operator."""
    q = f.tables.get("queue_findings", pa.table({}))
    return {
        "queue_findings": f.count("queue_findings", lambda t: pc.invert(pc.is_in(t["kind"], pa.array(sorted(INFO_KINDS)))))
        if q.num_rows else 0,
        "index_findings": f.count("index_findings"),
        "lost_messages": f.count("lost_messages"),
        "consumer_offsets_at_risk": f.count("consumer_offset_findings", lambda t: t["at_risk"]),
        "store_findings": f.count("store_findings", lambda t: pc.equal(t["severity"], "anomaly")),
    }


def bad_segments(summaries: Sequence[SegmentSummary]) -> list[SegmentSummary]:
    """Segments whose valid data ends at a corrupt record or a torn tail."""
    return [s for s in summaries if s.end_reason in ("corrupt", "torn_tail")]


def run_status(pred: recovery.Prediction, summaries: Sequence[SegmentSummary], f: Findings) -> str:
    """``runs.status``: refused (the broker would not load the store), findings, or clean."""
    if not pred.load_result:
        return "refused"
    return "findings" if any(alerting_counts(f).values()) or bad_segments(summaries) else "clean"


def run_tables(f: Findings, run: dict, segments: list[dict], run_id: str, store_id: str,
               audited_at) -> dict[str, pa.Table]:
    """Every audit table's rows for this run (``schemas.audit``), run keys filled in."""
    from jobs.deltasink import audit_rows
    from schemas import audit as A

    out = {"runs": audit_rows(A.RUNS, [run], run_id, store_id, audited_at),
           "segments": audit_rows(A.SEGMENTS, segments, run_id, store_id, audited_at)}
    # every table each run, empty ones included: a re-run's rows replace its earlier rows in all of
    # them (salvaged_messages has rows only from recover --salvage, which fills it in afterwards)
    for name in ("queue_findings", "index_findings", "consumer_offset_findings", "lost_messages",
                 "flush_window", "store_findings", "salvaged_messages"):
        t = f.tables.get(name)
        rows = t if t is not None and t.num_rows else []
        out[name] = audit_rows(A.TABLES[name], rows, run_id, store_id, audited_at)
    return out


def write_audit(audit_path: str, tables: dict[str, pa.Table], run_id: str, spark=None) -> list[str]:
    """Each table to ``<audit_path>/<table>`` (Delta), replacing the rows of ``run_id``; ``runs``
    last, so a run row exists only once all its findings are committed."""
    from jobs.deltasink import write_tables

    return write_tables(audit_path, tables, run_id, spark)


def print_summary(f: Findings, out) -> None:
    """Findings grouped by kind, one line each (the audit's human summary)."""
    q = f.tables.get("queue_findings")
    if q is not None and q.num_rows:
        agg = q.group_by("kind").aggregate([("count", "sum"), ("topic", "count_distinct")])
        for kind, n, topics in sorted(zip(*(agg.column(i).to_pylist() for i in range(3))),
                                      key=lambda r: r[0]):
            print(f"    queue   {kind:<26} {n:>8} entries in {topics} topic(s): {QUEUE_KINDS[kind]}", file=out)
    ix = f.tables.get("index_findings")
    if ix is not None and ix.num_rows:
        agg = ix.group_by(["kind", "index"]).aggregate([("count", "sum")])
        for kind, lens, n in sorted(zip(*(agg.column(i).to_pylist() for i in range(3)))):
            print(f"    index   {kind:<26} {n:>8} ({lens}): {INDEX_KINDS[kind]}", file=out)
    lost = f.tables.get("lost_messages")
    if lost is not None and lost.num_rows:
        print(f"    lost    {lost.num_rows} intact messages the broker's recovery discards "
              f"(phy {pc.min(lost['phy_offset']).as_py()}..{pc.max(lost['phy_offset']).as_py()})", file=out)
    if f.flush is not None and f.flush.windows:
        n = f.count("flush_window", lambda t: pc.if_else(pc.equal(t["window"], "commitlog"), t["records"], 0))
        print(f"    flush   {n} records stored after the checkpoint's commitlog flush time: "
              f"{f.flush.text}", file=out)
    elif f.flush is not None:
        print(f"    flush   {f.flush.text}", file=out)
    sf = f.tables.get("store_findings")
    for r in sf.to_pylist() if sf is not None else ():
        where = r["file"] + (f" @ byte {r['position']}" if r["position"] is not None else "")
        print(f"    file    {r['kind']} {where}: {r['detail']}", file=out)
