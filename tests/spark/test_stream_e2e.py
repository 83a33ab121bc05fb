"""End to end: raw JSON from kcat -> the Spark mapping job -> real nodes -> SDK deliveries.

Real Kafka (``kafka_bootstrap``), real Spark (local[2], the session fixture), two real
``NodeService`` loops (A - B) on threads, SDK clients reading their delivery topics. The
job runs with ``--once`` semantics (availableNow) several times on one checkpoint, as a
restarted job does; one restart follows a simulated crash between the write of a batch
and its commit, so Spark writes that batch again and the nodes must drop the repeats; an
unsubscription goes through the job in the micro-batch of an event published before it.

Cost: about 60 s (six short Spark runs, node start-up, Kafka round trips).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import TIMESTAMP_CREATE_TIME, Consumer, Producer, TopicPartition

from broker_node.overlay import Topology
from connectors.client import Client
from connectors.kafka import consume_batch, consumer_config, producer_config
from connectors.serde import decode_dead_letter
from connectors.topics import HEADER_DLQ_REASON, HEADER_EVENT_ID, HEADER_PUBLISHED, Topics
from dls.predicates import Subscription
from dls.space import ContentSpace
from dlsroute.tools.local_network import LocalNetwork
from spark.stream import input_rows, prepare_topics, start_query
from tests.waiting import wait_for as _wait_for

SPEC = {"attributes": [
    {"name": "sym", "type": "discrete", "values": ["AAPL", "IBM", "MSFT"]},
    {"name": "price", "type": "numeric", "low": 0, "high": 1000, "granules": 64},
]}
TOPOLOGY = {"nodes": ["A", "B"], "links": [["A", "B"]]}
SUBS = [  # (node, client, id, where)
    ("A", "alice", "s1", "sym in (AAPL, IBM) and price between 10 and 20"),
    ("B", "bob", "s2", "price > 500"),
    ("A", "carol", "s3", [{"attr": "price", "op": "<", "value": 15.625},
                          {"attr": "sym", "op": "=", "value": "IBM"}]),
]

pytestmark = pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed")


def wait_for(cond: Callable[[], bool], timeout: float = 40.0, what: str = "") -> None:
    _wait_for(cond, timeout, what, interval=0.1)


def kcat(bootstrap: str, topic: str, lines: list[str]) -> None:
    kcat_bin = shutil.which("kcat")
    assert kcat_bin is not None
    done = subprocess.run([kcat_bin, "-P", "-b", bootstrap, "-t", topic],  # noqa: S603
                          input="\n".join(lines) + "\n", text=True, capture_output=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr


class Job:
    """Runs the mapping query once (availableNow) on one checkpoint, as often as asked."""

    def __init__(self, spark: Any, space: ContentSpace, bootstrap: str, topics: Topics,
                 checkpoint: Path):
        self.spark, self.space, self.bootstrap = spark, space, bootstrap
        self.topics, self.checkpoint = topics, checkpoint
        self.read: list[int] = []

    def run(self) -> None:
        q = start_query(self.spark, self.space, self.bootstrap, topics=self.topics,
                        checkpoint=self.checkpoint, once=True)
        q.awaitTermination(180)
        assert q.exception() is None, q.exception()
        assert not q.isActive
        self.read.append(input_rows(q))


def expected(events: list[dict[str, Any]], subs: dict[str, tuple[str, Subscription]],
             want: dict[str, Counter[str]]) -> None:
    """Brute force: add to ``want`` (client -> event ids) what the live ``subs`` select.

    A client never receives its own events.
    """
    for e in events:
        for client in want:
            if client != e["client"] and any(
                    c == client and s.matches(e["attrs"]) for c, s in subs.values()):
                want[client][e["id"]] += 1


def received(clients: dict[str, Client]) -> dict[str, Counter[str]]:
    return {name: Counter(d.event_id for d in c.drain(quiet_s=1.0))
            for name, c in clients.items()}


def dead_letters(bootstrap: str, topics: Topics) -> list[Any]:
    reader = Consumer(consumer_config(bootstrap, f"{topics.prefix}-dlq"))
    try:
        tp = TopicPartition(topics.deadletter, 0, 0)
        _, high = reader.get_watermark_offsets(tp, timeout=10)
        reader.assign([tp])
        out = []
        deadline = time.monotonic() + 20
        while len(out) < high and time.monotonic() < deadline:
            for msg in consume_batch(reader, 100, 0.5):
                dl = decode_dead_letter(msg.value())
                assert dict(msg.headers())[HEADER_DLQ_REASON].decode() == dl["reason"]
                out.append(dl)
        return out
    finally:
        reader.close()


@pytest.fixture
def net(kafka_bootstrap: str, topic_prefix: str, tmp_path: Path) -> Iterator[LocalNetwork]:
    space_path = tmp_path / "space.json"
    space_path.write_text(json.dumps(SPEC))
    space = ContentSpace.from_json(space_path)
    prepare_topics(kafka_bootstrap, Topics(topic_prefix), TOPOLOGY["nodes"])
    network = LocalNetwork(kafka_bootstrap, topic_prefix, space_path, space,
                           Topology.from_spec(TOPOLOGY), batch_size=200,
                           unsubscribe_grace_s=2.0)
    yield network
    network.stop()
    network.check()


def test_raw_json_to_deliveries_with_restarts(spark: Any, net: LocalNetwork,
                                              kafka_bootstrap: str, topic_prefix: str,
                                              tmp_path: Path) -> None:
    topics = Topics(topic_prefix)
    space = ContentSpace.from_spec(SPEC)
    job = Job(spark, space, kafka_bootstrap, topics, tmp_path / "checkpoint")
    clients = {name: Client(kafka_bootstrap, node, name, space, topic_prefix=topic_prefix)
               for node, name in (("A", "alice"), ("B", "bob"), ("A", "carol"))}
    live: dict[str, tuple[str, Subscription]] = {}
    try:
        # 1. Subscriptions (and two bad ones) as raw JSON.
        lines = [json.dumps({"node": n, "client": c, "id": i, "where": w}) for n, c, i, w in SUBS]
        lines += [json.dumps({"node": "A", "client": "mallory", "id": "bad1",
                              "where": "volume > 3"}),
                  "this is not json"]
        kcat(kafka_bootstrap, topics.raw_subscriptions, lines)
        job.run()
        for _node, client, sid, where in SUBS:
            sub = Subscription(space, where)
            live[sid] = (client, sub)
            clients[client].subscriptions[sid] = sub  # what the SDK would have kept
        wait_for(lambda: len(net.services["A"].state) == 2 and len(net.services["B"].state) == 1
                 and len(net.services["A"].state.received_from("B")) > 0
                 and len(net.services["B"].state.received_from("A")) > 0,
                 what="subscriptions at the nodes and advertisements")
        net.check()

        # 2. Events from both sides; one bad.
        want: dict[str, Counter[str]] = {name: Counter() for name in clients}

        def publish(round_: int, n: int) -> None:
            batch = []
            for k in range(n):
                sym = ("AAPL", "IBM", "MSFT")[k % 3]
                price = [12.5, 15.625, 700, 10, 20, 999.9, 14][k % 7] + round_ * 0.001
                e = {"node": "AB"[k % 2], "client": ("feed", "bob")[k % 2],
                     "id": f"r{round_}-e{k}", "attrs": {"sym": sym, "price": price}}
                batch.append(e)
            expected(batch, live, want)
            kcat(kafka_bootstrap, topics.raw_events,
                 [json.dumps(e) for e in batch]
                 + [json.dumps({"node": "A", "client": "feed", "id": f"bad-{round_}",
                                "attrs": {"sym": "IBM", "price": 5000}})])

        def settled(names: tuple[str, ...] = ("alice", "bob", "carol")) -> Callable[[], bool]:
            return lambda: all(sum(received({n: clients[n]})[n].values())
                               >= sum(want[n].values()) for n in names)

        publish(1, 21)
        job.run()
        wait_for(settled(), what="round 1 deliveries")
        assert received(clients) == want
        assert all(sum(want[n].values()) > 0 for n in clients)

        # 3. A crash between the write of a batch and its commit: Spark writes it again.
        publish(2, 14)
        job.run()
        commits = sorted((tmp_path / "checkpoint" / "commits").glob("[0-9]*"),
                         key=lambda p: int(p.name))
        commits[-1].unlink()  # and its checksum file, as if it had never been written
        commits[-1].with_name(f".{commits[-1].name}.crc").unlink(missing_ok=True)
        job.run()
        assert job.read[-1] == job.read[-2] > 0  # the same batch, read and written again
        wait_for(lambda: net.total("duplicates") >= 1, what="the nodes to see the repeats")
        wait_for(settled(), what="round 2 deliveries")
        time.sleep(1.0)
        assert received(clients) == want  # each event exactly once

        # 4. An unsubscription through the job, in the micro-batch of an event published
        # just before it at the far node: the event still reaches alice, carrying its
        # publication time (the job's write time, after the cancellation, on main's code);
        # then the network sends alice nothing more.
        def everything(name: str) -> Counter[str]:
            return Counter(d.event_id for d in clients[name].drain(
                quiet_s=1.0, include_false_positives=True))

        before = everything("alice")
        published = int(time.time() * 1000)
        send(kafka_bootstrap, topics.raw_events, published, node="B", client="bob",
             id="late", attrs={"sym": "IBM", "price": 17})  # alice's s1 only
        send(kafka_bootstrap, topics.raw_unsubscriptions, published + 1, node="A",
             client="alice", id="s1")
        job.run()
        assert job.read[-1] == 2  # one micro-batch
        assert find(kafka_bootstrap, topics.node_publish("B"), "late").timestamp()[1] \
            > published + 1  # the job wrote the event after the cancellation
        got = find(kafka_bootstrap, topics.deliver("alice"), "late")
        assert got.timestamp() == (TIMESTAMP_CREATE_TIME, published)
        assert dict(got.headers())[HEADER_PUBLISHED] == published.to_bytes(8, "big")
        live.pop("s1")
        del clients["alice"].subscriptions["s1"]
        wait_for(lambda: len(net.services["A"].state) == 1
                 and len(net.services["B"].state.received_from("A")) == 1,
                 what="the unsubscription and its withdrawal")
        publish(3, 7)
        job.run()
        others = {n: c for n, c in clients.items() if n != "alice"}
        wait_for(settled(tuple(others)), what="round 3 deliveries")
        time.sleep(1.0)
        assert everything("alice") == before + Counter(["late"])
        assert received(others) == {n: want[n] for n in others}
        net.check()

        # 5. Bad raw records are dead letters, each once per raw record (the replayed
        # batch wrote its dead letter again: at-least-once).
        letters = dead_letters(kafka_bootstrap, topics)
        reasons = Counter(dl["source"].split("[")[0] for dl in letters)
        assert reasons[topics.raw_subscriptions] == 2
        assert reasons[topics.raw_events] == 4
        assert any("volume" in dl["reason"] for dl in letters)
        assert any("outside the domain" in dl["reason"] and dl["field"] == "price"
                   for dl in letters)
        assert any(dl["raw"] == b"this is not json" for dl in letters)
    finally:
        for c in clients.values():
            c.close()



def send(bootstrap: str, topic: str, ts: int, **rec: Any) -> None:
    """One raw JSON record with the timestamp ``ts`` (its publication time)."""
    producer = Producer(producer_config(bootstrap))
    producer.produce(topic, json.dumps(rec).encode(), timestamp=ts)
    assert producer.flush(30) == 0


def find(bootstrap: str, topic: str, event_id: str) -> Any:
    """The first record of partition 0 of ``topic`` carrying ``event_id`` (read_committed)."""
    reader = Consumer(consumer_config(bootstrap, f"{topic}-reader"))
    reader.assign([TopicPartition(topic, 0, 0)])
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            for m in consume_batch(reader, 100, 0.5):
                if dict(m.headers() or ()).get(HEADER_EVENT_ID) == event_id.encode():
                    return m
    finally:
        reader.close()
    raise AssertionError(f"no event {event_id!r} on {topic}")
