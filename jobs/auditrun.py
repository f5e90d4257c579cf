"""One run of the Delta audit tables, as the investigation notebooks (``notebooks/``) read it.

The run's row of ``runs`` and its rows of every findings table are read through Spark (delta-spark;
delta-rs for a session without its jars, ``jobs._spark.deltasink.read_table``) into pandas (``load_run``);
the per-queue counts both notebooks chart are built here too.
"""
from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from jobs._spark.deltasink import read_table, store_id_for, table_uri
from schemas import audit as A
from store_reader.broker import prediction, versions
from store_reader.formats.config import CONSUMER_OFFSET_GENERATIONS, ROCKSDB_CONSUMER_OFFSETS
from store_reader.store import Store

FINDING_TABLES = ("segments", "queue_findings", "index_findings", "consumer_offset_findings",
                  "lost_messages", "flush_window")
# The broker loads consumerOffset.json and falls back to the .bak only when it cannot.
PRIMARY_OFFSETS, BACKUP_OFFSETS = CONSUMER_OFFSET_GENERATIONS


@dataclass
class AuditRun:
    """One run's row of ``runs`` and its rows of every findings table (pandas, run keys dropped)."""

    run: dict
    tables: dict[str, pd.DataFrame]

    def __getitem__(self, table: str) -> pd.DataFrame:
        return self.tables[table]

    @property
    def run_id(self) -> str:
        return self.run["run_id"]

    @property
    def truncation_point(self) -> int:
        if self.run["truncation_point"] is None:
            raise ValueError(f"run {self.run_id}: the broker would refuse to load the store "
                             f"({self.run['detail']}); it truncates nothing")
        return int(self.run["truncation_point"])

    @property
    def broker_version(self) -> str:
        # runs recorded before 5.4 had rules of their own wrote "5.x" for 5.3.3's
        v = self.run["broker_version"]
        return versions.V53 if v == versions.V5X else v

    def describe(self) -> pd.Series:
        """The run's headline fields, for display."""
        keys = ["run_id", "job", "mode", "status", "audited_at", "broker_version", "recovery_path",
                "start_file", "truncation_point", "min_phy_offset", "queue_findings", "index_findings",
                "consumer_offsets_at_risk", "lost_messages", "flush_window_records", "repaired_store"]
        return pd.Series({k: self.run.get(k) for k in keys}, name=self.run["store_id"])


def _read(audit_path: str, table: str, spark=None) -> pa.Table:
    from deltalake.exceptions import TableNotFoundError

    try:
        return read_table(table_uri(audit_path, table), spark=spark)
    except TableNotFoundError:           # a run that wrote nothing yet: the table's empty schema
        return A.TABLES[table].arrow().empty_table()


def load_run(audit_path: str, store: Store | str | None = None, run_id: str | None = None,
             spark=None) -> AuditRun:
    """The audit run ``run_id``, or else the latest run (``audited_at``) of ``store`` (a ``Store``
    or its ``store_id``), or else the latest run in the tables; read through ``spark``."""
    runs = _read(audit_path, "runs", spark)
    if run_id is not None:
        runs = runs.filter(pc.equal(runs["run_id"], run_id))
    elif store is not None:
        sid = store_id_for(str(store.root)) if isinstance(store, Store) else store
        runs = runs.filter(pc.equal(runs["store_id"], sid))
    if not runs.num_rows:
        raise LookupError(f"no audit run for {run_id or store or 'any store'} in {audit_path}")
    run = runs.sort_by([("audited_at", "descending")]).slice(0, 1).to_pylist()[0]
    tables = {}
    for name in FINDING_TABLES:
        t = _read(audit_path, name, spark)
        t = t.filter(pc.equal(t["run_id"], run["run_id"]))
        tables[name] = t.drop_columns(["run_id", "store_id", "audited_at"]).to_pandas()
    return AuditRun(run, tables)


def predict(store: Store, run: AuditRun) -> prediction.Prediction:
    """The broker's recovery as the audit run predicted it (same broker version)."""
    pred = prediction.predict(store, run.broker_version)
    if pred.load_result and pred.max_phy_offset != run.truncation_point:
        raise ValueError(f"the store changed since run {run.run_id}: truncation point now "
                         f"{pred.max_phy_offset}, the run found {run.truncation_point}")
    return pred


def consumer_offsets(run: AuditRun) -> pd.DataFrame:
    """The committed offsets the broker loads: RocksDB's or ``consumerOffset.json``, or its ``.bak``
    when the audit found no offsets in it."""
    co = run["consumer_offset_findings"]
    if co.empty:
        return co
    primary = co[co["source"].isin([PRIMARY_OFFSETS, ROCKSDB_CONSUMER_OFFSETS])]
    return (primary if len(primary) else co[co["source"] == BACKUP_OFFSETS]).reset_index(drop=True)


# -- counts per queue ---------------------------------------------------------------------------------

def per_queue(*counts: pd.Series) -> pd.DataFrame:
    """Named count series indexed by (topic, queue_id) side by side, zeros filled, one row per queue
    labelled ``topic/queue_id`` in (topic, queue id) order."""
    counts = tuple(c for c in counts if len(c))
    if not counts:
        return pd.DataFrame(dtype="int64")
    df = pd.concat(counts, axis=1).fillna(0).astype("int64").sort_index()
    df.index = [f"{t}/{q}" for t, q in df.index]
    return df


def by_queue(df: pd.DataFrame, value: str, name: str) -> pd.Series:
    """``value`` summed per (topic, queue_id), named ``name`` (a column of ``per_queue``)."""
    if df.empty:
        return pd.Series(dtype="int64", name=name)
    return df.groupby(["topic", "queue_id"])[value].sum().rename(name)
