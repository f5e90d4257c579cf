"""A detached git worktree of an earlier commit with its native scanner built: the "before" side of
``benchmarks/recover.py`` and ``scripts/compare_impl.py``."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def baseline_tree(rev: str, parent: Path, prefix: str = "baseline") -> Path:
    """``parent/<prefix>-<commit>``: made once (worktree and ``build_ext --inplace``), then reused."""
    full = subprocess.run(["git", "-C", str(ROOT), "rev-parse", rev], check=True, capture_output=True,
                          text=True).stdout.strip()
    tree = parent / f"{prefix}-{full[:12]}"
    if not (tree / ".built").exists():
        shutil.rmtree(tree, ignore_errors=True)
        subprocess.run(["git", "-C", str(ROOT), "worktree", "prune"], check=True)
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), full], check=True,
                       stdout=subprocess.DEVNULL)
        subprocess.run([sys.executable, "setup.py", "build_ext", "--inplace"], cwd=tree, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        # its bytecode too, as scripts/bootstrap.sh compiles this tree's
        subprocess.run([sys.executable, "-m", "compileall", "-q", "jobs", "store_reader", "schemas"], cwd=tree,
                       check=True, stdout=subprocess.DEVNULL)
        (tree / ".built").touch()
    return tree
