"""What a recovery run's one scan of each commitlog segment keeps for the passes after the
prediction (DESIGN "Data flow of a recovery run: one pass", step 2).

A scan task walks its segment once (``commitlog.OnePassScan``) and writes the records as an Arrow
IPC file: the columns the broker's replay, the consume queue and index rebuilds and the audit read
for every record, and the lost messages' columns (bodies ...) for the records past the broker's
valid prefix, the only ones that can lie past the truncation point. Beside it, the records' index
puts (``index.index_puts``: their keys built and hashed once for the index rebuild and the audit).
Every later pass reads those files (memory-mapped, batch by batch) instead of the segment; a record
is decoded once per run.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Iterator, Sequence

import numpy as np
import pyarrow as pa

from schemas.repair import KEPT_INDEX_PUT

from store_reader.formats import recordformat as rf
from store_reader.formats.brokerconf import BrokerConfig
from store_reader.formats.commitlog import OnePassScan, SegmentSummary
from store_reader.broker.dispatch import index_puts
from store_reader.formats.indexfile import IndexPuts
from store_reader.io.hashing import SourceDigest, source_digest
from store_reader.io.storefs import PathRef

# Records per batch: the broker's replay reads the valid prefix in batches of this size too.
BATCH = 65536
# The kept records are written once and read by four passes, uncompressed: each pass maps the
# columns it reads, where LZ4 (a third of the bytes) cost every pass a decompression of them.
KEPT_COMPRESSION = None

# Every record: what the replay (R§4.4), the rebuilds and the audit's comparisons read.
RECORD_COLUMNS = ["phy_offset", "stored_phy_offset", "total_size", "topic", "queue_id", "queue_offset",
                  "sys_flag", "tags_code", "store_timestamp", "uniq_key", "key_list", "body_crc_ok",
                  "record_crc_ok"]
# Records past the broker's valid prefix: the lost messages' columns.
LOST_COLUMNS = ["born_timestamp", "keys", "tags", "msg_id", "body_crc", "properties", "body"]


def columns_for(config: BrokerConfig, broker_5x: bool, index_tags: bool) -> tuple[list[str], list[str]]:
    """(every record's columns, the lost records' further columns) for a run: the properties of
    every record when LMQ copies are dispatched; 4.9's replay reads tags and delay level (E#30b),
    a 5.4+ index (``index_tags``) tags."""
    every, lost = list(RECORD_COLUMNS), list(LOST_COLUMNS)
    if config.enableMultiDispatch:
        every.append("properties")
        lost.remove("properties")
    if not broker_5x or index_tags:
        every.append("tags")
        lost.remove("tags")
    if not broker_5x:
        every.append("delay_level")
    return every, lost


@dataclass
class ScannedSegment:
    """A segment's summary (the broker's walk) and where its records were kept."""

    summary: SegmentSummary
    records_path: str
    rows: int
    scans: float
    """Walks of the segment's bytes: 1, plus the share the broker's summary walked again where its
    walk and the readers' parted (``OnePassScan.rewalked``)."""
    digest: SourceDigest | None = None
    """The file's SHA-256 as the walk read it (``scan_segment(digest=True)``), where the repaired
    store may take the file as it is."""


KEPT_PUTS = KEPT_INDEX_PUT.arrow()


def puts_path(records_path: str) -> str:
    """Where the index puts of the records kept at ``records_path`` are."""
    return records_path.removesuffix(".arrow") + ".puts.arrow"


# Where the broker's walk of a file reaches its end: the cut is not in it, and the repaired
# store may take it whole (``placement``).
WALKED_TO_THE_END = frozenset({"eof_marker", "file_end"})


def _whole_file_digest(m, summary: SegmentSummary) -> SourceDigest | None:
    return source_digest(m) if summary.end_reason in WALKED_TO_THE_END else None


def scan_segment(path: PathRef, opts: rf.ScanOptions, out_dir: str, columns: Sequence[str],
                 lost_columns: Sequence[str], digest: bool = False) -> ScannedSegment:
    """One walk of the segment at ``path``; its records to ``out_dir/<segment>.arrow``, their
    index puts to ``puts_path`` of it (a batch of puts per batch of records). ``digest``: a file
    the broker's walk takes to its end is hashed too, from the pages the walk has just read: a
    recovery run places most files as they are, and its placement then reads none of them again
    (a second read of the whole store, from the disk once it outgrows the page cache)."""
    scan = OnePassScan(path, opts, columns, lost_columns, batch_size=BATCH,
                       after_walk=_whole_file_digest if digest else None)
    dest = os.path.join(out_dir, f"{scan.summary.segment}.arrow")
    rows = 0
    options = pa.ipc.IpcWriteOptions(compression=KEPT_COMPRESSION)
    with pa.OSFile(dest, "wb") as sink, pa.ipc.new_file(sink, scan.schema, options=options) as writer, \
            pa.OSFile(puts_path(dest), "wb") as puts_sink, \
            pa.ipc.new_file(puts_sink, KEPT_PUTS, options=options) as puts_writer:
        for batch in scan:
            writer.write_batch(batch)
            p = index_puts(batch, opts.index_tags, ordered=True)
            puts_writer.write_batch(pa.record_batch(
                [pa.array(p.record_phy, pa.int64()), pa.array(p.key_hash, pa.int32()), pa.array(p.phy, pa.int64()),
                 pa.array(p.store_timestamp, pa.int64()), pa.array(p.record_row, pa.int32())], schema=KEPT_PUTS))
            rows += batch.num_rows
    s = scan.summary
    return ScannedSegment(s, dest, rows, 1 + scan.rewalked / s.file_size if s.file_size else 1.0, scan.walked)


def read_puts(records_path: str) -> Iterator[IndexPuts]:
    """The index puts of the records kept at ``records_path``, a batch of them per batch of
    records (``read_records``), in put order."""
    with pa.memory_map(puts_path(records_path)) as source:
        reader = pa.ipc.open_file(source)
        for i in range(reader.num_record_batches):
            b = reader.get_batch(i)
            yield IndexPuts(b.column("key_hash").to_numpy(), b.column("phy_offset").to_numpy(),
                            b.column("store_timestamp").to_numpy(), b.column("record_row").to_numpy(),
                            b.column("record_phy_offset").to_numpy())


def index_puts_below(records_path: str, end: int) -> Iterator[IndexPuts]:
    """``index.segment_index_puts`` from the kept puts: those of the records below ``end``, in put
    order, batch by batch (a batch whose records put no key may give none)."""
    for p in read_puts(records_path):
        if len(p.record_phy) and p.record_phy[0] >= end:
            return
        yield p.below(end)


def read_records(records_path: str, columns: Sequence[str] | None = None) -> Iterator[pa.RecordBatch]:
    """The kept records of a segment (``columns`` of them, in that order; default all), batch by
    batch as the scan wrote them. Only the columns read are decompressed."""
    with pa.memory_map(records_path) as source:
        options = None
        if columns is not None:
            names = pa.ipc.open_file(source).schema.names
            options = pa.ipc.IpcReadOptions(included_fields=sorted(names.index(c) for c in columns))
        reader = pa.ipc.open_file(source, options=options)
        for i in range(reader.num_record_batches):
            b = reader.get_batch(i)
            yield b if columns is None else b.select(list(columns))


def prefix_records(records_path: str, summary: SegmentSummary, columns: Sequence[str]
                   ) -> Iterator[pa.RecordBatch]:
    """The records of the broker's valid prefix (what its own walk reads, in its batches)."""
    end = summary.file_start + summary.valid_bytes
    for b in read_records(records_path, columns if "phy_offset" in columns else [*columns, "phy_offset"]):
        phy = b.column("phy_offset").to_numpy()
        if not len(phy) or phy[0] >= end:
            return
        if phy[-1] >= end:
            b = b.slice(0, int(np.searchsorted(phy, end)))
        yield b.select(list(columns))


def prefix_source(records: dict[str, str], opts: rf.ScanOptions):
    """The broker's replay's reader (``replay.RecordSource``): a segment's valid prefix from its
    kept records, or walked again (``opts``) for a segment this run did not scan (--since-last)."""
    from store_reader.formats.commitlog import SegmentScan

    def read(summary: SegmentSummary, columns: Sequence[str]) -> Iterator[pa.RecordBatch]:
        kept = records.get(summary.segment)
        if kept is None:
            return iter(SegmentScan(summary.path, opts, columns=columns, batch_size=BATCH))
        return prefix_records(kept, summary, columns)
    return read


def prefix_puts(records: dict[str, str]):
    """The replay's index puts (``replay.PutsSource``): a segment's kept puts, batch by batch
    beside ``prefix_source``'s batches, or None for a segment this run did not scan."""
    def read(summary: SegmentSummary) -> Iterator[IndexPuts] | None:
        kept = records.get(summary.segment)
        return None if kept is None else read_puts(kept)
    return read


def lost_columns_cover(summary: SegmentSummary, end: int) -> bool:
    """Whether the kept records carry the lost messages' columns for every record of the segment at
    or past ``end``: those past the broker's valid prefix do; a segment whose prefix reaches past
    ``end`` (a file the broker deletes, a cut inside a prefix) must be read again for them."""
    return summary.valid_bytes == 0 or summary.file_start + summary.valid_bytes <= end


def serves_rebuild(config: BrokerConfig, broker_5x: bool) -> bool:
    """Whether the kept records are the rebuild's: it reads past a malformed DUP_INFO (a check the
    broker's dispatch does not make), the scan's readers stop there (5.x ``duplicationEnable``)."""
    return not (broker_5x and config.duplicationEnable)
