"""The first build of a fresh checkout prints no warning (issue 37, 3): the editable install
scripts/bootstrap.sh makes, built by setuptools with every warning an error."""
from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BUILD_INPUTS = ("pyproject.toml", "setup.py", "README.md", "store_reader", "schemas", "jobs")


@pytest.mark.slow
def test_the_editable_build_prints_no_warning(tmp_path):
    src = tmp_path / "checkout"
    tracked = subprocess.run(["git", "ls-files", *BUILD_INPUTS], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout.split()
    for rel in tracked:
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, src / rel)
    dist = tmp_path / "dist"
    done = subprocess.run([sys.executable, "-W", "error", "-c",
                           f"from setuptools import build_meta; print(build_meta.build_editable({str(dist)!r}))"],
                          cwd=src, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "warning" not in (done.stdout + done.stderr).lower(), done.stdout + done.stderr
    # a .pth naming the checkout, under which its packages import; the scanner built beside its sources
    with zipfile.ZipFile(dist / done.stdout.split()[-1]) as wheel:
        (pth,) = [n for n in wheel.namelist() if n.endswith(".pth")]
        assert wheel.read(pth).decode().split() == [str(src.resolve())]
    assert list((src / "store_reader").glob("_native.*.so"))
