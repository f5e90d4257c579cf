"""The one vocabulary of finding kinds: what ``jobs.dump --verify``, ``jobs.audit`` and the audit
inside ``jobs.recover`` report, and what each kind means (docs/finding-kinds.md is this table).

A kind lives in one audit table (``queue_findings``, ``index_findings``, ``store_findings``) and has
one severity: ``anomaly`` (something the broker acts on or gets wrong: the audit exits 1, dump
--verify exits 1), ``info`` (normal broker behaviour, reported but not alerting) or ``note`` (the
broker only logs it). ``jobs.dump --verify`` locates findings in files (byte positions) and names
them with its own, older, dotted names (``cq.blank_in_middle``); each such name is an alias of one
kind here (``DUMP_ALIASES``) and dump's JSON carries both (``kind``: its name, ``finding``: the
kind). Dump names without an alias are kinds of ``store_findings`` under the same name.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Kind:
    name: str
    table: str          # where the audit stores it: queue_findings | index_findings | store_findings | dump only
    severity: str       # anomaly | info | note
    meaning: str
    source: str         # the check (a function of store_reader.audit) reporting it


_Q, _I, _S, _D = "queue_findings", "index_findings", "store_findings", "dump only"
_CQ = "queues.compare_queue"
_IX = "index.entry_findings"

KINDS: dict[str, Kind] = {k.name: k for k in (
    # queue findings: disk -> broker, what a restart changes
    Kind("removed_beyond_truncation", _Q, "anomaly",
         "on disk, pointing at or past the truncation point: the broker drops it", _CQ),
    Kind("removed_below_min", _Q, "anomaly",
         "on disk, below the queue's min offset after recovery: no longer served", _CQ),
    Kind("removed_by_cq_recovery", _Q, "anomaly",
         "on disk after an invalid entry or in a dropped file: the broker's CQ recovery cuts it "
         "(and does not rebuild it on the normal path)", _CQ),
    Kind("redispatched", _Q, "anomaly", "not on disk: the broker's recovery dispatches it again", _CQ),
    Kind("replaced", _Q, "anomaly", "on disk and after recovery, with different content", _CQ),
    # queue findings: broker vs the commitlog, what a restart still gets wrong
    Kind("not_restored", _Q, "anomaly",
         "a record below the truncation point has no entry after the broker's recovery", _CQ),
    Kind("wrong_entry", _Q, "anomaly",
         "the broker serves an entry that differs from the record at that queue offset", _CQ),
    Kind("renumbered", _Q, "anomaly",
         "the broker serves a record at a queue offset other than its own: its put after a gap "
         "writes at the tail ('[BUG]logic queue order maybe wrong', E#23), or entries moved in the file", _CQ),
    Kind("delayed_early", _Q, "anomaly",
         "SCHEDULE_TOPIC_XXXX entry whose tags code is not the deliver time: delivered at once "
         "(E#30b)", _CQ),
    Kind("delayed_early_on_disk", _Q, "anomaly", "the same, in the CQ files as they are", _CQ),
    Kind("unbacked", _Q, "anomaly", "the broker serves an entry whose phy offset starts no record", _CQ),
    Kind("corrupt_served", _Q, "anomaly",
         "the broker serves an entry whose record fails its CRC check or lies behind a bad record, "
         "in a file its recovery does not read (OBSERVATIONS 17-18)", _CQ),
    Kind("duplicate_queue_offset", _Q, "anomaly", "several records claim the same queue offset", _CQ),
    # queue findings: the repaired store
    Kind("filler", _Q, "anomaly",
         "no record left for this queue offset inside the queue (zeroed bytes, a missing commitlog "
         "file): the repaired store holds a filler unit (size 2^31-1) that a pull skips, never a "
         "renumbered entry", _CQ),
    # queue findings: structure of the CQ files
    Kind("hole", _Q, "anomaly", "invalid entries inside a queue on disk, valid ones after them", _CQ),
    Kind("blank", _Q, "info",
         "filler entries on disk (size 2^31-1: the broker's pre-blank head, phy 0, or a repaired "
         "store's filler)", _CQ),
    Kind("duplicate_phy", _Q, "anomaly",
         "the same phy offset at more than one queue offset (after recovery)", _CQ),
    Kind("duplicate_phy_on_disk", _Q, "anomaly",
         "the same phy offset at more than one queue offset (on disk)", _CQ),
    Kind("queue_missing", _Q, "anomaly",
         "no CQ directory on disk for a queue the commitlog has records of", _CQ),
    # index findings
    Kind("unfindable_key", _I, "anomaly",
         "a key of a record below the truncation point that the index cannot find",
         "jobs.findings (index puts vs entries)"),
    Kind("dangling_below_min", _I, "anomaly",
         "entry pointing below the commitlog's min offset (queryMessage drops it)", _IX),
    Kind("dangling_beyond_end", _I, "anomaly",
         "entry pointing at or past the truncation point (queryMessage drops it)", _IX),
    Kind("duplicate_entry", _I, "anomaly", "the same (key hash, phy offset) indexed again", _IX),
    Kind("bad_header", _I, "anomaly",
         "header inconsistent with the file's entries (IndexService trusts it): indexCount, "
         "hashSlotCount, begin/end phy offset or timestamps; hash slots or chains that do not lead "
         "to the entries (a negative timeDiff stops a query); dump alone walks every chain",
         "index.header_checks, header_problems; index.verify_index_file"),
    # store findings: the files outside records, queues and index entries
    Kind("layout.load_problem", _S, "anomaly",
         "a commitlog file of the wrong size, a stray name, or (4.9.7) a zero-length last file: "
         "the broker refuses to load the store",
         "commitlog.verify_layout"),
    Kind("cq.file_size", _S, "anomaly",
         "a consume queue file whose length is not mappedFileSizeConsumeQueue, or a stray name in "
         "a queue directory: the broker refuses to load the store",
         "queuefiles.queue_files"),
    Kind("checkpoint.missing", _S, "anomaly",
         "no checkpoint while the commitlog holds files: the broker starts from an all-zero one "
         "(E#13)", "files.verify_checkpoint"),
    Kind("checkpoint.file_size", _S, "anomaly",
         "a checkpoint that is not 4 KiB: the broker reads zeros past its end",
         "files.verify_checkpoint"),
    Kind("config.undecodable", _S, "anomaly",
         "a config file the broker cannot use: it falls back to .bak, to an empty table, or "
         "refuses to start", "files.verify_config"),
    Kind("note.commitlog_gap", _S, "note",
         "consecutive commitlog files not one file size apart (the broker only logs it)",
         "commitlog.verify_commitlog_sequence"),
    Kind("controller.unconfirmed_tail", _S, "anomaly",
         "controller mode: commitlog records past the confirm offset the broker's recovery keeps; "
         "it does not dispatch them while fenced, serves them once promoted to master and drops "
         "them as a slave (a slave's truncation undone by a crash: apache/rocketmq #10666)",
         "files.verify_controller"),
    Kind("controller.epoch_file", _S, "anomaly",
         "controller mode: an epoch file the broker does not take (count or CRC), epochs out of "
         "order, or an epoch starting past the commitlog's end after recovery",
         "files.verify_controller"),
    Kind("note.unknown_entry", _S, "note",
         "an entry of the store directory no broker 4.9.x-5.5.x writes (the broker never reads it)",
         "files.verify_inventory"),
    Kind("note.config_tmp", _S, "note",
         "a *.json.tmp leftover of a crash during persist (4.9.7); the broker never reads it",
         "files.verify_config"),
    # from the segments' scan summaries and the predicted cut: the audit stores them (recover and
    # audit pass their summaries and prediction to files.store_file_findings)
    Kind("commitlog.bad_record", _S, "anomaly",
         "the first record of a segment failing the broker's checkMessageAndReturnSize (a torn "
         "tail included); the records lost behind it are lost_messages rows",
         "commitlog.verify_commitlog, segment_findings"),
    Kind("commitlog.no_eof_marker", _S, "anomaly",
         "valid data ending in zero padding without an end-of-file marker while more segments "
         "follow: the broker truncates there and deletes the later files",
         "commitlog.verify_commitlog, segment_findings"),
    Kind("note.after_marker", _S, "note",
         "bytes after an end-of-file marker that are not zero (never read)",
         "commitlog.verify_commitlog, segment_findings"),
    Kind("note.crc_unchecked", _S, "note",
         "records failing a CRC the broker does not check (checkCRCOnRecover=false)",
         "commitlog.verify_commitlog, segment_findings"),
    # the 5.x timer store (store_reader.audit.timer: timer log units against the commitlog's
    # records, the broker's TimerMessageStore#recover against the rmq_sys_wheel_timer queue)
    Kind("timer.unit_beyond_truncation", _S, "anomaly",
         "timer log units pointing at or past the truncation point: the dequeue drops those messages "
         "silently, or, once the commitlog grows again, delivers another message in their place "
         "(apache/rocketmq #10668); lost timer messages are lost_messages rows", "timer.timer_findings"),
    Kind("timer.unit_wrong_record", _S, "anomaly",
         "timer log units pointing below the cut at bytes that are not the rmq_sys_wheel_timer record "
         "of that size", "timer.timer_findings"),
    Kind("timer.duplicate_unit", _S, "anomaly",
         "a second timer log unit of one timer message: delivered twice (#11047, #6984)",
         "timer.timer_findings"),
    Kind("timer.unreachable_unit", _S, "anomaly",
         "pending timer log units no slot chain of the wheel reaches after the broker's recovery: "
         "never delivered", "timer.timer_findings"),
    Kind("timer.enqueued_again", _S, "anomaly",
         "rmq_sys_wheel_timer entries the broker's recovery makes the enqueue service read again "
         "although their units exist (a stale or zeroed timercheck): delivered twice",
         "timer.timer_findings"),
    Kind("timer.skipped_entries", _S, "anomaly",
         "rmq_sys_wheel_timer entries without a unit that the broker's recovery resumes after: never "
         "delivered (#7480)", "timer.timer_findings"),
    Kind("timer.torn_log", _S, "anomaly",
         "bytes that are not a unit inside the timer log: the broker truncates it there",
         "timer.timer_findings"),
    Kind("timer.wheel_file_size", _S, "anomaly",
         "a timerwheel of the wrong length: the broker refuses to start", "timer.timer_findings"),
    Kind("timer.read_time_unknown", _S, "anomaly",
         "no timercheck read time: the dequeue restarts 7 days back and delivers again what is "
         "still in the wheel", "timer.timer_findings"),
    Kind("dledger.unit_disagrees", _S, "anomaly",
         "a DLedger entry whose index unit is absent or disagrees with its header (magic, pos, size): "
         "lookups by index read the wrong bytes until DLedger's recovery rewrites the units",
         "dledger.dledger_findings"),
    Kind("dledger.beyond_committed", _S, "info",
         "DLedger entries past the checkpoint's committedIndex: a one-member group commits them after "
         "its election, a new leader of a larger group may truncate them", "dledger.dledger_findings"),
    Kind("note.timer_resume_uncertain", _S, "note",
         "the timer log's last unit points below the cut at bytes that are not its timer record: "
         "where the broker resumes the timer queue depends on how they decode (not predicted)",
         "timer.timer_findings"),
    # found by jobs.dump --verify only (they need every record of the commitlog on one machine);
    # the audit reports the same facts in other terms where it can
    Kind("index.no_record", _D, "anomaly",
         "an index entry inside the commitlog's range pointing where no record starts",
         "index.verify_index_file"),
    Kind("note.abort", _D, "note", "an abort file: the next start runs the abnormal recovery (the "
         "audit: runs.recovery_path)", "commitlog.verify_process_state"),
    Kind("note.lock", _D, "note", "a running broker holds the lock: the files change while read",
         "commitlog.verify_process_state"),
)}

# jobs.dump --verify's names for kinds of the audit's queue and index tables (the same fact,
# located in the file as it is on disk rather than per queue or per phy range)
DUMP_ALIASES = {
    "cq.blank_in_middle": "hole",
    "cq.beyond_max": "removed_beyond_truncation",
    "cq.below_min": "removed_below_min",
    "cq.slot_mismatch": "wrong_entry",
    "cq.renumbered": "renumbered",
    "cq.unbacked": "unbacked",
    "cq.missing_entries": "not_restored",
    "cq.all_missing": "queue_missing",
    "index.bad_header": "bad_header",
    "index.entry_count": "bad_header",
    "index.slot_chain": "bad_header",
    "index.beyond_max": "dangling_beyond_end",
    "index.below_min": "dangling_below_min",
    "index.missing_entries": "unfindable_key",
    "index.all_missing": "unfindable_key",
}

QUEUE_KINDS = {k.name: k.meaning for k in KINDS.values() if k.table == _Q}
INDEX_KINDS = {k.name: k.meaning for k in KINDS.values() if k.table == _I}
INFO_KINDS = {k.name for k in KINDS.values() if k.severity == "info"}


def finding_kind(name: str) -> str:
    """The kind of this vocabulary a dump name (or a kind) stands for."""
    return DUMP_ALIASES.get(name, name)


def markdown_table() -> str:
    """The table of docs/finding-kinds.md (``tests`` hold the page to it)."""
    aliases: dict[str, list[str]] = {}
    for dump_name, kind in DUMP_ALIASES.items():
        aliases.setdefault(kind, []).append(dump_name)
    lines = ["| kind | table | severity | meaning | reported by | dump --verify name |",
             "|---|---|---|---|---|---|"]
    for k in KINDS.values():
        dump = ", ".join(f"`{a}`" for a in aliases.get(k.name, ())) or \
            (f"`{k.name}`" if k.table in (_S, _D) else "-")
        lines.append(f"| `{k.name}` | {k.table} | {k.severity} | {k.meaning} | `{k.source}` | {dump} |")
    return "\n".join(lines)
