"""The repaired store's commitlog placement (``store_reader.repair.placement``): every way a segment can be
placed writes the same bytes and returns their SHA-256; a hard link only where asked and allowed.

Real files throughout. This machine's ext4 has no ``FICLONE``, so a whole segment is read, hashed
and written there; the clone is exercised on a real XFS filesystem in a loop-mounted image (root
and ``mkfs.xfs`` needed); a refused clone is also forced on any filesystem.
"""
from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import shutil
import subprocess
import threading

import pytest

import support
from jobs import recover as job
from store_reader.repair import placement
from store_reader.io import hashing
from store_reader.io.storefs import SegmentBuffer
from store_reader.exceptions import OutputError
from store_reader.broker.cut import CommitLogFileState

V4, V5 = support.VERSIONS
SIZE = 3 * 4096 + 100


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _source(directory, size: int = SIZE, name: str = "00000000000000000000") -> tuple[str, bytes]:
    data = bytes((i * 131 + (i >> 9)) % 251 for i in range(size))
    path = os.path.join(directory, name)
    with open(path, "wb") as fh:
        fh.write(data)
    return path, data


@pytest.fixture
def xfs(tmp_path):
    """A 320 MiB XFS filesystem with reflinks, loop-mounted (root and mkfs.xfs needed)."""
    if shutil.which("mkfs.xfs") is None or os.geteuid() != 0:
        pytest.skip("needs root and mkfs.xfs (xfsprogs) for a real reflink filesystem")
    image, mnt = tmp_path / "xfs.img", tmp_path / "xfs"
    with open(image, "wb") as fh:
        fh.truncate(320 << 20)
    subprocess.run(["mkfs.xfs", "-q", "-m", "reflink=1", str(image)], check=True)
    mnt.mkdir()
    subprocess.run(["mount", "-o", "loop", str(image), str(mnt)], check=True)
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=True)


def _refuse_clone(monkeypatch) -> list[int]:
    """Make ``FICLONE`` answer as a filesystem without reflinks does; returns the requests tried."""
    tried: list[int] = []
    real_ioctl = fcntl.ioctl

    def ioctl(fd, request, *args):
        tried.append(request)
        if request == placement.FICLONE:
            raise OSError(errno.EOPNOTSUPP, "Operation not supported")
        return real_ioctl(fd, request, *args)

    monkeypatch.setattr(fcntl, "ioctl", ioctl)
    return tried


def test_where_the_filesystem_cannot_clone_a_whole_segment_is_read_hashed_and_written(tmp_path, monkeypatch):
    monkeypatch.setattr(placement, "HASH_CHUNK", 4096)        # several chunks, one partial
    src, data = _source(tmp_path)
    tried = _refuse_clone(monkeypatch)
    placed = placement.place_segment(src, str(tmp_path / "dest"), SIZE, SIZE)
    assert placed.how == placement.COPIED and tried == [placement.FICLONE]
    assert (tmp_path / "dest").read_bytes() == data and placed.sha256 == _sha(data)
    assert os.stat(tmp_path / "dest").st_ino != os.stat(src).st_ino and os.stat(src).st_nlink == 1


def _direct_io(directory) -> bool:
    """Whether ``directory``'s filesystem takes ``O_DIRECT``."""
    try:
        os.close(os.open(os.path.join(directory, "probe"), os.O_WRONLY | os.O_CREAT | os.O_DIRECT))
    except OSError as exc:
        assert exc.errno == errno.EINVAL
        return False
    return True


def _record_writes(monkeypatch) -> list[tuple[int, int, bool]]:
    """Every ``pwrite`` of the copy as (offset, length, with direct I/O)."""
    writes, real_pwrite = [], os.pwrite

    def pwrite(fd, data, offset):
        writes.append((offset, len(data), bool(fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_DIRECT)))
        return real_pwrite(fd, data, offset)

    monkeypatch.setattr(os, "pwrite", pwrite)
    return writes


def test_a_copy_is_written_with_direct_io_but_its_unaligned_last_piece(tmp_path, monkeypatch):
    monkeypatch.setattr(placement, "HASH_CHUNK", 8192)
    src, data = _source(tmp_path, 5 * 4096 + 100)
    _refuse_clone(monkeypatch)
    writes = _record_writes(monkeypatch)
    placed = placement.place_segment(src, str(tmp_path / "dest"), len(data), len(data))
    assert (tmp_path / "dest").read_bytes() == data and placed.sha256 == _sha(data)
    direct = _direct_io(tmp_path)       # this machine's ext4 and tmpfs take it
    assert writes == [(0, 8192, direct), (8192, 8192, direct), (16384, 4196, False)]


def test_the_next_chunk_is_read_and_hashed_while_a_write_waits_on_the_device(tmp_path, monkeypatch):
    monkeypatch.setattr(placement, "HASH_CHUNK", 4096)
    src, data = _source(tmp_path)
    _refuse_clone(monkeypatch)
    read_ahead, real_preadv, real_pwrite = threading.Event(), os.preadv, os.pwrite

    def preadv(fd, buffers, offset):
        if offset == 4096:
            read_ahead.set()
        return real_preadv(fd, buffers, offset)

    def pwrite(fd, buf, offset):
        # the first write returns only once the second chunk has been read: a copy that reads
        # only after each write would fail here
        assert offset or read_ahead.wait(10), "the second chunk was not read during the first write"
        return real_pwrite(fd, buf, offset)

    monkeypatch.setattr(os, "preadv", preadv)
    monkeypatch.setattr(os, "pwrite", pwrite)
    placed = placement.place_segment(src, str(tmp_path / "dest"), SIZE, SIZE)
    assert (tmp_path / "dest").read_bytes() == data and placed.sha256 == _sha(data)


def test_a_failed_write_behind_the_reads_stops_the_copy_naming_the_file(tmp_path, monkeypatch):
    monkeypatch.setattr(placement, "HASH_CHUNK", 4096)
    src, _ = _source(tmp_path, 20 * 4096)
    _refuse_clone(monkeypatch)
    reads, real_preadv, real_pwrite = [], os.preadv, os.pwrite

    def preadv(fd, buffers, offset):
        reads.append(offset)
        return real_preadv(fd, buffers, offset)

    def pwrite(fd, buf, offset):
        if offset >= 4096:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_pwrite(fd, buf, offset)

    monkeypatch.setattr(os, "preadv", preadv)
    monkeypatch.setattr(os, "pwrite", pwrite)
    with pytest.raises(OutputError, match="cannot write commitlog file: No space left on device") as exc:
        placement.place_segment(src, str(tmp_path / "dest"), 20 * 4096, 20 * 4096)
    assert exc.value.path == str(tmp_path / "dest")
    # the second write failed; the third chunk was read before its buffer was needed again
    assert reads == [0, 4096, 8192]


@pytest.mark.parametrize("refusal", ["filesystem", "alignment"])
def test_where_direct_io_is_refused_the_copy_goes_through_the_page_cache(tmp_path, monkeypatch, refusal):
    monkeypatch.setattr(placement, "HASH_CHUNK", 8192)
    src, data = _source(tmp_path, 5 * 4096 + 100)
    _refuse_clone(monkeypatch)
    if refusal == "filesystem":          # e.g. tmpfs before Linux 6.6: F_SETFL refuses O_DIRECT
        real_fcntl = fcntl.fcntl

        def no_direct(fd, cmd, arg=0):
            if cmd == fcntl.F_SETFL and arg & os.O_DIRECT:
                raise OSError(errno.EINVAL, "Invalid argument")
            return real_fcntl(fd, cmd, arg)

        monkeypatch.setattr(fcntl, "fcntl", no_direct)
        writes = _record_writes(monkeypatch)
    else:                                # a device whose blocks are larger than DIRECT_ALIGN
        writes, real_pwrite = [], os.pwrite

        def pwrite(fd, buf, offset):
            direct = bool(fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_DIRECT)
            writes.append((offset, len(buf), direct))
            if direct:
                raise OSError(errno.EINVAL, "Invalid argument")
            return real_pwrite(fd, buf, offset)

        monkeypatch.setattr(os, "pwrite", pwrite)
    placed = placement.place_segment(src, str(tmp_path / "dest"), len(data), len(data))
    assert (tmp_path / "dest").read_bytes() == data and placed.sha256 == _sha(data)
    buffered = [(0, 8192, False), (8192, 8192, False), (16384, 4196, False)]
    assert writes == (buffered if refusal == "filesystem" or not _direct_io(tmp_path)
                      else [(0, 8192, True)] + buffered)


def test_this_machines_filesystem_places_a_whole_segment_with_the_same_bytes(tmp_path):
    src, data = _source(tmp_path)
    placed = placement.place_segment(src, str(tmp_path / "dest"), SIZE, SIZE)
    assert placed.how in (placement.CLONED, placement.COPIED)
    assert (tmp_path / "dest").read_bytes() == data and placed.sha256 == _sha(data)


def test_clone_errors_other_than_unsupported_are_raised_naming_the_file_written(tmp_path, monkeypatch):
    src, _ = _source(tmp_path)

    def ioctl(fd, request, *args):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(fcntl, "ioctl", ioctl)
    with pytest.raises(OutputError) as exc:
        placement.place_segment(src, str(tmp_path / "dest"), SIZE, SIZE)
    assert exc.value.path == str(tmp_path / "dest") and "No space left on device" in str(exc.value)


def test_a_sparse_cloned_segment_is_hashed_without_reading_its_holes(xfs, monkeypatch):
    size = 1 << 20
    src = xfs / "sparse"
    with open(src, "wb") as fh:
        fh.truncate(size)
        fh.seek(4096)
        fh.write(b"x" * 5000)
    reads: list[int] = []
    real_pread = os.pread

    def pread(fd, n, at):
        reads.append(n)
        return real_pread(fd, n, at)

    monkeypatch.setattr(os, "pread", pread)
    placed = placement.place_segment(str(src), str(xfs / "dest"), size, size)
    want = bytes(4096) + b"x" * 5000 + bytes(size - 9096)
    assert placed.how == placement.CLONED and placed.sha256 == _sha(want)
    assert (xfs / "dest").read_bytes() == want
    assert 0 < sum(reads) < size                             # only the data extents were read


@pytest.mark.parametrize("keep", [0, 5000, SIZE - 1])
def test_the_cut_segment_is_rewritten_with_its_tail_zeroed(tmp_path, keep):
    src, data = _source(tmp_path)
    placed = placement.place_segment(src, str(tmp_path / "dest"), keep, SIZE, link=True)
    want = data[:keep] + bytes(SIZE - keep)
    assert placed.how == placement.REWRITTEN and placed.sha256 == _sha(want)
    assert (tmp_path / "dest").read_bytes() == want and os.stat(src).st_nlink == 1


@pytest.mark.parametrize("length", [SIZE - 100, SIZE + 100])
def test_a_segment_not_of_its_mapped_size_is_rewritten_not_linked(tmp_path, length):
    src, data = _source(tmp_path, length)
    placed = placement.place_segment(src, str(tmp_path / "dest"), SIZE, SIZE, link=True)
    want = (data + bytes(SIZE))[:SIZE]
    assert placed.how == placement.REWRITTEN and placed.sha256 == _sha(want)
    assert (tmp_path / "dest").read_bytes() == want and os.stat(src).st_nlink == 1


def test_link_shares_the_inode_and_gives_the_same_digest(tmp_path):
    src, data = _source(tmp_path)
    placed = placement.place_segment(src, str(tmp_path / "dest"), SIZE, SIZE, link=True)
    assert placed.how == placement.LINKED and placed.sha256 == _sha(data)
    assert os.stat(tmp_path / "dest").st_ino == os.stat(src).st_ino and os.stat(src).st_nlink == 2


def test_link_across_filesystems_falls_back_to_a_copy(tmp_path):
    shm = "/dev/shm"
    if os.stat(shm).st_dev == os.stat(tmp_path).st_dev:
        pytest.skip("/dev/shm is on the same filesystem as the test's directory")
    src, data = _source(tmp_path)
    dest = os.path.join(shm, f"placement-test-{os.getpid()}")
    try:
        placed = placement.place_segment(src, dest, SIZE, SIZE, link=True)
        assert placed.how != placement.LINKED and placed.sha256 == _sha(data)
        assert os.stat(src).st_nlink == 1 and open(dest, "rb").read() == data
    finally:
        os.unlink(dest)


def test_only_whole_files_before_the_last_kept_one_are_linkable():
    kept = [CommitLogFileState("a", 0, 100, 100), CommitLogFileState("b", 100, 100, 100),
            CommitLogFileState("c", 200, 100, 100)]
    assert placement.linkable(kept) == {"a", "b"}           # the cut on c's end: c is still not linked
    kept[2] = CommitLogFileState("c", 200, 100, 40)
    assert placement.linkable(kept) == {"a", "b"}
    assert [p.link for p in placement.plan(kept, link=True)] == [True, True, False]
    assert [p.link for p in placement.plan(kept, link=False)] == [False, False, False]
    assert placement.linkable(kept[:1]) == set() and placement.linkable([]) == set()


def test_on_xfs_a_whole_segment_is_cloned(xfs):
    src, data = _source(xfs, 1 << 20)
    placed = placement.place_segment(src, str(xfs / "dest"), 1 << 20, 1 << 20)
    assert placed.how == placement.CLONED and placed.sha256 == _sha(data)
    assert (xfs / "dest").read_bytes() == data and os.stat(src).st_nlink == 1


# -- the job ----------------------------------------------------------------------------------------

@pytest.mark.spark
@pytest.mark.parametrize("case", [(V4, "crash-tail"), (V5, "torn-middle-crc")])
def test_link_gives_the_same_repaired_store_sharing_the_whole_files(spark, tmp_path, case):
    store = tmp_path / "store"
    shutil.copytree(support.input_store(*case), store)
    copied, linked = tmp_path / "copied", tmp_path / "linked"
    conf = str(support.broker_conf(*case))
    report = job.recover(spark, str(store), str(copied), conf)
    job.recover(spark, str(store), str(linked), conf, link_commitlog=True)
    assert support.tree_digest(copied) == support.tree_digest(linked)
    assert (copied / "MANIFEST.json").read_text() == (linked / "MANIFEST.json").read_text()
    kept = report.prediction.commitlog_files
    may_link = placement.linkable(kept)
    assert may_link, "the case should keep whole files before the last"
    for f in kept:
        linked_file, input_file = linked / "commitlog" / f.name, store / "commitlog" / f.name
        shared = os.stat(linked_file).st_ino == os.stat(input_file).st_ino
        assert shared == (f.name in may_link)
        assert os.stat(copied / "commitlog" / f.name).st_nlink == 1
    assert os.stat(linked / "commitlog" / kept[-1].name).st_nlink == 1
    # the files placed whole took the digest the scan made as it walked them; the cut one did not
    assert may_link <= set(report.digests) and kept[-1].name not in report.digests
    for name in may_link:
        assert report.digests[name].sha256 == _sha((store / "commitlog" / name).read_bytes())


def test_link_needs_a_repaired_store(capsys):
    with pytest.raises(SystemExit) as exc:
        job.parse_args(["--store", "x", "--dry-run", "--link"])
    assert exc.value.code == 2 and "--link" in capsys.readouterr().err


def _scanned_digest(path: str) -> hashing.SourceDigest:
    with SegmentBuffer(path, "commitlog segment") as m:
        return hashing.source_digest(m)


def test_a_scan_digest_of_a_file_with_holes_is_its_sha256(tmp_path):
    path = str(tmp_path / "00000000000000000000")
    data = os.urandom(3 * 4096)
    with open(path, "wb") as fh:
        fh.write(data)
        fh.seek(1 << 20)
        fh.write(data)
        fh.truncate(2 << 20)                       # a hole in the middle and one at the end
    digest = _scanned_digest(path)
    assert digest.sha256 == _sha(open(path, "rb").read())
    assert digest.holds_for(os.stat(path))


@pytest.mark.parametrize("link", [False, True])
def test_a_file_placed_whole_takes_the_scans_digest_without_reading_the_source_again(tmp_path, monkeypatch, link):
    src, data = _source(tmp_path)
    scanned = _scanned_digest(src)
    assert scanned.sha256 == _sha(data)
    # a digest the placement could only have taken from the scan: the source is not hashed again
    taken = hashing.SourceDigest("ab" * 32, scanned.identity)
    monkeypatch.setattr(hashing, "sha256_file", lambda p: pytest.fail(f"{p} hashed again"))
    placed = placement.place_segment(src, str(tmp_path / "dest"), SIZE, SIZE, link=link, source=taken)
    assert placed.sha256 == "ab" * 32 and placed.how == (placement.LINKED if link else placement.COPIED)
    assert (tmp_path / "dest").read_bytes() == data


def test_a_source_changed_since_its_scan_is_hashed_again(tmp_path):
    src, data = _source(tmp_path)
    stale = hashing.SourceDigest("ab" * 32, _scanned_digest(src).identity)
    with open(src, "r+b") as fh:
        fh.write(b"\xff")
    os.utime(src, ns=(1, 1))                        # a modification time of its own, however coarse the clock
    want = _sha(b"\xff" + data[1:])
    for link, dest in ((True, "linked"), (False, "copied")):
        placed = placement.place_segment(src, str(tmp_path / dest), SIZE, SIZE, link=link, source=stale)
        assert placed.sha256 == want


def test_the_cut_file_is_not_given_the_scans_digest(tmp_path):
    src, data = _source(tmp_path)
    placed = placement.place_segment(src, str(tmp_path / "dest"), 5000, SIZE, source=_scanned_digest(src))
    assert placed.how == placement.REWRITTEN and placed.sha256 == _sha(data[:5000] + bytes(SIZE - 5000))
