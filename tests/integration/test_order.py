"""The order rule on a real Kafka: an unsubscription never overtakes earlier events.

Before the rule, a node removed a subscription as soon as it read the unsubscription. A
node far behind (here: C, stopped while its clients published) then routed its backlog
after the withdrawals had passed, and the events published while the subscription was
live reached nobody. Now the subscription retires: it stays until every input of its node
has passed the unsubscription's time, which a node behind holds back through its
heartbeats (broker_node/progress.py).
"""

from __future__ import annotations

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
