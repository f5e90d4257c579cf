"""Audit rows to Delta tables, keyed by ``run_id``: a re-run replaces its rows, never duplicates them.

With delta-spark on the session's classpath (the embedded session once ``scripts/bootstrap.sh``
installed the jars, ``jobs._spark.sparkjars``; a cluster through ``spark.jars.packages``) Spark writes
each table itself, one transaction per table and run (``replaceWhere run_id = ...``), and reads
them (``read_table(spark=...)``); the lost messages (their bodies) from the Spark tasks that read
them (``write_run_frame``, ``jobs.audittables.EarlyWrites``), every other table from the driver's rows. Without the jars (a set-up that could not reach Maven Central)
the rows (audit tables are small: findings are range-encoded) are collected as Arrow and delta-rs
commits them in one transaction that deletes the run's old rows and adds the new ones
(``predicate`` overwrite); the run's log says so. Either way the result is a standard Delta table
of the same schema that Spark, delta-rs, DuckDB and Polars read.

An audit path on S3 takes the options of a store URI (``store_reader.io.storefs``) in its query:
``s3a://bucket/audit?endpoint_override=host:port&scheme=http&region=us-east-1`` (an S3-compatible
server: path-style requests); Spark gets them as the bucket's ``fs.s3a.bucket.<bucket>.*``
settings, delta-rs as its storage options.
"""
from __future__ import annotations

import logging
import re
import urllib.parse
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Mapping

import pyarrow as pa

from store_reader.exceptions import OutputError, StoreReaderError

log = logging.getLogger("jobs._spark.deltasink")

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
        # through Spark's class loader: spark.jars are not on the JVM's application class path
        _HAS_DELTA[app] = bool(spark.sparkContext._jvm.org.apache.spark.util.Utils.classIsLoadable(
            "io.delta.tables.DeltaTable"))
        if not _HAS_DELTA[app]:
            log.warning("audit tables written by delta-rs: no delta-spark jars on this Spark session's "
                        "classpath (scripts/bootstrap.sh installs them, jobs/_spark/sparkjars.py)")
    return _HAS_DELTA[app]


def split_options(uri: str) -> tuple[str, dict[str, str]]:
    """``uri`` without its query, and the query's options (``endpoint_override``, ``scheme``,
    ``region``); anything else in the query is refused, naming it."""
    base, sep, query = uri.partition("?")
    opts = dict(urllib.parse.parse_qsl(query, keep_blank_values=True)) if sep else {}
    unknown = sorted(set(opts) - {"endpoint_override", "scheme", "region"})
    if unknown:
        raise OutputError(f"unknown option(s) in the audit path's query: {', '.join(unknown)} "
                          "(endpoint_override, scheme, region)", uri)
    return base, opts


def _spark_path(spark, uri: str) -> str:
    """``uri`` for Spark: ``s3://`` as ``s3a://`` (hadoop-aws), the endpoint and region of the
    query, else of the environment delta-rs reads (``AWS_ENDPOINT_URL``, ``AWS_REGION``), set as
    the bucket's s3a settings (credentials: s3a's default chain, the environment's included)."""
    import os

    base, opts = split_options(uri)
    if "://" not in base:       # a relative path would be taken for a table name
        return os.path.abspath(base)
    if not base.startswith(("s3://", "s3a://")):
        return base
    base = "s3a://" + base.split("://", 1)[1]
    if not opts and os.environ.get("AWS_ENDPOINT_URL"):
        scheme, _, host = os.environ["AWS_ENDPOINT_URL"].partition("://")
        opts = {"scheme": scheme, "endpoint_override": host.rstrip("/")}
    if "region" not in opts and (os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")):
        opts["region"] = os.environ.get("AWS_REGION") or os.environ["AWS_DEFAULT_REGION"]
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    key = f"fs.s3a.bucket.{urllib.parse.urlsplit(base).netloc}."
    if "endpoint_override" in opts:         # an S3-compatible server: path-style requests
        conf.set(key + "endpoint", f"{opts.get('scheme', 'https')}://{opts['endpoint_override']}")
        conf.set(key + "path.style.access", "true")
    if "scheme" in opts:
        conf.set(key + "connection.ssl.enabled", str(opts["scheme"] == "https").lower())
    if "region" in opts:
        conf.set(key + "endpoint.region", opts["region"])
    return base


def _rs_path(uri: str, storage_options: dict[str, str] | None) -> tuple[str, dict[str, str] | None]:
    """``uri`` for delta-rs (``s3a://`` as ``s3://``) and its storage options with the query's."""
    base, opts = split_options(uri)
    if base.startswith("s3a://"):
        base = "s3://" + base[len("s3a://"):]
    if not opts:
        return base, storage_options
    out = dict(storage_options or {})
    if "endpoint_override" in opts:
        out["AWS_ENDPOINT_URL"] = f"{opts.get('scheme', 'https')}://{opts['endpoint_override']}"
    if opts.get("scheme") == "http":
        out["AWS_ALLOW_HTTP"] = "true"
    if "region" in opts:
        out["AWS_REGION"] = opts["region"]
    return base, out


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
        schema = spark_schema(rows.schema)
        # one chunk per column: pyspark 4.2 makes no rows of a table whose first record batches
        # are empty (the lost messages' table: [0, 0, 20]); one data file per table and run, as
        # delta-rs writes it (the rows are on the driver anyway)
        write_run_frame(spark, table_uri, lambda: spark.createDataFrame(rows.combine_chunks(), schema=schema)
                        .coalesce(1), schema, run_id, empty=not rows.num_rows)
        return
    from deltalake import DeltaTable, WriterProperties, write_deltalake
    from deltalake.exceptions import DeltaError

    table_uri, storage_options = _rs_path(table_uri, storage_options)

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


def write_run_frame(spark, table_uri: str, frame, schema, run_id: str, empty: bool = False) -> None:
    """Replace the rows of ``run_id`` in the Delta table at ``table_uri`` by the DataFrame
    ``frame()`` (rows of that run only, of the Spark ``schema``), written by Spark's Delta writer in
    one transaction (the table created on first use). ``empty``: ``frame()`` has no rows, so a
    table created here is all there is to write (Delta would commit nothing for it, after the
    Spark jobs that find that out)."""
    from delta.tables import DeltaTable as SparkDeltaTable
    from py4j.protocol import Py4JJavaError
    from pyspark.errors import PySparkException

    path = _spark_path(spark, table_uri)
    try:
        if not SparkDeltaTable.isDeltaTable(spark, path):
            # created with the declared schema first: a DataFrame write would make every
            # column nullable (Spark's file sources do), where delta-rs keeps NOT NULL
            SparkDeltaTable.createIfNotExists(spark).location(path).addColumns(schema).execute()
            if empty:
                return
        (frame().write.format("delta").mode("overwrite").option("replaceWhere", f"run_id = {_quote(run_id)}")
         .option("mergeSchema", "true").save(path))
    except (Py4JJavaError, PySparkException) as exc:    # the JVM's reason, on one line
        raise OutputError(f"cannot write the Delta table: {delta_reason(exc)}", table_uri) from None


def delta_reason(exc: BaseException) -> str:
    """A Delta writer's or reader's error as one line: the Java exception's own message (py4j), not
    its trace; delta-rs' message without the Rust backtrace it appends (numbered frames, ``at
    file:line``) or the terminal colours."""
    text = str(exc)
    java = getattr(exc, "java_exception", None)
    if java is not None:    # the cause chain: a wrapper's own message often names nothing
        causes = []
        while java is not None and len(causes) < 8:
            causes.append(f"{java.getClass().getName()}: {java.getMessage()}")
            java = java.getCause()
        text = " caused by ".join(causes)
    lines = [line for line in text.splitlines()
             if not re.match(r"\s*(\d+: |at \S+:\d+|Stack backtrace:|Backtrace:)", line)]
    return " ".join(re.sub(r"\x1b\[[0-9;]*m|↳", " ", " ".join(lines)).split())[:500]


def spark_schema(schema: pa.Schema):
    """The Spark schema of ``schema``, nullability kept (the audit schemas' NOT NULL columns)."""
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(schema, prefer_timestamp_ntz=False)


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
    """The table ``name`` under ``audit_path`` (its query's options kept at the end)."""
    base, sep, query = audit_path.partition("?")
    return base.rstrip("/") + "/" + name + sep + query


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


def read_table(table_uri: str, storage_options: dict[str, str] | None = None, spark=None) -> pa.Table:
    """The Delta table at ``table_uri`` (``TableNotFoundError`` when there is none; a
    ``StoreReaderError`` naming it when it cannot be read); read by Spark when ``spark`` has
    delta-spark, else by delta-rs. A table on object storage is read by delta-rs through
    ``pyarrow.fs`` (configured like a remote store, see
    ``store_reader.io.storefs``): delta-rs's own filesystem handler for pyarrow may abort the
    process as it exits (SIGABRT, "terminate called without an active exception")."""
    import pyarrow.fs as pafs
    from deltalake import DeltaTable
    from deltalake.exceptions import DeltaError, TableNotFoundError

    unreadable: tuple[type[BaseException], ...] = (OSError, DeltaError)   # a damaged log, ...
    try:
        if spark is not None and has_delta(spark):
            from py4j.protocol import Py4JJavaError
            from pyspark.errors import PySparkException

            unreadable += (Py4JJavaError, PySparkException)     # Spark's Delta: the JVM's reason
            path = _spark_path(spark, table_uri)
            jvm = spark.sparkContext._jvm
            if not jvm.io.delta.tables.DeltaTable.isDeltaTable(spark._jsparkSession, path):
                raise TableNotFoundError(f"no Delta table at {table_uri}")
            return spark.read.format("delta").load(path).toArrow()
        query = table_uri.partition("?")[2]
        table_uri, storage_options = _rs_path(table_uri, storage_options)
        table = DeltaTable(table_uri, storage_options=storage_options)
        filesystem = None
        if "://" in table_uri and not table_uri.startswith("file://"):
            # the query's options are pyarrow's own (endpoint_override, scheme, region)
            fs, path = pafs.FileSystem.from_uri(table_uri + ("?" + query if query else ""))
            filesystem = pafs.SubTreeFileSystem(path, fs)
        return table.to_pyarrow_table(filesystem=filesystem)
    except TableNotFoundError:
        raise
    except unreadable as exc:
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
