"""Shared pytest fixtures: one Spark session per run, Hypothesis profiles, fixture-store access."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

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
    from jobs._spark.sparkutil import get_spark

    session = get_spark(app_name="rocketmq-store-tests", extra={
        "spark.sql.shuffle.partitions": "4",
        "spark.ui.enabled": "false",
        "spark.sql.session.timeZone": "UTC",
    })
    yield session
    session.stop()


class S3Server:
    """A real S3-compatible server (``moto_server``) on 127.0.0.1: ``endpoint`` and the ``env`` a
    job needs to reach it (what docs/remote-stores-and-clusters.md documents)."""

    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint
        self.env = {"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "testing",
                    "AWS_SECRET_ACCESS_KEY": "testing", "AWS_REGION": "us-east-1",
                    "AWS_DEFAULT_REGION": "us-east-1", "AWS_ALLOW_HTTP": "true"}

    def with_options(self, uri: str) -> str:
        """``uri`` with the server in its query (docs/remote-stores-and-clusters.md): all a job
        needs to reach it, with nothing in its environment (``bare_env``)."""
        host = self.endpoint.split("://", 1)[1]
        return f"{uri}?scheme=http&endpoint_override={host}&region=us-east-1"

    @staticmethod
    def bare_env() -> dict[str, str]:
        """This process's environment without any ``AWS_*`` variable."""
        return {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}

    def filesystem(self):
        import pyarrow.fs as pafs

        return pafs.S3FileSystem(endpoint_override=self.endpoint, scheme="http", access_key="testing",
                                 secret_key="testing", region="us-east-1", allow_bucket_creation=True)

    def upload(self, local: Path, bucket: str, key: str) -> str:
        """Copy the tree ``local`` to ``s3://bucket/key`` (the bucket made on first use)."""
        import pyarrow.fs as pafs

        fs = self.filesystem()
        fs.create_dir(bucket)
        pafs.copy_files(str(local), f"{bucket}/{key}", source_filesystem=pafs.LocalFileSystem(),
                        destination_filesystem=fs)
        return f"s3://{bucket}/{key}"


@pytest.fixture(scope="session")
def s3_server():
    """One ``moto_server`` per test session on a free port, stopped at the end."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = Path(sys.executable).parent / "moto_server"
    proc = subprocess.Popen([str(server), "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    endpoint = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(endpoint + "/moto-api/", timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"moto_server did not start on {endpoint}")
                time.sleep(0.1)
        yield S3Server(endpoint)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
