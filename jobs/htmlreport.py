"""The run as one page to look at (``--report FILE.html`` of ``jobs.recover`` and ``jobs.audit``;
the demo writes ``demo-output/report.html`` beside its repaired store).

One self-contained HTML file: no script, no network, the figures inline SVG. It shows what the run
already knows and prints (nothing here applies a broker rule): what the broker would do in one
sentence, a timeline of the commitlog (its files, the start file, the cut, corrupt records and the
lost records behind them), the queues after the broker's recovery and what the audit found in them,
the consumer offsets (``store_reader.audit.offsets``: the same counts every job prints), the flush
window, a 5.x store's pending timer messages by deliver time and what the restart does to them
(``store_reader.audit.timer``: the timer_schedule notebook's fates), the findings with each kind's meaning (``store_reader.audit.kinds``), and links to the
Delta audit tables.
"""
from __future__ import annotations

import datetime as dt
import html
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import pyarrow as pa

from store_reader.repair import publish
from store_reader.broker import prediction as broker_prediction
from store_reader.audit import offsets
from store_reader.audit.kinds import KINDS
from store_reader.audit.timer import FATE_COLOURS, FATES, TimerPrediction, predict_timer, timer_queue_range
from store_reader.formats.commitlog import SegmentSummary
from store_reader.exceptions import StoreReaderError

ROW_LIMIT = 200          # rows per table on the page (the audit tables have them all)
_BAD_ENDS = ("corrupt", "torn_tail")


@dataclass
class PageInput:
    """What one run knows, whichever job ran it."""

    job: str                          # recover | audit
    run_id: str
    store: str
    prediction: broker_prediction.Prediction
    summaries: Sequence[SegmentSummary]
    tables: dict[str, pa.Table] = field(default_factory=dict)
    flush_text: str | None = None
    audit_tables: Sequence[str] = ()
    repaired_store: str | None = None
    dry_run: bool = False
    moved_in_repaired: dict[str, int] | None = None
    timer: TimerPrediction | None = None
    timer_repaired: dict | None = None    # what the repair wrote (timerrecovery.RepairedTimerStore)


def check_target(path: str, store_root: str) -> None:
    """Before any work: the page's directory exists and can be written, and the page is not
    inside the input store."""
    p = Path(os.path.abspath(path))
    root = Path(os.path.abspath(store_root))
    if p == root or root in p.parents:
        raise StoreReaderError(f"--report {p} must not be inside the store", root)
    if p.is_dir():
        raise StoreReaderError("--report names a directory, not a file", p)
    publish.check_writable(str(p.parent), "--report's directory")


def write(path: str, page: PageInput) -> str:
    """Write the page (through a temporary file renamed into place); returns its absolute path."""
    target = Path(os.path.abspath(path))
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
    tmp.write_text(render(page), encoding="utf-8")
    os.replace(tmp, target)
    return str(target)


# -- the page ----------------------------------------------------------------------------------------

def _e(v) -> str:
    return html.escape(str(v), quote=True)


def _time(t: dt.datetime | None) -> str:
    return "" if t is None else t.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + (" UTC" if t.tzinfo else "")


def _rows(t: pa.Table | None) -> list[dict]:
    return [] if t is None or not t.num_rows else t.slice(0, ROW_LIMIT).to_pylist()


def sentence(page: PageInput) -> str:
    """What the broker would do if restarted on the store now, in one sentence."""
    pred = page.prediction
    who = f"The broker ({pred.broker_version})"
    if not pred.load_result:
        return f"{who} would REFUSE to start on this store: {'; '.join(pred.load_problems)}."
    lost = page.tables.get("lost_messages")
    n_lost = lost.num_rows if lost is not None else 0
    facts = offsets.offset_facts(page.tables.get("consumer_offset_findings"))
    live = next((f for f in facts if not f.fallback), None)
    parts = [f"{who} would take the {pred.recovery_path} recovery path from {pred.start_file}",
             f"cut the commitlog at phy {pred.max_phy_offset:,}"]
    if pred.deleted_commitlog_files:
        parts.append(f"delete {len(pred.deleted_commitlog_files)} later commitlog file(s)")
    parts.append(f"lose {n_lost:,} intact message(s) behind a bad record" if n_lost
                 else "lose no intact message")
    text = ", ".join(parts[:-1]) + " and " + parts[-1]
    if live is not None:
        text += f"; for consumerOffset.json, {offsets.sentence(live)}"
    return text + "."


def timeline_svg(page: PageInput) -> str:
    """The commitlog as a bar: each file in phy order (its valid data darker), the start file,
    the cut, each corrupt record or torn tail, and the lost records behind them."""
    pred, summaries = page.prediction, list(page.summaries)
    if not summaries:
        return "<p>No commitlog files.</p>"
    lo = min(s.file_start for s in summaries)
    hi = max(s.file_start + s.file_size for s in summaries)
    width, left, bar_y, bar_h = 1000, 10, 40, 40
    scale = (width - 2 * left) / max(hi - lo, 1)

    def x(phy: int) -> float:
        return left + (phy - lo) * scale

    deleted = set(pred.deleted_commitlog_files)
    out = [f'<svg id="timeline" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} 150" '
           f'width="100%" role="img" aria-label="commitlog timeline">']
    for s in summaries:
        x0, w = x(s.file_start), max(s.file_size * scale - 1, 1)
        cls = "deleted" if s.segment in deleted else "kept"
        tip = (f"{s.segment}: {s.records:,} records, valid data {s.valid_bytes:,} of {s.file_size:,} bytes, "
               f"ends: {s.end_reason}" + (" (deleted by the recovery)" if cls == "deleted" else ""))
        out.append(f'<g class="file {cls}"><title>{_e(tip)}</title>'
                   f'<rect x="{x0:.1f}" y="{bar_y}" width="{w:.1f}" height="{bar_h}" class="{cls}"/>'
                   f'<rect x="{x0:.1f}" y="{bar_y}" width="{max(s.valid_bytes * scale - 1, 0):.1f}" '
                   f'height="{bar_h}" class="{cls}-data"/></g>')
        if s.end_reason in _BAD_ENDS:
            bx = x(s.file_start + s.valid_bytes)
            out.append(f'<g class="bad"><title>{_e(f"{s.end_reason} at {s.path} byte {s.valid_bytes} ({s.end_check}); {s.records_after_cut} intact records behind it")}</title>'
                       f'<path d="M{bx - 6:.1f},{bar_y - 12} L{bx + 6:.1f},{bar_y - 12} L{bx:.1f},{bar_y - 2} Z" class="bad"/></g>')
    lost = page.tables.get("lost_messages")
    if lost is not None and lost.num_rows:
        phys = lost["phy_offset"].to_pylist()
        a, b = x(min(phys)), x(max(phys))
        out.append(f'<g class="lost"><title>{_e(f"{lost.num_rows} intact messages lost, phy {min(phys):,}..{max(phys):,}")}</title>'
                   f'<rect x="{a:.1f}" y="{bar_y + bar_h + 6}" width="{max(b - a, 3):.1f}" height="10" class="lost"/></g>')
    if pred.load_result:
        start = next((s for s in summaries if s.segment == pred.start_file), None)
        if start is not None:
            sx = x(start.file_start)
            out.append(f'<g class="start"><title>recovery starts at {_e(pred.start_file)}</title>'
                       f'<line x1="{sx:.1f}" y1="{bar_y - 30}" x2="{sx:.1f}" y2="{bar_y + bar_h}" class="start"/>'
                       f'<text x="{sx + 3:.1f}" y="{bar_y - 20}">start</text></g>')
        cx = x(pred.max_phy_offset)
        out.append(f'<g class="cut"><title>truncation point phy {pred.max_phy_offset:,}</title>'
                   f'<line x1="{cx:.1f}" y1="{bar_y - 30}" x2="{cx:.1f}" y2="{bar_y + bar_h + 20}" class="cut"/>'
                   f'<text x="{cx + 3:.1f}" y="{bar_y + bar_h + 32}">cut at phy {pred.max_phy_offset:,}</text></g>')
    out.append(f'<text x="{left}" y="{bar_y + bar_h + 52}" class="axis">phy {lo:,}</text>'
               f'<text x="{width - left}" y="{bar_y + bar_h + 52}" class="axis" text-anchor="end">phy {hi:,}</text>')
    out.append("</svg>")
    legend = ('<p class="legend"><span class="sw kept-data"></span>valid data (kept) '
              '<span class="sw kept"></span>rest of a kept file <span class="sw deleted-data"></span>'
              'data in a file the recovery deletes <span class="sw bad"></span>corrupt record / torn tail '
              '<span class="sw lost"></span>intact records lost behind it <span class="sw cut"></span>the cut '
              '<span class="sw start"></span>start file</p>')
    return "".join(out) + legend


def _range_svg(lo: int, hi: int, runs: list[dict], top: int) -> str:
    w, scale = 300, 300 / max(top, 1)
    parts = [f'<svg class="range" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {w} 14" width="{w}" height="14">',
             f'<rect x="0" y="3" width="{w}" height="8" class="axis-bg"/>']
    if hi > lo:
        parts.append(f'<rect x="{lo * scale:.1f}" y="3" width="{max((hi - lo) * scale, 1):.1f}" height="8" class="kept-data"/>')
    for r in runs:
        cls = "info" if KINDS.get(r["kind"]) is not None and KINDS[r["kind"]].severity == "info" else "bad"
        parts.append(f'<rect x="{r["from_offset"] * scale:.1f}" y="0" width="{max((r["to_offset"] - r["from_offset"]) * scale, 2):.1f}" '
                     f'height="14" class="{cls}"><title>{_e(r["kind"])} {r["from_offset"]}..{r["to_offset"]}</title></rect>')
    return "".join(parts) + "</svg>"


def queues_section(page: PageInput) -> str:
    pred = page.prediction
    found: dict[tuple[str, int], list[dict]] = {}
    q = page.tables.get("queue_findings")
    for r in (q.to_pylist() if q is not None and q.num_rows else []):
        found.setdefault((r["topic"], r["queue_id"]), []).append(r)
    keys = sorted(set(pred.consume_queues) | set(found))
    if not keys:
        return "<p>No consume queues.</p>"
    top = max([s.max_offset for s in pred.consume_queues.values()] +
              [r["to_offset"] for rs in found.values() for r in rs] + [1])
    rows = []
    for t, qid in keys[:ROW_LIMIT]:
        s = pred.consume_queues.get((t, qid))
        rng = f"{s.min_offset}..{s.max_offset}" if s is not None else "not kept"
        runs = found.get((t, qid), [])
        what = "<br>".join(f'{_e(r["kind"])}: offsets {r["from_offset"]}..{r["to_offset"]} ({r["count"]} entries)'
                           for r in runs) or "—"
        rows.append(f"<tr><td>{_e(t)}</td><td>{qid}</td><td>{rng}</td>"
                    f"<td>{_range_svg(s.min_offset if s else 0, s.max_offset if s else 0, runs, top)}</td>"
                    f"<td>{what}</td></tr>")
    return ('<table><tr><th>topic</th><th>queue</th><th>after the broker\'s recovery (min..max)</th>'
            '<th>range (blue) and what the audit found (red: anomaly, grey: the broker\'s normal '
            'behaviour)</th><th>findings</th></tr>' + "".join(rows) + "</table>")


def offsets_section(page: PageInput) -> str:
    rows_t = page.tables.get("consumer_offset_findings")
    facts = offsets.offset_facts(rows_t)
    out = ["<ul>" + "".join(f"<li>{_e(line)}</li>" for line in offsets.describe(facts)) + "</ul>"]
    if page.moved_in_repaired is not None:
        out.append(f"<p>The repaired store carries committed offsets moved where its queues serve them: "
                   f"{_e(offsets.per_file(page.moved_in_repaired))} (originals in MANIFEST.json).</p>")
    def moved(r: dict) -> bool:
        return offsets.moved_at_next_pull(r["status"], r["committed_offset"], r["next_begin_offset"])
    rows = [r for r in (rows_t.to_pylist() if rows_t is not None and rows_t.num_rows else [])
            if r["at_risk"] or moved(r)]
    if rows:
        body = "".join(
            f"<tr><td>{_e(r['source'])}</td><td>{_e(r['group'])}</td><td>{_e(r['topic'])}/{r['queue_id']}</td>"
            f"<td>{r['committed_offset']}</td><td>{_e(r['status'])}</td>"
            f"<td>{r['next_begin_offset'] if moved(r) else 'stays'}</td>"
            f"<td>{r['min_after']}..{r['max_after']}</td><td>{r['redelivered']}</td><td>{r['skipped']}</td></tr>"
            for r in rows[:ROW_LIMIT])
        out.append("<p>The offsets moved, redelivered to or skipping messages:</p>"
                   "<table><tr><th>file</th><th>group</th><th>queue</th><th>committed</th><th>pull status</th>"
                   "<th>moved to at the next pull</th><th>queue after recovery</th><th>redelivered</th><th>skipped</th></tr>"
                   + body + "</table>")
    return "".join(out)


def flush_section(page: PageInput) -> str:
    out = [f"<p>{_e(page.flush_text)}</p>" if page.flush_text else ""]
    rows = _rows(page.tables.get("flush_window"))
    if rows:
        out.append("<table><tr><th>window</th><th>queue</th><th>records</th><th>queue offsets</th>"
                   "<th>stored</th></tr>" + "".join(
                       f"<tr><td>{_e(r['window'])}</td><td>{_e(r['topic'])}/{r['queue_id']}</td><td>{r['records']}</td>"
                       f"<td>{r['from_offset']}..{r['to_offset']}</td><td>{_time(r['first_store_time'])} .. "
                       f"{_time(r['last_store_time'])}</td></tr>" for r in rows) + "</table>")
    return "".join(out) or "<p>Nothing at risk.</p>"


# deliver-time buckets of the timer figure: the smallest that keeps it to TIMER_BARS bars
_BUCKETS_S = (1, 10, 60, 300, 900, 3600, 6 * 3600, 86400, 7 * 86400)
TIMER_BARS = 60


def timer_section(page: PageInput) -> str:
    """The timer store's pending messages per deliver time, stacked by what the broker's restart
    does to them, and what the repaired store's timer store keeps."""
    tp, out = page.timer, []
    if tp is not None:
        pending = tp.pending()
        fates = tp.fates()[pending]
        counts = {f: int((fates == f).sum()) for f in FATES}
        rec = tp.recover
        out.append(f'<p id="timer-pending">{int(pending.sum()):,} timer message(s) pending of '
                   f"{len(tp.scan.units):,} timer log units (deliver time from "
                   f"{_e(_time(dt.datetime.fromtimestamp(rec.curr_read_time_ms / 1000, dt.timezone.utc)))}, "
                   f"where the broker's dequeue starts): "
                   + ", ".join(f"{n:,} {_e(f)}" for f, n in counts.items() if n) + ".</p>")
        out.append(f"<p>The broker's restart resumes the timer queue at offset {rec.curr_queue_offset}: "
                   f"{rec.enqueued_again:,} entries enqueued again, {rec.never_enqueued:,} enqueued for the "
                   f"first time, {rec.skipped:,} skipped.</p>")
        out.append(_timer_svg(tp.scan.delayed_time_ms()[pending], fates))
    if page.timer_repaired is not None:
        t = page.timer_repaired
        dropped = ", ".join(f"{n} {k}" for k, n in sorted(t["dropped"].items())) or "none dropped"
        out.append(f"<p>The repaired store keeps {t['units_kept']:,} of {t['units_in']:,} timer log units "
                   f"({_e(dropped)}); its timercheck resumes the timer queue at {t['queue_offset']}.</p>")
    return "".join(out)


def _timer_svg(deliver_ms, fates) -> str:
    if not len(deliver_ms):
        return "<p>Nothing pending.</p>"
    lo, hi = int(deliver_ms.min()) // 1000, int(deliver_ms.max()) // 1000
    step = next((b for b in _BUCKETS_S if (hi // b - lo // b) < TIMER_BARS), _BUCKETS_S[-1])
    first = lo // step
    bucket = deliver_ms // 1000 // step - first
    n = int(bucket.max()) + 1
    stacks = {f: [int(((bucket == i) & (fates == f)).sum()) for i in range(n)] for f in FATES}
    top = max(sum(stacks[f][i] for f in FATES) for i in range(n))
    w, h, left = 1000, 180, 40
    bw = (w - left) / n
    parts = [f'<svg id="timer" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {w} {h + 30}" width="{w}" '
             f'height="{h + 30}"><text x="0" y="12" class="axis">{top}</text>'
             f'<text x="0" y="{h}" class="axis">0</text>']
    for i in range(n):
        y = float(h)
        for f in FATES:
            c = stacks[f][i]
            if c:
                bh = c / top * (h - 10)
                y -= bh
                parts.append(f'<rect x="{left + i * bw:.1f}" y="{y:.1f}" width="{max(bw - 1, 1):.1f}" '
                             f'height="{bh:.1f}" fill="{FATE_COLOURS[f]}"><title>{c} {_e(f)}</title></rect>')
    when = [dt.datetime.fromtimestamp((first + i) * step, dt.timezone.utc).strftime("%m-%d %H:%M:%S")
            for i in (0, n - 1)]
    parts.append(f'<text x="{left}" y="{h + 20}" class="axis">{when[0]}</text>'
                 f'<text x="{w}" y="{h + 20}" text-anchor="end" class="axis">{when[1]} UTC (bars of {step} s)</text>')
    legend = "".join(f'<span class="sw" style="background:{FATE_COLOURS[f]}"></span>{_e(f)}'
                     for f in FATES if (fates == f).any())
    return "".join(parts) + f"</svg><div>{legend}</div>"


def findings_section(page: PageInput) -> str:
    counts: dict[tuple[str, str], int] = {}
    for name, col in (("queue_findings", "count"), ("index_findings", "count")):
        t = page.tables.get(name)
        for r in (t.to_pylist() if t is not None and t.num_rows else []):
            counts[(name, r["kind"])] = counts.get((name, r["kind"]), 0) + (r.get(col) or 1)
    sf = page.tables.get("store_findings")
    for r in (sf.to_pylist() if sf is not None and sf.num_rows else []):
        counts[("store_findings", r["kind"])] = counts.get(("store_findings", r["kind"]), 0) + 1
    lost = page.tables.get("lost_messages")
    rows = [f"<tr class=\"{_e(KINDS[k].severity if k in KINDS else 'anomaly')}\"><td>{_e(k)}</td><td>{n:,}</td>"
            f"<td>{_e(KINDS[k].severity if k in KINDS else '')}</td><td>{_e(KINDS[k].meaning if k in KINDS else '')}</td>"
            f"<td>{_e(t)}</td></tr>" for (t, k), n in sorted(counts.items(), key=lambda kv: kv[0][1])]
    if lost is not None and lost.num_rows:
        rows.append(f'<tr class="anomaly"><td>lost message</td><td>{lost.num_rows:,}</td><td>anomaly</td>'
                    f"<td>an intact message after the truncation point: the broker's recovery discards it "
                    f"(jobs.salvage exports them)</td><td>lost_messages</td></tr>")
    if not rows:
        return "<p>No findings.</p>"
    def where(r: dict) -> str:
        return r["file"] if r["position"] is None else f"{r['file']} @ byte {r['position']}"
    detail = "".join(f"<li><code>{_e(where(r))}</code>: {_e(r['detail'])}</li>" for r in _rows(sf))
    return ("<table><tr><th>kind</th><th>count</th><th>severity</th><th>what it means</th><th>table</th></tr>"
            + "".join(rows) + "</table>" + (f"<ul>{detail}</ul>" if detail else ""))


def tables_section(page: PageInput) -> str:
    if not page.audit_tables:
        return "<p>Not written to Delta (no --audit-path).</p>"
    links = []
    for uri in page.audit_tables:
        href = uri if publish.is_uri(uri) else Path(os.path.abspath(uri)).as_uri()
        links.append(f'<li><a href="{_e(href)}">{_e(os.path.basename(uri.rstrip("/")))}</a> <code>{_e(uri)}</code></li>')
    return "<ul>" + "".join(links) + "</ul>"


CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:24px auto;max-width:1100px;color:#222}
h1{font-size:20px} h2{font-size:16px;margin-top:28px;border-bottom:1px solid #ddd}
.sentence{font-size:16px;background:#f5f7fa;border-left:4px solid #4a90d9;padding:10px 14px}
.dry{background:#fff4d6;border-left:4px solid #e0a800;padding:8px 14px}
table{border-collapse:collapse;margin:8px 0} td,th{border:1px solid #ddd;padding:3px 8px;vertical-align:top;text-align:left}
th{background:#f0f0f0} tr.anomaly td:first-child{color:#b00020} code{font-size:12px}
svg text{font-size:12px} .axis{fill:#555}
.kept{fill:#dbe8f5}.kept-data{fill:#4a90d9}.deleted{fill:#f8d7d4}.deleted-data{fill:#e57373}
.bad{fill:#e65100}.lost{fill:#7b3294}.info{fill:#9e9e9e}.axis-bg{fill:#eee}
line.cut{stroke:#c62828;stroke-width:2.5}line.start{stroke:#2e7d32;stroke-width:2;stroke-dasharray:4 3}
.sw{display:inline-block;width:12px;height:12px;margin:0 4px 0 12px;vertical-align:-2px}
.sw.cut{background:#c62828}.sw.start{background:#2e7d32}.sw.kept{background:#dbe8f5}.sw.kept-data{background:#4a90d9}
.sw.deleted-data{background:#e57373}.sw.bad{background:#e65100}.sw.lost{background:#7b3294}
"""


def render(page: PageInput) -> str:
    pred = page.prediction
    title = f"RocketMQ store {'recovery' if page.job == 'recover' else 'audit'}: {page.store}"
    when = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    head = [f'<p class="meta">run <code>{_e(page.run_id)}</code>, broker {_e(pred.broker_version)}, '
            f"written {when}</p>"]
    if page.dry_run:
        head.append('<p class="dry">Dry run: no repaired store was written.</p>')
    elif page.repaired_store:
        head.append(f'<p>Repaired store: <code>{_e(page.repaired_store)}</code></p>')
    sections = [
        ("What the broker would do", f'<p class="sentence" id="sentence">{_e(sentence(page))}</p>'),
        ("The commitlog", timeline_svg(page)),
        ("Queues", queues_section(page)),
        ("Consumer offsets", offsets_section(page)),
        ("Flush window", flush_section(page)),
        *([("Timer messages", timer_section(page))] if page.timer or page.timer_repaired else []),
        ("Findings", findings_section(page)),
        ("Delta audit tables", tables_section(page)),
    ]
    body = "".join(f'<section><h2>{_e(h)}</h2>{s}</section>' for h, s in sections)
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{_e(title)}</title>'
            f"<style>{CSS}</style></head><body><h1>{_e(title)}</h1>{''.join(head)}{body}</body></html>\n")


def _timer(store: str, broker_config: str | None, pred: broker_prediction.Prediction) -> TimerPrediction | None:
    """A local 5.x store's timer store through the broker's restart (None without one; a
    timerwheel the broker refuses is a finding already)."""
    from store_reader import open_store

    try:
        return predict_timer(open_store(store, broker_config), pred.max_phy_offset, timer_queue_range(pred))
    except StoreReaderError:
        return None


def recover_page(report, broker_config: str | None) -> PageInput:
    """A recovery's page (``jobs.recoverreport.RunReport``)."""
    f = report.findings
    moved = None
    if report.written and not report.keep_consumer_offsets:
        moved = offsets.repaired_per_file(report.offsets_moved, report.offset_facts)
    store = report.applied_backup or report.store      # after --apply the input is the backup
    return PageInput("recover", report.run_id, report.store, report.prediction, report.summaries,
                     dict(f.tables) if f is not None else {},
                     f.flush.text if f is not None and f.flush is not None else None,
                     list(report.audit_tables), report.out if report.written else None,
                     dry_run=not report.written, moved_in_repaired=moved,
                     timer=_timer(store, broker_config, report.prediction),
                     timer_repaired=report.timer_store if report.written else None)


def audit_page(run, store: str, broker_config: str | None) -> PageInput:
    """An audit's page (``jobs.audit.AuditRun``)."""
    f = run.findings
    return PageInput("audit", run.run_id, store, run.prediction, run.summaries, dict(f.tables),
                     f.flush.text if f.flush is not None else None, list(run.written),
                     timer=_timer(store, broker_config, run.prediction))
