#!/usr/bin/env bash
# Set up everything this project needs on a fresh machine, idempotently:
#   Java 17 check (Spark), a virtual environment in .venv, the pinned dependencies, and the native
#   scanner compiled from source by the package build (editable install).
#   Then the Delta and hadoop-aws jars for the embedded Spark, from Maven Central into a cache
#   directory (jobs/_spark/sparkjars.py); if Maven cannot be reached, one warning line and the audit tables
#   are written by delta-rs. Last the driver JVM's class-data-sharing archive (python -m jobs.buildcds,
#   cached per machine).
# Re-runs are cheap: the install step is skipped while pyproject.toml, setup.py and the C sources
# are unchanged.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v java >/dev/null 2>&1; then
    echo "error: Java 17 is required by Spark and was not found on PATH." >&2
    echo "       Debian/Ubuntu: apt-get install -y openjdk-17-jre-headless" >&2
    exit 3
fi
java_major=$(java -version 2>&1 | awk -F'"' '/version/ {split($2, v, "."); print v[1]; exit}')
if [ -z "$java_major" ] || [ "$java_major" -lt 17 ]; then
    echo "error: Java 17 or newer is required by Spark, found: $(java -version 2>&1 | head -n1)" >&2
    exit 3
fi

python_bin=${PYTHON:-}
if [ -z "$python_bin" ]; then
    for candidate in python3.11 python3; do
        if command -v "$candidate" >/dev/null 2>&1 &&
           "$candidate" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))'; then
            python_bin=$candidate; break
        fi
    done
fi
if [ -z "$python_bin" ]; then
    echo "error: Python 3.11 is required (set PYTHON=/path/to/python3.11)." >&2
    exit 3
fi
if ! command -v gcc >/dev/null 2>&1 && ! command -v cc >/dev/null 2>&1; then
    echo "error: a C compiler is needed to build the native scanner (apt-get install -y gcc)." >&2
    exit 3
fi

if [ ! -x .venv/bin/python ]; then
    "$python_bin" -m venv .venv
fi
stamp=.venv/.project-install-stamp
want=$(cat pyproject.toml setup.py store_reader/_native/*.c 2>/dev/null | sha256sum | cut -c1-64)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    .venv/bin/python -m pip install -q --upgrade pip
    .venv/bin/python -m pip install -q "setuptools>=68" wheel
    .venv/bin/python -m pip install -q --no-build-isolation -e ".[test]"
    echo "$want" > "$stamp"
fi
.venv/bin/python -c "import store_reader._native" || {
    echo "error: the native scanner did not build; see the pip output above." >&2; exit 3; }
# The project's bytecode, compiled ahead (only what changed): an editable install compiles none, and
# where PYTHONDONTWRITEBYTECODE is set every process (the driver, Spark's Python daemon, each CLI)
# would compile the project's modules again at each start.
.venv/bin/python -m compileall -q jobs store_reader schemas >/dev/null
# The notebooks' kernel (jobs/notebookkernel.py), where Jupyter and papermill from .venv find it
if .venv/bin/python -c "import ipykernel" 2>/dev/null; then
    .venv/bin/python -m jobs.notebookkernel install >/dev/null
fi
# Spark's own Delta writer and s3a:// (jobs/_spark/sparkjars.py): never fails the set-up, says what failed
.venv/bin/python -m jobs._spark.sparkjars
# The driver JVM's class-data-sharing archive for this JVM and these jars (jobs/_spark/cds.py), after
# the jars: built once per machine (about a minute), then every job's Spark session maps Spark's and
# Delta's classes from it instead of loading them from the jars (a 1.6 GB recovery ~4.5 s and
# ~4.5 CPU-s less, benchmarks/README.md); never fails the set-up, says what failed
if cds_archive=$(.venv/bin/python -m jobs.buildcds --if-missing | tail -n 1); then
    echo "driver JVM class-data-sharing archive: $cds_archive"
else
    echo "note: no class-data-sharing archive (the error above): every Spark session loads its classes from the jars"
fi
