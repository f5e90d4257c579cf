"""The run as a page to look at (issue 37, 4): ``jobs.recover --report FILE`` (here beside the
repaired store) and ``jobs.audit --report FILE`` write one self-contained file, and a real browser
renders it: headless Chromium (Debian's ``chromium``, which
scripts/test.sh installs) loads the page from disk with the network off, its DOM after load holds
the figures and numbers, and a screenshot of it shows the timeline's colours (and, on a 5.x store
with timer messages, the pending timer messages' figure).
"""
from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest

import support
from jobs import audit as audit_job
from jobs import recover as recover_job
from jobs._spark.deltasink import read_table
from store_reader.audit import offsets
from store_reader.audit.timer import FATE_COLOURS

CASE = ("rocketmq-5.3.3", "torn-middle-crc")     # a CRC break mid-store: a cut, lost records, moved offsets
BROWSER = shutil.which("chromium") or shutil.which("chromium-browser")
# the timeline's colours (jobs/htmlreport.py CSS): valid data kept, the cut, the lost records
KEPT, CUT, LOST = (0x4a, 0x90, 0xd9), (0xc6, 0x28, 0x28), (0x7b, 0x32, 0x94)


def _browser(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    if BROWSER is None:
        pytest.skip("needs Debian's chromium (scripts/test.sh installs it as root with apt-get)")
    return subprocess.run([BROWSER, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                           "--proxy-server=127.0.0.1:9", "--proxy-bypass-list=<-loopback>", *args],
                          capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def _colours(png) -> set[tuple[int, int, int]]:
    from PIL import Image

    with Image.open(png) as im:
        return {c for _, c in im.convert("RGB").getcolors(maxcolors=1 << 20)}


@pytest.mark.spark
@pytest.mark.slow
def test_recovery_report_page_in_a_browser(spark, tmp_path, capsys):
    store = tmp_path / "store"
    shutil.copytree(support.input_store(*CASE), store, symlinks=True)
    conf = str(support.broker_conf(*CASE))
    out, audit_path = tmp_path / "repaired", tmp_path / "audit"
    page = tmp_path / "repaired.report.html"
    assert recover_job.main(["--store", str(store), "--broker-config", conf, "--out", str(out),
                             "--audit-path", str(audit_path), "--report", str(page)]) == 0
    printed = capsys.readouterr().out
    assert f"  report             {page}" in printed.splitlines()     # listed in the run summary
    text = page.read_text()
    # self-contained: nothing to fetch (the one URL is SVG's namespace name, never loaded)
    assert not re.search(r"<script|<link|<img|<iframe|src=|url\(|@import", text)
    assert set(re.findall(r"https?://[^\"' <)]+", text)) == {"http://www.w3.org/2000/svg"}

    done = _browser("--dump-dom", page.as_uri())
    assert done.returncode == 0, done.stderr
    dom = done.stdout
    assert '<svg id="timeline"' in dom and dom.count('class="range"') >= 10
    facts = offsets.offset_facts(read_table(str(audit_path / "consumer_offset_findings")))
    sentence = re.search(r'<p class="sentence" id="sentence">(.*?)</p>', dom).group(1)
    assert "abnormal recovery path" in sentence and "cut the commitlog at phy 812,977" in sentence
    assert "lose 20 intact message(s)" in sentence
    assert offsets.sentence(facts[0]) in sentence                     # the same words as every job
    lost = read_table(str(audit_path / "lost_messages"))
    assert f"{lost.num_rows} intact messages lost" in dom
    for table in ("queue_findings", "lost_messages", "consumer_offset_findings", "runs"):
        assert f'href="{(audit_path / table).as_uri()}"' in dom          # links to the Delta tables
    for kind in ("removed_beyond_truncation", "dangling_beyond_end", "commitlog.bad_record"):
        assert f">{kind}<" in dom

    shot = tmp_path / "report.png"
    done = _browser("--window-size=1200,1600", f"--screenshot={shot}", page.as_uri())
    assert done.returncode == 0 and shot.is_file(), done.stderr
    colours = _colours(shot)
    assert {KEPT, CUT, LOST} <= colours, "the timeline did not render"

    # the audit's page, from the same facts
    audit_page = tmp_path / "audit.html"
    assert audit_job.main(["--store", str(store), "--broker-config", conf, "--report", str(audit_page)]) == 1
    assert f"  report             {audit_page}" in capsys.readouterr().out.splitlines()
    assert offsets.sentence(facts[0]) in audit_page.read_text()


def _rgb(colour: str) -> tuple[int, int, int]:
    return tuple(int(colour[i:i + 2], 16) for i in (1, 3, 5))


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.oracle
def test_timer_messages_on_the_page(spark, tmp_path, capsys):
    """A 5.3.3 store the real broker wrote (tests/oracle: 200 timer messages, kill -9) whose
    commitlog is cut in its last file (``test_timer_oracle._cut_index``): the page draws the 200
    pending timer messages by deliver time, those past the cut apart (the count the repair's own
    MANIFEST.json drops), and the repaired store's timer store."""
    from tests import oracle
    from tests.test_timer_oracle import BROKER_CONF, _cut_index, _damage

    store, conf = tmp_path / "store", tmp_path / "broker.conf"
    conf.write_text(BROKER_CONF)
    w = oracle.run("5.3.3", "TimerOracle", "write", store, conf, 200, 100, 11, "halt")
    _damage("commitlog-cut", store, w["written"])
    kept = _cut_index(w["written"])
    past = 200 - kept
    out, page = tmp_path / "repaired", tmp_path / "report.html"
    assert recover_job.main(["--store", str(store), "--broker-config", str(conf), "--out", str(out),
                             "--report", str(page)]) == 0
    capsys.readouterr()
    timer = json.loads((out / "MANIFEST.json").read_text())["timerStore"]
    assert timer["dropped"] == {"timer.unit_beyond_truncation": past} and timer["units_kept"] == kept

    done = _browser("--dump-dom", page.as_uri())
    assert done.returncode == 0, done.stderr
    dom = done.stdout
    pending = re.search(r'<p id="timer-pending">(.*?)</p>', dom).group(1)
    assert pending.startswith("200 timer message(s) pending of 200 timer log units"), pending
    assert f"{past} lost: past the cut" in pending and "delivered twice" in pending
    assert f"The repaired store keeps {kept} of 200 timer log units ({past} timer.unit_beyond_truncation)" in dom
    figure = re.search(r'<svg id="timer".*?</svg>', dom, re.S).group(0)
    bars = [(int(n), f) for n, f in re.findall(r"<title>(\d+) ([^<]+)</title>", figure)]
    assert sum(n for n, _ in bars) == 200
    assert sum(n for n, f in bars if f == "lost: past the cut") == past

    shot = tmp_path / "report.png"
    done = _browser("--window-size=1200,5000", f"--screenshot={shot}", page.as_uri())
    assert done.returncode == 0 and shot.is_file(), done.stderr
    colours = _colours(shot)
    assert {_rgb(FATE_COLOURS["lost: past the cut"]), _rgb(FATE_COLOURS["delivered"])} <= colours, \
        "the timer figure did not render"


def test_report_target_is_checked_before_any_work(tmp_path, capsys):
    store = support.input_store(*CASE)
    conf = str(support.broker_conf(*CASE))
    inside = store / "report.html"
    assert recover_job.main(["--store", str(store), "--broker-config", conf, "--dry-run",
                             "--report", str(inside)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "must not be inside the store" in err
    assert not inside.exists()
    assert audit_job.main(["--store", str(store), "--broker-config", conf, "--report", str(tmp_path)]) == 2
    assert capsys.readouterr().err == f"error: could not audit: {tmp_path}: --report names a directory, not a file\n"
