"""The testcontainers path of ``kafka_bootstrap`` is taken whenever it can be: never a silent
fall-back to the local Kafka while an engine and the image are there."""

from __future__ import annotations

import importlib

import pytest

from tests import containers

pytestmark = pytest.mark.integration


def test_the_kafka_is_a_container_whenever_one_can_run(kafka_bootstrap: str) -> None:
    kind = containers.SESSION_KAFKA["kind"]
    choice = containers.kafka_choice()
    if kind == "given" or choice == "local":
        pytest.skip(f"the session's Kafka was chosen: {containers.SESSION_KAFKA['line']}")
    could = containers.engine_answers() and containers.image_present(
        containers.project_images()["DLS_KAFKA_IMAGE"])
    if choice == "testcontainers" or could:
        assert kind == "testcontainers", containers.SESSION_KAFKA["line"]
        # ... and the broker that answers is that container's, on the host's network
        docker = importlib.import_module("docker")
        client = docker.from_env(timeout=10)
        try:
            port = kafka_bootstrap.rpartition(":")[2]
            c = client.containers.get(f"dlsroute-test-kafka-{port}")
            assert c.status == "running"
            assert c.attrs["HostConfig"]["NetworkMode"] == "host"
        finally:
            client.close()
    else:
        assert kind == "local", containers.SESSION_KAFKA["line"]
