"""Compare two implementations of the project on every fixture: same results, or the differences.

    .venv/bin/python scripts/compare_impl.py                  # baseline d140b73 vs this tree
    .venv/bin/python scripts/compare_impl.py --base REV --only torn-middle
    .venv/bin/python scripts/compare_impl.py --no-synthetic   # the real-broker fixtures only
    .venv/bin/python scripts/compare_impl.py --commands dump  # a change that only dump runs

A redesign must keep every result the same. This runs the baseline commit (a detached git worktree,
its native scanner built there) and this tree on the same inputs, each in one process with one Spark
session, and compares per case:

- ``recover``: exit code, ``warning:``/``error:`` lines, the ``--json`` prediction, every file of the
  repaired store (SHA-256; ``MANIFEST.json`` compared as JSON) and every Delta audit table's rows;
- ``audit --broker-version both --json``: the printed JSON and its Delta tables' rows;
- ``dump --verify --json`` on the store root: every line, exit code.

Inputs are the fixtures' damaged stores (``../shared/fixtures``) and synthetic crashed stores (every
crash preset, both broker styles), extracted or written once under ``--work`` and used by both sides
with the same paths and mtimes, so run ids and store ids are comparable. Only what changes from run
to run by nature is left out (``audited_at``, durations, per-pass seconds). The baseline's snapshot
is cached in ``--work`` per commit. Exit status: 0 identical, 1 differences (printed), 2 failure.
"""
from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

from worktree import baseline_tree  # scripts/ is on the path: this script's own directory

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(os.environ.get("ROCKETMQ_SHARED", ROOT.parent / "shared")) / "fixtures"
DEFAULT_BASE = "d140b73"
# columns and keys whose values differ between two runs of the same code
VOLATILE = {"audited_at", "duration_ms", "passes", "seconds"}
SYNTHETIC = ("kill9", "torn-tail", "corrupt-middle", "corrupt-magic", "cq-behind", "cq-ahead", "no-abort",
             "zeroed-span-last", "zeroed-span-second-last", "missing-middle-file", "fresh-checkpoint",
             "torn-tail,cq-behind")
COMMANDS = ("recover", "audit", "dump")


# -- inputs -------------------------------------------------------------------------------------------

def fixture_cases(inputs: Path) -> list[dict]:
    cases = []
    for version in sorted(p for p in FIXTURES.iterdir() if p.is_dir()):
        for scenario in sorted(p for p in version.iterdir() if (p / "expected.json").is_file()):
            dest = inputs / version.name / scenario.name
            if not (dest / ".extracted").exists():
                shutil.rmtree(dest, ignore_errors=True)
                dest.mkdir(parents=True)
                with tarfile.open(scenario / "input.tar.gz") as tar:
                    tar.extractall(dest, filter="data")
                (dest / ".extracted").touch()
            (store,) = [p for p in dest.iterdir() if p.is_dir()]
            cases.append({"name": f"{version.name}/{scenario.name}", "store": str(store),
                          "conf": str(scenario / "broker.conf"),
                          "args": ["--commitlog-gone"] if scenario.name == "commitlog-all-deleted" else []})
    return cases


def synthetic_cases(inputs: Path, python: str) -> list[dict]:
    cases = []
    for broker in ("5.x", "4.9"):
        for preset in SYNTHETIC:
            store = inputs / "synthetic" / broker / preset.replace(",", "+")
            if not (store.parent / f".{store.name}.done").exists():
                shutil.rmtree(store, ignore_errors=True)
                store.parent.mkdir(parents=True, exist_ok=True)
                extra = ["--append-prop-crc"] if broker == "5.x" and preset == "kill9" else []
                subprocess.run([python, "-m", "store_reader.testing.synthetic", str(store), "--size", "2880KiB",
                                "--segment-size", "512KiB", "--message-size", "512",
                                "--cq-file-size", "24000", "--max-index-num",
                                "4000", "--max-hash-slot-num", "1000", "--broker", broker, "--crash",
                                preset, *extra], check=True, cwd=ROOT, stdout=subprocess.DEVNULL,
                               env={**os.environ, "PYTHONPATH": str(ROOT)})
                (store.parent / f".{store.name}.done").touch()
            cases.append({"name": f"synthetic/{broker}/{preset}", "store": str(store),
                          "conf": str(store / "broker.conf"), "args": []})
    return cases


# -- one side's snapshot (runs inside the implementation's own process) --------------------------------

def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _strip(value):
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if k not in VOLATILE}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


def _tree(root: Path) -> dict:
    files = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        if path.is_dir():
            files[rel + "/"] = "dir"
        elif path.name == "MANIFEST.json":
            files[rel] = _strip(json.loads(path.read_text()))
        else:
            files[rel] = _sha256(path)
    return files


def _tables(audit: Path) -> dict:
    from deltalake import DeltaTable

    out = {}
    if not audit.is_dir():
        return out
    for table in sorted(p for p in audit.iterdir() if (p / "_delta_log").is_dir()):
        t = DeltaTable(str(table)).to_pyarrow_table()
        keep = [c for c in t.column_names if c not in VOLATILE]
        rows = [json.dumps(_strip(r), sort_keys=True, default=str) for r in t.select(keep).to_pylist()]
        out[table.name] = sorted(rows)
    return out


def _call(main, argv: list[str]) -> dict:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code
        except Exception as exc:  # a traceback is a result too: compared, not hidden
            code = f"raised {type(exc).__name__}: {exc}"
    lines = [ln for ln in err.getvalue().splitlines() if ln.startswith(("warning:", "error:", "dump: error"))]
    return {"exit": code, "stdout": out.getvalue(), "stderr": lines}


def _json_or_text(text: str):
    try:
        return _strip(json.loads(text))
    except ValueError:
        lines = []
        for ln in text.splitlines():
            try:
                lines.append(_strip(json.loads(ln)))
            except ValueError:
                lines.append(ln)
        return lines


def snapshot(cases: list[dict], scratch: Path, commands: list[str]) -> dict:
    from jobs import audit, dump, recover

    result = {}
    for case in cases:
        t = time.monotonic()
        out, audit1, audit2 = scratch / "out", scratch / "audit-recover", scratch / "audit-audit"
        for p in (out, audit1, audit2):
            shutil.rmtree(p, ignore_errors=True)
        common = ["--store", case["store"], "--broker-config", case["conf"]]
        snap = {}
        if "recover" in commands:
            r = _call(recover.main, common + case["args"] + ["--out", str(out), "--audit-path", str(audit1), "--json"])
            snap.update({"recover": {**r, "stdout": _json_or_text(r["stdout"])},
                         "repaired": _tree(out) if out.is_dir() else None, "recover_tables": _tables(audit1)})
        if "audit" in commands:
            a = _call(audit.main, common + ["--audit-path", str(audit2), "--broker-version", "both", "--json"])
            snap["audit"] = {**a, "stdout": _json_or_text(a["stdout"])}
            snap["audit_tables"] = _tables(audit2)
        if "dump" in commands:
            d = _call(dump.main, [case["store"], "--verify", "--json", "--broker-config", case["conf"]])
            snap["dump"] = {**d, "stdout": _json_or_text(d["stdout"])}
        result[case["name"]] = snap
        print(f"  {case['name']}: {time.monotonic() - t:.1f}s", file=sys.__stdout__, flush=True)
    return result


# -- the two sides and the diff -------------------------------------------------------------------------

def run_side(code: Path, cases: list[dict], commands: list[str], work: Path, name: str, verbose: bool) -> dict:
    # one scratch directory for both sides: output paths end up in manifests and audit rows
    snap, scratch = work / f"snapshot-{name}.json", work / "scratch"
    scratch.mkdir(parents=True, exist_ok=True)
    (work / "cases.json").write_text(json.dumps({"cases": cases, "commands": commands}))
    env = {**os.environ, "PYTHONPATH": str(code), "PYSPARK_PYTHON": sys.executable,
           "PYSPARK_DRIVER_PYTHON": sys.executable}
    print(f"== {name}: {code}", flush=True)
    subprocess.run([sys.executable, str(Path(__file__).resolve()), "_snapshot", str(work / "cases.json"),
                    str(scratch), str(snap)], cwd=code, env=env, check=True,
                   stderr=None if verbose else subprocess.DEVNULL)
    return json.loads(snap.read_text())


def diff(a, b, path: str, out: list[str], limit: int = 8, added: list[str] | None = None) -> None:
    """Differences of ``b`` from ``a`` into ``out``; with ``added``, a key or row only ``b`` has
    goes there instead (an addition: compatible, listed apart)."""
    if a == b or len(out) >= limit:
        return
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            if k not in a:
                (out if added is None else added).append(f"{path}/{k}: only in new: {str(b[k])[:300]}")
            elif k not in b:
                out.append(f"{path}/{k}: only in base: {str(a[k])[:300]}")
            else:
                diff(a[k], b[k], f"{path}/{k}", out, limit, added)
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b) and \
            not all(isinstance(x, str) for x in a + b):
        for i, (x, y) in enumerate(zip(a, b)):
            diff(x, y, f"{path}[{i}]", out, limit, added)
    elif isinstance(a, list) and isinstance(b, list) and all(isinstance(x, str) for x in a + b):
        gone, new = sorted(set(a) - set(b)), sorted(set(b) - set(a))
        if not gone and added is not None and new:
            added += [f"{path}: new only:  {x[:300]}" for x in new[:3]]
            return
        if len(gone) == len(new) == 1:     # one changed row: which columns
            try:
                diff(json.loads(gone[0]), json.loads(new[0]), path + "[row]", out, limit, added)
                return
            except ValueError:
                pass
        for x in gone[:3]:
            out.append(f"{path}: base only: {x[:300]}")
        for x in new[:3]:
            out.append(f"{path}: new only:  {x[:300]}")
        if not gone and not new:
            out.append(f"{path}: same lines, different order or count ({len(a)} vs {len(b)})")
    else:
        out.append(f"{path}: base {str(a)[:300]} | new {str(b)[:300]}")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "_snapshot":
        job = json.loads(Path(argv[1]).read_text())
        Path(argv[3]).write_text(json.dumps(snapshot(job["cases"], Path(argv[2]), job["commands"])))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base", default=DEFAULT_BASE, help=f"baseline commit (default {DEFAULT_BASE})")
    ap.add_argument("--new", default=str(ROOT), help="the tree to compare (default: this one)")
    ap.add_argument("--work", default=os.path.join(os.environ.get("TMPDIR", "/tmp"),
                                                   f"rmq-compare-{ROOT.name}"))
    ap.add_argument("--only", help="cases whose name contains this")
    ap.add_argument("--no-synthetic", action="store_true")
    ap.add_argument("--additions-ok", action="store_true",
                    help="a key, column or row only the new tree has is listed as an addition, not a difference")
    ap.add_argument("--verbose", action="store_true", help="show the implementations' stderr (Spark's too)")
    ap.add_argument("--commands", default=",".join(COMMANDS),
                    help=f"which commands to run and compare (default {','.join(COMMANDS)})")
    args = ap.parse_args(argv)
    work = Path(args.work)
    (work / "inputs").mkdir(parents=True, exist_ok=True)
    cases = fixture_cases(work / "inputs")
    if not args.no_synthetic:
        cases += synthetic_cases(work / "inputs", sys.executable)
    if args.only:
        cases = [c for c in cases if args.only in c["name"]]
    commands = args.commands.split(",")
    if not cases or not set(commands) <= set(COMMANDS):
        print("no case matches" if not cases else f"--commands: one or more of {','.join(COMMANDS)}",
              file=sys.stderr)
        return 2
    try:
        base = baseline_tree(args.base, work, "base")
        key = hashlib.sha256(json.dumps([cases, commands]).encode()).hexdigest()[:12]
        cached = work / f"snapshot-base-{base.name}-{key}.json"
        if cached.exists():
            old = json.loads(cached.read_text())
        else:
            old = run_side(base, cases, commands, work, "base", args.verbose)
            shutil.copy(work / "snapshot-base.json", cached)
        new = run_side(Path(args.new).resolve(), cases, commands, work, "new", args.verbose)
    except subprocess.CalledProcessError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    differing = adding = 0
    for case in cases:
        lines: list[str] = []
        added: list[str] = [] if args.additions_ok else None
        diff(old.get(case["name"]), new.get(case["name"]), case["name"], lines, added=added)
        if lines:
            differing += 1
            print("\n".join(lines))
        elif added:
            adding += 1
            print("\n".join(f"(added) {ln}" for ln in added[:8]))
    print(f"{len(cases)} cases: {len(cases) - differing - adding} identical, {adding} only add "
          f"(columns, keys or rows), {differing} different (base {base.name}, new {args.new})")
    return 1 if differing else 0


if __name__ == "__main__":
    sys.exit(main())
