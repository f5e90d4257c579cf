"""Where the Python workers' CPU goes: each Spark task's CPU time, by the project functions it runs.

    python -m benchmarks.taskcpu run LOG -- JOB_ARGS...     (from the repository root)
    python -m benchmarks.taskcpu summary LOG [LOG ...]     (per run: CPU by what the tasks ran)

runs ``python -m jobs.recover JOB_ARGS`` with its embedded session's Python workers forked from this
module instead of ``jobs._spark.pydaemon`` (which it loads first, so the workers are the same). Every task
appends one line to LOG: its stage, partition, CPU seconds (the worker process's, all its threads),
wall seconds, the worker's peak RSS during the task (Linux: the high-water mark is reset at its
start through ``/proc/self/clear_refs``; -1 elsewhere) and what it ran, named by the project
functions in the task's pipeline (``file:qualname``, ``|`` between the steps Spark pipelined into
one task). ``tasks(LOG)`` reads the lines back. The psutil sampling of ``recover.py`` says how
much CPU each process used; this says which pass of the job used it, which neither the job's pass
timings (passes overlap) nor Spark's task metrics (the JVM side only) tell.
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

LOG_ENV = "ROCKETMQ_BENCH_TASK_CPU_LOG"
# set to a directory: each task also runs under cProfile, its stats in <dir>/<stage>-<partition>.prof
PROFILE_ENV = "ROCKETMQ_BENCH_TASK_PROFILE"
# set to a Spark master (local[1], local[2]): the job's embedded session runs there instead
MASTER_ENV = "ROCKETMQ_BENCH_MASTER"
# the project's own code, in this tree or another one (a baseline worktree)
_PROJECT = tuple(f"{os.sep}{d}{os.sep}" for d in ("jobs", "store_reader"))


@dataclass(frozen=True)
class Task:
    stage: int
    partition: int
    cpu: float
    wall: float
    peak_rss: int
    """bytes; -1: not known"""
    runs: str


def tasks(log: str | os.PathLike[str]) -> list[Task]:
    """The tasks a run logged, in the order they ended."""
    out = []
    for line in Path(log).read_text().splitlines():
        stage, partition, cpu, wall, peak, runs = line.split(" ", 5)
        out.append(Task(int(stage), int(partition), float(cpu), float(wall), int(peak), runs))
    return out


def summary(logs: list[str], cores: tuple[int, ...] = (1, 2, 16, 64)) -> None:
    """Per run (a LOG each) and per what the tasks ran: the tasks, their CPU seconds, the largest
    task's, and the least time the tasks could take on ``cores`` cores if CPU were all they
    needed: max(CPU / cores, largest task). Spark runs a stage's tasks side by side, so a stage
    stops scaling once its largest task is longer than its share of the cores."""
    for log in logs:
        by: dict[str, list[Task]] = {}
        for t in tasks(log):
            by.setdefault(t.runs, []).append(t)
        print(f"\n{log}")
        print(f"{'what the tasks ran':<70}{'tasks':>6}{'CPU-s':>8}{'largest':>9}"
              + "".join(f"{f'{n} cores':>10}" for n in cores))
        total = {n: 0.0 for n in cores}
        for runs, ts in sorted(by.items(), key=lambda kv: min(t.stage for t in kv[1])):
            cpu, big = sum(t.cpu for t in ts), max(t.cpu for t in ts)
            bounds = {n: max(cpu / n, big) for n in cores}
            for n in cores:
                total[n] += bounds[n]
            print(f"{runs.replace('<locals>.', '')[:69]:<70}{len(ts):>6}{cpu:>8.2f}{big:>9.2f}"
                  + "".join(f"{bounds[n]:>10.2f}" for n in cores))
        print(f"{'all tasks, each group after the other (passes overlap in the job)':<70}{'':>6}"
              f"{sum(t.cpu for ts in by.values() for t in ts):>8.2f}{'':>9}"
              + "".join(f"{total[n]:>10.2f}" for n in cores))


def project_steps(func, seen: set[int] | None = None) -> list[str]:
    """The project functions reachable through ``func``'s closures (Spark's pipelined steps and
    what they call into), depth first, each once."""
    seen = set() if seen is None else seen
    if id(func) in seen:
        return []
    seen.add(id(func))
    out = []
    code = getattr(func, "__code__", None)
    if code is not None and any(d in code.co_filename for d in _PROJECT):
        out.append(f"{Path(code.co_filename).name}:{code.co_qualname}")
    for cell in getattr(func, "__closure__", None) or ():
        try:
            inner = cell.cell_contents
        except ValueError:         # an empty cell
            continue
        if callable(inner):
            out += [s for s in project_steps(inner, seen) if s not in out]
    return out


def reset_peak_rss() -> bool:
    """Start this process's RSS high-water mark afresh (Linux 4.0+); False where it cannot."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def peak_rss(pid: int | str = "self") -> int:
    """A process's RSS high-water mark in bytes (``VmHWM``; this process's by default).

    Raises
    ------
    OSError
        No such process (any more).
    """
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return -1


def _log_tasks(path: str) -> None:
    """Wrap the worker's task loop (in the daemon, before it forks) to log each task."""
    import time

    import pyspark.taskcontext as taskcontext
    import pyspark.worker as worker

    last: dict[str, object] = {}
    read_command, main = worker.read_command, worker.main
    set_context = taskcontext.TaskContext._setTaskContext.__func__

    def read(*args):
        command = read_command(*args)
        last["func"] = command[0] if isinstance(command, tuple) else command
        return command

    def remember(cls, context) -> None:
        if context is not None:
            last["context"] = context
        set_context(cls, context)

    profile_dir = os.environ.get(PROFILE_ENV)

    def run(infile, outfile):
        last.clear()
        peak_known = reset_peak_rss()
        profile = None
        if profile_dir:
            import cProfile
            profile = cProfile.Profile(time.process_time)   # CPU, not wall: the machine may be shared
            profile.enable()
        cpu, wall = time.process_time(), time.perf_counter()
        try:
            return main(infile, outfile)
        finally:
            context = last.get("context")
            if profile is not None:
                profile.disable()
                profile.dump_stats(os.path.join(profile_dir, f"{context.stageId() if context else -1}-"
                                                f"{context.partitionId() if context else -1}.prof"))
            steps = " | ".join(project_steps(last["func"])) if "func" in last else ""
            # no context and nothing run: no task came (a reused worker stopped while it waited for one)
            if context is not None or steps:
                with open(path, "a") as f:
                    f.write(f"{context.stageId() if context else -1} {context.partitionId() if context else -1} "
                            f"{time.process_time() - cpu:.4f} {time.perf_counter() - wall:.4f} "
                            f"{peak_rss() if peak_known else -1} {steps or '-'}\n")

    worker.read_command = read
    worker.main = run
    taskcontext.TaskContext._setTaskContext = classmethod(remember)


def _run_job(log: str, argv: list[str]) -> None:
    """``python -m jobs.recover argv`` in this process, its workers forked from this module."""
    import runpy

    from jobs._spark import sparkutil

    os.environ[LOG_ENV] = os.path.abspath(log)
    settings = sparkutil.embedded_settings

    def with_this_daemon(*args, **kwargs) -> dict[str, str]:
        master = {"spark.master": os.environ[MASTER_ENV]} if os.environ.get(MASTER_ENV) else {}
        return {**settings(*args, **kwargs), "spark.python.daemon.module": __spec__.name, **master}

    sparkutil.embedded_settings = with_this_daemon
    sys.argv = ["jobs.recover", *argv]
    runpy.run_module("jobs.recover", run_name="__main__")


if __name__ == "__main__":
    if sys.argv[1:2] == ["run"]:
        sep = sys.argv.index("--")
        _run_job(sys.argv[2], sys.argv[sep + 1:])
    elif sys.argv[1:2] == ["summary"]:      # python -m benchmarks.taskcpu summary LOG [LOG ...]
        summary(sys.argv[2:])
    else:                                   # Spark starts the daemon: python -m <this> pyspark.worker
        import gc

        # jobs._spark.pydaemon first, as when Spark runs it: it takes the JVM's pyspark.zip off sys.path
        # before pyspark is imported. Imported after pyspark (from the zip), the zip's package
        # importers stayed, and every new worker's importlib.invalidate_caches() (pyspark's
        # setup_spark_files) re-read the zip's directory once per package: CPU the job's own
        # workers do not spend, counted in each stage's first tasks.
        import jobs._spark.pydaemon  # noqa: F401  (its imports and its worker wrapper, before the fork)
        from pyspark import daemon

        _log_tasks(os.environ[LOG_ENV])
        gc.freeze()
        gc.enable()
        daemon.manager()
