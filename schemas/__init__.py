"""One definition per record kind, rendered as both a pyarrow schema and a Spark StructType."""
from ._types import Field, RecordSchema, arrow_type
from .store import CHECKPOINT, CONSUME_QUEUE_ENTRY, INDEX_ENTRY, INDEX_HEADER, MESSAGE, SEGMENT, TIMER_UNIT

__all__ = ["Field", "RecordSchema", "arrow_type", "MESSAGE", "SEGMENT", "CONSUME_QUEUE_ENTRY",
           "INDEX_ENTRY", "INDEX_HEADER", "CHECKPOINT", "TIMER_UNIT"]
