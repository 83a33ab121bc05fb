"""How a node gets its state back at start: its control topics read again.

The state lives in memory. At start the node reads its control topics (subscribe,
unsubscribe, inbound links; created with unlimited retention) from the beginning up to the
committed offsets and applies them without producing anything (those outputs were produced
before), then resumes the normal loop from the committed offsets.
"""

from __future__ import annotations

import time

from confluent_kafka import Consumer, Message, TopicPartition

from broker_node.config import NodeSettings
from broker_node.exceptions import BrokerError
from broker_node.inbox import offset_of, timestamp_of, topic_of
from connectors.kafka import committed_offsets, consume_batch, consumer_config

__all__ = ["RECOVERY_TIMEOUT_S", "control_history"]

#: The longest a node spends re-reading its control topics before it gives up.
RECOVERY_TIMEOUT_S = 120


def control_history(s: NodeSettings, consumer: Consumer, topics: list[str]) -> list[Message]:
    """The messages of ``topics`` below the group's committed offsets, in timestamp order.

    ``consumer`` is the node's (its group's committed offsets count); the messages are read
    by a reader of their own. Ties of timestamp keep topic, then offset order.
    """
    committed = committed_offsets(consumer, [TopicPartition(topic, 0) for topic in topics])
    todo = [tp for tp in committed if tp.offset > 0]
    if not todo:
        return []
    reader = Consumer(consumer_config(s.bootstrap, f"{s.consumer_group}-recovery",
                                      **s.kafka_security()))
    try:
        reader.assign([TopicPartition(tp.topic, 0, 0) for tp in todo])
        seen = _read_until(reader, {tp.topic: tp.offset for tp in todo}, s.node)
    finally:
        reader.close()
    seen.sort(key=lambda m: (timestamp_of(m), topic_of(m), offset_of(m)))
    return seen


def _read_until(reader: Consumer, end: dict[str, int], node: str) -> list[Message]:
    """Everything below ``end`` (by topic) of the reader's partitions.

    Transaction markers take offsets too, so the last record of a topic may sit below
    ``end - 1``: a topic is done when the reader's position reaches ``end``, or when
    nothing more arrives for a while (all below ``end`` is then read).
    """
    seen: list[Message] = []
    deadline = time.monotonic() + RECOVERY_TIMEOUT_S
    quiet = 0
    while time.monotonic() < deadline:
        batch = consume_batch(reader, 10_000, 0.5)
        seen += [msg for msg in batch if offset_of(msg) < end[topic_of(msg)]]
        positions = reader.position([TopicPartition(t, 0) for t in end])
        if all(p.offset >= end[p.topic] for p in positions):
            return seen
        quiet = 0 if batch else quiet + 1
        if quiet >= 4:
            return seen
    raise BrokerError(f"node {node}: could not re-read control topics {sorted(end)} within "
                      f"{RECOVERY_TIMEOUT_S} s", field="recovery", value=sorted(end))
