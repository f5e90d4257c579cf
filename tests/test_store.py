"""Store discovery and the bad-input policy: clear package errors naming file and position."""
from __future__ import annotations

import os
import shutil

import pytest

import support
from store_reader import open_store
from store_reader.formats.brokerconf import load_broker_config
from store_reader.formats.commitlog import scan_segment
from store_reader.exceptions import (ConfigError, FileSizeError, NotAStoreError, StoreReaderError,
                                     StrayFileError, UnreadableFileError, UnsupportedStoreError)
from store_reader.formats.recordformat import ScanOptions

pytestmark = pytest.mark.reader

V4, V5 = support.VERSIONS


def _copy(version: str, scenario: str, tmp_path) -> str:
    dest = tmp_path / "store"
    shutil.copytree(support.input_store(version, scenario), dest)
    return str(dest)


def test_fixture_layout_discovered():
    store = open_store(support.input_store(V5, "clean"), support.broker_conf(V5, "clean"))
    assert [f.name for f in store.commitlog_files][:2] == ["00000000000000000000", "00000000000000065536"]
    assert len(store.commitlog_files) == 12 and store.loadable
    assert not store.abort_exists and store.lock_exists          # abort.bak is not an abort marker
    assert (store.root / "abort.bak").exists()
    assert store.looks_5x()
    assert not open_store(support.input_store(V4, "clean"), support.broker_conf(V4, "clean")).looks_5x()
    assert open_store(support.input_store(V4, "crash-tail"), support.broker_conf(V4, "crash-tail")).abort_exists


@pytest.mark.parametrize("case", support.scenarios(), ids=support.case_id)
def test_version_hints_agree_with_the_writing_broker(case):
    version, scenario = case
    store = open_store(support.input_store(*case), support.broker_conf(*case))
    if store.commitlog_files:
        assert store.looks_5x() == version.endswith("5.3.3")


def test_missing_directory(tmp_path):
    with pytest.raises(NotAStoreError, match="does not exist") as err:
        open_store(tmp_path / "nope")
    assert str(tmp_path / "nope") in str(err.value)


def test_directory_that_is_not_a_store(tmp_path):
    (tmp_path / "hello.txt").write_text("hi")
    with pytest.raises(NotAStoreError, match="not a RocketMQ store root"):
        open_store(tmp_path)


def test_file_instead_of_directory(tmp_path):
    p = tmp_path / "f"
    p.write_bytes(b"x")
    with pytest.raises(NotAStoreError, match="not a directory"):
        open_store(p)


def test_wrong_commitlog_size_names_both_sizes(tmp_path):
    root = _copy(V4, "clean", tmp_path)
    victim = os.path.join(root, "commitlog", "00000000000000065536")
    with open(victim, "r+b") as fh:
        fh.truncate(1000)
    store = open_store(root, support.broker_conf(V4, "clean"))
    assert not store.loadable
    (problem,) = store.load_problems
    assert isinstance(problem, FileSizeError) and problem.path == victim
    assert "1000 bytes" in str(problem) and "65536" in str(problem)
    with pytest.raises(FileSizeError):
        open_store(root, support.broker_conf(V4, "clean"), strict=True)


def test_config_that_contradicts_every_file(tmp_path):
    with pytest.raises(FileSizeError, match="mappedFileSizeCommitLog is 1073741824"):
        open_store(support.input_store(V4, "clean"))      # broker defaults: 1 GiB files


def test_stray_file_name(tmp_path):
    root = _copy(V4, "clean", tmp_path)
    stray = os.path.join(root, "commitlog", "00000000000000065536.bak")
    shutil.copy(os.path.join(root, "commitlog", "00000000000000065536"), stray)
    store = open_store(root, support.broker_conf(V4, "clean"))
    assert isinstance(store.load_problems[0], StrayFileError)
    assert store.load_problems[0].path == stray
    assert len(store.commitlog_files) == 12


def test_empty_last_commitlog_file_is_skipped(tmp_path):
    root = _copy(V5, "clean", tmp_path)
    open(os.path.join(root, "commitlog", "00000000000000786432"), "wb").close()
    store = open_store(root, support.broker_conf(V5, "clean"))
    assert store.loadable and len(store.commitlog_files) == 12
    assert any("zero-length last file" in n for n in store.notes)


def test_rocksdb_consume_queue_is_refused(tmp_path):
    root = _copy(V5, "clean", tmp_path)
    open(os.path.join(root, "consumequeue", "CURRENT"), "w").close()
    with pytest.raises(UnsupportedStoreError, match="RocksDB"):
        open_store(root, support.broker_conf(V5, "clean"))


def test_unreadable_segment(tmp_path):
    # A directory where a segment should be: open() fails as it would on an unreadable file
    # (a chmod-based test proves nothing here: CI runs as root).
    seg = tmp_path / "00000000000000000000"
    seg.mkdir()
    with pytest.raises(UnreadableFileError, match="cannot open") as err:
        scan_segment(seg, ScanOptions(broker_5x=False))
    assert err.value.path == str(seg)


def test_segment_that_vanished(tmp_path):
    with pytest.raises(UnreadableFileError) as err:
        scan_segment(tmp_path / "00000000000000000000", ScanOptions())
    assert isinstance(err.value, StoreReaderError)


@pytest.mark.parametrize("size", [0, 1, 3, 4, 7, 8, 40, 100])
def test_tiny_and_empty_segments(tmp_path, size):
    p = tmp_path / "00000000000000000000"
    p.write_bytes(bytes(size))
    table, s = scan_segment(p, ScanOptions())
    assert table.num_rows == 0 and s.valid_bytes == 0 and s.trailing_bytes == size
    assert s.end_reason == ("file_end" if size == 0 else "zero_padding")


def test_multi_path_commitlog(tmp_path):
    root = _copy(V4, "clean", tmp_path)
    other = tmp_path / "second"
    other.mkdir()
    names = sorted(os.listdir(os.path.join(root, "commitlog")))
    for name in names[1::2]:                       # round-robin spread, as the broker does
        shutil.move(os.path.join(root, "commitlog", name), other / name)
    cfg = load_broker_config(support.broker_conf(V4, "clean"),
                             storePathCommitLog=f"{root}/commitlog,{other}")
    store = open_store(root, cfg)
    assert [f.name for f in store.commitlog_files] == names
    assert store.loadable


def test_broker_conf_errors(tmp_path):
    p = tmp_path / "broker.conf"
    p.write_text("mappedFileSizeCommitLog=lots\n")
    with pytest.raises(ConfigError, match="mappedFileSizeCommitLog='lots' is not an integer") as err:
        load_broker_config(p)
    assert str(p) in str(err.value)
    with pytest.raises(ConfigError, match="cannot read"):
        load_broker_config(tmp_path / "missing.conf")
    p.write_text("# c\nmessageDelayLevel = 1s 2x\n")
    with pytest.raises(ConfigError, match="messageDelayLevel"):
        load_broker_config(p)


def test_broker_conf_defaults_and_derived_values(tmp_path):
    p = tmp_path / "broker.conf"
    p.write_text("mappedFileSizeConsumeQueue=610\nmaxHashSlotNum=100\nmaxIndexNum=400\n"
                 "checkCRCOnRecover : false\nunknownSetting=1\n")
    cfg = load_broker_config(p)
    assert cfg.cq_file_size == 620                  # rounded up to a multiple of 20
    assert cfg.index_file_size == 8440
    assert cfg.checkCRCOnRecover is False and cfg.mappedFileSizeCommitLog == 1 << 30
    assert cfg.delay_levels_ms[-1] == 7_200_000


def test_input_store_is_never_modified():
    root = support.input_store(V5, "torn-middle-crc")
    before = support.tree_digest(root)
    store = open_store(root, support.broker_conf(V5, "torn-middle-crc"))
    for _ in store.scan_commitlog(include_lost=True):
        pass
    store.segment_summaries()
    assert support.tree_digest(root) == before
