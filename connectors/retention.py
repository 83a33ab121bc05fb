"""Messages a consumer never read because the topic's retention deleted them first.

A consumer resumes at its group's committed offset. When retention (``retention.ms``,
``retention.bytes``) or a ``DeleteRecords`` call has moved the partition's first offset
past it, the fetch fails with "offset out of range" and librdkafka, with
``auto.offset.reset = earliest``, goes on from the first offset left. Nothing reaches the
application but one librdkafka log line on stderr (measured on the local Kafka: a group
committed at offset 5 of a partition whose records below 10 were deleted read 10..19, and
no error came out of ``consume``). The events in between are gone: a node away longer than
its publish topic's retention, or a listener away longer than its delivery topic's, lost
them without a word.

:func:`committed_gaps` finds them when partitions are assigned (the committed offsets
against the first offsets left), :func:`gap_before` while a consumer reads (its cached
first offset against where the last batch ended). Each is logged as an error naming
``topic[partition]``, the offsets and how many messages at most were lost (the range also
holds transaction markers), and counted by the caller. Nothing can bring them back: the
point is that nobody mistakes a gap for a quiet stream.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

__all__ = ["GapWatch", "RetentionGap", "committed_gaps", "first_offsets", "gap_before"]

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RetentionGap:
    """Offsets ``start`` to ``first - 1`` of a partition were deleted before they were read."""

    topic: str
    partition: int
    start: int
    first: int

    @property
    def messages(self) -> int:
        """How many messages were lost at most (transaction markers are counted too)."""
        return self.first - self.start

    def describe(self, who: str) -> str:
        """One line for the log: who lost what, and why."""
        return (f"{who}: {self.topic}[{self.partition}] offsets {self.start} to "
                f"{self.first - 1} were deleted before they were read (the topic's "
                f"retention, or records deleted by hand): up to {self.messages} messages "
                f"lost; reading goes on at offset {self.first}")


def first_offsets(admin: AdminClient, partitions: Sequence[TopicPartition],
                  timeout: float = 10.0) -> dict[tuple[str, int], int]:
    """The first offset left in each partition (one ListOffsets request for all)."""
    if not partitions:
        return {}
    query = {TopicPartition(tp.topic, tp.partition): OffsetSpec.earliest()
             for tp in partitions}
    futures = admin.list_offsets(query, request_timeout=timeout)
    return {(tp.topic, tp.partition): int(f.result(timeout).offset)
            for tp, f in futures.items()}


def committed_gaps(consumer: Any, admin: AdminClient, partitions: Sequence[TopicPartition],
                   who: str, timeout: float = 10.0) -> list[RetentionGap]:
    """The assigned ``partitions`` whose committed offset lies before their first offset.

    Each one found is logged as an error. A partition with no committed offset is no gap
    (the consumer starts at the first offset on purpose). When the offsets cannot be read
    (a timeout, a missing permission) a warning says so and no gap is reported.
    """
    try:
        committed = [tp for tp in consumer.committed(list(partitions), timeout=timeout)
                     if tp.offset >= 0]
        firsts = first_offsets(admin, committed, timeout)
    except KafkaException as exc:
        _log.warning("%s: could not compare the committed offsets with the first ones left "
                     "(%s): a gap left by retention would go unnoticed", who, exc)
        return []
    gaps = [RetentionGap(tp.topic, tp.partition, tp.offset, firsts[(tp.topic, tp.partition)])
            for tp in committed if tp.offset < firsts.get((tp.topic, tp.partition), -1)]
    for gap in gaps:
        _log.error(gap.describe(who))
    return gaps


def gap_before(consumer: Any, topic: str, partition: int, expected: int, got: int,
               who: str) -> RetentionGap | None:
    """A gap between the offset a reader expected next and the first one it got, if any.

    Offsets jump for transaction markers and aborted records too, so a jump alone proves
    nothing: it is a gap only if the partition's first offset (cached by librdkafka from
    its last fetch: no request) lies past ``expected``. Logged as an error when found.
    """
    if got <= expected:
        return None
    try:
        low, _ = consumer.get_watermark_offsets(TopicPartition(topic, partition),
                                                cached=True)
    except KafkaException:
        return None
    if low is None or low <= expected:
        return None
    gap = RetentionGap(topic, partition, expected, min(int(low), got))
    _log.error(gap.describe(who))
    return gap


class GapWatch:
    """What retention deleted under one reader before it read it: logged and counted."""

    def __init__(self, who: str) -> None:
        """``who`` names the reader in the log ("node A", "client alice")."""
        self.who = who
        self.lost = 0  # messages, at most (transaction markers in a gap are counted too)
        self._next: dict[tuple[str, int], int] = {}  # the offset expected next

    def assigned(self, consumer: Any, admin: AdminClient,
                 partitions: Sequence[TopicPartition]) -> list[RetentionGap]:
        """Partitions were assigned: count the gaps at their committed offsets."""
        for tp in partitions:
            self._next.pop((tp.topic, tp.partition), None)
        gaps = committed_gaps(consumer, admin, partitions, self.who)
        self.lost += sum(g.messages for g in gaps)
        return gaps

    def batch(self, consumer: Any, msgs: Sequence[Any]) -> None:
        """A batch was read: count a gap between the last batch of a partition and this one.

        Cheap on a node's busy path: per message, only its topic and partition are read
        (two list comprehensions); a batch of one partition then takes the offsets of its
        first and last message, a mixed one builds its two maps with ``zip`` and ``dict``.
        Measured with ``timeit``: 58 ns a message in a 1,000-message batch of one
        partition, 236 ns in a mixed one.
        """
        if not msgs:
            return
        topics = [m.topic() for m in msgs]
        parts = [m.partition() for m in msgs]
        if topics.count(topics[0]) == len(msgs) and parts.count(parts[0]) == len(msgs):
            key = (topics[0], parts[0])
            firsts, lasts = {key: msgs[0].offset()}, {key: msgs[-1].offset()}
        else:
            keys = list(zip(topics, parts, strict=True))
            offsets = [m.offset() for m in msgs]
            firsts = dict(zip(reversed(keys), reversed(offsets), strict=True))
            lasts = dict(zip(keys, offsets, strict=True))
        for (topic, partition), first in firsts.items():
            expected = self._next.get((topic, partition))
            if expected is not None and first > expected and (gap := gap_before(
                    consumer, topic, partition, expected, first, self.who)) is not None:
                self.lost += gap.messages
        for key, last in lasts.items():
            self._next[key] = last + 1

    def moved(self, msg: Any) -> None:
        """The reader was put back at ``msg`` (a seek; None: it was not moved)."""
        if msg is not None:
            self._next[(msg.topic(), msg.partition())] = msg.offset()
