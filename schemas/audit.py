"""Delta audit tables: one schema per table, every row keyed by the run that wrote it.

Every table starts with ``run_id`` (a re-run with the same id replaces its rows), ``store_id`` (which
store, stable across runs, so a scheduled audit can find its own history) and ``audited_at`` (UTC).
"""
from __future__ import annotations

from ._types import Field as F
from ._types import RecordSchema
from .store import SEGMENT

AUDIT_KEYS = (
    F("run_id", "string", doc="deterministic id of the run; a re-run replaces its rows"),
    F("store_id", "string", doc="the audited store: absolute path or URI of its root"),
    F("audited_at", "timestamp", doc="when the run started, UTC"),
)


def audit_table(name: str, fields: tuple[F, ...]) -> RecordSchema:
    """An audit table's schema: the run keys, then ``fields``."""
    return RecordSchema(name, AUDIT_KEYS + tuple(fields))


def without_run_keys(table: RecordSchema) -> RecordSchema:
    """An audit table's rows as a run finds them, before the run keys are added."""
    return RecordSchema(table.name, table.fields[len(AUDIT_KEYS):])


RUNS = audit_table("runs", (
    F("job", "string", doc="recover | audit"),
    F("mode", "string", doc="recover: write | dry_run | apply; audit: full | since_last"),
    F("status", "string", doc="clean | findings | refused (the broker would not load the store)"),
    F("broker_version", "string", doc="4.9 | 5.3 | 5.4 | 5.5: whose recovery rules were applied"),
    F("load_result", "bool", doc="would the broker's load() succeed"),
    F("recovery_path", "string", nullable=True, doc="normal | abnormal (abort file present)"),
    F("start_file", "string", nullable=True, doc="commitlog file the broker's recovery starts from"),
    F("truncation_point", "int64", nullable=True, doc="phy offset where the broker's commitlog ends"),
    F("min_phy_offset", "int64", nullable=True),
    F("segments_total", "int64"),
    F("segments_scanned", "int64", doc="fewer than total with --since-last"),
    F("bytes_scanned", "int64"),
    F("scan_phy_from", "int64", nullable=True,
      doc="records were read from here on (--since-last); null: the whole commitlog"),
    F("queue_findings", "int64"),
    F("index_findings", "int64"),
    F("consumer_offsets_at_risk", "int64"),
    F("lost_messages", "int64"),
    F("store_findings", "int64", doc="store_findings rows of severity anomaly"),
    F("flush_window_records", "int64",
      doc="records stored after the commitlog flush checkpoint while at risk (see flush_risk)"),
    F("flush_risk", "string", nullable=True,
      doc="async_flush_unclean (ASYNC_FLUSH, abort file present: the flush windows are at risk) | "
          "sync_flush | clean_shutdown (nothing at risk from the page cache)"),
    F("store_modes", "string", nullable=True,
      doc="the modes the store uses, from its one walk (store_reader.formats.inventory): a comma-separated "
          "list of timer, controller, dledger, rocksdb_cq, rocksdb_cq_double_write, rocksdb_config, "
          "rocksdb_message, pop_rocksdb, compaction, batch_cq, cq_ext; classic when none"),
    F("repaired_store", "string", nullable=True, doc="where recover wrote the repaired store"),
    F("duration_ms", "int64"),
    F("passes", "string", doc="JSON: seconds per pass"),
    F("detail", "string", nullable=True, doc="load problems or the error that stopped the run"),
))

SEGMENTS = audit_table("segments", SEGMENT.fields + (
    F("first_store_time", "timestamp", nullable=True),
    F("last_store_time", "timestamp", nullable=True),
    F("end_phy_offset", "int64", doc="phy offset where the valid prefix ends"),
    F("broker_keeps_bytes", "int64", nullable=True,
      doc="bytes the broker's recovery keeps of this file; null: the broker deletes it"),
    F("file_mtime_ns", "int64", nullable=True, doc="with file_size and fingerprint: what --since-last compares"),
    F("fingerprint", "string", nullable=True,
      doc="SHA-256 of the written head and tail (store_reader.formats.commitlog.written_fingerprint)"),
    F("scanned", "bool", doc="scanned by this run (false: carried over unchanged, --since-last)"),
))

QUEUE_FINDINGS = audit_table("queue_findings", (
    F("kind", "string", doc="store_reader.audit.kinds (docs/finding-kinds.md)"),
    F("topic", "string"),
    F("queue_id", "int32"),
    F("from_offset", "int64", doc="first queue offset of the run"),
    F("to_offset", "int64", doc="one past the last queue offset of the run"),
    F("count", "int64", doc="entries in the run"),
    F("phy_from", "int64", nullable=True, doc="lowest phy offset the run's entries point at"),
    F("phy_to", "int64", nullable=True, doc="end (phy + size) of the highest such entry"),
    F("detail", "string", nullable=True),
))

INDEX_FINDINGS = audit_table("index_findings", (
    F("kind", "string", doc="store_reader.audit.kinds (docs/finding-kinds.md)"),
    F("index", "string", doc="on_disk | recovered: the index files as they are, or after the "
                             "broker's recovery"),
    F("file", "string", nullable=True, doc="index file name; null for a file the broker would create"),
    F("topic", "string", nullable=True),
    F("phy_from", "int64", nullable=True),
    F("phy_to", "int64", nullable=True, doc="one past the highest phy offset of the run"),
    F("count", "int64", doc="entries (or keys) in the run"),
    F("detail", "string", nullable=True),
))

CONSUMER_OFFSET_FINDINGS = audit_table("consumer_offset_findings", (
    F("source", "string", doc="consumerOffset.json | consumerOffset.json.bak"),
    F("group", "string", nullable=True),
    F("topic", "string"),
    F("queue_id", "int32"),
    F("committed_offset", "int64", doc="next queue offset the group will consume"),
    F("min_before", "int64", doc="queue min offset on disk, before recovery"),
    F("max_before", "int64"),
    F("min_after", "int64", doc="after the broker's recovery"),
    F("max_after", "int64"),
    F("status", "string", doc="GetMessageStatus of a pull at the committed offset after recovery"),
    F("next_begin_offset", "int64", doc="where the broker moves the group (its corrected offset)"),
    F("repaired_min", "int64", nullable=True, doc="queue range in the repaired store (recover)"),
    F("repaired_max", "int64", nullable=True),
    F("redelivered", "int64",
      doc="queue offsets the group already passed that it will be served again"),
    F("skipped", "int64", doc="messages the group will never receive (jumped over)"),
    F("at_risk", "bool", doc="redelivered > 0 or skipped > 0"),
))

LOST_MESSAGES = audit_table("lost_messages", (
    F("phy_offset", "int64"),
    F("segment", "string"),
    F("reason", "string", doc="behind_cut (after the truncation point in the file the broker cuts) | "
                                  "deleted_file (in a file the broker deletes)"),
    F("topic", "string"),
    F("queue_id", "int32"),
    F("queue_offset", "int64"),
    F("total_size", "int32"),
    F("sys_flag", "int32"),
    F("store_time", "timestamp"),
    F("born_time", "timestamp"),
    F("keys", "string", nullable=True),
    F("tags", "string", nullable=True),
    F("uniq_key", "string", nullable=True),
    F("msg_id", "string"),
    F("body_crc", "int32"),
    F("properties", "map<string,string>", nullable=True),
    F("body", "binary", nullable=True, doc="stored body, to re-publish"),
))

FLUSH_WINDOW = audit_table("flush_window", (
    F("window", "string", doc="commitlog | consume_queue | index: which checkpoint timestamp; rows "
                              "only while at risk (runs.flush_risk async_flush_unclean)"),
    F("checkpoint_time", "timestamp", nullable=True, doc="the checkpoint's flush timestamp"),
    F("topic", "string"),
    F("queue_id", "int32"),
    F("records", "int64", doc="records stored after the checkpoint time"),
    F("from_offset", "int64", doc="lowest queue offset among them"),
    F("to_offset", "int64", doc="one past the highest"),
    F("phy_from", "int64"),
    F("phy_to", "int64"),
    F("first_store_time", "timestamp"),
    F("last_store_time", "timestamp"),
))

STORE_FINDINGS = audit_table("store_findings", (
    F("kind", "string", doc="store_reader.audit.kinds (docs/finding-kinds.md), named as "
                            "jobs.dump --verify names them: layout.load_problem, cq.file_size, "
                            "checkpoint.*, config.undecodable, commitlog.bad_record, "
                            "commitlog.no_eof_marker, note.*"),
    F("severity", "string", doc="anomaly (the broker acts on it) | note (it only logs it)"),
    F("file", "string"),
    F("position", "int64", nullable=True, doc="byte position in the file, when known"),
    F("phy_offset", "int64", nullable=True),
    F("detail", "string", nullable=True),
))

SALVAGED_MESSAGES = audit_table("salvaged_messages", (
    F("old_phy_offset", "int64", doc="where the lost record lay in the input store"),
    F("new_phy_offset", "int64", doc="where jobs.recover --salvage re-appended it in the repaired store"),
    F("topic", "string"),
    F("queue_id", "int32"),
    F("old_queue_offset", "int64"),
    F("new_queue_offset", "int64", doc="the next queue offset of its queue in the repaired store"),
    F("total_size", "int32", doc="TOTALSIZE as re-appended"),
    F("uniq_key", "string", nullable=True, doc="unchanged: consumers that de-duplicate see a redelivery"),
    F("lmq_offsets", "string", nullable=True, doc="INNER_MULTI_QUEUE_OFFSET as rewritten (LMQ copies)"),
))

TABLES = {t.name: t for t in (RUNS, SEGMENTS, QUEUE_FINDINGS, INDEX_FINDINGS,
                              CONSUMER_OFFSET_FINDINGS, LOST_MESSAGES, FLUSH_WINDOW, STORE_FINDINGS,
                              SALVAGED_MESSAGES)}

