"""The run's bulk Arrow exchange between two Spark stages, through the scan directory.

A stage-1 task's items are ``(key, (..., table))``; stage 2 gets each key's items. Spark's own
shuffle would carry every table from the Python worker through the JVM (pickled, written to a
shuffle file, read back and sent to the next worker): the tables the audit and the consume queue
rebuild exchange are most of the bytes a recovery moves after its scan. Here a stage-1 task
writes its tables to Arrow IPC files in the exchange directory (one per table schema) and sends
only where each table lies through Spark; stage 2 maps the files. The directory lies in the run's
scan directory, which the driver and every executor see (``--scan-dir``), and is removed once
stage 2 is done.

Stage 2 sees each key's items in the order stage 1 made them (stage-1 tasks in order, each task's
items in the order it yielded them).
"""
from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections import defaultdict
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator

import pyarrow as pa

Item = tuple[int, tuple]


@dataclass(frozen=True)
class Stored:
    """A table an item carried, as where it was written: record batches ``[first, first + count)``
    of the file at ``path``."""

    path: str
    first: int
    count: int


def _store(items: Iterable[Item], directory: str) -> Iterator[Item]:
    """The items with each table written away: a task writes one file per table schema (a file
    per table cost more to open and close than most tables cost to write)."""
    prefix = uuid.uuid4().hex[:12]
    writers: dict[pa.Schema, tuple[str, pa.OSFile, pa.ipc.RecordBatchFileWriter, list[int]]] = {}
    try:
        for key, item in items:
            if item and isinstance(item[-1], pa.Table):
                table = item[-1]
                if table.schema not in writers:
                    path = os.path.join(directory, f"{prefix}-{len(writers)}.arrow")
                    sink = pa.OSFile(path, "wb")
                    writers[table.schema] = (path, sink, pa.ipc.new_file(sink, table.schema), [0])
                path, _, writer, written = writers[table.schema]
                batches = table.to_batches()
                for b in batches:
                    writer.write_batch(b)
                item = (*item[:-1], Stored(path, written[0], len(batches)))
                written[0] += len(batches)
                del table, batches        # written: not held while the next item is made
            yield key, item
    finally:
        for _, sink, writer, _ in writers.values():
            writer.close()
            sink.close()


def _loader() -> Callable[[tuple], tuple]:
    """Reads items' tables back, each file opened once (memory-mapped: a column never used is
    never read)."""
    readers: dict[str, pa.ipc.RecordBatchFileReader] = {}

    def load(item: tuple) -> tuple:
        if not item or not isinstance(item[-1], Stored):
            return item
        s = item[-1]
        if s.path not in readers:
            readers[s.path] = pa.ipc.open_file(pa.memory_map(s.path))
        r = readers[s.path]
        return (*item[:-1], pa.Table.from_batches([r.get_batch(i) for i in range(s.first, s.first + s.count)],
                                                  r.schema))
    return load


def read_stored(s: Stored) -> pa.Table:
    """The table written away at ``s``."""
    (table,) = _loader()((s,))
    return table


def stored_frame(spark, stored: list[Stored], schema, rows: Callable[[pa.Table], pa.Table]):
    """A DataFrame of ``rows(table)`` for each table stage 1 wrote away (``stored``), read and
    converted by Spark tasks, a task per table: what a stage-1 task made for a Delta table reaches
    Spark's writer without passing through the driver. Read while the exchange directory stands:
    ``on_driver`` returns the write's future, which the exchange waits for."""
    refs = spark.sparkContext.parallelize([(s.path, s.first, s.count) for s in stored], max(1, len(stored)))

    def read(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        load = _loader()
        for b in batches:
            for path, first, count in zip(*(b.column(i).to_pylist() for i in range(3))):
                (table,) = load((Stored(path, first, count),))
                for out in rows(table).to_batches():
                    if out.num_rows:
                        yield out
    return refs.toDF("path string, first int, count int").mapInArrow(read, schema)


def exchange(spark, work_dir: str | None, stage1, driver_items: Iterable[Item], keys: int,
             stage2: Callable[[int, Iterator[Item]], Iterable], to_driver: int | None = None,
             on_driver: Callable[[list], Future | None] | None = None) -> list:
    """``stage2(key, items)`` for every key in ``range(keys)`` but ``to_driver``, a task each, the
    items those of the RDD ``stage1`` (``(key, item)`` pairs) and then ``driver_items`` (written
    away one by one while stage 1 runs, so the driver never holds them all); returns
    stage 2's results in key order, then the items keyed ``to_driver`` as they are (rows stage 1
    makes for the driver: they reach it from the files, not through Spark). ``on_driver`` is given
    those items as soon as stage 1 is done, their tables still where they lie (``Stored``, e.g. for
    ``stored_frame``); the future it may return is waited for before the files go. ``work_dir``:
    the run's scan directory (None: a temporary directory, which only local executors see)."""
    directory = tempfile.mkdtemp(prefix="exchange-", dir=work_dir)
    reading: Future | None = None
    try:
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="exchange-driver") as pool:
            from_driver = pool.submit(lambda: list(_store(driver_items, directory)))
            produced = stage1.mapPartitions(lambda items: _store(items, directory)).collect()
            produced += from_driver.result()
        by_key: dict[int, list[tuple]] = defaultdict(list)
        for key, item in produced:
            by_key[key].append(item)
        groups = [(key, by_key.get(key, [])) for key in range(keys) if key != to_driver]
        if on_driver is not None:
            reading = on_driver(by_key.get(to_driver, []))
        load = _loader()
        driver = [load(item) for item in by_key.get(to_driver, [])]

        def run(group: tuple[int, list[tuple]]) -> Iterable:
            load = _loader()
            return stage2(group[0], ((group[0], load(item)) for item in group[1]))

        return spark.sparkContext.parallelize(groups, max(1, len(groups))).flatMap(run).collect() + driver
    finally:
        if reading is not None:
            wait([reading])         # its failure is its owner's to raise
        shutil.rmtree(directory, ignore_errors=True)
