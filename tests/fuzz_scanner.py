"""Fuzz driver for the native commitlog scanner (run by ``scripts/fuzz_scanner.sh`` under ASan/UBSan).

Feeds ``store_reader._native`` (``scan``, ``resync``, ``is_zero``, ``java_hashes``) with mutated real
fixture segments and generated records (well-formed and malformed), random options, random column
sets and random positions. Every input is copied into a fresh exact-size ``bytes`` object, so with
``PYTHONMALLOC=malloc`` and the ASan runtime preloaded any read past the buffer is reported. A crash
aborts the process (the sanitizers are built with ``-fno-sanitize-recover``); an exception other than
ValueError/MemoryError counts as a crash too. Every ``--compare-every``-th input is also checked
against the pure-Python twin.

Usage: python tests/fuzz_scanner.py [--inputs N] [--seed S] [--compare-every K]
"""
from __future__ import annotations

import argparse
import os
import random
import struct
import sys
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import support  # noqa: E402
from schemas import MESSAGE  # noqa: E402
from store_reader import _native
from store_reader.formats import _pyscan, commitlog
from store_reader.formats import recordformat as rf

COLUMNS = [c for c in MESSAGE.names if c != "valid_prefix"]
INTERESTING_I32 = [0, 1, -1, 4, 8, 20, 91, 127, 128, 255, 256, 32767, 32768, 65535, 65536,
                   2**31 - 1, -2**31, -2**31 + 3, rf.MAGIC_V1, rf.MAGIC_V2, rf.BLANK_MAGIC]
NAMES = [b"TAGS", b"KEYS", b"UNIQ_KEY", b"DELAY", b"REAL_TOPIC", b"REAL_QID", b"TRAN_MSG", b"DUP_INFO",
         b"INNER_NUM", b"INNER_BASE", b"__CRC32#", b"CLUSTER", b"", b"\xff"]
VALUES = [b"", b"1", b"-1", b"18", b"a_b", b"a_b_", b"a_", b"_a", b"_", b"true", b"k1 k2", b"\xff\xfe",
          b"\xe2\x82", b"9" * 25, b"x\x01y", b"0123456789", b"C091183650", b"8463847412", b"00000000000",
          "\u0666890000060".encode(), "\U0001F600".encode()]
I64_EDGES = [0, 1, -1, 2**63 - 1, -2**63, 2**62, -2**62]


def _i64(rng: random.Random) -> int:
    return rng.randint(-2**63, 2**63 - 1)


def _real_segments() -> list[bytes]:
    out = []
    for version, scenario in support.scenarios():
        for seg in sorted((support.input_store(version, scenario) / "commitlog").glob("[0-9]" * 20))[:2]:
            data = seg.read_bytes()
            if any(data[:64]):
                out.append(data)
        if len(out) >= 24:
            break
    return out


def _record(rng: random.Random, phy: int) -> bytes:
    """A record from the test suite's raw encoder, with random (often malformed) fields."""
    from test_native_scanner import raw_record   # the same encoder the property tests use

    pairs = [(rng.choice(NAMES), rng.choice(VALUES)) for _ in range(rng.randint(0, 6))]
    props = b"".join(n + b"\x01" + v + b"\x02" for n, v in pairs)
    kw = dict(version=rng.choice([1, 1, 2]), body=os.urandom(rng.choice([0, 1, 7, 64, 300])),
              topic=rng.choice([b"TopicTest", b"SCHEDULE_TOPIC_XXXX", b"", os.urandom(5)]), props=props,
              phy=phy, born_addr=rng.choice([b"\x7f\0\0\x01", bytes(16)]),
              store_addr=rng.choice([b"\x7f\0\0\x01", bytes(range(16))]),
              crc_property=rng.random() < 0.3,
              store_ts=rng.choice([rng.randint(0, 2**41), _i64(rng), rng.choice(I64_EDGES)]))
    field = rng.choice(["total", "body_len", "topic_len", "props_len", "magic", None, None, None])
    if field == "topic_len":
        kw[field] = rng.randint(0, 255) if kw["version"] == 1 else rng.randint(-32768, 32767)
    elif field == "props_len":
        kw[field] = rng.randint(-32768, 32767)
    elif field:
        kw[field] = rng.choice(INTERESTING_I32)
    return raw_record(**kw)


def _mutate(rng: random.Random, data: bytearray) -> bytearray:
    for _ in range(rng.randint(1, 6)):
        if not data:
            data += os.urandom(rng.randint(1, 64))
        op = rng.randrange(7)
        at = rng.randrange(len(data))
        if op == 0:                                   # bit flip
            data[at] ^= 1 << rng.randrange(8)
        elif op == 1:                                 # interesting byte
            data[at] = rng.choice([0, 0xFF, 0x7F, 0x80, 1, 2, 0x20])
        elif op == 2:                                 # interesting i32 (lengths, sizes, magics)
            if at + 4 <= len(data):
                struct.pack_into(">i", data, at, rng.choice(INTERESTING_I32))
        elif op == 3:                                 # truncate
            del data[at:]
        elif op == 4:                                 # insert garbage
            data[at:at] = os.urandom(rng.randint(1, 40))
        elif op == 5:                                 # duplicate a chunk
            n = rng.randint(1, 200)
            data[at:at] = data[at:at + n]
        else:                                         # i16 length fields
            if at + 2 <= len(data):
                struct.pack_into(">h", data, at, rng.choice([-1, -32768, 0, 1, 32767, 200]))
    return data


def _input(rng: random.Random, real: list[bytes]) -> bytes:
    kind = rng.random()
    if kind < 0.5 and real:
        data = bytearray(rng.choice(real))
        if rng.random() < 0.5:                        # keep it small: the interesting part is the head
            data = data[:rng.randint(0, 4096)]
    elif kind < 0.75:
        data = bytearray()
        for _ in range(rng.randint(0, 8)):
            data += _record(rng, len(data))
        data += rng.choice([b"", bytes(16), struct.pack(">ii", 8, rf.BLANK_MAGIC), os.urandom(12)])
    else:                                             # DLedger entries around records (F§16.2)
        data = bytearray()
        for i in range(rng.randint(0, 8)):
            rec = _record(rng, len(data) + rf.DLEDGER_BODY_OFFSET)
            data += rf.DLEDGER_HEADER.pack(rf.DLEDGER_MAGIC, rf.DLEDGER_BODY_OFFSET + len(rec), i, 1,
                                           len(data), 0, 0, 0, len(rec)) + rec
        data += rng.choice([b"", bytes(16), struct.pack(">ii", rf.DLEDGER_BLANK_MAGIC, 8), os.urandom(12)])
    if rng.random() < 0.9:
        data = _mutate(rng, data)
    return bytes(data)


def _opts(rng: random.Random) -> tuple[rf.ScanOptions, tuple]:
    o = rf.ScanOptions(check_crc=rng.random() < 0.6, compute_crc=rng.random() < 0.6,
                       force_verify_prop_crc=rng.random() < 0.2, check_dup_info=rng.random() < 0.2,
                       broker_5x=rng.random() < 0.6, dledger=rng.random() < 0.4,
                       delay_levels_ms=tuple(rng.choice([rng.randint(-2**40, 2**40), _i64(rng),
                                                         rng.choice(I64_EDGES)])
                                             for _ in range(rng.choice([0, 2, 18]))))
    return o, commitlog._native_opts(o)


def _one(rng: random.Random, data: bytes, compare: bool) -> None:
    size = len(data)
    opts, nopts = _opts(rng)
    columns = tuple(rng.sample(COLUMNS, rng.randint(0, len(COLUMNS))))
    pos = rng.choice([0, 0, rng.randint(0, size + 4)])
    end = rng.choice([size, size, rng.randint(0, size)])
    max_records = rng.choice([1, 3, 100, 10**9, 0, -1])
    file_start = rng.choice([0, 0, 65536, 2**63 - 1, -2**63])
    buf = bytes(bytearray(data))                       # fresh, exact-size allocation
    result = _native.scan(buf, file_start, pos, end, max_records, nopts, columns)
    cols, n = result[0], result[1]
    for c in columns:                                  # the buffers must form valid arrays
        commitlog._column_array(c, cols[c], n).validate(full=True)
    start = rng.randint(0, size + 4)
    q = _native.resync(buf, file_start, start, end, nopts)
    zero = _native.is_zero(buf, rng.randint(0, size + 4), rng.randint(0, size + 4))
    if compare and abs(file_start) < 2**62:
        want = _pyscan.scan(buf, file_start, pos, end, max_records, opts, columns)
        assert result[1:] == want[1:], ("scan", result[1:], want[1:])
        for c in columns:
            twin = commitlog._column_array(c, want[0][c], want[1])
            assert commitlog._column_array(c, cols[c], n).equals(twin), c
        assert q == _pyscan.resync(buf, file_start, start, end, opts), "resync"
    del zero
    # java_hashes over random offsets into the same bytes (valid or not)
    count = rng.randint(0, 6)
    offs = sorted(rng.randint(0, size) for _ in range(count + 1))
    if rng.random() < 0.2 and offs:
        offs[rng.randrange(len(offs))] = rng.choice([-1, size + 1, 2**31 - 1])
    offbuf = struct.pack(f"<{len(offs)}i", *offs)
    try:
        _native.java_hashes(offbuf, buf, count, 0, rng.randint(0, 1))
    except ValueError:
        pass


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--inputs", type=int, default=int(os.environ.get("FUZZ_INPUTS", 20000)))
    ap.add_argument("--seed", type=int, default=int(os.environ.get("FUZZ_SEED", 1)))
    ap.add_argument("--compare-every", type=int, default=10)
    args = ap.parse_args(argv)
    want_dir = os.environ.get("FUZZ_NATIVE_DIR")
    if want_dir and not os.path.realpath(_native.__file__).startswith(os.path.realpath(want_dir)):
        print(f"error: imported {_native.__file__}, not the sanitizer build in {want_dir}", file=sys.stderr)
        return 2
    rng = random.Random(args.seed)
    real = _real_segments()
    crashes = 0
    tried = 0
    for i in range(args.inputs):
        data = _input(rng, real)
        tried += 1
        try:
            _one(rng, data, args.compare_every > 0 and i % args.compare_every == 0)
        except (ValueError, MemoryError):
            pass
        except Exception:                              # anything else is a bug in the scanner
            crashes += 1
            path = Path(f"/tmp/fuzz-scanner-crash-{args.seed}-{i}.bin")
            path.write_bytes(data)
            print(f"input {i} (saved to {path}):", file=sys.stderr)
            traceback.print_exc()
    print(f"native module: {_native.__file__} (crc32: {_native.CRC32_IMPL})")
    print(f"inputs tried: {tried}, crashes: {crashes}")
    return 1 if crashes else 0


if __name__ == "__main__":
    sys.exit(main())
