"""The secure local Kafka (``SECURE=1 docker/kafka/kafka.sh up``) for the security tests.

``secure_kafka`` starts it once per session on ``127.0.0.1:$DLS_TEST_SECURE_KAFKA_PORT``
(default 19392, beside the plaintext test broker's 19092) unless it already answers, and
stops it at the end if this session started it. It yields the bootstrap servers and the
super user's settings file. It needs Java 17+ and openssl (no Docker: testcontainers has
no SCRAM/ACL profile here).
"""

from __future__ import annotations

import gc
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from connectors.local_kafka import (
    ensure_local_kafka,
    port_answers,
    secure_admin_properties,
    stop_local_kafka,
)
from tests.containers import local_kafka_port


def _warm_group_coordinator(bootstrap: str, admin_file: Path, timeout: float = 90.0) -> None:
    """Commit once as admin, so that ``__consumer_offsets`` exists and is loaded.

    On a fresh broker the first group use creates it; until then a commit answers "waiting
    for coordinator", and a client denied a group may get only that, never the
    authorization error the tests look for.
    """
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    from connectors.kafka import consumer_config, ensure_topics
    from connectors.kafka_config import load_kafka_config

    conf = load_kafka_config(admin_file)
    ensure_topics(bootstrap, ["dls-secure-warmup"], kafka=conf)
    consumer = Consumer(consumer_config(bootstrap, "dls-secure-warmup", **conf))
    deadline = time.monotonic() + timeout
    try:
        while True:
            try:
                consumer.commit(offsets=[TopicPartition("dls-secure-warmup", 0, 0)],
                                asynchronous=False)
                return
            except KafkaException:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
    finally:
        consumer.close()


@pytest.fixture(scope="session")
def secure_kafka() -> Iterator[tuple[str, Path]]:
    """``(bootstrap, admin.properties)`` of the secure local Kafka, for the whole session."""
    port = local_kafka_port(secure=True)
    started_here = not port_answers(port)
    bootstrap = ensure_local_kafka(port, secure=True)
    _warm_group_coordinator(bootstrap, secure_admin_properties())
    try:
        yield bootstrap, secure_admin_properties()
    finally:
        if started_here and "PYTEST_XDIST_WORKER" not in os.environ:
            gc.collect()  # clients of the tests go while the broker still answers
            stop_local_kafka(port, secure=True)
