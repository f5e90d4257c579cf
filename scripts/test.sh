#!/usr/bin/env bash
# The project's test command (README, .ci/run): set up, then run every tier, slow ones included.
#   0. the set-up (scripts/bootstrap.sh: with it the driver JVM's class-data-sharing archive, which
#      every Spark session the tests start maps: ~5 s less a start; test_write_path.py checks it)
#      and the real-broker oracle built (scripts/build_oracle.sh: the release jars from Maven
#      Central, cached; its tier is tests/test_real_broker.py, marker oracle);
#   1. the whole suite with the native scanner;
#   2. the store_reader tests again with the pure-Python twin (STORE_READER_PURE=1), beside tier 1.
# Extra arguments go to both pytest runs.
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh || exit $?
# System packages three kinds of tests need, installed when missing, as root with apt-get; the
# console says which and why before anything is installed. Elsewhere those tests skip, saying why.
declare -A why=(
    [xfsprogs]="mkfs.xfs: the placement tests clone commitlog files on a real reflink filesystem (XFS on a loop device)"
    [chromium]="a real browser: the report page test renders the page headless and screenshots it"
    [strace]="the kill campaigns (test_apply_kills.py, test_salvage.py) kill real processes at chosen syscalls"
)
missing=()
command -v mkfs.xfs >/dev/null 2>&1 || missing+=(xfsprogs)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v strace >/dev/null 2>&1 || missing+=(strace)
if [ ${#missing[@]} -gt 0 ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing with apt-get (as root) what some tests need:"
    for p in "${missing[@]}"; do echo "  $p: ${why[$p]}"; done
    apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null 2>&1 ||
        { apt-get update -q >/dev/null 2>&1 &&
          apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null 2>&1; } ||
        echo "note: ${missing[*]} could not be installed; the tests that need them will skip"
elif [ ${#missing[@]} -gt 0 ]; then
    echo "note: not installed (apt-get as root would install them): ${missing[*]}; the tests that need them skip"
fi
echo "== real-broker oracle (rocketmq-store release jars) =="
bash scripts/build_oracle.sh || exit 1
export PYSPARK_PYTHON="$PWD/.venv/bin/python" PYSPARK_DRIVER_PYTHON="$PWD/.venv/bin/python"

# The pure tier is Spark-free and CPU-bound; it runs beside the native tier, whose Spark jobs, JVM
# starts and oracle runs leave a core idle much of the time. Its output is printed after.
pure_log=$(mktemp)
STORE_READER_PURE=1 .venv/bin/python -m pytest -m "reader" -p no:cacheprovider "$@" >"$pure_log" 2>&1 &
pure_pid=$!
# an interrupted run does not leave the pure tier running on its own
trap 'kill "$pure_pid" 2>/dev/null; rm -f "$pure_log"' EXIT
echo "== tests (native scanner) =="
.venv/bin/python -m pytest -m "" "$@"
native=$?
wait $pure_pid
pure=$?
echo "== store_reader tests (pure-Python twin, STORE_READER_PURE=1), run beside the native tier =="
cat "$pure_log"
[ $native -eq 0 ] && [ $pure -eq 0 ]
