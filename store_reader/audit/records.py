"""Stage 1 of the Spark audit (``audit.plan``): a commitlog file's records, an index file's
entries and the driver's own rows cut into compact Arrow tables keyed for the shuffle."""
from __future__ import annotations

from collections import defaultdict
from typing import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from schemas.findings import INDEX_FILE_ENTRY, INDEX_PUT, QUEUE_ROW
from store_reader.broker import dispatch, prediction
from store_reader.audit.plan import AuditPlan
from store_reader.audit.queues import BEHIND_BAD, BROKER, CRC_BAD, REBUILT, REC
from store_reader.formats.brokerconf import BrokerConfig
from store_reader.formats.commitlog import SegmentScan
from store_reader.formats.consumequeue import CQEntries, decode_entries
from store_reader.formats.indexfile import IndexFile
from store_reader.ranges import ascending, stable_order
from store_reader.broker.dispatch import INDEX_COLUMNS, index_puts
from store_reader.repair.salvage import lost_mask
from store_reader.repair.scanned import LOST_COLUMNS, RECORD_COLUMNS, read_puts, read_records

# What a segment read again (its kept records lack columns it needs) is read for: the records'
# columns and where the valid prefix ends always; the lost messages' columns in files reaching past
# the truncation point, properties also when LMQ copies are dispatched.
_SCAN_COLUMNS = [*RECORD_COLUMNS, "valid_prefix"]
FLUSH_COLUMNS = ["phy_offset", "total_size", "topic", "queue_id", "queue_offset", "sys_flag", "store_timestamp"]

QUEUE_ROWS, INDEX_ENTRIES, INDEX_PUTS = QUEUE_ROW.arrow(), INDEX_FILE_ENTRY.arrow(), INDEX_PUT.arrow()
_TS = pa.timestamp("us", tz="UTC")


def _keyed(keys: np.ndarray, table: pa.Table) -> Iterator[tuple[int, pa.Table]]:
    """``table``'s rows grouped by ``keys`` (one int per row), each group in row order."""
    if not table.num_rows:
        return
    if ascending(keys):          # in order already (puts and entries by phy range)
        k, grouped = keys, table
    else:
        order = stable_order(keys)
        k = keys[order]
        grouped = table.take(pa.array(order))  # one take, then zero-copy slices
    cut = np.flatnonzero(np.diff(k)) + 1
    for lo, hi in zip(np.r_[0, cut], np.r_[cut, len(k)]):
        yield int(k[lo]), grouped.slice(int(lo), int(hi - lo))


# -- stage 1: one commitlog file ----------------------------------------------------------------------

def _column(rb: pa.RecordBatch, name: str) -> np.ndarray:
    return rb.column(name).to_numpy(zero_copy_only=False)


def _where(rb: pa.RecordBatch, mask: np.ndarray) -> pa.RecordBatch:
    """The batch's rows where ``mask``: a zero-copy slice when they are one run (all, or a file's
    records past the truncation point: no body copied), else a filtered copy."""
    hit = np.flatnonzero(mask)
    if not len(hit) or hit[-1] - hit[0] + 1 == len(hit):
        return rb.slice(int(hit[0]) if len(hit) else 0, len(hit))
    return rb.filter(pa.array(mask))


def _rows(rb: pa.RecordBatch, columns: list[str], mask: np.ndarray) -> pa.RecordBatch:
    """``columns`` of the batch's rows where ``mask``: the bodies and properties are not copied."""
    return _where(rb.select(columns), mask)


def queue_rows(rb: pa.RecordBatch, config: BrokerConfig, broker_5x: bool, below: np.ndarray,
               out: dict[tuple[str, int], list[pa.Table]], last_put: dict[tuple[str, int], int] | None = None
               ) -> None:
    """The batch's records as ``QUEUE_ROWS`` per queue: every record (``REC``, with its damage
    flag) and the put of each dispatchable one below the cut (``REBUILT``, at its stored phy
    offset; the same row when that is where it lies), LMQ copies in their own queues. Which puts
    the repaired queue holds is decided per queue, by the repair's placement
    (``queues.rebuilt_queue``). The audit's stage 1 and ``dump --verify`` (``view.StoreView``) both
    make their queues' facts here.
    ``last_put``: given the latest store time of each queue's puts (the checkpoint's, when the
    queues are written)."""
    phy, stored = _column(rb, "phy_offset"), _column(rb, "stored_phy_offset")
    size, tags = _column(rb, "total_size").astype(np.int32), _column(rb, "tags_code")
    qoff, qid = _column(rb, "queue_offset"), _column(rb, "queue_id")
    ok = pc.fill_null(pc.and_(pc.fill_null(rb.column("body_crc_ok"), True),
                              pc.fill_null(rb.column("record_crc_ok"), True)), True)
    flag = np.where(ok.to_numpy(zero_copy_only=False), 0, CRC_BAD) \
        + np.where(_column(rb, "valid_prefix"), 0, BEHIND_BAD)
    rebuilt = below & dispatch.dispatchable(_column(rb, "sys_flag"))
    same = rebuilt & (stored == phy)
    extra = np.flatnonzero(rebuilt & ~same)
    topics = rb.column("topic").dictionary_encode()
    code = topics.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    names = topics.dictionary.to_pylist()
    cols = [np.concatenate([qoff, qoff[extra]]), np.concatenate([phy, stored[extra]]),
            np.concatenate([size, size[extra]]), np.concatenate([tags, tags[extra]]),
            np.concatenate([np.where(same, REC | REBUILT, REC), np.full(len(extra), REBUILT)]),
            np.concatenate([flag, np.zeros(len(extra), np.int64)]), np.concatenate([phy, phy[extra]])]
    code, qids = np.concatenate([code, code[extra]]), np.concatenate([qid, qid[extra]])
    put_rows = np.concatenate([np.arange(len(phy)), extra])      # each row's record in the batch
    if config.enableMultiDispatch and rebuilt.any():
        p = dispatch.queue_puts(config, broker_5x, rb, below)
        if p.own < len(p.row):
            copies = slice(p.own, None)
            at = p.row[copies]
            copy_names = [p.topics[c] for c in p.topic[copies].tolist()]
            for name in set(copy_names) - set(names):
                names.append(name)
            index = {n: i for i, n in enumerate(names)}
            cols = [np.concatenate([cols[0], p.queue_offset[copies]]),
                    np.concatenate([cols[1], stored[at]]), np.concatenate([cols[2], size[at]]),
                    np.concatenate([cols[3], tags[at]]), np.concatenate([cols[4], np.full(len(at), REBUILT)]),
                    np.concatenate([cols[5], np.zeros(len(at), np.int64)]), np.concatenate([cols[6], phy[at]])]
            code = np.concatenate([code, np.array([index[n] for n in copy_names], np.int64)])
            qids = np.concatenate([qids, p.queue_id[copies].astype(np.int64)])
            put_rows = np.concatenate([put_rows, at])
    if last_put is not None:
        _last_put(code, qids, cols[4], _column(rb, "store_timestamp")[put_rows], names, last_put)
    table = pa.table([pa.array(c.astype(f.type.to_pandas_dtype())) for c, f in zip(cols, QUEUE_ROWS)],
                     schema=QUEUE_ROWS)
    for key, part in _keyed((code << 32) | (qids.astype(np.int64) & 0xFFFFFFFF), table):
        qid32 = np.int64(key & 0xFFFFFFFF).astype(np.uint32).astype(np.int32)
        out[(names[key >> 32], int(qid32))].append(part)


def cut_rows(t: pa.Table, end: int) -> pa.Table:
    """A queue's ``QUEUE_ROWS`` made with every record's put (``queue_rows`` before the cut was
    known: ``dump --verify``'s one pass) cut at ``end``, as ``queue_rows`` makes them when it is
    known: a record at or past it keeps its own row (``REC``) and loses its put (``REBUILT``)."""
    src = t["src"].to_numpy()
    past = (t["record_phy"].to_numpy() >= end) & (src & REBUILT != 0)
    if not past.any():
        return t
    src = np.where(past, src & ~REBUILT, src)
    keep = src != 0
    i = t.schema.get_field_index("src")
    return t.set_column(i, t.schema.field(i), pa.array(src, t.schema.field(i).type)).filter(keep)


def _last_put(code: np.ndarray, qids: np.ndarray, src: np.ndarray, ts: np.ndarray,
              names: list[str], last_put: dict[tuple[str, int], int]) -> None:
    """The latest store time of the ``REBUILT`` rows of each queue, into ``last_put``."""
    put = np.flatnonzero(src & REBUILT)
    if not len(put):
        return
    keys, at = np.unique((code[put] << 32) | (qids[put].astype(np.int64) & 0xFFFFFFFF), return_inverse=True)
    latest = np.full(len(keys), np.iinfo(np.int64).min, np.int64)
    np.maximum.at(latest, at, ts[put].astype(np.int64))
    for key, t in zip(keys.tolist(), latest.tolist()):
        queue = (names[key >> 32], int(np.int64(key & 0xFFFFFFFF).astype(np.uint32).astype(np.int32)))
        last_put[queue] = max(last_put.get(queue, t), t)


def _lost_rows(rb: pa.RecordBatch, segment: str, plan: AuditPlan) -> pa.Table:
    """Intact records at or past the truncation point (the broker's recovery discards them)."""
    b = _where(rb, lost_mask(rb, plan.end))
    n = b.num_rows
    reason = "behind_cut" if segment == plan.cut_segment else "deleted_file"
    return pa.table({
        "phy_offset": b.column("phy_offset"), "segment": pa.array([segment] * n, pa.string()),
        "reason": pa.array([reason] * n, pa.string()), "topic": b.column("topic"),
        "queue_id": b.column("queue_id"), "queue_offset": b.column("queue_offset"),
        "total_size": b.column("total_size"), "sys_flag": b.column("sys_flag"),
        "store_time": timestamps(b.column("store_timestamp")),
        "born_time": timestamps(b.column("born_timestamp")),
        **{c: b.column(c) for c in ("keys", "tags", "uniq_key", "msg_id", "body_crc", "properties", "body")}})


def timestamps(ms) -> pa.Array:
    return pc.cast(pc.cast(ms, pa.int64()).cast(pa.timestamp("ms", tz="UTC")), _TS)


def _flush_partials(rb: pa.RecordBatch, plan: AuditPlan) -> list[pa.Table]:
    """Per (flush window, queue): how many of the batch's records (below the cut, in the valid
    prefix) were stored after the checkpoint's timestamp of that window, their offsets and times."""
    sys_flag = _column(rb, "sys_flag")
    ts = _column(rb, "store_timestamp")
    conds = {"commitlog": np.ones(len(ts), bool), "consume_queue": dispatch.dispatchable(sys_flag),
             "index": dispatch.indexable(sys_flag)}
    phy, size = _column(rb, "phy_offset"), _column(rb, "total_size").astype(np.int64)
    qoff, qid = _column(rb, "queue_offset"), _column(rb, "queue_id")
    topics = queue = None
    out = []
    for window, stamp in plan.windows:
        keep = np.flatnonzero(conds[window] & (ts > stamp))
        if not len(keep):
            continue
        if topics is None:
            topics = rb.column("topic").dictionary_encode()
            queue = (topics.indices.to_numpy(zero_copy_only=False).astype(np.int64) << 32) \
                | (qid.astype(np.int64) & 0xFFFFFFFF)
        rows = keep[stable_order(queue[keep])]                   # by queue, in commitlog order
        starts = np.flatnonzero(np.r_[True, np.diff(queue[rows]) != 0])
        first = rows[starts]
        g = pa.table({
            "queue_offset_count": np.diff(np.r_[starts, len(rows)]),
            "queue_offset_min": np.minimum.reduceat(qoff[rows], starts),
            "queue_offset_max": np.maximum.reduceat(qoff[rows], starts),
            "phy_from_min": np.minimum.reduceat(phy[rows], starts),
            "phy_to_max": np.maximum.reduceat(phy[rows] + size[rows], starts),
            "ts_min": np.minimum.reduceat(ts[rows], starts), "ts_max": np.maximum.reduceat(ts[rows], starts),
            "topic": rb.column("topic").take(pa.array(first)),
            "queue_id": rb.column("queue_id").take(pa.array(first))})
        out.append(g.append_column("window", pa.array([window] * g.num_rows, pa.string())))
    return out


_FLUSH_SUMS = [("queue_offset_count", "sum"), ("queue_offset_min", "min"), ("queue_offset_max", "max"),
               ("phy_from_min", "min"), ("phy_to_max", "max"), ("ts_min", "min"), ("ts_max", "max")]


def flush_grouped(partials: list[pa.Table]) -> pa.Table:
    """Flush partials aggregated per (window, queue): ``<column>_<sum|min|max>`` columns."""
    return pa.concat_tables(partials).group_by(["window", "topic", "queue_id"]).aggregate(_FLUSH_SUMS)


def flush_sums(partials: list[pa.Table]) -> pa.Table:
    """A segment's flush partials summed per (window, queue), as partials again: a stage-1 task
    sends the driver one row per window and queue of its file, not one per batch of records (the
    driver's share stays O(files x queues) however many records a file holds)."""
    g = flush_grouped(partials)
    names = {f"{c}_{f}": c for c, f in _FLUSH_SUMS}
    return g.rename_columns([names.get(n, n) for n in g.column_names])


def _topic_codes(topics: pa.Array, rows: np.ndarray, topic_no: dict[str, int]) -> np.ndarray:
    """The number in ``topic_no`` of the topic at each of ``rows``, topics new to it numbered in
    the order the rows first name them."""
    enc = topics.dictionary_encode()
    at = enc.indices.to_numpy(zero_copy_only=False)[rows]
    names = enc.dictionary.to_pylist()
    # each name's first row (len(at): none), without sorting the rows: a batch names few topics
    first = np.full(len(names), len(at), np.int64)
    np.minimum.at(first, at, np.arange(len(at), dtype=np.int64))
    for i in np.argsort(first, kind="stable")[:np.count_nonzero(first < len(at))]:
        topic_no.setdefault(names[i], len(topic_no))
    return np.array([topic_no.get(n, 0) for n in names] or [0], np.int32)[at]


def segment_items(path: str, segment: str, lost: bool, plan: AuditPlan, records: str | None = None
                 ) -> Iterator[tuple[int, tuple]]:
    """Stage 1 for one commitlog file: its records once, cut into shuffle items (``AuditPlan``).
    ``lost``: the file reaches past the truncation point (bodies are read for the lost messages).
    ``records``: the run's scan kept them there (``store_reader.repair.scanned``): not read again."""
    cols = _SCAN_COLUMNS + (LOST_COLUMNS if lost else ["properties"] if plan.config.enableMultiDispatch else [])
    cols += [] if "tags" in cols else ["tags"]           # INDEX_COLUMNS (5.4+ tag keys)
    queues: dict[tuple[str, int], list[pa.Table]] = defaultdict(list)
    puts, lost_rows, flush = [], [], []
    topic_no: dict[str, int] = {}
    last_put: dict[tuple[str, int], int] | None = None if plan.write_queues is None else {}
    batches = SegmentScan(path, plan.opts, columns=cols, include_lost=True, batch_size=65536) if records is None \
        else read_records(records)
    kept_puts = None if records is None else read_puts(records)     # a batch of puts per batch of records
    for rb in batches:
        batch_puts = None if kept_puts is None else next(kept_puts)
        # records below the cut: the broker keeps their bytes, behind a bad record too (a file it
        # does not re-read); the flush window counts the valid prefix (what was written in order)
        kept = _column(rb, "phy_offset") < plan.end
        below = kept & _column(rb, "valid_prefix")
        queue_rows(rb, plan.config, plan.broker_5x, kept, queues, last_put)
        if lost:
            lost_rows.append(_lost_rows(rb, segment, plan))
        if below.any():
            flush += _flush_partials(_rows(rb, FLUSH_COLUMNS, below), plan)
        if kept.any():
            made_from = _rows(rb, INDEX_COLUMNS, kept) if batch_puts is None else rb
            p = index_puts(made_from, plan.opts.index_tags, ordered=True) if batch_puts is None \
                else batch_puts.below(plan.end)
            code = _topic_codes(made_from.column("topic"), p.record_row, topic_no)
            puts.append(pa.table([pa.array(code), pa.array(p.key_hash.astype(np.int32)), pa.array(p.phy)],
                                 schema=INDEX_PUTS))
    for (topic, qid), parts in queues.items():
        yield plan.queue_key(topic, qid), ("queue", (topic, qid), pa.concat_tables(parts))
    by_bucket: dict[int, dict[tuple[str, int], int]] = defaultdict(dict)
    for queue, t in (last_put or {}).items():
        by_bucket[plan.queue_key(*queue)][queue] = t
    for bucket, latest in by_bucket.items():
        yield bucket, ("last_put", latest)
    if puts:
        t = pa.concat_tables(puts)
        names = list(topic_no)
        for key, part in _keyed(plan.phy_keys(t["phy_offset"].to_numpy()), t):
            yield key, ("puts", names, part)
    if lost_rows:
        yield plan.driver_key, ("lost", pa.concat_tables(lost_rows))
    if flush:
        yield plan.driver_key, ("flush", flush_sums(flush))


def index_source_items(source: int, plan: AuditPlan, first: int = 1, end: int | None = None
                       ) -> Iterator[tuple[int, tuple]]:
    """Stage 1 for an index file's entries ``[first, end)`` (default all): keyed by the commitlog
    file they point into, each part with the number of its chunk's first entry (entry order across
    tasks). For a file on disk, what its header is checked against goes to the driver: the part's
    phy range and negative timeDiffs, and (from the part starting at entry 1) the hash slots
    pointing outside ``[0, indexCount]``."""
    src = plan.index_sources[source]
    with IndexFile(src.path, plan.config.maxHashSlotNum, plan.config.maxIndexNum) as idx:
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


def entry_rows(first_offset: int | np.ndarray, e: CQEntries, src: int) -> pa.Table:
    """``QUEUE_ROWS`` of entries ``e`` at queue offsets ``first_offset + i`` (or the given offsets)
    seen by view ``src``."""
    n = len(e.phy_offset)
    off = first_offset + np.arange(n, dtype=np.int64) if np.isscalar(first_offset) else first_offset
    return pa.table([pa.array(np.asarray(off, dtype=np.int64)), pa.array(np.asarray(e.phy_offset, np.int64)),
                     pa.array(np.asarray(e.size, np.int32)), pa.array(np.asarray(e.tags_code, np.int64)),
                     pa.array(np.full(n, src, np.int8)), pa.array(np.zeros(n, np.int8)),
                     pa.array(np.full(n, -1, np.int64))], schema=QUEUE_ROWS)


def driver_items(plan: AuditPlan, pred: prediction.Prediction) -> Iterator[tuple[int, tuple]]:
    """The shuffle items only the driver has: the entries the broker's predicted recovery wrote
    into its queues (the rest are read from the CQ files, ``AuditPlan.broker_on_disk``). Made one
    at a time: the exchange writes each away before the next is made."""
    for key, q in pred.consume_queues.items():
        wrote = [entry_rows(r.first, decode_entries(r.slots), BROKER)
                 for r in q.entry_runs() if r.slots is not None]
        if wrote:
            yield plan.queue_key(*key), ("queue", key, pa.concat_tables(wrote))
