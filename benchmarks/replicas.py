"""Master/slave comparison throughput: in this process and through Spark, on a 1.5 GB store.

    .venv/bin/python benchmarks/replicas.py [--size 1.5GiB] [--segment-size 256MiB] [--dir DIR]
                                            [--slaves DIR] [--behind 100MiB] [--no-spark]

The master is the synthetic store of ``benchmarks/scan.py`` (made, or reused when its stamp
matches). Three slaves are built next to it from hard links, so they cost almost no disk; the one
commitlog file a slave changes is copied first, so no slave ever writes into a master inode:

* ``in-sync``: every file linked (a byte-identical replica);
* ``lagging``: the copy of the file holding ``master end - behind`` is zeroed from the record
  boundary there, later files left out (a slave ``--behind`` bytes behind);
* ``diverged``: the same file, but from that boundary on it holds different valid records (a
  promoted slave's own writes, made with ``store_reader.testing.synthetic.encode_message``).

Each pair is compared in-process (``compare_stores``, 2 threads) and with ``jobs.replicas`` on the
embedded local Spark (one task per segment pair), the best of ``--repeat`` runs. GB/s counts both
copies of every compared file; GB/cpu-s divides by the CPU time the in-process run used (per core,
and unaffected by other load on the machine); "read" is the bytes the comparison read over that
total (each byte at most once is 1.0, plus a little around the first difference).
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from scan import ensure_store  # noqa: E402  (the 1.5 GB store of benchmarks/scan.py)

from store_reader import open_store
from store_reader.broker import replicas
from store_reader.formats.commitlog import SegmentScan  # noqa: E402
from store_reader.store import Store  # noqa: E402
from store_reader.testing.synthetic import encode_message, parse_size  # noqa: E402

GB = 1e9


def link_tree(src: Path, dst: Path, skip_commitlog: bool) -> None:
    """Hard-link every file of ``src`` into ``dst`` (commitlog files only unless skipped)."""
    for dirpath, _, filenames in os.walk(src):
        rel = Path(dirpath).relative_to(src)
        if skip_commitlog and rel.parts[:1] == ("commitlog",):
            continue
        (dst / rel).mkdir(parents=True, exist_ok=True)
        for name in filenames:
            os.link(Path(dirpath) / name, dst / rel / name)


def record_boundary(master: Store, phy: int) -> tuple[int, int]:
    """(index of the commitlog file holding ``phy``, start of the first record at or after it)."""
    for i, f in enumerate(master.commitlog_files):
        if f.start <= phy < f.start + f.size:
            for batch in SegmentScan(f.path, master.scan_options(), columns=["phy_offset"]):
                offsets = batch.column(0).to_numpy()
                later = offsets[offsets >= phy]
                if later.size:
                    return i, int(later[0])
            break
    raise ValueError(f"no record at or after phy {phy}")


def make_slave(master: Store, dst: Path, kind: str, behind: int) -> Path:
    """One slave next to the master (see the module docstring); reused when already there."""
    stamp = dst / "bench-slave.txt"
    want = f"{kind} behind={behind} master={master.root}"
    if stamp.exists() and stamp.read_text() == want:
        return dst
    if dst.exists():
        shutil.rmtree(dst)
    link_tree(master.root, dst, skip_commitlog=True)
    (dst / "commitlog").mkdir()
    files = master.commitlog_files
    if kind == "in-sync":
        for f in files:
            os.link(f.path, dst / "commitlog" / f.name)
    else:
        ends = [f.start + s.valid_bytes for f, s in zip(files, master.summaries()) if s.valid_bytes]
        index, cut = record_boundary(master, ends[-1] - behind)
        for f in files[:index]:
            os.link(f.path, dst / "commitlog" / f.name)
        f = files[index]
        copy = dst / "commitlog" / f.name
        shutil.copyfile(f.path, copy)           # a new inode: the master's file is never touched
        with open(copy, "r+b") as fh:
            pos = cut - f.start
            fh.seek(pos)
            fh.write(bytes(f.size - pos))
            if kind == "diverged":
                fh.seek(pos)
                fh.write(promoted_writes(cut, min(f.size - pos - 8, behind // 4)))
    stamp.write_text(want)
    return dst


def promoted_writes(phy: int, nbytes: int) -> bytes:
    """Valid records a promoted slave could have written from ``phy`` (about ``nbytes``)."""
    out = bytearray()
    i = 0
    while True:
        rec = encode_message(topic="PromotedTopic", body=b"promoted-%d " % i * 40, queue_id=i % 4,
                             queue_offset=i // 4, phy_offset=phy + len(out),
                             properties={"KEYS": f"P{i}", "UNIQ_KEY": f"PROMOTED{i:012d}"},
                             born_timestamp=1_800_000_000_000 + i, store_timestamp=1_800_000_000_000 + i)
        if len(out) + len(rec) > nbytes:
            return bytes(out)
        out += rec
        i += 1


def timed(fn, repeat: int):
    """(best wall seconds, CPU seconds of this process in that run, result)."""
    best = None
    for _ in range(repeat):
        t, cpu = time.perf_counter(), time.process_time()
        result = fn()
        run = (time.perf_counter() - t, time.process_time() - cpu, result)
        best = run if best is None or run[0] < best[0] else best
    return best


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size", default="1.5GiB")
    ap.add_argument("--segment-size", default="256MiB")
    tmp = os.environ.get("TMPDIR", "/tmp")
    ap.add_argument("--dir", default=os.path.join(tmp, "rmq-bench-store"))
    ap.add_argument("--slaves", default=os.path.join(tmp, "rmq-bench-replicas"))
    ap.add_argument("--behind", default="100MiB", help="how far the lagging/diverged slaves trail")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-spark", action="store_true")
    args = ap.parse_args(argv)
    root = ensure_store(Path(args.dir), parse_size(args.size), parse_size(args.segment_size))
    master = open_store(root)
    behind = parse_size(args.behind)
    slaves = {kind: open_store(make_slave(master, Path(args.slaves) / kind, kind, behind))
              for kind in ("in-sync", "lagging", "diverged")}
    opts = master.scan_options()
    spark = None
    if not args.no_spark:
        from jobs.replicas import compare_on_spark
        from jobs._spark.sparkutil import get_spark

        spark = get_spark("rocketmq-replicas-bench")
        compare_on_spark(spark, master, [slaves["in-sync"]], opts)      # warm the Python workers
    print(f"\nmaster {root}: {len(master.commitlog_files)} segments of "
          f"{master.config.mappedFileSizeCommitLog >> 20} MiB; checksum ranges of "
          f"{replicas.DEFAULT_RANGE_SIZE >> 20} MiB; {os.cpu_count()} cores")
    print(f"{'slave':<10} {'how':<11} {'seconds':>8} {'GB/s':>6} {'GB/cpu-s':>9} {'read':>6}  verdict")
    for kind, slave in slaves.items():
        total = replicas.in_scope_bytes(replicas.plan_segments(master, slave))
        runs = [("in-process", lambda: replicas.compare_stores(master, slave, opts, workers=2,
                                                              keep_records=False))]
        if spark is not None:
            runs.append(("spark", lambda: compare_on_spark(spark, master, [slave], opts)[0]))
        for how, fn in runs:
            secs, cpu, c = timed(fn, args.repeat)
            per_cpu = f"{total / cpu / GB:9.2f}" if how == "in-process" else f"{'-':>9}"
            verdict = (f"{c.status}, ahead {c.ahead_bytes:+,} bytes, {c.count(replicas.MASTER_ONLY):,} "
                       f"master-only / {c.count(replicas.SLAVE_ONLY):,} slave-only / "
                       f"{c.count(replicas.CONTENT_DIFFERS):,} differing records")
            print(f"{kind:<10} {how:<11} {secs:8.2f} {total / secs / GB:6.2f} {per_cpu} "
                  f"{c.bytes_read / total:6.3f}  {verdict}")
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"\n(GB/s over both copies of every compared file, {total / GB:.2f} GB for the last slave; "
          f"warm page cache; GB/cpu-s = per core, this process only; load average {load:.1f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
