"""Stage 2 of the Spark audit (``audit.plan``) and the driver's merge of its results: each bucket
of queues compared (``queues.compare_queue``), each commitlog file's phy range of index puts and
entries checked, and the per-task rows joined into the audit's tables."""
from __future__ import annotations

from collections import defaultdict
from typing import Iterable, Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from schemas.findings import INDEX_FINDING_ROW, QUEUE_FINDING_ROW
from store_reader.broker import prediction
from store_reader.audit.index import entry_findings, header_problems, held
from store_reader.audit.offsets import consumer_offset_findings
from store_reader.audit.plan import AuditPlan
from store_reader.audit.queues import (BROKER, DISK, REBUILT, REC, compare_queue, filler_rows, hole_rows,
                                       queue_views, rebuilt_entries, rebuilt_puts, rebuilt_queue, served_phys)
from store_reader.audit.records import entry_rows, flush_grouped, timestamps
from store_reader.formats.consumequeue import (PRE_BLANK_SIZE, CQEntries, decode_entries, read_queue_head, slot_of,
                                               slots_per_file)
from store_reader.ranges import ascending, consecutive_runs
from store_reader.repair.queues import QueueWriter, puts_in_order, write_whole_queue
from store_reader.store import Store

QUEUE_FINDING_ROWS, INDEX_FINDING_ROWS = QUEUE_FINDING_ROW.arrow(), INDEX_FINDING_ROW.arrow()


def audit_partition(key: int, items: Iterable[tuple[int, tuple]], plan: AuditPlan) -> Iterator[tuple]:
    """Stage 2 for one key but ``plan.driver_key`` (whose rows go to the driver as they are): a
    bucket of queues or one commitlog file's phy range."""
    if key < plan.buckets:
        yield from _compare_bucket(key, items, plan)
    else:
        yield from _index_range(key, items, plan)


def compare_queues(plan: AuditPlan, items: Iterable[tuple[int, tuple]]) -> list[dict]:
    """Stage 2's queue buckets in one process (``jobs.dump --verify``, ``view.StoreView``): every
    queue of the stage-1 and driver ``items`` compared; their ``queue_findings`` rows."""
    by_bucket: dict[int, list[tuple[int, tuple]]] = defaultdict(list)
    for key, item in items:
        by_bucket[key].append((key, item))
    return [row for bucket in range(plan.buckets) for what, value in _compare_bucket(bucket, by_bucket[bucket], plan)
            if what == "queue_findings" for row in value.to_pylist()]


def _queue_file_rows(key: tuple[str, int], plan: AuditPlan, window: int | None = None) -> list[pa.Table]:
    """A queue's rows from its CQ files: every non-zero slot (the disk view) and the broker's
    entries its recovery leaves as they are on disk; each file's head read and decoded once.
    ``window``: only those of that CQ file's window of queue offsets (``_file_windows``)."""
    heads: dict[str, CQEntries] = {}

    def head(path) -> CQEntries:
        if str(path) not in heads:
            heads[str(path)] = decode_entries(read_queue_head(path)[0])
        return heads[str(path)]

    per_file = slots_per_file(plan.config.cq_file_size)
    out = []
    for path, start in plan.disk_queues.get(key, ()):
        if window is not None and slot_of(start) // per_file != window:
            continue
        e = head(path)
        keep = np.flatnonzero((e.phy_offset != 0) | (e.size != 0) | (e.tags_code != 0))
        out.append(entry_rows(slot_of(start) + keep, CQEntries(*(c[keep] for c in e)), DISK))
    if key in plan.disk_units:          # a RocksDB consume queue: its units as stored
        out.append(entry_rows(*plan.disk_units[key], DISK))
    for r in plan.broker_on_disk.get(key, ()):
        if window is not None and r.first // per_file != window:
            continue
        e = head(r.path)
        zeros = max(0, r.hi - max(r.lo, len(e.size)))    # slots past the head are all zero
        out.append(entry_rows(r.first, CQEntries(*(np.concatenate([c[r.lo:r.hi], np.zeros(zeros, c.dtype)])
                                                    for c in e)), BROKER))
    return out


def _range(off: np.ndarray, size: np.ndarray) -> tuple[int, int] | None:
    """[min, max + 1) of the queue offsets of entries with a positive size."""
    off = off[size > 0]
    return (int(off.min()), int(off.max()) + 1) if len(off) else None


def _disk_range(t: pa.Table) -> tuple[int, int] | None:
    src = t["src"].to_numpy()
    keep = (src & DISK) != 0
    return _range(t["queue_offset"].to_numpy()[keep], t["size"].to_numpy()[keep])


def _rebuilt_range(t: pa.Table, rebuilt: tuple[np.ndarray, ...], below: int | None) -> tuple[int, int] | None:
    """``_range`` of the rebuilt entries; ``below`` (an audit that read the records from there on,
    ``plan.scope``): the broker's entries below it stand for the records not read."""
    off, size = rebuilt[0], rebuilt[2]
    if below is not None:
        src, bsize = t["src"].to_numpy(), t["size"].to_numpy()
        keep = ((src & BROKER) != 0) & (bsize != PRE_BLANK_SIZE) & (t["phy_offset"].to_numpy() < below)
        off = np.concatenate([off, t["queue_offset"].to_numpy()[keep]])
        size = np.concatenate([size, bsize[keep].astype(np.int64)])
    return _range(off, size)


def _compare_bucket(bucket: int, items: Iterable[tuple[int, tuple]], plan: AuditPlan) -> Iterator[tuple]:
    queues: dict[tuple[str, int], list[pa.Table]] = defaultdict(list)
    last_put: dict[tuple[str, int], int] = {}
    for _, item in items:
        if item[0] == "last_put":
            for key, t in item[1].items():
                last_put[key] = max(last_put.get(key, t), t)
        else:
            queues[item[1]].append(item[2])
    # a queue's CQ files are read when it is compared: a task holds one queue's files at a time
    target = plan.write_queues
    on_disk = [k for k in (*plan.disk_queues, *plan.disk_units, *plan.broker_on_disk,
                           *(target.kept if target is not None else ())) if plan.queue_key(*k) == bucket]
    for key in on_disk:
        queues.setdefault(key, [])
    rows, ranges, written = [], [], []
    for key in sorted(queues):
        got = compare_windows(key, queues[key], plan, last_put.get(key, 0))
        if got is not None:
            del queues[key]
            rows += got[0]
            ranges += got[1]
            written += got[2]
            continue
        parts = queues.pop(key) + _queue_file_rows(key, plan)
        t = pa.concat_tables(parts) if parts else None
        puts = rebuilt_puts(t) if t is not None else (np.zeros(0, np.int64),) * 6
        placed = rebuilt_queue(*key, puts, plan.config)     # the repaired store's queue: the REBUILT view
        if target is not None:
            off, phy, size, _, _, record_phy = puts
            written.append(write_whole_queue(target, *key, placed, record_phy, phy, size, off, last_put.get(key, 0)))
        if t is None or not t.num_rows:
            continue
        rebuilt = rebuilt_entries(puts, placed)
        rows += compare_queue(key[0], key[1], t, plan.end, plan.broker_min.get(key),
                              key in plan.disk_queues or key in plan.disk_units, plan.scope, rebuilt)
        ranges.append((key, _disk_range(t), _rebuilt_range(t, rebuilt[0], plan.scope[0] if plan.scope else None)))
    yield "queue_findings", pa.Table.from_pylist(rows, schema=QUEUE_FINDING_ROWS)
    yield "ranges", ranges
    if target is not None:
        yield "queues_written", written


# -- a queue a window at a time ---------------------------------------------------------------------------


def _file_windows(key: tuple[str, int], plan: AuditPlan, per_file: int) -> set[int] | None:
    """The windows of queue offsets (a CQ file's each) the queue's CQ files and the broker's entries
    left on disk hold rows in; None when one of its runs crosses a file's end."""
    out = {slot_of(start) // per_file for _, start in plan.disk_queues.get(key, ())}
    for r in plan.broker_on_disk.get(key, ()):
        if r.hi > r.lo:
            first, last = r.first // per_file, (r.first + r.hi - r.lo - 1) // per_file
            if first != last:
                return None
            out.add(first)
    return out


def _in_order(parts: list[pa.Table], per_file: int) -> tuple[list[np.ndarray], list[tuple[int, int] | None],
                                                               int | None] | None:
    """A cheap first pass over a queue's ``QUEUE_ROWS`` (its parts, in commitlog order): each part's
    windows and the range of its records' phy offsets, and the queue's last rebuilt offset; None
    when its puts are not in order (``queues.puts_in_order``): the queue is not taken a window at
    a time."""
    windows, recs = [], []
    last, at = None, -1
    for t in parts:
        src, off = t["src"].to_numpy(), t["queue_offset"].to_numpy()
        windows.append(np.unique(off // per_file))
        phy = t["phy_offset"].to_numpy()[(src & REC) != 0]
        recs.append((int(phy.min()), int(phy.max())) if len(phy) else None)
        put = np.flatnonzero(src & REBUILT)
        if len(put):
            rec_phy = t["record_phy"].to_numpy()[put]
            if rec_phy.min() <= at:
                return None
            if not (rec_phy[1:] >= rec_phy[:-1]).all():
                put = put[np.argsort(rec_phy, kind="stable")]
            at = int(rec_phy.max())
            ok, last = puts_in_order(t["phy_offset"].to_numpy()[put], t["size"].to_numpy()[put], off[put], last)
            if not ok:
                return None
    return windows, recs, None if last is None else last[0]


def _matched_records(tw: pa.Table, b_phy: np.ndarray, parts: list[pa.Table],
                     recs: list[tuple[int, int] | None]) -> pa.Table:
    """A window's rows for ``compare_queue``, its records replaced by those the broker's entries
    can be matched with: the queue's records (in any window: a record keeps the queue offset it
    was stored with) whose phy offset lies in the range of the window's broker entries
    (``b_phy``). ``compare_queue`` reads the record view only to match a broker entry to the
    record starting at its phy offset."""
    src = tw["src"].to_numpy()
    mine = tw.filter(pa.array(src != REC))
    out = [mine.set_column(mine.schema.get_field_index("src"), "src",
                           pa.array(mine["src"].to_numpy() & ~np.int8(REC), pa.int8()))]
    if len(b_phy):
        lo, hi = int(b_phy.min()), int(b_phy.max())
        for t, span in zip(parts, recs):
            if span is None or span[1] < lo or span[0] > hi:
                continue
            phy = t["phy_offset"].to_numpy()
            hit = t.filter(pa.array(((t["src"].to_numpy() & REC) != 0) & (phy >= lo) & (phy <= hi)))
            out.append(hit.set_column(hit.schema.get_field_index("src"), "src",
                                      pa.array(np.full(hit.num_rows, REC, np.int8))))
    return pa.concat_tables(out)


def _joined(rows: list[dict], per_file: int) -> list[dict]:
    """The windows' rows with each run a window's start cut in two joined again."""
    out: list[dict] = []
    for row in sorted(rows, key=lambda r: (r["kind"], r["detail"] or "", r["from_offset"])):
        prev = out[-1] if out else None
        if (prev is not None and row["from_offset"] % per_file == 0 and prev["to_offset"] == row["from_offset"]
                and prev["kind"] == row["kind"] and prev["detail"] == row["detail"]):
            prev["to_offset"] = row["to_offset"]
            prev["count"] += row["count"]
            if prev["phy_from"] is not None and row["phy_from"] is not None:
                prev["phy_from"] = min(prev["phy_from"], row["phy_from"])
                prev["phy_to"] = max(prev["phy_to"], row["phy_to"])
            continue
        out.append(dict(row))
    return out


def _widen(a: tuple[int, int] | None, b: tuple[int, int] | None) -> tuple[int, int] | None:
    return b if a is None else a if b is None else (min(a[0], b[0]), max(a[1], b[1]))


def compare_windows(key: tuple[str, int], parts: list[pa.Table], plan: AuditPlan, last_put: int
                    ) -> tuple[list[dict], list[tuple], list] | None:
    """``_compare_bucket``'s work for one queue (its rows, ranges and written files), a window of
    queue offsets (a CQ file's) at a time: the task holds one window's rows, not the queue's. The
    same results as the whole queue at once (a test holds it), given that the queue's puts are in
    order (``_in_order``) and each window's disk and broker phy offsets continue the previous
    window's. None (nothing written) when the first pass finds its puts are not; when a window finds
    the phy offsets are not, its files are still written a window at a time and it is compared whole."""
    if key in plan.disk_units:
        return None
    per_file = slots_per_file(plan.config.cq_file_size)
    on_disk = _file_windows(key, plan, per_file)
    first = _in_order(parts, per_file) if on_disk is not None else None
    if first is None:
        return None
    part_windows, recs, last_rebuilt = first
    target = plan.write_queues
    writer = QueueWriter(target, *key) if target is not None else None
    windows = sorted(on_disk.union(*(set(w.tolist()) for w in part_windows)))
    rows: list[dict] = []
    disk = rebuilt = None                  # the queue's ranges so far
    comparing, any_rows = True, False
    last_d = last_b = last_valid = None    # what the next window continues
    last_r: tuple[np.ndarray, ...] | None = None
    missing = None
    topic, qid = key
    for w in windows:
        tables = [t.filter(pa.array(t["queue_offset"].to_numpy() // per_file == w))
                  for t, ws in zip(parts, part_windows) if np.isin(w, ws)]
        tables += _queue_file_rows(key, plan, w)
        tw = pa.concat_tables(tables) if tables else None
        del tables
        if tw is None or not tw.num_rows:
            continue
        any_rows = True
        puts = rebuilt_puts(tw)
        if writer is not None:
            off, phy, size, tags, _, record_phy = puts
            writer.add(record_phy, phy, size, tags, off)
        if not comparing:
            continue
        d, b = queue_views(tw, DISK, BROKER)
        dp, bp = served_phys(d, b)
        if ((len(dp) and ((np.diff(dp) <= 0).any() or (last_d is not None and dp[0] <= last_d)))
                or (len(bp) and ((np.diff(bp) <= 0).any() or (last_b is not None and bp[0] <= last_b)))):
            comparing = False           # phy offsets at several queue offsets: compared whole below
            continue
        last_d = dp[-1] if len(dp) else last_d
        last_b = bp[-1] if len(bp) else last_b
        # the puts in order are each held at its own offset (``puts_in_order``): the rebuilt view
        r, dup = (*puts[:2], puts[2].astype(np.int64), puts[3].astype(np.int64), *puts[4:]), np.zeros(0, np.int64)
        rows += compare_queue(topic, qid, _matched_records(tw, b[1], parts, recs), plan.end,
                              plan.broker_min.get(key), False, plan.scope, (r, dup), last_rebuilt)
        # what spans windows: the holes and fillers between them, the queue's whole range
        valid = d[0][(d[1] >= 0) & (d[2] > 0)]
        if len(valid):
            if last_valid is not None:
                rows += hole_rows(topic, qid, (np.array([last_valid, valid[0]]), np.zeros(2, np.int64),
                                               np.ones(2, np.int64)))
            last_valid = int(valid[-1])
        if len(r[0]):
            if last_r is not None:
                rows += filler_rows(topic, qid, tuple(np.array([a, c[0]]) for a, c in zip(last_r, r[:3])))
            last_r = tuple(c[-1] for c in r[:3])
            span = (int(r[0][0]), int(r[0][-1]) + 1, len(r[0]), int(r[1].min()), int((r[1] + r[2]).max()))
            missing = span if missing is None else (missing[0], span[1], missing[2] + span[2],
                                                    min(missing[3], span[3]), max(missing[4], span[4]))
        disk = _widen(disk, _disk_range(tw))
        rebuilt = _widen(rebuilt, _rebuilt_range(tw, r, plan.scope[0] if plan.scope else None))
    written = [writer.finish(last_put)] if writer is not None else []
    if not comparing:
        t = pa.concat_tables(parts + _queue_file_rows(key, plan))
        puts = rebuilt_puts(t)
        r = rebuilt_entries(puts, rebuilt_queue(*key, puts, plan.config))
        return (compare_queue(topic, qid, t, plan.end, plan.broker_min.get(key),
                              key in plan.disk_queues, plan.scope, r),
                [(key, _disk_range(t), _rebuilt_range(t, r[0], plan.scope[0] if plan.scope else None))], written)
    if not any_rows:
        return [], [], written
    rows = _joined(rows, per_file)
    if key not in plan.disk_queues and missing is not None:
        rows.append({"kind": "queue_missing", "topic": topic, "queue_id": qid, "from_offset": missing[0],
                     "to_offset": missing[1], "count": missing[2], "phy_from": missing[3], "phy_to": missing[4],
                     "detail": None})
    return rows, [(key, disk, rebuilt)], written


def _index_range(key: int, items: Iterable[tuple[int, tuple]], plan: AuditPlan) -> Iterator[tuple]:
    """The index entries pointing into one commitlog file's phy range, per lens: dangling and
    repeated entries (a (key hash, phy) pair lives in one range), and which index puts of the
    range's records no entry holds (unfindable keys, as runs numbered within the range)."""
    entries, puts = [], []
    for _, (kind, meta, table) in items:
        (entries if kind == "entries" else puts).append((meta, table))
    sources = np.array([i for (i, _), _ in entries], np.int64)
    sizes = np.array([t.num_rows for _, t in entries], np.int64)
    # a part holds at most its chunk's entries, in entry order: numbers that order the entries of a file
    entry_number = np.concatenate([lo + np.arange(t.num_rows) for (_, lo), t in entries]
                                  or [np.zeros(0, np.int64)])
    kh = np.concatenate([t["key_hash"].to_numpy() for _, t in entries] or [np.zeros(0, np.int32)])
    phy = np.concatenate([t["phy_offset"].to_numpy() for _, t in entries] or [np.zeros(0, np.int64)])
    rows, lenses, seen = [], {}, None
    for lens in ("on_disk", "recovered"):
        order = np.array([getattr(s, lens) for s in plan.index_sources] or [-1], np.int64)
        names = {getattr(s, lens): s.name for s in plan.index_sources}
        file_order = np.repeat(order[sources], sizes)
        sel = file_order >= 0
        whole = bool(sel.all())        # the usual range: every file is in the lens, nothing to copy
        if seen is None or not np.array_equal(sel, seen[0]):     # the lenses often hold the same entries
            seen = (sel, kh, phy) if whole else (sel, kh[sel], phy[sel])
        rows += entry_findings(seen[1], seen[2], entry_number if whole else entry_number[sel],
                               file_order if whole else file_order[sel], names, lens, plan.min_phy, plan.end)
        lenses[lens] = seen[1:]
    yield "index_rows", rows
    if puts:
        yield "unfindable", (key, unfindable_runs(puts, lenses))


# -- index findings ------------------------------------------------------------------------------------


def bad_header_rows(plan: AuditPlan, parts: Sequence[tuple]) -> list[dict]:
    by_source: dict[int, list[tuple]] = defaultdict(list)
    for p in parts:
        by_source[p[0]].append(p)
    rows = []
    for i, src in enumerate(plan.index_sources):
        if src.on_disk >= 0:
            rows += [{"kind": "bad_header", "index": "on_disk", "file": src.name, "count": 1, "detail": d}
                     for d in header_problems(src.header, plan.config.maxIndexNum, by_source[i])]
    return rows




def unfindable_runs(puts: list[tuple[list[str], pa.Table]], lenses: dict[str, tuple[np.ndarray, np.ndarray]]
                     ) -> dict:
    """For one phy range: per topic, how many indexed records it has (distinct phy offsets) and,
    per lens, the runs of consecutive ones (numbered from 0 in phy order) with a key no entry holds."""
    kh = np.concatenate([t["key_hash"].to_numpy() for _, t in puts]).astype(np.int64)
    phy = np.concatenate([t["phy_offset"].to_numpy() for _, t in puts])
    topic_no: dict[str, int] = {}
    code = np.concatenate([np.array([topic_no.setdefault(n, len(topic_no)) for n in names] or [0], np.int64)
                           [t["topic"].to_numpy()] for names, t in puts])
    missing: dict[str, np.ndarray] = {}
    for lens, (lk, lp) in lenses.items():       # lenses holding the same entries are looked up once
        twin = next((m for other, m in missing.items() if lenses[other][0] is lk and lenses[other][1] is lp), None)
        missing[lens] = ~held(lk, lp, kh, phy) if twin is None else twin
    records, runs = {}, []
    for topic, c in topic_no.items():
        sel = np.flatnonzero(code == c)
        uphy, inv = _distinct(phy[sel])
        records[topic] = len(uphy)
        for lens, miss_put in missing.items():
            miss = np.bincount(inv, weights=miss_put[sel], minlength=len(uphy))
            hit = np.flatnonzero(miss > 0)         # records (in phy order) missing a key
            for a, b in consecutive_runs(hit):
                run = hit[a:b]
                runs.append((lens, topic, int(run[0]), int(run[-1]) + 1, int(uphy[run[0]]),
                             int(uphy[run[-1]]) + 1, int(miss[run].sum())))
    return {"records": records, "runs": runs}


def _distinct(phy: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(phy, return_inverse=True)``, without its sort where the puts ascend (they come
    in commitlog order)."""
    if len(phy) and ascending(phy):
        first = np.r_[True, phy[1:] != phy[:-1]]
        return phy[first], np.cumsum(first) - 1
    return np.unique(phy, return_inverse=True)


def unfindable_rows(parts: list[tuple[int, dict]]) -> list[dict]:
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


def merge_entry_findings(rows: list[dict]) -> list[dict]:
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


LOST_ORDER = ["phy_offset", "segment", "reason", "topic", "queue_id", "queue_offset", "total_size", "sys_flag",
              "store_time", "born_time", "keys", "tags", "uniq_key", "msg_id", "body_crc", "properties", "body"]


def flush_window(partials: list[pa.Table], windows: tuple[tuple[str, int], ...]) -> pa.Table:
    """The flush partials (``flush_sums`` of each segment) summed per (window, queue)."""
    if not partials:
        return pa.table({})
    g = flush_grouped(partials)
    stamps = dict(windows)
    stamp = [stamps[w] for w in g["window"].to_pylist()]
    out = pa.table({
        "window": g["window"],
        "checkpoint_time": timestamps(pa.array([s if s > 0 else None for s in stamp], pa.int64())),
        "topic": g["topic"], "queue_id": g["queue_id"], "records": g["queue_offset_count_sum"],
        "from_offset": g["queue_offset_min_min"], "to_offset": pc.add(g["queue_offset_max_max"], 1),
        "phy_from": g["phy_from_min_min"], "phy_to": g["phy_to_max_max"],
        "first_store_time": timestamps(g["ts_min_min"]), "last_store_time": timestamps(g["ts_max_max"])})
    return out.sort_by([("window", "ascending"), ("topic", "ascending"), ("queue_id", "ascending")])


def lost_table(parts: Iterable[pa.Table]) -> pa.Table:
    """The ``lost_messages`` rows from stage 1's parts, in phy order: the segments' rows arrive in
    it (each segment's in commitlog order, the segments in file order), so the bodies are only
    copied to sort them when they do not."""
    parts = [t for t in parts if t.num_rows]
    if not parts:
        return pa.table({})
    lost = pa.concat_tables(parts)
    lost = lost.select([c for c in LOST_ORDER if c in lost.column_names])   # no body: tasks wrote them
    phy = lost["phy_offset"].to_numpy()
    return lost if (np.diff(phy) > 0).all() else lost.sort_by("phy_offset")


def audit_tables(store: Store, pred: prediction.Prediction, plan: AuditPlan, results: Iterable[tuple]
                 ) -> dict[str, pa.Table]:
    """The audit's tables from stage 2's results (``audit_partition``, in key order)."""
    by_kind: dict[str, list] = defaultdict(list)
    for kind, value in results:
        by_kind[kind].append(value)
    out = {}
    queue = pa.concat_tables(by_kind["queue_findings"]) if by_kind["queue_findings"] \
        else QUEUE_FINDING_ROWS.empty_table()
    out["queue_findings"] = queue.sort_by([("topic", "ascending"), ("queue_id", "ascending"),
                                           ("kind", "ascending"), ("from_offset", "ascending")])
    rows = [r for part in by_kind["index_rows"] for r in part]
    index_rows = bad_header_rows(plan, by_kind["index_part"]) + merge_entry_findings(rows) \
        + unfindable_rows(by_kind["unfindable"])
    out["index_findings"] = pa.Table.from_pylist(index_rows, schema=INDEX_FINDING_ROWS) \
        if index_rows else INDEX_FINDING_ROWS.empty_table()
    out["lost_messages"] = lost_table(by_kind["lost"])
    out["flush_window"] = flush_window(by_kind["flush"], plan.windows)
    disk_ranges = {k: d for part in by_kind["ranges"] for k, d, _ in part if d is not None}
    rebuilt_ranges = {k: r for part in by_kind["ranges"] for k, _, r in part if r is not None}
    out["consumer_offset_findings"] = consumer_offset_findings(store, pred, out["lost_messages"], disk_ranges,
                                                               rebuilt_ranges)
    return out
