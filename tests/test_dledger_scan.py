"""The scanners' DLedger framing (F§16.2, ``ScanOptions.dledger``): each record inside an entry,
checked as ``DLedgerMmapFileStore#recover`` checks entries, read at ``pos + 48``; DLedger's blank
ends a file. The native scanner against its twin on built entries, well-formed and damaged (a torn
tail, a bad header, a record that does not fill its entry, byte flips), and the resync anchor.
Real broker-written DLedger stores are read in ``test_dledger_oracle.py``.
"""
from __future__ import annotations

import random
import struct
from pathlib import Path

import pytest

import support
from schemas import MESSAGE
from store_reader.formats import recordformat as rf

from dledgerstore import FILE_SIZE, dledger_files

_native = pytest.importorskip("store_reader._native", reason="native scanner not built",
                              exc_type=ImportError)

pytestmark = [pytest.mark.reader, pytest.mark.native]

OPTS = rf.ScanOptions(broker_5x=False, dledger=True)


def _scan_both(path: Path, opts: rf.ScanOptions = OPTS):
    (t_pure, s_pure), (t_nat, s_nat) = support.scan_both(path, opts, list(MESSAGE.names))
    assert t_nat.equals(t_pure), "native and twin tables differ"
    assert s_nat == s_pure
    return t_nat, s_nat


def _write(tmp_path: Path, data: bytes, file_start: int = 0) -> Path:
    p = tmp_path / f"{file_start:020d}"
    p.write_bytes(bytes(data))
    return p


def test_entries_read_at_their_body_and_blank_ends_the_file(tmp_path):
    files, entries = dledger_files(100)
    assert len(files) >= 3
    for k, data in enumerate(files[:2]):
        table, s = _scan_both(_write(tmp_path, data, k * FILE_SIZE))
        mine = [e for e in entries if e[0] // FILE_SIZE == k]
        # the message's phy offset is the entry's pos + 48, its PHYSICALOFFSET field says the same
        assert table["phy_offset"].to_pylist() == [p + 48 for p, _, _ in mine]
        assert table["stored_phy_offset"].to_pylist() == [p + 48 for p, _, _ in mine]
        assert table["total_size"].to_pylist() == [sz - 48 for _, sz, _ in mine]
        assert table["valid_prefix"].to_pylist() == [True] * len(mine)
        last_pos, last_size, _ = mine[-1]
        assert (s.end_reason, s.valid_bytes) == ("eof_marker", last_pos + last_size - k * FILE_SIZE)
        assert s.blank_declared_size == FILE_SIZE - s.valid_bytes
        assert s.last_record_position == last_pos - k * FILE_SIZE + 48
    table, s = _scan_both(_write(tmp_path, files[-1], (len(files) - 1) * FILE_SIZE))
    assert s.end_reason == "zero_padding" and s.records == table.num_rows > 0


def test_the_classic_framing_does_not_read_a_dledger_file(tmp_path):
    files, _ = dledger_files(10)
    table, s = _scan_both(_write(tmp_path, files[0]), rf.ScanOptions(broker_5x=False))
    assert (s.records, s.end_check) == (0, "bad_magic")


@pytest.mark.parametrize("damage, check", [
    ("magic", "dledger_entry"), ("pos", "dledger_entry"), ("body_size", "dledger_entry"),
    ("record_size", "dledger_body_size"), ("body_crc", "body_crc"), ("torn", None),
])
def test_a_damaged_entry_ends_the_prefix_and_the_next_intact_entry_is_found(tmp_path, damage, check):
    files, entries = dledger_files(40)
    data = files[0]
    mine = [e for e in entries if e[0] < FILE_SIZE]
    pos, size, _ = mine[10]
    if damage == "magic":
        struct.pack_into(">i", data, pos, 2)
    elif damage == "pos":
        struct.pack_into(">q", data, pos + 24, pos + 1)
    elif damage == "body_size":
        struct.pack_into(">i", data, pos + 44, size - 47)
    elif damage == "record_size":                     # an entry 8 bytes longer than its record
        struct.pack_into(">i", data, pos + 4, size + 8)
        struct.pack_into(">i", data, pos + 44, size - 40)
    elif damage == "body_crc":
        data[pos + 48 + 100] ^= 0xFF                  # a body byte (the body starts at 94)
    else:                                             # the last entries never written: torn tail
        data[pos + 20:] = bytes(len(data) - pos - 20)
        struct.pack_into(">q", data, pos + 16, 0)
    table, s = _scan_both(_write(tmp_path, data))
    assert s.valid_bytes == pos and s.records == 10
    if damage == "torn":
        assert s.end_reason == "torn_tail"
        return
    assert s.end_check == check
    # the next record's magic is searched for from pos + 1: the anchor is the entry holding it
    assert (s.end_reason, s.resync_position) == ("corrupt", pos + size)
    assert s.records_after_cut == len(mine) - 11


def test_random_byte_flips_native_equals_twin(tmp_path):
    files, _ = dledger_files(40, seed=3)
    rng = random.Random(11)
    for trial in range(40):
        data = bytearray(files[0])
        for _ in range(rng.randrange(1, 4)):
            data[rng.randrange(0, 4000)] = rng.randrange(256)
        _scan_both(_write(tmp_path, data))
