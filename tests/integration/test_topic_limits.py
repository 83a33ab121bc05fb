"""Topics that take smaller messages than a broker does, on a real Kafka.

Kafka applies a topic's ``max.message.bytes`` to a whole record batch, and librdkafka
packs many small messages into one batch: a delivery topic of 32 KiB refused a burst of
ordinary events, in a delivery report, and the node stopped (again at each restart). A
node reads what the topics it writes take when it starts, and keeps its messages and
batches below the smallest. A publisher is told of an event its topic refused.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from broker_node.exceptions import BrokerError
from broker_node.oversize import BATCH_FRAMING_BYTES, MIN_MESSAGE_BYTES
from connectors.client import Client, DeliveryFailedError
from connectors.topic_settings import record_batch_limits
from connectors.topics import Topics
from tests.integration.test_client import OneNode
from tests.integration.test_large_messages import dead_letters_after

pytestmark = pytest.mark.integration

SPEC = {"attributes": [{"name": "price", "type": "numeric", "low": 0, "high": 100,
                        "granules": 8}]}
SMALL = 32 * 1024  # a topic's max.message.bytes: 32 KiB


def _make(bootstrap: str, topics: dict[str, int], partitions: int = 1) -> None:
    """Create ``topics`` (name -> max.message.bytes) before any node does."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    new = [NewTopic(n, partitions, 1, config={"max.message.bytes": str(v)})
           for n, v in topics.items()]
    for future in admin.create_topics(new).values():
        future.result(30)


def _node(bootstrap: str, prefix: str, tmp_path: Path, **settings: object) -> OneNode:
    space = tmp_path / "space.json"
    space.write_text(json.dumps(SPEC))
    return OneNode(bootstrap, prefix, space, **{"exact_delivery": True, **settings})


def test_each_topic_and_broker_says_what_it_takes(kafka_bootstrap: str,
                                                  topic_prefix: str) -> None:
    t = Topics(topic_prefix)
    _make(kafka_bootstrap, {t.deadletter: 50_000, t.deliver("ann"): 60_000,
                            t.deliver("bob"): 70_000})
    limits, unread = record_batch_limits(
        kafka_bootstrap, [t.deadletter, t.shared_deliver], prefix=f"{t.prefix}.deliver.")
    assert unread == {}
    brokers = {k: v for k, v in limits.items() if k.startswith("broker ")}
    assert brokers and all(v > 100_000 for v in brokers.values())
    # the shared topic does not exist: a topic made later takes what its broker does
    assert {k: v for k, v in limits.items() if not k.startswith("broker ")} == {
        t.deadletter: 50_000, t.deliver("ann"): 60_000, t.deliver("bob"): 70_000}


@pytest.fixture(params=[(1, "exactly_once"), (1, "at_least_once"), (0, "exactly_once")],
                ids=["shared-eos", "shared-alo", "own-topic-eos"])
def small_node(request: pytest.FixtureRequest, kafka_bootstrap: str, topic_prefix: str,
               tmp_path: Path) -> Iterator[OneNode]:
    """Node A whose delivery topic for alice (the shared one, or her own) takes 32 KiB."""
    parts, delivery = request.param
    t = Topics(topic_prefix)
    _make(kafka_bootstrap, {t.shared_deliver if parts else t.deliver("alice"): SMALL})
    n = _node(kafka_bootstrap, topic_prefix, tmp_path, shared=parts, delivery=delivery)
    yield n
    n.stop()


def test_a_burst_of_events_reaches_a_client_whose_topic_takes_little(
        small_node: OneNode) -> None:
    """400 events of 1 KB (400 KB: batches far above 32 KiB before), then one of 40 KB."""
    assert small_node.service.limit.bytes == SMALL - BATCH_FRAMING_BYTES
    alice, feed = small_node.client("alice"), small_node.client("feed")
    try:
        alice.subscribe("price < 45", wait=30)
        sent = [feed.publish({"price": 10.0}, payload=b"p" * 1000) for _ in range(400)]
        large = feed.publish({"price": 10.0}, payload=b"L" * 40_000)  # one message: too large
        last = feed.publish({"price": 11.0})
        feed.flush()
        got: list[str] = []
        for d in alice.deliveries(timeout=0.5, max_idle=30.0):
            got.append(d.event_id)
            if d.event_id == last:
                break
    finally:
        alice.close()
        feed.close()
    assert not small_node.errors
    assert got == [*sent, last]  # each once, in order; the large one is a dead letter
    m = small_node.service.metrics
    assert (m.outputs_too_large, m.dead_letters) == (1, 1)
    assert large not in got


def test_a_dead_letter_fits_a_dead_letter_topic_that_takes_little(
        kafka_bootstrap: str, topic_prefix: str, tmp_path: Path) -> None:
    t = Topics(topic_prefix)
    _make(kafka_bootstrap, {t.deadletter: SMALL})
    node = _node(kafka_bootstrap, topic_prefix, tmp_path, shared=1)
    raw = b"\xff" * 100_000  # no Avro record: undecodable
    try:
        letters = dead_letters_after(node, raw)
    finally:
        node.stop()
    cut = (SMALL - BATCH_FRAMING_BYTES) // 2
    assert len(letters) == 1 and letters[0]["raw"] == raw[:cut]
    assert f"raw value cut to {cut:,} of 100,000 bytes" in letters[0]["reason"]


def test_a_topic_too_small_for_a_node_stops_it_at_start_naming_the_topic(
        kafka_bootstrap: str, topic_prefix: str, tmp_path: Path) -> None:
    t = Topics(topic_prefix)
    tiny = MIN_MESSAGE_BYTES + BATCH_FRAMING_BYTES - 1
    _make(kafka_bootstrap, {t.deadletter: tiny})
    with pytest.raises(BrokerError) as err:
        _node(kafka_bootstrap, topic_prefix, tmp_path, shared=1)
    assert (err.value.field, err.value.value) == ("max.message.bytes", t.deadletter)
    assert f"at most {tiny:,} bytes" in str(err.value)


def test_an_event_a_publish_topic_refuses_is_reported_to_its_publisher(
        kafka_bootstrap: str, topic_prefix: str, tmp_path: Path) -> None:
    """The broker refuses it after it left the client: flush says which (it said nothing)."""
    t = Topics(topic_prefix)
    _make(kafka_bootstrap, {t.node_publish("A"): SMALL})
    space = tmp_path / "space.json"
    space.write_text(json.dumps(SPEC))
    feed = Client(kafka_bootstrap, "A", "feed", space, topic_prefix=topic_prefix)
    try:
        feed.publish({"price": 10.0})
        feed.flush()  # a small one passes
        big = feed.publish({"price": 10.0}, payload=b"b" * 50_000)
        with pytest.raises(DeliveryFailedError) as err:
            feed.flush()
        assert err.value.event_ids == [big]
        assert err.value.value == t.node_publish("A")
        feed.publish({"price": 10.0})
        feed.flush()  # told once; the client goes on
    finally:
        feed.close()


def test_a_snapshot_fits_a_snapshot_topic_that_takes_little(
        kafka_bootstrap: str, topic_prefix: str, tmp_path: Path) -> None:
    """Chunks of 512 KiB did not fit a snapshot topic of 32 KiB: no snapshot was written."""
    from tests.integration.test_recovery import Node, Writer, _same

    _make(kafka_bootstrap, {Topics(topic_prefix).node_snapshot("A"): SMALL}, partitions=2)
    node = Node(kafka_bootstrap, topic_prefix, tmp_path, snapshot_every_messages=2000)
    w = Writer(kafka_bootstrap, topic_prefix, node.space)
    first = node.started()
    try:
        w.churn(rounds=4, subs=2000, unsubs=20)  # 8,000 subscriptions: ~100 KB
        node.run_until(first, w.written)
        assert first.snapshots is not None
        latest = first.snapshots.store.latest
        assert latest is not None, "no snapshot written"
        assert latest["chunks"] >= 2, latest["bytes"]  # each fits half a message
    finally:
        first.close()
    again = node.started(snapshot_every_messages=2000)
    try:
        assert again.snapshots is not None and again.snapshots.store.latest is not None
        _same(node, again, node.replayed())
    finally:
        again.close()
