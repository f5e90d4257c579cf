"""Record kinds of the repair: what the consume queue rebuild reads and reports (``store_reader.repair.queues``)."""
from ._types import Field as F
from ._types import RecordSchema

DISPATCH_ENTRY = RecordSchema("dispatch_entry", (
    F("topic", "string"),
    F("queue_id", "int32"),
    F("queue_offset", "int64"),
    F("phy_offset", "int64", doc="where the record lies in the commitlog"),
    F("copy", "int32", doc="0: the record's own queue; k: its k-th LMQ copy"),
    F("stored_phy_offset", "int64"),
    F("total_size", "int32"),
    F("tags_code", "int64"),
    F("store_timestamp", "int64"),
))
"""One consume queue put of a record below the truncation point: its queue, its position in the
commitlog (``phy_offset``, then ``copy``) and the entry it writes."""

KEPT_INDEX_PUT = RecordSchema("kept_index_put", (
    F("record_phy_offset", "int64", doc="where the putting record lies: a pass keeps the puts of the records below its cut"),
    F("key_hash", "int32"),
    F("phy_offset", "int64", doc="the entry's phy offset: the record's stored PHYSICALOFFSET"),
    F("store_timestamp", "int64"),
    F("record_row", "int32", doc="the putting record's row in its batch of kept records (its topic is there)"),
))
"""An index put (F§7.4) of a record the run's scan kept, in put order (``store_reader.repair.scanned``)."""

REPAIRED_QUEUE = RecordSchema("repaired_queue", (
    F("topic", "string", nullable=True),
    F("queue_id", "int32", nullable=True),
    F("min_offset", "int64", nullable=True),
    F("max_offset", "int64", nullable=True),
    F("entries", "int64", nullable=True),
    F("last_store_timestamp", "int64", nullable=True),
))
"""One rebuilt queue of the repaired store."""
