"""``jobs.dump --verify`` and the audit give one answer about the consume queues: each ``cq.*`` finding
of dump (located in a file, by byte) names the same queue offsets as the audit's ``queue_findings``
row of the kind it is an alias of (``kinds.DUMP_ALIASES``), on every real-broker fixture and on the
synthetic crash presets of both broker generations. Dump runs the audit's comparison on the facts of
its own one pass (``StoreView.queue_findings``); the audit here runs Spark-free as a recovery does,
its stage 1 over every commitlog file and every queue bucket of its stage 2
(``test_rebuilt_view.audit_buckets``), so the two passes' facts are held equal too.

Where the two name one event at different grains, the test says so: ``queue_missing`` is a row per
queue in the audit; dump reports ``cq.all_missing`` once for a store with no consume queue file at
all, and the records of a queue whose directory is gone as ``cq.missing_entries`` naming the
missing file.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

import support
from store_reader import open_store
from store_reader.audit import StoreView, verify_store
from store_reader.audit.compare import audit_partition
from store_reader.audit.kinds import DUMP_ALIASES
from store_reader.broker.prediction import predict
from store_reader.testing.synthetic import CrashSpec, SyntheticStoreSpec, write_store
from test_rebuilt_view import audit_buckets

pytestmark = [pytest.mark.slow]

# the queue kinds dump --verify reports, in the audit's vocabulary
QUEUE_ALIASES = {name: kind for name, kind in DUMP_ALIASES.items() if name.startswith("cq.")}
PER_OFFSET = set(QUEUE_ALIASES.values()) - {"queue_missing"}
PRESETS = ("kill9", "torn-tail", "corrupt-middle", "corrupt-magic", "cq-behind", "cq-ahead", "no-abort",
           "zeroed-span-second-last", "missing-middle-file", "cq-behind,no-abort")


def _audit(store) -> tuple[set, set]:
    """The audit's (kind, topic, queue id, queue offset) of the aliased kinds, the queues it finds
    missing."""
    pred = predict(store, None)
    plan, items = audit_buckets(store, pred, None)
    offsets, missing = set(), set()
    for bucket in range(plan.buckets):
        for what, value in audit_partition(bucket, items[bucket], plan):
            if what != "queue_findings":
                continue
            for r in value.to_pylist():
                key = (r["topic"], r["queue_id"])
                if r["kind"] == "queue_missing":
                    missing.add(key)
                elif r["kind"] in PER_OFFSET:
                    offsets |= {(r["kind"], *key, o) for o in range(r["from_offset"], r["to_offset"])}
    return offsets, missing


def _dump(store) -> tuple[set, set, bool]:
    """Dump's (kind, topic, queue id, queue offset) of its ``cq.*`` findings, the queues whose
    missing entries lie in a missing file, whether it found no consume queue file at all."""
    offsets, gone, all_missing = set(), set(), False
    for a in verify_store(StoreView(store)).anomalies:
        if a.kind == "cq.all_missing":
            all_missing = True
        elif a.kind in QUEUE_ALIASES:
            d = a.details
            offsets |= {(a.finding, d["topic"], d["queue_id"], o)
                        for o in range(d["queue_offsets"][0], d["queue_offsets"][1] + 1)}
            if a.kind == "cq.missing_entries" and "(the file is missing)" in a.message:
                gone.add((d["topic"], d["queue_id"]))
    return offsets, gone, all_missing


def _agree(store) -> None:
    audit, missing = _audit(store)
    dump, gone, all_missing = _dump(store)
    assert audit == dump
    with_records = {k for k in StoreView(store).queue_records()}
    assert missing == (with_records if all_missing else {k for k in gone if not Path(
        store.consume_queue_dir, k[0], str(k[1])).exists()})


@pytest.mark.parametrize("case", support.scenarios(), ids=support.case_id)
def test_fixture(case):
    store = open_store(support.input_store(*case), support.broker_conf(*case))
    if case[1] == "cq-file-short":
        # the broker refuses to load it: no queue is compared, both name the short file
        pred = predict(store, None)
        (short,) = [a.path for a in verify_store(StoreView(store)).anomalies if a.kind == "cq.file_size"]
        assert not pred.load_result and [p.split(" @ ")[0] for p in pred.load_problems] == [short]
        return
    _agree(store)


@pytest.fixture(scope="module")
def synthetic_root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("agree")


@pytest.mark.parametrize("broker", ["4.9", "5.x"])
@pytest.mark.parametrize("preset", PRESETS)
def test_synthetic_crash(synthetic_root, broker, preset):
    crash = CrashSpec.preset(preset)
    if crash.zeroed_span:            # a span inside one record's neighbours, in these small files
        crash = replace(crash, zeroed_bytes=3000)
    root = synthetic_root / f"{broker}-{preset}"
    write_store(root, SyntheticStoreSpec(total_bytes=20 << 20, segment_size=4 << 20, cq_file_size=600 * 20,
                                         max_index_num=4000, max_hash_slot_num=1000, broker=broker), crash)
    _agree(open_store(root, root / "broker.conf"))
