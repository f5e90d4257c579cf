"""``commitlog.OnePassScan``: the run's one walk of a segment gives the broker's summary (as
``summarize_segment``) and the records the rebuild and the audit read (as ``SegmentScan`` without CRC
checks, intact records behind a bad one included), on every fixture segment and on mutated real
segments (flipped body bytes: the broker's walk stops on a CRC check where the readers' goes on),
with the native scanner and its pure twin."""
from __future__ import annotations

from dataclasses import replace

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import support
from store_reader import commitlog
from store_reader import recordformat as rf
from store_reader.exceptions import StoreReaderError

from test_native_scanner import (CASES, MUTATIONS, SUPPRESS, _impl, _mutate, _real_segments, _segments,
                                 _write_segment)

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
    with _impl(pure):
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
    with _impl(data.draw(st.booleans(), label="pure")):
        try:
            _check(path, opts, batch_size=data.draw(st.sampled_from([1, 5, 65536]), label="batch"))
        except StoreReaderError:
            return
