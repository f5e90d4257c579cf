"""fsync of a written tree, files then directories: once a rename publishes it, it survives a power
loss, not only this process dying.
"""
from __future__ import annotations

import os


def sync_tree(root: str) -> None:
    """fsync every file under ``root``, then every directory, deepest first: once a rename
    publishes the tree, it survives a power loss or a kernel crash, not only this process dying.
    (Output files start their write-back as they are finished, so this mostly waits for the tail.)"""
    for dirpath, _, filenames in os.walk(root, topdown=False):
        for name in filenames:
            sync_path(os.path.join(dirpath, name))
        sync_path(dirpath)


def sync_path(path: str) -> None:
    """fsync one file or directory (a directory's entries: a rename or a new file in it)."""
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if os.path.isdir(path) else 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
