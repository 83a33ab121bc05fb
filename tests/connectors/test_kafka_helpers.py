"""Kafka helpers that fail cleanly without a broker (no broker needed)."""

from __future__ import annotations

import pytest
from confluent_kafka import Message

from connectors.exceptions import ConnectorError
from connectors.kafka import ensure_topics, next_offsets, offsets_to_commit


def test_ensure_topics_without_a_broker_names_it_and_the_timeout() -> None:
    # Nothing listens on port 1: every metadata attempt fails until the deadline.
    with pytest.raises(ConnectorError,
                       match=r"cannot read topic metadata from 127\.0\.0\.1:1 within 1\.5s"):
        ensure_topics("127.0.0.1:1", ["dls.x"], timeout=1.5)


def test_next_offsets_is_one_past_the_last_message_of_each_partition() -> None:
    msgs = [Message(topic="a", partition=0, offset=4), Message(topic="b", partition=0, offset=9),
            Message(topic="a", partition=1, offset=0), Message(topic="a", partition=0, offset=5)]
    offsets = next_offsets(msgs)
    assert offsets == {("a", 0): 6, ("b", 0): 10, ("a", 1): 1}
    tps = offsets_to_commit(offsets)
    assert [(tp.topic, tp.partition, tp.offset) for tp in tps] == [
        ("a", 0, 6), ("b", 0, 10), ("a", 1, 1)]
    assert next_offsets([]) == {}
