"""Broker nodes on a real Kafka: routing, dead letters and a restart, end to end."""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
from confluent_kafka import Consumer

from broker_node.config import NodeSettings
from broker_node.service import NodeService
from connectors.client import Client, Delivery
from connectors.kafka import consume_batch, consumer_config
from connectors.serde import SERDE
from connectors.topics import HEADER_DLQ_REASON, HEADER_LABEL, Topics
from dls.space import ContentSpace
from tests.waiting import wait_for

pytestmark = pytest.mark.integration

SPEC = {"attributes": [
    {"name": "sym", "type": "discrete", "values": ["AAPL", "IBM", "MSFT"]},
    {"name": "price", "type": "numeric", "low": 0, "high": 1000, "granules": 64},
]}
LINE = {"A": ["B"], "B": ["A", "C"], "C": ["B"]}


class Net:
    """Three node services on threads, one content space, one topic prefix."""

    def __init__(self, bootstrap: str, prefix: str, space_path: Path, **settings: object):
        self.bootstrap, self.prefix, self.space_path = bootstrap, prefix, space_path
        self.settings = settings
        self.space = ContentSpace.from_json(space_path)
        self.nodes: dict[str, NodeService] = {}
        self.threads: dict[str, threading.Thread] = {}
        self.errors: list[BaseException] = []

    def start(self, name: str) -> NodeService:
        settings = NodeSettings(node=name, neighbours=tuple(LINE[name]), space=self.space_path,
                                bootstrap=self.bootstrap, topic_prefix=self.prefix,
                                batch_size=200, unsubscribe_grace_s=2.0,
                                publish_delay_s=3.0, clock_skew_s=0.2,
                                **self.settings)  # type: ignore[arg-type]
        svc = NodeService(settings, self.space)
        svc.start()

        def run() -> None:
            try:
                svc.run()
            except BaseException as exc:  # surfaced by the test
                self.errors.append(exc)
            finally:
                svc.close()

        t = threading.Thread(target=run, name=f"node-{name}", daemon=True)
        t.start()
        self.nodes[name], self.threads[name] = svc, t
        return svc

    def stop(self, name: str) -> None:
        self.nodes[name].stop()
        self.threads[name].join(30)
        assert not self.threads[name].is_alive()

    def client(self, node: str, cid: str) -> Client:
        shared = self.settings.get("shared_delivery_partitions", 0)
        return Client(self.bootstrap, node, cid, self.space, topic_prefix=self.prefix,
                      shared_delivery_partitions=shared)  # type: ignore[arg-type]


def _net(kafka_bootstrap: str, topic_prefix: str, tmp_path: Path, names: tuple[str, ...],
         **settings: object) -> Iterator[Net]:
    space_path = tmp_path / "space.json"
    space_path.write_text(json.dumps(SPEC))
    n = Net(kafka_bootstrap, topic_prefix, space_path, **settings)
    for name in names:
        n.start(name)
    yield n
    for name in list(n.nodes):
        if n.threads[name].is_alive():
            n.stop(name)
    assert not n.errors, n.errors


@pytest.fixture
def net(kafka_bootstrap: str, topic_prefix: str, tmp_path: Path) -> Iterator[Net]:
    yield from _net(kafka_bootstrap, topic_prefix, tmp_path, tuple(LINE))


@pytest.fixture
def net_alo(kafka_bootstrap: str, topic_prefix: str, tmp_path: Path) -> Iterator[Net]:
    yield from _net(kafka_bootstrap, topic_prefix, tmp_path, tuple(LINE),
                    delivery="at_least_once")


@pytest.fixture
def net_shared(kafka_bootstrap: str, topic_prefix: str, tmp_path: Path) -> Iterator[Net]:
    yield from _net(kafka_bootstrap, topic_prefix, tmp_path, tuple(LINE),
                    delivery="at_least_once", shared_delivery_partitions=SHARED_PARTITIONS)


SHARED_PARTITIONS = 4  # alice and dave share partition 1, carol and feed partition 0


def settled(net: Net, node: str, subs: int) -> Callable[[], bool]:
    return lambda: len(net.nodes[node].state) == subs


def collect(client: Client, want: int, max_idle: float = 8.0) -> list[str]:
    got = []
    for d in client.deliveries(timeout=0.5, max_idle=max_idle):
        got.append(d.event_id)
        if len(got) >= want:
            break
    return got


def collect_until(client: Client, last: str, *, include_false_positives: bool = False,
                  wait: float = 30.0) -> list[Delivery]:
    """What ``client`` is delivered before event ``last``, which must come within ``wait`` s.

    A test publishes ``last`` after the events it checks, on the same path (same writer,
    same label): every topic on the way has one partition and a node keeps the order of a
    label's events, so once ``last`` is there the others have come or never will. One more
    second of reading follows, so that a delivery out of that order fails the test rather
    than being missed, as after a fixed idle wait a late one would be.
    """
    got: list[Delivery] = []
    for d in client.deliveries(timeout=0.25, max_idle=wait,
                               include_false_positives=include_false_positives):
        if d.event_id == last:
            break
        got.append(d)
    else:
        raise AssertionError(f"{client.client_id}: the last event {last} was not delivered "
                             f"within {wait:g} s")
    return got + list(client.deliveries(timeout=0.25, max_idle=1.0,
                                        include_false_positives=include_false_positives))


def test_multi_node_routing_is_exact(net: Net) -> None:
    alice, carol, bob = net.client("A", "alice"), net.client("C", "carol"), \
        net.client("B", "bob")
    s_alice = alice.subscribe("sym in (AAPL, IBM) and price between 10 and 20")
    carol.subscribe("price > 500")
    wait_for(settled(net, "A", 1), what="A's subscription")
    wait_for(settled(net, "C", 1), what="C's subscription")
    # B must have heard both advertisements before events can find their way.
    wait_for(lambda: len(net.nodes["B"].state.received_from("A")) > 0
             and len(net.nodes["B"].state.received_from("C")) > 0, what="advertisements")
    e1 = bob.publish({"sym": "IBM", "price": 12.5})       # alice only
    e2 = bob.publish({"sym": "MSFT", "price": 700})       # carol only
    e3 = bob.publish({"sym": "MSFT", "price": 15})        # nobody exactly
    e4 = carol.publish({"sym": "AAPL", "price": 600})     # not back to carol; nobody else
    bob.flush()
    carol.flush()
    assert collect(alice, 1) == [e1]
    assert collect(carol, 1) == [e2]
    # Unsubscribe: nothing more for alice.
    alice.unsubscribe(s_alice)
    wait_for(settled(net, "A", 0), what="A's unsubscription")
    wait_for(lambda: len(net.nodes["B"].state.received_from("A")) == 0, what="withdrawal")
    bob.publish({"sym": "IBM", "price": 12.5})
    bob.flush()
    assert collect(alice, 1, max_idle=3.0) == []
    del e3, e4
    for c in (alice, bob, carol):
        c.close()
    # Looking for a shared delivery topic (to warn a misconfigured client) made none.
    from connectors.kafka import admin
    assert Topics(net.prefix).shared_deliver not in \
        admin(net.bootstrap).list_topics(timeout=10).topics


def read_dead_letters(net: Net, n: int, timeout: float = 20.0) -> list[tuple[str, str]]:
    topic = Topics(net.prefix).deadletter
    consumer = Consumer(consumer_config(net.bootstrap, f"{net.prefix}-dlq-reader"))
    consumer.subscribe([topic])
    out: list[tuple[str, str]] = []
    deadline = time.monotonic() + timeout
    while len(out) < n and time.monotonic() < deadline:
        for msg in consume_batch(consumer, 100, 0.5):
            name, rec = SERDE.decode(msg.value())
            assert name == "DeadLetter"
            headers = dict(msg.headers() or [])
            assert headers[HEADER_DLQ_REASON].decode() == rec["reason"]
            out.append((rec["source"], rec["reason"]))
    consumer.close()
    return out


def test_bad_input_goes_to_dead_letters_and_routing_goes_on(net: Net) -> None:
    from confluent_kafka import Producer

    from connectors.kafka import producer_config
    from connectors.serde import encode_label_subscription, encode_label_unsubscription

    t = Topics(net.prefix)
    p = Producer(producer_config(net.bootstrap))
    p.produce(t.node_subscribe("A"), b"\x00not avro")
    p.produce(t.node_subscribe("A"), encode_label_subscription(
        "mallory", "m1", np.array([1 << 40], dtype=np.uint64), None))
    p.produce(t.node_unsubscribe("A"), encode_label_unsubscription("mallory", "never-seen"))
    p.produce(t.node_publish("A"), b"event without label")
    p.produce(t.node_publish("A"), b"short label", headers=[(HEADER_LABEL, b"\x01")])
    p.flush(10)
    alice, bob = net.client("A", "alice"), net.client("C", "bob")
    sid = alice.subscribe("price < 100")
    wait_for(settled(net, "A", 1), what="alice's subscription")
    # another client's subscription id cannot be cancelled
    p.produce(t.node_unsubscribe("A"), encode_label_unsubscription("bob", sid))
    p.flush(10)
    wait_for(lambda: len(net.nodes["C"].state.received_from("B")) > 0, what="advertisement")
    e = bob.publish({"sym": "IBM", "price": 50})
    bob.flush()
    assert collect(alice, 1) == [e]
    letters = read_dead_letters(net, 6)
    reasons = " | ".join(r for _, r in letters)
    assert len(letters) == 6, reasons
    assert "undecodable" in reasons
    assert "outside this node's label space" in reasons
    assert "unknown subscription id" in reasons
    assert "without a dls-label header" in reasons
    assert "belongs to client 'alice', not 'bob'" in reasons
    assert len(net.nodes["A"].state) == 1  # nothing bad changed the state
    assert all(src.startswith(f"{net.prefix}.") and "@" in src for src, _ in letters)
    assert net.nodes["A"].metrics.dead_letters >= 5
    alice.close()
    bob.close()


def test_node_restart_loses_no_event(net: Net) -> None:
    alice, pub = net.client("A", "alice"), net.client("C", "feed")
    alice.subscribe("sym = IBM")
    wait_for(settled(net, "A", 1), what="subscription")
    wait_for(lambda: len(net.nodes["C"].state.received_from("B")) > 0, what="advertisement")
    sent = [pub.publish({"sym": "IBM", "price": float(i)}) for i in range(100)]
    pub.flush()
    net.stop("B")  # the middle node goes away mid-stream ...
    sent += [pub.publish({"sym": "IBM", "price": float(i)}) for i in range(100, 200)]
    pub.flush()
    restarted = net.start("B")  # ... and comes back: state rebuilt from Kafka
    assert len(restarted.state.received_from("A")) > 0
    sent += [pub.publish({"sym": "IBM", "price": float(i)}) for i in range(200, 300)]
    pub.flush()
    got = collect(alice, len(sent), max_idle=10.0)
    assert sorted(got) == sorted(sent)
    alice.close()
    pub.close()


@pytest.fixture
def net_by_label(kafka_bootstrap: str, topic_prefix: str, tmp_path: Path) -> Iterator[Net]:
    yield from _net(kafka_bootstrap, topic_prefix, tmp_path, tuple(LINE), exact_delivery=False)


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed")
def test_kcat_sees_what_the_sdk_sees(net_by_label: Net) -> None:
    """Delivery by label (the exact check off), so that a false positive reaches the SDK."""
    net = net_by_label
    alice, bob = net.client("A", "alice"), net.client("B", "bob")
    alice.subscribe("price < 300")
    wait_for(settled(net, "A", 1), what="subscription")
    wait_for(lambda: len(net.nodes["B"].state.received_from("A")) > 0, what="advertisement")
    prices = range(0, 600, 20)
    sent = [bob.publish({"sym": "AAPL", "price": float(p)}) for p in prices]
    bob.flush()
    wait_for(lambda: all(("B/bob", e) in net.nodes["B"].routed for e in sent),
             what="routing at B")
    # Cell 19 of price is [296.875, 312.5): the event at 300 reaches A as a false positive.
    to_a = [e for e, p in zip(sent, prices, strict=True) if p <= 300]
    wait_for(lambda: all(("B/bob", e) in net.nodes["A"].routed for e in to_a),
             what="routing at A")
    sdk = sorted(d.event_id for d in alice.drain(include_false_positives=True))
    out = subprocess.run(  # noqa: S603 - fixed argv, kcat found on PATH above
        [shutil.which("kcat") or "kcat", "-b", net.bootstrap, "-C",
         "-t", Topics(net.prefix).deliver("alice"), "-o", "beginning", "-e", "-J",
         "-X", "isolation.level=read_committed"],
        capture_output=True, timeout=60, check=True)
    seen = []
    for line in out.stdout.decode("utf-8", "replace").splitlines():
        headers = json.loads(line)["headers"]
        pairs = dict(zip(headers[::2], headers[1::2], strict=True))
        if "dls-ack" not in pairs:  # the node's acknowledgement of the subscription
            seen.append(pairs["dls-event-id"])
    assert sorted(seen) == sdk
    assert len(sdk) == len(to_a)
    assert alice.false_positives == 1
    alice.close()
    bob.close()


def test_a_repeated_event_is_routed_once(net: Net) -> None:
    """An at-least-once writer upstream (Spark's Kafka sink) may send an event twice."""
    alice, carol = net.client("A", "alice"), net.client("C", "carol")
    alice.subscribe("sym = IBM")
    wait_for(settled(net, "A", 1), what="subscription")
    wait_for(lambda: len(net.nodes["C"].state.received_from("B")) > 0, what="advertisement")
    first = carol.publish({"sym": "IBM", "price": 1.0}, event_id="same")
    carol.publish({"sym": "IBM", "price": 1.0}, event_id="same")  # the repeat
    other = carol.publish({"sym": "IBM", "price": 2.0})
    last = carol.publish({"sym": "IBM", "price": 2.0})
    carol.flush()
    got = [d.event_id for d in collect_until(alice, last)]
    assert sorted(got) == sorted([first, other])
    assert net.nodes["C"].metrics.duplicates == 1
    assert alice.duplicates == 0  # the network itself sent it once
    # The same id from another origin is another event.
    bob = net.client("B", "bob")
    third = bob.publish({"sym": "IBM", "price": 3.0}, event_id="same")
    bob.flush()
    assert collect(alice, 1) == [third]
    for c in (alice, bob, carol):
        c.close()


@pytest.mark.parametrize("fixture", ["net_alo", "net_shared"])
def test_at_least_once_routes_exactly_and_survives_a_restart(
        fixture: str, request: pytest.FixtureRequest) -> None:
    net: Net = request.getfixturevalue(fixture)
    alice, carol, pub = net.client("A", "alice"), net.client("C", "carol"), \
        net.client("C", "feed")
    alice.subscribe("sym = IBM and price < 100")
    carol.subscribe("price >= 100")
    wait_for(settled(net, "A", 1), what="A's subscription")
    wait_for(lambda: len(net.nodes["C"].state.received_from("B")) > 0, what="advertisement")
    to_alice = [pub.publish({"sym": "IBM", "price": float(i % 100)}) for i in range(100)]
    to_carol = [pub.publish({"sym": "MSFT", "price": 100.0 + i}) for i in range(50)]
    pub.publish({"sym": "AAPL", "price": 5.0})  # nobody
    pub.flush()
    net.stop("B")  # mid-stream: the middle node goes away ...
    to_alice += [pub.publish({"sym": "IBM", "price": 50.0}) for _ in range(50)]
    pub.flush()
    net.start("B")  # ... and comes back with its state rebuilt from Kafka
    to_alice += [pub.publish({"sym": "IBM", "price": 60.0}) for _ in range(50)]
    pub.flush()
    assert sorted(collect(alice, len(to_alice), max_idle=10.0)) == sorted(to_alice)
    assert sorted(collect(carol, len(to_carol), max_idle=5.0)) == sorted(to_carol)
    for c in (alice, carol, pub):
        c.close()


def test_a_batch_larger_than_the_producer_queue_waits_for_room(
        kafka_bootstrap: str, topic_prefix: str, tmp_path: Path) -> None:
    """Regression: a full librdkafka queue (BufferError) used to kill the node."""
    gen = _net(kafka_bootstrap, topic_prefix, tmp_path, ("A",), producer_queue_messages=20)
    net = next(gen)
    alice, feed = net.client("A", "alice"), net.client("A", "feed")
    alice.subscribe("sym = IBM")
    wait_for(settled(net, "A", 1), what="subscription")
    net.stop("A")
    sent = [feed.publish({"sym": "IBM", "price": float(i)}) for i in range(150)]
    feed.flush()
    node = net.start("A")  # 150 events waiting: batches far larger than the queue of 20
    assert sorted(collect(alice, len(sent))) == sorted(sent)
    assert node.metrics.queue_full_waits > 0
    assert not net.errors
    for c in (alice, feed):
        c.close()
    with pytest.raises(StopIteration):
        next(gen)


def test_repeated_unsubscription_and_reused_id(net: Net) -> None:
    """What an at-least-once writer upstream (the Spark job) may repeat changes nothing."""
    from confluent_kafka import Producer

    from connectors.kafka import producer_config
    from connectors.serde import encode_label_subscription, encode_label_unsubscription

    alice = net.client("A", "alice")
    sid = alice.subscribe("sym = IBM")
    wait_for(settled(net, "A", 1), what="subscription")
    labels = alice.subscriptions[sid].labels()
    alice.unsubscribe(sid)
    wait_for(settled(net, "A", 0), what="unsubscription")
    t = Topics(net.prefix)
    p = Producer(producer_config(net.bootstrap))
    p.produce(t.node_unsubscribe("A"), encode_label_unsubscription("alice", sid))  # repeat
    p.flush(10)
    wait_for(lambda: net.nodes["A"].metrics.duplicates >= 1, what="repeat counted")
    p.produce(t.node_subscribe("A"), encode_label_subscription("alice", sid, labels, None))
    p.flush(10)
    letters = read_dead_letters(net, 1)
    assert len(letters) == 1 and "was cancelled; ids are not reused" in letters[0][1], letters
    assert len(net.nodes["A"].state) == 0
    assert net.nodes["A"].metrics.dead_letters == 1  # the repeated unsubscription was none
    alice.close()


def test_shared_delivery_topic_routes_exactly(net_shared: Net) -> None:
    """One topic for all clients: each reads its partition and keeps only its own."""
    from connectors.topics import HEADER_CLIENTS, decode_clients, delivery_partition

    net = net_shared
    assert delivery_partition("alice", SHARED_PARTITIONS) == \
        delivery_partition("dave", SHARED_PARTITIONS)
    alice, dave, carol = net.client("A", "alice"), net.client("A", "dave"), \
        net.client("C", "carol")
    feed = net.client("C", "feed")  # carol's partition, subscribes nothing
    alice.subscribe("sym = IBM")
    dave.subscribe("price >= 500")
    carol.subscribe("sym = AAPL")
    wait_for(settled(net, "A", 2), what="A's subscriptions")
    wait_for(settled(net, "C", 1), what="C's subscription")
    wait_for(lambda: len(net.nodes["C"].state.received_from("B")) > 0
             and len(net.nodes["A"].state.received_from("B")) > 0, what="advertisements")
    bob = net.client("B", "bob")
    to_alice = bob.publish({"sym": "IBM", "price": 10.0})
    to_dave = bob.publish({"sym": "MSFT", "price": 900.0})
    to_both = bob.publish({"sym": "IBM", "price": 700.0})
    to_carol = bob.publish({"sym": "AAPL", "price": 1.0})
    bob.publish({"sym": "MSFT", "price": 1.0})  # nobody
    bob.flush()
    assert sorted(collect(alice, 2)) == sorted([to_alice, to_both])
    assert sorted(collect(dave, 2)) == sorted([to_dave, to_both])
    assert collect(carol, 1) == [to_carol]
    assert collect(feed, 1, max_idle=2.0) == []
    assert feed.delivered == 0 and feed.duplicates == 0
    # One message for alice and dave together: the event is written once to partition 1.
    msgs = _read_partition(net, Topics(net.prefix).shared_deliver,
                           delivery_partition("alice", SHARED_PARTITIONS), want=5)
    by_event = {dict(m.headers())["dls-event-id"].decode():
                decode_clients(dict(m.headers())[HEADER_CLIENTS]) for m in msgs
                if "dls-ack" not in dict(m.headers())}  # acknowledgements of subscriptions
    assert by_event == {to_alice: {"alice"}, to_dave: {"dave"}, to_both: {"alice", "dave"}}
    metrics = net.nodes["A"].metrics
    assert metrics.deliveries == 4 and metrics.delivery_messages == 3
    for c in (alice, dave, carol, feed, bob):
        c.close()


def _read_partition(net: Net, topic: str, partition: int, want: int) -> list[object]:
    from confluent_kafka import TopicPartition

    reader = Consumer(consumer_config(net.bootstrap, f"{net.prefix}-raw-reader"))
    reader.assign([TopicPartition(topic, partition, 0)])
    out: list[object] = []
    deadline = time.monotonic() + 20
    while len(out) < want and time.monotonic() < deadline:
        out += consume_batch(reader, 100, 0.5)
    time.sleep(0.5)
    out += consume_batch(reader, 100, 0.5)  # nothing more may come
    reader.close()
    return out


def test_shared_delivery_topic_with_another_partition_count_is_refused(
        kafka_bootstrap: str, topic_prefix: str, tmp_path: Path) -> None:
    from broker_node.exceptions import BrokerError
    from connectors.exceptions import ConnectorError
    from connectors.kafka import ensure_topics

    ensure_topics(kafka_bootstrap, [Topics(topic_prefix).shared_deliver], partitions=3)
    space_path = tmp_path / "space.json"
    space_path.write_text(json.dumps(SPEC))
    settings = NodeSettings(node="A", space=space_path, bootstrap=kafka_bootstrap,
                            topic_prefix=topic_prefix, shared_delivery_partitions=4)
    svc = NodeService(settings)
    with pytest.raises(BrokerError, match="has 3 partitions, this network is configured for 4") \
            as err:
        svc.start()
    assert err.value.field == "shared_delivery_partitions" and err.value.value == 4
    svc.close()
    client = Client(kafka_bootstrap, "A", "alice", space_path, topic_prefix=topic_prefix,
                    shared_delivery_partitions=4)
    with pytest.raises(ConnectorError, match="has 3 partitions") as cerr:
        next(client.deliveries(timeout=0.1, max_idle=0.1), None)
    assert cerr.value.field == "partitions" and cerr.value.value == 3
    client.close()


def test_a_client_reading_the_wrong_place_is_warned(net_shared: Net,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    """Nodes on the shared topic, a client told nothing: it says why nothing will arrive."""
    from connectors.kafka import admin

    lost = Client(net_shared.bootstrap, "A", "lost", net_shared.space,
                  topic_prefix=net_shared.prefix)
    with caplog.at_level("WARNING", logger="connectors"):
        assert collect(lost, 1, max_idle=0.5) == []
    assert any("shared_delivery_partitions" in r.getMessage() and "lost" in r.getMessage()
               for r in caplog.records), caplog.text
    lost.close()
    assert f"{net_shared.prefix}.deliver.lost" in \
        admin(net_shared.bootstrap).list_topics(timeout=10).topics  # where it looked


@pytest.mark.parametrize(("freeze", "threshold"), [(True, 50_000), (False, 0)])
def test_start_freezes_the_heap_and_sets_the_threshold_only_when_asked(
        kafka_bootstrap: str, topic_prefix: str, tmp_path: Path, freeze: bool,
        threshold: int) -> None:
    import gc

    space_path = tmp_path / "space.json"
    space_path.write_text(json.dumps(SPEC))
    settings = NodeSettings(node="A", space=space_path, bootstrap=kafka_bootstrap,
                            topic_prefix=topic_prefix, gc_freeze=freeze,
                            gc_young_threshold=threshold)
    gc.unfreeze()
    gc.set_threshold(700, *gc.get_threshold()[1:])  # the _gc_thresholds fixture restores it
    svc = NodeService(settings)
    try:
        svc.start()
        assert (gc.get_freeze_count() > 0) is freeze
        state_scanned = any(o is svc.state for o in gc.get_objects())
        assert state_scanned is not freeze
        assert gc.get_threshold()[0] == (threshold or 700)
    finally:
        svc.close()
        gc.unfreeze()


def _librdkafka_handles() -> int:
    """librdkafka instances alive in this process: one ``rdk:main`` thread each."""
    import glob

    names = []
    for comm in glob.glob("/proc/self/task/*/comm"):
        try:
            with open(comm) as f:
                names.append(f.read().strip())
        except OSError:  # the thread ended meanwhile
            continue
    return names.count("rdk:main")


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs Linux /proc")
@pytest.mark.parametrize("delivery", ["exactly_once", "at_least_once"])
def test_a_closed_node_leaves_no_kafka_client_behind(
        kafka_bootstrap: str, topic_prefix: str, tmp_path: Path, delivery: str) -> None:
    """Close ends every librdkafka instance the node made, its heap frozen or not.

    Before, the producers went "with their last reference", but a frozen heap keeps them
    in a reference cycle that is never collected: two instances (and their threads) per
    node run stayed until the process exited, retrying the broker.
    """
    import gc

    space_path = tmp_path / "space.json"
    space_path.write_text(json.dumps(SPEC))
    settings = NodeSettings(node="A", neighbours=("B",), space=space_path,
                            bootstrap=kafka_bootstrap, topic_prefix=topic_prefix,
                            delivery=delivery, gc_freeze=True)  # type: ignore[arg-type]
    gc.collect()
    before = _librdkafka_handles()
    svc = NodeService(settings)
    try:
        svc.start()
        assert _librdkafka_handles() > before  # what is counted is there while it runs
        svc.run(max_seconds=1.0)
    finally:
        svc.close()
    after = _librdkafka_handles()  # the node's heap still frozen, svc still referenced
    gc.unfreeze()
    assert after <= before
