"""The benchmark's own measuring: ``benchmarks/recover.py``'s process-tree CPU (every process
counted once) and ``benchmarks/taskcpu.py``'s CPU per Spark task, on a real ``jobs.recover`` run."""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks import taskcpu  # noqa: E402
from benchmarks.recover import Sampler, crash_arg  # noqa: E402
from jobs._spark import exchange
from support import broker_conf, input_store  # noqa: E402


def _tree(rows: list[tuple[int, int, int, float, float]]) -> dict[int, float]:
    """``Sampler.cpu_seconds`` of processes given as (pid, parent, last sample, own, reaped)."""
    s = Sampler(os.getpid())
    for pid, parent, tick, own, reaped in rows:
        s.parent[pid], s.last_tick[pid], s.own[pid], s.reaped[pid] = parent, tick, own, reaped
    return s.cpu_seconds


def test_crash_words_make_the_store_the_issue_measures():
    """``--crash kill9,torn-tail,fresh-checkpoint``: the common production crash of issue 36."""
    from store_reader.testing.synthetic import CrashSpec

    assert crash_arg("kill9,torn-tail,fresh-checkpoint") == CrashSpec(abort=True, torn_tail=True,
                                                                      stale_checkpoint=False)
    with pytest.raises(argparse.ArgumentTypeError, match="unknown crash word 'kill-9'"):
        crash_arg("kill-9")


def test_a_sampled_child_its_parent_reaped_counts_once():
    """spark-submit's launcher JVM (0.15 s) seen by the sampler, then reaped by the shell that ran
    it (its children times 0.16 by then: 0.01 the sampler missed)."""
    cpu = _tree([(1, 0, 20, 1.6, 0.0), (2, 1, 19, 2.3, 0.0), (3, 2, 19, 0.0, 0.16), (4, 3, 3, 0.15, 0.0)])
    assert cpu[4] == pytest.approx(0.15) and cpu[3] == pytest.approx(0.01)
    assert sum(cpu.values()) == pytest.approx(1.6 + 2.3 + 0.16)


def test_a_shell_and_its_child_gone_together_count_once_in_their_reaper():
    """The launcher and its shell gone in one sample, both in the driver JVM's children times."""
    cpu = _tree([(1, 0, 20, 1.6, 0.0), (2, 1, 19, 2.3, 0.18), (3, 2, 4, 0.0, 0.0), (4, 3, 4, 0.17, 0.0)])
    assert sum(cpu.values()) == pytest.approx(1.6 + 2.3 + 0.18)


def test_children_a_parent_never_reaped_are_not_taken_off_it():
    """The driver ignores SIGCHLD: its JVM, gone before the driver's last sample, is in no one's
    children times, and stays counted as sampled."""
    cpu = _tree([(1, 0, 20, 1.6, 0.0), (2, 1, 19, 2.3, 0.0), (5, 2, 19, 0.4, 0.0)])
    assert cpu == {1: pytest.approx(1.6), 2: pytest.approx(2.3), 5: pytest.approx(0.4)}


def test_a_task_is_named_by_the_project_functions_in_its_closures():
    loader = exchange._loader

    def pipelined(split, it):                      # Spark's pipeline: the later step closes over the earlier
        return step(split, it)

    def step(split, it):
        return loader()(it)
    assert taskcpu.project_steps(pipelined) == ["exchange.py:_loader"]
    assert taskcpu.project_steps(lambda: None) == []


def test_a_recovery_run_logs_every_task_it_ran(tmp_path):
    """``python -m benchmarks.taskcpu run`` on a real store: the job succeeds and every Spark task
    of the run (scan, rebuilds, placement, audit) has a line naming what it ran."""
    case = ("rocketmq-5.3.3", "torn-middle-crc")
    log = tmp_path / "tasks.log"
    p = subprocess.run([sys.executable, "-m", "benchmarks.taskcpu", "run", str(log), "--",
                        "--store", str(input_store(*case)), "--broker-config", str(broker_conf(*case)),
                        "--out", str(tmp_path / "out"), "--audit-path", str(tmp_path / "audit")],
                       capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)},
                       timeout=600, cwd=ROOT)
    assert p.returncode == 0, p.stderr[-2000:]
    tasks = taskcpu.tasks(log)
    ran = {t.runs for t in tasks}
    assert any("scan.py:scan_once" in r for r in ran)
    assert any("repairwrite.py:place_commitlog" in r for r in ran)
    assert any("findings.py:run_audit_job" in r for r in ran)
    assert all(t.stage >= 0 and t.cpu >= 0 and t.wall > 0 for t in tasks)
    assert (tmp_path / "out" / "MANIFEST.json").exists()


def test_a_peak_between_two_samples_is_the_peak():
    """A process that holds 200 MiB for a moment between two of the sampler's samples: its peak is
    the kernel's high-water mark, not the RSS the samples happened to see (issue 36: the driver
    Python's bounded prediction read 258, 433 and 338 MiB in three runs of the same peak)."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.5); b = b'x' * (200 << 20); "
                              "del b; time.sleep(3)"])
    try:
        s = Sampler(child.pid)
        s.sample()
        time.sleep(1.5)                  # the 200 MiB came and went after the first sample
        s.sample()
        assert s.root.memory_info().rss < 100 << 20
        assert s.peak_one["driver python"] >= 200 << 20
    finally:
        child.kill()
        child.wait()
