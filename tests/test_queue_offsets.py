"""Queue offsets are identities (issue 18 part 1): in the repaired store every consume queue entry
sits at its record's own QUEUEOFFSET, and an offset whose record is gone holds a filler unit,
never a shifted entry. Stores from the synthetic writer with the damage the brokers keep serving
past: a zeroed span inside a commitlog file and a missing middle commitlog file."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from jobs.recover import recover
from store_reader import open_store
from store_reader.repair import queues
from store_reader.formats.commitlog import scan_segment
from store_reader.formats.consumequeue import CQ_ENTRY_DTYPE
from store_reader.formats.recordformat import TRANSACTION_COMMIT_TYPE, TRANSACTION_MASK, TRANSACTION_NOT_TYPE
from store_reader.broker.versions import V53
from store_reader.broker.prediction import predict
from store_reader.testing.synthetic import CrashSpec, SyntheticStoreSpec, write_store

KiB = 1 << 10
FILLER = queues.FILLER_SIZE
SEGMENT = 512 * KiB


# -- the placement rule --------------------------------------------------------------------------------

def _place(offsets, phys, file_size=1000, per_cq_file=4):
    phys = np.asarray(phys, np.int64)
    return queues.place_entries("T", 0, phys, np.full(len(phys), 10), np.arange(len(phys)) + 100,
                                np.asarray(offsets, np.int64), per_cq_file * 20, file_size)


def _slots(q) -> list[tuple[int, int, int]]:
    return [tuple(int(x) for x in e) for e in q.slots]


def test_a_gap_is_filled_never_shifted():
    q = _place([0, 1, 2, 5, 6], [0, 100, 200, 1500, 1600])
    assert _slots(q) == [(0, 10, 100), (100, 10, 101), (200, 10, 102), (0, FILLER, 0),
                         (0, FILLER, 0), (1500, 10, 103), (1600, 10, 104)]
    assert q.fillers == [(3, 5, 0)] and q.filler_count == 2
    assert (q.min_offset, q.max_offset) == (0, 7)


def test_a_filler_never_shares_a_commitlog_file_with_the_entries_after_it():
    """A pull meeting a filler skips every later entry of the filler's commitlog file
    (rollNextFile): with the neighbours in one file, the filler takes the start of the file of the
    queue's last entry in an earlier file, or 0 when there is none. Never a position inside a
    file: ``selectMappedBuffer(pos, 2^31-1)`` overflows its int bounds test there and throws."""
    q = _place([0, 1, 2, 4, 5], [1300, 2100, 2200, 2400, 2500])
    assert q.fillers == [(3, 4, 1000)]
    q = _place([0, 1, 3], [1100, 1200, 1400])
    assert q.fillers == [(2, 3, 0)]
    q = _place([7, 8, 10], [2100, 2200, 2400])       # starts at 7: pre-blank head, then a filler
    assert _slots(q)[:3] == [(0, FILLER, 0)] * 3 and q.min_offset == 7
    assert q.fillers == [(9, 10, 0)]


def test_tail_fillers_cross_cq_files(tmp_path):
    """``extend_queue`` past the rebuilt max into later CQ files, which are named by byte offset
    (4 slots of 20 bytes a file: 00..080, 00..160)."""
    q = _place([0, 1, 2, 3, 4, 5], [0, 100, 200, 300, 400, 500])
    queues.write_repaired_queue(q, str(tmp_path))
    part = queues.extend_queue("T", 0, str(tmp_path), 4 * 20, (0, 6), (0, 11), 256)
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"{n:020d}" for n in (0, 80, 160)]
    slots = np.concatenate([np.fromfile(p, CQ_ENTRY_DTYPE) for p in sorted(tmp_path.iterdir())])
    # the start of the last entry's commitlog file (256 bytes a file here)
    assert [tuple(int(x) for x in e) for e in slots[6:11]] == [(256, FILLER, 0)] * 5
    assert int(slots[5]["phy_offset"]) == 500 and part.fillers == [(6, 11, 256)]


def test_repeats_and_duplicate_claims_keep_the_first_put():
    # a repeat by phy (end not past the last), a second claim on offset 4, an offset below the start
    q = _place([3, 4, 4, 5, 2, 6], [100, 200, 300, 190, 400, 500])
    assert _slots(q)[3:] == [(100, 10, 100), (200, 10, 101), (0, FILLER, 0), (500, 10, 105)]
    assert q.fillers == [(5, 6, 0)] and q.min_offset == 3


def test_placement_equals_the_brokers_put_wherever_that_put_does_not_renumber():
    from store_reader.broker.cqueue import ConsumeQueueState

    rng = np.random.default_rng(7)
    for _ in range(50):
        n, first = int(rng.integers(1, 60)), int(rng.integers(0, 30))
        offsets = first + np.arange(n)
        phys = np.cumsum(rng.integers(1, 50, n)) * 20
        broker = ConsumeQueueState("T", 0, 7 * 20)
        broker.put_many(phys, np.full(n, 10), np.arange(n) + 100, offsets)
        ours = _place(offsets, phys, per_cq_file=7)
        assert broker.order_warnings == 0 and not ours.fillers
        ours_files = []                                     # cut into CQ files of 7 slots
        for lo in range(0, len(ours.slots), 7):
            part = np.zeros(7, CQ_ENTRY_DTYPE)
            written = ours.slots[lo:lo + 7]
            part[:len(written)] = written
            ours_files.append(((ours.first + lo) * 20, len(written) * 20, part.tobytes()))
        assert ours_files == [(f.start, f.wrote, f.slots.tobytes()) for f in broker.files]
        assert ours.min_offset * 20 == broker.min_logic_offset


# -- stores the brokers keep serving past the damage -------------------------------------------------

DAMAGES = {
    "zeroed-second-last": {"zeroed_span": "second_last"},
    "zeroed-last": {"zeroed_span": "last"},
    "missing-file": {"missing_file": True},
}
CASES = [(b, d, a) for b in ("4.9", "5.3") for d in DAMAGES for a in ("normal", "abnormal")]


def _case_id(case):
    return "-".join(case)


@pytest.fixture(scope="module")
def repaired(spark, tmp_path_factory):
    cache = {}

    def get(case):
        if case not in cache:
            broker, damage, path = case
            root = tmp_path_factory.mktemp("qoffsets") / "store"
            info = write_store(root, SyntheticStoreSpec(
                total_bytes=5 * SEGMENT + 320 * KiB, segment_size=SEGMENT, message_size=512, broker=broker,
                topics=(("TopicA", 4), ("TopicB", 3))), CrashSpec(abort=path == "abnormal", **DAMAGES[damage]))
            out = root.parent / "out"
            report = recover(spark, str(root), str(out), str(root / "broker.conf"), broker)
            cache[case] = (info, report, out)
        return cache[case]
    return get


def _records(out: Path, end: int, broker_5x: bool) -> dict[int, tuple[str, int, int, int]]:
    """phy -> (topic, queue id, QUEUEOFFSET, size) of every dispatchable record below ``end`` in the
    repaired commitlog, records behind bytes that are not a record included."""
    from store_reader.formats.recordformat import ScanOptions

    recs = {}
    for f in open_store(out, out / "broker.conf").commitlog_files:
        cols = ["phy_offset", "topic", "queue_id", "queue_offset", "total_size", "sys_flag"]
        t, _ = scan_segment(f.path, ScanOptions(check_crc=False, broker_5x=broker_5x), include_lost=True,
                            columns=cols)
        for phy, topic, qid, qoff, size, flag in zip(*(t[c].to_pylist() for c in cols)):
            if phy < end and flag & TRANSACTION_MASK in (TRANSACTION_NOT_TYPE, TRANSACTION_COMMIT_TYPE):
                recs[phy] = (topic, qid, qoff, size)
    return recs


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_every_entry_sits_at_its_records_queue_offset(case, repaired):
    info, report, out = repaired(case)
    broker, damage, path = case
    pred = report.prediction
    end = pred.max_phy_offset
    (out / "broker.conf").write_text((info.root / "broker.conf").read_text())
    store = open_store(out, out / "broker.conf")
    again = predict(store, broker)              # the repaired store as the broker loads it
    assert again.load_result and again.max_phy_offset == end
    records = _records(out, end, broker == "5.3")
    held: dict[tuple[str, int], dict[int, int]] = {}
    for phy, (topic, qid, qoff, _) in records.items():
        held.setdefault((topic, qid), {}).setdefault(qoff, phy)
    fillers: dict[tuple[str, int], set[int]] = {}
    for key, q in again.consume_queues.items():
        entries = q.entries()
        real = [(q.min_offset + i, int(e["phy_offset"])) for i, e in enumerate(entries) if e["size"] != FILLER]
        for i, e in enumerate(entries):
            o, phy, size = q.min_offset + i, int(e["phy_offset"]), int(e["size"])
            if size == FILLER:
                assert int(e["tags_code"]) == 0 and o not in held.get(key, {}), (key, o)
                earlier = [p for off, p in real if off < o]
                nxt = next((p for off, p in real if off > o), None)
                # at a commitlog file's start (a pull reads nothing there, queues.filler_phy_of)
                assert phy % SEGMENT == 0, (key, o, phy)
                if nxt is None:       # past the last record left: the last entry's file
                    assert phy == (earlier[-1] // SEGMENT * SEGMENT if earlier else 0), (key, o, phy)
                else:                 # a pull skipping the filler's file skips no entry after it
                    assert phy == 0 or (phy in {p // SEGMENT * SEGMENT for p in earlier}
                                        and phy // SEGMENT < nxt // SEGMENT), (key, o, phy, nxt)
                fillers.setdefault(key, set()).add(o)
            else:
                assert records.get(phy, (None,))[:3] == (key[0], key[1], o) and records[phy][3] == size, (key, o)
        # every surviving record has its entry at its own queue offset
        assert {o for o, _ in real} >= set(held.get(key, {})) - set(range(q.min_offset)), key
    # fillers stand exactly for the dispatched records that are gone, inside their queues
    m = info.messages
    gone = m.filter(pa.compute.and_(m["dispatched"], pa.compute.invert(pa.compute.is_null(m["damage"]))))
    want: dict[tuple[str, int], set[int]] = {}
    for topic, qid, qoff, phy in zip(*(gone[c].to_pylist() for c in ("topic", "queue_id", "queue_offset", "phy_offset"))):
        q = again.consume_queues.get((topic, qid))
        if phy < end and q is not None and q.min_offset <= qoff < q.max_offset:
            want.setdefault((topic, qid), set()).add(qoff)
    assert fillers == want
    qf = report.findings.tables["queue_findings"]
    found = qf.filter(pa.compute.equal(qf["kind"], "filler"))
    assert sum(found["count"].to_pylist()) == sum(map(len, fillers.values()))
    # the brokers keep what lies after a missing file, and 5.x's normal path a span it never re-reads
    kept = damage == "missing-file" or (broker == "5.3" and path == "normal" and damage == "zeroed-second-last")
    assert (end == info.written_end) == kept
    if kept:
        assert fillers, "the case must have records gone inside queues"
        # no queue offset the broker served is given up, none is renumbered
        ends = {k: (q.min_offset, q.max_offset) for k, q in again.consume_queues.items() if q.max_offset}
        assert ends == {k: (q.min_offset, q.max_offset) for k, q in pred.consume_queues.items() if q.max_offset}
    else:
        assert not fillers


@pytest.mark.spark
@pytest.mark.slow
def test_records_behind_a_kept_span_keep_their_entries_and_index_keys(repaired):
    info, report, out = repaired(("5.3", "zeroed-second-last", "normal"))
    cut = next(s for s in report.summaries if s.end_reason == "corrupt")
    assert cut.file_start + cut.file_size < report.prediction.max_phy_offset and cut.records_after_cut > 100
    behind = (cut.file_start + cut.resync_position, cut.file_start + cut.file_size)
    store = open_store(out, info.root / "broker.conf")
    again = predict(store, V53)
    served = {int(p) for q in again.consume_queues.values() for p in q.entries()["phy_offset"]
              if behind[0] <= p < behind[1]}
    assert len(served) >= cut.records_after_cut - 20      # transaction halves etc. have no entry
    from store_reader.formats.indexfile import list_index_files, query

    files = list_index_files(out / "index", store.config.index_file_size)
    m = info.messages
    sel = [(t, k.split(" ")[0], p) for t, k, p in zip(m["topic"].to_pylist(), m["keys"].to_pylist(),
                                                       m["phy_offset"].to_pylist()) if behind[0] <= p < behind[1] and k]
    for topic, key, phy in sel[::50]:
        assert phy in query(files, topic, key, hash_slot_num=store.config.maxHashSlotNum,
                            index_num=store.config.maxIndexNum, max_num=1 << 30), (topic, key)


def test_the_repair_and_the_prediction_borrow_nothing_from_each_other():
    """The prediction (the broker's put state machine, bugs included) and the repair (what a
    correct store holds) share only the rules both follow (dispatch, formats): neither imports
    the other at run time (the repair reads the prediction's type for hints only)."""
    import ast
    import importlib.util

    def runtime_imports(module: str) -> set[str]:
        """The modules ``module`` imports at run time, by their full names (wherever it lives)."""
        tree = ast.parse(Path(importlib.util.find_spec(module).origin).read_text())
        hidden = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If)
                  and getattr(node.test, "id", None) == "TYPE_CHECKING" for n in ast.walk(node)}
        package = module.split(".")[:-1]
        out = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and id(node) not in hidden:
                base = ".".join(package[:len(package) - node.level + 1] + [node.module or ""] if node.level
                                else [node.module]).rstrip(".")
                out |= {base} | {f"{base}.{a.name}" for a in node.names}
        return out

    from tests.test_layout import _modules, state_machine_modules

    machines = set(state_machine_modules())
    repairing = {m for m in _modules("store_reader") if m.startswith("store_reader.repair.")}
    assert machines and repairing
    for m in repairing:
        assert not runtime_imports(m) & machines, m
    for m in machines:
        assert not runtime_imports(m) & repairing, m
    # the check sees imports
    assert any("store_reader.broker.dispatch" in runtime_imports(m) for m in repairing)
