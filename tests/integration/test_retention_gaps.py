"""What retention deleted before a reader read it, on a real Kafka: said, counted, survived.

A consumer whose committed offset lies before its partition's first offset (the topic's
retention, or records deleted by hand, went past it) is moved on by librdkafka without an
error reaching the application: a node away longer than its publish topic's retention,
or a listener away longer than its delivery topic's, lost events without a word. Here the
records are deleted with ``DeleteRecords``, which moves the first offset as retention does.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient

from connectors.client import Client
from tests.integration.test_client import SPEC, OneNode

pytestmark = pytest.mark.integration


@pytest.fixture
def space(tmp_path: Path) -> Path:
    path = tmp_path / "space.json"
    path.write_text(json.dumps(SPEC))
    return path


@pytest.fixture
def node(kafka_bootstrap: str, topic_prefix: str, space: Path) -> Iterator[OneNode]:
    """Node A, its clients on the shared delivery topic (2 partitions)."""
    n = OneNode(kafka_bootstrap, topic_prefix, space, shared=2)
    yield n
    n.stop()


def _publish(node: OneNode, n: int, price: float = 10.0) -> list[str]:
    """``n`` events for alice, routed by node A before this returns."""
    before = node.service.metrics.events_in
    feed = node.client("feed")
    try:
        ids = [feed.publish({"price": price}) for _ in range(n)]
        feed.flush()
    finally:
        feed.close()
    deadline = time.monotonic() + 30
    while node.service.metrics.events_in < before + n and time.monotonic() < deadline:
        time.sleep(0.05)
    assert node.service.metrics.events_in == before + n
    time.sleep(0.3)  # their transaction commits
    return ids


def _delete_all(bootstrap: str, tp: TopicPartition) -> int:
    """Delete every record of a partition (its first offset becomes its end); the end."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    end = admin.list_offsets({TopicPartition(tp.topic, tp.partition): _latest()})
    high = next(iter(end.values())).result(10).offset
    done = admin.delete_records([TopicPartition(tp.topic, tp.partition, high)])
    next(iter(done.values())).result(10)
    return int(high)


def _latest() -> object:
    from confluent_kafka.admin import OffsetSpec

    return OffsetSpec.latest()


def _read(client: Client, n: int) -> list[str]:
    got: list[str] = []
    for d in client.deliveries(timeout=0.5, max_idle=10.0):
        got.append(d.event_id)
        if len(got) == n:
            break
    return got


def test_a_listener_away_past_retention_says_what_it_lost(
        node: OneNode, caplog: pytest.LogCaptureFixture) -> None:
    alice = node.client("alice")
    try:
        alice.subscribe("price < 45", wait=30)
        first = _publish(node, 3)
        assert _read(alice, 3) == first
        where = alice._delivery_partition()
    finally:
        alice.close()  # commits what it read
    _publish(node, 4)  # while alice is away
    _delete_all(node.bootstrap, where)  # retention goes past them
    last = _publish(node, 2)
    again = node.client("alice")
    try:
        with caplog.at_level(logging.ERROR, logger="connectors.retention"):
            assert _read(again, 2) == last
        assert again.lost_to_retention >= 4  # the 4 events, and their transaction markers
        assert f"client alice: {where.topic}[{where.partition}] offsets " in caplog.text
        assert "were deleted before they were read" in caplog.text
    finally:
        again.close()


def test_a_listener_that_falls_behind_retention_says_what_it_lost(
        kafka_bootstrap: str, topic_prefix: str, space: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    node = OneNode(kafka_bootstrap, topic_prefix, space)
    alice = node.client("alice")
    try:
        alice.subscribe("price < 45", wait=30)
        first = _publish(node, 3)
        assert _read(alice, 3) == first
        consumer, where = alice._consumer, alice._delivery_partition()
        assert consumer is not None
        consumer.pause([where])  # stops fetching: alice falls behind
        _publish(node, 4)
        _delete_all(node.bootstrap, where)
        last = _publish(node, 2)
        consumer.resume([where])
        with caplog.at_level(logging.ERROR, logger="connectors.retention"):
            assert _read(alice, 2) == last
        assert alice.lost_to_retention >= 4
        assert f"client alice: {where.topic}[{where.partition}] offsets " in caplog.text
    finally:
        alice.close()
        node.stop()


def test_a_node_away_past_retention_says_what_it_lost(
        kafka_bootstrap: str, topic_prefix: str, space: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    node = OneNode(kafka_bootstrap, topic_prefix, space)
    alice = node.client("alice")
    try:
        alice.subscribe("price < 45", wait=30)
        first = _publish(node, 3)
    finally:
        node.stop()  # commits what it read
    feed = node.client("feed")
    try:
        for _ in range(4):  # while the node is away
            feed.publish({"price": 10.0})
        feed.flush()
    finally:
        feed.close()
    _delete_all(kafka_bootstrap, TopicPartition(node.topics.node_publish("A"), 0))
    with caplog.at_level(logging.ERROR, logger="connectors.retention"):
        again = OneNode(kafka_bootstrap, topic_prefix, space)
    try:
        last = _publish(again, 2)
        assert again.service.metrics.retention_lost == 4  # no transaction markers there
        assert (f"node A: {again.topics.node_publish('A')}[0] offsets 3 to 6 were deleted"
                in caplog.text)
        assert _read(alice, 5) == first + last
    finally:
        alice.close()
        again.stop()


def test_a_node_that_falls_behind_retention_says_what_it_lost(
        kafka_bootstrap: str, topic_prefix: str, space: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    node = OneNode(kafka_bootstrap, topic_prefix, space)
    where = TopicPartition(node.topics.node_publish("A"), 0)
    ask, done = {"pause": threading.Event(), "resume": threading.Event()}, threading.Event()
    read = node.service._read

    def _read_between(consumer: Any, msgs: Any) -> Any:
        """Pause or resume the publish topic from the node's own thread, between batches."""
        for what, event in ask.items():
            if event.is_set():
                getattr(consumer, what)([where])
                event.clear()
                done.set()
        return read(consumer, msgs)

    node.service._read = _read_between  # type: ignore[method-assign]
    alice = node.client("alice")
    try:
        alice.subscribe("price < 45", wait=30)
        first = _publish(node, 3)
        ask["pause"].set()  # stops fetching its publish topic: the node falls behind
        assert done.wait(10)
        feed = node.client("feed")
        try:
            for _ in range(4):
                feed.publish({"price": 10.0})
            feed.flush()
        finally:
            feed.close()
        _delete_all(kafka_bootstrap, where)
        with caplog.at_level(logging.ERROR, logger="connectors.retention"):
            ask["resume"].set()
            last = _publish(node, 2)
        assert node.service.metrics.retention_lost == 4  # no transaction markers there
        assert f"node A: {where.topic}[0] offsets 3 to 6 were deleted" in caplog.text
        assert _read(alice, 5) == first + last
    finally:
        alice.close()
        node.stop()
