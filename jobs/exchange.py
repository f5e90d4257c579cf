"""The run's bulk Arrow exchange between two Spark stages, through the scan directory.

A stage-1 task's items are ``(key, (..., table))``; stage 2 gets each key's items. Spark's own
shuffle would carry every table from the Python worker through the JVM (pickled, written to a
shuffle file, read back and sent to the next worker): the tables the audit and the consume queue
rebuild exchange are most of the bytes a recovery moves after its scan. Here a stage-1 task
writes each table to an Arrow IPC file of its own in the exchange directory and sends only the
file's path through Spark; stage 2 maps the files. The directory lies in the run's scan directory,
which the driver and every executor see (``--scan-dir``), and is removed once stage 2 is done.

Stage 2 sees each key's items in the order stage 1 made them (stage-1 tasks in order, each task's
items in the order it yielded them).
"""
from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections import defaultdict
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator

import pyarrow as pa

Item = tuple[int, tuple]


@dataclass(frozen=True)
class Stored:
    """A table an item carried, as the path of the file it was written to."""

    path: str


def _store(items: Iterable[Item], directory: str) -> Iterator[Item]:
    prefix = uuid.uuid4().hex[:12]
    for n, (key, item) in enumerate(items):
        if item and isinstance(item[-1], pa.Table):
            path = os.path.join(directory, f"{key}-{prefix}-{n}.arrow")
            with pa.OSFile(path, "wb") as sink, pa.ipc.new_file(sink, item[-1].schema) as writer:
                writer.write_table(item[-1])
            item = (*item[:-1], Stored(path))
        yield key, item


def _load(item: tuple) -> tuple:
    if item and isinstance(item[-1], Stored):
        with pa.memory_map(item[-1].path) as source:
            return (*item[:-1], pa.ipc.open_file(source).read_all())
    return item


def exchange(spark, work_dir: str | None, stage1, driver_items: list[Item], keys: int,
             stage2: Callable[[int, Iterator[Item]], Iterable], to_driver: int | None = None) -> list:
    """``stage2(key, items)`` for every key in ``range(keys)`` but ``to_driver``, a task each, the
    items those of the RDD ``stage1`` (``(key, item)`` pairs) and then ``driver_items``; returns
    stage 2's results in key order, then the items keyed ``to_driver`` as they are (rows stage 1
    makes for the driver: they reach it from the files, not through Spark). ``work_dir``: the
    run's scan directory (None: a temporary directory, which only local executors see)."""
    directory = tempfile.mkdtemp(prefix="exchange-", dir=work_dir)
    try:
        produced = stage1.mapPartitions(lambda items: _store(items, directory)).collect()
        by_key: dict[int, list[tuple]] = defaultdict(list)
        for key, item in [*produced, *_store(driver_items, directory)]:
            by_key[key].append(item)
        groups = [(key, by_key.get(key, [])) for key in range(keys) if key != to_driver]
        results = spark.sparkContext.parallelize(groups, max(1, len(groups))).flatMap(
            lambda group: stage2(group[0], ((group[0], _load(item)) for item in group[1]))).collect()
        return results + [_load(item) for item in by_key.get(to_driver, [])]
    finally:
        shutil.rmtree(directory, ignore_errors=True)
