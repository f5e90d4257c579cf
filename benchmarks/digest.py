"""What the repaired store's manifest digest costs a core, against the faster choices.

    .venv/bin/python benchmarks/digest.py [--mib 256] [--repeat 5]

Hashes one buffer of random bytes in 1 MiB chunks (the placement's chunk, ``store_reader.repair.placement``)
with SHA-256 (``hashlib``, the manifest's digest), BLAKE3 on one thread (the PyPI ``blake3``
package, if it is installed: it is not a dependency of the project) and, for scale, zlib's CRC-32
(the polynomial of the records' CRCs); prints the least CPU seconds of ``--repeat`` runs of each
and the GB/s a core that makes. CPU seconds of this process, so a shared machine slows the wall
clock but not the figures much.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import resource
import zlib

CHUNK = 1 << 20


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _chunked(make):
    def run(view: memoryview) -> None:
        h = make()
        for i in range(0, len(view), CHUNK):
            h.update(view[i:i + CHUNK])
        h.digest()
    return run


def _crc(view: memoryview) -> None:
    crc = 0
    for i in range(0, len(view), CHUNK):
        crc = zlib.crc32(view[i:i + CHUNK], crc)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mib", type=int, default=256, help="buffer size in MiB")
    ap.add_argument("--repeat", type=int, default=5, help="runs per digest; the least CPU counts")
    args = ap.parse_args()
    view = memoryview(os.urandom(args.mib << 20))
    ways = [("SHA-256 (hashlib, the manifest's digest)", _chunked(hashlib.sha256))]
    try:
        import blake3
        ways.append((f"BLAKE3 {blake3.__version__}, one thread", _chunked(lambda: blake3.blake3(max_threads=1))))
    except ImportError:
        print("BLAKE3: the blake3 package is not installed (pip install blake3 to compare)")
    ways.append(("CRC-32 (zlib.crc32)", _crc))
    print(f"{args.mib} MiB of random bytes in 1 MiB chunks, least CPU of {args.repeat} runs")
    for name, run in ways:
        best = min(_timed(run, view) for _ in range(args.repeat))
        print(f"  {name:<44} {best:6.3f} CPU-s  {len(view) / best / 1e9:5.2f} GB/s a core  "
              f"{best / len(view) * 1e9:5.2f} CPU-s per GB")


def _timed(run, view: memoryview) -> float:
    c = _cpu()
    run(view)
    return _cpu() - c


if __name__ == "__main__":
    main()
