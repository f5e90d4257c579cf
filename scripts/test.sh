#!/usr/bin/env bash
# The project's test command (README, .ci/run): set up, then run every tier, slow ones included.
#   0. the real-broker oracle built (scripts/build_oracle.sh: the release jars from Maven Central,
#      cached; its tier is tests/test_real_broker.py, marker oracle);
#   1. the whole suite with the native scanner;
#   2. the store_reader tests again with the pure-Python twin (STORE_READER_PURE=1).
# Extra arguments go to both pytest runs.
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh || exit $?
# The placement tests clone commitlog files on a real reflink filesystem (XFS on a loop device):
# as root with apt-get, install its mkfs when missing; elsewhere those two tests skip, saying why.
if [ "$(id -u)" = 0 ] && ! command -v mkfs.xfs >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
    apt-get install -y -q xfsprogs >/dev/null 2>&1 ||
        { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q xfsprogs >/dev/null 2>&1; } ||
        echo "note: xfsprogs could not be installed; the XFS reflink placement tests will skip"
fi
echo "== real-broker oracle (rocketmq-store release jars) =="
bash scripts/build_oracle.sh || exit 1
export PYSPARK_PYTHON="$PWD/.venv/bin/python" PYSPARK_DRIVER_PYTHON="$PWD/.venv/bin/python"

echo "== tests (native scanner) =="
.venv/bin/python -m pytest -m "" "$@"
native=$?
echo "== store_reader tests (pure-Python twin, STORE_READER_PURE=1) =="
STORE_READER_PURE=1 .venv/bin/python -m pytest -m "reader" "$@"
pure=$?
[ $native -eq 0 ] && [ $pure -eq 0 ]
