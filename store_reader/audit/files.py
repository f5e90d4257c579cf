"""Checks of the store's files outside commitlog records, consume queue entries and index entries
(checkpoint, config), and ``store_file_findings``: every check both engines run that needs no
record, as the audit's ``store_findings`` rows."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

import pyarrow as pa

from schemas.findings import STORE_FINDING_ROW
from store_reader.audit.commitlog import (PredictedCut, segment_findings, verify_commitlog_sequence,
                                          verify_layout)
from store_reader.audit.dledger import dledger_findings
from store_reader.audit.queuefiles import verify_queue_files
from store_reader.audit.report import Findings, join_path, norm_path
from store_reader.audit.timer import timer_findings, timer_queue_range
from store_reader.formats.checkpoint import CHECKPOINT_FILE_SIZE, read_checkpoint
from store_reader.formats.config import (ConfigLoad, load_config, read_consumer_offsets, read_delay_offsets,
                                         read_lmq_consumer_offsets, read_subscription_groups, read_topics)
from store_reader.formats.controller import EPOCH_FILE, ConfirmOffset, epoch_problems, read_epoch_file
from store_reader.exceptions import ConfigError
from store_reader.io.fsutil import list_dir
from store_reader.store import Store

if TYPE_CHECKING:
    from store_reader.formats.commitlog import SegmentSummary
    from store_reader.broker.prediction import Prediction

CONFIG_READERS: dict[str, Callable[[str], ConfigLoad[Any]]] = {
    "consumerOffset.json": read_consumer_offsets,
    "lmqConsumerOffset.json": read_lmq_consumer_offsets,
    "delayOffset.json": read_delay_offsets,
    "topics.json": read_topics,
    "subscriptionGroup.json": read_subscription_groups,
}


def verify_checkpoint(store: Store, found: Findings) -> None:
    """A missing checkpoint (E#13) or one of the wrong size."""
    c = read_checkpoint(store.checkpoint_path)
    path = store.checkpoint_path
    if not c.exists:
        if store.commitlog_files:
            found.add("checkpoint.missing", path, None,
                      "no checkpoint while the commitlog holds files: the broker starts from an "
                      "all-zero one (after a crash: recovery from the first file, every index file "
                      "dropped, E#13)")
        return
    found.files_checked += 1
    if c.file_length != CHECKPOINT_FILE_SIZE:
        past = "reads zeros past its end" if c.file_length < CHECKPOINT_FILE_SIZE else \
            f"ignores the {c.file_length - CHECKPOINT_FILE_SIZE} bytes after them"
        found.add("checkpoint.file_size", path, c.file_length,
                  f"checkpoint is {c.file_length} bytes, not {CHECKPOINT_FILE_SIZE}: the broker maps "
                  f"its first {CHECKPOINT_FILE_SIZE} and {past}")


def broker_load(path: Path) -> ConfigLoad[Any]:
    """What the broker loads for the config file at ``path`` (or its ``.bak``)."""
    base = path.name[:-4] if path.name.endswith(".bak") else path.name
    target = path.parent / base
    reader = CONFIG_READERS.get(base)
    if reader is not None:
        return reader(str(target))
    return load_config(target, lambda doc, p: doc, dict)


def verify_config(store: Store, found: Findings, only: Path | None = None) -> None:
    """``config/*.json`` the broker cannot use (``config.undecodable``) and ``.tmp`` leftovers;
    ``jobs.audit`` reports the same."""
    names = sorted(e.name for e in list_dir(store.config_dir, "config")   # unreadable ones too
                   if e.name.endswith(".json") and not e.is_dir())
    for name in names:
        path = store.config_dir / name
        if only is not None and norm_path(only) not in (norm_path(path), norm_path(str(path) + ".bak")):
            continue
        found.files_checked += 1
        try:
            load = broker_load(path)
        except ConfigError as exc:
            found.add("config.undecodable", exc.path or path, exc.position,
                      f"{exc.reason}: neither generation decodes, the broker refuses to start")
            continue
        if load.generation == "bak" or (load.skipped_reason not in (None, "missing", "empty")):
            falls_back = "its .bak" if load.generation == "bak" else "an empty table"
            found.add("config.undecodable", path, None,
                      f"the broker cannot use this file ({load.skipped_reason}) and loads {falls_back}")
        if load.tmp_path:
            found.note("note.config_tmp", load.tmp_path, None,
                       "leftover of a crash during persist (4.9.7); the broker never reads it")


def verify_inventory(store: Store, found: Findings) -> None:
    """Entries of the store directory no broker writes (``inventory``: the store's one walk)."""
    for e in store.inventory.unknown:
        found.note("note.unknown_entry", join_path(store.root, *e.path.split("/")), None,
                   f"no RocketMQ broker 4.9.x-5.5.x writes this {'directory' if e.is_dir else 'file'}: "
                   "the broker never reads it")


def verify_controller(store: Store, found: Findings, confirm: ConfirmOffset, unconfirmed: int,
                      first_unconfirmed: int | None) -> None:
    """Controller mode (``controller``): records kept past the confirm offset as the broker's
    recovery corrects it, and what the epoch file says against the recovered commitlog."""
    if unconfirmed and first_unconfirmed is not None:
        f = next((f for f in store.commitlog_files
                  if f.start <= first_unconfirmed < f.start + f.size), None)
        found.add("controller.unconfirmed_tail", f.path if f else store.commitlog_dirs[0],
                  first_unconfirmed - f.start if f else None,
                  f"{unconfirmed} records (phy {confirm.corrected}..{confirm.end}) past the confirm "
                  f"offset {confirm.corrected} (checkpoint {confirm.checkpoint}): the broker keeps "
                  "them undispatched while fenced, serves them if promoted to master, drops them "
                  "as a slave (apache/rocketmq #10666)")
    for path, position, message in epoch_problems(read_epoch_file(store.root / EPOCH_FILE), confirm.end):
        found.add("controller.epoch_file", path, position, message)


def store_file_findings(store: Store, broker_5x: bool | None = None,
                        summaries: Sequence[SegmentSummary] | None = None,
                        prediction: Prediction | None = None) -> pa.Table:
    """What ``jobs.dump --verify`` reports without reading a record or an entry, as
    ``store_findings`` rows: entries of the store directory no broker writes (``inventory``), a
    commitlog the broker refuses to load (``layout.load_problem``), a
    gap in its file sequence (a note: the broker only logs it), consume queue files of the wrong
    size, a missing or short checkpoint, config files the broker cannot use. ``broker_5x``: whose
    load rules apply (default: what the store looks like). With the segments' scan ``summaries``
    and the broker's predicted recovery, also dump's commitlog findings
    (``commitlog.segment_findings``: bad records, missing end-of-file markers, their notes), and a
    DLedger store's own (``dledger.dledger_findings``: data against index units, uncommitted entries)."""
    found = Findings()
    verify_inventory(store, found)
    verify_commitlog_sequence(store, found)
    verify_config(store, found)
    five = store.looks_5x() if broker_5x is None else broker_5x
    verify_layout(store, five, found)
    verify_queue_files(store, five, found)
    verify_checkpoint(store, found)
    if summaries is not None and prediction is not None:
        cut = PredictedCut.of(summaries, prediction.start_file, prediction.max_phy_offset)
        segment_findings(summaries, cut, store.scan_options(broker_5x=five).check_crc, found)
        if five and prediction.load_result:
            timer_findings(store, prediction.max_phy_offset, timer_queue_range(prediction), found)
    if prediction is not None and prediction.dledger is not None:
        dledger_findings(store, prediction.dledger, found)
    if prediction is not None and prediction.controller is not None:
        u = prediction.unconfirmed
        verify_controller(store, found, prediction.controller, u.records if u else 0,
                          u.first_phy if u else None)
    return pa.Table.from_pylist(found.rows(), schema=STORE_FINDING_ROW.arrow())
