"""DLedger stores on the fast tier (built byte for byte by ``dledgerstore``; the real broker's
are in ``test_dledger_oracle.py``): DLedger's recovery (R§16.1) on designed damage, what the
broker's restart serves (R§16.2-§16.4), the jobs that read DLedger stores (dump, recover
--dry-run, the data source, audit, salvage) and the repair (recover --out, --apply), with what
they refuse by name.
"""
from __future__ import annotations

import json
import struct

import pytest

from dledgerstore import FILE_SIZE, write_store
from store_reader.broker import dledger, dledgercommitlog
from store_reader import open_store
from store_reader.formats import recordformat as rf
from store_reader.exceptions import UnsupportedStoreError

N = 100


def _open(root):
    return open_store(root, root / "broker.conf", read_dledger=True)


def _patch(root, pos: int, data: bytes) -> None:
    with open(root / "dledger-n0" / "data" / f"{pos - pos % FILE_SIZE:020d}", "r+b") as fh:
        fh.seek(pos % FILE_SIZE)
        fh.write(data)


def test_a_halted_store_keeps_every_entry(tmp_path):
    entries = write_store(tmp_path, N)
    rec = dledger.recover(_open(tmp_path))
    last_pos, last_size, _ = entries[-1]
    assert (rec.ledger_begin_index, rec.ledger_end_index, rec.ledger_end_term) == (0, N - 1, 1)
    assert rec.process_offset == rec.last_entry_end == last_pos + last_size
    assert (rec.walk_end, rec.index_rewritten_from, rec.data_files_deleted) == ("zero_size", None, [])
    assert (rec.committed_index, rec.committed_pos) == (N - 1, last_pos + last_size)
    assert rec.index_write_position == 32 * N


def _in_file(entries, k_from_last: int, which: int):
    """An entry of the ``k_from_last``-th file from the end (1 = the last), past its first."""
    last = entries[-1][0] // FILE_SIZE
    mine = [e for e in entries if e[0] // FILE_SIZE == last - k_from_last + 1]
    return mine[which]


def test_only_the_last_three_files_are_walked(tmp_path):
    entries = write_store(tmp_path, N)
    assert entries[-1][0] // FILE_SIZE >= 3
    pos = entries[2][0]                                               # in the first file
    _patch(tmp_path, pos + 24, struct.pack(">q", pos + 1))
    rec = dledger.recover(_open(tmp_path))
    assert rec.start_file != f"{0:020d}" and rec.ledger_end_index == N - 1


def test_a_bad_header_ends_the_log_and_later_files_are_deleted(tmp_path):
    entries = write_store(tmp_path, N)
    pos, _, k = _in_file(entries, 2, 3)
    _patch(tmp_path, pos + 24, struct.pack(">q", pos + 1))          # the pos field
    rec = dledger.recover(_open(tmp_path))
    assert (rec.ledger_end_index, rec.walk_end, rec.walk_end_check) == (k - 1, "entry", "pos")
    assert rec.process_offset == pos
    assert rec.data_files_deleted == [f"{entries[-1][0] // FILE_SIZE * FILE_SIZE:020d}"]
    assert rec.committed_index == k - 1                               # the checkpoint's, clamped


def test_a_term_going_back_ends_the_log_and_index_units_are_rewritten(tmp_path):
    entries = write_store(tmp_path, N)
    pos, _, k = _in_file(entries, 2, 2)
    _patch(tmp_path, pos + 16, struct.pack(">q", 9))                  # a later term in the data only
    rec = dledger.recover(_open(tmp_path))
    assert rec.index_rewritten_from == k                              # its unit says term 1
    assert (rec.ledger_end_index, rec.ledger_end_term, rec.walk_end_check) == (k, 9, "term")


def test_the_checkpoint_gives_the_committed_index(tmp_path):
    entries = write_store(tmp_path, N, committed=12)
    rec = dledger.recover(_open(tmp_path))
    assert (rec.committed_index, rec.committed_pos) == (12, entries[12][0] + entries[12][1])
    (tmp_path / "dledger-n0" / "checkpoint").write_text("committedIndex=x1\n")
    with pytest.raises(UnsupportedStoreError, match="not a long"):
        dledger.recover(_open(tmp_path))


def test_a_walk_ending_a_file_short_is_the_broker_exiting(tmp_path):
    entries = write_store(tmp_path, N)
    pos = _in_file(entries, 3, 2)[0]                                  # in the walk's start file
    _patch(tmp_path, pos + 24, struct.pack(">q", 0))
    rec = dledger.recover(_open(tmp_path))
    assert rec.refused is not None and "System.exit" in rec.refused


@pytest.mark.parametrize("version", ["4.9", "5.3", "5.4", "5.5"])
def test_the_restart_serves_every_surviving_message(tmp_path, version):
    entries = write_store(tmp_path, N)
    store = _open(tmp_path)
    rec = dledger.recover(store)
    b = dledgercommitlog.broker_restart(store, rec, version)
    served = b.served()
    assert served == dledgercommitlog.restart_keeps(store, rec).queues()
    assert sum(len(v) for v in served.values()) == N
    assert sorted(p for v in served.values() for _, p, _ in v) == [p + 48 for p, _, _ in entries]
    # no consume queue on disk: 4.9.7 dispatches them all in the reput from the first data file,
    # 5.3.3's and later abnormal paths in their recovery walk (the reput then has nothing left)
    assert b.max_phy_offset_of_consume_queue == -1
    assert b.reput_from == (0 if version == "4.9" else rec.last_entry_end)


def test_accelerated_recovery_under_the_5_5_rules_is_refused_by_name(tmp_path):
    write_store(tmp_path, 10)
    with open(tmp_path / "broker.conf", "a") as fh:
        fh.write("enableAcceleratedRecovery=true\n")
    store = _open(tmp_path)
    for version in ("5.5", "5.x"):
        with pytest.raises(UnsupportedStoreError, match="enableAcceleratedRecovery=true: a DLedger store"):
            dledgercommitlog.broker_restart(store, dledger.recover(store), version)
    assert dledgercommitlog.broker_restart(store, dledger.recover(store), "5.4").served()


def test_the_store_is_refused_by_name_unless_read_as_dledger(tmp_path):
    write_store(tmp_path, 10)
    with pytest.raises(UnsupportedStoreError, match="DLedger"):
        open_store(tmp_path, tmp_path / "broker.conf")
    (tmp_path / "commitlog").mkdir()
    (tmp_path / "commitlog" / f"{0:020d}").write_bytes(bytes(FILE_SIZE))
    with pytest.raises(UnsupportedStoreError, match="converted from classic mode"):
        _open(tmp_path)


def test_dump_and_dry_run_report_the_prediction(tmp_path, capsys):
    from jobs import dump, recover
    write_store(tmp_path, N)
    assert dump.main([str(tmp_path), "--json"]) == 0
    rows = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    got = {r["type"]: r for r in rows}
    assert got["commitlog"]["dledger"] and got["dledger_recovery"]["ledger_end_index"] == N - 1
    assert sum(r["records"] for r in rows if r["type"] == "segment") == N
    assert recover.main(["--store", str(tmp_path), "--dry-run", "--broker-version", "4.9,5.3", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    sides = [r for r in out if r["type"] == "dledger_broker"]
    assert [s["version"] for s in sides] == ["4.9", "5.3"]
    assert all(sum(q["max"] - q["min"] for q in s["queues"].values()) == N for s in sides)
    # dump --verify: the classic checks on the DLedger records (this store has no consume queue,
    # index file or checkpoint) and the DLedger ones (every entry committed: none)
    assert dump.main([str(tmp_path), "--verify", "--json"]) == 1
    found = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert sorted(r["kind"] for r in found if r["type"] == "anomaly") == [
        "checkpoint.missing", "cq.all_missing", "index.all_missing"]


@pytest.mark.spark
def test_salvage_exports_the_messages_past_dledgers_end(spark, tmp_path):
    from jobs import salvage
    root = tmp_path / "store"
    entries = write_store(root, N)
    pos, _, k = _in_file(entries, 2, 3)
    _patch(root, pos + 24, struct.pack(">q", pos + 1))                # the log ends at entry k
    report = salvage.salvage(spark, str(root), str(tmp_path / "lost.jsonl"), str(root / "broker.conf"))
    rows = [json.loads(x) for x in (tmp_path / "lost.jsonl").read_text().splitlines()]
    assert report.truncation_point == pos
    # the damaged entry's own message is not exported: only records in entries that check are
    # read (its header is what is damaged)
    assert [r["phy_offset"] for r in rows] == [p + 48 for p, _, _ in entries[k + 1:]]
    assert {r["keys"] for r in rows} == {f"K{i}" for i in range(k + 1, N)}


@pytest.mark.spark
def test_the_data_source_reads_the_messages(spark, tmp_path):
    import store_reader
    entries = write_store(tmp_path, N)
    store_reader.register(spark)
    df = spark.read.format("rocketmq").option("path", str(tmp_path)).load()
    rows = df.select("phy_offset", "stored_phy_offset").orderBy("phy_offset").collect()
    assert [r.phy_offset for r in rows] == [p + 48 for p, _, _ in entries]
    assert all(r.phy_offset == r.stored_phy_offset for r in rows)
    assert rf.DLEDGER_BODY_OFFSET == 48


def test_lost_index_files_are_rebuilt_from_the_walk_start(tmp_path):
    entries = write_store(tmp_path, N)
    (tmp_path / "dledger-n0" / "index" / f"{0:020d}").unlink()
    rec = dledger.recover(_open(tmp_path))
    # no unit anywhere: the pre-check finds no start file, the walk starts at the first and
    # rewrites every unit (rebuildWithPos)
    assert (rec.start_file, rec.index_rewritten_from, rec.ledger_end_index) == (f"{0:020d}", 0, N - 1)
    assert rec.committed_pos == entries[-1][0] + entries[-1][1]


def _unit_patch(root, index: int, data: bytes) -> None:
    with open(root / "dledger-n0" / "index" / f"{0:020d}", "r+b") as fh:
        fh.seek(index * 32)
        fh.write(data)


def test_the_findings_name_units_that_disagree_and_entries_past_the_committed_index(tmp_path, capsys):
    from jobs import dump
    from store_reader.audit import Findings
    from store_reader.audit.dledger import dledger_findings

    entries = write_store(tmp_path, N, committed=N - 8)
    store = _open(tmp_path)
    found = Findings()
    dledger_findings(store, dledger.recover(store), found)
    assert [(a.kind, a.count) for a in found.anomalies] == [("dledger.beyond_committed", 7)]
    # units 10-12: pos off by one, size wrong, magic gone; unit 40 lost
    for k, (pos, size, i) in zip((10, 11, 12), entries[10:13]):
        _unit_patch(tmp_path, k, rf.encode_dledger_index_unit(pos + (k == 10), size + (k == 11), i, 1))
    _unit_patch(tmp_path, 12, b"\0" * 4)
    _unit_patch(tmp_path, 40, b"\0" * 32)
    found = Findings()
    dledger_findings(store, dledger.recover(store), found)
    got = [(a.kind, a.position, a.count, a.phy_offset) for a in found.anomalies]
    assert got == [("dledger.unit_disagrees", 10 * 32, 3, entries[10][0] + 48),
                   ("dledger.unit_disagrees", 40 * 32, 1, entries[40][0] + 48),
                   ("dledger.beyond_committed", entries[N - 7][0] % FILE_SIZE, 7, None)]
    assert "the unit says magic 0, pos 0, size 0" in found.anomalies[1].message
    # dump lists them with their severity
    assert dump.main([str(tmp_path), "--json"]) == 0
    rows = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [(r["finding"], r["severity"]) for r in rows if r["type"] == "anomaly"] == [
        ("dledger.unit_disagrees", "anomaly"), ("dledger.unit_disagrees", "anomaly"),
        ("dledger.beyond_committed", "info")]


@pytest.mark.spark
def test_the_audit_runs_and_since_last_is_refused_by_name(spark, tmp_path, capsys):
    """``jobs.audit`` on a DLedger store: the DLedger findings among its store findings; with
    ``--since-last`` (its record findings would differ from a full run's) one error line, exit 2."""
    from jobs import audit as audit_job
    root = tmp_path / "store"
    write_store(root, N, committed=N - 8)
    conf = str(root / "broker.conf")
    full = audit_job.run_audit(spark, str(root), None, conf)
    assert "dledger.beyond_committed" in full.findings.tables["store_findings"]["kind"].to_pylist()
    assert full.prediction.max_phy_offset > 0 and full.prediction.dledger is not None
    assert audit_job.main(["--store", str(root), "--broker-config", conf, "--audit-path",
                           str(tmp_path / "audit"), "--since-last"]) == 2
    err = [x for x in capsys.readouterr().err.splitlines() if x.startswith("error: ")]
    assert len(err) == 1 and "--since-last on a DLedger store" in err[0]


@pytest.mark.spark
def test_recover_out_writes_the_store_the_restart_leaves_and_apply_swaps_it_in(spark, tmp_path, capsys):
    """``jobs.recover --out`` on a store whose log ends at a term going back (index units
    rewritten from there): the data files to DLedger's processOffset and zeros after it, the
    units DLedger rewrites and zeros past the last one, the checkpoint committing every surviving
    entry, currterm as it was, consume queues and index files from the surviving records, no
    abort file; the input untouched. ``--apply`` then swaps the same store into the input's place
    (the input kept at ``--backup``). The real broker's restart of such stores:
    ``test_dledger_oracle.test_the_repaired_store_is_loaded_and_not_changed``."""
    import support
    from jobs import recover as recover_job
    from store_reader.formats.consumequeue import list_queues

    root = tmp_path / "store"
    entries = write_store(root, N, committed=20)
    pos, _, k = _in_file(entries, 2, 2)
    _patch(root, pos + 16, struct.pack(">q", 9))                      # the log ends after entry k
    rec = dledger.recover(_open(root))
    conf = str(tmp_path / "broker.conf")          # outside the store: --apply replaces it
    (root / "broker.conf").rename(conf)
    digest = support.tree_digest(root)
    assert recover_job.main(["--store", str(root), "--out", str(tmp_path / "out"), "--broker-config", conf]) == 0
    assert support.tree_digest(root) == digest
    out = tmp_path / "out"
    assert not (out / "abort").exists() and not (out / "commitlog").exists()
    again = dledger.recover(_open_with(out, conf))
    assert (again.ledger_end_index, again.process_offset, again.index_rewritten_from, again.committed_index) == \
        (k, rec.process_offset, None, k)
    data = b"".join((out / "dledger-n0" / "data" / f).read_bytes()
                    for f in sorted(p.name for p in (out / "dledger-n0" / "data").iterdir()))
    src = b"".join((root / "dledger-n0" / "data" / f"{i * FILE_SIZE:020d}").read_bytes()
                   for i in range(len(data) // FILE_SIZE))
    assert data[:rec.process_offset] == src[:rec.process_offset] and not any(data[rec.process_offset:])
    units = (out / "dledger-n0" / "index" / f"{0:020d}").read_bytes()[:32 * N]
    assert units[32 * k:32 * (k + 1)] == rf.encode_dledger_index_unit(pos, entries[k][1], k, 9)
    assert not any(units[32 * (k + 1):])
    assert (out / "dledger-n0" / "checkpoint").read_text() == f"committedIndex={k}\nendIndex={k}\n"
    # the election takes the log's last term (9) and the member's vote for itself
    assert (out / "dledger-n0" / "currterm").read_text() == "voteLeader=n0\ncurrTerm=9\n"
    queues = {(q.topic, q.queue_id) for q in list_queues(out)}
    assert queues == {(f"T{i % 3}", i % 2) for i in range(k + 1)} and any((out / "index").iterdir())
    assert "store modes        dledger" in capsys.readouterr().out
    repaired = support.tree_digest(out / "dledger-n0")
    assert recover_job.main(["--store", str(root), "--out", str(tmp_path / "out2"), "--broker-config", conf,
                             "--apply", "--backup", str(tmp_path / "backup")]) == 0
    assert support.tree_digest(tmp_path / "backup") == digest
    assert support.tree_digest(root / "dledger-n0") == repaired and not (root / "abort").exists()


def _open_with(root, conf):
    return open_store(root, conf, read_dledger=True)


@pytest.mark.spark
@pytest.mark.parametrize("case", ["group", "salvage"])
def test_recover_out_refuses_by_name_what_it_cannot_write(spark, tmp_path, capsys, case):
    """A member of a larger group (which entries survive is the election's) and ``--salvage``
    (re-appended records would need DLedger entries): one error line naming why, exit 2, nothing
    written."""
    from jobs import recover as recover_job
    root = tmp_path / "store"
    write_store(root, N)
    conf = root / "broker.conf"
    args = ["--store", str(root), "--out", str(tmp_path / "out"), "--broker-config", str(conf)]
    if case == "group":
        conf.write_text(conf.read_text().replace("dLegerPeers=n0-127.0.0.1:40911",
                                                 "dLegerPeers=n0-127.0.0.1:40911;n1-127.0.0.1:40912"))
    else:
        args.append("--salvage")
    assert recover_job.main(args) == 2
    err = [x for x in capsys.readouterr().err.splitlines() if x.startswith("error: ")]
    assert len(err) == 1 and ("DLedger group of 2 members" if case == "group" else "--salvage on a DLedger") in err[0]
    assert not (tmp_path / "out").exists()
