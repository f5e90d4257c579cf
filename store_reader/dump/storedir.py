"""How ``jobs.dump`` prints a store directory: its layout and broker settings, the commitlog
segments with how each ends, the consume queues, the index files' headers, the checkpoint, the
``abort`` and ``lock`` files and the config files.
"""
from __future__ import annotations

from pathlib import Path

from store_reader.dump import dledger as dledgerreport
from store_reader.dump.files import dump_checkpoint
from store_reader.dump.printer import Printer, iso_ms
from store_reader.formats import rocksdbcq
from store_reader.formats import timerstore as ts
from store_reader.audit.view import StoreView
from store_reader.formats.checkpoint import lock_status
from store_reader.formats.consumequeue import list_queues, slots_per_file
from store_reader.exceptions import StoreReaderError
from store_reader.io.fsutil import list_dir
from store_reader.formats.indexfile import read_header


def dump_overview(p: Printer, view: StoreView) -> None:
    store, cfg = view.store, view.config
    hints = store.version_hints()
    p.emit(f"store: {store.root} broker config: {cfg.source or 'broker defaults'} generation: "
           f"{view.version} (hints: {', '.join(k for k in hints if k != 'broker_5x') or 'none'})",
           {"type": "store", "root": str(store.root), "broker_config": cfg.source,
            "broker_version": view.version, "hints": hints})
    inv = store.inventory
    p.emit(f"modes: {inv.modes_text()} ({len(inv.entries)} entries classified, "
           f"{len(inv.unknown)} unknown)",
           {"type": "modes", "modes": list(inv.modes), "cq_served_by": inv.cq_served_by,
            "unknown": [e.path for e in inv.unknown]})
    p.emit(f"layout: mappedFileSizeCommitLog: {cfg.mappedFileSizeCommitLog} "
           f"mappedFileSizeConsumeQueue: {cfg.cq_file_size} ({slots_per_file(cfg.cq_file_size)} "
           f"entries) maxHashSlotNum: {cfg.maxHashSlotNum} maxIndexNum: {cfg.maxIndexNum} (index "
           f"file {cfg.index_file_size} bytes) checkCRCOnRecover: {str(cfg.checkCRCOnRecover).lower()}",
           {"type": "layout", "mapped_file_size_commitlog": cfg.mappedFileSizeCommitLog,
            "cq_file_size": cfg.cq_file_size, "max_hash_slot_num": cfg.maxHashSlotNum,
            "max_index_num": cfg.maxIndexNum, "index_file_size": cfg.index_file_size,
            "commitlog_dirs": [str(d) for d in store.commitlog_dirs]})
    p.emit(f"commitlog: {len(view.summaries)} segments in {', '.join(map(str, store.commitlog_dirs))}"
           + (" (DLedger entries, F§16)" if store.dledger is not None else ""),
           {"type": "commitlog", "segments": len(view.summaries), "dledger": store.dledger is not None})
    for s in view.summaries:
        end = s.end_reason + (f" ({s.end_check})" if s.end_check else "")
        p.emit(f"  {s.segment} size: {s.file_size} records: {s.records} validBytes: {s.valid_bytes} "
               f"end: {end}" + (f" lost: {s.records_after_cut}" if s.records_after_cut else ""),
               lambda s=s: {"type": "segment", **s.as_row()})
    if store.dledger is not None:
        for text, obj in dledgerreport.lines(store, [view.version]):
            p.emit(text, obj)
    queues = list_queues(store.root)
    p.emit(f"consume queues: {len(queues)}", {"type": "consume_queues", "queues": len(queues)})
    for q in queues:
        names = sorted(e.name for e in list_dir(q.path, "consume queue") if e.is_file())
        span = f" {names[0]}..{names[-1]}" if len(names) > 1 else "".join(f" {n}" for n in names)
        p.emit(f"  {q.topic}/{q.queue_id}: {len(names)} files{span}",
               {"type": "consume_queue", "topic": q.topic, "queue_id": q.queue_id, "files": names})
    if store.inventory.cq_served_by == "rocksdb":      # storeType=defaultRocksDB (R§15.1)
        db = rocksdbcq.served_consume_queue(store)
        p.emit(f"RocksDB consume queue: {len(db.queues)} queues in {db.path}, max phy offset "
               f"{db.max_phy_offset}", {"type": "rocksdb_consume_queues", "queues": len(db.queues),
                                        "maxPhyOffset": db.max_phy_offset})
        for (topic, qid), q in sorted(db.queues.items()):
            p.emit(f"  {topic}/{qid}: {len(q.units)} units, max {q.max and q.max[1]}, min {q.min and q.min[1]}",
                   {"type": "rocksdb_consume_queue", "topic": topic, "queue_id": qid, "units": len(q.units),
                    "max": q.max and q.max[1], "min": q.min and q.min[1]})
    index = [e for e in list_dir(store.index_dir, "index") if e.is_file()]
    p.emit(f"index: {len(index)} files", {"type": "index", "files": len(index)})
    for e in index:
        try:
            h = read_header(e.path)
        except StoreReaderError as exc:
            p.emit(f"  {e.name}: {exc.reason}",
                   {"type": "index_file", "name": e.name, "error": exc.reason})
            continue
        p.emit(f"  {e.name} size: {e.size()} begin: {iso_ms(h.begin_timestamp)} end: "
               f"{iso_ms(h.end_timestamp)} phy: {h.begin_phy_offset}..{h.end_phy_offset} "
               f"hashSlotCount: {h.hash_slot_count} indexCount: {h.index_count}",
               {"type": "index_file", "name": e.name, **h.to_dict()})
    if store.checkpoint_path.exists():
        dump_checkpoint(p, store.checkpoint_path)
    else:
        p.emit("checkpoint: missing", {"type": "checkpoint", "file": str(store.checkpoint_path),
                                       "exists": False})
    lock = lock_status(store.root)
    lock_text = ("held by a running broker" + (f" (pid {lock.pid})" if lock.pid else "")
                 if lock.locked else "present, not held" if lock.exists else "absent")
    abort = "present (the next start runs the abnormal recovery)" if store.abort_exists else "absent"
    p.emit(f"abort: {abort} lock: {lock_text}",
           {"type": "process_state", "abort": store.abort_exists, "lock_exists": lock.exists,
            "lock_held": lock.locked, "lock_pid": lock.pid})
    if isinstance(store.root, Path) and (store.root / ts.TIMERLOG_DIR).is_dir():
        scan = ts.scan_timerlog(str(store.root / ts.TIMERLOG_DIR), cfg.mappedFileSizeTimerLog)
        wheel = ts.read_wheel(str(store.root / ts.TIMERWHEEL_FILE))
        slots = 0 if wheel is None else int((wheel["time_slot"] != 0).sum())
        delayed = scan.delayed_time_ms()
        span = f", delayed {iso_ms(int(delayed.min()))}..{iso_ms(int(delayed.max()))}" if len(delayed) else ""
        p.emit(f"timer store: {len(scan.units)} units in {len(scan.files)} timerlog files (log end "
               f"{scan.end}{span}), {'no timerwheel' if wheel is None else f'{slots} wheel slots in use'}",
               {"type": "timer_store", "units": len(scan.units), "files": len(scan.files), "end": scan.end,
                "bad_at": scan.bad_at, "wheel_slots": None if wheel is None else slots})
    configs = [e for e in list_dir(store.config_dir, "config") if e.is_file()]
    sizes = {e.name: e.size() for e in configs}
    p.emit("config: " + (", ".join(f"{n} ({b} bytes)" for n, b in sizes.items()) or "none"),
           {"type": "config_files", "files": sizes})
