"""How ``jobs.dump`` prints a commitlog segment: one line per record (``--deep``: every field,
``--print-body``: the body), where and why the segment's valid data ends, then the intact records
lost behind a bad one, and the segment's scan summary.
"""
from __future__ import annotations

import base64
import json
from typing import Any

from store_reader.dump.printer import Printer, iso_ms
from schemas import MESSAGE
from store_reader.audit.view import StoreView
from store_reader.formats.commitlog import SegmentScan, SegmentSummary
from store_reader.formats.mappedfile import MappedFile
from store_reader.formats.recordformat import sys_flag_text

SCAN_BATCH = 4096                 # records per scanner call while printing (bounds --max-bytes work)

# Header fields printed by default; --deep prints every MESSAGE column but the body.
DEFAULT_RECORD_COLUMNS = ["phy_offset", "total_size", "topic", "queue_id", "queue_offset",
                          "store_timestamp", "keys", "msg_id", "body_crc_ok", "record_crc_ok"]
DEEP_RECORD_COLUMNS = [n for n in MESSAGE.names if n not in ("valid_prefix", "body")]


def _dash(value: Any) -> Any:
    return "-" if value is None else value


def body_text(body: bytes) -> tuple[str, str]:
    """(encoding, text): the body as UTF-8 when it decodes and prints, else base64."""
    try:
        text = body.decode("utf-8")
        if all(c.isprintable() or c in "\n\r\t" for c in text):
            return "utf8", text
    except UnicodeDecodeError:
        pass
    return "base64", base64.b64encode(body).decode("ascii")


def _crc_text(row: dict[str, Any]) -> str:
    verdict = {True: "ok", False: "BAD", None: "n/a"}
    text = f"crc {verdict[row['body_crc_ok']]}"
    if row.get("record_crc_ok") is not None:
        text += f" recordCrc {verdict[row['record_crc_ok']]}"
    return text


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
