"""What the audit tables remember of a store's files, so that a later run knows what changed: the
run id (the whole tree), each commitlog file's mtime and ``written_fingerprint`` (the ``segments``
rows), and the rule by which a ``--since-last`` audit carries a segment's scan summary over instead
of reading the segment again."""
from __future__ import annotations

import hashlib

import pyarrow as pa
import pyarrow.compute as pc

from store_reader.audit.plan import flush_risk
from store_reader.formats.commitlog import written_fingerprint
from store_reader.exceptions import UnreadableFileError
from store_reader.io.fsutil import hash_tree, mtime_ns
from store_reader.store import Store
from store_reader.io.storefs import location


def run_id(job: str, store: Store, version: str, extra: str = "") -> str:
    """Same job, store files (names, sizes, mtimes), version and options -> same run id: a re-run
    replaces its rows instead of adding new ones."""
    h = hashlib.sha256(f"{job}\n{version}\n{extra}\n".encode())
    hash_tree(h, store.inventory.files)
    return f"{job}-{h.hexdigest()[:16]}"


def commitlog_mtimes(store: Store) -> dict[str, int]:
    """Each commitlog file's modification time (local or remote: ``fsutil.mtime_ns``)."""
    return {f.name: mtime_ns(f.path) for f in store.commitlog_files}


def written_fingerprints(store: Store, written: dict[str, int]) -> dict[str, str]:
    """``written_fingerprint`` of the commitlog files named in ``written`` (name -> where its valid
    records end)."""
    out = {}
    for f in store.commitlog_files:
        if f.name in written:
            try:
                with location(f.path).open_reader() as r:
                    out[f.name] = written_fingerprint(r, written[f.name])
            except OSError as exc:
                raise UnreadableFileError(f"cannot read commitlog file: {exc.strerror}", str(f.path)) from None
    return out


def last_run_segments(segments: pa.Table, store_id: str) -> dict[str, dict]:
    """The ``segments`` rows of the latest run for ``store_id`` by file name (empty when there is
    none): what a ``--since-last`` audit compares the files with."""
    t = segments.filter(pc.equal(segments["store_id"], store_id))
    if not t.num_rows:
        return {}
    t = t.filter(pc.equal(t["audited_at"], pc.max(t["audited_at"])))
    return {r["segment"]: r for r in t.to_pylist()}


def unchanged_segments(store: Store, previous: dict[str, dict]) -> int:
    """How many commitlog files, from the first, keep the scan summary of the last run's
    ``segments`` row (``previous``: ``last_run_segments``): each one's size, mtime and
    ``written_fingerprint`` are those of its row and none of its records was stored after a
    checkpoint flush time at risk (``plan.flush_risk``; the flush window needs those records). The
    records are read from the first file not carried over to the end, so the findings judged on
    records cover one phy range."""
    files = store.commitlog_files
    now = commitlog_mtimes(store)
    same = {f.name for f in files if (row := previous.get(f.name)) and row["file_size"] == f.size
            and row["file_mtime_ns"] == now[f.name]}
    fingerprint = written_fingerprints(store, {name: previous[name]["valid_bytes"] for name in same})
    since = min((stamp for _, stamp in flush_risk(store).windows), default=None)
    first = 0
    for f in files:
        row = previous.get(f.name)
        if f.name not in same or row.get("fingerprint") != fingerprint[f.name] or (
                since is not None and row["last_store_time"] is not None
                and row["last_store_time"].timestamp() * 1000 > since):
            break
        first += 1
    return first
