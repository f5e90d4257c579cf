"""Master/slave commitlog comparison (store_reader.broker.replicas, jobs/replicas.py) on replica pairs made
from the real-broker fixtures and from synthetic stores.

Expected answers never come from the comparison's own code: records from expected.json
``afterRecovery.commitLogScan`` (the broker's own decoding), queue ranges from its
``consumeQueues``, synthetic records from ``StoreInfo.messages``, byte positions from comparing the
files directly. Pairs:

* a store and an identical copy (in sync);
* a store and a truncated copy (a lagging slave: cut at a record, inside a record as an HA chunk can
  leave it, at a file boundary) and the broker's own truncated ``cq-dirty`` store;
* a store whose tail was replaced by other valid records (diverged), and the ``clean`` and
  ``crash-tail`` bases, which share the layout but not one record's bytes;
* a slave holding a corrupt record (``torn-middle-crc`` against ``crash-tail``);
* a slave starting at a later file (``oldest-deleted``: the broker's own store without its first
  three files);
* synthetic stores of many segments compared with small checksum ranges.
"""
from __future__ import annotations

import shutil
import struct
import zlib
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import support
from store_reader import open_store
from store_reader.broker import replicas as R
from store_reader.formats.commitlog import scan_segment
from store_reader.formats.config import read_consumer_offsets
from store_reader.exceptions import StoreReaderError
from store_reader.testing.synthetic import SyntheticStoreSpec, encode_message, write_store

VERSIONS = support.VERSIONS
SEGMENT = 65536          # mappedFileSizeCommitLog of every fixture


# -- helpers -------------------------------------------------------------------------------------

def _open(path: Path, version: str, scenario: str = "clean"):
    return open_store(path, support.broker_conf(version, scenario))


def _copy(version: str, scenario: str, dst: Path) -> Path:
    shutil.copytree(support.input_store(version, scenario), dst)
    return dst


def _scan(version: str, scenario: str) -> list[dict]:
    """The broker's own record list (blank markers left out)."""
    return [e for e in support.expected(version, scenario)["afterRecovery"]["commitLogScan"]
            if "phyOffset" in e]


def _blanks(version: str, scenario: str) -> list[int]:
    return [e["blankAt"] for e in support.expected(version, scenario)["afterRecovery"]["commitLogScan"]
            if "blankAt" in e]


def _max_phy(version: str, scenario: str) -> int:
    return support.expected(version, scenario)["afterRecovery"]["maxPhyOffset"]


def _queues(version: str, scenario: str, below: int | None = None) -> dict[tuple[str, int], tuple[int, int]]:
    """Queue ``[min, max)`` after the broker's recovery (non-empty queues); with ``below``, only the
    entries of records starting below that phy offset."""
    out = {}
    for topic, qs in support.expected(version, scenario)["afterRecovery"]["consumeQueues"].items():
        for qid, q in qs.items():
            if q["maxOffset"] == 0:
                continue
            hi = q["maxOffset"]
            if below is not None:
                kept = [e[0] for e in q["entries"] if e[1] < below]
                hi = kept[-1] + 1 if kept else q["minOffset"]
            if hi:
                out[(topic, int(qid))] = (q["minOffset"], hi)
    return out


def _ranges(c: R.ReplicaComparison, side: str) -> dict[tuple[str, int], tuple[int, int]]:
    return {(q.topic, q.queue_id): ((q.master_min, q.master_max) if side == R.MASTER else
                                    (q.slave_min, q.slave_max))
            for q in c.queues if (q.master_max if side == R.MASTER else q.slave_max)}


def _records(c: R.ReplicaComparison, kind: str, side: str) -> list[tuple]:
    t = c.records.to_pylist()
    return sorted((r["phy_offset"], r["topic"], r["queue_id"], r["queue_offset"], r["total_size"])
                  for r in t if r["kind"] == kind and r["side"] == side)


def _expected_records(entries: list[dict]) -> list[tuple]:
    return sorted((e["phyOffset"], e["topic"], e["queueId"], e["queueOffset"], e["size"]) for e in entries)


def _offset_findings(store: Path, side: str, other: dict[tuple[str, int], tuple[int, int]]) -> set:
    """Committed offsets of ``store``'s consumerOffset.json outside ``other``'s queue ranges."""
    out = set()
    name = R.SLAVE if side == R.MASTER else R.MASTER
    for r in read_consumer_offsets(store).value.to_pylist():
        lo, hi = other.get((r["topic"], r["queue_id"]), (0, 0))
        if r["offset"] > hi:
            out.add((side, r["group"], r["topic"], r["queue_id"], r["offset"], f"past_{name}_max"))
        elif r["offset"] < lo:
            out.add((side, r["group"], r["topic"], r["queue_id"], r["offset"], f"before_{name}_min"))
    return out


def _got_offset_findings(c: R.ReplicaComparison) -> set:
    return {(o.side, o.group, o.topic, o.queue_id, o.committed_offset, o.status) for o in c.consumer_offsets}


def _segment_file(store: Path, phy: int) -> Path:
    return store / "commitlog" / f"{phy - phy % SEGMENT:020d}"


def _cut(store: Path, phy: int) -> None:
    """What a slave that received the master's bytes up to ``phy`` holds: zeros from there to the
    end of that file, no later files."""
    seg = _segment_file(store, phy)
    with open(seg, "r+b") as fh:
        fh.seek(phy % SEGMENT)
        fh.write(bytes(SEGMENT - phy % SEGMENT))
    for f in (store / "commitlog").iterdir():
        if int(f.name) > int(seg.name):
            f.unlink()


def _check_read_only(*roots: Path):
    digests = [support.tree_digest(r) for r in roots]

    def check():
        assert [support.tree_digest(r) for r in roots] == digests, "a compared store was modified"
    return check


def _compare(master: Path, slave: Path, version: str, slave_scenario: str = "clean", **kw):
    return R.compare_stores(_open(master, version), _open(slave, version, slave_scenario), **kw)


# -- pairs from the real-broker fixtures -----------------------------------------------------------

@pytest.mark.reader
@pytest.mark.parametrize("version", VERSIONS)
def test_identical_copy_is_in_sync(version, tmp_path):
    master = support.input_store(version, "clean")
    slave = _copy(version, "clean", tmp_path / "slave")
    unchanged = _check_read_only(master, slave)
    c = _compare(master, slave, version, range_size=4096)
    unchanged()
    end = _max_phy(version, "clean")
    assert c.status == R.IN_SYNC and c.in_sync
    assert (c.master_min, c.master_max, c.slave_min, c.slave_max) == (0, end, 0, end)
    assert c.common_prefix_bytes == end and c.ahead_bytes == 0
    assert c.first_difference is None and c.first_divergent_offset is None
    assert {s.status for s in c.segments} == {R.IDENTICAL}
    assert c.records.num_rows == 0 and c.runs.num_rows == 0
    expected = _queues(version, "clean")
    assert _ranges(c, R.MASTER) == expected and _ranges(c, R.SLAVE) == expected
    # GroupAhead committed past the end on purpose: past what either side holds
    want = _offset_findings(master, R.MASTER, expected) | _offset_findings(slave, R.SLAVE, expected)
    assert want and _got_offset_findings(c) == want
    # every byte once (the checksums), nothing scanned
    assert c.bytes_read == 2 * sum(s.pair.file_size for s in c.segments)


def _lagging_cases():
    """(version, where the slave's copy stops, the record it stops in or before)."""
    out = []
    for version in VERSIONS:
        recs = _scan(version, "clean")
        mid = next(e for e in recs if e["phyOffset"] > 5 * SEGMENT + 20000)
        marker = _blanks(version, "clean")[8]
        for where, cut, end in (("record", mid["phyOffset"], mid["phyOffset"]),
                                ("inside-record", mid["phyOffset"] + mid["size"] // 2, mid["phyOffset"]),
                                ("file-boundary", (marker // SEGMENT + 1) * SEGMENT, marker)):
            out.append(pytest.param(version, cut, end, id=f"{support.case_id((version, where))}"))
    return out


@pytest.mark.reader
@pytest.mark.parametrize("version, cut, slave_end", _lagging_cases())
def test_truncated_copy_is_a_lagging_slave(version, cut, slave_end, tmp_path):
    master = support.input_store(version, "clean")
    slave = _copy(version, "clean", tmp_path / "slave")
    _cut(slave, cut)
    c = _compare(master, slave, version, range_size=8192)
    end = _max_phy(version, "clean")
    assert c.status == R.SLAVE_BEHIND and not c.in_sync
    # a partial record (an HA chunk ends anywhere) is not held; a file ends at its blank marker
    assert (c.slave_min, c.slave_max, c.master_max) == (0, slave_end, end)
    assert c.ahead_bytes == slave_end - end
    assert c.first_divergent_offset is None
    assert c.common_prefix_bytes == slave_end
    lost = [e for e in _scan(version, "clean") if e["phyOffset"] >= slave_end]
    assert lost and _records(c, R.MASTER_ONLY, R.MASTER) == _expected_records(lost)
    assert c.count(R.MASTER_ONLY) == len(lost)
    assert c.count(R.SLAVE_ONLY) == c.count(R.CONTENT_DIFFERS) == 0
    assert sum(c.runs["records"].to_pylist()) == len(lost)
    # queue ranges: the slave holds the entries of the records below its end
    assert _ranges(c, R.MASTER) == _queues(version, "clean")
    assert _ranges(c, R.SLAVE) == _queues(version, "clean", below=slave_end)
    want = (_offset_findings(master, R.MASTER, _queues(version, "clean", below=slave_end))
            | _offset_findings(slave, R.SLAVE, _queues(version, "clean")))
    assert _got_offset_findings(c) == want
    assert any(s == R.MASTER and st == "past_slave_max" for s, *_, st in want)


@pytest.mark.reader
@pytest.mark.parametrize("version", VERSIONS)
def test_broker_truncated_store_is_a_lagging_slave(version):
    """``cq-dirty``: the same base as ``clean``, its commitlog cut at a record by the fixture maker."""
    master, slave = support.input_store(version, "clean"), support.input_store(version, "cq-dirty")
    c = _compare(master, slave, version, "cq-dirty")
    slave_end = _max_phy(version, "cq-dirty")
    assert c.status == R.SLAVE_BEHIND
    assert c.ahead_bytes == slave_end - _max_phy(version, "clean")
    lost = [e for e in _scan(version, "clean") if e["phyOffset"] >= slave_end]
    assert len(lost) == 15 and _records(c, R.MASTER_ONLY, R.MASTER) == _expected_records(lost)
    assert _ranges(c, R.SLAVE) == _queues(version, "cq-dirty")
    assert _ranges(c, R.MASTER) == _queues(version, "clean")


@pytest.mark.reader
@pytest.mark.parametrize("version", VERSIONS)
def test_master_that_lost_its_tail_has_a_slave_ahead(version):
    """The master truncated below what its slave holds (a crash cut it, R§10): the slave is ahead."""
    master, slave = support.input_store(version, "cq-dirty"), support.input_store(version, "clean")
    c = R.compare_stores(_open(master, version, "cq-dirty"), _open(slave, version))
    master_end, slave_end = _max_phy(version, "cq-dirty"), _max_phy(version, "clean")
    assert c.status == R.SLAVE_AHEAD and c.ahead_bytes == slave_end - master_end
    assert c.first_divergent_offset is None and c.common_prefix_bytes == master_end
    only = [e for e in _scan(version, "clean") if e["phyOffset"] >= master_end]
    assert _records(c, R.SLAVE_ONLY, R.SLAVE) == _expected_records(only)
    assert c.count(R.MASTER_ONLY) == 0
    assert _ranges(c, R.MASTER) == _queues(version, "cq-dirty")
    assert _ranges(c, R.SLAVE) == _queues(version, "clean")
    assert any(o.status == "past_master_max" and o.side == R.SLAVE for o in c.consumer_offsets)


def _promoted_records(phy: int, count: int) -> list[bytes]:
    recs = []
    for i in range(count):
        recs.append(encode_message(topic="PromotedTopic", body=b"written after the failover %d" % i,
                                   queue_id=i % 2, queue_offset=i // 2,
                                   phy_offset=phy + sum(map(len, recs)),
                                   properties={"KEYS": f"P{i}", "UNIQ_KEY": f"PROMOTED{i:04d}"},
                                   born_timestamp=1_800_000_000_000 + i,
                                   store_timestamp=1_800_000_000_000 + i))
    return recs


@pytest.mark.reader
@pytest.mark.parametrize("version", VERSIONS)
def test_tail_replaced_by_other_records_diverges(version, tmp_path):
    """A promoted slave's own writes over records the master still has."""
    master = support.input_store(version, "clean")
    slave = _copy(version, "clean", tmp_path / "slave")
    start = next(e for e in _scan(version, "clean") if e["phyOffset"] > 7 * SEGMENT + 3000)["phyOffset"]
    new = _promoted_records(start, 12)
    _cut(slave, start)
    with open(_segment_file(slave, start), "r+b") as fh:
        fh.seek(start % SEGMENT)
        fh.write(b"".join(new))
    c = _compare(master, slave, version, range_size=4096)
    with open(_segment_file(master, start), "rb") as fh:
        old = fh.read()[start % SEGMENT:]
    first_byte = start + next(i for i, (a, b) in enumerate(zip(old, b"".join(new))) if a != b)
    assert c.status == R.DIVERGED
    assert c.first_divergent_offset == start and c.first_difference == first_byte
    assert c.common_prefix_bytes == first_byte
    assert c.slave_max == start + sum(map(len, new)) and c.master_max == _max_phy(version, "clean")
    master_recs = {e["phyOffset"]: e for e in _scan(version, "clean") if e["phyOffset"] >= start}
    slave_phys = [start + sum(map(len, new[:i])) for i in range(len(new))]
    both = sorted(set(master_recs) & set(slave_phys))
    assert both[0] == start
    assert _records(c, R.MASTER_ONLY, R.MASTER) == _expected_records(
        [e for p, e in master_recs.items() if p not in slave_phys])
    assert _records(c, R.CONTENT_DIFFERS, R.MASTER) == _expected_records([master_recs[p] for p in both])
    slave_rows = [(p, "PromotedTopic", i % 2, i // 2, len(new[i])) for i, p in enumerate(slave_phys)]
    assert _records(c, R.CONTENT_DIFFERS, R.SLAVE) == [r for r in slave_rows if r[0] in both]
    assert _records(c, R.SLAVE_ONLY, R.SLAVE) == [r for r in slave_rows if r[0] not in both]
    promoted = {(q.topic, q.queue_id): q for q in c.queues if q.topic == "PromotedTopic"}
    assert {k: (q.slave_min, q.slave_max, q.master_max, q.status) for k, q in promoted.items()} == {
        ("PromotedTopic", 0): (0, 6, 0, R.SLAVE_AHEAD), ("PromotedTopic", 1): (0, 6, 0, R.SLAVE_AHEAD)}
    assert _ranges(c, R.MASTER) == _queues(version, "clean")


@pytest.mark.reader
@pytest.mark.parametrize("version", VERSIONS)
def test_bases_written_apart_diverge_from_the_first_record(version):
    """``clean`` and ``crash-tail`` ran the same message plan at different times: the same record
    layout (phy offsets), different bytes (timestamps) in every record; crash-tail wrote more."""
    master, slave = support.input_store(version, "clean"), support.input_store(version, "crash-tail")
    c = _compare(master, slave, version, "crash-tail")
    m = {e["phyOffset"]: e for e in _scan(version, "clean")}
    s = {e["phyOffset"]: e for e in _scan(version, "crash-tail")}
    both = set(m) & set(s)
    assert c.status == R.DIVERGED and c.first_divergent_offset == 0
    assert c.slave_max == _max_phy(version, "crash-tail") and c.ahead_bytes > 0
    assert _records(c, R.CONTENT_DIFFERS, R.MASTER) == _expected_records([m[p] for p in both])
    assert _records(c, R.CONTENT_DIFFERS, R.SLAVE) == _expected_records([s[p] for p in both])
    assert _records(c, R.MASTER_ONLY, R.MASTER) == _expected_records([m[p] for p in set(m) - both])
    assert _records(c, R.SLAVE_ONLY, R.SLAVE) == _expected_records([s[p] for p in set(s) - both])
    assert c.count(R.SLAVE_ONLY) == len(set(s) - both) > 0


@pytest.mark.reader
@pytest.mark.parametrize("version", VERSIONS)
def test_one_flipped_byte_keeps_the_queue_ranges_past_it(version, tmp_path):
    """One body byte flipped in the slave's copy of a middle segment: the pair diverges at that
    record, but the byte-identical segments after it hold the same records on both sides, so
    neither side's queues end at the divergence (no false ``past_slave_max`` consumer offsets)."""
    master = support.input_store(version, "clean")
    slave = _copy(version, "clean", tmp_path / "slave")
    rec = next(e for e in _scan(version, "clean") if e["phyOffset"] > 2 * SEGMENT + 5000)
    where = rec["phyOffset"] + rec["size"] // 2
    with open(_segment_file(slave, where), "r+b") as fh:
        fh.seek(where % SEGMENT)
        byte = fh.read(1)
        fh.seek(where % SEGMENT)
        fh.write(bytes([byte[0] ^ 0xFF]))
    c = _compare(master, slave, version, range_size=4096)
    assert c.status == R.DIVERGED and c.first_divergent_offset == rec["phyOffset"]
    assert c.first_difference == where
    expected = _queues(version, "clean")
    assert _ranges(c, R.MASTER) == expected
    # the slave holds every record but the damaged one's successors in its file (its scan stops
    # at the bad record); the segments after it are the master's bytes
    later = _queues(version, "clean")
    got = _ranges(c, R.SLAVE)
    assert {k: v[1] for k, v in got.items()} == {k: v[1] for k, v in later.items()}
    # the consumer offsets judged against full ranges: only the ones an identical copy has
    want = _offset_findings(master, R.MASTER, expected) | _offset_findings(slave, R.SLAVE, expected)
    assert _got_offset_findings(c) == want


@pytest.mark.reader
@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("scenario", ["torn-middle-crc", "torn-middle-magic"])
def test_corrupt_record_on_the_slave_ends_what_it_holds(version, scenario):
    master, slave = support.input_store(version, "crash-tail"), support.input_store(version, scenario)
    c = _compare(master, slave, version, scenario)
    slave_end = _max_phy(version, scenario)
    assert c.status == R.SLAVE_BEHIND and c.slave_max == slave_end
    lost = [e for e in _scan(version, "crash-tail") if e["phyOffset"] >= slave_end]
    not_survived = [w for w in support.expected(version, scenario)["writtenMessages"] if not w["survived"]]
    assert len(lost) == len(not_survived) == 21
    assert _records(c, R.MASTER_ONLY, R.MASTER) == _expected_records(lost)
    assert any("corrupt" in n for n in c.notes)
    (seg,) = [s for s in c.segments if s.status != R.IDENTICAL]
    assert seg.slave.end_reason == "corrupt" and seg.divergence == slave_end


@pytest.mark.reader
@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("roles", ["slave-starts-later", "master-expired-older-files"])
def test_slave_starting_at_a_later_file(version, roles):
    """``oldest-deleted`` is ``clean`` without its first three files: a slave that started from
    the master's fourth file (or a master whose oldest files expired before the slave's)."""
    clean, later = support.input_store(version, "clean"), support.input_store(version, "oldest-deleted")
    start = support.expected(version, "oldest-deleted")["afterRecovery"]["minPhyOffset"]
    assert start == 3 * SEGMENT
    if roles == "slave-starts-later":
        c = _compare(clean, later, version, "oldest-deleted")
        assert (c.master_min, c.slave_min) == (0, start)
    else:
        c = R.compare_stores(_open(later, version, "oldest-deleted"), _open(clean, version))
        assert (c.master_min, c.slave_min) == (start, 0)
    end = _max_phy(version, "clean")
    assert c.status == R.IN_SYNC and c.overlap_start == start
    assert c.common_prefix_bytes == end - start and c.master_max == c.slave_max == end
    assert [s.pair.file_start for s in c.segments] == list(range(start, end, SEGMENT))
    assert c.notes and str(start) in c.notes[0]
    later_side = R.SLAVE if roles == "slave-starts-later" else R.MASTER
    clean_side = R.MASTER if later_side == R.SLAVE else R.SLAVE
    assert _ranges(c, later_side) == _queues(version, "oldest-deleted")
    assert _ranges(c, clean_side) == _queues(version, "clean")
    want = (_offset_findings(clean, clean_side, _queues(version, "oldest-deleted"))
            | _offset_findings(later, later_side, _queues(version, "clean")))
    assert _got_offset_findings(c) == want


# -- the building blocks ---------------------------------------------------------------------------

@pytest.mark.reader
@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("range_size", [512, 4096, 1 << 20])
def test_record_start_before_finds_the_record_holding_a_byte(version, range_size):
    store = _open(support.input_store(version, "clean"), version)
    opts = store.scan_options()
    starts = sorted([e["phyOffset"] for e in _scan(version, "clean")] + _blanks(version, "clean"))
    rng = np.random.default_rng(7)
    for f in store.commitlog_files[:4]:
        bounds = [p - f.start for p in starts if f.start <= p < f.start + f.size]
        buf = open(f.path, "rb").read()
        targets = list(rng.integers(0, f.size, 60)) + bounds[:10] + [0, bounds[-1] + 3, f.size - 1]
        for t in map(int, targets):
            want = max(b for b in bounds if b <= t)
            got, read = R.record_start_before(buf, f.start, t, opts, range_size)
            assert got == want, (f.name, t)
            assert read <= t + range_size


@pytest.mark.reader
@pytest.mark.parametrize("version", VERSIONS)
def test_region_scan_matches_the_full_scan_from_a_boundary(version):
    store = _open(support.input_store(version, "crash-tail"), version)
    opts = store.scan_options()
    for f in store.commitlog_files:
        full, summary = scan_segment(f.path, opts, columns=list(R.RECORD_COLUMNS))
        phys = full["phy_offset"].to_pylist()
        if len(phys) < 3:
            continue
        k = len(phys) // 2
        scan = R.RegionScan(f.path, opts, phys[k] - f.start, columns=list(R.RECORD_COLUMNS))
        part = pa.Table.from_batches(list(scan), schema=scan.schema)
        assert part.to_pylist() == full.slice(k).to_pylist()
        assert scan.summary.valid_bytes == summary.valid_bytes
        assert scan.summary.end_reason == summary.end_reason


@pytest.mark.reader
def test_runs_join_consecutive_queue_offsets_across_segments():
    prepared = 0x4           # PREPARED: no consume queue entry, QUEUEOFFSET 0

    def rows(*recs):
        cols: dict[str, list] = {n: [] for n in R.RECORD_SCHEMA.names}
        for kind, qid, qo, phy, *flag in recs:
            values = dict(kind=kind, side=kind.split("_")[0], topic="T", queue_id=qid, queue_offset=qo,
                          phy_offset=phy, total_size=100, sys_flag=flag[0] if flag else 0,
                          store_timestamp=1000 + phy, body_crc=0, msg_id="m", uniq_key=None, tags=None,
                          keys=None)
            for n in cols:
                cols[n].append(values[n])
        return pa.Table.from_pydict(cols, schema=R.RECORD_SCHEMA)

    seg1 = R.record_runs(rows(("master_only", 0, 5, 100), ("master_only", 1, 9, 200),
                              ("master_only", 0, 6, 300), ("master_only", 0, 0, 350, prepared),
                              ("master_only", 0, 8, 400)))
    seg2 = R.record_runs(rows(("master_only", 0, 9, 1000), ("master_only", 0, 0, 1050, prepared),
                              ("master_only", 1, 11, 1100), ("slave_only", 0, 9, 1000)))
    got = [(r["kind"], r["queue_id"], r["consume_queue"], r["queue_offset_from"], r["queue_offset_to"],
            r["phy_offset_from"], r["phy_offset_to"], r["records"])
           for r in R.merge_runs([seg1, seg2]).to_pylist()]
    assert got == [
        ("master_only", 0, False, 0, 1, 350, 1150, 2),       # one run, whatever the offsets
        ("master_only", 0, True, 5, 7, 100, 400, 2),
        ("master_only", 0, True, 8, 10, 400, 1100, 2),       # 8 then 9 in the next segment
        ("master_only", 1, True, 9, 10, 200, 300, 1),
        ("master_only", 1, True, 11, 12, 1100, 1200, 1),     # 10 is missing
        ("slave_only", 0, True, 9, 10, 1000, 1100, 1),
    ]


# -- synthetic stores of several segments ------------------------------------------------------------

SYN_SEGMENT = 256 << 10


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    root = tmp_path_factory.mktemp("replicas") / "master"
    info = write_store(root, SyntheticStoreSpec(total_bytes=3 << 20, segment_size=SYN_SEGMENT,
                                                cq_file_size=600 * 20, seed=11))
    return root, info


def _syn_copy(synthetic, dst: Path) -> Path:
    shutil.copytree(synthetic[0], dst)
    return dst


def _syn_open(path: Path):
    return open_store(path)


@pytest.mark.reader
def test_synthetic_lagging_slave_over_several_segments(synthetic, tmp_path):
    root, info = synthetic
    msgs = info.messages.to_pylist()
    cut = next(m for m in msgs if m["phy_offset"] > 5 * SYN_SEGMENT + 1000)["phy_offset"]
    slave = _syn_copy(synthetic, tmp_path / "slave")
    seg = slave / "commitlog" / f"{cut - cut % SYN_SEGMENT:020d}"
    with open(seg, "r+b") as fh:
        fh.seek(cut % SYN_SEGMENT)
        fh.write(bytes(SYN_SEGMENT - cut % SYN_SEGMENT))
    for f in (slave / "commitlog").iterdir():
        if int(f.name) > int(seg.name):
            f.unlink()
    c = R.compare_stores(_syn_open(root), _syn_open(slave), range_size=16384)
    assert c.status == R.SLAVE_BEHIND
    assert c.master_max == info.written_end and c.slave_max == cut
    lost = sorted((m["phy_offset"], str(m["topic"]), m["queue_id"], m["queue_offset"], m["total_size"])
                  for m in msgs if m["phy_offset"] >= cut)
    assert _records(c, R.MASTER_ONLY, R.MASTER) == lost
    assert c.count(R.MASTER_ONLY) == len(lost) > 1000
    # one segment read past the checksummed ranges, the rest checksummed once
    in_scope = R.in_scope_bytes(R.plan_segments(_syn_open(root), _syn_open(slave)))
    assert in_scope <= c.bytes_read <= in_scope + 4 * 16384
    # per queue: the slave's max is one past the last dispatched record below the cut
    dispatched = [m for m in msgs if m["dispatched"]]
    for q in c.queues:
        mine = [m["queue_offset"] for m in dispatched
                if str(m["topic"]) == q.topic and m["queue_id"] == q.queue_id]
        below = [m["queue_offset"] for m in dispatched if str(m["topic"]) == q.topic
                 and m["queue_id"] == q.queue_id and m["phy_offset"] < cut]
        assert q.master_max == max(mine) + 1
        assert q.slave_max == (max(below) + 1 if below else 0)


@pytest.mark.reader
def test_synthetic_record_changed_in_the_middle(synthetic, tmp_path):
    """One record rewritten in place with a valid body CRC (same size): later segments stay
    identical, so the difference is exactly that record."""
    root, info = synthetic
    target = next(m for m in info.messages.to_pylist() if m["phy_offset"] > 2 * SYN_SEGMENT + 5000
                  and not m["sys_flag"] & 0x30)
    slave = _syn_copy(synthetic, tmp_path / "slave")
    seg = slave / "commitlog" / f"{target['phy_offset'] - target['phy_offset'] % SYN_SEGMENT:020d}"
    data = bytearray(seg.read_bytes())
    pos = target["phy_offset"] % SYN_SEGMENT
    body_len = struct.unpack_from(">i", data, pos + 84)[0]   # IPv4 hosts: BODYLEN at 84, body at 88
    assert body_len > 0
    data[pos + 88] ^= 0xFF
    struct.pack_into(">i", data, pos + 8, zlib.crc32(data[pos + 88:pos + 88 + body_len]) & 0x7FFFFFFF)
    seg.write_bytes(bytes(data))
    original = (root / "commitlog" / seg.name).read_bytes()
    first = target["phy_offset"] - pos + next(i for i, (a, b) in enumerate(zip(original, data)) if a != b)
    c = R.compare_stores(_syn_open(root), _syn_open(slave), range_size=16384)
    assert c.status == R.DIVERGED
    assert c.first_divergent_offset == target["phy_offset"] and c.first_difference == first
    assert c.master_max == c.slave_max == info.written_end
    row = (target["phy_offset"], str(target["topic"]), target["queue_id"], target["queue_offset"],
           target["total_size"])
    assert _records(c, R.CONTENT_DIFFERS, R.MASTER) == _records(c, R.CONTENT_DIFFERS, R.SLAVE) == [row]
    assert c.count(R.MASTER_ONLY) == c.count(R.SLAVE_ONLY) == 0
    assert [s.status for s in c.segments].count(R.DIFFERS) == 1
    assert c.count(R.IDENTICAL) > 0      # the records after it in that segment are the same


# -- bad input ---------------------------------------------------------------------------------------

@pytest.mark.reader
def test_a_store_the_broker_would_refuse_cannot_be_compared(tmp_path):
    version = VERSIONS[0]
    master = support.input_store(version, "clean")
    slave = _copy(version, "clean", tmp_path / "slave")
    short = slave / "commitlog" / f"{4 * SEGMENT:020d}"
    with open(short, "r+b") as fh:
        fh.truncate(1000)
    with pytest.raises(StoreReaderError) as err:
        _compare(master, slave, version)
    assert str(short) in str(err.value) and "slave" in str(err.value)


@pytest.mark.reader
def test_segment_sizes_that_differ_between_the_sides(tmp_path):
    """Each side consistent with its own broker.conf, but the files cannot be aligned."""
    version = VERSIONS[0]
    master = _open(support.input_store(version, "clean"), version)
    slave_root = tmp_path / "slave"
    (slave_root / "commitlog").mkdir(parents=True)
    first = master.commitlog_files[0]
    (slave_root / "commitlog" / first.name).write_bytes(Path(first.path).read_bytes()[:32768])
    (tmp_path / "broker.conf").write_text("mappedFileSizeCommitLog=32768\n")
    slave = open_store(slave_root, tmp_path / "broker.conf")
    with pytest.raises(StoreReaderError) as err:
        R.plan_segments(master, slave)
    assert err.value.path == str(slave_root / "commitlog" / first.name)
    assert err.value.position == 32768


@pytest.mark.reader
def test_the_same_store_twice_is_refused():
    version = VERSIONS[0]
    store = _open(support.input_store(version, "clean"), version)
    with pytest.raises(StoreReaderError, match="same store"):
        R.plan_segments(store, store)


# -- the job: Spark, Delta, exit codes ----------------------------------------------------------------

@pytest.mark.spark
@pytest.mark.slow
def test_job_writes_findings_and_reruns_replace_them(spark, tmp_path, capsys):
    from deltalake import DeltaTable

    from jobs import replicas as job

    version = VERSIONS[0]
    conf = str(support.broker_conf(version, "clean"))
    master = _copy(version, "clean", tmp_path / "master")
    in_sync = _copy(version, "clean", tmp_path / "in-sync")
    lagging = _copy(version, "clean", tmp_path / "lagging")
    cut = next(e for e in _scan(version, "clean") if e["phyOffset"] > 9 * SEGMENT)["phyOffset"]
    _cut(lagging, cut)
    audit = tmp_path / "audit"
    args = ["--master", str(master), "--slave", str(in_sync), "--slave", str(lagging),
            "--audit-path", str(audit), "--broker-config", conf, "--range-size", "8KiB"]
    unchanged = _check_read_only(master, in_sync, lagging)
    assert job.main(args) == 1
    out = capsys.readouterr().out
    end = _max_phy(version, "clean")
    assert "IN SYNC" in out and f"SLAVE BEHIND by {end - cut} bytes" in out
    table = DeltaTable(str(audit / "replica_findings")).to_pyarrow_table()
    rows = table.to_pylist()
    assert len({r["run_id"] for r in rows}) == 1
    assert {r["store_id"] for r in rows} == {str(master)}
    pairs = {r["slave_store"]: r for r in rows if r["kind"] == "pair"}
    assert pairs[str(in_sync)]["status"] == R.IN_SYNC and pairs[str(lagging)]["status"] == R.SLAVE_BEHIND
    lost = [e for e in _scan(version, "clean") if e["phyOffset"] >= cut]
    behind = pairs[str(lagging)]
    assert (behind["master_max"], behind["slave_max"], behind["ahead_bytes"]) == (end, cut, cut - end)
    assert behind["master_only_records"] == len(lost) and behind["common_prefix_bytes"] == cut
    runs = [r for r in rows if r["kind"] == "records"]
    assert {r["slave_store"] for r in runs} == {str(lagging)}
    assert sum(r["records"] for r in runs) == len(lost)
    for (topic, qid), (lo, hi) in _queues(version, "clean").items():
        mine = sorted(e["queueOffset"] for e in lost if (e["topic"], e["queueId"]) == (topic, qid)
                      and e["tranType"] in (0, 8))
        got = [(r["queue_offset_from"], r["queue_offset_to"]) for r in runs
               if (r["topic"], r["queue_id"]) == (topic, qid) and r["queue_offset_from"] is not None]
        assert got == ([(mine[0], mine[-1] + 1)] if mine else []), (topic, qid)
    segments = [r for r in rows if r["kind"] == "segment" and r["slave_store"] == str(lagging)]
    assert len(segments) == len(list((master / "commitlog").iterdir()))
    offsets = {(r["side"], r["consumer_group"], r["topic"], r["queue_id"], r["committed_offset"],
                r["status"]) for r in rows if r["kind"] == "consumer_offset"
               and r["slave_store"] == str(lagging)}
    assert offsets == (_offset_findings(master, R.MASTER, _queues(version, "clean", below=cut))
                       | _offset_findings(lagging, R.SLAVE, _queues(version, "clean")))
    # the Spark path and the in-process path agree
    (on_spark,) = job.compare_on_spark(spark, _open(master, version), [_open(lagging, version)],
                                       _open(master, version).scan_options(), 8192)
    local = R.compare_stores(_open(master, version), _open(lagging, version), range_size=8192)
    assert on_spark.runs.equals(local.runs) and on_spark.queues == local.queues
    assert (on_spark.status, on_spark.slave_max, on_spark.common_prefix_bytes) == \
        (local.status, local.slave_max, local.common_prefix_bytes)
    # a re-run over the same inputs replaces its rows
    assert job.main(args) == 1
    again = DeltaTable(str(audit / "replica_findings")).to_pyarrow_table()
    assert again.num_rows == table.num_rows
    assert set(again["run_id"].to_pylist()) == {rows[0]["run_id"]}
    unchanged()
    # only the identical slave: exit 0, a new run next to the first
    assert job.main(["--master", str(master), "--slave", str(in_sync), "--audit-path", str(audit),
                     "--broker-config", conf]) == 0
    third = DeltaTable(str(audit / "replica_findings")).to_pyarrow_table()
    assert len(set(third["run_id"].to_pylist())) == 2 and third.num_rows > table.num_rows


@pytest.mark.spark
@pytest.mark.slow
def test_job_bad_input_exits_2_naming_the_file(spark, tmp_path, capsys):
    from jobs import replicas as job

    version = VERSIONS[0]
    conf = str(support.broker_conf(version, "clean"))
    master = support.input_store(version, "clean")
    missing = tmp_path / "no-such-store"
    assert job.main(["--master", str(master), "--slave", str(missing), "--audit-path",
                     str(tmp_path / "audit"), "--broker-config", conf]) == 2
    assert str(missing) in capsys.readouterr().err
    slave = _copy(version, "clean", tmp_path / "slave")
    short = slave / "commitlog" / f"{2 * SEGMENT:020d}"
    with open(short, "r+b") as fh:
        fh.truncate(4096)
    assert job.main(["--master", str(master), "--slave", str(slave), "--audit-path",
                     str(tmp_path / "audit"), "--broker-config", conf]) == 2
    assert str(short) in capsys.readouterr().err
    assert not (tmp_path / "audit").exists()
