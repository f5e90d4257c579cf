"""A DLedger store's own recovery (R§16.1).

``recover(store)`` replays ``DLedgerMmapFileStore#recover`` of DLedger 0.3.1.2 (the version 4.9.7
and 5.3.3 pin; 5.4.0's 0.3.2 and 5.5.1's 0.3.3.4 recover alike) on the files of a store opened with
``open_store(read_dledger=True)``: the start file, the walk over entry headers (no CRC, no look
inside a body), the comparison with the index units and where they are rewritten, the end of the
log (``ledgerEndIndex``/``ledgerEndTerm``), the data and index files the truncation deletes, and the
committed index the checkpoint gives back. Only the header bytes are read here. What the broker
does on top of it: ``store_reader.broker.dledgercommitlog``.
"""
from __future__ import annotations

import re
import struct
from array import array
from dataclasses import dataclass, field
from typing import Any, Iterator

from store_reader.formats import recordformat as rf
from store_reader.exceptions import UnsupportedStoreError
from store_reader.formats.mappedfile import list_mapped_files
from store_reader.formats.dledger import INDEX_FILE_SIZE, _Files, _header, _properties, _unit, entries_with_units


_LONG = re.compile(r"[+-]?[0-9]+")


@dataclass
class DLedgerRecovery:
    """What ``DLedgerMmapFileStore#recover`` leaves (R§16.1), in DLedger's own terms."""

    ledger_begin_index: int = -1
    ledger_end_index: int = -1
    ledger_end_term: int = -1
    process_offset: int = 0
    """Where the data's write position is set: the end of the last entry walked (or of the file
    whose blank ended the walk)."""
    start_file: str | None = None
    walk_end: str = "no_data"
    """Why the walk ended: ``last_file`` (a blank in the last file), ``zero_size`` (an entry of
    size 0: unwritten space), ``entry`` (an entry failed a check, ``walk_end_check``) or
    ``no_data``."""
    walk_end_check: str | None = None
    walk_end_position: int | None = None
    index_rewritten_from: int | None = None
    """The first entry whose index unit did not match (units rewritten from there), or None."""
    data_files_deleted: list[str] = field(default_factory=list)
    index_files_deleted: list[str] = field(default_factory=list)
    committed_index: int = -1
    """After load: the checkpoint's committedIndex, clamped to ``ledger_end_index`` (R§16.1 step 7)."""
    committed_pos: int = -1
    checkpoint_committed_index: str | None = None
    curr_term: int = 0
    """``currterm``'s currTerm (the term the member restarts in before its election)."""
    last_entry_end: int = 0
    """End of the last surviving entry: the committed position once the restarted leader commits."""
    refused: str | None = None
    """Why the broker stops in its recovery (``System.exit``), or None."""

    @property
    def index_write_position(self) -> int:
        return (self.ledger_end_index + 1) * rf.DLEDGER_INDEX_UNIT.size

    def as_dict(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d["index_write_position"] = self.index_write_position
        return d


def recover(store) -> DLedgerRecovery:
    """``DLedgerMmapFileStore#recover`` on ``store`` (opened with ``read_dledger=True``), R§16.1."""
    if store.dledger is None:
        raise ValueError("not a DLedger store (open_store(read_dledger=True))")
    if store.load_problems:       # DLedgerMmapFileStore#load: System.exit(-1)
        raise store.load_problems[0]
    size = store.config.mappedFileSizeCommitLog
    problems: list = []
    index_files = list_mapped_files(store.dledger / "index", INDEX_FILE_SIZE, "DLedger index",
                                    "mappedFileSizeForEntryIndex", problems, [])
    if problems:
        raise problems[0]
    data = _Files(list(store.commitlog_files), size, "DLedger data file")
    index = _Files(index_files, INDEX_FILE_SIZE, "DLedger index file")
    try:
        return _walk(store, data, index)
    finally:
        data.close()
        index.close()


def _walk(store, data: _Files, index: _Files) -> DLedgerRecovery:
    size = data.size
    r = DLedgerRecovery()
    term = _properties(store.dledger / "currterm") or {}
    if _LONG.fullmatch(term.get("currTerm", "0").strip()):
        r.curr_term = int(term.get("currTerm", "0").strip())
    for files, what in ((data.files, "data"), (index.files, "index")):
        for a, b in zip(files, files[1:]):
            if b.start - a.start != (size if what == "data" else INDEX_FILE_SIZE):
                raise UnsupportedStoreError(
                    f"DLedger {what} files not one file apart (checkSelf fails: the broker does not "
                    f"start)", str(b.path))
    if not data.files:
        r.index_files_deleted = [f.name for f in index.files]
        return r

    def unit_matches(h: tuple, at: int) -> bool:
        u = _unit(index, h[2])
        return u is not None and u[0] == h[0] and u[2] == h[1] and u[3] == h[2] and u[4] == h[3] \
            and u[1] == at

    # 1. the start file: from the third-to-last down, the first whose first entry checks (step 2)
    start = max(len(data.files) - 3, 0)
    for i in range(start, -1, -1):
        f = data.files[i]
        h = _header(data.data(f), 0)
        start = i
        if h is not None and h[0] != rf.DLEDGER_BLANK_MAGIC and h[0] >= rf.DLEDGER_MAGIC \
                and h[1] > rf.DLEDGER_HEADER_SIZE and h[4] == f.start \
                and h[8] + rf.DLEDGER_BODY_OFFSET == h[1] and unit_matches(h, f.start):
            break
    # 2. the walk (step 3)
    k = start
    f = data.files[k]
    r.start_file = f.name
    buf, p = data.data(f), 0
    last_index = last_term = -1
    process = f.start
    rewriting = rebuilt = False
    ends = array("q")          # end of each walked entry: what a unit the walk wrote says
    first_walked = -1
    while True:
        at = f.start + p
        if p + 4 > len(buf):
            r.walk_end, r.walk_end_check = "entry", "out_of_bounds"
            break
        magic = struct.unpack_from(">i", buf, p)[0]
        if magic == rf.DLEDGER_BLANK_MAGIC:
            process = f.start + size
            k += 1
            if k >= len(data.files):
                r.walk_end = "last_file"
                break
            f = data.files[k]
            buf, p, process = data.data(f), 0, f.start
            continue
        if p + 8 > len(buf):
            r.walk_end, r.walk_end_check = "entry", "out_of_bounds"
            break
        esize = struct.unpack_from(">i", buf, p + 4)[0]
        if esize == 0:
            r.walk_end = "zero_size"
            break
        h = _header(buf, p)
        if h is None or (h[4] == at and h[8] + rf.DLEDGER_BODY_OFFSET == esize
                         and not 0 <= p + esize <= len(buf)):   # position(p + size) throws
            r.walk_end, r.walk_end_check = "entry", "out_of_bounds"
            break
        _, _, e_index, e_term, e_pos, _, _, _, body_size = h
        check = None
        if e_pos != at:
            check = "pos"
        elif body_size + rf.DLEDGER_BODY_OFFSET != esize:
            check = "body_size"
        elif not rf.DLEDGER_MAGIC <= magic <= rf.DLEDGER_MAGIC:
            check = "magic"
        elif last_index != -1 and e_index != last_index + 1:
            check = "index"
        elif e_term < last_term:
            check = "term"
        elif esize <= rf.DLEDGER_HEADER_SIZE:
            check = "size"
        if check is not None:
            r.walk_end, r.walk_end_check = "entry", check
            break
        if not rewriting and not unit_matches(h, at):
            rewriting = True
            r.index_rewritten_from = e_index
            # no index file holds its unit: rebuildWithPos drops every index file and starts one there
            rebuilt = index.find(e_index * rf.DLEDGER_INDEX_UNIT.size) is None
        if first_walked == -1:
            first_walked = e_index
        ends.append(at + esize)
        last_index, last_term = e_index, e_term
        p += esize
        process += esize
        r.last_entry_end = at + esize
    r.walk_end_position = f.start + p if r.walk_end != "last_file" else None
    last = data.files[-1]
    if last.start - process > size:
        r.refused = (f"DLedger's recovery ended at {process}, more than a file before the last data "
                     f"file {last.name}: the broker exits (System.exit)")
    r.process_offset = process
    r.ledger_end_index, r.ledger_end_term = last_index, last_term
    if last_index != -1:
        first = _header(data.data(data.files[0]), 0)
        r.ledger_begin_index = first[2] if first is not None else -1
    # 3. truncation (step 6): files wholly past the end are deleted
    r.data_files_deleted = [x.name for x in data.files if x.start > process]
    index_end = (last_index + 1) * rf.DLEDGER_INDEX_UNIT.size
    begin = max(r.ledger_begin_index, 0) * rf.DLEDGER_INDEX_UNIT.size   # resetOffset: before the begin
    r.index_files_deleted = [x.name for x in index.files if rebuilt or x.start > index_end
                             or x.start + INDEX_FILE_SIZE <= begin]
    # 4. the committed index from the checkpoint (step 7)
    cp = _properties(store.dledger / "checkpoint") or {}
    raw = cp.get("committedIndex")
    r.checkpoint_committed_index = raw
    if raw is not None and raw.strip():
        if not _LONG.fullmatch(raw.strip()) or not -2**63 <= int(raw.strip()) < 2**63:
            raise UnsupportedStoreError(f"DLedger checkpoint committedIndex={raw!r} is not a long: "
                                        "Long.valueOf throws in the recovery", str(store.dledger / "checkpoint"))
        want = int(raw.strip())
        if want != -1 and last_index != -1 and want >= -1 and want >= r.ledger_begin_index:
            r.committed_index = min(want, last_index)
            if r.committed_index >= first_walked:
                r.committed_pos = ends[r.committed_index - first_walked]
            else:          # before the walk's start file: its unit as stored
                u = None if rebuilt else _unit(index, r.committed_index)
                if u is None:
                    raise UnsupportedStoreError(
                        f"the DLedger checkpoint's committedIndex {r.committed_index} has no index unit "
                        "after the recovery rebuilt the index: the recovery throws (not predicted)",
                        str(store.dledger / "checkpoint"))
                r.committed_pos = u[1] + u[2]
    return r


def recovered_index_units(store, rec: DLedgerRecovery) -> Iterator[tuple[int, bytes]]:
    """(entry index, unit) of every index unit DLedger's recovery writes (R§16.1 step 3): from
    the first entry whose unit did not match to the end of the log, each from its entry's header."""
    if rec.index_rewritten_from is None:
        return
    for f, p, h, _, _ in entries_with_units(store):
        at = f.start + p
        if at >= rec.last_entry_end:
            return
        if h[2] >= rec.index_rewritten_from:
            yield h[2], rf.encode_dledger_index_unit(at, h[1], h[2], h[3])


def recovered_index_files(store, rec: DLedgerRecovery) -> list[tuple[str, int, Any]]:
    """(name, start, input MappedFile or None) of the index files DLedger's recovery leaves: the
    input's it keeps, and those its rewrite creates (``rebuildWithPos`` or appends past the last
    file) up to the end of the log's units."""
    problems: list = []
    files = list_mapped_files(store.dledger / "index", INDEX_FILE_SIZE, "DLedger index",
                              "mappedFileSizeForEntryIndex", problems, [])
    gone = set(rec.index_files_deleted)
    out = {f.start: (f.name, f.start, f) for f in files if f.name not in gone}
    if rec.index_rewritten_from is not None and rec.ledger_end_index >= rec.index_rewritten_from:
        first = rec.index_rewritten_from * rf.DLEDGER_INDEX_UNIT.size
        for start in range(first - first % INDEX_FILE_SIZE, rec.index_write_position, INDEX_FILE_SIZE):
            out.setdefault(start, (f"{start:020d}", start, None))
    return [out[k] for k in sorted(out)]
