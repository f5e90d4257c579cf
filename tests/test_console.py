"""The operator's console (issue 37, 2 and 3), each job run as its own process as an operator runs
it: a mistake is one ``error:`` line, the first on stderr, before Spark starts; the report is
stdout alone; progress (one line per pass) and warnings are on stderr, without the JVM's and
Spark's start-up lines; under ``spark-submit`` too.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time

import pytest

import support

ROOT = support.ROOT
CASE = ("rocketmq-5.3.3", "crash-tail")
CONF = str(support.broker_conf(*CASE))
# the jobs' own lines on stderr (jobs._spark.sparkutil.configure_logging)
JOB_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} jobs\.\w+ ")
# what the JVM and Spark print when they start, none of which says anything about the run
NOISE = re.compile(r"Using incubator modules|Using Spark's default log4j profile|Setting default log level|"
                   r"sc\.setLogLevel|NativeCodeLoader|resolves to a loopback address|SPARK_LOCAL_IP|"
                   r"spark\.local\.dir will be overridden|\[Stage \d")
MISTAKE_SECONDS = 20     # generous on a loaded 2-core machine; a JVM start alone takes 2-10 s there


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_GATEWAY", "SPARK_"))}
    env.pop("PYTEST_CURRENT_TEST", None)
    return env


def _job(*args: str, timeout: float = 600) -> tuple[subprocess.CompletedProcess, float]:
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", *args], cwd=ROOT, env=_env(), capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    return done, time.monotonic() - started


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = tmp_path_factory.mktemp("console") / "store"
    shutil.copytree(support.input_store(*CASE), root, symlinks=True)
    return root


def _mistakes(store, tmp):
    (tmp / "not-a-store").mkdir(exist_ok=True)
    (tmp / "not-a-store" / "notes.txt").write_text("x")
    (tmp / "exists").mkdir(exist_ok=True)
    s = str(store)
    return {
        "missing store": (["jobs.recover", "--store", str(tmp / "nope"), "--broker-config", CONF,
                           "--out", str(tmp / "o")], "store directory does not exist"),
        "missing broker.conf": (["jobs.recover", "--store", s, "--broker-config", str(tmp / "nope.conf"),
                                 "--out", str(tmp / "o")], "cannot read broker config"),
        "out inside the store": (["jobs.recover", "--store", s, "--broker-config", CONF,
                                  "--out", f"{s}/repaired"], "inside"),
        "not a store": (["jobs.recover", "--store", str(tmp / "not-a-store"), "--broker-config", CONF,
                         "--out", str(tmp / "o")], "not a RocketMQ store root"),
        "out exists": (["jobs.recover", "--store", s, "--broker-config", CONF, "--out", str(tmp / "exists")],
                       "output directory exists"),
        "no broker.conf for a store of other sizes": (["jobs.recover", "--store", s, "--dry-run"],
                                                      "pass the broker's broker.conf"),
        "audit: missing store": (["jobs.audit", "--store", str(tmp / "nope"), "--broker-config", CONF],
                                 "could not audit: "),
        "audit: missing broker.conf": (["jobs.audit", "--store", s, "--broker-config", str(tmp / "nope.conf")],
                                       "cannot read broker config"),
    }


MISTAKES = ("missing store", "missing broker.conf", "out inside the store", "not a store", "out exists",
            "no broker.conf for a store of other sizes", "audit: missing store", "audit: missing broker.conf")


@pytest.mark.parametrize("mistake", MISTAKES)
def test_a_mistake_is_the_first_line_and_comes_before_spark(store, tmp_path, mistake):
    cases = _mistakes(store, tmp_path)
    assert set(cases) == set(MISTAKES)
    args, says = cases[mistake]
    before = support.tree_digest(store)
    done, secs = _job(*args)
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    # one line, the error itself: no JVM or Spark line before it, and no Spark started at all
    assert len(lines) == 1 and lines[0].startswith("error: ") and says in lines[0], done.stderr
    assert secs < MISTAKE_SECONDS
    assert support.tree_digest(store) == before


def _assert_console(done: subprocess.CompletedProcess, first_stdout: str, audited: bool = True) -> list[str]:
    """The report on stdout alone, starting with ``first_stdout``; stderr the jobs' lines and
    Spark's own warnings only; the audit's pass line unless not ``audited`` (a bounded dry run).
    Returns stderr's lines."""
    assert done.returncode == 0, done.stderr
    out, err = done.stdout.splitlines(), done.stderr.splitlines()
    assert out[0].startswith(first_stdout), done.stdout
    assert not [ln for ln in out if JOB_LINE.match(ln) or NOISE.search(ln) or ln.startswith("error")], done.stdout
    assert not [ln for ln in err if NOISE.search(ln)], done.stderr
    assert any(" jobs.recover pass audit " in ln for ln in err) == audited, done.stderr
    return err


@pytest.mark.slow
def test_dry_run_console(store, tmp_path):
    done, _ = _job("jobs.recover", "--store", str(store), "--broker-config", CONF, "--dry-run")
    err = _assert_console(done, "DRY RUN: nothing was written", audited=False)
    assert JOB_LINE.match(err[0]), done.stderr       # the first line on stderr is the job's own
    assert [ln for ln in err if not JOB_LINE.match(ln)] == [], done.stderr
    # the dry run's report is the real run's, said first to be a dry run
    out = tmp_path / "repaired"
    real, _ = _job("jobs.recover", "--store", str(store), "--broker-config", CONF, "--out", str(out))
    _assert_console(real, "run recover-")
    assert f"  repaired store     {out}" in real.stdout.splitlines()


@pytest.mark.slow
def test_spark_submit_console(store, tmp_path):
    """``spark-submit`` merges the Python driver's stderr into its stdout (Spark's PythonRunner):
    the job puts stderr back (``jobs.console.separate_streams``), so the report is stdout alone
    there too. Run as docs/recovery.md shows it from the clone (``scripts/submit.sh``: the .venv's Spark,
    spark-conf/log4j2.properties, the java launcher's start-up warning dropped), from elsewhere."""
    submit = [str(ROOT / "scripts" / "submit.sh"), str(ROOT / "jobs" / "recover.py"),
              "--store", str(store), "--broker-config", CONF]
    done = subprocess.run(["bash", *submit, "--dry-run"], cwd=tmp_path, env=_env(), capture_output=True,
                          text=True, timeout=600, stdin=subprocess.DEVNULL)
    embedded, _ = _job("jobs.recover", "--store", str(store), "--broker-config", CONF, "--dry-run")
    assert done.returncode == 0, done.stderr
    assert done.stdout == embedded.stdout
    err = done.stderr.splitlines()
    assert [ln for ln in err if not JOB_LINE.match(ln)] == [], done.stderr
    assert any(" jobs.recover pass plan " in ln for ln in err), done.stderr
    # a mistake: the one line on stderr, nothing on stdout
    done = subprocess.run(["bash", *submit, "--out", str(store / "repaired")], cwd=tmp_path, env=_env(),
                          capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
    assert done.returncode == 2 and done.stdout == "", done.stderr
    assert len(done.stderr.splitlines()) == 1 and done.stderr.startswith("error: "), done.stderr


@pytest.mark.parametrize("job", ["jobs.recover", "jobs.audit", "jobs.dump", "jobs.salvage", "jobs.replicas"])
def test_help_gives_exit_codes_and_an_example(job):
    done, _ = _job(job, "--help", timeout=120)
    assert done.returncode == 0 and done.stderr == ""
    text = done.stdout
    assert "``" not in text                                     # no reST markup left
    assert re.search(r"^exit codes: 0 ", text, re.M) and re.search(r"^example:\n  python -m jobs\.", text, re.M)
    usage = " ".join(text.split("\n\n")[0].split())
    if job in ("jobs.recover", "jobs.audit", "jobs.salvage"):
        # required in the usage line: not in brackets (recover: or --demo, one of the two)
        assert "--store STORE" in usage and "[--store" not in usage, usage
    # the example names every required option (those outside brackets in the usage line)
    required = re.findall(r"(--[a-z-]+) [A-Z_]+", re.sub(r"\[[^]]*\]|\([^)]*\)", "", usage))
    example = text.rsplit("example:\n", 1)[1]
    assert all(opt in example for opt in required), (required, example)
    # its page in docs/ says the same: the epilog word for word, and every option
    page = re.search(r"^more: (docs/[\w-]+\.md)$", text, re.M).group(1)
    doc = (ROOT / page).read_text(encoding="utf-8")
    assert text[text.index("exit codes: "):].strip() in doc, page
    options = set(re.findall(r"^  (?:-\w, )?(--[a-z][\w-]*)", text, re.M)) - {"--help"}
    assert [o for o in sorted(options) if not re.search(rf"(?<![\w-]){o}(?![\w-])", doc)] == [], page
