"""A sharded network on a real Kafka: each label shard routed by engines of its own."""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from confluent_kafka import Producer

from broker_node.config import NodeSettings
from broker_node.replicas import ReplicaSet
from broker_node.service import NodeService
from connectors.client import Client
from connectors.kafka import producer_config
from connectors.serde import encode_label_subscription
from connectors.topics import HEADER_EVENT_ID, HEADER_LABEL, HEADER_ORIGIN, Topics, encode_label
from dls.mapping import event_label
from dls.shards import label_shard
from dls.space import ContentSpace
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


# -- replicas: processes sharing a node's shards ---------------------------------------------
class Replicas:
    """Replica sets of the line's nodes, each on a thread (as processes would run them)."""

    def __init__(self, bootstrap: str, prefix: str, space_path: Path) -> None:
        self.bootstrap, self.prefix, self.space_path = bootstrap, prefix, space_path
        self.sets: dict[str, tuple[ReplicaSet, threading.Thread]] = {}
        self.errors: list[BaseException] = []

    def start(self, key: str, node: str, **extra: object) -> ReplicaSet:
        settings = NodeSettings(node=node, neighbours=tuple(LINE[node]), space=self.space_path,
                                bootstrap=self.bootstrap, topic_prefix=self.prefix,
                                batch_size=200, unsubscribe_grace_s=2.0, publish_delay_s=3.0,
                                clock_skew_s=0.2, shards=SHARDS, session_timeout_ms=6000,
                                **extra)  # type: ignore[arg-type]
        rs = ReplicaSet(settings)

        def run() -> None:
            try:
                rs.run()
            except BaseException as exc:  # surfaced by the test
                self.errors.append(exc)

        t = threading.Thread(target=run, name=f"replicas-{key}", daemon=True)
        t.start()
        self.sets[key] = (rs, t)
        return rs

    def stop(self, key: str) -> None:
        rs, t = self.sets.pop(key)
        rs.stop()
        t.join(60)
        assert not t.is_alive()


def _owns(*sets: ReplicaSet) -> list[int]:
    return sorted(s for rs in sets for s in rs.shards)


def test_replicas_share_a_nodes_shards_and_hand_them_over_losing_nothing(
        kafka_bootstrap: str, topic_prefix: str, tmp_path: Path) -> None:
    space_path = tmp_path / "space.json"
    space_path.write_text(json.dumps(SPEC))
    space = ContentSpace.from_json(space_path)
    reps = Replicas(kafka_bootstrap, topic_prefix, space_path)
    a, b1, c = (reps.start("A", "A"), reps.start("B1", "B", metrics_port=0),
                reps.start("C", "C"))
    try:
        wait_for(lambda: _owns(b1) == [0, 1] and b1.ready() and a.ready() and c.ready()
                 and _owns(a) == _owns(c) == [0, 1], timeout=60, what="every shard placed")
        page = urllib.request.urlopen(f"http://127.0.0.1:{b1.metrics_port}/metrics",  # noqa: S310
                                      timeout=10).read().decode()
        for shard in range(SHARDS):  # one page for the process: every shard's, labelled
            assert f'dls_subscriptions{{node="B",shard="{shard}"}}' in page
        alice = Client(kafka_bootstrap, "A", "alice", space, topic_prefix=topic_prefix,
                       shards=SHARDS)
        carol = Client(kafka_bootstrap, "C", "carol", space, topic_prefix=topic_prefix,
                       shards=SHARDS)
        alice.subscribe("price < 500", wait=60)
        sent: list[str] = []
        stop = threading.Event()

        def publish() -> None:  # a steady stream through B while its shards move
            i = 0
            while not stop.is_set():
                sent.append(carol.publish({"sym": "IBM", "price": float(i % 500)}))
                carol.flush()
                i += 1
                time.sleep(0.02)

        pub = threading.Thread(target=publish, daemon=True)
        pub.start()
        time.sleep(2)
        b2 = reps.start("B2", "B")  # a second replica of B joins: one shard moves to it
        wait_for(lambda: _owns(b1) != [0, 1] and len(b2.shards) == 1 and b2.ready(),
                 timeout=90, what="a shard handed to the second replica")
        assert _owns(b1, b2) == [0, 1]
        time.sleep(2)
        reps.stop("B1")  # the first leaves: the second takes every shard
        wait_for(lambda: _owns(b2) == [0, 1] and b2.ready(), timeout=90,
                 what="every shard on the second replica")
        time.sleep(2)
        stop.set()
        pub.join(10)
        got = collect(alice, len(sent), max_idle=15.0)
        assert sorted(got) == sorted(sent)  # nothing lost across the hand-overs
        assert alice.duplicates == 0  # exactly once: nothing repeated either
        alice.close()
        carol.close()
    finally:
        for key in list(reps.sets):
            reps.stop(key)
    assert not reps.errors, reps.errors


def test_a_sharded_node_says_when_its_unsharded_inputs_hold_messages(
        kafka_bootstrap: str, topic_prefix: str, tmp_path: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    """A writer that does not split by shard (shards=1 in a client, a Spark job without
    --shards) writes where no engine reads: the node cannot route it, but it says so."""
    space_path = tmp_path / "space.json"
    space_path.write_text(json.dumps(SPEC))
    settings = NodeSettings(node="A", space=space_path, bootstrap=kafka_bootstrap,
                            topic_prefix=topic_prefix, shards=SHARDS)
    rs = ReplicaSet(settings)
    with caplog.at_level("ERROR", logger="broker_node"):
        rs._misdirected()  # noqa: SLF001
    assert not caplog.records  # nothing written there: nothing said
    unsharded = Client(kafka_bootstrap, "A", "x", ContentSpace.from_json(space_path),
                       topic_prefix=topic_prefix)  # shards=1: the wrong setting
    unsharded.publish({"sym": "IBM", "price": 1.0})
    unsharded.flush()
    with caplog.at_level("ERROR", logger="broker_node"):
        rs._misdirected()  # noqa: SLF001
    (rec,) = caplog.records
    assert Topics(topic_prefix).node_publish("A") in rec.getMessage()
    assert "holds 1 messages no engine reads" in rec.getMessage()
    unsharded.close()
