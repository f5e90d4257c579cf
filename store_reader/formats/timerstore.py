"""The 5.x timer store's files, read and written in one place: ``timerlog/`` (52-byte units),
``timerwheel`` (32-byte slots) and ``config/timercheck``.

Spec ``store-format.md`` §15 (layouts, RocketMQ 5.3.3 / 5.4.0 / 5.5.1 ``TimerLog``, ``TimerWheel``,
``Slot``, ``TimerCheckpoint``). The broker's rules over them (recover, what the dequeue reaches)
are in ``timerrecovery``.

A timer log holds a unit per enqueue, a timer store a few per pending message: NumPy over a memory
map is its native path (a structured big-endian view, one vector compare per check); a unit is
never decoded one by one except in ``units_table`` for printing.
"""
from __future__ import annotations

import mmap
import os
import struct
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from schemas import TIMER_UNIT

from store_reader.exceptions import UnreadableFileError
from store_reader.formats.mappedfile import file_name, parse_file_name

# -- layouts (store-format §15) ---------------------------------------------------------------------
# TimerLog unit (TimerLog.UNIT_SIZE), big-endian like every ByteBuffer of the broker:
_UNIT_FIELDS = (
    ("size", ">i4"),             # always UNIT_SIZE
    ("prev_pos", ">i8"),         # the previous unit of the same slot, -1 for the first
    ("magic", ">i4"),            # MAGIC_DEFAULT 1 | MAGIC_ROLL 2 | MAGIC_DELETE 4
    ("curr_write_time_ms", ">i8"),
    ("delay_ms", ">i4"),         # delayed time - curr write time: the slot is their sum
    ("offset_py", ">i8"),        # the rmq_sys_wheel_timer record in the commitlog
    ("size_py", ">i4"),
    ("topic_hash", ">i4"),       # hash of REAL_TOPIC, for the metrics
    ("reserved", ">i8"),
)
UNIT_DTYPE = np.dtype([(n, c) for n, c in _UNIT_FIELDS])
UNIT_SIZE = UNIT_DTYPE.itemsize
UNIT_STRUCT = struct.Struct(">iqiqiqiiq")
OFFSET_PY_POS = UNIT_DTYPE.fields["offset_py"][1]     # TimerLog.UNIT_PRE_SIZE_FOR_MSG
# the filler closing a full file: its size (the rest of the file), 0L, the blank magic; 16 bytes
BLANK_STRUCT = struct.Struct(">iqi")
MIN_BLANK_LEN = BLANK_STRUCT.size
BLANK_MAGIC = struct.unpack(">i", struct.pack(">I", 0xBBCCDDEE ^ (1880681586 + 8)))[0]  # Java: + binds first
MAGIC_DEFAULT, MAGIC_ROLL, MAGIC_DELETE = 1, 2, 4
assert (UNIT_SIZE, OFFSET_PY_POS, MIN_BLANK_LEN) == (52, 28, 16)

# TimerWheel slot (Slot.SIZE); the wheel is 2 * slotsTotal of them, slotsTotal = 7 days of seconds
_SLOT_FIELDS = (
    ("time_slot", ">i8"),        # delayed time / timerPrecisionMs (not ms: TimerWheel#putSlot)
    ("first_pos", ">i8"),
    ("last_pos", ">i8"),         # the dequeue walks from here back through prev_pos
    ("num", ">i4"),
    ("magic", ">i4"),            # unused, 0
)
SLOT_DTYPE = np.dtype([(n, c) for n, c in _SLOT_FIELDS])
SLOT_SIZE = SLOT_DTYPE.itemsize
TIMER_WHEEL_TTL_DAY, DAY_SECS = 7, 24 * 3600
SLOTS_TOTAL = TIMER_WHEEL_TTL_DAY * DAY_SECS     # TimerMessageStore#slotsTotal, whatever the precision
WHEEL_SLOTS = 2 * SLOTS_TOTAL
WHEEL_LENGTH = WHEEL_SLOTS * SLOT_SIZE
assert (SLOT_SIZE, WHEEL_LENGTH) == (32, 38_707_200)

# config/timercheck (TimerCheckpoint): one OS page, these i64 first
_CHECK_FIELDS = ("last_read_time_ms", "last_timer_log_flush_pos", "last_timer_queue_offset",
                 "master_timer_queue_offset", "state_version", "data_timestamp", "data_counter")
CHECK_STRUCT = struct.Struct(">" + "q" * len(_CHECK_FIELDS))
CHECK_FILE_SIZE = 4096

TIMERLOG_DIR, TIMERWHEEL_FILE, TIMERCHECK_FILE = "timerlog", "timerwheel", "timercheck"


def magic_ok(magic: np.ndarray) -> np.ndarray:
    """TimerMessageStore#isMagicOK: only the low four bits may be set."""
    return (magic | 0xF) == 0xF


@dataclass(frozen=True)
class TimerCheck:
    """``config/timercheck`` (TimerCheckpoint); ``exists`` False: the broker starts from zeros."""
    last_read_time_ms: int = 0
    last_timer_log_flush_pos: int = 0
    last_timer_queue_offset: int = 0
    master_timer_queue_offset: int = 0
    state_version: int = 0
    data_timestamp: int = 0
    data_counter: int = 0
    exists: bool = False

    def encode(self) -> bytes:
        return CHECK_STRUCT.pack(*(getattr(self, f) for f in _CHECK_FIELDS)).ljust(CHECK_FILE_SIZE, b"\0")

    def as_dict(self) -> dict[str, int | bool]:
        return {f: getattr(self, f) for f in _CHECK_FIELDS + ("exists",)}


def read_timercheck(path: str) -> TimerCheck:
    """The broker maps one page whatever the length: bytes past the end read as zeros."""
    try:
        with open(path, "rb") as fh:
            data = fh.read(CHECK_FILE_SIZE)
    except FileNotFoundError:
        return TimerCheck()
    except OSError as exc:
        raise UnreadableFileError(f"cannot read timercheck: {exc.strerror}", path) from None
    data = data.ljust(CHECK_STRUCT.size, b"\0")
    return TimerCheck(*CHECK_STRUCT.unpack_from(data), exists=True)


def write_timercheck(path: str, check: TimerCheck) -> None:
    with open(path, "wb") as fh:
        fh.write(check.encode())


@dataclass
class TimerLogScan:
    """Every unit of a timerlog directory in log order, walked as ``recoverAndRevise`` walks it
    (each file from byte 0 in unit steps; the blank magic ends a file; a unit whose size is not
    52 or whose magic is not valid ends the log: the broker truncates there).

    ``units``: UNIT_DTYPE array; ``pos``: each unit's log position; ``files``: (base offset, path)
    of every file in name order; ``end``: where the walk stopped (the broker's processOffset when
    it checks from the first file); ``bad_at``: the position of the unit that stopped it, if any."""
    units: np.ndarray
    pos: np.ndarray
    files: list[tuple[int, str]]
    file_size: int
    end: int
    bad_at: int | None

    @property
    def base(self) -> int:
        return self.files[0][0] if self.files else 0

    def delayed_time_ms(self) -> np.ndarray:
        return self.units["curr_write_time_ms"].astype(np.int64) + self.units["delay_ms"].astype(np.int64)


def timerlog_files(directory: str) -> list[tuple[int, str]]:
    """(base offset, path) of the timerlog files in offset order (MappedFileQueue#load's names)."""
    if not os.path.isdir(directory):
        return []
    out = []
    for name in os.listdir(directory):
        path = os.path.join(directory, name)
        if os.path.isfile(path) and name.isdigit():
            out.append((parse_file_name(path), path))
    return sorted(out)


def scan_timerlog(directory: str, file_size: int) -> TimerLogScan:
    """Every unit of ``directory`` (``mappedFileSizeTimerLog`` files), vectorised per file."""
    files = timerlog_files(directory)
    units, positions = [], []
    end, bad_at = (files[0][0] if files else 0), None
    for base, path in files:
        with open(path, "rb") as fh:
            length = min(os.fstat(fh.fileno()).st_size, file_size)
            if length == 0:
                break
            with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
                n = length // UNIT_SIZE
                view = np.frombuffer(mm, dtype=UNIT_DTYPE, count=n).copy()
                blank = view["magic"] == BLANK_MAGIC
                bad = ~magic_ok(view["magic"]) | (view["size"] != UNIT_SIZE)
                stop = np.flatnonzero(blank | bad)
                k = int(stop[0]) if stop.size else n
                head = bytes(mm[k * UNIT_SIZE:k * UNIT_SIZE + MIN_BLANK_LEN])
                rest = np.frombuffer(mm, np.uint8, length - k * UNIT_SIZE, k * UNIT_SIZE)
                dirty = bool(rest.any())
                del rest                                  # the map closes only without views
        units.append(view[:k])
        positions.append(base + np.arange(k, dtype=np.int64) * UNIT_SIZE)
        end = base + k * UNIT_SIZE
        if len(head) == MIN_BLANK_LEN and BLANK_STRUCT.unpack(head)[2] == BLANK_MAGIC:
            continue                                  # a full file: the next one goes on
        if dirty or (base, path) != files[-1]:
            bad_at = end                              # torn or corrupt: the broker truncates here
        break
    # astype: concatenating structured arrays gives native byte order
    return TimerLogScan(np.concatenate(units).astype(UNIT_DTYPE) if units else np.zeros(0, UNIT_DTYPE),
                        np.concatenate(positions) if positions else np.zeros(0, np.int64),
                        files, file_size, end, bad_at)


def scan_timerlog_file(path: str, file_size: int) -> TimerLogScan:
    """``scan_timerlog`` of one file alone (what dump prints for it)."""
    scan = scan_timerlog(os.path.dirname(path), file_size)
    base = parse_file_name(path)
    keep = (scan.pos >= base) & (scan.pos < base + file_size)
    end = min(max(scan.end, base), base + file_size)
    bad = scan.bad_at if scan.bad_at is not None and base <= scan.bad_at < base + file_size else None
    return TimerLogScan(scan.units[keep], scan.pos[keep], [(base, path)], file_size, end, bad)


def read_wheel(path: str) -> np.ndarray | None:
    """The wheel's slots (SLOT_DTYPE, a private copy), None when there is no file; a file of
    another length is refused as the broker refuses it (``Timer wheel length ... != expected``)."""
    try:
        with open(path, "rb") as fh:
            length = os.fstat(fh.fileno()).st_size
            if length == 0:
                return None                   # the broker sets the length and starts from zeros
            if length != WHEEL_LENGTH:
                raise UnreadableFileError(f"timer wheel is {length} bytes, not {WHEEL_LENGTH}: the broker "
                                          "refuses to start", path, length)
            return np.fromfile(fh, dtype=SLOT_DTYPE, count=WHEEL_SLOTS)
    except FileNotFoundError:
        return None


def latest_wheel_snapshot(root: str) -> tuple[int, str] | None:
    """(flag, path) of the newest ``timerwheel.<flushPos>`` snapshot (5.4+ with
    ``timerWheelSnapshotFlush``: ``TimerWheel#getMaxSnapshotFlag``), None without one."""
    best = None
    for name in os.listdir(root) if os.path.isdir(root) else ():
        flag = name[len(TIMERWHEEL_FILE) + 1:]
        if name.startswith(TIMERWHEEL_FILE + ".") and flag.isdigit() and (best is None or int(flag) > best[0]):
            best = (int(flag), os.path.join(root, name))
    return best


def slot_index(delayed_time_ms: np.ndarray | int, precision_ms: int) -> np.ndarray | int:
    """TimerWheel#getSlotIndex."""
    return delayed_time_ms // precision_ms % WHEEL_SLOTS


def unit_positions(count: int, base: int, file_size: int) -> np.ndarray:
    """Where TimerLog#append puts ``count`` units from ``base``: a unit goes where the file still
    has room for it and a blank, otherwise a blank closes the file and the next one begins."""
    per_file = (file_size - MIN_BLANK_LEN) // UNIT_SIZE
    k = np.arange(count, dtype=np.int64)
    return base + (k // per_file) * file_size + (k % per_file) * UNIT_SIZE


def write_timerlog(directory: str, units: np.ndarray, base: int, file_size: int) -> tuple[int, list[str]]:
    """Write ``units`` (UNIT_DTYPE, their prev_pos right for ``unit_positions``) from ``base`` as
    TimerLog#append places them. Files are written at their full length (the unwritten rest a
    hole). Returns the end of the log and the files written."""
    per_file = (file_size - MIN_BLANK_LEN) // UNIT_SIZE
    units = units.astype(UNIT_DTYPE, copy=False)
    os.makedirs(directory, exist_ok=True)
    written: list[str] = []
    i, start, end = 0, base, base
    while i < len(units):
        chunk = units[i:i + per_file]
        path = os.path.join(directory, file_name(start))
        with open(path, "wb") as fh:
            fh.write(chunk.tobytes())
            end = start + len(chunk) * UNIT_SIZE
            if len(chunk) == per_file and i + per_file < len(units):
                fh.write(BLANK_STRUCT.pack(file_size - len(chunk) * UNIT_SIZE, 0, BLANK_MAGIC))
            fh.truncate(file_size)
        written.append(path)
        i += len(chunk)
        start += file_size
    return end, written


def write_wheel(path: str, slots: np.ndarray) -> None:
    """The wheel file, its unused slots a hole."""
    slots = slots.astype(SLOT_DTYPE, copy=False)
    with open(path, "wb") as fh:
        used = np.flatnonzero(slots["time_slot"] != 0)
        for i in used:
            fh.seek(int(i) * SLOT_SIZE)
            fh.write(slots[i:i + 1].tobytes())
        fh.truncate(WHEEL_LENGTH)


def units_table(scan: TimerLogScan) -> pa.Table:
    """The scan's units as Arrow (``schemas.TIMER_UNIT``): what dump prints and the data source
    serves."""
    u = scan.units
    bases = np.array([b for b, _ in scan.files], np.int64)
    names = np.array([file_name(int(b)) for b in bases], dtype=object)
    which = np.searchsorted(bases, scan.pos, side="right") - 1 if len(bases) else np.zeros(0, np.int64)
    cols = {"pos": scan.pos, "delayed_time_ms": scan.delayed_time_ms(), "file": names[which] if len(bases) else []}
    cols.update({n: u[n].astype(np.dtype(c).newbyteorder("=")) for n, c in _UNIT_FIELDS})
    schema = TIMER_UNIT.arrow()
    return pa.table({f.name: pa.array(cols[f.name], f.type) for f in schema}, schema=schema)
