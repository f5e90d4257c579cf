"""Broker config JSON files (``<root>/config/*.json``): typed readers over the fastjson text (``fastjson``).

Spec ``store-format.md`` §10 (shapes, persistence and fallback), ``edge-cases.md`` E#36,
``recovery.md`` §9 (what consumer offsets mean).

:func:`rewrite_consumer_offsets` changes committed offsets in place, written back with
``fastjson.to_fastjson`` (a file read and written again unchanged keeps its bytes).

Every typed reader applies the broker's ``ConfigManager#load`` order: ``<f>``; if missing, empty or
undecodable, ``<f>.bak``; a missing/empty ``.bak`` is an empty table; an undecodable ``.bak`` makes the
broker fail to start (:class:`ConfigError` here). A ``<f>.tmp`` left by a 4.9.7 crash mid-persist is
never read by the broker; it is reported.

Files are read through ``storefs``: a store root on a remote filesystem works like a local one.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any, Callable, Generic, TypeVar

import pyarrow as pa

from schemas.store import CONSUMER_OFFSET

from store_reader.exceptions import ConfigError
from store_reader.formats.fastjson import parse_fastjson, to_fastjson
from store_reader.io.storefs import PathRef, StoreLocation, location

__all__ = [
    "CONSUMER_OFFSET_FILES",
    "CONSUMER_OFFSET_GENERATIONS",
    "CONSUMER_OFFSET_SCHEMA",
    "ConfigLoad",
    "rewrite_consumer_offsets",
    "load_config",
    "read_consumer_offsets",
    "read_rocksdb_consumer_offsets",
    "ROCKSDB_CONSUMER_OFFSETS",
    "read_lmq_consumer_offsets",
    "read_delay_offsets",
    "read_topics",
    "read_subscription_groups",
]

T = TypeVar("T")

CONSUMER_OFFSET_SCHEMA = CONSUMER_OFFSET.arrow()

# -- fallback loading (ConfigManager#load) -----------------------------------------------------

@dataclass(frozen=True)
class ConfigLoad(Generic[T]):
    """What loading one config file gave, and from which generation.

    Attributes
    ----------
    path
        ``<f>`` (the file the broker loads first). Paths are ``storefs.StoreLocation`` values for a
        remote store.
    value
        The decoded content (empty table/dict when neither generation had data).
    generation
        ``"current"`` (``<f>``), ``"bak"`` (``<f>.bak``) or ``"empty"`` (neither had content).
    used_path
        The file the value came from, None for ``"empty"``.
    skipped_reason
        Why ``<f>`` was not used (missing, empty, or the decode error), None when it was.
    tmp_path
        A leftover ``<f>.tmp`` (4.9.7 crash during persist), never read by the broker; None if absent.
    """

    path: str | StoreLocation
    value: T
    generation: str
    used_path: str | StoreLocation | None
    skipped_reason: str | None
    tmp_path: str | StoreLocation | None


def _read_text(loc: StoreLocation) -> str | None:
    """``MixAll#file2String``: None when missing; bytes decoded as UTF-8, malformed -> U+FFFD."""
    try:
        return loc.read_bytes().decode("utf-8", errors="replace")
    except FileNotFoundError:
        return None
    except IsADirectoryError:
        raise ConfigError("is a directory, not a config file", str(loc)) from None
    except OSError as exc:
        raise ConfigError(f"cannot read config file: {exc.strerror}", str(loc)) from None


def load_config(path: PathRef, decode: Callable[[Any, str], T],
                empty: Callable[[], T]) -> ConfigLoad[T]:
    """Load ``path`` with the broker's fallback order.

    Parameters
    ----------
    path
        ``<f>`` (local path, ``storefs.StoreLocation`` or URI).
    decode
        Turns the parsed document (never None) into the typed value; raises :class:`ConfigError` for a
        shape fastjson would reject (then the next generation is tried).
    empty
        Factory for the empty value.

    Raises
    ------
    ConfigError
        ``<f>.bak`` is needed and cannot be read or decoded (the broker refuses to start).
    """
    loc = location(path)
    tmp = loc.suffixed(".tmp")
    try:
        tmp_path = tmp.ref if tmp.exists(follow_symlinks=False) else None
    except OSError as exc:
        raise ConfigError(f"cannot look for a leftover temporary file: {exc.strerror}", str(tmp)) from None

    def attempt(p: StoreLocation, text: str) -> T:
        doc = parse_fastjson(text, path=str(p))
        return empty() if doc is None else decode(doc, str(p))

    reason: str | None
    try:
        text = _read_text(loc)
    except ConfigError as exc:
        text, reason = None, exc.reason
    else:
        reason = "missing" if text is None else ("empty" if text == "" else None)
    if text:
        try:
            return ConfigLoad(loc.ref, attempt(loc, text), "current", loc.ref, None, tmp_path)
        except ConfigError as exc:
            reason = str(exc)
    bak = loc.suffixed(".bak")
    bak_text = _read_text(bak)  # unreadable .bak: ConfigError (the broker's loadBak returns false)
    if not bak_text:
        return ConfigLoad(loc.ref, empty(), "empty", None, reason, tmp_path)
    return ConfigLoad(loc.ref, attempt(bak, bak_text), "bak", bak.ref, reason, tmp_path)


# -- typed readers ------------------------------------------------------------------------------

def _java_int(v: Any, what: str, p: str, bits: int = 32) -> int:
    """A value fastjson would convert to Integer/Long (ints, integral numbers, numeric strings)."""
    if isinstance(v, bool):
        raise ConfigError(f"{what}: {v!r} is not a number", p)
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    if isinstance(v, str) and re.fullmatch(r"\s*[+-]?[0-9]+\s*", v):
        v = int(v)
    if not isinstance(v, int) or not -(1 << (bits - 1)) <= v < (1 << (bits - 1)):
        raise ConfigError(f"{what}: {v!r} is not a {bits}-bit integer", p)
    return v


def _mapping(doc: Any, key: str, p: str, *, required: bool = False) -> dict:
    if not isinstance(doc, dict):
        raise ConfigError(f"top level is {type(doc).__name__}, expected an object", p)
    v = doc.get(key)
    if v is None:
        if required:
            raise ConfigError(f"no {key!r} object", p)
        return {}
    if not isinstance(v, dict):
        raise ConfigError(f"{key!r} is {type(v).__name__}, expected an object", p)
    return v


def _split_topic_group(key: Any) -> tuple[str, str | None]:
    key = str(key)
    topic, sep, group = key.partition("@")
    return (topic, group) if sep else (key, None)


def _offset_slots(doc: Any, p: str, *, lmq: bool) -> list[tuple[dict, Any, str, str | None, int, int, bool]]:
    """Every committed offset of a decoded offset file: (the map holding it, its key there, topic,
    group, queue id, offset, from ``lmqOffsetTable``), in the file's order."""
    slots: list[tuple[dict, Any, str, str | None, int, int, bool]] = []
    for tg, queues in _mapping(doc, "offsetTable", p).items():
        if queues is None:
            continue
        if not isinstance(queues, dict):
            raise ConfigError(f"offsetTable[{tg!r}] is {type(queues).__name__}, expected an object", p)
        topic, group = _split_topic_group(tg)
        for qid, off in queues.items():
            slots.append((queues, qid, topic, group, _java_int(qid, f"queue id of {tg!r}", p),
                          _java_int(off, f"offset of {tg!r} queue {qid}", p, 64), False))
    if lmq:
        # lmqOffsetTable: "<lmqTopic>@<lmqGroup>" -> offset; LMQ queues are always queue 0
        table = _mapping(doc, "lmqOffsetTable", p)
        for tg, off in table.items():
            topic, group = _split_topic_group(tg)
            slots.append((table, tg, topic, group, 0, _java_int(off, f"lmq offset of {tg!r}", p, 64), True))
    return slots


def _offset_rows(doc: Any, p: str, *, lmq: bool) -> pa.Table:
    rows = [s[2:] for s in _offset_slots(doc, p, lmq=lmq)]
    rows.sort(key=lambda r: (r[0], r[1] or "", r[2], r[4]))
    cols = list(zip(*rows)) if rows else [[], [], [], [], []]
    return pa.table([pa.array(c, type=f.type) for c, f in zip(cols, CONSUMER_OFFSET_SCHEMA)],
                    schema=CONSUMER_OFFSET_SCHEMA)


def _config_file(path: PathRef, default_name: str) -> StoreLocation:
    """``path`` itself, or ``<root>/config/<default_name>`` when ``path`` is a store root directory."""
    loc = location(path)
    try:
        return loc / "config" / default_name if loc.is_dir() else loc
    except OSError as exc:
        raise ConfigError(f"cannot look at the config path: {exc.strerror}", str(loc)) from None


# ConfigManager's generations of the committed offsets: the broker reads <f>, else <f>.bak (R§9.1);
# the plain ones, then the LMQ ones
CONSUMER_OFFSET_GENERATIONS = ("consumerOffset.json", "consumerOffset.json.bak")
CONSUMER_OFFSET_FILES = CONSUMER_OFFSET_GENERATIONS + ("lmqConsumerOffset.json", "lmqConsumerOffset.json.bak")


# where storeType=defaultRocksDB keeps them: config/consumerOffsets (RocksDBConsumerOffsetManager)
ROCKSDB_CONSUMER_OFFSETS = "consumerOffsets (RocksDB)"


def read_rocksdb_consumer_offsets(path: PathRef) -> pa.Table:
    """``config/consumerOffsets`` (``rocksdbcq.read_consumer_offsets``) as ``read_consumer_offsets``'
    table."""
    from store_reader.formats.rocksdbcq import read_consumer_offsets as read_db

    return _offset_rows({"offsetTable": read_db(path)}, str(path), lmq=False)


def read_consumer_offsets(path: PathRef) -> ConfigLoad[pa.Table]:
    """``consumerOffset.json`` -> table (topic, group, queue_id, offset, lmq=False), sorted.

    ``offsetTable`` keys ``<topic>@<group>`` are split on the first ``@`` (names cannot contain one);
    a key without ``@`` keeps the whole key as topic and a null group. Other top-level fields
    (``dataVersion``, 5.x getter-derived keys) are ignored.
    """
    return load_config(_config_file(path, CONSUMER_OFFSET_GENERATIONS[0]),
                       lambda doc, p: _offset_rows(doc, p, lmq=False),
                       lambda: CONSUMER_OFFSET_SCHEMA.empty_table())


def rewrite_consumer_offsets(path: str | os.PathLike[str],
                             move: Callable[[str, str | None, int, int], int], *, lmq: bool = False
                             ) -> list[tuple[str, str | None, int, int, int]] | None:
    """Set each committed offset of the local file ``path`` (``offsetTable``; with ``lmq``, as
    ``lmqConsumerOffset.json`` is read, ``lmqOffsetTable`` at queue 0 too) to
    ``move(topic, group, queue id, offset)``.

    Every other field, and the order of everything, stays; the file is written in the broker's form
    only when an offset changed. Returns the changed ones as ``(topic, group, queue id, old, new)``,
    or None when the file does not decode as the broker's reader would (it is left as it is: the
    broker passes over it the same way)."""
    p = str(path)
    with open(p, encoding="utf-8", errors="replace") as fh:
        text = fh.read()
    try:
        doc = parse_fastjson(text, path=p)
        slots = [] if doc is None else _offset_slots(doc, p, lmq=lmq)
    except ConfigError:
        return None
    changed = []
    for table, key, topic, group, qid, old, _ in slots:
        new = move(topic, group, qid, old)
        if new != old:
            table[key] = new
            changed.append((topic, group, qid, old, new))
    if changed:
        with open(p, "w", encoding="utf-8") as fh:
            fh.write(to_fastjson(doc))
    return changed


def read_lmq_consumer_offsets(path: PathRef) -> ConfigLoad[pa.Table]:
    """``lmqConsumerOffset.json`` -> ``offsetTable`` rows plus ``lmqOffsetTable`` rows (queue 0, lmq=True)."""
    return load_config(_config_file(path, "lmqConsumerOffset.json"),
                       lambda doc, p: _offset_rows(doc, p, lmq=True),
                       lambda: CONSUMER_OFFSET_SCHEMA.empty_table())


def read_delay_offsets(path: PathRef) -> ConfigLoad[dict[int, int]]:
    """``delayOffset.json`` -> {delay level (1..18): next offset of SCHEDULE_TOPIC_XXXX queue level-1}."""
    def decode(doc: Any, p: str) -> dict[int, int]:
        return {_java_int(k, "delay level", p): _java_int(v, f"offset of level {k}", p, 64)
                for k, v in _mapping(doc, "offsetTable", p).items()}
    return load_config(_config_file(path, "delayOffset.json"), decode, dict)


def _named_table(key: str) -> Callable[[Any, str], dict[str, dict]]:
    def decode(doc: Any, p: str) -> dict[str, dict]:
        out = {}
        for name, conf in _mapping(doc, key, p).items():
            if conf is not None and not isinstance(conf, dict):
                raise ConfigError(f"{key}[{name!r}] is {type(conf).__name__}, expected an object", p)
            out[str(name)] = conf or {}
        return out
    return decode


def read_topics(path: PathRef) -> ConfigLoad[dict[str, dict]]:
    """``topics.json`` -> {topic: its TopicConfig fields as parsed (readQueueNums, perm, ...)}."""
    return load_config(_config_file(path, "topics.json"), _named_table("topicConfigTable"), dict)


def read_subscription_groups(path: PathRef) -> ConfigLoad[dict[str, dict]]:
    """``subscriptionGroup.json`` -> {group: its SubscriptionGroupConfig fields as parsed}."""
    return load_config(_config_file(path, "subscriptionGroup.json"), _named_table("subscriptionGroupTable"),
                       dict)
