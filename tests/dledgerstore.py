"""A DLedger store built byte for byte as DLedger 0.3.1.2 and ``DLedgerCommitLog`` write it
(F§16), for the fast tests: data files, index units, the DLedger checkpoint and currterm, and the
broker.conf that names it. The slow tests read stores the real broker wrote."""
from __future__ import annotations

import random
import struct
from pathlib import Path

from store_reader.formats import recordformat as rf

FILE_SIZE = 16384
CONF = ("enableDLegerCommitLog=true\ndLegerGroup=g\ndLegerPeers=n0-127.0.0.1:40911\ndLegerSelfId=n0\n"
        f"mappedFileSizeCommitLog={FILE_SIZE}\nmappedFileSizeConsumeQueue=2000\n")


def oracle_conf(group: str) -> str:
    """The broker.conf of the real broker's DLedger oracle runs: a one-member group ``group``
    (member n0), small files, ASYNC_FLUSH."""
    return (f"enableDLegerCommitLog=true\ndLegerGroup={group}\ndLegerPeers=n0-127.0.0.1:40911\n"
            "dLegerSelfId=n0\nmappedFileSizeCommitLog=65536\nmappedFileSizeConsumeQueue=2000\n"
            "maxHashSlotNum=500\nmaxIndexNum=2000\nflushDiskType=ASYNC_FLUSH\n")


def _record(i: int, rng: random.Random, next_offset: dict) -> bytes:
    """Message ``i``: topic T0-T2, queue 0-1, the next queue offset of its queue."""
    queue = (f"T{i % 3}", i % 2)
    next_offset[queue] = next_offset.get(queue, -1) + 1
    return rf.encode_message(topic=queue[0], body=rng.randbytes(rng.randrange(20, 600)),
                             properties={"KEYS": f"K{i}", "TAGS": f"t{i % 4}", "UNIQ_KEY": f"U{i:08d}"},
                             queue_id=queue[1], queue_offset=next_offset[queue],
                             store_timestamp=1_700_000_000_000 + i, born_timestamp=1_700_000_000_000 + i,
                             trailing_separator=False)


def dledger_files(n: int, seed: int = 7, file_size: int = FILE_SIZE, term: int = 1
                  ) -> tuple[list[bytearray], list[tuple[int, int, int]]]:
    """Data files holding ``n`` entries as ``MmapFileList#append`` lays them out (a blank where the
    next entry and 8 bytes do not fit), and each entry's (pos, size, index)."""
    rng = random.Random(seed)
    files: list[bytearray] = [bytearray(file_size)]
    entries = []
    wrote = 0
    offsets: dict = {}
    for i in range(n):
        rec = _record(i, rng, offsets)
        size = rf.DLEDGER_BODY_OFFSET + len(rec)
        if size + rf.DLEDGER_MIN_BLANK > file_size - wrote:
            struct.pack_into(">ii", files[-1], wrote, rf.DLEDGER_BLANK_MAGIC, file_size - wrote)
            files.append(bytearray(file_size))
            wrote = 0
        pos = (len(files) - 1) * file_size + wrote
        files[-1][wrote:wrote + size] = rf.encode_dledger_entry(rec, i, term, pos)
        entries.append((pos, size, i))
        wrote += size
    return files, entries


def write_store(root: Path, n: int, seed: int = 7, committed: int | None = None, term: int = 1) -> list:
    """A halted one-member store of ``n`` entries under ``root`` (no consume queues yet: the
    broker's reput builds them); returns the entries' (pos, size, index)."""
    files, entries = dledger_files(n, seed, term=term)
    data = root / "dledger-n0" / "data"
    data.mkdir(parents=True)
    for k, b in enumerate(files):
        (data / f"{k * FILE_SIZE:020d}").write_bytes(bytes(b))
    index = root / "dledger-n0" / "index"
    index.mkdir()
    with open(index / f"{0:020d}", "wb") as fh:
        fh.truncate(32 * 5 * 1024 * 1024)          # sparse, as the mapped file is
        fh.write(b"".join(rf.encode_dledger_index_unit(p, s, i, term) for p, s, i in entries))
    committed = n - 1 if committed is None else committed
    (root / "dledger-n0" / "checkpoint").write_text(f"committedIndex={committed}\nendIndex={n - 1}\n")
    (root / "dledger-n0" / "currterm").write_text(f"currTerm={term}\nvoteLeader=n0\n")
    (root / "broker.conf").write_text(CONF)
    (root / "abort").write_bytes(b"")
    return entries
