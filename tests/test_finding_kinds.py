"""One checking engine, one vocabulary (store_reader/audit): every kind jobs.dump --verify or the
audit can report is in ``kinds.KINDS`` and the table of docs/finding-kinds.md; dump's JSON names each finding's
kind; the audit's record-free checks (``store_file_findings``) report exactly what dump --verify
reports for them on every fixture; both engines judge an index header by one rule set."""
from __future__ import annotations

import contextlib
import io
import json
import re
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest

import support
from jobs import dump
from store_reader import open_store
from store_reader.broker import prediction
from store_reader.audit import StoreView
from store_reader.audit import kinds
from store_reader.audit.files import store_file_findings
from store_reader.audit.index import header_problems
from store_reader.formats.indexfile import IndexFile

ROOT = Path(__file__).resolve().parent.parent
# the kinds store_file_findings covers: dump's checks that read no record and no entry
RECORD_FREE = {"layout.load_problem", "cq.file_size", "checkpoint.missing", "checkpoint.file_size",
               "config.undecodable", "note.commitlog_gap", "note.config_tmp", "note.unknown_entry"}


def _verify_json(store: Path, conf: Path) -> list[dict]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        dump.main([str(store), "--verify", "--json", "--broker-config", str(conf)])
    return [json.loads(line) for line in out.getvalue().splitlines()]


def test_readme_table_is_the_vocabulary():
    """docs/finding-kinds.md's table is ``kinds.markdown_table()``, row for row."""
    assert kinds.markdown_table() in (ROOT / "docs" / "finding-kinds.md").read_text(encoding="utf-8")


def test_every_kind_a_check_names_is_in_the_vocabulary():
    """Every kind literal the checks report (dump's dotted names through their alias) and every
    queue/index kind the audit's tables may hold is a kind of the one table."""
    names = set()
    for path in (ROOT / "store_reader" / "audit").glob("*.py"):
        if path.name != "kinds.py":
            text = path.read_text(encoding="utf-8")
            names |= set(re.findall(r'"((?:cq|index|commitlog|layout|checkpoint|config|note)\.[a-z_]+)"', text))
    assert {"cq.blank_in_middle", "index.slot_chain", "commitlog.bad_record", "note.abort"} <= names
    assert all(kinds.finding_kind(n) in kinds.KINDS for n in names), \
        sorted(n for n in names if kinds.finding_kind(n) not in kinds.KINDS)
    assert set(kinds.DUMP_ALIASES.values()) <= set(kinds.KINDS)
    assert set(kinds.QUEUE_KINDS) | set(kinds.INDEX_KINDS) <= set(kinds.KINDS)
    assert all(k.severity in ("anomaly", "info", "note") for k in kinds.KINDS.values())


@pytest.mark.parametrize("case", support.scenarios(), ids=support.case_id)
def test_audit_store_findings_are_dump_verify_findings(case):
    """On every fixture: dump --verify's findings of the record-free kinds are the audit's
    ``store_findings`` rows (kind, severity, file, byte position, message), and dump's JSON names
    each finding's kind in the one vocabulary."""
    store, conf = support.input_store(*case), support.broker_conf(*case)
    lines = _verify_json(store, conf)
    found = [x for x in lines if x["type"] in ("anomaly", "note")]
    assert all(x["finding"] == kinds.finding_kind(x["kind"]) and x["finding"] in kinds.KINDS for x in found)
    want = sorted((x["finding"], x["type"], x["file"], x["position"], x["message"]) for x in found
                  if x["kind"] in RECORD_FREE)
    rows = store_file_findings(open_store(store, conf)).to_pylist()
    got = sorted((r["kind"], r["severity"], r["file"], r["position"], r["detail"]) for r in rows)
    assert got == want


@pytest.mark.parametrize("version", support.VERSIONS)
def test_index_header_one_rule_set(version, tmp_path):
    """A header whose endPhyOffset is not its last entry's: dump reports index.bad_header at byte 24,
    the audit a bad_header with the same detail (one rule set, ``index.header_checks``)."""
    case = (version, "clean")
    root = tmp_path / "store"
    shutil.copytree(support.input_store(*case), root)
    cfg = support.expected(*case)["storeConfig"]
    path = sorted((root / "index").iterdir())[0]
    data = bytearray(path.read_bytes())
    struct.pack_into(">q", data, 24, 1)                 # endPhyOffset (header bytes 24..31)
    path.write_bytes(bytes(data))
    lines = _verify_json(root, support.broker_conf(*case))
    bad = [x for x in lines if x.get("kind") == "index.bad_header"]
    assert [(x["position"], x["finding"]) for x in bad] == [(24, "bad_header")]
    with IndexFile(path, cfg["maxHashSlotNum"], cfg["maxIndexNum"]) as f:
        n = min(f.header.entries_in_use, f.index_num - 1)
        phy = f.entries[1:1 + n]["phy_offset"].astype(np.int64)
        part = (0, int(phy.min()), int(phy.max()), bool((f.entries[1:1 + n]["time_diff"] < 0).any()), 0)
        details = header_problems(f.header, f.index_num, [part])
    assert details == [bad[0]["message"]]
    assert details == [f"endPhyOffset 1 but its entries end at phy {int(phy.max())}"]


SEGMENT_KINDS = {"commitlog.bad_record", "commitlog.no_eof_marker", "note.after_marker", "note.crc_unchecked"}


@pytest.mark.parametrize("case", support.scenarios(), ids=support.case_id)
def test_audit_segment_findings_are_dump_verify_findings(case):
    """Given the segments' scan summaries and the broker's predicted recovery (what the audit has
    after its scan), ``store_file_findings`` also reports dump --verify's commitlog findings, the
    same on every fixture."""
    store_dir, conf = support.input_store(*case), support.broker_conf(*case)
    found = [x for x in _verify_json(store_dir, conf) if x["type"] in ("anomaly", "note")]
    want = sorted((x["finding"], x["type"], x["file"], x["position"], x["message"]) for x in found
                  if x["kind"] in RECORD_FREE | SEGMENT_KINDS)
    store = open_store(store_dir, conf)
    view = StoreView(store)
    pred = prediction.predict(store, view.version)
    rows = store_file_findings(store, view.broker_5x, view.summaries, pred).to_pylist()
    got = sorted((r["kind"], r["severity"], r["file"], r["position"], r["detail"]) for r in rows)
    assert got == want
