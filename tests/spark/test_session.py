"""The connector jars and the session: local jars only, nothing twice on the classpath."""

from __future__ import annotations

from pathlib import Path

import pyspark

from spark.jars import _artifact, pom_spark_version, pyspark_jars_dir, spark_jars


def test_pom_matches_pyspark() -> None:
    assert pom_spark_version() == pyspark.__version__


def test_jars_are_local_and_not_shipped_by_pyspark() -> None:
    jars = spark_jars()
    names = [p.name for p in jars]
    assert f"spark-sql-kafka-0-10_2.13-{pyspark.__version__}.jar" in names
    assert f"spark-avro_2.13-{pyspark.__version__}.jar" in names
    assert any(n.startswith("kafka-clients-") for n in names)
    shipped = {_artifact(p.name) for p in pyspark_jars_dir().glob("*.jar")}
    assert not {_artifact(n) for n in names} & shipped
    assert all(Path(p).is_file() for p in jars)


def test_artifact_names() -> None:
    assert _artifact("spark-sql-kafka-0-10_2.13-4.2.0.jar") == "spark-sql-kafka-0-10_2.13"
    assert _artifact("snappy-java-1.1.10.5.jar") == "snappy-java"
    assert _artifact("kafka-clients-3.9.2.jar") == "kafka-clients"


def test_session_has_the_connectors(spark) -> None:
    conf = spark.conf.get("spark.jars")
    assert "spark-sql-kafka-0-10" in conf and "spark-avro" in conf
    assert spark.conf.get("spark.sql.mapKeyDedupPolicy") == "LAST_WIN"
    from pyspark.sql import functions as F
    from pyspark.sql.avro.functions import to_avro

    row = spark.range(3).select(F.hex(to_avro(F.col("id"))).alias("h")).collect()
    assert [r.h for r in row] == ["00", "02", "04"]  # zigzag varints: the Avro jar is loaded
