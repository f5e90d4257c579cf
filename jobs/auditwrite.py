"""Pass 6 (the audit) and passes 4-7 (the repaired store, ``jobs.repairwrite``) of a recovery
side by side, each on a Spark job group of its own: the write may start before the audit, as soon as
the broker's cut is known (``start_write``); either failing cancels the other and nothing is left
behind (``abandon_write``, ``audit_and_write``); once both succeeded the repaired store is renamed
into place (``store_reader.repair.publish``).
"""
from __future__ import annotations

import shutil
import threading
import time
import uuid
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pyarrow as pa

from jobs import findings as fnd
from jobs.rebuild import AuditedQueues
from jobs.recoverreport import RunReport
from jobs.repairwrite import build_repaired_store
from jobs._spark.sparkutil import await_tasks, cancel_job_group, join_job_group
from store_reader.repair import publish
from store_reader.store import Store


@dataclass
class StartedWrite:
    """Passes 4-7 (``build_repaired_store``) running on a thread of their own, their Spark jobs in
    ``group``; ``cancel`` stops them, ``queued`` is set once their rebuild jobs are submitted."""

    future: Future
    group: str
    cancel: threading.Event
    queued: threading.Event
    queues: AuditedQueues


def start_write(spark, report: RunReport, store: Store, out: Path,
                replayed: threading.Event | None = None) -> StartedWrite:
    """Start building the repaired store (``build_repaired_store``; ``replayed``: see there)."""
    group, cancel, queued = f"{report.run_id}-write-{uuid.uuid4().hex[:8]}", threading.Event(), threading.Event()
    queues = AuditedQueues()
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="recover-build")
    future = pool.submit(build_repaired_store, spark, store, report, out, cancel, group, queued, replayed, queues)
    pool.shutdown(wait=False)          # its one thread ends with the build
    return StartedWrite(future, group, cancel, queued, queues)


def abandon_write(spark, write: StartedWrite) -> None:
    """Stop a started write the run no longer wants (a pass before the audit failed): nothing of
    it is left behind."""
    write.cancel.set()
    cancel_job_group(spark, write.group)
    wait([write.future])
    if write.future.exception() is None:
        shutil.rmtree(write.future.result(), ignore_errors=True)


def audit_and_write(spark, store: Store, report: RunReport, out: Path | None, overwrite: bool,
                    on_lost: Callable[[list], Future] | None = None,
                    write: StartedWrite | None = None) -> None:
    """Pass 6 (the audit) and, with ``out``, passes 4-7 side by side: both only read the input
    store and the prediction. Their Spark jobs share the cores, the write's queued first (Spark
    schedules FIFO across threads). The repaired store is placed only once both succeeded; when
    either fails the other is cancelled (its Spark job group), nothing is left behind and the
    first failure is raised. ``on_lost``: given the audit's lost messages' parts as soon as it has them;
    ``write``: the write, when it was started already (``start_write``)."""
    pred = report.prediction

    def audit(group: str | None, after: Callable[[], object] | None = None,
              queues: AuditedQueues | None = None) -> None:
        join_job_group(spark, group)
        if after is not None:
            after()
        t = time.monotonic()
        report.findings = fnd.audit(spark, store, pred, report.summaries, records=report.records or None,
                                    work_dir=report.scan_dir, on_lost=on_lost, queues=queues)
        if queues is not None:
            queues.finish()
        report.log_pass("audit", t, fnd.count_line(report.findings))

    if out is None:
        audit(None)
        return
    # the write's jobs first (Spark runs jobs FIFO): its single long task per index file starts
    # at once, and the write never trails the audit; the audit's tasks fill the rest
    write = write or start_write(spark, report, store, out)
    building, cancel = write.future, write.cancel
    groups = {"audit": f"{report.run_id}-audit-{uuid.uuid4().hex[:8]}", "write": write.group}

    def write_queued() -> None:
        while not write.queued.wait(0.05) and not building.done():
            pass

    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="recover") as pool:
        auditing = pool.submit(audit, groups["audit"], write_queued, write.queues)
        futures = {building: "write", auditing: "audit"}
        first: BaseException | None = None
        try:
            done, _ = wait(futures, return_when=FIRST_EXCEPTION)
            first = next((f.exception() for f in done if f.exception() is not None), None)
        except BaseException as exc:       # interrupted while waiting
            first = exc
        if first is not None:
            cancel.set()
            for f, name in futures.items():
                if not f.done():
                    cancel_job_group(spark, groups[name])
        wait(futures)
    if first is None:
        first = next((f.exception() for f in futures if f.exception() is not None), None)
    if first is not None:
        if building.exception() is None:   # complete, but the run failed: it goes too
            shutil.rmtree(building.result(), ignore_errors=True)
        if write.queues.out_root is not None:
            # the audit's tasks write the queues into the build: a straggler may outlive its job
            await_tasks(spark, groups["audit"])
            shutil.rmtree(write.queues.out_root, ignore_errors=True)
        raise first
    t = time.monotonic()
    publish.publish(building.result(), out, overwrite)
    report.log_pass("place repaired store", t, f"fsync'd, renamed to {out}")
    report.written = True
