"""What the broker does on restart of a DLedger store (R§16), as ``dump`` and ``recover --dry-run``
print it: DLedger's own recovery (``store_reader.broker.dledger.recover``), then per broker version the
consume queues it serves (``broker_restart``). Spark-free.
"""
from __future__ import annotations

from typing import Any, Callable, Iterator

from store_reader.broker import dledger, dledgercommitlog
from store_reader.broker import versions as broker_versions
from store_reader.audit.dledger import dledger_findings
from store_reader.audit.kinds import KINDS
from store_reader.audit.report import Findings
from store_reader.store import Store


def lines(store: Store, versions: list[str]) -> Iterator[tuple[str, Callable[[], dict[str, Any]]]]:
    """(text, JSON object) lines: the DLedger recovery and the store's DLedger findings, then each
    version's restart."""
    rec = dledger.recover(store)
    yield (f"dledger: {store.dledger} ({len(store.commitlog_files)} data files); DLedger's recovery "
           f"(DLedgerMmapFileStore#recover, no CRC check) walks from {rec.start_file} and ends "
           f"at {rec.process_offset} ({_why(rec)})", lambda: {"type": "dledger_recovery", **rec.as_dict()})
    found = Findings()
    dledger_findings(store, rec, found)
    for a in found.anomalies:
        severity = KINDS[a.finding].severity
        yield (f"  {severity} {a.kind} {a.where()}: {a.message}",
               lambda a=a, severity=severity: {**a.as_json(), "severity": severity})
    if rec.refused is not None:
        yield (f"  the broker would REFUSE to start: {rec.refused}", lambda: {"type": "dledger_refused",
                                                                             "why": rec.refused})
        return
    yield (f"  entries {rec.ledger_begin_index}..{rec.ledger_end_index} kept, last entry term "
           f"{rec.ledger_end_term} ending at phy {rec.last_entry_end}; index units through "
           f"{rec.index_write_position}"
           + (f", rewritten from entry {rec.index_rewritten_from}" if rec.index_rewritten_from is not None else "")
           + (f"; data files deleted {rec.data_files_deleted}" if rec.data_files_deleted else ""),
           lambda: {"type": "dledger_log", "begin": rec.ledger_begin_index, "end": rec.ledger_end_index,
                    "term": rec.ledger_end_term, "end_phy": rec.last_entry_end})
    yield (f"  committed index after load {rec.committed_index} (checkpoint committedIndex="
           f"{rec.checkpoint_committed_index}); a one-member group's new leader commits through "
           f"{rec.ledger_end_index}; other members may truncate this member's uncommitted entries",
           lambda: {"type": "dledger_committed", "after_load": rec.committed_index,
                    "committed_pos_after_load": rec.committed_pos, "after_election": rec.ledger_end_index})
    kept = dledgercommitlog.restart_keeps(store, rec)
    if kept.unreadable:
        yield (f"  entries whose record the dispatch cannot read: {kept.unreadable} (the queues past "
               "them are not predicted)", lambda: {"type": "dledger_unreadable", "phy": kept.unreadable})
        return
    for v in versions:
        b = dledgercommitlog.broker_restart(store, rec, v)
        served = b.served()
        text = (f"  broker {v} ({b.recovery_path} path): consume queues max phy "
                f"{b.max_phy_offset_of_consume_queue}"
                + (f", truncated at {b.cq_truncated_at}" if b.cq_truncated_at is not None else "")
                + f", reput from {b.reput_from} to {rec.last_entry_end}: {len(served)} queues, "
                f"{sum(len(x) for x in served.values())} entries")
        if b.abnormal_walk_start is not None:
            text += (f"; its abnormal walk from {b.abnormal_walk_start} stops at {b.abnormal_walk_end}"
                     f" (processOffset {b.abnormal_process_offset})")
        if b.dispatched_past_end:
            text += (f"; {b.dispatched_past_end} messages past DLedger's end dispatched and "
                     "served (bytes DLedger truncated)")
        yield text, lambda b=b, served=served, v=v: {
            "type": "dledger_broker", "version": v, "recovery_path": b.recovery_path,
            "cq_truncated_at": b.cq_truncated_at, "reput_from": b.reput_from,
            "abnormal_walk_start": b.abnormal_walk_start, "abnormal_walk_end": b.abnormal_walk_end,
            "abnormal_process_offset": b.abnormal_process_offset,
            "dispatched_past_end": b.dispatched_past_end,
            "queues": {f"{t}/{q}": {"min": e[0][0], "max": e[-1][0] + 1} for (t, q), e in sorted(served.items())}}


def _why(rec: dledger.DLedgerRecovery) -> str:
    if rec.walk_end == "entry":
        return f"entry at {rec.walk_end_position} fails its {rec.walk_end_check} check"
    return {"last_file": "the last file's blank", "zero_size": "unwritten space",
            "no_data": "no data file"}[rec.walk_end]


def versions_for(store: Store, broker_version: str | None) -> list[str]:
    """A what-if's versions (``versions.versions_of``), one version, or the store's own guess."""
    if broker_versions.is_whatif(broker_version):
        return broker_versions.versions_of(broker_version)
    return [broker_version or store.broker_version()]
