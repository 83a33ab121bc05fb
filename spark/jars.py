"""The Spark connector jars, fetched from Maven Central through ``spark/pom.xml``.

The Kafka source and sink (``spark-sql-kafka-0-10``) and Avro (``spark-avro``) are not part
of the pyspark wheel. :func:`fetch` runs ``mvn dependency:copy-dependencies`` once into
``$DLS_CACHE/spark-libs`` (default ``<repo>/.cache/spark-libs``, beside the Kafka jars);
:func:`spark_jars` lists the jars to hand to Spark as ``spark.jars``, leaving out every
artifact that pyspark already ships (scala-library, hadoop-client, ...) so that no class
comes twice. Spark itself never downloads anything.

``python -m spark.jars`` fetches (when needed) and prints the jars, one per line.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterable
from pathlib import Path

from spark.exceptions import SparkJarsError, SparkJobError

__all__ = [
    "POM",
    "SparkJarsError",
    "fetch",
    "libs_dir",
    "pom_spark_version",
    "pyspark_jars_dir",
    "spark_jars",
]

POM: Path = Path(__file__).resolve().parent / "pom.xml"
"""The pom whose runtime dependencies are the connector jars."""
_REPO = Path(__file__).resolve().parents[1]
_STAMP = ".complete"
# artifact-1.2.3.jar, artifact_2.13-4.2.0.jar, artifact-1.1.10.5.jar, artifact-3.0.0-M1.jar
_JAR_RE = re.compile(r"^(?P<artifact>.+?)-(?P<version>\d[^-]*(?:-[A-Za-z][A-Za-z0-9.]*)?)\.jar$")


def libs_dir() -> Path:
    """Where the connector jars live: ``$DLS_CACHE/spark-libs`` (default ``<repo>/.cache``)."""
    root = os.environ.get("DLS_CACHE", "").strip()
    return (Path(root) if root else _REPO / ".cache") / "spark-libs"


def pom_spark_version(pom: Path = POM) -> str:
    """The ``spark.version`` property of the pom."""
    m = re.search(r"<spark\.version>([^<]+)</spark\.version>", pom.read_text())
    if m is None:
        raise SparkJarsError(f"{pom}: no <spark.version> property")
    return m.group(1).strip()


def pyspark_jars_dir() -> Path:
    """The ``jars`` folder of the installed pyspark."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent / "jars"


def _artifact(name: str) -> str:
    m = _JAR_RE.match(name)
    return m.group("artifact") if m else name.removesuffix(".jar")


def _check_version() -> None:
    import pyspark

    want = pom_spark_version()
    if pyspark.__version__ != want:
        raise SparkJarsError(
            f"pyspark is {pyspark.__version__} but {POM} fetches the {want} connectors; "
            f"make them equal (pyproject.toml pins pyspark)")


def fetch(*, force: bool = False, mvn: str | None = None) -> Path:
    """Fetch the connector jars into :func:`libs_dir` unless they are already there.

    Idempotent and safe to run from several processes at once (a file lock); a fetch that
    fails leaves nothing behind. Returns the folder.

    Raises:
        SparkJarsError: Maven is missing or failed, or the pom's Spark version is not the
            installed pyspark's.
    """
    _check_version()
    target = libs_dir()
    if not force and (target / _STAMP).is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / ".spark-libs.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not force and (target / _STAMP).is_file():
            return target  # another process fetched while we waited
        binary = mvn or os.environ.get("MVN") or shutil.which("mvn")
        if binary is None:
            raise SparkJarsError("Maven (mvn) is needed once to fetch the Spark connector "
                                 "jars from Maven Central; install it or set MVN")
        tmp = target.parent / f"spark-libs.tmp.{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        cmd = [binary, "-q", "-B", "-f", str(POM), "dependency:copy-dependencies",
               f"-DoutputDirectory={tmp}", "-DincludeScope=runtime"]
        # Fixed argv, no shell; the binary is the user's mvn.
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)  # noqa: S603
        if done.returncode != 0:
            shutil.rmtree(tmp, ignore_errors=True)
            raise SparkJarsError(f"{' '.join(cmd)} failed ({done.returncode}):\n"
                                 f"{(done.stdout + done.stderr)[-2000:]}")
        (tmp / _STAMP).write_text(pom_spark_version() + "\n")
        shutil.rmtree(target, ignore_errors=True)
        tmp.rename(target)
    return target


def spark_jars(*, fetch_missing: bool = True) -> list[Path]:
    """The connector jars for ``spark.jars``, sorted, without what pyspark already has.

    Raises:
        SparkJarsError: The jars are not there (and ``fetch_missing`` is False, or the
            fetch failed), or the Kafka connector is missing from them.
    """
    folder = fetch() if fetch_missing else libs_dir()
    if not (folder / _STAMP).is_file():
        raise SparkJarsError(f"{folder} holds no fetched jars; run `make setup` or "
                             f"`python -m spark.jars`")
    shipped = {_artifact(p.name) for p in pyspark_jars_dir().glob("*.jar")}
    jars = sorted(p for p in folder.glob("*.jar") if _artifact(p.name) not in shipped)
    if not any(p.name.startswith("spark-sql-kafka-0-10_") for p in jars):
        raise SparkJarsError(f"{folder} lacks spark-sql-kafka-0-10; refetch with "
                             f"`python -m spark.jars --force`")
    return jars


def tool_main(job: Callable[[bool], Iterable[Path]], argv: list[str] | None,
              error: type[SparkJobError]) -> int:
    """Run ``job(force)`` (``force``: ``--force`` is an argument) and print its paths.

    Returns the exit status: 0, or 1 after printing an ``error`` the job raised.
    """
    args = sys.argv[1:] if argv is None else argv
    try:
        for p in job("--force" in args):
            print(p)
    except error as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    """Fetch (``--force``: again) and print the jars."""

    def job(force: bool) -> list[Path]:
        if force:
            fetch(force=True)
        return spark_jars()

    return tool_main(job, argv, SparkJarsError)


if __name__ == "__main__":
    raise SystemExit(main())
