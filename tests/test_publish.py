"""store_reader/repair/publish.py: the output lock, leftovers of killed runs, the manifest check and the
overwrite swap, each danger tested with a real process killed at that instant (no Spark here: the
built trees are small; tests/test_recover_cli.py kills the real job)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

import support
from store_reader.repair import publish
from store_reader.io import hashing, manifest as io_manifest
from store_reader.exceptions import StoreReaderError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# A child that builds a small repaired-store-like tree into its own temporary directory and
# publishes it to argv[1]; argv[2] = "no-exchange" makes the filesystem lack RENAME_EXCHANGE.
_PUBLISHER = textwrap.dedent("""
    import errno, os, sys
    from pathlib import Path
    from store_reader.repair import publish
    from store_reader.io import manifest

    out, mode, tag = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
    if mode == "no-exchange":
        def unsupported(a, b):
            raise OSError(errno.EINVAL, "Invalid argument")
        publish.exchange = unsupported
    tmp = publish.new_temporary(out, "run-" + tag)
    for rel in ("commitlog/00000000000000000000", "consumequeue/T/0/00000000000000000000", "checkpoint"):
        (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp / rel).write_bytes(tag.encode() * 1000)
    manifest.write_manifest(str(tmp), {"runId": tag, "outputs": manifest.tree_manifest(str(tmp), skip={publish.TMP_MARKER})})
    publish.publish(tmp, out, overwrite=True)
""")


def _publish(out, tag: str, mode: str = "exchange", pause: str | None = None) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=ROOT)
    env.pop(publish.PAUSE_ENV, None)
    if pause:
        env[publish.PAUSE_ENV] = pause
    return subprocess.Popen([sys.executable, "-c", _PUBLISHER, str(out), mode, tag], env=env,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


def _published_tag(out) -> str:
    """The tag of the complete tree at ``out`` (every file the manifest lists, as listed)."""
    publish.verify_against_manifest(out)
    manifest = json.loads((out / "MANIFEST.json").read_text())
    for e in manifest["outputs"]:
        assert hashing.sha256_file(str(out / e["path"])) == e["sha256"]
    return manifest["runId"]


def _leftovers(tmp_path) -> list[str]:
    return sorted(p.name for p in tmp_path.iterdir() if p.name != "out")


@pytest.mark.parametrize("mode, earlier, point, visible, after", [
    # a first publish killed after the marker is gone, before the rename: nothing published
    ("exchange", False, "unmarked", None, None),
    # an overwrite killed before the swap: the earlier store stays
    ("exchange", True, "unmarked", "old", "old"),
    # killed right after the atomic exchange: the new store, the earlier one under the temp name
    ("exchange", True, "replaced", "new", "new"),
    # no RENAME_EXCHANGE: killed with the output renamed aside -> the next run restores it
    ("no-exchange", True, "moved-aside", None, "old"),
    ("no-exchange", True, "replaced", "new", "new"),
])
def test_a_kill_at_any_instant_of_publishing_leaves_a_complete_store_or_none(tmp_path, mode, earlier, point,
                                                                              visible, after):
    out = tmp_path / "out"
    if earlier:
        assert _publish(out, "old", mode).wait() == 0
    proc = _publish(out, "new", mode, pause=point)
    support.kill_at_pause(proc, point)
    # what a reader sees right after the kill: a complete store or no store, never a partial one
    assert (_published_tag(out) if out.exists() else None) == visible
    assert _leftovers(tmp_path)                                  # the killed run's temporaries
    with publish.OutputLock(out):                                # the next run, under the lock
        done = publish.recover_leftovers(out)
    assert done and (_published_tag(out) if out.exists() else None) == after
    assert _leftovers(tmp_path) == []
    # and that next run publishes normally
    assert _publish(out, "next", mode).wait() == 0 and _published_tag(out) == "next"
    assert _leftovers(tmp_path) == []


def test_a_tree_that_does_not_match_its_manifest_is_not_published(tmp_path):
    out = tmp_path / "out"
    tmp = publish.new_temporary(out, "run")
    for rel in ("commitlog/00000000000000000000", "consumequeue/T/0/00000000000000000000"):
        (tmp / rel).parent.mkdir(parents=True)
        (tmp / rel).write_bytes(b"x" * 100)
    io_manifest.write_manifest(str(tmp), {"outputs": io_manifest.tree_manifest(str(tmp), skip={publish.TMP_MARKER})})
    (tmp / "consumequeue" / "T" / "0" / "00000000000000000000").unlink()   # another run removed it
    with pytest.raises(StoreReaderError, match=r"does not match its manifest \(missing \['consumequeue/"):
        publish.publish(tmp, out, overwrite=False)
    assert list(tmp_path.iterdir()) == []


def test_the_lock_admits_one_run_names_the_holder_and_is_removed_after(tmp_path):
    out = tmp_path / "out"
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\nfrom pathlib import Path\nfrom store_reader.repair import publish\n"
         "with publish.OutputLock(Path(sys.argv[1])):\n    print('locked', flush=True); time.sleep(60)",
         str(out)], env=dict(os.environ, PYTHONPATH=ROOT), stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(StoreReaderError, match=rf"out.lock: another run holds this output's lock "
                                                   rf"\(pid {holder.pid}\)"):
            with publish.OutputLock(out):
                pass
    finally:
        holder.kill()
        holder.wait()
    # killed: its lock file is left, but the lock is free (the kernel drops a dead process's flock)
    assert (tmp_path / "out.lock").exists()
    with publish.OutputLock(out) as lock:
        assert (tmp_path / "out.lock").read_text() == f"{os.getpid()}\n"
        assert lock.path == tmp_path / "out.lock"
    assert list(tmp_path.iterdir()) == []


def test_check_output_refuses_what_it_must_not_replace(tmp_path):
    out = tmp_path / "out"
    publish.check_output(out, overwrite=False)                   # nothing there
    out.mkdir()
    with pytest.raises(StoreReaderError, match="exists \\(use --overwrite\\)"):
        publish.check_output(out, overwrite=False)
    (out / "precious").write_text("x")
    with pytest.raises(StoreReaderError, match="not a repaired store"):
        publish.check_output(out, overwrite=True)
    (out / "MANIFEST.json").write_text("{}")
    publish.check_output(out, overwrite=True)


def _in_read_only_mount(tmp_path, code: str) -> subprocess.CompletedProcess:
    """Run ``code`` in a child whose view of ``tmp_path/ro`` is a read-only bind mount (a private
    mount namespace: root ignores file modes, not a read-only mount)."""
    ro = tmp_path / "ro"
    ro.mkdir(exist_ok=True)
    script = (f"mount --bind {ro} {ro} && mount -o remount,bind,ro {ro} && "
              f"exec {sys.executable} -c \"$0\"")
    return subprocess.run(["unshare", "-m", "sh", "-c", script, code], capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=ROOT), timeout=60)


def test_check_writable_on_a_read_only_mount_an_unwritable_path_and_a_file(tmp_path):
    done = _in_read_only_mount(tmp_path, textwrap.dedent(f"""
        from store_reader.repair import publish
        from store_reader.exceptions import StoreReaderError
        for target in ("{tmp_path}/ro/audit", "{tmp_path}/ro", "file://{tmp_path}/ro/a/b"):
            try:
                publish.check_writable(target, "audit path")
                print("accepted", target)
            except StoreReaderError as exc:
                print(exc)
        """))
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [f"{tmp_path}/ro: audit path is not writable: Read-only file system"] * 3
    with pytest.raises(StoreReaderError, match="^/sys: audit path is not writable: "):
        publish.check_writable("/sys/audit", "audit path")      # a pseudo filesystem root may not write
    (tmp_path / "afile").write_text("x")
    with pytest.raises(StoreReaderError, match="exists and is not a directory"):
        publish.check_writable(str(tmp_path / "afile"), "audit path")
    with pytest.raises(StoreReaderError, match="afile is not a directory"):
        publish.check_writable(str(tmp_path / "afile" / "audit"), "audit path")
    publish.check_writable(str(tmp_path / "new" / "audit"), "audit path")
    publish.check_writable("s3://bucket/audit", "audit path")    # written by its own client: not probed


# A child that holds a work directory under argv[1] until it is killed, printing its path.
_WORKER = textwrap.dedent("""
    import sys, time
    from store_reader.repair import publish

    with publish.work_directory("rocketmq-scan-", "run", sys.argv[1]) as path:
        open(path + "/00000000000000000000.arrow", "wb").write(b"kept" * 1000)
        print(path, flush=True)
        time.sleep(600)
""")


def test_a_killed_runs_work_directory_is_removed_by_the_next_run_and_a_live_ones_is_not(tmp_path):
    env = dict(os.environ, PYTHONPATH=ROOT)
    procs = [subprocess.Popen([sys.executable, "-c", _WORKER, str(tmp_path)], env=env, stdout=subprocess.PIPE,
                              text=True, start_new_session=True) for _ in range(2)]
    try:
        killed, alive = (p.stdout.readline().strip() for p in procs)
        (tmp_path / "rocketmq-scan-foreign").mkdir()           # no owner file: not a run's, left alone
        assert publish.remove_abandoned(str(tmp_path), "rocketmq-scan-") == []
        procs[0].kill()
        procs[0].wait()
        assert os.path.isdir(killed)                           # a killed run cannot clean up
        with publish.work_directory("rocketmq-scan-", "next", str(tmp_path)) as mine:
            assert not os.path.exists(killed) and os.path.isdir(alive) and os.path.isdir(mine)
        assert sorted(p.name for p in tmp_path.iterdir()) == sorted([os.path.basename(alive), "rocketmq-scan-foreign"])
    finally:
        for p in procs:
            p.kill()
            p.wait()


def test_an_apply_killed_before_its_journal_replaces_its_own_output(tmp_path):
    """--apply killed after publishing the repaired store, before its journal: the store untouched,
    the repaired store of that very store at --out. The same command again replaces it (it is the
    run's own output), where any other existing output is refused."""
    store = tmp_path / "store"
    (store / "commitlog").mkdir(parents=True)
    out = tmp_path / "out"
    out.mkdir()
    (out / "MANIFEST.json").write_text(json.dumps({"store": str(store.resolve())}))
    done = []
    with publish.claim_outputs(store, str(out), False, str(tmp_path / "backup"), None, done.append):
        pass
    assert done == [f"replacing {out}: a repaired store of this store an --apply did not swap in"]
    (out / "MANIFEST.json").write_text(json.dumps({"store": "/somewhere/else"}))
    with pytest.raises(StoreReaderError, match="output directory exists"):
        with publish.claim_outputs(store, str(out), False, str(tmp_path / "backup"), None, done.append):
            pass
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "store"]
