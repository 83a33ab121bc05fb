"""Messages near Kafka's limits, on a real Kafka: none of them may stop a node.

* One shared-topic delivery names every client of its partition in a header. Thousands of
  long client names make that header larger than a message may be: the node spreads the
  names over several messages, each client named once.
* An event as large as a publisher's producer lets through still reaches its client,
  although the node adds a header to it.
* A bad message that large still goes to the dead letters (its raw bytes cut), and routing
  goes on.
* An event stamped hours ahead (Kafka refuses a record an hour ahead of its clock) is
  delivered, its copies stamped when sent.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from confluent_kafka import Consumer, KafkaException, Producer

from broker_node.oversize import DEAD_LETTER_RAW_BYTES
from broker_node.router import CLIENTS_HEADER_BYTES
from connectors.client import Client
from connectors.kafka import consume_batch, consumer_config
from connectors.serde import (
    decode_dead_letter,
    encode_label_subscription,
    encode_raw_event,
)
from connectors.topics import (
    HEADER_CLIENTS,
    HEADER_EVENT_ID,
    HEADER_LABEL,
    HEADER_ORIGIN,
    HEADER_PUBLISHED,
    decode_clients,
    encode_label,
)
from dls.mapping import event_label
from tests.integration.test_client import OneNode

pytestmark = pytest.mark.integration

SPEC = {"attributes": [{"name": "price", "type": "numeric", "low": 0, "high": 100,
                        "granules": 8}]}
N_CLIENTS = 6_000
NAME_CHARS = 180  # 6,000 names of 181 bytes with their commas: 1.09 MB in one header


def _node(bootstrap: str, prefix: str, tmp_path: Path, **settings: object) -> OneNode:
    """Node A with this file's settings: the exact check on (the default), as in production."""
    space = tmp_path / "space.json"
    space.write_text(json.dumps(SPEC))
    return OneNode(bootstrap, prefix, space, **{"exact_delivery": True, **settings})


@pytest.fixture(params=[(1, "exactly_once"), (1, "at_least_once"), (0, "exactly_once")],
                ids=["shared-eos", "shared-alo", "own-topic-eos"])
def node(request: pytest.FixtureRequest, kafka_bootstrap: str, topic_prefix: str,
         tmp_path: Path) -> Iterator[OneNode]:
    parts, delivery = request.param
    n = _node(kafka_bootstrap, topic_prefix, tmp_path, shared=parts, delivery=delivery)
    yield n
    n.stop()


def _largest_payload(client: Client) -> tuple[int, str]:
    """The largest payload ``client.publish`` sends (its producer's limit), and its id.

    Found with a producer of the same limit that reaches no broker (nothing is sent), on
    the message ``publish`` makes; then published once.
    """
    eid = uuid.uuid4().hex
    label = encode_label(event_label(client.space, {"price": 10.0}))
    headers = [(HEADER_LABEL, label), (HEADER_ORIGIN, b"A/" + client.client_id.encode()),
               (HEADER_EVENT_ID, eid.encode())]
    probe = Producer({"bootstrap.servers": "127.0.0.1:1", "log_level": 0})
    lo, hi = 900_000, 1_000_000
    while lo < hi:
        mid = (lo + hi + 1) // 2
        value = encode_raw_event("A", client.client_id, eid, {"price": 10.0}, b"p" * mid)
        try:
            probe.produce("probe", value, headers=headers)
            lo = mid
        except KafkaException:
            hi = mid - 1
    probe.purge()
    return lo, client.publish({"price": 10.0}, payload=b"p" * lo, event_id=eid)


def _until(client: Client, last: str) -> dict[str, int]:
    """Event id -> payload size of ``client``'s deliveries, up to the event ``last``."""
    got: dict[str, int] = {}
    for d in client.deliveries(timeout=0.5, max_idle=30.0):
        got[d.event_id] = len(d.payload)
        if d.event_id == last:
            break
    return got


def test_an_event_as_large_as_a_publisher_may_send_reaches_its_client(node: OneNode) -> None:
    alice, feed = node.client("alice"), node.client("feed")
    try:
        alice.subscribe("price < 45", wait=30)
        size, eid = _largest_payload(feed)
        feed.flush()
        last = feed.publish({"price": 11.0})  # routing goes on after it
        feed.flush()
        got = _until(alice, last)  # one partition: the large one comes before it
        assert got == {eid: size, last: 0}
    finally:
        alice.close()
        feed.close()
    assert node.service.metrics.dead_letters == 0


def test_a_bad_message_as_large_as_a_message_may_be_is_a_dead_letter(node: OneNode) -> None:
    raw = b"\xff" * 999_900  # no Avro record: undecodable; a dead letter holds more
    letters = dead_letters_after(node, raw)
    assert len(letters) == 1
    assert letters[0]["raw"] == raw[:DEAD_LETTER_RAW_BYTES]
    assert f"raw value cut to {DEAD_LETTER_RAW_BYTES:,} of 999,900 bytes" in letters[0]["reason"]


def dead_letters_after(node: OneNode, raw: bytes) -> list[dict[str, object]]:
    """Write ``raw`` as a subscription to node A; the dead letters once routing went on."""
    producer = Producer({"bootstrap.servers": node.bootstrap})
    producer.produce(node.topics.node_subscribe("A"), raw)
    assert producer.flush(30) == 0
    alice, feed = node.client("alice"), node.client("feed")
    try:
        alice.subscribe("price < 45", wait=30)  # applied after the bad message
        eid = feed.publish({"price": 10.0})
        feed.flush()
        assert _until(alice, eid) == {eid: 0}
    finally:
        alice.close()
        feed.close()
    consumer = Consumer(consumer_config(node.bootstrap, str(uuid.uuid4())))
    consumer.subscribe([node.topics.deadletter])
    letters = []
    deadline = time.monotonic() + 20
    while not letters and time.monotonic() < deadline:
        letters = [decode_dead_letter(m.value()) for m in consume_batch(consumer, 10, 0.5)]
    consumer.close()
    return letters


def _names() -> list[str]:
    return [f"c{i:05d}-" + "x" * (NAME_CHARS - 7) for i in range(N_CLIENTS)]


@pytest.mark.parametrize("exact", [False, True], ids=["by-label", "exact-check"])
def test_an_event_for_more_client_names_than_a_message_holds_reaches_each_once(
        kafka_bootstrap: str, topic_prefix: str, tmp_path: Path, exact: bool) -> None:
    names = _names()
    assert sum(len(n) + 1 for n in names) > 1_000_000 > 3 * CLIENTS_HEADER_BYTES
    node = _node(kafka_bootstrap, topic_prefix, tmp_path, shared=1,
                exact_delivery=exact)
    label = event_label(node.space, {"price": 10.0})
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    reached: list[str] = []
    messages = 0
    try:
        for i, name in enumerate(names):
            producer.produce(node.topics.node_subscribe("A"), encode_label_subscription(
                name, f"s{i}", np.array([label], dtype=np.uint64)))
        assert producer.flush(30) == 0
        deadline = time.monotonic() + 60
        while (len(node.service.state) < N_CLIENTS and not node.errors
               and time.monotonic() < deadline):
            time.sleep(0.2)
        assert len(node.service.state) == N_CLIENTS, node.errors
        publisher = node.client("pub")
        eid = publisher.publish({"price": 10.0})
        publisher.flush()
        publisher.close()
        consumer = Consumer(consumer_config(kafka_bootstrap, str(uuid.uuid4())))
        consumer.subscribe([node.topics.shared_deliver])
        try:
            deadline = time.monotonic() + 60
            while (len(reached) < N_CLIENTS and not node.errors
                   and time.monotonic() < deadline):
                for msg in consume_batch(consumer, 1000, 0.5):
                    headers = dict(msg.headers() or [])
                    if headers.get(HEADER_EVENT_ID) == eid.encode():
                        messages += 1
                        header = headers[HEADER_CLIENTS]
                        assert len(header) <= CLIENTS_HEADER_BYTES + NAME_CHARS + 1
                        reached.extend(decode_clients(header))
        finally:
            consumer.close()
    finally:
        producer.flush(5)
        node.stop()
    assert sorted(reached) == names  # every client, each once
    assert messages >= 3  # 1.09 MB of names in messages of at most ~256 KiB each



def test_an_event_stamped_hours_ahead_is_delivered_stamped_now(node: OneNode) -> None:
    """Kafka refuses a record stamped more than an hour ahead (and the whole batch with it):
    the node's copies of such an event are stamped when sent, and routing goes on."""
    alice, feed = node.client("alice"), node.client("feed")
    try:
        alice.subscribe("price < 45", wait=30)
        label = encode_label(event_label(node.space, {"price": 10.0}))
        ahead = int(time.time() * 1000) + 3 * 3600 * 1000
        producer = Producer({"bootstrap.servers": node.bootstrap})
        producer.produce(  # as the Spark job writes one: the publication time in a header
            node.topics.node_publish("A"),
            encode_raw_event("A", "feed", "ahead", {"price": 10.0}, b""),
            headers=[(HEADER_LABEL, label), (HEADER_ORIGIN, b"A/feed"),
                     (HEADER_EVENT_ID, b"ahead"), (HEADER_PUBLISHED, ahead.to_bytes(8, "big"))])
        assert producer.flush(30) == 0
        last = feed.publish({"price": 11.0})
        feed.flush()
        assert _until(alice, last) == {"ahead": 0, last: 0}
    finally:
        alice.close()
        feed.close()
    assert node.service.metrics.future_stamps == 1
