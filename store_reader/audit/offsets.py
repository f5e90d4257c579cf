"""The committed consumer offsets after a recovery, counted in one place.

Every job that speaks of consumer offsets (``jobs.recover`` dry or real, ``--broker-version both``,
``jobs.audit``, the demo, the HTML report, the pass lines on stderr) takes its numbers from
``offset_facts`` over the ``consumer_offset_findings`` rows (``consumer_offset_findings``: a row per
committed offset of ``consumerOffset.json`` and of its ``.bak``; the audit's, or a bounded dry run's
from the prediction alone, ``predicted_findings``) and words them with ``describe``. The
definitions, per file:

- committed: the offsets the file holds (its rows);
- moved: a pull at the committed offset answers PULL_OFFSET_MOVED and the consumer persists the
  broker's ``nextBeginOffset`` (R§9.2: NO_MESSAGE_IN_QUEUE for an offset other than 0,
  OFFSET_TOO_SMALL, OFFSET_OVERFLOW_BADLY): ``groups`` and ``queues`` (a group's queue: a row)
  counted among those;
- redelivered: queue offsets a group already passed that it will be served again (the ``redelivered``
  column, summed);
- skipped: messages a group will never receive (the ``skipped`` column, summed: offsets jumped over,
  and lost messages at or past its committed offset);
- at risk: offsets with something redelivered or skipped (``runs.consumer_offsets_at_risk`` is their
  sum over both files);
- repaired: offsets a repaired store carries moved (``config.correct_consumer_offsets``: the same
  rule against the repaired queues' range, the ``repaired_min``/``repaired_max`` columns).

The broker reads ``consumerOffset.json`` and falls back to the ``.bak`` only when the live file is
missing or unreadable (R§9.1): the live file's counts are what a restart does, the ``.bak``'s what
it would do if the live file were lost.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Sequence

import numpy as np
import pyarrow as pa

from store_reader.broker import dispatch, prediction, pull
from store_reader.repair import salvage
from store_reader.formats import recordformat as rf
from store_reader.formats.commitlog import SegmentSummary
from store_reader.formats.config import (CONSUMER_OFFSET_GENERATIONS, ROCKSDB_CONSUMER_OFFSETS, read_consumer_offsets,
                                         read_rocksdb_consumer_offsets)
from store_reader.formats.consumequeue import range_status
from store_reader.store import Store

# GetMessageStatus answered with PULL_OFFSET_MOVED on a master (R§9.2)
MOVED_STATUSES = ("NO_MESSAGE_IN_QUEUE", "OFFSET_TOO_SMALL", "OFFSET_OVERFLOW_BADLY")


def moved_at_next_pull(status: str | None, committed: int, next_begin: int) -> bool:
    """The consumer's next pull moves its committed offset (NO_MESSAGE_IN_QUEUE at 0 is
    PULL_NOT_FOUND: nothing moves)."""
    return status in MOVED_STATUSES and next_begin != committed


@dataclass(frozen=True)
class OffsetFacts:
    """One consumer offset file's counts (module docstring for each definition)."""

    source: str
    committed: int = 0
    groups: int = 0
    queues: int = 0
    redelivered: int = 0
    skipped: int = 0
    at_risk: int = 0
    repaired: int | None = 0
    """Offsets a repaired store carries moved (against the repaired queues' range); None where the
    repaired queues are not known (a bounded dry run: only the audit rebuilds them)."""

    @property
    def fallback(self) -> bool:
        return self.source == CONSUMER_OFFSET_GENERATIONS[1]

    def to_dict(self) -> dict:
        return {"file": self.source, "committed": self.committed, "groupsMoved": self.groups,
                "queuesMoved": self.queues, "redelivered": self.redelivered, "skipped": self.skipped,
                "atRisk": self.at_risk, "movedInRepairedStore": self.repaired}


def committed_offsets(store: Store) -> Iterator[tuple[str, pa.Table]]:
    """Where the committed offsets are kept, and the offsets: ``config/consumerOffsets`` where the
    broker reads them from RocksDB (``Inventory.offsets_in``; none without the database: its
    manager starts empty), else ``consumerOffset.json`` and its ``.bak``."""
    if store.inventory.offsets_in == "rocksdb":
        path = store.config_dir / "consumerOffsets"
        if path.is_dir():
            yield ROCKSDB_CONSUMER_OFFSETS, read_rocksdb_consumer_offsets(path)
        return
    for source in CONSUMER_OFFSET_GENERATIONS:
        path = store.config_dir / source
        if path.is_file():
            yield source, read_consumer_offsets(path).value


def consumer_offset_findings(store: Store, pred: prediction.Prediction, lost: pa.Table,
                             disk_ranges: dict | None = None, rebuilt_ranges: dict | None = None) -> pa.Table:
    """Every committed offset (``consumerOffset.json`` and its ``.bak``, or RocksDB's): the queue before and after
    recovery, the broker's pull status and corrected offset, and what the group loses or gets again.
    What the broker does needs the prediction and the lost records' queue offsets (``lost``: topic,
    queue_id, queue_offset, sys_flag) alone; the queues on disk and as repaired come from the audit
    (None: not known, their columns null, as in a bounded dry run)."""
    lost_by_queue: dict[tuple[str, int], list[int]] = {}
    if lost.num_rows:
        keep = dispatch.dispatchable(lost["sys_flag"].to_numpy())
        for t, q, o in zip(np.asarray(lost["topic"].to_pylist(), dtype=object)[keep],
                           lost["queue_id"].to_numpy()[keep], lost["queue_offset"].to_numpy()[keep]):
            lost_by_queue.setdefault((t, int(q)), []).append(int(o))
    unknown = (None, None)
    rows = []
    for source, offsets in committed_offsets(store):
        for c in pull.consumer_offset_checks(pred, store.config, offsets):
            key = (c.topic, c.queue_id)
            before = unknown if disk_ranges is None else disk_ranges.get(key, (0, 0))
            repaired = unknown if rebuilt_ranges is None else rebuilt_ranges.get(key, (0, 0))
            redelivered = c.committed_offset - c.next_begin_offset \
                if c.status == "OFFSET_OVERFLOW_BADLY" else 0
            skipped = c.next_begin_offset - c.committed_offset if c.status == "OFFSET_TOO_SMALL" else 0
            skipped += sum(1 for o in lost_by_queue.get(key, ()) if o >= c.committed_offset)
            rows.append({"source": source, "group": c.group, "topic": c.topic, "queue_id": c.queue_id,
                         "committed_offset": c.committed_offset, "min_before": before[0],
                         "max_before": before[1], "min_after": c.min_offset, "max_after": c.max_offset,
                         "status": c.status, "next_begin_offset": c.next_begin_offset,
                         "repaired_min": repaired[0], "repaired_max": repaired[1],
                         "redelivered": max(redelivered, 0), "skipped": skipped,
                         "at_risk": redelivered > 0 or skipped > 0})
    return pa.Table.from_pylist(rows) if rows else pa.table({})


def predicted_findings(store: Store, pred: prediction.Prediction, summaries: Sequence[SegmentSummary],
                       opts: rf.ScanOptions) -> pa.Table:
    """``consumer_offset_findings`` from the prediction alone (a bounded dry run, no audit): the
    lost records' queue offsets read from the files past the cut (which the broker's restart walks
    too), the queues on disk and as repaired not known."""
    end = pred.max_phy_offset
    # a walked file holds lost records only behind a bad record or in valid data past the cut (the
    # torn last file of a kill -9 usually neither: not read again)
    holding = [s for s in summaries if not s.walked or s.records_after_cut or s.end_phy_offset > end]
    lost = salvage.lost_segments(holding, end, salvage.cut_segment(pred))
    return consumer_offset_findings(store, pred, salvage.lost_queue_offsets(lost, end, opts))


def offset_facts(rows: pa.Table | None) -> list[OffsetFacts]:
    """Per consumer offset file present (the live one first), its counts from the
    ``consumer_offset_findings`` rows."""
    if rows is None or not rows.num_rows:
        return []
    out = []
    for source in (*CONSUMER_OFFSET_GENERATIONS, ROCKSDB_CONSUMER_OFFSETS):
        mine = [r for r in rows.to_pylist() if r["source"] == source]
        if not mine:
            continue
        moved = [r for r in mine if moved_at_next_pull(r["status"], r["committed_offset"], r["next_begin_offset"])]
        repaired = None if mine[0]["repaired_max"] is None else \
            sum(1 for r in mine if range_status(r["repaired_min"], r["repaired_max"], r["committed_offset"])[1]
                != r["committed_offset"])
        out.append(OffsetFacts(source, committed=len(mine), groups=len({r["group"] for r in moved}),
                               queues=len(moved), redelivered=sum(r["redelivered"] for r in mine),
                               skipped=sum(r["skipped"] for r in mine),
                               at_risk=sum(1 for r in mine if r["at_risk"]), repaired=repaired))
    return out


def _n(n: int, one: str, many: str | None = None) -> str:
    return f"{n} {one if n == 1 else (many or one + 's')}"


def sentence(f: OffsetFacts) -> str:
    """``N groups / M queues would be moved at the next pull, K messages redelivered, J skipped``."""
    return (f"{_n(f.groups, 'group')} / {_n(f.queues, 'queue')} would be moved at the next pull, "
            f"{_n(f.redelivered, 'message')} redelivered, {f.skipped} skipped")


def describe(facts: list[OffsetFacts]) -> list[str]:
    """One line per file: which file (the ``.bak`` named as the broker's fallback), how many
    offsets it commits, and ``sentence``."""
    if not facts:
        return ["no committed offsets (no consumerOffset.json or .bak)"]
    fallback = " (the broker's fallback)"
    return [f"{f.source}{fallback if f.fallback else ''}: {_n(f.committed, 'committed offset')}; {sentence(f)}"
            for f in facts]


def short(facts: list[OffsetFacts]) -> str:
    """The live file's counts in a few words, for a pass line or a column."""
    live = next((f for f in facts if not f.fallback), None)
    if live is None:
        return "no live consumerOffset.json"
    return (f"{live.groups}/{live.queues} groups/queues moved, {live.redelivered} redelivered, "
            f"{live.skipped} skipped")


def moved_rows(rows: pa.Table | None, source: str = CONSUMER_OFFSET_GENERATIONS[0]) -> list[dict]:
    """The rows of ``source`` whose offset the next pull moves (``moved_at_next_pull``)."""
    if rows is None or not rows.num_rows:
        return []
    return [r for r in rows.to_pylist() if r["source"] == source
            and moved_at_next_pull(r["status"], r["committed_offset"], r["next_begin_offset"])]


def repaired_per_file(moved: list[dict], facts: list[OffsetFacts] = ()) -> dict[str, int]:
    """Offsets a repaired store carries moved, per file (``config.correct_consumer_offsets``'s
    list, as in ``MANIFEST.json``); the files of ``facts`` named even when nothing moved there."""
    out: dict[str, int] = {f.source: 0 for f in facts}
    for m in moved:
        name = m["file"].rsplit("/", 1)[-1]
        out[name] = out.get(name, 0) + 1
    return out


def per_file(counts: dict[str, int]) -> str:
    """``5 in consumerOffset.json, 4 in consumerOffset.json.bak`` (``none`` when empty)."""
    return ", ".join(f"{n} in {name}" for name, n in counts.items()) or "none"
