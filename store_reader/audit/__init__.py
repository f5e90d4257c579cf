"""The checks, Spark-free, and their one vocabulary of finding kinds (``kinds``;
docs/finding-kinds.md). ``jobs.dump --verify`` runs them on one machine (``verify_store``); the Spark audit
(``jobs.findings``: ``jobs.audit`` and the audit inside ``jobs.recover``) calls the same functions
from its tasks and its driver (``queues.compare_queue``, ``index.header_problems``,
``index.entry_findings``, ``files.store_file_findings``).

``kinds``      the vocabulary: each kind's table, severity, meaning, and dump's name for it
``report``     what a verification collects (anomalies and notes located in files, runs of entries)
``view``       one store as dump verifies it: every record once, the broker's recovered range,
               the audit's comparison of every queue (``compare.compare_queues``)
``commitlog``  commitlog layout, bad records, end-of-file markers, file gaps; abort and lock
``queues``     consume queues: what a queue holds (the REBUILT view, placed by the repair), the
               audit's four-view comparison
``queuefiles`` consume queues: the audit's comparison located in the CQ files, and their sizes
``index``      index files: the audit's header and entry checks; dump's per-file checks
``files``      checkpoint and config; ``store_file_findings`` (every check that reads no record)
``timer``      the 5.x timer store: units against the records, the broker's TimerMessageStore#recover
``plan``       the Spark audit's plan (what each task of its one job needs), flush windows at risk
``records``    the Spark audit's stage 1: records, index entries and the driver's rows keyed for the shuffle
``compare``    the Spark audit's stage 2 (queues compared, index ranges checked) and the merge into tables
``state``      what the audit tables remember of the files: run ids, fingerprints, what --since-last carries over
``offsets``    the committed consumer offsets' counts (moved, redelivered, skipped) every job prints
"""
from __future__ import annotations

from store_reader.audit.commitlog import verify_commitlog, verify_process_state
from store_reader.audit.dledger import dledger_findings
from store_reader.audit.files import (verify_checkpoint, verify_config, verify_controller,
                                      verify_inventory)
from store_reader.audit.index import verify_index
from store_reader.audit.queuefiles import verify_consume_queues
from store_reader.audit.report import Findings
from store_reader.audit.timer import timer_findings
from store_reader.formats.recordformat import TIMER_TOPIC
from store_reader.audit.view import StoreView


def verify_store(view: StoreView, index_only: bool = False) -> Findings:
    """Every check of ``jobs.dump --verify`` on the whole store (``index_only``: index files)."""
    found = Findings()
    if not index_only:
        verify_inventory(view.store, found)
        verify_process_state(view, found)
        verify_commitlog(view, found)
        verify_consume_queues(view, found)
    verify_index(view, found)
    if not index_only:
        verify_checkpoint(view.store, found)
        verify_config(view.store, found)
        if view.broker_5x:
            verify_timer(view, found)
        controller = view.controller_state()
        if controller is not None:
            verify_controller(view.store, found, *controller)
        if view.store.dledger is not None:
            dledger_findings(view.store, view.dledger_recovery, found)
    return found


def verify_timer(view: StoreView, found: Findings) -> None:
    """The timer store's checks against the recovered commitlog and rmq_sys_wheel_timer queue."""
    timer = view.queue_records().get((TIMER_TOPIC, 0))
    queue_range = (int(timer.queue_offset.min()), int(timer.queue_offset.max()) + 1) \
        if timer is not None and timer.queue_offset.size else (0, 0)
    timer_findings(view.store, view.max_phy, queue_range, found)


__all__ = ["Findings", "StoreView", "verify_store", "verify_timer"]
