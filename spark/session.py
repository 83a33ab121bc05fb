"""One way to make a SparkSession for the project's jobs and tests.

:func:`spark_session` gives a session with the connector jars of :mod:`spark.jars` and the
project's own jar (:mod:`spark.jvm`) as local ``spark.jars`` (nothing is downloaded at run
time), few shuffle partitions (the jobs are
small and the machines have two cores), no UI, quiet logs, UTC timestamps, and the map-key
rule the DLS mapping relies on (a repeated JSON key keeps its last value, as Python's
``json`` does).
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["SESSION_CONF", "spark_session"]

SESSION_CONF: dict[str, str] = {
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.mapKeyDedupPolicy": "LAST_WIN",
    "spark.sql.variant.allowDuplicateKeys": "true",
    "spark.log.level": "WARN",
    "spark.driver.extraJavaOptions": "-Dlog4j2.level=WARN",
}
"""Settings of every session (the caller's ``conf`` overrides them)."""


def spark_session(app_name: str, *, master: str = "local[2]", kafka: bool = True,
                  conf: dict[str, str] | None = None) -> SparkSession:
    """A SparkSession (the running one if there is one) set up for the project.

    Args:
        app_name: The application name.
        master: Spark master URL.
        kafka: Put the Kafka and Avro connector jars on the classpath (fetching them once
            from Maven Central when they are missing), and the project's own jar
            (:mod:`spark.jvm`, built once when missing).
        conf: More settings, applied last.
    """
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    # Jobs talk to a local or named Kafka; bind the driver to loopback unless told otherwise.
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = SparkSession.builder.appName(app_name).master(master)
    settings = dict(SESSION_CONF)
    if kafka:
        from spark.jars import spark_jars
        from spark.jvm import fast_jar

        jars = spark_jars()
        # The mapping's Java UDFs (spark.mapping runs without them, only slower).
        fast = fast_jar()
        if fast is not None:
            jars.append(fast)
        settings["spark.jars"] = ",".join(str(p) for p in jars)
    settings.update(conf or {})
    for key, value in settings.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    for key in ("spark.sql.mapKeyDedupPolicy", "spark.sql.variant.allowDuplicateKeys"):
        session.conf.set(key, settings[key])
    return session
