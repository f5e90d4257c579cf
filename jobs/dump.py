"""Print and verify the files of a RocketMQ broker store: the store's ``kafka-dump-log.sh``.

    python -m jobs.dump FILE|STORE [--deep] [--verify] [--verify-index-only] [--max-bytes N]
                                   [--print-body] [--json] [--broker-config FILE]

Spark-free on purpose (it reads through ``store_reader`` only and never imports pyspark), so it
starts in a fraction of a second and runs next to a broker.

What it prints, chosen by the file's place in the store
-------------------------------------------------------
``commitlog/<20 digits>``
    One line per record (kafka-dump-log style): phy offset, position, size, topic, queue id, queue
    offset, store time, keys, offsetMsgId, CRC verdict; then where and why the segment's valid data
    ends (end-of-file marker, zero padding, torn tail, corrupt record) and, after a corrupt record,
    the intact records behind it (``lost``: the broker's recovery discards them).
``consumequeue/<topic>/<queueId>/<20 digits>``
    One line per entry (queue offset, position, phy offset, size, tags code); runs of all-zero slots
    are collapsed into one line.
``index/<yyyyMMddHHmmssSSS>``
    The header, then one line per entry in use (``--deep``: entry times and the slot table).
``checkpoint``, ``config/*.json``
    The checkpoint values with their derived minTimestamps; a config file as parsed (fastjson
    tolerant) and which generation the broker would load.
a store directory
    An overview: layout and broker settings, commitlog segments with how each ends, consume queues,
    index headers, checkpoint, ``abort``/``lock``, config files.

``--deep`` decodes every record field (properties, tags, hosts, sysflag, ...), ``--print-body``
adds the body (UTF-8 when printable, else base64), ``--max-bytes N`` stops the listing before the
first record/entry that does not end within the file's first N bytes (verification always reads
whole files), ``--json`` prints JSON lines (field names of ``schemas.MESSAGE`` for records).

Verification (``--verify``; ``--verify-index-only`` runs only the index part)
------------------------------------------------------------------------------
An *anomaly* is something in the files the broker acts on when it loads and recovers this store
(``recovery.md``), reported with file, byte position and, for commitlog bytes, phy offset. Every
rule below is applied to every file; entry-level anomalies of one kind are grouped into runs of
consecutive entries (first position and count), at most ``MAX_RUNS`` runs per kind and file.
Text output prints ``ANOMALY``, ``NOTE`` and ``UNREADABLE`` lines and a last ``verify:`` summary
line; ``--json`` the same as objects (``details`` holds the facts behind each message). A single
FILE is verified against the whole store it sits in; only the anomalies located in it are shown.

Commitlog (R§3-§5)
  * ``commitlog.bad_record``: the first record of a segment failing a check of the broker's
    ``checkMessageAndReturnSize`` (bad magic, body/record CRC, TOTALSIZE, length mismatch, ...),
    with its check and declared size, whether intact records follow it (resync: they are lost) and
    what the broker does (cuts the commitlog there and deletes later files, or never reads it when
    the segment lies before the recovery start file). A record torn by a ``kill -9`` (its bytes
    stop mid-record and nothing intact follows) is this anomaly too: the broker truncates it.
  * ``commitlog.no_eof_marker``: a segment whose valid data ends in zero padding (or at the file's
    last byte) without an end-of-file marker while more segments follow. The broker's scan stops
    there, so it truncates the commitlog at that point and deletes every later segment, even when
    they are empty preallocated files as a crash leaves behind (``crash-tail``). Zero padding at
    the end of the **last** segment is how a live segment looks and is not an anomaly.
  * ``layout.load_problem``: a commitlog file of the wrong size, a stray name, or (4.9.7) a
    zero-length last file: the broker refuses to load the store.
Consume queues (R§2, R§5.2, R§7), against the commitlog as the broker will recover it (``min`` =
start of the first segment it keeps, ``max`` = its recovered end, ``recovery.predict_commitlog``):
  * ``cq.file_size``: a file whose length is not ``mappedFileSizeConsumeQueue`` (the broker refuses
    to load the store), or a stray name in a queue directory;
  * ``cq.blank_in_middle``: invalid entries (``phy < 0 or size <= 0``) followed by valid ones; the
    broker's recovery ends the queue at the first of them (in its last three files);
  * ``cq.beyond_max`` / ``cq.below_min``: entries pointing at or beyond the commitlog max (removed by
    ``truncateDirtyLogicFiles``) or below its min (the queue's min offset is moved past them);
  * ``cq.slot_mismatch``: an entry whose slot disagrees with what is at its phy offset: no record
    starts there, or the record belongs to another queue, has another QUEUEOFFSET or TOTALSIZE, or
    is a PREPARED/ROLLBACK message (never dispatched);
  * ``cq.missing_entries``: records the broker had already dispatched (they end at or below the
    consume queues' max phy offset, the point reput resumes from) with no entry in their queue: a
    deleted file or queue directory, zeroed entries. The normal path does not rebuild them. Records
    above that point are dispatch lag, not an anomaly.
  * ``cq.all_missing``: no consume queue file at all while the commitlog holds dispatchable
    records (the broker re-dispatches everything from the commitlog min).
Index files (R§8, F§7)
  * ``index.bad_header``: indexCount / hashSlotCount out of range, begin/end phy offset not those
    of the first/last entry, endTimestamp < beginTimestamp;
  * ``index.entry_count``: used slots != hashSlotCount, data in entries past indexCount;
  * ``index.slot_chain``: slot values beyond indexCount, chain entries that hash to another slot,
    prevIndex not below its own entry, entries unreachable from any slot or reached twice, negative
    timeDiff (queries stop there);
  * ``index.beyond_max`` / ``index.below_min`` / ``index.no_record``: dangling entries (beyond the
    commitlog max, below its min, or at a phy offset where no record starts);
  * ``index.missing_entries`` / ``index.all_missing``: keyed records dispatched to the consume
    queues but absent from the index (a deleted index file), or no index file at all while keyed
    records exist.
Checkpoint and config
  * ``checkpoint.missing`` (the broker starts from zeros, E#13), ``checkpoint.file_size``;
  * ``config.undecodable``: the broker falls back to ``.bak``, to an empty table, or refuses to start.
Not anomalies (printed as notes): an ``abort`` file (it only selects the abnormal recovery path),
a held ``lock``, bytes after an end-of-file marker, CRC mismatches the broker does not check
(``checkCRCOnRecover=false``), a commitlog gap, a ``*.json.tmp`` leftover.

Exit codes: 0 printed (and, with ``--verify``, no anomaly); 1 anomalies found; 2 could not read:
missing path, unreadable file, a file that is not the store format its place says (random bytes,
a consume queue file that is not whole entries, an index file of another size), usage errors. A
verification that met an unreadable file still reports everything else, then exits 2.
"""
from __future__ import annotations

import argparse
import base64
import datetime as dt
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence, TextIO

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from schemas import MESSAGE
from store_reader import recordformat as rf
from store_reader import recovery
from store_reader.brokerconf import BrokerConfig
from store_reader.checkpoint import CHECKPOINT_FILE_SIZE, lock_status, read_checkpoint
from store_reader.commitlog import SegmentScan, SegmentSummary
from store_reader.config import (ConfigLoad, load_config, parse_fastjson, read_consumer_offsets,
                                 read_delay_offsets, read_lmq_consumer_offsets,
                                 read_subscription_groups, read_topics)
from store_reader.consumequeue import (CQ_STORE_UNIT_SIZE, ENTRY_INVALID, ENTRY_PRE_BLANK,
                                       ENTRY_VALID, QueueRef, classify_entries, file_name,
                                       list_queues, parse_file_name, read_queue_file)
from store_reader.dispatch import dispatchable, indexable, multi_dispatch_targets
from store_reader.exceptions import (ConfigError, FileSizeError, StoreReaderError,
                                     UnreadableFileError)
from store_reader.fsutil import list_dir
from store_reader.indexfile import (HASH_SLOT_SIZE, INDEX_ENTRY_SIZE, INDEX_HEADER_SIZE, IndexFile,
                                    read_header)
from store_reader.mappedfile import MappedFile, list_mapped_files
from store_reader.ranges import consecutive_runs
from store_reader.store import Store, _load_broker_config, open_store
from store_reader.storefs import PathRef, StoreLocation, location

EXIT_OK, EXIT_ANOMALIES, EXIT_UNREADABLE = 0, 1, 2
MAX_RUNS = 10                     # runs of one anomaly kind reported per file; the rest summed up
SCAN_BATCH = 4096                 # records per scanner call while printing (bounds --max-bytes work)

# Header fields printed by default; --deep prints every MESSAGE column but the body.
DEFAULT_RECORD_COLUMNS = ["phy_offset", "total_size", "topic", "queue_id", "queue_offset",
                          "store_timestamp", "keys", "msg_id", "body_crc_ok", "record_crc_ok"]
DEEP_RECORD_COLUMNS = [n for n in MESSAGE.names if n not in ("valid_prefix", "body")]
# What the verifier keeps of every intact record: enough to check CQ and index entries against it.
VERIFY_COLUMNS = ["phy_offset", "total_size", "topic", "queue_id", "queue_offset", "sys_flag",
                  "uniq_key", "key_list", "valid_prefix"]

_TRAN_NAMES = {rf.TRANSACTION_NOT_TYPE: "NOT", rf.TRANSACTION_PREPARED_TYPE: "PREPARED",
               rf.TRANSACTION_COMMIT_TYPE: "COMMIT", rf.TRANSACTION_ROLLBACK_TYPE: "ROLLBACK"}
_CONFIG_READERS: dict[str, Callable[[str], ConfigLoad[Any]]] = {
    "consumerOffset.json": read_consumer_offsets,
    "lmqConsumerOffset.json": read_lmq_consumer_offsets,
    "delayOffset.json": read_delay_offsets,
    "topics.json": read_topics,
    "subscriptionGroup.json": read_subscription_groups,
}


class CannotRead(StoreReaderError):
    """The dump cannot read a file as the format its place in the store says it has."""


# -- anomalies --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Anomaly:
    """One thing the broker acts on, located in the files (kinds: see the module docstring)."""

    kind: str
    path: str
    position: int | None
    message: str
    phy_offset: int | None = None
    count: int = 1
    details: dict[str, Any] = field(default_factory=dict, compare=False)
    """Machine-readable facts behind the message (JSON output)."""

    def where(self) -> str:
        return self.path + (f" @ byte {self.position}" if self.position is not None else "")

    def text(self) -> str:
        phy = f" (phy {self.phy_offset})" if self.phy_offset is not None else ""
        return f"ANOMALY {self.kind} {self.where()}{phy}: {self.message}"

    def as_json(self) -> dict[str, Any]:
        return {"type": "anomaly", "kind": self.kind, "file": self.path, "position": self.position,
                "phy_offset": self.phy_offset, "count": self.count, "message": self.message,
                **({"details": self.details} if self.details else {})}


@dataclass
class Findings:
    """Anomalies, notes and unreadable files collected by a verification."""

    anomalies: list[Anomaly] = field(default_factory=list)
    notes: list[Anomaly] = field(default_factory=list)
    unreadable: list[StoreReaderError] = field(default_factory=list)
    files_checked: int = 0

    def add(self, kind: str, path: str | os.PathLike[str], position: int | None, message: str,
            phy_offset: int | None = None, count: int = 1, **details: Any) -> None:
        self.anomalies.append(Anomaly(kind, str(path), position, message, phy_offset, count,
                                      details))

    def note(self, kind: str, path: str | os.PathLike[str], position: int | None, message: str) -> None:
        self.notes.append(Anomaly(kind, str(path), position, message))

    def only(self, path: str | os.PathLike[str]) -> "Findings":
        """The findings located in ``path`` (a single-file verification)."""
        key = _norm(path)
        return Findings([a for a in self.anomalies if _norm(a.path) == key],
                        [n for n in self.notes if _norm(n.path) == key],
                        [e for e in self.unreadable if e.path is None or _norm(e.path) == key], 1)


def _norm(path: PathRef) -> str:
    if isinstance(path, StoreLocation):
        return str(path)
    return os.path.normpath(os.path.abspath(os.fspath(path)))


def _join(base: PathRef, *names: str) -> PathRef:
    """``base`` joined with ``names``: a local path string, or a ``StoreLocation`` of a remote store."""
    if isinstance(base, StoreLocation):
        for name in names:
            base = base / name
        return base
    return os.path.join(base, *names)


def runs(idx: np.ndarray) -> list[tuple[int, int]]:
    """Runs ``[first, last]`` of consecutive values in sorted integer ``idx``."""
    return [(int(idx[lo]), int(idx[hi - 1])) for lo, hi in consecutive_runs(idx)]


Describe = Callable[[int, int], "tuple[int, str, int | None, dict[str, Any]]"]


def report_runs(found: Findings, kind: str, path: str, idx: np.ndarray, describe: Describe) -> None:
    """One anomaly per run of ``idx`` (at most ``MAX_RUNS``, then one summing up the rest).
    ``describe(first, last)`` gives (byte position, message, phy offset, details) of a run."""
    all_runs = runs(np.sort(idx))
    for first, last in all_runs[:MAX_RUNS]:
        position, message, phy, details = describe(first, last)
        found.add(kind, path, position, message, phy, last - first + 1, **details)
    rest = all_runs[MAX_RUNS:]
    if rest:
        position, _, phy, _ = describe(*rest[0])
        n = sum(b - a + 1 for a, b in rest)
        found.add(kind, path, position, f"and {n} more in {len(rest)} further runs like the above, "
                  f"the next starting here", phy, n)


# -- formatting helpers -------------------------------------------------------------------------------

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


def _count(n: int, word: str, plural: str | None = None) -> str:
    """``1 entry`` / ``2 entries``."""
    return f"{n} {word if n == 1 else plural or word + 's'}"


def _range(a: int, b: int) -> str:
    """``7`` / ``7..9``."""
    return str(a) if a == b else f"{a}..{b}"


def _span(label: str, a: int, b: int, plural: str | None = None) -> str:
    """``queue offset 7`` / ``queue offsets 7..9``."""
    return f"{label} {a}" if a == b else f"{plural or label + 's'} {a}..{b}"


def _dash(value: Any) -> Any:
    return "-" if value is None else value


def iso_ms(ms: int | None) -> str:
    """Epoch milliseconds as ISO-8601 UTC (the raw number when out of range)."""
    if ms is None:
        return "-"
    try:
        return (_EPOCH + dt.timedelta(milliseconds=ms)).isoformat(timespec="milliseconds") \
            .replace("+00:00", "Z")
    except OverflowError:
        return str(ms)


def body_text(body: bytes) -> tuple[str, str]:
    """(encoding, text): the body as UTF-8 when it decodes and prints, else base64."""
    try:
        text = body.decode("utf-8")
        if all(c.isprintable() or c in "\n\r\t" for c in text):
            return "utf8", text
    except UnicodeDecodeError:
        pass
    return "base64", base64.b64encode(body).decode("ascii")


def sys_flag_text(flag: int) -> str:
    """SYSFLAG with its bits named (F§3.5)."""
    names = [_TRAN_NAMES[flag & rf.TRANSACTION_MASK]]
    for bit, name in ((rf.COMPRESSED_FLAG, "compressed"), (rf.MULTI_TAGS_FLAG, "multiTags"),
                      (rf.BORNHOST_V6_FLAG, "bornHostV6"), (rf.STOREHOSTADDRESS_V6_FLAG, "storeHostV6"),
                      (rf.NEED_UNWRAP_FLAG, "needUnwrap"), (rf.INNER_BATCH_FLAG, "innerBatch")):
        if flag & bit:
            names.append(name)
    if flag & rf.COMPRESSION_TYPE_MASK:
        names.append(f"compressionType={(flag & rf.COMPRESSION_TYPE_MASK) >> 8}")
    return f"0x{flag & 0xFFFFFFFF:x} ({','.join(names)})"


def _crc_text(row: dict[str, Any]) -> str:
    verdict = {True: "ok", False: "BAD", None: "n/a"}
    text = f"crc {verdict[row['body_crc_ok']]}"
    if row.get("record_crc_ok") is not None:
        text += f" recordCrc {verdict[row['record_crc_ok']]}"
    return text


class Printer:
    """Text lines or JSON lines on one stream."""

    def __init__(self, out: TextIO, as_json: bool) -> None:
        self.out = out
        self.json = as_json

    def emit(self, text: str | Callable[[], str], obj: dict[str, Any] | Callable[[], dict[str, Any]]
             ) -> None:
        """Print ``obj`` (JSON mode) or ``text``; either may be a callable, built only if used."""
        if self.json:
            value = obj() if callable(obj) else obj
            self.out.write(json.dumps(value, ensure_ascii=False, default=_json_default) + "\n")
        else:
            self.out.write((text() if callable(text) else text) + "\n")


def _json_default(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, (Path, StoreLocation)):   # a file of a remote store: its URI
        return str(value)
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


# -- what a path is ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class StoreFile:
    """A file located by its place in the store."""

    kind: str                     # commitlog | consumequeue | index | checkpoint | config
    path: Path | StoreLocation
    root: Path | StoreLocation
    topic: str | None = None
    queue_id: int | None = None


def classify_path(path: Path | StoreLocation) -> StoreFile:
    """The kind of ``path`` (local or ``storefs.StoreLocation``) from where it sits in the store
    tree (``store-format.md`` §1)."""
    parent = path.parent
    if parent.name == "commitlog":
        return StoreFile("commitlog", path, parent.parent)
    if parent.name == "index":
        return StoreFile("index", path, parent.parent)
    if parent.parent.parent.name == "consumequeue":
        queue_dir = path.parent
        try:
            qid = int(queue_dir.name)
        except ValueError:
            raise CannotRead(f"queue directory {queue_dir.name!r} is not a queue id", path) from None
        return StoreFile("consumequeue", path, queue_dir.parent.parent.parent, queue_dir.parent.name, qid)
    if path.name == "checkpoint":
        return StoreFile("checkpoint", path, parent)
    if parent.name == "config" and (path.name.endswith(".json") or path.name.endswith(".json.bak")):
        return StoreFile("config", path, parent.parent)
    raise CannotRead("not a store file: expected commitlog/<file>, consumequeue/<topic>/<queueId>/"
                     "<file>, index/<file>, checkpoint or config/*.json", path)


# -- the store as the verifier sees it ---------------------------------------------------------------

@dataclass
class RecordTable:
    """Every intact record of the commitlog (valid prefix and lost ones), sorted by phy offset."""

    phy: np.ndarray
    size: np.ndarray
    topic: np.ndarray             # index into ``topics``
    topics: list[str]
    queue_id: np.ndarray
    queue_offset: np.ndarray
    tran: np.ndarray              # SYSFLAG & TRANSACTION_MASK
    keyed: np.ndarray             # has UNIQ_KEY or KEYS tokens (what the index builder puts)
    valid_prefix: np.ndarray

    @classmethod
    def from_batches(cls, batches: list[pa.RecordBatch]) -> "RecordTable":
        if batches:
            t = pa.Table.from_batches(batches).combine_chunks()
        else:
            types = {"phy_offset": pa.int64(), "total_size": pa.int32(), "topic": pa.string(),
                     "queue_id": pa.int32(), "queue_offset": pa.int64(), "sys_flag": pa.int32(),
                     "keyed": pa.bool_(), "valid_prefix": pa.bool_()}
            t = pa.table({name: pa.array([], type) for name, type in types.items()})
        topic = pc.dictionary_encode(t["topic"]).combine_chunks()
        order = np.argsort(t["phy_offset"].to_numpy(), kind="stable")

        def col(name: str) -> np.ndarray:
            return t[name].to_numpy(zero_copy_only=False)[order]

        return cls(phy=col("phy_offset"), size=col("total_size"),
                   topic=topic.indices.to_numpy(zero_copy_only=False)[order],
                   topics=topic.dictionary.to_pylist(), queue_id=col("queue_id"),
                   queue_offset=col("queue_offset"), tran=col("sys_flag") & rf.TRANSACTION_MASK,
                   keyed=col("keyed"), valid_prefix=col("valid_prefix"))

    def find(self, phy: np.ndarray) -> np.ndarray:
        """Row of the record starting at each phy offset, -1 where none starts."""
        phy = np.asarray(phy, dtype=np.int64)
        pos = np.searchsorted(self.phy, phy)
        hit = pos < len(self.phy)
        hit[hit] = self.phy[pos[hit]] == phy[hit]
        return np.where(hit, pos, -1)

    def describe(self, row: int) -> str:
        return (f"{self.topics[self.topic[row]]}/{self.queue_id[row]} queue offset "
                f"{self.queue_offset[row]}, TOTALSIZE {self.size[row]}, "
                f"{_TRAN_NAMES[int(self.tran[row])]}")


def _verify_batch(batch: pa.RecordBatch) -> pa.RecordBatch:
    """A scanned batch reduced to what the checks need (``keyed`` instead of the key columns)."""
    keyed = pc.or_(pc.is_valid(batch.column("uniq_key")),
                   pc.fill_null(pc.greater(pc.list_value_length(batch.column("key_list")), 0), False))
    keep = ["phy_offset", "total_size", "topic", "queue_id", "queue_offset", "sys_flag"]
    return pa.RecordBatch.from_arrays(
        [batch.column(n) for n in keep] + [keyed, batch.column("valid_prefix")],
        names=keep + ["keyed", "valid_prefix"])


@dataclass
class QueueRecords:
    """The records one consume queue should index, by queue offset (``phy`` -1 = none)."""

    queue_offset: np.ndarray
    phy: np.ndarray
    size: np.ndarray
    valid_prefix: np.ndarray


class StoreView:
    """One opened store and everything the printers and verifiers share, computed once."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.config = store.config
        self.broker_5x = store.looks_5x()
        self.version = recovery.V5X if self.broker_5x else recovery.V49
        self.opts = store.scan_options(broker_5x=self.broker_5x)
        self._summaries: list[SegmentSummary] | None = None
        self._records: RecordTable | None = None
        self._recovery: tuple[int, int, int, int] | None = None
        self._queues: dict[tuple[str, int], QueueRecords] | None = None
        self.errors: list[StoreReaderError] = []
        """Files the shared passes could not read (reported with the verification)."""

    # 1. one pass over the commitlog: summaries and the record table
    def scan(self, records: bool) -> None:
        if self._summaries is not None and (self._records is not None or not records):
            return
        summaries, batches = [], []
        for f in self.store.commitlog_files:
            scan = SegmentScan(f.path, self.opts, columns=VERIFY_COLUMNS if records else [],
                               include_lost=records)
            for b in scan:
                batches.append(_verify_batch(b))
            summaries.append(scan.summary)
        self._summaries = summaries
        if records:
            self._records = RecordTable.from_batches(batches)

    @property
    def summaries(self) -> list[SegmentSummary]:
        self.scan(records=False)
        assert self._summaries is not None
        return self._summaries

    @property
    def records(self) -> RecordTable:
        self.scan(records=True)
        assert self._records is not None
        return self._records

    # 2. where the broker's recovery ends the commitlog (R§2, R§4)
    def _recover(self) -> tuple[int, int, int, int]:
        if self._recovery is None:
            ckpt = read_checkpoint(self.store.checkpoint_path)
            try:
                queues, _ = recovery.load_consume_queues(self.store, self.broker_5x)
                for q in queues.values():
                    q.recover()                 # (reads each queue's last files)
            except StoreReaderError as exc:
                # without every queue the broker's CQ max is unknown: -1 checks nothing as dispatched
                self.errors.append(exc)
                queues = {}
            cq_max = max((q.max_physic_offset for q in queues.values()), default=-1)
            start, end, files, _ = recovery.predict_commitlog(
                self.summaries, self.version, self.config, self.store.abort_exists,
                ckpt.min_timestamp, ckpt.min_timestamp_index, cq_max)
            min_phy = files[0].start if files else -1
            self._recovery = (start, min_phy, end, cq_max)
        return self._recovery

    @property
    def start_index(self) -> int:
        """Index of the segment the broker's recovery starts from."""
        return self._recover()[0]

    @property
    def min_phy(self) -> int:
        """``CommitLog#getMinOffset`` after recovery (-1 without files)."""
        return self._recover()[1]

    @property
    def max_phy(self) -> int:
        """The recovered end of the commitlog (R§4.2)."""
        return self._recover()[2]

    @property
    def dispatched_until(self) -> int:
        """Records ending at or below this phy offset had been dispatched: the consume queues'
        max phy offset (where reput resumes, R§6), capped at the recovered end."""
        return min(self._recover()[3], self.max_phy)

    # 3. what each consume queue should hold
    def queue_records(self) -> dict[tuple[str, int], QueueRecords]:
        if self._queues is None:
            r = self.records
            keep = dispatchable(r.tran)
            key = r.topic.astype(np.int64) << 32 | (r.queue_id.astype(np.int64) & 0xFFFFFFFF)
            rows = np.flatnonzero(keep)
            rows = rows[np.lexsort((r.queue_offset[rows], key[rows]))]
            out: dict[tuple[str, int], QueueRecords] = {}
            if rows.size:
                cut = np.flatnonzero(np.diff(key[rows])) + 1
                for part in np.split(rows, cut):
                    i = part[0]
                    out[(r.topics[r.topic[i]], int(r.queue_id[i]))] = QueueRecords(
                        r.queue_offset[part], r.phy[part], r.size[part], r.valid_prefix[part])
            self._add_multi_dispatch(out)
            self._queues = out
        return self._queues

    def _add_multi_dispatch(self, out: dict[tuple[str, int], QueueRecords]) -> None:
        """LMQ / multi-dispatch copies (R§5.3): a second scan of the properties, only when enabled."""
        if not self.config.enableMultiDispatch:
            return
        extra: dict[tuple[str, int], list[tuple[int, int, int, bool]]] = {}
        cols = ["phy_offset", "total_size", "topic", "queue_id", "sys_flag", "properties",
                "valid_prefix"]
        for f in self.store.commitlog_files:
            for b in SegmentScan(f.path, self.opts, columns=cols, include_lost=True):
                for rec in b.to_pylist():
                    if not dispatchable(rec["sys_flag"]):
                        continue
                    for topic, qid, offset in multi_dispatch_targets(
                            self.config, self.broker_5x, rec["topic"], rec["queue_id"],
                            dict(rec["properties"] or [])):
                        extra.setdefault((topic, qid), []).append(
                            (offset, rec["phy_offset"], rec["total_size"], rec["valid_prefix"]))
        for key, rows in extra.items():
            rows.sort()
            old = out.get(key)
            cols_new = [np.array(c) for c in zip(*rows)]
            if old is not None:
                cols_new = [np.concatenate((a, b)) for a, b in zip(
                    (old.queue_offset, old.phy, old.size, old.valid_prefix), cols_new)]
                order = np.argsort(cols_new[0], kind="stable")
                cols_new = [c[order] for c in cols_new]
            out[key] = QueueRecords(*cols_new)


# -- commitlog ------------------------------------------------------------------------------------

def _record_columns(deep: bool, body: bool) -> list[str]:
    cols = list(DEEP_RECORD_COLUMNS if deep else DEFAULT_RECORD_COLUMNS) + ["valid_prefix"]
    return cols + (["body"] if body else [])


def record_json(row: dict[str, Any], path: str, position: int) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "record", "file": path, "position": position}
    for name, value in row.items():
        if name == "body":
            if value is not None:
                out["body_encoding"], out["body"] = body_text(value)
        elif name == "properties":
            out[name] = dict(value) if value is not None else None
        else:
            out[name] = value
    return out


def record_text(row: dict[str, Any], position: int, deep: bool) -> str:
    parts = [f"offset: {row['phy_offset']} position: {position} size: {row['total_size']}",
             f"topic: {row['topic']} queueId: {row['queue_id']} queueOffset: {row['queue_offset']}",
             f"storeTime: {iso_ms(row['store_timestamp'])}",
             f"keys: {_dash(row['keys'])}",
             f"msgId: {row['msg_id']}", _crc_text(row)]
    if deep:
        props = dict(row["properties"]) if row["properties"] is not None else None
        parts += [f"magic: v{row['version']} bodyCrc: {row['body_crc']} flag: {row['flag']}",
                  f"sysFlag: {sys_flag_text(row['sys_flag'])}",
                  f"bornTime: {iso_ms(row['born_timestamp'])} bornHost: {row['born_host']}",
                  f"storeHost: {row['store_host']} reconsumeTimes: {row['reconsume_times']}",
                  f"preparedTransactionOffset: {row['prepared_transaction_offset']}",
                  f"bodyLength: {row['body_length']} storedPhyOffset: {row['stored_phy_offset']}",
                  f"tags: {_dash(row['tags'])} tagsCode: {row['tags_code']}",
                  f"uniqKey: {_dash(row['uniq_key'])} realTopic: {_dash(row['real_topic'])}",
                  f"realQueueId: {_dash(row['real_queue_id'])} delayLevel: {_dash(row['delay_level'])}",
                  f"transactionPrepared: {str(row['transaction_prepared']).lower()}",
                  f"properties: {json.dumps(props, ensure_ascii=False)}"]
    if "body" in row and row["body"] is not None:
        encoding, text = body_text(row["body"])
        parts.append(f"body: {json.dumps(text, ensure_ascii=False)}" if encoding == "utf8"
                     else f"body(base64): {text}")
    if not row["valid_prefix"]:
        parts.append("lost: behind the segment's first bad record")
    return " ".join(parts)


def _end_line(p: Printer, path: str, s: SegmentSummary) -> None:
    """Where and why the valid prefix ended (R§4.2)."""
    pos, phy = s.valid_bytes, s.end_phy_offset
    base = {"type": "segment_end", "file": path, "position": pos, "phy_offset": phy,
            "end_reason": s.end_reason}
    if s.end_reason == "eof_marker":
        extra = " bytes after it are not zero" if s.nonzero_after_marker else ""
        p.emit(f"offset: {phy} position: {pos} END-OF-FILE marker (declared size "
               f"{s.blank_declared_size}){extra}",
               {**base, "declared_size": s.blank_declared_size,
                "nonzero_after_marker": s.nonzero_after_marker})
    elif s.end_reason == "zero_padding":
        p.emit(f"# zero padding from position {pos} to {s.file_size}", base)
    elif s.end_reason in ("torn_tail", "corrupt"):
        what = "torn tail: nothing intact after it" if s.end_reason == "torn_tail" else \
            f"corrupt: intact records resume at position {s.resync_position}"
        p.emit(f"offset: {phy} position: {pos} INVALID {s.end_check} (declared size "
               f"{s.end_declared_size}) {what}",
               {**base, "end_check": s.end_check, "declared_size": s.end_declared_size,
                "resync_position": s.resync_position})


def _summary_line(p: Printer, s: SegmentSummary) -> None:
    end = s.end_reason + (f" ({s.end_check})" if s.end_check else "")
    lost = f"; {s.records_after_cut} intact records after the cut" if s.records_after_cut else ""
    p.emit(f"# segment {s.segment}: {s.records} records in {s.valid_bytes} of {s.file_size} bytes, "
           f"end: {end} at position {s.valid_bytes} (phy {s.end_phy_offset}){lost}",
           lambda: {"type": "segment", **s.as_row(), "lost_ranges": [list(r) for r in s.lost_ranges]})


def dump_segment(p: Printer, view: StoreView, f: MappedFile, deep: bool, body: bool,
                 max_bytes: int | None) -> None:
    """Every record of one segment, the end of its valid prefix, the lost records behind it."""
    scan = SegmentScan(f.path, view.opts, columns=_record_columns(deep, body), include_lost=True,
                       batch_size=SCAN_BATCH)
    s = scan.summary
    cut_shown = stopped = False
    batches = iter(scan)
    try:
        for batch in batches:
            for row in batch.to_pylist():
                position = row["phy_offset"] - f.start
                if max_bytes is not None and position + row["total_size"] > max_bytes:
                    stopped = True
                    break
                if not row["valid_prefix"] and not cut_shown:
                    _end_line(p, f.path, s)        # the bad record comes before what is lost behind it
                    cut_shown = True
                p.emit(lambda: record_text(row, position, deep),
                       lambda: record_json(row, f.path, position))
            if stopped:
                break
    finally:
        close = getattr(batches, "close", None)
        if close is not None:
            close()                                # releases the segment's mmap
    if stopped:
        p.emit(f"# stopped at --max-bytes {max_bytes}",
               {"type": "stopped", "file": f.path, "max_bytes": max_bytes})
        return
    if not cut_shown and (max_bytes is None or s.valid_bytes < max_bytes):
        _end_line(p, f.path, s)
    _summary_line(p, s)


def _not_a_segment(s: SegmentSummary) -> bool:
    """Random bytes: no record header at byte 0, nothing intact anywhere, not an empty segment."""
    return (s.records == 0 and s.records_after_cut == 0 and s.end_reason in ("torn_tail", "corrupt")
            and s.first_magic not in (rf.MAGIC_V1, rf.MAGIC_V2, rf.BLANK_MAGIC))


def verify_commitlog(view: StoreView, found: Findings) -> None:
    """Commitlog anomalies (module docstring): load problems, per-segment first bad record, valid
    data ending without an end-of-file marker before more segments."""
    store = view.store
    for problem in store.load_problems_for(view.broker_5x):
        found.add("layout.load_problem", problem.path or store.root, problem.position, problem.reason)
    verify_commitlog_sequence(store, found)
    summaries = view.summaries
    found.files_checked += len(summaries)
    for i, s in enumerate(summaries):
        later = summaries[i + 1:]
        if _not_a_segment(s):
            found.unreadable.append(CannotRead(
                f"not a commitlog segment: no record header at byte 0 (magic 0x"
                f"{(s.first_magic or 0) & 0xFFFFFFFF:08x}) and no intact record anywhere", s.path, 0))
            continue
        if s.end_reason in ("torn_tail", "corrupt"):
            found.add("commitlog.bad_record", s.path, s.valid_bytes,
                      _bad_record_message(view, i, s, later), s.end_phy_offset, check=s.end_check,
                      end_reason=s.end_reason, declared_size=s.end_declared_size,
                      resync_position=s.resync_position, records_after_cut=s.records_after_cut,
                      broker_cut=s.end_phy_offset == view.max_phy)
        elif s.end_reason in ("zero_padding", "file_end") and later:
            found.add("commitlog.no_eof_marker", s.path, s.valid_bytes,
                      f"valid data ends without an end-of-file marker but {len(later)} more "
                      f"{'segment follows' if len(later) == 1 else 'segments follow'}: "
                      f"{_broker_cut(view, i, s, later)}", s.end_phy_offset,
                      end_reason=s.end_reason, later_segments=[x.segment for x in later],
                      broker_cut=s.end_phy_offset == view.max_phy)
        if s.nonzero_after_marker:
            found.note("note.after_marker", s.path, s.valid_bytes + rf.END_FILE_MIN_BLANK_LENGTH,
                       "bytes after the end-of-file marker are not zero (the broker never reads them)")
        if s.crc_failures and not view.opts.check_crc:
            found.note("note.crc_unchecked", s.path, None,
                       f"{s.crc_failures} records fail their CRC, which the broker does not check "
                       "(checkCRCOnRecover=false)")


def verify_commitlog_sequence(store: Store, found: Findings) -> None:
    """Consecutive commitlog files whose start offsets are not one file size apart (a missing file
    or an overlap): the broker only logs it, so it is a note. ``jobs.audit`` reports it too."""
    for note in store.notes:
        if "gap or overlap" in note:
            path, text = note.split(": ", 1)
            found.note("note.commitlog_gap", path, None, text)


def _bad_record_message(view: StoreView, i: int, s: SegmentSummary, later: Sequence[SegmentSummary]
                        ) -> str:
    msg = f"first record failing a check: {s.end_check} (declared TOTALSIZE {s.end_declared_size}); "
    if s.end_reason == "torn_tail":
        msg += "nothing intact follows it (torn tail); "
    else:
        msg += (f"{s.records_after_cut} intact records follow from position {s.resync_position} "
                f"(phy {s.file_start + (s.resync_position or 0)}) and are lost; ")
    return msg + _broker_cut(view, i, s, later)


def _broker_cut(view: StoreView, i: int, s: SegmentSummary, later: Sequence[SegmentSummary]) -> str:
    """What the broker's recovery does at the end of segment ``i``'s valid data."""
    if i < view.start_index:
        return (f"recovery starts at {view.summaries[view.start_index].segment} and never reads it: "
                "the records here stay readable through their consume queue entries")
    if s.end_phy_offset != view.max_phy:
        return f"beyond the broker's cut at phy {view.max_phy}: this segment is deleted"
    held = sum(x.records + x.records_after_cut for x in later)
    deleted = (f" and deletes {_count(len(later), 'later segment')} holding {_count(held, 'record')}"
               if later else "")
    return f"the broker truncates the commitlog here (max phy offset {view.max_phy}){deleted}"


# -- consume queues ------------------------------------------------------------------------------------

def _cq_entry_text(q: int, pos: int, phy: int, size: int, tags: int, kind: int) -> str:
    tail = {ENTRY_VALID: "", ENTRY_PRE_BLANK: " preBlank", ENTRY_INVALID: " INVALID"}[kind]
    return f"queueOffset: {q} position: {pos} phyOffset: {phy} size: {size} tagsCode: {tags}{tail}"


def dump_cq_file(p: Printer, path: Path, max_bytes: int | None) -> None:
    """Every slot of one consume queue file; runs of all-zero slots as one line."""
    start = parse_file_name(path)
    e = read_queue_file(path)
    kind = classify_entries(e.phy_offset, e.size, e.tags_code)
    zero = (e.phy_offset == 0) & (e.size == 0) & (e.tags_code == 0)
    n = len(kind)
    if max_bytes is not None:
        n = min(n, max_bytes // CQ_STORE_UNIT_SIZE)
    kinds = {ENTRY_VALID: "valid", ENTRY_PRE_BLANK: "pre_blank", ENTRY_INVALID: "invalid"}
    i = 0
    while i < n:
        pos, q = i * CQ_STORE_UNIT_SIZE, (start + i * CQ_STORE_UNIT_SIZE) // CQ_STORE_UNIT_SIZE
        if zero[i]:
            j = i
            while j < n and zero[j]:
                j += 1
            p.emit(f"# positions {pos}..{j * CQ_STORE_UNIT_SIZE - 1}: {j - i} blank (all-zero) entries",
                   {"type": "cq_blank", "file": str(path), "position": pos, "queue_offset": q,
                    "count": j - i})
            i = j
            continue
        phy, size, tags, k = int(e.phy_offset[i]), int(e.size[i]), int(e.tags_code[i]), int(kind[i])
        p.emit(_cq_entry_text(q, pos, phy, size, tags, k),
               {"type": "cq_entry", "file": str(path), "position": pos, "queue_offset": q,
                "phy_offset": phy, "size": size, "tags_code": tags, "kind": kinds[k]})
        i += 1
    if n < len(kind):
        p.emit(f"# stopped at --max-bytes {max_bytes}",
               {"type": "stopped", "file": str(path), "max_bytes": max_bytes})


@dataclass
class _QueueFile:
    """One decoded consume queue file of a queue."""

    ref: QueueRef
    file: MappedFile
    phy: np.ndarray
    size: np.ndarray
    kind: np.ndarray

    @property
    def first_slot(self) -> int:
        return self.file.start // CQ_STORE_UNIT_SIZE

    def run(self, a: int, b: int, what: str, message: str, phy: int | None = None,
            aside: str = "") -> tuple[int, str, int | None, dict[str, Any]]:
        """A run of entries ``a..b`` (indices in this file) for ``report_runs``."""
        q0, q1 = self.first_slot + a, self.first_slot + b
        return (a * CQ_STORE_UNIT_SIZE,
                f"{_count(b - a + 1, what, what[:-1] + 'ies' if what.endswith('y') else None)} "
                f"({_span('queue offset', q0, q1)}{aside}) {message}", phy,
                {"topic": self.ref.topic, "queue_id": self.ref.queue_id, "queue_offsets": [q0, q1]})


def verify_queue(view: StoreView, found: Findings, ref: QueueRef) -> int:
    """One queue's files against its configured size and the commitlog (module docstring);
    returns how many files the queue has."""
    problems: list[StoreReaderError] = []
    files = list_mapped_files(ref.path, view.config.cq_file_size, "consume queue",
                              "mappedFileSizeConsumeQueue", problems, [],
                              broker_5x=view.broker_5x)
    for problem in problems:
        path = problem.path or ref.path
        found.add("cq.file_size", path, location(path).size() if isinstance(problem, FileSizeError)
                  else None, problem.reason, topic=ref.topic, queue_id=ref.queue_id)
    found.files_checked += len(files)
    loaded: list[_QueueFile] = []
    for f in files:
        try:
            e = read_queue_file(f.path)
        except StoreReaderError as exc:
            found.unreadable.append(exc)
            continue
        loaded.append(_QueueFile(ref, f, e.phy_offset, e.size,
                                 classify_entries(e.phy_offset, e.size, e.tags_code)))
    _blank_in_middle(found, loaded, len(files))
    records = view.queue_records().get((ref.topic, ref.queue_id))
    for qf in loaded:
        _dangling_entries(view, found, qf)
        _slot_mismatches(view, found, qf, records)
    if records is not None and len(loaded) == len(files):   # an unreadable file is not "missing"
        _missing_entries(view, found, ref, loaded, records)
    return len(files)


def _blank_in_middle(found: Findings, loaded: list[_QueueFile], n_files: int) -> None:
    """Invalid entries with valid ones after them, anywhere in the queue."""
    last_valid = None
    for fi, qf in enumerate(loaded):
        v = np.flatnonzero(qf.kind != ENTRY_INVALID)
        if v.size:
            last_valid = (fi, int(v[-1]))
    if last_valid is None:
        return
    for fi, qf in enumerate(loaded[:last_valid[0] + 1]):
        bad = np.flatnonzero(qf.kind == ENTRY_INVALID)
        if fi == last_valid[0]:
            bad = bad[bad < last_valid[1]]
        effect = ("the broker's recovery ends the queue at the first one and drops the valid entries "
                  "after it (R§2)" if fi >= n_files - 3 else   # ConsumeQueue#recover: last 3 files
                  "before the last three files, so recovery goes on; pulls here find nothing")
        report_runs(found, "cq.blank_in_middle", qf.file.path, bad, lambda a, b, qf=qf, effect=effect:
                    qf.run(a, b, "invalid entry", f"with valid entries after them: {effect}"))


def _dangling_entries(view: StoreView, found: Findings, qf: _QueueFile) -> None:
    """Entries pointing outside the commitlog as the broker will recover it."""
    valid = qf.kind == ENTRY_VALID
    no_files = "" if view.store.commitlog_files else " (the commitlog has no files: R§4.6)"
    for kind, mask, bound, effect in (
            ("cq.beyond_max", valid & (qf.phy >= view.max_phy),
             f"at or beyond the commitlog max phy offset {view.max_phy}{no_files}",
             "removed by the broker's recovery (R§5.2)"),
            ("cq.below_min", valid & (qf.phy < view.min_phy),
             f"below the commitlog min phy offset {view.min_phy}",
             "the records are gone and the queue's min offset moves past (R§7.2)")):
        report_runs(found, kind, qf.file.path, np.flatnonzero(mask),
                    lambda a, b, bound=bound, effect=effect: qf.run(
                        a, b, "entry", f"pointing {bound}: {effect}", int(qf.phy[a]),
                        f", phy {_range(int(qf.phy[a]), int(qf.phy[b]))}"))


def _slot_mismatches(view: StoreView, found: Findings, qf: _QueueFile,
                     records: QueueRecords | None) -> None:
    """Entries inside [min, max) whose slot does not hold the record their phy offset names."""
    idx = np.flatnonzero((qf.kind == ENTRY_VALID) & (qf.phy >= view.min_phy) & (qf.phy < view.max_phy))
    if not idx.size:
        return
    slots = qf.first_slot + idx
    ok = np.zeros(idx.size, dtype=bool)
    if records is not None and records.queue_offset.size:
        at = np.searchsorted(records.queue_offset, slots)
        hit = at < records.queue_offset.size
        hit[hit] = records.queue_offset[at[hit]] == slots[hit]
        ok[hit] = ((records.phy[at[hit]] == qf.phy[idx[hit]])
                   & (records.size[at[hit]] == qf.size[idx[hit]]))
    table = view.records

    def describe(a: int, b: int) -> tuple[int, str, int | None, dict[str, Any]]:
        phy = int(qf.phy[a])
        row = int(table.find(np.array([phy]))[0])
        what = (f"no record starts at phy {phy}" if row < 0
                else f"the record at phy {phy} is {table.describe(row)}")
        return qf.run(a, b, "entry", f"not matching the commitlog: the first has size "
                      f"{int(qf.size[a])} but {what}", phy)

    report_runs(found, "cq.slot_mismatch", qf.file.path, idx[~ok], describe)


def _missing_entries(view: StoreView, found: Findings, ref: QueueRef, loaded: list[_QueueFile],
                     records: QueueRecords) -> None:
    """Dispatched records of this queue whose slot holds no valid entry."""
    want = (records.valid_prefix & (records.phy >= view.min_phy) & (records.phy < view.max_phy)
            & (records.phy + records.size <= view.dispatched_until))
    present = np.concatenate([qf.first_slot + np.flatnonzero(qf.kind == ENTRY_VALID) for qf in loaded]
                             or [np.zeros(0, np.int64)])
    rows = np.flatnonzero(want)
    rows = rows[~np.isin(records.queue_offset[rows], present)]
    size = view.config.cq_file_size
    by_offset = {int(records.queue_offset[r]): int(r) for r in rows}
    for first, last in runs(np.array(sorted(by_offset), dtype=np.int64)):
        q = first
        while q <= last:             # split at file boundaries: each anomaly names its slots' file
            logic = q * CQ_STORE_UNIT_SIZE
            file_start = logic - logic % size
            end = min(last, (file_start + size) // CQ_STORE_UNIT_SIZE - 1)
            path = _join(ref.path, file_name(file_start))
            gone = "" if location(path).exists() else " (the file is missing)"
            a, b = int(records.phy[by_offset[q]]), int(records.phy[by_offset[end]])
            found.add("cq.missing_entries", path, logic % size,
                      f"{_count(end - q + 1, 'record')} of {ref.topic}/{ref.queue_id} "
                      f"({_span('queue offset', q, end)}, phy {_range(a, b)}) were dispatched (they "
                      f"end at or below the consume queues' max phy offset {view.dispatched_until}) "
                      f"but have no entry{gone}: the normal path does not rebuild them (R§6)",
                      a, end - q + 1,
                      topic=ref.topic, queue_id=ref.queue_id, queue_offsets=[q, end])
            q = end + 1


def verify_consume_queues(view: StoreView, found: Findings, only: tuple[str, int] | None = None
                          ) -> None:
    """Every queue on disk, plus queues the commitlog says should exist (``only``: one queue)."""
    cq_dir = view.store.consume_queue_dir
    refs = {(r.topic, r.queue_id): r for r in list_queues(view.store.root)}
    expected = view.queue_records()
    for key in expected:
        if key not in refs:                              # a deleted queue directory
            refs[key] = QueueRef(key[0], key[1], _join(cq_dir, key[0], str(key[1])))
    files = sum(verify_queue(view, found, refs[key]) for key in sorted(refs)
                if only is None or key == only)
    if only is None and not files:
        r = view.records
        n = int(np.count_nonzero(r.valid_prefix & dispatchable(r.tran)
                                 & (r.phy >= view.min_phy) & (r.phy < view.max_phy)))
        if n:
            found.add("cq.all_missing", cq_dir, None,
                      f"no consume queue file at all, but the commitlog holds {n} dispatchable "
                      "records: the broker re-dispatches every queue from the commitlog min offset "
                      "(R§6)")


# -- index files -------------------------------------------------------------------------------------

def _index_entry_pos(f: IndexFile, n: int) -> int:
    return INDEX_HEADER_SIZE + f.hash_slot_num * HASH_SLOT_SIZE + n * INDEX_ENTRY_SIZE


def dump_index_file(p: Printer, f: IndexFile, deep: bool, max_bytes: int | None) -> None:
    """Header, then the entries in use (and with ``--deep`` the slot table and entry times)."""
    h = f.header
    p.emit(f"header: beginTimestamp: {h.begin_timestamp} ({iso_ms(h.begin_timestamp)}) endTimestamp: "
           f"{h.end_timestamp} ({iso_ms(h.end_timestamp)}) beginPhyOffset: {h.begin_phy_offset} "
           f"endPhyOffset: {h.end_phy_offset} hashSlotCount: {h.hash_slot_count} "
           f"indexCount: {h.index_count}",
           {"type": "index_header", "file": f.path, **h.to_dict()})
    limit = max_bytes if max_bytes is not None else None
    if deep:
        slots = f.slots[:]           # one read (a remote file's slots are read on demand)
        for s in np.flatnonzero(slots):
            pos = INDEX_HEADER_SIZE + int(s) * HASH_SLOT_SIZE
            if limit is not None and pos + HASH_SLOT_SIZE > limit:
                break
            p.emit(f"slot: {int(s)} position: {pos} entry: {int(slots[s])}",
                   {"type": "index_slot", "file": f.path, "slot": int(s), "position": pos,
                    "entry_number": int(slots[s])})
    for row in f.entries_table().to_pylist():
        n = row["entry_number"]
        pos = _index_entry_pos(f, n)
        if limit is not None and pos + INDEX_ENTRY_SIZE > limit:
            p.emit(f"# stopped at --max-bytes {max_bytes}",
                   {"type": "stopped", "file": f.path, "max_bytes": max_bytes})
            break
        text = (f"entry: {n} position: {pos} keyHash: {row['key_hash']} slot: {row['slot']} "
                f"phyOffset: {row['phy_offset']} timeDiff: {row['time_diff']} "
                f"prevIndex: {row['prev_index']}")
        obj = {"type": "index_entry", "file": f.path, "position": pos,
               **{k: v for k, v in row.items() if k != "file"}}
        if deep:
            # the time a query compares: beginTimestamp + timeDiff seconds (F§7.4)
            t = h.begin_timestamp + row["time_diff"] * 1000
            text += f" time: {iso_ms(t)}"
            obj["time"] = t
        p.emit(text, obj)


def verify_index_file(view: StoreView, found: Findings, f: IndexFile) -> None:
    """Header, counts, slot chains and dangling entries of one index file (module docstring)."""
    h, path = f.header, f.path
    n_used = min(h.entries_in_use, f.index_num - 1)
    used = f.entries[1:1 + n_used]
    number = np.arange(1, n_used + 1, dtype=np.int64)          # entry numbers in use
    phy = used["phy_offset"].astype(np.int64)

    def entry_runs(kind: str, mask: np.ndarray, what: Callable[[int, int], str],
                   with_phy: bool = False) -> None:
        """Runs of entries (by number) selected by ``mask`` over the entries in use."""
        report_runs(found, kind, path, number[mask], lambda a, b: (
            _index_entry_pos(f, a), f"{_span('entry', a, b, 'entries')} {what(a, b)}",
            int(phy[a - 1]) if with_phy else None, {"entries": [a, b]}))

    def slot_runs(slots: np.ndarray, what: Callable[[int, int], str]) -> None:
        report_runs(found, "index.slot_chain", path, slots, lambda a, b: (
            INDEX_HEADER_SIZE + a * HASH_SLOT_SIZE, f"{_span('slot', a, b)} {what(a, b)}", None,
            {"slots": [a, b]}))

    # 1. header: the counts in range, begin/end as the first and last put left them (F§7.4)
    if not 0 <= h.index_count <= f.index_num:
        found.add("index.bad_header", path, 36, f"indexCount {h.index_count} outside 0..maxIndexNum "
                  f"({f.index_num})")
    if not 0 <= h.hash_slot_count <= min(f.hash_slot_num, max(h.index_count, 0)):
        found.add("index.bad_header", path, 32, f"hashSlotCount {h.hash_slot_count} outside "
                  "0..min(maxHashSlotNum, indexCount)")
    if n_used:
        if h.end_timestamp < h.begin_timestamp:
            found.add("index.bad_header", path, 8, f"endTimestamp {h.end_timestamp} is before "
                      f"beginTimestamp {h.begin_timestamp}")
        if h.begin_phy_offset != phy[0]:
            found.add("index.bad_header", path, 16, f"beginPhyOffset {h.begin_phy_offset} but entry 1 "
                      f"holds phy {int(phy[0])}")
        if h.end_phy_offset != phy[-1]:
            found.add("index.bad_header", path, 24, f"endPhyOffset {h.end_phy_offset} but the last "
                      f"entry ({n_used}) holds phy {int(phy[-1])}")
    # 2. counts: used slots and the entries past indexCount
    heads = f.slots[:].astype(np.int64)      # one read (a remote file's slots are read on demand)
    in_use = int(np.count_nonzero(heads))
    if in_use != h.hash_slot_count:
        found.add("index.entry_count", path, 32, f"{_count(in_use, 'slot')} in use but hashSlotCount "
                  f"is {h.hash_slot_count}")
    report_runs(found, "index.entry_count", path, _nonzero_entries(f, 1 + n_used), lambda a, b: (
        _index_entry_pos(f, a), f"{_span('entry', a, b, 'entries')} holding data past indexCount "
        f"{h.index_count}: queries never reach them", None, {"entries": [a, b]}))
    # 3. slot chains: every entry in use hangs exactly once in the chain of its own slot
    slot_of = used["key_hash"].astype(np.int64) % f.hash_slot_num
    head_slots = np.flatnonzero(heads)
    beyond = head_slots[(heads[head_slots] < 0) | (heads[head_slots] > n_used)]
    slot_runs(beyond, lambda a, b: f"pointing at entry {int(heads[a])}, beyond indexCount "
                                   f"{h.index_count}")
    good_heads = np.setdiff1d(head_slots, beyond)
    wrong_head = good_heads[slot_of[heads[good_heads] - 1] != good_heads]
    slot_runs(wrong_head, lambda a, b: f"holding entry {int(heads[a])}, whose keyHash belongs to slot "
                                       f"{int(slot_of[heads[a] - 1])}")
    prev = used["prev_index"].astype(np.int64)
    linked = prev != 0
    bad_prev = linked & ((prev < 0) | (prev >= number))
    ok_prev = linked & ~bad_prev
    bad_prev[ok_prev] = slot_of[prev[ok_prev] - 1] != slot_of[ok_prev]
    entry_runs("index.slot_chain", bad_prev,
               lambda a, b: f"with prevIndex {int(prev[a - 1])}, not an earlier entry of the same "
                            "slot: the chain breaks")
    indegree = np.zeros(n_used + 1, dtype=np.int64)
    np.add.at(indegree, heads[good_heads], 1)
    np.add.at(indegree, prev[linked & ~bad_prev], 1)
    entry_runs("index.slot_chain", indegree[1:] == 0,
               lambda a, b: "unreachable from any slot: queries never find them")
    entry_runs("index.slot_chain", indegree[1:] > 1, lambda a, b: "reached by more than one chain")
    entry_runs("index.slot_chain", used["time_diff"] < 0,
               lambda a, b: "with a negative timeDiff: a query walking the chain stops there")
    # 4. dangling entries: outside the recovered commitlog, or where no record starts
    for kind, mask, bound in (
            ("index.beyond_max", phy >= view.max_phy,
             f"at or beyond the commitlog max phy offset {view.max_phy}"),
            ("index.below_min", phy < view.min_phy,
             f"below the commitlog min phy offset {view.min_phy}")):
        entry_runs(kind, mask, lambda a, b, bound=bound: (
            f"(phy {_range(int(phy[a - 1]), int(phy[b - 1]))}) pointing {bound}: "
            "queryMessage drops them"), with_phy=True)
    inside = (phy >= view.min_phy) & (phy < view.max_phy)
    entry_runs("index.no_record", inside & (view.records.find(phy) < 0),
               lambda a, b: f"pointing at phy {int(phy[a - 1])}, where no record starts", with_phy=True)


def _nonzero_entries(f: IndexFile, start: int, chunk: int = 1 << 20) -> np.ndarray:
    """Numbers of the entries from ``start`` on that hold a non-zero byte, read in chunks: the
    unused part of an index file is most of its 420 MB."""
    found = [np.zeros(0, np.int64)]
    for lo in range(start, len(f.entries), chunk):
        block = f.entries[lo:lo + chunk].view(np.uint8).reshape(-1, INDEX_ENTRY_SIZE)
        found.append(lo + np.flatnonzero(block.any(axis=1)))
    return np.concatenate(found)


def _index_files(view: StoreView, found: Findings) -> list[IndexFile]:
    cfg = view.config
    out = []
    for e in list_dir(view.store.index_dir, "index"):
        if e.is_dir():
            found.add("layout.load_problem", e.path, None, "directory inside the index directory")
            continue
        try:
            out.append(_open_index(e.path, cfg.maxHashSlotNum, cfg.maxIndexNum))
        except StoreReaderError as exc:
            found.unreadable.append(exc)
    return out


def _open_index(path: PathRef, hash_slot_num: int, index_num: int) -> IndexFile:
    """An index file, or :class:`CannotRead` naming where its bytes stop fitting the layout."""
    try:
        return IndexFile(path, hash_slot_num, index_num)
    except FileSizeError:
        size = location(path).size()
        expected = INDEX_HEADER_SIZE + hash_slot_num * HASH_SLOT_SIZE + index_num * INDEX_ENTRY_SIZE
        raise CannotRead(f"index file is {size} bytes but maxHashSlotNum {hash_slot_num} / maxIndexNum "
                         f"{index_num} make {expected}: truncated, or written with other settings "
                         "(pass the broker's broker.conf)", path, min(size, expected)) from None


def verify_index(view: StoreView, found: Findings, only: Path | None = None) -> None:
    """Every index file (``only``: one of them), then the index's coverage of dispatched records."""
    files = _index_files(view, found)
    found.files_checked += len(files) if only is None else 1
    for f in files:
        if only is None or _norm(f.path) == _norm(only):
            verify_index_file(view, found, f)
    if not view.config.messageIndexEnable:
        return
    r = view.records
    keyed = (r.valid_prefix & r.keyed & indexable(r.tran)
             & (r.phy >= view.min_phy) & (r.phy < view.max_phy))
    if not files:
        n = int(np.count_nonzero(keyed))
        if n and only is None:
            found.add("index.all_missing", view.store.index_dir, None,
                      f"no index file, but the commitlog holds {n} records with keys: queries by key "
                      "find nothing until a recovery re-dispatches them (R§8.2)")
        return
    indexed_until = max(f.header.end_phy_offset for f in files)
    late = np.flatnonzero(keyed & (r.phy > indexed_until) & (r.phy + r.size <= view.dispatched_until))
    if late.size:
        # where the next entry would go: the last file, or a new one when it is full
        last = files[-1]
        full = last.header.loaded_index_count >= last.index_num
        found.add("index.missing_entries", view.store.index_dir if full else last.path,
                  None if full else _index_entry_pos(last, last.header.loaded_index_count),
                  f"{_count(int(late.size), 'record')} with keys (phy "
                  f"{_range(int(r.phy[late[0]]), int(r.phy[late[-1]]))}) were dispatched to the "
                  f"consume queues but the index ends at phy {indexed_until}: queries by key miss "
                  "them; the normal path does not rebuild them (R§8.2)",
                  int(r.phy[late[0]]), int(late.size))


# -- checkpoint and config -----------------------------------------------------------------------------

def dump_checkpoint(p: Printer, path: Path) -> None:
    c = read_checkpoint(path)
    if not c.exists:
        raise CannotRead("checkpoint does not exist", path)
    fields = ("physic_msg_timestamp", "logics_msg_timestamp", "index_msg_timestamp")
    text = " ".join(f"{_camel(n)}: {getattr(c, n)} ({iso_ms(getattr(c, n))})" for n in fields)
    p.emit(f"checkpoint: {text} masterFlushedOffset: {c.master_flushed_offset} confirmPhyOffset: "
           f"{c.confirm_phy_offset} minTimestamp: {c.min_timestamp} minTimestampIndex: "
           f"{c.min_timestamp_index} length: {c.file_length} usedBytes: {c.used_bytes}",
           {"type": "checkpoint", "file": str(path), **{n: getattr(c, n) for n in fields},
            "master_flushed_offset": c.master_flushed_offset,
            "confirm_phy_offset": c.confirm_phy_offset, "min_timestamp": c.min_timestamp,
            "min_timestamp_index": c.min_timestamp_index, "file_length": c.file_length,
            "used_bytes": c.used_bytes})


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(w.title() for w in rest)


def verify_checkpoint(view: StoreView, found: Findings) -> None:
    c = read_checkpoint(view.store.checkpoint_path)
    path = view.store.checkpoint_path
    if not c.exists:
        if view.store.commitlog_files:
            found.add("checkpoint.missing", path, None,
                      "no checkpoint while the commitlog holds files: the broker starts from an "
                      "all-zero one (after a crash: recovery from the first file, every index file "
                      "dropped, E#13)")
        return
    found.files_checked += 1
    if c.file_length != CHECKPOINT_FILE_SIZE:
        found.add("checkpoint.file_size", path, c.file_length,
                  f"checkpoint is {c.file_length} bytes, not {CHECKPOINT_FILE_SIZE}: the broker maps "
                  f"{CHECKPOINT_FILE_SIZE} and reads zeros past the end")


def _broker_load(path: Path) -> ConfigLoad[Any]:
    base = path.name[:-4] if path.name.endswith(".bak") else path.name
    target = path.parent / base
    reader = _CONFIG_READERS.get(base)
    if reader is not None:
        return reader(str(target))
    return load_config(target, lambda doc, p: doc, dict)


def dump_config(p: Printer, path: Path) -> None:
    """The file's document as parsed, and which generation the broker would load."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise CannotRead("config file does not exist", path) from None
    except OSError as exc:
        raise UnreadableFileError(f"cannot read config file: {exc.strerror}", path) from None
    doc = parse_fastjson(data.decode("utf-8", errors="replace"), path=path)
    p.emit(lambda: json.dumps(doc, ensure_ascii=False, indent=2),
           {"type": "config", "file": str(path), "content": doc})
    try:
        load = _broker_load(path)
        verdict = f"{load.generation} ({load.used_path or '-'})"
        if load.skipped_reason:
            verdict += f"; skipped the current file: {load.skipped_reason}"
    except ConfigError as exc:
        verdict = f"refuses to start: {exc}"
    p.emit(f"# the broker loads: {verdict}",
           {"type": "config_load", "file": str(path), "verdict": verdict})


def verify_config(store: Store, found: Findings, only: Path | None = None) -> None:
    """``config/*.json`` the broker cannot use (``config.undecodable``) and ``.tmp`` leftovers;
    ``jobs.audit`` reports the same."""
    names = sorted(e.name for e in list_dir(store.config_dir, "config")   # unreadable ones too
                   if e.name.endswith(".json") and not e.is_dir())
    for name in names:
        path = store.config_dir / name
        if only is not None and _norm(only) not in (_norm(path), _norm(str(path) + ".bak")):
            continue
        found.files_checked += 1
        try:
            load = _broker_load(path)
        except ConfigError as exc:
            found.add("config.undecodable", exc.path or path, exc.position,
                      f"{exc.reason}: neither generation decodes, the broker refuses to start")
            continue
        if load.generation == "bak" or (load.skipped_reason not in (None, "missing", "empty")):
            falls_back = "its .bak" if load.generation == "bak" else "an empty table"
            found.add("config.undecodable", path, None,
                      f"the broker cannot use this file ({load.skipped_reason}) and loads {falls_back}")
        if load.tmp_path:
            found.note("note.config_tmp", load.tmp_path, None,
                       "leftover of a crash during persist (4.9.7); the broker never reads it")


# -- the store overview -------------------------------------------------------------------------------

def dump_overview(p: Printer, view: StoreView) -> None:
    store, cfg = view.store, view.config
    hints = store.version_hints()
    p.emit(f"store: {store.root} broker config: {cfg.source or 'broker defaults'} generation: "
           f"{view.version} (hints: {', '.join(k for k in hints if k != 'broker_5x') or 'none'})",
           {"type": "store", "root": str(store.root), "broker_config": cfg.source,
            "broker_version": view.version, "hints": hints})
    p.emit(f"layout: mappedFileSizeCommitLog: {cfg.mappedFileSizeCommitLog} "
           f"mappedFileSizeConsumeQueue: {cfg.cq_file_size} ({cfg.cq_file_size // CQ_STORE_UNIT_SIZE} "
           f"entries) maxHashSlotNum: {cfg.maxHashSlotNum} maxIndexNum: {cfg.maxIndexNum} (index "
           f"file {cfg.index_file_size} bytes) checkCRCOnRecover: {str(cfg.checkCRCOnRecover).lower()}",
           {"type": "layout", "mapped_file_size_commitlog": cfg.mappedFileSizeCommitLog,
            "cq_file_size": cfg.cq_file_size, "max_hash_slot_num": cfg.maxHashSlotNum,
            "max_index_num": cfg.maxIndexNum, "index_file_size": cfg.index_file_size,
            "commitlog_dirs": [str(d) for d in store.commitlog_dirs]})
    p.emit(f"commitlog: {len(view.summaries)} segments in {', '.join(map(str, store.commitlog_dirs))}",
           {"type": "commitlog", "segments": len(view.summaries)})
    for s in view.summaries:
        end = s.end_reason + (f" ({s.end_check})" if s.end_check else "")
        p.emit(f"  {s.segment} size: {s.file_size} records: {s.records} validBytes: {s.valid_bytes} "
               f"end: {end}" + (f" lost: {s.records_after_cut}" if s.records_after_cut else ""),
               lambda s=s: {"type": "segment", **s.as_row()})
    queues = list_queues(store.root)
    p.emit(f"consume queues: {len(queues)}", {"type": "consume_queues", "queues": len(queues)})
    for q in queues:
        names = sorted(e.name for e in list_dir(q.path, "consume queue") if e.is_file())
        span = f" {names[0]}..{names[-1]}" if len(names) > 1 else "".join(f" {n}" for n in names)
        p.emit(f"  {q.topic}/{q.queue_id}: {len(names)} files{span}",
               {"type": "consume_queue", "topic": q.topic, "queue_id": q.queue_id, "files": names})
    index = [e for e in list_dir(store.index_dir, "index") if e.is_file()]
    p.emit(f"index: {len(index)} files", {"type": "index", "files": len(index)})
    for e in index:
        try:
            h = read_header(e.path)
        except StoreReaderError as exc:
            p.emit(f"  {e.name}: {exc.reason}",
                   {"type": "index_file", "name": e.name, "error": exc.reason})
            continue
        p.emit(f"  {e.name} size: {e.size()} begin: {iso_ms(h.begin_timestamp)} end: "
               f"{iso_ms(h.end_timestamp)} phy: {h.begin_phy_offset}..{h.end_phy_offset} "
               f"hashSlotCount: {h.hash_slot_count} indexCount: {h.index_count}",
               {"type": "index_file", "name": e.name, **h.to_dict()})
    if store.checkpoint_path.exists():
        dump_checkpoint(p, store.checkpoint_path)
    else:
        p.emit("checkpoint: missing", {"type": "checkpoint", "file": str(store.checkpoint_path),
                                       "exists": False})
    lock = lock_status(store.root)
    lock_text = ("held by a running broker" + (f" (pid {lock.pid})" if lock.pid else "")
                 if lock.locked else "present, not held" if lock.exists else "absent")
    abort = "present (the next start runs the abnormal recovery)" if store.abort_exists else "absent"
    p.emit(f"abort: {abort} lock: {lock_text}",
           {"type": "process_state", "abort": store.abort_exists, "lock_exists": lock.exists,
            "lock_held": lock.locked, "lock_pid": lock.pid})
    configs = [e for e in list_dir(store.config_dir, "config") if e.is_file()]
    sizes = {e.name: e.size() for e in configs}
    p.emit("config: " + (", ".join(f"{n} ({b} bytes)" for n, b in sizes.items()) or "none"),
           {"type": "config_files", "files": sizes})


# -- the command ---------------------------------------------------------------------------------------

def verify_process_state(view: StoreView, found: Findings) -> None:
    """``abort`` and ``lock``: states the broker reacts to, not damage (notes)."""
    root = view.store.root
    if view.store.abort_exists:
        found.note("note.abort", root / "abort", None, "the last shutdown was not clean: the next "
                   "start runs the abnormal recovery (R§4.1)")
    lock = lock_status(root)
    if lock.locked:
        found.note("note.lock", lock.path, None, "a running broker holds the lock"
                   + (f" (pid {lock.pid})" if lock.pid else "") + ": the files change while read")


def verify_store(view: StoreView, index_only: bool = False) -> Findings:
    found = Findings()
    if not index_only:
        verify_process_state(view, found)
        verify_commitlog(view, found)
        verify_consume_queues(view, found)
    verify_index(view, found)
    if not index_only:
        verify_checkpoint(view, found)
        verify_config(view.store, found)
    return found


def verify_file(view: StoreView, sf: StoreFile, index_only: bool) -> Findings:
    """The anomalies located in one file (the checks that need the rest of the store read it)."""
    found = Findings()
    if sf.kind == "index":
        verify_index(view, found, only=sf.path)
    elif index_only:
        raise CannotRead("--verify-index-only takes a store or an index file", sf.path)
    elif sf.kind == "commitlog":
        verify_commitlog(view, found)
    elif sf.kind == "consumequeue":
        assert sf.topic is not None and sf.queue_id is not None
        verify_consume_queues(view, found, only=(sf.topic, sf.queue_id))
    elif sf.kind == "checkpoint":
        verify_checkpoint(view, found)
    else:
        verify_config(view.store, found, only=sf.path)
    return found.only(sf.path)


def report(p: Printer, found: Findings, view: StoreView | None = None) -> int:
    """Print notes, anomalies and the summary line; the exit code."""
    if view is not None:
        known = {(_norm(e.path or ""), e.position) for e in found.unreadable}
        found.unreadable += [e for e in view.errors if (_norm(e.path or ""), e.position) not in known]
    for n in found.notes:
        p.emit(f"NOTE {n.kind} {n.where()}: {n.message}", {**n.as_json(), "type": "note"})
    for a in found.anomalies:
        p.emit(a.text(), a.as_json)
    for e in found.unreadable:
        p.emit(f"UNREADABLE {e}", {"type": "error", "file": e.path, "position": e.position,
                                   "message": e.reason})
    files = len({_norm(a.path) for a in found.anomalies})
    rc = EXIT_UNREADABLE if found.unreadable else EXIT_ANOMALIES if found.anomalies else EXIT_OK
    if found.unreadable:
        text = (f"verify: INCOMPLETE, {_count(len(found.unreadable), 'file')} could not be read; "
                f"{_count(len(found.anomalies), 'anomaly', 'anomalies')} in {_count(files, 'file')}")
    elif found.anomalies:
        text = (f"verify: {_count(len(found.anomalies), 'anomaly', 'anomalies')} in "
                f"{_count(files, 'file')} ({_count(found.files_checked, 'file')} checked)")
    else:
        text = f"verify: no anomalies ({_count(found.files_checked, 'file')} checked)"
    p.emit(text, {"type": "summary", "anomalies": len(found.anomalies), "files_with_anomalies": files,
                  "files_checked": found.files_checked, "unreadable": len(found.unreadable),
                  "notes": len(found.notes), "exit_code": rc})
    return rc


def _open(root: Path | StoreLocation, broker_config: str | None) -> StoreView:
    return StoreView(open_store(root, broker_config))


def _broker_config(root: Path | StoreLocation, broker_config: str | None) -> BrokerConfig:
    """The settings a file needs to be read (as ``open_store`` picks them, without the store)."""
    if broker_config is None and (root / "broker.conf").is_file():
        return _load_broker_config(root / "broker.conf")
    return _load_broker_config(broker_config)


def run(args: argparse.Namespace, p: Printer) -> int:
    remote = location(args.path)
    target = Path(args.path) if remote.filesystem is None else remote
    if not target.exists():
        raise CannotRead("does not exist", target)
    verify = args.verify or args.verify_index_only
    if target.is_dir():
        view = _open(target, args.broker_config)
        dump_overview(p, view)
        return report(p, verify_store(view, args.verify_index_only), view) if verify else EXIT_OK
    sf = classify_path(target)
    if remote.filesystem is None and not os.access(target, os.R_OK):
        raise UnreadableFileError("cannot read: permission denied", target)
    # a commitlog segment is read with the store's scan options; the rest needs the store only
    # to be verified against it
    view = _open(sf.root, args.broker_config) if verify or sf.kind == "commitlog" else None
    if sf.kind == "commitlog":
        assert view is not None
        dump_commitlog_file(p, view, target, args)
    elif sf.kind == "consumequeue":
        dump_cq_file(p, target, args.max_bytes)
    elif sf.kind == "index":
        cfg = view.config if view is not None else _broker_config(sf.root, args.broker_config)
        with _open_index(target, cfg.maxHashSlotNum, cfg.maxIndexNum) as f:
            dump_index_file(p, f, args.deep, args.max_bytes)
    elif sf.kind == "checkpoint":
        dump_checkpoint(p, target)
    else:
        dump_config(p, target)
    if not verify:
        return EXIT_OK
    assert view is not None
    return report(p, verify_file(view, sf, args.verify_index_only), view)


def dump_commitlog_file(p: Printer, view: StoreView, target: Path, args: argparse.Namespace) -> None:
    f = next((f for f in view.store.commitlog_files if _norm(f.path) == _norm(target)), None)
    if f is None:
        raise CannotRead("not a commitlog segment of this store (its name must be a 20-digit "
                         "start offset)", target)
    dump_segment(p, view, f, args.deep, args.print_body, args.max_bytes)
    summary = next(s for s in view.summaries if _norm(s.path) == _norm(target))
    if _not_a_segment(summary):
        raise CannotRead(f"not a commitlog segment: no record header at byte 0 (magic 0x"
                         f"{(summary.first_magic or 0) & 0xFFFFFFFF:08x}) and no intact record "
                         "anywhere in the file", target, 0)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m jobs.dump", description=__doc__.split("\n")[0])
    ap.add_argument("path", help="a store file (commitlog, consume queue, index, checkpoint, "
                                 "config/*.json) or a store directory")
    ap.add_argument("--deep", action="store_true", help="decode every field (properties, hosts, ...)")
    ap.add_argument("--verify", action="store_true",
                    help="report every anomaly the broker acts on; exit 1 if any")
    ap.add_argument("--verify-index-only", action="store_true", help="verify only index files")
    ap.add_argument("--max-bytes", type=int, metavar="N",
                    help="list only records/entries that end within the first N bytes of the file")
    ap.add_argument("--print-body", action="store_true", help="print message bodies")
    ap.add_argument("--json", action="store_true", help="JSON lines instead of text")
    ap.add_argument("--broker-config", metavar="FILE", help="the broker's broker.conf")
    args = ap.parse_args(argv)
    if args.max_bytes is not None and args.max_bytes < 0:
        ap.error("--max-bytes must be >= 0")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: the exit code (0 ok, 1 anomalies, 2 could not read)."""
    try:
        args = parse_args(argv)
    except SystemExit as exc:                         # usage errors: argparse printed the reason
        return exc.code if isinstance(exc.code, int) else EXIT_UNREADABLE
    p = Printer(sys.stdout, args.json)
    try:
        return run(args, p)
    except BrokenPipeError:                           # `| head`: the reader left, nothing to report
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    except (StoreReaderError, OSError) as exc:
        if isinstance(exc, StoreReaderError):
            path, position, message = exc.path, exc.position, str(exc)
        else:
            path, position = exc.filename or args.path, None
            message = f"{path}: {exc.strerror or exc}"
        if args.json:
            p.emit("", {"type": "error", "file": path, "position": position, "message": message})
        print(f"dump: error: {message}", file=sys.stderr)
        return EXIT_UNREADABLE

if __name__ == "__main__":
    sys.exit(main())
