"""The native commitlog scanner (``store_reader._native``) against its pure-Python twin.

``_pyscan`` is the reference: for the same bytes and options both must give the same tables and the
same segment summaries, on every real-broker fixture segment, on generated segments (records built
field by field, well-formed or not) and on mutated real segments (byte flips, truncations, inserted
garbage, random TOTALSIZE values). The native module must also never let anything but the package's
own errors (or ValueError/MemoryError for bad arguments) escape, and must release its buffers.
"""
from __future__ import annotations

import functools
import mmap
import os
import struct
import threading
import zlib
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

import support
from schemas import MESSAGE
from store_reader.formats import _pyscan, commitlog
from store_reader.formats import recordformat as rf
from store_reader.exceptions import StoreReaderError
from store_reader.formats.javalang import java_split

_native = pytest.importorskip("store_reader._native", reason="native scanner not built",
                              exc_type=ImportError)

pytestmark = [pytest.mark.reader, pytest.mark.native]

CASES = support.scenarios()
ALL_COLUMNS = [c for c in MESSAGE.names]
SCANNED = commitlog.SCANNED_COLUMNS
SUPPRESS = [HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.data_too_large]


# -- helpers ---------------------------------------------------------------------------------------

def _scan_both(path: Path, opts: rf.ScanOptions, columns=ALL_COLUMNS, **kw):
    """(table, summary) from the pure twin and from the native scanner."""
    return support.scan_both(path, opts, columns, **kw)


def _assert_same(pure, native) -> None:
    (t_pure, s_pure), (t_nat, s_nat) = pure, native
    t_nat.validate(full=True)
    t_pure.validate(full=True)
    assert t_nat.schema == t_pure.schema
    if not t_nat.equals(t_pure):
        for name in t_pure.column_names:
            a, b = t_pure[name].to_pylist(), t_nat[name].to_pylist()
            if a != b:
                i = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
                raise AssertionError(f"column {name} row {i}: pure {a[i:i + 1]} native {b[i:i + 1]}")
        raise AssertionError("tables differ")
    assert s_nat == s_pure
    assert s_nat.valid_bytes + s_nat.trailing_bytes == s_nat.file_size
    assert 0 <= s_nat.valid_bytes <= s_nat.file_size


def _segments(version: str, scenario: str) -> list[Path]:
    return sorted((support.input_store(version, scenario) / "commitlog").glob("[0-9]" * 20))


@functools.lru_cache(maxsize=None)
def _real_segments() -> tuple[tuple[str, bytes], ...]:
    """A few real segments with records in them (version, bytes), for the mutation tests."""
    picked = []
    for version, scenario in CASES:
        if scenario not in ("clean", "torn-middle-crc", "crash-tail"):
            continue
        for seg in _segments(version, scenario)[:3]:
            data = seg.read_bytes()
            if data[:4] != b"\0\0\0\0":
                picked.append((version, data))
    return tuple(picked)


def _write_segment(tmp_path: Path, data: bytes, file_start: int = 0) -> Path:
    path = tmp_path / f"{file_start:020d}"
    path.write_bytes(data)
    return path


# -- (a) every fixture segment: native == pure twin ------------------------------------------------

@pytest.mark.parametrize("case", CASES, ids=[support.case_id(c) for c in CASES])
def test_fixture_segments_native_equals_twin(case):
    version, scenario = case
    opts = rf.ScanOptions(broker_5x=version == "rocketmq-5.3.3")
    segments = _segments(version, scenario)
    for seg in segments:
        _assert_same(*_scan_both(seg, opts))


@pytest.mark.parametrize("case", [c for c in CASES if c[1] in ("clean", "torn-middle-crc",
                                                               "crash-ckpt-mid-torn-crc")],
                         ids=support.case_id)
@pytest.mark.parametrize("variant", ["no_crc", "compute_only", "force_prop_crc", "dup_info", "other_version",
                                     "no_columns", "default_columns", "small_batches"])
def test_fixture_segments_option_variants(case, variant):
    version, scenario = case
    is5 = version == "rocketmq-5.3.3"
    opts = {
        "no_crc": rf.ScanOptions(check_crc=False, compute_crc=False, broker_5x=is5),
        "compute_only": rf.ScanOptions(check_crc=False, compute_crc=True, broker_5x=is5),
        "force_prop_crc": rf.ScanOptions(force_verify_prop_crc=True, broker_5x=is5),
        "dup_info": rf.ScanOptions(check_dup_info=True, broker_5x=is5),
        "other_version": rf.ScanOptions(broker_5x=not is5, delay_levels_ms=(1000, 5000)),
    }.get(variant, rf.ScanOptions(broker_5x=is5))
    columns = {"no_columns": [], "default_columns": None}.get(variant, ALL_COLUMNS)
    kw = {"batch_size": 3} if variant == "small_batches" else {}
    for seg in _segments(version, scenario):
        _assert_same(*_scan_both(seg, opts, columns=columns, **kw))


def test_constants_agree_with_recordformat():
    assert _native.CHECKS == rf.CHECKS
    assert _native.OUTCOMES == rf.OUTCOMES
    layout = _native.LAYOUT
    assert layout["BORNHOST"] == rf.BORNHOST_POS == rf.HEAD.size
    assert layout["PHYSICALOFFSET"] == rf.PHYSICALOFFSET_POS
    assert layout["SYSFLAG"] == rf.SYSFLAG_POS
    assert layout["MID_SIZE"] == rf.MID.size
    assert layout["MAGIC_V1"] == rf.MAGIC_V1 and layout["MAGIC_V2"] == rf.MAGIC_V2
    assert layout["BLANK_MAGIC"] == rf.BLANK_MAGIC
    assert layout["CRC32_RESERVED_LEN"] == rf.CRC32_RESERVED_LEN
    assert rf.cal_msg_length(1, 0, 0, 0, 0) == layout["CAL_FIXED"] + 8 + 8 + 1


@pytest.mark.parametrize("n", [0, 1, 15, 16, 63, 64, 65, 127, 128, 1000, 4096, 65536 + 13])
def test_crc32_kernel_matches_zlib(n):
    data = bytes((i * 131 + 7) & 0xFF for i in range(n))
    assert _native._crc32(data) == zlib.crc32(data) & 0x7FFFFFFF


# -- a tiny raw record encoder (any field value, malformed included) -------------------------------

MAGIC = {1: rf.MAGIC_V1, 2: rf.MAGIC_V2}


def raw_record(*, version=1, body=b"", topic=b"TopicTest", props=b"", sys_flag=0, phy=0,
               queue_id=0, flag=0, queue_offset=0, store_ts=1_700_000_000_123, born_ts=1_700_000_000_000,
               born_addr=b"\x7f\0\0\x01", born_port=40001, store_addr=b"\x7f\0\0\x01", store_port=10911,
               reconsume=0, prepared=0, body_crc=None, total=None, body_len=None, topic_len=None,
               props_len=None, magic=None, crc_property=False) -> bytes:
    """One record, fields in F§3.1 order; any length field may be overridden (torn/corrupt)."""
    if len(born_addr) == 16:
        sys_flag |= rf.BORNHOST_V6_FLAG
    if len(store_addr) == 16:
        sys_flag |= rf.STOREHOSTADDRESS_V6_FLAG
    if crc_property:
        props = props + b"__CRC32#\x01" + b"0" * 10 + b"\x02"
    if body_crc is None:
        body_crc = zlib.crc32(body) & 0x7FFFFFFF if body else 0
    tl = len(topic) if topic_len is None else topic_len
    rec = b"".join([
        struct.pack(">i", body_crc),                               # BODYCRC
        struct.pack(">i", queue_id),                               # QUEUEID
        struct.pack(">i", flag),                                   # FLAG
        struct.pack(">q", queue_offset),                           # QUEUEOFFSET
        struct.pack(">q", phy),                                    # PHYSICALOFFSET
        struct.pack(">i", sys_flag),                               # SYSFLAG
        struct.pack(">q", born_ts),                                # BORNTIMESTAMP
        born_addr + struct.pack(">i", born_port),                  # BORNHOST
        struct.pack(">q", store_ts),                               # STORETIMESTAMP
        store_addr + struct.pack(">i", store_port),                # STOREHOSTADDRESS
        struct.pack(">i", reconsume),                              # RECONSUMETIMES
        struct.pack(">q", prepared),                               # PREPARED TRANSACTION OFFSET
        struct.pack(">i", len(body) if body_len is None else body_len),  # BODYLEN
        body,                                                      # BODY
        struct.pack(">b" if version == 1 else ">h",
                    ((tl + 128) % 256 - 128) if version == 1 else tl),   # TOPICLEN
        topic,                                                     # TOPIC
        struct.pack(">h", len(props) if props_len is None else props_len),  # PROPERTIESLEN
        props,                                                     # PROPERTIES
    ])
    size = 8 + len(rec) if total is None else total
    out = bytearray(struct.pack(">ii", size, MAGIC.get(version, 0) if magic is None else magic) + rec)
    if crc_property and total is None:
        crc = zlib.crc32(bytes(out[:-rf.CRC32_RESERVED_LEN])) & 0x7FFFFFFF
        digits = str(crc).rjust(10, "0")[::-1].encode()       # least significant digit first (F§3.8)
        out[-11:-1] = digits
    return bytes(out)


def blank(n: int) -> bytes:
    return struct.pack(">ii", n, rf.BLANK_MAGIC)


def test_raw_encoder_matches_synthetic_encoder():
    """The local encoder writes what ``store_reader.testing.synthetic`` (proved against every fixture) writes."""
    synthetic = pytest.importorskip("store_reader.testing.synthetic")
    props = {"KEYS": "k1 k2", "TAGS": "TagA"}
    want = synthetic.encode_message(topic="TopicTest", body=b"hello", properties=props, phy_offset=168,
                                    store_timestamp=5, born_timestamp=4, born_host="127.0.0.1:40001",
                                    queue_offset=3, queue_id=1)
    got = raw_record(body=b"hello", props=synthetic.encode_properties(props).encode(), phy=168,
                     store_ts=5, born_ts=4, queue_offset=3, queue_id=1)
    assert got == want


# F§3.13 worked example, byte for byte as the spec prints it (generated there with java.nio.ByteBuffer).
SPEC_3_13 = bytes.fromhex("""
    00 00 00 a8 da a3 20 a7 77 d1 89 82 00 00 00 01
    00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00
    00 00 00 00 00 00 00 00 00 00 01 8b cf e5 68 00
    c0 a8 00 0a 00 00 d4 31 00 00 01 8b cf e5 68 7b
    c0 a8 00 01 00 00 2a 9f 00 00 00 00 00 00 00 00
    00 00 00 00 00 00 00 05 48 65 6c 6c 6f 09 54 6f
    70 69 63 54 65 73 74 00 3f 54 41 47 53 01 54 61
    67 41 02 4b 45 59 53 01 6b 31 20 6b 32 02 55 4e
    49 51 5f 4b 45 59 01 37 46 30 30 30 30 30 31 30
    42 38 43 31 38 42 34 41 41 43 32 31 32 33 34 35
    36 37 38 30 30 30 30 02
""")
SPEC_3_13_CRC_TAIL = bytes.fromhex("5f 5f 43 52 43 33 32 23 01 36 31 35 35 35 32 30 35 30 30 02")


def _decode_one(rec: bytes, opts: rf.ScanOptions) -> dict:
    cols, n, nxt, stop, stats = _native.scan(rec, 0, 0, len(rec), 10, commitlog._native_opts(opts), SCANNED)
    assert n == 1 and nxt == len(rec), (n, nxt, stop)
    return pa.table({c: commitlog._column_array(c, cols[c], n) for c in SCANNED}).to_pylist()[0]


def test_spec_worked_example_3_13():
    assert len(SPEC_3_13) == 168
    row = _decode_one(SPEC_3_13, rf.ScanOptions(broker_5x=False))
    assert row["total_size"] == 168 and row["body_crc"] == 2010220930 and row["queue_id"] == 1
    assert row["born_host"] == "192.168.0.10:54321" and row["store_host"] == "192.168.0.1:10911"
    assert row["born_timestamp"] == 1700000000000 and row["store_timestamp"] == 1700000000123
    assert row["topic"] == "TopicTest" and row["tags"] == "TagA" and row["key_list"] == ["k1", "k2"]
    assert row["tags_code"] == 2598919
    assert row["msg_id"] == "C0A8000100002A9F0000000000000000"
    assert row["uniq_key"] == "7F0000010B8C18B4AAC2123456780000"
    assert row["body_crc_ok"] is True and row["record_crc_ok"] is None


def test_host_text_cache_and_formatting(tmp_path):
    """born_host / store_host: many distinct hosts (more than the native cache holds, colliding
    slots, IPv4 and IPv6 mixed, edge ports) interleaved and repeated, formatted as the twin does."""
    import random
    rnd = random.Random(7)
    ports = [0, 1, -1, 9, 10, 99, 100, 65535, 2**31 - 1, -2**31, -10]
    v4 = [bytes([a, b, c, d]) for a, b, c, d in
          [(0, 0, 0, 0), (255, 255, 255, 255), (10, 0, 1, 9), (1, 22, 100, 199), (127, 0, 0, 1)]]
    v6 = [bytes(16), b"\xff" * 16, bytes(range(16)), b"\x00\x01" + bytes(12) + b"\x0a\xbc",
          b"\xfe\x80" + bytes(13) + b"\x01"]
    hosts = [(a, p) for a in v4 + v6 for p in ports]
    hosts += [(bytes(rnd.randrange(256) for _ in range(rnd.choice([4, 16]))), rnd.randrange(-2**31, 2**31))
              for _ in range(200)]
    seg = bytearray()
    for i in range(1500):
        (ba, bp), (sa, sp) = rnd.choice(hosts[:8] if i % 3 else hosts), rnd.choice(hosts)
        seg += raw_record(phy=len(seg), born_addr=ba, born_port=bp, store_addr=sa, store_port=sp)
    path = _write_segment(tmp_path, bytes(seg))
    pure, native = _scan_both(path, rf.ScanOptions(), columns=["born_host", "store_host", "msg_id"])
    _assert_same(pure, native)
    assert native[0].num_rows == 1500


def test_spec_worked_example_3_13_with_record_crc():
    rec = bytearray(SPEC_3_13 + SPEC_3_13_CRC_TAIL)
    rec[3] = 188                                  # TOTALSIZE
    rec[0x68] = 0x53                              # PROPERTIESLEN 83
    rec = bytes(rec)
    row = _decode_one(rec, rf.ScanOptions(force_verify_prop_crc=True))
    assert row["record_crc_ok"] is True and row["properties"][-1] == ("__CRC32#", "6155520500")
    broken = rec[:-3] + b"1" + rec[-2:]          # another CRC value
    _, n, _, stop, _ = _native.scan(broken, 0, 0, len(broken), 1,
                                    commitlog._native_opts(rf.ScanOptions(force_verify_prop_crc=True)), ())
    assert n == 0 and stop == (rf.INVALID, rf.CHECK_CODE["record_crc"], 188)


# -- broker edge cases, byte for byte, against both scanners ------------------------------------------
# Each record below is written out field by field (F§3.1: V1 magic, IPv4 hosts unless noted); every
# test scans it with the pure twin and with the native scanner, which must agree, and checks what
# CommitLog#checkMessageAndReturnSize [4.9.7 / 5.3.3] does with it.

V1_MAGIC = b"\xda\xa3\x20\xa7"                 # MAGICCODE 0xDAA320A7 (V1)
BLANK_MAGIC = b"\xcb\xd4\x31\x94"              # MAGICCODE 0xCBD43194 (blank / end of file)
# fields 3..14, the same in most records below (76 bytes)
FIXED_3_14 = (
    b"\x00\x00\x00\x00"                        # BODYCRC 0 (no body)
    b"\x00\x00\x00\x01"                        # QUEUEID 1
    b"\x00\x00\x00\x00"                        # FLAG 0
    b"\x00\x00\x00\x00\x00\x00\x00\x00"        # QUEUEOFFSET 0
    b"\x00\x00\x00\x00\x00\x00\x00\x00"        # PHYSICALOFFSET 0
    b"\x00\x00\x00\x00"                        # SYSFLAG 0 (IPv4 born and store hosts)
    b"\x00\x00\x01\x8b\xcf\xe5\x68\x00"        # BORNTIMESTAMP 1700000000000
    b"\xc0\xa8\x00\x0a\x00\x00\xd4\x31"        # BORNHOST 192.168.0.10:54321
    b"\x00\x00\x01\x8b\xcf\xe5\x68\x7b"        # STORETIMESTAMP 1700000000123
    b"\xc0\xa8\x00\x01\x00\x00\x2a\x9f"        # STOREHOST 192.168.0.1:10911
    b"\x00\x00\x00\x00"                        # RECONSUMETIMES 0
    b"\x00\x00\x00\x00\x00\x00\x00\x00"        # PREPARED TRANSACTION OFFSET 0
)
assert len(FIXED_3_14) == 76

OPTS_5X, OPTS_497 = rf.ScanOptions(broker_5x=True), rf.ScanOptions(broker_5x=False)
ONE_RECORD_COLUMNS = ("total_size", "topic", "store_timestamp", "tags_code", "delay_level",
                      "properties", "body_crc_ok", "record_crc_ok")


def _scan_one(buf: bytes, opts: rf.ScanOptions, pos: int = 0) -> tuple[int, tuple | None, dict | None]:
    """The record at ``pos`` through both scanners (which must agree): (count, stop, row)."""
    columns = ONE_RECORD_COLUMNS
    p = _pyscan.scan(buf, 0, pos, len(buf), 1, opts, columns)
    n = _native.scan(buf, 0, pos, len(buf), 1, commitlog._native_opts(opts), columns)
    assert n[1:] == p[1:], (n[1:], p[1:])
    rows = {}
    for c in columns:
        a = commitlog._column_array(c, n[0][c], n[1])
        a.validate(full=True)
        assert a.equals(commitlog._column_array(c, p[0][c], p[1])), c
        rows[c] = a.to_pylist()
    row = {c: v[0] for c, v in rows.items()} if p[1] else None
    return p[1], p[3], row


# 1. duplicationEnable [5.x]: `DUP_INFO.split("_").length == 2`, and Java's split drops trailing
#    empty strings (an empty leading one stays).
def _dup_record(total: bytes, props_len: bytes, value: bytes) -> bytes:
    return (
        total                                  # TOTALSIZE = 91 + t 1 + p
        + V1_MAGIC + FIXED_3_14 +              # MAGICCODE, fields 3..14
        b"\x00\x00\x00\x00"                    # BODYLEN 0
        b"\x01"                                # TOPICLEN 1
        b"T"                                   # TOPIC
        + props_len +                          # PROPERTIESLEN p
        b"DUP_INFO\x01" + value + b"\x02"      # PROPERTIES: DUP_INFO=<value>
    )


@pytest.mark.parametrize("rec, parts", [
    pytest.param(_dup_record(b"\x00\x00\x00\x69", b"\x00\x0d", b"a_b"), 2, id="a_b"),   # [a, b]
    pytest.param(_dup_record(b"\x00\x00\x00\x6a", b"\x00\x0e", b"a_b_"), 2, id="a_b_"),   # [a, b] (trailing "" dropped)
    pytest.param(_dup_record(b"\x00\x00\x00\x68", b"\x00\x0c", b"_a"), 2, id="_a"),   # ["", a] (leading "" kept)
    pytest.param(_dup_record(b"\x00\x00\x00\x68", b"\x00\x0c", b"a_"), 1, id="a_"),   # [a]
    pytest.param(_dup_record(b"\x00\x00\x00\x69", b"\x00\x0d", b"a__"), 1, id="a__"),   # [a]
    pytest.param(_dup_record(b"\x00\x00\x00\x67", b"\x00\x0b", b"_"), 0, id="_"),   # [] (both "" dropped)
])
def test_dup_info_split_drops_trailing_empty_parts(rec, parts):
    dup = _pyscan.parse_properties(rec[92:].decode())["DUP_INFO"]      # PROPERTIES start at 92
    assert len(java_split(dup, "_")) == parts
    opts = rf.ScanOptions(check_dup_info=True)
    n, stop, row = _scan_one(rec, opts)
    if parts == 2:
        assert n == 1 and stop is None and row["total_size"] == len(rec)
    else:
        assert n == 0 and stop == (rf.INVALID, rf.CHECK_CODE["dup_info"], len(rec))
    assert _scan_one(rec, OPTS_5X)[0] == 1            # without duplicationEnable: not checked


# 2. forceVerifyPropCRC [5.x]: expectedCRC = sum of (charAt(i) - '0') * 10^i over the UTF-16 units
#    in int arithmetic, no character rejected, any length, and it must be > 0. The records are
#    TAGS=a then __CRC32#=<value>; bytes [0, TOTALSIZE - 20) do not depend on the value.
def _crc_record(total: bytes, props_len: bytes, value: bytes) -> bytes:
    return (
        total                                  # TOTALSIZE
        + V1_MAGIC + FIXED_3_14 +              # MAGICCODE, fields 3..14
        b"\x00\x00\x00\x00"                    # BODYLEN 0
        b"\x01"                                # TOPICLEN 1
        b"T"                                   # TOPIC
        + props_len +                          # PROPERTIESLEN
        b"TAGS\x01a\x02"                       # PROPERTIES: TAGS=a
        b"__CRC32#\x01" + value + b"\x02"      #             __CRC32#=<value>
    )


# 10-character values: TOTALSIZE 119 = 91 + t 1 + p 27; CRC of bytes [0, 99) = 563811919
CRC_10 = functools.partial(_crc_record, b"\x00\x00\x00\x77", b"\x00\x1b")
# 10-character, 11-byte values (or 11 ASCII characters): TOTALSIZE 120, p 28; CRC of [0, 100) = 600002570
CRC_11 = functools.partial(_crc_record, b"\x00\x00\x00\x78", b"\x00\x1c")


@pytest.mark.parametrize("rec, ok", [
    pytest.param(CRC_10(b"9191183650"), True,        # 563811919, least significant digit first
                 id="digits"),
    pytest.param(CRC_10(b"C091183650"), True,        # 'C' - '0' = 19 = 9 + 10, carried into the
                 id="non-digit"),                    #   next unit ('0' for 1): the same sum
    pytest.param(CRC_10(b"5129778584"), True,        # 4858779215 = 563811919 + 2^32: wraps
                 id="int-wrap"),
    pytest.param(CRC_11(b"07520000600"), True,       # 600002570 and a most significant '0':
                 id="11-digits"),                    #   the length is not checked
    pytest.param(CRC_11("\u0666890000060".encode()),  # U+0666 (Arabic-Indic six) counts as
                 True, id="non-ascii"),              #   0x666 - 48 = 1590; + 10 * 60000098
    pytest.param(CRC_10(b"9191183651"), False,       # 1563811919: another value
                 id="wrong"),
    pytest.param(CRC_10(b"0000000000"), False,       # 0: expectedCRC > 0 is required
                 id="zero"),
    pytest.param(CRC_10(b"8463847412"), False,       # 2147483648 wraps to Integer.MIN_VALUE
                 id="wraps-negative"),
])
def test_record_crc_value_parsed_as_the_broker_does(rec, ok):
    assert len(rec) == struct.unpack(">i", rec[:4])[0]
    n, stop, row = _scan_one(rec, rf.ScanOptions(force_verify_prop_crc=True))
    if ok:
        assert n == 1 and row["record_crc_ok"] is True
    else:
        assert n == 0 and stop == (rf.INVALID, rf.CHECK_CODE["record_crc"], len(rec))
        n, _, row = _scan_one(rec, rf.ScanOptions(check_crc=False, compute_crc=True))
        assert n == 1 and row["record_crc_ok"] is False    # reported, not enforced


def test_record_crc_range_counts_back_from_the_end_of_properties():
    """The broker CRCs [end of PROPERTIES - TOTALSIZE, end of PROPERTIES - 20): a TOTALSIZE larger
    than the fields reach moves the range back, here onto 8 bytes before the record."""
    buf = (
        b"PREVIOUS"                            # 8 bytes before the record (scanned from 8)
        b"\x00\x00\x00\x7f"                    # TOTALSIZE 127, but the fields end after 119
        + V1_MAGIC + FIXED_3_14 +              # MAGICCODE, fields 3..14
        b"\x00\x00\x00\x00"                    # BODYLEN 0
        b"\x01"                                # TOPICLEN 1
        b"T"                                   # TOPIC
        b"\x00\x1b"                            # PROPERTIESLEN 27
        b"TAGS\x01a\x02"                       # PROPERTIES: TAGS=a
        b"__CRC32#\x014951283230\x02"          #   __CRC32#: 323821594 = CRC of buf[0, 107)
        b"\x00\x00\x00\x00\x00\x00\x00\x00"    # 8 bytes more, so that TOTALSIZE fits (step 2)
    )
    n, stop, _ = _scan_one(buf, rf.ScanOptions(force_verify_prop_crc=True), pos=8)
    assert n == 0 and stop == (rf.LENGTH_MISMATCH, rf.CHECK_CODE["length_mismatch"], 127)
    n, stop, _ = _scan_one(buf[8:], rf.ScanOptions(force_verify_prop_crc=True))
    assert n == 0 and stop == (rf.INVALID, rf.CHECK_CODE["record_crc"], 127)   # range starts at -8


# 3. Schedule-topic tags code = STORETIMESTAMP + delay, Java long arithmetic: it wraps.
def test_schedule_deliver_time_wraps_like_java_long():
    rec = (
        b"\x00\x00\x00\x76"                    # TOTALSIZE 118 = 91 + t 19 + p 8
        + V1_MAGIC +                           # MAGICCODE V1
        b"\x00\x00\x00\x00"                    # BODYCRC 0 (no body)
        b"\x00\x00\x00\x01"                    # QUEUEID 1 (delay level 2)
        b"\x00\x00\x00\x00"                    # FLAG 0
        b"\x00\x00\x00\x00\x00\x00\x00\x00"    # QUEUEOFFSET 0
        b"\x00\x00\x00\x00\x00\x00\x00\x00"    # PHYSICALOFFSET 0
        b"\x00\x00\x00\x00"                    # SYSFLAG 0
        b"\x00\x00\x01\x8b\xcf\xe5\x68\x00"    # BORNTIMESTAMP 1700000000000
        b"\xc0\xa8\x00\x0a\x00\x00\xd4\x31"    # BORNHOST 192.168.0.10:54321
        b"\x7f\xff\xff\xff\xff\xff\xf0\x00"    # STORETIMESTAMP 2^63 - 4096
        b"\xc0\xa8\x00\x01\x00\x00\x2a\x9f"    # STOREHOST 192.168.0.1:10911
        b"\x00\x00\x00\x00"                    # RECONSUMETIMES 0
        b"\x00\x00\x00\x00\x00\x00\x00\x00"    # PREPARED TRANSACTION OFFSET 0
        b"\x00\x00\x00\x00"                    # BODYLEN 0
        b"\x13"                                # TOPICLEN 19
        b"SCHEDULE_TOPIC_XXXX"                 # TOPIC
        b"\x00\x08"                            # PROPERTIESLEN 8
        b"DELAY\x012\x02"                      # PROPERTIES: DELAY=2 (5 s)
    )
    for opts in (OPTS_5X, OPTS_497):
        n, _, row = _scan_one(rec, opts)
        assert n == 1 and row["store_timestamp"] == 2**63 - 4096 and row["delay_level"] == 2
        assert row["tags_code"] == 2**63 - 4096 + 5000 - 2**64 == -9223372036854774904


# 4. `new byte[totalSize]` comes right after the magic [all]: a negative TOTALSIZE throws, and so
#    does copying a host, the body, the topic or the properties into it when longer than TOTALSIZE.
#    The broker returns INVALID (not a LENGTH_MISMATCH of the torn kind).
@pytest.mark.parametrize("opts", [OPTS_5X, OPTS_497], ids=["5.x", "4.9.7"])
@pytest.mark.parametrize("rec, check", [
    pytest.param(
        b"\xff\xff\xff\xff"                    # TOTALSIZE -1
        + V1_MAGIC + FIXED_3_14 +              # MAGICCODE, fields 3..14
        b"\x00\x00\x00\x00"                    # BODYLEN 0
        b"\x01"                                # TOPICLEN 1
        b"T"                                   # TOPIC
        b"\x00\x00",                           # PROPERTIESLEN 0 (record is 93 bytes)
        "total_size", id="negative-total"),
    pytest.param(
        b"\x00\x00\x00\x04"                    # TOTALSIZE 4: BORNHOST (8) does not fit
        + V1_MAGIC + FIXED_3_14 +              # MAGICCODE, fields 3..14
        b"\x00\x00\x00\x00"                    # BODYLEN 0
        b"\x01"                                # TOPICLEN 1
        b"T"                                   # TOPIC
        b"\x00\x00",                           # PROPERTIESLEN 0 (record is 93 bytes)
        "out_of_bounds", id="host-longer"),
    pytest.param(
        b"\x00\x00\x00\x0c"                    # TOTALSIZE 12: the body (13) does not fit
        + V1_MAGIC +                           # MAGICCODE V1
        b"\x6b\xe6\xc6\xe6"                    # BODYCRC 1810286310 = crc32("Hello, world!")
        b"\x00\x00\x00\x01"                    # QUEUEID 1
        b"\x00\x00\x00\x00"                    # FLAG 0
        b"\x00\x00\x00\x00\x00\x00\x00\x00"    # QUEUEOFFSET 0
        b"\x00\x00\x00\x00\x00\x00\x00\x00"    # PHYSICALOFFSET 0
        b"\x00\x00\x00\x00"                    # SYSFLAG 0
        b"\x00\x00\x01\x8b\xcf\xe5\x68\x00"    # BORNTIMESTAMP 1700000000000
        b"\xc0\xa8\x00\x0a\x00\x00\xd4\x31"    # BORNHOST 192.168.0.10:54321
        b"\x00\x00\x01\x8b\xcf\xe5\x68\x7b"    # STORETIMESTAMP 1700000000123
        b"\xc0\xa8\x00\x01\x00\x00\x2a\x9f"    # STOREHOST 192.168.0.1:10911
        b"\x00\x00\x00\x00"                    # RECONSUMETIMES 0
        b"\x00\x00\x00\x00\x00\x00\x00\x00"    # PREPARED TRANSACTION OFFSET 0
        b"\x00\x00\x00\x0d"                    # BODYLEN 13
        b"Hello, world!"                       # BODY
        b"\x01"                                # TOPICLEN 1
        b"T"                                   # TOPIC
        b"\x00\x00",                           # PROPERTIESLEN 0 (record is 106 bytes)
        "out_of_bounds", id="body-longer"),
    pytest.param(
        b"\x00\x00\x00\x0c"                    # TOTALSIZE 12: the topic (13) does not fit
        + V1_MAGIC + FIXED_3_14 +              # MAGICCODE, fields 3..14
        b"\x00\x00\x00\x00"                    # BODYLEN 0
        b"\x0d"                                # TOPICLEN 13
        b"TopicTest-13b"                       # TOPIC
        b"\x00\x00",                           # PROPERTIESLEN 0 (record is 105 bytes)
        "out_of_bounds", id="topic-longer"),
    pytest.param(
        b"\x00\x00\x00\x0c"                    # TOTALSIZE 12: the properties (13) do not fit
        + V1_MAGIC + FIXED_3_14 +              # MAGICCODE, fields 3..14
        b"\x00\x00\x00\x00"                    # BODYLEN 0
        b"\x01"                                # TOPICLEN 1
        b"T"                                   # TOPIC
        b"\x00\x0d"                            # PROPERTIESLEN 13
        b"TAGS\x01TagA\x02KE\x02",             # PROPERTIES (record is 106 bytes)
        "out_of_bounds", id="properties-longer"),
])
def test_fields_are_copied_into_a_totalsize_array(rec, check, opts):
    buf = rec + bytes(8)                               # room to spare: not a torn tail
    n, stop, _ = _scan_one(buf, opts)
    assert n == 0 and stop == (rf.INVALID, rf.CHECK_CODE[check], struct.unpack(">i", rec[:4])[0])
    # the same record with its real TOTALSIZE is VALID
    n, stop, row = _scan_one(struct.pack(">i", len(rec)) + buf[4:], opts)
    assert n == 1 and row["total_size"] == len(rec)


# 5. Step 2 [5.x] is `remaining() < totalSize - 4` in int arithmetic: TOTALSIZE INT_MIN..INT_MIN+3
#    wraps to a huge value and fails, even in front of the blank magic; INT_MIN+4 does not.
@pytest.mark.parametrize("rec, want_5x, want_497", [
    pytest.param(
        b"\x80\x00\x00\x00"                    # TOTALSIZE -2^31: -2^31 - 4 wraps to 2^31 - 4
        + BLANK_MAGIC +                        # MAGICCODE blank
        b"\x00\x00\x00\x00\x00\x00\x00\x00",   # filler
        (rf.INVALID, "total_size"), (rf.END_OF_FILE, ""), id="INT_MIN-blank"),
    pytest.param(
        b"\x80\x00\x00\x03"                    # TOTALSIZE -2^31 + 3: - 4 wraps to 2^31 - 1
        + BLANK_MAGIC +                        # MAGICCODE blank
        b"\x00\x00\x00\x00\x00\x00\x00\x00",   # filler
        (rf.INVALID, "total_size"), (rf.END_OF_FILE, ""), id="INT_MIN+3-blank"),
    pytest.param(
        b"\x80\x00\x00\x04"                    # TOTALSIZE -2^31 + 4: - 4 = -2^31, no wrap
        + BLANK_MAGIC +                        # MAGICCODE blank
        b"\x00\x00\x00\x00\x00\x00\x00\x00",   # filler
        (rf.END_OF_FILE, ""), (rf.END_OF_FILE, ""), id="INT_MIN+4-blank"),
    pytest.param(
        b"\x80\x00\x00\x04"                    # TOTALSIZE -2^31 + 4: passes step 2 ...
        + V1_MAGIC +                           # MAGICCODE V1: ... then new byte[negative] throws
        b"\x00\x00\x00\x00\x00\x00\x00\x00",   # filler
        (rf.INVALID, "total_size"), (rf.INVALID, "total_size"), id="INT_MIN+4-V1"),
])
def test_step2_total_size_minus_4_wraps_like_java_int(rec, want_5x, want_497):
    for opts, (outcome, check) in ((OPTS_5X, want_5x), (OPTS_497, want_497)):
        n, stop, _ = _scan_one(rec, opts)
        assert n == 0 and stop == (outcome, rf.CHECK_CODE[check], struct.unpack(">i", rec[:4])[0])


# -- (b) generated segments ------------------------------------------------------------------------

NAMES = [b"TAGS", b"KEYS", b"UNIQ_KEY", b"DELAY", b"REAL_TOPIC", b"REAL_QID", b"TRAN_MSG", b"DUP_INFO",
         b"INNER_NUM", b"INNER_BASE", b"__CRC32#", b"CLUSTER", b"WAIT", b"x", b"", b"\xff\xfe", b"n\x01m"]
VALUES = st.one_of(
    st.sampled_from([b"", b"true", b"TagA", b"k1 k2", b" a  b ", b"3", b"-1", b"+7", b"2147483648",
                     b"18", b"99", b"a_b", b"a_b_", b"_", b"a_", b"_a", b"a__", b"__", b"0123456789",
                     b"C091183650", b"8463847412", b"00000000000", "\u0666890000060".encode(),
                     "\uff11".encode(), b"\xff", b"\xe2\x82", b"\xf0\x9f\x98\x80",
                     b"\xed\xa0\x80", b"x\x01y", "订单".encode(), b"-32768", b"32768", b"9223372036854775808"]),
    st.binary(max_size=12),
)
PAIR = st.tuples(st.sampled_from(NAMES), VALUES)
TOPICS = st.one_of(st.sampled_from([b"TopicTest", b"SCHEDULE_TOPIC_XXXX", b"", b"%RETRY%g", b"T\xffopic",
                                    "主题".encode(), b"t" * 130]),
                   st.binary(max_size=20))
IPV4 = st.sampled_from([b"\x7f\0\0\x01", b"\xc0\xa8\x01\xff", b"\0\0\0\0"])
IPV6 = st.sampled_from([bytes(range(16)), b"\xfe\x80" + bytes(13) + b"\x01", b"\xff" * 16])
I32 = st.one_of(st.sampled_from([0, 1, -1, 2**31 - 1, -2**31]), st.integers(-2**31, 2**31 - 1))
# the whole i64 range: schedule-topic deliver times wrap like Java longs in both scanners
I64 = st.integers(-2**63, 2**63 - 1)
STORE_TS = st.one_of(st.sampled_from([0, 1_700_000_000_123, 2**63 - 1, -2**63]), I64)
DELAY_MS = st.one_of(st.integers(-2**40, 2**40), st.sampled_from([2**63 - 1, -2**63]), I64)


@st.composite
def records(draw, phy: int, broker_5x: bool):
    """One record at phy offset ``phy``: mostly well-formed, sometimes with a field overridden."""
    version = draw(st.sampled_from([1, 1, 1, 2]))
    pairs = draw(st.lists(PAIR, max_size=8))
    props = b"".join(n + b"\x01" + v + b"\x02" for n, v in pairs)
    if props and draw(st.booleans()):
        props = props[:-1]                                  # 4.9.7 style: no trailing \x02
    kw = dict(
        version=version,
        body=draw(st.one_of(st.just(b""), st.binary(max_size=64))),
        topic=draw(TOPICS),
        props=props,
        sys_flag=draw(st.one_of(st.just(0), st.integers(0, 0x7FF))) & ~0x30,
        phy=phy if draw(st.integers(0, 9)) else draw(st.integers(-2**63, 2**63 - 1)),
        queue_id=draw(I32), flag=draw(I32), queue_offset=draw(st.integers(-2**63, 2**63 - 1)),
        store_ts=draw(STORE_TS), born_ts=draw(st.integers(-2**63, 2**63 - 1)),
        born_addr=draw(st.one_of(IPV4, IPV6)), store_addr=draw(st.one_of(IPV4, IPV6)),
        born_port=draw(I32), store_port=draw(I32), reconsume=draw(I32),
        prepared=draw(st.integers(-2**63, 2**63 - 1)),
        crc_property=draw(st.booleans()),
    )
    if not kw["body"] and draw(st.booleans()):
        kw["body_crc"] = draw(I32)
    mutation = draw(st.sampled_from(["none"] * 6 + ["total", "body_len", "topic_len", "props_len",
                                                    "magic", "body_crc"]))
    if mutation == "total":
        kw["total"] = draw(st.one_of(I32, st.integers(0, 400)))
    elif mutation == "body_len":
        kw["body_len"] = draw(st.one_of(I32, st.integers(-4, 80)))
    elif mutation == "topic_len":
        kw["topic_len"] = draw(st.integers(-128, 300) if version == 2 else st.integers(0, 255))
    elif mutation == "props_len":
        kw["props_len"] = draw(st.integers(-32768, 32767))
    elif mutation == "magic":
        kw["magic"] = draw(st.sampled_from([rf.MAGIC_V1, rf.MAGIC_V2, rf.BLANK_MAGIC, 0, 12345]))
    elif mutation == "body_crc":
        kw["body_crc"] = draw(I32)
    return raw_record(**kw)


RARELY = st.sampled_from([False, False, False, False, True])


@st.composite
def scan_options(draw):
    return rf.ScanOptions(
        check_crc=draw(st.booleans()), compute_crc=draw(st.booleans()),
        force_verify_prop_crc=draw(RARELY), check_dup_info=draw(RARELY),
        broker_5x=draw(st.booleans()),
        delay_levels_ms=draw(st.one_of(st.just(rf.ScanOptions().delay_levels_ms),
                                       st.lists(DELAY_MS, max_size=4).map(tuple))))


@st.composite
def segments(draw, broker_5x: bool, file_start: int):
    """Records back to back (phy offsets as the broker writes them), then an ending."""
    out = bytearray()
    for _ in range(draw(st.integers(0, 6))):
        out += draw(records(file_start + len(out), broker_5x))
    ending = draw(st.sampled_from(["zeros", "blank", "garbage", "none", "blank_then_junk"]))
    if ending == "zeros":
        out += bytes(draw(st.integers(0, 64)))
    elif ending == "blank":
        out += blank(draw(st.one_of(st.just(8), I32))) + bytes(draw(st.integers(0, 16)))
    elif ending == "garbage":
        out += draw(st.binary(min_size=1, max_size=48))
        if draw(st.booleans()):                       # an intact record after the damage: resync
            out += draw(records(file_start + len(out), broker_5x))
    elif ending == "blank_then_junk":
        out += blank(8) + draw(st.binary(min_size=1, max_size=8))
    return bytes(out)


@settings(suppress_health_check=SUPPRESS)
@given(data=st.data())
def test_generated_segments_native_equals_twin(tmp_path_factory, data):
    opts = data.draw(scan_options(), label="opts")
    file_start = data.draw(st.sampled_from([0, 65536, 1 << 30]), label="file_start")
    seg = data.draw(segments(opts.broker_5x, file_start), label="segment")
    path = _write_segment(tmp_path_factory.mktemp("gen"), seg, file_start)
    columns = data.draw(st.one_of(st.just(ALL_COLUMNS),
                                  st.lists(st.sampled_from(ALL_COLUMNS), unique=True)), label="columns")
    _assert_same(*_scan_both(path, opts, columns=columns,
                             batch_size=data.draw(st.sampled_from([1, 2, 16384]), label="batch")))


MUTATIONS = st.lists(st.one_of(
    st.tuples(st.just("flip"), st.integers(0, 1 << 16), st.integers(1, 255)),
    st.tuples(st.just("truncate"), st.integers(0, 1 << 16), st.just(0)),
    st.tuples(st.just("insert"), st.integers(0, 1 << 16), st.binary(min_size=1, max_size=32)),
    st.tuples(st.just("total"), st.integers(0, 40), I32),
), min_size=1, max_size=4)


def _mutate(data: bytes, mutations) -> bytes:
    buf = bytearray(data)
    for kind, where, arg in mutations:
        if not buf:
            break
        if kind == "flip":
            buf[where % len(buf)] ^= arg
        elif kind == "truncate":
            del buf[where % len(buf):]
        elif kind == "insert":
            buf[where % len(buf):where % len(buf)] = arg
        else:                         # overwrite the TOTALSIZE of the n-th record of the valid run
            pos, n = 0, where
            while n and pos + 8 <= len(buf):
                size = struct.unpack_from(">i", buf, pos)[0]
                if size <= 0 or pos + size > len(buf):
                    break
                pos, n = pos + size, n - 1
            if pos + 4 <= len(buf):
                struct.pack_into(">i", buf, pos, arg)
    return bytes(buf)


@settings(suppress_health_check=SUPPRESS)
@given(data=st.data())
def test_mutated_real_segments_native_equals_twin(tmp_path_factory, data):
    real = _real_segments()
    assume(real)
    version, seg = data.draw(st.sampled_from(real), label="segment")
    mutated = _mutate(seg, data.draw(MUTATIONS, label="mutations"))
    opts = data.draw(st.one_of(st.just(rf.ScanOptions(broker_5x=version.endswith("5.3.3"))), scan_options()),
                     label="opts")
    path = _write_segment(tmp_path_factory.mktemp("mut"), mutated)
    columns = data.draw(st.sampled_from([ALL_COLUMNS, [], ["phy_offset", "properties", "key_list", "body"]]),
                        label="columns")
    try:
        results = _scan_both(path, opts, columns=columns)
    except StoreReaderError:
        return
    _assert_same(*results)


@settings(suppress_health_check=SUPPRESS)
@given(data=st.data())
def test_entry_points_native_equals_twin(data):
    """scan/resync/is_zero called directly at arbitrary positions give the twin's answers."""
    if data.draw(st.booleans(), label="real") and _real_segments():
        seg = _mutate(data.draw(st.sampled_from(_real_segments()))[1], data.draw(MUTATIONS))
    else:
        seg = data.draw(segments(True, 0))
    opts = data.draw(scan_options(), label="opts")
    nopts = commitlog._native_opts(opts)
    size = len(seg)
    pos = data.draw(st.integers(0, size + 8), label="pos")
    end = data.draw(st.integers(0, size), label="end")
    max_records = data.draw(st.integers(-1, 5), label="max_records")
    columns = tuple(data.draw(st.lists(st.sampled_from(SCANNED), unique=True), label="columns"))
    file_start = data.draw(st.sampled_from([0, 4096, -8, 2**62]), label="file_start")

    p_cols, p_n, p_next, p_stop, p_stats = _pyscan.scan(seg, file_start, pos, end, max_records, opts, columns)
    n_cols, n_n, n_next, n_stop, n_stats = _native.scan(seg, file_start, pos, end, max_records, nopts, columns)
    assert (n_n, n_next, n_stop, n_stats) == (p_n, p_next, p_stop, p_stats)
    assert set(n_cols) == set(p_cols) == set(columns)
    for c in columns:
        a = commitlog._column_array(c, n_cols[c], n_n)
        a.validate(full=True)
        assert a.equals(commitlog._column_array(c, p_cols[c], p_n)), c

    start = data.draw(st.integers(0, size + 8), label="start")
    assert _native.resync(seg, file_start, start, end, nopts) == _pyscan.resync(seg, file_start, start, end, opts)
    zs, ze = data.draw(st.integers(0, size + 8)), data.draw(st.integers(0, size + 8))
    assert _native.is_zero(seg, zs, ze) == _pyscan.is_zero(seg, zs, ze)


@example(b"\x00" * 4 + b"\x01")
@given(st.binary(max_size=64))
def test_is_zero(data):
    for s in range(0, len(data) + 2, 3):
        assert _native.is_zero(data, s, len(data)) == (not any(data[s:]))


# -- argument errors, buffer release, threads -------------------------------------------------------

NOPTS = commitlog._native_opts(rf.ScanOptions())


@pytest.mark.parametrize("args, exc", [
    ((b"abc", 0, 0, 10, 1, NOPTS, ()), ValueError),                 # end past the buffer
    ((b"abc", 0, -1, 3, 1, NOPTS, ()), ValueError),                 # negative position
    ((b"abc", 0, 0, 3, 1, NOPTS[:5], ()), ValueError),              # short opts
    ((b"abc", 0, 0, 3, 1, NOPTS[:5] + (b"123",), ()), ValueError),  # delay table not int64s
    ((b"abc", 0, 0, 3, 1, NOPTS, ("valid_prefix",)), ValueError),   # driver's own column
    ((b"abc", 0, 0, 3, 1, NOPTS, ("nope",)), ValueError),
    ((b"abc", 0, 0, 3, 1, NOPTS, (1,)), ValueError),
    (("abc", 0, 0, 3, 1, NOPTS, ()), TypeError),                    # no buffer protocol
])
def test_scan_rejects_bad_arguments(args, exc):
    with pytest.raises(exc):
        _native.scan(*args)


def test_buffers_released_on_every_path(tmp_path):
    """An mmap can be closed after every call, successful or not (no export left behind)."""
    rec = raw_record(body=b"x" * 10, props=b"TAGS\x01a\x02")
    path = tmp_path / "seg"
    path.write_bytes(rec + bytes(64))
    with open(path, "rb") as fh:
        m = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        _native.scan(m, 0, 0, len(m), 10, NOPTS, SCANNED)
        for bad in [(m, 0, 0, len(m) + 1, 1, NOPTS, ()), (m, 0, 0, len(m), 1, NOPTS, ("nope",)),
                    (m, 0, 0, len(m), 1, NOPTS[:5] + (b"1",), ())]:
            with pytest.raises(ValueError):
                _native.scan(*bad)
        assert _native.resync(m, 0, 1, len(m), NOPTS) == -1
        with pytest.raises(ValueError):
            _native.resync(m, 0, -1, len(m), NOPTS)
        assert _native.is_zero(m, len(rec), len(m))
        m.close()                     # BufferError here would mean a leaked Py_buffer


@pytest.mark.parametrize("decoys", [
    b"",
    b"\xda" * 7,                                   # the first magic byte alone, repeated
    b"\xda\xa3\x21\xda\xa3",                        # two bytes of the prefix, then a wrong third
    b"\xda\xa3\x20\xa7" + bytes(12),                 # the whole magic, in no record
])
def test_resync_finds_the_record_behind_magic_lookalikes(decoys):
    """resync's search for the magic prefix skips near-misses and zero runs, as the twin does."""
    gap = bytes(4096) + decoys + bytes(3)
    seg = bytes(gap) + raw_record(body=b"x" * 10, phy=len(gap)) + bytes(64) + b"\xda\xa3"
    for start in (0, 1, len(gap) - 1):
        assert _native.resync(seg, 0, start, len(seg), NOPTS) == len(gap) == \
            _pyscan.resync(seg, 0, start, len(seg), rf.ScanOptions())
    assert _native.resync(seg, 0, len(gap) + 1, len(seg), NOPTS) == -1     # a prefix cut by the end


@given(hole_at=st.integers(0, 5000), tail=st.integers(0, 600), junk=st.binary(max_size=40))
def test_resync_looks_for_records_starting_below_search_end_only(hole_at, tail, junk):
    """``search_end``: a record whose magic code starts at or past it is not a candidate, one whose
    code starts below it is checked against the whole span; with zeros from ``search_end`` on (a
    file's hole) the answer is the one without it. The twin agrees."""
    first = raw_record(body=b"x" * 30, phy=64)
    seg = bytearray(bytes(64) + first + junk + bytes(tail))
    second_at = len(seg)
    seg += raw_record(body=b"y" * 20, phy=second_at) + bytes(16)
    seg = bytes(seg)
    for start in (0, 65):
        for search_end in (hole_at, 64, 68, 69, second_at + 4, second_at + 5, len(seg)):
            want = next((q for q in (64, second_at) if start <= q and q + 4 < search_end), -1)
            assert _native.resync(seg, 0, start, len(seg), NOPTS, search_end) == want == \
                _pyscan.resync(seg, 0, start, len(seg), rf.ScanOptions(), search_end)
    # a record whose code starts below search_end is checked past it
    assert _native.resync(seg, 0, 0, len(seg), NOPTS, 69) == 64
    # zeros from search_end on: the same answer as without it
    zeroed = seg[:second_at] + bytes(len(seg) - second_at)
    for start in (0, 65, second_at):
        assert _native.resync(zeroed, 0, start, len(zeroed), NOPTS, second_at) == \
            _native.resync(zeroed, 0, start, len(zeroed), NOPTS)


def test_scans_in_parallel_threads_agree():
    """The scanning loop runs without the GIL: concurrent scans give the sequential result."""
    seg = bytearray()
    for i in range(2000):
        seg += raw_record(body=bytes([i % 256]) * 700, phy=len(seg), props=b"KEYS\x01k%d j\x02" % i)
    seg = bytes(seg) + bytes(32)
    want = _native.scan(seg, 0, 0, len(seg), 5000, NOPTS, SCANNED)
    assert want[1] == 2000
    results = []

    def work():
        results.append(_native.scan(seg, 0, 0, len(seg), 5000, NOPTS, SCANNED))

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 4 and all(r == want for r in results)


def test_batch_boundaries_and_growth():
    """Many records in one call (buffers grow past their first estimate) and in small batches."""
    seg = bytearray()
    for i in range(3000):
        body = bytes([i % 256]) * (1 + (i * 37) % 300)        # sizes vary: estimates are exceeded
        props = b"KEYS\x01" + b"k " * (i % 7) + b"\x02TAGS\x01t%d\x02" % i
        seg += raw_record(body=body, phy=len(seg), props=props)
    seg = bytes(seg) + blank(8)
    opts = rf.ScanOptions()
    p = _pyscan.scan(seg, 0, 0, len(seg), 10**9, opts, SCANNED)
    n = _native.scan(seg, 0, 0, len(seg), 10**9, commitlog._native_opts(opts), SCANNED)
    assert n[1:] == p[1:] and n[1] == 3000
    for c in SCANNED:
        assert commitlog._column_array(c, n[0][c], n[1]).equals(commitlog._column_array(c, p[0][c], p[1])), c


# -- (c) java_hashes -----------------------------------------------------------------------------

SPEC_VECTORS = [  # F§7.3
    ("TopicTest#k1", 2746024, 2746024),
    ("TopicTest#k2", 2746025, 2746025),
    ("TopicTest#7F0000010B8C18B4AAC2123456780000", 279271131, 279271131),
    ("TopicTest#order-42", -870421153, 870421153),
    ("polygenelubricants", -2147483648, 0),
    ("TopicTest#订单", 3872117, 3872117),
]


def _hashes_of(raw_strings: list[bytes], mode: int, pad: int = 0) -> list[int]:
    offsets = [0] * pad
    data = b"x" * 3
    for s in raw_strings:
        offsets.append(len(data))
        data += s
    offsets.append(len(data))
    if not offsets[pad:-1]:
        offsets = offsets[:pad] + [len(data)]
    buf = struct.pack(f"<{len(offsets)}i", *offsets)
    out = _native.java_hashes(buf, data, len(raw_strings), pad, mode)
    return list(struct.unpack(f"={len(raw_strings)}i", out))


def test_java_hashes_spec_vectors():
    keys = [k.encode() for k, _, _ in SPEC_VECTORS]
    assert _hashes_of(keys, 0) == [h for _, h, _ in SPEC_VECTORS]
    assert _hashes_of(keys, 1) == [h for _, _, h in SPEC_VECTORS]


def test_java_hashes_on_a_pyarrow_array_slice():
    arr = pa.array(["zz", None] + [k for k, _, _ in SPEC_VECTORS], type=pa.string()).slice(2)
    bufs = arr.buffers()
    out = _native.java_hashes(bufs[1], bufs[2], len(arr), arr.offset, 0)
    assert list(struct.unpack(f"={len(arr)}i", out)) == [h for _, h, _ in SPEC_VECTORS]
    assert _native.java_hashes(bufs[1], bufs[2], 0, 0, 0) == b""


RAW_STRINGS = st.lists(st.one_of(
    st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=20).map(lambda s: s.encode()),
    st.text(alphabet=st.characters(min_codepoint=0x10000, max_codepoint=0x10FFFF), max_size=5).map(str.encode),
    st.binary(max_size=20),
    st.lists(st.sampled_from([b"\xff", b"\xc0\xaf", b"\xe2\x82", b"\xed\xa0\x80", b"\xf0\x9f", b"\xf4\x90\x80\x80",
                              b"\xef\xbf\xbd", b"a", "é".encode(), "😀".encode()]), max_size=6).map(b"".join),
), max_size=12)


@given(RAW_STRINGS, st.integers(0, 3))
def test_java_hashes_against_reference(raw, pad):
    decoded = [s.decode("utf-8", "replace") for s in raw]
    assert _hashes_of(raw, 0, pad) == [_pyscan.java_string_hash(s) for s in decoded]
    want = []
    for s in decoded:
        h = _pyscan.java_string_hash(s)
        want.append(0 if h == -(1 << 31) else abs(h))
    assert _hashes_of(raw, 1, pad) == want


def test_java_hashes_rejects_bad_buffers():
    offs = struct.pack("<3i", 0, 2, 99)
    with pytest.raises(ValueError):
        _native.java_hashes(offs, b"abcd", 2, 0, 0)        # offset past the data
    with pytest.raises(ValueError):
        _native.java_hashes(offs, b"abcd", 5, 0, 0)        # offsets buffer too short
    with pytest.raises(ValueError):
        _native.java_hashes(offs, b"abcd", 1, 0, 2)        # unknown mode
    with pytest.raises(ValueError):
        _native.java_hashes(struct.pack("<2i", 3, 1), b"abcd", 1, 0, 0)   # decreasing offsets


# -- strings: UTF-8 replacement exactly like Python ---------------------------------------------------

@given(st.lists(st.tuples(st.binary(max_size=10), st.binary(max_size=10)), max_size=6), st.binary(max_size=12))
def test_property_and_topic_decoding_matches_python(pairs, topic):
    props = b"".join(n + b"\x01" + v + b"\x02" for n, v in pairs)
    rec = raw_record(topic=topic[:127], props=props[:32767])
    opts = rf.ScanOptions()
    cols = ("topic", "properties", "tags", "keys", "key_list", "tags_code", "real_queue_id")
    p = _pyscan.scan(rec, 0, 0, len(rec), 1, opts, cols)
    n = _native.scan(rec, 0, 0, len(rec), 1, commitlog._native_opts(opts), cols)
    assert n[1:] == p[1:]
    for c in cols:
        a = commitlog._column_array(c, n[0][c], n[1])
        a.validate(full=True)
        assert a.equals(commitlog._column_array(c, p[0][c], p[1])), c
