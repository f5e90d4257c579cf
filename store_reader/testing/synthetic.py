"""Synthetic RocketMQ broker stores: a byte-exact record encoder and a seeded store generator.

``encode_message`` writes one commitlog record exactly as ``MessageExtEncoder#encode`` +
``DefaultAppendMessageCallback#doAppend`` leave it (spec ``store-format.md`` §3.1-§3.8); the test suite
proves it by re-encoding every record of every real-broker fixture byte for byte.

``write_store`` builds a whole store (commitlog segments, consume queues, index files, checkpoint,
config JSON, ``lock``, ``broker.conf``) from a :class:`SyntheticStoreSpec`, optionally damaged the
way a kill -9 or a disk fault leaves it (:class:`CrashSpec`, ``recovery.md`` §1-§5), and reports what
it wrote, including where the broker's recovery will end. It is deterministic (same spec and seed,
same bytes). The commitlog is written sequentially through a 4 MiB chunk; what is kept per record is
a few typed arrays (about 50 bytes, plus 8 per index key, plus about 100 for the optional messages
table), from which consume queues and index files are built with NumPy at the end. The command line
entry is :func:`main` (``python -m store_reader.testing.synthetic --help``).
"""
from __future__ import annotations

import argparse
import heapq
import ipaddress
import json
import os
import struct
import sys
import time
import zlib
from array import array
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterable, NamedTuple, Sequence

import numpy as np
import pyarrow as pa

from store_reader.formats import recordformat as rf
from store_reader.formats.recordformat import (encode_blank, encode_message, encode_properties, parse_host,
                                               properties_bytes, write_record)
from store_reader.formats.recordformat import crc32 as _crc
from store_reader.formats.brokerconf import BrokerConfig
from store_reader.formats.checkpoint import Checkpoint, write_checkpoint
from store_reader.formats.fastjson import to_fastjson
from store_reader.formats.consumequeue import CQ_STORE_UNIT_SIZE, write_queue
from store_reader.formats.indexfile import IndexHeader, build_index_files, next_index_file_name, write_index_file
from store_reader.formats.javahash import index_key_hashes, java_string_hash

__all__ = [
    "encode_message",
    "encode_properties",
    "encode_blank",
    "hashmap_order",
    "parse_host",
    "SyntheticStoreSpec",
    "CrashSpec",
    "StoreInfo",
    "MESSAGES_SCHEMA",
    "write_store",
    "parse_size",
    "CRASH_PRESETS",
    "KINDS",
    "DAMAGES",
    "main",
]

def hashmap_order(names: Iterable[str]) -> list[str]:
    """Iteration order of a ``java.util.HashMap`` filled with ``names`` in this order.

    The broker serialises a message's properties map in HashMap order (F§3.7): bucket
    ``(h ^ h >>> 16) & (capacity - 1)`` of ``String.hashCode``, insertion order within a bucket,
    capacity 16 doubled whenever the size passes 3/4 of it. The real fixtures follow this order.
    """
    names = list(dict.fromkeys(names))
    capacity = 16
    while len(names) > capacity * 3 // 4:
        capacity *= 2

    def bucket(name: str) -> int:
        h = java_string_hash(name) & 0xFFFFFFFF
        return (h ^ (h >> 16)) & (capacity - 1)

    return sorted(names, key=bucket)  # sorted() is stable: insertion order inside a bucket


# ================================================================================================
# Store generator
# ================================================================================================

MiB = 1 << 20
SCHEDULE_TOPIC = rf.SCHEDULE_TOPIC
TRANS_HALF_TOPIC = rf.TRANS_HALF_TOPIC
TRANS_OP_HALF_TOPIC = rf.TRANS_OP_HALF_TOPIC
RETRY_GROUP_TOPIC_PREFIX = rf.RETRY_GROUP_TOPIC_PREFIX
BROKER_STYLES = ("4.9", "5.x", "5.3", "5.4", "5.5")
COMPRESSION_ZLIB = 3 << 8          # 5.x clients also set the compression type bits (F§3.5)
DELAY_LEVELS_MS = tuple(BrokerConfig().delay_levels_ms)

# Record kinds (F§3.4); the position is the code of the ``kind`` dictionary column.
KINDS = ("normal", "delayed", "retry", "half", "commit", "op", "prepared", "rollback")
(KIND_NORMAL, KIND_DELAYED, KIND_RETRY, KIND_HALF, KIND_COMMIT, KIND_OP, KIND_PREPARED,
 KIND_ROLLBACK) = range(len(KINDS))
DAMAGES = ("torn", "corrupt_crc", "corrupt_magic", "lost", "zeroed", "missing_file")

# Every property name a generated record can carry, in the order a client + broker insert them. A
# record has at most 12, so its HashMap keeps capacity 16 and iterates in this global bucket order.
_PROPERTY_NAMES = ("KEYS", "TAGS", "p_txt", "DELAY", "RETRY_TOPIC", "ORIGIN_MESSAGE_ID", "TRAN_MSG",
                   "PGROUP", "REAL_TOPIC", "REAL_QID", "UNIQ_KEY", "CLUSTER", "WAIT")
_PROPERTY_RANK = {name: i for i, name in enumerate(hashmap_order(_PROPERTY_NAMES))}
_TAGS = ("TagA", "TagB", "TagC", "TagD", "TagE")
_PRODUCERS = 8

MESSAGES_SCHEMA = pa.schema([
    pa.field("phy_offset", pa.int64(), nullable=False),
    pa.field("total_size", pa.int32(), nullable=False),
    pa.field("topic", pa.dictionary(pa.int32(), pa.string()), nullable=False),
    pa.field("queue_id", pa.int32(), nullable=False),
    pa.field("queue_offset", pa.int64(), nullable=False),
    pa.field("sys_flag", pa.int32(), nullable=False),
    pa.field("store_timestamp", pa.int64(), nullable=False),
    pa.field("tags_code", pa.int64(), nullable=False),
    pa.field("keys", pa.string()),
    pa.field("uniq_key", pa.string()),
    pa.field("kind", pa.dictionary(pa.int8(), pa.string()), nullable=False),
    pa.field("dispatched", pa.bool_(), nullable=False),
    pa.field("indexed", pa.bool_(), nullable=False),
    pa.field("survived", pa.bool_(), nullable=False),
    pa.field("damage", pa.dictionary(pa.int8(), pa.string())),
])
"""Per-record expectations returned by :func:`write_store` (``StoreInfo.messages``), commitlog order.

``queue_offset`` is QUEUEOFFSET as stored (0 for PREPARED/ROLLBACK); ``tags_code`` what a consume
queue entry holds (F§3.9); ``dispatched``: the record has a consume queue entry on disk;
``indexed``: its keys are in the index files; ``survived``: the record lies before the point where
the broker's recovery ends the commitlog (``StoreInfo.truncation_offset``) and is undamaged;
``damage``: what was done to this record's bytes (``torn``, ``corrupt_crc``, ``corrupt_magic``,
``lost``, ``zeroed``, ``missing_file``), else null.
"""


def parse_size(text: str) -> int:
    """``64MiB`` / ``8M`` / ``1.5GiB`` / ``4096`` -> bytes (binary units)."""
    s = text.strip().lower().removesuffix("b").removesuffix("i")
    scale = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}.get(s[-1:], 1)
    return int(float(s[:-1] if scale > 1 else s) * scale)


@dataclass(frozen=True)
class SyntheticStoreSpec:
    """What :func:`write_store` generates. Fractions are per planned message.

    Parameters
    ----------
    total_bytes
        Commitlog bytes to fill with records (the last record crosses this mark).
    segment_size
        ``mappedFileSizeCommitLog``: every commitlog file is preallocated to this size.
    cq_file_size
        ``mappedFileSizeConsumeQueue`` (a multiple of 20).
    max_hash_slot_num, max_index_num
        ``maxHashSlotNum`` / ``maxIndexNum`` of the index files.
    message_size
        Mean TOTALSIZE of a record; bodies are sized to hit it (94 % uniform in 0.5-1.5x,
        5 % one-byte bodies, 1 % large 2-8x; compressed bodies come from a few templates).
    topics
        User topics and their queue counts.
    broker
        ``"4.9"`` (properties without the trailing ``\\x02``, ``WAIT`` dropped, 24-byte checkpoint)
        or ``"5.x"`` (trailing ``\\x02``, ``WAIT=true`` kept, compression-type bits, ``abort.bak``);
        ``"5.3"`` and ``"5.4"`` write as ``"5.x"``, ``"5.5"`` also the checkpoint's
        logicsPhysicalOffset (R§4.1).
    seed
        Seed of every random choice: same spec, same bytes.
    start_timestamp, messages_per_second
        STORETIMESTAMP of the first record and the put rate (store times advance by it).
    ipv6_fraction
        Records with an IPv6 born host (half of them also with an IPv6 store host).
    compressed_fraction
        Records with a zlib-compressed body (COMPRESSED_FLAG).
    delayed_fraction
        Delayed sends, stored in ``SCHEDULE_TOPIC_XXXX`` with DELAY, REAL_TOPIC, REAL_QID.
    retry_fraction
        Records of the consumer group's retry topic (RETRY_TOPIC, ORIGIN_MESSAGE_ID, reconsume 1-3).
    transaction_fraction
        Transactional sends: a half record, resolved 1-64 messages later by a COMMIT record in the
        real topic plus an op record (70 %) or by an op record alone (rollback).
    legacy_transaction_fraction
        Records with the PREPARED (0x4) or ROLLBACK (0xC) sysflag type (no CQ entry; rollback
        not indexed), half each.
    untagged_fraction, no_uniq_key_fraction
        Records without TAGS (tags code 0) / without UNIQ_KEY.
    append_prop_crc
        5.x ``enabledAppendPropCRC``: every record carries ``__CRC32#``.
    long_retry_group
        5.x only: half of the retry records go to a retry topic longer than 127 bytes, which the
        broker writes with the V2 magic (F§3.3).
    cluster, consumer_group, producer_group
        Names used in CLUSTER, the retry topic / consumer offsets, and PGROUP.

    Every record has KEYS (``K<n>``, plus `` G<n%40>`` every 3rd, `` order-<n/10> shared`` every
    10th, a double space every 17th) except transaction op records, which carry TAGS and WAIT only.
    """

    total_bytes: int = 64 * MiB
    segment_size: int = 8 * MiB
    cq_file_size: int = 300_000 * CQ_STORE_UNIT_SIZE
    max_hash_slot_num: int = 5_000_000
    max_index_num: int = 20_000_000
    message_size: int = 1024
    topics: tuple[tuple[str, int], ...] = (("TopicA", 16), ("TopicB", 8), ("TopicC", 4), ("Topic-D.x_1", 4))
    broker: str = "5.x"
    seed: int = 0
    start_timestamp: int = 1_700_000_000_000
    messages_per_second: int = 1000
    ipv6_fraction: float = 0.02
    compressed_fraction: float = 0.015
    delayed_fraction: float = 0.02
    retry_fraction: float = 0.02
    transaction_fraction: float = 0.01
    legacy_transaction_fraction: float = 0.004
    untagged_fraction: float = 1 / 6
    no_uniq_key_fraction: float = 0.04
    append_prop_crc: bool = False
    long_retry_group: bool = False
    cluster: str = "SyntheticCluster"
    consumer_group: str = "GroupX"
    producer_group: str = "ProducerGroupTx"

    def __post_init__(self) -> None:
        if self.broker not in BROKER_STYLES:
            raise ValueError(f"broker must be one of {BROKER_STYLES}, got {self.broker!r}")
        if self.total_bytes <= 0 or self.message_size < 256:
            raise ValueError("total_bytes must be positive and message_size at least 256")
        if self.segment_size < 16 * self.message_size + 4096:
            raise ValueError(f"segment_size {self.segment_size} cannot hold the largest records "
                             f"(16 x message_size + 4096 = {16 * self.message_size + 4096})")
        if self.cq_file_size <= 0 or self.cq_file_size % CQ_STORE_UNIT_SIZE:
            raise ValueError(f"cq_file_size {self.cq_file_size} is not a positive multiple of 20")
        if self.max_hash_slot_num <= 0 or self.max_index_num <= 1:
            raise ValueError("max_hash_slot_num must be positive and max_index_num at least 2")
        if not self.topics or any(n <= 0 for _, n in self.topics):
            raise ValueError("topics must name at least one topic, each with at least one queue")
        kinds = (self.delayed_fraction + self.retry_fraction + self.transaction_fraction
                 + self.legacy_transaction_fraction)
        fractions = (self.ipv6_fraction, self.compressed_fraction, self.untagged_fraction,
                     self.no_uniq_key_fraction, kinds)
        if any(not 0 <= f <= 1 for f in fractions):
            raise ValueError("fractions must lie in [0, 1] (and the record-kind fractions sum to <= 1)")
        if self.broker == "4.9" and (self.append_prop_crc or self.long_retry_group):
            raise ValueError("append_prop_crc and long_retry_group exist only on a 5.x broker")
        if self.messages_per_second <= 0:
            raise ValueError("messages_per_second must be positive")

    @property
    def rocketmq5(self) -> bool:
        return self.broker != "4.9"

    @property
    def retry_topic(self) -> str:
        return RETRY_GROUP_TOPIC_PREFIX + self.consumer_group

    @property
    def long_retry_topic(self) -> str:
        """A retry topic over 127 bytes (5.x writes it with the V2 magic)."""
        return RETRY_GROUP_TOPIC_PREFIX + (self.consumer_group + "_LongRetryGroup_").ljust(130, "x")

    def store_timestamp(self, record: int) -> int:
        """STORETIMESTAMP of the ``record``-th record (the put rate is constant)."""
        return self.start_timestamp + record * 1000 // self.messages_per_second

    def broker_conf(self) -> str:
        """The ``broker.conf`` a broker writing this store runs with."""
        lines = [
            "# Broker settings of this synthetic store (store_reader.testing.synthetic); all others default.",
            f"brokerClusterName={self.cluster}",
            f"mappedFileSizeCommitLog={self.segment_size}",
            f"mappedFileSizeConsumeQueue={self.cq_file_size}",
            f"maxHashSlotNum={self.max_hash_slot_num}",
            f"maxIndexNum={self.max_index_num}",
            "flushDiskType=ASYNC_FLUSH",
            "messageIndexEnable=true",
            "messageIndexSafe=false",
            "checkCRCOnRecover=true",
            "duplicationEnable=false",
            "brokerRole=ASYNC_MASTER",
        ]
        if self.append_prop_crc:
            lines.append("enabledAppendPropCRC=true")
        return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class CrashSpec:
    """How the generated store is left, as a kill -9 or a disk fault leaves a store (R§1-§5).

    Parameters
    ----------
    abort
        The ``abort`` marker is present (abnormal recovery). False models an abort file removed
        by hand (normal recovery over a damaged store).
    stale_checkpoint
        physicMsgTimestamp/logicsMsgTimestamp are the store time of the record at
        ``checkpoint_fraction`` of the stream (the last 60 s flush), or the end of the last index
        file that filled up if that is later (an index roll rewrites the checkpoint file);
        otherwise they are the last record on disk / the last dispatched record. indexMsgTimestamp
        is always the end of the last index file that filled up (0 if none did).
    checkpoint_fraction
        Where the stale checkpoint points, as a fraction of the records.
    torn_tail
        The last record is only partly on disk (the rest zeros); it has no CQ/index entries.
    cq_behind
        The last ``cq_behind`` records were never dispatched: no CQ entries, no index entries.
    cq_ahead
        The last ``cq_ahead`` records were dispatched but their commitlog bytes never reached the
        disk (zeros): consume queues and index point past the commitlog end.
    corrupt
        ``"crc"`` (first body byte flipped) or ``"magic"`` (MAGICCODE overwritten with
        ``0xDEADBEEF``) on the middle record of the last segment holding at least three intact
        records, so intact records follow it (and 4.9.7's normal recovery, which starts at the
        third-last file, still reaches it); None for no corruption.
    preallocated_next
        The next, all-zero commitlog file exists (``AllocateMappedFileService`` creates it ahead
        and only a clean shutdown deletes it).
    zeroed_span
        ``"last"`` or ``"second_last"``: ``zeroed_bytes`` zeroed from inside the middle record of
        the last / second-to-last commitlog file holding records (a disk fault after the records
        were dispatched: their CQ and index entries stay), intact records after it in that file.
        A recovery that reads the file ends the commitlog at the first damaged record; 5.x's
        normal path never re-reads a file before the one holding the consume queues' max and
        keeps the span and the records after it.
    zeroed_bytes
        Length of the zeroed span.
    missing_file
        The middle commitlog file holding records is deleted (neither the first nor the last):
        a gap in the file names, which both brokers load, serving what lies after it.
    """

    abort: bool = True
    stale_checkpoint: bool = True
    checkpoint_fraction: float = 0.5
    torn_tail: bool = False
    cq_behind: int = 0
    cq_ahead: int = 0
    corrupt: str | None = None
    preallocated_next: bool = True
    zeroed_span: str | None = None
    zeroed_bytes: int = 4096
    missing_file: bool = False

    def __post_init__(self) -> None:
        if self.corrupt not in (None, "crc", "magic"):
            raise ValueError(f"corrupt must be None, 'crc' or 'magic', got {self.corrupt!r}")
        if self.zeroed_span not in (None, "last", "second_last") or self.zeroed_bytes <= 0:
            raise ValueError(f"zeroed_span must be None, 'last' or 'second_last' (zeroed_bytes > 0), "
                             f"got {self.zeroed_span!r}")
        if self.cq_behind < 0 or self.cq_ahead < 0 or not 0 <= self.checkpoint_fraction <= 1:
            raise ValueError("cq_behind/cq_ahead must be >= 0 and checkpoint_fraction in [0, 1]")
        if self.torn_tail and self.cq_ahead:
            raise ValueError("torn_tail and cq_ahead both decide the last record's bytes; pick one")

    @classmethod
    def preset(cls, names: str) -> "CrashSpec":
        """A crash from comma-separated :data:`CRASH_PRESETS` names, merged left to right."""
        values: dict[str, Any] = {}
        for name in (n.strip() for n in names.split(",") if n.strip()):
            if name not in CRASH_PRESETS:
                raise ValueError(f"unknown crash preset {name!r}; one of {sorted(CRASH_PRESETS)}")
            values.update(CRASH_PRESETS[name])
        return cls(**values)


CRASH_PRESETS: dict[str, dict[str, Any]] = {
    "kill9": {},                                      # abort, stale checkpoint, preallocated file
    "torn-tail": {"torn_tail": True},
    "corrupt-middle": {"corrupt": "crc"},
    "corrupt-magic": {"corrupt": "magic"},
    "cq-behind": {"cq_behind": 20},
    "cq-ahead": {"cq_ahead": 20},
    "no-abort": {"abort": False},
    "zeroed-span-last": {"zeroed_span": "last"},
    "zeroed-span-second-last": {"zeroed_span": "second_last"},
    "missing-middle-file": {"missing_file": True},
    "fresh-checkpoint": {"stale_checkpoint": False},
}
"""Named crash variants for the CLI; combine with commas (``torn-tail,cq-behind``)."""


@dataclass
class StoreInfo:
    """What :func:`write_store` wrote, for tests to check readers and recovery against.

    Attributes
    ----------
    root
        The store root.
    spec, crash
        What was asked for.
    messages
        One row per record written (``MESSAGES_SCHEMA``), commitlog order; None when
        ``write_store(keep_messages=False)``.
    commitlog_files
        Commitlog file names (20-digit start offsets), including a preallocated empty one.
    written_end
        Phy offset just past the last record the generator appended (before any damage).
    truncation_offset
        Where the broker's recovery ends the commitlog (its max phy offset afterwards): the first
        damaged record (torn, corrupt, lost), else ``written_end``.
    checkpoint
        The values written to ``<root>/checkpoint``.
    index_files
        Index file names in creation order.
    consume_queue_max
        Entries written per ``(topic, queue id)`` (= the queue's max offset; every queue starts at 0).
    counts
        Totals: ``records``, ``survived``, ``dispatched``, ``indexed`` (records), ``index_puts`` and
        one ``kind:<name>`` per record kind.
    seconds
        Wall time of :func:`write_store`.
    """

    root: Path
    spec: SyntheticStoreSpec
    crash: CrashSpec | None
    messages: pa.Table | None
    commitlog_files: list[str]
    written_end: int
    truncation_offset: int
    checkpoint: Checkpoint
    index_files: list[str]
    consume_queue_max: dict[tuple[str, int], int]
    counts: dict[str, int]
    seconds: float = 0.0

    def summary(self) -> dict[str, Any]:
        """A JSON-able overview (what the CLI prints)."""
        return {
            "root": str(self.root),
            "broker": self.spec.broker,
            "seed": self.spec.seed,
            "crash": asdict(self.crash) if self.crash else None,
            **{k: v for k, v in self.counts.items() if not k.startswith("kind:")},
            "records_by_kind": {k[5:]: v for k, v in self.counts.items() if k.startswith("kind:")},
            "written_end": self.written_end,
            "truncation_offset": self.truncation_offset,
            "commitlog_files": len(self.commitlog_files),
            "segment_size": self.spec.segment_size,
            "consume_queues": len(self.consume_queue_max),
            "consume_queue_entries": int(sum(self.consume_queue_max.values())),
            "index_files": self.index_files,
            "checkpoint": {k: getattr(self.checkpoint, k) for k in (
                "physic_msg_timestamp", "logics_msg_timestamp", "index_msg_timestamp")},
            "seconds": round(self.seconds, 3),
        }


# -- commitlog appends ------------------------------------------------------------------------------

class _CommitLogWriter:
    """Appends records to commitlog files the way ``DefaultAppendMessageCallback#doAppend`` does.

    A record goes into the current file only if 8 bytes remain after it; otherwise an 8-byte blank
    marker closes the file and the record starts the next one (F§3.10). Bytes are staged in a small
    chunk and written sequentially; each file is then extended to the segment size (zeros).
    """

    def __init__(self, directory: Path, segment_size: int, chunk_size: int) -> None:
        self.directory = directory
        self.segment_size = segment_size
        self.files: list[str] = []
        self.chunk = bytearray(chunk_size)
        self.used = 0                 # bytes staged in the chunk
        self.position = 0             # write position in the current file
        self.file_start = 0
        self._fh: Any = None
        directory.mkdir(parents=True, exist_ok=True)
        self._open(0)

    @property
    def end(self) -> int:
        """Phy offset just past the last byte appended."""
        return self.file_start + self.position

    def _open(self, start: int) -> None:
        name = f"{start:020d}"
        self._fh = open(self.directory / name, "xb")
        self.files.append(name)
        self.file_start, self.position = start, 0

    def _flush(self) -> None:
        self._fh.write(memoryview(self.chunk)[:self.used])
        self.used = 0

    def _close_file(self) -> None:
        self._flush()
        self._fh.truncate(self.segment_size)  # preallocated size, zeros after the data
        self._fh.close()
        self._fh = None

    def reserve(self, total: int) -> tuple[bytearray, int, int]:
        """Room for a ``total``-byte record: ``(buffer, position in it, phy offset)``."""
        _, blank = rf.append_position(self.end, total, self.segment_size)
        if blank:
            if self.used + rf.END_FILE_MIN_BLANK_LENGTH > len(self.chunk):
                self._flush()
            self.chunk[self.used:self.used + rf.END_FILE_MIN_BLANK_LENGTH] = encode_blank(blank)
            self.used += rf.END_FILE_MIN_BLANK_LENGTH
            self._close_file()
            self._open(self.file_start + self.segment_size)
        if self.used + total > len(self.chunk):
            self._flush()
        pos, phy = self.used, self.file_start + self.position
        self.used += total
        self.position += total
        return self.chunk, pos, phy

    def close(self) -> None:
        if self._fh is not None:
            self._close_file()


class _Columns:
    """Compact per-record accumulators: typed arrays (about 50 bytes a record, 8 per index key);
    key strings go to Arrow chunks only when the messages table is wanted."""

    INT_COLUMNS = (("phy", "q"), ("size", "i"), ("queue", "i"), ("queue_offset", "q"),
                   ("sys_flag", "i"), ("store_timestamp", "q"), ("tags_code", "q"), ("kind", "b"),
                   ("dispatchable", "b"), ("indexable", "b"))

    def __init__(self, keep_strings: bool) -> None:
        self.keep_strings = keep_strings
        for name, code in self.INT_COLUMNS:
            setattr(self, name, array(code))
        self.keys: list[str | None] = []
        self.uniq: list[str | None] = []
        self.key_chunks: list[pa.Array] = []
        self.uniq_chunks: list[pa.Array] = []
        # index puts in put order: keyHash (hashed per flush) and the record they belong to
        self.put_keys: list[str] = []
        self.put_record = array("i")
        self.put_hash_chunks: list[np.ndarray] = []

    def flush(self) -> None:
        """Move the pending strings into Arrow chunks and hash the pending index keys."""
        if self.keys:
            self.key_chunks.append(pa.array(self.keys, pa.string()))
            self.uniq_chunks.append(pa.array(self.uniq, pa.string()))
            self.keys, self.uniq = [], []
        if self.put_keys:
            self.put_hash_chunks.append(index_key_hashes(pa.array(self.put_keys, pa.string())))
            self.put_keys = []

    def numpy(self, name: str) -> np.ndarray:
        column = getattr(self, name)
        return np.frombuffer(column, dtype=column.typecode)

    def put_hashes(self) -> np.ndarray:
        return np.concatenate(self.put_hash_chunks) if self.put_hash_chunks else np.zeros(0, np.int32)


def _body_pools(rng: np.random.Generator, spec: SyntheticStoreSpec
                ) -> tuple[bytes, bytes, list[tuple[bytes, int]]]:
    """Body sources: a text pool, a random-bytes pool and a few zlib-compressed bodies with CRCs.

    Bodies are slices of the pools (no per-message generation); BODYCRC is computed per record.
    """
    size = 16 * spec.message_size + 64 * 1024
    letters = rng.integers(ord("a"), ord("z") + 1, size, dtype=np.uint8)
    letters[rng.random(size) < 0.15] = ord(" ")
    text = letters.tobytes()
    compressed = []
    for k in range(8):
        z = zlib.compress(text[k * 997:k * 997 + spec.message_size * (k + 2) // 2], 6)
        compressed.append((z, _crc(z)))
    return text, rng.bytes(size), compressed


class _Transaction(NamedTuple):
    """A half record waiting for its end (``EndTransactionProcessor``)."""

    half_phy: int
    half_queue_offset: int
    pairs: list[tuple[str, str]]
    keys: str
    uniq: str | None
    tags: str | None
    body: bytes | memoryview
    body_crc: int
    sys_flag: int
    flag: int
    born: tuple[bytes, int]
    store: tuple[bytes, int]
    commit: bool


class _Generator:
    """The put loop: plans messages with a seeded RNG and appends their records (F§3.4 kinds)."""

    BLOCK = 4096          # random draws per block of planned messages
    FLUSH = 16384         # records between string/hash flushes

    def __init__(self, root: Path, spec: SyntheticStoreSpec, keep_strings: bool) -> None:
        self.spec = spec
        self.rng = np.random.default_rng(spec.seed)
        self.cols = _Columns(keep_strings)
        self.queues: list[tuple[str, int]] = []
        self.queue_index: dict[tuple[str, int], int] = {}
        self.queue_next: list[int] = []
        self.topic_bytes: dict[str, bytes] = {}
        self.records = 0
        self.five = spec.rocketmq5
        # 5.4+ also indexes TAGS (``versions.index_tag_keys``); of these styles only "5.5" leaves
        # a store ``Store.broker_version`` reads as 5.4 or later (the others read as 5.3 or 4.9)
        self.tag_keys = spec.broker == "5.5"
        self.writer = _CommitLogWriter(root / "commitlog", spec.segment_size,
                                       max(4 * MiB, 32 * spec.message_size))
        self.text, self.random_bytes, self.compressed = _body_pools(self.rng, spec)
        self.store_v4 = (bytes([10, 0, 0, 1]), 10911)
        self.store_v6 = (ipaddress.ip_address("fd00::1").packed, 10911)
        self.born_v4 = [(bytes([10, 0, 1, 10 + p]), 40000 + p) for p in range(_PRODUCERS)]
        self.born_v6 = [(ipaddress.ip_address(f"fd00::2:{p + 1}").packed, 40000 + p)
                        for p in range(_PRODUCERS)]
        self.uniq_prefix = f"{(spec.seed * 2654435761) & (1 << 80) - 1:020X}"
        self.tags_codes = {t: java_string_hash(t) for t in (*_TAGS, "d")}
        for topic, n in spec.topics:
            for q in range(n):
                self._queue(topic, q)

    def _queue(self, topic: str, queue_id: int) -> int:
        key = (topic, queue_id)
        idx = self.queue_index.get(key)
        if idx is None:
            idx = self.queue_index[key] = len(self.queues)
            self.queues.append(key)
            self.queue_next.append(0)
            self.topic_bytes.setdefault(topic, topic.encode("utf-8"))
        return idx

    # -- one record -----------------------------------------------------------------------------
    def put(self, kind: int, topic: str, queue_id: int, sys_flag: int, flag: int, body: bytes | memoryview,
            body_crc: int, pairs: list[tuple[str, str]], keys: str | None, uniq: str | None,
            tags: str | None, born: tuple[bytes, int], born_timestamp: int, store: tuple[bytes, int],
            reconsume_times: int = 0, prepared_transaction_offset: int = 0,
            delay_level: int = 0) -> tuple[int, int]:
        """Append one record as the broker's put does; returns ``(phy offset, queue offset)``."""
        spec, cols = self.spec, self.cols
        store_ts = spec.store_timestamp(self.records)
        self.records += 1
        pairs.sort(key=lambda pair: _PROPERTY_RANK[pair[0]])
        text = "".join([f"{k}\x01{v}\x02" for k, v in pairs])
        props = properties_bytes(text if self.five else text[:-1], spec.append_prop_crc)
        q = self._queue(topic, queue_id)
        topic_b = self.topic_bytes[topic]
        version = 2 if self.five and len(topic_b) > 127 else 1     # autoMessageVersionOnTopicLen
        tran = sys_flag & rf.TRANSACTION_MASK
        dispatchable = tran == rf.TRANSACTION_NOT_TYPE or tran == rf.TRANSACTION_COMMIT_TYPE
        if dispatchable:
            queue_offset = self.queue_next[q]
            self.queue_next[q] = queue_offset + 1
        else:
            queue_offset = 0        # PREPARED/ROLLBACK do not advance the queue (F§3.5)
        total = rf.cal_msg_length(version, sys_flag, len(body), len(topic_b), len(props))
        buf, pos, phy = self.writer.reserve(total)
        write_record(buf, pos, total, version, queue_id, flag, queue_offset, phy, sys_flag,
                      born_timestamp, born, store_ts, store, reconsume_times,
                      prepared_transaction_offset, body, body_crc, topic_b, props, spec.append_prop_crc)
        if delay_level and topic == SCHEDULE_TOPIC:
            tags_code = store_ts + DELAY_LEVELS_MS[min(delay_level, len(DELAY_LEVELS_MS)) - 1]
        else:
            tags_code = self.tags_codes[tags] if tags else 0
        indexable = tran != rf.TRANSACTION_ROLLBACK_TYPE and bool(uniq or keys)
        rec = len(cols.phy)
        cols.phy.append(phy)
        cols.size.append(total)
        cols.queue.append(q)
        cols.queue_offset.append(queue_offset)
        cols.sys_flag.append(sys_flag)
        cols.store_timestamp.append(store_ts)
        cols.tags_code.append(tags_code)
        cols.kind.append(kind)
        cols.dispatchable.append(dispatchable)
        cols.indexable.append(indexable)
        if cols.keep_strings:
            cols.keys.append(keys)
            cols.uniq.append(uniq)
        if indexable:
            # IndexService#buildIndex: topic#UNIQ_KEY, then topic#token per non-empty KEYS token,
            # then (5.4+) topic#T#TAGS
            prefix = topic + "#"
            if uniq:
                cols.put_keys.append(prefix + uniq)
                cols.put_record.append(rec)
            if keys:
                for token in keys.split(" "):
                    if token:
                        cols.put_keys.append(prefix + token)
                        cols.put_record.append(rec)
            if tags and self.tag_keys:
                cols.put_keys.append(prefix + "T#" + tags)
                cols.put_record.append(rec)
        if self.records % self.FLUSH == 0:
            cols.flush()
        return phy, queue_offset

    # -- the plan -------------------------------------------------------------------------------
    def run(self) -> None:
        """Plan and put messages until ``total_bytes`` of commitlog are filled."""
        spec, rng = self.spec, self.rng
        user_queues = [(t, q) for t, n in spec.topics for q in range(n)]
        t_delay = spec.delayed_fraction
        t_retry = t_delay + spec.retry_fraction
        t_half = t_retry + spec.transaction_fraction
        t_legacy = t_half + spec.legacy_transaction_fraction
        common = [("CLUSTER", spec.cluster)] + ([("WAIT", "true")] if self.five else [])  # 4.9.7 drops WAIT
        pool = len(self.text) - 8 * spec.message_size - 1
        compress_bits = rf.COMPRESSED_FLAG | (COMPRESSION_ZLIB if self.five else 0)
        store_v6_below = spec.ipv6_fraction / 2
        pending: list[tuple[int, int, _Transaction]] = []      # heap of (due, half phy, transaction)
        last_prepared_phy = last_plain_phy = planned = 0
        while self.writer.end < spec.total_bytes:
            b = self.BLOCK
            u_kind, u_sub, u_size, u_class, u_v6, u_comp, u_tag, u_uniq = (
                rng.random((8, b)).tolist())
            queue_pick = rng.integers(0, len(user_queues), b).tolist()
            flags = rng.integers(0, 4, b).tolist()
            offsets = rng.integers(0, pool, b).tolist()
            producers = rng.integers(0, _PRODUCERS, b).tolist()
            lags = rng.integers(0, 50, b).tolist()
            levels = rng.integers(1, len(DELAY_LEVELS_MS) + 1, b).tolist()
            for j in range(b):
                if self.writer.end >= spec.total_bytes:
                    break
                while pending and pending[0][0] <= planned:
                    self._end_transaction(heapq.heappop(pending)[2])
                planned += 1
                n = self.records
                topic, queue_id = user_queues[queue_pick[j]]
                keys = f"K{n}"
                if n % 3 == 0:
                    keys += f" G{n % 40}"
                if n % 10 == 0:
                    keys += f" order-{n // 10} shared"
                if n % 17 == 5:
                    keys += f"  X{n % 7}"             # double space: an empty token, not indexed
                tags = None if u_tag[j] < spec.untagged_fraction else _TAGS[n % 5]
                uniq = None if u_uniq[j] < spec.no_uniq_key_fraction else f"{self.uniq_prefix}{n:012X}"
                pairs = [("KEYS", keys), *common]
                if tags:
                    pairs.append(("TAGS", tags))
                if uniq:
                    pairs.append(("UNIQ_KEY", uniq))
                if n % 8 == 3:
                    pairs.append(("p_txt", f"值-{n}-ü"))
                sys_flag = 0
                born, store = self.born_v4[producers[j]], self.store_v4
                if u_v6[j] < spec.ipv6_fraction:
                    born, sys_flag = self.born_v6[producers[j]], rf.BORNHOST_V6_FLAG
                    if u_v6[j] < store_v6_below:
                        store, sys_flag = self.store_v6, sys_flag | rf.STOREHOSTADDRESS_V6_FLAG
                kind, reconsume, delay_level = KIND_NORMAL, 0, 0
                u = u_kind[j]
                if u < t_delay:
                    kind, delay_level = KIND_DELAYED, levels[j]
                    pairs += [("DELAY", str(delay_level)), ("REAL_TOPIC", topic),
                              ("REAL_QID", str(queue_id))]
                    topic, queue_id = SCHEDULE_TOPIC, delay_level - 1
                elif u < t_retry:
                    # delivered from the schedule topic: DELAY and REAL_* stay in the string (E#28, E#30)
                    kind, reconsume = KIND_RETRY, 1 + int(u_sub[j] * 3)
                    retry_topic = spec.retry_topic
                    if spec.long_retry_group and n % 2:
                        retry_topic = spec.long_retry_topic
                    origin = f"{self.store_v4[0].hex().upper()}{self.store_v4[1]:08X}{last_plain_phy:016X}"
                    pairs += [("RETRY_TOPIC", topic), ("ORIGIN_MESSAGE_ID", origin),
                              ("DELAY", str(3 + reconsume)), ("REAL_TOPIC", retry_topic),
                              ("REAL_QID", "0")]
                    topic, queue_id = retry_topic, 0
                elif u < t_half:
                    kind = KIND_HALF
                    pairs += [("TRAN_MSG", "true"), ("PGROUP", spec.producer_group),
                              ("REAL_TOPIC", topic), ("REAL_QID", str(queue_id))]
                    topic, queue_id = TRANS_HALF_TOPIC, 0
                elif u < t_legacy:
                    if u_sub[j] < 0.5:
                        kind, sys_flag = KIND_PREPARED, sys_flag | rf.TRANSACTION_PREPARED_TYPE
                        pairs += [("TRAN_MSG", "true"), ("PGROUP", spec.producer_group)]
                    else:
                        kind, sys_flag = KIND_ROLLBACK, sys_flag | rf.TRANSACTION_ROLLBACK_TYPE
                        pairs.append(("PGROUP", spec.producer_group))
                if u_comp[j] < spec.compressed_fraction:
                    body, body_crc = self.compressed[n % len(self.compressed)]
                    sys_flag |= compress_bits
                else:
                    # one byte, large, or sized so that the record hits message_size on average
                    c = u_class[j]
                    target = (1 if c < 0.05 else spec.message_size * (2 + 6 * u_size[j]) if c >= 0.99
                              else spec.message_size * (0.5 + u_size[j]))
                    overhead = (rf.cal_msg_length(1, sys_flag, 0, len(topic), 0)
                                + sum([len(k) + len(v) + 2 for k, v in pairs]))
                    body_len = max(1, int(target) - overhead)
                    source = self.random_bytes if n % 5 == 1 else self.text
                    body = memoryview(source)[offsets[j]:offsets[j] + body_len]
                    body_crc = _crc(body)
                born_ts = spec.store_timestamp(n) - lags[j]
                phy, queue_offset = self.put(
                    kind, topic, queue_id, sys_flag, flags[j], body, body_crc, pairs, keys, uniq, tags,
                    born, born_ts, store, reconsume, last_prepared_phy if kind == KIND_ROLLBACK else 0,
                    delay_level)
                if kind == KIND_NORMAL:
                    last_plain_phy = phy
                elif kind == KIND_PREPARED:
                    last_prepared_phy = phy
                elif kind == KIND_HALF:
                    tx = _Transaction(phy, queue_offset, pairs, keys, uniq, tags, body, body_crc,
                                      sys_flag, flags[j], born, store, u_sub[j] < 0.7)
                    heapq.heappush(pending, (planned + 1 + int(u_size[j] * 64), phy, tx))
        self.cols.flush()
        self.writer.close()

    def _end_transaction(self, tx: _Transaction) -> None:
        """``EndTransactionProcessor``: a COMMIT record in the real topic + an op record, or the op
        record alone (rollback). Transactions still open at the end stay open."""
        props = dict(tx.pairs)
        ts = self.spec.store_timestamp(self.records)
        if tx.commit:
            self.put(KIND_COMMIT, props["REAL_TOPIC"], int(props["REAL_QID"]),
                     tx.sys_flag | rf.TRANSACTION_COMMIT_TYPE, tx.flag, tx.body, tx.body_crc,
                     list(tx.pairs), tx.keys, tx.uniq, tx.tags, tx.born, ts - 5, tx.store,
                     prepared_transaction_offset=tx.half_phy)
        op_body = (f"{tx.half_queue_offset}," if self.five else str(tx.half_queue_offset)).encode("ascii")
        # op records carry TAGS=d and WAIT=true only, so they are indexed under no key (E#32)
        self.put(KIND_OP, TRANS_OP_HALF_TOPIC, 0, 0, 0, op_body, _crc(op_body),
                 [("TAGS", "d"), ("WAIT", "true")], None, None, "d", self.store_v4, ts, self.store_v4)


# -- crash damage ---------------------------------------------------------------------------------

def _patch(commitlog_dir: Path, segment_size: int, phy: int, data: bytes) -> None:
    """Overwrite commitlog bytes at ``phy`` (may span files)."""
    while data:
        start = phy - phy % segment_size
        n = min(len(data), segment_size - (phy - start))
        with open(commitlog_dir / f"{start:020d}", "r+b") as fh:
            fh.seek(phy - start)
            fh.write(data[:n])
        phy, data = phy + n, data[n:]


def _read(commitlog_dir: Path, segment_size: int, phy: int, n: int) -> bytes:
    """``n`` commitlog bytes at ``phy`` (inside one file: records never span files)."""
    start = phy - phy % segment_size
    with open(commitlog_dir / f"{start:020d}", "rb") as fh:
        fh.seek(phy - start)
        return fh.read(n)


def _body_position(sys_flag: int) -> int:
    """Offset of BODY in a record with this SYSFLAG (F§3.2: 72 + born host + store host)."""
    born = 16 if sys_flag & rf.BORNHOST_V6_FLAG else 4
    store = 16 if sys_flag & rf.STOREHOSTADDRESS_V6_FLAG else 4
    return rf.head_struct(born, store).size


@dataclass
class _Damage:
    """Outcome of :func:`_apply_crash` over records ``0..n-1``."""

    damage: np.ndarray          # int8 code into DAMAGES per record, -1 = none
    intact: int                 # records [0, intact) are completely on disk
    dispatched: int             # records [0, dispatched) reached the CQ/index dispatcher
    truncation: int             # where the broker's recovery ends the commitlog


def _apply_crash(commitlog_dir: Path, spec: SyntheticStoreSpec, crash: CrashSpec, phy: np.ndarray,
                 size: np.ndarray, sys_flag: np.ndarray, written_end: int) -> _Damage:
    """Damage the written commitlog as ``crash`` says (bytes patched in place)."""
    n = len(phy)
    out = _Damage(np.full(n, -1, dtype=np.int8), n, n, written_end)
    if crash.cq_ahead:
        if crash.cq_ahead >= n:
            raise ValueError(f"cq_ahead={crash.cq_ahead} but only {n} records were written")
        out.intact = n - crash.cq_ahead
        out.damage[out.intact:] = DAMAGES.index("lost")
        first = int(phy[out.intact])
        _patch(commitlog_dir, spec.segment_size, first, bytes(written_end - first))
    if crash.torn_tail and n:
        last = n - 1
        out.intact = out.dispatched = last          # the record being written was never dispatched
        out.damage[last] = DAMAGES.index("torn")
        # half its body reached the disk: BODYCRC fails, and the zeroed TOPICLEN/PROPERTIESLEN break
        # calMsgLength even when the body's lost half was zeros already; a 1-byte body tears the header
        body_pos = _body_position(int(sys_flag[last]))
        body_len_at = int(phy[last]) + body_pos - 4
        body_len = struct.unpack(">i", _read(commitlog_dir, spec.segment_size, body_len_at, 4))[0]
        keep = body_pos + body_len // 2 if body_len >= 2 else body_pos - 8
        _patch(commitlog_dir, spec.segment_size, int(phy[last]) + keep, bytes(int(size[last]) - keep))
    if crash.cq_behind:
        out.dispatched = min(out.dispatched, max(0, n - crash.cq_behind))
    if out.intact < n:
        out.truncation = int(phy[out.intact])
    if crash.corrupt:
        victim = _corrupt_target(phy, out.intact, spec.segment_size)
        at = int(phy[victim])
        if crash.corrupt == "crc":
            at += _body_position(int(sys_flag[victim]))
            first_body_byte = _read(commitlog_dir, spec.segment_size, at, 1)[0]
            _patch(commitlog_dir, spec.segment_size, at, bytes([first_body_byte ^ 0xFF]))
            out.damage[victim] = DAMAGES.index("corrupt_crc")
        else:
            _patch(commitlog_dir, spec.segment_size, at + 4, struct.pack(">I", 0xDEADBEEF))
            out.damage[victim] = DAMAGES.index("corrupt_magic")
        out.truncation = min(out.truncation, int(phy[victim]))
    segment = phy[:out.intact] // spec.segment_size
    files = np.unique(segment)
    if crash.zeroed_span:
        which = -1 if crash.zeroed_span == "last" else -2
        if len(files) < -which:
            raise ValueError(f"zeroed_span={crash.zeroed_span!r} but the records fill {len(files)} file(s)")
        members = np.flatnonzero(segment == files[which])
        victim = int(members[len(members) // 2])
        start = int(phy[victim]) + 37                 # inside the victim's header
        stop = start + crash.zeroed_bytes
        if len(members) < 3 or stop > int(phy[members[-1]]):
            raise ValueError("the file is too small for the zeroed span with intact records after it")
        _patch(commitlog_dir, spec.segment_size, start, bytes(crash.zeroed_bytes))
        hit = (phy < stop) & (phy + size > start)
        out.damage[hit] = DAMAGES.index("zeroed")
        out.truncation = min(out.truncation, int(phy[np.flatnonzero(hit)[0]]))
    if crash.missing_file:
        if len(files) < 3:
            raise ValueError(f"missing_file needs records in 3 files or more, they fill {len(files)}")
        gone = int(files[len(files) // 2])
        os.unlink(commitlog_dir / f"{gone * spec.segment_size:020d}")
        out.damage[phy // spec.segment_size == gone] = DAMAGES.index("missing_file")
    return out


def _corrupt_target(phy: np.ndarray, limit: int, segment_size: int) -> int:
    """The middle record of the last segment holding >= 3 of the records before ``limit``."""
    segment = phy[:limit] // segment_size
    for s in np.unique(segment)[::-1]:
        members = np.flatnonzero(segment == s)
        if len(members) >= 3:
            return int(members[len(members) // 2])
    raise ValueError("the store is too small to corrupt a record with intact records after it")


# -- derived files --------------------------------------------------------------------------------

def _data_version(spec: SyntheticStoreSpec, timestamp: int) -> dict[str, int]:
    if spec.rocketmq5:
        return {"counter": 0, "stateVersion": 0, "timestamp": timestamp}
    return {"counter": 0, "timestamp": timestamp}


def _write_config(root: Path, spec: SyntheticStoreSpec, queue_max: dict[tuple[str, int], int],
                  topics: dict[str, int], delay_offsets: dict[int, int], timestamp: int) -> None:
    """topics.json, consumerOffset.json, delayOffset.json in the broker's fastjson style."""
    config = root / "config"
    config.mkdir()
    table = {}
    for topic in sorted(topics):
        entry: dict[str, Any] = {"attributes": {}} if spec.rocketmq5 else {}
        entry.update({"order": False, "perm": 6, "readQueueNums": topics[topic],
                      "topicFilterType": "SINGLE_TAG", "topicName": topic, "topicSysFlag": 0,
                      "writeQueueNums": topics[topic]})
        table[topic] = entry
    (config / "topics.json").write_text(to_fastjson({"dataVersion": _data_version(spec, timestamp),
                                                    "topicConfigTable": table}), encoding="utf-8")
    # consumers: the group nearly caught up, GroupLag halfway, GroupAhead past the end (max + 5)
    consumed = [t for t, _ in spec.topics] + [spec.retry_topic]
    groups = {spec.consumer_group: lambda m: m * 9 // 10, "GroupLag": lambda m: m // 2,
              "GroupAhead": lambda m: m + 5}
    offsets = {f"{topic}@{group}": {q: at(queue_max.get((topic, q), 0)) for q in range(topics[topic])}
               for group, at in groups.items() for topic in consumed}
    body: dict[str, Any] = {}
    if spec.rocketmq5:
        body["dataVersion"] = _data_version(spec, timestamp)
        body["groupTopicMap"] = {g: consumed for g in groups}
    body["offsetTable"] = offsets
    (config / "consumerOffset.json").write_text(to_fastjson(body), encoding="utf-8")
    delay: dict[str, Any] = {"dataVersion": _data_version(spec, timestamp)} if spec.rocketmq5 else {}
    delay["offsetTable"] = delay_offsets
    (config / "delayOffset.json").write_text(to_fastjson(delay), encoding="utf-8")


def _write_consume_queues(root: Path, spec: SyntheticStoreSpec, queues: list[tuple[str, int]],
                          queue: np.ndarray, phy: np.ndarray, size: np.ndarray, tags_code: np.ndarray
                          ) -> dict[tuple[str, int], int]:
    """One :func:`consumequeue.write_queue` per queue; entries come in put order (offsets 0..n-1)."""
    order = np.argsort(queue, kind="stable")
    runs = np.split(order, np.flatnonzero(np.diff(queue[order])) + 1) if len(order) else []
    out = {}
    for run in runs:
        topic, queue_id = queues[int(queue[run[0]])]
        write_queue(root / "consumequeue" / topic / str(queue_id), phy[run], size[run], tags_code[run],
                    0, spec.cq_file_size)
        out[(topic, queue_id)] = len(run)
    return out


def _write_index(root: Path, spec: SyntheticStoreSpec, key_hash: np.ndarray, phy: np.ndarray,
                 store_timestamp: np.ndarray) -> list[tuple[str, IndexHeader]]:
    """Index files cut by capacity (``maxIndexNum - 1`` puts each), built and written one at a time.

    Returns ``(name, header)`` per file. A file is named after its creation time, the store time of
    its first put (UTC, kept strictly increasing so names stay unique).
    """
    directory = root / "index"
    directory.mkdir()
    header = IndexHeader.first()
    capacity = header.room(spec.max_index_num)
    files: list[tuple[str, IndexHeader]] = []
    for lo in range(0, len(key_hash), capacity):
        hi = min(lo + capacity, len(key_hash))
        (built,) = build_index_files(key_hash[lo:hi], phy[lo:hi], store_timestamp[lo:hi],
                                     hash_slot_num=spec.max_hash_slot_num, index_num=spec.max_index_num,
                                     start_header=header)
        name = next_index_file_name(int(store_timestamp[lo]), files[-1][0] if files else None)
        write_index_file(directory / name, built)
        files.append((name, built.header))
        header = built.header.successor()
        del built                                     # one file image in memory at a time
    return files


# -- the whole store --------------------------------------------------------------------------

def write_store(dest_dir: str | os.PathLike[str], spec: SyntheticStoreSpec | None = None,
                crash: CrashSpec | None = None, *, keep_messages: bool = True) -> StoreInfo:
    """Write a complete synthetic store at ``dest_dir`` (created; must not exist or be empty).

    Layout (F§1): ``commitlog/`` segments preallocated to ``segment_size``; ``consumequeue/`` for
    dispatched NOT/COMMIT records; ``index/`` (UNIQ_KEY then KEYS tokens, then TAGS for "5.5", no ROLLBACK, files cut by
    capacity); ``checkpoint``; ``config/{topics,consumerOffset,delayOffset}.json``; ``lock``;
    ``broker.conf`` with the sizes used; ``abort`` after a crash; ``abort.bak`` for 5.x.

    Parameters
    ----------
    dest_dir
        The store root (``storePathRootDir``).
    spec
        What to generate (default :class:`SyntheticStoreSpec`).
    crash
        None for a cleanly shut down store, else how it was left (:class:`CrashSpec`).
    keep_messages
        Build ``StoreInfo.messages``; False saves its memory (about 100 bytes per record) for
        benchmark-size stores.

    Returns
    -------
    StoreInfo
        Per-record expectations and where the broker's recovery will end the commitlog.
    """
    began = time.perf_counter()
    spec = spec or SyntheticStoreSpec()
    root = Path(dest_dir)
    if root.exists() and any(root.iterdir()):
        raise FileExistsError(f"{root} is not empty")
    root.mkdir(parents=True, exist_ok=True)

    gen = _Generator(root, spec, keep_messages)
    gen.run()
    cols = gen.cols
    phy, size, queue = cols.numpy("phy"), cols.numpy("size"), cols.numpy("queue")
    store_ts, tags_code, kind = cols.numpy("store_timestamp"), cols.numpy("tags_code"), cols.numpy("kind")
    n = len(phy)
    written_end = gen.writer.end
    files = list(gen.writer.files)

    clean = CrashSpec(abort=False, stale_checkpoint=False, preallocated_next=False)
    damage = _apply_crash(root / "commitlog", spec, crash or clean, phy, size, cols.numpy("sys_flag"),
                          written_end)
    files = [f for f in files if (root / "commitlog" / f).exists()]     # a missing file is gone
    if crash and crash.preallocated_next:
        nxt = f"{int(files[-1]) + spec.segment_size:020d}"
        with open(root / "commitlog" / nxt, "xb") as fh:
            fh.truncate(spec.segment_size)
        files.append(nxt)

    # consume queues and index from what was dispatched before the crash
    reached = np.arange(n) < damage.dispatched
    dispatched = (cols.numpy("dispatchable") != 0) & reached
    indexed = (cols.numpy("indexable") != 0) & reached
    rows = np.flatnonzero(dispatched)
    queue_max = _write_consume_queues(root, spec, gen.queues, queue[rows], phy[rows], size[rows],
                                      tags_code[rows])
    put_record = np.frombuffer(cols.put_record, dtype=np.int32)
    keep = put_record < damage.dispatched
    put_record, put_hash = put_record[keep], cols.put_hashes()[keep]
    index_files = _write_index(root, spec, put_hash, phy[put_record], store_ts[put_record])
    del put_record, put_hash

    # checkpoint (F§8): last flushed record, last dispatched record, end of the last index file that
    # filled up (flushed when its successor was created, R§8)
    physic = int(store_ts[damage.intact - 1]) if damage.intact else 0
    logics = int(store_ts[rows[-1]]) if len(rows) else 0
    index_ts = index_files[-2][1].end_timestamp if len(index_files) > 1 else 0
    if crash and crash.stale_checkpoint and n:
        # the file on disk is as of the last periodic flush, or of the last index roll (whose
        # IndexService#flush rewrites the whole checkpoint) if that came later
        at = max(int(store_ts[int(crash.checkpoint_fraction * (n - 1))]), index_ts)
        physic, logics = min(physic, at), min(logics, at)
    # 5.5: the last record put into a consume queue by the flush that wrote logicsMsgTimestamp
    logics_phy = int(phy[rows][store_ts[rows] <= logics][-1]) if spec.broker == "5.5" and logics else 0
    checkpoint = Checkpoint(physic, logics, index_ts, logics_physical_offset=logics_phy)
    write_checkpoint(root / "checkpoint", checkpoint, rocketmq5=spec.rocketmq5)

    (root / "lock").write_bytes(b"lock")
    if spec.rocketmq5:
        (root / "abort.bak").write_bytes(b"")      # MixAll.string2File leaves it (fixtures, item 15)
    if crash and crash.abort:
        # 5.x writes the broker PID into abort; 4.9.7 creates it empty
        (root / "abort").write_bytes(str(20000 + spec.seed % 10000).encode() if spec.rocketmq5 else b"")
    (root / "broker.conf").write_text(spec.broker_conf(), encoding="utf-8")

    topics = dict(spec.topics)
    for t, q in gen.queues:
        topics[t] = max(topics.get(t, 0), q + 1)
    topics[SCHEDULE_TOPIC] = len(DELAY_LEVELS_MS)
    last_ts = int(store_ts[-1]) if n else spec.start_timestamp
    # delivered = schedule entries whose deliver time (their tags code) had come by the last put
    delay_offsets = {q + 1: int(np.count_nonzero(tags_code[dispatched & (queue == gen.queue_index[(t, q)])]
                                                 <= last_ts))
                     for (t, q) in sorted(queue_max) if t == SCHEDULE_TOPIC}
    _write_config(root, spec, queue_max, topics, delay_offsets, last_ts)

    survived = (phy < damage.truncation) & (damage.damage < 0)
    counts = {"records": n, "survived": int(np.count_nonzero(survived)),
              "dispatched": int(np.count_nonzero(dispatched)), "indexed": int(np.count_nonzero(indexed)),
              "index_puts": sum(h.index_count - 1 for _, h in index_files)}
    counts.update({f"kind:{name}": int(c) for name, c in zip(KINDS, np.bincount(kind, minlength=len(KINDS)))})
    messages = (_messages_table(gen, dispatched, indexed, survived, damage.damage)
                if keep_messages else None)
    return StoreInfo(root=root, spec=spec, crash=crash, messages=messages, commitlog_files=files,
                     written_end=written_end, truncation_offset=damage.truncation,
                     checkpoint=checkpoint, index_files=[name for name, _ in index_files],
                     consume_queue_max=queue_max, counts=counts, seconds=time.perf_counter() - began)


def _messages_table(gen: _Generator, dispatched: np.ndarray, indexed: np.ndarray, survived: np.ndarray,
                    damage: np.ndarray) -> pa.Table:
    cols = gen.cols
    topic_names = sorted({t for t, _ in gen.queues})
    topic_code = np.array([topic_names.index(t) for t, _ in gen.queues], dtype=np.int32)
    queue_ids = np.array([q for _, q in gen.queues], dtype=np.int32)
    queue = cols.numpy("queue")
    return pa.table([
        pa.array(cols.numpy("phy")), pa.array(cols.numpy("size")),
        pa.DictionaryArray.from_arrays(pa.array(topic_code[queue]), pa.array(topic_names)),
        pa.array(queue_ids[queue]),
        pa.array(cols.numpy("queue_offset")), pa.array(cols.numpy("sys_flag")),
        pa.array(cols.numpy("store_timestamp")), pa.array(cols.numpy("tags_code")),
        pa.chunked_array(cols.key_chunks, pa.string()), pa.chunked_array(cols.uniq_chunks, pa.string()),
        pa.DictionaryArray.from_arrays(pa.array(cols.numpy("kind")), pa.array(KINDS)),
        pa.array(dispatched), pa.array(indexed), pa.array(survived),
        pa.DictionaryArray.from_arrays(pa.array(damage, mask=damage < 0), pa.array(DAMAGES)),
    ], schema=MESSAGES_SCHEMA)


# -- command line ---------------------------------------------------------------------------------

def main(argv: Sequence[str] | None = None) -> int:
    """``python -m store_reader.testing.synthetic DEST --size 64MiB --segment-size 8MiB [...]``."""
    parser = argparse.ArgumentParser(prog="python -m store_reader.testing.synthetic",
                                     description="Write a synthetic RocketMQ broker store and print "
                                                 "what was written (JSON).")
    parser.add_argument("dest", help="store root to create (must not exist or be empty)")
    parser.add_argument("--size", default="64MiB", help="commitlog bytes to fill (default 64MiB)")
    parser.add_argument("--segment-size", default="8MiB", help="mappedFileSizeCommitLog (default 8MiB)")
    parser.add_argument("--message-size", type=int, default=1024, help="mean record size in bytes")
    parser.add_argument("--cq-file-size", default=str(300_000 * CQ_STORE_UNIT_SIZE),
                        help="mappedFileSizeConsumeQueue (default 6000000)")
    parser.add_argument("--max-hash-slot-num", type=int, default=5_000_000)
    parser.add_argument("--max-index-num", type=int, default=20_000_000)
    parser.add_argument("--queues", type=int, default=None,
                        help="spread this many queues over the default four topics (default 32)")
    parser.add_argument("--broker", choices=BROKER_STYLES, default="5.x")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--messages-per-second", type=int, default=1000)
    parser.add_argument("--append-prop-crc", action="store_true", help="5.x enabledAppendPropCRC")
    parser.add_argument("--long-retry-group", action="store_true", help="5.x V2-magic retry topic")
    parser.add_argument("--crash", default=None,
                        help="comma-separated crash presets: " + ", ".join(sorted(CRASH_PRESETS)))
    args = parser.parse_args(argv)

    topics = SyntheticStoreSpec.topics
    if args.queues is not None:
        names = [t for t, _ in topics]
        per = [args.queues // len(names) + (i < args.queues % len(names)) for i in range(len(names))]
        topics = tuple((t, k) for t, k in zip(names, per) if k)
    try:
        spec = SyntheticStoreSpec(
            total_bytes=parse_size(args.size), segment_size=parse_size(args.segment_size),
            cq_file_size=parse_size(args.cq_file_size), max_hash_slot_num=args.max_hash_slot_num,
            max_index_num=args.max_index_num, message_size=args.message_size, topics=topics,
            broker=args.broker, seed=args.seed, messages_per_second=args.messages_per_second,
            append_prop_crc=args.append_prop_crc, long_retry_group=args.long_retry_group)
        crash = CrashSpec.preset(args.crash) if args.crash else None
    except ValueError as exc:
        parser.error(str(exc))
    info = write_store(args.dest, spec, crash, keep_messages=False)
    json.dump(info.summary(), sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
