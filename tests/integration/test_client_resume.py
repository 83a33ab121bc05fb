"""A listener's loop left in the middle of a batch, on a real Kafka.

``Client.deliveries`` reads its delivery partition in batches and commits a batch's
offsets once every delivery of it was handed out. A loop left early (an exception in the
caller's handler, or ``break``) used to leave the consumer past the whole batch: the next
call went on after it, and its commit covered the deliveries never handed out (lost, with
no log line). The next call now goes on right after the delivery that was in hand.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from connectors.client import Client
from tests.integration.test_client import SPEC, OneNode

pytestmark = pytest.mark.integration

EVENTS = 12


class HandlerError(Exception):
    """What the caller's handler raises on one delivery."""


@pytest.fixture(params=[0, 2], ids=["own-topic", "shared-topic"])
def node(request: pytest.FixtureRequest, kafka_bootstrap: str, topic_prefix: str,
         tmp_path: Path) -> Iterator[OneNode]:
    space = tmp_path / "space.json"
    space.write_text(json.dumps(SPEC))
    n = OneNode(kafka_bootstrap, topic_prefix, space, shared=request.param)
    yield n
    n.stop()


@pytest.fixture
def node_own(kafka_bootstrap: str, topic_prefix: str, tmp_path: Path) -> Iterator[OneNode]:
    """Node A, its clients on topics of their own (the cases the layout does not change)."""
    space = tmp_path / "space.json"
    space.write_text(json.dumps(SPEC))
    n = OneNode(kafka_bootstrap, topic_prefix, space)
    yield n
    n.stop()


def _published(node: OneNode, alice: Client) -> list[str]:
    """Alice subscribes; EVENTS events for her are published and routed (one batch later)."""
    alice.subscribe("price < 45", wait=30)
    feed = node.client("feed")
    try:
        ids = [feed.publish({"price": float(i)}) for i in range(EVENTS)]
        feed.flush()
    finally:
        feed.close()
    deadline = time.monotonic() + 30
    while node.service.metrics.events_in < EVENTS and time.monotonic() < deadline:
        time.sleep(0.05)
    assert node.service.metrics.events_in == EVENTS
    time.sleep(0.5)  # their transaction commits: a listener reads them in one batch
    return ids


def _rest(alice: Client) -> list[str]:
    return [d.event_id for d in alice.deliveries(timeout=0.25, max_idle=1.0)]


def test_a_handler_that_raises_loses_nothing_of_its_batch(node: OneNode) -> None:
    alice = node.client("alice")
    try:
        ids = _published(node, alice)
        handled: list[str] = []
        with pytest.raises(HandlerError):
            for d in alice.deliveries(timeout=0.5, max_idle=10.0):
                if d.event_id == ids[3]:
                    raise HandlerError(d.event_id)
                handled.append(d.event_id)
        assert handled == ids[:3]
        handled += _rest(alice)  # the rest of the batch (the caller has the one it failed on)
        assert handled == ids[:3] + ids[4:]
        assert (alice.delivered, alice.duplicates) == (EVENTS, 0)
    finally:
        alice.close()
    again = node.client("alice")  # all of it was committed
    try:
        assert _rest(again) == []
    finally:
        again.close()


def test_a_loop_left_with_break_goes_on_after_the_delivery_in_hand(node_own: OneNode) -> None:
    node = node_own
    alice = node.client("alice")
    try:
        ids = _published(node, alice)
        first = [d.event_id for _, d in zip(range(5), alice.deliveries(timeout=0.5,
                                                                         max_idle=10.0),
                                               strict=False)]
        assert first == ids[:5]
        assert _rest(alice) == ids[5:]
        assert (alice.delivered, alice.duplicates) == (EVENTS, 0)
    finally:
        alice.close()


def test_a_new_listener_after_a_loop_left_early_starts_after_the_delivery_in_hand(
        node_own: OneNode) -> None:
    """Closing the client commits what was handed out, up to the delivery in hand."""
    node = node_own
    alice = node.client("alice")
    try:
        ids = _published(node, alice)
        with pytest.raises(HandlerError):
            for d in alice.deliveries(timeout=0.5, max_idle=10.0):
                if d.event_id == ids[6]:
                    raise HandlerError(d.event_id)
    finally:
        alice.close()
    again = node.client("alice")
    try:
        assert _rest(again) == ids[7:]
        assert again.duplicates == 0
    finally:
        again.close()
