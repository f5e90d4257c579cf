"""The RocksDB consume queue (``storeType=defaultRocksDB``: ``RocksDBConsumeQueueStore``) and the
consumer offsets kept in RocksDB (``RocksDBConsumerOffsetManager``), read read-only through
``rocksdict`` (F§11; the layouts are the same in 5.3.3, 5.4.0 and 5.5.1).

- ``default`` column family (``RocksDBConsumeQueueTable``): key = topic length i32, ``0x01``, topic,
  ``0x01``, queueId i32, ``0x01``, queue offset i64; value = phy i64, size i32, tags code i64,
  store timestamp i64 (28 bytes).
- ``offset`` (``RocksDBConsumeQueueOffsetTable``): key = topic length i32, ``0x01``, topic, ``0x01``,
  ``max`` or ``min``, ``0x01``, queueId i32; value = phy i64 (of the unit), queue offset i64. The
  topic ``CHECKPOINT_TOPIC`` (``max``, queue 0) holds an 8-byte value: the end of the last dispatched
  record (``getMaxPhyOffsetInConsumeQueue``).
- consumer offsets (``config/consumerOffsets``, ``RocksDBConfigManager#loadData``): key
  ``topic@group``, value the JSON ``{"offsetTable":{queueId:offset}}``.

The database is opened read-only (``AccessType.read_only``) through a temporary directory of
symbolic links to its files (``_open``): whatever RocksDB or rocksdict write lands there, never in
the store. ``raw_mode`` keeps RocksDB's bytewise comparator, the broker's (rocksdict's default
options bring a comparator of their own, which RocksDB refuses on this database).
"""
from __future__ import annotations

import os
import struct
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np

from store_reader.exceptions import OutputError, StoreReaderError
from store_reader.formats.fastjson import parse_fastjson

CHECKPOINT_TOPIC = "CHECKPOINT_TOPIC"      # TopicValidator.RMQ_SYS_ROCKSDB_OFFSET_TOPIC
_CTRL_1 = 1
_UNIT = struct.Struct(">qiqq")             # phy, size, tags code, store timestamp
_OFFSET = struct.Struct(">qq")             # phy, queue offset
_WRITTEN_BY_READER = ("rocksdict-config.json", "LOCK")     # never linked: the reader's own files


@dataclass
class RocksDBQueue:
    """One (topic, queueId) of the RocksDB consume queue as stored."""

    units: dict[int, tuple[int, int, int, int]] = field(default_factory=dict)
    """queue offset -> (phy, size, tags code, store timestamp) (``default``)."""
    max: tuple[int, int] | None = None
    """(phy, queue offset) of the ``max`` offset key, None if absent."""
    min: tuple[int, int] | None = None
    """(phy, queue offset) of the ``min`` offset key, None if absent."""


@dataclass
class RocksDBConsumeQueue:
    """What ``RocksDBConsumeQueueStore#load`` finds."""

    path: str
    queues: dict[tuple[str, int], RocksDBQueue]
    max_phy_offset: int
    """The ``CHECKPOINT_TOPIC`` value (0 when absent: ``RocksDBConsumeQueueOffsetTable#getMaxPhyOffset``)."""


@contextmanager
def _open(path: str, what: str):
    """The database at ``path`` opened read-only through a directory of symbolic links to its
    files: rocksdict writes ``rocksdict-config.json`` beside any database it opens, read-only
    included, and that directory takes it instead of the store."""
    try:
        from rocksdict import AccessType, Options, Rdict
    except ImportError as exc:        # a pinned dependency (pyproject.toml)
        raise StoreReaderError(f"{what}: the rocksdict package is not installed", path) from exc
    with tempfile.TemporaryDirectory(prefix="rocketmq-rocksdb-") as view:
        try:
            names = os.listdir(path)
        except OSError as exc:
            raise StoreReaderError(f"{what}: cannot list the database ({exc.strerror})", path) from exc
        for name in names:
            if name not in _WRITTEN_BY_READER:
                os.symlink(os.path.join(os.path.abspath(path), name), os.path.join(view, name))
        try:
            cfs = Rdict.list_cf(view, Options(raw_mode=True))
            db = Rdict(view, options=Options(raw_mode=True), access_type=AccessType.read_only(),
                       column_families={c: Options(raw_mode=True) for c in cfs})
        except Exception as exc:           # rocksdict raises its own exception types
            why = " ".join(str(exc).replace(view, path).split())     # one line
            raise StoreReaderError(f"{what}: RocksDB cannot open the database read-only ({why})",
                                   path) from exc
        try:
            yield db, cfs
        finally:
            db.close()


def _topic(key: bytes, path: str, cf: str) -> tuple[str, int]:
    """The topic at the start of a key and where the rest begins."""
    if len(key) < 6:
        raise StoreReaderError(f"RocksDB consume queue: malformed key {key.hex()} in column family "
                               f"'{cf}'", path)
    n = int.from_bytes(key[:4], "big", signed=True)
    if n < 0 or len(key) < 6 + n or key[4] != _CTRL_1 or key[5 + n] != _CTRL_1:
        raise StoreReaderError(f"RocksDB consume queue: malformed key {key.hex()} in column family "
                               f"'{cf}'", path)
    return key[5:5 + n].decode("utf-8", "replace"), 6 + n


def read_consume_queue(path: str | os.PathLike[str]) -> RocksDBConsumeQueue:
    """Every unit and offset key of the RocksDB consume queue at ``path`` (F§11)."""
    path = os.fspath(path)
    queues: dict[tuple[str, int], RocksDBQueue] = {}
    max_phy = 0
    with _open(path, "RocksDB consume queue") as (db, cfs):
        if "default" in cfs:
            for key, value in db.get_column_family("default").items():
                topic, at = _topic(key, path, "default")
                if len(key) != at + 13 or key[at + 4] != _CTRL_1 or len(value) != _UNIT.size:
                    raise StoreReaderError(f"RocksDB consume queue: malformed unit {key.hex()} -> "
                                           f"{value.hex()} in column family 'default'", path)
                qid, = struct.unpack_from(">i", key, at)
                offset, = struct.unpack_from(">q", key, at + 5)
                queues.setdefault((topic, qid), RocksDBQueue()).units[offset] = _UNIT.unpack(value)
        if "offset" in cfs:
            for key, value in db.get_column_family("offset").items():
                topic, at = _topic(key, path, "offset")
                kind = key[at:at + 3]
                if len(key) != at + 8 or kind not in (b"max", b"min") or key[at + 3] != _CTRL_1:
                    raise StoreReaderError(f"RocksDB consume queue: malformed offset key {key.hex()}", path)
                qid, = struct.unpack_from(">i", key, at + 4)
                if topic == CHECKPOINT_TOPIC and len(value) == 8:
                    max_phy, = struct.unpack(">q", value)
                    continue
                if len(value) != _OFFSET.size:     # forEach skips them as the broker does
                    continue
                q = queues.setdefault((topic, qid), RocksDBQueue())
                if kind == b"max":
                    q.max = _OFFSET.unpack(value)
                else:
                    q.min = _OFFSET.unpack(value)
    return RocksDBConsumeQueue(path, queues, max_phy)


def stored_max_phy_offset(path: str | os.PathLike[str]) -> int:
    """The ``CHECKPOINT_TOPIC`` value alone (``RocksDBConsumeQueueOffsetTable#getMaxPhyOffset``):
    0 when the key or the database (no ``CURRENT``) is absent, as a broker opening it gets."""
    path = os.fspath(path)
    if not os.path.isfile(os.path.join(path, "CURRENT")):
        return 0
    topic = CHECKPOINT_TOPIC.encode()
    key = struct.pack(">i", len(topic)) + bytes([_CTRL_1]) + topic + bytes([_CTRL_1]) + b"max" + \
        bytes([_CTRL_1]) + struct.pack(">i", 0)
    with _open(path, "RocksDB consume queue") as (db, cfs):
        value = db.get_column_family("offset").get(key) if "offset" in cfs else None
    if value is None:
        return 0
    if len(value) < 8:
        raise StoreReaderError(f"RocksDB consume queue: malformed {CHECKPOINT_TOPIC} value {value.hex()}", path)
    return struct.unpack_from(">q", value)[0]


def served_consume_queue(store) -> RocksDBConsumeQueue:
    """The RocksDB consume queue a ``storeType=defaultRocksDB`` broker opens on ``store``
    (``Inventory.rocksdb_cq_dir``); none there yet: an empty one (the broker creates it)."""
    path = os.path.join(store.root, store.inventory.rocksdb_cq_dir or "consumequeue")
    if not os.path.isfile(os.path.join(path, "CURRENT")):
        return RocksDBConsumeQueue(path, {}, 0)
    return read_consume_queue(path)


def read_consumer_offsets(path: str | os.PathLike[str]) -> dict[str, dict[int, int]]:
    """``topic@group`` -> {queueId: offset} of ``config/consumerOffsets`` (``decodeOffset``)."""
    path = os.fspath(path)
    out: dict[str, dict[int, int]] = {}
    with _open(path, "RocksDB consumer offsets") as (db, cfs):
        for key, value in db.get_column_family("default").items():
            name = key.decode("utf-8", "replace")
            try:
                doc = parse_fastjson(value.decode("utf-8"), path=path)
                table = doc.get("offsetTable") or {}
                out[name] = {int(q): int(o) for q, o in table.items()}
            except (ValueError, AttributeError, StoreReaderError) as exc:
                raise StoreReaderError(f"RocksDB consumer offsets: the value of key '{name}' is not "
                                       f"an offset table ({exc})", path) from exc
    return out


def unit_array(units: dict[int, tuple[int, int, int, int]], lo: int, hi: int) -> np.ndarray:
    """Units ``[lo, hi)`` as consume queue slots (``CQ_ENTRY_DTYPE``); a missing unit is a zero slot,
    which no recovery takes for an entry."""
    from store_reader.formats.consumequeue import CQ_ENTRY_DTYPE

    out = np.zeros(max(0, hi - lo), CQ_ENTRY_DTYPE)
    for i, off in enumerate(range(lo, hi)):
        u = units.get(off)
        if u is not None:
            out[i]["phy_offset"], out[i]["size"], out[i]["tags_code"] = u[0], u[1], u[2]
    return out


# RocksDB 8.4 (rocketmq-rocksdb 1.0.2, the 5.4.0 and 5.5.1 brokers' library) reads block-based
# tables up to format_version 5; rocksdict's newer RocksDB writes 6 by default, which the broker
# then refuses ("Corrupt or unsupported format_version: 6")
_BROKER_TABLE_FORMAT = 5


def _unit_key(topic: bytes, qid: int, offset: int) -> bytes:
    return struct.pack(">i", len(topic)) + bytes([_CTRL_1]) + topic + bytes([_CTRL_1]) + \
        struct.pack(">i", qid) + bytes([_CTRL_1]) + struct.pack(">q", offset)


def _offset_key(topic: bytes, kind: bytes, qid: int) -> bytes:
    return struct.pack(">i", len(topic)) + bytes([_CTRL_1]) + topic + bytes([_CTRL_1]) + kind + \
        bytes([_CTRL_1]) + struct.pack(">i", qid)


def write_consume_queue(src: str | None, dst: str, puts: dict[tuple[str, int], list[tuple[int, int, int, int, int]]],
                        max_keys: dict[tuple[str, int], tuple[int, int]], max_phy_offset: int) -> None:
    """A RocksDB consume queue at ``dst`` (a directory of the repaired store, never the input):
    the database files of ``src`` copied (None or no ``CURRENT``: a new database), then what the
    broker's restart writes: per queue the units its dispatch puts
    (``RocksDBConsumeQueueStore#putMessagePosition``: queue offset, phy, size, tags code, store
    timestamp), each queue's ``max`` key (phy, queue offset) as the puts and the truncation
    (``correctMaxCqOffset``) leave it, and ``CHECKPOINT_TOPIC`` = ``max_phy_offset`` (R§15.2)."""
    try:
        from rocksdict import BlockBasedOptions, Options, Rdict, WriteBatch
    except ImportError as exc:
        raise StoreReaderError("RocksDB consume queue: the rocksdict package is not installed", dst) from exc
    os.makedirs(dst, exist_ok=True)
    if src is not None and os.path.isfile(os.path.join(src, "CURRENT")):
        for name in os.listdir(src):
            if name not in _WRITTEN_BY_READER and os.path.isfile(os.path.join(src, name)):
                with open(os.path.join(src, name), "rb") as a, open(os.path.join(dst, name), "xb") as b:
                    while chunk := a.read(1 << 20):
                        b.write(chunk)

    def options() -> "Options":
        o = Options(raw_mode=True)
        table = BlockBasedOptions()
        table.set_format_version(_BROKER_TABLE_FORMAT)
        o.set_block_based_table_factory(table)
        o.create_if_missing(True)
        o.create_missing_column_families(True)
        return o

    try:
        db = Rdict(dst, options=options(), column_families={"default": options(), "offset": options()})
        try:
            default, offset = db.get_column_family_handle("default"), db.get_column_family_handle("offset")
            batch = WriteBatch(raw_mode=True)
            for (topic, qid), units in puts.items():
                t = topic.encode()
                for off, phy, size, tags, ts in units:
                    batch.put(_unit_key(t, qid, off), _UNIT.pack(phy, size, tags, ts), default)
            for (topic, qid), (phy, off) in max_keys.items():
                batch.put(_offset_key(topic.encode(), b"max", qid), _OFFSET.pack(phy, off), offset)
            batch.put(_offset_key(CHECKPOINT_TOPIC.encode(), b"max", 0), struct.pack(">q", max_phy_offset), offset)
            db.write(batch)
            db.flush()
        finally:
            db.close()
            del db              # the handle holds the database's LOCK until it is dropped
    except Exception as exc:       # rocksdict raises its own exception types
        raise OutputError(f"cannot write the RocksDB consume queue ({' '.join(str(exc).split())})", dst) from None
    finally:
        import gc

        gc.collect()
    try:
        os.remove(os.path.join(dst, "rocksdict-config.json"))
    except FileNotFoundError:
        pass
