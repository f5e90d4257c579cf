"""Where the broker's commitlog recovery starts and where it cuts (``CommitLog#recoverNormally`` and
``#recoverAbnormally``, R§4): the start file search (the consume queues' and the index's test, the
combine store's count-down), the walk's end, the files truncated and deleted (R§5.1).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

import numpy as np

from store_reader.formats import recordformat as rf
from store_reader.broker.versions import V53, V54, V55, is_5x, since

if TYPE_CHECKING:
    from store_reader.formats.brokerconf import BrokerConfig
    from store_reader.formats.checkpoint import Checkpoint
    from store_reader.formats.commitlog import SegmentSummary


# -- the commitlog side -------------------------------------------------------------------------------

@dataclass
class CommitLogFileState:
    name: str
    start: int
    size: int
    wrote: int


@dataclass
class CombineSearch:
    """[5.4+] ``CombineConsumeQueueStore#isMappedFileMatchedRecover`` (R§15.2): the file consume
    queue assigns queue offsets and is served; the RocksDB one beside it must match too, or the
    search moves back, at most ``extra`` more files over the whole search
    (``extraSearchCommitLogFilesForRecovery``, which counts down and is never reset)."""

    rocksdb_max: int
    """The RocksDB queue's ``dispatchFromPhyOffset``: its stored max phy offset (``CHECKPOINT_TOPIC``)."""
    extra: int
    """``combineCQMaxExtraSearchCommitLogFiles`` left."""
    lmq_rocksdb: bool = False
    """[5.5] ``combineCQUseRocksdbForLmq``: a RocksDB mismatch is never passed over."""

    def matches(self, version: str, stored_phy_offset: int) -> bool:
        """Once the file queue matched a file whose first record's PHYSICALOFFSET is given."""
        if since(version, V55) and self.rocksdb_max <= 0:       # "the store hasn't started before"
            return True
        if stored_phy_offset <= self.rocksdb_max:
            return True
        if since(version, V55) and self.lmq_rocksdb:
            return False
        self.extra -= 1                                            # getAndDecrement() <= 0
        return self.extra + 1 <= 0


def _first_record_matches(s: SegmentSummary, version: str, config: BrokerConfig, abnormal: bool,
                          ckpt: Checkpoint, cq_max: int, rocksdb: bool = False,
                          combine: CombineSearch | None = None) -> bool:
    """``CommitLog#isMappedFileMatchedRecover`` for one file (R§4.1); ``rocksdb``: the consume
    queue is ``RocksDBConsumeQueueStore`` and ``cq_max`` its max phy offset (R§15.1); ``combine``:
    the RocksDB queue beside the file one (R§15.2)."""
    ts = s.first_store_timestamp_raw
    if not since(version, V54):
        # 4.9.7 / 5.3.3 (abnormal path only): the first record's header, read by position
        magics = (rf.MAGIC_V1, rf.MAGIC_V2) if is_5x(version) else (rf.MAGIC_V1,)
        if rocksdb:     # [5.3.3] isEnableRocksDBStore: the stored PHYSICALOFFSET against the CQ max
            return s.first_magic in magics and s.first_stored_phy_offset <= cq_max
        bound = ckpt.min_timestamp_index if config.messageIndexEnable and config.messageIndexSafe \
            else ckpt.min_timestamp
        return s.first_magic in magics and bool(ts) and ts <= bound
    # [5.4] the first record passes the full check (CRC included) and has a store time
    if not s.first_record_valid or not ts:
        return False
    return queue_store_matches(version, config, abnormal, ckpt, cq_max, ts, s.first_stored_phy_offset, rocksdb,
                               combine)


def queue_store_matches(version: str, config: BrokerConfig, abnormal: bool, ckpt: Checkpoint, cq_max: int,
                        ts: int, stored_phy_offset: int, rocksdb: bool = False,
                        combine: CombineSearch | None = None) -> bool:
    """[5.4+] a file's first record (store time ``ts``, stored PHYSICALOFFSET) against the index and
    the consume queues: the test the commitlog's and DLedger's start-file searches share (R§4.1, R§16.2);
    ``rocksdb``: the consume queue is ``RocksDBConsumeQueueStore`` and ``cq_max`` its max phy offset;
    ``combine``: the file queue's test is followed by the RocksDB queue's (R§15.2)."""
    # IndexService: with messageIndexSafe, no later than the last full index file; [5.4] tested
    # before the queue store, [5.5] after it (a registered CommitLogDispatchStore), which matters
    # only for the combine store's count-down
    index_ok = not (config.messageIndexEnable and config.messageIndexSafe and ts > ckpt.index_msg_timestamp)
    if not index_ok and (combine is None or not since(version, V55)):
        return False
    # ConsumeQueueStore#isMappedFileMatchedRecover; RocksDBConsumeQueueStore's on both paths
    if not abnormal or rocksdb:
        matched = stored_phy_offset <= cq_max
    elif not since(version, V55):
        matched = ts <= ckpt.min_timestamp
    # [5.5] the checkpoint's logicsPhysicalOffset; a checkpoint without one: its logicsMsgTimestamp
    elif ckpt.logics_physical_offset <= 0:
        matched = ts <= ckpt.logics_msg_timestamp
    else:
        matched = stored_phy_offset <= ckpt.logics_physical_offset
    if matched and combine is not None:
        matched = combine.matches(version, stored_phy_offset)
    return matched and index_ok


def start_file(summaries: Sequence[SegmentSummary], version: str, config: BrokerConfig, abnormal: bool,
               ckpt: Checkpoint, cq_max: int, rocksdb: bool = False, rocksdb_beside: int | None = None) -> int:
    """R§4.1: the index of the file the commitlog recovery starts from; ``rocksdb_beside``: [5.4+]
    the max phy offset of a RocksDB queue beside the served file one (R§15.2)."""
    if not abnormal and not since(version, V53):          # 4.9.7: the third-last file
        return max(0, len(summaries) - 3)
    if not abnormal and not since(version, V54):          # 5.3.3: the file holding the CQ max
        index = len(summaries) - 1
        while index > 0 and summaries[index].file_start > cq_max:
            index -= 1
        return index
    combine = CombineSearch(rocksdb_beside, config.combineCQMaxExtraSearchCommitLogFiles,
                            config.combineCQUseRocksdbForLmq) \
        if rocksdb_beside is not None and since(version, V54) else None
    # from the newest file back; the normal path never tests the first file
    # [5.4] commitLogRecoverMaxNum: the n-th file from the end is taken whether it matches or not
    left = (config.commitLogRecoverMaxNum if config.commitLogRecoverMaxNum > 0 else 10) \
        if since(version, V54) else None
    lowest = 0 if abnormal else 1
    for index in range(len(summaries) - 1, lowest - 1, -1):
        if left is not None:
            left -= 1
        if _first_record_matches(summaries[index], version, config, abnormal, ckpt, cq_max, rocksdb, combine) \
                or (left is not None and left <= 0):
            return index
    return 0


def _offset_check_cut(summaries: Sequence[SegmentSummary], config: BrokerConfig, start: int, end: int,
                      opts: rf.ScanOptions) -> int:
    """[5.5] ``checkCommitLogOffsetOnRecover`` on the abnormal path: the first VALID record from
    ``start`` whose stored PHYSICALOFFSET lies outside ``[file start, file start + file size]``
    ends the walk where it starts (R§4.3); ``end`` when there is none."""
    from store_reader.formats.commitlog import SegmentScan

    size = config.mappedFileSizeCommitLog
    for s in summaries[start:]:
        if s.file_start >= end:
            break
        for batch in SegmentScan(s.path, opts, columns=["phy_offset", "stored_phy_offset"]):
            pos = batch["phy_offset"].to_numpy()
            stored = batch["stored_phy_offset"].to_numpy()
            bad = np.flatnonzero((pos < end) & ((stored < s.file_start) | (stored > s.file_start + size)))
            if bad.size:
                return int(pos[bad[0]])
    return end


def predict_commitlog(summaries: Sequence[SegmentSummary], version: str, config: BrokerConfig,
                      abnormal: bool, ckpt: Checkpoint, cq_max: int, opts: rf.ScanOptions | None = None,
                      rocksdb: bool = False, rocksdb_beside: int | None = None
                      ) -> tuple[int, int, list[CommitLogFileState], list[str]]:
    """R§4: (start index, recovered end, files after truncation, deleted file names); ``opts``:
    the options the summaries were scanned with (the broker's for ``config`` when None);
    ``rocksdb_beside``: ``start_file``'s."""
    if not summaries:
        return 0, 0, [], []
    start = start_file(summaries, version, config, abnormal, ckpt, cq_max, rocksdb, rocksdb_beside)
    end = summaries[start].file_start
    for i in range(start, len(summaries)):           # R§4.2: a blank marker moves on to the next file
        s = summaries[i]
        end = s.file_start + s.valid_bytes
        if s.end_reason != "eof_marker":
            break
        if since(version, V55) and s.blank_declared_size is not None and s.blank_declared_size < 0:
            break                                     # [5.5.1] a negative TOTALSIZE is INVALID first (R§3)
    if abnormal and since(version, V55) and config.checkCommitLogOffsetOnRecover:
        opts = opts or rf.ScanOptions.for_broker(config, True)
        end = _offset_check_cut(summaries, config, start, end, opts)
    return start, end, *commitlog_files_after(summaries, config, end)


def commitlog_files_after(summaries: Sequence[SegmentSummary], config: BrokerConfig, end: int
                          ) -> tuple[list[CommitLogFileState], list[str]]:
    """R§5.1 ``MappedFileQueue#truncateDirtyFiles(end)``: (files kept, names deleted)."""
    size = config.mappedFileSizeCommitLog    # a file of another length is refused; it maps this much
    files, deleted = [], []
    for s in summaries:
        if s.file_start + size > end:
            if end >= s.file_start:
                files.append(CommitLogFileState(s.segment, s.file_start, size, end - s.file_start))
            else:
                deleted.append(s.segment)
        else:
            files.append(CommitLogFileState(s.segment, s.file_start, size, size))
    return files, deleted
