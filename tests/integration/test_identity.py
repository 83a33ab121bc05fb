"""Identity from the topic: clients' own input topics on a real Kafka (plaintext broker).

With ``client_inputs`` a client writes topics of its own, and the node takes the client of
a subscription and the origin of an event from the topic. These tests play the attacks of
the security issue with a client that writes its own topics as it likes (the broker's ACLs,
which keep it off the others' topics, are tested on the secure broker); the victim's
deliveries are checked exactly afterwards.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer

from connectors.client import Client
from connectors.kafka import producer_config
from connectors.serde import (
    encode_label_subscription,
    encode_label_unsubscription,
    encode_raw_event,
)
from connectors.topics import HEADER_EVENT_ID, HEADER_LABEL, HEADER_ORIGIN, Topics, encode_label
from dls.mapping import event_label
from tests.integration.test_nodes import (
    Net,
    _net,
    collect,
    collect_until,
    read_dead_letters,
    settled,
)
from tests.waiting import wait_for

pytestmark = pytest.mark.integration


class OwnTopicsNet(Net):
    """The three-node line with every client on topics of its own."""

    def client(self, node: str, cid: str) -> Client:
        return Client(self.bootstrap, node, cid, self.space, topic_prefix=self.prefix,
                      client_inputs=True)


@pytest.fixture
def net(kafka_bootstrap: str, topic_prefix: str, tmp_path: Path,
        request: pytest.FixtureRequest) -> Iterator[Net]:
    delivery = getattr(request, "param", "exactly_once")
    gen = _net(kafka_bootstrap, topic_prefix, tmp_path, (), client_inputs=True,
               client_inputs_refresh_s=0.5, delivery=delivery)
    n = next(gen)
    n.__class__ = OwnTopicsNet
    for name in ("A", "B", "C"):
        n.start(name)
    yield n
    with pytest.raises(StopIteration):
        next(gen)


def _ready(net: Net) -> None:
    """Wait until A's subscription is advertised as far as C."""
    wait_for(settled(net, "A", 1), what="alice's subscription")
    wait_for(lambda: len(net.nodes["C"].state.received_from("B")) > 0, what="advertisement")


@pytest.mark.parametrize("net", ["exactly_once", "at_least_once"], indirect=True)
def test_clients_on_their_own_topics_route_and_survive_a_restart(net: Net) -> None:
    """Each client's topics appear while the nodes run: a rebalance each time."""
    t = Topics(net.prefix)
    alice, carol = net.client("A", "alice"), net.client("C", "carol")
    alice.subscribe("sym = IBM", wait=30)  # topics made after the nodes started: found
    assert t.client_input("A", "alice", "subscribe") in net.nodes["A"].control_topics
    _ready(net)
    sent = [carol.publish({"sym": "IBM", "price": float(i)}) for i in range(20)]
    carol.publish({"sym": "AAPL", "price": 1.0})
    carol.flush()
    assert sorted(collect(alice, 20)) == sorted(sent)
    net.stop("A")  # recovery reads alice's own subscribe topic again
    restarted = net.start("A")
    assert len(restarted.state) == 1
    more = [carol.publish({"sym": "IBM", "price": 50.0 + i}) for i in range(5)]
    carol.flush()
    assert sorted(collect(alice, 5)) == sorted(more)
    alice.close()
    carol.close()


def test_no_client_subscribes_or_cancels_for_another(net: Net) -> None:
    t = Topics(net.prefix)
    alice, carol = net.client("A", "alice"), net.client("C", "carol")
    sid = alice.subscribe("price < 100", wait=30)
    _ready(net)
    bob = net.client("A", "bob")
    bob.publish({"sym": "IBM", "price": 999.0})  # makes bob's topics exist, matches no one
    bob.flush()
    p = Producer(producer_config(net.bootstrap))
    labels = alice.subscriptions[sid].labels()
    # bob, on his own topics: a subscription in alice's name, and alice's id cancelled in
    # his name and in hers
    p.produce(t.client_input("A", "bob", "subscribe"),
              encode_label_subscription("alice", "bob-as-alice", labels, None))
    p.produce(t.client_input("A", "bob", "unsubscribe"),
              encode_label_unsubscription("bob", sid))
    p.produce(t.client_input("A", "bob", "unsubscribe"),
              encode_label_unsubscription("alice", sid))
    p.flush(10)
    letters = read_dead_letters(net, 3)
    reasons = " | ".join(r for _, r in letters)
    assert len(letters) == 3, reasons
    assert reasons.count("a client acts only for itself") == 2, reasons
    assert "belongs to client 'alice', not 'bob'" in reasons
    assert all(src.startswith(t.client_input_prefix("A", "bob")) for src, _ in letters)
    node_a = net.nodes["A"]
    assert len(node_a.state) == 1 and not node_a.controls.retiring
    # alice still gets every matching event, exactly
    sent = [carol.publish({"sym": "MSFT", "price": float(i)}) for i in range(0, 200, 10)]
    carol.flush()
    assert sorted(collect(alice, 10)) == sorted(sent[:10])
    for c in (alice, bob, carol):
        c.close()


def test_an_event_published_under_another_origin_is_still_delivered_to_it(net: Net) -> None:
    t = Topics(net.prefix)
    alice, carol = net.client("A", "alice"), net.client("C", "carol")
    alice.subscribe("sym = IBM", wait=30)
    carol.subscribe("sym = IBM", wait=30)
    wait_for(settled(net, "C", 1), what="carol's subscription")
    wait_for(lambda: len(net.nodes["A"].state.received_from("B")) > 0, what="advertisement")
    bob = net.client("A", "bob")
    real = alice.publish({"sym": "AAPL", "price": 1.0}, event_id="e-1")  # matches no one
    alice.flush()
    bob.publish({"sym": "AAPL", "price": 1.0})  # bob's topics exist
    bob.flush()
    label = encode_label(event_label(net.space, {"sym": "IBM", "price": 5.0}))
    p = Producer(producer_config(net.bootstrap))
    # bob claims to be alice (a publisher never gets its own events), and reuses her event
    # id (a repeat of hers would be skipped)
    forged = encode_raw_event("A", "alice", real, {"sym": "IBM", "price": 5.0})
    p.produce(t.client_input("A", "bob", "publish"), forged,
              headers=[(HEADER_LABEL, label), (HEADER_ORIGIN, b"A/alice"),
                       (HEADER_EVENT_ID, real.encode())])
    p.flush(10)
    # the same label from bob's topic after it: once it is delivered, so is the forged one
    last = bob.publish({"sym": "IBM", "price": 5.0})
    bob.flush()
    got_alice = collect_until(alice, last)
    got_carol = collect_until(carol, last)
    assert [(d.event_id, d.origin) for d in got_alice] == [(real, "A/bob")]
    assert [(d.event_id, d.origin) for d in got_carol] == [(real, "A/bob")]
    assert net.nodes["A"].metrics.origins_replaced == 1
    for c in (alice, bob, carol):
        c.close()
