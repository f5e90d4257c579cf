"""The broker's index files through its recovery (``IndexService``, R§8, F§7.4): what ``load`` keeps,
``buildIndex`` fed batch by batch as the records are dispatched, the files after recovery, and the
queries on them (``queryOffset``, ``DefaultMessageStore#queryMessage``).
"""
from __future__ import annotations

import os
import shutil
import tempfile
import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from store_reader.broker.dispatch import index_put_keys
from store_reader.exceptions import OutputError
from store_reader.formats.indexfile import (IndexFile, IndexHeader, _put_all, create_index_file, list_index_files,
                                            query_key_hash, read_header, unmap_entries)
from store_reader.formats.javahash import index_key, index_key_hash, index_key_hashes_of
from store_reader.io.storefs import location

if TYPE_CHECKING:
    from store_reader.formats.brokerconf import BrokerConfig
    from store_reader.io.storefs import PathRef
    from store_reader.formats.indexfile import IndexPuts
    from store_reader.store import Store
    from store_reader.broker.prediction import Prediction
    from store_reader.broker.replay import Dispatched


class ScratchDir:
    """Where the replay writes the index files it builds: a directory of the caller's (the run's
    scan directory, which executors see too) or, with None, a temporary one removed once nothing
    refers to this object (the predicted files built in it hold it)."""

    def __init__(self, path: str | None) -> None:
        if path is None:
            path = tempfile.mkdtemp(prefix="rocketmq-predict-")
            weakref.finalize(self, shutil.rmtree, path, True)
        self.path = path

    def new_file(self, stem: str) -> str:
        fd, path = tempfile.mkstemp(prefix=f"{stem}-", dir=self.path)
        os.close(fd)
        return path


@dataclass(frozen=True)
class _BuiltFile:
    header: IndexHeader
    path: str              # in the scratch directory
    continued: bool        # the last file kept at load, continued (else a fresh file)


class IndexDispatch:
    """``IndexService#buildIndex`` fed batch by batch as the records are dispatched (R§8, F§7.4),
    on a thread of its own so the key hashing and slot chains overlap the consume queue puts.

    Like the broker, it writes each index file through a shared mapping of a file (in
    ``scratch``): the entries are appended in order, so once a batch is in, its entries' pages are
    handed back to the page cache and the process holds the hash slots and one batch, whatever
    the number of records replayed.

    A record below the current file's endPhyOffset is skipped; that end is the phy of the last
    record that put keys and only grows, so it is a running max over the records with keys
    (ROLLBACK records and records without keys put nothing)."""

    PENDING = 4          # batches queued for the thread at most

    def __init__(self, config: BrokerConfig, start_header: IndexHeader, base: PathRef | None,
                 scratch: ScratchDir, tag_keys: bool) -> None:
        """``start_header``: where the puts start (``IndexHeader.after_load``); ``base``: the file
        it heads when that file is continued, None for a fresh file; ``tag_keys``: records put
        their tag key too (``dispatch.index_put_keys``)."""
        from concurrent.futures import ThreadPoolExecutor

        self.tag_keys = tag_keys

        self.hash_slot_num, self.index_num = config.maxHashSlotNum, config.maxIndexNum
        self.size = config.index_file_size
        self.end_phy = start_header.end_phy_offset
        self.scratch = scratch
        self.built: list[_BuiltFile] = []
        self.header, self.base = start_header, base
        self.path: str | None = None
        self.continued = False             # the open file is ``base`` continued
        self.data: np.ndarray | None = None
        self.released = 0                  # entries whose pages were handed back
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="index-dispatch")
        self._pending: list = []

    def add(self, batch: pa.RecordBatch, puts: IndexPuts | None = None) -> None:
        self._pending.append(self._pool.submit(self._add, batch, puts))
        if len(self._pending) > self.PENDING:
            self._pending.pop(0).result()

    def _add(self, batch: pa.RecordBatch, puts: IndexPuts | None) -> None:
        """``puts``: the keys of the batch's records as the run's scan hashed them (those of
        other records too), or None (built and hashed here)."""
        if puts is None:
            counts, rows, keys = index_put_keys(batch, self.tag_keys)
        else:
            puts, counts = puts.of_records(batch.column("phy_offset").to_numpy())
        cand = np.flatnonzero(counts > 0)
        if not cand.size:
            return
        phy = batch.column("stored_phy_offset").to_numpy()
        bound = np.maximum.accumulate(np.concatenate(([self.end_phy], phy[cand][:-1])))
        self.end_phy = max(self.end_phy, int(phy[cand].max()))
        indexed = np.zeros(len(phy), dtype=bool)
        indexed[cand] = phy[cand] >= bound
        if not indexed.any():
            return
        sel = None if indexed[cand].all() else np.repeat(indexed, counts)
        if puts is None:
            kh = index_key_hashes_of(batch.column("topic"), rows if sel is None else rows[sel],
                                     keys if sel is None else keys.filter(pa.array(sel)))
        else:
            kh = puts.key_hash if sel is None else puts.key_hash[sel]
        n = counts[indexed]
        self._put(kh.astype(np.int64), np.repeat(phy[indexed], n),
                  np.repeat(batch.column("store_timestamp").to_numpy()[indexed], n))

    def _open_file(self) -> None:
        self.path = self.scratch.new_file("index")
        self.continued = self.base is not None and not self.built   # the last file kept at load
        try:
            if self.continued:
                loc = location(self.base)
                if loc.is_local:
                    shutil.copyfile(loc.path, self.path)
                else:
                    with loc.open_input() as src, open(self.path, "wb") as dst:
                        shutil.copyfileobj(src, dst, 1 << 20)
            else:
                create_index_file(self.path, self.size, mode="wb")
        except OSError as exc:
            raise OutputError(f"cannot write the replayed index file: {exc.strerror or exc}", self.path) from None
        self.data = np.memmap(self.path, dtype=np.uint8, mode="r+")
        self.released = 0

    def _put(self, kh: np.ndarray, phy: np.ndarray, ts: np.ndarray) -> None:
        lo = 0
        while lo < len(kh):
            if self.data is None:
                self._open_file()
            hi = min(len(kh), lo + self.header.room(self.index_num))
            self.header = _put_all(self.data, self.header, kh[lo:hi], phy[lo:hi], ts[lo:hi],
                                   self.hash_slot_num)
            lo = hi
            if self.header.is_full(self.index_num):
                self._close_file()
            else:                          # the last entry's page is written again by the next batch
                unmap_entries(self.data, self.hash_slot_num, self.released, self.header.index_count - 1)
                self.released = self.header.index_count - 1

    def _close_file(self) -> None:
        assert self.data is not None and self.path is not None
        self.data.flush()                  # written through to the file for executors that read it
        self.built.append(_BuiltFile(self.header, self.path, self.continued))
        self.header, self.data, self.path = self.header.successor(), None, None

    def finish(self) -> list[_BuiltFile]:
        """The files that got puts, in creation order (the last one possibly not full)."""
        try:
            for f in self._pending:
                f.result()
        finally:
            self._pool.shutdown()
        if self.data is not None:
            self._close_file()
        return self.built


@dataclass
class PredictedIndexFile:
    """An index file after recovery: kept as it was, continued, or created by the re-dispatch."""

    name: str | None                  # None for a file the broker would create (named by its clock)
    header: IndexHeader
    path: PathRef | None = None       # the file on disk it was loaded from
    built: str | None = None          # the file as the re-dispatch left it (None: unchanged on disk)
    scratch: ScratchDir | None = field(default=None, repr=False, compare=False)   # keeps ``built``

    @property
    def data(self) -> np.ndarray | None:
        """The built file's bytes, read whole (None for a file unchanged on disk)."""
        return None if self.built is None else np.fromfile(self.built, np.uint8)

    def view(self, config: BrokerConfig) -> IndexFile:
        return IndexFile(self.built or self.path, config.maxHashSlotNum, config.maxIndexNum)


def index_files_at_load(store: Store, abnormal: bool, index_msg_timestamp: int, scratch: ScratchDir,
                        tag_keys: bool) -> tuple[list[PredictedIndexFile], IndexDispatch | None]:
    """R§8: the index files ``IndexService#load`` keeps (after a crash, none that ends after the
    checkpoint's indexMsgTimestamp) and the index dispatch that continues them (None when
    ``messageIndexEnable`` is off): into the last file unless it is full. ``tag_keys``:
    ``index_tag_keys`` of the broker's version."""
    cfg = store.config
    files = []
    for ref in list_index_files(store.index_dir, cfg.index_file_size, strict=False):
        header = read_header(ref.path)
        if abnormal and header.end_timestamp > index_msg_timestamp:
            continue                                  # IndexService#load(lastExitOK=false)
        files.append(PredictedIndexFile(ref.name, header, path=ref.path))
    if not cfg.messageIndexEnable:
        return files, None
    last = files[-1] if files else None
    if last is None:
        return files, IndexDispatch(cfg, IndexHeader.first(), None, scratch, tag_keys)   # a fresh first file
    header, continued = last.header.after_load(cfg.maxIndexNum)
    return files, IndexDispatch(cfg, header, last.path if continued else None, scratch, tag_keys)


def predict_index(files: list[PredictedIndexFile], index_msg_timestamp: int, dispatched: Dispatched
                  ) -> tuple[list[PredictedIndexFile], int]:
    """R§8 and F§7.4: (index files after recovery, checkpoint indexMsgTimestamp), from the files
    kept at load (``index_files_at_load``) and what the dispatch built."""
    if dispatched.index is None:
        return files, index_msg_timestamp
    scratch = dispatched.index.scratch
    built = dispatched.index.finish()
    if not built:
        return files, index_msg_timestamp
    last = files[-1] if files else None
    files = list(files)
    for b in built:
        if b.continued:
            files[-1] = PredictedIndexFile(last.name, b.header, path=last.path, built=b.path, scratch=scratch)
        else:
            # the file before a new one was full: IndexService#flush moves indexMsgTimestamp
            if files:
                index_msg_timestamp = files[-1].header.end_timestamp
            files.append(PredictedIndexFile(None, b.header, built=b.path, scratch=scratch))
    return files, index_msg_timestamp


def query_index(pred: Prediction, config: BrokerConfig, topic: str, key: str,
                max_num: int | None = None) -> list[int]:
    """``IndexService#queryOffset`` on the predicted index files (hash candidates, newest first)."""
    views = [f.view(config) for f in pred.index_files]
    return query_key_hash(views, index_key_hash(index_key(topic, key)),
                          hash_slot_num=config.maxHashSlotNum, index_num=config.maxIndexNum,
                          max_num=max_num or config.maxMsgsNumBatch)


def query_message(pred: Prediction, config: BrokerConfig, topic: str, key: str,
                  max_num: int | None = None) -> list[int]:
    """``DefaultMessageStore#queryMessage``: the candidates sorted, keeping those that resolve to
    bytes of the recovered commitlog (dangling entries are dropped silently, OBSERVATIONS 7, 10)."""
    lo, hi = pred.min_phy_offset, pred.max_phy_offset
    return [p for p in sorted(query_index(pred, config, topic, key, max_num)) if lo <= p < hi]
