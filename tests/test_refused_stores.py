"""Stores the real broker refuses to start on (issue 18 part 3): what the prediction says, and the
repaired store ``jobs.recover`` still writes, which the broker starts on.

Synthetic stores (``store_reader.testing.synthetic``) damaged one way each: a consume queue file of the
wrong length, an empty or half-written last consume queue file (5.3.3's correctMinOffset throw),
stray entries in ``commitlog/`` (a name that is not a number, a name that is a number but not 20
digits, a sub-directory, a zero-length last file), a commitlog file of the wrong length; and the
``cq-file-short`` fixture, whose repaired store must be what the ``clean`` fixture's answers say.
"""
from __future__ import annotations

import json
import os
import shutil
import struct

import numpy as np
import pytest

import support
from store_reader import open_store
from store_reader.broker import prediction
from store_reader.formats.consumequeue import list_queue_files, list_queues, read_queue_slots
from store_reader.testing.synthetic import SyntheticStoreSpec, write_store

V4, V5 = support.VERSIONS
SEGMENT = 256 << 10


def _store(tmp_path, broker: str, name: str = "store"):
    root = tmp_path / name
    info = write_store(root, SyntheticStoreSpec(total_bytes=1 << 20, segment_size=SEGMENT, cq_file_size=600,
                                                message_size=1024, topics=(("TopicA", 2), ("TopicB", 1)),
                                                broker=broker, seed=3))
    return root, info


def _open(root):
    return open_store(root, root / "broker.conf")


def _queue_files(root, topic, qid):
    return [f for f in list_queue_files(root / "consumequeue" / topic / str(qid), 600)]


def _empty_last_cq_file(root, partial: bytes = b""):
    """Zero the last CQ file of the queue that does not hold the newest records (keeping its
    length; ``partial`` written at byte 0), and drop the newest entry of the queue that does, so
    that the CQs end below the commitlog's end (no dirty-CQ truncation) and 5.x's normal recovery
    does not dispatch the records the zeroed file was for: its last file stays empty."""
    store = _open(root)
    lasts = {}
    for ref in list_queues(root):
        files = list_queue_files(ref.path, 600)
        slots = read_queue_slots(files[-1].path)
        n = int(np.count_nonzero(slots["size"] > 0))
        lasts[(ref.topic, ref.queue_id)] = (files, n, int(slots["phy_offset"][n - 1]) if n else -1)
    user = {k: v for k, v in lasts.items() if k[0] in ("TopicA", "TopicB")}
    newest = max(user, key=lambda k: user[k][2])
    victim = min((k for k in user if k != newest and len(user[k][0]) > 1), key=lambda k: user[k][2])
    files, n, _ = lasts[newest]
    with open(files[-1].path, "r+b") as fh:          # the newest entry never reached disk
        fh.seek((n - 1) * 20)
        fh.write(bytes(20))
    last = lasts[victim][0][-1]
    with open(last.path, "r+b") as fh:               # nor did anything of the victim's last file
        fh.write(partial + bytes(600 - len(partial)))
    assert store.loadable
    return victim, last


# -- consume queue file of the wrong length ----------------------------------------------------------

@pytest.mark.parametrize("broker", ["4.9", "5.3"])
def test_short_consume_queue_file_is_refused_naming_file_and_byte(tmp_path, broker):
    root, info = _store(tmp_path, broker)
    victim = _queue_files(root, "TopicA", 1)[1].path
    with open(victim, "r+b") as fh:
        fh.truncate(300)
    pred = prediction.predict(_open(root), broker)
    assert not pred.load_result
    (problem,) = pred.load_problems
    assert f"{victim} @ byte 300" in problem and "600" in problem
    # the rest is the broker's recovery of the store without that queue: the commitlog untouched
    assert pred.max_phy_offset == info.truncation_offset
    assert ("TopicA", 1) not in pred.consume_queues


# -- an empty or half-written last consume queue file: 5.3.3's correctMinOffset -----------------------

@pytest.mark.parametrize("partial, throws", [
    (b"", True),                                            # nothing of the file reached disk
    (struct.pack(">q", 4096), True),                        # phy only: size 0, not a valid entry
    (struct.pack(">qi", 4096, 7)[:11], True),               # size's last byte missing: still 0
    (struct.pack(">qi", 4096, 300), False),                 # phy and size: a valid entry
])
def test_empty_last_consume_queue_file_throws_in_5x_only(tmp_path, partial, throws):
    root, info = _store(tmp_path, "5.3")
    (topic, qid), last = _empty_last_cq_file(root, partial)
    pred = prediction.predict(_open(root), "5.3")
    assert pred.load_result is not throws
    if throws:
        (problem,) = pred.load_problems
        assert problem.startswith(f"{last.path} @ byte 0: ConsumeQueue#correctMinOffset throws")
        assert f"{topic}/{qid}" in problem
    # the recovery itself went through: the same cut either way
    assert pred.max_phy_offset == info.truncation_offset
    assert prediction.predict(_open(root), "4.9").load_result       # 4.9.7 checks the position


def test_single_empty_consume_queue_file_not_named_zero_throws(tmp_path):
    """minLogicOffset is 0 after load whatever the first file's name: a queue whose only file
    (starting at 600) is empty has min 0 < max 600."""
    root, _ = _store(tmp_path, "5.3")
    (_, _), last = _empty_last_cq_file(root)
    for f in _queue_files(root, *os.path.normpath(last.path).split(os.sep)[-3:-1]):
        if f.path != last.path:
            os.unlink(f.path)
    pred = prediction.predict(_open(root), "5.3")
    assert not pred.load_result and "correctMinOffset" in pred.load_problems[0]


def test_only_consume_queue_file_named_zero_and_empty_does_not_throw(tmp_path):
    root, _ = _store(tmp_path, "5.3")
    q = root / "consumequeue" / "TopicC" / "0"
    q.mkdir(parents=True)
    (q / "00000000000000000000").write_bytes(bytes(600))
    pred = prediction.predict(_open(root), "5.3")
    assert pred.load_result, pred.load_problems


# -- stray entries in commitlog/ -------------------------------------------------------------------------

@pytest.mark.parametrize("broker", ["4.9", "5.3"])
def test_name_that_is_not_a_number(tmp_path, broker):
    root, info = _store(tmp_path, broker)
    first = root / "commitlog" / info.commitlog_files[0]
    shutil.copy(first, root / "commitlog" / "00000000000000000000.bak")
    store = _open(root)
    pred = prediction.predict(store, broker)
    assert not pred.load_result
    assert "NumberFormatException" in pred.load_problems[0] and ".bak" in pred.load_problems[0]
    assert store.left_out == [str(root / "commitlog" / "00000000000000000000.bak")]
    assert pred.max_phy_offset == info.truncation_offset


@pytest.mark.parametrize("broker", ["4.9", "5.3"])
def test_name_that_is_a_number_but_not_20_digits(tmp_path, broker):
    """``851968``: Long.parseLong reads it; the broker maps it at that offset, in name order."""
    root, info = _store(tmp_path, broker)
    last = info.commitlog_files[-1]
    os.rename(root / "commitlog" / last, root / "commitlog" / str(int(last)))
    store = _open(root)
    assert store.loadable and store.commitlog_files[-1].start == int(last)
    pred = prediction.predict(store, broker)
    assert pred.load_result and pred.max_phy_offset == info.truncation_offset
    # the same name on a file of another length: refused for its length, the true reason
    with open(root / "commitlog" / str(int(last)), "r+b") as fh:
        fh.truncate(1000)
    pred = prediction.predict(_open(root), broker)
    assert not pred.load_result
    (problem,) = pred.load_problems
    assert "is 1000 bytes but mappedFileSizeCommitLog" in problem and "20-digit" not in problem


@pytest.mark.parametrize("broker", ["4.9", "5.3"])
def test_sub_directory_refused_by_4x_only(tmp_path, broker):
    root, info = _store(tmp_path, broker)
    (root / "commitlog" / "lost+found").mkdir()
    store = _open(root)
    assert store.loadable and store.left_out == [str(root / "commitlog" / "lost+found")]
    pred = prediction.predict(store, broker)
    assert pred.load_result is (broker == "5.3")
    if broker == "4.9":
        (problem,) = pred.load_problems
        assert "lost+found" in problem and "does not skip directories" in problem
    assert pred.max_phy_offset == info.truncation_offset


@pytest.mark.parametrize("broker", ["4.9", "5.3"])
def test_zero_length_last_file_names_the_file_on_4x(tmp_path, broker):
    root, info = _store(tmp_path, broker)
    empty = root / "commitlog" / f"{int(info.commitlog_files[-1]) + SEGMENT:020d}"
    empty.write_bytes(b"")
    pred = prediction.predict(_open(root), broker)
    assert pred.load_result is (broker == "5.3")
    if broker == "4.9":
        (problem,) = pred.load_problems
        assert problem.startswith(f"{empty} @ byte 0: zero-length last commitlog file")
    assert pred.max_phy_offset == info.truncation_offset


# -- a commitlog file of the wrong length: the broker's rule for its bytes --------------------------------

@pytest.mark.parametrize("broker", ["4.9", "5.3"])
def test_short_commitlog_file_is_read_as_never_written_past_its_data(tmp_path, broker):
    """The bytes a short file lacks are taken as never written (zeros, as preallocated), and the
    broker's recovery rules apply to that: a scan that reaches the file ends where its data ends
    and cuts everything after it; a normal recovery that starts after it never reads it again
    and keeps what follows (the zeros stay, as with any span the normal path keeps)."""
    root, info = _store(tmp_path, broker)
    last = max(i for i, name in enumerate(info.commitlog_files) if int(name) < info.written_end)
    for index, cut in ((1, False), (last, True)):
        path = root / "commitlog" / info.commitlog_files[index]
        with open(path, "r+b") as fh:
            fh.truncate(10_000)
        store = _open(root)
        pred = prediction.predict(store, broker)
        assert not pred.load_result and f"{path} @ byte 10000" in pred.load_problems[-1]
        assert all(f.size == SEGMENT for f in pred.commitlog_files)
        s = next(s for s in store.summaries(store.scan_options(broker == "5.3")) if s.path == str(path))
        if cut:
            assert pred.max_phy_offset == int(info.commitlog_files[index]) + s.valid_bytes
            assert pred.deleted_commitlog_files == info.commitlog_files[index + 1:]
        else:
            assert pred.max_phy_offset == info.truncation_offset


# -- jobs.recover on refused stores: a repaired store the broker starts on ---------------------------------

def _recover_cli(store, out, conf, capsys, *extra):
    from jobs import recover as job

    rc = job.main(["--store", str(store), "--out", str(out), "--broker-config", str(conf), *extra])
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


@pytest.mark.spark
@pytest.mark.parametrize("version", support.VERSIONS)
def test_cq_file_short_repaired_store_is_the_clean_stores(spark, tmp_path, capsys, version):
    """``cq-file-short`` is ``clean`` with one CQ file cut to 300 bytes: its repaired store holds
    what the clean fixture's broker answers require (same commitlog, complete queues)."""
    from test_recover_job import assert_matches_broker

    src = support.input_store(version, "cq-file-short")
    before = support.tree_digest(src)
    out = tmp_path / "out"
    rc, stdout, err = _recover_cli(src, out, support.broker_conf(version, "cq-file-short"), capsys)
    assert rc == 0 and support.tree_digest(src) == before
    assert "REFUSE" in stdout and f"repaired store     {out}" in stdout
    short = src / "consumequeue" / "TopicA" / "0" / "00000000000000000600"
    assert f"warning: the broker would not start on this store: {short} @ byte 300" in err
    version_arg = "5.3" if version == V5 else "4.9"
    repaired = prediction.predict(open_store(out, support.broker_conf(version, "clean")), version_arg)
    assert repaired.load_result
    assert_matches_broker(out, (version, "clean"), repaired.max_phy_offset)
    manifest = json.loads((out / "MANIFEST.json").read_text())
    assert not manifest["prediction"]["loadResult"] and "leftOut" not in manifest["prediction"]


def _lost_found(root, info):
    (root / "commitlog" / "lost+found").mkdir()


def _not_a_number(root, info):
    shutil.copy(root / "commitlog" / info.commitlog_files[0], root / "commitlog" / "00000000000000000000.bak")


def _zero_length_last(root, info):
    (root / "commitlog" / f"{int(info.commitlog_files[-1]) + SEGMENT:020d}").write_bytes(b"")


def _short_full_file(root, info):
    """The last full commitlog file cut to 10000 bytes: 4.9.7's normal recovery scans it (the
    third-last file) and cuts there, 5.3.3's starts after it (the file holding the CQ max)."""
    full = sorted(n for n in info.commitlog_files if int(n) + SEGMENT < info.written_end)[-1]
    with open(root / "commitlog" / full, "r+b") as fh:
        fh.truncate(10_000)


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.parametrize("broker, damage", [
    ("5.3", lambda root, info: _empty_last_cq_file(root)),
    ("4.9", _lost_found),
    ("4.9", _zero_length_last),
    ("5.3", _not_a_number),
    ("4.9", _short_full_file),
], ids=["5x-empty-last-cq-file", "4x-lost+found", "4x-zero-length-last", "5x-not-a-number", "4x-short-file"])
def test_recover_writes_a_store_the_broker_starts_on(spark, tmp_path, capsys, broker, damage):
    root, info = _store(tmp_path, broker)
    damage(root, info)
    store = _open(root)
    want = prediction.predict(store, broker)
    assert not want.load_result
    before = support.tree_digest(root)
    out = tmp_path / "out"
    rc, stdout, err = _recover_cli(root, out, root / "broker.conf", capsys, "--broker-version", broker)
    assert rc == 0 and support.tree_digest(root) == before
    assert "REFUSE" in stdout and err.count("warning: the broker would not start") == len(want.load_problems)
    for path in store.left_out:
        assert f"left out           {path}" in stdout
        assert not (out / "commitlog" / os.path.basename(path)).exists()
    manifest = json.loads((out / "MANIFEST.json").read_text())["prediction"]
    assert manifest.get("leftOut", []) == store.left_out
    repaired = prediction.predict(open_store(out, root / "broker.conf"), broker)
    assert repaired.load_result, repaired.load_problems
    assert repaired.max_phy_offset == want.max_phy_offset
    assert sorted(os.listdir(out / "commitlog")) == [f.name for f in want.commitlog_files]
    assert all(os.path.getsize(out / "commitlog" / f.name) == SEGMENT for f in want.commitlog_files)
    if want.deleted_commitlog_files:      # what is lost is said
        assert f"lost               {sum(s.records for s in store.summaries() if s.segment in want.deleted_commitlog_files)} records" in stdout


def test_dirty_cq_truncation_after_dispatch_keeps_the_empty_file_from_throwing(tmp_path):
    """[5.4] whether the dirty CQ entries are cut is decided after the recovery's own dispatch
    (5.3.3: before it, R§4.5). Here 5.x's normal recovery dispatches the newest record, whose end
    is the commitlog's end: 5.4 then runs the cut, which keeps the zeroed last file's entry 0 as a
    bogus entry (E#22), so the queue is not empty and 5.4's correctMinOffset does not throw where
    5.3.3's does; 5.5 never throws (the read is guarded since 5.5.0)."""
    root, info = _store(tmp_path, "5.3")
    (topic, qid), last = _empty_last_cq_file(root)
    p53, p54, p55 = (prediction.predict(_open(root), v) for v in ("5.3", "5.4", "5.5"))
    assert (p53.cq_truncated, p54.cq_truncated, p55.cq_truncated) == (False, True, True)
    assert not p53.load_result and "correctMinOffset" in p53.load_problems[0]
    assert p54.load_result and p55.load_result, (p54.load_problems, p55.load_problems)
    f = p54.consume_queues[(topic, qid)].files[-1]
    assert (f.start, f.wrote) == (int(os.path.basename(last.path)), 20)        # the bogus entry
    assert p53.max_phy_offset == p54.max_phy_offset == p55.max_phy_offset == info.truncation_offset
