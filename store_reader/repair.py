"""Write a repaired store: the commitlog cut at the broker's truncation point, consume queues and
index files rebuilt from every surviving record, a consistent checkpoint, no ``abort``.

Spark-free building blocks; ``jobs/recover.py`` runs them in parallel (one task per queue / index
file) and places the result atomically. Everything here writes only below the directory it is given.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np
import pyarrow as pa

from . import recordformat as rf
from .brokerconf import BrokerConfig
from .checkpoint import Checkpoint, write_checkpoint
from .consumequeue import file_name as cq_file_name
from .indexfile import BuiltIndexFile, build_index_files, index_file_name
from .javahash import index_key_hashes
from .recovery import ConsumeQueueState

COPY_CHUNK = 8 << 20

# Columns of a dispatched record that the rebuilders need (schemas.MESSAGE names).
DISPATCH_COLUMNS = ["stored_phy_offset", "total_size", "topic", "queue_id", "queue_offset",
                    "sys_flag", "tags_code", "store_timestamp", "uniq_key", "key_list"]


def copy_commitlog_file(src: str, dest: str, keep: int, file_size: int) -> None:
    """Copy ``[0, keep)`` of a segment and zero the rest (stale bytes past the end are never
    carried over, spec E#10); the file keeps its preallocated size."""
    with open(src, "rb") as fin, open(dest, "xb") as fout:
        left = keep
        while left:
            chunk = fin.read(min(COPY_CHUNK, left))
            if not chunk:
                break
            fout.write(chunk)
            left -= len(chunk)
        fout.truncate(file_size)


def rebuild_queue(topic: str, queue_id: int, records: pa.Table, cq_file_size: int) -> ConsumeQueueState:
    """A queue as the broker's dispatch builds it from nothing (R§5.3) over ``records`` (the
    queue's dispatchable records, any order; they are put in commitlog order)."""
    t = records.sort_by("stored_phy_offset")
    q = ConsumeQueueState(topic, queue_id, cq_file_size)
    for phy, size, tags, qoff in zip(t["stored_phy_offset"].to_numpy(), t["total_size"].to_numpy(),
                                     t["tags_code"].to_numpy(), t["queue_offset"].to_numpy()):
        q.put(int(phy), int(size), int(tags), int(qoff))
    return q


def write_queue_state(q: ConsumeQueueState, queue_dir: str, input_queue_dir: str | None = None
                      ) -> list[str]:
    """The CQ files of ``q`` (zero past each file's write position).

    When the queue starts inside its first file (older commitlog files are gone), the slots before
    its min offset keep what the input's file holds there, as the broker keeps them (they are below
    the min offset and never served); pre-blank fillers are written only where the input has none.
    """
    os.makedirs(queue_dir, exist_ok=True)
    written = []
    for i, f in enumerate(q.files):
        path = os.path.join(queue_dir, cq_file_name(f.start))
        slots = f.slots.copy()
        slots[f.wrote // 20:] = 0
        head = (q.min_logic_offset - f.start) // 20
        if i == 0 and head > 0 and input_queue_dir is not None:
            old = os.path.join(input_queue_dir, cq_file_name(f.start))
            if os.path.isfile(old) and os.path.getsize(old) == q.file_size:
                with open(old, "rb") as fh:
                    slots[:head] = np.frombuffer(fh.read(), dtype=slots.dtype)[:head]
        with open(path, "xb") as fh:
            fh.write(slots.tobytes())
        written.append(path)
    return written


def dispatchable(records: pa.Table) -> pa.Table:
    """Records that get a consume queue entry: transaction type NOT or COMMIT (F§3.5)."""
    import pyarrow.compute as pc

    tran = pc.bit_wise_and(records["sys_flag"], rf.TRANSACTION_MASK)
    return records.filter(pc.is_in(tran, pa.array([rf.TRANSACTION_NOT_TYPE,
                                                    rf.TRANSACTION_COMMIT_TYPE], pa.int32())))


def multi_dispatch_copies(batch: pa.RecordBatch, config: BrokerConfig, broker_5x: bool) -> pa.RecordBatch:
    """The LMQ / multi-dispatch copies of dispatchable records (R§5.3, E#33): the same record with
    topic, queue id and queue offset of each queue named in ``INNER_MULTI_DISPATCH``."""
    from .recovery import multi_dispatch_targets

    rows = []
    for r in batch.to_pylist():
        props = dict(r["properties"] or [])
        for topic, qid, offset in multi_dispatch_targets(config, broker_5x, r["topic"], r["queue_id"], props):
            rows.append({**r, "topic": topic, "queue_id": qid, "queue_offset": offset})
    return pa.RecordBatch.from_pylist(rows, schema=batch.schema)


@dataclass
class IndexPuts:
    """Index puts in put order (F§7.4): keyHash, phy offset and store time of every key."""

    key_hash: np.ndarray
    phy: np.ndarray
    store_timestamp: np.ndarray
    topic: pa.Array


def index_puts(records: pa.Table) -> IndexPuts:
    """``IndexService#buildIndex`` over records in commitlog order, vectorised: every record but a
    ROLLBACK one puts ``topic#UNIQ_KEY`` then ``topic#token`` for each KEYS token."""
    import pyarrow.compute as pc

    records = records.sort_by("stored_phy_offset")
    tran = pc.bit_wise_and(records["sys_flag"], rf.TRANSACTION_MASK)
    records = records.filter(pc.not_equal(tran, rf.TRANSACTION_ROLLBACK_TYPE))
    uniq = records["uniq_key"].combine_chunks().cast(pa.string())
    key_lists = records["key_list"].combine_chunks()
    keys_flat = pc.list_flatten(key_lists).cast(pa.string())
    # put order per record: UNIQ_KEY (if any) then the KEYS tokens; positions in the flat output
    has_uniq = pc.is_valid(uniq).to_numpy(zero_copy_only=False)
    n_keys = pc.list_value_length(key_lists).to_numpy(zero_copy_only=False).astype(np.int64)
    counts = has_uniq.astype(np.int64) + n_keys
    starts = np.concatenate([[0], np.cumsum(counts)])[:-1]
    order = np.empty(int(counts.sum()), dtype=np.int64)
    uniq_values = pc.drop_null(uniq)
    order[starts[has_uniq]] = np.arange(len(uniq_values))
    owner = np.repeat(np.arange(len(counts)), n_keys)
    within = np.arange(len(keys_flat)) - np.repeat(np.concatenate([[0], np.cumsum(n_keys)])[:-1], n_keys)
    order[starts[owner] + has_uniq[owner] + within] = len(uniq_values) + np.arange(len(keys_flat))
    tokens = pa.concat_arrays([uniq_values, keys_flat]).take(pa.array(order))
    topics = records["topic"].combine_chunks().cast(pa.string()).take(pa.array(np.repeat(np.arange(len(counts)), counts)))
    keys = pc.binary_join_element_wise(topics, tokens, "#")
    return IndexPuts(index_key_hashes(keys),
                     np.repeat(records["stored_phy_offset"].to_numpy(), counts),
                     np.repeat(records["store_timestamp"].to_numpy(), counts), topics)


def build_index(puts: IndexPuts, config: BrokerConfig) -> list[tuple[str, BuiltIndexFile]]:
    """Fresh index files for ``puts`` with broker-style names (first put's store time, UTC),
    made strictly increasing so they sort in creation order."""
    built = build_index_files(puts.key_hash, puts.phy, puts.store_timestamp,
                              hash_slot_num=config.maxHashSlotNum, index_num=config.maxIndexNum)
    out, last = [], -1
    for b in built:
        stamp = max(int(puts.store_timestamp[b.first_put]), last + 1)
        out.append((index_file_name(stamp, "UTC"), b))
        last = stamp
    return out


def sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(COPY_CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()


def tree_manifest(root: str, skip: Iterable[str] = ()) -> list[dict]:
    """Relative path, size and SHA-256 of every file under ``root``, sorted by path."""
    skip = set(skip)
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            p = os.path.join(dirpath, name)
            rel = os.path.relpath(p, root)
            if rel in skip:
                continue
            out.append({"path": rel, "size": os.path.getsize(p), "sha256": sha256_file(p)})
    out.sort(key=lambda e: e["path"])
    return out


def write_manifest(out_dir: str, content: dict) -> None:
    with open(os.path.join(out_dir, "MANIFEST.json"), "x", encoding="utf-8") as fh:
        json.dump(content, fh, indent=2, sort_keys=True)
        fh.write("\n")


def copy_config(src_root: Path, dest_root: Path) -> list[str]:
    """``config/`` copied as it is (the broker's own fallback files included) and the ``lock`` file."""
    copied = []
    if (src_root / "config").is_dir():
        shutil.copytree(src_root / "config", dest_root / "config")
        copied.append("config")
    if (src_root / "lock").is_file():
        shutil.copyfile(src_root / "lock", dest_root / "lock")
        copied.append("lock")
    return copied


def repaired_checkpoint(last_store_ts: int, last_cq_store_ts: int, index_msg_ts: int,
                        confirm_offset: int, broker_5x: bool) -> Checkpoint:
    """A checkpoint consistent with a store that is flushed and dispatched up to its end."""
    return Checkpoint(physic_msg_timestamp=last_store_ts, logics_msg_timestamp=last_cq_store_ts,
                      index_msg_timestamp=index_msg_ts, master_flushed_offset=0,
                      confirm_phy_offset=confirm_offset if broker_5x else 0)


def write_checkpoint_file(dest_root: Path, ckpt: Checkpoint, broker_5x: bool) -> None:
    write_checkpoint(dest_root / "checkpoint", ckpt, rocketmq5=broker_5x)


def full_index_end_timestamp(files: Sequence[tuple[str, BuiltIndexFile]], index_num: int) -> int:
    """``indexMsgTimestamp`` after a full flush: end time of the last index file that is full."""
    full = [b.header.end_timestamp for _, b in files if b.header.index_count >= index_num]
    return full[-1] if full else 0
