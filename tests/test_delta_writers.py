"""The audit tables written by Spark's own Delta writer (delta-spark, the embedded default once
``scripts/bootstrap.sh`` installed its jars) and by the delta-rs fallback are the same tables: one
audit run written through both, the rows (chispa) and the declared schema equal, and each writer's
Delta history a transaction per table and run (a re-run of the same run id replaces its rows in
one more version)."""
from __future__ import annotations

import pytest
from deltalake import DeltaTable

import support
from jobs import audit as audit_job
from jobs._spark.deltasink import has_delta, read_table, write_tables
from schemas import audit as A

pytestmark = [pytest.mark.spark, pytest.mark.slow]

CASE = ("rocketmq-5.3.3", "torn-middle-crc")     # lost messages with bodies and properties


def _sortable(df):
    """Maps (message properties) as sorted arrays of entries: chispa orders rows by every column."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import MapType

    return df.select([F.array_sort(F.map_entries(c.name)).alias(c.name) if isinstance(c.dataType, MapType)
                      else F.col(c.name) for c in df.schema.fields])


def test_spark_and_delta_rs_write_the_same_tables(spark, tmp_path):
    from chispa import assert_df_equality

    assert has_delta(spark), "the test session must have the delta-spark jars (scripts/bootstrap.sh)"
    run = audit_job.run_audit(spark, str(support.input_store(*CASE)), None, str(support.broker_conf(*CASE)))
    assert run.tables["lost_messages"].num_rows == 20
    paths = {"spark": str(tmp_path / "spark"), "rs": str(tmp_path / "rs")}
    for _ in range(2):          # the same run twice: its rows replaced, one more version per table
        write_tables(paths["spark"], run.tables, run.run_id, spark)
        write_tables(paths["rs"], run.tables, run.run_id)
    for name, rows in run.tables.items():
        via = {w: spark.read.format("delta").load(f"{p}/{name}") for w, p in paths.items()}
        assert_df_equality(_sortable(via["spark"]), _sortable(via["rs"]), ignore_row_order=True)
        assert via["spark"].count() == rows.num_rows, name
        # the declared schema, nullability included, whichever writer and reader
        for t in (read_table(f"{paths['spark']}/{name}"), read_table(f"{paths['rs']}/{name}", spark=spark)):
            assert t.schema.remove_metadata() == A.TABLES[name].arrow().remove_metadata(), (name, t.schema)
        history = {w: spark.sql(f"DESCRIBE HISTORY delta.`{p}/{name}`").orderBy("version").collect()
                   for w, p in paths.items()}
        predicate = f"run_id = '{run.run_id}'"
        writes = 2 if rows.num_rows else 0      # Delta commits nothing for no rows and none to delete
        # Spark: the table created with the declared schema, then a transaction per write
        assert [(h.version, h.operation) for h in history["spark"]] == \
            [(0, "CREATE TABLE")] + [(v, "WRITE") for v in range(1, writes + 1)], name
        assert [h.operationParameters.get("predicate") for h in history["spark"][1:]] == [predicate] * writes
        # delta-rs: created by the first append, then the run's rows replaced
        assert [(h.version, h.operation) for h in history["rs"]] == [(0, "WRITE"), (1, "WRITE")], name
        assert [h.operationParameters.get("predicate") for h in history["rs"]] == [None, predicate]
        # read back by the other side: delta-rs reads what Spark wrote
        assert DeltaTable(f"{paths['spark']}/{name}").version() == writes


def test_lost_message_bodies_reach_delta_from_spark_tasks_not_the_driver(spark, tmp_path, monkeypatch):
    """With an audit path the lost messages' rows go from the tasks that read them to Spark's Delta
    writer: no table with bodies is handed to Spark by the driver, the driver's own rows have no
    body, and the Delta table holds every row, body included, as an audit without a path keeps them."""
    from pyspark.sql import SparkSession

    from jobs.audittables import table_rows

    store, conf = str(support.input_store(*CASE)), str(support.broker_conf(*CASE))
    kept = audit_job.run_audit(spark, store, None, conf).findings.tables["lost_messages"]
    assert "body" in kept.column_names and kept.num_rows == 20
    from_driver = []
    create = SparkSession.createDataFrame

    def watched(self, data, *args, **kwargs):
        if hasattr(data, "column_names") and "body" in data.column_names:
            from_driver.append(data.num_rows)
        return create(self, data, *args, **kwargs)

    monkeypatch.setattr(SparkSession, "createDataFrame", watched)
    audit = tmp_path / "audit"
    run = audit_job.run_audit(spark, store, str(audit), conf)
    assert from_driver == []
    assert "body" not in run.findings.tables["lost_messages"].column_names
    written = read_table(str(audit / "lost_messages"), spark=spark).sort_by("phy_offset")
    want = table_rows("lost_messages", kept, run.run_id, run.store_id, None)
    cols = [c for c in want.column_names if c != "audited_at"]
    assert written.select(cols).to_pylist() == want.select(cols).to_pylist()
    assert all(len(b) for b in written["body"].to_pylist())
