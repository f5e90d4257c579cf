"""Delta audit tables: one schema per table, every row keyed by the run that wrote it.

Every table starts with ``run_id`` (a re-run with the same id replaces its rows), ``store_id`` (which
store, stable across runs, so a scheduled audit can find its own history) and ``audited_at`` (UTC).
"""
from __future__ import annotations

from ._types import Field as F
from ._types import RecordSchema

AUDIT_KEYS = (
    F("run_id", "string", doc="deterministic id of the run; a re-run replaces its rows"),
    F("store_id", "string", doc="the audited store: absolute path or URI of its root"),
    F("audited_at", "timestamp", doc="when the run started, UTC"),
)


def audit_table(name: str, fields: tuple[F, ...]) -> RecordSchema:
    """An audit table's schema: the run keys, then ``fields``."""
    return RecordSchema(name, AUDIT_KEYS + tuple(fields))
