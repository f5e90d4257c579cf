#!/usr/bin/env bash
# The project's main command (README): set up, then run the recovery job on the embedded default,
# a sample store with a simulated crash made by the synthetic writer, on local Spark.
# Extra arguments go to jobs.recover (e.g. --store DIR --out DIR --broker-config FILE).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh >&2       # its lines on stderr: stdout is the report
export PYSPARK_PYTHON="$PWD/.venv/bin/python" PYSPARK_DRIVER_PYTHON="$PWD/.venv/bin/python"
if [ $# -eq 0 ]; then
    set -- --demo demo-output
fi
exec .venv/bin/python -m jobs.recover "$@"
