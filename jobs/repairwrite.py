"""Passes 4, 5 and 7 of a recovery (``jobs.recover``): the repaired store, written into a temporary
directory of the run's own while the audit (6) runs beside it (``jobs.auditwrite``: each on a
Spark job group of its own, either failing cancels the other and nothing is left behind).

  4. rebuild consume queues from every record below the cut: written by the audit's queue buckets
     as they compare them (``jobs.rebuild.AuditedQueues``: each queue whole, one exchange for the
     queues); where the audit's records are not the rebuild's, by a job of its own: CQ files as parts
     packed into a bounded number of tasks (a huge queue is split by file, small queues share a
     task; a queue whose files do not join up into one sequential put is rebuilt whole);
  5. rebuild index files from the same records, one task per index file;
  6. audit: what is inconsistent and what the broker's own restart would lose or rewind
     (``jobs/findings.py``, the same findings ``jobs/audit.py`` reports);
  7. write the repaired store into a temporary directory of this run's own (the commitlog placed
     by a task per file, ``store_reader.repair.placement``: cloned, copied or with ``--link`` hard-linked,
     the cut file rewritten, each hashed for the manifest; each committed consumer offset moved
     where the consumer's next pull on the rebuilt queues would move it, the originals in the
     manifest); ``jobs.auditwrite`` renames it into place once the audit succeeded too;
  7b. with ``--salvage``, before the checkpoint and the manifest: the lost records a producer would
     send again re-appended after the truncation point and dispatched (``jobs.salvage.reappend``).
"""
from __future__ import annotations

import errno
import logging
import os
import shutil
import threading
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Sequence

from jobs import salvage as salvage_job
from jobs.rebuild import (AuditedQueues, audit_writes_queues, index_put_counts, rebuild_consume_queues,
                          rebuild_index_files)
from jobs.recoverreport import RunReport, manifest
from jobs._spark.sparkutil import Passes, await_tasks
from store_reader.formats import consumequeue, rocksdbcq
from store_reader.repair import (checkpoint, config, dledger as dledger_repair, index, placement, publish,
                                 queues as repair_queues, scanned)
from store_reader.io import hashing, manifest as io_manifest
from store_reader import open_store
from store_reader.broker import cqueue, cut, timerrecovery, versions
from store_reader.exceptions import StoreReaderError
from store_reader.store import Store

# the recovery run's log lines, under the job's name like the rebuilds' (``jobs.rebuild``)
log = logging.getLogger("jobs.recover")


def _digests(root: Path, sub: str) -> dict[str, str]:
    """SHA-256 of every file under ``root/sub`` by path relative to ``root`` (for the manifest)."""
    files = io_manifest.tree_files(str(root / sub))
    got = hashing.sha256_files(p for _, p in files)
    return {os.path.join(sub, rel): got[p] for rel, p in files}


def place_commitlog(spark, store: Store, kept: Sequence[cut.CommitLogFileState], dest_dir: str,
                    link: bool, digests: dict[str, hashing.SourceDigest] | None = None
                    ) -> list[placement.PlacedSegment]:
    """The repaired store's commitlog files under ``dest_dir``, one task per kept file
    (``placement.place_segment``: cloned, copied or linked, the cut file rewritten), so no
    segment's bytes pass through the driver; returns each file's digest and how it was placed.
    ``digests``: the scan's, by file name (a file placed whole is not read again for its digest)."""
    srcs = {c.name: c.path for c in store.commitlog_files}
    digests = digests or {}
    tasks = [(srcs[p.name], os.path.join(dest_dir, p.name), p.keep, p.file_size, p.link, digests.get(p.name))
             for p in placement.plan(kept, link)]
    if not tasks:
        return []
    return spark.sparkContext.parallelize(tasks, len(tasks)).map(lambda t: placement.place_segment(*t)).collect()


def build_repaired_store(spark, store: Store, report: RunReport, out: Path,
                         cancel: threading.Event | None = None, group: str | None = None,
                         queued: threading.Event | None = None, replayed: threading.Event | None = None,
                         audited: AuditedQueues | None = None) -> Path:
    """Passes 4-7 into this invocation's own ``<out>.tmp-<run id>-<nonce>``, MANIFEST.json
    included; returns that directory, still marked incomplete (``publish.TMP_MARKER``) until
    ``publish.publish`` renames it into place.
    On any failure nothing is left behind. ``cancel``: set when another pass of the run failed (no
    further Spark job starts); ``group``: the Spark job group of this
    build's jobs, which run on threads of their own; ``queued``: set once the rebuild jobs are
    being submitted; ``replayed``: set once ``report.prediction`` is whole (the build may start
    as soon as the cut is known, ``prediction.predict(on_cut=...)``: what reads the broker's replay,
    the kept queues' ranges, the salvage and the manifest, waits for it); ``audited``: the run's
    audit writes the consume queues in its own exchange (``AuditedQueues``) where it can
    (``audit_writes_queues``)."""
    pred = report.prediction
    version_5x = versions.is_5x(pred.broker_version)
    index_tags = versions.index_tag_keys(pred.broker_version)
    cfg = store.config
    end = pred.max_phy_offset
    cancel = cancel or threading.Event()
    group = group or f"{report.run_id}-write-{uuid.uuid4().hex[:8]}"

    tmp = publish.new_temporary(out, report.run_id)
    try:
        # passes 4-5 and the commitlog placement write disjoint parts of tmp and run side by side:
        # once the index puts are counted, the index files' job first (FIFO: its long tasks start
        # at once), the consume queue job and the placement (a task per kept file) next to it;
        # each hashes its own files for the manifest as soon as it is done
        (tmp / "consumequeue").mkdir()
        (tmp / "index").mkdir()
        # a DLedger store's data files are its commitlog (R§16)
        log_dir = tmp / "commitlog" if store.dledger is None else dledger_repair.data_dir(store, tmp)
        log_dir.mkdir(parents=True)
        log_rel = log_dir.relative_to(tmp).as_posix()
        expected = sum(s.records for s in report.summaries if s.file_start < end)
        records = report.records if report.records and scanned.serves_rebuild(cfg, version_5x) else None
        index_submitted = threading.Event()
        with ThreadPoolExecutor(max_workers=3, thread_name_prefix="recover-write") as pool:
            passes = Passes(spark, pool, group, cancel)

            def commitlog() -> dict[str, str]:
                passes.wait(index_submitted)   # queued behind the index files' long tasks
                t = time.monotonic()
                placed = place_commitlog(spark, store, pred.commitlog_files, str(log_dir), report.link_commitlog,
                                         report.digests)
                hows = Counter(p.how for p in placed)
                report.log_pass("write commitlog", t, f"{len(pred.commitlog_files)} files kept ("
                                f"{', '.join(f'{n} {how}' for how, n in sorted(hows.items()))}), end at "
                                f"phy {end}, {len(pred.deleted_commitlog_files)} dropped")
                return {f"{log_rel}/{f.name}": p.sha256 for f, p in zip(pred.commitlog_files, placed)}

            def index_files(counts: list[tuple[int, int]], t: float):
                index_submitted.set()  # the queue job builds its RDD first: this job is queued ahead
                passes.check()
                digests: dict[str, str] = {}       # hashed by the tasks that wrote them
                headers = rebuild_index_files(spark, store, end, version_5x, index_tags, str(tmp / "index"), counts,
                                              records, digests)
                report.log_pass("rebuild index", t, f"{len(headers)} files, "
                                f"{sum(h.index_count - 1 for h in headers)} entries")
                return headers, {f"index/{name}": d for name, d in digests.items()}

            def consume_queues():
                passes.wait(index_submitted)
                folded = audited if audited is not None and audit_writes_queues(store, version_5x) else None
                if folded is not None:
                    folded.offer(str(tmp))
                if queued is not None:
                    queued.set()
                t = time.monotonic()
                if folded is not None:
                    passes.wait(folded.done)
                    if folded.result is not None:
                        rebuilt, digests = folded.result
                        report.log_pass("rebuild consume queues", t, f"{rebuilt.queues.num_rows} queues, "
                                        f"{sum(rebuilt.queues['entries'].to_pylist())} entries, written whole "
                                        f"by the audit's {rebuilt.tasks} queue buckets, "
                                        f"{sum(hi - lo for _, _, lo, hi, _ in rebuilt.fillers)} filler units")
                        return rebuilt.queues, digests

                def kept() -> dict[tuple[str, int], tuple[int, int]]:
                    passes.wait(replayed)
                    return {k: (q.min_offset, q.max_offset) for k, q in pred.consume_queues.items()}

                rebuilt = rebuild_consume_queues(spark, store, end, version_5x, str(tmp), expected, kept, records,
                                                 report.scan_dir)
                report.log_pass("rebuild consume queues", t, f"{rebuilt.queues.num_rows} queues, "
                                f"{sum(rebuilt.queues['entries'].to_pylist())} entries, {rebuilt.parts} "
                                f"parts in {rebuilt.tasks} tasks, {len(rebuilt.rebuilt_whole)} rebuilt whole, "
                                f"{sum(hi - lo for _, _, lo, hi, _ in rebuilt.fillers)} filler units")
                return rebuilt.queues, _digests(tmp, "consumequeue")

            copying = passes.submit(commitlog)
            t = time.monotonic()
            counts = passes.result(passes.submit(index_put_counts, spark, store, report.summaries, end,
                                                 version_5x, index_tags, records))
            indexing = passes.submit(index_files, counts, t)
            queueing = passes.submit(consume_queues)
            headers, index_digests = passes.result(indexing)
            queues, queue_digests = passes.result(queueing)
            commitlog_digests = passes.result(copying)
        passes.wait(replayed)
        if report.salvage:
            t = time.monotonic()
            report.salvaged = salvage_job.reappend(spark, store, pred, report.summaries, str(tmp), queues)
            report.log_pass("salvage", t, f"{report.salvaged.records.num_rows} lost records re-appended, "
                            f"end at phy {report.salvaged.end}")
        last_ts = max((ts for _, ts in counts), default=0)
        last_cq_ts = max(queues["last_store_timestamp"].to_pylist(), default=0)
        confirm = next((s.file_start + s.last_record_position for s in reversed(report.summaries)
                        if s.last_record_position is not None and
                        s.file_start + s.last_record_position < end), 0)
        if pred.controller is not None:       # controller mode: as the broker's recovery leaves it
            confirm = pred.controller.corrected
        if report.salvaged is not None:
            last_ts, last_cq_ts, headers, confirm = report.salvaged.checkpoint_inputs(last_ts, last_cq_ts,
                                                                                      headers, confirm)
        ckpt = checkpoint.repaired_checkpoint(int(last_ts), int(last_cq_ts),
                                          index.full_index_end_timestamp(headers, cfg.maxIndexNum),
                                          confirm, version_5x)
        checkpoint.write_checkpoint_file(tmp, ckpt, version_5x)
        report.config_left_out = config.copy_config(store.root, tmp)
        if store.dledger is not None:
            t = time.monotonic()
            dledger_repair.write_dledger_files(store, pred.dledger, tmp)
            dledger_repair.check_recovers_unchanged(open_store(tmp, cfg, read_dledger=True), pred.dledger)
            report.log_pass("dledger files", t, f"index units to entry {pred.dledger.ledger_end_index}, "
                            f"checkpoint committedIndex {pred.dledger.ledger_end_index}")
        if pred.controller is not None:
            config.copy_controller_files(store, tmp, end)
        for line in report.config_left_out:
            log.warning("config file left out of the repaired store (the broker reads its .bak "
                        "instead): %s", line)
        if version_5x:
            # after config/: its timercheck is replaced by one that agrees with the rebuilt log
            t = time.monotonic()
            staged = None if isinstance(store.root, Path) else \
                timerrecovery.stage_remote(store.root, str(tmp.parent / f"{tmp.name}.timer-input"))
            try:
                timer = timerrecovery.repair_timer_store(
                    staged or str(store.root), str(tmp), cfg,
                    timerrecovery.timer_queue_of(str(tmp / "consumequeue"), cfg.cq_file_size), end)
            finally:
                if staged is not None:
                    shutil.rmtree(staged, ignore_errors=True)
            if timer is not None:
                report.timer_store = timer.as_dict()
                report.log_pass("timer store", t, f"{timer.units_kept} of {timer.units_in} units kept, "
                                f"queue offset {timer.queue_offset}")
        served_rocksdb = store.inventory.cq_served_by == "rocksdb"
        if pred.rocksdb_beside_max_phy_offset is not None or served_rocksdb:
            # the RocksDB queue as the broker's restart leaves it: [5.4+] beside the file queues
            # (R§15.2), or the only one (R§15.1), whose file queues, built above, are then dropped
            t = time.monotonic()
            where = store.inventory.rocksdb_cq_dir or "consumequeue" if served_rocksdb else \
                cqueue.combined_rocksdb_dir(cfg, pred.broker_version)
            puts, max_keys = repair_queues.rocksdb_puts(tmp, cfg, pred.dispatched_from if pred.dispatched_from is not None
                                                 else end)
            if served_rocksdb:
                for ref in consumequeue.list_queues(tmp):
                    shutil.rmtree(os.path.dirname(ref.path), ignore_errors=True)
            rocksdbcq.write_consume_queue(os.path.join(store.root, where), str(tmp / where), puts, max_keys, end)
            report.log_pass("rocksdb consume queue", t, f"{sum(map(len, puts.values()))} units put from phy "
                            f"{pred.dispatched_from}, max phy offset {end}")
        if not report.keep_consumer_offsets:
            ranges = {(r["topic"], r["queue_id"]): (r["min_offset"], r["max_offset"]) for r in
                      queues.select(["topic", "queue_id", "min_offset", "max_offset"]).to_pylist()}
            report.offsets_moved = config.correct_consumer_offsets(tmp / "config", ranges)
        passes.check()
        t = time.monotonic()
        known = {k: v for k, v in {**commitlog_digests, **index_digests, **queue_digests}.items()
                 if report.salvaged is None or k not in report.salvaged.touched}
        io_manifest.write_manifest(str(tmp), manifest(store, report, io_manifest.tree_manifest(
            str(tmp), skip={publish.TMP_MARKER}, known=known)))
        report.log_pass("write manifest", t, f"sizes and SHA-256 of every output file "
                        f"({len(known)} hashed as they were written)")
        return tmp
    except BaseException as exc:
        # a failed or cancelled job returns before its running tasks end: they may still write
        try:
            await_tasks(spark, group)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
            raise StoreReaderError("disk full while writing the repaired store; nothing was left "
                                   "behind", tmp) from None
        raise
