"""Every command the README and the pages of docs/ show in their ```bash blocks, run as shown from
a checkout (issue 37, 3).

A new user's shell: the checkout's top-level entries linked into a fresh directory (so what a command
writes there, ``demo-output/``, ``out.ipynb``, stays out of the checkout), no activated venv, no
``SPARK_HOME`` or ``PYSPARK_*`` in the environment. The README's placeholders become a small real
store (the 4.9.7 ``crash-tail`` fixture), optional ``[...]`` arguments are left out but for
``--dry-run`` (kept where a command takes it: the quickest run) and ``--broker-config FILE`` (the
fixture's sizes are not the broker's defaults), and ``X ...`` ("the same") repeats
the previous command's arguments (of the same page). A command this machine cannot run as shown (a YARN cluster, an
S3 endpoint, the suite itself) is listed below with the test that runs its form; any other command
the README or a page of docs/ gains is run, or this test fails.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

import support
from jobs._spark import sparkjars

ROOT = Path(__file__).resolve().parent.parent
CASE = ("rocketmq-4.9.7", "crash-tail")

# what cannot run here as shown, and where its form is tested
NOT_RUN_HERE = {
    "bash scripts/test.sh": "the test suite itself (.ci/run)",
    "export AWS_": "an S3 endpoint's credentials: tests/test_remote_jobs.py (moto_server)",
    ".venv/bin/python -m jobs.audit --store s3://": "an S3 endpoint: tests/test_remote_jobs.py",
    ".venv/bin/python -m jobs.recover --broker-config broker.conf --dry-run --store 's3://":
        "an S3 endpoint: tests/test_remote_jobs.py",
    ".venv/bin/python -m jobs.audit --store 's3://": "an S3 endpoint: tests/test_remote_jobs.py",
    "bash scripts/build_env_archive.sh": "tests/test_spark_submit.py",
    "cp spark-conf/cluster.conf.example": "a cluster's settings: tests/test_spark_submit.py",
    "spark-submit --master yarn": "a YARN cluster: tests/test_spark_submit.py (local-cluster)",
    "JAVA_HOME=": "tests/test_spark_submit.py runs it",
    "spark-submit --packages": "a cluster: its coordinates are jobs._spark.sparkjars' (test_readme_commands_are_found), "
                               "which tests/test_sparkjars.py resolves from Maven Central",
}


PAGES = ["README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md"))]


def readme_commands() -> list[str]:
    """Every documented command (``page_commands``), in page order."""
    return [c for page in PAGES for c in page_commands(page)]


def shown_outputs(page: str) -> dict[str, list[str]]:
    """What a page shows a command printing: a plain ``` block after a ```bash block is the
    output of that block's last command."""
    text = (ROOT / page).read_text(encoding="utf-8")
    out, last = {}, None
    for lang, block in re.findall(r"^```(\w*)\n(.*?)^```", text, re.S | re.M):
        if lang == "bash":
            last = _commands(block)[-1]
        elif lang == "" and last is not None:
            out[last], last = block.splitlines(), None
    return out


def page_commands(page: str) -> list[str]:
    """The commands of a page's ```bash blocks."""
    text = (ROOT / page).read_text(encoding="utf-8")
    return [c for block in re.findall(r"```bash\n(.*?)```", text, re.S) for c in _commands(block)]


def _commands(block: str) -> list[str]:
    """A ```bash block's commands: continuation lines joined, comments dropped."""
    out: list[str] = []
    continued = False
    for ln in block.splitlines():
        ln = re.sub(r"(^|\s)#.*$", "", ln).strip()
        if not ln:
            continue
        if continued:
            out[-1] = f"{out[-1]} {ln}"
        else:
            out.append(ln)
        continued = ln.endswith("\\")
        if continued:
            out[-1] = out[-1][:-1]
    return [" ".join(c.split()) for c in out]


def _notebook_streams(path: Path | None) -> str:
    """What a notebook papermill saved printed (its cells' stream outputs)."""
    if path is None:
        return ""
    import nbformat
    nb = nbformat.read(path, as_version=4)
    return "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", ())
                   if o.get("output_type") == "stream")


def test_readme_commands_are_found():
    """The parser sees the commands a reader sees (fast: no command run)."""
    cmds = readme_commands()
    assert "bash scripts/run.sh" in cmds
    assert any(c.startswith("bash scripts/submit.sh jobs/recover.py --store /data/store") for c in cmds)
    assert any(c.startswith(".venv/bin/papermill notebooks/lost_offsets.ipynb") for c in cmds)
    # the jars a cluster gets are the ones the embedded session loads
    (packages,) = [c.split()[2] for c in cmds if c.startswith("spark-submit --packages ")]
    assert packages == ",".join(sparkjars.coordinates())
    # every page a page links to is there
    for page in PAGES:
        for target in re.findall(r"\]\(([^)#:]+)\)", (ROOT / page).read_text(encoding="utf-8")):
            assert (ROOT / page).parent.joinpath(target).exists(), (page, target)
    # from a clone nothing but the .venv's own tools and the scripts run: no bare python or spark-submit
    for c in cmds:
        if not any(c.startswith(p) for p in NOT_RUN_HERE):
            assert re.match(r"(bash scripts/|\.venv/bin/)", c), c


def _as_run(cmd: str, before: str | None, paths: dict[str, str]) -> str:
    """The command with its placeholders filled in and its optional arguments left out."""
    if cmd.endswith(" ...") and before is not None:            # "the same" as the command before
        head = cmd[:-4]
        args = before.split(" --", 1)[1]
        cmd = f"{head} --{args}"
    kept = [opt for opt in ("--broker-config FILE", "--dry-run") if f"[{opt}]" in cmd]
    cmd = " ".join([re.sub(r"\s*\[[^]]*\]", "", cmd), *kept])
    for placeholder, value in paths.items():
        cmd = re.sub(rf"(?<![\w/.-]){re.escape(placeholder)}(?![\w/.-])", value, cmd)
    return cmd


@pytest.mark.slow
def test_every_readme_command_runs_as_shown(tmp_path):
    clone = tmp_path / "clone"
    clone.mkdir()
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True)
    for name in {p.split("/", 1)[0] for p in tracked.stdout.splitlines()} | {".venv"}:
        (clone / name).symlink_to(ROOT / name)
    store = tmp_path / "data" / "store"
    shutil.copytree(support.input_store(*CASE), store, symlinks=True)
    slave = tmp_path / "data" / "slave"
    shutil.copytree(store, slave, symlinks=True)
    conf = str(support.broker_conf(*CASE))
    paths = {"/data/store-repaired": str(tmp_path / "data" / "repaired"), "/data/store": str(store),
             "/data/master/store": str(store), "/data/slave1/store": str(slave),
             "/opt/rocketmq/conf/broker.conf": conf, "broker.conf": conf, "FILE|STORE": str(store), "FILE": conf,
             "/data/audit": str(tmp_path / "data" / "audit"),
             "/data/investigation": str(tmp_path / "data" / "investigation"),
             "lost.jsonl": str(tmp_path / "data" / "lost.jsonl"), "DEST": str(tmp_path / "data" / "synthetic")}
    env = {k: v for k, v in os.environ.items()
           if k not in ("SPARK_HOME", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "VIRTUAL_ENV")
           and not k.startswith("PYTEST")}
    env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if not p.startswith(str(ROOT)))
    ran, seen = [], set()
    documented = [(c, page) for page in PAGES for c in page_commands(page)]
    shown = {c: lines for page in PAGES for c, lines in shown_outputs(page).items()}
    before, page_before = None, None
    for cmd, page in documented:
        if page != page_before:
            before, page_before = None, page          # "X ..." repeats a command of its own page
        if any(cmd.startswith(p) for p in NOT_RUN_HERE) or cmd in seen:
            continue                # a command shown again (run.sh before the notebooks) runs once
        line = _as_run(cmd, before, paths)
        before = cmd if not cmd.endswith(" ...") else before
        if line in seen:
            continue                # "the same" as one already run
        seen.update((cmd, line))
        started = time.monotonic()
        done = subprocess.run(["bash", "-c", line], cwd=clone, env=env, capture_output=True, text=True,
                              timeout=600, stdin=subprocess.DEVNULL)
        print(f"{time.monotonic() - started:6.1f}s rc {done.returncode} {page}: {line}")
        ok = (0, 1) if " jobs.audit" in line or "jobs/audit.py" in line else (0,)
        assert done.returncode in ok, f"{page}: {line}\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
        assert "Traceback" not in done.stderr and "SPARK_HOME" not in done.stderr, f"{line}\n{done.stderr}"
        ran.append(line)
        # the output a page shows is the command's: every line but those abridged with "…"
        printed = done.stdout + _notebook_streams(clone / "out.ipynb" if "papermill" in line else None)
        printed = printed.replace(str(tmp_path / "data"), "/data").replace(conf, "/opt/rocketmq/conf/broker.conf")
        missing = [ln for ln in shown.get(cmd, ()) if "…" not in ln and ln not in printed.splitlines()]
        assert missing == [], f"{page}: {line}: shown but not printed:\n" + "\n".join(missing) + f"\n---\n{printed}"
        if "papermill" in line:
            # the kernel's shutdown: no interrupt caught, no JVM cleanup racing the driver's
            assert "KeyboardInterrupt" not in done.stderr and "Failed to delete" not in done.stderr, done.stderr
            saved = (clone / "out.ipynb").read_text(encoding="utf-8")
            assert not re.search(r"\d\d/\d\d/\d\d \d\d:\d\d:\d\d (WARN|ERROR|INFO) |\[Stage \d", saved)
        if line == "bash scripts/run.sh":
            assert done.stdout.startswith("run recover-"), done.stdout[:500]      # the report alone
            assert (clone / "demo-output" / "report.html").is_file()
    assert len(ran) >= 10, ran
