"""scripts/build_oracle.sh when Maven Central cannot be reached: one line naming what failed,
exit 1, and no version directory left behind (the real mvn, pointed at a repository that is not
there)."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

import oracle

pytestmark = pytest.mark.oracle


def test_unreachable_maven_central_is_one_line_and_leaves_nothing(tmp_path):
    settings = tmp_path / "settings.xml"
    settings.write_text(f"<settings><localRepository>{tmp_path / 'repo'}</localRepository><mirrors><mirror>"
                        "<id>gone</id><mirrorOf>*</mirrorOf><url>http://127.0.0.1:9/</url></mirror></mirrors>"
                        "</settings>")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    # the real mvn, with settings whose only repository refuses connections
    (bin_dir / "mvn").write_text(f"#!/bin/sh\nexec {shutil.which('mvn')} -s {settings} \"$@\"\n")
    (bin_dir / "mvn").chmod(0o755)
    home = tmp_path / "oracle-home"
    p = subprocess.run(["bash", str(oracle.ROOT / "scripts" / "build_oracle.sh"), "5.5.1"], capture_output=True,
                       text=True, env=dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}",
                                           ROCKETMQ_ORACLE_HOME=str(home)))
    assert p.returncode == 1
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: build_oracle: mvn could not resolve "
                                                   "org.apache.rocketmq:rocketmq-store:5.5.1"), p.stderr
    assert sorted(x.name for x in home.iterdir()) == [".lock"]
    assert not any(Path(home).glob("5.5.1*"))


def test_unsupported_version_is_refused():
    with pytest.raises(oracle.OracleError, match="unsupported broker version 5.2.0"):
        oracle.classpath("5.2.0")
