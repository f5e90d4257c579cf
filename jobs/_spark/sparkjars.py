"""The embedded session's extra jars: delta-spark (Spark's own Delta writer) and hadoop-aws (``s3a://``
audit paths), resolved from Maven Central by ``python -m jobs._spark.sparkjars`` (``scripts/bootstrap.sh``
runs it) into a cache directory, and found there by ``jobs._spark.sparkutil`` for ``spark.jars``.

The versions follow what is installed: delta-spark's the pip package's (``pyproject.toml`` pins
both to one that exists on PyPI and Maven Central), hadoop-aws's the Hadoop in pyspark's jars
(``hadoop-client-api-<v>.jar``), and the AWS SDK bundle the version hadoop-aws names. Maven resolves
their dependencies; those Spark's own jars already provide (Hadoop, Jackson, Parquet, Scala, ...) are
left out, as Spark's copies would win anyway. A directory is only ever there complete: it is built
under a temporary name and renamed into place, so an interrupted set-up leaves nothing half
installed, and a set-up that cannot reach Maven leaves no directory at all (the audit tables are
then written by delta-rs, ``jobs._spark.deltasink``).

``ROCKETMQ_JARS_DIR`` moves the cache (default ``$XDG_CACHE_HOME/rocketmq-store-recovery/jars``),
``ROCKETMQ_MAVEN_REPO`` names a mirror of Maven Central, ``ROCKETMQ_SPARK_JARS=off`` runs the
embedded session without them.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from importlib import metadata
from pathlib import Path

from jobs._spark import cds

DELTA_ARTIFACT = "io.delta:delta-spark_2.13"
HADOOP_AWS_ARTIFACT = "org.apache.hadoop:hadoop-aws"
MAVEN_CENTRAL = "https://repo1.maven.org/maven2"
# the goal by its full name: a repository that cannot be reached is then named in Maven's error
# ("Plugin ... could not be resolved"), not "No plugin found for prefix 'dependency'"
COPY_DEPENDENCIES = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy-dependencies"
_SPARK_JAR = re.compile(r"^(.*?)-\d")       # an artifact id from a Maven jar name: up to -<version>


def delta_version() -> str:
    return metadata.version("delta-spark")


def hadoop_version() -> str:
    """The Hadoop pyspark bundles: hadoop-aws must be the same version as hadoop-client."""
    for p in sorted(cds._spark_jars().glob("hadoop-client-api-*.jar")):
        return p.name[len("hadoop-client-api-"):-len(".jar")]
    raise RuntimeError(f"no hadoop-client-api jar in {cds._spark_jars()}")


def coordinates() -> list[str]:
    """The Maven coordinates the embedded session adds (a cluster passes the same to --packages)."""
    return [f"{DELTA_ARTIFACT}:{delta_version()}", f"{HADOOP_AWS_ARTIFACT}:{hadoop_version()}"]


def jar_dir() -> Path:
    """Where the jars for these versions are (or would be), one directory per version pair."""
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    root = os.environ.get("ROCKETMQ_JARS_DIR") or os.path.join(cache, "rocketmq-store-recovery", "jars")
    return Path(root) / f"delta-{delta_version()}-hadoop-{hadoop_version()}"


def jars() -> list[str]:
    """The installed jars for ``spark.jars`` (empty when not installed or turned off)."""
    if os.environ.get("ROCKETMQ_SPARK_JARS", "").lower() in ("off", "0", "false", "no"):
        return []
    try:
        d = jar_dir()
    except RuntimeError:        # a Spark without Hadoop's client jars: nothing matches it
        return []
    return sorted(str(p) for p in d.glob("*.jar")) if d.is_dir() else []


def _pom(coords: list[str], repo: str) -> str:
    deps = "".join(f"<dependency><groupId>{g}</groupId><artifactId>{a}</artifactId>"
                   f"<version>{v}</version></dependency>" for g, a, v in (c.split(":") for c in coords))
    repos = f"<id>central</id><url>{repo}</url>"
    return ('<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>'
            "<groupId>local</groupId><artifactId>rocketmq-store-jars</artifactId><version>1</version>"
            f"<repositories><repository>{repos}</repository></repositories>"
            f"<pluginRepositories><pluginRepository>{repos}</pluginRepository></pluginRepositories>"
            f"<dependencies>{deps}</dependencies></project>\n")


def install() -> str:
    """Resolve the jars into ``jar_dir()`` unless they are there; returns what happened, one line.
    Raises ``RuntimeError`` (one line: what failed) when Maven cannot resolve them."""
    target = jar_dir()
    if target.is_dir():
        return f"spark jars: {target} (present)"
    mvn = shutil.which("mvn")
    if mvn is None:
        raise RuntimeError("mvn is not on PATH (apt-get install -y maven)")
    coords = coordinates()
    repo = os.environ.get("ROCKETMQ_MAVEN_REPO") or MAVEN_CENTRAL
    target.parent.mkdir(parents=True, exist_ok=True)
    # beside the target (same filesystem: the rename is atomic); the Maven repository in it too, so
    # the jars are stored once, not again in ~/.m2
    work = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    try:
        (work / "pom.xml").write_text(_pom(coords, repo), encoding="utf-8")
        spark_has = sorted({m.group(1) for p in cds._spark_jars().glob("*.jar")
                            if (m := _SPARK_JAR.match(p.name))})
        p = subprocess.run([mvn, "-B", "-q", "-f", str(work / "pom.xml"),
                            f"-Dmaven.repo.local={work / 'm2'}", COPY_DEPENDENCIES,
                            f"-DoutputDirectory={work / 'jars'}", "-DincludeScope=runtime",
                            f"-DexcludeArtifactIds={','.join(spark_has)}"],
                           capture_output=True, text=True)
        if p.returncode != 0:
            lines = [ln.strip() for ln in (p.stdout + p.stderr).splitlines() if "[ERROR]" in ln]
            reason = re.sub(r"\x1b\[[0-9;]*m", "", lines[0] if lines else f"exit {p.returncode}")
            raise RuntimeError(f"mvn could not resolve {', '.join(coords)} from {repo}: "
                               f"{reason.replace('[ERROR]', '').strip()[:700]}")
        try:
            os.rename(work / "jars", target)
        except OSError:
            if not target.is_dir():     # else another set-up put the same jars in place first
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    n = len(list(target.glob("*.jar")))
    return f"spark jars: {n} jars for {', '.join(coords)} in {target}"


def main() -> int:
    try:
        print(install())
    except (RuntimeError, OSError) as exc:
        print(f"warning: no Delta/S3A jars for Spark: {exc}; the audit tables will be written by "
              "delta-rs", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
