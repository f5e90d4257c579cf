"""Pure-Python reference twin of the native commitlog scanner.

Same interface and results as ``store_reader._native`` (selected with ``STORE_READER_PURE=1``); it
is the oracle of the differential and property tests, written for clarity, not speed. Every step
cites ``recovery.md`` §3 (``CommitLog#checkMessageAndReturnSize``).
"""
from __future__ import annotations

import struct
import zlib
from typing import Any

from store_reader.formats import recordformat as rf
from store_reader.formats.javahash import java_string_hash
from store_reader.formats.javalang import java_int, java_long, java_parse_int, java_split

_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")
_I8 = struct.Struct(">b")
_I64 = struct.Struct(">q")
_MAGIC_V1_BYTES = struct.pack(">i", rf.MAGIC_V1)
_MAGIC_V2_BYTES = struct.pack(">i", rf.MAGIC_V2)
_DL_HEAD8 = struct.Struct(">ii")      # a DLedger entry's magic and size (F§16.2)


class _OutOfBounds(Exception):
    pass


def parse_properties(s: str) -> dict[str, str]:
    """``MessageDecoder#string2messageProperties`` (F§3.7)."""
    out: dict[str, str] = {}
    for seg in s.split(rf.PROPERTY_SEPARATOR):
        if len(seg) >= 3:
            i = seg.find(rf.NAME_VALUE_SEPARATOR)
            if 0 < i < len(seg) - 1:
                out[seg[:i]] = seg[i + 1:]
    return out


def format_host(addr: bytes, port: int) -> str:
    """``ip:port``; IPv6 in Java's uncompressed lowercase form inside brackets."""
    if len(addr) == 4:
        return f"{addr[0]}.{addr[1]}.{addr[2]}.{addr[3]}:{port}"
    groups = ":".join(f"{(addr[i] << 8) | addr[i + 1]:x}" for i in range(0, 16, 2))
    return f"[{groups}]:{port}"


def _crc(data: bytes) -> int:
    return zlib.crc32(data) & 0x7FFFFFFF


def record_crc_value(value: str) -> int:
    """``expectedCRC`` of ``CommitLog#checkMessageAndReturnSize`` [5.x] for a ``__CRC32#`` value
    (F§3.8; written by ``MessageDecoder#createCrc32``, least significant digit first).

    The broker validates nothing: walking the UTF-16 code units from the last to the first it
    computes ``expectedCRC = expectedCRC * 10 + (charAt(i) - '0')`` in ``int`` arithmetic, so any
    length is accepted, a character that is not an ASCII digit counts as its code minus 48, and the
    result wraps at 32 bits. The caller requires the result to be > 0.
    """
    units = value.encode("utf-16-be", "surrogatepass")
    v = 0
    for i in range(len(units) - 2, -1, -2):
        v = java_int(v * 10 + (((units[i] << 8) | units[i + 1]) - ord("0")))
    return v


def record_crc_matches(buf: Any, cur: int, total_size: int, value: str) -> bool:
    """The ``forceVerifyPropCRC`` test [5.x]: ``expectedCRC > 0`` and equal to the CRC of
    ``[cur - TOTALSIZE, cur - 20)``, where ``cur`` is the read position after PROPERTIES (a
    duplicate of the buffer moved back by TOTALSIZE, limited to TOTALSIZE - 20 bytes). For a
    well-formed record that is bytes ``[0, TOTALSIZE - 20)`` of it; otherwise the range follows
    the broker: a start before the buffer (index 0 = the file start) throws, so no match; an end
    before the start (TOTALSIZE < 20) is an empty range, CRC 0, never > 0."""
    want = record_crc_value(value)
    lo, hi = cur - total_size, cur - rf.CRC32_RESERVED_LEN
    if want <= 0 or lo < 0:
        return False
    return want == (_crc(bytes(buf[lo:hi])) if hi > lo else 0)


def check_record(buf: Any, pos: int, end: int, opts: rf.ScanOptions, want_body: bool = False
                 ) -> tuple[int, int, int | None, dict | None]:
    """Validate the record at ``pos``; returns (outcome, check code, declared size, fields)."""
    remaining = end - pos
    if remaining <= 4:                                   # step 1 (5.x; 4.9.7 underflows)
        return rf.INVALID, rf.CHECK_CODE["out_of_bounds"], None, None
    total_size = _I32.unpack_from(buf, pos)[0]
    # step 2 [5.x]: remaining() < totalSize - 4, the subtraction in int arithmetic (wraps)
    if opts.broker_5x and remaining - 4 < java_int(total_size - 4):
        return rf.INVALID, rf.CHECK_CODE["total_size"], total_size, None
    if remaining < 8:
        return rf.INVALID, rf.CHECK_CODE["out_of_bounds"], total_size, None
    magic = _I32.unpack_from(buf, pos + 4)[0]          # step 3
    if magic == rf.BLANK_MAGIC:
        return rf.END_OF_FILE, 0, total_size, None
    if magic == rf.MAGIC_V1:
        version = 1
    elif magic == rf.MAGIC_V2 and opts.broker_5x:
        version = 2
    else:
        return rf.INVALID, rf.CHECK_CODE["bad_magic"], total_size, None
    # [all] `new byte[totalSize]` comes next: a negative size throws
    if total_size < 0:
        return rf.INVALID, rf.CHECK_CODE["total_size"], total_size, None

    def take(p: int, n: int) -> int:
        if p + n > end:
            raise _OutOfBounds
        return p + n

    def fits_record(n: int) -> None:
        """Hosts, body, topic and properties are copied into that byte[totalSize]: longer throws."""
        if n > total_size:
            raise _OutOfBounds

    try:
        p = take(pos, rf.HEAD.size)                     # step 4: fixed fields
        (_, _, body_crc, queue_id, flag, queue_offset, stored_phy, sys_flag,
         born_ts) = rf.HEAD.unpack_from(buf, pos)
        born_len = rf.bornhost_length(sys_flag)
        fits_record(born_len)
        born_host = bytes(buf[p:take(p, born_len)])
        p += born_len
        store_ts = _I64.unpack_from(buf, take(p, 8) - 8)[0]
        p += 8
        store_len = rf.storehost_length(sys_flag)
        fits_record(store_len)
        store_host = bytes(buf[p:take(p, store_len)])
        p += store_len
        reconsume, prepared_tx, body_len = rf.MID.unpack_from(buf, take(p, rf.MID.size) - rf.MID.size)
        p += rf.MID.size
        body = b""
        body_crc_ok: bool | None = None
        if body_len > 0:                                # step 5
            fits_record(body_len)
            body = bytes(buf[p:take(p, body_len)])
            p += body_len
            if opts.crc_computed:
                body_crc_ok = _crc(body) == body_crc
            if opts.check_crc and not opts.force_verify_prop_crc and not body_crc_ok:
                return rf.INVALID, rf.CHECK_CODE["body_crc"], total_size, None
        elif opts.crc_computed:
            body_crc_ok = body_crc == 0
        if version == 1:                                # step 6
            topic_len = _I8.unpack_from(buf, take(p, 1) - 1)[0]
            p += 1
        else:
            topic_len = _I16.unpack_from(buf, take(p, 2) - 2)[0]
            p += 2
        if topic_len < 0:
            return rf.INVALID, rf.CHECK_CODE["topic_length"], total_size, None
        fits_record(topic_len)
        topic = bytes(buf[p:take(p, topic_len)]).decode("utf-8", "replace")
        p += topic_len
        props_len = _I16.unpack_from(buf, take(p, 2) - 2)[0]   # step 7
        p += 2
        props: dict[str, str] | None = None
        tags_code = 0
        if props_len > 0:
            fits_record(props_len)
            props = parse_properties(bytes(buf[p:take(p, props_len)]).decode("utf-8", "replace"))
            p += props_len
            if opts.check_dup_info:
                dup = props.get(rf.PROPERTY_DUP_INFO)
                if dup is None or len(java_split(dup, "_")) != 2:
                    return rf.INVALID, rf.CHECK_CODE["dup_info"], total_size, None
            tags = props.get(rf.PROPERTY_TAGS)
            if tags:
                tags_code = java_string_hash(tags)
            delay = props.get(rf.PROPERTY_DELAY)
            if topic == rf.SCHEDULE_TOPIC and delay is not None:
                level = java_parse_int(delay)
                if level is None:
                    return rf.INVALID, rf.CHECK_CODE["delay_property"], total_size, None
                level = min(level, len(opts.delay_levels_ms))
                if level > 0:
                    tags_code = java_long(store_ts + opts.delay_levels_ms[level - 1])  # wraps
        record_crc_ok: bool | None = None               # reported when CRCs are computed
        crc_prop = props.get(rf.PROPERTY_CRC32) if props else None
        if opts.crc_computed and crc_prop is not None:
            record_crc_ok = record_crc_matches(buf, p, total_size, crc_prop)
        if opts.check_crc and opts.force_verify_prop_crc and not record_crc_ok:   # step 8
            return rf.INVALID, rf.CHECK_CODE["record_crc"], total_size, None
        if rf.cal_msg_length(version, sys_flag, body_len, topic_len, props_len) != total_size:
            return rf.LENGTH_MISMATCH, rf.CHECK_CODE["length_mismatch"], total_size, None  # step 9
        if opts.broker_5x and props and rf.PROPERTY_INNER_NUM in props \
                and rf.PROPERTY_INNER_BASE in props:    # step 10
            num = java_parse_int(props[rf.PROPERTY_INNER_NUM])
            if num is None or not -32768 <= num <= 32767 \
                    or java_parse_int(props[rf.PROPERTY_INNER_BASE], 64) is None:
                return rf.INVALID, rf.CHECK_CODE["inner_batch"], total_size, None
    except _OutOfBounds:
        return rf.INVALID, rf.CHECK_CODE["out_of_bounds"], total_size, None

    keys = props.get(rf.PROPERTY_KEYS) if props else None
    real_qid = props.get(rf.PROPERTY_REAL_QID) if props else None
    delay_s = props.get(rf.PROPERTY_DELAY) if props else None
    store_addr, store_port = store_host[:-4], _I32.unpack(store_host[-4:])[0]
    fields = {
        "total_size": total_size,
        "version": version,
        "body_crc": body_crc,
        "queue_id": queue_id,
        "flag": flag,
        "queue_offset": queue_offset,
        "stored_phy_offset": stored_phy,
        "sys_flag": sys_flag,
        "born_timestamp": born_ts,
        "born_host": format_host(born_host[:-4], _I32.unpack(born_host[-4:])[0]),
        "store_timestamp": store_ts,
        "store_host": format_host(store_addr, store_port),
        "reconsume_times": reconsume,
        "prepared_transaction_offset": prepared_tx,
        "body_length": body_len,
        "topic": topic,
        "properties": props,
        "tags": props.get(rf.PROPERTY_TAGS) if props else None,
        "keys": keys,
        "key_list": [k for k in keys.split(" ") if k] if keys else [],
        "uniq_key": props.get(rf.PROPERTY_UNIQ_KEY) if props else None,
        "real_topic": props.get(rf.PROPERTY_REAL_TOPIC) if props else None,
        "real_queue_id": java_parse_int(real_qid) if real_qid is not None else None,
        "delay_level": java_parse_int(delay_s) if delay_s is not None else None,
        "transaction_prepared": bool(props) and props.get(rf.PROPERTY_TRAN_MSG) == "true",
        "tags_code": tags_code,
        "msg_id": (store_host + struct.pack(">q", stored_phy)).hex().upper(),
        "body_crc_ok": body_crc_ok,
        "record_crc_ok": record_crc_ok,
    }
    if want_body:
        fields["body"] = body
    return rf.VALID, 0, total_size, fields


def check_entry(buf: Any, file_start: int, pos: int, end: int) -> tuple[int, int, int | None]:
    """The DLedger entry at ``pos`` as ``DLedgerMmapFileStore#recover`` checks each entry it walks
    (R§16.1 step 3; index continuity and term order span entries, the caller checks those):
    ``(outcome, check code, entry size)``, VALID, END_OF_FILE on DLedger's blank (magic -1), else
    INVALID."""
    if end - pos < 8:
        return rf.INVALID, rf.CHECK_CODE["out_of_bounds"], None
    magic, size = _DL_HEAD8.unpack_from(buf, pos)
    if magic == rf.DLEDGER_BLANK_MAGIC:
        return rf.END_OF_FILE, 0, size
    if end - pos < rf.DLEDGER_BODY_OFFSET:
        return rf.INVALID, rf.CHECK_CODE["out_of_bounds"], size
    _, _, _, _, entry_pos, _, _, _, body_size = rf.DLEDGER_HEADER.unpack_from(buf, pos)
    if size == 0 or entry_pos != java_long(file_start + pos) or body_size + rf.DLEDGER_BODY_OFFSET != size \
            or magic != rf.DLEDGER_MAGIC or size <= rf.DLEDGER_HEADER_SIZE:
        return rf.INVALID, rf.CHECK_CODE["dledger_entry"], size
    return rf.VALID, 0, size


def _check_framed(buf: Any, file_start: int, pos: int, end: int, opts: rf.ScanOptions, want_body: bool
                  ) -> tuple[int, int, int | None, dict | None, int, int]:
    """``check_record`` of the record at ``pos``, or of the one inside the DLedger entry at ``pos``
    (``opts.dledger``: read within the entry, which it must fill, R§16.4): (outcome, check,
    declared size, fields, the record's position, the step to the next)."""
    if not opts.dledger:
        outcome, check, declared, fields = check_record(buf, pos, end, opts, want_body)
        return outcome, check, declared, fields, pos, fields["total_size"] if fields else 0
    outcome, check, size = check_entry(buf, file_start, pos, end)
    if outcome != rf.VALID:
        return outcome, check, size, None, pos, 0
    assert size is not None
    at = pos + rf.DLEDGER_BODY_OFFSET
    outcome, check, _, fields = check_record(buf, at, min(end, pos + size), opts, want_body)
    if outcome == rf.VALID and fields is not None and fields["total_size"] != size - rf.DLEDGER_BODY_OFFSET:
        outcome, check, fields = rf.INVALID, rf.CHECK_CODE["dledger_body_size"], None
    if outcome != rf.VALID:
        return outcome, check, size, None, pos, 0
    return outcome, check, size, fields, at, size


def scan(buf: Any, file_start: int, pos: int, end: int, max_records: int, opts: rf.ScanOptions,
         columns: tuple[str, ...]) -> tuple[dict[str, list], int, int, tuple | None, tuple]:
    """Decode up to ``max_records`` VALID records from ``pos``.

    Returns ``(columns, count, next_pos, stop, stats)``: ``stop`` is None when ``max_records`` were
    read, else ``(outcome, check, declared_size)`` of the record at ``next_pos`` that ended the run;
    ``stats`` is ``(first_store_ts, last_store_ts, last_record_pos, crc_failures, index_puts,
    max_store_ts)`` of this run; ``index_puts`` counts each record's UNIQ_KEY and KEYS tokens, and
    its non-empty TAGS with ``opts.index_tags`` (the index entries it puts), ROLLBACK records aside.
    """
    out: dict[str, list] = {c: [] for c in columns}
    want_body = "body" in columns
    n = 0
    first_ts = last_ts = last_pos = None
    crc_failures = index_puts = 0
    max_ts = None
    stop = None
    while n < max_records:
        outcome, check, declared, fields, at, step = _check_framed(buf, file_start, pos, end, opts,
                                                                   want_body)
        if outcome != rf.VALID:
            stop = (outcome, check, declared)
            break
        assert fields is not None
        fields["phy_offset"] = file_start + at
        for c in columns:
            out[c].append(fields[c])
        if first_ts is None:
            first_ts = fields["store_timestamp"]
        last_ts, last_pos = fields["store_timestamp"], at
        max_ts = fields["store_timestamp"] if max_ts is None else max(max_ts, fields["store_timestamp"])
        crc_failures += fields["body_crc_ok"] is False or fields["record_crc_ok"] is False
        if fields["sys_flag"] & rf.TRANSACTION_MASK != rf.TRANSACTION_ROLLBACK_TYPE:
            index_puts += (fields["uniq_key"] is not None) + len(fields["key_list"]) \
                + bool(opts.index_tags and fields["tags"])
        n += 1
        pos += step
    return out, n, pos, stop, (first_ts, last_ts, last_pos, crc_failures, index_puts, max_ts)


def is_zero(buf: Any, start: int, end: int) -> bool:
    """True when every byte in ``[start, end)`` is zero."""
    return not any(bytes(buf[start:end]))


def resync(buf: Any, file_start: int, start: int, end: int, opts: rf.ScanOptions,
           search_end: int | None = None) -> int:
    """First position ``>= start`` holding a VALID record whose PHYSICALOFFSET equals its position
    (the resync anchor of spec E#3), or -1. Records are checked against ``end``; only magic codes
    starting below ``search_end`` (default ``end``) are candidates. With ``opts.dledger`` the
    anchor is the position of the DLedger entry holding such a record, and that entry is checked."""
    data = bytes(buf[:end])
    limit = end if search_end is None or search_end < 0 else min(search_end, end)
    magics = [_MAGIC_V1_BYTES] + ([_MAGIC_V2_BYTES] if opts.broker_5x else [])
    search = start + 4
    while True:
        hits = [h for h in (data.find(m, search, min(limit + len(m) - 1, end)) for m in magics) if h >= 0]
        if not hits:
            return -1
        q = min(hits) - 4
        search = q + 5
        if q + rf.PHYSICALOFFSET_POS + 8 <= end and \
                _I64.unpack_from(data, q + rf.PHYSICALOFFSET_POS)[0] == file_start + q:
            if not opts.dledger:
                if check_record(data, q, end, opts)[0] == rf.VALID:
                    return q
            elif q - rf.DLEDGER_BODY_OFFSET >= start:     # the anchor is the entry holding the record
                outcome = _check_framed(data, file_start, q - rf.DLEDGER_BODY_OFFSET, end, opts, False)[0]
                if outcome == rf.VALID:
                    return q - rf.DLEDGER_BODY_OFFSET
