"""Fixtures of the Spark tests: one local[2] SparkSession for the whole test session."""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest

from spark.session import spark_session


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    """A local[2] SparkSession with the Kafka and Avro connectors, stopped at session end."""
    if shutil.which("java") is None:
        pytest.skip("Spark needs Java 17+")
    session = spark_session("dlsroute-tests")
    try:
        yield session
    finally:
        session.stop()
