"""The broker's predicted recovery (store_reader.broker.prediction) against the real broker's own answers."""
from __future__ import annotations

import gc
import os

import numpy as np
import pytest

import support
from store_reader import open_store
from store_reader.broker import pull, versions
from store_reader.formats.consumequeue import CQ_ENTRY_DTYPE
from store_reader.broker.cqueue import NO_FILE_ENTRY
from store_reader.broker.prediction import predict
from store_reader.testing.synthetic import CrashSpec, SyntheticStoreSpec, write_store

pytestmark = pytest.mark.reader

CASES = support.scenarios()


def _predict(case):
    version, scenario = case
    store = open_store(support.input_store(*case), support.broker_conf(*case))
    return predict(store, "5.3" if version.endswith("5.3.3") else "4.9")


@pytest.mark.parametrize("case", CASES, ids=support.case_id)
def test_load_result_and_path(case):
    exp = support.expected(*case)
    pred = _predict(case)
    assert pred.load_result == exp["afterLoad"]["loadResult"], pred.load_problems
    if pred.load_result:
        assert pred.recovery_path == exp["recoveryPath"]


@pytest.mark.parametrize("case", [c for c in CASES if support.expected(*c)["afterLoad"]["loadResult"]],
                         ids=support.case_id)
def test_commitlog_truncation_point(case):
    exp = support.expected(*case)["afterRecovery"]
    pred = _predict(case)
    assert pred.max_phy_offset == exp["maxPhyOffset"]
    assert pred.min_phy_offset == exp["minPhyOffset"]
    assert [(f.name, f.wrote) for f in pred.commitlog_files] == \
        [(f["name"], f["wrotePosition"]) for f in exp["commitLog"]["files"]]


def assert_runs_are_the_entries(q):
    """``entry_runs()`` (what the audit ships: unwritten slots by reference to the CQ file) cover
    ``entries()`` in order, without overlap, and leave out only ``NO_FILE_ENTRY`` offsets."""
    e, covered, end = q.entries(), np.zeros(len(q.entries()), bool), q.min_offset
    for r in q.entry_runs():
        assert r.first >= end
        i, end = r.first - q.min_offset, r.first + r.hi - r.lo
        assert (r.read() == e[i:i + r.hi - r.lo]).all()
        covered[i:i + r.hi - r.lo] = True
    assert (e[~covered] == np.array([NO_FILE_ENTRY], CQ_ENTRY_DTYPE)).all()


@pytest.mark.parametrize("case", [c for c in CASES if support.expected(*c)["afterLoad"]["loadResult"]],
                         ids=support.case_id)
def test_consume_queues_after_recovery(case):
    exp = support.expected(*case)["afterRecovery"]
    pred = _predict(case)
    assert pred.topic_queue_table() == exp["topicQueueTable"]
    got = {}
    for (topic, qid), q in pred.consume_queues.items():
        e = q.entries()
        # the same entries as the audit ships them: unwritten slots by reference to the CQ file
        assert_runs_are_the_entries(q)
        got.setdefault(topic, {})[str(qid)] = {
            "minOffset": q.min_offset, "maxOffset": q.max_offset,
            "entries": [[q.min_offset + i, int(x["phy_offset"]), int(x["size"]), int(x["tags_code"])]
                        for i, x in enumerate(e)],
        }
    want = {t: {qid: {k: v[k] for k in ("minOffset", "maxOffset", "entries")} for qid, v in qs.items()}
            for t, qs in exp["consumeQueues"].items()}
    assert got == want


HEADER_KEYS = {"beginTimestamp": "begin_timestamp", "endTimestamp": "end_timestamp",
               "beginPhyOffset": "begin_phy_offset", "endPhyOffset": "end_phy_offset",
               "hashSlotCount": "hash_slot_count", "indexCount": "index_count"}


@pytest.mark.parametrize("case", [c for c in CASES if support.expected(*c)["afterLoad"]["loadResult"]],
                         ids=support.case_id)
def test_index_files_and_queries(case):
    exp = support.expected(*case)["afterRecovery"]
    pred = _predict(case)
    got = [{k: getattr(f.header, v) for k, v in HEADER_KEYS.items()} for f in pred.index_files]
    assert got == [{k: f[k] for k in HEADER_KEYS} for f in exp["indexFiles"]]
    from store_reader.broker.indexservice import query_message
    cfg = open_store(support.input_store(*case), support.broker_conf(*case)).config
    # the fixtures' broker ran with maxMsgsNumBatch=100000 (fixtures/README.md), so every hit is returned
    for q in exp["index"]["queries"]:
        assert query_message(pred, cfg, q["topic"], q["key"], max_num=100000) == \
            q["queryMessagePhyOffsets"], q


@pytest.mark.parametrize("case", [c for c in CASES if support.expected(*c)["afterLoad"]["loadResult"]],
                         ids=support.case_id)
def test_checkpoint_after_recovery(case):
    exp = support.expected(*case)["afterRecovery"]["checkpoint"]
    ck = _predict(case).checkpoint
    assert (ck.physic_msg_timestamp, ck.logics_msg_timestamp, ck.index_msg_timestamp) == \
        (exp["physicMsgTimestamp"], exp["logicsMsgTimestamp"], exp["indexMsgTimestamp"])


@pytest.mark.parametrize("case", [c for c in CASES if support.expected(*c)["afterLoad"]["loadResult"]],
                         ids=support.case_id)
def test_consumer_offset_checks(case):
    from store_reader.formats.config import read_consumer_offsets
    from store_reader.broker.pull import consumer_offset_checks

    exp = support.expected(*case)["afterRecovery"]["consumerOffsetChecks"]
    store = open_store(support.input_store(*case), support.broker_conf(*case))
    offsets = read_consumer_offsets(store.root).value
    got = {(c.topic, c.group, c.queue_id): (c.committed_offset, c.status, c.next_begin_offset,
                                             c.min_offset, c.max_offset)
           for c in consumer_offset_checks(_predict(case), store.config, offsets)}
    want = {(e["topic"], e["group"], e["queueId"]): (e["committedOffset"], e["getMessageStatus"],
                                                      e["nextBeginOffset"], e["minOffset"], e["maxOffset"])
            for e in exp}
    assert got == want


@pytest.mark.parametrize("n", [0, 1, 4095, 4096, 4097, 300_000])
def test_leading_slots_tested_in_chunks_match_one_test_of_all(n):
    """The chunked walk the CQ recovery uses stops where one test over the whole file would."""
    from store_reader.broker.cqueue import _leading
    rng = np.random.default_rng(n)
    for bad_at in sorted({0, n // 2, max(n - 1, 0), 4096, 20_479, 20_480, n}):
        if bad_at > n:
            continue
        ok = np.ones(n, bool)
        if bad_at < n:
            ok[bad_at] = False
            ok[rng.integers(bad_at, n, 3)] = False       # later failures do not matter
        assert _leading(n, lambda lo, hi: ok[lo:hi]) == bad_at


# -- what the replay holds: the index files it builds are files, the CQ files it only read are not kept ---

LOADED = [c for c in CASES if support.expected(*c)["afterLoad"]["loadResult"]]


def _mapped(path) -> bool:
    """Whether this process maps ``path`` (``/proc/self/maps``)."""
    with open("/proc/self/maps") as maps:
        return any(line.rstrip("\n").endswith(" " + str(path)) for line in maps)


def test_the_replay_writes_its_index_files_in_the_scratch_directory_and_maps_none_after(tmp_path):
    built = []
    fds = len(os.listdir("/proc/self/fd"))
    for case in LOADED:
        store = open_store(support.input_store(*case), support.broker_conf(*case))
        scratch = tmp_path / support.case_id(case).replace("/", "-")
        scratch.mkdir()
        pred = predict(store, "5.3" if case[0].endswith("5.3.3") else "4.9", scratch=str(scratch))
        for f in pred.index_files:
            if f.built is not None:
                assert os.path.dirname(f.built) == str(scratch)
                assert not _mapped(f.built), f.built
                with f.view(store.config) as idx:           # the file holds what the header says
                    assert idx.header == f.header
                built.append(f.built)
    assert built                        # the fixtures' crash cases re-dispatch into index files
    assert len(os.listdir("/proc/self/fd")) == fds          # no file left open


def test_a_prediction_without_scratch_directory_removes_its_own_when_dropped():
    case = next(c for c in LOADED if any(f.built for f in _predict(c).index_files))
    pred = _predict(case)
    directory = os.path.dirname(next(f.built for f in pred.index_files if f.built))
    assert os.path.isdir(directory)
    del pred
    gc.collect()
    assert not os.path.exists(directory)


@pytest.mark.parametrize("case", LOADED, ids=support.case_id)
def test_the_recovery_holds_only_the_consume_queue_slots_it_wrote(case):
    """The recovery reads a queue's last three files; what it did not write is read again from
    the file when needed, not held (``_CQFile.release``)."""
    pred = _predict(case)
    for q in pred.consume_queues.values():
        for f in q.files:
            if f.path is not None and f.dirty_from >= q.per_file:
                assert f._slots is None, (q.topic, q.queue_id, f.start)


def test_a_replayed_index_file_the_scratch_filesystem_cannot_hold_is_one_clear_error(tmp_path):
    """A scratch file the filesystem refuses (here in a real process whose file size limit is
    below the index file's size) is an ``OutputError`` naming it, before anything is mapped."""
    import subprocess
    import sys

    case = next(c for c in LOADED if any(f.built for f in _predict(c).index_files))
    store = open_store(support.input_store(*case), support.broker_conf(*case))
    limit = store.config.index_file_size // 2
    code = (
        "import resource, signal, sys\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
        f"resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit}))\n"
        "from store_reader import open_store\n"
        "from store_reader.exceptions import OutputError\n"
        "from store_reader.broker.prediction import predict\n"
        f"store = open_store({str(support.input_store(*case))!r}, {str(support.broker_conf(*case))!r})\n"
        "try:\n"
        f"    predict(store, {'5.3' if case[0].endswith('5.3.3') else '4.9'!r}, scratch={str(tmp_path)!r})\n"
        "except OutputError as exc:\n"
        "    print('OutputError:', exc)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
                          cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"OutputError: {tmp_path}/index-"), done.stdout
    assert ": cannot write the replayed index file: File too large" in done.stdout


@pytest.mark.parametrize("abort", [True, False], ids=["abnormal", "normal"])
def test_a_consume_queue_file_missing_between_two_others_serves_nothing(tmp_path, abort):
    """R§2: the broker walks a queue's present files, takes its max offset from the last and never
    refills a file missing in between (puts append to the last file; the recovery's re-dispatch
    of those records is a repeat by phy): its offsets are served by no file (a pull gets
    OFFSET_FOUND_NULL and the next file's first offset), every other entry stays at its own
    offset. The same in every release (the real brokers: tests/test_real_broker.py's matrix)."""
    info = write_store(tmp_path / "s", SyntheticStoreSpec(
        total_bytes=3 * (64 << 10), segment_size=64 << 10, cq_file_size=600, message_size=512,
        topics=(("TopicA", 1),), broker="5.x", seed=7), CrashSpec(abort=abort, cq_behind=3))
    root = info.root
    whole = {}
    for v in versions.VERSIONS:       # (read before the file goes: a prediction reads CQ files lazily)
        q = predict(open_store(root, root / "broker.conf"), v).consume_queues[("TopicA", 0)]
        whole[v] = (q.min_offset, q.max_offset, q.entries())
    (root / "consumequeue" / "TopicA" / "0" / "00000000000000001200").unlink()    # offsets 60..89
    for v in versions.VERSIONS:
        pred = predict(open_store(root, root / "broker.conf"), v)
        q, (lo, hi, we) = pred.consume_queues[("TopicA", 0)], whole[v]
        assert (q.min_offset, q.max_offset) == (lo, hi) and hi > 120, v
        e = q.entries()
        assert all(e.dtype[name].isnative for name in e.dtype.names), v    # pandas takes no big-endian
        gap = slice(60 - q.min_offset, 90 - q.min_offset)
        assert (e[gap] == np.array([NO_FILE_ENTRY], CQ_ENTRY_DTYPE)).all(), v
        assert (e[:gap.start] == we[:gap.start]).all() and (e[gap.stop:] == we[gap.stop:]).all(), v
        assert_runs_are_the_entries(q)
        assert not any(r.first < 90 and r.first + r.hi - r.lo > 60 for r in q.entry_runs()), v
        got = pull.check_offset(pred, open_store(root, root / "broker.conf").config, "TopicA", "g", 0, 65)
        assert (got.status, got.next_begin_offset) == ("OFFSET_FOUND_NULL", 90), v
