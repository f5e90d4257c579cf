"""Record kinds read from (or written to) the store files themselves.

Names follow RocketMQ's own terms (spec ``store-format.md``): phy offset = byte offset in the whole
commitlog, queue offset = entry number in a consume queue, tags code = what a CQ entry stores.
"""
from ._types import Field as F
from ._types import RecordSchema

MESSAGE = RecordSchema("message", (
    F("phy_offset", "int64", doc="actual position: segment start + position in the segment"),
    F("total_size", "int32", doc="TOTALSIZE"),
    F("version", "int8", doc="1 = V1 magic 0xDAA320A7, 2 = V2 magic 0xDAA320AB (5.x)"),
    F("body_crc", "int32", doc="BODYCRC as stored"),
    F("queue_id", "int32"),
    F("flag", "int32"),
    F("queue_offset", "int64"),
    F("stored_phy_offset", "int64", doc="PHYSICALOFFSET as stored (broker trusts it, spec E#9)"),
    F("sys_flag", "int32"),
    F("born_timestamp", "int64", doc="ms since epoch"),
    F("born_host", "string", doc="ip:port, IPv6 as [a:b:..]:port (Java's uncompressed form)"),
    F("store_timestamp", "int64", doc="ms since epoch"),
    F("store_host", "string"),
    F("reconsume_times", "int32"),
    F("prepared_transaction_offset", "int64"),
    F("body_length", "int32", doc="BODYLEN (<0 read as no body)"),
    F("topic", "string"),
    F("properties", "map<string,string>", nullable=True,
      doc="parsed as MessageDecoder#string2messageProperties; null when PROPERTIESLEN <= 0"),
    F("tags", "string", nullable=True),
    F("keys", "string", nullable=True, doc="raw KEYS property"),
    F("key_list", "list<string>", doc="KEYS split on single spaces, empty tokens dropped"),
    F("uniq_key", "string", nullable=True),
    F("real_topic", "string", nullable=True),
    F("real_queue_id", "int32", nullable=True, doc="REAL_QID as an int (null if absent/unparsable)"),
    F("delay_level", "int32", nullable=True, doc="DELAY as an int (null if absent/unparsable)"),
    F("transaction_prepared", "bool", doc="TRAN_MSG == 'true'"),
    F("tags_code", "int64", doc="what the broker writes into the CQ entry (spec F§3.9)"),
    F("msg_id", "string", doc="offsetMsgId: store host + stored phy offset, upper hex"),
    F("body_crc_ok", "bool", nullable=True, doc="null when CRCs were not computed"),
    F("record_crc_ok", "bool", nullable=True, doc="__CRC32# check; null when absent or not computed"),
    F("valid_prefix", "bool",
      doc="record lies in the segment's valid prefix (false: found by resync after a bad record)"),
    F("body", "binary", nullable=True, doc="stored (possibly compressed) body; read only when selected"),
))

SEGMENT = RecordSchema("segment", (
    F("segment", "string", doc="commitlog file name (20-digit start offset)"),
    F("path", "string"),
    F("file_start", "int64"),
    F("file_size", "int64"),
    F("valid_bytes", "int64", doc="length of the valid prefix (= position where the scan stopped)"),
    F("trailing_bytes", "int64", doc="file_size - valid_bytes"),
    F("records", "int64", doc="valid records in the prefix"),
    F("first_store_timestamp", "int64", nullable=True),
    F("last_store_timestamp", "int64", nullable=True),
    F("last_record_position", "int64", nullable=True, doc="position of the last valid record"),
    F("end_reason", "string",
      doc="eof_marker | zero_padding | torn_tail | corrupt | file_end"),
    F("end_check", "string", nullable=True, doc="which check failed (torn_tail/corrupt)"),
    F("end_declared_size", "int32", nullable=True, doc="TOTALSIZE read at the end position"),
    F("blank_declared_size", "int32", nullable=True, doc="first i32 of the blank marker"),
    F("nonzero_after_marker", "bool", nullable=True),
    F("first_magic", "int32", nullable=True, doc="i32 at byte 4 (start-file choice, spec R§4.1)"),
    F("first_sys_flag", "int32", nullable=True),
    F("first_store_timestamp_raw", "int64", nullable=True,
      doc="STORETIMESTAMP of the first record read by position, valid or not"),
    F("first_stored_phy_offset", "int64", nullable=True),
    F("first_record_valid", "bool"),
    F("resync_position", "int64", nullable=True,
      doc="first valid record (PHYSICALOFFSET == position) after a bad one"),
    F("records_after_cut", "int64", doc="valid records found by resync after the end position"),
    F("crc_failures", "int64", doc="records with a body CRC mismatch (when computed)"),
))

CONSUME_QUEUE_ENTRY = RecordSchema("consume_queue_entry", (
    F("topic", "string"),
    F("queue_id", "int32"),
    F("queue_offset", "int64", doc="entry number (slot)"),
    F("phy_offset", "int64"),
    F("size", "int32"),
    F("tags_code", "int64"),
    F("file", "string", doc="CQ file name (20-digit logic offset)"),
    F("position", "int32", doc="byte position of the entry in its file"),
))

INDEX_ENTRY = RecordSchema("index_entry", (
    F("file", "string", doc="index file name (yyyyMMddHHmmssSSS)"),
    F("entry_number", "int32"),
    F("key_hash", "int32"),
    F("phy_offset", "int64"),
    F("time_diff", "int32", doc="seconds since the header's beginTimestamp"),
    F("prev_index", "int32", doc="previous entry number in the slot chain, 0 = end"),
    F("slot", "int32", doc="key_hash % hashSlotNum"),
))

INDEX_HEADER = RecordSchema("index_header", (
    F("file", "string"),
    F("begin_timestamp", "int64"),
    F("end_timestamp", "int64"),
    F("begin_phy_offset", "int64"),
    F("end_phy_offset", "int64"),
    F("hash_slot_count", "int32"),
    F("index_count", "int32"),
))

CHECKPOINT = RecordSchema("checkpoint", (
    F("physic_msg_timestamp", "int64"),
    F("logics_msg_timestamp", "int64"),
    F("index_msg_timestamp", "int64"),
    F("master_flushed_offset", "int64", nullable=True, doc="5.x only"),
    F("confirm_phy_offset", "int64", nullable=True, doc="5.x only"),
))

TIMER_UNIT = RecordSchema("timer_unit", (
    F("pos", "int64", doc="position in the timer log (file base offset + byte in the file)"),
    F("file", "string", doc="the timerlog file (its 20-digit base offset)"),
    F("size", "int32", doc="always 52"),
    F("prev_pos", "int64", doc="the slot's previous unit, -1 for its first"),
    F("magic", "int32", doc="1 default | 2 roll | 4 delete"),
    F("curr_write_time_ms", "int64", doc="the enqueue's write time"),
    F("delay_ms", "int32", doc="delayed time - write time"),
    F("delayed_time_ms", "int64", doc="the slot: when the dequeue delivers it"),
    F("offset_py", "int64", doc="phy offset of the rmq_sys_wheel_timer record"),
    F("size_py", "int32", doc="its size"),
    F("topic_hash", "int32", doc="hash of REAL_TOPIC (metrics)"),
    F("reserved", "int64"),
))

CONSUMER_OFFSET = RecordSchema("consumer_offset", (
    F("topic", "string"),
    F("group", "string", nullable=True, doc="null when the key has no '@'"),
    F("queue_id", "int32"),
    F("offset", "int64", doc="NEXT queue offset to consume (R§9.1)"),
    F("lmq", "bool", doc="row comes from lmqOffsetTable"),
))
"""A committed offset of ``config/consumerOffset.json`` (or its LMQ / ``.bak`` files)."""
