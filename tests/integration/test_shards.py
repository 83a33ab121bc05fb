"""A sharded network on a real Kafka: each label shard routed by engines of its own."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from confluent_kafka import Producer

from broker_node.config import NodeSettings
from broker_node.service import NodeService
from connectors.client import Client
from connectors.kafka import producer_config
from connectors.serde import encode_label_subscription
from connectors.topics import HEADER_EVENT_ID, HEADER_LABEL, HEADER_ORIGIN, Topics, encode_label
from dls.mapping import event_label
from dls.shards import label_shard
from tests.integration.test_nodes import LINE, SPEC, Net, collect, read_dead_letters
from tests.waiting import wait_for

pytestmark = pytest.mark.integration

SHARDS = 2


class ShardedNet(Net):
    """The three-node line, each node as one engine per shard (threads of this process)."""

    def start(self, name: str) -> NodeService:  # type: ignore[override]
        first = None
        for shard in range(SHARDS):
            settings = NodeSettings(node=name, neighbours=tuple(LINE[name]),
                                    space=self.space_path, bootstrap=self.bootstrap,
                                    topic_prefix=self.prefix, batch_size=200,
                                    unsubscribe_grace_s=2.0, publish_delay_s=3.0,
                                    clock_skew_s=0.2, shards=SHARDS, shard=shard)
            svc = NodeService(settings, self.space)
            svc.start()
            key = f"{name}{shard}"
            self._run(key, svc)
            first = first or svc
        assert first is not None
        return first

    def _run(self, key: str, svc: NodeService) -> None:
        import threading

        def run() -> None:
            try:
                svc.run()
            except BaseException as exc:  # surfaced by the test
                self.errors.append(exc)
            finally:
                svc.close()

        t = threading.Thread(target=run, name=f"node-{key}", daemon=True)
        t.start()
        self.nodes[key], self.threads[key] = svc, t

    def client(self, node: str, cid: str) -> Client:
        return Client(self.bootstrap, node, cid, self.space, topic_prefix=self.prefix,
                      shards=SHARDS)


@pytest.fixture
def net(kafka_bootstrap: str, topic_prefix: str, tmp_path: Path) -> Iterator[ShardedNet]:
    space_path = tmp_path / "space.json"
    space_path.write_text(json.dumps(SPEC))
    n = ShardedNet(kafka_bootstrap, topic_prefix, space_path)
    for name in LINE:
        n.start(name)
    yield n
    for key in list(n.nodes):
        if n.threads[key].is_alive():
            n.stop(key)
    assert not n.errors, n.errors


def test_each_shard_routes_its_labels_and_together_they_route_exactly(net: ShardedNet) -> None:
    alice, carol = net.client("A", "alice"), net.client("C", "carol")
    sid = alice.subscribe("price < 500", wait=60)  # labels of both shards: both acknowledge
    a0, a1 = len(net.nodes["A0"].state), len(net.nodes["A1"].state)
    assert (a0, a1) == (1, 1)  # one part in each shard
    # Each shard's engines hold only that shard's labels of the subscription.
    for shard in range(SHARDS):
        _, labels = net.nodes[f"A{shard}"].state.subscription(sid)
        assert {label_shard(int(x), SHARDS) for x in labels} == {shard}
    wait_for(lambda: all(len(net.nodes[f"C{k}"].state.received_from("B")) > 0
                         for k in range(SHARDS)), what="advertisements in both shards")
    prices = np.linspace(0, 999, 60)
    sent = {float(p): carol.publish({"sym": "IBM", "price": float(p)}) for p in prices}
    carol.flush()
    want = sorted(e for p, e in sent.items() if p < 500)
    shards_used = {label_shard(event_label(net.space, {"sym": "IBM", "price": p}), SHARDS)
                   for p in sent if p < 500}
    assert shards_used == {0, 1}  # the test means something: both shards carry events
    assert sorted(collect(alice, len(want))) == want
    alice.unsubscribe(sid)
    wait_for(lambda: all(len(net.nodes[f"A{k}"].state) == 0 for k in range(SHARDS)),
             what="the unsubscription in both shards")
    alice.close()
    carol.close()


def test_a_label_on_the_wrong_shard_is_a_dead_letter(net: ShardedNet) -> None:
    t = Topics(net.prefix)
    label = event_label(net.space, {"sym": "AAPL", "price": 1.0})
    right = label_shard(label, SHARDS)
    wrong = t.of_shard(1 - right)
    p = Producer(producer_config(net.bootstrap))
    p.produce(wrong.node_publish("A"), b"e", headers=[
        (HEADER_LABEL, encode_label(label)), (HEADER_ORIGIN, b"A/x"), (HEADER_EVENT_ID, b"1")])
    p.produce(wrong.node_subscribe("A"), encode_label_subscription(
        "x", "s1", np.array([label], dtype=np.uint64), None))
    p.flush(10)
    letters = read_dead_letters(net, 2)
    assert len(letters) == 2
    assert all(f"is of shard {right} of {SHARDS}, not of this node's shard {1 - right}" in r
               for _, r in letters)
    assert len(net.nodes[f"A{1 - right}"].state) == 0
