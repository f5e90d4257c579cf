#!/usr/bin/env bash
# The project's test command (README, .ci/run): set up, then run every tier, slow ones included.
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
# The kill campaigns (tests/test_apply_kills.py, test_salvage.py) kill real processes at chosen
# syscalls with strace's fault injection: installed the same way when missing.
if [ "$(id -u)" = 0 ] && ! command -v strace >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
    apt-get install -y -q strace >/dev/null 2>&1 ||
        { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q strace >/dev/null 2>&1; } ||
        echo "note: strace could not be installed; the syscall kill campaigns will skip"
fi
export PYSPARK_PYTHON="$PWD/.venv/bin/python" PYSPARK_DRIVER_PYTHON="$PWD/.venv/bin/python"

echo "== tests (native scanner) =="
.venv/bin/python -m pytest -m "" "$@"
native=$?
echo "== store_reader tests (pure-Python twin, STORE_READER_PURE=1) =="
STORE_READER_PURE=1 .venv/bin/python -m pytest -m "reader" "$@"
pure=$?
[ $native -eq 0 ] && [ $pure -eq 0 ]
