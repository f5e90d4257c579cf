"""A DLedger store's files, byte for byte (F§16): its data and index files read by offset
(``MmapFileList``), entry headers and index units, the ``currterm`` and ``checkpoint`` properties.
DLedger's recovery over them and the broker's restart: ``store_reader.broker.dledger``.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterator

from store_reader.formats import recordformat as rf
from store_reader.formats.brokerconf import parse_properties
from store_reader.formats.mappedfile import list_mapped_files
from store_reader.io.storefs import SegmentBuffer, location

if TYPE_CHECKING:
    from store_reader.formats.mappedfile import MappedFile


# DLedgerConfig#mappedFileSizeForEntryIndex: never set by DLedgerCommitLog (F§16.1)
INDEX_FILE_SIZE = rf.DLEDGER_INDEX_UNIT.size * 5 * 1024 * 1024


class _Files:
    """A sequence of mapped files read by phy offset (``MmapFileList#findMappedFileByOffset``)."""

    def __init__(self, files: list[MappedFile], size: int, what: str) -> None:
        self.files, self.size, self.what = files, size, what
        self._open: dict[str, SegmentBuffer] = {}

    def data(self, f: MappedFile) -> Any:
        """The file's bytes (mapped; a remote file read once)."""
        b = self._open.get(f.name)
        if b is None:
            b = self._open[f.name] = SegmentBuffer(f.path, self.what)
        return b.buf

    def close(self) -> None:
        for b in self._open.values():
            b.close()
        self._open.clear()

    def find(self, offset: int) -> MappedFile | None:
        if not self.files:
            return None
        first = self.files[0].start
        if offset < first or offset >= self.files[-1].start + self.size:
            return None
        i = offset // self.size - first // self.size
        f = self.files[i] if 0 <= i < len(self.files) else None
        return f if f is not None and f.start <= offset < f.start + self.size else None


def _unit(index: _Files, entry_index: int) -> tuple | None:
    """The index unit of ``entry_index`` as ``indexFileList.getData`` returns it, or None."""
    off = entry_index * rf.DLEDGER_INDEX_UNIT.size
    f = index.find(off)
    if f is None:
        return None
    pos = off - f.start
    buf = index.data(f)
    if pos + rf.DLEDGER_INDEX_UNIT.size > len(buf):
        return None
    return rf.DLEDGER_INDEX_UNIT.unpack_from(buf, pos)


def _header(buf: bytes, pos: int) -> tuple | None:
    if pos + rf.DLEDGER_HEADER.size > len(buf):
        return None
    return rf.DLEDGER_HEADER.unpack_from(buf, pos)


def _properties(path) -> dict[str, str] | None:
    loc = location(path)
    if not loc.is_file():
        return None
    return parse_properties(loc.read_bytes().decode("utf-8", "replace"))


def entries_with_units(store) -> Iterator[tuple[Any, int, tuple, tuple | None, Any]]:
    """Every entry of the data files by its header, file by file whatever ``recover`` keeps:
    (data file, position in it, header, the index unit of the header's index or None, the file's
    bytes: valid until the next entry of another file). A file's
    entries end at DLedger's blank, unwritten space or a header that does not frame an entry
    there (magic, size, pos)."""
    if store.dledger is None:
        raise ValueError("not a DLedger store (open_store(read_dledger=True))")
    problems: list = []
    index_files = list_mapped_files(store.dledger / "index", INDEX_FILE_SIZE, "DLedger index",
                                    "mappedFileSizeForEntryIndex", problems, [])
    data = _Files(list(store.commitlog_files), store.config.mappedFileSizeCommitLog, "DLedger data file")
    index = _Files(index_files, INDEX_FILE_SIZE, "DLedger index file")
    try:
        for f in data.files:
            buf, p = data.data(f), 0
            while (h := _header(buf, p)) is not None:
                magic, size, entry_index, _, pos = h[:5]
                if magic != rf.DLEDGER_MAGIC or size <= rf.DLEDGER_HEADER_SIZE or pos != f.start + p \
                        or p + size > len(buf):
                    break
                yield f, p, h, _unit(index, entry_index) if entry_index >= 0 else None, buf
                p += size
    finally:
        data.close()
        index.close()


# DLedgerMmapFileStore's own files beside data/ and index/ (written by IOUtils#string2File)
CHECKPOINT_FILE, CURRTERM_FILE = "checkpoint", "currterm"


def checkpoint_bytes(end_index: int, committed_index: int) -> bytes:
    """``DLedgerMmapFileStore#persistCheckPoint``'s file: ``properties2String`` of endIndex and
    committedIndex, in the order a broker's JVM iterates them (read back from the real ones)."""
    return f"committedIndex={committed_index}\nendIndex={end_index}\n".encode()


def currterm_bytes(term: int, vote_for: str | None) -> bytes:
    """``MemberState#persistTerm``'s file: currTerm and voteLeader (empty: no vote), in the order
    a broker's JVM iterates them (read back from the real ones)."""
    return f"voteLeader={vote_for or ''}\ncurrTerm={term}\n".encode()
