"""A restarted node's view of what it told its neighbours (found by the replica harness).

``replicas-alo-topics`` (seed 21, ``docs/testing.md``) lost pairs this way, and nothing in
it is about replicas: a node removes a cancelled subscription when its inputs have passed
the cancellation, and sends the withdrawals that removal calls for. The removal is no
input message, so a node that starts again (a restart, or a shard handed to another
replica) replays the subscription and its unsubscription and holds the subscription
*retiring* again, its labels counted as advertised to the neighbours although the
neighbours were told to withdraw them. A neighbour's advertisement of the same label that
it reads before it removes the subscription again then counts 1 -> 2 instead of 0 -> 1
and is never passed on: the node's other neighbours never route that label towards it.
The fix: a starting node's probe to each neighbour carries what its state counts as
advertised to it (``broker_node.controls.probe_links``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from connectors.kafka import consume_batch, consumer_config
from connectors.serde.messages import decode_link
from connectors.topics import Topics
from dls.predicates import Subscription
from tests.integration.test_nodes import LINE, Net, _net
from tests.waiting import wait_for

pytestmark = pytest.mark.integration

WHERE = "sym in (IBM) and price < 10"


def advertised(net: Net, src: str, dst: str) -> set[int]:
    """Labels of the committed advertisements on the link topic ``src`` -> ``dst``."""
    tp = TopicPartition(Topics(net.prefix).link(src, dst), 0, OFFSET_BEGINNING)
    consumer = Consumer(consumer_config(net.bootstrap, f"{net.prefix}-probe", log_level=2))
    consumer.assign([tp])
    out: set[int] = set()
    try:
        while batch := consume_batch(consumer, 500, 2.0):
            for m in batch:
                rec = decode_link(m.value())
                if rec["kind"] == "advertise":
                    out |= {int(x) for x in rec["labels"]}
    finally:
        consumer.close()
    return out


@pytest.fixture
def line(kafka_bootstrap: str, topic_prefix: str, tmp_path: Path) -> Iterator[Net]:
    yield from _net(kafka_bootstrap, topic_prefix, tmp_path, tuple(LINE))


def test_a_restarted_node_passes_on_an_advertisement_of_a_label_it_had_withdrawn(
        line: Net) -> None:
    label = int(Subscription(line.space, WHERE).labels()[0])
    c_from_b = lambda: set(line.nodes["C"].state.received_from("B").tolist())  # noqa: E731
    bob = line.client("B", "bob")
    sid = bob.subscribe(WHERE, wait=60)
    wait_for(lambda: label in c_from_b(), what="B's advertisement at C")
    bob.unsubscribe(sid)  # B removes it once its inputs passed the cancellation, withdraws
    wait_for(lambda: label not in c_from_b(), timeout=60, what="B's withdrawal at C")
    line.stop("B")
    alice = line.client("A", "alice")
    alice.subscribe(WHERE)  # A advertises the label to B while B is down
    wait_for(lambda: label in advertised(line, "A", "B"), what="A's advertisement to B")
    line.start("B")  # replays bob's subscription, retiring, then reads A's advertisement
    wait_for(lambda: label in c_from_b(), timeout=30,
             what="C told again that B wants the label (alice at A does)")
    alice.close()
    bob.close()
