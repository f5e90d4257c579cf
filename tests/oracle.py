"""The real broker as the tests' oracle: RocketMQ's own store code from its release jars, driven by
the project's classes under ``compat/src`` (built by ``scripts/build_oracle.sh``, on demand).

    run("5.3.3", "oracle.Restart", store_copy, broker_conf)   -> the JSON the driver printed
    restart(version, store_copy, broker_conf)                  -> the same, for oracle.Restart
    write(version, store, broker_conf, puts, seed, end)        -> oracle.Write's acked puts

A driver main prints exactly one JSON document on stdout (``oracle.Json``); the store's own logs
go to stderr, kept only for the error a failed run raises. Plain Python (no pytest), so benchmarks
can use it too.
"""
from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SUPPORTED = ("4.9.7", "4.9.8", "5.3.3", "5.4.0", "5.5.1")
HOME = Path(os.environ.get("ROCKETMQ_ORACLE_HOME", Path.home() / ".cache" / "rocketmq-recovery-oracle"))
# MappedFile unmaps through the JDK's internals: opened as the broker's own start script does
JVM_OPTS = ["-Xms256m", "-Xmx1g", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto",
            "--add-opens", "java.base/java.nio=ALL-UNNAMED", "--add-opens", "java.base/sun.nio.ch=ALL-UNNAMED",
            "--add-exports", "java.base/sun.nio.ch=ALL-UNNAMED", "--add-opens", "java.base/java.lang=ALL-UNNAMED",
            "--add-opens", "java.base/jdk.internal.ref=ALL-UNNAMED", "--add-opens", "java.base/java.util=ALL-UNNAMED"]
# for timing the broker (benchmarks/recover.py): its JIT's top tier, as the broker runs; the tests
# stop at C1 (short runs start faster), which makes a long reput several times slower
BROKER_JVM_OPTS = [o for o in JVM_OPTS if not o.startswith("-XX:TieredStopAtLevel")]


class OracleError(RuntimeError):
    """The oracle could not be built or a driver failed (the message names which and why)."""


_built: set[str] = set()    # versions built (or found up to date) by this process


def build(*versions: str) -> None:
    """``scripts/build_oracle.sh`` for ``versions`` (cheap when already built; once a process)."""
    for v in versions:
        if v not in SUPPORTED:
            raise OracleError(f"unsupported broker version {v} (supported: {', '.join(SUPPORTED)})")
    todo = [v for v in versions if v not in _built]
    if not todo:
        return
    p = subprocess.run(["bash", str(ROOT / "scripts" / "build_oracle.sh"), *todo],
                       capture_output=True, text=True, env=dict(os.environ, ROCKETMQ_ORACLE_HOME=str(HOME)))
    if p.returncode != 0:
        lines = [ln for ln in p.stderr.splitlines() if ln.startswith("error:")] or p.stderr.splitlines()[-1:]
        raise OracleError(lines[-1] if lines else f"build_oracle.sh exited {p.returncode}")
    _built.update(todo)


def classpath(version: str) -> str:
    """The driver classes and the release's jars, built first if needed."""
    build(version)
    return os.pathsep.join([str(HOME / version / "classes"), str(HOME / version / "lib" / "*")])


def run(version: str, main_class: str, *args, timeout: float = 300, jvm_opts: list[str] = JVM_OPTS) -> dict:
    """``java -cp <classpath(version)> main_class args``: the JSON it printed on stdout."""
    cp = classpath(version)
    # user.home: where the 4.x store's own logger and 5.x's logback look for and write their files
    home = HOME / "home"
    home.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryFile("w+") as err:
        try:
            p = subprocess.run(["java", *jvm_opts, f"-Duser.home={home}", "-cp", cp, main_class,
                                *map(str, args)], stdout=subprocess.PIPE, stderr=err, text=True,
                               timeout=timeout)
        except subprocess.TimeoutExpired as e:
            raise OracleError(f"{main_class} ({version}) did not finish in {timeout} s") from e
        err.seek(0)
        tail = err.read()[-3000:]
    out = p.stdout.strip()
    if p.returncode != 0 or not out:
        raise OracleError(f"{main_class} ({version}) exited {p.returncode}: {tail}")
    try:
        return json.loads(out.splitlines()[-1])
    except ValueError as e:
        raise OracleError(f"{main_class} ({version}) printed no JSON: {out[-500:]}") from e


def restart(version: str, store: str | Path, broker_conf: str | Path, max_keys: int = 200,
            entries: bool = True, timeout: float = 300, jvm_opts: list[str] = JVM_OPTS) -> dict:
    """The real broker restarted on ``store`` IN PLACE (pass a copy): ``oracle.Restart``'s report
    (``entries=False``: the queues' ranges only, no entries, index answers or consumer offsets)."""
    return run(version, "oracle.Restart", store, broker_conf, max_keys, "full" if entries else "summary",
               timeout=timeout, jvm_opts=jvm_opts)


def write(version: str, store: str | Path, broker_conf: str | Path, puts: int, seed: int,
          end: str = "halt", timeout: float = 300) -> dict:
    """A store written through the real put path (``oracle.Write``; ``end``: shutdown, halt,
    boundary or inflight)."""
    Path(store).mkdir(parents=True, exist_ok=True)
    return run(version, "oracle.Write", store, broker_conf, puts, seed, end, timeout=timeout)
