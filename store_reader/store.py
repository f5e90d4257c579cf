"""Discover a RocketMQ store root and open its files read-only (spec ``store-format.md`` §1, §2).

``open_store`` never writes anything: a store may belong to a live broker. Problems that make the
broker refuse to load the store (a file of the wrong size, a stray name in a mapped-file directory)
are collected in ``Store.load_problems`` so the recovery can report "the broker would not start";
``strict=True`` raises the first one instead.

A store root may also be remote (``s3://bucket/store``, or a ``pyarrow.fs`` filesystem plus a
path): every file is then read through ``storefs`` and the paths handed out are
``storefs.StoreLocation`` values instead of strings.
"""
from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Sequence

import pyarrow as pa
import pyarrow.fs as pafs

from store_reader.formats import inventory
from store_reader.formats.brokerconf import BrokerConfig, broker_config_of
from store_reader.formats.checkpoint import LOGICS_PHYSICAL_OFFSET, USED_BYTES_5, abort_exists, read_checkpoint
from store_reader.formats.commitlog import SegmentScan, SegmentSummary, summaries_table, summarize_segment
from store_reader.exceptions import (FileSizeError, NotAStoreError, StoreReaderError, StrayFileError,
                         UnreadableFileError, UnsupportedStoreError)
from store_reader.io.fsutil import list_dir
from store_reader.formats.inventory import Inventory
from store_reader.formats.mappedfile import MappedFile, list_mapped_files
from store_reader.formats.recordformat import (DLEDGER_BODY_OFFSET, MAGIC_V2, PROPERTIESLENGTH, SIZE_AND_MAGIC,
                                               ScanOptions)
from store_reader.io.storefs import PathRef, StoreLocation, location

@dataclass
class Store:
    """A store root with its layout discovered (see ``open_store``).

    ``root`` is a ``Path`` for a local store and a ``storefs.StoreLocation`` for a remote one; both
    join with ``/`` and answer ``exists()`` / ``is_dir()`` / ``is_file()``.
    """

    root: Path | StoreLocation
    config: BrokerConfig
    inventory: Inventory
    """Every entry of the store directory, classified, and the modes it uses (one walk)."""
    commitlog_dirs: list[Path | StoreLocation]
    commitlog_files: list[MappedFile]
    abort_exists: bool
    lock_exists: bool
    load_problems: list[StoreReaderError] = field(default_factory=list)
    load_problems_49: list[StoreReaderError] = field(default_factory=list)
    """Refusals only 4.9.7's load has (a commitlog sub-directory, a zero-length last file)."""
    left_out: list[str] = field(default_factory=list)
    """Entries of the commitlog directories that are not in ``commitlog_files``: what the broker
    skips or cannot map (sub-directories, names that are not numbers, a zero-length last file)."""
    notes: list[str] = field(default_factory=list)
    dledger: Path | StoreLocation | None = None
    """A DLedger store's ``dledger-<selfId>`` directory (``open_store(read_dledger=True)``): the
    commitlog files are then its data files, each record inside an entry (F§16)."""

    # -- paths --------------------------------------------------------------------------------
    @property
    def consume_queue_dir(self) -> Path | StoreLocation:
        return self.root / "consumequeue"

    @property
    def index_dir(self) -> Path | StoreLocation:
        return self.root / "index"

    @property
    def checkpoint_path(self) -> Path | StoreLocation:
        return self.root / "checkpoint"

    @property
    def config_dir(self) -> Path | StoreLocation:
        return self.root / "config"

    @property
    def lock_path(self) -> Path | StoreLocation:
        return self.root / "lock"

    @property
    def loadable(self) -> bool:
        """False when the broker's ``load()`` would fail on these files (either version)."""
        return not self.load_problems

    def load_problems_for(self, broker_5x: bool) -> list[StoreReaderError]:
        """What makes ``broker_5x``'s ``load()`` fail on the commitlog files."""
        return self.load_problems + ([] if broker_5x else self.load_problems_49)

    # -- commitlog ------------------------------------------------------------------------------
    def missing_commitlog(self) -> str:
        """Why the store has no commitlog file (``commitlog_files`` is empty): to the broker all of
        its messages are deleted, which is far more often a wrong path or an unmounted volume."""
        dirs = "" if len(self.commitlog_dirs) == 1 else \
            f" ({', '.join(str(d) for d in self.commitlog_dirs)})"
        if not any(d.is_dir() for d in self.commitlog_dirs):
            return f"the commitlog directory is missing{dirs}"
        return f"the commitlog directory holds no commitlog file{dirs}"

    def scan_options(self, broker_5x: bool | None = None, compute_crc: bool = True, index_tags: bool = False
                     ) -> ScanOptions:
        if broker_5x is None:
            broker_5x = self.looks_5x()
        opts = ScanOptions.for_broker(self.config, broker_5x, compute_crc=compute_crc, index_tags=index_tags)
        return dataclasses.replace(opts, dledger=True) if self.dledger is not None else opts

    def scan_commitlog(self, columns: Sequence[str] | None = None, opts: ScanOptions | None = None,
                       include_lost: bool = False, batch_size: int | None = None
                       ) -> Iterator[pa.RecordBatch]:
        """Record batches of every segment in commitlog order (see ``commitlog.SegmentScan``)."""
        opts = opts or self.scan_options()
        kwargs = {} if batch_size is None else {"batch_size": batch_size}
        for f in self.commitlog_files:
            yield from SegmentScan(f.path, opts, columns=columns, include_lost=include_lost, **kwargs)

    def segment_summaries(self, opts: ScanOptions | None = None) -> pa.Table:
        """One row per commitlog file (``schemas.SEGMENT``)."""
        opts = opts or self.scan_options()
        return summaries_table(self.summaries(opts))

    def summaries(self, opts: ScanOptions | None = None) -> list[SegmentSummary]:
        opts = opts or self.scan_options()
        return [summarize_segment(f.path, opts) for f in self.commitlog_files]

    # -- version hints (R§1, F§12) -----------------------------------------------------------------
    def looks_5x(self) -> bool:
        """Best guess of the writing broker's generation from what the files show.

        5.x leaves ``abort.bak`` behind (OBSERVATIONS 15), fills checkpoint bytes 24..39, keeps the
        trailing ``\\x02`` of a record's properties and may write V2 records; 4.9.7 does none of these.
        """
        return self.version_hints().get("broker_5x", False)

    def broker_version(self) -> str:
        """The recovery rules a prediction uses when none is asked for (``versions.VERSIONS``):
        4.9 for a 4.9 store; 5.5 when the checkpoint holds a logicsPhysicalOffset (only 5.5.0 and
        later write one); 5.4 with ``rocksdbstore/`` (``MessageRocksDBStorage``: 5.4.0 and later
        make it at every start, 5.3.3 never), else 5.3."""
        from store_reader.broker.versions import V49, V53, V54, V55

        hints = self.version_hints()
        if not hints.get("broker_5x", False):
            return V49
        return V55 if hints.get("checkpoint_logics_physical_offset") else V54 if hints.get("rocksdbstore") else V53

    def version_hints(self) -> dict[str, bool]:
        hints: dict[str, bool] = {}
        if self.inventory.has(inventory.ROCKSDB_MESSAGE):
            hints["broker_5x"] = hints["rocksdbstore"] = True
        if (self.root / "abort.bak").exists():
            hints["broker_5x"] = True
            hints["abort.bak"] = True
        try:
            ckpt = read_checkpoint(self.checkpoint_path)
            # only 5.x writes bytes 24..39, only 5.5 bytes 40..47 (in a file that holds them)
            held = ckpt.file_length or 0
            if held >= USED_BYTES_5 and ckpt.used_bytes == USED_BYTES_5:
                hints["broker_5x"] = True
                hints["checkpoint_5_longs"] = True
            if held >= USED_BYTES_5 + LOGICS_PHYSICAL_OFFSET.size and ckpt.logics_physical_offset:
                hints["broker_5x"] = hints["checkpoint_logics_physical_offset"] = True
        except (OSError, StoreReaderError):
            pass
        first = self._first_record_tail()
        if first is not None:
            magic, last_byte = first
            if magic == MAGIC_V2:
                hints["broker_5x"] = hints["v2_record"] = True
            elif last_byte is not None:
                hints.setdefault("broker_5x", last_byte == 0x02)
                hints["properties_trailing_separator"] = last_byte == 0x02
        return hints

    def _first_record_tail(self) -> tuple[int, int | None] | None:
        """(magic, last byte of the properties) of the first record of the first segment."""
        at = DLEDGER_BODY_OFFSET if self.dledger is not None else 0
        for f in self.commitlog_files:
            try:
                with location(f.path).open_reader() as r:
                    head = r.read_at(at, SIZE_AND_MAGIC.size)
                    if len(head) < SIZE_AND_MAGIC.size:
                        continue
                    size, magic = SIZE_AND_MAGIC.unpack(head)
                    if size <= SIZE_AND_MAGIC.size or size > f.size:
                        return None
                    tail = r.read_at(at + size - PROPERTIESLENGTH.size - 1, PROPERTIESLENGTH.size + 1)
            except (OSError, StoreReaderError):
                return None
            if len(tail) < PROPERTIESLENGTH.size + 1:
                return None
            props_len = PROPERTIESLENGTH.unpack_from(tail)[0]
            return magic, (tail[-1] if props_len != 0 else None)
        return None


def _commitlog_dirs(root: Path | StoreLocation, config: BrokerConfig) -> list[Path | StoreLocation]:
    if config.storePathCommitLog:
        # relative to the root; an absolute path replaces it (on the root's filesystem)
        dirs = [root / p.strip() for p in config.storePathCommitLog.split(",") if p.strip()]
        if all(d.is_dir() for d in dirs):
            return dirs
    return [root / "commitlog"]


def _dledger_data_dirs(root: Path | StoreLocation, config: BrokerConfig, inv: Inventory
                       ) -> tuple[Path | StoreLocation, list[Path | StoreLocation]]:
    """A DLedger store's ``dledger-<selfId>`` directory and its data directories (F§16.1), or the
    reason it cannot be read, raised by name."""
    found = inv.dledger_dirs
    name = f"dledger-{config.dLegerSelfId}"
    if name not in found:
        raise UnsupportedStoreError(
            f"a DLedger store whose directories ({', '.join(found)}) are not dledger-<dLegerSelfId> "
            f"= {name}: which member's log the broker reads is not known (pass its broker.conf)",
            f"{root}/{found[0]}")
    dl = root / name
    classic = [e for e in list_dir(root / "commitlog", "commitlog") if not e.is_dir()] \
        if (root / "commitlog").is_dir() else []
    if classic:       # F§16.5: offsets below dividedCommitlogOffset are the classic files'
        raise UnsupportedStoreError(
            "a DLedger store converted from classic mode (commitlog/ still holds files below the "
            "first DLedger entry): this project reads only stores whose whole log is DLedger's",
            str(classic[0].location))
    if config.storePathDLedgerCommitLog:
        return dl, [root / p.strip() for p in config.storePathDLedgerCommitLog.split(",") if p.strip()]
    return dl, [dl / "data"]


def open_store(path: PathRef, broker_config: BrokerConfig | PathRef | None = None,
               strict: bool = False, *, filesystem: pafs.FileSystem | None = None,
               read_dledger: bool = False) -> Store:
    """Discover the store at ``path`` without writing anything.

    Parameters
    ----------
    path
        The store root (``storePathRootDir``): holds ``commitlog/``, ``consumequeue/``, ``index/``,
        ``checkpoint``, ``config/``. A local path, a URI (``s3://bucket/store``, ``hdfs://...``,
        ``file:///...``), a ``storefs.StoreLocation``, or a path on ``filesystem``.
    broker_config
        A ``BrokerConfig``, a ``broker.conf`` (a local path, or a ``StoreLocation`` / URI), or None
        for ``<root>/broker.conf`` if present, else the broker's defaults.
    strict
        Raise the first load problem instead of collecting it in ``Store.load_problems``.
    read_dledger
        The caller reads a DLedger store (``enableDLegerCommitLog``) through the DLedger framing:
        its data files are the commitlog files (``Store.dledger``). Otherwise such a store is
        refused by name (the recovery of its classic commitlog would mispredict it).
    filesystem
        The ``pyarrow.fs`` filesystem ``path`` is on. A remote store is read with ranged reads, one
        commitlog segment at a time; a plain ``LocalFileSystem`` is read like any local path.
    """
    loc = location(path, filesystem)
    # absolute: the paths handed to Spark tasks must not depend on a worker's working directory
    root: Path | StoreLocation = Path(os.path.abspath(loc.path)) if loc.filesystem is None else loc
    try:
        return _discover(root, broker_config, strict, read_dledger)
    except OSError as exc:      # a remote filesystem that fails to answer; local stat errors
        raise UnreadableFileError(f"cannot read the store: {exc.strerror}",
                                  exc.filename or str(root)) from None


def _discover(root: Path | StoreLocation, broker_config: BrokerConfig | PathRef | None,
              strict: bool, read_dledger: bool = False) -> Store:
    if not root.exists():
        if isinstance(root, Path):
            from store_reader.repair.apply import journal_path

            if journal_path(root).exists():
                raise NotAStoreError(f"store directory does not exist: an --apply was interrupted "
                                     f"between two renames ({journal_path(root)}); run it again to "
                                     "finish it", str(root))
        raise NotAStoreError("store directory does not exist", str(root))
    if not root.is_dir():
        raise NotAStoreError("store path is not a directory", str(root))
    if broker_config is None and (root / "broker.conf").is_file():
        broker_config = root / "broker.conf"
    config = broker_config_of(broker_config)
    dirs = _commitlog_dirs(root, config)
    inv = inventory.take(root, config, [d.name for d in dirs if d.parent == root])
    if not inv.kinds() & inventory.STORE_MARKERS and not any(d.is_dir() for d in dirs):
        raise NotAStoreError("not a RocketMQ store root: none of commitlog/, consumequeue/, index/, "
                             "checkpoint, config/ is there", str(root))
    inv.refuse(root, read_dledger)
    dledger = None
    if read_dledger and inventory.DLEDGER in inv.modes and inv.dledger_dirs:
        dledger, dirs = _dledger_data_dirs(root, config, inv)
    what = "DLedger data" if dledger is not None else "commitlog"
    problems: list[StoreReaderError] = []
    problems_49: list[StoreReaderError] = []
    notes: list[str] = []
    files: list[MappedFile] = []
    for d in dirs:
        files += list_mapped_files(d, config.mappedFileSizeCommitLog, what,
                                   "mappedFileSizeCommitLog", problems, notes, problems_49=problems_49)
    files.sort(key=lambda f: f.name)
    for a, b in zip(files, files[1:]):
        if a.name == b.name:
            problems.append(StrayFileError(f"commitlog file name also present at {a.path}", str(b.path)))
    sized = [f for f in files if f.size]
    if sized and all(f.size != config.mappedFileSizeCommitLog for f in sized):
        raise FileSizeError(
            f"every {what} file is {sized[0].size} bytes but mappedFileSizeCommitLog is "
            f"{config.mappedFileSizeCommitLog} ({config.source or 'broker default'}): "
            f"{config.settings_hint}", str(sized[0].path))
    mapped = {f.name for f in files}
    left_out = [str(e.location) for d in dirs if d.is_dir() for e in list_dir(d, what)
                if e.name not in mapped]
    store = Store(root=root, config=config, inventory=inv, commitlog_dirs=dirs, commitlog_files=files,
                  abort_exists=abort_exists(root), lock_exists=(root / "lock").is_file(),
                  load_problems=problems, load_problems_49=problems_49, left_out=left_out, notes=notes,
                  dledger=dledger)
    if strict and problems:
        raise problems[0]
    return store
