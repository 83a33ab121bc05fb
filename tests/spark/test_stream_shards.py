"""End to end, sharded: raw JSON -> the Spark job with shards=2 -> each shard's engines -> SDK.

Real Kafka (``kafka_bootstrap``), real Spark (the session fixture), the two-node line A - B
with two label shards, each shard of each node routed by an engine of its own
(``NodeService`` with ``shards``/``shard``, on threads), SDK clients reading their delivery
topics. Subscriptions, events and an unsubscription go in as raw JSON and through the
mapping query (``start_query(..., shards=2)``, availableNow): a subscription whose labels
fall in both shards reaches each shard as its part, events reach their label's shard, the
deliveries are exactly what the subscriptions select, and the unsubscription reaches both
parts. Nothing goes to the unsharded node topics, which no engine reads.

Cost: about 20 s in the Spark session of the other tests (two short Spark runs, four
engines' start-up, Kafka round trips); a minute alone on a loaded machine, most of it the
first query's start.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from broker_node.config import NodeSettings
from broker_node.service import NodeService
from connectors.client import Client
from connectors.kafka import consume_batch, consumer_config, producer_config
from connectors.serde import decode_dead_letter
from connectors.topics import HEADER_ACK, HEADER_EVENT_ID, Topics
from dls.exceptions import DLSError
from dls.mapping import event_label
from dls.predicates import Subscription
from dls.shards import label_shard, label_shards
from dls.space import ContentSpace
from spark.stream import prepare_topics, start_query
from tests.waiting import wait_for

SHARDS = 2
SPEC = {"attributes": [
    {"name": "sym", "type": "discrete", "values": ["AAPL", "IBM", "MSFT"]},
    {"name": "price", "type": "numeric", "low": 0, "high": 1000, "granules": 64},
]}
LINE = {"A": ("B",), "B": ("A",)}
SUBS = [  # (node, client, id, where)
    ("A", "alice", "s1", "sym in (AAPL, IBM) and price between 10 and 600"),
    ("B", "bob", "s2", "price > 400"),
]


class Engines:
    """One engine per shard of each node of the line, each on a thread."""

    def __init__(self, bootstrap: str, prefix: str, space_path: Path) -> None:
        self.engines: dict[tuple[str, int], NodeService] = {}
        self.threads: list[threading.Thread] = []
        self.errors: list[BaseException] = []
        for node, neighbours in LINE.items():
            for shard in range(SHARDS):
                settings = NodeSettings(node=node, neighbours=neighbours, space=space_path,
                                        bootstrap=bootstrap, topic_prefix=prefix,
                                        batch_size=200, unsubscribe_grace_s=2.0,
                                        publish_delay_s=1.0, clock_skew_s=0.2,
                                        shards=SHARDS, shard=shard)
                svc = NodeService(settings, ContentSpace.from_json(space_path))
                svc.start()
                self.engines[node, shard] = svc
                t = threading.Thread(target=self._run, args=(svc,), daemon=True,
                                     name=f"node-{node}{shard}")
                t.start()
                self.threads.append(t)

    def _run(self, svc: NodeService) -> None:
        try:
            svc.run()
        except BaseException as exc:  # surfaced by the test
            self.errors.append(exc)
        finally:
            svc.close()

    def stop(self) -> None:
        for svc in self.engines.values():
            svc.stop()
        for t in self.threads:
            t.join(30)
        assert not self.errors, self.errors

    def holds(self, sid: str, node: str, shards: set[int]) -> bool:
        """``sid`` is live at exactly the engines of ``node``'s ``shards``."""
        return all(_live(self.engines[node, k], sid) == (k in shards) for k in range(SHARDS))


def _live(svc: NodeService, sid: str) -> bool:
    try:
        svc.state.subscription(sid)
    except DLSError:
        return False
    return True


@pytest.fixture
def engines(kafka_bootstrap: str, topic_prefix: str, tmp_path: Path) -> Iterator[Engines]:
    space_path = tmp_path / "space.json"
    space_path.write_text(json.dumps(SPEC))
    prepare_topics(kafka_bootstrap, Topics(topic_prefix), list(LINE), shards=SHARDS)
    e = Engines(kafka_bootstrap, topic_prefix, space_path)
    yield e
    e.stop()


def produce(bootstrap: str, topic: str, records: list[Any]) -> None:
    p = Producer(producer_config(bootstrap))
    for r in records:
        p.produce(topic, r if isinstance(r, bytes) else json.dumps(r).encode())
    assert p.flush(30) == 0


def run_job(spark: Any, space: ContentSpace, bootstrap: str, topics: Topics,
            checkpoint: Path) -> None:
    q = start_query(spark, space, bootstrap, topics=topics, checkpoint=checkpoint, once=True,
                    shards=SHARDS)
    q.awaitTermination(180)
    assert q.exception() is None, q.exception()


def messages(bootstrap: str, topic: str) -> int:
    reader = Consumer(consumer_config(bootstrap, f"{topic}-count"))
    try:
        if topic not in reader.list_topics(timeout=10).topics:
            return 0
        low, high = reader.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        return high - low
    finally:
        reader.close()


def delivered(bootstrap: str, topic: str) -> Counter[str]:
    """The event ids of the deliveries on ``topic`` (not its acknowledgements), counted."""
    reader = Consumer(consumer_config(bootstrap, f"{topic}-count"))
    reader.assign([TopicPartition(topic, 0, 0)])
    out: Counter[str] = Counter()
    try:
        quiet = time.monotonic()
        while time.monotonic() - quiet < 1.5:
            for m in consume_batch(reader, 500, 0.3):
                quiet = time.monotonic()
                h = dict(m.headers() or ())
                if HEADER_ACK not in h:
                    out[h[HEADER_EVENT_ID].decode()] += 1
        return out
    finally:
        reader.close()


def dead_letters(bootstrap: str, topics: Topics, n: int) -> list[dict[str, Any]]:
    """The dead letters, once ``n`` are there (and any more that follow within a second)."""
    reader = Consumer(consumer_config(bootstrap, f"{topics.prefix}-dlq"))
    reader.assign([TopicPartition(topics.deadletter, 0, 0)])
    out: list[dict[str, Any]] = []
    deadline = time.monotonic() + 30
    last = time.monotonic()
    try:  # until there are n, and then a second with no more
        while time.monotonic() < deadline and (len(out) < n or time.monotonic() - last < 1.0):
            batch = consume_batch(reader, 100, 0.3)
            if batch:
                last = time.monotonic()
            out += [decode_dead_letter(m.value()) for m in batch]
        return out
    finally:
        reader.close()


def test_the_job_feeds_a_sharded_network_exactly(spark: Any, engines: Engines,
                                                 kafka_bootstrap: str, topic_prefix: str,
                                                 tmp_path: Path) -> None:
    topics = Topics(topic_prefix)
    space = ContentSpace.from_spec(SPEC)
    checkpoint = tmp_path / "checkpoint"
    clients = {c: Client(kafka_bootstrap, node, c, space, topic_prefix=topic_prefix,
                         shards=SHARDS) for node, c, _sid, _w in SUBS}
    live = {sid: (c, Subscription(space, w)) for _n, c, sid, w in SUBS}
    parts = {sid: {int(k) for k in label_shards(s.labels(), SHARDS)}
             for sid, (_c, s) in live.items()}
    assert parts["s1"] == {0, 1}  # the test means something: s1 is split
    try:
        # 1. Subscriptions, and one the space refuses (one dead letter, not one per shard).
        produce(kafka_bootstrap, topics.raw_subscriptions,
                [{"node": n, "client": c, "id": sid, "where": w} for n, c, sid, w in SUBS]
                + [{"node": "A", "client": "mallory", "id": "bad", "where": "volume > 3"}])
        run_job(spark, space, kafka_bootstrap, topics, checkpoint)
        for (node, c, sid, _w) in SUBS:
            clients[c].subscriptions[sid] = live[sid][1]  # what the SDK would have kept
            wait_for(lambda n=node, s=sid: engines.holds(s, n, parts[s]), 60,
                     f"{sid}'s parts at {node}'s engines")
        far = {"s1": "B", "s2": "A"}
        wait_for(lambda: all(len(engines.engines[far[s], k].state.received_from(
            "A" if far[s] == "B" else "B")) > 0 for s in live for k in parts[s]), 60,
            "advertisements in each shard")

        # 2. Events from both nodes (and one the space refuses), each to its label's shard,
        # then the cancellation of s1, in the same micro-batch: it goes to every shard, and
        # the events published before it still reach alice (the order rule).
        events = []
        for k in range(40):
            node, client = (("A", "feed"), ("B", "bob"))[k % 2]
            attrs = {"sym": ("AAPL", "IBM", "MSFT")[k % 3], "price": 25.0 * k + 3.5}
            events.append({"node": node, "client": client, "id": f"e{k}", "attrs": attrs})
        assert {label_shard(event_label(space, e["attrs"]), SHARDS) for e in events} == {0, 1}
        produce(kafka_bootstrap, topics.raw_events,
                [*events, {"node": "A", "client": "feed", "id": "bad",
                           "attrs": {"sym": "IBM", "price": 5000}}])
        produce(kafka_bootstrap, topics.raw_unsubscriptions,
                [{"node": "A", "client": "alice", "id": "s1"}])
        run_job(spark, space, kafka_bootstrap, topics, checkpoint)
        # What the subscriptions select (the network routes by label, which can be wider:
        # the clients' nodes remove those false positives).
        want: dict[str, Counter[str]] = {c: Counter() for c in clients}
        for e in events:
            for c, sub in live.values():
                if c != e["client"] and sub.matches(e["attrs"]):
                    want[c][e["id"]] += 1
        assert all(want.values())

        def got() -> dict[str, Counter[str]]:
            return {c: delivered(kafka_bootstrap, topics.deliver(c)) for c in clients}

        # The nodes check deliveries against the wheres the job carried (exact delivery):
        # the delivery records are the true matches, each once; the label alone routes more.
        wait_for(lambda: all(sum(n.values()) >= sum(want[c].values())
                             for c, n in got().items()), 60, "deliveries")
        time.sleep(1.0)
        assert got() == want
        for c, cl in clients.items():  # and the SDK takes each as a true match
            assert Counter(d.event_id for d in cl.drain(quiet_s=1.0)) == want[c]
        # Both parts of s1 retire (no shard is left holding one).
        wait_for(lambda: engines.holds("s1", "A", set()), 60, "s1 gone from both shards")
        letters = dead_letters(kafka_bootstrap, topics, 2)
        assert sorted(dl["source"].split("[")[0] for dl in letters) == sorted(
            [topics.raw_subscriptions, topics.raw_events])
        # The unsharded inputs, which no engine of a sharded node reads, stay empty.
        for node in LINE:
            for name in (topics.node_subscribe(node), topics.node_unsubscribe(node),
                         topics.node_publish(node)):
                assert messages(kafka_bootstrap, name) == 0, name
    finally:
        for cl in clients.values():
            cl.close()
