"""Checkpoint, abort, lock (spec store-format §8, §9) and config JSON files (§10, E#36)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

import support
from schemas import CHECKPOINT
from store_reader.formats import checkpoint as ck
from store_reader.formats import config as cf
from store_reader.formats import fastjson as fj
from store_reader.exceptions import ConfigError

pytestmark = pytest.mark.reader

CASES = support.scenarios()
LOADED = [c for c in CASES if support.expected(*c)["afterLoad"]["loadResult"]]

# store-format §8: 5 big-endian i64, then zeros up to 4096
CHECKPOINT_BYTES = bytes.fromhex(
    "0000018bcfe5687b"   # physicMsgTimestamp  1700000000123
    "0000018bcfe56c63"   # logicsMsgTimestamp  1700000001123
    "0000018bcfe56800"   # indexMsgTimestamp   1700000000000
    "0000000000000000"   # masterFlushedOffset 0
    "00000000000000a8"   # confirmPhyOffset    168
) + bytes(4096 - 40)


# -- checkpoint ---------------------------------------------------------------------------------

def test_checkpoint_bytes(tmp_path):
    p = tmp_path / "checkpoint"
    p.write_bytes(CHECKPOINT_BYTES)
    c = ck.read_checkpoint(tmp_path)               # a store root works too
    assert c.values() == (1700000000123, 1700000001123, 1700000000000, 0, 168)
    assert (c.exists, c.file_length, c.used_bytes) == (True, 4096, 40)
    assert c.min_timestamp == 1700000000123 - 3000
    assert c.min_timestamp_index == 1699999997123                # min(minTimestamp, index)
    assert c.pack() == CHECKPOINT_BYTES
    ck.write_checkpoint(tmp_path / "out", c, rocketmq5=False)
    out = (tmp_path / "out").read_bytes()
    assert len(out) == 4096 and out[:24] == CHECKPOINT_BYTES[:24] and out[24:] == bytes(4072)
    assert ck.read_checkpoint(tmp_path / "out").used_bytes == 24


def test_checkpoint_missing_short_and_derived_values(tmp_path):
    c = ck.read_checkpoint(tmp_path / "checkpoint")
    assert (c.exists, c.values(), c.min_timestamp, c.min_timestamp_index) == (False, (0,) * 5, 0, 0)
    (tmp_path / "short").write_bytes(CHECKPOINT_BYTES[:12])   # mapped 4096 bytes: the rest reads as zero
    c = ck.read_checkpoint(tmp_path / "short")
    assert c.values() == (1700000000123, 0x0000018B_00000000, 0, 0, 0) and c.file_length == 12
    assert ck.Checkpoint(5000, 2000, 9999).min_timestamp == 0                # max(0, 2000 - 3000)
    assert ck.Checkpoint(5000, 9000, 100).min_timestamp_index == 100
    assert ck.Checkpoint(5000, 9000, 0).min_timestamp_index == 0             # no full index file yet
    lo = -(1 << 63)                                   # Java long math: MIN_VALUE - 3000 wraps around
    assert ck.Checkpoint(lo, 0, 0).min_timestamp == (1 << 63) - 3000
    t = ck.Checkpoint(1, 2, 3).to_table()
    assert t.schema == CHECKPOINT.arrow()
    assert t.to_pylist() == [{"physic_msg_timestamp": 1, "logics_msg_timestamp": 2, "index_msg_timestamp": 3,
                              "master_flushed_offset": None, "confirm_phy_offset": None}]
    assert ck.Checkpoint(1, 2, 3).to_table(rocketmq5=True)["confirm_phy_offset"].to_pylist() == [0]


@pytest.mark.parametrize("case", CASES, ids=support.case_id)
def test_fixture_checkpoint_and_abort(case):
    exp = support.expected(*case)
    c = ck.read_checkpoint(support.input_store(*case))
    e = exp["input"]["checkpoint"]
    assert c.exists == e["exists"]
    if c.exists:
        assert (c.file_length, c.physic_msg_timestamp, c.logics_msg_timestamp, c.index_msg_timestamp) == \
            (e["fileLength"], e["physicMsgTimestamp"], e["logicsMsgTimestamp"], e["indexMsgTimestamp"])
        assert (c.master_flushed_offset, c.confirm_phy_offset) == \
            (e.get("masterFlushedOffset", 0), e.get("confirmPhyOffset", 0))
    if "checkpoint" in exp["afterLoad"]:          # the broker's in-memory values right after load
        al = exp["afterLoad"]["checkpoint"]
        assert (c.min_timestamp, c.min_timestamp_index) == (al["minTimestamp"], al["minTimestampIndex"])
    assert ck.abort_exists(support.input_store(*case)) == exp["input"]["abortFileExists"]
    if case in LOADED:
        root = support.expected_store(*case)
        c = ck.read_checkpoint(root)
        e = exp["afterShutdown"]["checkpointFile"]
        assert c.values() == (e["physicMsgTimestamp"], e["logicsMsgTimestamp"], e["indexMsgTimestamp"],
                              e.get("masterFlushedOffset", 0), e.get("confirmPhyOffset", 0))
        assert c.file_length == e["fileLength"] == 4096
        if e.get("confirmPhyOffset"):
            assert c.used_bytes == 40
        # 5.3.3 leaves abort.bak behind; only `abort` is a marker
        assert ck.abort_exists(root) == exp["afterShutdown"]["abortFileExists"]


def test_abort_bak_is_not_a_marker(tmp_path):
    (tmp_path / "abort.bak").write_bytes(b"12345")
    assert not ck.abort_exists(tmp_path)
    (tmp_path / "abort").write_bytes(b"")
    assert ck.abort_exists(tmp_path)


# -- lock ---------------------------------------------------------------------------------------

_HOLDER = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)   # what FileChannel.tryLock(0, 1, false) takes
print("locked", flush=True)
sys.stdin.read()
"""


def test_lock_status(tmp_path):
    assert ck.lock_status(tmp_path) == ck.LockStatus(str(tmp_path / "lock"), False, False, None)
    lock = tmp_path / "lock"
    lock.write_bytes(b"lock")
    lock.chmod(0o444)                                   # read-only is enough for the test
    assert not ck.lock_status(tmp_path).locked
    lock.chmod(0o644)
    before = (lock.read_bytes(), os.stat(lock).st_mtime_ns)
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER, str(lock)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        status = ck.lock_status(tmp_path)
        assert status.locked and status.exists and status.pid == holder.pid
    finally:
        holder.stdin.close()
        holder.wait(timeout=10)
    assert not ck.lock_status(tmp_path).locked
    assert (lock.read_bytes(), os.stat(lock).st_mtime_ns) == before    # never written


# -- fastjson parser ----------------------------------------------------------------------------

def test_fastjson_oddities():
    # as the broker writes consumerOffset.json: tabs, unquoted integer map keys
    text = ('{\n\t"offsetTable":{\n\t\t"TopicA@GroupX":{0:34,1:55,2:38\n\t\t},'
            '\n\t\t"%RETRY%G@G":{0:41\n\t\t}\n\t}\n}')
    assert fj.parse_fastjson(text) == {"offsetTable": {"TopicA@GroupX": {0: 34, 1: 55, 2: 38},
                                                       "%RETRY%G@G": {0: 41}}}
    assert fj.parse_fastjson('{"0":1,-3:2}') == {"0": 1, -3: 2}            # quoted keys stay strings
    assert fj.parse_fastjson("{a:'x\\'y\"z',,\"b\":[1,,2,],}") == {"a": "x'y\"z", "b": [1, 2]}
    assert fj.parse_fastjson('{"s":"\\u503c\\t\\n","t":"\u503c","f":1.5,"n":null,"b":true}') == \
        {"s": "\u503c\t\n", "t": "\u503c", "f": 1.5, "n": None, "b": True}
    assert fj.parse_fastjson("\r\n\t ") is None and fj.parse_fastjson("null") is None
    assert fj.parse_fastjson('{"a":1,"a":2}') == {"a": 2}                # later duplicate wins


@pytest.mark.parametrize("text, pos", [
    ('{"a":1', 6),                   # truncated: end of text, byte 6
    ('{"a":1}}', 7),                 # trailing garbage
    ('{"\u503c":1 2}', 9),           # byte position counts UTF-8 bytes (the key is 3 bytes)
    ('{"a":"unterminated', 5),
    ("{\"a\":@}", 5),
    ('{"a" 1}', 5),
    ("[1 2]", 3),
])
def test_fastjson_errors_name_byte_position(text, pos):
    with pytest.raises(ConfigError) as err:
        fj.parse_fastjson(text, path="/s/config/x.json")
    assert err.value.position == pos and err.value.path == "/s/config/x.json"


def _fastjson_dump(v, indent=0):
    """Serialise like fastjson's pretty printer: tabs, integer map keys unquoted."""
    tab = "\t" * (indent + 1)
    if isinstance(v, dict):
        items = [f"{tab}{k if isinstance(k, int) else json.dumps(k)}:{_fastjson_dump(x, indent + 1)}"
                 for k, x in v.items()]
        return "{\n" + ",\n".join(items) + "\n" + "\t" * indent + "}"
    if isinstance(v, list):
        return "[" + ",".join(_fastjson_dump(x, indent) for x in v) + "]"
    return json.dumps(v, ensure_ascii=False)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(1 << 63), (1 << 63) - 1) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.integers(-100, 100) | st.text(max_size=6), inner, max_size=4),
    max_leaves=20)


@given(st.dictionaries(st.integers(0, 1 << 31) | st.text(max_size=6), json_values, max_size=5))
def test_fastjson_round_trip(doc):
    assert fj.parse_fastjson(_fastjson_dump(doc)) == doc


# -- fallback order (ConfigManager#load, E#36) ----------------------------------------------------

GOOD = '{"offsetTable":{"T@G":{0:5,1:6}}}'
OLDER = '{"offsetTable":{"T@G":{0:4}}}'


def _offsets(load):
    return [(r["topic"], r["group"], r["queue_id"], r["offset"]) for r in load.value.to_pylist()]


@pytest.mark.parametrize("main, bak, generation, rows", [
    (GOOD, OLDER, "current", [("T", "G", 0, 5), ("T", "G", 1, 6)]),
    (None, OLDER, "bak", [("T", "G", 0, 4)]),                 # missing -> .bak
    ("", OLDER, "bak", [("T", "G", 0, 4)]),                   # empty (5.x crash mid in-place write)
    (GOOD[:20], OLDER, "bak", [("T", "G", 0, 4)]),            # truncated -> .bak
    ('{"offsetTable":[1]}', OLDER, "bak", [("T", "G", 0, 4)]),  # shape fastjson rejects -> .bak
    (None, None, "empty", []),
    ("", "", "empty", []),                                    # empty .bak -> empty table, success
    (" \n", OLDER, "current", []),                            # blank: fastjson returns null, kept
])
def test_fallback_order(tmp_path, main, bak, generation, rows):
    f = tmp_path / "consumerOffset.json"
    if main is not None:
        f.write_text(main)
    if bak is not None:
        (tmp_path / "consumerOffset.json.bak").write_text(bak)
    load = cf.read_consumer_offsets(f)
    assert (load.generation, _offsets(load)) == (generation, rows)
    assert load.used_path == {"current": str(f), "bak": str(f) + ".bak", "empty": None}[generation]
    assert (load.skipped_reason is None) == (generation == "current")
    assert load.tmp_path is None


def test_undecodable_bak_fails_and_tmp_is_reported(tmp_path):
    f = tmp_path / "consumerOffset.json"
    (tmp_path / "consumerOffset.json.tmp").write_text(GOOD)     # 4.9.7 crash between tmp and rename
    (tmp_path / "consumerOffset.json.bak").write_text(OLDER)
    load = cf.read_consumer_offsets(f)
    assert load.generation == "bak" and load.skipped_reason == "missing"
    assert load.tmp_path == str(f) + ".tmp"                      # reported, never read
    (tmp_path / "consumerOffset.json.bak").write_text('{"offsetTable":{')
    with pytest.raises(ConfigError) as err:
        cf.read_consumer_offsets(f)
    assert err.value.path.endswith("consumerOffset.json.bak") and err.value.position == 16


def test_typed_readers(tmp_path):
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "lmqConsumerOffset.json").write_text(
        '{"offsetTable":{"T@G":{0:3},"NoAt":{2:1}},"lmqOffsetTable":{"%LMQ%a@%LMQ%g":9}}')
    load = cf.read_lmq_consumer_offsets(tmp_path)
    assert [(r["topic"], r["group"], r["queue_id"], r["offset"], r["lmq"]) for r in load.value.to_pylist()] \
        == [("%LMQ%a", "%LMQ%g", 0, 9, True), ("NoAt", None, 2, 1, False), ("T", "G", 0, 3, False)]
    assert load.value.schema == cf.CONSUMER_OFFSET_SCHEMA
    (tmp_path / "config" / "delayOffset.json").write_text('{"offsetTable":{1:3,18:"7"},"dataVersion":{}}')
    assert cf.read_delay_offsets(tmp_path).value == {1: 3, 18: 7}
    (tmp_path / "config" / "delayOffset.json").write_text('{"offsetTable":{1:true}}')
    assert cf.read_delay_offsets(tmp_path).generation == "empty"   # undecodable, no .bak
    (tmp_path / "config" / "subscriptionGroup.json").write_text(
        '{"subscriptionGroupTable":{"G":{"groupName":"G","retryQueueNums":1}},"forbiddenTable":{}}')
    assert cf.read_subscription_groups(tmp_path).value == {"G": {"groupName": "G", "retryQueueNums": 1}}


@pytest.mark.parametrize("case", LOADED, ids=support.case_id)
def test_fixture_config_files(case):
    """consumerOffset.json of both stores parses to the committed offsets the broker checked."""
    exp = support.expected(*case)
    want = sorted((c["topic"], c["group"], c["queueId"], c["committedOffset"])
                  for c in exp["afterRecovery"]["consumerOffsetChecks"])
    for root in (support.input_store(*case), support.expected_store(*case)):
        load = cf.read_consumer_offsets(root)
        assert load.generation == "current" and load.tmp_path is None
        assert sorted(_offsets(load)) == want
        topics = cf.read_topics(root)
        assert topics.generation == "current"
        assert topics.value["TopicA"]["readQueueNums"] == 4 and topics.value["TopicB"]["writeQueueNums"] == 2
        assert cf.read_delay_offsets(root).generation in ("current", "empty")


@pytest.mark.parametrize("case", LOADED, ids=support.case_id)
def test_config_files_written_back_as_the_broker_wrote_them(case):
    """``to_fastjson`` of what ``parse_fastjson`` read is the broker's file, byte for byte (both
    versions' consumerOffset.json, topics.json, delayOffset.json, as fixtures and as the broker
    rewrote them after its recovery)."""
    n = 0
    for root in (support.input_store(*case), support.expected_store(*case)):
        for f in sorted((root / "config").iterdir()):
            text = f.read_text(encoding="utf-8")
            if text.strip():
                assert fj.to_fastjson(fj.parse_fastjson(text)) == text, f
                n += 1
    assert n >= 4


def test_rewrite_consumer_offsets_changes_only_the_offsets_moved(tmp_path):
    # 5.x form: dataVersion and groupTopicMap stay, the order of keys stays, tabs, unquoted int keys
    text = ('{\n\t"dataVersion":{\n\t\t"counter":3,\n\t\t"timestamp":1795235675292\n\t},\n'
            '\t"groupTopicMap":{\n\t\t"G":["T","U"]\n\t},\n'
            '\t"offsetTable":{\n\t\t"U@G":{0:7\n\t\t},\n\t\t"T@G":{0:31,1:52\n\t\t}\n\t}\n}')
    f = tmp_path / "consumerOffset.json"
    f.write_text(text)
    assert cf.rewrite_consumer_offsets(f, lambda t, g, q, o: o) == []
    assert f.read_text() == text                                    # nothing moved: not rewritten
    moved = cf.rewrite_consumer_offsets(f, lambda t, g, q, o: 40 if (t, q) == ("T", 1) else o)
    assert moved == [("T", "G", 1, 52, 40)]
    assert f.read_text() == text.replace("{0:31,1:52", "{0:31,1:40")
    assert cf.read_consumer_offsets(f).value.column("offset").to_pylist() == [31, 40, 7]


def test_rewrite_lmq_and_undecodable_offset_files(tmp_path):
    f = tmp_path / "lmqConsumerOffset.json"
    f.write_text('{"offsetTable":{"T@G":{0:3}},"lmqOffsetTable":{"%LMQ%a@%LMQ%g":9}}')
    moved = cf.rewrite_consumer_offsets(f, lambda t, g, q, o: o - 1, lmq=True)
    assert moved == [("T", "G", 0, 3, 2), ("%LMQ%a", "%LMQ%g", 0, 9, 8)]
    assert [r["offset"] for r in cf.read_lmq_consumer_offsets(f).value.to_pylist()] == [8, 2]
    bad = tmp_path / "consumerOffset.json"
    for text in ('{"offsetTable":{', '{"offsetTable":{"T@G":{0:true}}}'):
        bad.write_text(text)
        assert cf.rewrite_consumer_offsets(bad, lambda t, g, q, o: 0) is None   # the broker skips it
        assert bad.read_text() == text
