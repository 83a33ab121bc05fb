"""connectors.handout: a batch a listener's loop left early is read again from the delivery
in hand, with the client's counters and its memory of seen events as they were then."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import TopicPartition

from connectors.client import Client
from connectors.handout import counters, forget, rewind
from connectors.recent import RecentKeys, routed_key
from dls.predicates import Subscription
from tests.connectors.test_client import SPACE, TOPIC, _event


class SeekRecorder:
    """Stands in for the delivery consumer: what it was asked to seek to."""

    def __init__(self) -> None:
        self.seeks: list[TopicPartition] = []

    def seek(self, tp: TopicPartition) -> None:
        self.seeks.append(tp)


@pytest.fixture
def alice() -> Any:
    client = Client("127.0.0.1:1", "A", "alice", SPACE)
    client.subscriptions["cheap"] = Subscription(SPACE, "price < 50")
    client._loaded = False  # no second look at the subscriptions topic (no broker here)
    yield client
    client.close()


def _batch() -> list[Any]:
    return [_event(10, 10.0, "e1"), _event(11, 90.0, "e2"),  # a match, a false positive
            _event(12, 10.0, value=b"junk"), _event(13, 10.0, "e1"),  # bad, a repeat
            _event(14, 20.0, "e3"), _event(15, 30.0, "e4")]


def test_take_all_marks_the_counters_before_each_message(alice: Client) -> None:
    seen = RecentKeys(100)
    batch = alice._take_all(_batch(), seen)
    assert [j for j, _ in batch.taken] == [0, 1, 4, 5]
    assert batch.marks[0] == (0, 0, 0, 0)
    assert batch.marks[4] == (2, 1, 1, 1)  # e1, e2 (fp), the bad one, the repeat
    assert counters(alice) == (4, 1, 1, 1)


@pytest.mark.parametrize(("hand", "offset", "after", "kept"), [
    (1, 12, (2, 1, 0, 0), {"e0", "e1", "e2"}),  # e2 in hand: read again from the next
    (0, 11, (1, 0, 0, 0), {"e0", "e1"}),  # e1 in hand
    (-1, 10, (0, 0, 0, 0), {"e0"}),  # none handed out yet: all of it
])
def test_rewind_reads_again_after_the_delivery_in_hand(
        alice: Client, hand: int, offset: int, after: tuple[int, ...],
        kept: set[str]) -> None:
    seen = RecentKeys(100)
    seen.add(routed_key("B/bob", "e0"))  # from an earlier batch: stays
    batch = alice._take_all(_batch(), seen)
    batch.hand = hand
    consumer = SeekRecorder()
    assert rewind(batch, alice, seen, consumer).offset() == offset
    assert [(tp.topic, tp.partition, tp.offset) for tp in consumer.seeks] == [
        (TOPIC, 0, offset)]
    assert counters(alice) == after
    assert {e for e in ("e0", "e1", "e2", "e3", "e4") if ("B/bob", e) in seen} == kept
    # what is read again is counted once
    again = alice._take_all(_batch()[offset - 10:], seen)
    assert [d.event_id for _, d in again.taken] == [
        e for e in ("e1", "e2", "e3", "e4") if e not in kept]
    assert counters(alice) == (4, 1, 1, 1)


def test_a_batch_handed_out_to_its_last_delivery_is_not_read_again(alice: Client) -> None:
    seen = RecentKeys(100)
    batch = alice._take_all(_batch(), seen)
    batch.hand = len(batch.taken) - 1
    consumer = SeekRecorder()
    assert rewind(batch, alice, seen, consumer) is None and consumer.seeks == []
    assert counters(alice) == (4, 1, 1, 1)


def test_forget_takes_back_a_false_positive_the_second_look_made_a_match(
        alice: Client) -> None:
    seen = RecentKeys(100)
    batch = alice._take_all(_batch(), seen)
    batch.fixed.add(1)  # e2, as if another process of alice had subscribed to it
    alice.false_positives -= 1
    batch.hand = 1
    msg = forget(batch, alice, seen)
    assert msg.offset() == 12
    assert counters(alice) == (2, 0, 0, 0)  # e2 stays a match, not a false positive
