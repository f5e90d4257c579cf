"""The Delta sink (delta-rs path): a re-run with the same run id replaces its rows."""
from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest

from jobs.deltasink import read_table, write_run_rows

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


def test_rows_of_another_run_are_refused(tmp_path):
    with pytest.raises(ValueError, match="another run"):
        write_run_rows(str(tmp_path / "t"), _rows("r1", 2), "r2")
