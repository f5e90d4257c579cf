"""``replica_findings``: what a master/slave commitlog comparison found (``jobs/replicas.py``).

One table for every kind of row, keyed like every audit table (``run_id``, ``store_id`` = the
master, ``audited_at``) plus ``slave_store``. Columns that do not apply to a row's ``kind`` are null:

* ``pair`` (one per slave): ``status`` in_sync | slave_behind | slave_ahead | diverged; phy offsets
  ``master_min``/``master_max``/``slave_min``/``slave_max`` (max = end of the last valid record);
  ``phy_offset_from`` = first divergent phy offset (diverged only); ``common_prefix_bytes``;
  ``ahead_bytes`` (slave end - master end); the three record counts.
* ``segment`` (one per commitlog file compared): ``status`` identical | differs | master_only |
  slave_only; ``phy_offset_from`` = first differing byte, ``phy_offset_to`` = the record holding it
  (records compared from there); ``master_max``/``slave_max`` = where each copy's valid records end
  when it was scanned; ``records`` = records not the same on both sides; ``bytes_read``.
* ``records`` (range-encoded): ``status`` master_only | slave_only | content_differs, ``side`` whose
  copy the row describes, one row per queue and stretch of consecutive queue offsets
  (``queue_offset_to`` and ``phy_offset_to`` exclusive), ``records``, store time range.
* ``queue`` (one per topic/queue on either side): queue offsets ``[min, max)`` each side holds;
  ``status`` same | slave_behind | slave_ahead | range_differs.
* ``consumer_offset``: a committed offset from ``side``'s ``consumerOffset.json`` outside what the
  other side holds; ``status`` past_slave_max | past_master_max | before_slave_min |
  before_master_min; the queue's ranges on both sides in the min/max columns (queue offsets).
"""
from __future__ import annotations

from ._types import Field as F
from ._types import RecordSchema
from .audit import audit_table
from .store import MESSAGE

REPLICA_FINDINGS = audit_table("replica_findings", (
    F("slave_store", "string", doc="the slave compared with the master (store_id)"),
    F("kind", "string", doc="pair | segment | records | queue | consumer_offset"),
    F("status", "string", doc="per kind, see the module docstring"),
    F("side", "string", nullable=True, doc="master | slave: whose records or offsets file"),
    F("segment", "string", nullable=True, doc="commitlog file name (20-digit start offset)"),
    F("topic", "string", nullable=True),
    F("queue_id", "int32", nullable=True),
    F("consumer_group", "string", nullable=True),
    F("phy_offset_from", "int64", nullable=True),
    F("phy_offset_to", "int64", nullable=True),
    F("queue_offset_from", "int64", nullable=True),
    F("queue_offset_to", "int64", nullable=True, doc="exclusive"),
    F("records", "int64", nullable=True),
    F("first_store_timestamp", "int64", nullable=True, doc="ms since epoch"),
    F("last_store_timestamp", "int64", nullable=True, doc="ms since epoch"),
    F("master_min", "int64", nullable=True, doc="pair: phy offset; queue/consumer_offset: queue offset"),
    F("master_max", "int64", nullable=True, doc="exclusive, same units as master_min"),
    F("slave_min", "int64", nullable=True),
    F("slave_max", "int64", nullable=True),
    F("committed_offset", "int64", nullable=True, doc="next queue offset the group consumes"),
    F("common_prefix_bytes", "int64", nullable=True,
      doc="bytes identical on both sides from the first phy offset both hold"),
    F("ahead_bytes", "int64", nullable=True, doc="slave data end - master data end"),
    F("master_only_records", "int64", nullable=True, doc="lost if the slave is promoted"),
    F("slave_only_records", "int64", nullable=True, doc="written on the slave after a divergence"),
    F("differing_records", "int64", nullable=True, doc="same phy offset, different bytes"),
    F("bytes_read", "int64", nullable=True, doc="bytes of both copies read to compare the segment"),
    F("detail", "string", nullable=True),
))

REPLICA_RECORD = RecordSchema("replica_record", (
    F("kind", "string", doc="master_only | slave_only | content_differs"),
    F("side", "string", doc="whose copy the row describes (a content_differs pair gives two rows)"),
) + MESSAGE.project(("phy_offset", "total_size", "topic", "queue_id", "queue_offset", "sys_flag",
                     "store_timestamp", "body_crc", "msg_id", "uniq_key", "tags", "keys")).fields)
"""One record that is not on both sides as the same bytes."""

RECORD_RUN = RecordSchema("record_run", (
    F("kind", "string"),
    F("side", "string"),
    F("topic", "string"),
    F("queue_id", "int32"),
    F("consume_queue", "bool"),
    F("queue_offset_from", "int64"),
    F("queue_offset_to", "int64", doc="exclusive"),
    F("phy_offset_from", "int64"),
    F("phy_offset_to", "int64", doc="exclusive: end of the last record"),
    F("records", "int64"),
    F("first_store_timestamp", "int64"),
    F("last_store_timestamp", "int64"),
))
"""Records of one kind, side and queue with consecutive queue offsets (range-encoded findings).
``consume_queue`` false: PREPARED/ROLLBACK records, which get no consume queue entry and whose
QUEUEOFFSET means nothing; they form one run per kind, side and queue, whatever their offsets."""
