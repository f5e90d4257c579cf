"""How ``jobs.dump`` prints a store's files: one line per record / entry (text or JSON lines),
the segment ends, the store overview. Decoding is ``store_reader``'s; this only formats."""
from __future__ import annotations

import base64
import datetime as dt
import json
from pathlib import Path
from typing import Any, Callable, TextIO

import numpy as np

from schemas import MESSAGE
from store_reader import recordformat as rf
from store_reader.audit.files import broker_load
from store_reader.audit.index import index_entry_position
from store_reader.audit.view import TRAN_NAMES, StoreView
from store_reader.checkpoint import lock_status, read_checkpoint
from store_reader.commitlog import SegmentScan, SegmentSummary
from store_reader.config import parse_fastjson
from store_reader.consumequeue import (CQ_STORE_UNIT_SIZE, ENTRY_INVALID, ENTRY_PRE_BLANK, ENTRY_VALID,
                                       classify_entries, list_queues, parse_file_name, read_queue_file)
from store_reader.exceptions import CannotRead, ConfigError, StoreReaderError, UnreadableFileError
from store_reader.fsutil import list_dir
from store_reader.indexfile import HASH_SLOT_SIZE, INDEX_ENTRY_SIZE, INDEX_HEADER_SIZE, IndexFile, read_header
from store_reader.mappedfile import MappedFile
from store_reader.storefs import StoreLocation

SCAN_BATCH = 4096                 # records per scanner call while printing (bounds --max-bytes work)

# Header fields printed by default; --deep prints every MESSAGE column but the body.
DEFAULT_RECORD_COLUMNS = ["phy_offset", "total_size", "topic", "queue_id", "queue_offset",
                          "store_timestamp", "keys", "msg_id", "body_crc_ok", "record_crc_ok"]
DEEP_RECORD_COLUMNS = [n for n in MESSAGE.names if n not in ("valid_prefix", "body")]
# What the verifier keeps of every intact record: enough to check CQ and index entries against it.


# -- formatting helpers -------------------------------------------------------------------------------

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


def _dash(value: Any) -> Any:
    return "-" if value is None else value


def iso_ms(ms: int | None) -> str:
    """Epoch milliseconds as ISO-8601 UTC (the raw number when out of range)."""
    if ms is None:
        return "-"
    try:
        return (_EPOCH + dt.timedelta(milliseconds=ms)).isoformat(timespec="milliseconds") \
            .replace("+00:00", "Z")
    except OverflowError:
        return str(ms)


def body_text(body: bytes) -> tuple[str, str]:
    """(encoding, text): the body as UTF-8 when it decodes and prints, else base64."""
    try:
        text = body.decode("utf-8")
        if all(c.isprintable() or c in "\n\r\t" for c in text):
            return "utf8", text
    except UnicodeDecodeError:
        pass
    return "base64", base64.b64encode(body).decode("ascii")


def sys_flag_text(flag: int) -> str:
    """SYSFLAG with its bits named (F§3.5)."""
    names = [TRAN_NAMES[flag & rf.TRANSACTION_MASK]]
    for bit, name in ((rf.COMPRESSED_FLAG, "compressed"), (rf.MULTI_TAGS_FLAG, "multiTags"),
                      (rf.BORNHOST_V6_FLAG, "bornHostV6"), (rf.STOREHOSTADDRESS_V6_FLAG, "storeHostV6"),
                      (rf.NEED_UNWRAP_FLAG, "needUnwrap"), (rf.INNER_BATCH_FLAG, "innerBatch")):
        if flag & bit:
            names.append(name)
    if flag & rf.COMPRESSION_TYPE_MASK:
        names.append(f"compressionType={(flag & rf.COMPRESSION_TYPE_MASK) >> 8}")
    return f"0x{flag & 0xFFFFFFFF:x} ({','.join(names)})"


def _crc_text(row: dict[str, Any]) -> str:
    verdict = {True: "ok", False: "BAD", None: "n/a"}
    text = f"crc {verdict[row['body_crc_ok']]}"
    if row.get("record_crc_ok") is not None:
        text += f" recordCrc {verdict[row['record_crc_ok']]}"
    return text


class Printer:
    """Text lines or JSON lines on one stream."""

    def __init__(self, out: TextIO, as_json: bool) -> None:
        self.out = out
        self.json = as_json

    def emit(self, text: str | Callable[[], str], obj: dict[str, Any] | Callable[[], dict[str, Any]]
             ) -> None:
        """Print ``obj`` (JSON mode) or ``text``; either may be a callable, built only if used."""
        if self.json:
            value = obj() if callable(obj) else obj
            self.out.write(json.dumps(value, ensure_ascii=False, default=_json_default) + "\n")
        else:
            self.out.write((text() if callable(text) else text) + "\n")


def _json_default(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, (Path, StoreLocation)):   # a file of a remote store: its URI
        return str(value)
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


# -- commitlog ------------------------------------------------------------------------------------

def _record_columns(deep: bool, body: bool) -> list[str]:
    cols = list(DEEP_RECORD_COLUMNS if deep else DEFAULT_RECORD_COLUMNS) + ["valid_prefix"]
    return cols + (["body"] if body else [])


def record_json(row: dict[str, Any], path: str, position: int) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "record", "file": path, "position": position}
    for name, value in row.items():
        if name == "body":
            if value is not None:
                out["body_encoding"], out["body"] = body_text(value)
        elif name == "properties":
            out[name] = dict(value) if value is not None else None
        else:
            out[name] = value
    return out


def record_text(row: dict[str, Any], position: int, deep: bool) -> str:
    parts = [f"offset: {row['phy_offset']} position: {position} size: {row['total_size']}",
             f"topic: {row['topic']} queueId: {row['queue_id']} queueOffset: {row['queue_offset']}",
             f"storeTime: {iso_ms(row['store_timestamp'])}",
             f"keys: {_dash(row['keys'])}",
             f"msgId: {row['msg_id']}", _crc_text(row)]
    if deep:
        props = dict(row["properties"]) if row["properties"] is not None else None
        parts += [f"magic: v{row['version']} bodyCrc: {row['body_crc']} flag: {row['flag']}",
                  f"sysFlag: {sys_flag_text(row['sys_flag'])}",
                  f"bornTime: {iso_ms(row['born_timestamp'])} bornHost: {row['born_host']}",
                  f"storeHost: {row['store_host']} reconsumeTimes: {row['reconsume_times']}",
                  f"preparedTransactionOffset: {row['prepared_transaction_offset']}",
                  f"bodyLength: {row['body_length']} storedPhyOffset: {row['stored_phy_offset']}",
                  f"tags: {_dash(row['tags'])} tagsCode: {row['tags_code']}",
                  f"uniqKey: {_dash(row['uniq_key'])} realTopic: {_dash(row['real_topic'])}",
                  f"realQueueId: {_dash(row['real_queue_id'])} delayLevel: {_dash(row['delay_level'])}",
                  f"transactionPrepared: {str(row['transaction_prepared']).lower()}",
                  f"properties: {json.dumps(props, ensure_ascii=False)}"]
    if "body" in row and row["body"] is not None:
        encoding, text = body_text(row["body"])
        parts.append(f"body: {json.dumps(text, ensure_ascii=False)}" if encoding == "utf8"
                     else f"body(base64): {text}")
    if not row["valid_prefix"]:
        parts.append("lost: behind the segment's first bad record")
    return " ".join(parts)


def _end_line(p: Printer, path: str, s: SegmentSummary) -> None:
    """Where and why the valid prefix ended (R§4.2)."""
    pos, phy = s.valid_bytes, s.end_phy_offset
    base = {"type": "segment_end", "file": path, "position": pos, "phy_offset": phy,
            "end_reason": s.end_reason}
    if s.end_reason == "eof_marker":
        extra = " bytes after it are not zero" if s.nonzero_after_marker else ""
        p.emit(f"offset: {phy} position: {pos} END-OF-FILE marker (declared size "
               f"{s.blank_declared_size}){extra}",
               {**base, "declared_size": s.blank_declared_size,
                "nonzero_after_marker": s.nonzero_after_marker})
    elif s.end_reason == "zero_padding":
        p.emit(f"# zero padding from position {pos} to {s.file_size}", base)
    elif s.end_reason in ("torn_tail", "corrupt"):
        what = "torn tail: nothing intact after it" if s.end_reason == "torn_tail" else \
            f"corrupt: intact records resume at position {s.resync_position}"
        p.emit(f"offset: {phy} position: {pos} INVALID {s.end_check} (declared size "
               f"{s.end_declared_size}) {what}",
               {**base, "end_check": s.end_check, "declared_size": s.end_declared_size,
                "resync_position": s.resync_position})


def _summary_line(p: Printer, s: SegmentSummary) -> None:
    end = s.end_reason + (f" ({s.end_check})" if s.end_check else "")
    lost = f"; {s.records_after_cut} intact records after the cut" if s.records_after_cut else ""
    p.emit(f"# segment {s.segment}: {s.records} records in {s.valid_bytes} of {s.file_size} bytes, "
           f"end: {end} at position {s.valid_bytes} (phy {s.end_phy_offset}){lost}",
           lambda: {"type": "segment", **s.as_row(), "lost_ranges": [list(r) for r in s.lost_ranges]})


def dump_segment(p: Printer, view: StoreView, f: MappedFile, deep: bool, body: bool,
                 max_bytes: int | None) -> None:
    """Every record of one segment, the end of its valid prefix, the lost records behind it."""
    scan = SegmentScan(f.path, view.opts, columns=_record_columns(deep, body), include_lost=True,
                       batch_size=SCAN_BATCH)
    s = scan.summary
    cut_shown = stopped = False
    batches = iter(scan)
    try:
        for batch in batches:
            for row in batch.to_pylist():
                position = row["phy_offset"] - f.start
                if max_bytes is not None and position + row["total_size"] > max_bytes:
                    stopped = True
                    break
                if not row["valid_prefix"] and not cut_shown:
                    _end_line(p, f.path, s)        # the bad record comes before what is lost behind it
                    cut_shown = True
                p.emit(lambda: record_text(row, position, deep),
                       lambda: record_json(row, f.path, position))
            if stopped:
                break
    finally:
        close = getattr(batches, "close", None)
        if close is not None:
            close()                                # releases the segment's mmap
    if stopped:
        p.emit(f"# stopped at --max-bytes {max_bytes}",
               {"type": "stopped", "file": f.path, "max_bytes": max_bytes})
        return
    if not cut_shown and (max_bytes is None or s.valid_bytes < max_bytes):
        _end_line(p, f.path, s)
    _summary_line(p, s)


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
        n = min(n, max_bytes // CQ_STORE_UNIT_SIZE)
    kinds = {ENTRY_VALID: "valid", ENTRY_PRE_BLANK: "pre_blank", ENTRY_INVALID: "invalid"}
    i = 0
    while i < n:
        pos, q = i * CQ_STORE_UNIT_SIZE, (start + i * CQ_STORE_UNIT_SIZE) // CQ_STORE_UNIT_SIZE
        if zero[i]:
            j = i
            while j < n and zero[j]:
                j += 1
            p.emit(f"# positions {pos}..{j * CQ_STORE_UNIT_SIZE - 1}: {j - i} blank (all-zero) entries",
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
    limit = max_bytes if max_bytes is not None else None
    if deep:
        slots = f.slots[:]           # one read (a remote file's slots are read on demand)
        for s in np.flatnonzero(slots):
            pos = INDEX_HEADER_SIZE + int(s) * HASH_SLOT_SIZE
            if limit is not None and pos + HASH_SLOT_SIZE > limit:
                break
            p.emit(f"slot: {int(s)} position: {pos} entry: {int(slots[s])}",
                   {"type": "index_slot", "file": f.path, "slot": int(s), "position": pos,
                    "entry_number": int(slots[s])})
    for row in f.entries_table().to_pylist():
        n = row["entry_number"]
        pos = index_entry_position(f, n)
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


# -- the store overview -------------------------------------------------------------------------------

def dump_overview(p: Printer, view: StoreView) -> None:
    store, cfg = view.store, view.config
    hints = store.version_hints()
    p.emit(f"store: {store.root} broker config: {cfg.source or 'broker defaults'} generation: "
           f"{view.version} (hints: {', '.join(k for k in hints if k != 'broker_5x') or 'none'})",
           {"type": "store", "root": str(store.root), "broker_config": cfg.source,
            "broker_version": view.version, "hints": hints})
    p.emit(f"layout: mappedFileSizeCommitLog: {cfg.mappedFileSizeCommitLog} "
           f"mappedFileSizeConsumeQueue: {cfg.cq_file_size} ({cfg.cq_file_size // CQ_STORE_UNIT_SIZE} "
           f"entries) maxHashSlotNum: {cfg.maxHashSlotNum} maxIndexNum: {cfg.maxIndexNum} (index "
           f"file {cfg.index_file_size} bytes) checkCRCOnRecover: {str(cfg.checkCRCOnRecover).lower()}",
           {"type": "layout", "mapped_file_size_commitlog": cfg.mappedFileSizeCommitLog,
            "cq_file_size": cfg.cq_file_size, "max_hash_slot_num": cfg.maxHashSlotNum,
            "max_index_num": cfg.maxIndexNum, "index_file_size": cfg.index_file_size,
            "commitlog_dirs": [str(d) for d in store.commitlog_dirs]})
    p.emit(f"commitlog: {len(view.summaries)} segments in {', '.join(map(str, store.commitlog_dirs))}",
           {"type": "commitlog", "segments": len(view.summaries)})
    for s in view.summaries:
        end = s.end_reason + (f" ({s.end_check})" if s.end_check else "")
        p.emit(f"  {s.segment} size: {s.file_size} records: {s.records} validBytes: {s.valid_bytes} "
               f"end: {end}" + (f" lost: {s.records_after_cut}" if s.records_after_cut else ""),
               lambda s=s: {"type": "segment", **s.as_row()})
    queues = list_queues(store.root)
    p.emit(f"consume queues: {len(queues)}", {"type": "consume_queues", "queues": len(queues)})
    for q in queues:
        names = sorted(e.name for e in list_dir(q.path, "consume queue") if e.is_file())
        span = f" {names[0]}..{names[-1]}" if len(names) > 1 else "".join(f" {n}" for n in names)
        p.emit(f"  {q.topic}/{q.queue_id}: {len(names)} files{span}",
               {"type": "consume_queue", "topic": q.topic, "queue_id": q.queue_id, "files": names})
    index = [e for e in list_dir(store.index_dir, "index") if e.is_file()]
    p.emit(f"index: {len(index)} files", {"type": "index", "files": len(index)})
    for e in index:
        try:
            h = read_header(e.path)
        except StoreReaderError as exc:
            p.emit(f"  {e.name}: {exc.reason}",
                   {"type": "index_file", "name": e.name, "error": exc.reason})
            continue
        p.emit(f"  {e.name} size: {e.size()} begin: {iso_ms(h.begin_timestamp)} end: "
               f"{iso_ms(h.end_timestamp)} phy: {h.begin_phy_offset}..{h.end_phy_offset} "
               f"hashSlotCount: {h.hash_slot_count} indexCount: {h.index_count}",
               {"type": "index_file", "name": e.name, **h.to_dict()})
    if store.checkpoint_path.exists():
        dump_checkpoint(p, store.checkpoint_path)
    else:
        p.emit("checkpoint: missing", {"type": "checkpoint", "file": str(store.checkpoint_path),
                                       "exists": False})
    lock = lock_status(store.root)
    lock_text = ("held by a running broker" + (f" (pid {lock.pid})" if lock.pid else "")
                 if lock.locked else "present, not held" if lock.exists else "absent")
    abort = "present (the next start runs the abnormal recovery)" if store.abort_exists else "absent"
    p.emit(f"abort: {abort} lock: {lock_text}",
           {"type": "process_state", "abort": store.abort_exists, "lock_exists": lock.exists,
            "lock_held": lock.locked, "lock_pid": lock.pid})
    configs = [e for e in list_dir(store.config_dir, "config") if e.is_file()]
    sizes = {e.name: e.size() for e in configs}
    p.emit("config: " + (", ".join(f"{n} ({b} bytes)" for n, b in sizes.items()) or "none"),
           {"type": "config_files", "files": sizes})

