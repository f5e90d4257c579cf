"""The embedded default: a sample store with a simulated crash, made by the synthetic writer.

A broker killed while writing (``abort`` left behind, stale checkpoint) whose last segment also
holds a record with a flipped body byte followed by intact records, and a torn last record: the
recovery has something real to find, cut and rebuild.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

from store_reader.testing.synthetic import CrashSpec, SyntheticStoreSpec, write_store

MiB = 1 << 20
DEMO_MTIME_NS = 1_700_000_000 * 10**9       # every file of the sample store dated 2023-11-14 22:13 UTC


def make_demo_store(base: str) -> tuple[str, str, str]:
    """(store root, its broker.conf, where the repaired store goes) under ``base``; the sample store
    is made afresh each time so every run starts from the same crashed state."""
    root = Path(base)
    store = root / "sample-store"
    if store.exists():
        shutil.rmtree(store)
    root.mkdir(parents=True, exist_ok=True)
    spec = SyntheticStoreSpec(total_bytes=24 * MiB, segment_size=4 * MiB, cq_file_size=6000,
                              max_hash_slot_num=4096, max_index_num=16384, seed=7, broker="4.9")
    write_store(store, spec, CrashSpec(abort=True, stale_checkpoint=True, torn_tail=True,
                                       corrupt="crc"), keep_messages=False)
    # the same bytes under the same dates: the same store to the run id (audit.state.run_id), so a
    # re-run of the demo replaces its rows in the audit tables instead of adding a run
    for path in store.rglob("*"):
        os.utime(path, ns=(DEMO_MTIME_NS, DEMO_MTIME_NS), follow_symlinks=False)
    return str(store), str(store / "broker.conf"), str(root / "repaired-store")
