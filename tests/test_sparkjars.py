"""The Delta and hadoop-aws jars of the embedded session (``jobs._spark.sparkjars``): resolved by Maven into
a cache directory that is only ever there complete, on the session's classpath with the Delta
configuration, and a set-up without Maven Central that says so in one line and leaves nothing."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from jobs._spark import sparkjars, sparkutil
from jobs._spark.sparkutil import SPARK_CONF_DIR, read_conf

ROOT = Path(__file__).resolve().parent.parent


def test_versions_follow_the_installed_packages():
    """delta-spark's jar is the pip package's version, hadoop-aws the Hadoop pyspark bundles."""
    from importlib import metadata

    import pyspark

    jars = {p.name for p in (Path(pyspark.__file__).parent / "jars").glob("hadoop-client-api-*.jar")}
    assert jars == {f"hadoop-client-api-{sparkjars.hadoop_version()}.jar"}
    assert sparkjars.coordinates() == [f"io.delta:delta-spark_2.13:{metadata.version('delta-spark')}",
                                       f"org.apache.hadoop:hadoop-aws:{sparkjars.hadoop_version()}"]


def test_the_embedded_session_loads_the_installed_jars():
    """What scripts/bootstrap.sh installed: Delta's and hadoop-aws' jars with what Spark lacks of their
    dependencies (the AWS SDK bundle), none Spark already has, and the Delta extension and catalog."""
    jars = sparkjars.jars()
    assert jars, f"no jars in {sparkjars.jar_dir()}: run scripts/bootstrap.sh"
    names = {Path(j).name for j in jars}
    assert {f"delta-spark_2.13-{sparkjars.delta_version()}.jar", f"delta-storage-{sparkjars.delta_version()}.jar",
            f"hadoop-aws-{sparkjars.hadoop_version()}.jar"} <= names
    assert any(n.startswith("bundle-2.") for n in names)          # software.amazon.awssdk:bundle
    assert not any(n.startswith(("hadoop-client-", "jackson-databind-", "scala-library-", "parquet-"))
                   for n in names)
    settings = sparkutil.embedded_settings()
    assert settings["spark.jars"].split(",") == jars
    assert {k: settings[k] for k in read_conf(SPARK_CONF_DIR / "delta.conf")} == read_conf(SPARK_CONF_DIR / "delta.conf")
    # jars given by the caller win, with no Delta settings added for them
    given = sparkutil.embedded_settings(extra={"spark.jars": "/opt/x.jar"})
    assert given["spark.jars"] == "/opt/x.jar" and "spark.sql.extensions" not in given


def test_without_maven_central_the_setup_says_so_and_installs_nothing(tmp_path):
    """An unreachable repository: exit 0 (the set-up goes on: delta-rs writes the tables), one
    warning line naming what failed, and no directory, complete or not, in the cache."""
    env = dict(os.environ, ROCKETMQ_JARS_DIR=str(tmp_path / "jars"), ROCKETMQ_MAVEN_REPO="http://127.0.0.1:9/maven2")
    p = subprocess.run([sys.executable, "-m", "jobs._spark.sparkjars"], env=env, capture_output=True, text=True,
                       cwd=ROOT, timeout=300)
    assert p.returncode == 0, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("warning: no Delta/S3A jars for Spark: mvn could not resolve"), p.stderr
    assert "http://127.0.0.1:9/maven2" in lines[0] and "delta-rs" in lines[0]
    assert list((tmp_path / "jars").iterdir()) == []
    # the embedded session then has no jars and no Delta settings
    env_jars = subprocess.run([sys.executable, "-c", "from jobs._spark import sparkutil; s = sparkutil.embedded_settings();"
                               "print('spark.jars' in s, 'spark.sql.extensions' in s)"],
                              env=env, capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert env_jars.stdout.split() == ["False", "False"], env_jars.stderr


@pytest.mark.spark
def test_the_test_session_writes_delta_through_spark(spark):
    """The suite's one session has delta-spark: every audit table the tests write goes through
    Spark's ``format("delta")``."""
    from jobs._spark.deltasink import has_delta

    assert has_delta(spark)
    assert spark.conf.get("spark.sql.catalog.spark_catalog") == "org.apache.spark.sql.delta.catalog.DeltaCatalog"
