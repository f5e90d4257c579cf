"""A DLedger store's own files in its repaired store (R§16.1, F§16): what a one-member group's
broker leaves after its restart, so that the next restart changes none of them.

The data files are placed like a classic commitlog (``placement``: kept to DLedger's processOffset,
zeros after it, the files past it dropped). Here: the index files as DLedger's recovery leaves them
(the input's it keeps, the units it rewrites, zeros past the log's last unit where stale units of
dropped entries were), the checkpoint the new leader persists once it committed every surviving
entry, ``currterm`` as its election leaves it. Then the written files are recovered
again (``formats.dledger.recover``): DLedger must keep all of them as they are.
"""
from __future__ import annotations

import os
from pathlib import Path

from store_reader.exceptions import StoreReaderError, UnsupportedStoreError
from store_reader.formats import dledger
from store_reader.broker import dledger as broker_dledger
from store_reader.formats import recordformat as rf
from store_reader.io.storefs import location
from store_reader.repair import placement
from store_reader.io import outputs


def check_repairable(store, salvage: bool = False) -> None:
    """Refuse by name a DLedger store whose repaired store this package cannot write as the
    broker's restart leaves it (``salvage``: with the lost messages re-appended)."""
    if salvage:
        raise UnsupportedStoreError("--salvage on a DLedger store: re-appended records would need "
                                    "entries of their own in DLedger's log", str(store.dledger))
    peers = [p for p in (store.config.dLegerPeers or "").split(";") if p.strip()]
    if len(peers) > 1:
        # the entries a restart keeps are decided by the group's election, not by this log alone
        raise UnsupportedStoreError(
            f"a DLedger group of {len(peers)} members (dLegerPeers): which entries a restart keeps is "
            "decided by the election among the members (jobs.replicas --member compares them); only "
            "a one-member group's store is repaired", store.config.source or str(store.dledger))
    if store.config.storePathDLedgerCommitLog:
        raise UnsupportedStoreError(
            "storePathDLedgerCommitLog: the data files live outside the store root; the repaired "
            "store keeps them in dledger-<selfId>/data", store.config.source or str(store.dledger))


def data_dir(store, root: Path) -> Path:
    """Where the repaired store's DLedger data files go under ``root``."""
    return root / location(store.dledger).name / "data"


def write_dledger_files(store, rec: broker_dledger.DLedgerRecovery, root: Path) -> None:
    """The index files, checkpoint and ``currterm`` of the repaired store under ``root``
    (its data files are placed already, ``data_dir``)."""
    dl = root / location(store.dledger).name
    (dl / "index").mkdir(parents=True, exist_ok=True)
    end = rec.index_write_position
    size = dledger.INDEX_FILE_SIZE
    starts = {}
    for name, start, f in broker_dledger.recovered_index_files(store, rec):
        dest = str(dl / "index" / name)
        starts[start] = dest
        if f is not None:       # its units up to the log's end, zeros after them
            placement.place_segment(f.path, dest, max(0, min(end - start, size)), size)
        else:                   # created by the recovery's rewrite
            with outputs.writing(dest, "DLedger index file"), open(dest, "xb") as fh:
                fh.truncate(size)
    handles = {}
    try:
        with outputs.writing(str(dl / "index"), "DLedger index file"):
            for index, unit in broker_dledger.recovered_index_units(store, rec):
                off = index * rf.DLEDGER_INDEX_UNIT.size
                start = off - off % size
                if start not in handles:
                    handles[start] = os.open(starts[start], os.O_WRONLY)
                os.pwrite(handles[start], unit, off - start)
    finally:
        for fd in handles.values():
            os.close(fd)
    # the new leader commits every surviving entry, and its shutdown persists that
    committed = rec.ledger_end_index
    (dl / dledger.CHECKPOINT_FILE).write_bytes(dledger.checkpoint_bytes(rec.ledger_end_index, committed))
    # the election: a vote in a term below the log's last entry's is rejected with that term
    # (DLedgerLeaderElector#handleVote), the next round takes it (MemberState#nextTerm), and the
    # member votes for itself; a term at or above it is kept
    term = max(rec.curr_term, rec.ledger_end_term)
    (dl / dledger.CURRTERM_FILE).write_bytes(dledger.currterm_bytes(term, store.config.dLegerSelfId))


def check_recovers_unchanged(repaired, rec: broker_dledger.DLedgerRecovery) -> None:
    """DLedger's recovery of the repaired store (``repaired``: opened with ``read_dledger``)
    keeps every entry and unit as written: else the store is not what the broker's restart leaves."""
    again = broker_dledger.recover(repaired)
    same = (again.ledger_end_index, again.ledger_end_term, again.process_offset, again.last_entry_end) == \
        (rec.ledger_end_index, rec.ledger_end_term, rec.process_offset, rec.last_entry_end)
    if not same or again.index_rewritten_from is not None or again.data_files_deleted \
            or again.index_files_deleted or again.committed_index != rec.ledger_end_index:
        raise StoreReaderError(
            f"DLedger's recovery of the repaired store would not keep it as written (end index "
            f"{again.ledger_end_index} at {again.process_offset}, units rewritten from "
            f"{again.index_rewritten_from}, files deleted {again.data_files_deleted + again.index_files_deleted}; "
            f"expected end index {rec.ledger_end_index} at {rec.process_offset}): not repaired",
            str(repaired.dledger))
