"""What a client keeps in Kafka: its live subscriptions, and the node's acknowledgements.

A client's live subscriptions are records of its own compacted topic
``Topics.client_subscriptions(client)`` (``dls.client.C.subscriptions``), keyed by
subscription id (UTF-8); the value is JSON, ``{"where": [...], "node": "A", "sent": bool}``
(``where`` in the JSON list form of :mod:`dls.predicates`, enough to rebuild the
``Subscription`` exactly); an unsubscription is a tombstone. :class:`SubscriptionStore`
writes them and reads them back, from the start once, then from where it stopped.

The write order, and what a crash between two writes costs
(docs/architecture.md#the-clients-state-and-the-acknowledgement):

- subscribe: ``sent: false`` here (flushed), then the subscription to the node's subscribe
  topic (flushed), then ``sent: true`` here. A loader re-sends to the node each record it
  finds still ``sent: false`` (a crash between the writes, or another process between its
  writes): a repeated subscription with the same labels is a no-op at the node.
- unsubscribe: the tombstone here first (flushed), then the unsubscription to the node.
  A crash between the two leaves the subscription live at the node and unknown to the
  client: its deliveries are dropped as false positives. The other order could resurrect
  a cancelled subscription at a restart (a loader would re-send it).

A node acknowledges a subscription it applied with a message on the client's delivery
partition: no value, header ``HEADER_ACK`` with the subscription id (and, on the shared
delivery topic, ``HEADER_CLIENTS`` naming the client). :func:`ack_of` reads it.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from connectors.exceptions import ConnectorError, SerdeError
from connectors.kafka import (
    check_message,
    consume_batch,
    consumer_config,
    ensure_topics,
    watermark_offsets,
)
from connectors.replication import TopicReplication
from connectors.topics import HEADER_ACK, HEADER_SHARD, source_of

__all__ = [
    "AckWaiter",
    "SUBSCRIPTIONS_TOPIC_CONFIG",
    "StoredSubscription",
    "SubscriptionStore",
    "ack_of",
    "decode_stored",
    "encode_stored",
]

_log = logging.getLogger(__name__)

SUBSCRIPTIONS_TOPIC_CONFIG = {"cleanup.policy": "compact"}
"""Settings of a client's subscriptions topic: the latest record of each id is kept forever."""


@dataclass(frozen=True)
class StoredSubscription:
    """One record of a client's subscriptions topic (``where`` None: a tombstone)."""

    sub_id: str
    where: list[Any] | dict[str, Any] | None
    node: str = ""
    sent: bool = True
    source: str = ""


def encode_stored(where: list[Any] | dict[str, Any], node: str, sent: bool) -> bytes:
    """The value of a live subscription's record."""
    return json.dumps({"where": where, "node": node, "sent": sent}).encode()


def decode_stored(key: bytes | None, value: bytes | None, source: str = "") -> StoredSubscription:
    """The record read at ``source``.

    Raises:
        SerdeError: No key, or a value that is not the JSON object :func:`encode_stored`
            writes.
    """
    if not key:
        raise SerdeError(f"a subscription record at {source} has no key (the id)",
                         field="key", value=key)
    sid = key.decode("utf-8", "replace")
    if value is None:
        return StoredSubscription(sid, None, source=source)
    try:
        obj = json.loads(value)
    except ValueError as exc:
        raise SerdeError(f"subscription record {sid!r} at {source} is not JSON: {exc}",
                         field="value", value=value[:80]) from None
    if not isinstance(obj, dict) or not isinstance(obj.get("where"), list | dict):
        raise SerdeError(f"subscription record {sid!r} at {source} has no 'where' list or "
                         "object",
                         field="where", value=obj)
    return StoredSubscription(sid, obj["where"], str(obj.get("node", "")),
                              bool(obj.get("sent", True)), source)


def shard_of_ack(msg: Any) -> int | None:
    """The shard whose engine sent an acknowledgement (None: an unsharded node's)."""
    for key, value in msg.headers() or ():
        if key == HEADER_SHARD:
            try:
                return int(bytes(value or b""))
            except ValueError:
                return None
    return None


def ack_of(msg: Any) -> str | None:
    """The subscription id a node's acknowledgement carries; None for any other message.

    Only a message without a value can be one (a delivery always has one): the headers
    of deliveries are not looked at.
    """
    if msg.value() is not None:
        return None
    for key, value in msg.headers() or ():
        if key == HEADER_ACK:
            return bytes(value or b"").decode("utf-8", "replace")
    return None


class SubscriptionStore:
    """Writes and reads one client's subscriptions topic (see the module text)."""

    def __init__(self, bootstrap: str, topic: str, group: str, producer: Producer,
                 kafka: dict[str, Any], replication: TopicReplication | None = None) -> None:
        """Use ``producer`` to write; read with a consumer of ``group`` (never committed).

        ``replication``: of the topic, if this creates it (None: the cluster's defaults).
        """
        self.bootstrap, self.topic, self.group = bootstrap, topic, group
        self._replication = replication or TopicReplication(replication=None, min_insync=None)
        self._producer, self._kafka = producer, kafka
        self._ready = False
        self._reader: Consumer | None = None
        self._position = 0  # the next offset to read

    def _ensure_topic(self) -> None:
        if not self._ready:
            ensure_topics(self.bootstrap, [self.topic], config=SUBSCRIPTIONS_TOPIC_CONFIG,
                          kafka=self._kafka, **self._replication)
            self._ready = True

    def put(self, sub_id: str, where: list[Any] | dict[str, Any], node: str, *, sent: bool,
            flush: bool = True) -> None:
        """Write a live subscription (``flush``: wait until the broker has it)."""
        self._write(sub_id, encode_stored(where, node, sent), flush)

    def delete(self, sub_id: str) -> None:
        """Write the tombstone of ``sub_id`` and wait until the broker has it."""
        self._write(sub_id, None, True)

    def _write(self, sub_id: str, value: bytes | None, flush: bool) -> None:
        self._ensure_topic()
        self._producer.produce(self.topic, value, key=sub_id.encode())
        if flush:
            left = self._producer.flush(30)
            if left:
                raise ConnectorError(f"subscription {sub_id!r}: {self.topic} did not "
                                     f"acknowledge the record within 30 s", field="id",
                                     value=sub_id)
        else:
            self._producer.poll(0)

    def read_new(self, timeout: float = 30.0) -> list[StoredSubscription]:
        """The records written since the last read (all of them the first time), in order.

        A record that does not decode is logged with its ``topic[partition]@offset`` and
        skipped.

        Raises:
            ConnectorError: The end of the topic was not reached within ``timeout``.
        """
        self._ensure_topic()
        if self._reader is None:  # partition EOF: the end is known even if compaction
            # removed the last offsets. No long poll: a fetch still in flight after a read
            # would hold the next read's first request (the end offset, or the fetch) for
            # up to fetch.wait.max.ms, and a delivery's second look with it.
            self._reader = Consumer(consumer_config(
                self.bootstrap, self.group, **{"enable.partition.eof": True,
                                               "fetch.wait.max.ms": 10}, **self._kafka))
        reader = self._reader
        _, high = watermark_offsets(reader, TopicPartition(self.topic, 0), timeout=10)
        if high <= self._position:
            return []
        reader.assign([TopicPartition(self.topic, 0, self._position)])
        try:
            return self._read_to_end(reader, high, time.monotonic() + timeout, timeout)
        finally:
            reader.unassign()

    def _read_to_end(self, reader: Consumer, high: int, deadline: float,
                     timeout: float) -> list[StoredSubscription]:
        out: list[StoredSubscription] = []
        while self._position < high:
            if time.monotonic() > deadline:
                raise ConnectorError(f"reading {self.topic} stopped at offset "
                                     f"{self._position} of {high} after {timeout} s",
                                     field="timeout", value=timeout)
            msgs = reader.consume(1, 0.2)  # waits for the first only (as consume_batch)
            for msg in msgs + (reader.consume(999, 0) if msgs else []):
                err = msg.error()
                if err is not None and err.code() == KafkaError._PARTITION_EOF:
                    self._position = max(self._position, msg.offset() or 0)
                    high = min(high, self._position)  # the end, whatever compaction left
                    continue
                if check_message(msg) is None:
                    continue
                self._position = (msg.offset() or 0) + 1
                where = source_of(msg.topic(), msg.partition(), msg.offset())
                try:
                    out.append(decode_stored(msg.key(), msg.value(), where))
                except SerdeError as exc:
                    _log.warning("client subscriptions: skipping the record at %s: %s",
                                 where, exc)
        return out

    def close(self) -> None:
        """Close the reader (the producer is the client's)."""
        if self._reader is not None:
            self._reader.close()
            self._reader = None


class AckWaiter:
    """Waits for a node's acknowledgement of one subscription on a delivery partition.

    Made BEFORE the subscription is sent: it takes the partition's end offset then, so the
    acknowledgement, which comes after, cannot be missed. A short-lived assigned consumer
    (``read_committed``: an exactly-once node's acknowledgement shows once the batch that
    applied the subscription is committed).
    """

    def __init__(self, bootstrap: str, group: str, where: TopicPartition,
                 kafka: dict[str, Any]) -> None:
        """Open the consumer and take the end offset of ``where``."""
        self.where = where
        self._reader = Consumer(consumer_config(bootstrap, group, **kafka))
        try:
            _, self.start = watermark_offsets(self._reader, where, timeout=10)
        except BaseException:
            self._reader.close()
            raise

    def wait(self, sub_id: str, timeout: float, mine: Callable[[Any], bool], *,
             shards: Collection[int] | None = None) -> bool:
        """True once an acknowledgement of ``sub_id`` that ``mine`` accepts is read.

        ``shards``: in a sharded network, once one from each of these shards is read.
        False when ``timeout`` seconds pass before.
        """
        reader = self._reader
        reader.assign([TopicPartition(self.where.topic, self.where.partition, self.start)])
        deadline = time.monotonic() + timeout
        left_shards = None if shards is None else set(shards)
        while (left := deadline - time.monotonic()) > 0:
            for msg in consume_batch(reader, 500, min(left, 0.2)):
                if ack_of(msg) == sub_id and mine(msg):
                    if left_shards is None:
                        return True
                    left_shards.discard(shard_of_ack(msg))
                    if not left_shards:
                        return True
        return False

    def close(self) -> None:
        """Close the consumer."""
        self._reader.close()
