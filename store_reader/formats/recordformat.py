"""Commitlog record layout (spec ``store-format.md`` §3), written once: the decoders and the encoder.

The native scanner (``_native/scanner.c``) and the pure-Python twin (``_pyscan.py``) share the names
and numeric codes defined here; the C side mirrors them in ``scanner.h``-style defines and a test
checks that both agree. ``encode_message`` / ``write_record`` write a record from the same field
list, byte for byte as the broker does (the synthetic store generator and the salvage re-append
use them).
"""
from __future__ import annotations

import functools
import ipaddress
import struct
import zlib
from dataclasses import dataclass, field
from typing import Mapping, Sequence

# -- magic codes (F§3.3, F§3.10) --------------------------------------------------------------------
MAGIC_V1 = -626843481            # 0xDAA320A7
MAGIC_V2 = -626843477            # 0xDAA320AB, 5.x only: 2-byte topic length
BLANK_MAGIC = -875286124         # 0xCBD43194, end-of-file marker
END_FILE_MIN_BLANK_LENGTH = 8

# -- record layout (F§3.1, F§3.2), big-endian ----------------------------------------------------
# The fields before BODY, in spec order. A host field (code None) is the raw address (4 or 16 bytes)
# then the i32 port (MessageExt#socketAddress2ByteBuffer); SYSFLAG bits 0x10/0x20 give the width.
_HOST = None
HEAD_FIELDS = (
    ("TOTALSIZE", "i"),
    ("MAGICCODE", "i"),
    ("BODYCRC", "i"),
    ("QUEUEID", "i"),
    ("FLAG", "i"),
    ("QUEUEOFFSET", "q"),
    ("PHYSICALOFFSET", "q"),
    ("SYSFLAG", "i"),
    ("BORNTIMESTAMP", "q"),
    ("BORNHOST", _HOST),
    ("STORETIMESTAMP", "q"),
    ("STOREHOSTADDRESS", _HOST),
    ("RECONSUMETIMES", "i"),
    ("PREPARED TRANSACTION OFFSET", "q"),
    ("BODYLEN", "i"),
)
_NAMES = [name for name, _ in HEAD_FIELDS]
_FIXED = HEAD_FIELDS[:_NAMES.index("BORNHOST")]
# the decoder's views of it: the fixed fields before BORNHOST, and those after STOREHOSTADDRESS
HEAD = struct.Struct(">" + "".join(code for _, code in _FIXED))
POS = {name: struct.calcsize(">" + "".join(code for _, code in _FIXED[:i])) for i, (name, _) in enumerate(_FIXED)}
"""Byte position of each fixed header field (those before BORNHOST) in a record."""
# TOTALSIZE and MAGICCODE alone: what tells a record, a blank marker and garbage apart
SIZE_AND_MAGIC = struct.Struct(">ii")
QUEUEOFFSET_POS = POS["QUEUEOFFSET"]
PHYSICALOFFSET_POS = POS["PHYSICALOFFSET"]
SYSFLAG_POS = POS["SYSFLAG"]
BORNHOST_POS = HEAD.size          # 48; 8 bytes (IPv4) or 20 (IPv6, SYSFLAG & 0x10)
# RECONSUMETIMES i32, PREPARED TRANSACTION OFFSET i64, BODYLEN i32
MID = struct.Struct(">" + "".join(code for _, code in HEAD_FIELDS[_NAMES.index("STOREHOSTADDRESS") + 1:]))
# a record ends with PROPERTIESLENGTH i16 and the properties
PROPERTIESLENGTH = struct.Struct(">h")


# -- SYSFLAG bits (F§3.5) ------------------------------------------------------------------------------
COMPRESSED_FLAG = 0x1
MULTI_TAGS_FLAG = 0x2
TRANSACTION_MASK = 0xC
TRANSACTION_NOT_TYPE = 0x0
TRANSACTION_PREPARED_TYPE = 0x4
TRANSACTION_COMMIT_TYPE = 0x8
TRANSACTION_ROLLBACK_TYPE = 0xC
BORNHOST_V6_FLAG = 0x10
STOREHOSTADDRESS_V6_FLAG = 0x20
NEED_UNWRAP_FLAG = 0x40
INNER_BATCH_FLAG = 0x80
COMPRESSION_TYPE_MASK = 0x700
TRAN_NAMES = {TRANSACTION_NOT_TYPE: "NOT", TRANSACTION_PREPARED_TYPE: "PREPARED",
              TRANSACTION_COMMIT_TYPE: "COMMIT", TRANSACTION_ROLLBACK_TYPE: "ROLLBACK"}


def sys_flag_text(flag: int) -> str:
    """SYSFLAG with its bits named (F§3.5): the transaction type, then each flag set."""
    names = [TRAN_NAMES[flag & TRANSACTION_MASK]]
    for bit, name in ((COMPRESSED_FLAG, "compressed"), (MULTI_TAGS_FLAG, "multiTags"),
                      (BORNHOST_V6_FLAG, "bornHostV6"), (STOREHOSTADDRESS_V6_FLAG, "storeHostV6"),
                      (NEED_UNWRAP_FLAG, "needUnwrap"), (INNER_BATCH_FLAG, "innerBatch")):
        if flag & bit:
            names.append(name)
    if flag & COMPRESSION_TYPE_MASK:
        names.append(f"compressionType={(flag & COMPRESSION_TYPE_MASK) >> 8}")
    return f"0x{flag & 0xFFFFFFFF:x} ({','.join(names)})"


# -- property names and separators (F§3.7) -------------------------------------------------------
NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"
PROPERTY_KEYS = "KEYS"
PROPERTY_TAGS = "TAGS"
PROPERTY_UNIQ_KEY = "UNIQ_KEY"
PROPERTY_DELAY = "DELAY"
PROPERTY_REAL_TOPIC = "REAL_TOPIC"
PROPERTY_REAL_QID = "REAL_QID"
PROPERTY_TRAN_MSG = "TRAN_MSG"
PROPERTY_DUP_INFO = "DUP_INFO"
PROPERTY_INNER_NUM = "INNER_NUM"
PROPERTY_INNER_BASE = "INNER_BASE"
PROPERTY_CRC32 = "__CRC32#"
PROPERTY_INNER_MULTI_DISPATCH = "INNER_MULTI_DISPATCH"
PROPERTY_INNER_MULTI_QUEUE_OFFSET = "INNER_MULTI_QUEUE_OFFSET"
CRC32_RESERVED_LEN = 20           # "__CRC32#" \x01 10 digits \x02 (F§3.8)

# -- topics of the broker's own (TopicValidator, MixAll; F§3.4) --------------------------------------
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
TRANS_HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
TRANS_OP_HALF_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
TIMER_TOPIC = "rmq_sys_wheel_timer"
SYSTEM_TOPIC_PREFIX = "rmq_sys_"
RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"
DLQ_GROUP_TOPIC_PREFIX = "%DLQ%"
SYSTEM_TOPICS = frozenset({"TBW102", SCHEDULE_TOPIC, "BenchmarkTest", TRANS_HALF_TOPIC, "RMQ_SYS_TRACE_TOPIC",
                           TRANS_OP_HALF_TOPIC, "TRANS_CHECK_MAX_TIME_TOPIC", "SELF_TEST_TOPIC",
                           "OFFSET_MOVED_EVENT", "CHECKPOINT_TOPIC"})     # TopicValidator.SYSTEM_TOPIC_SET

# -- record outcomes (R§3) and which check failed -----------------------------------------------------
VALID, END_OF_FILE, INVALID, LENGTH_MISMATCH = 0, 1, 2, 3
OUTCOMES = ("valid", "end_of_file", "invalid", "length_mismatch")

CHECKS = (
    "",                   # 0: no failure
    "out_of_bounds",      # a field read runs past the end of the segment, or a host, body, topic
                          # or properties field is longer than TOTALSIZE (the broker copies each
                          # into its byte[TOTALSIZE] and that throws)
    "total_size",         # 5.x: TOTALSIZE larger than the bytes left (R§3 step 2, `TOTALSIZE - 4`
                          # in int arithmetic), or [all] negative behind a message magic
                          # (`new byte[TOTALSIZE]` throws)
    "bad_magic",          # neither a message magic nor the blank magic (or V2 on 4.9.7)
    "body_crc",           # BODYCRC mismatch with checkCRCOnRecover
    "topic_length",       # negative topic length (V1 topic of 128..255 bytes)
    "delay_property",     # DELAY on the schedule topic is not an int
    "dup_info",           # 5.x duplicationEnable: DUP_INFO missing or malformed
    "record_crc",         # 5.x forceVerifyPropCRC: __CRC32# missing or wrong
    "length_mismatch",    # calMsgLength != TOTALSIZE (torn record)
    "inner_batch",        # 5.x INNER_NUM/INNER_BASE not parsable
    "dledger_entry",      # DLedger entry header fails DLedgerMmapFileStore#recover's checks (R§16.1)
    "dledger_body_size",  # DLedger entry whose record's TOTALSIZE is not the entry's body size
)
CHECK_CODE = {name: i for i, name in enumerate(CHECKS)}

# -- how a segment's valid prefix ended ------------------------------------------------------------
END_REASONS = ("eof_marker", "zero_padding", "torn_tail", "corrupt", "file_end")


def bornhost_length(sys_flag: int) -> int:
    """BORNHOST: IPv4 address and port (8 bytes), or IPv6 (20) with SYSFLAG bit 0x10 (F§3.1)."""
    return 20 if sys_flag & BORNHOST_V6_FLAG else 8


def storehost_length(sys_flag: int) -> int:
    """STOREHOST: as BORNHOST, IPv6 with SYSFLAG bit 0x20 (F§3.1)."""
    return 20 if sys_flag & STOREHOSTADDRESS_V6_FLAG else 8


def store_timestamp_pos(sys_flag: int) -> int:
    """Position of STORETIMESTAMP (i64, right after BORNHOST) in a record with ``sys_flag``."""
    return BORNHOST_POS + bornhost_length(sys_flag)


def cal_msg_length(version: int, sys_flag: int, body_len: int, topic_len: int, props_len: int) -> int:
    """``calMsgLength`` (F§3.2)."""
    return (74 + bornhost_length(sys_flag) + storehost_length(sys_flag) + max(body_len, 0)
            + (2 if version == 2 else 1) + topic_len + max(props_len, 0))


# -- the encoder (F§3.1-§3.8, F§3.10): MessageExtEncoder#encode + DefaultAppendMessageCallback#doAppend --
# after BODY: TOPICLEN (i8 for V1, i16 for V2), TOPIC, PROPERTIESLENGTH (i16), PROPERTIES
_TOPICLEN_V2 = struct.Struct(">h")
_BLANK = struct.Struct(">ii")
_MAGIC = {1: MAGIC_V1, 2: MAGIC_V2}
MAX_PROPERTIES_LENGTH = 32767


@functools.lru_cache(maxsize=None)
def head_struct(born_addr_len: int, store_addr_len: int) -> struct.Struct:
    """Struct of the fields before BODY for the given host address widths (4 or 16)."""
    codes = {"BORNHOST": f"{born_addr_len}si", "STOREHOSTADDRESS": f"{store_addr_len}si"}
    return struct.Struct(">" + "".join(codes.get(name, code) for name, code in HEAD_FIELDS))


def crc32(data: bytes | bytearray | memoryview) -> int:
    """``UtilAll#crc32``: CRC-32 & 0x7FFFFFFF (never negative)."""
    return zlib.crc32(data) & 0x7FFFFFFF


def _crc32_property(value: int) -> bytes:
    """The 20 reserved bytes of ``__CRC32#`` (F§3.8): digits least significant first, '0'-padded."""
    digits = str(value)[::-1].ljust(10, "0")
    return (PROPERTY_CRC32 + NAME_VALUE_SEPARATOR + digits + PROPERTY_SEPARATOR).encode("ascii")


@functools.lru_cache(maxsize=4096)
def parse_host(host: str | tuple[str, int]) -> tuple[bytes, int]:
    """Raw address bytes and port of a host in the decoder's form.

    Parameters
    ----------
    host
        ``"a.b.c.d:port"``, ``"[v6 address]:port"`` (what ``schemas.MESSAGE`` born_host/store_host
        hold) or an ``(address, port)`` tuple.

    Returns
    -------
    tuple of (bytes, int)
        4 (IPv4) or 16 (IPv6) address bytes and the port.
    """
    if isinstance(host, tuple):
        address, port = host
    else:
        address, sep, port_s = host.rpartition(":")
        if not sep:
            raise ValueError(f"host {host!r} has no :port")
        address = address[1:-1] if address.startswith("[") and address.endswith("]") else address
        port = int(port_s)
    return ipaddress.ip_address(address).packed, int(port)


def encode_properties(properties: Mapping[str, str | None] | Sequence[tuple[str, str | None]] | None,
                      trailing_separator: bool = True) -> str:
    """``MessageDecoder#messageProperties2String`` (F§3.7).

    Parameters
    ----------
    properties
        Name/value pairs in the order to write them (the broker's is Java HashMap order, see
        :func:`hashmap_order`); pairs whose value is None are skipped, as in Java.
    trailing_separator
        True for 5.x (every pair ends with ``\\x02``); False for 4.9.7 (the last ``\\x02`` removed).
    """
    if not properties:
        return ""
    pairs = properties.items() if isinstance(properties, Mapping) else properties
    text = "".join(f"{name}{NAME_VALUE_SEPARATOR}{value}{PROPERTY_SEPARATOR}"
                   for name, value in pairs if value is not None)
    return text if trailing_separator or not text else text[:-1]


def append_position(end: int, total_size: int, file_size: int) -> tuple[int, int]:
    """Where the broker's put appends a ``total_size``-byte record to a commitlog ending at phy
    offset ``end`` (``DefaultAppendMessageCallback#doAppend``, F§3.10): the record's phy offset and
    the length of the blank marker (``encode_blank``) that closes the file at ``end`` first (0:
    none). A record goes into the current file only if 8 bytes remain after it."""
    left = file_size - end % file_size
    if total_size + END_FILE_MIN_BLANK_LENGTH > left:
        return end + left, left
    return end, 0


def encode_blank(max_blank: int) -> bytes:
    """The 8-byte end-of-file marker (F§3.10): i32 bytes left in the file, then BLANK_MAGIC_CODE."""
    if max_blank < END_FILE_MIN_BLANK_LENGTH:
        raise ValueError(f"a blank marker needs 8 bytes, only {max_blank} left")
    return _BLANK.pack(max_blank, BLANK_MAGIC)


def write_record(buf: bytearray, pos: int, total: int, version: int, queue_id: int, flag: int,
                 queue_offset: int, phy_offset: int, sys_flag: int, born_timestamp: int,
                 born: tuple[bytes, int],
                 store_timestamp: int, store: tuple[bytes, int], reconsume_times: int,
                 prepared_transaction_offset: int, body: bytes, body_crc: int, topic: bytes,
                 properties: bytes, append_crc32: bool) -> None:
    """Write one ``total``-byte record (``cal_msg_length``) at ``buf[pos:]``, fields in spec order.

    ``properties`` already holds the 20 reserved ``__CRC32#`` bytes when ``append_crc32`` is set;
    they are filled last, once every other byte of the record is in place (as ``doAppend`` does).
    """
    head = head_struct(len(born[0]), len(store[0]))
    head.pack_into(buf, pos, total, _MAGIC[version], body_crc, queue_id, flag, queue_offset, phy_offset,
                   sys_flag, born_timestamp, born[0], born[1], store_timestamp, store[0], store[1],
                   reconsume_times, prepared_transaction_offset, len(body))
    p = pos + head.size
    buf[p:p + len(body)] = body
    p += len(body)
    if version == 1:
        buf[p] = len(topic) & 0xFF        # (byte) topicLength: 128..255 reads back negative (F§3.3)
        p += 1
    else:
        _TOPICLEN_V2.pack_into(buf, p, len(topic))
        p += 2
    buf[p:p + len(topic)] = topic
    p += len(topic)
    PROPERTIESLENGTH.pack_into(buf, p, len(properties))
    p += 2
    buf[p:p + len(properties)] = properties
    p += len(properties)
    assert p - pos == total, (p - pos, total)
    if append_crc32:
        tail = pos + total - CRC32_RESERVED_LEN
        buf[tail:pos + total] = _crc32_property(crc32(memoryview(buf)[pos:tail]))


def properties_bytes(text: str, append_crc32: bool) -> bytes:
    """UTF-8 properties, with the ``__CRC32#`` reservation appended when asked (F§3.8)."""
    if append_crc32:
        if text and not text.endswith(PROPERTY_SEPARATOR):
            text += PROPERTY_SEPARATOR
        text += PROPERTY_CRC32 + NAME_VALUE_SEPARATOR + "0" * 10 + PROPERTY_SEPARATOR
    data = text.encode("utf-8")
    if len(data) > MAX_PROPERTIES_LENGTH:
        raise ValueError(f"properties are {len(data)} bytes; PROPERTIESLEN is at most "
                         f"{MAX_PROPERTIES_LENGTH}")
    return data


def _host_flags(sys_flag: int, born: tuple[bytes, int], store: tuple[bytes, int]) -> int:
    """SYSFLAG with the host-width bits the broker sets from the socket address types (F§3.2)."""
    for bit, (addr, _), what in ((BORNHOST_V6_FLAG, born, "born"),
                                 (STOREHOSTADDRESS_V6_FLAG, store, "store")):
        if len(addr) == 16:
            sys_flag |= bit
        elif sys_flag & bit:
            raise ValueError(f"sys_flag has the {what}-host IPv6 bit but the {what} host is IPv4")
    return sys_flag


def encode_message(*, topic: str, body: bytes = b"",
                   properties: Mapping[str, str | None] | Sequence[tuple[str, str | None]] | None = None,
                   queue_id: int = 0, flag: int = 0, queue_offset: int = 0, phy_offset: int = 0,
                   sys_flag: int = 0, born_timestamp: int = 0,
                   born_host: str | tuple[str, int] = "127.0.0.1:0", store_timestamp: int = 0,
                   store_host: str | tuple[str, int] = "127.0.0.1:10911", reconsume_times: int = 0,
                   prepared_transaction_offset: int = 0, version: int = 1,
                   trailing_separator: bool = True, append_crc32: bool = False) -> bytes:
    """One commitlog record, byte for byte as the broker stores it (F§3.1-§3.8).

    Parameters
    ----------
    topic
        Topic name (UTF-8). V1 writes its length as ``(byte)``, so 128..255 bytes produce the
        negative length a broker with ``autoMessageVersionOnTopicLen=false`` writes (F§3.3).
    body
        The stored body (already compressed when ``sys_flag`` has COMPRESSED_FLAG). BODYCRC is
        computed over these bytes (F§3.6).
    properties
        Pairs in the order to store them (see :func:`encode_properties`).
    queue_id, flag, queue_offset, phy_offset, born_timestamp, store_timestamp, reconsume_times,
    prepared_transaction_offset
        QUEUEID, FLAG, QUEUEOFFSET, PHYSICALOFFSET, BORNTIMESTAMP, STORETIMESTAMP, RECONSUMETIMES,
        PREPARED TRANSACTION OFFSET.
    sys_flag
        SYSFLAG. The IPv6 host bits (0x10, 0x20) are set from the host address families; setting
        one for an IPv4 host is an error.
    born_host, store_host
        ``"ip:port"`` / ``"[ipv6]:port"`` or ``(address, port)``.
    version
        1 (magic ``0xDAA320A7``, 1-byte topic length) or 2 (``0xDAA320AB``, 2-byte, 5.x).
    trailing_separator
        5.x properties style (True) or 4.9.7 (False), F§3.7.
    append_crc32
        5.x ``enabledAppendPropCRC``: any ``__CRC32#`` pair is dropped, then the 20-byte
        ``__CRC32#`` property over the rest of the record is appended (F§3.8).

    Returns
    -------
    bytes
        The record; its length is TOTALSIZE.
    """
    if version not in _MAGIC:
        raise ValueError(f"version must be 1 or 2, got {version}")
    topic_bytes = topic.encode("utf-8")
    if len(topic_bytes) > (255 if version == 1 else 32767):
        raise ValueError(f"topic of {len(topic_bytes)} bytes does not fit a V{version} TOPICLEN")
    if append_crc32 and properties:
        pairs = properties.items() if isinstance(properties, Mapping) else properties
        properties = [(k, v) for k, v in pairs if k != PROPERTY_CRC32]
    props = properties_bytes(encode_properties(properties, trailing_separator), append_crc32)
    born, store = parse_host(born_host), parse_host(store_host)
    sys_flag = _host_flags(sys_flag, born, store)
    total = cal_msg_length(version, sys_flag, len(body), len(topic_bytes), len(props))
    buf = bytearray(total)
    write_record(buf, 0, total, version, queue_id, flag, queue_offset, phy_offset, sys_flag,
                 born_timestamp, born, store_timestamp, store, reconsume_times,
                  prepared_transaction_offset, bytes(body), crc32(body) if body else 0, topic_bytes,
                  props, append_crc32)
    return bytes(buf)


@dataclass(frozen=True)
class ScanOptions:
    """How records are validated: the broker's recovery settings plus what to compute for the audit.

    Parameters
    ----------
    check_crc
        ``checkCRCOnRecover``: a body CRC mismatch makes the record INVALID (ends the valid prefix).
    compute_crc
        Compute body CRCs (and ``__CRC32#``) to report ``body_crc_ok`` even when not checking.
    force_verify_prop_crc
        5.x ``forceVerifyPropCRC``: check ``__CRC32#`` instead of BODYCRC.
    check_dup_info
        5.x ``duplicationEnable``: records with properties need a well-formed ``DUP_INFO``.
    broker_5x
        5.x semantics: V2 magic accepted, TOTALSIZE bounds-checked first (so a blank marker whose
        length does not fit is INVALID), INNER_NUM/INNER_BASE parsed.
    delay_levels_ms
        Delay of level 1..N, for schedule-topic tags codes (F§3.9).
    dledger
        Each record sits in a DLedger entry (F§16.2): the entry header is checked as DLedger's
        recovery checks it, the record is read at its body (phy offset ``pos + 48``) and the walk
        steps by entries; DLedger's blank (magic -1) ends a file.
    """

    check_crc: bool = True
    compute_crc: bool = True
    force_verify_prop_crc: bool = False
    check_dup_info: bool = False
    broker_5x: bool = True
    delay_levels_ms: tuple[int, ...] = field(default=(
        1000, 5000, 10000, 30000, 60000, 120000, 180000, 240000, 300000, 360000, 420000, 480000,
        540000, 600000, 1200000, 1800000, 3600000, 7200000))
    dledger: bool = False
    # a 5.4+ broker's ``IndexService#buildIndex`` also puts ``topic#T#TAGS`` (``dispatch.INDEX_TAG_TYPE``):
    # the scanners count it among a file's index puts
    index_tags: bool = False

    @property
    def crc_computed(self) -> bool:
        return self.compute_crc or self.check_crc

    @classmethod
    def for_broker(cls, config, broker_5x: bool, compute_crc: bool = True, index_tags: bool = False
                   ) -> "ScanOptions":
        """The options the broker's recovery uses for ``config`` (a ``BrokerConfig``)."""
        return cls(check_crc=config.checkCRCOnRecover, compute_crc=compute_crc,
                   force_verify_prop_crc=broker_5x and config.forceVerifyPropCRC,
                   check_dup_info=broker_5x and config.duplicationEnable, broker_5x=broker_5x,
                   delay_levels_ms=tuple(config.delay_levels_ms), index_tags=index_tags)


_CRC32_PREFIX = (PROPERTY_CRC32 + NAME_VALUE_SEPARATOR).encode("ascii")


def properties_span(record: bytes | bytearray | memoryview) -> tuple[int, int]:
    """[start, end) of PROPERTIES in a whole record (F§3.1-§3.3: after BODY and TOPIC)."""
    sys_flag = struct.unpack_from(">i", record, SYSFLAG_POS)[0]
    head = head_struct(16 if sys_flag & BORNHOST_V6_FLAG else 4, 16 if sys_flag & STOREHOSTADDRESS_V6_FLAG else 4)
    body_len = max(struct.unpack_from(">i", record, head.size - 4)[0], 0)
    p = head.size + body_len
    if struct.unpack_from(">i", record, 4)[0] == MAGIC_V2:
        topic_len, p = _TOPICLEN_V2.unpack_from(record, p)[0], p + 2
    else:
        topic_len, p = record[p], p + 1
    p += topic_len
    return p + 2, p + 2 + PROPERTIESLENGTH.unpack_from(record, p)[0]


def relocate_record(record: bytes | bytearray | memoryview, queue_offset: int, phy_offset: int,
                    properties: bytes | None = None) -> bytearray:
    """A stored record put at a new place, as ``doAppend`` patches a record it appends: QUEUEOFFSET
    and PHYSICALOFFSET set, PROPERTIES replaced when given (TOTALSIZE with them), and a trailing
    ``__CRC32#`` recomputed over the record as it now is (F§3.8). Everything else (BODYCRC,
    STORETIMESTAMP, UNIQ_KEY ...) is kept."""
    out = bytearray(record)
    if properties is not None:
        start, end = properties_span(out)
        out[start - 2:end] = PROPERTIESLENGTH.pack(len(properties)) + properties
        struct.pack_into(">i", out, 0, len(out))
    struct.pack_into(">q", out, QUEUEOFFSET_POS, queue_offset)
    struct.pack_into(">q", out, PHYSICALOFFSET_POS, phy_offset)
    tail = len(out) - CRC32_RESERVED_LEN
    if tail > 0 and out[tail:tail + len(_CRC32_PREFIX)] == _CRC32_PREFIX and out[-1:] == PROPERTY_SEPARATOR.encode():
        out[tail:] = _crc32_property(crc32(memoryview(out)[:tail]))
    return out



# -- DLedger commitlog (F§16): an entry header around each record, 32-byte index units -----------
# entry: magic, size, index, term, pos, channel, chainCrc, bodyCrc, bodySize; the record at 48
DLEDGER_HEADER = struct.Struct(">iiqqqiiii")
DLEDGER_MAGIC = 1                   # MAGIC_1 = CURRENT_MAGIC
DLEDGER_BLANK_MAGIC = -1            # MmapFileList.BLANK_MAGIC_CODE
DLEDGER_HEADER_SIZE = 44            # DLedgerEntry.HEADER_SIZE (a size must exceed it)
DLEDGER_BODY_OFFSET = 48            # DLedgerEntry.BODY_OFFSET = DLEDGER_HEADER.size
DLEDGER_MIN_BLANK = 8               # MmapFileList.MIN_BLANK_LEN
# index unit: magic, pos, size, index, term
DLEDGER_INDEX_UNIT = struct.Struct(">iqiqq")


def encode_dledger_entry(record: bytes | bytearray, index: int, term: int, pos: int) -> bytes:
    """A DLedger entry holding ``record`` at phy offset ``pos``, byte for byte as
    ``DLedgerMmapFileStore#appendAsLeader`` stores it with ``DLedgerCommitLog``'s hook: the record's
    PHYSICALOFFSET set to ``pos + 48`` (F§16.2; chainCrc and bodyCrc are never set)."""
    body = relocate_record(record, struct.unpack_from(">q", record, QUEUEOFFSET_POS)[0],
                           pos + DLEDGER_BODY_OFFSET)
    size = DLEDGER_BODY_OFFSET + len(body)
    return DLEDGER_HEADER.pack(DLEDGER_MAGIC, size, index, term, pos, 0, 0, 0, len(body)) + bytes(body)


def encode_dledger_index_unit(pos: int, size: int, index: int, term: int) -> bytes:
    """The index unit of an entry (F§16.3, ``DLedgerEntryCoder#encodeIndex``)."""
    return DLEDGER_INDEX_UNIT.pack(DLEDGER_MAGIC, pos, size, index, term)
