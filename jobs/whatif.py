"""What-if for several broker versions at once (``--broker-version both|all|V1,V2,..`` of
``jobs.recover --dry-run`` and ``jobs.audit``): the versions' predictions of one store side by
side, and what differs.

Each version's side is built from what a single-version run already has: the prediction, the scan
summaries and the findings (``jobs/findings.py``; the consumer-offset corrections are its
``consumer_offset_findings`` rows). Nothing here applies a broker rule.
"""
from __future__ import annotations

import base64
import datetime as dt
import json
from dataclasses import dataclass
from typing import Any, Sequence


from jobs import findings as fnd
from jobs.recoverreport import prediction_summary
from store_reader.broker import prediction as broker_prediction, versions
from store_reader.audit import offsets
from store_reader.formats.commitlog import SegmentSummary

VERSIONS = (versions.V49, versions.V5X)      # ``both``
VERSION_HELP = (f"recovery rules of broker {', '.join(versions.VERSIONS)} ({versions.V5X}: the newest); "
                "default: guessed from the store")
WHATIF_HELP = ("; both, all or a comma list (e.g. 5.3,5.5): those versions' predictions side by side")


def version_arg(value: str) -> str:
    """argparse ``type`` of ``--broker-version``: a version, or a what-if's list of them."""
    import argparse

    try:
        for name in versions.versions_of(value) if versions.is_whatif(value) else [value]:
            versions.resolve_version(name)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return value
# a committed offset a pull serves as it is; the others are compared between the versions
_SERVED = ("FOUND", "OFFSET_OVERFLOW_ONE")
LIST_LIMIT = 20          # lines per list in the side-by-side text
_TABLES = ("queue_findings", "index_findings", "lost_messages", "flush_window", "consumer_offset_findings")


@dataclass
class Side:
    """One version's prediction and findings of the store."""

    version: str
    prediction: broker_prediction.Prediction
    summaries: Sequence[SegmentSummary]
    findings: fnd.Findings | None


def _plain(v: Any) -> Any:
    if isinstance(v, (dt.datetime, dt.date)):
        return v.isoformat()
    if isinstance(v, bytes):
        return base64.b64encode(v).decode()
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    return v


def _rows(f: fnd.Findings | None, table: str) -> list[dict]:
    """A findings table as JSON-able rows (lost messages without their bodies: those go to the
    Delta table)."""
    t = None if f is None else f.tables.get(table)
    if t is None or not t.num_rows:
        return []
    if "body" in t.column_names:
        t = t.drop_columns(["body"])
    return [_plain(r) for r in t.to_pylist()]


def _queues(pred: broker_prediction.Prediction) -> dict[str, list[int]]:
    """min..max of every queue the broker keeps; an empty one (max 0) answers a pull as a missing
    one does (R§9.2) and is left out."""
    return {f"{t}/{q}": [s.min_offset, s.max_offset] for (t, q), s in sorted(pred.consume_queues.items())
            if s.max_offset}


def side_json(s: Side) -> dict:
    """Everything about one version: the prediction (``jobs.recoverreport.prediction_summary``), its queue
    ranges, the committed offsets and what a pull does with each, and every finding."""

    pred = s.prediction
    out: dict[str, Any] = {"prediction": prediction_summary(pred)}
    if not pred.load_result:
        out["status"] = "refused"
        return out
    out["status"] = fnd.run_status(pred, s.summaries, s.findings or fnd.Findings())
    out["recordsLost"] = len(_rows(s.findings, "lost_messages"))
    out["queues"] = _queues(pred)
    out["consumerOffsets"] = _rows(s.findings, "consumer_offset_findings")
    out["consumerOffsetFacts"] = [f.to_dict() for f in offsets.offset_facts(
        s.findings.tables.get("consumer_offset_findings") if s.findings is not None else None)]
    out["findings"] = {t: _rows(s.findings, t) for t in _TABLES if t != "consumer_offset_findings"}
    out["alerting"] = fnd.alerting_counts(s.findings) if s.findings is not None else {}
    return out


def _offset_key(r: dict) -> str:
    return f"{r['source']}:{r['group']}@{r['topic']}/{r['queue_id']}"


def differences(sides: dict[str, dict]) -> dict:
    """What differs between the versions' ``side_json`` (keyed by version, in order): prediction
    fields, queue ranges (a queue one version does not keep: null), the consumer-offset
    corrections (a committed offset the next pull moves on some side, moved differently on
    another), and finding rows not every version reports (per version, its rows of those)."""
    names = list(sides)

    def per(get) -> dict:
        return {v: get(sides[v]) for v in names}

    def same(d: dict) -> bool:
        return all(x == next(iter(d.values())) for x in d.values())

    fields = ("loadResult", "loadProblems", "recoveryPath", "startFile", "maxPhyOffset", "minPhyOffset",
              "deletedCommitLogFiles")
    out: dict[str, Any] = {"prediction": {}}
    for k in fields:
        d = per(lambda s: s["prediction"][k])
        if not same(d):
            out["prediction"][k] = d
    lost = per(lambda s: s.get("recordsLost"))
    if not same(lost):
        out["recordsLost"] = lost
    queues = per(lambda s: s.get("queues", {}))
    out["queues"] = {}
    for q in sorted(set().union(*queues.values())):
        d = {v: queues[v].get(q) for v in names}
        if not same(d):
            out["queues"][q] = d
    offsets = per(lambda s: {_offset_key(r): r for r in s.get("consumerOffsets", [])})

    def pull(r: dict | None) -> dict | None:
        return None if r is None else {"committed": r["committed_offset"], "status": r["status"],
                                       "nextBeginOffset": r["next_begin_offset"]}

    def moved(r: dict | None) -> bool:
        return r is None or r["status"] not in _SERVED
    # the corrections: offsets a pull moves on one side at least, moved differently on another
    out["consumerOffsets"] = {}
    for k in sorted(set().union(*offsets.values())):
        d = {v: pull(offsets[v].get(k)) for v in names}
        if not same(d) and any(moved(offsets[v].get(k)) for v in names):
            out["consumerOffsets"][k] = d
    out["findings"] = {}
    for t in _TABLES:
        if t == "consumer_offset_findings":
            continue
        rows = per(lambda s: {json.dumps(r, sort_keys=True) for r in s.get("findings", {}).get(t, [])})
        common = set.intersection(*rows.values())
        if any(r != common for r in rows.values()):
            out["findings"][t] = {v: [json.loads(r) for r in sorted(rows[v] - common)] for v in names}
    return out


def compare_json(store: str, sides: Sequence[Side]) -> dict:
    """``--json`` of a both-versions run: each version's ``side_json`` and their ``differences``."""
    by_version = {s.version: side_json(s) for s in sides}
    return {"store": store, "versions": by_version, "differences": differences(by_version)}


def _finding_counts(side: dict) -> dict[str, int]:
    """Entries per finding kind one version reports (queue and index kinds, lost messages, records
    in each flush window)."""
    out: dict[str, int] = {}

    def add(key: str, n: int) -> None:
        out[key] = out.get(key, 0) + n

    found = side.get("findings", {})
    for r in found.get("queue_findings", []):
        add(f"queue {r['kind']}", r["count"])
    for r in found.get("index_findings", []):
        add(f"index {r['kind']} ({r['index']})", r["count"])
    for r in found.get("lost_messages", []):
        add("lost messages", 1)
    for r in found.get("flush_window", []):
        add(f"flush {r['window']}", r["records"])
    return out


def print_both(store: str, sides: Sequence[Side], as_json: bool, out) -> None:
    """The versions of ``store`` side by side on ``out``: as JSON (``compare_json``) or text."""
    doc = compare_json(store, sides)
    if as_json:
        print(json.dumps(doc, indent=2), file=out)
    else:
        print_side_by_side(doc, out)


def print_side_by_side(doc: dict, out) -> None:
    """The predictions in columns, a ``*`` on every line that differs, then the queues,
    consumer-offset corrections and findings that differ."""
    names = list(doc["versions"])
    sides = [doc["versions"][v] for v in names]
    diff = doc["differences"]
    rows: list[tuple | str] = []          # (label, value per version[, "*"]) or a heading

    def summary(s: dict) -> dict[str, Any]:
        p = s["prediction"]
        if not p["loadResult"]:
            return {"load": "REFUSED: " + "; ".join(p["loadProblems"])}
        out = {"load": "loads", "recovery path": p["recoveryPath"], "start file": p["startFile"],
               "truncation point": p["maxPhyOffset"], "min phy offset": p["minPhyOffset"],
               "commitlog files": f"{len(p['commitLogFiles'])} kept, {len(p['deletedCommitLogFiles'])} deleted",
               "records lost": s["recordsLost"], "queues kept": len(s["queues"])}
        for f in s["consumerOffsetFacts"]:       # the words of store_reader.audit.offsets.sentence
            bak = f["file"].endswith(".bak")
            out[f["file"] + (" (fallback)" if bak else "")] = f"{f['committed']} committed offsets"
            sub = "  .bak: " if bak else "  "
            out[f"{sub}moved at the next pull"] = f"{f['groupsMoved']} group(s) / {f['queuesMoved']} queue(s)"
            out[f"{sub}messages redelivered"] = f["redelivered"]
            out[f"{sub}skipped"] = f["skipped"]
        out["status"] = s["status"]
        return out

    sums = [summary(s) for s in sides]
    rows += [(label, *(x.get(label, "-") for x in sums)) for label in dict.fromkeys(k for x in sums for k in x)]
    if diff["queues"]:
        rows.append(f"queues that differ ({len(diff['queues'])}), min..max:")
        for q, v in list(diff["queues"].items())[:LIST_LIMIT]:
            rows.append((f"  {q}", *("-" if r is None else f"{r[0]}..{r[1]}" for r in v.values())))
    if diff["consumerOffsets"]:
        rows.append(f"consumer-offset corrections that differ ({len(diff['consumerOffsets'])}), "
                    "committed -> status, next:")
        for k, v in list(diff["consumerOffsets"].items())[:LIST_LIMIT]:
            rows.append((f"  {k}", *("-" if r is None else f"{r['committed']} -> {r['status']}, {r['nextBeginOffset']}"
                                     for r in v.values())))
    counts = [_finding_counts(s) for s in sides]
    kinds = [k for k in sorted(set().union(*counts)) if len({c.get(k, 0) for c in counts}) > 1]
    if kinds or diff["findings"]:
        rows.append("findings that differ (entries; rows not every version reports):")
        rows += [(f"  {k}", *(c.get(k, 0) for c in counts)) for k in kinds]
        rows += [(f"  {t} rows", *(len(r) for r in v.values()), "*") for t, v in diff["findings"].items()]
    else:
        rows.append(f"findings: the same for {'both' if len(names) == 2 else 'all'} versions")
    lw = max(len(r[0]) for r in rows if isinstance(r, tuple))
    widths = [max(max(len(str(r[1 + i])) for r in rows if isinstance(r, tuple)), 10, len(f"broker {v}"))
              for i, v in enumerate(names)]
    print(f"what-if: store {doc['store']}", file=out)
    head = "  ".join(f"{'broker ' + v:<{w}}" for v, w in zip(names, widths))
    print(f"  {'':<{lw}}  {head}".rstrip(), file=out)
    for r in rows:
        if isinstance(r, str):
            print(f"  {r}", file=out)
            continue
        values = r[1:1 + len(names)]
        star = len(r) > 1 + len(names) or len({str(x) for x in values}) > 1
        cells = "  ".join(f"{str(x):<{w}}" for x, w in zip(values, widths))
        print(f"{'*' if star else ' '} {r[0]:<{lw}}  {cells}".rstrip(), file=out)
    longer = [n for n in (len(diff["queues"]), len(diff["consumerOffsets"])) if n > LIST_LIMIT]
    if longer:
        print(f"  (lists cut at {LIST_LIMIT} lines: --json has them all)", file=out)


__all__ = ["VERSIONS", "version_arg", "Side", "side_json", "differences", "compare_json", "print_both", "print_side_by_side"]
