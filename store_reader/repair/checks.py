"""What a repair refuses before any work: a store a running broker holds, a cut it cannot place.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from store_reader.formats.checkpoint import lock_status
from store_reader.formats.controller import EPOCH_FILE
from store_reader.exceptions import StoreReaderError, UnsupportedStoreError

if TYPE_CHECKING:
    from store_reader.formats.commitlog import SegmentSummary
    from store_reader.broker.prediction import Prediction
    from store_reader.store import Store


def resized_commitlog_files(store: Store) -> list[tuple[str, int, int]]:
    """(file, length, mappedFileSizeCommitLog) of the commitlog files whose length the broker
    refuses: the repaired store holds each at the configured size, by the broker's own rule for
    its bytes (a short file as its data then zeros, a preallocated file never written to the end;
    a long file as its first mappedFileSizeCommitLog bytes, all the broker ever maps)."""
    size = store.config.mappedFileSizeCommitLog
    return [(str(f.path), f.size, size) for f in store.commitlog_files if f.size != size]


def check_recoverable(store: Store, commitlog_gone: bool, replacing: bool) -> None:
    """Refuse, before any work, a store a running broker holds (its ``lock``), a remote one to be
    replaced by the repaired store (``replacing``: ``--apply``), and one without commitlog files
    unless ``commitlog_gone``: to the broker every message is deleted, far more often a wrong path
    or an unmounted volume."""
    lock = lock_status(store.root)
    if lock.locked:
        raise StoreReaderError(f"a running broker holds the store's lock (pid {lock.pid}); "
                               "stop it or recover a copy", lock.path)
    if replacing and not isinstance(store.root, Path):
        raise StoreReaderError("--apply swaps directories by renaming them: a remote store cannot "
                               "be replaced (write --out and copy it back)", str(store.root))
    if not store.commitlog_files and not commitlog_gone:
        raise StoreReaderError(f"{store.missing_commitlog()}: recovering would drop every message "
                               "and consume queue entry (a wrong --store or an unmounted volume?); "
                               "pass --commitlog-gone if the commitlog is really gone",
                               store.commitlog_dirs[0])


def check_repairable(store: Store, pred: Prediction, summaries: Sequence[SegmentSummary],
                     salvage: bool = False) -> None:
    """Refuse a repair whose cut this package cannot place: a commitlog file longer than the
    configured size whose valid records go on past that size (the broker maps only the first
    ``mappedFileSizeCommitLog`` bytes and would cut at the record that crosses it); a salvage in
    controller mode (re-appended records would lie past the confirm offset); a timer store
    scheduled in RocksDB (``timerrecovery.check_timer_store``)."""
    if salvage and pred.controller_mode:
        raise StoreReaderError("--salvage in controller mode: the re-appended records would lie past "
                               "the confirm offset, which the broker does not dispatch while fenced "
                               "and a slave truncates", store.root / EPOCH_FILE)
    rocksdb = pred.rocksdb_beside_max_phy_offset is not None or store.inventory.cq_served_by == "rocksdb"
    if salvage and rocksdb:
        raise UnsupportedStoreError("--salvage with a RocksDB consume queue: the re-appended records lie past "
                                    "the end its repaired database is written for (R§15.2)",
                                    os.path.join(str(store.root), store.inventory.rocksdb_cq_dir or "consumequeue"))
    if pred.rocksdb_beside_max_phy_offset is not None and pred.controller_mode:
        raise UnsupportedStoreError("rocksdbCQDoubleWriteEnable=true in controller mode: what a 5.4+ "
                                    "broker's RocksDB consume queue holds past the confirm offset is not "
                                    "modelled, so the repaired store's would not be the broker's (R§15.2)",
                                    store.config.source)
    from store_reader.broker.timerrecovery import check_timer_store
    check_timer_store(store.config, pred.broker_5x)
    size = store.config.mappedFileSizeCommitLog
    for s in summaries:
        if s.file_size > size and s.valid_bytes > size and s.segment not in pred.deleted_commitlog_files:
            raise StoreReaderError(
                f"commitlog file is {s.file_size} bytes, longer than mappedFileSizeCommitLog {size}, and "
                f"its records go on past that size: the broker maps only the first {size} bytes; "
                f"truncate it to {size} bytes (keep a copy) and run again", s.path, size)
