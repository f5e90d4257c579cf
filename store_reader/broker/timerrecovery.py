"""The 5.x timer store's broker rules: what ``TimerMessageStore#recover`` does with the store's
timer files, which units the dequeue still delivers, and the repaired timer store.

Spec ``recovery.md`` §13 (RocketMQ 5.3.3, 5.4.0, 5.5.1 ``TimerMessageStore#recover``,
``recoverAndRevise``, ``reviseQueueOffset``, ``TimerWheel#checkPhyPos``, ``doEnqueue``,
``dequeue``). The files' layouts are in ``timerstore``.

The rmq_sys_wheel_timer queue (topic ``TIMER_TOPIC`` queue 0) is given as its entries
(``TimerQueue``): the rebuilt queue of the repaired store for the repair, the queue the broker
serves after its recovery for the audit. A unit is live when it points at one of its entries
with that size: the record is below the cut and is that timer message.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np

from store_reader.formats import timerstore as ts
from store_reader.formats.brokerconf import BrokerConfig

# TimerMessageStore#reviseQueueOffset looks this many queue offsets back for the last unit's entry
REVISE_LOOK_BACK = 20_000
TIMER_BLANK_SLOTS = 60


@dataclass(frozen=True)
class TimerQueue:
    """The rmq_sys_wheel_timer/0 entries: ``offset`` (queue offset), ``phy``, ``size``, and the
    queue's range [min_offset, max_offset)."""
    offset: np.ndarray
    phy: np.ndarray
    size: np.ndarray
    min_offset: int
    max_offset: int

    def lookup(self, phy: np.ndarray, size: np.ndarray) -> np.ndarray:
        """The queue offset of the entry at (phy, size), -1 where there is none."""
        if not len(self.phy):
            return np.full(len(phy), -1, np.int64)
        order = np.argsort(self.phy, kind="stable")
        i = np.minimum(np.searchsorted(self.phy[order], phy), len(order) - 1)
        hit = (self.phy[order][i] == phy) & (self.size[order][i] == size)
        return np.where(hit, self.offset[order][i], -1)


# why a unit is dropped (the first that applies), in audit terms (store_reader.audit.kinds)
BEYOND_CUT = "timer.unit_beyond_truncation"
NOT_TIMER_RECORD = "timer.unit_wrong_record"
DUPLICATE = "timer.duplicate_unit"


@dataclass
class UnitVerdicts:
    """Per unit of a ``TimerLogScan``: ``queue_offset`` of its rmq_sys_wheel_timer entry (-1: none)
    and ``dropped`` (a reason above, or None for a live unit)."""
    queue_offset: np.ndarray
    dropped: np.ndarray               # object: a reason or None

    @property
    def live(self) -> np.ndarray:
        return np.equal(self.dropped, None)


def unit_records(commitlog_files, units: np.ndarray, cut: int) -> np.ndarray:
    """For each unit, the queue offset of the record it points at when that record lies below
    ``cut``, has the unit's size and is an rmq_sys_wheel_timer record of queue 0; else -1. Read
    from the records' headers (a unit's check without a consume queue: the audit's)."""
    from store_reader.formats import recordformat as rf
    out = np.full(len(units), -1, np.int64)
    files = sorted((f.start, f.path) for f in commitlog_files)
    starts = np.array([s for s, _ in files], np.int64)
    opened: dict[str, int] = {}
    try:
        for i, (phy, size) in enumerate(zip(units["offset_py"].tolist(), units["size_py"].tolist())):
            k = int(np.searchsorted(starts, phy, side="right")) - 1
            if size < rf.HEAD.size or phy + size > cut or k < 0:
                continue
            path = files[k][1]
            if path not in opened:
                opened[path] = os.open(path, os.O_RDONLY)
            rec = os.pread(opened[path], size, phy - files[k][0])
            if len(rec) < size:
                continue
            head = rf.HEAD.unpack_from(rec)
            total, magic, queue_id, sys_flag = head[0], head[1], head[3], head[7]
            if total != size or magic not in (rf.MAGIC_V1, rf.MAGIC_V2) or queue_id != 0:
                continue
            at = rf.BORNHOST_POS + rf.bornhost_length(sys_flag) + 8 + rf.storehost_length(sys_flag)
            body_len = rf.MID.unpack_from(rec, at)[2]
            at += rf.MID.size + body_len
            if magic == rf.MAGIC_V2:
                topic_len, at = int.from_bytes(rec[at:at + 2], "big"), at + 2
            else:
                topic_len, at = rec[at], at + 1
            if rec[at:at + topic_len] == rf.TIMER_TOPIC.encode():
                out[i] = head[5]
    finally:
        for fd in opened.values():
            os.close(fd)
    return out


def judge_units(scan: ts.TimerLogScan, queue: TimerQueue, cut: int) -> UnitVerdicts:
    """Each unit live or dropped: pointing at or past the truncation point ``cut``; below it but
    not at an rmq_sys_wheel_timer record of that size (a stale unit the broker would resolve to
    another message, apache/rocketmq #10668); a second unit of one record (kill -9 with a stale
    timercheck, #11047 #6984: the first one stays, the dequeue would deliver it twice)."""
    u = scan.units
    offset_py = u["offset_py"].astype(np.int64)
    size_py = u["size_py"].astype(np.int64)
    return judge(offset_py, size_py, queue.lookup(offset_py, size_py), cut)


def judge(offset_py: np.ndarray, size_py: np.ndarray, qo: np.ndarray, cut: int) -> UnitVerdicts:
    """``judge_units`` given each unit's queue offset (-1: not at a timer record of its size)."""
    first = np.zeros(len(offset_py), bool)
    if len(offset_py):
        _, idx = np.unique(offset_py, return_index=True)
        first[idx] = True
    beyond = offset_py + np.maximum(size_py, 0) > cut
    dropped = np.select([beyond, qo < 0, ~first], [BEYOND_CUT, NOT_TIMER_RECORD, DUPLICATE], None)
    return UnitVerdicts(qo, dropped.astype(object))


def enqueue_chains(units: np.ndarray, pos: np.ndarray, precision_ms: int) -> tuple[np.ndarray, np.ndarray]:
    """Replay TimerMessageStore#doEnqueue for ``units`` in log order at positions ``pos`` on an
    empty wheel: each unit's prev_pos (the slot's last unit when its time matches, else -1) and
    the wheel (slot time, first, last, num: +1 a unit, -1 a delete marker)."""
    wheel = np.zeros(ts.WHEEL_SLOTS, ts.SLOT_DTYPE)
    prev = np.full(len(units), -1, np.int64)
    if not len(units):
        return prev, wheel
    delayed = units["curr_write_time_ms"].astype(np.int64) + units["delay_ms"].astype(np.int64)
    t = delayed // precision_ms
    idx = t % ts.WHEEL_SLOTS
    order = np.argsort(idx, kind="stable")              # log order within a slot index
    si, st, sp = idx[order], t[order], pos[order]
    same = np.zeros(len(order), bool)
    same[1:] = (si[1:] == si[:-1]) & (st[1:] == st[:-1])
    prev[order[1:]] = np.where(same[1:], sp[:-1], -1)
    # the slot holds its last run of one time: first = the run's first unit, num = its count
    last = np.ones(len(order), bool)
    last[:-1] = si[:-1] != si[1:]
    run_start = np.maximum.accumulate(np.where(~same, np.arange(len(order)), 0))
    step = np.where((units["magic"][order] & ts.MAGIC_DELETE) != 0, -1, 1)
    csum = np.cumsum(step)
    before = np.where(run_start > 0, csum[run_start - 1], 0)
    ends = np.flatnonzero(last)
    slots = wheel[si[ends]]
    slots["time_slot"] = st[ends]
    slots["first_pos"] = sp[run_start[ends]]
    slots["last_pos"] = sp[ends]
    slots["num"] = csum[ends] - before[ends]
    wheel[si[ends]] = slots
    return prev, wheel


def reached_units(pos: np.ndarray, prev_pos: np.ndarray, wheel: np.ndarray, read_from_ms: int,
                  precision_ms: int) -> np.ndarray:
    """Which units TimerMessageStore#dequeue reaches: slots whose time is at or after
    ``read_from_ms`` (the dequeue never goes back), from last_pos through prev_pos; the chains are
    walked side by side, one vector step per link."""
    reached = np.zeros(len(pos), bool)
    t = wheel["time_slot"].astype(np.int64)
    live = (t * precision_ms >= read_from_ms) & (t % ts.WHEEL_SLOTS == np.arange(ts.WHEEL_SLOTS))
    frontier = wheel["last_pos"][live].astype(np.int64)
    while frontier.size:
        i = np.searchsorted(pos, frontier)
        ok = (i < len(pos)) & (pos[np.minimum(i, len(pos) - 1)] == frontier) if len(pos) else frontier < -1
        i = i[ok]
        i = i[~reached[i]]
        reached[i] = True
        frontier = prev_pos[i]
        frontier = frontier[frontier != -1]
    return reached


@dataclass
class TimerRecover:
    """What TimerMessageStore#recover ends with (``recover``)."""
    process_offset: int               # the timer log's end after recoverAndRevise
    revised_queue_offset: int         # reviseQueueOffset's answer, -1: the checkpoint's is used
    curr_queue_offset: int            # where the enqueue service reads rmq_sys_wheel_timer/0 next
    curr_read_time_ms: int            # the first slot the dequeue reads
    enqueued_again: int               # entries from currQueueOffset on that have a unit: enqueued twice
    never_enqueued: int               # entries from currQueueOffset on without one: enqueued now
    skipped: int                      # entries after the last one with a unit, before currQueueOffset:
                                      # never enqueued
    notes: list[str] = field(default_factory=list)


def recover(scan: ts.TimerLogScan, verdicts: UnitVerdicts, check: ts.TimerCheck, queue: TimerQueue,
            cut: int, now_ms: int, precision_ms: int) -> TimerRecover:
    """TimerMessageStore#recover on this timer store, against ``queue`` as the broker serves it.

    1. recoverAndRevise from one file before lastTimerLogFlushPos checks every unit to the end:
       the log ends at the first invalid unit (``scan.end``; files after it are deleted);
    2. reviseQueueOffset: the message of the last unit (the 24 bytes before processOffset), its
       entry in the timer queue found from its own queue offset looking back up to 20,000;
       currQueueOffset = that + 1, or lastTimerQueueOffset when the message cannot be read;
    3. min with masterTimerQueueOffset, then into the queue's [min, max];
    4. currReadTimeMs = lastReadTimeMs, at least now - slotsTotal + TIMER_BLANK_SLOTS slots."""
    notes: list[str] = []
    n = len(scan.units)
    revised = -1
    if n and scan.pos[-1] + ts.UNIT_SIZE == scan.end:
        last = scan.units[-1]
        if int(last["offset_py"]) + int(last["size_py"]) <= cut and verdicts.queue_offset[-1] >= 0:
            revised = int(verdicts.queue_offset[-1])
        elif int(last["size_py"]) > 0 and int(last["offset_py"]) + int(last["size_py"]) <= cut:
            # getData succeeds there: if the bytes decode, reviseQueueOffset takes that message's
            # own queue offset (not predicted: the checkpoint's is assumed)
            notes.append("the last unit points below the cut at bytes that are not its timer record: "
                         "the resume offset is uncertain")
    curr = check.last_timer_queue_offset if revised == -1 else revised + 1
    curr = min(curr, check.master_timer_queue_offset)
    curr = min(max(curr, queue.min_offset), queue.max_offset)
    floor = now_ms // precision_ms * precision_ms - (ts.SLOTS_TOTAL - TIMER_BLANK_SLOTS) * precision_ms
    read = max(check.last_read_time_ms, floor)
    has_unit = np.zeros(max(queue.max_offset - queue.min_offset, 0), bool)
    live_qo = verdicts.queue_offset[verdicts.live]
    has_unit[live_qo[(live_qo >= queue.min_offset) & (live_qo < queue.max_offset)] - queue.min_offset] = True
    rel = curr - queue.min_offset
    after_last_unit = int(np.flatnonzero(has_unit)[-1]) + 1 if has_unit.any() else 0
    return TimerRecover(scan.end, revised, curr, read,
                        enqueued_again=int(has_unit[rel:].sum()),
                        never_enqueued=int((~has_unit[rel:]).sum()),
                        skipped=max(0, rel - after_last_unit),
                        notes=notes)


@dataclass
class RepairedTimerStore:
    """What the repair wrote: counts for the report and MANIFEST.json."""
    units_in: int
    units_kept: int
    dropped: dict[str, int]
    queue_offset: int                 # lastTimerQueueOffset = masterTimerQueueOffset written
    timer_log_end: int
    slots: int
    files: list[str]
    check_in: dict
    check_out: dict

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def check_timer_store(config: BrokerConfig, broker_5x: bool) -> None:
    """Refuse, before any work, a timer store this package cannot repair exactly."""
    from store_reader.exceptions import StoreReaderError
    if broker_5x and config.timerWheelEnable and config.timerRocksDBEnable:
        raise StoreReaderError("timerRocksDBEnable=true: the timer messages are scheduled in a RocksDB "
                               "timeline this tool does not recover; recover the store without it or "
                               "by hand", config.source)


def repair_timer_store(src_root: str, dest_root: str, config: BrokerConfig, queue: TimerQueue,
                       cut: int) -> RepairedTimerStore | None:
    """The repaired store's timerlog/, timerwheel and config/timercheck (``config/`` must be
    copied first: timercheck is replaced there).

    1. read every unit of the input's timer log as the broker's recovery walks it;
    2. keep the live ones (``judge_units``) in log order, from the log's first file on;
    3. replay doEnqueue for them: new positions, prev_pos chains and a wheel whose slots reach
       every kept unit;
    4. timercheck: lastTimerLogFlushPos the new end (the broker's rescan finds the same wheel),
       lastTimerQueueOffset = masterTimerQueueOffset = the queue offset after the last kept
       unit's entry, the one reviseQueueOffset finds (no unit: the checkpoint's, into the
       queue's range), so the enqueue service reads exactly the entries without a unit;
       lastReadTimeMs and the data version kept.

    None when the store has no timer store (timerWheelEnable off, or no timer files). A store whose
    timer store lives in RocksDB (``timerRocksDBEnable``, 5.4+) is refused by ``check_timer_store``."""
    log_dir = os.path.join(src_root, ts.TIMERLOG_DIR)
    wheel_path = os.path.join(src_root, ts.TIMERWHEEL_FILE)
    check_path = os.path.join(src_root, "config", ts.TIMERCHECK_FILE)
    if not config.timerWheelEnable or not (os.path.isdir(log_dir) or os.path.exists(wheel_path)
                                           or os.path.exists(check_path)):
        return None
    precision = config.timerPrecisionMs
    scan = ts.scan_timerlog(log_dir, config.mappedFileSizeTimerLog)                   # 1
    verdicts = judge_units(scan, queue, cut)
    live = verdicts.live                                                               # 2
    kept = scan.units[live].copy()
    qo = verdicts.queue_offset[live]
    out_dir = os.path.join(dest_root, ts.TIMERLOG_DIR)
    os.makedirs(out_dir, exist_ok=True)
    pos = ts.unit_positions(len(kept), scan.base, config.mappedFileSizeTimerLog)        # 3
    prev, wheel = enqueue_chains(kept, pos, precision)
    kept["prev_pos"] = prev
    end, files = ts.write_timerlog(out_dir, kept, scan.base, config.mappedFileSizeTimerLog)
    ts.write_wheel(os.path.join(dest_root, ts.TIMERWHEEL_FILE), wheel)
    check = ts.read_timercheck(check_path)                                              # 4
    if len(kept):
        q = int(qo[-1]) + 1
    else:
        q = min(max(min(check.last_timer_queue_offset, check.master_timer_queue_offset), queue.min_offset),
                queue.max_offset)
    new = ts.TimerCheck(check.last_read_time_ms, end, q, q, check.state_version, check.data_timestamp,
                        check.data_counter, True)
    os.makedirs(os.path.join(dest_root, "config"), exist_ok=True)
    ts.write_timercheck(os.path.join(dest_root, "config", ts.TIMERCHECK_FILE), new)
    reasons, counts = np.unique(verdicts.dropped[~live].astype(str), return_counts=True)
    dropped = {str(r): int(n) for r, n in zip(reasons, counts)}
    if scan.bad_at is not None:
        dropped["timer.torn_log"] = 1
    return RepairedTimerStore(len(scan.units), len(kept), dropped, q, end,
                              int((wheel["time_slot"] != 0).sum()),
                              [os.path.relpath(f, dest_root) for f in files],
                              check.as_dict(), new.as_dict())


def stage_remote(root, dest: str) -> str:
    """A local copy under ``dest`` of a remote store's timer files (``timerlog/``, ``timerwheel``,
    ``config/timercheck``), read in chunks through ``storefs``; returns ``dest``."""
    from store_reader.io.fsutil import walk_files
    wanted = [ts.TIMERWHEEL_FILE, os.path.join("config", ts.TIMERCHECK_FILE)]
    if (root / ts.TIMERLOG_DIR).is_dir():
        wanted += [os.path.join(ts.TIMERLOG_DIR, rel) for rel, _, _ in walk_files(root / ts.TIMERLOG_DIR)]
    for rel in wanted:
        src = root / rel
        if not src.is_file():
            continue
        os.makedirs(os.path.dirname(os.path.join(dest, rel)), exist_ok=True)
        with open(os.path.join(dest, rel), "wb") as out, src.open_reader() as r:
            for at in range(0, r.size, 8 << 20):
                out.write(r.read_at(at, min(8 << 20, r.size - at)))
    return dest


def timer_queue_of(consumequeue_dir: str, cq_file_size: int) -> TimerQueue:
    """The rmq_sys_wheel_timer/0 entries of a consume queue directory as written (the repaired
    store's: every entry valid, from its min offset)."""
    from store_reader.formats.consumequeue import read_queue, valid_mask
    from store_reader.formats.recordformat import TIMER_TOPIC
    qdir = os.path.join(consumequeue_dir, TIMER_TOPIC, "0")
    if not os.path.isdir(qdir):
        e = np.zeros(0, np.int64)
        return TimerQueue(e, e, e, 0, 0)
    t = read_queue(qdir, TIMER_TOPIC, 0, cq_file_size, rocketmq5=True)
    phy = t["phy_offset"].to_numpy()
    size = t["size"].to_numpy().astype(np.int64)
    off = t["queue_offset"].to_numpy()
    ok = valid_mask(phy, size)
    phy, size, off = phy[ok], size[ok], off[ok]
    return TimerQueue(off, phy, size, int(off[0]) if len(off) else 0, int(off[-1]) + 1 if len(off) else 0)
