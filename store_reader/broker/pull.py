"""Consumer offsets: what a pull at the committed offset answers after the predicted recovery
(``DefaultMessageStore#getMessage``, R§9.2).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa

from store_reader.formats.consumequeue import CQ_STORE_UNIT_SIZE, range_status

if TYPE_CHECKING:
    from store_reader.formats.brokerconf import BrokerConfig
    from store_reader.broker.prediction import Prediction


# -- consumer offsets: what a pull at the committed offset answers (R§9.2) -------------------------

@dataclass(frozen=True)
class OffsetCheck:
    """``DefaultMessageStore#getMessage(group, topic, queueId, committed, 1)`` after recovery."""

    topic: str
    group: str | None
    queue_id: int
    committed_offset: int
    min_offset: int
    max_offset: int
    status: str
    next_begin_offset: int


def _readable(pred: Prediction, phy: int, size: int) -> bool:
    """``CommitLog#getMessage(phy, size)``: the bytes lie inside a file's readable region."""
    for f in pred.commitlog_files:
        if f.start <= phy < f.start + f.size:
            return phy - f.start + size <= f.wrote
    return False


def check_offset(pred: Prediction, config: BrokerConfig, topic: str, group: str | None,
                 queue_id: int, offset: int) -> OffsetCheck:
    """Pull status and corrected offset on a master for one committed offset (R§9.2)."""
    q = pred.consume_queues.get((topic, queue_id))
    lo, hi = (q.min_offset, q.max_offset) if q is not None else (0, 0)

    def result(status: str, nxt: int) -> OffsetCheck:
        return OffsetCheck(topic, group, queue_id, offset, lo, hi, status, nxt)

    status, nxt = range_status(lo, hi, offset)
    if status is not None:
        return result(status, nxt)
    # getIndexBuffer: the rest of the CQ file holding the offset, at most 16000 bytes scanned
    logic = offset * CQ_STORE_UNIT_SIZE
    f = next((f for f in q.files if f.start <= logic < f.start + f.wrote), None)
    if f is None:
        next_file = logic + q.file_size - logic % q.file_size
        return result("OFFSET_FOUND_NULL", next_file // CQ_STORE_UNIT_SIZE)
    first = (logic - f.start) // CQ_STORE_UNIT_SIZE
    slots = f.read(first, min(f.wrote // CQ_STORE_UNIT_SIZE, first + 16000 // CQ_STORE_UNIT_SIZE))
    status, next_phy_file = "NO_MATCHED_MESSAGE", None
    fsize = config.mappedFileSizeCommitLog
    for i, e in enumerate(slots):
        phy, size = int(e["phy_offset"]), int(e["size"])
        if next_phy_file is not None and phy < next_phy_file:
            continue
        if _readable(pred, phy, size):
            if size > 0:
                return result("FOUND", offset + i + 1)  # one message asked for: the batch is full
            # an empty entry (zeroed, in a CQ file recovery does not check) is returned but fills
            # no batch: isTheBatchFull is false while no byte is taken, so the scan goes on
            status, next_phy_file = "FOUND", None
            continue
        status = "MESSAGE_WAS_REMOVING"
        next_phy_file = phy + fsize - phy % fsize       # CommitLog#rollNextFile
    return result(status, offset + len(slots))


def consumer_offset_checks(pred: Prediction, config: BrokerConfig, offsets: pa.Table) -> list[OffsetCheck]:
    """``check_offset`` for every committed offset (``config.read_consumer_offsets(...).value``)."""
    return [check_offset(pred, config, r["topic"], r["group"], r["queue_id"], r["offset"])
            for r in offsets.to_pylist()]
