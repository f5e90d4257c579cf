"""The Delta sink (delta-rs path): a re-run with the same run id replaces its rows."""
from __future__ import annotations

import datetime as dt
import threading
from concurrent.futures import Future

import pyarrow as pa
import pytest

from jobs._spark.deltasink import read_table, table_uri, write_run_rows, write_tables
from store_reader.exceptions import OutputError

TS = dt.datetime(2026, 11, 21, tzinfo=dt.timezone.utc)


def _rows(run_id: str, n: int) -> pa.Table:
    return pa.table({"run_id": [run_id] * n, "store_id": ["s"] * n, "value": list(range(n)),
                     "audited_at": pa.array([TS] * n, pa.timestamp("us", tz="UTC"))})


def test_rerun_replaces_rows(tmp_path):
    uri = str(tmp_path / "findings")
    write_run_rows(uri, _rows("r1", 3), "r1")
    write_run_rows(uri, _rows("r2", 2), "r2")
    write_run_rows(uri, _rows("r1", 4), "r1")          # the same run again: replaced, not added
    t = read_table(uri)
    assert sorted(t["run_id"].to_pylist()) == ["r1"] * 4 + ["r2"] * 2
    assert t.schema.field("audited_at").type == pa.timestamp("us", tz="UTC")


def test_row_groups_hold_about_row_group_bytes_of_rows(tmp_path):
    """Message bodies (the lost messages) are written in row groups of about ``ROW_GROUP_BYTES``:
    delta-rs holds a whole row group in memory, and a table of bodies in one group would cost the
    driver several times its size. Narrow rows still go in one group."""
    import glob

    import pyarrow.parquet as pq

    from jobs._spark.deltasink import ROW_GROUP_BYTES

    n = 3 * ROW_GROUP_BYTES // 1024
    bodies = _rows("r1", n).append_column("body", pa.array([b"x" * 1000] * n, pa.binary()))
    write_run_rows(str(tmp_path / "lost"), bodies, "r1")
    groups = [g for f in glob.glob(str(tmp_path / "lost" / "*.parquet"))
              for m in [pq.ParquetFile(f).metadata] for g in (m.row_group(i) for i in range(m.num_row_groups))]
    assert sum(g.num_rows for g in groups) == n and len(groups) >= 3
    assert max(g.num_rows for g in groups) * bodies.nbytes // n <= ROW_GROUP_BYTES
    write_run_rows(str(tmp_path / "narrow"), _rows("r1", n), "r1")
    assert [pq.ParquetFile(f).metadata.num_row_groups for f in glob.glob(str(tmp_path / "narrow" / "*.parquet"))] == [1]
    assert read_table(str(tmp_path / "lost")).sort_by("value").equals(bodies.sort_by("value"))


def test_rows_of_another_run_are_refused(tmp_path):
    with pytest.raises(ValueError, match="another run"):
        write_run_rows(str(tmp_path / "t"), _rows("r1", 2), "r2")


def test_tables_written_earlier_are_waited_for_and_not_written_again(tmp_path):
    """``write_tables(written=...)``: a table whose write started earlier (the lost messages, while
    the audit's second stage runs) is committed once, and ``runs`` only after it."""
    from deltalake import DeltaTable

    audit = str(tmp_path / "audit")
    early: Future = Future()

    def finish():
        write_run_rows(table_uri(audit, "lost_messages"), _rows("r1", 5), "r1")
        early.set_result(None)

    timer = threading.Timer(0.3, finish)
    timer.start()
    tables = {"lost_messages": _rows("r1", 5), "queue_findings": _rows("r1", 2), "runs": _rows("r1", 1)}
    assert write_tables(audit, tables, "r1", written={"lost_messages": early}) == \
        [table_uri(audit, n) for n in ("lost_messages", "queue_findings", "runs")]
    timer.join()
    lost, runs = DeltaTable(table_uri(audit, "lost_messages")), DeltaTable(table_uri(audit, "runs"))
    assert lost.version() == 0 and read_table(table_uri(audit, "lost_messages")).num_rows == 5
    assert runs.history()[0]["timestamp"] >= lost.history()[0]["timestamp"]


def test_a_failed_earlier_write_is_raised_and_no_run_row_written(tmp_path):
    audit = str(tmp_path / "audit")
    early: Future = Future()
    early.set_exception(OutputError("cannot write the Delta table: disk full", "lost_messages"))
    with pytest.raises(OutputError, match="disk full"):
        write_tables(audit, {"lost_messages": _rows("r1", 1), "queue_findings": _rows("r1", 1),
                             "runs": _rows("r1", 1)}, "r1", written={"lost_messages": early})
    assert read_table(table_uri(audit, "queue_findings")).num_rows == 1      # the others still finish
    assert not (tmp_path / "audit" / "runs").exists()
