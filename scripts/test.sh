#!/usr/bin/env bash
# The project's test command (README, .ci/run): set up, then run every tier, slow ones included.
#   1. the whole suite with the native scanner;
#   2. the store_reader tests again with the pure-Python twin (STORE_READER_PURE=1).
# Extra arguments go to both pytest runs.
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh || exit $?
export PYSPARK_PYTHON="$PWD/.venv/bin/python" PYSPARK_DRIVER_PYTHON="$PWD/.venv/bin/python"

echo "== tests (native scanner) =="
.venv/bin/python -m pytest -m "" "$@"
native=$?
echo "== store_reader tests (pure-Python twin, STORE_READER_PURE=1) =="
STORE_READER_PURE=1 .venv/bin/python -m pytest -m "reader" "$@"
pure=$?
[ $native -eq 0 ] && [ $pure -eq 0 ]
