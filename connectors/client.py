"""The client SDK: subscribe, unsubscribe, publish, and receive with exact filtering.

The SDK does the DLS mapping itself (the real-time path): a subscription goes to its
node as a label set, an event as its original value bytes with the label in a header.
What comes back on the client's delivery topic may include the network's false
positives; :meth:`Client.deliveries` checks every event against the client's live
subscriptions exactly, drops and counts the false positives, and yields the rest. It also
drops repeats of an event (same origin and event id, which a node running at least once
may send again after a crash), remembering at least the last ``SEEN_MEMORY`` events. A
delivery that does not decode is logged (with its ``topic[partition]@offset``), counted
and skipped: the listener goes on, and commits past it.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition

from connectors.exceptions import ConnectorError, ConnectorSettingError, SerdeError
from connectors.kafka import (
    admin,
    close_consumer,
    consume_batch,
    consumer_config,
    ensure_partitioned_topic,
    ensure_topics,
    producer_config,
)
from connectors.recent import RecentKeys, routed_key
from connectors.serde import (
    decode_raw_event,
    encode_label_subscription,
    encode_label_unsubscription,
    encode_raw_event,
)
from connectors.topics import (
    CONTROL_TOPIC_CONFIG,
    HEADER_CLIENTS,
    HEADER_EVENT_ID,
    HEADER_LABEL,
    HEADER_ORIGIN,
    Topics,
    decode_clients,
    decode_label,
    delivery_partition,
    encode_label,
    source_of,
)
from dls.mapping import event_label
from dls.predicates import Subscription
from dls.space import ContentSpace

_log = logging.getLogger("dlsroute.client")

__all__ = ["SEEN_MEMORY", "Client", "Delivery"]

SEEN_MEMORY = 100_000
"""How many delivered events (at least) a client remembers to drop their repeats."""


@dataclass(frozen=True)
class Delivery:
    """One event the client asked for."""

    event_id: str
    attrs: dict[str, Any]
    payload: bytes
    label: int
    origin: str
    source: str
    subscriptions: tuple[str, ...]


class Client:
    """A client attached to one broker node."""

    def __init__(self, bootstrap: str, node: str, client_id: str,
                 space: ContentSpace | str | Path, *, topic_prefix: str = "dls",
                 group_id: str | None = None, shared_delivery_partitions: int = 0,
                 **kafka: Any):
        """Connect (lazily) to ``bootstrap``; ``space`` is the node's content space.

        ``shared_delivery_partitions`` must equal the nodes' setting of that name: 0 reads
        this client's own delivery topic, N > 0 its partition of the shared one. The
        consumer group defaults to ``<topic_prefix>-sdk-<client_id>`` (``dls-sdk-alice``):
        one per client and network, so that the same client name in another network (or
        another test) never joins, and stalls, the same group.
        """
        if not isinstance(shared_delivery_partitions, int) or shared_delivery_partitions < 0:
            raise ConnectorSettingError(f"shared_delivery_partitions must be an integer >= 0, "
                                        f"got {shared_delivery_partitions!r}",
                                        field="shared_delivery_partitions",
                                        value=shared_delivery_partitions)
        self.bootstrap, self.node, self.client_id = bootstrap, node, client_id
        self.shared_partitions = shared_delivery_partitions
        self.space = space if isinstance(space, ContentSpace) else ContentSpace.from_json(space)
        self.topics = Topics(topic_prefix)
        self.topics.deliver(client_id)  # validates the name
        self.topics.node_subscribe(node)
        self._kafka = kafka
        self._group = group_id or f"{topic_prefix}-sdk-{client_id}"
        self._producer = Producer(producer_config(bootstrap, **kafka))
        self._consumer: Consumer | None = None
        self._where: TopicPartition | None = None
        self.subscriptions: dict[str, Subscription] = {}
        self.delivered = 0
        self.false_positives = 0
        self.duplicates = 0
        self.undecodable = 0
        self._control_ready: set[str] = set()
        self._seen = RecentKeys(SEEN_MEMORY)

    # -- control -----------------------------------------------------------------------------
    def subscribe(self, where: Any, sub_id: str | None = None) -> str:
        """Map and send a subscription (text or JSON predicates); returns its id."""
        sub = Subscription(self.space, where)
        labels = sub.labels()
        sid = sub_id or f"{self.client_id}-{uuid.uuid4().hex[:12]}"
        self._send(self.topics.node_subscribe(self.node),
                   encode_label_subscription(self.client_id, sid, labels, str(sub)))
        self.subscriptions[sid] = sub
        return sid

    def unsubscribe(self, sub_id: str, *, known_only: bool = True) -> None:
        """Cancel one of this client's subscriptions.

        With ``known_only=False`` an id this object did not subscribe (made by another
        process of the same client) is sent as well; the node checks it.
        """
        if known_only and sub_id not in self.subscriptions:
            raise ConnectorError(f"client {self.client_id!r} has no subscription {sub_id!r}",
                                 field="id", value=sub_id)
        self._send(self.topics.node_unsubscribe(self.node),
                   encode_label_unsubscription(self.client_id, sub_id))
        self.subscriptions.pop(sub_id, None)

    def publish(self, attrs: Mapping[str, Any], payload: bytes = b"",
                event_id: str | None = None) -> str:
        """Map and send one event (validated against the space); returns its id."""
        label = event_label(self.space, attrs)
        eid = event_id or uuid.uuid4().hex
        value = encode_raw_event(self.node, self.client_id, eid, dict(attrs), payload)
        self._producer.produce(
            self.topics.node_publish(self.node), value,
            headers=[(HEADER_LABEL, encode_label(label)),
                     (HEADER_ORIGIN, f"{self.node}/{self.client_id}".encode()),
                     (HEADER_EVENT_ID, eid.encode())])
        self._producer.poll(0)
        return eid

    def flush(self, timeout: float = 30.0) -> None:
        """Wait until everything sent so far is acknowledged."""
        left = self._producer.flush(timeout)
        if left:
            raise ConnectorError(f"{left} messages not acknowledged within {timeout} s",
                                 field="flush", value=left)

    def _send(self, topic: str, value: bytes) -> None:
        if topic not in self._control_ready:  # before the node does, if it has not run yet
            ensure_topics(self.bootstrap, [topic], config=CONTROL_TOPIC_CONFIG)
            self._control_ready.add(topic)
        self._producer.produce(topic, value)
        self.flush()

    # -- receiving ---------------------------------------------------------------------------
    def _delivery_partition(self) -> TopicPartition:
        """Where this client's deliveries are (the topic created if absent; looked up once)."""
        if self._where is None:
            self._where = self._find_deliveries()
        return self._where

    def _find_deliveries(self) -> TopicPartition:
        if self.shared_partitions:
            topic = self.topics.shared_deliver
            ensure_partitioned_topic(self.bootstrap, topic, self.shared_partitions)
            return TopicPartition(topic, delivery_partition(self.client_id,
                                                            self.shared_partitions))
        topic = self.topics.deliver(self.client_id)
        ensure_topics(self.bootstrap, [topic])
        shared = self.topics.shared_deliver
        # All topics: asking for one by name may make the broker auto-create it.
        if shared in admin(self.bootstrap).list_topics(timeout=10).topics:
            # Reading the wrong place would look like "no events": say so once.
            _log.warning("client %s reads its own delivery topic %s, but %s exists: if node "
                         "%s runs with shared_delivery_partitions = N, pass the same N to "
                         "this client or nothing will arrive", self.client_id, topic, shared,
                         self.node)
        return TopicPartition(topic, 0)

    def _open_consumer(self) -> Consumer:
        if self._consumer is None:
            where = self._delivery_partition()
            self._consumer = Consumer(consumer_config(self.bootstrap, self._group,
                                                      **self._kafka))
            if self.shared_partitions:  # one partition of many: no group assignment
                self._consumer.assign([where])
            else:
                self._consumer.subscribe([where.topic])
        return self._consumer

    def deliveries(self, timeout: float = 1.0, max_idle: float | None = None, *,
                   include_false_positives: bool = False) -> Iterator[Delivery]:
        """Yield matching deliveries; stops after ``max_idle`` s without any (None: never).

        With ``include_false_positives`` the network's false positives are yielded too,
        with an empty ``subscriptions`` tuple (they are counted either way).
        """
        consumer = self._open_consumer()
        idle = 0.0
        while max_idle is None or idle < max_idle:
            msgs = consume_batch(consumer, 500, timeout)
            if not msgs:
                idle += timeout
                continue
            idle = 0.0
            for msg in msgs:
                d = self._take(msg, self._seen)
                if d is not None and (d.subscriptions or include_false_positives):
                    yield d
            consumer.commit(asynchronous=True)

    def drain(self, *, quiet_s: float = 0.5, timeout: float = 30.0,
              include_false_positives: bool = False) -> list[Delivery]:
        """Read the whole delivery topic from the start, without joining a group.

        Stops when the end offset is reached, or after ``quiet_s`` without a message (the
        end offset counts transaction markers, which are never delivered).
        """
        where = self._delivery_partition()
        topic, partition = where.topic, where.partition
        reader = Consumer(consumer_config(self.bootstrap, f"{self._group}-drain",
                                          **self._kafka))
        try:
            _, high = reader.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
            reader.assign([TopicPartition(topic, partition, 0)])
            out: list[Delivery] = []
            deadline = time.monotonic() + timeout
            quiet_since = time.monotonic()
            seen = RecentKeys(SEEN_MEMORY)
            while time.monotonic() < deadline:
                msgs = consume_batch(reader, 1000, 0.1)
                if msgs:
                    quiet_since = time.monotonic()
                for msg in msgs:
                    d = self._take(msg, seen)
                    if d is not None and (d.subscriptions or include_false_positives):
                        out.append(d)
                pos = reader.position([TopicPartition(topic, partition)])[0].offset
                if pos >= high or time.monotonic() - quiet_since >= quiet_s:
                    break
            return out
        finally:
            reader.close()

    def _take(self, msg: Any, seen: RecentKeys) -> Delivery | None:
        """Check one delivered message; None if it is not one to yield.

        That is a message that does not decode (logged, counted in ``undecodable``), a
        repeat of an event seen (counted in ``duplicates``) or, on the shared delivery
        topic, a message for other clients of the same partition (not counted).
        """
        if self.shared_partitions and not self._for_me(msg):
            return None
        try:
            d = self._check(msg)
        except SerdeError as exc:
            self.undecodable += 1
            _log.warning("client %s skips an undecodable delivery at %s: %s", self.client_id,
                         source_of(msg.topic(), msg.partition(), msg.offset()), exc)
            return None
        key = routed_key(d.origin, d.event_id)
        if key in seen:
            self.duplicates += 1
            return None
        seen.add(key)
        self.delivered += 1
        if not d.subscriptions:
            self.false_positives += 1
        return d

    def _for_me(self, msg: Any) -> bool:
        for key, value in msg.headers() or ():
            if key == HEADER_CLIENTS:
                return self.client_id in decode_clients(value)
        return False

    def _check(self, msg: Any) -> Delivery:
        """The delivery ``msg`` carries, matched against the live subscriptions.

        Raises:
            SerdeError: The value is not a RawEvent that decodes, or the label header is
                not 8 bytes.
        """
        rec = decode_raw_event(msg.value() or b"")
        attrs = rec["attrs"]
        live = list(self.subscriptions.items())  # another thread may (un)subscribe
        hits = tuple(sid for sid, s in live if s.matches(attrs))
        headers = dict(msg.headers() or [])
        return Delivery(
            event_id=rec["id"], attrs=attrs, payload=rec.get("payload", b""),
            label=decode_label(headers[HEADER_LABEL]) if HEADER_LABEL in headers else -1,
            origin=f"{rec['node']}/{rec['client']}",
            source=source_of(msg.topic(), msg.partition(), msg.offset()),
            subscriptions=hits)

    def close(self) -> None:
        """Flush and close."""
        self._producer.flush(10)
        if self._consumer is not None:
            if self.shared_partitions:  # assigned, no group rebalance to serve
                self._consumer.close()
            else:
                close_consumer(self._consumer)  # a plain close() can hang mid-rebalance
            self._consumer = None

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
