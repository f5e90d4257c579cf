"""Shared pytest fixtures: one Spark session per run, Hypothesis profiles, fixture-store access."""
from __future__ import annotations

import os
import sys

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile("ci", max_examples=300, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", max_examples=60, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))


@pytest.fixture(scope="session")
def spark():
    """The one local Spark session of this test run (created on first use)."""
    os.environ.setdefault("SPARK_TESTING", "1")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from jobs.sparkutil import get_spark

    session = get_spark(app_name="rocketmq-store-tests", extra={
        "spark.sql.shuffle.partitions": "4",
        "spark.ui.enabled": "false",
        "spark.sql.session.timeZone": "UTC",
    })
    yield session
    session.stop()
