"""The store's one walk (``store_reader.formats.inventory``): every entry a 4.9.x-5.5.x broker writes
classified, the modes it shows, unknown entries reported as ``note.unknown_entry`` (dump --verify
and the audit's ``store_findings`` alike), and a feature this project cannot recover exactly refused
in one line naming it, in every job.

The extra entries are added to copies of the real-broker fixtures under the names the release
sources give them (``docs/spec/store-format.md`` §1, §11). The DLedger store is its directory shape
(DLedger 0.3.1.2's ``DLedgerConfig`` / ``DLedgerMmapFileStore`` / ``MemberState``:
``dledger-<selfId>/{data,index,checkpoint,currterm}``) with the fixture's commitlog bytes as its data
file, not entries framed by a real DLedger server: the refusal reads names only.
"""
from __future__ import annotations

import contextlib
import io
import json
import shutil
from typing import Callable

import pytest

from jobs import audit as audit_job
from jobs import dump
from jobs import recover as recover_job
from jobs import salvage as salvage_job
from store_reader.formats import inventory
from store_reader import open_store
from store_reader.audit.files import store_file_findings
from store_reader.exceptions import UnsupportedStoreError
from store_reader.io.fsutil import walk_files
from tests import support

V4, V5 = support.VERSIONS


def _copy(tmp_path, case=(V5, "clean")):
    dest = tmp_path / "store"
    shutil.copytree(support.input_store(*case), dest)
    return dest


def _conf(tmp_path, case=(V5, "clean"), **settings) -> str:
    """The fixture's broker.conf with ``settings`` added."""
    text = support.broker_conf(*case).read_text()
    text += "".join(f"\n{k}={v}" for k, v in settings.items()) + "\n"
    path = tmp_path / "broker.conf"
    path.write_text(text)
    return str(path)


def _touch(root, *rels, data=b"x"):
    for rel in rels:
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        if rel.endswith("/"):
            p.mkdir(exist_ok=True)
        else:
            p.write_bytes(data)


ROCKSDB = ("CURRENT", "IDENTITY", "LOCK", "LOG", "MANIFEST-000005", "OPTIONS-000007", "000004.log",
           "000009.sst")


@pytest.mark.parametrize("case", support.scenarios(), ids=support.case_id)
def test_every_fixture_entry_is_known(case):
    """What the real 4.9.7 and 5.3.3 stores hold is all classified (5.3.3's compaction/ with only
    its position-checkpoint is not the compaction mode), and the walk is the tree's one listing."""
    root = support.input_store(*case)
    store = open_store(root, support.broker_conf(*case))
    assert store.inventory.unknown == [] and store.inventory.modes == ()
    assert store.inventory.files == walk_files(root)
    assert {"commitlog", "config", "lock"} <= store.inventory.kinds() or case[1] == "commitlog-all-deleted"


def test_5x_entries_classified_and_modes_stated(tmp_path):
    root = _copy(tmp_path)
    _touch(root, "timerwheel", "timerlog/00000000000000000000", "config/timercheck",
           "config/timermetrics", "config/timercheck.bak", "config/topics.json.bak",
           "config/subscriptionGroup.json", "config/consumerOrderInfo.json",
           "config/topicQueueMapping.json", "config/messageRequestMode.json",
           "config/transactionMetrics", "config/consumerFilter.json",
           *(f"rocksdbstore/{n}" for n in ROCKSDB), *(f"kvStore/{n}" for n in ROCKSDB),
           "compaction/compactionLog/", "compaction/compactionCq/", "MANIFEST.json")
    inv = open_store(root, support.broker_conf(V5, "clean")).inventory
    assert inv.unknown == [] and inv.refusals == []
    assert inv.modes == (inventory.TIMER, inventory.ROCKSDB_MESSAGE, inventory.POP_ROCKSDB)
    assert inv.modes_text() == "timer, rocksdb_message, pop_rocksdb"
    kinds = {e.path: e.kind for e in inv.entries}
    assert kinds["timerwheel"] == "timer.wheel" and kinds["config/timercheck.bak"] == "timer.check"
    assert kinds["abort.bak"] == "abort" and kinds["compaction/position-checkpoint"] == "compaction"


def test_unknown_entries_are_notes_in_dump_verify_and_store_findings(tmp_path):
    root = _copy(tmp_path)
    _touch(root, "lost+found/", "notes.txt", "config/extra.yaml", "consumequeue/stray.txt")
    conf = support.broker_conf(V5, "clean")
    store = open_store(root, conf)
    assert sorted(e.path for e in store.inventory.unknown) == \
        ["config/extra.yaml", "consumequeue/stray.txt", "lost+found", "notes.txt"]
    rows = [r for r in store_file_findings(store).to_pylist() if r["kind"] == "note.unknown_entry"]
    assert sorted(r["file"] for r in rows) == sorted(
        str(root / p) for p in ("config/extra.yaml", "consumequeue/stray.txt", "lost+found", "notes.txt"))
    assert all(r["severity"] == "note" for r in rows)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = dump.main([str(root), "--verify", "--json", "--broker-config", str(conf)])
    lines = [json.loads(x) for x in out.getvalue().splitlines()]
    notes = sorted((x["file"], x["message"]) for x in lines if x.get("kind") == "note.unknown_entry")
    assert notes == sorted((r["file"], r["detail"]) for r in rows) and rc == 0
    modes = next(x for x in lines if x["type"] == "modes")
    assert modes["modes"] == [] and len(modes["unknown"]) == 4


def _dledger(root, keep_commitlog=False):
    """The directory a DLedger broker writes (dledger-n0/data and index, checkpoint, currterm)."""
    data = sorted((root / "commitlog").iterdir())[0].read_bytes()
    _touch(root, "dledger-n0/data/00000000000000000000", data=data)
    _touch(root, "dledger-n0/index/00000000000000000000", data=bytes(32 * 16))
    _touch(root, "dledger-n0/checkpoint", data=b"committedIndex=15\n")
    _touch(root, "dledger-n0/currterm", data=b"currTerm=1\nvoteLeader=n0\n")
    if not keep_commitlog:
        shutil.rmtree(root / "commitlog")


# (what the store holds, the settings, the words the one line must name, the entry it names)
REFUSED = {
    "dledger": (lambda r: _dledger(r), {}, "DLedger", "dledger-n0"),
    "dledger-converted": (lambda r: _dledger(r, keep_commitlog=True), {"enableDLegerCommitLog": "true"},
                          "DLedger", "dledger-n0"),
    "rocksdb-offsets-beside-json": (lambda r: _touch(r, *(f"consumequeue/{n}" for n in ROCKSDB)),
                                    {"storeType": "defaultRocksDB"}, "consumerOffset.json beside",
                                    "config/consumerOffset.json"),
    "rocksdb-cq-other-path": (lambda r: _touch(r, *(f"consumequeue_rocksdb/{n}" for n in ROCKSDB)),
                              {"storeType": "defaultRocksDB"}, "useSeparateStorePathForRocksdbCQ=false",
                              "consumequeue_rocksdb"),
    "rocksdb-offsets-single-db": (lambda r: (_touch(r, *(f"consumequeue/{n}" for n in ROCKSDB)),
                                             (r / "config" / "consumerOffset.json").unlink()),
                                  {"storeType": "defaultRocksDB", "useSingleRocksDBForAllConfigs": "true"},
                                  "useSingleRocksDBForAllConfigs", "config/metadata"),
    "rocksdb-cq-unsaid": (lambda r: _touch(r, *(f"consumequeue/{n}" for n in ROCKSDB)), {},
                          "which consume queue the broker serves is not known", "consumequeue"),
    "rocksdb-cq-combine-prefer": (lambda r: _touch(r, *(f"consumequeue/{n}" for n in ROCKSDB)),
                                  {"rocksdbCQDoubleWriteEnable": "true", "combineCQPreferCQType": "defaultRocksDB"},
                                  "consume queues served from RocksDB", "consumequeue"),
    "batch-cq": (lambda r: _touch(r, "batchconsumequeue/T/0/00000000000000000000"), {},
                 "batch consume queues", "batchconsumequeue"),
    "cq-ext": (lambda r: _touch(r, "consumequeue_ext/T/0/00000000000000000000"), {},
               "consume queue ext", "consumequeue_ext"),
    "compaction": (lambda r: _touch(r, "compaction/compactionLog/T/0/00000000000000000000"), {},
                   "compacted topics", "compaction"),
    "rocksdb-offsets-v2": (lambda r: _touch(r, *(f"config/rdb/{n}" for n in ROCKSDB)),
                           {"configManagerVersion": "v2"}, "consumer offsets kept in RocksDB", "config/rdb"),
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_refused_by_name(tmp_path, name):
    make, settings, words, entry = REFUSED[name]
    root = _copy(tmp_path)
    make(root)
    with pytest.raises(UnsupportedStoreError) as err:
        open_store(root, _conf(tmp_path, **settings))
    assert words in str(err.value) and err.value.path == f"{root}/{entry}"
    assert "--commitlog-gone" not in str(err.value)


def test_rocksdb_consume_queue_is_read_and_an_unreadable_one_named(tmp_path):
    """storeType=defaultRocksDB: the RocksDB consume queue (here in consumequeue_rocksdb/, 5.5
    useSeparateStorePathForRocksdbCQ) is what
    the recovery reads (R§15.1), the committed offsets RocksDB's; a database RocksDB cannot open
    is one error naming its directory."""
    from store_reader.broker import prediction
    from store_reader.exceptions import StoreReaderError

    root = _copy(tmp_path)
    _touch(root, *(f"consumequeue_rocksdb/{n}" for n in ROCKSDB))
    for gen in ("consumerOffset.json", "consumerOffset.json.bak"):
        (root / "config" / gen).unlink(missing_ok=True)
    store = open_store(root, _conf(tmp_path, storeType="defaultRocksDB", useSeparateStorePathForRocksdbCQ="true"))
    inv = store.inventory
    assert (inv.cq_served_by, inv.rocksdb_cq_dir, inv.offsets_in, inv.refusals) == \
        ("rocksdb", "consumequeue_rocksdb", "rocksdb", [])
    with pytest.raises(StoreReaderError, match="RocksDB consume queue: RocksDB cannot open") as err:
        prediction.predict(store)
    assert err.value.path == f"{root}/consumequeue_rocksdb" and "\n" not in str(err.value)


def test_rocksdb_directories_left_behind_by_another_setting_are_not_refused(tmp_path):
    """RocksDB config directories with configManagerVersion v1 and storeType default: the broker
    reads the .json files (``BrokerController``'s manager choice), so the store is recovered."""
    root = _copy(tmp_path)
    _touch(root, *(f"config/consumerOffsets/{n}" for n in ROCKSDB))
    inv = open_store(root, support.broker_conf(V5, "clean")).inventory
    assert inv.modes == (inventory.ROCKSDB_CONFIG,) and inv.refusals == []


def _errors(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith(("error: ", "dump: error: "))]


def refused_by_every_job(root, conf, tmp_path, capsys, words: str, entry: str,
                         reads: dict[str, Callable[[str], bool]] | None = None) -> None:
    """One ``error:`` line naming ``words`` and ``entry`` and exit 2 from recover, its dry run and
    what-if, audit, dump, dump --verify and salvage; never the missing-commitlog advice; the store
    untouched, nothing written. ``reads``: jobs that read such a store instead, each with the
    check its one error line must pass (a DLedger store: test_dledger.py)."""
    before = support.tree_digest(root)
    runs = {
        "recover": lambda: recover_job.main(["--store", str(root), "--out", str(tmp_path / "out"),
                                             "--broker-config", str(conf)]),
        "dry run": lambda: recover_job.main(["--store", str(root), "--dry-run", "--broker-config", str(conf)]),
        "what-if": lambda: recover_job.main(["--store", str(root), "--dry-run", "--broker-version", "both",
                                             "--broker-config", str(conf)]),
        "audit": lambda: audit_job.main(["--store", str(root), "--broker-config", str(conf)]),
        "dump": lambda: dump.main([str(root)]),
        "dump --verify": lambda: dump.main([str(root), "--verify", "--broker-config", str(conf)]),
        "salvage": lambda: salvage_job.main(["--store", str(root), "--out", str(tmp_path / "s.jsonl"),
                                             "--broker-config", str(conf)]),
    }
    for job, run in runs.items():
        rc = run()
        errors = _errors(capsys.readouterr().err)
        assert rc == 2 and len(errors) == 1, (job, errors)
        if job in (reads or {}):
            assert reads[job](errors[0]), (job, errors)
            continue
        assert words in errors[0] and entry in errors[0], (job, errors)
        assert "commitlog-gone" not in errors[0] and "missing" not in errors[0], (job, errors)
    assert not (tmp_path / "out").exists() and not (tmp_path / "s.jsonl").exists()
    assert support.tree_digest(root) == before


def test_dledger_store_is_named_in_one_line_by_every_job(spark, tmp_path, capsys):
    """Never the missing-commitlog advice (``--commitlog-gone`` would drop every message). Every
    job reads a DLedger store (recover and its dry runs, audit, dump, dump --verify, salvage) and
    predicts DLedger's load here: this fake one's index file
    is not mappedFileSizeForEntryIndex long (dump without broker.conf: nor its data file
    mappedFileSizeCommitLog), so DLedgerMmapFileStore#load exits; they name that file. The real
    broker's DLedger store: tests/test_dledger_oracle.py."""
    root = _copy(tmp_path)
    _dledger(root)
    names_dledger_file = lambda line: "dledger-n0/" in line and "broker" in line    # noqa: E731
    refused_by_every_job(root, support.broker_conf(V5, "clean"), tmp_path, capsys, "a DLedger store",
                         "dledger-n0", reads=dict.fromkeys(("recover", "dry run", "what-if", "audit", "dump", "dump --verify", "salvage"),
                                                           names_dledger_file))


def test_modes_in_the_report_the_manifest_and_the_runs_table(spark, tmp_path, capsys):
    """A 5.x store with its timer files: recovered as the classic store is, and the timer mode is
    stated where the run reports and records (stdout, MANIFEST.json, ``runs.store_modes``)."""
    from deltalake import DeltaTable

    root = _copy(tmp_path)
    _touch(root, "timerwheel", "timerlog/00000000000000000000", "config/timercheck")
    out, audit = tmp_path / "out", tmp_path / "audit"
    rc = recover_job.main(["--store", str(root), "--out", str(out), "--audit-path", str(audit),
                           "--broker-config", str(support.broker_conf(V5, "clean"))])
    printed = capsys.readouterr().out
    assert rc == 0 and "  store modes        timer\n" in printed
    assert json.loads((out / "MANIFEST.json").read_text())["storeModes"] == ["timer"]
    runs = DeltaTable(str(audit / "runs")).to_pyarrow_table()
    assert runs["store_modes"].to_pylist() == ["timer"]


def _double_write(tmp_path, case):
    root = tmp_path / "dw"
    shutil.copytree(support.input_store(*case), root)
    _touch(root, *(f"consumequeue/{n}" for n in ROCKSDB))
    return root, _conf(tmp_path, case, rocksdbCQDoubleWriteEnable="true")


@pytest.mark.parametrize("case", support.scenarios(V5), ids=support.case_id)
def test_double_write_store_recovers_from_its_file_consume_queue(tmp_path, case):
    """RocksDB double-write beside the file queues under the 5.3 rules (an extra dispatcher):
    the prediction is the file store's, whatever the RocksDB queue holds."""
    from jobs.recoverreport import prediction_summary
    from store_reader.broker import prediction, versions

    root = _copy(tmp_path, case)
    want = prediction.predict(open_store(root, support.broker_conf(*case)), versions.V53)
    _touch(root, *(f"consumequeue/{n}" for n in ROCKSDB))
    store = open_store(root, _conf(tmp_path, case, rocksdbCQDoubleWriteEnable="true"))
    assert store.inventory.modes == (inventory.ROCKSDB_CQ_DOUBLE_WRITE,)
    got = prediction.predict(store, versions.V53)
    assert got.rocksdb_beside_max_phy_offset is None
    assert prediction_summary(got) == prediction_summary(want)
    assert {k: s.entries().tolist() for k, s in got.consume_queues.items()} == \
        {k: s.entries().tolist() for k, s in want.consume_queues.items()}


def test_double_write_repaired_store_is_the_file_stores(spark, tmp_path):
    """The repaired store of a double-write store is, file for file, the one of the same store
    without RocksDB (the broker rebuilds its RocksDB queue from the commitlog)."""
    case = (V5, "crash-tail")
    root, conf = _double_write(tmp_path, case)
    for store, c, out in ((root, conf, tmp_path / "out-dw"),
                          (support.input_store(*case), support.broker_conf(*case), tmp_path / "out")):
        assert recover_job.main(["--store", str(store), "--out", str(out), "--broker-config", str(c)]) == 0
    got, want = (sorted(p.relative_to(d).as_posix() for p in d.rglob("*") if p.name != "MANIFEST.json")
                 for d in (tmp_path / "out-dw", tmp_path / "out"))
    assert got == want
    for rel in want:
        if (tmp_path / "out" / rel).is_file():
            assert (tmp_path / "out-dw" / rel).read_bytes() == (tmp_path / "out" / rel).read_bytes(), rel


def test_double_write_start_file_moves_back_for_the_rocksdb_queue(tmp_path):
    """The real clean 5.3.3 store, its 11th commitlog file zeroed from byte 30000 on (the normal
    recovery starts at the 12th, the file holding the consume queue max), double-write turned on
    with no RocksDB queue yet (R§15.2): a 5.4 broker's search passes over 3 files the empty RocksDB
    queue does not match and starts at the 9th, so its walk cuts at byte 30000 of the 11th; a 5.5
    broker skips a queue that never started; the 5.3 rules know no RocksDB queue."""
    from store_reader.broker import prediction, versions

    root = _copy(tmp_path)
    files = sorted((root / "commitlog").iterdir())
    with open(files[10], "r+b") as f:
        f.seek(30000)
        f.write(bytes(files[10].stat().st_size - 30000))
    plain = prediction.predict(open_store(root, support.broker_conf(V5, "clean")), versions.V54)
    store = open_store(root, _conf(tmp_path, rocksdbCQDoubleWriteEnable="true"))
    assert store.inventory.modes == (inventory.ROCKSDB_CQ_DOUBLE_WRITE,)
    p53, p54, p55 = (prediction.predict(store, v) for v in (versions.V53, versions.V54, versions.V55))
    assert plain.start_file == files[11].name and plain.max_phy_offset > int(files[11].name)
    assert p54.rocksdb_beside_max_phy_offset == p55.rocksdb_beside_max_phy_offset == 0
    assert p54.start_file == files[8].name and p54.max_phy_offset <= int(files[10].name) + 30000
    assert p54.deleted_commitlog_files == [f.name for f in files[11:]]
    assert (p55.start_file, p55.max_phy_offset) == (p53.start_file, p53.max_phy_offset) == \
        (plain.start_file, plain.max_phy_offset)
    from store_reader.repair import checks

    with pytest.raises(UnsupportedStoreError, match="--salvage with a RocksDB consume queue"):
        checks.check_repairable(store, p54, store.summaries(store.scan_options(True)), salvage=True)
