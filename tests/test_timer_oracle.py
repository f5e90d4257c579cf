"""The repaired 5.x timer store, checked by the real broker (issue 32).

Stores written by the real 5.3.3 DefaultMessageStore + TimerMessageStore through the project's
oracle (``compat/src/v5/TimerOracle.java``: the broker's put hook reroutes timer messages to
rmq_sys_wheel_timer), damaged, repaired by ``jobs.recover``, then the real TimerMessageStore is
restarted on each repaired store: it loads, its recovery and enqueue change nothing, and the
dequeue chains of the wheel deliver every surviving timer message exactly once; and the
prediction of the broker's own restart on each damaged input is what the broker does. 5.3.3,
5.4.0, 5.5.1.
"""
from __future__ import annotations

import collections
import hashlib
import os
import shutil
import struct

import pytest

from jobs.recover import recover
from store_reader import open_store
from store_reader.audit.timer import predict_timer, timer_queue_range
from store_reader.broker.prediction import predict
from store_reader.broker.versions import resolve_version
from tests import oracle

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.oracle]

# the releases whose TimerMessageStore is checked (5.4.0 added wheel snapshots and the RocksDB
# timeline, both off by default): every case on the first, the damage cases on the others
VERSIONS = ("5.3.3", "5.4.0", "5.5.1")
# a long timerFlushIntervalMs: the harness's one flush at half the messages is what the files
# hold, the stale timercheck (and timerwheel) a kill -9 leaves
BROKER_CONF = """\
timerWheelEnable=true
mappedFileSizeTimerLog=8192
mappedFileSizeCommitLog=131072
mappedFileSizeConsumeQueue=2000
timerFlushIntervalMs=3600000
flushDiskType=ASYNC_FLUSH
brokerRole=ASYNC_MASTER
"""
N_TIMER, N_NORMAL = 200, 100
UNIT = 52


@pytest.fixture(scope="module")
def conf(tmp_path_factory):
    path = tmp_path_factory.mktemp("timer-conf") / "broker.conf"
    path.write_text(BROKER_CONF)
    return str(path)


@pytest.fixture(scope="module")
def written(tmp_path_factory, conf):
    """(store, what the writer reports) per (version, how the writer ended: halt = kill -9, or
    shutdown), written once per module run."""
    cache = {}

    def get(version, end):
        if (version, end) not in cache:
            store = tmp_path_factory.mktemp(f"timer-{version}-{end}") / "store"
            seed = 11 if end == "halt" else 12
            w = oracle.run(version, "TimerOracle", "write", store, conf, N_TIMER, N_NORMAL, seed, end)
            assert w["enqueuedAll"]
            cache[(version, end)] = (store, w)
        return cache[(version, end)]
    return get


def _cut_index(written):
    """Which timer message the commitlog-cut cases damage: the second in the last commitlog file
    holding messages. The abnormal recovery always checks that file; it starts from an earlier one
    only when the checkpoint, flushed on the broker's own clock, is older than that file's first
    message, so a cut in an earlier file is there or not by timing (seen once in CI, 5.5.1)."""
    timers = [m["phy"] // 131072 for m in written if m["timer"]]
    return timers.index(max(timers)) + 1


def _flip_crc_of(store, written, index):
    """Damage the body CRC of the index-th timer message: the broker's recovery cuts there."""
    w = [m for m in written if m["timer"]][index]
    seg = w["phy"] // 131072 * 131072
    with open(store / "commitlog" / f"{seg:020d}", "r+b") as fh:
        fh.seek(w["phy"] - seg + 8)
        crc = fh.read(4)
        fh.seek(w["phy"] - seg + 8)
        fh.write(bytes(b ^ 0xFF for b in crc))
    return w["phy"]


def _tear_timerlog(store):
    """Zero the timer log from the offset_py field of the sixth last unit on: a unit whose size
    and magic are valid but points nowhere, then nothing."""
    files = sorted((store / "timerlog").iterdir())
    last = files[-1]
    data = bytearray(last.read_bytes())
    n = next(i for i in range(0, len(data), UNIT) if data[i:i + UNIT] == bytes(UNIT)) // UNIT
    start = (n - 6) * UNIT + 28
    data[start:] = bytes(len(data) - start)
    last.write_bytes(bytes(data))


def _damage(case, store, written):
    """The damaged input of ``case``; returns the cut the damage causes (None: none)."""
    if case.startswith("commitlog-cut"):
        return _flip_crc_of(store, written, _cut_index(written))
    if case == "torn-timerlog":
        _tear_timerlog(store)
    elif case == "zeroed-timercheck":
        (store / "config" / "timercheck").write_bytes(bytes(4096))
    elif case == "missing-timerwheel":
        (store / "timerwheel").unlink()
    return None


def _digest(root, names):
    h = {}
    for name in names:
        p = root / name
        for f in sorted(p.iterdir()) if p.is_dir() else [p]:
            h[str(f.relative_to(root))] = hashlib.sha256(f.read_bytes()).hexdigest()
    return h


def _dropped(case, written):
    """What the repair drops from the input's timer log in ``case``."""
    if case.startswith("commitlog-cut"):
        return {"timer.unit_beyond_truncation": N_TIMER - _cut_index(written)}
    return {"timer.unit_wrong_record": 1} if case == "torn-timerlog" else {}


def _kept(case, written):
    """How many of the input's timer log units the repair keeps in ``case``."""
    if case.startswith("commitlog-cut"):
        return _cut_index(written)
    return N_TIMER - 6 if case == "torn-timerlog" else N_TIMER


CASES = [("clean", "shutdown"), ("kill9-stale-timercheck", "halt"), ("commitlog-cut", "halt"),
         ("commitlog-cut-salvage", "halt"), ("torn-timerlog", "halt"), ("zeroed-timercheck", "halt"),
         ("missing-timerwheel", "halt")]
DAMAGE = ("kill9-stale-timercheck", "commitlog-cut")
MATRIX = [pytest.param(v, c, e, id=f"{v}-{c}") for v in VERSIONS for c, e in CASES
          if v == VERSIONS[0] or c in DAMAGE]
PREDICTED = [p for p in MATRIX if not p.values[1].endswith("-salvage")]


def _deliveries(restarted):
    """uniq key -> how often the wheel's dequeue chains deliver it; and the chains' misses."""
    delivered, misses = collections.Counter(), 0
    for slot in restarted["slots"]:
        for u in slot["chain"]:
            if u["msg"] is None or u["msg"]["topic"] != "rmq_sys_wheel_timer":
                misses += 1
            else:
                assert int(u["msg"]["timerOutMs"]) // 1000 * 1000 == slot["timeMs"]
                delivered[u["msg"]["uniqKey"]] += 1
    return delivered, misses


@pytest.mark.parametrize("version,case,end", MATRIX)
def test_real_timer_store_delivers_every_survivor_once(spark, tmp_path, conf, written, version, case, end):
    src, w = written(version, end)
    store = tmp_path / "input"
    shutil.copytree(src, store)
    cut = _damage(case, store, w["written"])
    salvage = case.endswith("-salvage")
    # --salvage re-appends the intact records after the cut (not the one whose CRC fails)
    survivors = {m["uniqKey"]: m for m in w["written"]
                 if m["timer"] and (cut is None or m["phy"] < cut or salvage and m["phy"] > cut)}
    assert len(survivors) == {None: N_TIMER}.get(cut, N_TIMER - 1 if salvage else _kept(case, w["written"]))

    out = tmp_path / "repaired"
    report = recover(spark, str(store), str(out), conf, resolve_version(version), salvage=salvage)
    t = report.timer_store
    assert t is not None and t["dropped"] == _dropped(case, w["written"])
    assert t["units_kept"] == _kept(case, w["written"])
    # the project's own audit of the repaired store finds nothing left to change
    repaired = open_store(str(out), conf)
    pred = predict(repaired, resolve_version(version), summaries=repaired.summaries())
    tp = predict_timer(repaired, pred.max_phy_offset, timer_queue_range(pred))
    assert all(d is None for d in tp.verdicts.dropped) and not tp.unreached.any()
    assert (tp.recover.curr_queue_offset, tp.recover.enqueued_again, tp.recover.skipped) == (t["queue_offset"], 0, 0)
    restarted = tmp_path / "restarted"
    shutil.copytree(out, restarted)
    before = _digest(out, ["timerlog", "timerwheel"])
    j = oracle.run(version, "TimerOracle", "restart", restarted, conf)

    # it loads, and its recovery resumes the enqueue where the repair said
    assert j["loadResult"] and j["timerLoadResult"], j
    rec, enq = j["afterRecover"], j["afterEnqueue"]
    assert rec["currQueueOffset"] == t["queue_offset"]
    # its recovery drops no unit; the enqueue appends exactly the survivors without one (a torn
    # log's tail) and none again; where every survivor kept its unit, no byte changes
    assert j["unitsAfterRecover"] == t["units_kept"]
    assert enq["currQueueOffset"] == enq["timerQueueMax"] == len(survivors)
    assert len(j["units"]) == len(survivors)
    if t["units_kept"] == len(survivors):
        assert _digest(restarted, ["timerlog", "timerwheel"]) == before
    # every surviving timer message delivered once by the chains, at its time; nothing else
    delivered, misses = _deliveries(j)
    assert misses == 0
    assert set(delivered) == set(survivors)
    assert max(delivered.values()) == 1, [k for k, n in delivered.items() if n > 1]


@pytest.mark.parametrize("version,case,end", PREDICTED)
def test_timer_prediction_matches_the_broker_alone(tmp_path, conf, written, version, case, end):
    """On the damaged input itself: the predicted resume offset of the timer queue, the messages
    delivered twice (entries enqueued again) and the dequeue misses (units past the cut or at
    another record) are what the real broker's restart does."""
    src, w = written(version, end)
    store = tmp_path / "input"
    shutil.copytree(src, store)
    _damage(case, store, w["written"])
    s = open_store(str(store), conf)
    summaries = s.summaries()
    pred = predict(s, resolve_version(version), summaries=summaries)
    tp = predict_timer(s, pred.max_phy_offset, timer_queue_range(pred))
    j = oracle.run(version, "TimerOracle", "restart", store, conf)
    assert j["timerLoadResult"]
    assert j["afterRecover"]["currQueueOffset"] == tp.recover.curr_queue_offset
    delivered, misses = _deliveries(j)
    assert sum(1 for n in delivered.values() if n == 2) == tp.recover.enqueued_again
    assert misses == sum(d is not None for d in tp.verdicts.dropped)
    assert not tp.unreached.any()
