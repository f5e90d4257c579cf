"""Spark Python Data Source ``rocketmq``: a broker store read as Spark tables.

    import store_reader
    store_reader.register(spark)
    spark.read.format("rocketmq").option("path", "/data/store").load()        # messages
    spark.read.format("rocketmq").options(path=..., table="consume_queue").load()
    CREATE TEMPORARY VIEW m USING rocketmq OPTIONS (path '/data/store')

Tables (option ``table``) and their schemas (``schemas.store``), one Spark partition per file:

    messages        MESSAGE               one per commitlog segment
    segments        SEGMENT               one per commitlog segment (its scan summary)
    consume_queue   CONSUME_QUEUE_ENTRY   one per consume queue file
    index           INDEX_ENTRY           one per index file
    checkpoint      CHECKPOINT            one (the checkpoint file)
    timer_log       TIMER_UNIT            one per timerlog file (5.x timer store; units as the
                                          broker's recovery walks them, in log order)

The driver only lists files (``open_store`` and the listing functions of ``consumequeue`` and
``indexfile``) and validates the options; every file is opened (a local commitlog segment mmapped)
inside ``read()`` on the executor, through the same ``store_reader`` functions a Spark-free caller
uses, so both see the same rows.

Pyspark 4.2's Python data sources are not told which columns a query needs (no column pruning), so
projection is an option: ``columns`` (comma-separated, kept in schema order) or a user-specified
schema, and for ``messages`` the ``body`` column is left out unless ``withBody=true`` or ``columns``
names it. The scanner then never touches body bytes, unless a CRC has to be computed (``verifyCrc``,
or ``computeCrc``, which defaults to on only when ``body_crc_ok`` / ``record_crc_ok`` is selected).

Filters Spark pushes (``spark.sql.python.filterPushdown.enabled``, which ``register`` turns on) are
applied in ``read()`` to every batch with Arrow compute, with SQL's null semantics, and prune whole
files whose offset range or key cannot match: phy offset ranges of segments, queue offset ranges and
(topic, queue id) of consume queue files, file names. Filters it cannot evaluate exactly
(comparisons on map, list or binary columns, values that do not fit the column type, ``IN`` with a
null) are left to Spark.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import (DataSource, DataSourceReader, EqualNullSafe, EqualTo, Filter,
                                    GreaterThan, GreaterThanOrEqual, In, InputPartition, IsNotNull,
                                    IsNull, LessThan, LessThanOrEqual, Not, StringContains,
                                    StringEndsWith, StringStartsWith)
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from schemas import CHECKPOINT, CONSUME_QUEUE_ENTRY, INDEX_ENTRY, MESSAGE, SEGMENT, TIMER_UNIT, RecordSchema

from store_reader.formats import consumequeue, indexfile, timerstore
from store_reader.formats.checkpoint import read_checkpoint
from store_reader.formats.commitlog import DEFAULT_BATCH_SIZE, SegmentScan, summaries_table, summarize_segment
from store_reader.exceptions import ConfigError
from store_reader.formats.mappedfile import MappedFile, file_name
from store_reader.formats.recordformat import ScanOptions
from store_reader.broker.versions import V5X, VERSIONS, is_5x, resolve_version
from store_reader.store import open_store

FORMAT_NAME = "rocketmq"
PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"

TABLES: dict[str, RecordSchema] = {
    "messages": MESSAGE,
    "segments": SEGMENT,
    "consume_queue": CONSUME_QUEUE_ENTRY,
    "index": INDEX_ENTRY,
    "checkpoint": CHECKPOINT,
    "timer_log": TIMER_UNIT,
}
# Columns whose values need CRCs computed over the bodies (computeCrc defaults to "selected").
CRC_COLUMNS = {"messages": {"body_crc_ok", "record_crc_ok"}, "segments": {"crc_failures"}}
# Options and the tables they apply to (None = every table).
OPTIONS: dict[str, set[str] | None] = {
    "path": None, "table": None, "brokerConfig": None, "brokerVersion": None, "columns": None,
    "withBody": {"messages"}, "verifyCrc": {"messages", "segments"},
    "computeCrc": {"messages", "segments"}, "includeLost": {"messages"}, "batchSize": {"messages"},
}


# -- options (validated on the driver) --------------------------------------------------------------

def normalized(options: Mapping[str, str]) -> dict[str, str]:
    """The options with lower-case keys (Spark's are case-insensitive)."""
    return {k.lower(): v for k, v in options.items()}


def _flag(options: Mapping[str, str], name: str) -> bool | None:
    raw = options.get(name.lower())
    if raw is None:
        return None
    low = str(raw).strip().lower()
    if low not in ("true", "false"):
        raise ConfigError(f"option {name}={raw!r} is not true/false")
    return low == "true"


def _table_name(options: Mapping[str, str]) -> str:
    table = str(options.get("table", "messages")).strip().lower()
    if table not in TABLES:
        raise ConfigError(f"option table={table!r} is not one of {sorted(TABLES)}")
    unknown = {k for k in options} - {o.lower() for o in OPTIONS}
    if unknown:
        raise ConfigError(f"unknown option(s) {sorted(unknown)}; the rocketmq source takes "
                          f"{sorted(OPTIONS)}")
    for name, tables in OPTIONS.items():
        if tables is not None and name.lower() in options and table not in tables:
            raise ConfigError(f"option {name} does not apply to table {table!r} (only {sorted(tables)})")
    return table


def _positive_int(options: Mapping[str, str], name: str, default: int) -> int:
    raw = options.get(name.lower(), default)
    try:
        value = int(raw)
    except (TypeError, ValueError):
        value = 0
    if value <= 0:
        raise ConfigError(f"option {name}={raw!r} must be a positive integer")
    return value


def declared_columns(options: Mapping[str, str]) -> tuple[str, RecordSchema, list[str]]:
    """(table, its record schema, the columns declared to Spark) from the options."""
    table = _table_name(options)
    schema = TABLES[table]
    raw = options.get("columns")
    if raw is not None:
        wanted = [c.strip() for c in str(raw).split(",") if c.strip()]
        if not wanted:
            raise ConfigError("option columns is empty")
        unknown = [c for c in wanted if c not in schema.names]
        if unknown:
            raise ConfigError(f"option columns: {schema.name} has no column(s) {unknown}; "
                              f"it has {schema.names}")
        columns = schema.project(wanted).names
    else:
        columns = [c for c in schema.names if c != "body"]
    with_body = _flag(options, "withBody")
    if with_body and "body" not in columns:
        columns = schema.project(columns + ["body"]).names
    elif with_body is False and "body" in columns:
        raise ConfigError("option columns names body but withBody=false")
    return table, schema, columns


# -- partitions: one per file, picklable, with the value range each key column can take ----------------

@dataclass(frozen=True)
class FilePartition(InputPartition):
    """One file to read on an executor.

    ``path`` is what ``store_reader`` handed out for the file (a local path, or a picklable
    location on a remote filesystem). ``bounds`` gives, for the columns whose values are known from
    the file's name or place alone, the inclusive (lowest, highest) value any row of this file can
    have; filters prune with it.
    """

    path: Any
    name: str
    bounds: tuple[tuple[str, Any, Any], ...] = ()


@dataclass(frozen=True)
class SegmentPartition(FilePartition):
    """A commitlog segment: its phy offsets lie in [start, start + size)."""

    start: int = 0


@dataclass(frozen=True)
class QueueFilePartition(FilePartition):
    """A consume queue file of queue (topic, queue id), starting at logic offset ``start``."""

    queue_dir: Any = None
    topic: str = ""
    queue_id: int = 0
    start: int = 0
    size: int = 0


def _segment_partitions(store: Any, key_columns: tuple[str, ...]) -> list[FilePartition]:
    out: list[FilePartition] = []
    for f in store.commitlog_files:
        known = {"phy_offset": (f.start, f.start + f.size - 1), "file_start": (f.start, f.start),
                 "segment": (f.name, f.name), "path": (str(f.path), str(f.path))}
        out.append(SegmentPartition(f.path, f.name, tuple((c, *known[c]) for c in key_columns), f.start))
    return out


def _queue_file_partitions(store: Any, broker_5x: bool) -> list[FilePartition]:
    cq_file_size = store.config.cq_file_size
    out: list[FilePartition] = []
    for ref in consumequeue.list_queues(store.root):
        for f in consumequeue.list_queue_files(ref.path, cq_file_size, rocketmq5=broker_5x):
            unit = consumequeue.CQ_STORE_UNIT_SIZE
            bounds = (("topic", ref.topic, ref.topic), ("queue_id", ref.queue_id, ref.queue_id),
                      ("queue_offset", f.start // unit, (f.start + f.size) // unit - 1),
                      ("file", f.name, f.name))
            out.append(QueueFilePartition(f.path, f.name, bounds, ref.path, ref.topic, ref.queue_id,
                                          f.start, f.size))
    return out


def _index_partitions(store: Any) -> list[FilePartition]:
    # strict=False: the files IndexService#load would load (it skips names Long.parseLong rejects)
    refs = indexfile.list_index_files(store.index_dir, store.config.index_file_size, strict=False)
    return [FilePartition(r.path, r.name, (("file", r.name, r.name),)) for r in refs]


def _timerlog_partitions(store: Any) -> list[FilePartition]:
    if not isinstance(store.root, Path):
        raise ConfigError("table timer_log reads a local store only", str(store.root))
    size = store.config.mappedFileSizeTimerLog
    return [FilePartition(path, file_name(base), (("pos", base, base + size - 1), ("file", file_name(base), file_name(base))))
            for base, path in timerstore.timerlog_files(str(store.root / timerstore.TIMERLOG_DIR))]


# -- filters: which ones are exact here, per-row masks, per-file pruning ---------------------------------

_COMPARISONS: dict[type, Callable[..., Any]] = {
    EqualTo: pc.equal, GreaterThan: pc.greater, GreaterThanOrEqual: pc.greater_equal,
    LessThan: pc.less, LessThanOrEqual: pc.less_equal,
}
_STRING_MATCHES: dict[type, Callable[..., Any]] = {
    StringStartsWith: pc.starts_with, StringEndsWith: pc.ends_with, StringContains: pc.match_substring,
}


def _attribute(f: Filter) -> str | None:
    while isinstance(f, Not):
        f = f.child
    attr = getattr(f, "attribute", None)
    return attr[0] if attr is not None and len(attr) == 1 else None


def _fits(value: Any, t: pa.DataType) -> bool:
    """Can ``value`` be compared with a column of type ``t`` exactly (no Spark-side cast)?"""
    if value is None or isinstance(value, bool) != pa.types.is_boolean(t):
        return False
    try:
        pa.scalar(value, type=t)
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        return False
    return True


def exact_filter(f: Filter, types: Mapping[str, pa.DataType]) -> bool:
    """True if ``row_mask`` evaluates ``f`` exactly as Spark would (so Spark may drop it)."""
    if isinstance(f, Not):
        return exact_filter(f.child, types)
    name = _attribute(f)
    if name not in types:
        return False
    t = types[name]
    if isinstance(f, (IsNull, IsNotNull)):
        return True
    scalar = pa.types.is_integer(t) or pa.types.is_boolean(t) or pa.types.is_string(t)
    if isinstance(f, EqualNullSafe):
        return scalar and (f.value is None or _fits(f.value, t))
    if type(f) in _COMPARISONS:
        return scalar and _fits(f.value, t)
    if isinstance(f, In):
        return scalar and len(f.value) > 0 and all(_fits(v, t) for v in f.value)
    if type(f) in _STRING_MATCHES:
        return pa.types.is_string(t) and isinstance(f.value, str)
    return False


def row_mask(f: Filter, batch: pa.RecordBatch) -> pa.Array:
    """Boolean mask of ``f`` over ``batch``: null where SQL gives null (a filter drops those rows)."""
    if isinstance(f, Not):
        return pc.invert(row_mask(f.child, batch))
    col = batch.column(f.attribute[0])
    if isinstance(f, IsNull):
        return pc.is_null(col)
    if isinstance(f, IsNotNull):
        return pc.is_valid(col)
    if isinstance(f, EqualNullSafe):
        if f.value is None:
            return pc.is_null(col)
        return pc.fill_null(pc.equal(col, pa.scalar(f.value, col.type)), False)
    if isinstance(f, In):
        hit = pc.is_in(col, value_set=pa.array(list(f.value), col.type))
        return pc.if_else(pc.is_valid(col), hit, pa.scalar(None, pa.bool_()))   # null IN (..) is null
    if type(f) in _STRING_MATCHES:
        return _STRING_MATCHES[type(f)](col, pattern=f.value)
    return _COMPARISONS[type(f)](col, pa.scalar(f.value, col.type))


def may_match(f: Filter, bounds: Mapping[str, tuple[Any, Any]]) -> bool:
    """False only if no row whose key columns lie within ``bounds`` can satisfy ``f``.

    The key columns are never null. A single known value (a file's topic, name, ...) is tested
    exactly; a range only by the comparison kinds, and anything else may match.
    """
    name = _attribute(f)
    if name not in bounds:
        return True
    lo, hi = bounds[name]
    if lo == hi:
        return row_mask(f, pa.record_batch([pa.array([lo])], names=[name]))[0].as_py() is True
    if isinstance(f, IsNull):
        return False
    if isinstance(f, (EqualTo, EqualNullSafe)):
        return f.value is not None and lo <= f.value <= hi
    if isinstance(f, In):
        return any(lo <= v <= hi for v in f.value)
    if isinstance(f, GreaterThan):
        return hi > f.value
    if isinstance(f, GreaterThanOrEqual):
        return hi >= f.value
    if isinstance(f, LessThan):
        return lo < f.value
    if isinstance(f, LessThanOrEqual):
        return lo <= f.value
    return True


# -- the reader ---------------------------------------------------------------------------------------

class RocketMQReader(DataSourceReader):
    """Plans one partition per file on the driver and reads one file per ``read()`` call.

    Parameters
    ----------
    options
        The data source options (case-insensitive).
    schema
        The schema Spark asks for: the declared one, or a user-specified projection of the table's
        columns (any order; nullability may be looser than declared).
    """

    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        options = normalized(options)
        # 1. what to produce: the requested columns, as Spark's exact Arrow rendering of them
        self.table, record_schema, _ = declared_columns(options)
        self.columns = _requested_columns(record_schema, schema)
        self.arrow_schema: pa.Schema = to_arrow_schema(schema, timezone="UTC")
        self.column_types = {f.name: f.type for f in record_schema.arrow(self.columns)}
        # 2. the store and how to read it (the broker's settings unless an option overrides them)
        if "path" not in options:
            raise ConfigError("option path (the store root) is required")
        store = open_store(options["path"], options.get("brokerconfig"), read_dledger=True)
        self.config = store.config
        version = options.get("brokerversion")
        try:
            self.broker_5x = store.looks_5x() if version is None else is_5x(resolve_version(version))
        except ValueError:
            raise ConfigError(f"option brokerVersion={version!r} is not one of "
                              f"{', '.join(VERSIONS + (V5X,))}") from None
        compute = _flag(options, "computeCrc")
        if compute is None:       # CRCs cost a pass over every body: only when a column shows them
            compute = bool(CRC_COLUMNS.get(self.table, set()) & set(self.columns))
        self.scan_options: ScanOptions = store.scan_options(broker_5x=self.broker_5x, compute_crc=compute)
        verify = _flag(options, "verifyCrc")
        if verify is not None:
            self.scan_options = dataclasses.replace(self.scan_options, check_crc=verify)
        self.include_lost = bool(_flag(options, "includeLost"))
        self.batch_size = _positive_int(options, "batchSize", DEFAULT_BATCH_SIZE)
        # 3. one partition per file; pushFilters may add filters before partitions() is asked
        self.filters: list[Filter] = []
        self.planned = self._plan(store)

    def _plan(self, store: Any) -> list[FilePartition]:
        if self.table in ("messages", "segments"):
            keys = ("phy_offset",) if self.table == "messages" else ("file_start", "segment", "path")
            return _segment_partitions(store, keys)
        if self.table == "consume_queue":
            return _queue_file_partitions(store, self.broker_5x)
        if self.table == "index":
            return _index_partitions(store)
        if self.table == "timer_log":
            return _timerlog_partitions(store)
        return [FilePartition(store.checkpoint_path, "checkpoint")]

    def partitions(self) -> list[InputPartition]:
        """The planned files whose key ranges can satisfy every pushed filter."""
        return [p for p in self.planned
                if all(may_match(f, {c: (lo, hi) for c, lo, hi in p.bounds}) for f in self.filters)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, FilePartition):
            return  # Spark's stand-in partition when every file was pruned
        for batch in self._batches(partition):
            for f in self.filters:
                batch = batch.filter(row_mask(f, batch))
            if batch.num_rows:
                yield self._conform(batch)

    def _batches(self, p: FilePartition) -> Iterator[pa.RecordBatch]:
        if self.table == "messages":
            assert isinstance(p, SegmentPartition)
            yield from SegmentScan(p.path, self.scan_options, columns=self.columns,
                                   batch_size=self.batch_size, include_lost=self.include_lost,
                                   file_start=p.start)
            return
        if self.table == "segments":
            table = summaries_table([summarize_segment(p.path, self.scan_options)])
        elif self.table == "consume_queue":
            assert isinstance(p, QueueFilePartition)
            f = MappedFile(p.path, p.name, p.start, p.size)
            table = consumequeue.read_queue(p.queue_dir, p.topic, p.queue_id, self.config.cq_file_size,
                                            files=[f])
        elif self.table == "index":
            table = indexfile.read_entries(p.path, self.config.maxHashSlotNum, self.config.maxIndexNum)
        elif self.table == "timer_log":
            table = timerstore.units_table(timerstore.scan_timerlog_file(p.path, self.config.mappedFileSizeTimerLog))
        else:
            table = read_checkpoint(p.path).to_table(rocketmq5=self.broker_5x)
        yield from table.select(self.columns).to_batches()

    def _conform(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """The batch in the requested column order and Spark's exact Arrow rendering of its types
        (down to the list item name: Spark's is ``element``, pyarrow's default ``item``)."""
        batch = batch.select(self.arrow_schema.names)
        if batch.schema.equals(self.arrow_schema, check_metadata=True):
            return batch
        return batch.cast(self.arrow_schema)


class RocketMQFilteringReader(RocketMQReader):
    """The reader with filter pushdown (Spark calls ``pushFilters`` before ``partitions``)."""

    def pushFilters(self, filters: list[Filter]) -> list[Filter]:
        """Keep the filters this reader evaluates exactly; return the rest for Spark."""
        rest = []
        for f in filters:
            if exact_filter(f, self.column_types):
                self.filters.append(f)
            else:
                rest.append(f)
        return rest


def _requested_columns(record_schema: RecordSchema, schema: StructType) -> list[str]:
    """The table columns Spark asks for, checked against the table's own types."""
    own = record_schema.spark()
    names = set(own.fieldNames())
    out = []
    for field in schema.fields:
        if field.name not in names:
            raise ConfigError(f"{record_schema.name} has no column {field.name!r}; it has {own.fieldNames()}")
        want = own[field.name].dataType.simpleString()
        if field.dataType.simpleString() != want:
            raise ConfigError(f"column {field.name} is {want} in {record_schema.name}, "
                              f"not {field.dataType.simpleString()}")
        out.append(field.name)
    return out


# -- the data source -------------------------------------------------------------------------------

class RocketMQDataSource(DataSource):
    """``spark.read.format("rocketmq")``: see the module docstring for tables and options."""

    filter_pushdown = True

    @classmethod
    def name(cls) -> str:
        return FORMAT_NAME

    def schema(self) -> StructType:
        _, record_schema, columns = declared_columns(normalized(self.options))
        return record_schema.spark(columns)

    def reader(self, schema: StructType) -> DataSourceReader:
        cls = RocketMQFilteringReader if self.filter_pushdown else RocketMQReader
        return cls(self.options, schema)


class RocketMQDataSourceNoPushdown(RocketMQDataSource):
    """The same source for sessions that keep Python filter pushdown off: Spark filters rows itself."""

    filter_pushdown = False


def register(spark: Any, filter_pushdown: bool = True) -> None:
    """Register the ``rocketmq`` data source with ``spark`` (usable from SQL too).

    Parameters
    ----------
    spark
        The SparkSession.
    filter_pushdown
        True turns on ``spark.sql.python.filterPushdown.enabled`` for the session (off by default in
        Spark) so filters prune files and rows in the reader. False leaves the session setting
        alone and registers a reader without ``pushFilters``: every file is read and Spark filters
        the rows itself. (Spark refuses a reader with ``pushFilters`` while the setting is off,
        DATA_SOURCE_PUSHDOWN_DISABLED: after turning it off, register again with False.)
    """
    if filter_pushdown:
        spark.conf.set(PUSHDOWN_CONF, "true")
    spark.dataSource.register(RocketMQDataSource if filter_pushdown else RocketMQDataSourceNoPushdown)


__all__ = ["FORMAT_NAME", "TABLES", "OPTIONS", "FilePartition", "SegmentPartition", "QueueFilePartition",
           "RocketMQDataSource", "RocketMQDataSourceNoPushdown", "RocketMQReader",
           "RocketMQFilteringReader", "declared_columns", "exact_filter", "row_mask", "may_match",
           "register"]
