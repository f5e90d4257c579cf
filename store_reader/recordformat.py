"""Commitlog record layout (spec ``store-format.md`` §3), written once for both scanners.

The native scanner (``_native/scanner.c``) and the pure-Python twin (``_pyscan.py``) share the names
and numeric codes defined here; the C side mirrors them in ``scanner.h``-style defines and a test
checks that both agree.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field

# -- magic codes (F§3.3, F§3.10) --------------------------------------------------------------------
MAGIC_V1 = -626843481            # 0xDAA320A7
MAGIC_V2 = -626843477            # 0xDAA320AB, 5.x only: 2-byte topic length
BLANK_MAGIC = -875286124         # 0xCBD43194, end-of-file marker
END_FILE_MIN_BLANK_LENGTH = 8

# -- fixed header up to BORNHOST (F§3.1), big-endian -------------------------------------------------
_HEAD_FIELDS = (
    ("TOTALSIZE", "i"),
    ("MAGICCODE", "i"),
    ("BODYCRC", "i"),
    ("QUEUEID", "i"),
    ("FLAG", "i"),
    ("QUEUEOFFSET", "q"),
    ("PHYSICALOFFSET", "q"),
    ("SYSFLAG", "i"),
    ("BORNTIMESTAMP", "q"),
)
HEAD = struct.Struct(">" + "".join(code for _, code in _HEAD_FIELDS))
POS = {name: struct.calcsize(">" + "".join(code for _, code in _HEAD_FIELDS[:i]))
       for i, (name, _) in enumerate(_HEAD_FIELDS)}
"""Byte position of each fixed header field in a record."""
# TOTALSIZE and MAGICCODE alone: what tells a record, a blank marker and garbage apart
SIZE_AND_MAGIC = struct.Struct(">ii")
PHYSICALOFFSET_POS = POS["PHYSICALOFFSET"]
SYSFLAG_POS = POS["SYSFLAG"]
BORNHOST_POS = HEAD.size          # 48; 8 bytes (IPv4) or 20 (IPv6, SYSFLAG & 0x10)
# after STOREHOST: RECONSUMETIMES i32, PREPARED TRANSACTION OFFSET i64, BODYLEN i32
MID = struct.Struct(">iqi")
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
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"

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
    """

    check_crc: bool = True
    compute_crc: bool = True
    force_verify_prop_crc: bool = False
    check_dup_info: bool = False
    broker_5x: bool = True
    delay_levels_ms: tuple[int, ...] = field(default=(
        1000, 5000, 10000, 30000, 60000, 120000, 180000, 240000, 300000, 360000, 420000, 480000,
        540000, 600000, 1200000, 1800000, 3600000, 7200000))

    @property
    def crc_computed(self) -> bool:
        return self.compute_crc or self.check_crc

    @classmethod
    def for_broker(cls, config, broker_5x: bool, compute_crc: bool = True) -> "ScanOptions":
        """The options the broker's recovery uses for ``config`` (a ``BrokerConfig``)."""
        return cls(check_crc=config.checkCRCOnRecover, compute_crc=compute_crc,
                   force_verify_prop_crc=broker_5x and config.forceVerifyPropCRC,
                   check_dup_info=broker_5x and config.duplicationEnable, broker_5x=broker_5x,
                   delay_levels_ms=tuple(config.delay_levels_ms))
