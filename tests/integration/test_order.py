"""The order rule on a real Kafka: an unsubscription never overtakes earlier events.

Before the rule, a node removed a subscription as soon as it read the unsubscription. A
node far behind (here: C, stopped while its clients published) then routed its backlog
after the withdrawals had passed, and the events published while the subscription was
live reached nobody. Now the subscription retires: it stays until every input of its node
has passed the unsubscription's time, which a node behind holds back through its
heartbeats (broker_node/progress.py).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.test_nodes import Net, _net, settled
from tests.waiting import wait_for

pytestmark = pytest.mark.integration


@pytest.fixture(params=["exactly_once", "at_least_once"])
def line(request: pytest.FixtureRequest, kafka_bootstrap: str, topic_prefix: str,
         tmp_path: Path) -> Iterator[Net]:
    yield from _net(kafka_bootstrap, topic_prefix, tmp_path, ("A", "B", "C"),
                    delivery=request.param)


def test_a_node_far_behind_still_delivers_what_was_published_before_the_unsubscription(
        line: Net) -> None:
    alice, carol = line.client("A", "alice"), line.client("C", "carol")
    sid = alice.subscribe("sym = IBM")
    wait_for(settled(line, "A", 1), what="A's subscription")
    wait_for(lambda: len(line.nodes["C"].state.received_from("B")) > 0,
             what="the advertisement at C")
    line.stop("C")  # C falls behind: its clients publish while it is away
    before = [carol.publish({"sym": "IBM", "price": 10 + i}) for i in range(20)]
    carol.flush()
    alice.unsubscribe(sid)
    # A has read the unsubscription; before the rule it removed the subscription now.
    wait_for(lambda: sid in line.nodes["A"].controls.retiring, what="A's unsubscription")
    line.start("C")  # C routes its backlog, published before the unsubscription
    # The SDK still matches them to the cancelled subscription: published before.
    wait_for(lambda: set(before) <= {d.event_id for d in alice.drain(quiet_s=1.0)
                                     if d.subscriptions == (sid,)},
             what="the backlog at alice", timeout=60)
    # Once C's heartbeats pass the unsubscription, A removes it and withdraws the labels.
    wait_for(settled(line, "A", 0), what="A's removal", timeout=60)
    wait_for(lambda: len(line.nodes["C"].state.received_from("B")) == 0,
             what="the withdrawal at C", timeout=30)
    for c in (alice, carol):
        c.close()


def test_an_acknowledged_subscription_is_applied_across_the_network(line: Net) -> None:
    """subscribe(wait=...) returns once every node on the way has the labels, not before."""
    alice, carol = line.client("A", "alice"), line.client("C", "carol")
    line.stop("C")
    with pytest.raises(Exception, match="not acknowledged|acknowledg"):
        alice.subscribe("sym = MSFT", sub_id="s-early", wait=3.0)  # C cannot apply it
    line.start("C")
    sid = alice.subscribe("sym = IBM", wait=60.0)
    # No waiting here: the acknowledgement means C has applied B's advertisement.
    assert len(line.nodes["C"].state.received_from("B")) > 0
    eid = carol.publish({"sym": "IBM", "price": 1.0})  # at the far end, right after
    carol.flush()
    wait_for(lambda: eid in {d.event_id for d in alice.drain(quiet_s=1.0)},
             what="the event published right after the acknowledgement", timeout=30)
    assert sid in alice.subscriptions
    for c in (alice, carol):
        c.close()


def test_a_wait_for_an_acknowledgement_survives_a_restart_of_the_node(line: Net) -> None:
    """The node restarts while the acknowledgement is pending: it acknowledges again."""
    import threading

    alice = line.client("A", "alice")
    line.stop("C")  # the acknowledgement waits for C
    done: list[object] = []
    waiter = threading.Thread(target=lambda: done.append(
        alice.subscribe("sym = IBM", sub_id="s-restart", wait=90.0)), daemon=True)
    waiter.start()
    wait_for(lambda: len(line.nodes["A"].state) == 1, what="A applies the subscription")
    line.stop("A")  # the pending acknowledgement goes with the process
    line.start("A")
    line.start("C")
    waiter.join(90)
    assert done == ["s-restart"]
    alice.close()


@pytest.fixture
def busy_alo(kafka_bootstrap: str, topic_prefix: str, tmp_path: Path) -> Iterator[Net]:
    """At least once, never idle, a commit only every 60 s unless something waits for one."""
    yield from _net(kafka_bootstrap, topic_prefix, tmp_path, ("A", "B", "C"),
                    delivery="at_least_once", commit_interval_s=60.0)


def test_at_least_once_acknowledges_only_what_every_node_has_committed(busy_alo: Net) -> None:
    """A node that reports link control applied, or acknowledges a subscription, has
    committed the batch that applied it.

    Before, an at-least-once node reported at once and committed up to ``commit_interval_s``
    later: killed in between, it re-read the advertisement after events published since
    the acknowledgement, routed those without it, and the subscriber missed them (the
    fault harness's node_kill-alo-topics lost 3 pairs that way). Here the nodes are kept
    busy, so only the acknowledgement's own need makes them commit within the minute.
    """
    import threading

    from confluent_kafka import Consumer, TopicPartition

    from connectors.kafka import committed_offsets, consumer_config, watermark_offsets

    net = busy_alo
    stop = threading.Event()

    def feed(node: str) -> None:  # events nobody wants: the node is never idle
        c = net.client(node, f"feed-{node}")
        while not stop.is_set():
            c.publish({"sym": "AAPL", "price": 1.0})
            time.sleep(0.002)
        c.close()

    feeders = [threading.Thread(target=feed, args=(n,), daemon=True) for n in "ABC"]
    for f in feeders:
        f.start()
    try:
        wait_for(lambda: all(net.nodes[n].metrics.batches > 50 for n in "ABC"),
                 what="busy nodes")
        alice = net.client("A", "alice")
        alice.subscribe("sym = IBM", wait=30.0)
        for node, topic in (("A", net.nodes["A"].topics.node_subscribe("A")),
                            ("B", net.nodes["B"].topics.link("A", "B")),
                            ("C", net.nodes["C"].topics.link("B", "C"))):
            watcher = Consumer(consumer_config(net.bootstrap, net.nodes[node].settings
                                               .consumer_group))
            try:
                tp = TopicPartition(topic, 0)
                end = watermark_offsets(watcher, tp)[1]
                done = committed_offsets(watcher, [tp], timeout=10.0)[0].offset
            finally:
                watcher.close()
            assert done == end, f"{node} committed {topic} to {done}, it ends at {end}"
        alice.close()
    finally:
        stop.set()
        for f in feeders:
            f.join(10)
