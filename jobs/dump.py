"""Print and verify the files of a RocketMQ broker store: the store's ``kafka-dump-log.sh``.

    python -m jobs.dump FILE|STORE [--deep] [--verify] [--verify-index-only] [--max-bytes N]
                                   [--print-body] [--json] [--broker-config FILE]

Spark-free on purpose (it reads through ``store_reader`` only and never imports pyspark), so it
starts in a fraction of a second and runs next to a broker.

What it prints, chosen by the file's place in the store
-------------------------------------------------------
(the printers: ``store_reader.dump.commitlog``, ``store_reader.dump.files``, ``store_reader.dump.storedir``)

``commitlog/<20 digits>``
    One line per record (kafka-dump-log style): phy offset, position, size, topic, queue id, queue
    offset, store time, keys, offsetMsgId, CRC verdict; then where and why the segment's valid data
    ends (end-of-file marker, zero padding, torn tail, corrupt record) and, after a corrupt record,
    the intact records behind it (``lost``: the broker's recovery discards them).
``consumequeue/<topic>/<queueId>/<20 digits>``
    One line per entry (queue offset, position, phy offset, size, tags code); runs of all-zero slots
    are collapsed into one line.
``index/<yyyyMMddHHmmssSSS>``
    The header, then one line per entry in use (``--deep``: entry times and the slot table).
``checkpoint``, ``config/*.json``
    The checkpoint values with their derived minTimestamps; a config file as parsed (fastjson
    tolerant) and which generation the broker would load.
a store directory
    An overview: layout and broker settings, commitlog segments with how each ends, consume queues,
    index headers, checkpoint, ``abort``/``lock``, config files.

``--deep`` decodes every record field (properties, tags, hosts, sysflag, ...), ``--print-body``
adds the body (UTF-8 when printable, else base64), ``--max-bytes N`` stops the listing before the
first record/entry that does not end within the file's first N bytes (verification always reads
whole files), ``--json`` prints JSON lines (field names of ``schemas.MESSAGE`` for records).

Verification (``--verify``; ``--verify-index-only`` runs only the index part)
------------------------------------------------------------------------------
The checks are ``store_reader.audit`` (the Spark audit calls the same ones); every finding kind,
its meaning and severity is in docs/finding-kinds.md (``store_reader.audit.kinds``). An
*anomaly* is something in the files the broker acts on when it loads and recovers this store,
reported with file, byte position and, for commitlog bytes, phy offset; entry-level anomalies of one
kind are grouped into runs of consecutive entries (first position and count), at most ``MAX_RUNS``
runs per kind and file. Text output prints ``ANOMALY``, ``NOTE`` and ``UNREADABLE`` lines and a last
``verify:`` summary line; ``--json`` the same as objects (``kind``: dump's name, ``finding``: the
kind of the one vocabulary; ``details`` holds the facts behind each message). A single FILE is
verified against the whole store it sits in; only the anomalies located in it are shown.

Exit codes: 0 printed (and, with ``--verify``, no anomaly); 1 anomalies found; 2 could not read:
missing path, unreadable file, a file that is not the store format its place says (random bytes,
a consume queue file that is not whole entries, an index file of another size), usage errors. A
verification that met an unreadable file still reports everything else, then exits 2.
"""
from __future__ import annotations

import argparse
import errno
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from jobs import console
from jobs._spark import stopping
from store_reader.dump.commitlog import dump_segment
from store_reader.dump.files import (dump_checkpoint, dump_config, dump_cq_file, dump_index_file, dump_timercheck,
                                     dump_timerlog_file, dump_timerwheel)
from store_reader.dump.printer import Printer
from store_reader.dump.storedir import dump_overview
from store_reader.audit import StoreView, verify_store, verify_timer
from store_reader.audit.commitlog import not_a_segment, verify_commitlog
from store_reader.audit.files import verify_checkpoint, verify_config
from store_reader.audit.index import open_index, verify_index
from store_reader.audit.queuefiles import verify_consume_queues
from store_reader.audit.report import MAX_RUNS, Findings, count_of, norm_path
from store_reader.formats.brokerconf import BrokerConfig, broker_config_of
from store_reader.exceptions import CannotRead, StoreReaderError, UnreadableFileError
from store_reader.store import open_store
from store_reader.io.storefs import StoreLocation, location

EXIT_OK, EXIT_ANOMALIES, EXIT_UNREADABLE = 0, 1, 2
__all__ = ["main", "run", "verify_store", "StoreView", "open_store", "MAX_RUNS", "CannotRead"]


# -- what a path is ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class StoreFile:
    """A file located by its place in the store."""

    kind: str                     # commitlog | consumequeue | index | checkpoint | config
    path: Path | StoreLocation
    root: Path | StoreLocation
    topic: str | None = None
    queue_id: int | None = None


def classify_path(path: Path | StoreLocation) -> StoreFile:
    """The kind of ``path`` (local or ``storefs.StoreLocation``) from where it sits in the store
    tree (``store-format.md`` §1)."""
    parent = path.parent
    if parent.name == "commitlog":
        return StoreFile("commitlog", path, parent.parent)
    if parent.name == "data" and parent.parent.name.startswith("dledger-"):   # F§16.1
        return StoreFile("commitlog", path, parent.parent.parent)
    if parent.name == "index":
        return StoreFile("index", path, parent.parent)
    if parent.parent.parent.name == "consumequeue":
        queue_dir = path.parent
        try:
            qid = int(queue_dir.name)
        except ValueError:
            raise CannotRead(f"queue directory {queue_dir.name!r} is not a queue id", path) from None
        return StoreFile("consumequeue", path, queue_dir.parent.parent.parent, queue_dir.parent.name, qid)
    if path.name == "checkpoint":
        return StoreFile("checkpoint", path, parent)
    if parent.name == "timerlog":
        return StoreFile("timerlog", path, parent.parent)
    if path.name == "timerwheel":
        return StoreFile("timerwheel", path, parent)
    if parent.name == "config" and path.name == "timercheck":
        return StoreFile("timercheck", path, parent.parent)
    if parent.name == "config" and (path.name.endswith(".json") or path.name.endswith(".json.bak")):
        return StoreFile("config", path, parent.parent)
    raise CannotRead("not a store file: expected commitlog/<file>, dledger-<selfId>/data/<file>, "
                     "consumequeue/<topic>/<queueId>/<file>, index/<file>, checkpoint, config/*.json, "
                     "timerlog/<file>, timerwheel or config/timercheck", path)


def verify_file(view: StoreView, sf: StoreFile, index_only: bool) -> Findings:
    """The anomalies located in one file (the checks that need the rest of the store read it)."""
    found = Findings()
    if sf.kind == "index":
        verify_index(view, found, only=sf.path)
    elif index_only:
        raise CannotRead("--verify-index-only takes a store or an index file", sf.path)
    elif sf.kind == "commitlog":
        verify_commitlog(view, found)
    elif sf.kind == "consumequeue":
        assert sf.topic is not None and sf.queue_id is not None
        verify_consume_queues(view, found, only=(sf.topic, sf.queue_id))
    elif sf.kind == "checkpoint":
        verify_checkpoint(view.store, found)
    elif sf.kind in ("timerlog", "timerwheel", "timercheck"):
        verify_timer(view, found)
    else:
        verify_config(view.store, found, only=sf.path)
    return found.only(sf.path)


def report(p: Printer, found: Findings, view: StoreView | None = None) -> int:
    """Print notes, anomalies and the summary line; the exit code."""
    if view is not None:
        # the shared passes' errors, but for a file already reported (a position None: at any byte)
        known = {(norm_path(e.path or ""), e.position) for e in found.unreadable}
        paths = {path for path, _ in known}
        found.unreadable += [e for e in view.errors if (norm_path(e.path or ""), e.position) not in known
                             and not (e.position is None and norm_path(e.path or "") in paths)]
    for n in found.notes:
        p.emit(f"NOTE {n.kind} {n.where()}: {n.message}", {**n.as_json(), "type": "note"})
    for a in found.anomalies:
        p.emit(a.text(), a.as_json)
    for e in found.unreadable:
        p.emit(f"UNREADABLE {e}", {"type": "error", "file": e.path, "position": e.position,
                                   "message": e.reason})
    alerting = found.alerting
    files = len({norm_path(a.path) for a in alerting})
    info = len(found.anomalies) - len(alerting)
    also = f"; {count_of(info, 'info finding')}" if info else ""
    rc = EXIT_UNREADABLE if found.unreadable else EXIT_ANOMALIES if alerting else EXIT_OK
    if found.unreadable:
        text = (f"verify: INCOMPLETE, {count_of(len(found.unreadable), 'file')} could not be read; "
                f"{count_of(len(alerting), 'anomaly', 'anomalies')} in {count_of(files, 'file')}{also}")
    elif alerting:
        text = (f"verify: {count_of(len(alerting), 'anomaly', 'anomalies')} in "
                f"{count_of(files, 'file')} ({count_of(found.files_checked, 'file')} checked){also}")
    else:
        text = f"verify: no anomalies ({count_of(found.files_checked, 'file')} checked){also}"
    p.emit(text, {"type": "summary", "anomalies": len(alerting), "files_with_anomalies": files,
                  "info": info, "files_checked": found.files_checked, "unreadable": len(found.unreadable),
                  "notes": len(found.notes), "exit_code": rc})
    return rc


def _open(root: Path | StoreLocation, broker_config: str | None) -> StoreView:
    # a DLedger store is listed and verified through the DLedger framing and recovery
    return StoreView(open_store(root, broker_config, read_dledger=True))


def _broker_config(root: Path | StoreLocation, broker_config: str | None) -> BrokerConfig:
    """The settings a file needs to be read (as ``open_store`` picks them, without the store)."""
    if broker_config is None and (root / "broker.conf").is_file():
        return broker_config_of(root / "broker.conf")
    return broker_config_of(broker_config)


def _missing(target: Path | StoreLocation) -> str:
    """Why ``target`` cannot be opened: a symbolic link that leads nowhere says so."""
    if not isinstance(target, Path) or not target.is_symlink():
        return "does not exist"
    try:
        target.stat()
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "is a symbolic link loop (it leads back to itself)"
    return f"is a symbolic link to {os.readlink(target)}, which does not exist"


def run(args: argparse.Namespace, p: Printer) -> int:
    remote = location(args.path)
    target = Path(args.path) if remote.filesystem is None else remote
    if not target.exists():
        raise CannotRead(_missing(target), target)
    verify = args.verify or args.verify_index_only
    if target.is_dir():
        view = _open(target, args.broker_config)
        dump_overview(p, view)
        return report(p, verify_store(view, args.verify_index_only), view) if verify else EXIT_OK
    sf = classify_path(target)
    if remote.filesystem is None and not os.access(target, os.R_OK):
        raise UnreadableFileError("cannot read: permission denied", target)
    # a commitlog segment is read with the store's scan options; the rest needs the store only
    # to be verified against it
    view = _open(sf.root, args.broker_config) if verify or sf.kind == "commitlog" else None
    if sf.kind == "commitlog":
        assert view is not None
        dump_commitlog_file(p, view, target, args)
    elif sf.kind == "consumequeue":
        dump_cq_file(p, target, args.max_bytes)
    elif sf.kind == "index":
        cfg = view.config if view is not None else _broker_config(sf.root, args.broker_config)
        with open_index(target, cfg.maxHashSlotNum, cfg.maxIndexNum, cfg.settings_hint) as f:
            dump_index_file(p, f, args.deep, args.max_bytes)
    elif sf.kind == "checkpoint":
        dump_checkpoint(p, target)
    elif sf.kind in ("timerlog", "timerwheel", "timercheck"):
        cfg = view.config if view is not None else _broker_config(sf.root, args.broker_config)
        if sf.kind == "timerlog":
            dump_timerlog_file(p, target, cfg.mappedFileSizeTimerLog, args.max_bytes)
        elif sf.kind == "timerwheel":
            dump_timerwheel(p, target, cfg.timerPrecisionMs)
        else:
            dump_timercheck(p, target)
    else:
        dump_config(p, target)
    if not verify:
        return EXIT_OK
    assert view is not None
    return report(p, verify_file(view, sf, args.verify_index_only), view)


def dump_commitlog_file(p: Printer, view: StoreView, target: Path, args: argparse.Namespace) -> None:
    f = next((f for f in view.store.commitlog_files if norm_path(f.path) == norm_path(target)), None)
    if f is None:
        raise CannotRead("not a commitlog segment of this store (its name must be a 20-digit "
                         "start offset)", target)
    dump_segment(p, view, f, args.deep, args.print_body, args.max_bytes)
    summary = next(s for s in view.summaries if norm_path(s.path) == norm_path(target))
    if not_a_segment(summary):
        raise CannotRead(f"not a commitlog segment: no record header at byte 0 (magic 0x"
                         f"{(summary.first_magic or 0) & 0xFFFFFFFF:08x}) and no intact record "
                         "anywhere in the file", target, 0)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = console.parser("jobs.dump", __doc__, "0 printed (with --verify: no anomaly), 1 anomalies "
                        "found, 2 could not read (missing, unreadable, not a store file)",
                        "python -m jobs.dump /data/store --verify --broker-config broker.conf",
                        "docs/audit-and-tables.md")
    ap.add_argument("path", help="a store file (commitlog, consume queue, index, checkpoint, "
                                 "config/*.json) or a store directory")
    ap.add_argument("--deep", action="store_true", help="decode every field (properties, hosts, ...)")
    ap.add_argument("--verify", action="store_true",
                    help="report every anomaly the broker acts on; exit 1 if any")
    ap.add_argument("--verify-index-only", action="store_true", help="verify only index files")
    ap.add_argument("--max-bytes", type=int, metavar="N",
                    help="list only records/entries that end within the first N bytes of the file")
    ap.add_argument("--print-body", action="store_true", help="print message bodies")
    ap.add_argument("--json", action="store_true", help="JSON lines instead of text")
    ap.add_argument("--broker-config", metavar="FILE", help="the broker's broker.conf")
    args = ap.parse_args(argv)
    if args.max_bytes is not None and args.max_bytes < 0:
        ap.error("--max-bytes must be >= 0")
    return args


@stopping.exits_on_signals
def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: the exit code (0 ok, 1 anomalies, 2 could not read)."""
    try:
        args = parse_args(argv)
    except SystemExit as exc:                         # usage errors: argparse printed the reason
        return exc.code if isinstance(exc.code, int) else EXIT_UNREADABLE
    p = Printer(sys.stdout, args.json)
    try:
        return run(args, p)
    except BrokenPipeError:                           # `| head`: the reader left, nothing to report
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    except (StoreReaderError, OSError) as exc:
        if isinstance(exc, StoreReaderError):
            path, position, message = exc.path, exc.position, str(exc)
        else:
            path, position = exc.filename or args.path, None
            message = f"{path}: {exc.strerror or exc}"
        if args.json:
            p.emit("", {"type": "error", "file": path, "position": position, "message": message})
        print(f"dump: error: {message}", file=sys.stderr)
        return EXIT_UNREADABLE

if __name__ == "__main__":
    sys.exit(main())
