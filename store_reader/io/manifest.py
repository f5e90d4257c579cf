"""The manifest of a written tree: relative path, size and SHA-256 of every file.
"""
from __future__ import annotations

import json
import os
from typing import Iterable, Mapping

from store_reader.io.hashing import sha256_files


def tree_files(root: str, skip: Iterable[str] = ()) -> list[tuple[str, str]]:
    """(relative path, path) of every file under ``root`` but those in ``skip``, sorted by path."""
    skip = set(skip)
    files = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            p = os.path.join(dirpath, name)
            rel = os.path.relpath(p, root)
            if rel not in skip:
                files.append((rel, p))
    files.sort()
    return files


def tree_manifest(root: str, skip: Iterable[str] = (), known: Mapping[str, str] | None = None
                  ) -> list[dict]:
    """Relative path, size and SHA-256 of every file under ``root``, sorted by path. ``known``:
    digests already computed (relative path -> SHA-256, e.g. by ``placement.place_segment`` as
    it wrote the file); only the other files are read."""
    known = known or {}
    files = tree_files(root, skip)
    digests = sha256_files(p for rel, p in files if rel not in known)
    return [{"path": rel, "size": os.path.getsize(p), "sha256": known[rel] if rel in known else digests[p]}
            for rel, p in files]


def write_manifest(out_dir: str, content: dict) -> None:
    with open(os.path.join(out_dir, "MANIFEST.json"), "x", encoding="utf-8") as fh:
        json.dump(content, fh, indent=2, sort_keys=True)
        fh.write("\n")
