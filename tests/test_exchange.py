"""The Arrow exchange between two Spark stages (``jobs._spark.exchange``): what each key's stage-2 task
sees, and the driver's own items written away one by one while stage 1 runs."""
from __future__ import annotations

import gc
import time
import weakref
from pathlib import Path

import pyarrow as pa

from jobs._spark.exchange import exchange


def _table(*values: int) -> pa.Table:
    return pa.table({"v": pa.array(values, pa.int64())})


def _seen():
    """Stage 2 of these tests (made here: Spark's workers cannot import a test module): what the
    key's task sees, as plain values."""
    def stage2(key, items):
        return [(key, [(item[0], item[1]["v"].to_pylist()) for _, item in items])]
    return stage2


def test_each_key_sees_stage_one_items_then_the_drivers_in_order(spark, tmp_path):
    rdd = spark.sparkContext.parallelize([[(0, ("a", _table(1))), (1, ("b", _table(2)))],
                                          [(0, ("c", _table(3, 4)))]], 2).flatMap(lambda x: x)
    driver = [(0, ("d", _table(5))), (1, ("e", _table(6))), (0, ("f", _table(7)))]
    assert exchange(spark, str(tmp_path), rdd, iter(driver), 2, _seen()) == [
        (0, [("a", [1]), ("c", [3, 4]), ("d", [5]), ("f", [7])]),
        (1, [("b", [2]), ("e", [6])])]
    assert list(tmp_path.iterdir()) == []          # the exchange directory is removed


def test_the_drivers_items_are_written_while_stage_one_runs_and_not_held(spark, tmp_path):
    """Stage 1's task waits until the driver has made its first item: made after stage 1 (as
    before), it would never come. Each driver table is released before the next one is made."""
    started = tmp_path / "driver-started"
    released = []

    def driver_items():
        last = None
        for i in range(3):
            if last is not None:
                gc.collect()
                released.append(last() is None)
            t = _table(10 + i)
            last = weakref.ref(t)
            started.touch()
            yield 0, ("d", t)
            del t

    def stage1(_):
        deadline = time.monotonic() + 60
        while not Path(started).exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        return [(0, ("s", pa.table({"v": pa.array([int(Path(started).exists())], pa.int64())})))]

    rdd = spark.sparkContext.parallelize([0], 1).flatMap(stage1)
    work = tmp_path / "work"
    work.mkdir()
    assert exchange(spark, str(work), rdd, driver_items(), 1, _seen()) == \
        [(0, [("s", [1]), ("d", [10]), ("d", [11]), ("d", [12])])]
    assert released == [True, True]


def test_on_driver_gets_the_drivers_items_as_written_for_tasks_to_read(spark, tmp_path):
    """``on_driver`` gets the items keyed to the driver with their tables still in the exchange's
    files (``Stored``); ``stored_frame`` has Spark tasks read them, and the exchange keeps the
    files until the future ``on_driver`` returned is done."""
    from concurrent.futures import ThreadPoolExecutor

    from jobs._spark.exchange import Stored, stored_frame

    rdd = spark.sparkContext.parallelize([[(1, ("lost", _table(1, 2)))], [(1, ("lost", _table(3)))],
                                          [(0, ("a", _table(9)))]], 3).flatMap(lambda x: x)
    given, reads = [], []
    pool = ThreadPoolExecutor(max_workers=1)

    def on_driver(items):
        given.extend(items)

        def read():
            time.sleep(1)           # still reading after stage 2 is done
            frame = stored_frame(spark, [item[-1] for item in items], "v long",
                                 lambda t: pa.table({"v": pa.array([v * 10 for v in t["v"].to_pylist()])}))
            return sorted(r.v for r in frame.collect())
        reads.append(pool.submit(read))
        return reads[0]

    got = exchange(spark, str(tmp_path), rdd, [], 2, _seen(), to_driver=1, on_driver=on_driver)
    assert [kind for kind, stored in given] == ["lost", "lost"]
    assert all(isinstance(stored, Stored) for _, stored in given)
    assert reads[0].done() and reads[0].result() == [10, 20, 30]     # read before the files went
    assert got[0] == (0, [("a", [9])]) and [item[1]["v"].to_pylist() for item in got[1:]] == [[1, 2], [3]]
    assert list(tmp_path.iterdir()) == []
