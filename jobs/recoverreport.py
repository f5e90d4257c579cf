"""What a recovery run tells the operator and records: the run's report (``RunReport``: its passes
and what it found and wrote), the printed report, the prediction as JSON (``--json``, the
manifest, ``jobs.whatif``) and the repaired store's manifest."""
from __future__ import annotations

import logging
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from jobs import findings as fnd
from jobs.salvage import print_reappended
from store_reader.repair import publish, scanned
from store_reader.broker import prediction as broker_prediction, versions
from store_reader.audit import offsets
from store_reader.formats.brokerconf import BrokerConfig
from store_reader.formats.commitlog import SegmentSummary
from store_reader.repair.salvage import Reappended
from store_reader.io.hashing import SourceDigest
from store_reader.store import Store

# the recovery run's pass lines, under the job's name like the rebuilds' (``jobs.rebuild``)
log = logging.getLogger("jobs.recover")
LIST_LIMIT = 10         # moved offsets listed in the printed report (all of them: the audit table)


@dataclass
class RunReport:
    run_id: str
    store: str
    out: str | None
    broker_version: str
    prediction: broker_prediction.Prediction
    summaries: list[SegmentSummary]
    passes: list[tuple[str, float, str]] = field(default_factory=list)
    written: bool = False
    applied_backup: str | None = None
    findings: fnd.Findings | None = None
    audit_tables: list[str] = field(default_factory=list)
    keep_consumer_offsets: bool = False
    link_commitlog: bool = False
    """Whole commitlog files below the cut hard-linked to the input's (``placement.linkable``)."""
    offsets_moved: list[dict] = field(default_factory=list)
    """Committed offsets the repaired store carries moved, originals included (config.correct_consumer_offsets)."""
    left_out: list[str] = field(default_factory=list)
    """Entries of the commitlog directories the broker skips or cannot map: not in the repaired store."""
    resized: list[tuple[str, int, int]] = field(default_factory=list)
    """(file, length, mappedFileSizeCommitLog) of commitlog files the repaired store holds resized."""
    config_left_out: list[str] = field(default_factory=list)
    salvage: bool = False
    """--salvage: the lost records a producer would send again are re-appended (jobs.salvage)."""
    salvaged: Reappended | None = None
    timer_store: dict | None = None
    """What the repair changed in the 5.x timer store (``timerrecovery.RepairedTimerStore``)."""
    records: dict[str, str] = field(default_factory=dict)
    """Where the scan kept each segment's records for the later passes (``store_reader.repair.scanned``)."""
    scan_dir: str | None = None
    """The run's scan directory: the kept records, and the tables its passes exchange (``jobs._spark.exchange``)."""
    scans: dict[str, float] = field(default_factory=dict)
    """Per segment: how often the run walked its bytes (1: once)."""
    digests: dict[str, SourceDigest] = field(default_factory=dict)
    """Per segment the scan hashed as it walked it: its digest, for the placement."""
    html_report: str | None = None
    """The run's page (``jobs.htmlreport``), once written."""

    offset_rows: pa.Table | None = None
    """A bounded dry run's ``consumer_offset_findings`` rows (``audit.offsets``: from the prediction
    alone, the repaired queues not known); a run that audits has its own in ``findings``."""

    @property
    def consumer_offsets(self) -> pa.Table | None:
        """The committed offsets' rows: the audit's, else the bounded dry run's."""
        return self.findings.tables.get("consumer_offset_findings") if self.findings is not None \
            else self.offset_rows

    @property
    def offset_facts(self) -> list[offsets.OffsetFacts]:
        """The committed offsets' counts per file (``store_reader.audit.offsets``)."""
        return offsets.offset_facts(self.consumer_offsets)
    store_modes: str = "classic"
    """The modes the store uses (``inventory.Inventory.modes_text``)."""

    def log_pass(self, name: str, started: float, detail: str, ended: float | None = None) -> None:
        secs = (time.monotonic() if ended is None else ended) - started
        self.passes.append((name, secs, detail))
        log.info("pass %-22s %7.2fs  %s", name, secs, detail)

    def count_reads(self, config: BrokerConfig, writing: bool) -> None:
        """Add to ``scans`` the segments a later pass reads again (the kept records do not serve
        it) and log the run's walks per segment."""
        pred, end = self.prediction, self.prediction.max_phy_offset
        if pred.load_result:            # the audit: lost messages' columns the scan did not keep
            for s in self.summaries:
                if not scanned.lost_columns_cover(s, end):
                    self.scans[s.segment] += 1
        if writing and not scanned.serves_rebuild(config, versions.is_5x(pred.broker_version)):
            for s in self.summaries:      # the consume queue and the index rebuilds
                if s.file_start < end:
                    self.scans[s.segment] += 2
        if writing and self.salvage:      # the re-append reads the files past the cut again
            for s in self.summaries:
                if s.file_start + s.file_size > end:
                    self.scans[s.segment] += 1
        walks = list(self.scans.values())
        log.info("scans per segment %.2f (max %.2f) over %d segments", sum(walks) / len(walks) if walks else 0,
                 max(walks, default=0), len(walks))


def prediction_summary(pred: broker_prediction.Prediction, report: RunReport | None = None) -> dict:
    return {
        "brokerVersion": pred.broker_version,
        "loadResult": pred.load_result,
        "loadProblems": pred.load_problems,
        **({"leftOut": report.left_out,
            "resized": [{"path": f, "length": n, "mappedFileSize": m} for f, n, m in report.resized]}
           if report is not None and (report.left_out or report.resized) else {}),
        "recoveryPath": pred.recovery_path,
        "startFile": pred.start_file,
        "maxPhyOffset": pred.max_phy_offset,
        "minPhyOffset": pred.min_phy_offset,
        "deletedCommitLogFiles": pred.deleted_commitlog_files,
        "commitLogFiles": [{"name": f.name, "wrotePosition": f.wrote} for f in pred.commitlog_files],
        "topicQueueTable": dict(sorted(pred.topic_queue_table().items())),
        "indexFiles": [{"name": f.name, **f.header.to_dict()} for f in pred.index_files],
    }


def _resolved(path: str | None) -> str | None:
    return path if path is None or publish.is_uri(path) else str(Path(path).resolve())


def manifest(store: Store, report: RunReport, outputs: list[dict]) -> dict:
    inputs = [{"path": rel, "size": size} for rel, size, _ in store.inventory.files]
    # resolved: the same store and config give the same manifest however they were spelled
    return {"runId": report.run_id, "store": _resolved(str(store.root)),
            "brokerConfig": _resolved(store.config.source),
            "inputs": sorted(inputs, key=lambda e: e["path"]), "outputs": outputs,
            "storeModes": list(store.inventory.modes),
            "prediction": prediction_summary(report.prediction, report),
            "consumerOffsets": {"keptAsTheyWere": report.keep_consumer_offsets, "moved": report.offsets_moved},
            **({"salvaged": report.salvaged.to_manifest()} if report.salvaged is not None else {}),
            **({"timerStore": report.timer_store} if report.timer_store is not None else {})}


def dry_run_header(report: RunReport) -> list[str]:
    """A dry run's first lines: that it wrote nothing (but the audit tables, when asked for), and
    what the real run would write."""
    pred = report.prediction
    written = ([f"the audit tables ({os.path.dirname(report.audit_tables[0])})"] if report.audit_tables else []) + \
        ([f"the report page ({report.html_report})"] if report.html_report else [])
    wrote = f" but {' and '.join(written)}" if written else ""
    target = report.out or "the --out directory"
    if report.keep_consumer_offsets:
        moved = "kept as they are"
    elif report.findings is None:       # a bounded dry run: only the audit rebuilds the queues
        moved = "moved where the repaired queues serve them (how many: jobs.audit; the broker's own moves below)"
    else:
        moved = "moved " + offsets.per_file({f.source: f.repaired for f in report.offset_facts})
    return [f"DRY RUN: nothing was written{wrote}; the input store is never written.",
            f"  the real run would write a repaired store to {target}: the commitlog cut at phy "
            f"{pred.max_phy_offset} ({len(pred.commitlog_files)} files kept, "
            f"{len(pred.deleted_commitlog_files)} dropped), consume queues and index files rebuilt "
            f"from every record below the cut, a consistent checkpoint, no abort file, committed "
            f"consumer offsets {moved}, and MANIFEST.json"]


def print_report(report: RunReport, out=None) -> None:
    out = out or sys.stdout
    pred = report.prediction
    p = print
    if not report.written:
        for line in dry_run_header(report):
            p(line, file=out)
    p(f"run {report.run_id}: store {report.store} (broker {report.broker_version})", file=out)
    p(f"  store modes        {report.store_modes}", file=out)
    if not pred.load_result:
        p("  the broker would REFUSE to start on this store as it is:", file=out)
        for problem in pred.load_problems:
            p(f"    - {problem}", file=out)
        p("  what follows is its recovery of the store as repaired: consume queues and index files "
          "rebuilt from the commitlog", file=out)
        for path, length, size in report.resized:
            how = f"zeros from byte {length} on, as never written (any records there are lost)" \
                if length < size else f"the {length - size} bytes past it dropped (never mapped)"
            p(f"    resized            {path}: {length} -> {size} bytes, {how}", file=out)
        dropped = sum(s.records for s in report.summaries if s.segment in pred.deleted_commitlog_files)
        p(f"    lost               {dropped} records in the commitlog files after the cut, "
          f"{sum(s.records_after_cut for s in report.summaries if s.file_start + s.file_size > pred.max_phy_offset)} "
          "intact records behind a bad one",
          file=out)
    for path in report.left_out:
        p(f"  left out           {path} (the broker skips it or cannot map it)", file=out)
    end = pred.max_phy_offset
    # a bad record in a file the broker keeps whole (one its recovery does not re-read) loses nothing
    lost = sum(s.records_after_cut for s in report.summaries if s.file_start + s.file_size > end)
    p(f"  recovery path      {pred.recovery_path} (start file {pred.start_file})", file=out)
    p(f"  truncation point   phy {end} (min {pred.min_phy_offset})", file=out)
    p(f"  commitlog files    {len(pred.commitlog_files)} kept, "
      f"{len(pred.deleted_commitlog_files)} deleted {pred.deleted_commitlog_files}", file=out)
    for s in report.summaries:
        if s.end_reason in ("corrupt", "torn_tail"):
            kept = "kept by the broker, not re-read; " if s.file_start + s.file_size <= end else ""
            p(f"  {s.end_reason:<18} {s.path} @ byte {s.valid_bytes} ({s.end_check}); {kept}"
              f"{s.records_after_cut} intact records behind it", file=out)
    p(f"  records lost       {lost} intact records behind a bad one", file=out)
    unwalked = [s for s in report.summaries if not s.walked]
    if unwalked:
        p(f"  not checked        {len(unwalked)} commitlog files the broker's restart does not walk "
          f"({unwalked[0].segment}..{unwalked[-1].segment}; only first records its start file search reads), "
          f"consume queue entries before their last 3 files, index entries: "
          f"python -m jobs.audit --store {report.store} checks them (docs/spec/recovery.md §17)", file=out)
    p(f"  consume queues     {len(pred.consume_queues)} after the broker's recovery", file=out)
    facts = report.offset_facts
    if report.consumer_offsets is not None and pred.load_result:
        for i, line in enumerate(offsets.describe(facts)):
            p(f"  {'consumer offsets' if i == 0 else '':<18} {line}", file=out)
        for r in offsets.moved_rows(report.consumer_offsets)[:LIST_LIMIT]:
            p(f"    {r['group']}@{r['topic']}/{r['queue_id']}: committed {r['committed_offset']} -> {r['status']}, "
              f"next {r['next_begin_offset']} (queue {r['min_after']}..{r['max_after']})", file=out)
    if report.written and report.keep_consumer_offsets:
        p("  repaired offsets   kept as they were (--keep-consumer-offsets)", file=out)
    elif report.written:
        p(f"  repaired offsets   moved where the repaired queues serve them: "
          f"{offsets.per_file(offsets.repaired_per_file(report.offsets_moved, facts))} "
          f"(originals in MANIFEST.json)", file=out)
    if report.findings is not None:
        p("  audit", file=out)
        fnd.print_summary(report.findings, out)
    if report.audit_tables:
        names = [u.partition("?")[0] for u in report.audit_tables]     # an s3a:// path's options
        p(f"  audit tables       {os.path.dirname(names[0])} ({', '.join(map(os.path.basename, names))})",
          file=out)
    if report.written and report.timer_store is not None:
        t = report.timer_store
        dropped = ", ".join(f"{n} {k}" for k, n in sorted(t["dropped"].items())) or "none dropped"
        p(f"  timer store        {t['units_kept']} of {t['units_in']} timer log units kept ({dropped}), "
          f"{t['slots']} wheel slots, timercheck queue offset {t['check_in']['last_timer_queue_offset']}/"
          f"{t['check_in']['master_timer_queue_offset']} -> {t['queue_offset']}", file=out)
    for line in report.config_left_out:
        p(f"  config left out    {line} (unreadable: the broker falls back to its .bak)", file=out)
    if report.applied_backup:
        p(f"  applied            repaired store now at {report.store}; input kept at "
          f"{report.applied_backup}", file=out)
    elif report.written:
        p(f"  repaired store     {report.out}", file=out)
    if report.html_report:
        p(f"  report             {report.html_report}", file=out)
    if report.written and report.salvaged is not None:
        print_reappended(report.salvaged, out)
