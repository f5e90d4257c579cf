"""The Spark session the jobs and tests share: local by default, configured from ``spark-conf/``."""
from __future__ import annotations

import os
import re
import sys
from pathlib import Path

SPARK_CONF_DIR = Path(__file__).resolve().parent.parent / "spark-conf"


def read_conf(path: str | os.PathLike[str]) -> dict[str, str]:
    """A Spark properties file (``key value`` or ``key=value`` per line, ``#`` comments)."""
    out: dict[str, str] = {}
    with open(path, encoding="utf-8") as fh:
        for raw in fh:
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            m = re.match(r"(\S+?)\s*[=\s]\s*(.*)$", line)
            if m:
                out[m.group(1)] = m.group(2).strip()
    return out


def get_spark(app_name: str = "rocketmq-store", conf_file: str | os.PathLike[str] | None = None,
              extra: dict[str, str] | None = None):
    """Return the active SparkSession or build one.

    Under ``spark-submit`` the session already carries the cluster's settings, so only the app name
    is set. Embedded (``python -m jobs.x``, tests) the settings come from ``spark-conf/local.conf``
    (or ``conf_file``) plus ``extra``, and Python workers use this interpreter: otherwise they may
    start another Python that lacks this project's packages.
    """
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    builder = SparkSession.builder.appName(app_name)
    if "SPARK_SUBMIT_OPTS" not in os.environ and not os.environ.get("SPARK_ENV_LOADED"):
        settings = read_conf(conf_file or SPARK_CONF_DIR / "local.conf")
        settings.setdefault("spark.pyspark.python", sys.executable)
        settings.setdefault("spark.pyspark.driver.python", sys.executable)
        settings.update(extra or {})
        for key, value in settings.items():
            builder = builder.config(key, value)
    return builder.getOrCreate()


def has_delta(spark) -> bool:
    """True when delta-spark's classes are on the session's classpath."""
    try:
        spark._jvm.java.lang.Class.forName("io.delta.tables.DeltaTable")
        return True
    except Exception:  # py4j raises its own error type for ClassNotFoundException
        return False
