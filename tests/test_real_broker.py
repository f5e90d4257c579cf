"""The real broker (RocketMQ's release jars, ``tests/oracle.py``) against the project.

1. Every fixture in ../shared/fixtures: the oracle's restart of the fixture's input reproduces the
   fixture's expected.json (which validates the oracle), then the project's repaired store is
   restarted by the broker of the fixture's version.
2. A crash matrix per supported release: stores written by the real put path (``oracle.Write``),
   halted at seeded points, ASYNC and SYNC flush, with and without the abort file, plus seeded
   damage. The project's prediction equals the broker's recovery (load result, path, min/max phy
   offset, every queue's range and entries, the records lost, index answers, consumer offset
   checks), and the broker's restart on the repaired store changes nothing.

A repaired store passes when the broker loads it, changes no byte of commitlog/, consumequeue/,
index/ or checkpoint (no file created or removed there either), ends at the project's truncation
point, and every consume queue entry resolves to its own record (fillers aside).

The broker restarts run in a few threads (each a JVM that mostly waits: the store's shutdown
sleeps 1-3 s) while this process runs the project's recovery on Spark. Seeds, counts and seconds
are printed (``-s`` shows them).
"""
from __future__ import annotations

import hashlib
import os
import random
import shutil
import struct
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import oracle
import support
from jobs.recover import recover
from store_reader.broker import bounded, cqueue, indexservice, prediction, pull, versions
from store_reader import load_broker_config, open_store
from store_reader.formats.config import read_consumer_offsets
from store_reader.exceptions import StoreReaderError

pytestmark = [pytest.mark.slow, pytest.mark.oracle, pytest.mark.spark]

FILLER_SIZE = 0x7FFFFFFF
JVMS = 3    # broker restarts in flight at once
SIGNIFICANT = ("commitlog/", "consumequeue/", "index/")


def project_version(release: str) -> str:
    """The project's ``--broker-version`` for a broker release: its own major.minor where the
    project has rules of that name, else the rules it has today (4.9, or 5.x = 5.3.3's)."""
    mm = ".".join(release.split(".")[:2])
    known = getattr(versions, "VERSIONS", (versions.V49, versions.V5X))
    if mm in known:
        return mm
    return versions.V49 if mm == "4.9" else versions.V5X


# -- what the broker did, what the project says -------------------------------------------------------

def broker_queues(r: dict) -> dict:
    """(topic, queueId) -> (min, max, [(phy, size, tags)...]) of the queues in the broker's table."""
    out = {}
    for topic, qs in r.get("queues", {}).items():
        for qid, q in qs.items():
            if q.get("inTable"):
                out[(topic, int(qid))] = (q.get("minOffset"), q.get("maxOffset"),
                                          [(e.get("phy"), e.get("size"), e.get("tags")) for e in q.get("entries", [])])
    return out


def predicted_queues(pred: prediction.Prediction) -> dict:
    """The same for the project (an offset in a missing CQ file: (None, None, None), as the
    oracle's ``missing`` entry)."""
    out = {}
    for (topic, qid), q in pred.consume_queues.items():
        e = q.entries()
        out[(topic, qid)] = (q.min_offset, q.max_offset,
                             [(None, None, None) if x == cqueue.NO_FILE_ENTRY else x
                              for x in zip(e["phy_offset"].tolist(), e["size"].tolist(), e["tags_code"].tolist())])
    return out


def recovery_differences(pred: prediction.Prediction, r: dict, store_root: Path, conf: Path) -> list[str]:
    """Where the project's prediction and the broker's recovery of the same store differ."""
    diffs = []
    if pred.load_result != r["loadResult"]:
        return [f"load result: project {pred.load_result} ({pred.load_problems[:1]}), broker {r['loadResult']} "
                f"({r.get('loadException')})"]
    if not r["loadResult"]:
        return []
    for what, ours, theirs in (("recovery path", pred.recovery_path, r["recoveryPath"]),
                               ("max phy offset", pred.max_phy_offset, r["maxPhyOffset"]),
                               ("min phy offset", pred.min_phy_offset, r["minPhyOffset"])):
        if ours != theirs:
            diffs.append(f"{what}: project {ours}, broker {theirs}")
    ours, theirs = predicted_queues(pred), broker_queues(r)
    if set(ours) != set(theirs):
        diffs.append(f"queues only the project has: {sorted(set(ours) - set(theirs))[:5]}, "
                     f"only the broker: {sorted(set(theirs) - set(ours))[:5]}")
    for key in sorted(set(ours) & set(theirs)):
        (a_lo, a_hi, a), (b_lo, b_hi, b) = ours[key], theirs[key]
        if (a_lo, a_hi) != (b_lo, b_hi):
            diffs.append(f"{key[0]}/{key[1]} range: project {a_lo}..{a_hi}, broker {b_lo}..{b_hi}")
        elif a != b:
            at = next(i for i, (x, y) in enumerate(zip(a, b)) if x != y)
            diffs.append(f"{key[0]}/{key[1]} entry {a_lo + at}: project {a[at]}, broker {b[at]}")
    cfg = open_store(store_root, conf, read_dledger=True).config
    for q in r.get("index", []):
        got = indexservice.query_message(pred, cfg, q["topic"], q["key"])
        if got != q["phyOffsets"]:
            diffs.append(f"queryMessage {q['topic']}/{q['key']}: project {got}, broker {q['phyOffsets']}")
            break
    offsets = read_consumer_offsets(store_root).value
    ours_c = {(c.topic, c.group, c.queue_id): (c.committed_offset, c.status, c.next_begin_offset)
              for c in pull.consumer_offset_checks(pred, cfg, offsets)}
    theirs_c = {(c["topic"], c["group"], c["queueId"]): (c["committedOffset"], c.get("status"), c.get("nextBeginOffset"))
                for c in r.get("consumerOffsets", {}).get("checks", [])}
    if ours_c != theirs_c:
        k = next(k for k in sorted(set(ours_c) | set(theirs_c)) if ours_c.get(k) != theirs_c.get(k))
        diffs.append(f"consumer offset {k}: project {ours_c.get(k)}, broker {theirs_c.get(k)}")
    return diffs


def lost_records(written: list[dict], queues: dict) -> set:
    """The acknowledged, dispatchable records (topic, queueId, queue offset) no queue serves."""
    lost = set()
    for w in written:
        if w["kind"] in ("prepared", "rollback"):
            continue
        lo, hi, _ = queues.get((w["topic"], w["queueId"]), (0, 0, None))
        for off in range(w["queueOffset"], w["queueOffset"] + w.get("msgNum", 1)):
            if not lo <= off < hi:
                lost.add((w["topic"], w["queueId"], off))
    return lost


# -- a repaired store restarted by the broker ---------------------------------------------------------

def snapshot(root: Path) -> dict[str, tuple[str, bytes | None]]:
    """sha256 of every file under commitlog/, consumequeue/, index/ and of checkpoint (index
    files with their bytes, for ``reindexed_end_only``)."""
    out = {}
    for d, _, files in os.walk(root):
        for f in files:
            rel = os.path.relpath(os.path.join(d, f), root)
            if rel == "checkpoint" or rel.startswith(SIGNIFICANT):
                data = Path(d, f).read_bytes()
                out[rel] = (hashlib.sha256(data).hexdigest(), data if rel.startswith("index/") else None)
    return out


def index_differences(pred, broker_index: Path, cfg) -> list[str]:
    """The predicted index files' entries, (keyHash, phy offset), against those the broker's
    restart left in ``broker_index`` (5.4+: the ``topic#T#tags`` keys among them, F§7.4). Which
    entries, not how often: a 4.9.8 torn tail has the broker put a record's keys once more than
    the prediction does (the record at the index's endPhyOffset indexed again), not modelled yet."""
    from store_reader.formats.indexfile import read_entries

    def entries(paths) -> Counter:
        out = Counter()
        for p in paths:
            t = read_entries(str(p), cfg.maxHashSlotNum, cfg.maxIndexNum)
            out.update(zip(t["key_hash"].to_pylist(), t["phy_offset"].to_pylist()))
        return out

    theirs = set(entries(sorted(broker_index.iterdir()) if broker_index.is_dir() else []))
    ours = set(entries([f.built or f.path for f in pred.index_files]))
    if ours == theirs:
        return []
    return [f"index entries: {len(ours)} predicted, {len(theirs)} the broker's; only predicted "
            f"{sorted(ours - theirs)[:3]}, only the broker's {sorted(theirs - ours)[:3]}"]


def reindexed_end_only(before: bytes, after: bytes, slots: int) -> bool:
    """The index file changed only by the broker indexing again the record at its endPhyOffset.

    At every start the broker re-dispatches the records after the last consume queue entry
    (reputFromOffset); IndexService#buildIndex skips only records below the index's endPhyOffset,
    so when the last indexed record has no consume queue entry (a PREPARED transaction record at
    the end) each restart indexes it once more. The broker does this to its own recovered store
    too, so no repaired store can avoid it: allowed, and nothing else."""
    head = ">qqqqii"    # begin/end timestamp, begin/end phy offset, hashSlotCount, indexCount
    hb, ha = struct.unpack_from(head, before), struct.unpack_from(head, after)
    if len(before) != len(after) or hb[:5] != ha[:5] or ha[5] <= hb[5]:
        return False
    base = 40 + slots * 4    # entries (20 bytes each) after the header and the 4-byte hash slots
    added = range(hb[5], ha[5])
    if (before[base:base + hb[5] * 20] != after[base:base + hb[5] * 20]
            or before[base + ha[5] * 20:] != after[base + ha[5] * 20:]):
        return False
    if any(struct.unpack_from(">iqii", after, base + i * 20)[1] != hb[3] for i in added):
        return False
    return all(before[40 + 4 * k:44 + 4 * k] == after[40 + 4 * k:44 + 4 * k]
               or int.from_bytes(after[40 + 4 * k:44 + 4 * k], "big") in added for k in range(slots))


def own_record(topic: str, qid: int, e: dict) -> bool:
    """The entry at queue offset e['q'] resolves to a record of this queue at that offset (its
    body may fail its CRC: a record the broker's recovery does not re-read is kept as it is)."""
    if e.get("size") == FILLER_SIZE:
        return True
    m = e.get("msg")
    if m is None or m["phy"] != e["phy"]:
        return False
    if m["topic"] == topic and m["queueId"] == qid:
        return m["queueOffset"] == e["q"]
    # an LMQ copy: the record names this queue and its offset in it
    names = (m.get("multiDispatch") or "").split(",")
    offsets = (m.get("multiQueueOffset") or "").split(",")
    return topic in names and len(names) == len(offsets) and offsets[names.index(topic)] == str(e["q"])


def restart_differences(before: dict, r: dict, after: dict, cut: int, slots: int) -> list[str]:
    """What the broker's restart on a repaired store did that it should not have (``slots``: the
    store's maxHashSlotNum)."""
    if not r["loadResult"]:
        return [f"the broker does not load the repaired store: {r.get('loadException')}"]
    diffs = [f"{p}: {'created' if p not in before else 'removed' if p not in after else 'changed'}"
             for p in sorted(set(before) | set(after)) if before.get(p) != after.get(p)
             and not (p in before and p in after and p.startswith("index/")
                      and reindexed_end_only(before[p][1], after[p][1], slots))]
    if r["recoveryPath"] != "normal":
        diffs.append("the repaired store has an abort file")
    if r["maxPhyOffset"] != cut:
        diffs.append(f"broker max phy offset {r['maxPhyOffset']}, project's cut {cut}")
    bad = [f"{t}/{q}@{e['q']}" for t, qs in r["queues"].items() for q, v in qs.items()
           for e in v.get("entries", []) if not own_record(t, int(q), e)]
    if bad:
        diffs.append(f"{len(bad)} consume queue entries not resolving to their own record: {bad[:5]}")
    return diffs


@dataclass
class Case:
    """One store for both sides: the broker of ``release`` on a copy, the project on the original."""
    name: str
    release: str
    store: Path                       # the input store; never changed
    conf: Path                        # its broker.conf
    written: list = field(default_factory=list)
    commitlog_gone: bool = False
    result: dict = field(default_factory=dict)


class Bench:
    """Runs cases: broker restarts in a thread pool, the project's recovery on the calling thread."""

    def __init__(self, spark, work: Path) -> None:
        self.spark, self.work = spark, work
        self.pool = ThreadPoolExecutor(JVMS)

    def broker_restart(self, release: str, src: Path, conf: Path, dest: Path):
        shutil.copytree(src, dest, symlinks=True)
        before = snapshot(dest)

        def go():
            return before, oracle.restart(release, dest, conf), snapshot(dest)
        return self.pool.submit(go)

    def run(self, cases: list[Case]) -> None:
        inputs = {c.name: self.broker_restart(c.release, c.store, c.conf, self.work / c.name / "broker-input")
                  for c in cases}
        repaired = {}
        for c in cases:
            out = self.work / c.name / "repaired"
            t, digest = time.monotonic(), support.tree_digest(c.store)
            try:
                report = recover(self.spark, str(c.store), str(out), str(c.conf),
                                 project_version(c.release), commitlog_gone=c.commitlog_gone)
            except StoreReaderError as e:
                c.result["refused"] = str(e)
                continue
            finally:
                assert support.tree_digest(c.store) == digest, f"{c.name}: the input store was modified"
            c.result["recoverSeconds"] = time.monotonic() - t
            c.result["cut"] = report.prediction.max_phy_offset
            repaired[c.name] = self.broker_restart(c.release, out, c.conf, self.work / c.name / "broker-repaired")
        for c in cases:
            _, r, _ = inputs[c.name].result()
            c.result["broker"] = r
            if c.name in repaired:
                # the prediction as --dry-run makes it, from the files the broker's restart reads
                # (the run's own index files are gone with its scratch)
                pred, _ = bounded.predict(open_store(c.store, c.conf), project_version(c.release))
                c.result["recovery"] = recovery_differences(pred, r, c.store, c.conf)
                if r["loadResult"] and pred.load_result:
                    c.result["recovery"] += index_differences(pred, self.work / c.name / "broker-input" / "index",
                                                              load_broker_config(c.conf))
                if c.written:
                    c.result["lost"] = (len(lost_records(c.written, broker_queues(r))) if r["loadResult"] else None,
                                        len(lost_records(c.written, predicted_queues(pred))) if pred.load_result else None)
                before, rr, after = repaired[c.name].result()
                c.result["restart"] = restart_differences(before, rr, after, c.result["cut"],
                                                          load_broker_config(c.conf).maxHashSlotNum)
                entries = [e for qs in rr.get("queues", {}).values() for v in qs.values() for e in v.get("entries", [])]
                bad_crc = sum(1 for e in entries if e.get("msg") and not e["msg"]["bodyCrcOk"])
                c.result["checked"] = (f"{len(before)} files, {len(entries)} queue entries"
                                       + (f", {bad_crc} of them to a record whose body fails its CRC, kept as the "
                                          "broker keeps it" if bad_crc else ""))
            shutil.rmtree(self.work / c.name, ignore_errors=True)

    def close(self) -> None:
        self.pool.shutdown(wait=True)


@pytest.fixture(scope="module")
def bench(spark, tmp_path_factory):
    b = Bench(spark, tmp_path_factory.mktemp("real-broker"))
    yield b
    b.close()


# -- 1. the fixtures ------------------------------------------------------------------------------------

FIXTURE_RELEASES = sorted({v.split("-")[1] for v, _ in support.scenarios()})


def fixture_oracle_differences(r: dict, exp: dict) -> list[str]:
    """The oracle's restart of a fixture input against the fixture's expected.json."""
    if r["loadResult"] != exp["afterLoad"]["loadResult"]:
        return [f"load result {r['loadResult']} ({r.get('loadException')}), expected {exp['afterLoad']['loadResult']}"]
    if not r["loadResult"]:
        return []
    ar = exp["afterRecovery"]
    diffs = [f"{k}: {r[k]}, expected {e}" for k, e in (("recoveryPath", exp["recoveryPath"]),
                                                        ("maxPhyOffset", ar["maxPhyOffset"]),
                                                        ("minPhyOffset", ar["minPhyOffset"])) if r[k] != e]
    want = {(t, int(q)): (v["minOffset"], v["maxOffset"], [tuple(e[1:4]) for e in v["entries"]])
            for t, qs in ar["consumeQueues"].items() for q, v in qs.items()}
    got = broker_queues(r)
    if got != want:
        k = next(k for k in sorted(set(got) | set(want)) if got.get(k) != want.get(k))
        diffs.append(f"queue {k}: {str(got.get(k))[:200]}, expected {str(want.get(k))[:200]}")
    exp_q = {(q["topic"], q["key"]): sorted(q["queryMessagePhyOffsets"]) for q in ar["index"]["queries"]}
    for q in r["index"]:
        if (q["topic"], q["key"]) in exp_q and exp_q[(q["topic"], q["key"])] != q["phyOffsets"]:
            diffs.append(f"queryMessage {q['topic']}/{q['key']}: {q['phyOffsets']}, expected "
                         f"{exp_q[(q['topic'], q['key'])]}")
    exp_c = {(e["topic"], e["group"], e["queueId"]): (e["getMessageStatus"], e["nextBeginOffset"])
             for e in ar["consumerOffsetChecks"]}
    got_c = {(c["topic"], c["group"], c["queueId"]): (c.get("status"), c.get("nextBeginOffset"))
             for c in r["consumerOffsets"]["checks"]}
    if exp_c != got_c:
        diffs.append(f"consumer offset checks: {sorted(set(got_c.items()) ^ set(exp_c.items()))[:4]}")
    return diffs


@pytest.fixture(scope="module")
def fixture_runs(bench, tmp_path_factory):
    done: dict[str, list[Case]] = {}

    def get(release: str) -> list[Case]:
        if release not in done:
            t = time.monotonic()
            cases = []
            for v, scenario in support.scenarios(f"rocketmq-{release}"):
                cases.append(Case(scenario, release, support.input_store(v, scenario), support.broker_conf(v, scenario),
                                  commitlog_gone=scenario == "commitlog-all-deleted"))
            bench.run(cases)
            cases[0].result["seconds"] = time.monotonic() - t
            done[release] = cases
        return done[release]
    return get


@pytest.mark.parametrize("release", FIXTURE_RELEASES)
def test_fixtures_against_the_real_broker(release, fixture_runs, capsys):
    """Per fixture: the oracle reproduces expected.json; the project predicts what the broker does
    on the input; the broker's restart on the project's repaired store changes nothing."""
    failures, lines = [], []
    for c in fixture_runs(release):
        exp = support.expected(f"rocketmq-{release}", c.name)
        problems = [f"oracle vs expected.json: {d}" for d in fixture_oracle_differences(c.result["broker"], exp)]
        if "refused" in c.result:
            problems.append(f"the project refused the store: {c.result['refused']}")
        problems += [f"prediction: {d}" for d in c.result.get("recovery", [])]
        problems += [f"repaired store: {d}" for d in c.result.get("restart", [])]
        lines.append(f"  {release}/{c.name}: {'EQUAL' if not problems else 'DIFFERENT'} (broker load "
                     f"{c.result['broker']['loadResult']}, path {c.result['broker'].get('recoveryPath')}, max phy "
                     f"{c.result['broker'].get('maxPhyOffset')}; repaired store: {c.result.get('checked', '-')})")
        failures += [f"{c.name}: {p}" for p in problems]
    cases = fixture_runs(release)
    lines.append(f"real broker {release}: {len(cases)} fixtures, {len(cases) - len({f.split(':')[0] for f in failures})} "
                 f"equal, {len({f.split(':')[0] for f in failures})} different; {cases[0].result['seconds']:.0f} s")
    with capsys.disabled():
        print("\n" + "\n".join(lines))
    assert not failures, "\n".join(failures)


# -- 2. the crash matrix ----------------------------------------------------------------------------

CONF = """mappedFileSizeCommitLog=65536
mappedFileSizeConsumeQueue=600
maxHashSlotNum=100
maxIndexNum=400
messageIndexEnable=true
maxMsgsNumBatch=100000
enableLmq=true
enableMultiDispatch=true
flushDiskType={flush}
"""
MATRIX_SEED = int(os.environ.get("ORACLE_MATRIX_SEED", "20261127"))
# (flush, end, puts): how each written store ends; every one then gets each damage below
WRITES = [("ASYNC_FLUSH", "halt", 300), ("SYNC_FLUSH", "inflight", 250), ("ASYNC_FLUSH", "boundary", 200)]
DAMAGES = ["none", "no-abort", "torn-tail", "flip", "zero-span", "missing-file", "cq-damage"]
# once per release, on the written store whose longest queue has the most CQ files: a CQ file deleted
# between two others of its queue (R§2: served by no file, never refilled; the random damages
# above rarely pick one)
GAP_DAMAGE = "cq-gap"


def most_cq_files(stores: list[Path]) -> int:
    """The index of the store with the most CQ files in one queue directory."""
    def longest(store: Path) -> int:
        return max((len(list(d.iterdir())) for d in (store / "consumequeue").glob("*/*") if d.is_dir()), default=0)
    return max(range(len(stores)), key=lambda i: longest(stores[i]))


def damage(store: Path, kind: str, rnd: random.Random, written: list[dict], flushed: int) -> str:
    """Apply one seeded damage to ``store``; returns what was done (printed with the case)."""
    files = sorted((store / "commitlog").iterdir())
    size = 65536
    if kind == "none":
        return "as the halt left it"
    if kind == "no-abort":
        (store / "abort").unlink(missing_ok=True)
        return "abort file removed (normal path on a crashed store)"
    recs = sorted((w for w in written if "phy" in w), key=lambda w: w["phy"])
    if kind == "torn-tail":
        last = recs[-1]
        cut = last["phy"] + rnd.randrange(1, last["size"])
        if rnd.random() < 0.5 and flushed < cut:
            cut = max(flushed - flushed % 4096, recs[0]["phy"])    # the pages the flush had not reached
        for f in files:
            start = int(f.name)
            if start + size <= cut:
                continue
            if start > cut:
                f.unlink()
            else:
                with open(f, "r+b") as fh:
                    fh.seek(cut - start)
                    fh.write(bytes(start + size - cut))
        return f"commitlog zeroed from phy {cut} (a torn tail)"
    if kind == "flip":
        # in what a recovery checks: TOTALSIZE, MAGICCODE, BODYCRC (bytes 0-11) or the body (its
        # length at byte 84 with IPv4 hosts); a flip elsewhere in the header (queue id, offsets)
        # passes every check, and the broker serves the record as it is
        w = rnd.choice(recs[: max(1, len(recs) * 3 // 4)])
        f = max((f for f in files if int(f.name) <= w["phy"]), key=lambda f: int(f.name))
        with open(f, "r+b") as fh:
            fh.seek(w["phy"] - int(f.name) + 84)
            body = int.from_bytes(fh.read(4), "big")
            rel = rnd.randrange(12) if rnd.random() < 0.3 or body <= 0 else 88 + rnd.randrange(body)
            fh.seek(w["phy"] - int(f.name) + rel)
            b = fh.read(1)
            fh.seek(w["phy"] - int(f.name) + rel)
            fh.write(bytes([b[0] ^ (1 << rnd.randrange(8))]))
        return f"bit flipped at phy {w['phy'] + rel} (byte {rel} of the record at {w['phy']}, {w['size']} bytes)"
    if kind == "zero-span":
        f = rnd.choice(files[: max(1, len(files) - 1)])
        # at least 100 bytes: a span reaches past a record's unchecked header fields into its body
        at, n = rnd.randrange(size), rnd.randrange(100, 3000)
        with open(f, "r+b") as fh:
            fh.seek(at)
            fh.write(bytes(min(n, size - at)))
        return f"{f.name}: {n} bytes zeroed at {at}"
    if kind == "missing-file":
        what = rnd.choice(["oldest-commitlog", "index", "checkpoint", "cq-file"])
        if what == "oldest-commitlog" and len(files) > 2:
            files[0].unlink()
            return f"oldest commitlog file {files[0].name} deleted"
        if what == "index" and (store / "index").is_dir() and any((store / "index").iterdir()):
            f = rnd.choice(sorted((store / "index").iterdir()))
            f.unlink()
            return f"index file {f.name} deleted"
        if what == "checkpoint" and (store / "checkpoint").exists():
            (store / "checkpoint").unlink()
            return "checkpoint deleted"
        what = "cq-file"
    cqs = sorted(p for p in (store / "consumequeue").rglob("*") if p.is_file())
    if kind == GAP_DAMAGE:
        middle = [f for d in sorted({f.parent for f in cqs}) for f in sorted(d.iterdir())[1:-1]]
        if not middle:
            return "no queue with three consume queue files"
        f = rnd.choice(middle)
        f.unlink()
        return f"consume queue file {f.relative_to(store)} deleted, between two files of its queue"
    if not cqs:
        return "no consume queue file to damage"
    f = rnd.choice(cqs)
    if kind == "missing-file":
        f.unlink()
        return f"consume queue file {f.relative_to(store)} deleted"
    n = f.stat().st_size // 20
    how = rnd.choice(["zero-tail", "truncate"])
    if how == "truncate" and n > 1:
        os.truncate(f, rnd.randrange(1, n) * 20)
        return f"{f.relative_to(store)} truncated to a shorter length"
    k = rnd.randrange(1, max(2, n))
    with open(f, "r+b") as fh:
        fh.seek((n - k) * 20)
        fh.write(bytes(k * 20))
    return f"{f.relative_to(store)}: last {k} entries zeroed"


def matrix_cases(release: str) -> list[tuple[str, int, int]]:
    """(damage, write index, seed) for a release, seeded by MATRIX_SEED and the release."""
    rnd = random.Random(f"{MATRIX_SEED}-{release}")
    return ([(d, wi, rnd.randrange(1 << 30)) for wi in range(len(WRITES)) for d in DAMAGES]
            + [(GAP_DAMAGE, -1, rnd.randrange(1 << 30))])     # -1: the write most_cq_files picks


@pytest.fixture(scope="module")
def matrix_runs(bench, tmp_path_factory):
    def get(release: str) -> tuple[list[Case], float]:
        t = time.monotonic()
        work = tmp_path_factory.mktemp(f"matrix-{release}")
        # the stores written by the real put path, written at once (one JVM each)
        seeds = [random.Random(f"{MATRIX_SEED}-{release}-write-{i}").randrange(1 << 30) for i in range(len(WRITES))]
        writes = []
        for i, (flush, end, puts) in enumerate(WRITES):
            store = work / f"written-{i}"
            (work / f"broker-{i}.conf").write_text(CONF.format(flush=flush))
            writes.append(bench.pool.submit(oracle.write, release, store, work / f"broker-{i}.conf", puts, seeds[i], end))
        written = [w.result() for w in writes]
        cases = []
        for kind, wi, seed in matrix_cases(release):
            if wi < 0:
                wi = most_cq_files([work / f"written-{i}" for i in range(len(WRITES))])
            flush, end, puts = WRITES[wi]
            name = f"{release}-{flush.split('_')[0].lower()}-{end}-{kind}-{seed}"
            store = work / name
            shutil.copytree(work / f"written-{wi}", store, symlinks=True)
            rnd = random.Random(seed)
            what = damage(store, kind, rnd, written[wi]["written"], written[wi]["flushedWhere"])
            if kind not in ("none", "no-abort") and rnd.random() < 0.3:
                (store / "abort").unlink(missing_ok=True)    # the same damage on the normal path
                what += ", abort file removed"
            c = Case(name, release, store, work / f"broker-{wi}.conf", written=written[wi]["written"])
            c.result["damage"] = what
            c.result["writeSeed"] = seeds[wi]
            cases.append(c)
        bench.run(cases)
        return cases, time.monotonic() - t
    return get


@pytest.mark.parametrize("release", oracle.SUPPORTED)
def test_crash_matrix_against_the_real_broker(release, matrix_runs, capsys):
    """Per case: the project's prediction equals the broker's recovery, and the broker's restart
    on the repaired store changes nothing."""
    cases, seconds = matrix_runs(release)
    failures, refused, paths, lines = [], [], Counter(), []
    for c in cases:
        r = c.result
        if "refused" in r:
            refused.append(c.name)
            status = f"REFUSED by name ({r['refused'][:120]})"
        else:
            problems = [f"prediction: {d}" for d in r["recovery"]] + [f"repaired store: {d}" for d in r["restart"]]
            if r.get("lost") and r["lost"][0] != r["lost"][1]:
                problems.append(f"records lost: broker {r['lost'][0]}, project {r['lost'][1]}")
            status = "EQUAL" if not problems else "DIFFERENT"
            failures += [f"{c.name} [{r['damage']}]: {p}" for p in problems]
        b = r["broker"]
        paths[(b.get("recoveryPath"), b["loadResult"])] += 1
        lines.append(f"  {c.name} (write seed {r['writeSeed']}): {r['damage']}: {status}; broker load "
                     f"{b['loadResult']}, path {b.get('recoveryPath')}, max phy {b.get('maxPhyOffset')}, records lost "
                     f"{r.get('lost', (None,))[0]}; repaired store: {r.get('checked', '-')}")
    different = len({f.split(' ')[0] for f in failures})
    lines.append(f"real broker {release} (project rules {project_version(release)}): {len(cases)} crash stores, "
                 f"{len(cases) - len(refused) - different} equal, {len(refused)} refused by name, "
                 f"{different} different; matrix seed {MATRIX_SEED}; (path, loaded): {dict(paths)}; {seconds:.0f} s")
    with capsys.disabled():
        print("\n" + "\n".join(lines))
    assert not failures, "\n".join(failures)


# -- 3. a pull over empty entries -----------------------------------------------------------------------

def lag_offset(root: Path) -> int:
    """GroupLag's committed offset in TopicA/0 (the synthetic writer's consumer halfway)."""
    (offset,) = [r["offset"] for r in read_consumer_offsets(root).value.to_pylist()
                 if (r["topic"], r["group"], r["queue_id"]) == ("TopicA", "GroupLag", 0)]
    return offset


def test_a_pull_over_zeroed_entries_in_an_older_cq_file(bench, tmp_path, capsys):
    """R§9.2: zeroed entries in a CQ file before the last three (which recovery does not check)
    are served as they are, empty records at phy 0; they fill no batch, so a pull of one message
    at a zeroed offset scans on to the first non-empty entry (found on the real 5.5.1 by the crash
    matrix). The project's prediction and its repaired store, against every release."""
    from store_reader.testing.synthetic import CrashSpec, SyntheticStoreSpec, write_store

    cases = []
    for release in oracle.SUPPORTED:
        info = write_store(tmp_path / release, SyntheticStoreSpec(
            total_bytes=3 * (64 << 10), segment_size=64 << 10, cq_file_size=600, message_size=512,
            topics=(("TopicA", 1),), broker="4.9" if release.startswith("4.") else "5.x", seed=5),
            CrashSpec(abort=False))
        root = info.root
        files = sorted((root / "consumequeue" / "TopicA" / "0").iterdir())
        lag = lag_offset(root)
        held = next(i for i, f in enumerate(files) if int(f.name) // 20 <= lag < int(f.name) // 20 + 30)
        assert held < len(files) - 3, (lag, [f.name for f in files])     # outside the last three
        # entries lag-3 .. lag+2 zeroed: the pull at lag finds three empty ones, then lag+3
        with open(files[held], "r+b") as fh:
            fh.seek((lag - 3) * 20 - int(files[held].name))
            fh.write(bytes(6 * 20))
        cases.append(Case(f"zeroed-{release}", release, root, root / "broker.conf"))
    bench.run(cases)
    lines, failures = [], []
    for c in cases:
        lag = lag_offset(c.store)
        broker = {(x["topic"], x["group"]): (x.get("status"), x.get("nextBeginOffset"))
                  for x in c.result["broker"]["consumerOffsets"]["checks"]}[("TopicA", "GroupLag")]
        lines.append(f"  {c.name}: GroupLag at {lag}: broker {broker}")
        if broker != ("FOUND", lag + 4):
            failures.append(f"{c.name}: the broker answered {broker}, not the case this test is for")
        failures += [f"{c.name}: {p}" for p in c.result["recovery"] + c.result["restart"]]
    with capsys.disabled():
        print("\n" + "\n".join(lines))
    assert not failures, "\n".join(failures)
