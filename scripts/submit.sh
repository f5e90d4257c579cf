#!/usr/bin/env bash
# spark-submit from the clone (docs/recovery.md): the .venv's Spark and
# Python (bare `.venv/bin/spark-submit` looks for SPARK_HOME with the python3 on PATH, which lacks
# pyspark: "Could not find valid SPARK_HOME"), the embedded default's settings (spark-conf/local.conf:
# without them spark-submit runs the jobs with Spark's own defaults, 2-3 times slower on a small
# store) and the console of spark-conf/log4j2.properties. Arguments go to spark-submit (a --conf
# there overrides), e.g.  bash scripts/submit.sh jobs/recover.py --store DIR --dry-run
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
[ -x "$root/.venv/bin/python" ] || bash "$root/scripts/bootstrap.sh" >&2
py="$root/.venv/bin/python"
export PYSPARK_PYTHON="${PYSPARK_PYTHON:-$py}" PYSPARK_DRIVER_PYTHON="${PYSPARK_DRIVER_PYTHON:-$py}"
export SPARK_HOME="${SPARK_HOME:-$("$py" -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')}"
conf="$root/spark-conf/local.conf"
java_opts="$(sed -n 's/^spark\.driver\.extraJavaOptions[[:space:]]\{1,\}//p' "$conf")"
# the java launcher's own start-up warning (Spark's --add-modules), printed before anything the
# job controls, is dropped from stderr
exec "$root/.venv/bin/spark-submit" --properties-file "$conf" \
    --conf "spark.driver.extraJavaOptions=$java_opts -Dlog4j2.configurationFile=$root/spark-conf/log4j2.properties" "$@" \
    2> >(grep --line-buffered -v '^WARNING: Using incubator modules: ' >&2)
