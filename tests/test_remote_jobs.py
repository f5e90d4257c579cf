"""Every job and the ``rocketmq`` data source on an ``s3://`` store, against a real S3-compatible
server (``moto_server``, the session fixture ``s3_server`` in conftest.py), each job a real process
configured either through the environment docs/remote-stores-and-clusters.md documents (``AWS_ENDPOINT_URL`` ...) or through
the store URI's own options (``?scheme=http&endpoint_override=...``) with no ``AWS_*`` variable in
its environment at all. Whatever a job reports on S3 must equal what it reports on the same store
read locally: the prediction, the repaired store's manifest digests, the audit rows (also written to
an ``s3://`` and an ``s3a://`` audit path, by Spark's Delta writer through hadoop-aws),
``--since-last``, the replica comparison and ``jobs.dump --verify``.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pyarrow.compute as pc
import pytest

import support
from jobs._spark.deltasink import read_table, table_uri

pytestmark = pytest.mark.slow

CASE = ("rocketmq-4.9.7", "oldest-deleted")
# s3a:// audit paths (hadoop-aws) take their credentials from s3a's default chain: the environment
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}      # the oldest segment gone: CQ heads read from the input
# columns that name the run, the store or a file's location, not what was found
RUN_KEYS = {"run_id", "store_id", "audited_at", "path", "duration_ms", "passes", "file_mtime_ns"}


@pytest.fixture(scope="module")
def stores(s3_server):
    """(local store, the same store on S3, broker.conf, environment for the jobs)."""
    local = support.input_store(*CASE)
    remote = s3_server.upload(local, "stores", f"{CASE[0]}/{CASE[1]}")
    s3_server.filesystem().create_dir("audit")
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, **s3_server.env)
    return str(local), remote, str(support.broker_conf(*CASE)), env


@pytest.fixture(autouse=True)
def _aws_env(s3_server, monkeypatch):
    """This process reads the audit tables the jobs write to S3: the same environment."""
    for k, v in s3_server.env.items():
        monkeypatch.setenv(k, v)


def _job(module: str, args: list[str], env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", module, *args], env=env, capture_output=True,
                          text=True, timeout=600)


def _why(p: subprocess.CompletedProcess) -> str:
    """A failed job's stderr without Java's stack frames (which would push the Python error out)."""
    return "\n".join(ln for ln in p.stderr.splitlines() if not ln.lstrip().startswith("at "))[-4000:]


def _rows(audit: str, table: str) -> list[dict]:
    t = read_table(table_uri(audit, table))
    return sorted((json.dumps({k: v for k, v in r.items() if k not in RUN_KEYS}, sort_keys=True, default=str)
                   for r in t.to_pylist()))


def _bare_env(s3_server) -> dict:
    """No ``AWS_*`` variable: a job reaches the server only through the store URI's options."""
    return dict(s3_server.bare_env(), PYSPARK_PYTHON=sys.executable)


def test_recover_on_s3_equals_local(stores, s3_server, tmp_path):
    local, remote, conf, env = stores
    uri = s3_server.with_options(remote)
    s3a = s3_server.with_options("s3a://audit/recover-s3a")
    runs = {}
    for name, store, audit, job_env in (("local", local, str(tmp_path / "audit-local"), env),
                                        ("s3", remote, "s3://audit/recover", env),
                                        ("uri", uri, s3a, dict(_bare_env(s3_server), **CREDENTIALS))):
        out = tmp_path / f"out-{name}"
        p = _job("jobs.recover", ["--store", store, "--broker-config", conf, "--out", str(out),
                                  "--audit-path", audit, "--json"], job_env)
        assert p.returncode == 0, _why(p)
        manifest = json.loads((out / "MANIFEST.json").read_text())
        runs[name] = (json.loads(p.stdout), manifest, audit)
    pred_l, man_l, audit_l = runs["local"]
    for name, store in (("s3", remote), ("uri", uri)):
        pred_s, man_s, audit_s = runs[name]
        assert pred_s == pred_l, name
        assert man_s["outputs"] == man_l["outputs"], name     # every file, size and SHA-256
        assert man_s["inputs"] == man_l["inputs"], name
        assert man_s["store"] == store
        for table in ("queue_findings", "index_findings", "consumer_offset_findings", "lost_messages"):
            assert _rows(audit_s, table) == _rows(audit_l, table), (name, table)
        runs_row = read_table(table_uri(audit_s, "runs")).to_pylist()
        assert [r["store_id"] for r in runs_row] == [store]


def test_dry_run_takes_its_endpoint_from_the_uri(stores, s3_server):
    """The dry run reads the config files too (consumer offsets): with the server named only in the
    URI, every file derived from it is read through the same options (issue: the dry run printed
    an error about amazonaws.com for config/consumerOffset.json and exited 0)."""
    local, remote, conf, env = stores
    out = {}
    for name, store, job_env in (("local", local, env), ("uri", s3_server.with_options(remote), _bare_env(s3_server))):
        p = _job("jobs.recover", ["--store", store, "--broker-config", conf, "--dry-run", "--json"], job_env)
        assert p.returncode == 0 and "error:" not in p.stderr, _why(p)
        out[name] = json.loads(p.stdout)
    assert out["uri"] == out["local"]


def test_audit_and_since_last_on_s3_equal_local(stores, s3_server, tmp_path):
    local, remote, conf, env = stores
    audits = {"local": str(tmp_path / "audit"), "s3": "s3://audit/scheduled", "uri": str(tmp_path / "audit-uri")}
    codes = {}
    for name, store, job_env in (("local", local, env), ("s3", remote, env),
                                 ("uri", s3_server.with_options(remote), _bare_env(s3_server))):
        p = _job("jobs.audit", ["--store", store, "--broker-config", conf, "--audit-path", audits[name]], job_env)
        assert p.returncode in (0, 1), _why(p)
        codes[name] = p.returncode
    assert codes["s3"] == codes["uri"] == codes["local"]
    for table in ("segments", "queue_findings", "index_findings", "consumer_offset_findings",
                  "lost_messages", "flush_window"):
        assert _rows(audits["s3"], table) == _rows(audits["local"], table), table
        assert _rows(audits["uri"], table) == _rows(audits["local"], table), table
    # nothing changed on S3: the next scheduled run carries every segment over, scans none
    p = _job("jobs.audit", ["--store", remote, "--broker-config", conf, "--audit-path", audits["s3"],
                            "--since-last"], env)
    assert p.returncode == codes["s3"], _why(p)
    assert ", 0 scanned this run" in p.stdout
    runs = read_table(audits["s3"] + "/runs")
    since = runs.filter(pc.equal(runs["mode"], "since_last")).to_pylist()
    assert len(since) == 1 and since[0]["segments_scanned"] == 0
    assert since[0]["segments_total"] > 0


def test_replicas_and_dump_on_s3(stores, s3_server, tmp_path):
    local, remote, conf, env = stores
    p = _job("jobs.replicas", ["--master", remote, "--slave", local, "--broker-config", conf,
                               "--audit-path", str(tmp_path / "audit")], env)
    assert p.returncode == 0, _why(p)
    assert "IN SYNC" in p.stdout
    rows = read_table(str(tmp_path / "audit" / "replica_findings")).to_pylist()
    pair = [r for r in rows if r["kind"] == "pair"]
    assert pair and pair[0]["status"] == "in_sync" and pair[0]["store_id"] == remote

    uri = s3_server.with_options(remote)
    p = _job("jobs.replicas", ["--master", uri, "--slave", local, "--broker-config", conf,
                               "--audit-path", str(tmp_path / "audit-uri")], _bare_env(s3_server))
    assert p.returncode == 0 and "IN SYNC" in p.stdout, _why(p)

    dumps = {}
    for name, store, job_env in (("local", local, env), ("s3", remote, env), ("uri", uri, _bare_env(s3_server))):
        p = _job("jobs.dump", [store, "--verify", "--json", "--broker-config", conf], job_env)
        assert p.returncode in (0, 1), _why(p)
        # a file of a URI store is named by its URI, options included (it opens the same way)
        named = p.stdout.replace("?" + uri.partition("?")[2], "") if name == "uri" else p.stdout
        lines = [json.loads(x) for x in named.replace(store.partition("?")[0], "<store>").splitlines()]
        for x in lines:
            x.pop("lock_held", None)      # a remote store's lock cannot be probed (None)
        dumps[name] = (p.returncode, lines)
    assert dumps["s3"] == dumps["uri"] == dumps["local"]


def test_data_source_reads_s3_like_local(stores, tmp_path):
    """``format("rocketmq")`` on the S3 store, in a process of its own (its executors get the
    endpoint from the environment they start with)."""
    local, remote, conf, env = stores
    script = textwrap.dedent("""
        import json, sys
        import store_reader
        from jobs._spark.sparkutil import get_spark
        spark = get_spark("rocketmq-s3-datasource")
        store_reader.register(spark)
        out = {}
        for name, path in (("local", sys.argv[1]), ("s3", sys.argv[2])):
            for table in ("messages", "consume_queue", "index", "segments", "checkpoint"):
                df = spark.read.format("rocketmq").options(path=path, brokerConfig=sys.argv[3], table=table).load()
                cols = [c for c in df.columns if c not in ("path", "file", "segment_path")]
                rows = sorted(json.dumps(r.asDict(), sort_keys=True, default=str) for r in df.select(*cols).collect())
                out.setdefault(table, {})[name] = rows
        print(json.dumps(out))
    """)
    p = subprocess.run([sys.executable, "-c", script, local, remote, conf], env=env, capture_output=True,
                       text=True, timeout=600)
    assert p.returncode == 0, _why(p)
    out = json.loads(p.stdout.splitlines()[-1])
    for table, got in out.items():
        assert got["s3"] == got["local"], table
        assert got["local"], table


def test_unwritable_s3_audit_path_is_one_line_and_exit_2(stores):
    """A bucket that does not exist: the object store's answer in one line, not delta-rs' trace."""
    local, remote, conf, env = stores
    p = _job("jobs.audit", ["--store", remote, "--broker-config", conf, "--audit-path", "s3://no-such-bucket/audit"],
             env)
    assert p.returncode == 2, _why(p)
    errors = [line for line in p.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "s3://no-such-bucket/audit/" in errors[0] and "NoSuchBucket" in errors[0]
    assert "Traceback" not in p.stderr


def test_salvage_on_s3_equals_local(s3_server, tmp_path):
    """The export of the records a torn-middle store loses: the same bytes from S3 as locally."""
    case = ("rocketmq-5.3.3", "torn-middle-crc")
    local = support.input_store(*case)
    remote = s3_server.upload(local, "stores", f"{case[0]}/{case[1]}")
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, **s3_server.env)
    outs = {}
    for name, store, job_env in (("local", str(local), env), ("s3", remote, env),
                                 ("uri", s3_server.with_options(remote), _bare_env(s3_server))):
        outs[name] = tmp_path / f"lost-{name}.jsonl"
        p = _job("jobs.salvage", ["--store", store, "--broker-config", str(support.broker_conf(*case)),
                                  "--out", str(outs[name])], job_env)
        assert p.returncode == 0, _why(p)
    data = outs["s3"].read_bytes()
    assert data == outs["local"].read_bytes() and data.count(b"\n") == 20
    assert outs["uri"].read_bytes() == data
