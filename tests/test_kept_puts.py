"""The index puts the scan keeps beside each segment's records (``scanned.read_puts``) are the ones
each pass built for itself before: the broker's replay in ``predict`` predicts the same index files
with them, and the index rebuild writes the same bytes. A crashed synthetic store with many small
batches per segment (the puts go batch by batch beside the records) and many small index files."""
from __future__ import annotations

import numpy as np
import pytest

from store_reader import open_store
from store_reader.broker import prediction, versions
from store_reader.repair import index, scanned
from store_reader.testing.synthetic import CrashSpec, SyntheticStoreSpec, write_store

pytestmark = [pytest.mark.reader]


@pytest.fixture(scope="module", params=[("5.3", True), ("4.9", True), ("5.3", False), ("4.9", False)],
                ids=["5.x-abnormal", "4.9-abnormal", "5.x-normal", "4.9-normal"])
def kept(request, tmp_path_factory):
    """(store, broker version, summaries, kept records by segment) of a crashed store whose last
    3,000 records were never dispatched (the replay indexes them: from a file's start after a
    crash, from inside a batch after a normal recovery), scanned in batches of 700."""
    broker, abort = request.param
    root = tmp_path_factory.mktemp("kept-puts")
    write_store(root / "store", SyntheticStoreSpec(total_bytes=3 << 20, segment_size=1 << 20, message_size=256,
                                                   max_hash_slot_num=500, max_index_num=4000,
                                                   broker=broker, seed=11),
                CrashSpec(abort=abort, torn_tail=True, cq_behind=3000, corrupt="crc"))
    store = open_store(root / "store", root / "store" / "broker.conf")
    five = broker == "5.3"
    opts = store.scan_options(broker_5x=five)
    cols, lost = scanned.columns_for(store.config, five, opts.index_tags)
    mp = pytest.MonkeyPatch()
    mp.setattr(scanned, "BATCH", 700)
    try:
        got = [scanned.scan_segment(f.path, opts, str(root), cols, lost) for f in store.commitlog_files]
    finally:
        mp.undo()
    assert max(g.rows for g in got) > 3 * 700
    return (store, versions.V53 if five else versions.V49, [g.summary for g in got],
            {g.summary.segment: g.records_path for g in got})


def test_each_batch_of_records_has_its_puts(kept):
    store, version, _, records = kept
    for path in records.values():
        for rb, p in zip(scanned.read_records(path, index.INDEX_COLUMNS), scanned.read_puts(path), strict=True):
            want = index.index_puts(rb, versions.index_tag_keys(version), ordered=True)
            assert np.array_equal(p.key_hash, want.key_hash) and np.array_equal(p.phy, want.phy)
            assert np.array_equal(p.record_phy, want.record_phy)
            assert np.array_equal(p.store_timestamp, want.store_timestamp)
            assert np.array_equal(p.record_row, want.record_row)


def test_replay_predicts_the_same_index_with_the_kept_puts(kept):
    store, version, summaries, records = kept
    opts = store.scan_options(broker_5x=version == versions.V53)
    source = scanned.prefix_source(records, opts)
    built = prediction.predict(store, version, summaries=summaries, records=source)
    taken = prediction.predict(store, version, summaries=summaries, records=source, puts=scanned.prefix_puts(records))
    assert any(f.data is not None for f in built.index_files)      # the replay writes index files
    assert [(f.name, f.header) for f in taken.index_files] == [(f.name, f.header) for f in built.index_files]
    for a, b in zip(taken.index_files, built.index_files):
        assert (a.data is None and b.data is None) or np.array_equal(a.data, b.data)
    assert taken.max_phy_offset == built.max_phy_offset


def test_index_rebuild_writes_the_same_file_from_the_kept_puts(kept, tmp_path):
    store, version, summaries, records = kept
    pred = prediction.predict(store, version, summaries=summaries)
    end, cfg = pred.max_phy_offset, store.config
    opts = store.scan_options(broker_5x=version == versions.V53)
    files = [f.path for f in store.commitlog_files if f.start < end]
    counts = [index.segment_index_counts(p, opts, end)[0] for p in files]
    plan = index.index_file_plan(counts, cfg.maxIndexNum)
    assert len(plan) > 2
    read = lambda path, cut: scanned.index_puts_below(records[path.rsplit("/", 1)[-1]], cut)  # noqa: E731
    for k in (0, 1, len(plan) - 1):      # the first file, one that spans files, the last
        ranges = [(files[i], lo, hi) for i, lo, hi in plan[k]]
        kept_file = index.write_index_file_part(str(tmp_path / f"kept-{k}"), ranges, opts, end, cfg, k == 0, read)
        own_file = index.write_index_file_part(str(tmp_path / f"own-{k}"), ranges, opts, end, cfg, k == 0)
        assert kept_file.header == own_file.header and kept_file.header.index_count > 1
        assert (tmp_path / f"kept-{k}").read_bytes() == (tmp_path / f"own-{k}").read_bytes()
