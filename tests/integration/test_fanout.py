"""An event for thousands of clients on the shared delivery topic, on a real Kafka.

One delivery message names every client of its partition in a header. Thousands of long
client names make that header larger than a Kafka message may be; the node must then
spread the names over several messages, each client named once, and keep routing.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from pathlib import Path

import numpy as np
import pytest
from confluent_kafka import Consumer, Producer

from broker_node.config import NodeSettings
from broker_node.router import CLIENTS_HEADER_BYTES
from broker_node.service import NodeService
from connectors.client import Client
from connectors.kafka import consume_batch, consumer_config
from connectors.serde import encode_label_subscription
from connectors.topics import HEADER_CLIENTS, HEADER_EVENT_ID, Topics, decode_clients
from dls.mapping import event_label
from dls.space import ContentSpace

pytestmark = pytest.mark.integration

SPEC = {"attributes": [{"name": "price", "type": "numeric", "low": 0, "high": 100,
                        "granules": 8}]}
N_CLIENTS = 6_000
NAME_CHARS = 180  # 6,000 names of 181 bytes with their commas: 1.09 MB in one header


def _names() -> list[str]:
    return [f"c{i:05d}-" + "x" * (NAME_CHARS - 7) for i in range(N_CLIENTS)]


@pytest.mark.parametrize("exact", [False, True], ids=["by-label", "exact-check"])
def test_an_event_for_more_client_names_than_a_message_holds_reaches_each_once(
        kafka_bootstrap: str, topic_prefix: str, tmp_path: Path, exact: bool) -> None:
    names = _names()
    assert sum(len(n) + 1 for n in names) > 1_000_000 > 3 * CLIENTS_HEADER_BYTES
    space_path = tmp_path / "space.json"
    space_path.write_text(json.dumps(SPEC))
    space = ContentSpace.from_json(space_path)
    service = NodeService(NodeSettings(
        node="A", neighbours=(), space=space_path, bootstrap=kafka_bootstrap,
        topic_prefix=topic_prefix, shared_delivery_partitions=1, exact_delivery=exact),
        space)
    errors: list[BaseException] = []

    def run() -> None:
        try:
            service.run()
        except BaseException as exc:  # asserted below
            errors.append(exc)
        finally:
            service.close()

    service.start()
    thread = threading.Thread(target=run, name="node-A", daemon=True)
    thread.start()
    topics = Topics(topic_prefix)
    label = event_label(space, {"price": 10.0})
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    try:
        for i, name in enumerate(names):
            producer.produce(topics.node_subscribe("A"), encode_label_subscription(
                name, f"s{i}", np.array([label], dtype=np.uint64)))
        assert producer.flush(30) == 0
        deadline = time.monotonic() + 60
        while len(service.state) < N_CLIENTS and not errors and time.monotonic() < deadline:
            time.sleep(0.2)
        assert len(service.state) == N_CLIENTS, errors
        publisher = Client(kafka_bootstrap, "A", "pub", space, topic_prefix=topic_prefix,
                           shared_delivery_partitions=1)
        eid = publisher.publish({"price": 10.0})
        publisher.flush()
        publisher.close()
        reached: list[str] = []
        messages = 0
        consumer = Consumer(consumer_config(kafka_bootstrap, str(uuid.uuid4())))
        consumer.subscribe([topics.shared_deliver])
        try:
            deadline = time.monotonic() + 60
            while (len(reached) < N_CLIENTS and not errors
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
        service.stop()
        thread.join(30)
    assert not errors, errors
    assert not thread.is_alive()
    assert sorted(reached) == names  # every client, each once
    assert messages >= 3  # 1.09 MB of names in messages of at most ~256 KiB each
