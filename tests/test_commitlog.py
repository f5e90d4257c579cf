"""The commitlog scanner against the real broker's own decoding of every fixture store.

``afterRecovery.commitLogScan`` is what ``CommitLog#checkMessageAndReturnSize`` + ``MessageDecoder``
returned inside the real broker; ``afterLoad.commitLog`` is where its recovery found the end of the
valid data. The same tests run with the native scanner and with the pure-Python twin
(``STORE_READER_PURE=1``, see scripts/test.sh).
"""
from __future__ import annotations

import dataclasses

import pytest

import support
from store_reader import open_store
from store_reader.formats.commitlog import SegmentScan, scan_segment
from store_reader.formats.recordformat import ScanOptions

pytestmark = pytest.mark.reader

CASES = support.scenarios()
LOADED = [c for c in CASES if support.expected(*c)["afterLoad"]["loadResult"]]

# expected.json key -> MESSAGE column
FIELD_MAP = {
    "size": "total_size", "topic": "topic", "queueId": "queue_id", "queueOffset": "queue_offset",
    "storeTimestamp": "store_timestamp", "tagsCode": "tags_code", "sysFlag": "sys_flag",
    "preparedTransactionOffset": "prepared_transaction_offset", "keys": "keys",
    "uniqKey": "uniq_key", "msgId": "msg_id", "tags": "tags", "bodyCRC": "body_crc",
    "bodyLen": "body_length", "bornTimestamp": "born_timestamp",
    "reconsumeTimes": "reconsume_times", "flag": "flag",
}


def _opts(version: str) -> ScanOptions:
    return ScanOptions(broker_5x=version.endswith("5.3.3"))


def _all_records(version: str, scenario: str) -> dict[int, dict]:
    store = open_store(support.input_store(version, scenario), support.broker_conf(version, scenario))
    rows: dict[int, dict] = {}
    for batch in store.scan_commitlog(opts=_opts(version)):
        for r in batch.to_pylist():
            rows[r["phy_offset"]] = r
    return rows


@pytest.mark.parametrize("case", LOADED, ids=support.case_id)
def test_every_broker_record_decodes_identically(case):
    version, scenario = case
    rows = _all_records(version, scenario)
    scanned = [e for e in support.expected(*case)["afterRecovery"]["commitLogScan"] if "phyOffset" in e]
    for e in scanned:
        r = rows.get(e["phyOffset"])
        assert r is not None, f"record at phy {e['phyOffset']} not decoded"
        got = {k: r[col] for k, col in FIELD_MAP.items()}
        assert got == {k: e[k] for k in FIELD_MAP}, f"phy {e['phyOffset']}"
        assert "/" + r["born_host"] == e["bornHost"] and "/" + r["store_host"] == e["storeHost"]
        assert dict(r["properties"] or []) == e["properties"]
        assert r["sys_flag"] & 0xC == e["tranType"]
        assert r["stored_phy_offset"] == r["phy_offset"]
        assert r["body_crc_ok"] is True and r["valid_prefix"] is True
        keys = e["keys"].split(" ") if e["keys"] else []
        assert r["key_list"] == [k for k in keys if k]
    # Nothing decoded inside the broker's recovered range that the broker did not see.
    lo = support.expected(*case)["afterRecovery"]["commitLog"]["minOffset"]
    hi = support.expected(*case)["afterRecovery"]["commitLog"]["maxOffset"]
    inside = {off for off in rows if lo <= off < hi}
    assert inside == {e["phyOffset"] for e in scanned}


@pytest.mark.parametrize("case", LOADED, ids=support.case_id)
def test_segment_summaries_end_where_the_broker_did(case):
    version, scenario = case
    exp = support.expected(*case)["afterLoad"]["commitLog"]
    store = open_store(support.input_store(version, scenario), support.broker_conf(version, scenario))
    summaries = {s.segment: s for s in store.summaries(_opts(version))}
    for f in exp["files"]:
        s = summaries[f["name"]]
        assert s.valid_bytes + s.trailing_bytes == s.file_size == f["fileSize"]
        if f["wrotePosition"] < f["fileSize"]:   # the file where the broker's recovery ended
            assert s.valid_bytes == f["wrotePosition"], s
            assert s.file_start + s.valid_bytes == exp["maxOffset"]
        else:                                      # every file before it ends with a blank marker
            assert s.end_reason == "eof_marker", s


@pytest.mark.parametrize("case", LOADED, ids=support.case_id)
def test_segment_summaries_count_the_valid_prefix_index_puts(case):
    """The scan's running count (what plans the index rebuild without another pass) against the
    decoded columns: UNIQ_KEY and KEYS tokens of every record but a ROLLBACK one, and with
    ``index_tags`` (5.4+) each non-empty TAGS too."""
    version, scenario = case
    store = open_store(support.input_store(version, scenario), support.broker_conf(version, scenario))
    tagged = 0
    for f in store.commitlog_files:
        table, s = scan_segment(f.path, _opts(version), columns=["sys_flag", "store_timestamp",
                                                                 "uniq_key", "key_list", "tags"])
        rows = [r for r in table.to_pylist() if r["sys_flag"] & 0xC != 0xC]
        want = sum((r["uniq_key"] is not None) + len(r["key_list"]) for r in rows)
        assert s.index_puts == want, f.name
        tags = sum(bool(r["tags"]) for r in rows)
        _, with_tags = scan_segment(f.path, dataclasses.replace(_opts(version), index_tags=True),
                                    columns=["phy_offset"])
        assert with_tags.index_puts == want + tags, f.name
        tagged += tags
        assert s.max_store_timestamp == max(table["store_timestamp"].to_pylist(), default=None)
    assert tagged or not store.commitlog_files


@pytest.mark.parametrize("scenario", ["torn-middle-crc", "torn-middle-magic", "crash-ckpt-mid-torn-crc"])
@pytest.mark.parametrize("version", support.VERSIONS)
def test_corruption_is_reported_with_the_intact_records_behind_it(version, scenario):
    exp = support.expected(version, scenario)
    lost = [m for m in exp["writtenMessages"] if not m["survived"]]
    store = open_store(support.input_store(version, scenario), support.broker_conf(version, scenario))
    bad = [s for s in store.summaries(_opts(version)) if s.end_reason == "corrupt"]
    assert len(bad) == 1
    s = bad[0]
    assert s.file_start + s.valid_bytes == exp["afterLoad"]["commitLog"]["maxOffset"]
    assert s.end_check == ("bad_magic" if scenario.endswith("magic") else "body_crc")
    f = next(f for f in store.commitlog_files if f.name == s.segment)
    table, _ = scan_segment(f.path, _opts(version), include_lost=True, columns=["phy_offset", "valid_prefix"])
    behind = [r["phy_offset"] for r in table.to_pylist() if not r["valid_prefix"]]
    # every acked message the broker lost, except the damaged one itself, is found intact
    assert behind == sorted(m["phyOffset"] for m in lost)[1:]
    assert s.records_after_cut == len(behind)


def test_column_projection_and_batch_bound(tmp_path):
    version, scenario = support.VERSIONS[1], "clean"
    store = open_store(support.input_store(version, scenario), support.broker_conf(version, scenario))
    f = store.commitlog_files[0]
    scan = SegmentScan(f.path, _opts(version), columns=["phy_offset", "topic"], batch_size=7)
    batches = list(scan)
    assert all(b.num_rows <= 7 for b in batches)
    assert batches[0].schema.names == ["phy_offset", "topic"]
    assert sum(b.num_rows for b in batches) == scan.summary.records
    for b in batches:
        b.validate(full=True)


def test_bodies_match_the_broker_crc(tmp_path):
    import zlib

    version, scenario = support.VERSIONS[0], "clean"
    exp = {m["phyOffset"]: m for m in support.expected(version, scenario)["writtenMessages"]}
    store = open_store(support.input_store(version, scenario), support.broker_conf(version, scenario))
    n = 0
    for batch in store.scan_commitlog(columns=["phy_offset", "body", "body_length"], opts=_opts(version)):
        for r in batch.to_pylist():
            assert len(r["body"]) == r["body_length"]
            if r["phy_offset"] in exp:
                assert zlib.crc32(r["body"]) & 0x7FFFFFFF == exp[r["phy_offset"]]["bodyCRC"]
                n += 1
    assert n == 400


@pytest.mark.parametrize("advice", [None, -12345], ids=["no-hint", "rejected-hint"])
def test_read_ahead_hint_never_changes_results(monkeypatch, advice):
    """The segment mmap's read-ahead hint is advisory: without one, or with one the kernel rejects
    (EINVAL), every segment gives the same table and summary."""
    from store_reader.formats import commitlog

    version, scenario = support.VERSIONS[1], "torn-middle-crc"
    store = open_store(support.input_store(version, scenario), support.broker_conf(version, scenario))
    paths = [f.path for f in store.commitlog_files]
    want = [scan_segment(p, _opts(version), include_lost=True) for p in paths]
    monkeypatch.setattr(commitlog, "_SCAN_MADVICE", advice)
    for p, (table, summary) in zip(paths, want):
        got_table, got_summary = scan_segment(p, _opts(version), include_lost=True)
        assert got_table.equals(table) and got_summary == summary
        assert got_table.column("valid_prefix").null_count == 0
