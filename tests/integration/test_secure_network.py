"""Attacks on a running network on the secure profile, the victim's deliveries checked after.

Three nodes A - B - C run on the secure local Kafka under node principals made by
:mod:`dlsroute.access`, with ``client_inputs`` (each client writes topics of its own, the
node takes its identity from them). alice at A and carol at C are honest; bob at A tries,
with his own valid credentials, to cancel, take over or starve alice's subscription and to
cut C off. Each attempt fails (an authorization error, or a dead letter the operator can
read), and alice then receives exactly the events that match her subscription.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer

from broker_node.config import NodeSettings
from broker_node.service import NodeService
from connectors.client import Client
from connectors.kafka import admin, consume_batch, consumer_config, producer_config
from connectors.kafka_config import load_kafka_config
from connectors.serde import (
    SERDE,
    encode_label_subscription,
    encode_label_unsubscription,
    encode_link,
    encode_raw_event,
)
from connectors.topics import HEADER_EVENT_ID, HEADER_LABEL, HEADER_ORIGIN, Topics, encode_label
from dls.mapping import event_label
from dls.space import ContentSpace
from dlsroute import access
from tests.integration.test_nodes import LINE, SPEC
from tests.waiting import wait_for

pytestmark = pytest.mark.integration


@dataclass
class SecureNet:
    """The line on the secure broker: principals, running nodes, clients."""

    bootstrap: str
    topics: Topics
    space: ContentSpace
    files: dict[str, Path]
    nodes: dict[str, NodeService] = field(default_factory=dict)
    threads: list[threading.Thread] = field(default_factory=list)
    errors: list[BaseException] = field(default_factory=list)

    def client(self, node: str, name: str) -> Client:
        return Client(self.bootstrap, node, name, self.space, topic_prefix=self.topics.prefix,
                      client_inputs=True, kafka_config=self.files[name])

    def producer(self, who: str) -> Producer:
        return Producer(producer_config(self.bootstrap, **load_kafka_config(self.files[who])))


@pytest.fixture(scope="module")
def net(secure_kafka: tuple[str, Path], tmp_path_factory: pytest.TempPathFactory
        ) -> Iterator[SecureNet]:
    bootstrap, admin_file = secure_kafka
    out = tmp_path_factory.mktemp("secure-net")
    tag = uuid.uuid4().hex[:8]
    t = Topics(f"n{tag}")
    adm = load_kafka_config(admin_file)
    space_path = out / "space.json"
    space_path.write_text(json.dumps(SPEC))
    principals = {}
    for node in LINE:
        principals[node] = f"node.{node}{tag}"
    for name in ("alice", "bob", "carol"):
        principals[name] = f"client.{name}{tag}"
    principals["operator"] = f"operator.o{tag}"
    files: dict[str, Path] = {}
    for node in LINE:
        files[node] = access.add_principal(bootstrap, adm, principals[node],
                                           access.node_grants(t, node), out_dir=out)
    for name, node in (("alice", "A"), ("bob", "A"), ("carol", "C")):
        files[name] = access.add_principal(
            bootstrap, adm, principals[name], access.client_grants(t, node, name),
            out_dir=out, topics=access.client_topics(t, node, name, publish_delay_s=3.0))
    files["operator"] = access.add_principal(
        bootstrap, adm, principals["operator"], access.operator_grants(t, f"o{tag}"),
        out_dir=out, topics=[(t.deadletter, {})])
    n = SecureNet(bootstrap, t, ContentSpace.from_json(space_path), files)
    for node in LINE:
        settings = NodeSettings(node=node, neighbours=tuple(LINE[node]), space=space_path,
                                bootstrap=bootstrap, topic_prefix=t.prefix, batch_size=200,
                                unsubscribe_grace_s=2.0, publish_delay_s=3.0,
                                clock_skew_s=0.2, client_inputs=True,
                                client_inputs_refresh_s=0.5, kafka_config=files[node])
        svc = NodeService(settings, n.space)
        svc.start()

        def run(svc: NodeService = svc) -> None:
            try:
                svc.run()
            except BaseException as exc:  # surfaced by the tests
                n.errors.append(exc)
            finally:
                svc.close()

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        n.nodes[node] = svc
        n.threads.append(thread)
    yield n
    for svc in n.nodes.values():
        svc.stop()
    for thread in n.threads:
        thread.join(30)
    for principal in principals.values():
        access.remove_principal(bootstrap, adm, principal)
    client = admin(bootstrap, **adm)
    names = [x for x in client.list_topics(timeout=10).topics if x.startswith(f"{t.prefix}.")]
    if names:
        for fut in client.delete_topics(names, operation_timeout=10).values():
            fut.result(timeout=30)
    assert not n.errors, n.errors


def _write(net: SecureNet, who: str, topic: str, value: bytes,
           headers: list[tuple[str, bytes]] | None = None) -> int | None:
    """Write as ``who``: None when the broker took it, else the error code."""
    codes: list[int | None] = []
    p = net.producer(who)
    try:
        p.produce(topic, value, headers=headers, on_delivery=lambda err, _m: codes.append(
            None if err is None else err.code()))
        p.flush(15)
    except KafkaException as exc:
        return int(exc.args[0].code())
    return codes[0] if codes else -1


def _dead_letters(net: SecureNet, n: int, timeout: float = 30.0) -> list[str]:
    """The reasons of the first ``n`` dead letters, read as the operator."""
    conf = load_kafka_config(net.files["operator"])
    group = f"{net.topics.prefix}-operator-o{net.topics.prefix[1:]}"
    consumer = Consumer(consumer_config(net.bootstrap, group, **conf))
    consumer.subscribe([net.topics.deadletter])
    out: list[str] = []
    deadline = time.monotonic() + timeout
    try:
        while len(out) < n and time.monotonic() < deadline:
            for msg in consume_batch(consumer, 100, 0.5):
                _, rec = SERDE.decode(msg.value())
                out.append(rec["reason"])
    finally:
        consumer.close()
    return out


@pytest.fixture(scope="module")
def attacked(net: SecureNet) -> dict[str, object]:
    """alice subscribes; bob attacks in every way; what each attack returned."""
    t = net.topics
    alice, bob = net.client("A", "alice"), net.client("A", "bob")
    sid = alice.subscribe("sym = IBM and price < 500", wait=60)
    wait_for(lambda: len(net.nodes["C"].state.received_from("B")) > 0, what="advertisement")
    bob.publish({"sym": "AAPL", "price": 999.0})  # bob's own topics in use
    bob.flush()
    labels = alice.subscriptions[sid].labels()
    label = encode_label(event_label(net.space, {"sym": "IBM", "price": 5.0}))
    out: dict[str, object] = {"sid": sid}
    # On his own topics: cancel alice's subscription, subscribe in her name, publish as her
    out["cancel"] = _write(net, "bob", t.client_input("A", "bob", "unsubscribe"),
                           encode_label_unsubscription("bob", sid))
    out["as_alice"] = _write(net, "bob", t.client_input("A", "bob", "subscribe"),
                             encode_label_subscription("alice", "bob-1", labels, None))
    out["forged"] = _write(net, "bob", t.client_input("A", "bob", "publish"),
                           encode_raw_event("A", "alice", "forged-1",
                                            {"sym": "IBM", "price": 5.0}),
                           [(HEADER_LABEL, label), (HEADER_ORIGIN, b"A/alice"),
                            (HEADER_EVENT_ID, b"forged-1")])
    # On topics that are not his: alice's inputs, and the link that feeds A from B
    out["alice_topic"] = _write(net, "bob", t.client_input("A", "alice", "unsubscribe"),
                                encode_label_unsubscription("alice", sid))
    out["withdraw"] = _write(net, "bob", t.link("B", "A"),
                             encode_link("B", "WITHDRAW", np.asarray(labels, np.uint64)))
    out["advertise"] = _write(net, "bob", t.link("C", "B"),
                              encode_link("C", "ADVERTISE", np.asarray(labels, np.uint64)))
    out["letters"] = _dead_letters(net, 2)
    out["alice"], out["bob"] = alice, bob
    return out


def test_bobs_attempts_on_other_topics_are_refused_by_the_broker(
        attacked: dict[str, object]) -> None:
    denied = KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert attacked["alice_topic"] == denied  # alice's own inputs
    assert attacked["withdraw"] == denied  # a withdrawal that would cut A off
    assert attacked["advertise"] == denied  # an advertisement that would draw C's traffic


def test_bobs_attempts_on_his_own_topics_become_dead_letters(
        net: SecureNet, attacked: dict[str, object]) -> None:
    assert attacked["cancel"] is None and attacked["as_alice"] is None  # the broker took them
    reasons = " | ".join(attacked["letters"])  # type: ignore[arg-type]
    assert "belongs to client 'alice', not 'bob'" in reasons
    assert "a client acts only for itself" in reasons
    assert len(net.nodes["A"].state) == 1 and not net.nodes["A"].controls.retiring


def test_alice_still_receives_exactly_what_matches_her(
        net: SecureNet, attacked: dict[str, object]) -> None:
    alice: Client = attacked["alice"]  # type: ignore[assignment]
    carol = net.client("C", "carol")
    sent = {}
    for i, (sym, price) in enumerate([("IBM", 10.0), ("IBM", 600.0), ("AAPL", 10.0),
                                      ("IBM", 499.0), ("MSFT", 1.0), ("IBM", 0.0)]):
        sent[carol.publish({"sym": sym, "price": price}, event_id=f"c{i}")] = (sym, price)
    carol.flush()
    want = {eid for eid, (sym, price) in sent.items() if sym == "IBM" and price < 500}
    got = [(d.event_id, d.origin) for d in alice.deliveries(timeout=0.5, max_idle=10.0)
           if d.subscriptions]  # what matches her exactly (the SDK checks each delivery)
    # bob's event (published under her name) reached her too, as bob's
    assert sorted(got) == sorted([(e, "C/carol") for e in want] + [("forged-1", "A/bob")])
    carol.close()
