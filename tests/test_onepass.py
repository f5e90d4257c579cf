"""``commitlog.OnePassScan``: the run's one walk of a segment gives the broker's summary (as
``summarize_segment``) and the records the rebuild and the audit read (as ``SegmentScan`` without CRC
checks, intact records behind a bad one included), on every fixture segment and on mutated real
segments (flipped body bytes: the broker's walk stops on a CRC check where the readers' goes on),
with the native scanner and its pure twin."""
from __future__ import annotations

import sys
from dataclasses import replace

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import support
from store_reader.formats import commitlog
from store_reader.formats import recordformat as rf
from store_reader.exceptions import StoreReaderError
from store_reader.io.storefs import SegmentBuffer

sys.path.insert(0, str(support.ROOT))
from benchmarks.taskcpu import peak_rss, reset_peak_rss  # noqa: E402  (the benchmark's RSS reading)
from test_native_scanner import (CASES, MUTATIONS, SUPPRESS, _mutate, _real_segments, _segments,
                                 _write_segment, raw_record)

pytestmark = [pytest.mark.reader]

LOST = ["born_timestamp", "keys", "msg_id", "body_crc", "body"]
COLUMNS = [c for c in commitlog.SCANNED_COLUMNS if c not in LOST]


def _merged(ranges):
    out = []
    for lo, hi in ranges:
        if out and out[-1][1] == lo:
            out[-1] = (out[-1][0], hi)
        else:
            out.append((lo, hi))
    return out


def _check(path, opts, batch_size=65536) -> commitlog.OnePassScan:
    one = commitlog.OnePassScan(path, opts, COLUMNS, LOST, batch_size=batch_size)
    got = pa.Table.from_batches(list(one), schema=one.schema)
    want = commitlog.summarize_segment(path, opts)
    got_ranges, want_ranges = _merged(one.summary.lost_ranges), _merged(want.lost_ranges)
    assert replace(one.summary, lost_ranges=[]) == replace(want, lost_ranges=[])
    assert got_ranges == want_ranges
    ref, _ = commitlog.scan_segment(path, commitlog.without_crc_checks(opts), include_lost=True,
                                    columns=COLUMNS + LOST + ["valid_prefix"])
    assert got.num_rows == ref.num_rows
    keep_from = one.summary.file_start + one.summary.valid_bytes
    past = pc.greater_equal(ref["phy_offset"], keep_from)
    for name in ref.column_names:
        want_col = ref[name]
        if name in LOST:        # only past the broker's valid prefix
            want_col = pc.if_else(past, want_col, pa.nulls(ref.num_rows, want_col.type))
        assert got[name].to_pylist() == want_col.to_pylist(), name
    return one


@pytest.mark.parametrize("case", CASES, ids=[support.case_id(c) for c in CASES])
@pytest.mark.parametrize("pure", [False, True], ids=["native", "twin"])
def test_fixture_segments(case, pure):
    version, scenario = case
    is5 = version == "rocketmq-5.3.3"
    with support.scanner(pure):
        for opts in (rf.ScanOptions(broker_5x=is5), rf.ScanOptions(check_crc=False, broker_5x=is5),
                     rf.ScanOptions(force_verify_prop_crc=True, broker_5x=is5)):
            for seg in _segments(version, scenario):
                _check(seg, opts, batch_size=7)


def test_flipped_body_byte_walks_once(tmp_path):
    """A flipped body byte: the broker's prefix ends on the body CRC, the readers read through it,
    and nothing is walked twice."""
    real = _real_segments()
    version, seg = next((v, s) for v, s in real if v.endswith("4.9.7"))
    data = bytearray(seg)
    size = int.from_bytes(data[:4], "big")
    data[size + 200] ^= 0x55                         # the second record's body
    path = _write_segment(tmp_path, bytes(data))
    one = _check(path, rf.ScanOptions(broker_5x=False))
    assert one.summary.end_check == "body_crc" and one.summary.valid_bytes == size
    assert one.rewalked == 0


HOLE = 32 << 20


def _records(n: int) -> bytes:
    """``n`` records in a row from position 0, each at its own phy offset."""
    out = bytearray()
    for i in range(n):
        out += raw_record(body=b"m%d" % i * 40, phy=len(out), props=b"KEYS\x01k%d\x02" % i)
    return bytes(out)


def _sparse_and_dense(tmp_path, parts: list[tuple[int, bytes]], size: int):
    """The same segment bytes twice: written at their positions with holes between and after
    them, and written out whole with zeros."""
    sparse, dense = tmp_path / "sparse", tmp_path / "dense"
    sparse.mkdir()
    dense.mkdir()
    data = bytearray(size)
    with open(_write_segment(sparse, b""), "r+b") as f:
        for at, chunk in parts:
            f.seek(at)
            f.write(chunk)
            data[at:at + len(chunk)] = chunk
        f.truncate(size)
    return sparse / f"{0:020d}", _write_segment(dense, bytes(data))


def _peak_rss_growth(walk) -> int:
    """How far this process's RSS high-water mark rose over ``walk()`` (Linux: reset first)."""
    assert reset_peak_rss(), "the RSS high-water mark cannot be reset here"
    before = peak_rss()
    walk()
    return peak_rss() - before


@pytest.mark.parametrize("tail", ["zero", "torn", "record_after_hole"])
@pytest.mark.parametrize("pure", [False, True], ids=["native", "twin"])
def test_a_hole_reads_as_the_zeros_it_is(tmp_path, tail, pure):
    """A segment whose tail is a hole (a broker's preallocated last file) scans exactly like the
    same bytes written out as zeros: the prefix's end, the lost records behind a torn record or a
    hole, every batch. Only the hole's extent differs (``SegmentBuffer.data_end``)."""
    body = _records(40)
    parts = [(0, body)]
    if tail == "torn":
        parts.append((len(body), b"\x00\x00\x04\x00\xda\xa3\x20\xab" + b"\x07" * 300))
    if tail == "record_after_hole":
        at = len(body) + (4 << 20)
        parts.append((at, raw_record(version=2, body=b"behind a hole", phy=at)))
    sparse, dense = _sparse_and_dense(tmp_path, parts, HOLE)
    with SegmentBuffer(sparse, "commitlog segment") as m:
        assert m.data_end() < HOLE // 2, "the filesystem keeps no holes"
    opts = rf.ScanOptions(broker_5x=True)
    with support.scanner(pure):
        one, other = _check(sparse, opts), _check(dense, opts)
    assert replace(one.summary, path=other.summary.path) == other.summary
    assert one.summary.valid_bytes == len(body)
    assert one.summary.end_reason == {"zero": "zero_padding", "torn": "torn_tail", "record_after_hole": "corrupt"}[tail]
    if tail == "record_after_hole":
        assert one.summary.resync_position == parts[-1][0]      # the record behind the hole is read


@pytest.mark.parametrize("tail", ["zero", "torn"])
def test_a_hole_is_not_read(tmp_path, tail):
    """The native walk stops at the hole instead of faulting it in page by page: the scan's
    resident memory does not grow by the hole's size (32 MiB here)."""
    body = _records(40)
    parts = [(0, body)] + ([(len(body), b"\x00\x00\x04\x00\xda\xa3\x20\xab" + b"\x07" * 300)]
                           if tail == "torn" else [])
    sparse, _ = _sparse_and_dense(tmp_path, parts, HOLE)
    with support.scanner(False):
        grew = _peak_rss_growth(lambda: list(commitlog.OnePassScan(sparse, rf.ScanOptions(broker_5x=True),
                                                                   COLUMNS, LOST)))
    assert grew < HOLE // 4, f"the scan's RSS grew by {grew >> 20} MiB over a {HOLE >> 20} MiB hole"


@settings(suppress_health_check=SUPPRESS, max_examples=60)
@given(data=st.data())
def test_mutated_real_segments(tmp_path_factory, data):
    real = _real_segments()
    version, seg = data.draw(st.sampled_from(real), label="segment")
    mutated = _mutate(seg, data.draw(MUTATIONS, label="mutations"))
    is5 = version.endswith("5.3.3")
    opts = data.draw(st.sampled_from([rf.ScanOptions(broker_5x=is5), rf.ScanOptions(check_crc=False, broker_5x=is5),
                                      rf.ScanOptions(force_verify_prop_crc=True, broker_5x=is5)]), label="opts")
    path = _write_segment(tmp_path_factory.mktemp("mut"), mutated)
    with support.scanner(data.draw(st.booleans(), label="pure")):
        try:
            _check(path, opts, batch_size=data.draw(st.sampled_from([1, 5, 65536]), label="batch"))
        except StoreReaderError:
            return
