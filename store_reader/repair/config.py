"""The repaired store's ``config/`` and broker identity: copied as they are, the committed consumer
offsets moved to where the rebuilt queues serve them, the controller's epoch entries cut at the end.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Mapping

from store_reader.formats.config import CONSUMER_OFFSET_FILES, rewrite_consumer_offsets
from store_reader.formats.controller import EPOCH_FILE, IDENTITY_FILES, epoch_file_bytes, read_epoch_file
from store_reader.formats.consumequeue import range_status
from store_reader.exceptions import UnreadableFileError
from store_reader.io.fsutil import walk_files
from store_reader.io.storefs import location, open_regular

if TYPE_CHECKING:
    from store_reader.io.storefs import StoreLocation
    from store_reader.store import Store


def copy_controller_files(store: Store, dest_root: Path, end: int) -> None:
    """Controller mode: the broker identity as it is, and the epoch entries the broker loads
    (``controller.read_epoch_file``) without those starting past the repaired commitlog's end
    (``end``), which claim data it does not hold (``EpochFileCache#truncateSuffixByOffset``
    keeps an epoch that starts at the end). Unchanged entries are copied byte for byte, .bak
    included; an empty list writes no file, as ``CheckpointFile#write`` does not."""
    for name in IDENTITY_FILES:
        src = store.root / name
        if src.is_file():
            (dest_root / name).write_bytes(location(src).read_bytes())
    epochs = read_epoch_file(store.root / EPOCH_FILE)
    kept = [e for e in epochs.entries if e.start_offset <= end]
    if kept == epochs.entries and not epochs.problems and epochs.start_fails is None:
        for name in (EPOCH_FILE, EPOCH_FILE + ".bak"):
            src = store.root / name
            if src.is_file():
                (dest_root / name).write_bytes(location(src).read_bytes())
    elif kept:
        (dest_root / EPOCH_FILE).write_bytes(epoch_file_bytes(kept))


def copy_config(src_root: Path | StoreLocation, dest_root: Path) -> list[str]:
    """``config/`` copied as it is (the broker's own fallback files included) and the ``lock`` file;
    from a remote store (``storefs``) file by file.

    A file that cannot be read is left out, as the broker's load treats it (``config.load_config``:
    it falls back to the ``.bak``), and returned as ``"<file>: <reason>"``; anything but a regular
    file or a directory (a FIFO would block the copy forever) is refused naming it."""
    left_out: list[str] = []
    if not isinstance(src_root, Path):
        if (src_root / "config").is_dir():
            for rel, _, _ in walk_files(src_root / "config"):
                (dest_root / "config" / rel).parent.mkdir(parents=True, exist_ok=True)
                (dest_root / "config" / rel).write_bytes((src_root / "config" / rel).read_bytes())
        if (src_root / "lock").is_file():
            (dest_root / "lock").write_bytes((src_root / "lock").read_bytes())
        return left_out

    def copy(src: str, dest: str) -> None:
        try:                    # config files are small: read whole, so only reading is forgiven
            with open_regular(src, "config file") as fin:
                data = fin.read()
        except OSError as exc:
            left_out.append(f"{src}: {exc.strerror}")
            return
        with open(dest, "xb") as fout:
            fout.write(data)
        shutil.copystat(src, dest)

    def copy_dir(src: str, dest: str) -> None:
        os.mkdir(dest)
        for entry in sorted(os.scandir(src), key=lambda e: e.name):
            try:
                is_dir = entry.is_dir()
            except OSError:     # a symlink that cannot be followed: the copy names why
                is_dir = False
            (copy_dir if is_dir else copy)(entry.path, os.path.join(dest, entry.name))
        shutil.copystat(src, dest)

    try:
        if (src_root / "config").is_dir():
            copy_dir(str(src_root / "config"), str(dest_root / "config"))
        if os.path.lexists(src_root / "lock"):
            copy(str(src_root / "lock"), str(dest_root / "lock"))
    except OSError as exc:      # a directory under config/ that cannot be listed (writing: as it is)
        if not os.fspath(exc.filename or "").startswith(os.fspath(src_root)):
            raise
        raise UnreadableFileError(f"cannot copy config: {exc.strerror}", exc.filename) from None
    return left_out


def correct_consumer_offsets(config_dir: Path, queue_ranges: Mapping[tuple[str, int], tuple[int, int]]
                             ) -> list[dict]:
    """Move every committed offset of the consumer offset files under ``config_dir`` (each
    generation, ``CONSUMER_OFFSET_FILES``) to where the consumer's next pull on the repaired store
    would move it: the broker's own correction (``consumequeue.range_status``) against
    ``queue_ranges``, (min, max) of each repaired queue (a queue not there is empty). An offset
    the queue serves stays; a file that does not decode stays as it is.

    Returns one dict per moved offset, the original value included (for the manifest)."""
    def serves(topic: str, queue_id: int, offset: int) -> tuple[int, int, str | None, int]:
        lo, hi = queue_ranges.get((topic, queue_id), (0, 0))
        return (lo, hi, *range_status(lo, hi, offset))

    moved: list[dict] = []
    for name in CONSUMER_OFFSET_FILES:
        path = config_dir / name
        if not path.is_file():
            continue
        changed = rewrite_consumer_offsets(path, lambda t, g, q, o: serves(t, q, o)[3],
                                           lmq=name.startswith("lmq"))
        for topic, group, qid, old, new in changed or ():
            lo, hi, status, _ = serves(topic, qid, old)
            moved.append({"file": f"config/{name}", "topic": topic, "group": group, "queueId": qid,
                          "committedOffset": old, "repairedOffset": new, "status": status,
                          "repairedMin": lo, "repairedMax": hi})
    return moved
