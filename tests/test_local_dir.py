"""An embedded session's Spark scratch space (``spark.local.dir``: the block manager's files,
pyspark's temporary files) lies in a directory of its process's own, removed when the process
exits, and by the next session when the process and its JVM were killed (a killed JVM cannot
remove its ``blockmgr-*`` directory itself)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from jobs._spark.sparkutil import LOCAL_DIR_KIND

SESSION = ("import sys\n"
           "from jobs._spark.sparkutil import get_spark\n"
           "sc = get_spark('local-dir', session=False).sparkContext\n"
           "assert sc.parallelize(range(4), 2).map(lambda x: x + 1).sum() == 10\n"
           "print(sc.getConf().get('spark.local.dir'), flush=True)\n"
           "if sys.argv[1] == 'wait':\n"
           "    sys.stdin.read()\n")


def _session(tmp, how: str) -> subprocess.Popen:
    env = dict(os.environ, TMPDIR=str(tmp), PYSPARK_PYTHON=sys.executable)
    return subprocess.Popen([sys.executable, "-c", SESSION, how], env=env, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            start_new_session=True)


@pytest.mark.slow
def test_a_killed_sessions_scratch_space_is_removed_by_the_next_session(tmp_path):
    killed = _session(tmp_path, "wait")
    local_dir = killed.stdout.readline().strip()
    assert os.path.dirname(local_dir) == str(tmp_path)
    assert os.path.basename(local_dir).startswith(LOCAL_DIR_KIND)
    assert any(n.startswith("blockmgr-") for n in os.listdir(local_dir))   # Spark's own files are in it
    os.killpg(killed.pid, signal.SIGKILL)          # the job and its Spark JVM
    killed.wait()
    assert os.path.isdir(os.path.join(local_dir))   # nobody was left to remove it

    done = _session(tmp_path, "exit")
    own = done.stdout.readline().strip()
    assert done.wait(300) == 0
    assert own != local_dir
    # the killed session's directory went at the next session's start, the next one's at its exit
    assert [n for n in os.listdir(tmp_path) if n.startswith((LOCAL_DIR_KIND, "blockmgr-"))] == []
