"""Salvage: the intact records the broker's recovery discards (R§4.3, R§5.1, E#3), given back.

A record is lost when it lies at or past the truncation point, is where its PHYSICALOFFSET says and
passes its CRC checks (``lost_mask``: the rule the audit's ``lost_messages`` table uses too). The
scan that finds them is the one the audit runs (``commitlog.SegmentScan`` with ``include_lost``);
this module turns them into rows a producer can send again (``schemas.salvage.SALVAGED``): the topic
and queue the producer addressed, the body as it sent it, and a ``replay`` verdict.

Spark-free: ``jobs/salvage.py`` runs ``salvage_segment`` as one task per commitlog file past the
cut, each writing a part file (``write_part``); the driver joins the parts in file order into the
output (``assemble``), so no segment's records are ever held by the driver.
"""
from __future__ import annotations

import base64
import datetime as dt
import io
import json
import os
import zlib
from dataclasses import dataclass
from typing import Iterable, Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from schemas import MESSAGE
from schemas.salvage import SALVAGED

from store_reader.formats import recordformat as rf
from store_reader.formats.commitlog import SegmentScan, SegmentSummary
from store_reader.exceptions import OutputError

# What the scan materialises for a lost record.
SCAN_COLUMNS = ("phy_offset", "stored_phy_offset", "total_size", "topic", "queue_id", "queue_offset",
                "flag", "sys_flag", "born_timestamp", "born_host", "store_timestamp", "store_host",
                "reconsume_times", "body_crc", "properties", "keys", "key_list", "tags", "uniq_key",
                "delay_level", "real_topic", "real_queue_id", "tags_code", "msg_id", "body_crc_ok",
                "record_crc_ok", "body")

PROPERTY_TIMER_OUT_MS = "TIMER_OUT_MS"

# CompressionType#findByValue: (sysflag & 0x700) >> 8; 0 is zlib (clients before the type bits)
COMPRESSION_TYPES = {0: "zlib", 1: "lz4", 2: "zstd", 3: "zlib"}

FORMATS = ("jsonl", "parquet")


def lost_mask(batch: pa.RecordBatch | pa.Table, end: int) -> np.ndarray:
    """Rows of a scan batch the broker's recovery discards although they are intact: at or past the
    truncation point ``end``, where their PHYSICALOFFSET says, with body CRC (and ``__CRC32#``)
    correct or not computed."""
    phy = batch.column("phy_offset").to_numpy()
    ok = pc.and_(pc.fill_null(batch.column("body_crc_ok"), True),
                 pc.fill_null(batch.column("record_crc_ok"), True)).to_numpy(zero_copy_only=False)
    return (phy >= end) & (batch.column("stored_phy_offset").to_numpy() == phy) & ok


@dataclass(frozen=True)
class LostSegment:
    """A commitlog file that reaches past the truncation point: its records there are lost."""

    path: object          # str or storefs.StoreLocation (picklable)
    segment: str
    reason: str           # behind_cut (the file the broker cuts) | deleted_file
    file_start: int = 0


def lost_segments(summaries: Sequence[SegmentSummary], end: int, cut_segment: str | None
                  ) -> list[LostSegment]:
    """The files whose records past ``end`` are lost, in commitlog order (the audit's choice: a file
    the broker keeps whole loses nothing)."""
    return [LostSegment(s.path, s.segment, "behind_cut" if s.segment == cut_segment else "deleted_file",
                        s.file_start) for s in summaries if s.file_start + s.file_size > end]


def cut_segment(pred) -> str | None:
    """The commitlog file the broker's recovery cuts (``prediction.Prediction``): the last one it
    keeps with less written than its size."""
    return next((f.name for f in pred.commitlog_files if f.wrote < f.size), None)


# -- one record: what the producer sent, and whether to send it again --------------------------------

def classify(topic: str, sys_flag: int, properties: dict[str, str]) -> tuple[str, str | None]:
    """(kind, skip reason or None) of a lost record (F§3.4)."""
    tran = sys_flag & rf.TRANSACTION_MASK
    if tran == rf.TRANSACTION_PREPARED_TYPE:
        return "prepared", "a PREPARED transaction record: only its commit may be delivered"
    if tran == rf.TRANSACTION_ROLLBACK_TYPE:
        return "rollback", "a ROLLBACK transaction record: the producer rolled it back"
    if topic == rf.TRANS_HALF_TOPIC:
        return "transaction_half", ("a transaction half message: the producer's transaction check "
                                    "decides it, its commit is a record of its own")
    if topic == rf.TRANS_OP_HALF_TOPIC:
        return "transaction_op", "a transaction op record: the broker's own bookkeeping"
    if sys_flag & rf.INNER_BATCH_FLAG:
        return "inner_batch", "an inner-batch record (BatchCQ): its body packs several messages"
    if topic == rf.SCHEDULE_TOPIC and rf.PROPERTY_REAL_TOPIC in properties:
        return "delayed", None
    if topic == rf.TIMER_TOPIC and rf.PROPERTY_REAL_TOPIC in properties:
        return "timer", None
    if topic in rf.SYSTEM_TOPICS or topic.startswith(rf.SYSTEM_TOPIC_PREFIX):
        return "system", f"a record of the broker's system topic {topic}"
    if tran == rf.TRANSACTION_COMMIT_TYPE:
        return "transaction_commit", None
    if topic.startswith(rf.RETRY_GROUP_TOPIC_PREFIX):
        return "retry", None
    if topic.startswith(rf.DLQ_GROUP_TOPIC_PREFIX):
        return "dlq", None
    return "normal", None


def decompress(body: bytes, sys_flag: int) -> tuple[str, bytes]:
    """(compression, the body as the producer compressed it) of a body with COMPRESSED_FLAG
    (F§3.5, ``CompressionType``: zlib is a DeflaterOutputStream, lz4 an LZ4 frame, zstd a zstd
    stream). Raises ValueError when it does not decompress."""
    ctype = (sys_flag & rf.COMPRESSION_TYPE_MASK) >> 8
    name = COMPRESSION_TYPES.get(ctype)
    try:
        if name == "zlib":
            d = zlib.decompressobj()
            return name, d.decompress(body) + d.flush()
        if name == "lz4":
            import lz4.frame
            return name, lz4.frame.decompress(body)
        if name == "zstd":
            import zstandard
            with zstandard.ZstdDecompressor().stream_reader(io.BytesIO(body), read_across_frames=True) as r:
                return name, r.read()
    except Exception as exc:       # each library raises its own error type for bad input
        raise ValueError(f"{name} body does not decompress: {exc}") from None
    raise ValueError(f"unknown compression type {ctype} in SYSFLAG")


def _ms(values) -> pa.Array:
    return pc.cast(pc.cast(values, pa.int64()).cast(pa.timestamp("ms", tz="UTC")), pa.timestamp("us", tz="UTC"))


def salvaged_rows(batch: pa.RecordBatch, segment: str, reason: str) -> pa.Table:
    """``SALVAGED`` rows of a batch of lost records (scanned with ``SCAN_COLUMNS``)."""
    n = batch.num_rows
    cols = {name: batch.column(name) for name in batch.schema.names}
    stored_topics = cols["topic"].to_pylist()
    sys_flags = cols["sys_flag"].to_pylist()
    props = [dict(p) if p else {} for p in cols["properties"].to_pylist()]
    bodies = cols["body"].to_pylist()
    kinds, skips, topics, qids, deliver, compression, out_bodies = [], [], [], [], [], [], []
    real_topic, real_qid = cols["real_topic"].to_pylist(), cols["real_queue_id"].to_pylist()
    delay, tags_code = cols["delay_level"].to_pylist(), cols["tags_code"].to_pylist()
    stored_qids = cols["queue_id"].to_pylist()
    for i in range(n):
        kind, skip = classify(stored_topics[i], sys_flags[i], props[i])
        topic, qid, when = stored_topics[i], stored_qids[i], None
        if kind in ("delayed", "timer"):
            topic = real_topic[i]
            qid = real_qid[i] if real_qid[i] is not None else 0
            if kind == "delayed" and (delay[i] or 0) > 0:
                when = tags_code[i]          # STORETIMESTAMP + the level's delay (F§3.9)
            elif kind == "timer" and props[i].get(PROPERTY_TIMER_OUT_MS, "").isdigit():
                when = int(props[i][PROPERTY_TIMER_OUT_MS])
        body, comp = bodies[i] or b"", None
        if sys_flags[i] & rf.COMPRESSED_FLAG:
            try:
                comp, body = decompress(body, sys_flags[i])
            except ValueError as exc:
                comp = COMPRESSION_TYPES.get((sys_flags[i] & rf.COMPRESSION_TYPE_MASK) >> 8)
                skip = skip or f"its body does not decompress ({exc}): sent as stored it would be garbage"
        kinds.append(kind)
        skips.append(skip)
        topics.append(topic)
        qids.append(qid)
        deliver.append(when)
        compression.append(comp)
        out_bodies.append(body)
    schema = SALVAGED.arrow()
    data = {
        "phy_offset": cols["phy_offset"], "segment": pa.array([segment] * n, pa.string()),
        "reason": pa.array([reason] * n, pa.string()), "kind": pa.array(kinds, pa.string()),
        "replay": pa.array(["send" if s is None else "skip" for s in skips], pa.string()),
        "skip_reason": pa.array(skips, pa.string()), "topic": pa.array(topics, pa.string()),
        "queue_id": pa.array(qids, pa.int32()), "stored_topic": cols["topic"],
        "stored_queue_id": cols["queue_id"], "queue_offset": cols["queue_offset"],
        "delay_level": cols["delay_level"], "deliver_time": _ms(pa.array(deliver, pa.int64())),
        "born_time": _ms(cols["born_timestamp"]), "store_time": _ms(cols["store_timestamp"]),
        "compression": pa.array(compression, pa.string()), "body": pa.array(out_bodies, pa.binary()),
    }
    arrays = [data[f.name] if f.name in data else cols[f.name] for f in schema]
    return pa.Table.from_arrays([a.cast(f.type) for a, f in zip(arrays, schema)], schema=schema)


def _lost_batches(seg: LostSegment, end: int, opts: rf.ScanOptions, batch_size: int,
                  columns: Sequence[str] = SCAN_COLUMNS) -> Iterator[pa.RecordBatch]:
    for rb in SegmentScan(seg.path, opts, columns=list(columns), include_lost=True, batch_size=batch_size):
        keep = lost_mask(rb, end)
        if keep.any():
            yield rb.filter(pa.array(keep))


def salvage_segment(seg: LostSegment, end: int, opts: rf.ScanOptions, batch_size: int = 4096
                    ) -> Iterator[pa.Table]:
    """The lost records of one commitlog file as ``SALVAGED`` tables, in commitlog order (one
    batch of ``batch_size`` records in memory at a time)."""
    for b in _lost_batches(seg, end, opts, batch_size):
        yield salvaged_rows(b, seg.segment, seg.reason)


# What a committed offset's count of skipped messages needs of a lost record (``audit.offsets``).
QUEUE_COLUMNS = ("phy_offset", "stored_phy_offset", "topic", "queue_id", "queue_offset", "sys_flag",
                 "body_crc_ok", "record_crc_ok")


def lost_queue_offsets(segments: Sequence[LostSegment], end: int, opts: rf.ScanOptions) -> pa.Table:
    """The lost records' queues and queue offsets, no bodies (``QUEUE_COLUMNS``): for a run that
    does not audit (a bounded dry run), what the audit's ``lost_messages`` give the consumer
    offsets' counts."""
    parts = [pa.Table.from_batches([b]) for seg in segments
             for b in _lost_batches(seg, end, opts, 65536, QUEUE_COLUMNS)]
    return pa.concat_tables(parts) if parts else MESSAGE.arrow(list(QUEUE_COLUMNS)).empty_table()


# What the re-append needs of a record it puts back (its bytes are read again as they are written).
RESEND_COLUMNS = ["phy_offset", "total_size", "topic", "queue_id", "queue_offset", "sys_flag", "tags_code",
                  "store_timestamp", "uniq_key", "key_list", "tags", "properties"]


def resend_records(seg: LostSegment, end: int, opts: rf.ScanOptions, batch_size: int = 4096) -> pa.Table:
    """The lost records of one commitlog file whose verdict is ``send`` (``RESEND_COLUMNS``, no
    bodies), in commitlog order."""
    parts = []
    for b in _lost_batches(seg, end, opts, batch_size):
        send = pc.equal(salvaged_rows(b, seg.segment, seg.reason)["replay"], "send")
        parts.append(pa.Table.from_batches([b.filter(send)]).select(RESEND_COLUMNS))
    return pa.concat_tables(parts) if parts else empty_resend()


def empty_resend() -> pa.Table:
    return MESSAGE.arrow(RESEND_COLUMNS).empty_table().select(RESEND_COLUMNS)


# -- the re-append (``jobs.recover --salvage``) ---------------------------------------------------------

# One salvaged record in the repaired store: where it was and where it is now.
REAPPENDED = pa.schema([
    pa.field("old_phy_offset", pa.int64(), False), pa.field("new_phy_offset", pa.int64(), False),
    pa.field("topic", pa.string(), False), pa.field("queue_id", pa.int32(), False),
    pa.field("old_queue_offset", pa.int64(), False), pa.field("new_queue_offset", pa.int64(), False),
    pa.field("total_size", pa.int32(), False), pa.field("uniq_key", pa.string()),
    pa.field("lmq_offsets", pa.string()),     # INNER_MULTI_QUEUE_OFFSET as rewritten, null without LMQ copies
])


@dataclass
class Reappended:
    """What ``reappend`` put back: one ``REAPPENDED`` row per record, the commitlog's new end, the
    latest store time written and dispatched, the index files' headers afterwards and the files
    it changed or created (paths relative to the store root)."""

    records: pa.Table
    end: int
    last_record_phy: int | None
    last_store_timestamp: int
    index_headers: list
    touched: set[str]

    def checkpoint_inputs(self, last_store_ts: int, last_cq_store_ts: int, index_headers: list,
                          confirm_offset: int) -> tuple[int, int, list, int]:
        """The repaired checkpoint's inputs with the re-appended records (all dispatched and indexed)."""
        if not self.records.num_rows:
            return last_store_ts, last_cq_store_ts, index_headers, confirm_offset
        return (max(last_store_ts, self.last_store_timestamp), max(last_cq_store_ts, self.last_store_timestamp),
                self.index_headers or index_headers, self.last_record_phy)

    def to_manifest(self) -> dict:
        r = self.records
        return {"records": r.num_rows, "newMaxPhyOffset": self.end,
                "moved": [{"oldPhyOffset": a, "newPhyOffset": b, "topic": t, "queueId": q,
                           "oldQueueOffset": c, "newQueueOffset": d, "uniqKey": u, **({"lmqOffsets": m} if m else {})}
                          for a, b, t, q, c, d, u, m in zip(*(r.column(n).to_pylist() for n in (
                              "old_phy_offset", "new_phy_offset", "topic", "queue_id", "old_queue_offset",
                              "new_queue_offset", "uniq_key", "lmq_offsets")))]}


def _lmq_rewrite(config, broker_5x: bool, topic: str, queue_id: int, props: dict[str, str],
                 queue_next: dict[tuple[str, int], int]) -> tuple[list[tuple[str, int, int]], str | None]:
    """The LMQ copies of a re-appended record at the next offsets of their queues (as the broker's
    put assigns them) and the new ``INNER_MULTI_QUEUE_OFFSET`` value (None: no copies)."""
    from store_reader.formats.javalang import java_split
    from store_reader.broker.dispatch import multi_dispatch_targets

    targets = multi_dispatch_targets(config, broker_5x, topic, queue_id, props)
    if not targets:
        return [], None
    copies = []
    for name, qid, _ in targets:
        o = queue_next.get((name, qid), 0)
        queue_next[(name, qid)] = o + 1
        copies.append((name, qid, o))
    # positions of INNER_MULTI_DISPATCH the broker skips keep their offsets
    values, pending = java_split(props[rf.PROPERTY_INNER_MULTI_QUEUE_OFFSET], ","), list(copies)
    for i, name in enumerate(java_split(props[rf.PROPERTY_INNER_MULTI_DISPATCH], ",")):
        if pending and pending[0][0] == name:
            values[i] = str(pending.pop(0)[2])
    return copies, ",".join(values)


def _replace_property(raw: bytes, name: str, value: str) -> bytes:
    """``raw`` properties (F§3.7) with the last ``name`` pair's value replaced (the one a reader keeps)."""
    text = raw.decode("utf-8")
    key = name + rf.NAME_VALUE_SEPARATOR
    at = text.rfind(key)
    stop = text.find(rf.PROPERTY_SEPARATOR, at)
    stop = len(text) if stop < 0 else stop
    return (text[:at + len(key)] + value + text[stop:]).encode("utf-8")


def reappend(records: pa.Table, sources: dict[int, object], out_root: str, end: int, file_size: int,
             queue_next: dict[tuple[str, int], int], config, broker_5x: bool, index_tags: bool) -> Reappended:
    """Append ``records`` (``resend_records`` of the lost files, in commitlog order) to the repaired
    store at ``out_root`` from its end ``end`` on, as the broker's put and dispatch would have
    written them: each record at the next phy offset (an 8-byte blank marker and the next file
    where it does not fit with 8 bytes to spare, F§3.10), at the next queue offset of its queue
    (``queue_next``: the repaired queues' max offsets; LMQ copies likewise, their
    ``INNER_MULTI_QUEUE_OFFSET`` rewritten), its bytes otherwise as stored (``relocate_record``:
    BODYCRC, UNIQ_KEY and properties kept, ``__CRC32#`` recomputed); its consume queue entries and
    index puts (``index.index_puts``; ``index_tags``: a 5.4+ broker's) written after the repaired
    ones. ``sources``: commitlog file start -> path of the input files the records are read from."""
    from store_reader.formats.consumequeue import CQ_ENTRY_DTYPE, write_queue_slots
    from store_reader.formats.indexfile import (IndexHeader, append_puts, list_index_files, next_index_file_name,
                                                read_header)
    from store_reader.broker.dispatch import index_puts
    from store_reader.io.storefs import FileReader, location

    n = records.num_rows
    if not n:
        return Reappended(REAPPENDED.empty_table(), end, None, 0, [], set())
    col = {c: records.column(c).to_pylist() for c in ("phy_offset", "total_size", "topic", "queue_id",
                                                      "queue_offset", "tags_code", "store_timestamp",
                                                      "uniq_key")}
    props = [dict(p) if p else {} for p in records.column("properties").to_pylist()]
    # 1. plan: queue offsets, LMQ copies, phy offsets (blank markers at file ends)
    new_phy, new_qoff, new_size, lmq_values, blanks = [], [], [], [], []
    entries: dict[tuple[str, int], list[tuple[int, int, int, int]]] = {}
    phy = end
    for i in range(n):
        key = (col["topic"][i], col["queue_id"][i])
        qoff = queue_next.get(key, 0)
        queue_next[key] = qoff + 1
        copies, lmq = _lmq_rewrite(config, broker_5x, *key, props[i], queue_next) \
            if config.enableMultiDispatch else ([], None)
        size = col["total_size"][i]
        if lmq is not None:
            old = props[i][rf.PROPERTY_INNER_MULTI_QUEUE_OFFSET]
            size += len(lmq.encode()) - len(old.encode())
        at, blank = rf.append_position(phy, size, file_size)
        if blank:
            blanks.append((phy, blank))
        phy = at
        for k in [key, *((name, qid) for name, qid, _ in copies)]:
            entries.setdefault(k, []).append((phy, size, col["tags_code"][i], i))
        new_phy.append(phy)
        new_qoff.append(qoff)
        new_size.append(size)
        lmq_values.append(lmq)
        phy += size
    touched: set[str] = set()
    # 2. the commitlog: records read from the input files and written relocated
    out_files: dict[int, object] = {}
    readers: dict[int, FileReader] = {}

    def out_file(at: int):
        start = at - at % file_size
        fh = out_files.get(start)
        if fh is None:
            path = os.path.join(out_root, "commitlog", f"{start:020d}")
            fh = out_files[start] = open(path, "r+b" if os.path.exists(path) else "xb")
            fh.truncate(file_size)
            touched.add(f"commitlog/{start:020d}")
        return fh, at - start

    try:
        for at, left in blanks:
            fh, pos = out_file(at)
            fh.seek(pos)
            fh.write(rf.encode_blank(left))
        for i in range(n):
            old = col["phy_offset"][i]
            start = old - old % file_size
            reader = readers.get(start)
            if reader is None:
                reader = readers[start] = FileReader(location(sources[start]))
            raw = reader.read_at(old - start, col["total_size"][i])
            new_props = None
            if lmq_values[i] is not None:
                a, b = rf.properties_span(raw)
                new_props = _replace_property(raw[a:b], rf.PROPERTY_INNER_MULTI_QUEUE_OFFSET, lmq_values[i])
            data = rf.relocate_record(raw, new_qoff[i], new_phy[i], new_props)
            fh, pos = out_file(new_phy[i])
            fh.seek(pos)
            fh.write(data)
    finally:
        for fh in out_files.values():
            fh.close()
        for r in readers.values():
            r.close()
    # 3. consume queues: each queue's entries continue it
    for (topic, qid), rows in entries.items():
        slots = np.zeros(len(rows), CQ_ENTRY_DTYPE)
        slots["phy_offset"], slots["size"], slots["tags_code"] = zip(*[(p, s, t) for p, s, t, _ in rows])
        first = queue_next[(topic, qid)] - len(rows)
        for path in write_queue_slots(os.path.join(out_root, "consumequeue", topic, str(qid)), first, slots,
                                      config.cq_file_size):
            touched.add(os.path.relpath(path, out_root))
    # 4. index: the puts continue the last index file, then new ones as each fills
    index_dir = os.path.join(out_root, "index")
    files = [f.path for f in list_index_files(index_dir, config.index_file_size, strict=False)]
    if config.messageIndexEnable and n:
        p = index_puts(pa.table({
            "phy_offset": pa.array(new_phy, pa.int64()), "stored_phy_offset": pa.array(new_phy, pa.int64()),
            "store_timestamp": records.column("store_timestamp"),
            "sys_flag": records.column("sys_flag"), "topic": records.column("topic"),
            "uniq_key": records.column("uniq_key"), "key_list": records.column("key_list"),
            "tags": records.column("tags")}), index_tags, ordered=True)
        done, header = 0, None
        while done < len(p.key_hash):
            start = None
            if header is not None or not files:
                # the last file is full (or there is none): a new one, named by its first put's time
                start = header.successor() if header is not None else IndexHeader.first()
                name = next_index_file_name(int(p.store_timestamp[done]),
                                            os.path.basename(files[-1]) if files else None)
                files.append(os.path.join(index_dir, name))
            header, k = append_puts(files[-1], config.maxHashSlotNum, config.maxIndexNum, p.key_hash[done:],
                                    p.phy[done:], p.store_timestamp[done:], start)
            touched.add(os.path.relpath(files[-1], out_root))
            done += k
    headers = [read_header(f) for f in files]
    table = pa.table({
        "old_phy_offset": records.column("phy_offset"), "new_phy_offset": pa.array(new_phy, pa.int64()),
        "topic": records.column("topic"), "queue_id": records.column("queue_id"),
        "old_queue_offset": records.column("queue_offset"), "new_queue_offset": pa.array(new_qoff, pa.int64()),
        "total_size": pa.array(new_size, pa.int32()), "uniq_key": records.column("uniq_key"),
        "lmq_offsets": pa.array(lmq_values, pa.string())}, schema=REAPPENDED)
    return Reappended(table, phy, new_phy[-1] if n else None,
                      max(col["store_timestamp"], default=0), headers, touched)


# -- output files ----------------------------------------------------------------------------------

def _json_value(value):
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, dt.datetime):
        return value.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    if isinstance(value, list):          # a map column: [(key, value), ...]
        return dict(value)
    return value


def jsonl_lines(table: pa.Table) -> Iterator[str]:
    """One JSON object per row: the body base64, times ISO 8601 UTC, properties an object."""
    names = table.column_names
    for row in zip(*(table.column(n).to_pylist() for n in names)):
        yield json.dumps({n: _json_value(v) for n, v in zip(names, row)}, ensure_ascii=False) + "\n"


def write_part(tables: Iterable[pa.Table], path: str, fmt: str) -> dict[str, int]:
    """Write one segment's rows to ``path`` (``fmt``: jsonl or parquet); returns counts per verdict."""
    counts = {"send": 0, "skip": 0}
    writer = None
    try:
        with open(path, "wb") as fh:
            for t in tables:
                for verdict in counts:
                    counts[verdict] += int(pc.sum(pc.equal(t["replay"], verdict)).as_py() or 0)
                if fmt == "jsonl":
                    fh.write("".join(jsonl_lines(t)).encode("utf-8"))
                else:
                    writer = writer or pq.ParquetWriter(fh, SALVAGED.arrow())
                    writer.write_table(t)
            if fmt == "parquet":
                (writer or pq.ParquetWriter(fh, SALVAGED.arrow())).close()
    except OSError as exc:          # a full disk: named here, in the task (its note carries the file)
        raise OutputError(f"{exc.strerror or exc} while writing the salvage file's part", path) from None
    return counts


def assemble(parts: Sequence[str], dest: str, fmt: str) -> None:
    """Join part files in order into ``dest`` (one part, one row group at a time), fsync'd."""
    with open(dest, "wb") as out:
        if fmt == "jsonl":
            for part in parts:
                with open(part, "rb") as fh:
                    while chunk := fh.read(1 << 20):
                        out.write(chunk)
        else:
            with pq.ParquetWriter(out, SALVAGED.arrow()) as writer:
                for part in parts:
                    f = pq.ParquetFile(part)
                    for g in range(f.num_row_groups):
                        writer.write_table(f.read_row_group(g))
        out.flush()
        os.fsync(out.fileno())
