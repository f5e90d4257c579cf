"""What ``jobs.salvage`` exports: one row per intact record the broker's recovery discards, ready for
a producer to send again (``store_reader.repair.salvage``)."""
from ._types import Field as F
from ._types import RecordSchema

SALVAGED = RecordSchema("salvaged_message", (
    F("phy_offset", "int64", doc="where the record lies in the input store (PHYSICALOFFSET)"),
    F("segment", "string", doc="its commitlog file"),
    F("reason", "string", doc="behind_cut | deleted_file (as lost_messages.reason)"),
    F("kind", "string", doc="normal | delayed | timer | retry | dlq | transaction_commit | "
                            "transaction_half | transaction_op | prepared | rollback | system"),
    F("replay", "string", doc="send: a producer may send it again | skip: it must not be sent"),
    F("skip_reason", "string", nullable=True, doc="why a skipped record must not be sent"),
    F("topic", "string", doc="the topic the producer addressed (REAL_TOPIC of a delayed record)"),
    F("queue_id", "int32", doc="the queue the producer addressed (REAL_QID of a delayed record)"),
    F("stored_topic", "string", doc="TOPIC as stored (SCHEDULE_TOPIC_XXXX for a delayed record)"),
    F("stored_queue_id", "int32", doc="QUEUEID as stored"),
    F("queue_offset", "int64", doc="QUEUEOFFSET as stored"),
    F("delay_level", "int32", nullable=True, doc="DELAY of a delayed record"),
    F("deliver_time", "timestamp", nullable=True,
      doc="when the broker would deliver a delayed record (store time + its level's delay, F§3.9; "
          "TIMER_OUT_MS of a timer record)"),
    F("keys", "string", nullable=True, doc="the KEYS property as stored"),
    F("tags", "string", nullable=True),
    F("uniq_key", "string", nullable=True, doc="UNIQ_KEY: the client message id consumers de-duplicate on"),
    F("msg_id", "string", doc="offsetMsgId in the input store"),
    F("flag", "int32", doc="the producer's Message.flag"),
    F("sys_flag", "int32"),
    F("properties", "map<string,string>", nullable=True, doc="every property as stored"),
    F("born_host", "string"),
    F("born_time", "timestamp"),
    F("store_host", "string"),
    F("store_time", "timestamp"),
    F("reconsume_times", "int32"),
    F("total_size", "int32"),
    F("body_crc", "int32", doc="BODYCRC as stored (over the stored, possibly compressed body)"),
    F("compression", "string", nullable=True, doc="zlib | lz4 | zstd when COMPRESSED_FLAG is set"),
    F("body", "binary", doc="the body as the producer sent it (decompressed)"),
))
