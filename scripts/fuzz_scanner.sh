#!/usr/bin/env bash
# Sanitizer fuzz run of the native commitlog scanner.
#   1. build store_reader._native with -fsanitize=address,undefined into a temporary directory
#      (never into the tree), next to a copy of the Python packages;
#   2. run tests/fuzz_scanner.py against that build with gcc's ASan runtime preloaded into the
#      interpreter and every Python allocation going through malloc (so ASan sees the buffers).
# Usage: scripts/fuzz_scanner.sh [N inputs (default 20000)] [seed (default 1)]
set -euo pipefail
cd "$(dirname "$0")/.."
inputs=${1:-${FUZZ_INPUTS:-20000}}
seed=${2:-${FUZZ_SEED:-1}}
python=${PYTHON:-.venv/bin/python}

tmp=$(mktemp -d "${TMPDIR:-/tmp}/fuzz-scanner.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/lib"
cp -r store_reader schemas "$tmp/lib/"
rm -f "$tmp"/lib/store_reader/_native*.so

echo "== building the scanner with ASan + UBSan in $tmp =="
san="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer -g"
CFLAGS="$san" LDFLAGS="$san" "$python" setup.py -q build_ext --force \
    --build-temp "$tmp/build" --build-lib "$tmp/lib" >"$tmp/build.log" 2>&1 || {
    cat "$tmp/build.log" >&2; exit 3; }

asan=$(gcc -print-file-name=libasan.so)
if [ ! -e "$asan" ]; then
    echo "error: gcc's ASan runtime not found (apt-get install -y gcc)" >&2
    exit 3
fi

echo "== fuzzing: $inputs inputs, seed $seed =="
ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:allocator_may_return_null=1 \
UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
PYTHONMALLOC=malloc LD_PRELOAD="$asan" PYTHONPATH="$tmp/lib" FUZZ_NATIVE_DIR="$tmp/lib" \
    "$python" tests/fuzz_scanner.py --inputs "$inputs" --seed "$seed"
