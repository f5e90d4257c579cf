"""The 5.x timer store against the commitlog and the broker's recovery: ``store_findings`` rows
of kinds ``timer.*`` (``kinds.py``). Spark-free; reads the timer files and, per unit, the header
of the record it points at (``timerrecovery.unit_records``)."""
from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from store_reader.broker import timerrecovery as tr
from store_reader.formats import timerstore as ts
from store_reader.audit.report import Findings
from store_reader.exceptions import StoreReaderError
from store_reader.formats.recordformat import TIMER_TOPIC
from store_reader.store import Store

if TYPE_CHECKING:
    from store_reader.broker.prediction import Prediction

_DROPPED_TEXT = {
    tr.BEYOND_CUT: "pointing at or past the truncation point: the dequeue misses it and drops the message "
                   "silently; once the commitlog grows again it resolves to another message, delivered in "
                   "its place (apache/rocketmq #10668)",
    tr.NOT_TIMER_RECORD: "pointing below the truncation point at bytes that are not the rmq_sys_wheel_timer "
                         "record of that size: the dequeue delivers whatever is there, or misses",
    tr.DUPLICATE: "a second unit of one timer message: the dequeue delivers it twice (#11047, #6984)",
}


# what the broker's restart does to a unit (the notebook's chart, the report page's figure)
FATES = ("delivered", "delivered twice", "lost: past the cut", "lost: not its record", "duplicate unit",
         "never reached")
# the colour each is drawn in, in the notebook's chart and on the report page
FATE_COLOURS = {"delivered": "#4c78a8", "delivered twice": "#f58518", "lost: past the cut": "#e45756",
                "lost: not its record": "#b279a2", "duplicate unit": "#ff9da6", "never reached": "#9d755d"}
_DROPPED_FATE = {tr.BEYOND_CUT: "lost: past the cut", tr.NOT_TIMER_RECORD: "lost: not its record",
                 tr.DUPLICATE: "duplicate unit"}


@dataclass
class TimerPrediction:
    """The timer store through the broker's restart: the log as its recovery walks it, each
    unit's verdict, what TimerMessageStore#recover ends with, the pending units no chain reaches."""
    log_dir: Path
    check_path: Path
    scan: ts.TimerLogScan
    verdicts: tr.UnitVerdicts
    check: ts.TimerCheck
    recover: tr.TimerRecover
    unreached: np.ndarray

    def pending(self) -> np.ndarray:
        """Per unit: its deliver time is at or after the slot the dequeue starts from."""
        return self.scan.delayed_time_ms() >= self.recover.curr_read_time_ms

    def fates(self) -> np.ndarray:
        """Per unit, one of ``FATES``: dropped by the broker's recovery, delivered twice (its timer
        queue entry is at or after where the enqueue service resumes), never reached by a slot
        chain, or delivered."""
        fate = np.array([_DROPPED_FATE.get(d, "delivered") for d in self.verdicts.dropped], dtype=object)
        fate[(self.verdicts.queue_offset >= self.recover.curr_queue_offset) & self.verdicts.live] = \
            "delivered twice"
        fate[self.unreached] = "never reached"
        return fate


def timer_queue_range(pred: Prediction) -> tuple[int, int]:
    """[min, max) of rmq_sys_wheel_timer/0 after the broker's predicted recovery."""
    state = pred.consume_queues.get((TIMER_TOPIC, 0))
    return (state.min_offset, state.max_offset) if state else (0, 0)


def predict_timer(store: Store, cut: int, queue_range: tuple[int, int],
                  now_ms: int | None = None) -> TimerPrediction | None:
    """``TimerPrediction`` of a local 5.x store with a timer store (None without one), given the
    broker's truncation point ``cut`` and the [min, max) of the rmq_sys_wheel_timer queue it
    keeps. A timerwheel of the wrong length raises (the broker refuses to start)."""
    root = store.root
    cfg = store.config
    if not isinstance(root, Path) or not cfg.timerWheelEnable:
        return None
    log_dir = root / ts.TIMERLOG_DIR
    wheel_path = root / ts.TIMERWHEEL_FILE
    check_path = root / "config" / ts.TIMERCHECK_FILE
    if not (log_dir.is_dir() or wheel_path.exists()):
        return None
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    precision = cfg.timerPrecisionMs
    scan = ts.scan_timerlog(str(log_dir), cfg.mappedFileSizeTimerLog)
    qo = tr.unit_records(store.commitlog_files, scan.units, cut)
    v = tr.judge(scan.units["offset_py"].astype(np.int64), scan.units["size_py"].astype(np.int64), qo, cut)
    check = ts.read_timercheck(str(check_path))
    snapshot = ts.latest_wheel_snapshot(str(root)) if cfg.timerWheelSnapshotFlush else None
    if snapshot is not None:
        # 5.4+: the newest snapshot is the wheel; its flag, when positive, the flush position the
        # rescan starts from
        wheel_path = Path(snapshot[1])
        if snapshot[0] > 0:
            check = dataclasses.replace(check, last_timer_log_flush_pos=snapshot[0])
    wheel = ts.read_wheel(str(wheel_path))
    queue = tr.TimerQueue(qo[qo >= 0], np.zeros(0), np.zeros(0), *queue_range)
    rec = tr.recover(scan, v, check, queue, cut, now_ms, precision)
    # the wheel as the broker ends its recovery: recoverAndRevise re-links the slots of the units
    # it rescans (from one file before lastTimerLogFlushPos); every other slot is as on disk
    wheel = np.zeros(ts.WHEEL_SLOTS, ts.SLOT_DTYPE) if wheel is None else wheel.copy()
    begin = max(check.last_timer_log_flush_pos - cfg.mappedFileSizeTimerLog, 0)
    begin = max((f for f, _ in scan.files if f <= begin), default=scan.base)
    delayed = scan.delayed_time_ms()
    rescanned = scan.pos >= begin
    for p, t in zip(scan.pos[rescanned].tolist(), delayed[rescanned].tolist()):
        i = t // precision % ts.WHEEL_SLOTS
        if wheel["time_slot"][i] != t // precision:
            wheel[i] = (t // precision, p, p, wheel["num"][i], wheel["magic"][i])
        else:
            wheel["last_pos"][i] = p
    pending = delayed >= rec.curr_read_time_ms
    reached = tr.reached_units(scan.pos, scan.units["prev_pos"].astype(np.int64), wheel,
                               rec.curr_read_time_ms, precision)
    return TimerPrediction(log_dir, check_path, scan, v, check, rec, pending & v.live & ~reached)


def timer_findings(store: Store, cut: int, queue_range: tuple[int, int], found: Findings,
                   now_ms: int | None = None) -> None:
    """What the timer store holds that the broker's restart gets wrong (``predict_timer``)."""
    try:
        tp = predict_timer(store, cut, queue_range, now_ms)
    except StoreReaderError as exc:
        found.add("timer.wheel_file_size", exc.path or store.root, None, str(exc))
        return
    if tp is None:
        return
    scan, v, check, rec, log_dir, check_path = tp.scan, tp.verdicts, tp.check, tp.recover, tp.log_dir, tp.check_path
    found.files_checked += len(scan.files)
    def where(pos: int) -> tuple[str, int]:
        """(timerlog file, byte in it) of a log position."""
        base, path = max(((b, p) for b, p in scan.files if b <= pos), default=(0, str(log_dir)))
        return path, pos - base

    for kind, text in _DROPPED_TEXT.items():
        idx = np.flatnonzero(v.dropped == kind)
        if idx.size:
            found.add(kind, *where(int(scan.pos[idx[0]])), f"{idx.size} timer log unit(s) {text}",
                      phy_offset=int(scan.units["offset_py"][idx[0]]), count=int(idx.size))
    if scan.bad_at is not None:
        found.add("timer.torn_log", *where(scan.bad_at),
                  f"bytes that are not a timer log unit at log position {scan.bad_at}: the broker's "
                  "recoverAndRevise stops there and truncates the rest (units after it are lost)")
    if not check.exists or check.last_read_time_ms == 0:
        found.add("timer.read_time_unknown", check_path, None,
                  "no timercheck read time: the dequeue restarts 7 days back and delivers again every "
                  "slot of that week still in the wheel")
    if tp.unreached.any():
        i = int(np.flatnonzero(tp.unreached)[0])
        found.add("timer.unreachable_unit", *where(int(scan.pos[i])),
                  f"{int(tp.unreached.sum())} pending timer log unit(s) no slot chain of the wheel reaches "
                  "after the broker's recovery: never delivered", count=int(tp.unreached.sum()))
    if rec.enqueued_again:
        found.add("timer.enqueued_again", check_path, None,
                  f"the broker's recovery resumes the timer queue at {rec.curr_queue_offset} (timercheck "
                  f"{check.last_timer_queue_offset}/{check.master_timer_queue_offset}, last unit's entry "
                  f"{rec.revised_queue_offset}): {rec.enqueued_again} entries that already have a unit are "
                  "enqueued again and delivered twice (#11047, #6984)", count=rec.enqueued_again)
    for note in rec.notes:
        found.note("note.timer_resume_uncertain", check_path, None, note)
    if rec.skipped:
        found.add("timer.skipped_entries", check_path, None,
                  f"the broker's recovery resumes the timer queue at {rec.curr_queue_offset}: {rec.skipped} "
                  "entries without a unit before it are never enqueued (#7480)", count=rec.skipped)
