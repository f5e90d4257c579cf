"""What a queue holds, and the Spark audit's comparison of it (one vocabulary: ``kinds``).

``rebuilt_puts`` / ``rebuilt_queue`` / ``rebuilt_entries``: the REBUILT view of a queue, its
puts placed by the repair's ``place_entries`` (what the repaired store's CQ files hold); the
audit's stage 2 and ``jobs.dump --verify`` (``view.StoreView``, ``queuefiles``) both take it.

``compare_queue``: the Spark audit's comparison of four views of every entry of one queue (the CQ
files as they are, the broker's recovered queue, the rebuilt queue, the records), one
``schemas.findings.QUEUE_ROW`` row per entry, ``src`` bits saying which views it belongs to.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from store_reader.formats import recordformat as rf
from store_reader.formats.brokerconf import BrokerConfig
from store_reader.formats.consumequeue import PRE_BLANK_SIZE
from store_reader.ranges import consecutive_runs
from store_reader.repair.queues import RepairedQueue, place_entries

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


def rebuilt_puts(t: pa.Table) -> tuple[np.ndarray, ...]:
    """A queue's puts from its ``QUEUE_ROWS`` (the ``REBUILT`` rows) in commitlog order, as
    columns (queue offset, phy offset, size, tags code, flag, record phy): what the repair places
    (``queues.place_entries``)."""
    i = np.flatnonzero(t["src"].to_numpy() & REBUILT)
    rec_phy = t["record_phy"].to_numpy()[i]
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
                    ) -> tuple[tuple[np.ndarray, ...], np.ndarray]:
    """The rebuilt view of a queue: the slots of ``q`` (``rebuilt_queue`` over ``puts``) holding
    an entry, as columns (queue offset, phy offset, size, tags code, flag, record phy) ascending by
    queue offset; and the queue offsets several of its kept puts claim (``duplicate_queue_offset``)."""
    if q is None:
        none = np.zeros(0, np.int64)
        return (none,) * 6, none
    off = puts[0][q.held]
    slot = q.slots[off - q.first]
    return ((off, slot["phy_offset"].astype(np.int64), slot["size"].astype(np.int64),
             slot["tags_code"].astype(np.int64), puts[4][q.held], puts[5][q.held]), q.duplicates)


def queue_views(t: pa.Table, *views: int) -> list[tuple[np.ndarray, ...]]:
    """Each view's rows of a queue's ``QUEUE_ROWS`` as columns (queue offset, phy offset, size,
    tags code, flag) by queue offset, then phy offset (rows equal in both in table order)."""
    src = t["src"].to_numpy()
    off, phy = t["queue_offset"].to_numpy(), t["phy_offset"].to_numpy()
    size, tags = t["size"].to_numpy().astype(np.int64), t["tags_code"].to_numpy()
    flag = t["flag"].to_numpy()
    out = []
    for s in views:
        i = np.flatnonzero(src & s)
        o = off[i]
        if len(o) > 1 and not (o[1:] > o[:-1]).all():      # out of order, or repeated offsets
            i = i[np.lexsort((phy[i], o))]
        out.append((off[i], phy[i], size[i], tags[i], flag[i]))
    return out


def served_phys(d: tuple[np.ndarray, ...], b: tuple[np.ndarray, ...]) -> tuple[np.ndarray, np.ndarray]:
    """The phy offsets of the disk view's entries and of the broker's that ``duplicate_phy_on_disk``
    and ``duplicate_phy`` look at (``queue_views``' order)."""
    return d[1][(d[2] > 0) & (d[2] != PRE_BLANK_SIZE)], b[1][b[2] != PRE_BLANK_SIZE]


def hole_rows(topic: str, qid: int, d: tuple[np.ndarray, ...]) -> list[dict]:
    """``hole``: the gaps between valid entries of the disk view ``d``."""
    vo = d[0][(d[1] >= 0) & (d[2] > 0)]
    out: list[dict] = []
    for g in np.flatnonzero(np.diff(vo) > 1):
        out += _runs("hole", topic, qid, np.arange(vo[g] + 1, vo[g + 1]))
    return out


def filler_rows(topic: str, qid: int, r: tuple[np.ndarray, ...]) -> list[dict]:
    """``filler``: the offsets inside the rebuilt queue ``r`` that no record holds."""
    out = []
    for g in np.flatnonzero(np.diff(r[0]) > 1):
        prev_end, nxt = int(r[1][g] + r[2][g]), int(r[1][g + 1])
        out.append({"kind": "filler", "topic": topic, "queue_id": qid, "from_offset": int(r[0][g]) + 1,
                    "to_offset": int(r[0][g + 1]), "count": int(r[0][g + 1] - r[0][g] - 1),
                    "phy_from": prev_end if prev_end <= nxt else None, "phy_to": nxt if prev_end <= nxt else None,
                    "detail": "records gone between its neighbours' commitlog positions"})
    return out


_WHOLE = object()


def compare_queue(topic: str, qid: int, t: pa.Table, end: int, b_min: int | None, on_disk: bool,
                  scope: tuple[int, int] | None,
                  rebuilt: tuple[tuple[np.ndarray, ...], np.ndarray], last_rebuilt: Any = _WHOLE) -> list[dict]:
    """Every ``QUEUE_KINDS`` finding of one queue from its entries: ``QUEUE_ROWS`` whose ``src``
    bits say which views (disk, broker, rebuilt, record) a row belongs to (``flag`` of a record
    row: 1 CRC mismatch, 2 behind a bad record); ``rebuilt``: its ``rebuilt_entries`` (the
    REBUILT rows placed: the repaired store's queue). ``last_rebuilt``: ``t`` is one window of the queue's offsets
    (``compare.compare_windows``), whose rebuilt view ends at this offset (None: it has none):
    no ``queue_missing`` row, the caller joins the windows' rows."""
    d, b, rec = queue_views(t, DISK, BROKER, REC)
    r, dup = rebuilt
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
    out += hole_rows(topic, qid, d)
    for kind, v, keep in (("duplicate_phy_on_disk", d, (d[2] > 0) & (d[2] != PRE_BLANK_SIZE)),
                          ("duplicate_phy", b, b[2] != PRE_BLANK_SIZE)):
        o, p, s = v[0][keep], v[1][keep], v[2][keep]
        if len(p) < 2 or (np.diff(p) > 0).all():        # the usual queue: phy offsets ascend
            continue
        vals, cnt = np.unique(p, return_counts=True)
        m = np.isin(p, vals[cnt > 1])
        out += _runs(kind, topic, qid, o[m], p[m], s[m], detail="phy offset at several queue offsets")
    # offsets inside the rebuilt queue that no record holds: the repaired store's fillers
    out += filler_rows(topic, qid, r)
    # ... and past the last record left, up to the max of the queue the broker keeps
    # (with a scope, judged only where the records were read: below it there are none to miss)
    last = (r[0][-1] if len(r[0]) else None) if last_rebuilt is _WHOLE else last_rebuilt
    tail = (b[0] > last if last is not None else np.ones(len(b[0]), bool)) & scoped(b[1])
    out += _runs("filler", topic, qid, b[0][tail], b[1][tail], b[2][tail],
                 detail="the broker keeps these offsets past the queue's last record left")
    if not on_disk and len(r[0]) and last_rebuilt is _WHOLE:           # one row for the queue: its whole range
        out.append({"kind": "queue_missing", "topic": topic, "queue_id": qid, "from_offset": int(r[0][0]),
                    "to_offset": int(r[0][-1]) + 1, "count": len(r[0]), "phy_from": int(r[1].min()),
                    "phy_to": int((r[1] + r[2]).max()), "detail": None})
    return out
