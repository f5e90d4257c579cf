"""The repaired store's commitlog placement alone: the previous driver copy vs ``store_reader.repair.placement``.

    .venv/bin/python benchmarks/placement.py [--store DIR] [--out DIR] [--runs 3]

On one store (default: the 1.61 GB crashed store ``benchmarks/recover.py`` makes, made here if
missing) the kept commitlog files are placed, each way into a fresh directory, and timed (wall
seconds and the CPU seconds of every process that took part):

- ``previous``: the copy the job did before ``store_reader.repair.placement``, on two driver threads: a
  chunk read into a buffer and hashed, then the same range copied by ``copy_file_range``;
- ``tasks``: ``placement.place_segment`` per file in two worker processes, as the job's executor
  tasks run it (a clone where the filesystem can, else read, hashed and written);
- ``tasks, copy_file_range``: a whole file copied by ``copy_file_range``, then its source hashed
  (the way ``placement`` does not take where it cannot clone: measured here to say why);
- ``tasks, --link``: ``place_segment`` with the files below the cut hard-linked;
- ``tasks, scan's digest`` and ``tasks, --link, scan's digest``: the same given each whole file's
  digest as a recovery run's scan takes it (``hashing.SourceDigest``, made before the clock
  starts), so a file placed whole is not hashed by the placement, as in ``jobs.recover``.

The source is read into the page cache first (the job's scan has just read it) and the previous
run's output is synced and removed before each timed run. Every way must place the same bytes.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import statistics
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import psutil  # noqa: E402

from store_reader import open_store
from store_reader.repair import placement
from store_reader.io import hashing
from store_reader.broker import prediction


def previous_copy(src: str, dest: str, keep: int, file_size: int) -> str:
    """The job's copy before ``store_reader.repair.placement`` (chunk read and hashed, then the same range
    copied in the kernel), kept here to measure against."""
    digest = hashlib.sha256()
    view = memoryview(bytearray(1 << 20))
    with open(src, "rb", buffering=0) as fin, open(dest, "xb", buffering=0) as fout:
        done = 0
        while done < keep:
            n = os.preadv(fin.fileno(), [view[:min(len(view), keep - done)]], done)
            if not n:
                break
            digest.update(view[:n])
            copied = 0
            while copied < n:
                copied += os.copy_file_range(fin.fileno(), fout.fileno(), n - copied, done + copied,
                                             done + copied)
            done += n
        fout.truncate(file_size)
    hashing.update_zeros(digest, file_size - done)
    return digest.hexdigest()


def kernel_copy(src: str, dest: str, keep: int, file_size: int, link: bool) -> placement.PlacedSegment:
    """A whole file copied by ``copy_file_range`` and its source hashed; others as ``place_segment``."""
    if keep != file_size or os.path.getsize(src) != file_size:
        return placement.place_segment(src, dest, keep, file_size)
    with open(src, "rb", buffering=0) as fin, open(dest, "xb", buffering=0) as fout:
        done = 0
        while done < file_size:
            done += os.copy_file_range(fin.fileno(), fout.fileno(), file_size - done, done, done)
    return placement.PlacedSegment(hashing.sha256_file(src), "copied in the kernel")


def scan_digest(src: str, keep: int, file_size: int) -> hashing.SourceDigest | None:
    """The digest a recovery run's scan gives the placement for ``src``: for a file kept whole."""
    if keep != file_size:
        return None
    return hashing.SourceDigest(hashing.sha256_file(src), hashing.file_identity(os.stat(src)))


def _cpu(procs: list[psutil.Process]) -> float:
    total = 0.0
    for p in procs:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.NoSuchProcess:
            pass
    return total


def run(way: str, tasks: list[tuple], out: Path) -> tuple[float, float, dict[str, int]]:
    """Wall and CPU seconds of one placement of every kept file into ``out``."""
    me = psutil.Process()
    if way == "previous":
        before = _cpu([me])
        t = time.perf_counter()
        with ThreadPoolExecutor(max_workers=2) as pool:
            list(pool.map(lambda a: previous_copy(*a[:4]), tasks))
        return time.perf_counter() - t, _cpu([me]) - before, {"copied": len(tasks)}
    fn = kernel_copy if way.endswith("copy_file_range") else placement.place_segment
    link = "--link" in way
    scanned = way.endswith("scan's digest")
    args = [(*a[:4], a[4] and link) + ((scan_digest(a[0], a[2], a[3]),) if scanned else ()) for a in tasks]
    with ProcessPoolExecutor(max_workers=2) as pool:
        list(pool.map(abs, [1, 2]))                       # workers started before the clock
        workers = [psutil.Process(pid) for pid in pool._processes]
        before = _cpu(workers)
        t = time.perf_counter()
        placed = list(pool.map(fn, *zip(*args)))
        wall = time.perf_counter() - t
        cpu = _cpu(workers) - before
    hows: dict[str, int] = {}
    for p in placed:
        hows[p.how] = hows.get(p.how, 0) + 1
    return wall, cpu, hows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--store", default=os.path.join(tempfile.gettempdir(), "rmq-bench-recover", "store-1.5GiB"))
    ap.add_argument("--out", help="where the placed files go (default: next to the store)")
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args(argv)
    store_dir = Path(args.store)
    if not (store_dir / "bench-spec.json").exists():
        sys.path.insert(0, str(ROOT / "benchmarks"))
        import recover as bench

        bench.ensure_store(store_dir, bench.parse_size("1.5GiB"))
    store = open_store(str(store_dir), str(store_dir / "broker.conf"))
    pred = prediction.predict(store)
    srcs = {c.name: c.path for c in store.commitlog_files}
    out = Path(args.out or f"{store_dir}-placed")
    plan = placement.plan(pred.commitlog_files, link=True)
    tasks = [(str(srcs[p.name]), str(out / p.name), p.keep, p.file_size, p.link) for p in plan]
    size = sum(p.keep for p in plan)
    print(f"{len(plan)} kept files, {size / 1e9:.2f} GB kept, cut at {pred.max_phy_offset}")
    ways = ["previous", "tasks", "tasks, copy_file_range", "tasks, --link", "tasks, scan's digest",
            "tasks, --link, scan's digest"]
    results: dict[str, list[tuple[float, float]]] = {w: [] for w in ways}
    digests = None
    for _ in range(args.runs):
        for way in ways:
            for f in store.commitlog_files:               # the source warm, as after the scan
                with open(f.path, "rb") as fh:
                    while fh.read(8 << 20):
                        pass
            shutil.rmtree(out, ignore_errors=True)
            os.sync()
            out.mkdir(parents=True)
            wall, cpu, hows = run(way, tasks, out)
            got = hashing.sha256_files(str(out / p.name) for p in plan)
            if digests is None:
                digests = got
            assert got == digests, f"{way} placed other bytes"
            results[way].append((wall, cpu))
            print(f"  {way:29s} {wall:6.2f} s  {cpu:6.2f} CPU-s  {hows}", flush=True)
    shutil.rmtree(out, ignore_errors=True)
    print(f"\nmedian of {args.runs} ({size / 1e9:.2f} GB placed):")
    for way in ways:
        wall = statistics.median(w for w, _ in results[way])
        cpu = statistics.median(c for _, c in results[way])
        print(f"  {way:29s} {wall:6.2f} s  {cpu:6.2f} CPU-s  {cpu / (size / 1e9):5.2f} CPU-s/GB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
