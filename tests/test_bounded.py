"""The bounded dry run (``store_reader.broker.bounded``, recovery.md §17): it reads what the broker's restart
reads, predicts what a walk of every file predicts, and says what it did not check."""
from __future__ import annotations

import json
import shutil

import pytest

from jobs import recover
from jobs.recoverreport import prediction_summary
from store_reader.broker import bounded, prediction, versions
from store_reader import open_store
from store_reader.formats.commitlog import summarize_segment
from store_reader.testing.synthetic import CrashSpec, SyntheticStoreSpec, write_store

pytestmark = pytest.mark.reader        # the first records' check runs in either scanner


@pytest.fixture(scope="module", params=["4.9", "5.x"])
def crashed(request, tmp_path_factory):
    """A kill -9 with a recent checkpoint (its 3 s margin: 300 records) and a torn tail: the
    broker's recovery starts near the end, several whole files before it."""
    root = tmp_path_factory.mktemp(f"bounded-{request.param}") / "store"
    write_store(root, SyntheticStoreSpec(total_bytes=3 << 20, segment_size=512 << 10, message_size=1024,
                                         broker=request.param, seed=11, messages_per_second=100),
                CrashSpec(abort=True, stale_checkpoint=False, torn_tail=True), keep_messages=False)
    return root


def _dry_run(root, capsys, *extra) -> str:
    assert recover.main(["--store", str(root), "--broker-config", str(root / "broker.conf"), "--dry-run",
                         *extra]) == 0
    return capsys.readouterr().out


def _walked(root, version) -> tuple[list[str], prediction.Prediction]:
    """The files a bounded prediction walks, and the prediction."""
    store = open_store(root, root / "broker.conf")
    opts = store.scan_options(broker_5x=versions.is_5x(version))
    walked: list[str] = []

    def walk(files):
        walked.extend(f.name for f in files)
        return [summarize_segment(f.path, opts) for f in files]

    return walked, bounded.predict(store, version, walk)[0]


def test_bounded_prediction_is_the_full_one_and_reads_no_old_file(crashed, tmp_path, capsys):
    store = open_store(crashed, crashed / "broker.conf")
    version = store.broker_version()
    full = prediction_summary(prediction.predict(store, version))
    walked, pred = _walked(crashed, version)
    assert prediction_summary(pred) == full
    names = [f.name for f in store.commitlog_files]
    old = names[:names.index(pred.start_file)]
    assert old and set(walked).isdisjoint(old)
    assert json.loads(_dry_run(crashed, capsys, "--json")) == full
    # the files before the start file replaced by garbage (same length): nothing changes but a full
    # walk's view of them, so the dry run read no byte of them
    copy = tmp_path / "store"
    shutil.copytree(crashed, copy)
    for name in old:
        path = copy / "commitlog" / name
        path.write_bytes(b"\xa5" * path.stat().st_size)
    assert summarize_segment(copy / "commitlog" / old[0], store.scan_options()).end_reason in ("corrupt", "torn_tail")
    assert json.loads(_dry_run(copy, capsys, "--json")) == full
    text = _dry_run(copy, capsys)
    (line,) = [x for x in text.splitlines() if x.lstrip().startswith("not checked")]
    assert f"{len(old)} commitlog files" in line and old[0] in line and "jobs.audit" in line
    assert "corrupt" not in text.replace(line, "")
