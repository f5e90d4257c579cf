"""No option of any job writes into the input store (``publish.check_outside_store``, the one guard
of every output option): each output target inside the store is refused before any work, with one
``error:`` line and exit 2, and the store's bytes, modes and mtimes stay as they were."""
from __future__ import annotations

import shutil

import pytest

import support
from jobs import audit, recover, replicas, salvage
from test_apply_kills import snapshot

pytestmark = pytest.mark.spark
CASE = (support.VERSIONS[0], "crash-tail")


@pytest.fixture
def store(tmp_path):
    dest = tmp_path / "store"
    shutil.copytree(support.input_store(*CASE), dest, symlinks=True)
    return dest


def _cases(s, t) -> list[tuple]:
    """(job, arguments, the option's name in the error) for every output option of every job,
    pointed inside the store ``s`` (``t``: a place outside it for the other outputs)."""
    conf = str(support.broker_conf(*CASE))
    base = ["--store", str(s), "--broker-config", conf]
    return [
        (recover, base + ["--out", str(s / "repaired")], "output"),
        (recover, base + ["--out", str(t / "out"), "--apply", "--backup", str(s / "config" / "backup")], "backup"),
        (recover, base + ["--out", str(t / "out"), "--audit-path", str(s / "audit")], "audit path"),
        (recover, base + ["--out", str(t / "out"), "--scan-dir", str(s / "commitlog")], "scan dir"),
        (recover, base + ["--dry-run", "--audit-path", str(s)], "audit path"),
        (audit, base + ["--audit-path", str(s / "audit")], "audit path"),
        (audit, base + ["--audit-path", str(t / "audit"), "--scan-dir", str(s / "commitlog")], "scan dir"),
        (audit, base + ["--scan-dir", str(s)], "scan dir"),
        (salvage, base + ["--out", str(s / "lost.jsonl")], "salvage file"),
        (replicas, ["--master", str(t / "master"), "--slave", str(s), "--broker-config", conf,
                    "--audit-path", str(s / "audit")], "audit path"),
    ]


def test_every_output_option_inside_the_store_is_refused_before_any_work(spark, store, tmp_path, capsys):
    shutil.copytree(support.input_store(*CASE), tmp_path / "master", symlinks=True)
    before = snapshot(store)
    for job, args, what in _cases(store, tmp_path):
        capsys.readouterr()
        code = job.main(args)
        out, err = capsys.readouterr()
        errors = [line for line in err.splitlines() if line.startswith("error")]
        assert code == 2 and len(errors) == 1, (job.__name__, args, err)
        assert f"{what} " in errors[0] and "must not be the store" in errors[0], errors
        assert " pass scan " not in err and "Traceback" not in err
        assert snapshot(store) == before, (job.__name__, args)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["master", "store"]


def test_a_scan_dir_or_audit_path_that_holds_the_store_is_accepted(spark, store, tmp_path):
    """The run writes only into directories of its own under them: the default scan directory (the
    system's temporary directory) often holds the store."""
    code = audit.main(["--store", str(store), "--broker-config", str(support.broker_conf(*CASE)),
                       "--scan-dir", str(tmp_path), "--audit-path", str(tmp_path / "audit")])
    assert code in (0, 1)


@pytest.mark.parametrize("job", [recover, audit])
def test_a_scan_dir_that_does_not_exist_is_one_error_line(store, tmp_path, capsys, job):
    missing = tmp_path / "not-mounted" / "scratch"
    args = ["--store", str(store), "--broker-config", str(support.broker_conf(*CASE)), "--scan-dir", str(missing)]
    args += ["--out", str(tmp_path / "out")] if job is recover else []
    code = job.main(args)
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err, err
    (line,) = [line for line in err.splitlines() if line.startswith("error")]
    assert line.endswith(f"{missing}: the scratch directory does not exist or is not a directory"), line
    assert not missing.parent.exists() and not (tmp_path / "out").exists()
