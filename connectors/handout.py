"""What a listener's loop has handed out of its batch, so that a loop left early loses nothing.

:meth:`connectors.client.Client.deliveries` reads its delivery partition in batches and
commits a batch's offsets once every delivery of it was handed out. A loop left in the
middle of a batch (the caller's handler raised, or ``break``) leaves the consumer past the
whole batch, and the next batch's commit would cover the deliveries never handed out:
they would be lost without a trace. So the batch being handed out is kept
(:class:`HandOut`): the next call first puts the consumer back just after the delivery in
hand (:func:`rewind`) and forgets having seen those after it, which are then read,
checked and counted again. The delivery in hand is the caller's: it was handed out, and a
loop left with ``break`` is done with it (one left by an exception has it in its hands,
and a handler that always fails on one delivery must not get it back forever).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaException, TopicPartition

from connectors.recent import RecentKeys, routed_key
from connectors.topics import source_of

__all__ = ["COUNTERS", "HandOut", "counters", "forget", "release", "rewind"]

_log = logging.getLogger(__name__)

#: The client's counters of what it read, restored by :func:`rewind`.
COUNTERS = ("delivered", "false_positives", "duplicates", "undecodable")


def counters(client: Any) -> tuple[int, ...]:
    """The client's :data:`COUNTERS`, in that order."""
    return tuple(getattr(client, name) for name in COUNTERS)


@dataclass
class HandOut:
    """One batch of a delivery partition, checked, and how far the loop handed it out."""

    msgs: list[Any]
    #: the client's counters just before each message was checked
    marks: list[tuple[int, ...]] = field(default_factory=list)
    #: (index of its message, delivery), in the order of the messages
    taken: list[tuple[int, Any]] = field(default_factory=list)
    #: indexes into ``taken`` that the second look at the client's subscriptions turned
    #: from false positives into matches (each one counted once as a false positive, then
    #: taken off again)
    fixed: set[int] = field(default_factory=set)
    #: index into ``taken`` of the delivery in hand (-1: none handed out yet)
    hand: int = -1


def forget(batch: HandOut, client: Any, seen: RecentKeys) -> Any:
    """Undo the reading of ``batch`` after its delivery in hand; return where reading resumes.

    That is the message after the delivery in hand's (the batch's first one when none was
    handed out), or None when the batch ends there: nothing is read again. The client's
    counters go back to what they were before that message, and the keys of the
    deliveries after the one in hand leave ``seen``.
    """
    first = batch.hand + 1
    at = batch.taken[batch.hand][0] + 1 if batch.hand >= 0 else 0
    if at >= len(batch.msgs):
        return None
    for name, value in zip(COUNTERS, batch.marks[at], strict=True):
        setattr(client, name, value)
    client.false_positives -= sum(1 for i in batch.fixed if i < first)
    for _, d in batch.taken[first:]:
        seen.discard(routed_key(d.origin, d.event_id))
    return batch.msgs[at]


def rewind(batch: HandOut, client: Any, seen: RecentKeys, consumer: Any) -> Any:
    """:func:`forget`, and put ``consumer`` back at that message (returned; None: no move)."""
    msg = forget(batch, client, seen)
    if msg is None:
        return None
    consumer.seek(TopicPartition(msg.topic(), msg.partition(), msg.offset()))
    _log.info("client %s reads again from %s: its last loop over deliveries was left before "
              "the rest of that batch was handed out", getattr(client, "client_id", "?"),
              source_of(msg.topic(), msg.partition(), msg.offset()))
    return msg


def release(batch: HandOut, client: Any, seen: RecentKeys, consumer: Any) -> None:
    """:func:`forget`, and commit up to where reading resumes: the next reader starts there.

    For a client closing its consumer. A commit that fails is logged: the next reader then
    starts before, and sees again what was handed out already (repeats, no loss).
    """
    msg = forget(batch, client, seen)
    last = batch.msgs[-1]
    topic, partition, offset = ((msg.topic(), msg.partition(), msg.offset()) if msg is not None
                                else (last.topic(), last.partition(), last.offset() + 1))
    try:
        consumer.commit(offsets=[TopicPartition(topic, partition, offset)],
                        asynchronous=False)
    except KafkaException as exc:
        _log.warning("client %s: committing up to %s at close failed (%s)",
                     getattr(client, "client_id", "?"), source_of(topic, partition, offset),
                     exc)
