"""Audit rows to Delta tables, keyed by ``run_id``: a re-run replaces its rows, never duplicates them.

With delta-spark on the session's classpath (cluster, ``spark-conf/delta.conf``) Spark writes the
table itself (``replaceWhere run_id = ...``). Without it, the embedded default on machines that
cannot fetch the delta-spark jars, the rows (audit tables are small: findings are range-encoded) are
collected as Arrow and delta-rs commits them in one transaction that deletes the run's old rows and
adds the new ones (``predicate`` overwrite). Either way the result is a standard Delta table that
Spark, delta-rs, DuckDB and Polars read.
"""
from __future__ import annotations

import logging
import re
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Mapping

import pyarrow as pa

from store_reader.exceptions import OutputError, StoreReaderError

log = logging.getLogger("jobs.deltasink")

# Tables committed at a time by ``write_tables``.
WRITE_THREADS = 4
# About the bytes of rows in a Parquet row group delta-rs writes: it holds a row group in memory
# (encoded and not) until it is written, so rows of lost message bodies in groups of the default
# million rows would take several times the table's own size.
ROW_GROUP_BYTES = 16 << 20


_HAS_DELTA: dict[str, bool] = {}


def has_delta(spark) -> bool:
    """True when delta-spark's classes are on the session's classpath (asked once per Spark
    application: a failed class lookup through py4j is slow, and every audit table asks)."""
    app = spark.sparkContext.applicationId
    if app not in _HAS_DELTA:
        try:
            spark.sparkContext._jvm.java.lang.Class.forName("io.delta.tables.DeltaTable")
            _HAS_DELTA[app] = True
        except Exception:  # py4j raises its own error type for ClassNotFoundException
            _HAS_DELTA[app] = False
    return _HAS_DELTA[app]


def _quote(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def write_run_rows(table_uri: str, rows: pa.Table, run_id: str, spark=None,
                   storage_options: dict[str, str] | None = None) -> None:
    """Replace the rows of ``run_id`` in the Delta table at ``table_uri`` by ``rows`` (created on
    first use). ``rows`` must carry a ``run_id`` column equal to ``run_id`` everywhere."""
    import pyarrow.compute as pc

    if rows.num_rows and not pc.all(pc.equal(rows["run_id"], run_id)).as_py():
        raise ValueError(f"rows of another run in a write for run {run_id}")
    predicate = f"run_id = {_quote(run_id)}"
    if spark is not None and has_delta(spark):
        (spark.createDataFrame(rows).write.format("delta").mode("overwrite")
         .option("replaceWhere", predicate).option("mergeSchema", "true").save(table_uri))
        return
    from deltalake import DeltaTable, WriterProperties, write_deltalake
    from deltalake.exceptions import DeltaError

    row_bytes = max(1, rows.nbytes // max(1, rows.num_rows))
    props = WriterProperties(max_row_group_size=max(1024, min(1 << 20, ROW_GROUP_BYTES // row_bytes)))
    try:
        DeltaTable(table_uri, storage_options=storage_options)
        exists = True
    except Exception:  # deltalake raises TableNotFoundError (a subclass varies by version)
        exists = False
    try:
        if exists:      # merge: tables written before a column was added take it (null in old rows)
            write_deltalake(table_uri, rows, mode="overwrite", predicate=predicate, schema_mode="merge",
                            storage_options=storage_options, writer_properties=props)
        else:
            write_deltalake(table_uri, rows, mode="append", storage_options=storage_options,
                            writer_properties=props)
    except (OSError, DeltaError) as exc:    # the filesystem's or object store's answer, on one line
        raise OutputError(f"cannot write the Delta table: {delta_reason(exc)}", table_uri) from None


def delta_reason(exc: BaseException) -> str:
    """delta-rs' error as one line: its message without the Rust backtrace it appends (numbered
    frames, ``at file:line``) or the terminal colours."""
    lines = [line for line in str(exc).splitlines()
             if not re.match(r"\s*(\d+: |at \S+:\d+|Stack backtrace:|Backtrace:)", line)]
    reason = " ".join(re.sub(r"\x1b\[[0-9;]*m|↳", " ", " ".join(lines)).split())
    return reason[:500]


def warm_up(spark=None) -> None:
    """Initialise delta-rs in this process (its runtime and writer, set up at the first write of a
    process whatever the rows) with a throwaway one-row table in memory, so that the audit
    tables' commit does not wait for it; meant for a side thread while the run's other passes go
    on. Nothing to do when Spark writes the tables (delta-spark on the classpath)."""
    if spark is not None and has_delta(spark):
        return
    from deltalake import write_deltalake

    try:
        write_deltalake("memory:///warm-up", pa.table({"run_id": ["warm-up"]}), mode="overwrite")
    except Exception as exc:  # only a lost head start: the real write initialises it anyway
        log.debug("delta-rs warm-up failed: %s", exc)


def table_uri(audit_path: str, name: str) -> str:
    return audit_path.rstrip("/") + "/" + name


def write_tables(audit_path: str, tables: Mapping[str, pa.Table], run_id: str, spark=None,
                 storage_options: dict[str, str] | None = None,
                 written: Mapping[str, Future] | None = None) -> list[str]:
    """Each table to ``<audit_path>/<name>`` (``write_run_rows``), the tables side by side (each
    commit is mostly waiting on its log and files; delta-rs and Spark release the GIL), and
    ``runs`` last, once every other table is committed: a run row exists only when all its
    findings do. ``written``: the tables whose writes were started earlier (their futures), which
    are waited for, not written again. Returns the table URIs, ``runs`` last. If a write fails,
    the others still finish and the first failure is raised (without writing ``runs``)."""
    uri = {name: table_uri(audit_path, name) for name in tables}
    names = [name for name in tables if name != "runs"]
    earlier = dict(written or {})
    if names:
        with ThreadPoolExecutor(max_workers=min(len(names), WRITE_THREADS)) as pool:
            writes = [earlier[name] if name in earlier else
                      pool.submit(write_run_rows, uri[name], tables[name], run_id, spark, storage_options)
                      for name in names]
            wait(writes)
        for w in writes:
            w.result()
    if "runs" in tables:
        write_run_rows(uri["runs"], tables["runs"], run_id, spark, storage_options)
        names.append("runs")
    return [uri[name] for name in names]


def read_table(table_uri: str, storage_options: dict[str, str] | None = None) -> pa.Table:
    """The Delta table at ``table_uri`` (``TableNotFoundError`` when there is none; a
    ``StoreReaderError`` naming it when it cannot be read). A table on
    object storage is read through ``pyarrow.fs`` (configured like a remote store, see
    ``store_reader.storefs``): delta-rs's own filesystem handler for pyarrow may abort the
    process as it exits (SIGABRT, "terminate called without an active exception")."""
    import pyarrow.fs as pafs
    from deltalake import DeltaTable
    from deltalake.exceptions import DeltaError, TableNotFoundError

    try:
        table = DeltaTable(table_uri, storage_options=storage_options)
        filesystem = None
        if "://" in table_uri and not table_uri.startswith("file://"):
            fs, path = pafs.FileSystem.from_uri(table_uri)
            filesystem = pafs.SubTreeFileSystem(path, fs)
        return table.to_pyarrow_table(filesystem=filesystem)
    except TableNotFoundError:
        raise
    except (OSError, DeltaError) as exc:     # a damaged log (a commit missing or cut short), ...
        raise StoreReaderError(f"the audit table cannot be read: {delta_reason(exc)}; repair it or "
                               "move it away", table_uri) from None


def store_id_for(root: str) -> str:
    """The ``store_id`` of the audit tables: the store root as an absolute path (or the URI as given
    for remote stores), so every run over the same store finds the same history."""
    import os

    return root if "://" in root else os.path.abspath(root)


def audit_rows(schema, rows, run_id: str, store_id: str, audited_at) -> pa.Table:
    """``rows`` (a list of dicts or an Arrow table without the run keys) as a table of ``schema``
    (a ``schemas.audit`` RecordSchema), the run keys filled in. Missing nullable columns are null."""
    target = schema.arrow()
    if isinstance(rows, pa.Table):
        n = rows.num_rows
        cols = {name: rows.column(name) for name in rows.column_names}
    else:
        n = len(rows)
        present = set().union(*(r.keys() for r in rows)) if rows else set()
        cols = {name: [r.get(name) for r in rows] for name in target.names if name in present}
    keys = {"run_id": [run_id] * n, "store_id": [store_id] * n, "audited_at": [audited_at] * n}
    arrays = []
    for f in target:
        data = keys.get(f.name, cols.get(f.name))
        if data is None:
            if not f.nullable and n:
                raise ValueError(f"{schema.name}: column {f.name!r} is required")
            data = pa.nulls(n, f.type)
        arrays.append(data if isinstance(data, (pa.Array, pa.ChunkedArray)) and data.type == f.type
                      else pa.array(data.to_pylist() if hasattr(data, "to_pylist") else data, f.type))
    return pa.Table.from_arrays(arrays, schema=target)
