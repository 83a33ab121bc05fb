"""The project's own JVM code for Spark: compiled from ``spark/jvm/src`` into a jar.

:mod:`spark.mapping` hands the common raw records to a Java UDF
(``dlsroute.spark.FastMap``, see its class comment) and runs its Catalyst mapping, built
once, on the rest as another (``dlsroute.spark.General``), so that each batch's plan is a
few expressions instead of thousands (see the module notes there). The source is
compiled with the JDK's ``javac`` against the jars pyspark ships (``pyspark/jars``),
nothing is downloaded, into ``$DLS_CACHE/spark-jvm/dlsroute-spark-<hash>.jar`` beside the
connector jars (default
``<repo>/.cache``); the hash covers the sources and the pyspark version, so an edited
source or another pyspark gets a new jar and a stale one is never used.

``make setup`` builds it (``python -m spark.jvm``); :func:`fast_jar` builds it on demand
when it is missing and a ``javac`` is there, and gives None otherwise (the mapping then
runs its Catalyst expressions alone).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from spark.exceptions import JvmBuildError

__all__ = ["FAST_CLASS", "SOURCES", "JvmBuildError", "build", "fast_jar", "jar_path"]

SOURCES: Path = Path(__file__).resolve().parent / "jvm" / "src"
"""The Java sources of the jar."""
FAST_CLASS = "dlsroute.spark.FastMap"
"""The UDF class of :mod:`spark.mapping`'s fast path."""


def _cache_dir() -> Path:
    from spark.jars import libs_dir

    return libs_dir().parent / "spark-jvm"


def _sources() -> list[Path]:
    return sorted(SOURCES.rglob("*.java"))


def jar_path() -> Path:
    """Where the jar of the current sources and pyspark goes (it may not exist yet)."""
    import pyspark

    h = hashlib.sha256(pyspark.__version__.encode())
    for p in _sources():
        h.update(p.relative_to(SOURCES).as_posix().encode() + b"\0" + p.read_bytes())
    return _cache_dir() / f"dlsroute-spark-{h.hexdigest()[:16]}.jar"


def build(*, force: bool = False, javac: str | None = None) -> Path:
    """Compile the sources into :func:`jar_path` unless it is there; returns the jar.

    Safe to run from several processes at once (a file lock); a failed build leaves nothing.

    Raises:
        JvmBuildError: No ``javac`` (JDK 17+), or it failed.
    """
    from spark.jars import pyspark_jars_dir

    target = jar_path()
    if target.is_file() and not force:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if target.is_file() and not force:
            return target
        binary = javac or os.environ.get("JAVAC") or shutil.which("javac")
        if binary is None:
            raise JvmBuildError("javac (a JDK 17+) is needed to build the mapping's Java UDF")
        with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
            classes = Path(tmp) / "classes"
            cmd = [binary, "--release", "17", "-nowarn", "-encoding", "UTF-8",
                   "-cp", str(pyspark_jars_dir() / "*"), "-d", str(classes),
                   *[str(p) for p in _sources()]]
            # Fixed argv, no shell; the binary is the user's javac.
            done = subprocess.run(cmd, capture_output=True, text=True, check=False)  # noqa: S603
            if done.returncode != 0:
                raise JvmBuildError(f"javac failed ({done.returncode}):\n"
                                    f"{(done.stdout + done.stderr)[-2000:]}")
            part = Path(tmp) / "out.jar"
            with zipfile.ZipFile(part, "w", zipfile.ZIP_DEFLATED) as z:
                z.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\n")
                for f in sorted(classes.rglob("*.class")):
                    z.write(f, f.relative_to(classes).as_posix())
            part.rename(target)
    return target


def fast_jar() -> Path | None:
    """The jar, built now if missing; None when it cannot be built (no JDK compiler)."""
    try:
        return build()
    except (JvmBuildError, OSError) as exc:
        print(f"spark.jvm: no fast path ({exc})", file=sys.stderr)
        return None


def main(argv: list[str] | None = None) -> int:
    """Build (``--force``: again) and print the jar."""
    from spark.jars import tool_main

    return tool_main(lambda force: [build(force=force)], argv, JvmBuildError)


if __name__ == "__main__":
    raise SystemExit(main())
