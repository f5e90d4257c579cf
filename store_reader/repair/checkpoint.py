"""The repaired store's checkpoint: consistent with a store flushed and dispatched up to its end.
"""
from __future__ import annotations

from pathlib import Path

from store_reader.formats.checkpoint import Checkpoint, write_checkpoint


def repaired_checkpoint(last_store_ts: int, last_cq_store_ts: int, index_msg_ts: int,
                        confirm_offset: int, broker_5x: bool) -> Checkpoint:
    """A checkpoint consistent with a store that is flushed and dispatched up to its end."""
    return Checkpoint(physic_msg_timestamp=last_store_ts, logics_msg_timestamp=last_cq_store_ts,
                      index_msg_timestamp=index_msg_ts, master_flushed_offset=0,
                      confirm_phy_offset=confirm_offset if broker_5x else 0)


def write_checkpoint_file(dest_root: Path, ckpt: Checkpoint, broker_5x: bool) -> None:
    write_checkpoint(dest_root / "checkpoint", ckpt, rocketmq5=broker_5x)
