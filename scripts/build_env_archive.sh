#!/usr/bin/env bash
# Build dist/rocketmq-store-env.tar.gz, the Python environment Spark executors (and cluster-mode
# drivers) run this project's jobs with:
#   spark-submit --archives dist/rocketmq-store-env.tar.gz#environment \
#                --conf spark.pyspark.python=./environment/bin/python ...
#
# 1. the project as a wheel (pip wheel --no-deps --no-build-isolation) from a clean copy of its
#    sources, native scanner compiled in, saved to dist/; checked to hold store_reader/_native*.so,
#    schemas/ and jobs/;
# 2. a fresh venv under build/env-archive/ with the wheel (NOT editable) and its runtime
#    dependencies at the versions installed in .venv (the tested ones, transitive ones included),
#    except pyspark and delta-spark: Spark puts its own pyspark (matching its JVM) on
#    every Python worker's path, and delta-spark's jars come from spark.jars.packages, so both would
#    be half a gigabyte shipped to every executor and never imported;
# 3. packed with venv-pack (the pinned `cluster` extra, installed into .venv when missing), which
#    rewrites the scripts' shebangs; the archive is unpacked into two directories in turn to check
#    that bin/python resolves and imports the packed project, not this checkout, wherever it lies.
#
# The archive holds no interpreter. Its bin/python is scripts/env_python.sh instead of venv's link
# to this machine's Python: it starts the node's Python 3.11 (the build's base Python where it
# exists, else $ROCKETMQ_ENV_PYTHON, else python3.11 on PATH) as the environment's interpreter, so
# the archive runs wherever a node keeps its Python 3.11. ENV_PYTHON_PREFIX=/usr names the nodes'
# prefix to try first instead of the build's (pyvenv.cfg's home, rewritten by venv-pack).
#
# Idempotent: nothing is rebuilt while the sources, pyproject.toml, setup.py, this script, the base
# Python, .venv's package versions and ENV_PYTHON_PREFIX are unchanged (their hash is kept beside
# the archive).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd -P)
archive=dist/rocketmq-store-env.tar.gz
key_file=dist/rocketmq-store-env.inputs.sha256
work=build/env-archive
py=.venv/bin/python

if [ ! -x "$py" ]; then
    echo "error: .venv is missing; run scripts/bootstrap.sh first." >&2
    exit 3
fi
mkdir -p build dist
exec 9>build/.env-archive.lock
flock 9                               # one build at a time (two test runs, CI and a developer)

base_prefix=$("$py" -c 'import sys; print(sys.base_prefix)')
# the build venv is made from it, so pyvenv.cfg's home is <base prefix>/bin (venv-pack's
# --python-prefix rewrites that prefix)
base_python=$base_prefix/bin/python
if [ ! -x "$base_python" ]; then
    echo "error: the base interpreter of .venv ($base_python) is missing" >&2
    exit 3
fi
python_prefix=${ENV_PYTHON_PREFIX:-}

# A clean copy of exactly what the wheel is built from: no stale build/lib, no in-place .so.
src=$work/src
rm -rf "$src"
mkdir -p "$src"
# The dependencies at the versions .venv runs the tests with (transitive ones included).
constraints=$work/constraints.txt
"$py" -m pip freeze --exclude-editable > "$constraints"
tar -c --exclude=__pycache__ --exclude='*.so' --exclude='*.pyc' \
    pyproject.toml setup.py README.md store_reader schemas jobs | tar -x -C "$src"

key=$( {
    sha256sum scripts/build_env_archive.sh scripts/env_python.sh | cut -c1-64
    "$base_python" -c 'import sys; print(sys.version)'
    echo "prefix=${python_prefix:-$base_prefix}"
    cat "$constraints"
    (cd "$src" && find . -type f ! -name README.md | LC_ALL=C sort | xargs sha256sum)
} | sha256sum | cut -c1-64)

report() {
    echo "environment archive: $root/$archive ($(du -h "$archive" | cut -f1), $(stat -c %s "$archive") bytes)"
}
if [ -f "$archive" ] && [ -f "$key_file" ] && [ "$(cat "$key_file")" = "$key" ]; then
    echo "up to date (inputs $key)"
    report
    exit 0
fi
rm -f "$key_file"

# venv-pack at the version pinned in pyproject's `cluster` extra.
venv_pack_req=$("$py" -c '
import tomllib
extra = tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["cluster"]
print(next(r for r in extra if r.startswith("venv-pack")))')
if ! "$py" -c "import importlib.metadata as m, sys; sys.exit(m.version('venv-pack') != '${venv_pack_req#venv-pack==}')" 2>/dev/null; then
    echo "installing $venv_pack_req into .venv"
    "$py" -m pip install -q "$venv_pack_req"
fi

echo "== wheel =="
rm -rf "$work/wheel"
(cd "$src" && "$root/$py" -m pip wheel -q --no-deps --no-build-isolation -w "$root/$work/wheel" .)
wheels=("$work"/wheel/rocketmq_store_recovery-*.whl)
if [ ${#wheels[@]} -ne 1 ] || [ ! -f "${wheels[0]}" ]; then
    echo "error: expected one project wheel in $work/wheel, found: ${wheels[*]}" >&2
    exit 1
fi
rm -f dist/rocketmq_store_recovery-*.whl
mv "${wheels[0]}" dist/
wheel=dist/$(basename "${wheels[0]}")
"$py" - "$wheel" <<'EOF'
import fnmatch, sys, zipfile

names = zipfile.ZipFile(sys.argv[1]).namelist()
missing = [p for p in ("store_reader/_native*.so", "store_reader/audit/__init__.py", "schemas/__init__.py",
                       "jobs/__init__.py",
                       "jobs/recover.py") if not fnmatch.filter(names, p)]
if missing:
    sys.exit(f"error: {sys.argv[1]} lacks {missing}")
print(f"{sys.argv[1]}: {len(names)} files, native scanner "
      f"{fnmatch.filter(names, 'store_reader/_native*.so')[0]}")
EOF

echo "== venv =="
venv=$work/venv
rm -rf "$venv"
"$base_python" -m venv --without-pip "$venv"
# The runtime requirements as the wheel declares them, less what the cluster's Spark provides.
reqs_text=$("$py" - "$wheel" <<'EOF'
import sys, zipfile
from email.parser import Parser
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

PROVIDED_BY_SPARK = {"pyspark", "delta-spark"}
with zipfile.ZipFile(sys.argv[1]) as whl:
    meta = next(n for n in whl.namelist() if n.endswith(".dist-info/METADATA"))
    msg = Parser().parsestr(whl.read(meta).decode())
for line in msg.get_all("Requires-Dist") or []:
    req = Requirement(line)
    if req.marker is None and canonicalize_name(req.name) not in PROVIDED_BY_SPARK:
        print(req)
EOF
)
mapfile -t reqs <<< "$reqs_text"
pip_into=("$py" -m pip --python "$venv/bin/python" install -q --no-warn-script-location
          -c "$constraints")
"${pip_into[@]}" "${reqs[@]}"
"${pip_into[@]}" --no-deps "$wheel"
# informational only, and it names this machine's build directory
sed -i '/^command = /d' "$venv/pyvenv.cfg"
# the launcher in place of the links to this machine's interpreter (see the top)
rm -f "$venv/bin/python" "$venv/bin/python3" "$venv/bin/python3.11"
install -m 755 scripts/env_python.sh "$venv/bin/python"
ln -s python "$venv/bin/python3"
ln -s python "$venv/bin/python3.11"
echo "installed $(basename "$wheel") + ${reqs[*]}"

echo "== pack =="
partial=$archive.partial
# test suites and C++ headers of the dependencies: never imported, 70 MB unpacked
pack_args=(-p "$venv" -o "$partial" --format tar.gz --force --quiet
           --exclude 'lib/python3.11/site-packages/*/tests/*'
           --exclude 'lib/python3.11/site-packages/pyarrow/include/*')
if [ -n "$python_prefix" ]; then
    pack_args+=(--python-prefix "$python_prefix")
fi
.venv/bin/venv-pack "${pack_args[@]}"

# Unpack, check, move the directory elsewhere, check again: nothing may point back at build/ or
# at the first location.
check_env() {
    # -I: no PYTHONPATH, no user site, no current directory on sys.path.
    (cd "$1" && ./bin/python -I - "$1" <<'EOF'
import os, sys

env = os.path.realpath(sys.argv[1])
assert os.path.realpath(sys.prefix) == env, f"sys.prefix {sys.prefix} is not the unpacked {env}"
import jobs.recover, schemas, store_reader._native
for mod in (store_reader._native, schemas, jobs.recover):
    assert os.path.realpath(mod.__file__).startswith(env + os.sep), f"{mod.__name__} from {mod.__file__}"
print(f"runs from {env}: {sys.executable}, scanner {store_reader._native.__file__}")
EOF
    )
}
check=$(mktemp -d "$root/build/env-check.XXXXXX")
trap 'rm -rf "$check" "$partial"' EXIT
mkdir -p "$check/first/environment"
tar -xzf "$partial" -C "$check/first/environment"
stale=$(grep -rlIF "$root/$venv" "$check/first/environment" || true)
if [ -n "$stale" ]; then
    echo "error: files in the archive name the build venv $root/$venv:" >&2
    echo "$stale" >&2
    exit 1
fi
check_env "$check/first/environment"
mv "$check/first" "$check/moved"
check_env "$check/moved/environment"

mv "$partial" "$archive"
echo "$key" > "$key_file"
report
