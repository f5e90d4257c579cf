"""What the audit (jobs.audit, and the audit inside jobs.recover) says about the store as a whole:
the flush window judged by the broker's flushDiskType and shutdown state, --since-last noticing a
segment rewritten with its mtime restored, and the file anomalies ``jobs.dump --verify`` reports
(a gap in the commitlog files, config files the broker cannot use).

Expected values come from the fixtures' expected.json (the broker's own records and the input's
checkpoint) and from the files as this test changes them, not from the code under test.
"""
from __future__ import annotations

import io
import os
import shutil
from contextlib import redirect_stdout
from pathlib import Path

import pyarrow.compute as pc
import pytest

from jobs import audit as audit_job
from jobs import dump
from jobs import recover as recover_job
from jobs._spark.deltasink import read_table
from support import broker_conf, expected, input_store

SEGMENT = 65536
FLUSH_CASES = [(v, s) for v in ("rocketmq-4.9.7", "rocketmq-5.3.3")
               for s in ("clean", "clean-sync", "crash-tail", "crash-tail-sync")]
RISK = {"clean": "clean_shutdown", "clean-sync": "clean_shutdown", "crash-tail": "async_flush_unclean",
        "crash-tail-sync": "sync_flush"}


def _copy(case, dst: Path) -> Path:
    shutil.copytree(input_store(*case), dst)
    return dst


def _main(module, args: list[str]) -> tuple[int, str]:
    out = io.StringIO()
    with redirect_stdout(out):
        code = module.main(args)
    return code, out.getvalue()


def _run_rows(path: str, table: str, run_id: str) -> list[dict]:
    t = read_table(f"{path}/{table}")
    rows = t.filter(pc.equal(t["run_id"], run_id)).to_pylist()
    for r in rows:
        for k in ("run_id", "audited_at"):
            r.pop(k)
    return sorted(rows, key=repr)


def _runs(path: str) -> list[dict]:
    return read_table(f"{path}/runs").sort_by("audited_at").to_pylist()


@pytest.fixture(scope="module")
def audited_twice(spark, tmp_path_factory):
    """case -> (audit path, (exit code, stdout) of a full audit of a copy of the fixture store, then
    of a --since-last one): made once per case for the tests below."""
    cache = {}

    def get(case):
        if case not in cache:
            root = tmp_path_factory.mktemp(case[1])
            store = _copy(case, root / "store")
            path = str(root / "audit")
            args = ["--store", str(store), "--broker-config", str(broker_conf(*case)), "--audit-path", path]
            cache[case] = path, _main(audit_job, args), _main(audit_job, args + ["--since-last"])
        return cache[case]
    return get


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.parametrize("case", FLUSH_CASES, ids=lambda c: f"{c[0][9:]}/{c[1]}")
def test_flush_window_follows_flush_type_and_shutdown(case, audited_twice):
    """Records stored after the checkpoint's commitlog flush time are at risk only under
    ASYNC_FLUSH without a clean shutdown; --since-last reports the same window as the full run."""
    e = expected(*case)
    assert e["storeConfig"]["flushDiskType"] == ("SYNC_FLUSH" if "sync" in case[1] else "ASYNC_FLUSH")
    assert e["input"]["abortFileExists"] == case[1].startswith("crash")
    stamp = e["input"]["checkpoint"]["physicMsgTimestamp"]
    after = [r for r in e["afterRecovery"]["commitLogScan"] if "phyOffset" in r and r["storeTimestamp"] > stamp]
    assert after or case[1] == "clean-sync"   # the broker wrote past the commitlog flush time
    at_risk = len(after) if RISK[case[1]] == "async_flush_unclean" else 0

    path, (_, full_out), (_, since_out) = audited_twice(case)
    full, since = _runs(path)
    assert (full["mode"], since["mode"]) == ("full", "since_last")
    for run, out in ((full, full_out), (since, since_out)):
        assert run["flush_risk"] == RISK[case[1]]
        assert run["flush_window_records"] == at_risk
        (line,) = [ln for ln in out.splitlines() if ln.strip().startswith("flush")]
        if at_risk:
            assert f"{at_risk} records stored after the checkpoint's commitlog flush time" in line
            assert "ASYNC_FLUSH and no clean shutdown" in line
        else:
            assert "nothing at risk" in line
            assert ("SYNC_FLUSH" if RISK[case[1]] == "sync_flush" else "shut down cleanly") in line
    full_fw = _run_rows(path, "flush_window", full["run_id"])
    assert _run_rows(path, "flush_window", since["run_id"]) == full_fw
    assert sum(r["records"] for r in full_fw if r["window"] == "commitlog") == at_risk
    assert bool(full_fw) == bool(at_risk)
    if not at_risk:                   # nothing needs the records again: an unchanged store scans nothing
        assert since["segments_scanned"] == 0


def _body_byte(case, phy: int) -> int:
    """Phy offset of the first body byte of the written message at ``phy``."""
    m = next(w for w in expected(*case)["writtenMessages"] if w["phyOffset"] == phy)
    tail = 2 + len(m["propertiesString"].encode()) + 1 + len(m["topic"].encode())
    with open(Path(input_store(*case)) / "commitlog" / f"{phy - phy % SEGMENT:020d}", "rb") as fh:
        fh.seek(phy % SEGMENT + 4)
        if fh.read(4) == bytes.fromhex("daa320ab"):          # V2 record: 2-byte topic length
            tail += 1
    return phy + m["size"] - tail - m["bodyLen"]


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.parametrize("version", ["rocketmq-4.9.7", "rocketmq-5.3.3"])
def test_since_last_rescans_a_segment_rewritten_with_its_mtime_restored(version, spark, tmp_path):
    """A body byte of a segment's last record flipped, size and mtime as they were: --since-last
    reads the segment again and reports the corrupt record the full audit reports."""
    case = (version, "clean")
    store = _copy(case, tmp_path / "store")
    path = str(tmp_path / "audit")
    args = ["--store", str(store), "--broker-config", str(broker_conf(*case)), "--audit-path", path]
    _main(audit_job, args)
    seg = 3 * SEGMENT
    last = max(r["phyOffset"] for r in expected(*case)["afterRecovery"]["commitLogScan"]
               if "phyOffset" in r and seg <= r["phyOffset"] < seg + SEGMENT)
    where = _body_byte(case, last)
    f = store / "commitlog" / f"{seg:020d}"
    st = f.stat()
    with open(f, "r+b") as fh:
        fh.seek(where - seg)
        b = fh.read(1)
        fh.seek(where - seg)
        fh.write(bytes([b[0] ^ 0xFF]))
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert (f.stat().st_size, f.stat().st_mtime_ns) == (st.st_size, st.st_mtime_ns)

    code, out = _main(audit_job, args + ["--since-last"])
    since = _runs(path)[-1]
    assert since["mode"] == "since_last" and since["segments_scanned"] >= 1 and code == 1
    segs = {r["segment"]: r for r in _run_rows(path, "segments", since["run_id"])}
    # the segment's last record: nothing intact follows it
    assert segs[f.name]["scanned"] and segs[f.name]["end_reason"] == "torn_tail"
    assert segs[f.name]["valid_bytes"] == last - seg
    assert f"torn_tail          {f} @ byte {last - seg} (body_crc)" in out
    # segments before it are still carried over
    assert not any(r["scanned"] for name, r in segs.items() if int(name) < seg)


def _damage_store(case, root: Path) -> Path:
    """A copy with a commitlog file missing in the middle, an undecodable topics.json and a
    consumerOffset.json that is not JSON (no .bak)."""
    store = _copy(case, root)
    (store / "commitlog" / f"{5 * SEGMENT:020d}").unlink()
    (store / "config" / "topics.json").write_text('{"topicConfigTable": {"TopicA": ')
    (store / "config" / "consumerOffset.json").write_bytes(b"\x00\x01 not json")
    return store


@pytest.mark.spark
@pytest.mark.slow
def test_audit_and_recover_report_what_dump_verify_reports(spark, tmp_path):
    """A gap in the commitlog files and config files the broker cannot use: jobs.audit and
    jobs.recover print and store each one with the kind, file and message of dump --verify."""
    case = ("rocketmq-4.9.7", "clean")
    store = _damage_store(case, tmp_path / "store")
    conf = str(broker_conf(*case))
    found = dump.verify_store(dump.StoreView(dump.open_store(store, conf)))
    want = {(a.kind, "anomaly", a.path, a.message) for a in found.anomalies if "/config/" in a.path} \
        | {(n.kind, "note", n.path, n.message) for n in found.notes if n.kind == "note.commitlog_gap"}
    assert {k for k, *_ in want} == {"config.undecodable", "note.commitlog_gap"}
    assert {Path(p).name for _, _, p, _ in want} == {"topics.json", "consumerOffset.json", f"{6 * SEGMENT:020d}"}

    path = str(tmp_path / "audit")
    code, audit_out = _main(audit_job, ["--store", str(store), "--broker-config", conf, "--audit-path", path])
    assert code == 1
    rcode, recover_out = _main(recover_job, ["--store", str(store), "--broker-config", conf, "--dry-run",
                                             "--out", str(tmp_path / "out"), "--audit-path", path])
    assert rcode == 0
    for run in _runs(path):
        rows = _run_rows(path, "store_findings", run["run_id"])
        assert {(r["kind"], r["severity"], r["file"], r["detail"]) for r in rows} == want, run["job"]
        assert run["store_findings"] == 2 and run["status"] == "findings"
    for out in (audit_out, recover_out):
        for kind, _, file, message in want:
            assert f"file    {kind} {file}" in out and message in out


def _findings(path: str, run_id: str) -> dict[str, list[dict]]:
    """A run's rows of every findings table, without what names the run."""
    from jobs.auditrun import FINDING_TABLES

    return {t: [{k: v for k, v in r.items() if k not in ("scanned",)} for r in _run_rows(path, t, run_id)]
            for t in FINDING_TABLES if t != "segments"}


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.parametrize("store_kind", ["rocketmq-4.9.7/clean", "rocketmq-5.3.3/clean", "rocketmq-4.9.7/crash-tail",
                                        "repaired"])
def test_since_last_on_an_unchanged_store_reports_what_a_full_run_reports(store_kind, spark, tmp_path, audited_twice):
    """Nothing changed since the last run: --since-last reports the full run's findings row for
    row, and its exit code (a repaired store: clean, 0, both ways)."""
    if store_kind == "repaired":
        case = ("rocketmq-4.9.7", "crash-tail")
        store = tmp_path / "store"
        assert _main(recover_job, ["--store", str(input_store(*case)), "--broker-config", str(broker_conf(*case)),
                                   "--out", str(store)])[0] == 0
        path = str(tmp_path / "audit")
        args = ["--store", str(store), "--broker-config", str(broker_conf(*case)), "--audit-path", path]
        (full_code, _), (since_code, out) = _main(audit_job, args), _main(audit_job, args + ["--since-last"])
    else:       # the fixture stores' audits are the flush window test's
        path, (full_code, _), (since_code, out) = audited_twice(tuple(store_kind.split("/")))
    full, since = _runs(path)
    assert since["mode"] == "since_last" and (since_code, since["status"]) == (full_code, full["status"])
    assert _findings(path, since["run_id"]) == _findings(path, full["run_id"])
    if store_kind == "repaired":
        assert full_code == 0 and full["status"] == "clean"
    if "clean" in store_kind:
        assert since["segments_scanned"] == 0 and "filler" not in out


@pytest.mark.spark
@pytest.mark.slow
def test_a_damaged_audit_table_is_one_error_line_naming_it(spark, tmp_path, capsys):
    """A middle commit removed from segments/_delta_log, or its last commit cut short: the audit,
    full or --since-last, exits 2 with one ``error:`` line naming the table and what is wrong (no
    traceback, no Rust backtrace)."""
    case = ("rocketmq-4.9.7", "clean")
    store = _copy(case, tmp_path / "store")
    path = tmp_path / "audit"
    args = ["--store", str(store), "--broker-config", str(broker_conf(*case)), "--audit-path", str(path)]
    for _ in range(3):
        _main(audit_job, args)
    log = path / "segments" / "_delta_log"
    commits = sorted(log.glob("*.json"))
    assert len(commits) >= 3
    pristine = tmp_path / "pristine"
    shutil.copytree(path, pristine)
    damages = {
        "gap": lambda: commits[1].unlink(),
        "truncated": lambda: commits[-1].write_bytes(commits[-1].read_bytes()[:len(commits[-1].read_bytes()) // 2]),
    }
    for name, damage in damages.items():
        shutil.rmtree(path)
        shutil.copytree(pristine, path)
        damage()
        for extra in ([], ["--since-last"]):
            capsys.readouterr()
            code, _ = _main(audit_job, args + extra)
            err = capsys.readouterr().err
            errors = [line for line in err.splitlines() if line.startswith("error")]
            assert code == 2 and len(errors) == 1, (name, extra, err)
            assert errors[0].startswith(f"error: could not audit: {path / 'segments'}: "), (name, errors)
            assert "Traceback" not in err and not any(line.lstrip().startswith(("0: ", "at ")) for line in err.splitlines())
            # what is wrong, in the words of the writer that met it: delta-rs says it, Spark's Delta
            # names the commit file it could not read
            assert ("Truncated record" if name == "truncated" else "commit") in errors[0] or \
                "delta log" in errors[0] or (name == "truncated" and commits[-1].name in errors[0]), errors[0]
