"""How ``jobs.dump`` prints the store's other files: a consume queue file (one line per slot, runs
of all-zero slots as one), an index file (header, entries in use, ``--deep``: the slot table and
entry times), the checkpoint, a config file (as parsed, and which generation the broker loads).
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from store_reader.dump.printer import Printer, iso_ms
from store_reader.formats import timerstore as ts
from store_reader.audit.files import broker_load
from store_reader.formats.checkpoint import read_checkpoint
from store_reader.formats.fastjson import parse_fastjson
from store_reader.formats.consumequeue import (ENTRY_INVALID, ENTRY_PRE_BLANK, ENTRY_VALID, logic_offset_of, slot_of,
                                               classify_entries, parse_file_name, read_queue_file)
from store_reader.exceptions import CannotRead, ConfigError, UnreadableFileError
from store_reader.formats.indexfile import HASH_SLOT_SIZE, INDEX_ENTRY_SIZE, IndexFile, entry_position, slot_position


# -- consume queues ------------------------------------------------------------------------------------

def _cq_entry_text(q: int, pos: int, phy: int, size: int, tags: int, kind: int) -> str:
    tail = {ENTRY_VALID: "", ENTRY_PRE_BLANK: " preBlank", ENTRY_INVALID: " INVALID"}[kind]
    return f"queueOffset: {q} position: {pos} phyOffset: {phy} size: {size} tagsCode: {tags}{tail}"


def dump_cq_file(p: Printer, path: Path, max_bytes: int | None) -> None:
    """Every slot of one consume queue file; runs of all-zero slots as one line."""
    start = parse_file_name(path)
    e = read_queue_file(path)
    kind = classify_entries(e.phy_offset, e.size, e.tags_code)
    zero = (e.phy_offset == 0) & (e.size == 0) & (e.tags_code == 0)
    n = len(kind)
    if max_bytes is not None:
        n = min(n, slot_of(max_bytes))
    kinds = {ENTRY_VALID: "valid", ENTRY_PRE_BLANK: "pre_blank", ENTRY_INVALID: "invalid"}
    i = 0
    while i < n:
        pos, q = logic_offset_of(i), slot_of(start + logic_offset_of(i))
        if zero[i]:
            j = i
            while j < n and zero[j]:
                j += 1
            p.emit(f"# positions {pos}..{logic_offset_of(j) - 1}: {j - i} blank (all-zero) entries",
                   {"type": "cq_blank", "file": str(path), "position": pos, "queue_offset": q,
                    "count": j - i})
            i = j
            continue
        phy, size, tags, k = int(e.phy_offset[i]), int(e.size[i]), int(e.tags_code[i]), int(kind[i])
        p.emit(_cq_entry_text(q, pos, phy, size, tags, k),
               {"type": "cq_entry", "file": str(path), "position": pos, "queue_offset": q,
                "phy_offset": phy, "size": size, "tags_code": tags, "kind": kinds[k]})
        i += 1
    if n < len(kind):
        p.emit(f"# stopped at --max-bytes {max_bytes}",
               {"type": "stopped", "file": str(path), "max_bytes": max_bytes})


# -- index files -------------------------------------------------------------------------------------

def dump_index_file(p: Printer, f: IndexFile, deep: bool, max_bytes: int | None) -> None:
    """Header, then the entries in use (and with ``--deep`` the slot table and entry times)."""
    h = f.header
    p.emit(f"header: beginTimestamp: {h.begin_timestamp} ({iso_ms(h.begin_timestamp)}) endTimestamp: "
           f"{h.end_timestamp} ({iso_ms(h.end_timestamp)}) beginPhyOffset: {h.begin_phy_offset} "
           f"endPhyOffset: {h.end_phy_offset} hashSlotCount: {h.hash_slot_count} "
           f"indexCount: {h.index_count}",
           {"type": "index_header", "file": f.path, **h.to_dict()})
    limit = max_bytes
    if deep:
        slots = f.slots[:]           # one read (a remote file's slots are read on demand)
        for s in np.flatnonzero(slots):
            pos = slot_position(int(s))
            if limit is not None and pos + HASH_SLOT_SIZE > limit:
                break
            p.emit(f"slot: {int(s)} position: {pos} entry: {int(slots[s])}",
                   {"type": "index_slot", "file": f.path, "slot": int(s), "position": pos,
                    "entry_number": int(slots[s])})
    for row in f.entries_table().to_pylist():
        n = row["entry_number"]
        pos = entry_position(f.hash_slot_num, n)
        if limit is not None and pos + INDEX_ENTRY_SIZE > limit:
            p.emit(f"# stopped at --max-bytes {max_bytes}",
                   {"type": "stopped", "file": f.path, "max_bytes": max_bytes})
            break
        text = (f"entry: {n} position: {pos} keyHash: {row['key_hash']} slot: {row['slot']} "
                f"phyOffset: {row['phy_offset']} timeDiff: {row['time_diff']} "
                f"prevIndex: {row['prev_index']}")
        obj = {"type": "index_entry", "file": f.path, "position": pos,
               **{k: v for k, v in row.items() if k != "file"}}
        if deep:
            # the time a query compares: beginTimestamp + timeDiff seconds (F§7.4)
            t = h.begin_timestamp + row["time_diff"] * 1000
            text += f" time: {iso_ms(t)}"
            obj["time"] = t
        p.emit(text, obj)


# -- checkpoint and config -----------------------------------------------------------------------------

def dump_checkpoint(p: Printer, path: Path) -> None:
    c = read_checkpoint(path)
    if not c.exists:
        raise CannotRead("checkpoint does not exist", path)
    fields = ("physic_msg_timestamp", "logics_msg_timestamp", "index_msg_timestamp")
    text = " ".join(f"{_camel(n)}: {getattr(c, n)} ({iso_ms(getattr(c, n))})" for n in fields)
    p.emit(f"checkpoint: {text} masterFlushedOffset: {c.master_flushed_offset} confirmPhyOffset: "
           f"{c.confirm_phy_offset} minTimestamp: {c.min_timestamp} minTimestampIndex: "
           f"{c.min_timestamp_index} length: {c.file_length} usedBytes: {c.used_bytes}",
           {"type": "checkpoint", "file": str(path), **{n: getattr(c, n) for n in fields},
            "master_flushed_offset": c.master_flushed_offset,
            "confirm_phy_offset": c.confirm_phy_offset, "min_timestamp": c.min_timestamp,
            "min_timestamp_index": c.min_timestamp_index, "file_length": c.file_length,
            "used_bytes": c.used_bytes})


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(w.title() for w in rest)


def dump_config(p: Printer, path: Path) -> None:
    """The file's document as parsed, and which generation the broker would load."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise CannotRead("config file does not exist", path) from None
    except OSError as exc:
        raise UnreadableFileError(f"cannot read config file: {exc.strerror}", path) from None
    doc = parse_fastjson(data.decode("utf-8", errors="replace"), path=path)
    p.emit(lambda: json.dumps(doc, ensure_ascii=False, indent=2),
           {"type": "config", "file": str(path), "content": doc})
    try:
        load = broker_load(path)
        verdict = f"{load.generation} ({load.used_path or '-'})"
        if load.skipped_reason:
            verdict += f"; skipped the current file: {load.skipped_reason}"
    except ConfigError as exc:
        verdict = f"refuses to start: {exc}"
    p.emit(f"# the broker loads: {verdict}",
           {"type": "config_load", "file": str(path), "verdict": verdict})


# -- the 5.x timer store ------------------------------------------------------------------------------

def dump_timerlog_file(p: Printer, path: Path, file_size: int, max_bytes: int | None) -> None:
    """One line per unit of one timerlog file, as the broker's recovery walks it."""
    scan = ts.scan_timerlog_file(str(path), file_size)
    for u in ts.units_table(scan).to_pylist():
        if max_bytes is not None and u["pos"] - scan.base + ts.UNIT_SIZE > max_bytes:
            break
        p.emit(lambda u=u: f"pos: {u['pos']} prevPos: {u['prev_pos']} magic: {u['magic']} delayedTime: "
               f"{u['delayed_time_ms']} ({iso_ms(u['delayed_time_ms'])}) writeTime: {u['curr_write_time_ms']} "
               f"offsetPy: {u['offset_py']} sizePy: {u['size_py']} topicHash: {u['topic_hash']}",
               {"type": "timer_unit", **u, "file": str(path)})
    p.emit(f"end: log position {scan.end}" + ("" if scan.bad_at is None else
                                               f", not a unit at {scan.bad_at}: the broker truncates there"),
           {"type": "timerlog_end", "file": str(path), "end": scan.end, "bad_at": scan.bad_at})


def dump_timerwheel(p: Printer, path: Path, precision_ms: int) -> None:
    """One line per slot in use: its time, first and last unit, count."""
    wheel = ts.read_wheel(str(path))
    if wheel is None:
        raise CannotRead("timer wheel does not exist or is empty", path)
    for i in np.flatnonzero(wheel["time_slot"] != 0):
        s = wheel[i]
        t = int(s["time_slot"]) * precision_ms
        p.emit(lambda i=i, s=s, t=t: f"slot: {i} time: {t} ({iso_ms(t)}) firstPos: {int(s['first_pos'])} "
               f"lastPos: {int(s['last_pos'])} num: {int(s['num'])}",
               {"type": "timer_slot", "file": str(path), "slot": int(i), "time_ms": t,
                "first_pos": int(s["first_pos"]), "last_pos": int(s["last_pos"]), "num": int(s["num"])})


def dump_timercheck(p: Printer, path: Path) -> None:
    c = ts.read_timercheck(str(path))
    if not c.exists:
        raise CannotRead("timercheck does not exist", path)
    d = c.as_dict()
    p.emit(f"timercheck: lastReadTimeMs: {c.last_read_time_ms} ({iso_ms(c.last_read_time_ms)}) "
           f"lastTimerLogFlushPos: {c.last_timer_log_flush_pos} lastTimerQueueOffset: "
           f"{c.last_timer_queue_offset} masterTimerQueueOffset: {c.master_timer_queue_offset} dataVersion: "
           f"{c.state_version}/{c.data_timestamp}/{c.data_counter}", {"type": "timercheck", "file": str(path), **d})
