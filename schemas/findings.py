"""Record kinds the audit passes between its stages (``jobs/findings.py``), before they become the
Delta tables of ``schemas.audit``."""
from ._types import Field as F
from ._types import RecordSchema
from .audit import INDEX_FINDINGS, QUEUE_FINDINGS, STORE_FINDINGS, without_run_keys

QUEUE_ROW = RecordSchema("queue_row", (
    F("queue_offset", "int64"),
    F("phy_offset", "int64"),
    F("size", "int32"),
    F("tags_code", "int64"),
    F("src", "int8", doc="bits: which views hold the row (disk, broker, rebuilt, record)"),
    F("flag", "int8", doc="a record row's damage: 1 CRC fails, 2 behind a bad record"),
    F("record_phy", "int64", doc="a record or rebuilt row's record phy offset (its put's place in "
                                 "commitlog order), -1 for an entry read from a CQ file"),
))
"""A queue's entry in one of the views compared (or one of its records)."""

INDEX_FILE_ENTRY = RecordSchema("index_file_entry", (
    F("key_hash", "int32"),
    F("phy_offset", "int64"),
))
"""An index file's entries, in entry order."""

INDEX_PUT = RecordSchema("index_put", (
    F("topic", "int32", doc="a number into a list of topic names"),
    F("key_hash", "int32"),
    F("phy_offset", "int64"),
))
"""An index put of a record."""

INDEX_FINDING_ROW = without_run_keys(INDEX_FINDINGS)
QUEUE_FINDING_ROW = without_run_keys(QUEUE_FINDINGS)
STORE_FINDING_ROW = without_run_keys(STORE_FINDINGS)
