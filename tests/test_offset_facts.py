"""One set of facts about consumer offsets (issue 37, 1): every job prints the committed offsets'
counts in the same words, per file, and each count is the audit table's.

The store: the real 5.3.3 ``torn-middle-crc`` (a CRC break mid-store: offsets past the new end are
redelivered, lost messages are skipped) with a ``consumerOffset.json.bak`` beside the live file, as
the broker leaves it (``ConfigManager#persist`` keeps the previous generation there): here the
previous generation, each offset 2 behind (a consumer that moved on since), so the two files'
counts differ.
"""
from __future__ import annotations

import json
import logging
import re
import shutil

import pytest

import support
from jobs import audit as audit_job
from jobs import recover as recover_job
from jobs._spark.deltasink import read_table
from store_reader.broker import bounded, prediction
from store_reader import open_store
from store_reader.repair import salvage
from store_reader.formats import config as cf
from store_reader.audit import offsets
from store_reader.formats.commitlog import summarize_segment

CASE = ("rocketmq-5.3.3", "torn-middle-crc")
LIVE, BAK = cf.CONSUMER_OFFSET_GENERATIONS
# a committed offset the next pull moves: PULL_OFFSET_MOVED (R§9.2), to somewhere else
MOVED = ("NO_MESSAGE_IN_QUEUE", "OFFSET_TOO_SMALL", "OFFSET_OVERFLOW_BADLY")
LINE = re.compile(r"(consumerOffset\.json(?:\.bak)?)(?: \(the broker's fallback\))?: (\d+) committed offsets?; "
                  r"(\d+) groups? / (\d+) queues? would be moved at the next pull, (\d+) messages? redelivered, "
                  r"(\d+) skipped")


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = tmp_path_factory.mktemp("offset-facts") / "store"
    shutil.copytree(support.input_store(*CASE), root, symlinks=True)
    config = root / "config"
    shutil.copyfile(config / LIVE, config / BAK)
    assert cf.rewrite_consumer_offsets(config / BAK, lambda t, g, q, o: max(o - 2, 0))
    return root


def _expected(rows: list[dict]) -> dict[str, tuple]:
    """Per file: (committed, groups moved, queues moved, redelivered, skipped), from the audit rows."""
    out = {}
    for source in (LIVE, BAK):
        mine = [r for r in rows if r["source"] == source]
        moved = [r for r in mine if r["status"] in MOVED and r["next_begin_offset"] != r["committed_offset"]]
        out[source] = (len(mine), len({r["group"] for r in moved}), len(moved),
                       sum(r["redelivered"] for r in mine), sum(r["skipped"] for r in mine))
    return out


def _repaired(rows: list[dict]) -> dict[str, int]:
    """Per file: offsets outside what the repaired queue serves (the repaired store moves them)."""
    def moves(r: dict) -> bool:
        lo, hi, c = r["repaired_min"], r["repaired_max"], r["committed_offset"]
        return (c != 0) if hi == 0 else (c < lo or c > hi)
    return {s: sum(1 for r in rows if r["source"] == s and moves(r)) for s in (LIVE, BAK)}


def _printed(text: str) -> dict[str, tuple]:
    return {m.group(1): tuple(int(x) for x in m.groups()[1:]) for m in LINE.finditer(text)}


@pytest.mark.spark
@pytest.mark.slow
def test_every_job_prints_the_audit_tables_counts(spark, store, tmp_path, capsys, caplog):
    caplog.set_level(logging.INFO)
    conf = str(support.broker_conf(*CASE))
    base = ["--store", str(store), "--broker-config", conf]
    audit_path = tmp_path / "audit"

    assert audit_job.main([*base, "--audit-path", str(audit_path)]) == 1
    audit_out = capsys.readouterr().out
    rows = read_table(str(audit_path / "consumer_offset_findings")).to_pylist()
    expected = _expected(rows)
    assert expected[LIVE] != expected[BAK], "the two files should differ for this test to tell them apart"
    assert all(n for n in expected[LIVE][1:]), f"nothing moved, redelivered or skipped: {expected}"
    runs = read_table(str(audit_path / "runs"))
    assert runs["consumer_offsets_at_risk"].to_pylist() == [sum(r["at_risk"] for r in rows)]
    assert _printed(audit_out) == expected, audit_out

    # a bounded dry run counts what the broker does from its prediction alone (the repaired
    # queues, which only the audit rebuilds, aside); with the audit tables it audits
    caplog.clear()
    assert recover_job.main([*base, "--dry-run"]) == 0
    dry = capsys.readouterr().out
    assert dry.startswith("DRY RUN: nothing was written") and "how many: jobs.audit" in dry
    assert _printed(dry) == expected, dry
    _, groups, queues, redelivered, skipped = expected[LIVE]
    short = f"{groups}/{queues} groups/queues moved, {redelivered} redelivered, {skipped} skipped"
    assert any(r.getMessage().startswith("pass consumer offsets") and r.getMessage().endswith(short)
               for r in caplog.records), caplog.text
    assert recover_job.main([*base, "--dry-run", "--audit-path", str(tmp_path / "dry-audit")]) == 0
    dry = capsys.readouterr().out
    assert dry.startswith("DRY RUN: nothing was written")
    assert _printed(dry) == expected, dry
    # the audit pass line on stderr: the live file's counts, in the same terms
    assert any(f"consumer offsets: {short}" in r.getMessage() for r in caplog.records), caplog.text

    out = tmp_path / "repaired"
    assert recover_job.main([*base, "--out", str(out)]) == 0
    real = capsys.readouterr().out
    assert _printed(real) == expected, real
    moved = json.loads((out / "MANIFEST.json").read_text())["consumerOffsets"]["moved"]
    per_file = {s: sum(1 for m in moved if m["file"] == f"config/{s}") for s in (LIVE, BAK)}
    assert per_file == _repaired(rows)
    words = f"{per_file[LIVE]} in {LIVE}, {per_file[BAK]} in {BAK}"
    assert f"repaired offsets   moved where the repaired queues serve them: {words} " in real, real
    assert f"committed consumer offsets moved {words}," in dry, dry      # what the dry run promised

    assert recover_job.main([*base, "--dry-run", "--broker-version", "both"]) == 0
    both = capsys.readouterr().out
    for source, (committed, groups, queues, redelivered, skipped) in expected.items():
        label, sub = (f"{BAK} (fallback)", ".bak: ") if source == BAK else (LIVE, "")
        # the 5.x column (the store's own version, as the audit above) is the last one
        for row, value in ((label, f"{committed} committed offsets"),
                           (f"{sub}moved at the next pull", f"{groups} group(s) / {queues} queue(s)"),
                           (f"{sub}messages redelivered", str(redelivered)),
                           (f"{sub}skipped", str(skipped))):
            assert re.search(rf"^. +{re.escape(row)} .*  {re.escape(value)}$", both, re.M), (row, value, both)


@pytest.mark.spark
@pytest.mark.slow
def test_demo_prints_the_audit_tables_counts_and_a_rerun_replaces_its_rows(spark, tmp_path, capsys):
    """The demo (``jobs.recover --demo``, what scripts/run.sh runs) twice: the same sample store,
    the same run id, one ``runs`` row; its printed counts are its audit table's."""
    for _ in range(2):
        assert recover_job.main(["--demo", str(tmp_path)]) == 0
        printed = capsys.readouterr().out
    runs = read_table(str(tmp_path / "audit" / "runs"))
    assert runs.num_rows == 1, runs.to_pylist()
    rows = read_table(str(tmp_path / "audit" / "consumer_offset_findings")).to_pylist()
    assert _printed(printed) == {s: v for s, v in _expected(rows).items() if v[0]}, printed
    assert runs["consumer_offsets_at_risk"].to_pylist() == [sum(r["at_risk"] for r in rows)]
    assert f"  report             {tmp_path / 'report.html'}" in printed.splitlines()


BROKER_COLUMNS = ("source", "group", "topic", "queue_id", "committed_offset", "min_after", "max_after", "status",
                  "next_begin_offset", "redelivered", "skipped", "at_risk")


@pytest.mark.parametrize("case", [(v, s) for v in ("rocketmq-4.9.7", "rocketmq-5.3.3")
                                  for s in ("crash-tail", "torn-middle-crc", "torn-middle-magic",
                                            "crash-ckpt-mid-torn-crc", "oldest-deleted", "clean")],
                         ids=support.case_id)
def test_the_bounded_rows_are_a_full_walks(case):
    """What the broker does to each committed offset, from the bounded prediction (the lost records
    read only where a walked file can hold them), is what the prediction over every file and the
    lost records of every file past the cut give (the audit's inputs). No Spark."""
    store = open_store(support.input_store(*case), support.broker_conf(*case))
    pred, segments = bounded.predict(store)
    rows = offsets.predicted_findings(store, pred, segments.summaries, segments.opts).to_pylist()
    full = prediction.predict(store, pred.broker_version)
    summaries = [summarize_segment(f.path, segments.opts) for f in store.commitlog_files]
    lost = salvage.lost_queue_offsets(salvage.lost_segments(summaries, full.max_phy_offset, salvage.cut_segment(full)),
                                      full.max_phy_offset, segments.opts)
    expected = offsets.consumer_offset_findings(store, full, lost).to_pylist()
    assert rows and [{k: r[k] for k in BROKER_COLUMNS} for r in rows] == \
        [{k: r[k] for k in BROKER_COLUMNS} for r in expected]
