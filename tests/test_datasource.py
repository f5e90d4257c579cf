"""The Spark data source ``rocketmq`` (``store_reader.datasource``) against the API it wraps.

Every table of every real-broker fixture store must come out of Spark exactly as the store_reader
API reads it (chispa, order-sensitive: one partition per file, in file order); where the real
broker reported the same facts (topic counts, survivors, the checkpoint) they are checked too.
Filters must give what Spark itself computes on the API's rows, and prune files; bodies must never
be touched unless selected (proved with the body pages of a store made unreadable, below).
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import mmap
import re
import signal
import struct
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any, Iterator

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from chispa import assert_df_equality
from hypothesis import given
from hypothesis import strategies as st
from pyspark.sql.datasource import (EqualNullSafe, EqualTo, GreaterThan, GreaterThanOrEqual, In,
                                    IsNotNull, IsNull, LessThan, LessThanOrEqual, Not,
                                    StringContains, StringEndsWith, StringStartsWith)
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

import store_reader
import support
from schemas import CONSUME_QUEUE_ENTRY, INDEX_ENTRY, MESSAGE
from store_reader import open_store
from store_reader.formats import recordformat as rf
from store_reader.formats import timerstore
from store_reader.formats.checkpoint import read_checkpoint
from store_reader.formats.consumequeue import list_queue_files, list_queues, read_queue
from store_reader.datasource import (PUSHDOWN_CONF, TABLES, RocketMQDataSource, may_match,
                                     row_mask)
from store_reader.exceptions import ConfigError, StoreReaderError
from store_reader.formats.indexfile import list_index_files, read_entries
from store_reader.testing.synthetic import SyntheticStoreSpec, write_store

V4, V5 = support.VERSIONS
NO_BODY = [c for c in MESSAGE.names if c != "body"]
# The default tier sweeps these; the slow tier sweeps every shipped scenario.
FAST_CASES = {(V4, "clean"), (V5, "torn-middle-crc")}


@pytest.fixture(scope="module")
def rocketmq(spark):
    """The shared session with the data source registered (one call, as users do)."""
    store_reader.register(spark)
    return spark


def options(case: tuple[str, str], **extra: str) -> dict[str, str]:
    return {"path": str(support.input_store(*case)), "brokerConfig": str(support.broker_conf(*case)),
            **extra}


def read(spark, case: tuple[str, str], table: str = "messages", **extra: str):
    return spark.read.format("rocketmq").options(**options(case, table=table, **extra)).load()


def store_of(case: tuple[str, str]):
    return open_store(support.input_store(*case), support.broker_conf(*case))


def api_table(store, table: str, columns: list[str] | None = None, **scan: Any) -> pa.Table:
    """What the store_reader API reads for ``table`` (the data source's defaults)."""
    cfg, five = store.config, store.looks_5x()
    if table == "messages":
        columns = columns or NO_BODY
        return pa.Table.from_batches(list(store.scan_commitlog(columns=columns, **scan)),
                                     schema=MESSAGE.arrow(columns))
    if table == "segments":
        return store.segment_summaries(**scan)
    if table == "consume_queue":
        queues = [read_queue(q.path, q.topic, q.queue_id, cfg.cq_file_size, rocketmq5=five)
                  for q in list_queues(store.root)]
        return pa.concat_tables(queues) if queues else CONSUME_QUEUE_ENTRY.arrow().empty_table()
    if table == "index":
        files = list_index_files(store.index_dir, cfg.index_file_size, strict=False)
        tables = [read_entries(f.path, cfg.maxHashSlotNum, cfg.maxIndexNum) for f in files]
        return pa.concat_tables(tables) if tables else INDEX_ENTRY.arrow().empty_table()
    if table == "timer_log":
        return timerstore.units_table(timerstore.scan_timerlog(str(store.root / timerstore.TIMERLOG_DIR),
                                                               cfg.mappedFileSizeTimerLog))
    return read_checkpoint(store.checkpoint_path).to_table(rocketmq5=five)


def frame(spark, table: pa.Table, kind: str):
    """A DataFrame of an API table with the data source's declared types, in the table's order."""
    declared = TABLES[kind].spark()
    schema = StructType([declared[n] for n in table.schema.names])
    # pyspark 4.2's createDataFrame(pa.Table) drops the rows after an empty chunk (what a filter
    # leaves behind) and fails on a table without chunks whose columns nest (map, list)
    if table.num_rows == 0:
        return spark.createDataFrame([], schema=schema)
    return spark.createDataFrame(table.combine_chunks(), schema=schema)


@contextlib.contextmanager
def session_conf(spark, **values: str) -> Iterator[None]:
    """Set session confs for a block, restoring what was there (the session is shared)."""
    old = {k: spark.conf.get(k, None) for k in values}
    for k, v in values.items():
        spark.conf.set(k, v)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                spark.conf.unset(k)
            else:
                spark.conf.set(k, v)


# -- every table of every fixture == the store_reader API ----------------------------------------------

SWEEP = [pytest.param(c, id=support.case_id(c), marks=() if c in FAST_CASES else pytest.mark.slow)
         for c in support.scenarios()]


@pytest.mark.spark
@pytest.mark.parametrize("table", list(TABLES))
@pytest.mark.parametrize("case", SWEEP)
def test_table_equals_store_reader_api(rocketmq, case, table):
    store = store_of(case)
    try:
        want = api_table(store, table)
    except StoreReaderError as exc:
        # e.g. cq-file-short: the API refuses the short CQ file, so must the data source
        with pytest.raises(Exception, match=re.escape(str(exc))):
            read(rocketmq, case, table).collect()
        return
    assert_df_equality(read(rocketmq, case, table), frame(rocketmq, want, table))
    if table == "checkpoint":   # and what the real broker found in the file
        found = support.expected(*case)["input"]["checkpoint"]
        row = want.to_pylist()[0]
        if found["exists"]:
            assert row["physic_msg_timestamp"] == found["physicMsgTimestamp"]
            assert row["index_msg_timestamp"] == found["indexMsgTimestamp"]
            assert row["master_flushed_offset"] == found.get("masterFlushedOffset")
        else:                   # the broker starts from all zeros (E#13)
            assert row["physic_msg_timestamp"] == row["logics_msg_timestamp"] == 0


# -- SQL -----------------------------------------------------------------------------------------------

@pytest.mark.spark
@pytest.mark.parametrize("case", [(V4, "crash-tail"), (V5, "clean")], ids=support.case_id)
def test_sql_topic_counts(rocketmq, case):
    o = options(case)
    rocketmq.sql("CREATE OR REPLACE TEMPORARY VIEW m USING rocketmq OPTIONS "
                 f"(path '{o['path']}', brokerConfig '{o['brokerConfig']}')")
    try:
        rows = rocketmq.sql("SELECT topic, count(*) AS n FROM m GROUP BY topic").collect()
    finally:
        rocketmq.catalog.dropTempView("m")
    got = {r.topic: r.n for r in rows}
    topics = api_table(store_of(case), "messages", ["topic"])["topic"]
    assert got == dict(Counter(topics.to_pylist()))
    # the real broker's own scan after recovery saw the same messages (no damage in these stores)
    broker = Counter(m["topic"] for m in support.expected(*case)["afterRecovery"]["commitLogScan"]
                     if "topic" in m)
    assert got == dict(broker)


@pytest.mark.spark
def test_sql_view_with_a_column_list_projects(rocketmq):
    case = (V5, "clean")
    o = options(case)
    rocketmq.sql("CREATE OR REPLACE TEMPORARY VIEW m_bodies (topic STRING, body BINARY, phy_offset BIGINT) "
                 f"USING rocketmq OPTIONS (path '{o['path']}', brokerConfig '{o['brokerConfig']}')")
    try:
        got = rocketmq.sql("SELECT * FROM m_bodies")
        assert got.columns == ["topic", "body", "phy_offset"]
        rows = got.collect()
    finally:
        rocketmq.catalog.dropTempView("m_bodies")
    want = api_table(store_of(case), "messages", ["phy_offset", "topic", "body"]).select(
        ["topic", "body", "phy_offset"])
    assert rows == frame(rocketmq, want, "messages").collect()


# -- bodies ----------------------------------------------------------------------------------------------

@pytest.mark.spark
def test_body_only_when_asked(rocketmq):
    case = (V4, "torn-middle-crc")
    assert "body" not in read(rocketmq, case).columns
    with_body = read(rocketmq, case, withBody="true")
    assert with_body.columns == MESSAGE.names
    assert_df_equality(with_body, frame(rocketmq, api_table(store_of(case), "messages", MESSAGE.names),
                                        "messages"))
    picked = read(rocketmq, case, columns="body, phy_offset")
    assert picked.columns == ["phy_offset", "body"]          # schema order, not the option's
    assert_df_equality(picked, frame(rocketmq, api_table(store_of(case), "messages",
                                                         ["phy_offset", "body"]), "messages"))


# A child process runs the data source's own driver and executor code (schema, reader, partitions,
# read) with every mmap of a commitlog segment guarded: the pages wholly inside record bodies are
# mprotect(PROT_NONE)ed as soon as the segment is mapped, so touching a single byte of them kills
# the process with SIGSEGV. Software prefetches never fault, so only real reads count. Pages shared
# with headers, topics or properties stay readable; the test checks the guarded pages hold most
# body bytes, and the control test that reads needing bodies do die.
GUARD = r"""
import ctypes, json, mmap, os, sys
import numpy as np
from store_reader.datasource import RocketMQDataSource

options, guarded = json.loads(sys.argv[1]), json.loads(sys.argv[2])
libc = ctypes.CDLL(None, use_errno=True)
PROT_NONE = 0


class GuardedMap(mmap.mmap):
    def __new__(cls, fileno, length, *args, **kwargs):
        m = super().__new__(cls, fileno, length, *args, **kwargs)
        name = os.path.basename(os.readlink(f"/proc/self/fd/{fileno}"))
        if name in guarded:
            view = np.frombuffer(m, dtype=np.uint8)
            base = view.ctypes.data
            del view              # no export left behind: the scan closes the map afterwards
            for lo, hi in guarded[name]:
                if libc.mprotect(ctypes.c_void_p(base + lo), ctypes.c_size_t(hi - lo), PROT_NONE):
                    raise OSError(ctypes.get_errno(), "mprotect")
            print("guarded", name, file=sys.stderr)
        return m


mmap.mmap = GuardedMap
source = RocketMQDataSource(options)
reader = source.reader(source.schema())
rows = sum(b.num_rows for p in reader.partitions() for b in reader.read(p))
print(json.dumps({"rows": rows}))
"""


def body_pages(segment: Path) -> tuple[list[tuple[int, int]], int, int]:
    """Page-aligned [lo, hi) ranges lying wholly inside record bodies, the bytes they cover and
    all body bytes, found by walking the records' TOTALSIZE chain (spec F§3.1)."""
    data = segment.read_bytes()
    page = mmap.PAGESIZE
    ranges, guarded, bodies, pos = [], 0, 0, 0
    while pos + 8 <= len(data):
        total, magic = struct.unpack_from(">ii", data, pos)
        if magic not in (rf.MAGIC_V1, rf.MAGIC_V2) or total <= 0:
            break
        sys_flag = struct.unpack_from(">i", data, pos + rf.SYSFLAG_POS)[0]
        born = 20 if sys_flag & rf.BORNHOST_V6_FLAG else 8
        store = 20 if sys_flag & rf.STOREHOSTADDRESS_V6_FLAG else 8
        body = pos + rf.BORNHOST_POS + born + 8 + store + rf.MID.size   # + STORETIMESTAMP, MID block
        length = struct.unpack_from(">i", data, body - 4)[0]
        lo, hi = -(-body // page) * page, (body + max(length, 0)) // page * page
        if hi > lo:
            ranges.append((lo, hi))
            guarded += hi - lo
        bodies += max(length, 0)
        pos += total
    return ranges, guarded, bodies


@pytest.fixture(scope="module")
def big_body_store(tmp_path_factory) -> Path:
    """Synthetic 5.x store, bodies around 64 KiB (16 pages) so most of each body can be guarded."""
    root = tmp_path_factory.mktemp("bodies") / "store"
    write_store(root, SyntheticStoreSpec(total_bytes=4 << 20, segment_size=2 << 20,
                                         message_size=64 << 10, seed=11))
    return root


def run_guarded(store: Path, **extra: str) -> subprocess.CompletedProcess:
    guarded, covered, bodies = {}, 0, 0
    for seg in sorted((store / "commitlog").iterdir()):
        ranges, g, b = body_pages(seg)
        guarded[seg.name] = ranges
        covered, bodies = covered + g, bodies + b
    assert bodies > 0 and covered / bodies > 0.8      # the guard covers most body bytes
    opts = {"path": str(store), "table": "messages", **extra}
    return subprocess.run([sys.executable, "-c", GUARD, json.dumps(opts), json.dumps(guarded)],
                          capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("extra", [
    {"verifyCrc": "false", "computeCrc": "false"},                  # every column but body
    {"verifyCrc": "false", "columns": "phy_offset,topic,keys,properties"},   # no CRC column: no CRC
], ids=["no-crc", "no-crc-column"])
def test_unselected_bodies_are_never_read(big_body_store, extra):
    done = run_guarded(big_body_store, **extra)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stderr.count("guarded") == len(list((big_body_store / "commitlog").iterdir()))
    want = api_table(open_store(big_body_store), "messages", ["phy_offset"]).num_rows
    assert json.loads(done.stdout.splitlines()[-1])["rows"] == want > 0


@pytest.mark.parametrize("extra", [
    {"verifyCrc": "false", "computeCrc": "false", "withBody": "true"},   # the body column
    {"verifyCrc": "false"},                               # body_crc_ok selected: CRCs read bodies
    {"columns": "phy_offset,topic"},                      # checkCRCOnRecover (broker default)
], ids=["body", "crc-column", "crc-check"])
def test_body_reads_hit_the_guard(big_body_store, extra):
    """The control: the same guard kills every read that does need the bodies."""
    done = run_guarded(big_body_store, **extra)
    assert done.returncode == -signal.SIGSEGV, (done.returncode, done.stderr[-3000:])


# -- filter pushdown -------------------------------------------------------------------------------------

@pytest.mark.spark
def test_phy_offset_filter_plans_only_reachable_segments(rocketmq):
    case = (V4, "clean")
    store = store_of(case)
    files = store.commitlog_files
    everything = api_table(store, "messages")
    cut = files[8].start + 100
    df = read(rocketmq, case).where(f"phy_offset >= {cut}")
    assert df.rdd.getNumPartitions() == len(files) - 8   # the first 8 segments are never read
    assert_df_equality(df, frame(rocketmq, everything.filter(pc.field("phy_offset") >= cut), "messages"))

    lo, hi = files[3].start + 1, files[3].start + 5000
    df = read(rocketmq, case).where(f"phy_offset BETWEEN {lo} AND {hi}")
    assert df.rdd.getNumPartitions() == 1
    inside = (pc.field("phy_offset") >= lo) & (pc.field("phy_offset") <= hi)
    assert_df_equality(df, frame(rocketmq, everything.filter(inside), "messages"))

    one = everything["phy_offset"][57].as_py()
    df = read(rocketmq, case).where(f"phy_offset = {one}")
    assert df.rdd.getNumPartitions() == 1 and [r.phy_offset for r in df.collect()] == [one]
    # nothing reachable: Spark's single stand-in partition, no rows
    assert read(rocketmq, case).where("phy_offset < 0").count() == 0


@pytest.mark.spark
@pytest.mark.parametrize("condition", [
    "topic = 'TopicA' AND queue_id IN (1, 2)",
    "topic LIKE 'Topic%' AND NOT queue_id = 0 AND queue_offset >= 10",
    "topic LIKE '%big' OR queue_id = 3",                # OR is not pushed: Spark keeps it
    "tags IS NULL AND valid_prefix",
    "NOT valid_prefix",
    "real_queue_id IN (1, 2) OR real_queue_id IS NULL",
    "NOT real_queue_id IN (0, 1)",                      # null rows: NOT(null IN ..) is null
    "queue_id <=> 1 AND keys LIKE '%shared%'",
    "delay_level = 18 AND topic <> 'TopicB'",
    "uniq_key IS NOT NULL AND store_timestamp > 0 AND body_crc_ok",
])
def test_filters_give_what_spark_computes(rocketmq, condition):
    """Pushed or not, a filter gives the rows Spark's own evaluation gives on the API's rows."""
    case = (V5, "torn-middle-crc")
    every = api_table(store_of(case), "messages", include_lost=True)
    assert pc.any(pc.invert(every["valid_prefix"])).as_py()   # lost records are in play
    got = read(rocketmq, case, includeLost="true").where(condition)
    want = frame(rocketmq, every, "messages").where(condition)
    assert_df_equality(got, want)
    assert got.count() > 0


@pytest.mark.spark
def test_queue_filters_plan_only_that_queues_files(rocketmq):
    case = (V4, "clean")
    store = store_of(case)
    queue = next(q for q in list_queues(store.root) if (q.topic, q.queue_id) == ("TopicA", 1))
    files = list_queue_files(queue.path, store.config.cq_file_size)
    entries = read_queue(queue.path, "TopicA", 1, store.config.cq_file_size)
    df = read(rocketmq, case, "consume_queue").where("topic = 'TopicA' AND queue_id = 1")
    assert df.rdd.getNumPartitions() == len(files) > 1
    assert_df_equality(df, frame(rocketmq, entries, "consume_queue"))
    per_file = store.config.cq_file_size // 20
    df = read(rocketmq, case, "consume_queue").where(f"topic = 'TopicA' AND queue_id = 1 "
                                                    f"AND queue_offset >= {per_file}")
    assert df.rdd.getNumPartitions() == len(files) - 1    # the first file holds offsets below
    assert_df_equality(df, frame(rocketmq, entries.filter(pc.field("queue_offset") >= per_file),
                                 "consume_queue"))
    index_files = list_index_files(store.index_dir, store.config.index_file_size)
    df = read(rocketmq, case, "index").where(f"file = '{index_files[1].name}'")
    assert df.rdd.getNumPartitions() == 1
    assert df.count() == read_entries(index_files[1].path, store.config.maxHashSlotNum,
                                      store.config.maxIndexNum).num_rows > 0


@pytest.mark.spark
def test_without_pushdown_spark_filters_every_row(rocketmq):
    case = (V4, "clean")
    store = store_of(case)
    cut = store.commitlog_files[8].start
    condition = f"phy_offset >= {cut} AND topic = 'TopicA'"
    want = frame(rocketmq, api_table(store, "messages"), "messages").where(condition)
    try:
        with session_conf(rocketmq, **{PUSHDOWN_CONF: "false"}):
            store_reader.register(rocketmq, filter_pushdown=False)
            df = read(rocketmq, case).where(condition)
            assert df.rdd.getNumPartitions() == len(store.commitlog_files)   # nothing pruned
            assert_df_equality(df, want)
    finally:
        store_reader.register(rocketmq)


def test_push_filters_keeps_what_it_evaluates_exactly():
    source = RocketMQDataSource(options((V5, "clean")))
    reader = source.reader(source.schema())
    exact = [EqualTo(("topic",), "TopicA"), In(("queue_id",), (1, 2)), Not(EqualTo(("queue_id",), 0)),
             GreaterThanOrEqual(("phy_offset",), 65536), StringStartsWith(("keys",), "K1"),
             EqualNullSafe(("tags",), None), IsNull(("properties",)), EqualTo(("valid_prefix",), True)]
    for_spark = [EqualTo(("properties",), {"KEYS": "K1"}),      # map: left to Spark
                 EqualTo(("key_list",), ["K1"]), EqualTo(("body",), b"x"),
                 GreaterThan(("queue_id",), 1 << 40),           # does not fit an int32 column
                 EqualTo(("queue_id",), "1"), EqualTo(("valid_prefix",), 1),
                 In(("topic",), ("TopicA", None)), StringContains(("queue_id",), "1"),
                 EqualTo(("nested", "field"), 1)]
    assert reader.pushFilters(exact + for_spark) == for_spark
    assert reader.filters == exact
    # phy_offset >= 65536: the first segment is not planned
    assert [p.name for p in reader.partitions()] == [f.name for f in store_of((V5, "clean")).commitlog_files[1:]]


def sql_value(f: Any, v: Any) -> bool | None:
    """SQL three-valued result of pushed filter ``f`` on one value (None = SQL null)."""
    if isinstance(f, Not):
        inner = sql_value(f.child, v)
        return None if inner is None else not inner
    if isinstance(f, IsNull):
        return v is None
    if isinstance(f, IsNotNull):
        return v is not None
    if isinstance(f, EqualNullSafe):
        return v == f.value if v is not None and f.value is not None else v is f.value
    if v is None:
        return None
    if isinstance(f, In):
        return v in f.value
    ops = {EqualTo: lambda a, b: a == b, GreaterThan: lambda a, b: a > b,
           GreaterThanOrEqual: lambda a, b: a >= b, LessThan: lambda a, b: a < b,
           LessThanOrEqual: lambda a, b: a <= b, StringStartsWith: str.startswith,
           StringEndsWith: str.endswith, StringContains: lambda a, b: b in a}
    return ops[type(f)](v, f.value)


def int_filters(column: str):
    v = st.integers(-3, 12)
    leaf = st.one_of(
        st.builds(EqualTo, st.just((column,)), v), st.builds(EqualNullSafe, st.just((column,)), st.none() | v),
        st.builds(GreaterThan, st.just((column,)), v), st.builds(GreaterThanOrEqual, st.just((column,)), v),
        st.builds(LessThan, st.just((column,)), v), st.builds(LessThanOrEqual, st.just((column,)), v),
        st.builds(In, st.just((column,)), st.lists(v, min_size=1, max_size=4).map(tuple)),
        st.builds(IsNull, st.just((column,))), st.builds(IsNotNull, st.just((column,))))
    return st.recursive(leaf, lambda inner: st.builds(Not, inner), max_leaves=3)


@given(f=int_filters("queue_id"), values=st.lists(st.none() | st.integers(-3, 12), max_size=20))
def test_row_mask_has_sql_semantics_on_ints(f, values):
    batch = pa.record_batch([pa.array(values, pa.int32())], names=["queue_id"])
    assert row_mask(f, batch).to_pylist() == [sql_value(f, v) for v in values]


STRING_FILTERS = (EqualTo, StringStartsWith, StringEndsWith, StringContains, GreaterThan, LessThanOrEqual)


@given(f=st.one_of([st.builds(kind, st.just(("topic",)),
                              st.sampled_from(["", "Topic", "A", "TopicA", "%RETRY%", "ü"]))
                    for kind in STRING_FILTERS]),
       values=st.lists(st.none() | st.sampled_from(["TopicA", "TopicB", "%RETRY%G", "Topicü", ""]),
                       max_size=12))
def test_row_mask_has_sql_semantics_on_strings(f, values):
    batch = pa.record_batch([pa.array(values, pa.string())], names=["topic"])
    assert row_mask(f, batch).to_pylist() == [sql_value(f, v) for v in values]


@given(f=int_filters("phy_offset"), lo=st.integers(-2, 10), width=st.integers(0, 4))
def test_pruning_never_drops_a_matching_file(f, lo, width):
    """A file is pruned only if no value of its phy offset range satisfies the filter."""
    hi = lo + width
    if not may_match(f, {"phy_offset": (lo, hi)}):
        assert not any(sql_value(f, v) for v in range(lo, hi + 1))
    if width == 0:                                   # a single known value: the test is exact
        assert may_match(f, {"phy_offset": (lo, hi)}) == bool(sql_value(f, lo))


# -- options --------------------------------------------------------------------------------------------

@pytest.mark.spark
def test_crc_and_lost_record_options(rocketmq):
    case = (V4, "torn-middle-crc")
    store = store_of(case)
    found = support.expected(*case)
    # broker default (checkCRCOnRecover): the valid prefixes hold exactly the broker's survivors
    assert read(rocketmq, case).count() == found["survivedCount"] == 443
    # CRC not checked: the bit-flipped record and everything after it are valid again
    no_check = dataclasses.replace(store.scan_options(), check_crc=False)
    lenient = read(rocketmq, case, verifyCrc="false")
    assert_df_equality(lenient, frame(rocketmq, api_table(store, "messages", opts=no_check), "messages"))
    assert lenient.count() == found["writtenCount"] == 464
    assert lenient.where("body_crc_ok = false").count() == 1
    # computeCrc=false: nothing computed, so the CRC columns are null
    blind = read(rocketmq, case, verifyCrc="false", computeCrc="false")
    assert blind.where("body_crc_ok IS NULL").count() == 464
    assert_df_equality(read(rocketmq, case, "segments", verifyCrc="false"),
                       frame(rocketmq, api_table(store, "segments", opts=no_check), "segments"))
    # includeLost: the intact records behind the corrupt one, flagged valid_prefix = false
    lost = read(rocketmq, case, includeLost="true")
    assert_df_equality(lost, frame(rocketmq, api_table(store, "messages", include_lost=True), "messages"))
    assert lost.where("NOT valid_prefix").count() == sum(s.records_after_cut for s in store.summaries()) > 0


@pytest.mark.parametrize("extra, message", [
    ({"table": "queues"}, "table='queues' is not one of"),
    ({"verifyCRC": "yes"}, "verifyCrc='yes' is not true/false"),
    ({"table": "index", "withBody": "true"}, "withBody does not apply to table 'index'"),
    ({"columns": "phy_offset,nope"}, r"no column\(s\) \['nope'\]"),
    ({"columns": "body", "withBody": "false"}, "names body but withBody=false"),
    ({"colums": "topic"}, r"unknown option\(s\) \['colums'\]"),
    ({"brokerVersion": "6.0"}, "brokerVersion='6.0' is not"),
    ({"table": "messages", "batchSize": "0"}, "batchSize=.0. must be a positive integer"),
    ({"batchSize": "many"}, "batchSize=.many. must be a positive integer"),
])
def test_bad_options_are_named(extra, message):
    source = RocketMQDataSource(options((V5, "clean"), **extra))
    with pytest.raises(ConfigError, match=message):
        source.reader(source.schema())


@pytest.mark.spark
def test_bad_option_surfaces_in_spark(rocketmq):
    with pytest.raises(Exception, match="table='queues' is not one of"):
        read(rocketmq, (V5, "clean"), "queues").collect()
    with pytest.raises(Exception, match="NotAStoreError|does not exist"):
        rocketmq.read.format("rocketmq").option("path", "/nonexistent/store").load().collect()


# -- batches are exactly the declared schema ----------------------------------------------------------------

VIEW_TYPES = (pa.types.is_string_view, pa.types.is_binary_view, pa.types.is_list_view,
              pa.types.is_large_list_view)


def arrow_types(t: pa.DataType) -> Iterator[pa.DataType]:
    yield t
    for i in range(t.num_fields):
        yield from arrow_types(t.field(i).type)


# the fixtures hold no timer store (timer_log: tests/test_timerstore.py)
READS = [(t, {}) for t in TABLES if t != "timer_log"] + [("messages", {"withBody": "true"}),
                                     ("messages", {"columns": "key_list,properties,valid_prefix"}),
                                     ("messages", {"includeLost": "true"})]


@pytest.mark.parametrize("case", [(V4, "torn-middle-crc"), (V5, "crash-tail")], ids=support.case_id)
def test_read_yields_the_declared_schema_exactly(case):
    """Driver and executor code in-process: every batch is the declared schema, no view types."""
    for table, extra in READS:
        source = RocketMQDataSource(options(case, table=table, **extra))
        declared = source.schema()
        want = to_arrow_schema(declared, timezone="UTC")
        reader = source.reader(declared)
        rows = 0
        for p in reader.partitions():
            for batch in reader.read(p):
                assert batch.schema.equals(want, check_metadata=True), (table, batch.schema)
                assert not any(view(t) for f in batch.schema for t in arrow_types(f.type)
                               for view in VIEW_TYPES)
                batch.validate(full=True)
                rows += batch.num_rows
        assert rows > 0, table


@pytest.mark.spark
@pytest.mark.parametrize("large", ["false", pytest.param("true", marks=pytest.mark.slow)])
def test_every_table_through_arrow(rocketmq, large):
    """With Spark's Arrow paths on (no fallback), every table arrives with the declared schema."""
    case = (V5, "torn-middle-crc")
    store = store_of(case)
    with session_conf(rocketmq, **{"spark.sql.execution.arrow.pyspark.enabled": "true",
                                   "spark.sql.execution.arrow.pyspark.fallback.enabled": "false",
                                   "spark.sql.execution.arrow.useLargeVarTypes": large}):
        for table, extra in READS:
            df = read(rocketmq, case, table, **extra)
            declared = TABLES[table].arrow(df.columns)
            if table == "messages":
                want = api_table(store, table, df.columns,
                                 include_lost=extra.get("includeLost") == "true")
            else:
                want = api_table(store, table)
            got = df.toArrow()
            if large == "true":       # toArrow hands strings and binaries out as large types then
                got = got.cast(declared)
            assert got.schema.equals(declared), table
            assert got.equals(want), table
            assert len(df.toPandas()) == want.num_rows


# -- registration ----------------------------------------------------------------------------------------

def test_store_reader_needs_no_pyspark():
    code = ("import sys; sys.modules['pyspark'] = None\n"
            "import store_reader\n"
            "assert 'store_reader.datasource' not in sys.modules\n"
            "try:\n    store_reader.register(None)\nexcept ImportError:\n    print('register imports pyspark')\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "register imports pyspark"
