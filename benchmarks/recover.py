"""End-to-end recovery at two store sizes: ``jobs.recover`` on Spark vs the same passes in one process.

    .venv/bin/python benchmarks/recover.py [--sizes 1.5GiB,6GiB] [--dir DIR] [--no-reference] [--no-cds]
                                           [--fixed-size 8MiB] [--fixed-runs 5] [--baseline REV] [--task-cpu]
                                           [--crash kill9,torn-tail,fresh-checkpoint] [--dry-run]
                                           [--tight-disk] [--scan-dir DIR] [--settle SECONDS]
                                           [--memory] [--queues N]

Makes (or reuses, keyed by their spec) two crashed synthetic stores with ``store_reader.testing.synthetic``:
about 1 KiB messages, 256 MiB segments, 32 queues over four topics, keys on every message, killed
with a stale checkpoint, a torn last record and a flipped body byte in the middle of the last
segment holding records (``CrashSpec(abort=True, stale_checkpoint=True, torn_tail=True,
corrupt="crc")``). Then, per size, a fresh ``python -m jobs.recover --store S --out O
--broker-config S/broker.conf --audit-path A --overwrite`` (its own Spark, spark-conf/local.conf)
while this process samples the job's process tree and the machine's cores with psutil.

Printed side by side: seconds per pass (the job's ``pass <name> <secs>s`` log lines; the three
write passes run concurrently, so their seconds overlap), the wall total, the marginal throughput
(the slope between the two sizes), the fixed overhead (the total extrapolated to 0 bytes, the
whole job on an 8 MiB store of the same kind, five times: the median and the range, and the
session start measured alone), peak RSS of
the driver JVM, the driver Python and the Python workers, and per-core CPU during the scan pass.
The process tree's CPU counts every process once: a parent's children times (the kernel's, for the
children it waited for) less the children sampled here (``Sampler.cpu_seconds``). ``--task-cpu``
runs this tree once more per size with each Spark task's CPU logged (``benchmarks/taskcpu.py``) and
prints the Python tasks' CPU by what they run, with its slope between the sizes.
The driver JVM starts from its class-data-sharing archive (built first if missing, as ``python -m
jobs.buildcds`` would; ``--no-cds`` measures without it). Next to it the reference:
the same passes in ONE process without Spark (segment summaries, ``prediction.predict``, the ``repair`` functions writing
to a temporary directory; no audit, which needs Spark).

Then the real broker's own restart on a copy of the same store (``tests/oracle.py``, the release jars
of the version that wrote it: its load, i.e. its recovery, the reput and the shutdown; ``--no-broker``
skips it), with its max phy offset against the job's truncation point.

Per size also the dry run (``--dry-run`` of this tree), before the job, and the broker's full rebuild
after its restart (``consumequeue/`` and ``index/`` deleted: its reput dispatches the whole commitlog);
then one table of the four with each process's peak RSS (``print_scale``).

``--tight-disk`` (on by itself from 16 GiB: a 25 GB store, a copy of it and the job's output do not
fit a 30 GB budget): the job runs with ``--link`` (the commitlog files it keeps whole are hard links,
so its output is the rebuilt queues and index and the cut file) and its output is deleted after it;
the broker restarts the store itself, last, then rebuilds it; the store, now changed, is removed, and
the sizes run largest first so that only one store exists at a time.

``--memory`` runs only the whole job (``--link``) of ``--baseline`` and of this tree per size and prints
the largest Python worker's peak RSS and anonymous memory; with ``--queues N`` the stores have one
topic of N queues, so a queue's length grows with the store.

``--dry-run`` times only the dry run (this tree's and ``--baseline``'s) and the broker's restart per
size, and prints them as one table; ``--crash`` words (``CRASH_WORDS``) make the stores another way.

Figures are only valid on a quiet machine: the script waits (up to 3 minutes) for the 1-minute load
average to fall below 1, and before each timed run syncs the previous run's output to disk (its
write-back would otherwise land in the next run), reads the run's store into the page cache (a
store larger than half the memory: empties the page cache instead, as root) and waits up to 90 s
more. It prints each run's starting load; above 3 it flags every figure as not valid.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from dataclasses import asdict, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import psutil  # noqa: E402

from benchmarks import taskcpu  # noqa: E402
from scripts.worktree import baseline_tree  # noqa: E402
from store_reader.testing.synthetic import CrashSpec, SyntheticStoreSpec, parse_size, write_store  # noqa: E402

GB = 1e9
MAX_LOAD = 3.0
CRASH = CrashSpec(abort=True, stale_checkpoint=True, torn_tail=True, corrupt="crc")
# --crash words: how the store is left (``CrashSpec``); the default is ``CRASH``
CRASH_WORDS = {"kill9": {"abort": True}, "torn-tail": {"torn_tail": True},
               "fresh-checkpoint": {"stale_checkpoint": False}, "stale-checkpoint": {"stale_checkpoint": True},
               "crc": {"corrupt": "crc"}}


def crash_arg(text: str) -> CrashSpec:
    """``kill9,torn-tail,fresh-checkpoint`` as a ``CrashSpec`` (words in ``CRASH_WORDS``)."""
    fields = {"abort": False, "stale_checkpoint": False, "torn_tail": False, "corrupt": None}
    for word in filter(None, (w.strip() for w in text.split(","))):
        if word not in CRASH_WORDS:
            raise argparse.ArgumentTypeError(f"unknown crash word {word!r} (one of {', '.join(CRASH_WORDS)})")
        fields.update(CRASH_WORDS[word])
    return CrashSpec(**fields)
PASS_LINE = re.compile(r"pass (\S.*?)\s+([0-9.]+)s\b")
CUT_LINE = re.compile(r"truncation point\s+phy (\d+)")
SCANS_LINE = re.compile(r"scans per segment ([0-9.]+) \(max ([0-9.]+)\)")
BASELINE = "d140b73"
PASSES = ["discover", "scan", "plan", "audit", "rebuild consume queues", "rebuild index",
          "write commitlog", "write manifest", "place repaired store", "write audit tables"]
# more ``jobs.recover`` arguments for every timed run of this tree (``--tight-disk``: ``--link``;
# ``--scan-dir``)
JOB_EXTRA: list[str] = []
# stores at least this large make the run ``--tight-disk`` by itself
TIGHT_DISK_FROM = 16 << 30
SETTLE_MAX = 90.0
REFERENCE_PASSES = ["scan", "plan", "rebuild consume queues", "rebuild index", "write commitlog",
                    "checkpoint + manifest", "place repaired store"]


# -- the stores ---------------------------------------------------------------------------------------

def spec_for(size: int, queues: int | None = None) -> SyntheticStoreSpec:
    """~1 KiB messages, 256 MiB segments, the default 32 queues over four topics (``queues``: that
    many queues of one topic instead), keys everywhere."""
    spec = SyntheticStoreSpec(total_bytes=size, segment_size=256 << 20, message_size=1024, seed=1)
    return spec if queues is None else replace(spec, topics=(("TopicA", queues),))


def ensure_store(root: Path, size: int, crash: CrashSpec = CRASH, queues: int | None = None) -> dict:
    """The crashed store of ``size`` at ``root``, made unless one with the same spec is there."""
    stamp = root / "bench-spec.json"
    want = {"spec": asdict(spec_for(size, queues)), "crash": asdict(crash)}
    if stamp.exists():
        have = json.loads(stamp.read_text())
        if {k: have.get(k) for k in want} == json.loads(json.dumps(want)):
            return have
    if root.exists():
        shutil.rmtree(root)
    t = time.perf_counter()
    info = write_store(root, spec_for(size, queues), crash, keep_messages=False)
    print(f"wrote {info.counts['records']:,} records ({info.written_end / GB:.2f} GB) in "
          f"{time.perf_counter() - t:.0f}s -> {root}", flush=True)
    have = {**want, "written_end": info.written_end, "records": info.counts["records"],
            "truncation_offset": info.truncation_offset}
    stamp.write_text(json.dumps(have))
    return have


# -- watching a run ------------------------------------------------------------------------------------

def _kind(p: psutil.Process, root_pid: int) -> str | None:
    try:
        if p.pid == root_pid:
            return "driver python"
        name, cmd = p.name(), " ".join(p.cmdline())
    except psutil.Error:
        return None
    if name == "java" or cmd.startswith("java") or "/java " in cmd:
        return "driver JVM"
    if "pyspark.daemon" in cmd or "pyspark.worker" in cmd or "pyspark/daemon" in cmd:
        return "python workers"
    return None


def _high_water(pid: int) -> int:
    """The process's peak RSS as the kernel counts it (``taskcpu.peak_rss``; 0 if gone): a spike
    shorter than the sampling interval is not missed (the driver Python's bounded prediction holds
    its replay for about a second: sampled RSS caught it in some runs and not in others)."""
    try:
        return max(taskcpu.peak_rss(pid), 0)
    except OSError:
        return 0


class Sampler(threading.Thread):
    """Samples a process tree every ``interval`` seconds: RSS per kind of process (peak of one, the
    kernel's high-water mark, and peak of the sum, sampled), CPU seconds per process, and the
    machine's per-core utilisation."""

    def __init__(self, pid: int, interval: float = 0.2) -> None:
        super().__init__(daemon=True)
        self.root = psutil.Process(pid)
        self.interval = interval
        self.stop = threading.Event()
        self.peak_one: dict[str, int] = {}
        self.peak_sum: dict[str, int] = {}
        # RSS less its file-backed and shared pages (clean mapped pages the kernel can drop: a
        # memory-mapped file read grows RSS by what was read, not the process's demand)
        self.peak_anon: dict[str, int] = {}
        self.own: dict[int, float] = {}        # a process's own CPU seconds
        self.reaped: dict[int, float] = {}     # its waited-for children's (the kernel's children times)
        self.parent: dict[int, int] = {}
        self.last_tick: dict[int, int] = {}    # the last sample that saw it
        self.ticks = 0
        self.kinds: dict[int, str] = {}
        self.cores: list[tuple[float, list[float]]] = []
        self.tree_cpu: list[tuple[float, float]] = []
        psutil.cpu_percent(percpu=True)

    def run(self) -> None:
        while not self.stop.is_set():
            self.sample()
            self.stop.wait(self.interval)
        self.sample()

    def sample(self) -> None:
        now = time.time()
        try:
            procs = [self.root] + self.root.children(recursive=True)
        except psutil.Error:
            procs = []
        sums: dict[str, int] = {}
        self.ticks += 1
        for p in procs:
            kind = _kind(p, self.root.pid)
            try:
                mem = p.memory_info()
                rss = mem.rss
                cpu = p.cpu_times()
                ppid = p.ppid()
            except psutil.Error:
                continue
            self.own[p.pid] = max(self.own.get(p.pid, 0.0), cpu.user + cpu.system)
            self.reaped[p.pid] = max(self.reaped.get(p.pid, 0.0), cpu.children_user + cpu.children_system)
            self.parent[p.pid] = ppid
            self.last_tick[p.pid] = self.ticks
            if kind is None:
                continue
            self.kinds[p.pid] = kind
            sums[kind] = sums.get(kind, 0) + rss
            self.peak_one[kind] = max(self.peak_one.get(kind, 0), rss, _high_water(p.pid))
            self.peak_anon[kind] = max(self.peak_anon.get(kind, 0), rss - mem.shared)
        for kind, total in sums.items():
            self.peak_sum[kind] = max(self.peak_sum.get(kind, 0), total)
        self.cores.append((now, psutil.cpu_percent(percpu=True)))
        self.tree_cpu.append((now, sum(self.own.values()) + sum(self.reaped.values())))

    @property
    def cpu_seconds(self) -> dict[int, float]:
        """Each process's CPU seconds, every process counted once: its own and its reaped
        children's, less what of those was sampled here (spark-submit's launcher JVM: sampled, and
        in the children times of the shells that ran and reaped it). A child gone before its
        parent's last sample is taken off the parent's children times, down to none (a parent that
        ignores SIGCHLD gets no children times at all)."""
        children: dict[int, list[int]] = defaultdict(list)
        for pid, parent in self.parent.items():
            children[parent].append(pid)

        def sampled(pid: int) -> float:
            """What of ``pid`` and the children it outlived was seen here (its reaper counts it all)."""
            gone = sum(sampled(c) for c in children[pid] if self.last_tick[c] <= self.last_tick[pid])
            return self.own[pid] + max(self.reaped[pid], gone)

        out = {}
        for pid in self.own:
            taken = sum(sampled(c) for c in children[pid] if self.last_tick[c] < self.last_tick[pid])
            out[pid] = self.own[pid] + max(0.0, self.reaped[pid] - taken)
        return out

    def cpu_of(self, kind: str) -> float:
        """CPU seconds of the processes of one kind."""
        return sum(c for pid, c in self.cpu_seconds.items() if self.kinds.get(pid) == kind)

    def core_use(self, start: float, end: float) -> list[float]:
        """Mean utilisation (%) of every core between two wall-clock times."""
        rows = [c for t, c in self.cores if start <= t <= end]
        if not rows:
            return []
        return [sum(r[i] for r in rows) / len(rows) for i in range(len(rows[0]))]

    def own_cores(self, start: float, end: float) -> float:
        """Cores this process tree kept busy on average between two wall-clock times (its own
        CPU seconds over the window, whatever else ran on the machine)."""
        rows = [(t, c) for t, c in self.tree_cpu if start <= t <= end]
        if len(rows) < 2 or rows[-1][0] <= rows[0][0]:
            return 0.0
        return (rows[-1][1] - rows[0][1]) / (rows[-1][0] - rows[0][0])


def watched(cmd: list[str], cwd: Path) -> tuple[float, list[tuple[float, str]], Sampler, int]:
    """Run ``cmd`` under the sampler: (wall seconds, output lines with their arrival time,
    sampler, exit code)."""
    t = time.time()
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            env=dict(os.environ, PYTHONUNBUFFERED="1", PYTHONPATH=str(cwd)))
    sampler = Sampler(proc.pid)
    sampler.start()
    lines = []
    buf = b""
    assert proc.stdout is not None
    while True:
        chunk = proc.stdout.read1(65536)
        if not chunk:
            break
        buf += chunk
        *done, buf = re.split(rb"[\r\n]", buf)
        now = time.time()
        lines += [(now, d.decode(errors="replace")) for d in done if d.strip()]
    rc = proc.wait()
    wall = time.time() - t
    sampler.stop.set()
    sampler.join()
    if buf.strip():
        lines.append((time.time(), buf.decode(errors="replace")))
    return wall, lines, sampler, rc


def passes_of(lines: list[tuple[float, str]]) -> dict[str, tuple[float, float]]:
    """``pass <name> <secs>s`` log lines -> {name: (seconds, wall time the line arrived)}."""
    out = {}
    for at, line in lines:
        m = PASS_LINE.search(line)
        if m:
            out[m.group(1)] = (float(m.group(2)), at)
    return out


# -- the runs ------------------------------------------------------------------------------------------

def spark_run(store: Path, work: Path, code: Path = ROOT, extra: tuple[str, ...] = ()) -> dict:
    """``python -m jobs.recover`` of the tree ``code`` on ``store`` as its own process (fresh Spark)."""
    out, audit = work / "repaired", work / "audit"
    shutil.rmtree(audit, ignore_errors=True)
    cmd = [sys.executable, "-m", "jobs.recover", "--store", str(store), "--out", str(out),
           "--broker-config", str(store / "broker.conf"), "--audit-path", str(audit), "--overwrite", *extra]
    wall, lines, s, rc = watched(cmd + list(JOB_EXTRA), code)
    if rc != 0:
        tail = "\n".join(line for _, line in lines[-30:])
        raise SystemExit(f"jobs.recover exited {rc}:\n{tail}")
    # the repaired store and tables are measured, not kept: 8 GB a run at 6 GiB would fill a disk
    shutil.rmtree(out, ignore_errors=True)
    shutil.rmtree(audit, ignore_errors=True)
    passes = passes_of(lines)
    scans = next((m for m in (SCANS_LINE.search(line) for _, line in lines) if m), None)
    # the scan's line is logged after the plan (with its own end): the scan ended when the plan began
    secs = passes.get("scan", (0.0, 0.0))[0]
    plan_secs, plan_at = passes.get("plan", (0.0, 0.0))
    at = plan_at - plan_secs
    cut = next((int(m.group(1)) for m in (CUT_LINE.search(line) for _, line in lines) if m), None)
    return {"wall": wall, "passes": {k: v[0] for k, v in passes.items()}, "cut": cut,
            "peak_one": s.peak_one, "peak_sum": s.peak_sum, "peak_anon": s.peak_anon,
            "cpu_seconds": sum(s.cpu_seconds.values()),
            "cpu_of": {k: s.cpu_of(k) for k in ("driver JVM", "driver python", "python workers")},
            "scan_cores": s.core_use(at - secs, at), "all_cores": s.core_use(0, float("inf")),
            "scan_own": s.own_cores(at - secs, at), "all_own": s.own_cores(0, float("inf")),
            "scans": (float(scans.group(1)), float(scans.group(2))) if scans else None}


def dry_run(store: Path, code: Path = ROOT) -> dict:
    """``python -m jobs.recover --dry-run`` of the tree ``code`` on ``store`` as its own process:
    wall seconds, the process tree's CPU seconds and the prediction's cut."""
    cmd = [sys.executable, "-m", "jobs.recover", "--store", str(store), "--broker-config", str(store / "broker.conf"),
           "--dry-run"]
    wall, lines, s, rc = watched(cmd, code)
    if rc != 0:
        raise SystemExit(f"jobs.recover --dry-run exited {rc}:\n" + "\n".join(line for _, line in lines[-30:]))
    cut = next((int(m.group(1)) for m in (CUT_LINE.search(line) for _, line in lines) if m), None)
    return {"wall": wall, "cpu_seconds": sum(s.cpu_seconds.values()), "peak_sum": s.peak_sum,
            "peak_one": s.peak_one, "cut": cut}


def print_dry_runs(sizes: list[dict], before: list[dict], after: list[dict], brokers: list[dict], rev: str) -> None:
    print(f"\nthe dry run (the prediction alone): {rev} | this tree | the real broker's restart on a copy")
    print("| store | dry run before | dry run after | broker restart | after / broker |")
    print("|---|---|---|---|---|")
    for s, b, a, k in zip(sizes, before, after, brokers or [None] * len(sizes)):
        same = a["cut"] == b["cut"] and (k is None or k["max_phy"] == a["cut"])
        broker = f"{k['wall']:.2f} s, {k['cpu_seconds']:.1f} CPU-s" if k else "-"
        ratio = f"{a['wall'] / k['wall']:.2f}x" if k else "-"
        print(f"| {s['written_end'] / GB:.2f} GB | {b['wall']:.2f} s, {b['cpu_seconds']:.1f} CPU-s | "
              f"{a['wall']:.2f} s, {a['cpu_seconds']:.1f} CPU-s | {broker} | {ratio} |"
              + ("" if same else f"  CUTS DIFFER: before {b['cut']}, after {a['cut']}, broker {k and k['max_phy']}"))


def task_cpu_run(store: Path, work: Path) -> dict:
    """One more run of this tree on ``store`` with every Python task's CPU logged
    (``benchmarks/taskcpu.py``): {"tasks": {what it ran: (first stage, tasks, CPU-s, largest peak
    RSS)}, "workers": the Python workers' CPU-s, whole processes}."""
    log = work / "task-cpu.log"
    log.unlink(missing_ok=True)
    out, audit = work / "repaired", work / "audit"
    shutil.rmtree(audit, ignore_errors=True)
    cmd = [sys.executable, "-m", "benchmarks.taskcpu", "run", str(log), "--", "--store", str(store),
           "--out", str(out), "--broker-config", str(store / "broker.conf"), "--audit-path", str(audit),
           "--overwrite", *JOB_EXTRA]
    _, lines, s, rc = watched(cmd, ROOT)
    shutil.rmtree(out, ignore_errors=True)
    shutil.rmtree(audit, ignore_errors=True)
    if rc != 0:
        tail = "\n".join(line for _, line in lines[-30:])
        raise SystemExit(f"jobs.recover (tasks' CPU logged) exited {rc}:\n{tail}")
    by: dict[str, tuple[int, int, float, int]] = {}
    for t in taskcpu.tasks(log):
        stage, n, cpu, peak = by.get(t.runs, (t.stage, 0, 0.0, -1))
        by[t.runs] = (min(stage, t.stage), n + 1, cpu + t.cpu, max(peak, t.peak_rss))
    return {"tasks": by, "workers": s.cpu_of("python workers")}


def print_task_cpu(sizes: list[dict], cpu: list[dict]) -> None:
    """The Python tasks' CPU by what they run, per size, and its slope between the first and the
    last size (CPU-s per GB)."""
    print("\nPython tasks' CPU seconds by what they run (one more run of this tree per size, "
          "benchmarks/taskcpu.py; a task's steps as Spark pipelined them)")
    names = sorted({k for c in cpu for k in c["tasks"]},
                   key=lambda k: min(c["tasks"][k][0] for c in cpu if k in c["tasks"]))
    span = (sizes[-1]["written_end"] - sizes[0]["written_end"]) / GB if len(sizes) > 1 else 0.0
    print(f"{'':<78}" + "".join(f"{s['written_end'] / GB:>16.2f} GB" for s in sizes)
          + ("    marginal CPU-s/GB" if span else ""))

    def line(label: str, vals: list[float], counts: list[int] | None = None) -> None:
        cells = "".join(f"{(f'{n} tasks ' if counts else '') + f'{v:.2f}':>19}"
                        for v, n in zip(vals, counts or [0] * len(vals)))
        print(f"{label[:78]:<78}{cells}" + (f"{(vals[-1] - vals[0]) / span:>21.2f}" if span else ""))
    for name in names:
        got = [c["tasks"].get(name, (0, 0, 0.0, -1)) for c in cpu]
        line(name.replace("<locals>.", ""), [g[2] for g in got], [g[1] for g in got])
    line("all tasks", [sum(v[2] for v in c["tasks"].values()) for c in cpu])
    line("Python workers, whole processes (their tasks, the daemon's start, idle workers)",
         [c["workers"] for c in cpu])
    print("\nthe largest task's peak RSS (MiB; the worker's high-water mark, reset at the task's start)")
    for name in names:
        peaks = [c["tasks"].get(name, (0, 0, 0.0, -1))[3] for c in cpu]
        print(f"{name.replace('<locals>.', '')[:78]:<78}"
              + "".join(f"{(f'{p >> 20:,}' if p >= 0 else '-'):>19}" for p in peaks)
              + (f"{'x' + format(peaks[-1] / peaks[0], '.2f'):>21}" if len(peaks) > 1 and min(peaks) > 0 else ""))


def salvage_runs(store: Path, work: Path) -> dict:
    """Issue 20's two ways on ``store``: ``jobs.recover --salvage`` (the lost records re-appended) and
    the ``jobs.salvage`` export to Parquet, each a fresh process."""
    (work / "salvage").mkdir(exist_ok=True)
    appended = spark_run(store, work / "salvage", extra=("--salvage",))
    cmd = [sys.executable, "-m", "jobs.salvage", "--store", str(store), "--broker-config",
           str(store / "broker.conf"), "--out", str(work / "salvaged.parquet"), "--format", "parquet",
           "--overwrite"]
    wall, lines, s, rc = watched(cmd, ROOT)
    if rc != 0:
        raise SystemExit("jobs.salvage exited %d:\n%s" % (rc, "\n".join(line for _, line in lines[-30:])))
    return {"reappend": appended, "export": {"wall": wall, "cpu_seconds": sum(s.cpu_seconds.values()),
                                             "peak_one": s.peak_one}}


def print_salvage(sizes: list[dict], runs: list[dict], salvaged: list[dict]) -> None:
    print("\nsalvage (issue 20) on the same stores: recover without and with --salvage, and the export")
    for s, r, v in zip(sizes, runs, salvaged):
        a, e = v["reappend"], v["export"]
        print(f"  {s['written_end'] / GB:.2f} GB: recover {r['wall']:.2f} s / {r['cpu_seconds']:.1f} CPU-s; "
              f"recover --salvage {a['wall']:.2f} s / {a['cpu_seconds']:.1f} CPU-s (salvage pass "
              f"{a['passes'].get('salvage', 0.0):.2f} s, manifest {a['passes'].get('write manifest', 0.0):.2f} s); "
              f"jobs.salvage --format parquet {e['wall']:.2f} s / {e['cpu_seconds']:.1f} CPU-s, "
              f"peak driver Python {_mb(e['peak_one'].get('driver python'))}")


def session_start() -> dict:
    """A fresh process that only starts the embedded Spark as the jobs do (a SparkContext, no
    SparkSession: ``jobs._spark.sparkutil.JobSpark``) and runs one Python task."""
    code = ("import time; t = time.monotonic()\n"
            "from jobs._spark.sparkutil import get_spark\n"
            "s = get_spark('rocketmq-bench-session', extra={'spark.ui.showConsoleProgress': 'false'},"
            " session=False)\n"
            "s.sparkContext\n"                  # started on first use (JobSpark)
            "a = time.monotonic(); s.sparkContext.parallelize([1], 1).map(lambda x: x).collect()\n"
            "b = time.monotonic(); print('SESSION', a - t, b - a)\n")
    wall, lines, _, rc = watched([sys.executable, "-c", code], ROOT)
    for _, line in lines:
        if line.startswith("SESSION"):
            _, session, task = line.split()
            return {"process": wall, "session": float(session), "first_task": float(task)}
    raise SystemExit(f"session start failed ({rc})")


def broker_run(store: Path, work: Path, in_place: bool = False) -> dict:
    """The real broker on ``store`` (``tests/oracle.py``: the release jars of the version the store
    was written by, 4.9.7 or 5.3.3; its JIT's top tier, ``oracle.BROKER_JVM_OPTS``, not the tests'
    C1), two JVMs one after the other, each timed by the driver and as a
    whole process: its restart (load, i.e. the recovery; start and reput until dispatched;
    shutdown), then its full rebuild: the same store with ``consumequeue/`` and ``index/`` deleted,
    so every record is dispatched from the commitlog's first: 4.9's ``DefaultMessageStore#start``
    sets the reput offset to the consume queues' largest phy offset, the commitlog's min offset when
    there are none; 5.x's reput starts at the confirm offset, but its ``recoverNormally`` walks back
    to the first file no consume queue's max phy offset passes (the first, then) and dispatches
    every record in ``load()``. On a copy of ``store``, or (``in_place``, ``--tight-disk``) on ``store`` itself,
    which both leave changed: the caller removes it. The rebuild's queues must hold every entry the
    restart's held (``rebuilt``), else it did not read the whole store."""
    sys.path.insert(0, str(ROOT / "tests"))
    import oracle
    from store_reader import open_store

    release = "5.3.3" if open_store(store, store / "broker.conf").looks_5x() else "4.9.7"
    oracle.build(release)
    conf = work / "broker.conf"
    shutil.copyfile(store / "broker.conf", conf)
    target = store
    if not in_place:
        target = work / "broker-restart"
        shutil.rmtree(target, ignore_errors=True)
        subprocess.run(["cp", "-a", "--reflink=auto", str(store), str(target)], check=True)

    def once(what: str) -> dict:
        os.sync()
        t, cpu = time.monotonic(), _children_cpu()
        r = oracle.restart(release, target, conf, entries=False, timeout=3600, jvm_opts=oracle.BROKER_JVM_OPTS)
        wall, cpu = time.monotonic() - t, _children_cpu() - cpu
        entries = sum(q.get("maxOffset", 0) - q.get("minOffset", 0)
                      for qs in r.get("queues", {}).values() for q in qs.values())
        print(f"  broker {release} {what}: {wall:.2f} s, {cpu:.1f} CPU-s (load {r['loadSeconds']:.2f} s, start + "
              f"reput {r.get('startReputSeconds', 0):.2f} s{'' if r.get('reputDone') else ' NOT DONE'}, "
              f"{r['recoveryPath']} path, max phy {r.get('maxPhyOffset')}, {entries:,} queue entries)", flush=True)
        return {"release": release, "wall": wall, "cpu_seconds": cpu, "load": r["loadSeconds"],
                "reput": r.get("startReputSeconds"), "reput_done": r.get("reputDone"),
                "shutdown": r["shutdownSeconds"], "path": r["recoveryPath"], "max_phy": r.get("maxPhyOffset"),
                "entries": entries}

    restart = once("restart" + (" (in place)" if in_place else " (a copy)"))
    for d in ("consumequeue", "index"):
        shutil.rmtree(target / d, ignore_errors=True)
    rebuild = once("full rebuild (consumequeue/ and index/ deleted)")
    rebuild["rebuilt"] = bool(rebuild["reput_done"]) and rebuild["entries"] == restart["entries"]
    if not in_place:
        shutil.rmtree(target, ignore_errors=True)
    return {**restart, "rebuild": rebuild, "in_place": in_place}


def _children_cpu() -> float:
    """CPU seconds of the children this process waited for (the broker's JVM)."""
    import resource

    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def print_broker(sizes: list[dict], runs: list[dict], brokers: list[dict]) -> None:
    print("\nthe real broker's own restart and full rebuild on the same stores (its release jars; its load is the "
          "recovery)")
    for s, r, b in zip(sizes, runs, brokers):
        same = "the job's truncation point" if b["max_phy"] == r["cut"] else f"NOT the job's {r['cut']}"
        k = b["rebuild"]
        print(f"  {s['written_end'] / GB:.2f} GB, rocketmq-store {b['release']} "
              f"({'in place' if b['in_place'] else 'a copy'}): load {b['load']:.2f} s, start + reput "
              f"{b['reput']:.2f} s, shutdown {b['shutdown']:.2f} s, the whole JVM {b['wall']:.2f} s "
              f"({b['path']} path, max phy {b['max_phy']}: {same}); jobs.recover {r['wall']:.2f} s")
        print(f"  {s['written_end'] / GB:.2f} GB, "
              f"full rebuild: load {k['load']:.2f} s, start + reput {k['reput']:.2f} s, the whole JVM "
              f"{k['wall']:.2f} s, {k['cpu_seconds']:.1f} CPU-s, {k['entries']:,} queue entries "
              + ("(every one the restart served: the whole commitlog dispatched)" if k["rebuilt"]
                 else f"NOT ALL REBUILT (the restart served {b['entries']:,})"))


def print_scale(sizes: list[dict], runs: list[dict], dries: list[dict], brokers: list[dict]) -> None:
    """Issue 36's table: per size, the dry run and the whole job against the broker's restart and
    its full rebuild, and each process's peak RSS; then the ratios that are its targets."""
    print("\nthe project against the real broker, per size (wall s, process-tree CPU-s; the broker's: its JVM)")
    print("| store | dry run | whole job | broker restart | broker full rebuild | dry run / restart (wall, CPU) "
          "| peak RSS driver JVM / driver Python / largest worker / dry run |")
    print("|---|---|---|---|---|---|---|")
    for s, r, d, b in zip(sizes, runs, dries, brokers or [None] * len(sizes)):
        k = b["rebuild"] if b else None
        cut = "" if d["cut"] == r["cut"] and (b is None or b["max_phy"] == r["cut"]) else \
            f" CUTS DIFFER: dry run {d['cut']}, job {r['cut']}, broker {b and b['max_phy']}"
        print(f"| {s['written_end'] / GB:.2f} GB | {d['wall']:.2f} s, {d['cpu_seconds']:.1f} | "
              f"{r['wall']:.2f} s, {r['cpu_seconds']:.1f} | "
              + (f"{b['wall']:.2f} s, {b['cpu_seconds']:.1f} | {k['wall']:.2f} s, {k['cpu_seconds']:.1f}"
                 f"{'' if k['rebuilt'] else ' NOT ALL REBUILT'} | "
                 f"{d['wall'] / b['wall']:.2f}x, {d['cpu_seconds'] / max(b['cpu_seconds'], 1e-9):.2f}x | "
                 if b else "- | - | - | ")
              + " / ".join(_mb(r["peak_one"].get(kind)) for kind in ("driver JVM", "driver python", "python workers"))
              + f" / {_mb(d['peak_one'].get('driver python'))} |" + cut)
    print("the whole job's CPU-s by process (driver JVM / driver Python / Python workers) and its driver passes (s): "
          + "; ".join(f"{s['written_end'] / GB:.2f} GB "
                      + " / ".join(f"{r['cpu_of'][k]:.1f}" for k in ("driver JVM", "driver python", "python workers"))
                      + ", " + ", ".join(f"{n} {r['passes'][n]:.2f}" for n in ("discover", "plan", "write manifest",
                                                                               "write audit tables") if n in r["passes"])
                      for s, r in zip(sizes, runs)))
    if brokers:
        worst = max(d["wall"] / b["wall"] for d, b in zip(dries, brokers))
        print(f"dry run within 1.5x of the broker's restart (wall) at every size: "
              f"{'met' if worst <= 1.5 else 'MISSED'} (worst {worst:.2f}x)")
    if len(sizes) > 1:
        mem = {k: runs[-1]["peak_one"].get(k, 0) / max(runs[0]["peak_one"].get(k, 1), 1)
               for k in ("driver JVM", "driver python", "python workers")}
        mem["dry run"] = dries[-1]["peak_one"].get("driver python", 0) / max(dries[0]["peak_one"].get("driver python", 1), 1)
        print(f"peak memory {sizes[-1]['written_end'] / GB:.2f} GB / {sizes[0]['written_end'] / GB:.2f} GB  "
              + ", ".join(f"{k} x{v:.2f}" for k, v in mem.items())
              + f" (target: flat, at most x1.15: {'met' if max(mem.values()) <= 1.15 else 'MISSED'})")


def reference_run(store: Path, work: Path) -> dict:
    """This script in ``--reference`` mode: the passes without Spark, in one process."""
    out = work / "reference"
    wall, lines, s, rc = watched([sys.executable, __file__, "--reference", str(store), str(out)], ROOT)
    result = next((json.loads(line[len("REFERENCE "):]) for _, line in lines
                   if line.startswith("REFERENCE ")), None)
    if rc != 0 or result is None:
        raise SystemExit("reference run failed:\n" + "\n".join(line for _, line in lines[-30:]))
    shutil.rmtree(out, ignore_errors=True)
    return {"wall": wall, "passes": result, "peak_one": s.peak_one,
            "cpu_seconds": sum(s.cpu_seconds.values())}


def reference(store_path: str, out_path: str) -> dict[str, float]:
    """The recovery's passes in this one process, store_reader alone (no audit)."""
    from store_reader import open_store
    from store_reader.repair import checkpoint, index, placement, queues as repair_queues
    from store_reader.io import fsync, manifest
    from store_reader.broker import prediction, versions
    from store_reader.formats.recordformat import ScanOptions

    times: dict[str, float] = {}

    def timed(name: str, t: float) -> None:
        times[name] = time.perf_counter() - t

    t = time.perf_counter()
    store = open_store(store_path, Path(store_path) / "broker.conf")
    version = store.broker_version()
    summaries = store.summaries(store.scan_options(broker_5x=versions.is_5x(version)))
    timed("scan", t)
    t = time.perf_counter()
    pred = prediction.predict(store, version, summaries=summaries)
    timed("plan", t)
    out, cfg, end = Path(out_path), store.config, pred.max_phy_offset
    five = versions.is_5x(version)
    shutil.rmtree(out, ignore_errors=True)
    for d in ("consumequeue", "index", "commitlog"):
        (out / d).mkdir(parents=True)
    opts = ScanOptions(check_crc=False, compute_crc=False, broker_5x=five,
                       delay_levels_ms=tuple(cfg.delay_levels_ms))
    files = [f.path for f in store.commitlog_files if f.start < end]
    t = time.perf_counter()
    queues: dict[tuple[str, int], list] = {}
    for path in files:
        for entries in repair_queues.dispatch_entries(path, opts, end, cfg, five):
            for key, part in repair_queues.queue_parts(entries, None):
                queues.setdefault(key[:2], []).append(part)
    import pyarrow as pa

    parts = [repair_queues.rebuild_queue_part(topic, qid, -1, pa.concat_tables(queues.pop((topic, qid))),
                                       cfg.cq_file_size, str(out / "consumequeue" / topic / str(qid)),
                                       str(store.root / "consumequeue" / topic / str(qid)),
                                       cfg.mappedFileSizeCommitLog)
             for topic, qid in sorted(queues)]
    last_cq_ts = max((p.last_store_timestamp for p in parts), default=0)
    timed("rebuild consume queues", t)
    t = time.perf_counter()
    counts = index.index_put_counts(summaries, end, lambda again: [
        index.segment_index_counts(files[i], opts, end) for i in again])
    plan = index.index_file_plan([n for n, _ in counts], cfg.maxIndexNum)
    written = [index.write_index_file_part(str(out / "index" / f".building-{k}"),
                                            [(files[i], lo, hi) for i, lo, hi in ranges], opts, end,
                                            cfg, k == 0) for k, ranges in enumerate(plan)]
    for w, name in zip(written, index.name_index_files(written)):
        os.rename(w.path, out / "index" / name)
    timed("rebuild index", t)
    t = time.perf_counter()
    srcs = {c.name: c.path for c in store.commitlog_files}
    for p in placement.plan(pred.commitlog_files, link=False):
        placement.place_segment(srcs[p.name], str(out / "commitlog" / p.name), p.keep, p.file_size)
    timed("write commitlog", t)
    t = time.perf_counter()
    ckpt = checkpoint.repaired_checkpoint(max((ts for _, ts in counts), default=0), last_cq_ts,
                                      index.full_index_end_timestamp([w.header for w in written],
                                                                      cfg.maxIndexNum), 0, five)
    checkpoint.write_checkpoint_file(out, ckpt, five)
    manifest.write_manifest(str(out), {"outputs": manifest.tree_manifest(str(out))})
    timed("checkpoint + manifest", t)
    t = time.perf_counter()
    fsync.sync_tree(str(out))
    timed("place repaired store", t)
    return times


# -- the report ----------------------------------------------------------------------------------------

def _mb(v: int | None) -> str:
    return f"{v / 2**20:,.0f} MiB" if v else "-"


def side_by_side(sizes: list[dict], runs: list[dict], before: list[dict], rev: str) -> None:
    """The previous code (``rev``) and this tree on the same stores, and the redesign's targets."""
    print(f"\nside by side, the same stores: before = {rev}, now = this tree")
    print(f"{'':<34}" + "".join(f"{'before ' + c:>18}{'now ' + c:>18}"
                                  for c in (f"{s['written_end'] / GB:.2f} GB" for s in sizes)))

    def row(label: str, value) -> None:
        print(f"{label:<34}" + "".join(f"{value(b, s):>18}{value(r, s):>18}" for s, r, b in zip(sizes, runs, before)))

    for name in PASSES:
        row(f"pass {name} (s)", lambda r, s, n=name: f"{r['passes'][n]:.2f}" if n in r["passes"] else "-")
    row("total wall (s)", lambda r, s: f"{r['wall']:.2f}")
    row("CPU seconds (process tree)", lambda r, s: f"{r['cpu_seconds']:.1f}")
    row("CPU seconds per GB", lambda r, s: f"{r['cpu_seconds'] / (s['written_end'] / GB):.1f}")
    for kind in ("driver JVM", "driver python", "python workers"):
        row(f"peak RSS {kind}", lambda r, s, k=kind: _mb(r["peak_one"].get(k)))
    row("scans per segment (max)", lambda r, s: f"{r['scans'][0]:.2f} ({r['scans'][1]:.2f})" if r["scans"]
        else "not counted")
    s, r = sizes[0], runs[0]
    gb = s["written_end"] / GB
    print(f"targets on the {gb:.2f} GB store: wall {r['wall']:.2f} s (<= 8 s: {'met' if r['wall'] <= 8 else 'MISSED'}), "
          f"{r['cpu_seconds'] / gb:.1f} CPU-s/GB (<= 5: {'met' if r['cpu_seconds'] / gb <= 5 else 'MISSED'}), "
          f"scans per segment {'%.2f' % r['scans'][0] if r['scans'] else '?'} "
          f"(1: {'met' if r['scans'] and r['scans'][1] <= 1 else 'MISSED'})")


def report(sizes: list[dict], runs: list[dict], refs: list[dict | None], session: dict, loads: list[float],
           small: dict | None) -> None:
    cols = [f"{s['written_end'] / GB:.2f} GB" for s in sizes]
    head = f"{'':<34}" + "".join(f"{'spark ' + c:>18}" for c in cols)
    if any(refs):
        head += "".join(f"{'1 process ' + c:>20}" for c in cols)
    print("\n" + head)

    def row(label: str, spark_vals: list[str], ref_vals: list[str] | None = None) -> None:
        line = f"{label:<34}" + "".join(f"{v:>18}" for v in spark_vals)
        if any(refs):
            line += "".join(f"{v:>20}" for v in (ref_vals or [""] * len(refs)))
        print(line)

    for name in PASSES:
        row(f"pass {name} (s)", [f"{r['passes'].get(name, 0):.2f}" for r in runs])
    for name in REFERENCE_PASSES:
        row(f"  reference {name} (s)", [""] * len(runs),
            [f"{r['passes'][name]:.2f}" if r else "-" for r in refs])
    row("total wall (s)", [f"{r['wall']:.2f}" for r in runs],
        [f"{r['wall']:.2f}" if r else "-" for r in refs])
    row("throughput (GB/s, whole run)",
        [f"{s['written_end'] / r['wall'] / GB:.3f}" for s, r in zip(sizes, runs)],
        [f"{s['written_end'] / r['wall'] / GB:.3f}" if r else "-" for s, r in zip(sizes, refs)])
    row("CPU seconds (process tree)", [f"{r['cpu_seconds']:.1f}" for r in runs],
        [f"{r['cpu_seconds']:.1f}" if r else "-" for r in refs])
    for kind in ("driver JVM", "driver python", "python workers"):
        row(f"peak RSS {kind}", [_mb(r["peak_one"].get(kind)) for r in runs],
            [_mb(r["peak_one"].get(kind)) if r else "-" for r in refs] if kind == "driver python" else None)
    row("peak RSS python workers (sum)", [_mb(r["peak_sum"].get("python workers")) for r in runs])
    row("CPU % per core, scan pass", [" / ".join(f"{c:.0f}" for c in r["scan_cores"]) for r in runs])
    row("CPU % per core, whole run", [" / ".join(f"{c:.0f}" for c in r["all_cores"]) for r in runs])
    row("cores busy with the job, scan pass", [f"{r['scan_own']:.2f}" for r in runs])
    row("cores busy with the job, whole run", [f"{r['all_own']:.2f}" for r in runs])

    print()
    if len(runs) >= 2:
        (a, ra), (b, rb) = (sizes[0], runs[0]), (sizes[-1], runs[-1])
        slope = (b["written_end"] - a["written_end"]) / max(rb["wall"] - ra["wall"], 1e-9)
        fixed = ra["wall"] - a["written_end"] / slope
        print(f"marginal throughput      {slope / GB:.3f} GB/s  (target >= 0.5 GB/s: "
              f"{'met' if slope >= GB / 2 else 'MISSED'})")
        print(f"fixed overhead           {fixed:.1f} s extrapolated to 0 bytes (target <= 8 s: "
              f"{'met' if fixed <= 8 else 'MISSED'})")
        for name in PASSES:
            pa_, pb = ra["passes"].get(name, 0), rb["passes"].get(name, 0)
            if pb > pa_:
                rate = (b["written_end"] - a["written_end"]) / (pb - pa_) / GB
                print(f"  marginal {name:<24} {rate:8.3f} GB/s")
        mem = {k: rb["peak_one"].get(k, 0) / max(ra["peak_one"].get(k, 1), 1)
               for k in ("driver JVM", "driver python", "python workers")}
        print("peak memory 6 GB / 1.5 GB  " + ", ".join(f"{k} x{v:.2f}" for k, v in mem.items())
              + f" (target: the same: {'met' if max(mem.values()) <= 1.15 else 'MISSED'})")
    busy = [min(r["scan_cores"] or [0]) for r in runs]
    print(f"scan pass, least busy core: {', '.join(f'{b:.0f} %' for b in busy)} (target: both cores busy: "
          f"{'met' if all(b >= 75 for b in busy) else 'MISSED'})")
    if small is not None:           # --fixed-runs 0: not measured
        walls = sorted(small["walls"])
        print(f"fixed overhead measured  {small['wall']:.1f} s, the median of {len(walls)} runs ({walls[0]:.1f}-"
              f"{walls[-1]:.1f} s) of the whole job on a {small['written_end'] / 1e6:.1f} MB store of the same "
              f"kind (target <= 8 s: {'met' if small['wall'] <= 8 else 'MISSED'}); the median run's passes: "
              + ", ".join(f"{k} {v:.2f}" for k, v in small["passes"].items()))
    print(f"session start alone      {session['session']:.2f} s to a session, {session['first_task']:.2f} s "
          f"for the first Python task ({session['process']:.2f} s for the whole process)")
    load = max(loads)
    print(f"\nload average at start   {', '.join(f'{v:.2f}' for v in loads)} (1 min; the script's start, then "
          f"each timed run's); {os.cpu_count()} cores; before each run its store is read into the page "
          "cache and the previous run's output synced to disk")
    if load > MAX_LOAD:
        print("\n" + "!" * 78
              + f"\n!! THE 1-MIN LOAD AVERAGE WAS {load:.1f} (> {MAX_LOAD:.0f}): OTHER WORK SHARED THE CORES."
              "\n!! THESE FIGURES ARE NOT VALID MEASUREMENTS; rerun on a quiet machine.\n" + "!" * 78)


def cds_state(build: bool) -> str:
    """Build the driver JVM's class-data-sharing archive unless there is one (``jobs.buildcds``),
    or switch it off for this script and its children (``--no-cds``); returns what the runs use."""
    from jobs._spark import cds
    from jobs.buildcds import build_cds_archive

    if not build:
        os.environ["ROCKETMQ_CDS"] = "off"
        return "off (--no-cds)"
    archive = cds.archive_path()
    if archive is None:
        return "off (ROCKETMQ_CDS=off or no java)"
    if not cds.archive_ready(archive):
        t = time.perf_counter()
        build_cds_archive(archive)
        print(f"built {archive} in {time.perf_counter() - t:.0f}s (once per JDK and Spark)", flush=True)
    return f"on ({archive})"


def wait_quiet(below: float = 1.0, most: float = 180.0) -> float:
    """Wait (at most ``most`` seconds) for the 1-minute load average to fall below ``below``: it
    decays over about a minute, so a run started right after other work would be charged for it."""
    t = time.monotonic()
    while os.getloadavg()[0] >= below and time.monotonic() - t < most:
        time.sleep(5)
    return os.getloadavg()[0]


def settle(store: Path | None) -> float:
    """Before each timed run: the previous run's output on disk (its dirty pages written back while
    nothing is timed, not during the next run), ``store`` in the page cache, and a quiet machine
    (at most 90 s). Returns the 1-minute load average the run starts at."""
    os.sync()
    if store is not None:
        warm(store)
    return wait_quiet(most=SETTLE_MAX)


DROP_CACHES = Path("/proc/sys/vm/drop_caches")


def warm(store: Path) -> None:
    """Read the store once so every run starts from the same (warm) page cache. A commitlog larger
    than half the memory cannot stay there: every run starts from an empty page cache instead (its
    clean pages dropped, as root), so each reads the files from the disk as the first run does.
    Left as it was, the cache held what the last run read last (or the store's writer wrote), which
    is what a dry run or a broker restart reads first (benchmarks/README.md, "The dry run, and
    the page cache at 25.77 GB")."""
    files = sorted((store / "commitlog").iterdir())
    if sum(f.stat().st_size for f in files) > psutil.virtual_memory().total // 2:
        try:
            DROP_CACHES.write_text("1\n")        # after settle's sync: the pages are clean
        except OSError as e:
            print(f"  NOTE: the page cache is not emptied before this run ({DROP_CACHES}: {e.strerror}): "
                  f"it holds what the last run read last", flush=True)
        return
    for f in files:
        with open(f, "rb") as fh:
            while fh.read(64 << 20):
                pass


def memory_runs(args, base: Path, before_tree: Path | None) -> int:
    """``--memory``: per size, the whole job of ``--baseline`` and of this tree (with ``--link``: the
    output holds the queues, the index and the cut file), and each kind of process's peak RSS. The
    stores are kept (``--dir``) for the next run."""
    JOB_EXTRA[:] = ["--link"]
    rows = []
    for text in (t.strip() for t in args.sizes.split(",")):
        store = base / f"store-{text}-q{args.queues}"
        info = ensure_store(store, parse_size(text), args.crash, args.queues)
        work = base / f"work-{text}-q{args.queues}"
        work.mkdir(parents=True, exist_ok=True)
        got = {}
        for label, tree in ((args.baseline, before_tree), ("this tree", ROOT)):
            if tree is not None:
                settle(store)
                got[label] = spark_run(store, work / label.replace(" ", "-"), tree)
                peaks = ", ".join(f"{k} {_mb(v)}" for k, v in sorted(got[label]["peak_one"].items()))
                print(f"  {text} {label}: {got[label]['cpu_seconds']:.1f} CPU-s; peak RSS of one: {peaks}",
                      flush=True)
        rows.append((text, info, got))
        shutil.rmtree(work, ignore_errors=True)
    labels = [lb for lb in (args.baseline, "this tree") if any(lb in g for _, _, g in rows)]
    print(f"\npeak RSS of the largest Python worker, and of its anonymous memory (RSS less file-backed "
          f"and shared pages), {args.queues or 32} queues:")
    print("| store | records | " + " | ".join(f"{lb}: RSS | {lb}: anonymous" for lb in labels) + " |")
    print("|---|---|" + "---|---|" * len(labels))
    for text, info, got in rows:
        print(f"| {info['written_end'] / GB:.2f} GB | {info['records']:,} | "
              + " | ".join(f"{_mb(got[lb]['peak_one'].get('python workers'))} | "
                           f"{_mb(got[lb]['peak_anon'].get('python workers'))}" if lb in got else "- | -"
                           for lb in labels) + " |")
    return 0


def main(argv: list[str] | None = None) -> int:
    global SETTLE_MAX
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="1.5GiB,6GiB", help="comma-separated commitlog sizes")
    ap.add_argument("--dir", default=os.path.join(tempfile.gettempdir(), "rmq-bench-recover"))
    ap.add_argument("--no-reference", action="store_true", help="skip the one-process reference")
    ap.add_argument("--fixed-size", default="8MiB",
                    help="the store (same kind, part of one segment) whose whole run is the fixed overhead")
    ap.add_argument("--fixed-runs", type=int, default=5,
                    help="runs of the fixed-size store (the machine's speed varies: median and range; 0: none)")
    ap.add_argument("--no-cds", action="store_true",
                    help="measure without the driver JVM's class-data-sharing archive")
    ap.add_argument("--baseline", default=BASELINE,
                    help=f"the previous code, run on the same stores side by side (a git revision; "
                         f"default {BASELINE}, the code before the one-pass redesign; 'none': skip)")
    ap.add_argument("--salvage", action="store_true",
                    help="also time recover --salvage and the jobs.salvage export on each store")
    ap.add_argument("--task-cpu", action="store_true",
                    help="also run this tree once more per size with each Python task's CPU logged, and "
                         "print the tasks' CPU by what they run (benchmarks/taskcpu.py)")
    ap.add_argument("--no-broker", action="store_true",
                    help="skip the real broker's restart on the same stores (scripts/build_oracle.sh)")
    ap.add_argument("--crash", type=crash_arg, default=CRASH,
                    help="how the stores are left, comma-separated: " + ", ".join(CRASH_WORDS)
                         + " (default kill9,stale-checkpoint,torn-tail,crc)")
    ap.add_argument("--dry-run", action="store_true",
                    help="time only the dry run (this tree's and --baseline's) and the broker's restart, per size")
    ap.add_argument("--tight-disk", action="store_true",
                    help="a store, the job's output and a copy for the broker do not fit the disk: the job "
                         "runs with --link and its output is deleted before the broker runs; the broker "
                         "restarts the store itself, last, then rebuilds it; the store is then removed "
                         f"(remade next time). On by itself when a size is {TIGHT_DISK_FROM >> 30} GiB or more")
    ap.add_argument("--scan-dir", help="the job's --scan-dir (its kept records: about a quarter of the commitlog)")
    ap.add_argument("--settle", type=float, default=SETTLE_MAX,
                    help=f"wait at most this many seconds before each timed run for the load to fall below 1 "
                         f"(default {SETTLE_MAX:.0f})")
    ap.add_argument("--queues", type=int,
                    help="stores of one topic with this many queues (default: 32 queues over four topics)")
    ap.add_argument("--memory", action="store_true",
                    help="only the whole job (--link), --baseline's and this tree's, per size: the peak RSS of "
                         "each kind of process (a queue's length grows with the store when --queues is small)")
    ap.add_argument("--reference", nargs=2, metavar=("STORE", "OUT"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.reference:
        print("REFERENCE " + json.dumps(reference(*args.reference)), flush=True)
        return 0
    SETTLE_MAX = args.settle
    tight = args.tight_disk or max(parse_size(t) for t in args.sizes.split(",")) >= TIGHT_DISK_FROM
    JOB_EXTRA[:] = (["--link"] if tight else []) + (["--scan-dir", args.scan_dir] if args.scan_dir else [])
    if tight:
        print("tight disk: the job hard-links the commitlog files it keeps whole (--link) and its output is "
              "deleted before the broker restarts the store itself, then rebuilds it; each store is removed "
              "once measured (the largest size is measured first)")
    load = wait_quiet(most=max(SETTLE_MAX, 0.0) * 2)
    print(f"load average at start: {load:.2f} (1 min), {os.cpu_count()} cores")
    if load > MAX_LOAD:
        print(f"WARNING: 1-min load average {load:.1f} > {MAX_LOAD:.0f}: the figures below will NOT be valid")
    cds = cds_state(build=not args.no_cds)
    print(f"driver JVM class-data sharing: {cds}")
    base = Path(args.dir)
    before_tree = None if args.baseline == "none" else baseline_tree(args.baseline, base)
    sizes, runs, refs, before, salvaged, task_cpu, brokers = [], [], [], [], [], [], []
    loads = [load]
    if args.memory:
        return memory_runs(args, base, before_tree)
    if args.dry_run:
        for text in args.sizes.split(","):
            store = base / f"store-{text.strip()}"
            sizes.append(ensure_store(store, parse_size(text), args.crash))
            work = base / f"work-{text.strip()}"
            work.mkdir(parents=True, exist_ok=True)
            print(f"predicting {store} ({sizes[-1]['written_end'] / GB:.2f} GB) ...", flush=True)
            if before_tree is not None:
                loads.append(settle(store))
                before.append(dry_run(store, before_tree))
                print(f"  {args.baseline} dry run: {before[-1]['wall']:.2f} s, {before[-1]['cpu_seconds']:.1f} CPU-s",
                      flush=True)
            loads.append(settle(store))
            runs.append(dry_run(store))
            print(f"  dry run: {runs[-1]['wall']:.2f} s, {runs[-1]['cpu_seconds']:.1f} CPU-s", flush=True)
            if not args.no_broker:
                loads.append(settle(store))
                brokers.append(broker_run(store, work))
        print(f"load average before each run: {' '.join(f'{x:.2f}' for x in loads)}")
        print_dry_runs(sizes, before or runs, runs, brokers, args.baseline if before else "(no baseline)")
        return 0
    dries = []
    texts = [t.strip() for t in args.sizes.split(",")]
    if tight:       # each store is removed once measured: the largest while the others do not exist yet
        texts.sort(key=parse_size, reverse=True)
    for text in texts:
        size = parse_size(text)
        store = base / f"store-{text}"
        sizes.append(ensure_store(store, size, args.crash))
        work = base / f"work-{text}"
        work.mkdir(parents=True, exist_ok=True)
        print(f"recovering {store} ({sizes[-1]['written_end'] / GB:.2f} GB) ...", flush=True)
        loads.append(settle(store))
        dries.append(dry_run(store))
        print(f"  dry run: {dries[-1]['wall']:.2f} s, {dries[-1]['cpu_seconds']:.1f} CPU-s", flush=True)
        if before_tree is not None:
            loads.append(settle(store))
            (work / "baseline").mkdir(exist_ok=True)
            before.append(spark_run(store, work / "baseline", before_tree))
        loads.append(settle(store))
        runs.append(spark_run(store, work))
        print(f"  whole job: {runs[-1]['wall']:.2f} s, {runs[-1]['cpu_seconds']:.1f} CPU-s", flush=True)
        if not args.no_reference:
            loads.append(settle(store))
        refs.append(None if args.no_reference else reference_run(store, work))
        if args.salvage:
            loads.append(settle(store))
            salvaged.append(salvage_runs(store, work))
        if args.task_cpu:
            loads.append(settle(store))
            task_cpu.append(task_cpu_run(store, work))
        if not args.no_broker:      # last: in place, it changes the store
            loads.append(settle(store))
            brokers.append(broker_run(store, work, in_place=tight))
        if tight:
            shutil.rmtree(store)
            shutil.rmtree(work, ignore_errors=True)
    order = sorted(range(len(sizes)), key=lambda i: sizes[i]["written_end"])
    for got in (sizes, runs, refs, before, salvaged, task_cpu, brokers, dries):
        if len(got) == len(order):
            got[:] = [got[i] for i in order]
    small = None
    if args.fixed_runs > 0:
        store = base / f"store-{args.fixed_size}"
        fixed_store = ensure_store(store, parse_size(args.fixed_size), args.crash)
        work = base / f"work-{args.fixed_size}"
        work.mkdir(parents=True, exist_ok=True)
        smalls = []
        for _ in range(args.fixed_runs):
            loads.append(settle(store))
            smalls.append(spark_run(store, work))
        small = sorted(smalls, key=lambda r: r["wall"])[len(smalls) // 2]      # the median run
        small["written_end"] = fixed_store["written_end"]
        small["walls"] = [r["wall"] for r in smalls]
    loads.append(settle(None))
    session = session_start()
    report(sizes, runs, refs, session, loads, small)
    if before:
        side_by_side(sizes, runs, before, args.baseline)
    if brokers:
        print_broker(sizes, runs, brokers)
    print_scale(sizes, runs, dries, brokers)
    if salvaged:
        print_salvage(sizes, runs, salvaged)
    if task_cpu:
        print_task_cpu(sizes, task_cpu)
    print(f"driver JVM class-data sharing: {cds}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
