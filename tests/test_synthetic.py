"""The synthetic store writer against the real broker's bytes and against the store readers.

(a) Format proof: every valid record of every fixture segment, decoded by the scanner and re-encoded
    by ``encode_message``, gives back exactly the bytes the real 4.9.7 / 5.3.3 broker wrote.
(b) The spec's worked examples (F§3.13, F§3.10) byte for byte.
(c) Small generated stores (fixture-sized files) decode back to what ``write_store`` reports: records,
    consume queues, index answers, where recovery ends after each crash variant; same seed, same bytes.
"""
from __future__ import annotations

import collections
import json
import os
import re
import struct

import pytest

import support
from store_reader.formats import commitlog, consumequeue, indexfile
from store_reader import open_store
from store_reader.formats import recordformat as rf
from store_reader.formats.brokerconf import load_broker_config
from store_reader.formats.checkpoint import abort_exists, read_checkpoint
from store_reader.testing.synthetic import (CRASH_PRESETS, KINDS, CrashSpec, SyntheticStoreSpec, encode_blank,
                                            encode_message, encode_properties, hashmap_order, main, write_store)

pytestmark = pytest.mark.reader


def _five(version: str) -> bool:
    return version.endswith("5.3.3")


def _reencode(row: dict, trailing_separator: bool) -> bytes:
    """``encode_message`` fed with one decoded ``schemas.MESSAGE`` row (properties in stored order)."""
    return encode_message(
        topic=row["topic"], body=row["body"], properties=row["properties"], queue_id=row["queue_id"],
        flag=row["flag"], queue_offset=row["queue_offset"], phy_offset=row["stored_phy_offset"],
        sys_flag=row["sys_flag"], born_timestamp=row["born_timestamp"], born_host=row["born_host"],
        store_timestamp=row["store_timestamp"], store_host=row["store_host"],
        reconsume_times=row["reconsume_times"],
        prepared_transaction_offset=row["prepared_transaction_offset"], version=row["version"],
        trailing_separator=trailing_separator)


def _segments(root) -> list[str]:
    d = os.path.join(root, "commitlog")
    return sorted(os.listdir(d)) if os.path.isdir(d) else []


def _assert_reencodes(root, opts: rf.ScanOptions, trailing_separator: bool) -> int:
    """Re-encode every valid record of every segment (also those behind a corrupt one)."""
    count = 0
    for name in _segments(root):
        path = os.path.join(root, "commitlog", name)
        table, _ = commitlog.scan_segment(path, opts, columns=commitlog.SCANNED_COLUMNS,
                                          include_lost=True)
        with open(path, "rb") as fh:
            data = fh.read()
        for row in table.to_pylist():
            pos = row["phy_offset"] - int(name)
            assert _reencode(row, trailing_separator) == data[pos:pos + row["total_size"]], \
                f"{name} @ {pos}"
            count += 1
    return count


# -- (a) format proof on the real fixtures --------------------------------------------------------

@pytest.mark.parametrize("case", support.scenarios(), ids=support.case_id)
def test_every_fixture_record_reencodes_byte_for_byte(case):
    version, scenario = case
    root = support.input_store(version, scenario)
    count = _assert_reencodes(root, rf.ScanOptions(broker_5x=_five(version)), _five(version))
    assert count > 0 or not any(os.path.getsize(os.path.join(root, "commitlog", n))
                                for n in _segments(root))


@pytest.mark.parametrize("version", support.VERSIONS)
def test_fixture_property_order_is_java_hashmap_order(version):
    root = support.input_store(version, "clean")
    table, _ = commitlog.scan_segment(os.path.join(root, "commitlog", _segments(root)[0]),
                                      rf.ScanOptions(broker_5x=_five(version)))
    for props in table.column("properties").to_pylist():
        stored = [k for k, _ in props]
        # UNIQ_KEY and CLUSTER share a bucket: the client sets UNIQ_KEY before the broker adds CLUSTER
        assert hashmap_order(sorted(stored, key=lambda k: k != "UNIQ_KEY")) == stored


# -- (b) the spec's worked examples -------------------------------------------------------------------

EXAMPLE_5X = bytes.fromhex("""
00 00 00 a8 da a3 20 a7 77 d1 89 82 00 00 00 01  00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00
00 00 00 00 00 00 00 00 00 00 01 8b cf e5 68 00  c0 a8 00 0a 00 00 d4 31 00 00 01 8b cf e5 68 7b
c0 a8 00 01 00 00 2a 9f 00 00 00 00 00 00 00 00  00 00 00 00 00 00 00 05 48 65 6c 6c 6f 09 54 6f
70 69 63 54 65 73 74 00 3f 54 41 47 53 01 54 61  67 41 02 4b 45 59 53 01 6b 31 20 6b 32 02 55 4e
49 51 5f 4b 45 59 01 37 46 30 30 30 30 30 31 30  42 38 43 31 38 42 34 41 41 43 32 31 32 33 34 35
36 37 38 30 30 30 30 02""".replace("\n", " "))
EXAMPLE_CRC_TAIL = bytes.fromhex("5f 5f 43 52 43 33 32 23 01 36 31 35 35 35 32 30 35 30 30 02")
EXAMPLE_FIELDS = dict(
    topic="TopicTest", body=b"Hello", queue_id=1, born_timestamp=1700000000000,
    born_host="192.168.0.10:54321", store_timestamp=1700000000123, store_host="192.168.0.1:10911",
    properties=[("TAGS", "TagA"), ("KEYS", "k1 k2"), ("UNIQ_KEY", "7F0000010B8C18B4AAC2123456780000")])


def test_worked_example_5x_bytes():
    assert len(EXAMPLE_5X) == 168
    assert encode_message(**EXAMPLE_FIELDS) == EXAMPLE_5X


def test_worked_example_4_9_7_drops_the_trailing_separator():
    want = bytearray(EXAMPLE_5X[:-1])
    want[0:4] = struct.pack(">i", 167)
    want[0x67:0x69] = struct.pack(">h", 62)
    assert encode_message(**EXAMPLE_FIELDS, trailing_separator=False) == bytes(want)


def test_worked_example_with_record_crc_property():
    got = encode_message(**EXAMPLE_FIELDS, append_crc32=True)
    want = bytearray(EXAMPLE_5X + EXAMPLE_CRC_TAIL)
    want[0:4] = bytes.fromhex("00 00 00 bc")
    want[0x67:0x69] = bytes.fromhex("00 53")
    assert got == bytes(want)
    # a stale __CRC32# pair is dropped before the new one is appended (F§3.8)
    stale = dict(EXAMPLE_FIELDS, properties=EXAMPLE_FIELDS["properties"] + [("__CRC32#", "1")])
    assert encode_message(**stale, append_crc32=True) == got


def test_blank_marker_example():
    assert encode_blank(1_073_741_824 - 1_073_741_800) == bytes.fromhex("00 00 00 18 cb d4 31 94")
    with pytest.raises(ValueError):
        encode_blank(7)


def test_properties_styles():
    pairs = [("A", "1"), ("B", None), ("C", "x\x01y")]
    assert encode_properties(pairs) == "A\x011\x02C\x01x\x01y\x02"
    assert encode_properties(pairs, trailing_separator=False) == "A\x011\x02C\x01x\x01y"
    assert encode_properties(None) == encode_properties({}, trailing_separator=False) == ""


@pytest.mark.parametrize("born,store,body_pos", [
    ("10.0.0.2:1", "10.0.0.1:10911", 88), ("[fd00:0:0:0:0:0:0:2]:1", "10.0.0.1:10911", 100),
    ("10.0.0.2:1", "[fd00:0:0:0:0:0:0:1]:10911", 100),
    ("[fd00:0:0:0:0:0:0:2]:1", "[fd00:0:0:0:0:0:0:1]:10911", 112)])
def test_host_widths_move_the_body(born, store, body_pos, tmp_path):
    rec = encode_message(topic="T", body=b"xyz", born_host=born, store_host=store, properties={"K": "v"})
    assert rec[body_pos:body_pos + 3] == b"xyz"
    assert struct.unpack_from(">i", rec, body_pos - 4)[0] == 3
    row = _decode_one(rec, tmp_path, broker_5x=True)
    assert (row["born_host"], row["store_host"]) == (born, store)
    assert row["sys_flag"] == (0x10 if born.startswith("[") else 0) | (0x20 if store.startswith("[") else 0)


def _decode_one(record: bytes, tmp_path, broker_5x: bool) -> dict:
    path = tmp_path / "00000000000000000000"
    path.write_bytes(record + bytes(64))
    table, _ = commitlog.scan_segment(path, rf.ScanOptions(broker_5x=broker_5x),
                                      columns=commitlog.SCANNED_COLUMNS)
    assert table.num_rows == 1
    return table.to_pylist()[0]


def test_v2_magic_and_negative_v1_topic_length(tmp_path):
    topic = "%RETRY%" + "g" * 200
    row = _decode_one(encode_message(topic=topic, body=b"b", version=2), tmp_path, broker_5x=True)
    assert (row["version"], row["topic"]) == (2, topic)
    # V1 writes (byte) length: 207 reads back negative, every reader rejects the record (F§3.3)
    path = tmp_path / "00000000000000000000"
    path.write_bytes(encode_message(topic=topic, body=b"b") + bytes(64))
    assert commitlog.summarize_segment(path, rf.ScanOptions()).end_check == "topic_length"


def test_encoder_rejects_inconsistent_input():
    with pytest.raises(ValueError, match="IPv6"):
        encode_message(topic="T", sys_flag=rf.BORNHOST_V6_FLAG)
    with pytest.raises(ValueError, match="PROPERTIESLEN"):
        encode_message(topic="T", properties={"K": "v" * 40000})
    with pytest.raises(ValueError):
        encode_message(topic="T" * 256)


# -- (c) generated stores ---------------------------------------------------------------------------

SMALL = dict(total_bytes=330_000, segment_size=65536, cq_file_size=600, max_hash_slot_num=100,
             max_index_num=400, messages_per_second=50, delayed_fraction=0.05, retry_fraction=0.05,
             transaction_fraction=0.05, legacy_transaction_fraction=0.04, ipv6_fraction=0.06,
             compressed_fraction=0.04)
VARIANTS = {
    "clean-4.9": (dict(broker="4.9"), None),
    "clean-5.x": (dict(broker="5.x", append_prop_crc=True, long_retry_group=True), None),
    "torn-tail": (dict(broker="4.9", seed=1), CrashSpec(torn_tail=True)),
    "corrupt-crc": (dict(broker="5.x", seed=2), CrashSpec(corrupt="crc", abort=False)),
    "corrupt-magic": (dict(broker="4.9", seed=3), CrashSpec(corrupt="magic", stale_checkpoint=False)),
    "cq-ahead": (dict(broker="5.x", seed=4), CrashSpec(cq_ahead=15)),
    "cq-behind": (dict(broker="4.9", seed=5), CrashSpec(cq_behind=15, torn_tail=True)),
}


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    base = tmp_path_factory.mktemp("synthetic")
    out = {}
    for name, (extra, crash) in VARIANTS.items():
        spec = SyntheticStoreSpec(**{**SMALL, **extra})
        out[name] = write_store(base / name, spec, crash)
    return out


@pytest.fixture(params=sorted(VARIANTS))
def store(request, stores):
    return stores[request.param]


def _opts(info) -> rf.ScanOptions:
    return rf.ScanOptions(broker_5x=info.spec.rocketmq5)


COMPARED = ("phy_offset", "total_size", "topic", "queue_id", "queue_offset", "sys_flag",
            "store_timestamp", "tags_code", "keys", "uniq_key")


def test_commitlog_decodes_to_the_reported_records(store):
    opts = _opts(store)
    decoded = []
    for name in _segments(store.root):      # the broker's scan stops at the first bad record (R§4.3)
        table, summary = commitlog.scan_segment(store.root / "commitlog" / name, opts,
                                                columns=list(COMPARED))
        decoded += table.to_pylist()
        if summary.end_reason != "eof_marker":
            break
    survived = [r for r in store.messages.to_pylist() if r["survived"]]
    assert [{k: r[k] for k in COMPARED} for r in decoded] == [{k: r[k] for k in COMPARED} for r in survived]
    assert store.counts["survived"] == len(survived) and store.counts["records"] == store.messages.num_rows
    # and the generator agrees with encode_message on every record, including the V2/__CRC32# ones
    assert _assert_reencodes(store.root, opts, store.spec.rocketmq5) >= len(survived)


def test_recovery_ends_where_info_says(store):
    """Walk the segment summaries as the broker's scan does (R§4.2) from the first file."""
    opts = _opts(store)
    summaries = [commitlog.summarize_segment(store.root / "commitlog" / n, opts)
                 for n in _segments(store.root)]
    end = None
    for s in summaries:
        if s.end_reason != "eof_marker":
            end = s
            break
    assert end is not None and end.end_phy_offset == store.truncation_offset
    damage = collections.Counter(d for d in store.messages.column("damage").to_pylist() if d)
    crash = store.crash or CrashSpec()
    if crash.corrupt:
        assert end.end_reason == "corrupt" and end.records_after_cut > 0
        assert damage == {f"corrupt_{crash.corrupt}": 1}
    elif crash.torn_tail:
        assert end.end_reason == "torn_tail" and damage["torn"] == 1
    else:
        assert end.end_reason == "zero_padding"
        assert damage.get("lost", 0) == crash.cq_ahead
    # every full segment ends with a blank marker that counts the bytes left in the file (F§3.10)
    for s in summaries[:summaries.index(end)]:
        assert s.blank_declared_size == s.file_size - s.valid_bytes and not s.nonzero_after_marker
    # intact records behind the end (lost by the broker) are exactly the undamaged non-survivors
    later = summaries[summaries.index(end) + 1:]
    intact_lost = [r for r in store.messages.to_pylist() if not r["survived"] and r["damage"] is None]
    assert end.records_after_cut + sum(s.records for s in later) == len(intact_lost)
    assert store.messages.column("survived").to_pylist() == [
        p < store.truncation_offset for p in store.messages.column("phy_offset").to_pylist()]


def test_consume_queues_hold_the_dispatched_records(store):
    want = collections.defaultdict(list)
    for r in store.messages.to_pylist():
        if r["dispatched"]:
            assert r["kind"] not in ("prepared", "rollback")
            want[(r["topic"], r["queue_id"])].append((r["queue_offset"], r["phy_offset"],
                                                      r["total_size"], r["tags_code"]))
    got = {}
    for q in consumequeue.list_queues(store.root):
        files = consumequeue.list_queue_files(q.path, store.spec.cq_file_size)
        t = consumequeue.read_queue(q.path, q.topic, q.queue_id, store.spec.cq_file_size, files=files)
        n = consumequeue.valid_prefix_length(t.column("phy_offset").to_numpy(), t.column("size").to_numpy())
        rows = t.slice(0, n).to_pylist()
        got[(q.topic, q.queue_id)] = [(e["queue_offset"], e["phy_offset"], e["size"], e["tags_code"])
                                      for e in rows]
    assert got == dict(want)
    assert store.consume_queue_max == {k: len(v) for k, v in want.items()}
    crash = store.crash or CrashSpec()
    cq_max_phy = max(v[-1][1] for v in want.values())
    if crash.cq_ahead or crash.corrupt:
        assert cq_max_phy >= store.truncation_offset      # CQ entries past the recovered end
    else:
        assert cq_max_phy < store.truncation_offset


@pytest.mark.parametrize("crash", [CrashSpec(torn_tail=True), CrashSpec(corrupt="crc"),
                                   CrashSpec(corrupt="magic"), CrashSpec(cq_ahead=3)],
                         ids=["torn", "crc", "magic", "ahead"])
def test_every_damage_is_where_recovery_stops(crash, tmp_path):
    """Many seeds (so torn cuts land on short, long, compressed, IPv6 records alike)."""
    for seed in range(12):
        for broker in ("4.9", "5.x"):
            spec = SyntheticStoreSpec(**{**SMALL, "total_bytes": 140_000, "seed": seed, "broker": broker,
                                         "ipv6_fraction": 0.3, "compressed_fraction": 0.2})
            info = write_store(tmp_path / f"{seed}-{broker}", spec, crash)
            opts = _opts(info)
            for name in _segments(info.root):
                s = commitlog.summarize_segment(info.root / "commitlog" / name, opts)
                if s.end_reason != "eof_marker":
                    break
            assert s.end_phy_offset == info.truncation_offset, (seed, broker)
            if crash.torn_tail:
                assert s.end_reason == "torn_tail" and s.end_check in ("body_crc", "length_mismatch",
                                                                       "total_size", "out_of_bounds")


def test_schedule_entries_carry_the_deliver_time(store):
    delay_ms = load_broker_config(store.root / "broker.conf").delay_levels_ms
    for r in store.messages.to_pylist():
        if r["topic"] == "SCHEDULE_TOPIC_XXXX":
            assert r["tags_code"] == r["store_timestamp"] + delay_ms[r["queue_id"]]


def test_index_answers_every_key(store):
    spec = store.spec
    files = [indexfile.IndexFile(store.root / "index" / n, spec.max_hash_slot_num, spec.max_index_num)
             for n in store.index_files]
    assert sorted(os.listdir(store.root / "index")) == store.index_files
    want = collections.defaultdict(set)
    rows = store.messages.to_pylist()
    puts = 0
    dispatch_end = _dispatch_end(store)
    for r in rows:
        # every record but op records has keys; ROLLBACK is never indexed, PREPARED is (F§7.4)
        assert r["indexed"] == (r["kind"] not in ("rollback", "op") and r["phy_offset"] < dispatch_end)
        if r["indexed"]:
            tokens = [k for k in (r["keys"] or "").split(" ") if k]
            for key in ([r["uniq_key"]] if r["uniq_key"] else []) + tokens:
                want[(r["topic"], key)].add(r["phy_offset"])
                puts += 1
    assert puts == store.counts["index_puts"] == sum(f.header.entries_in_use for f in files)
    by_phy = {r["phy_offset"]: r for r in rows}
    for (topic, key), phys in want.items():
        hits = indexfile.query(files, topic, key, hash_slot_num=spec.max_hash_slot_num,
                               index_num=spec.max_index_num)
        real = {p for p in hits if by_phy[p]["topic"] == topic and
                (by_phy[p]["uniq_key"] == key or key in (by_phy[p]["keys"] or "").split(" "))}
        assert real == phys, (topic, key)
    # every file but the last is full
    assert all(f.header.index_count == spec.max_index_num for f in files[:-1])
    for f in files:
        f.close()


def _dispatch_end(info) -> int:
    """Phy offset of the first record that was never dispatched."""
    crash = info.crash or CrashSpec()
    phy = info.messages.column("phy_offset").to_pylist()
    cut = len(phy) - max(crash.cq_behind, 1 if crash.torn_tail else 0)
    return phy[cut] if cut < len(phy) else info.written_end


def test_store_files_and_metadata(store):
    spec, crash = store.spec, store.crash
    s = open_store(store.root)
    assert s.loadable and s.config.mappedFileSizeCommitLog == spec.segment_size
    assert (s.config.cq_file_size, s.config.maxHashSlotNum, s.config.maxIndexNum) == (
        spec.cq_file_size, spec.max_hash_slot_num, spec.max_index_num)
    assert [f.name for f in s.commitlog_files] == store.commitlog_files
    assert all(f.size == spec.segment_size for f in s.commitlog_files)
    assert (store.root / "lock").read_bytes() == b"lock"
    assert abort_exists(store.root) == bool(crash and crash.abort)
    assert (store.root / "abort.bak").exists() == spec.rocketmq5
    if crash and crash.preallocated_next:
        assert not any((store.root / "commitlog" / store.commitlog_files[-1]).read_bytes())
    cp = read_checkpoint(store.root)
    assert (cp.physic_msg_timestamp, cp.logics_msg_timestamp, cp.index_msg_timestamp) == (
        store.checkpoint.physic_msg_timestamp, store.checkpoint.logics_msg_timestamp,
        store.checkpoint.index_msg_timestamp)
    ts = store.messages.column("store_timestamp").to_pylist()
    if crash and crash.stale_checkpoint:
        assert 0 < cp.physic_msg_timestamp < ts[-1] and cp.logics_msg_timestamp < ts[-1]
    elif crash is None:
        assert cp.physic_msg_timestamp == cp.logics_msg_timestamp == ts[-1]
    # indexMsgTimestamp: end of the last index file that filled up (R§8)
    headers = [indexfile.read_header(store.root / "index" / f) for f in store.index_files]
    assert cp.index_msg_timestamp == headers[-2].end_timestamp <= cp.logics_msg_timestamp
    _check_config(store)


def _fastjson_load(path) -> dict:
    """fastjson writes integer map keys unquoted (F§10)."""
    text = path.read_text(encoding="utf-8")
    return json.loads(re.sub(r"([{,])(-?\d+):", r'\1"\2":', text))


def _check_config(store) -> None:
    config = store.root / "config"
    assert re.search(r"\{0:\d+", (config / "consumerOffset.json").read_text())
    offsets = _fastjson_load(config / "consumerOffset.json")["offsetTable"]
    for (topic, qid), n in store.consume_queue_max.items():
        if f"{topic}@GroupAhead" in offsets:
            assert offsets[f"{topic}@GroupAhead"][str(qid)] == n + 5
    topics = _fastjson_load(config / "topics.json")["topicConfigTable"]
    for q in consumequeue.list_queues(store.root):
        assert q.queue_id < topics[q.topic]["readQueueNums"]
    delay = _fastjson_load(config / "delayOffset.json")["offsetTable"]
    for level, offset in delay.items():
        assert 0 <= offset <= store.consume_queue_max[("SCHEDULE_TOPIC_XXXX", int(level) - 1)]
    assert ("dataVersion" in _fastjson_load(config / "delayOffset.json")) == store.spec.rocketmq5


def test_generated_store_has_the_message_plan_variety(stores):
    m = stores["clean-5.x"].messages
    kinds = collections.Counter(m.column("kind").to_pylist())
    assert set(kinds) == set(KINDS)
    flags = m.column("sys_flag").to_pylist()
    assert any(f & rf.COMPRESSED_FLAG for f in flags)
    assert {f & 0x30 for f in flags} == {0, 0x10, 0x30}
    keys = m.column("keys").to_pylist()
    assert any(k and "  " in k for k in keys) and any(k and " shared" in k for k in keys)
    assert None in m.column("uniq_key").to_pylist()
    assert 0 in m.column("tags_code").to_pylist()
    topics = set(m.column("topic").to_pylist())
    assert {"SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC",
            "%RETRY%GroupX", stores["clean-5.x"].spec.long_retry_topic} <= topics
    sizes = m.column("total_size").to_numpy()
    assert 700 < sizes.mean() < 1300


def test_commit_records_point_at_their_half(stores):
    info = stores["clean-4.9"]
    s = open_store(info.root)
    rows = [r for b in s.scan_commitlog(columns=["phy_offset", "topic", "sys_flag", "uniq_key",
                                                 "prepared_transaction_offset"]) for r in b.to_pylist()]
    by_phy = {r["phy_offset"]: r for r in rows}
    commits = [r for r in rows if r["sys_flag"] & rf.TRANSACTION_MASK == rf.TRANSACTION_COMMIT_TYPE]
    assert commits
    for c in commits:
        half = by_phy[c["prepared_transaction_offset"]]
        assert half["topic"] == "RMQ_SYS_TRANS_HALF_TOPIC" and half["uniq_key"] == c["uniq_key"]


def test_same_seed_same_bytes(tmp_path, stores):
    info = stores["cq-behind"]
    extra, crash = VARIANTS["cq-behind"]
    again = write_store(tmp_path / "again", SyntheticStoreSpec(**{**SMALL, **extra}), crash)
    assert support.tree_digest(again.root) == support.tree_digest(info.root)
    assert again.messages.equals(info.messages)
    other = write_store(tmp_path / "other", SyntheticStoreSpec(**{**SMALL, **extra, "seed": 99}), crash)
    assert support.tree_digest(other.root) != support.tree_digest(info.root)


def test_spec_validation(tmp_path):
    with pytest.raises(ValueError):
        SyntheticStoreSpec(broker="6.0")
    with pytest.raises(ValueError):
        SyntheticStoreSpec(segment_size=4096)
    with pytest.raises(ValueError):
        SyntheticStoreSpec(broker="4.9", append_prop_crc=True)
    with pytest.raises(ValueError):
        CrashSpec(torn_tail=True, cq_ahead=3)
    with pytest.raises(ValueError):
        CrashSpec.preset("meteor")
    assert CrashSpec.preset("torn-tail,cq-behind") == CrashSpec(torn_tail=True, cq_behind=20)
    assert set(CRASH_PRESETS) >= {"torn-tail", "corrupt-middle", "cq-behind", "cq-ahead"}
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "f").write_text("")
    with pytest.raises(FileExistsError):
        write_store(tmp_path / "x", SyntheticStoreSpec(**SMALL))


def test_cli_writes_a_store_and_prints_it(tmp_path, capsys):
    assert main([str(tmp_path / "s"), "--size", "200KiB", "--segment-size", "64KiB",
                 "--cq-file-size", "600", "--max-hash-slot-num", "100", "--max-index-num", "400",
                 "--crash", "torn-tail", "--broker", "4.9", "--seed", "7", "--queues", "6"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["records"] == out["survived"] + 1 and out["truncation_offset"] < out["written_end"]
    assert out["crash"]["torn_tail"] and out["broker"] == "4.9"
    assert open_store(tmp_path / "s").abort_exists
