"""The timer store's files (``timerstore``) and the broker's rules over them (``timerrecovery``):
layouts against the broker's constants, writer -> reader round trips, doEnqueue's chains, and
dump on a timer store. The real broker's answers are ``test_timer_oracle.py``."""
from __future__ import annotations

import json

import numpy as np
import pytest

from jobs import dump
from store_reader.broker import timerrecovery as tr
from store_reader.formats import timerstore as ts

FILE_SIZE = 8192
T0 = 1_795_780_949_000


def _units(n, delays_s, offset_py=None):
    u = np.zeros(n, ts.UNIT_DTYPE)
    u["size"] = ts.UNIT_SIZE
    u["magic"] = ts.MAGIC_DEFAULT
    u["curr_write_time_ms"] = T0
    u["delay_ms"] = np.asarray(delays_s) * 1000
    u["offset_py"] = np.arange(n) * 500 if offset_py is None else offset_py
    u["size_py"] = 500
    return u


def test_layouts_are_the_brokers():
    # TimerLog.UNIT_SIZE, UNIT_PRE_SIZE_FOR_MSG, BLANK_MAGIC_CODE (0xBBCCDDEE ^ 1880681586 + 8);
    # Slot.SIZE; the 5.3.3 wheel of 7 days of slots, twice; TimerCheckpoint's 7 longs in one page
    assert (ts.UNIT_SIZE, ts.OFFSET_PY_POS, ts.MIN_BLANK_LEN) == (52, 28, 16)
    assert ts.BLANK_MAGIC & 0xFFFFFFFF == 0xCBD43194
    assert (ts.SLOT_SIZE, ts.WHEEL_LENGTH) == (32, 38_707_200)
    assert (ts.CHECK_STRUCT.size, ts.CHECK_FILE_SIZE) == (56, 4096)


def test_timerlog_round_trip_and_file_blanks(tmp_path):
    """TimerLog#append's placement: 157 units fit an 8 KiB file before its blank; the reader
    walks on through the blank into the next file and stops at the first zero unit."""
    n = 200
    u = _units(n, np.arange(n) % 7 + 120)
    pos = ts.unit_positions(n, FILE_SIZE, FILE_SIZE)
    end, files = ts.write_timerlog(str(tmp_path / "timerlog"), u, FILE_SIZE, FILE_SIZE)
    assert [p.rsplit("/", 1)[1] for p in files] == [f"{FILE_SIZE:020d}", f"{2 * FILE_SIZE:020d}"]
    assert pos[156] == FILE_SIZE + 156 * 52 and pos[157] == 2 * FILE_SIZE
    assert end == pos[-1] + 52
    scan = ts.scan_timerlog(str(tmp_path / "timerlog"), FILE_SIZE)
    assert scan.bad_at is None and scan.end == end and scan.base == FILE_SIZE
    np.testing.assert_array_equal(scan.pos, pos)
    assert scan.units.tobytes() == u.astype(ts.UNIT_DTYPE).tobytes()


def test_torn_tail_is_not_the_end_of_the_log(tmp_path):
    u = _units(10, [120] * 10)
    ts.write_timerlog(str(tmp_path), u, 0, FILE_SIZE)
    path = tmp_path / f"{0:020d}"
    data = bytearray(path.read_bytes())
    data[7 * 52 + 4: 7 * 52 + 9] = b"\x07" * 5       # prev_pos of unit 7 ...
    data[7 * 52 + 12: 7 * 52 + 16] = b"\0\0\0\x20"   # ... and a magic the broker refuses
    path.write_bytes(bytes(data))
    scan = ts.scan_timerlog(str(tmp_path), FILE_SIZE)
    assert (len(scan.units), scan.end, scan.bad_at) == (7, 7 * 52, 7 * 52)


def test_enqueue_chains_are_do_enqueues():
    """Units of one slot chain back through prev_pos in log order; a unit of another time in the
    same wheel index (14 days later) restarts the slot, as getSlot's time check does."""
    two_weeks = ts.WHEEL_SLOTS
    u = _units(5, [100, 200, 100, 100 + two_weeks, 100])
    pos = np.arange(5, dtype=np.int64) * 52
    prev, wheel = tr.enqueue_chains(u, pos, 1000)
    assert prev.tolist() == [-1, -1, 0, -1, -1]
    i = (T0 // 1000 + 100) % ts.WHEEL_SLOTS
    assert wheel[i]["time_slot"] == T0 // 1000 + 100
    assert (wheel[i]["first_pos"], wheel[i]["last_pos"], wheel[i]["num"]) == (208, 208, 1)
    j = (T0 // 1000 + 200) % ts.WHEEL_SLOTS
    assert (wheel[j]["first_pos"], wheel[j]["last_pos"], wheel[j]["num"]) == (52, 52, 1)
    reached = tr.reached_units(pos, prev, wheel, T0, 1000)
    assert reached.tolist() == [False, True, False, False, True]     # units 0 and 2 lost their slot


def test_judge_units():
    u = _units(5, [120] * 5, offset_py=[0, 500, 500, 900, 5000])
    queue = tr.TimerQueue(np.array([0, 1, 2]), np.array([0, 500, 1000]), np.array([500, 500, 500]), 0, 3)
    v = tr.judge_units(ts.TimerLogScan(u, np.arange(5) * 52, [], FILE_SIZE, 260, None), queue, cut=4000)
    assert v.dropped.tolist() == [None, None, tr.DUPLICATE, tr.NOT_TIMER_RECORD, tr.BEYOND_CUT]
    assert v.queue_offset.tolist() == [0, 1, 1, -1, -1]


def test_timercheck_round_trip(tmp_path):
    c = ts.TimerCheck(T0, 10428, 200, 200, 0, T0 + 5, 3, True)
    ts.write_timercheck(str(tmp_path / "timercheck"), c)
    assert (tmp_path / "timercheck").stat().st_size == 4096
    assert ts.read_timercheck(str(tmp_path / "timercheck")) == c
    assert not ts.read_timercheck(str(tmp_path / "missing")).exists


def test_wheel_of_another_length_is_refused(tmp_path):
    (tmp_path / "timerwheel").write_bytes(bytes(64))
    with pytest.raises(Exception, match="not 38707200"):
        ts.read_wheel(str(tmp_path / "timerwheel"))


def test_dump_prints_the_timer_files(tmp_path, capsys):
    root = tmp_path / "store"
    u = _units(3, [120, 121, 120])
    pos = ts.unit_positions(3, 0, FILE_SIZE)
    prev, wheel = tr.enqueue_chains(u, pos, 1000)
    u["prev_pos"] = prev
    ts.write_timerlog(str(root / "timerlog"), u, 0, FILE_SIZE)
    ts.write_wheel(str(root / "timerwheel"), wheel)
    conf = tmp_path / "broker.conf"
    conf.write_text(f"mappedFileSizeTimerLog={FILE_SIZE}\n")
    assert dump.main([str(root / "timerlog" / f"{0:020d}"), "--json", "--broker-config", str(conf)]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["prev_pos"] for r in rows if r["type"] == "timer_unit"] == [-1, -1, 0]
    assert dump.main([str(root / "timerwheel"), "--json", "--broker-config", str(conf)]) == 0
    slots = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert sorted((s["time_ms"], s["first_pos"], s["last_pos"], s["num"]) for s in slots) == \
        [(T0 + 120_000, 0, 104, 2), (T0 + 121_000, 52, 52, 1)]


@pytest.mark.spark
def test_data_source_reads_the_timer_log(spark, tmp_path):
    """table=timer_log: a partition per timerlog file, the units the reader walks, filters pushed."""
    import store_reader
    root = tmp_path / "store"
    (root / "commitlog").mkdir(parents=True)
    (root / "commitlog" / f"{0:020d}").write_bytes(bytes(4096))
    u = _units(200, np.arange(200) % 9 + 120)
    ts.write_timerlog(str(root / "timerlog"), u, 0, FILE_SIZE)
    conf = tmp_path / "broker.conf"
    conf.write_text(f"mappedFileSizeTimerLog={FILE_SIZE}\nmappedFileSizeCommitLog=4096\n")
    store_reader.register(spark)
    df = spark.read.format("rocketmq").options(path=str(root), table="timer_log", brokerConfig=str(conf)).load()
    assert df.rdd.getNumPartitions() == 2
    rows = sorted(tuple(r) for r in df.select("pos", "file", "offset_py", "delayed_time_ms").collect())
    want = ts.units_table(ts.scan_timerlog(str(root / "timerlog"), FILE_SIZE))
    assert rows == sorted(zip(*(want[c].to_pylist() for c in ("pos", "file", "offset_py", "delayed_time_ms"))))
    assert df.filter(f"pos >= {FILE_SIZE}").count() == 200 - 157
    # driver and executor code in-process: every batch is the declared schema
    from pyspark.sql.pandas.types import to_arrow_schema
    from store_reader.datasource import RocketMQDataSource
    source = RocketMQDataSource({"path": str(root), "table": "timer_log", "brokerConfig": str(conf)})
    reader = source.reader(source.schema())
    for p in reader.partitions():
        for batch in reader.read(p):
            assert batch.schema.equals(to_arrow_schema(source.schema(), timezone="UTC"), check_metadata=True)
            batch.validate(full=True)


def test_rocksdb_timeline_is_refused_by_name():
    from store_reader.formats.brokerconf import BrokerConfig
    from store_reader.exceptions import StoreReaderError
    with pytest.raises(StoreReaderError, match="timerRocksDBEnable=true"):
        tr.check_timer_store(BrokerConfig(timerRocksDBEnable=True), broker_5x=True)
    tr.check_timer_store(BrokerConfig(timerRocksDBEnable=True, timerWheelEnable=False), broker_5x=True)
    tr.check_timer_store(BrokerConfig(timerRocksDBEnable=True), broker_5x=False)


def test_latest_wheel_snapshot(tmp_path):
    """5.4+ TimerWheel#getMaxSnapshotFlag: the largest numeric suffix; .tmp and other names ignored."""
    assert ts.latest_wheel_snapshot(str(tmp_path)) is None
    for name in ("timerwheel", "timerwheel.100", "timerwheel.2048", "timerwheel.2048.tmp", "timerwheel.x"):
        (tmp_path / name).write_bytes(b"")
    assert ts.latest_wheel_snapshot(str(tmp_path)) == (2048, str(tmp_path / "timerwheel.2048"))
