"""A batch whose work outlasts a share of the transaction timeout, on a real Kafka.

Exactly once, a batch is one transaction, and the coordinator aborts one still open
``transaction_timeout_ms`` after its first output, fencing the node's producer. Measured
with a timeout of 1 s: an event, then 200 subscriptions of 65,536 labels in one batch,
stopped the node after 4.4 s ("fenced by a newer instance"). The node now commits what is
done between two runs once its transaction is a quarter of the timeout old
(``broker_node.runs``). Here: a batch cut in several transactions loses and repeats
nothing, and a restart starts after it. The test makes any open transaction old (the
share at 0), so that the cut does not depend on how fast this machine is.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import numpy as np
import pytest
from confluent_kafka import Producer

from broker_node import runs
from broker_node.config import NodeSettings
from broker_node.service import NodeService
from connectors.client import Client
from connectors.serde import encode_label_subscription
from connectors.topics import Topics
from dls.space import ContentSpace

pytestmark = pytest.mark.integration

SPEC = {"attributes": [{"name": "x", "type": "numeric", "low": 0, "high": 1 << 20,
                        "granules": 1 << 20}]}
BROAD, LABELS = 48, 65_536


def _node(bootstrap: str, prefix: str, space: Path) -> NodeService:
    svc = NodeService(NodeSettings(node="A", space=space, bootstrap=bootstrap,
                                   topic_prefix=prefix, shared_delivery_partitions=1,
                                   transaction_timeout_ms=1_000, batch_size=1_000),
                      ContentSpace.from_json(space))
    svc.start()
    return svc


def _run_until(svc: NodeService, done: object, limit: float = 30.0) -> None:
    """Run the node's loop in slices until ``done()`` holds (at most ``limit`` seconds)."""
    deadline = time.monotonic() + limit
    while not done() and time.monotonic() < deadline:  # type: ignore[operator]
        svc.run(max_seconds=0.3)


def test_a_long_batch_is_committed_in_parts_and_loses_nothing(
        kafka_bootstrap: str, topic_prefix: str, tmp_path: Path,
        caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    # How long the broad subscriptions take depends on the machine (a fast one took them
    # within a quarter of the 1 s timeout, and nothing was cut): any open transaction is
    # old here, so the batch is cut between every two runs wherever it runs.
    monkeypatch.setattr(runs, "TIMEOUT_SHARE", 0.0)
    space = tmp_path / "space.json"
    space.write_text(json.dumps(SPEC))
    topics = Topics(topic_prefix)
    svc = _node(kafka_bootstrap, topic_prefix, space)
    alice = Client(kafka_bootstrap, "A", "alice", space, topic_prefix=topic_prefix,
                   shared_delivery_partitions=1)
    feed = Client(kafka_bootstrap, "A", "feed", space, topic_prefix=topic_prefix,
                  shared_delivery_partitions=1)
    raw = Producer({"bootstrap.servers": kafka_bootstrap, "message.max.bytes": 1_000_000})
    try:
        alice.subscribe("x < 100")
        alice.flush()
        _run_until(svc, lambda: len(svc.state) == 1)  # alice's subscription is in
        assert len(svc.state) == 1
        first = feed.publish({"x": 5})
        feed.flush()
        for i in range(BROAD):  # then broad subscriptions of bob, in the same batch
            labels = (np.arange(LABELS, dtype=np.uint64) + np.uint64(i * 20_000)) % np.uint64(
                1 << 20)
            labels.sort()
            raw.produce(topics.node_subscribe("A"),
                        encode_label_subscription("bob", f"b{i}", labels))
        assert raw.flush(30) == 0
        last = feed.publish({"x": 6})
        feed.flush()
        with caplog.at_level(logging.INFO, logger="broker_node"):
            _run_until(svc, lambda: svc.metrics.events_in == 2)
            svc.run(max_seconds=0.5)  # the last batch is committed
        assert len(svc.state) == 1 + BROAD
        assert "are committed now, the rest go in a new transaction" in caplog.text
        assert svc.metrics.events_in == 2 and svc.metrics.dead_letters == 0
    finally:
        svc.close()
    again = _node(kafka_bootstrap, topic_prefix, space)
    try:
        _run_until(again, lambda: False, limit=1.5)  # what is there to read is read
        assert len(again.state) == 1 + BROAD
        assert again.metrics.events_in == 0  # everything was committed: nothing read again
    finally:
        again.close()
    try:
        got = [d.event_id for d in alice.drain(quiet_s=1.0)]
        assert got == [first, last]  # once each, in order
    finally:
        for c in (alice, feed):
            c.close()
