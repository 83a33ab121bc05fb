"""The client SDK: subscribe, unsubscribe, publish, and receive with exact filtering.

The SDK does the DLS mapping itself (the real-time path): a subscription goes to its
node as a label set (with its compiled row when it is simple: :mod:`dls.exact_row`), an
event as its original value bytes with the label in a header. Deliveries may include the
network's false positives; :meth:`Client.deliveries` checks every event against the
client's live subscriptions exactly, drops and counts the false positives, and yields the
rest. It drops repeats of an event (same origin and event id, which an at-least-once node
may send again after a crash: ids must be unique per publisher), remembering at least the
last ``SEEN_MEMORY`` events, and says so once a minute at most. A delivery that does not
decode is logged (``topic[partition]@offset``), counted and skipped; so is a node's
acknowledgement of a subscription (no value, header ``HEADER_ACK``).

The client's live subscriptions outlive its process: they are kept in its compacted topic
``Topics.client_subscriptions(client)`` (:mod:`connectors.client_state`, which states the
write order and what a crash between two writes costs). A new ``Client`` for the same
client loads them before it checks its first delivery (or at :meth:`load_subscriptions`),
and reads what another process of the client wrote since whenever a batch holds a
delivery that matches none it knows.

The delivery partition is assigned directly (no consumer group membership), from the
offset committed under the client's group: a restarted client reads again at once instead
of waiting for its dead predecessor's session to expire. Two processes of one client
listening at once each get every delivery (a copy each) and commit under the same group,
so a restart resumes from whichever committed last (it may see again, or never see, what
only the other one read): one listener per client id; parallel readers are separate clients.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
from confluent_kafka import Consumer, Producer, TopicPartition

from connectors.client_state import AckWaiter, StoredSubscription, SubscriptionStore, ack_of
from connectors.delivery_reports import DeliveryReports
from connectors.exceptions import (
    ConnectorError,
    ConnectorSettingError,
    DeliveryFailedError,
    SerdeError,
    SubscriptionTooLargeError,
)
from connectors.handout import HandOut, counters, release, rewind
from connectors.kafka import (
    admin,
    consume_batch,
    consumer_config,
    ensure_partitioned_topic,
    ensure_topics,
    producer_config,
    watermark_offsets,
)
from connectors.recent import RecentKeys, RepeatNotice, routed_key
from connectors.replication import topic_replication
from connectors.retention import GapWatch
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
    decode_label,
    delivery_partition,
    encode_label,
    names_client,
    source_of,
)
from dls.exact_row import RowLayout
from dls.exceptions import DLSError
from dls.mapping import event_label
from dls.predicates import Subscription
from dls.shards import check_shards, label_shard, label_shards
from dls.space import ContentSpace

_log = logging.getLogger(__name__)

__all__ = ["CANCELLED_MEMORY", "MAX_SUBSCRIPTION_BYTES", "SEEN_MEMORY", "Client", "Delivery",
           "DeliveryFailedError"]

CANCELLED_MEMORY = 10_000
"""How many cancelled subscriptions a client remembers, to match events published before."""

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


#: Bytes of a subscription message at most (its labels, 8 bytes each, and its text): under
#: the 1,000,000 bytes a producer sends by default, with room for the message's framing.
#: About 120,000 labels; a broader subscription is refused with SubscriptionTooLargeError.
MAX_SUBSCRIPTION_BYTES = 990_000


class Client:
    """A client attached to one broker node."""

    def __init__(self, bootstrap: str, node: str, client_id: str,
                 space: ContentSpace | str | Path, *, topic_prefix: str = "dls",
                 group_id: str | None = None, shared_delivery_partitions: int = 0,
                 client_inputs: bool = False, shards: int = 1,
                 kafka_config: str | Path | None = None,
                 replication_factor: int | None = None,
                 min_insync_replicas: int | None = None, **kafka: Any):
        """Connect (lazily) to ``bootstrap``; ``space`` is the node's content space.

        ``shared_delivery_partitions`` must equal the nodes' setting of that name: 0 reads
        this client's own delivery topic, N > 0 its partition of the shared one. The
        consumer group defaults to ``<topic_prefix>-sdk-<client_id>`` (``dls-sdk-alice``):
        one per client and network, so that the same client name in another network (or
        another test) never joins, and stalls, the same group.

        ``client_inputs`` must equal the node's setting of that name: True writes this
        client's own input topics (``Topics.client_input``, the secure layout, where only
        this client's principal may write them), False the node's shared ones.

        ``shards`` must equal the nodes' setting of that name: a subscription goes to each
        label shard in a part of its own (its labels of that shard), and is acknowledged
        once every such shard has applied its part; an event goes to its label's shard.

        ``kafka_config``: a librdkafka properties file (``dlsroute access add-client``
        writes one; :mod:`connectors.kafka_config`) for every Kafka client of this object
        (producer, consumers, admin clients); ``**kafka`` settings override the file's.

        ``replication_factor``, ``min_insync_replicas``: of the topics this client creates
        (its inputs, delivery and subscriptions topics) as the node's; None: the cluster's.
        """
        if not isinstance(shared_delivery_partitions, int) or shared_delivery_partitions < 0:
            raise ConnectorSettingError(f"shared_delivery_partitions must be an integer >= 0, "
                                        f"got {shared_delivery_partitions!r}",
                                        field="shared_delivery_partitions",
                                        value=shared_delivery_partitions)
        self.bootstrap, self.node, self.client_id = bootstrap, node, client_id
        self.shared_partitions = shared_delivery_partitions
        self._replication = topic_replication(
            replication_factor, min_insync_replicas,
            names=("replication_factor", "min_insync_replicas"))
        self.space = space if isinstance(space, ContentSpace) else ContentSpace.from_json(space)
        self._rows = RowLayout(self.space)  # a simple subscription's row goes with it
        self.topics = Topics(topic_prefix)
        self.topics.deliver(client_id)  # validates the name
        self.topics.node_subscribe(node)
        self.client_inputs = bool(client_inputs)
        try:
            self.shards = check_shards(shards)
        except DLSError as exc:
            raise ConnectorSettingError(str(exc), field="shards", value=shards) from None
        if kafka_config is not None:
            from connectors.kafka_config import load_kafka_config

            kafka = {**load_kafka_config(kafka_config), **kafka}
        self._kafka = kafka
        self._group = group_id or f"{topic_prefix}-sdk-{client_id}"
        # Failures are raised by flush and close (a caller's own on_delivery still runs).
        self._reports = DeliveryReports(client_id, also=kafka.get("on_delivery"))
        self._producer = Producer(producer_config(
            bootstrap, **{**kafka, "on_delivery": self._reports.on_delivery}))
        self._consumer: Consumer | None = None
        self._where: TopicPartition | None = None
        self.subscriptions: dict[str, Subscription] = {}
        #: subscriptions this object cancelled, with the time it did (ms): an event
        #: published before still matches them (the nodes deliver it, however late)
        self._cancelled: dict[str, tuple[Subscription, int]] = {}
        self.delivered = self.false_positives = self.duplicates = self.undecodable = 0
        self._gaps = GapWatch(f"client {client_id}")  # what retention deleted unread
        self._control_ready: set[str] = set()
        self._seen = RecentKeys(SEEN_MEMORY)
        self._repeats = RepeatNotice(f"client {client_id}", _log)  # once a minute at most
        self._handout: HandOut | None = None  # the batch a loop left early was handing out
        self._store = SubscriptionStore(bootstrap, self.topics.client_subscriptions(client_id),
                                        f"{self._group}-state", self._producer, kafka,
                                        self._replication)
        self._loaded = False

    # -- control -----------------------------------------------------------------------------
    def subscribe(self, where: Any, sub_id: str | None = None, *,
                  wait: float | None = None) -> str:
        """Map and send a subscription (text or JSON predicates); returns its id.

        It is kept in the client's subscriptions topic first, then sent to the node
        (:mod:`connectors.client_state`). ``wait``: then wait up to that many seconds
        for the node's acknowledgement that it applied the subscription.

        Raises:
            ConnectorError: ``wait`` passed without an acknowledgement (the subscription is
                sent and kept all the same; a node that refuses it never acknowledges it).
        """
        if wait is not None and (isinstance(wait, bool) or not isinstance(wait, int | float)
                                 or wait <= 0):
            raise ConnectorSettingError(f"wait must be a number of seconds > 0 or None, got "
                                        f"{wait!r}", field="wait", value=wait)
        sub = Subscription(self.space, where)
        parts = self._parts(sub.labels())
        sid = sub_id or f"{self.client_id}-{uuid.uuid4().hex[:12]}"
        row = self._rows.of(sub)
        values = {shard: encode_label_subscription(self.client_id, sid, labels, str(sub), row)
                  for shard, labels in parts.items()}
        for shard, value in values.items():
            if len(value) > MAX_SUBSCRIPTION_BYTES:  # refused before anything is kept
                raise SubscriptionTooLargeError(
                    f"subscription {str(sub)[:80]!r} covers {len(parts[shard]):,} labels"
                    f"{f' of shard {shard}' if self.shards > 1 else ''}: {len(value):,} bytes, "
                    f"more than one message holds ({MAX_SUBSCRIPTION_BYTES:,}); narrow it, "
                    f"or split it into several", field="where", value=str(sub))
        waiter = None if wait is None else AckWaiter(
            self.bootstrap, f"{self._group}-ack", self._delivery_partition(), self._kafka)
        try:
            self._store.put(sid, sub.to_json(), self.node, sent=False)
            for shard, value in values.items():
                self._send(self._input(self.node, "subscribe", shard), value)
            self.subscriptions[sid] = sub
            self._store.put(sid, sub.to_json(), self.node, sent=True, flush=False)
            if waiter is not None and wait is not None \
                    and not waiter.wait(sid, wait, self._acked_for_me,
                                        shards=set(parts) if self.shards > 1 else None):
                raise ConnectorError(
                    f"subscription {sid!r} of client {self.client_id!r}: node {self.node!r} "
                    f"did not acknowledge it within {wait} s (it is sent and kept; a node "
                    f"that is down acknowledges it when it is back, one that refuses it "
                    f"never does: see {self.topics.deadletter})", field="wait", value=wait)
        finally:
            if waiter is not None:
                waiter.close()
        return sid

    def unsubscribe(self, sub_id: str, *, known_only: bool = True) -> None:
        """Cancel one of this client's subscriptions.

        With ``known_only=False`` an id this client does not know (not in its
        subscriptions topic either) is sent as well; the node checks it.
        """
        if sub_id not in self.subscriptions and not self._loaded:
            self.load_subscriptions()
        if known_only and sub_id not in self.subscriptions:
            raise ConnectorError(f"client {self.client_id!r} has no subscription {sub_id!r}",
                                 field="id", value=sub_id)
        self._store.delete(sub_id)
        cancelled_ms = int(time.time() * 1000)  # before the node can see it
        known = self.subscriptions.get(sub_id)
        shards = (list(self._parts(known.labels())) if known is not None
                  else list(range(self.shards)))  # unknown here: every shard checks it
        for shard in shards:
            self._send(self._input(self.node, "unsubscribe", shard),
                       encode_label_unsubscription(self.client_id, sub_id))
        sub = self.subscriptions.pop(sub_id, None)
        if sub is not None:
            self._cancelled[sub_id] = (sub, cancelled_ms)
            while len(self._cancelled) > CANCELLED_MEMORY:
                del self._cancelled[next(iter(self._cancelled))]

    def load_subscriptions(self) -> dict[str, Subscription]:
        """Read the client's subscriptions topic; returns the live subscriptions now known.

        The first call reads it from the start, later ones what is new. A record still
        marked unsent (a process stopped between its two writes, or is between them now)
        is sent to its node again: a no-op there if it arrived. A record that no longer
        compiles against the space is logged and skipped.
        """
        self._apply_stored(self._store.read_new(), resend=True)
        self._loaded = True
        return dict(self.subscriptions)

    def _apply_stored(self, records: list[StoredSubscription], *, resend: bool = False) -> bool:
        """Keep each id's latest record; True on a change (``resend``: send unsent ones)."""
        changed = False
        for rec in {r.sub_id: r for r in records}.values():
            if rec.where is None:
                changed |= self.subscriptions.pop(rec.sub_id, None) is not None
                continue
            try:
                sub = Subscription(self.space, rec.where)
                labels = sub.labels()
            except DLSError as exc:
                _log.warning("client %s: subscription %r at %s does not compile: %s",
                             self.client_id, rec.sub_id, rec.source, exc)
                continue
            if resend and not rec.sent:
                _log.info("client %s: sending subscription %r (%s) to node %s again",
                          self.client_id, rec.sub_id, rec.source, rec.node or self.node)
                for shard, part in self._parts(labels).items():
                    self._send(self._input(rec.node or self.node, "subscribe", shard),
                               encode_label_subscription(self.client_id, rec.sub_id, part,
                                                         str(sub), self._rows.of(sub)))
            self.subscriptions[rec.sub_id] = sub
            changed = True
        return changed

    def publish(self, attrs: Mapping[str, Any], payload: bytes = b"",
                event_id: str | None = None) -> str:
        """Map and send one event (validated against the space); returns its id.

        Sending is asynchronous: an event Kafka does not take is logged when its report
        comes, and :meth:`flush` (or :meth:`close`) raises :class:`DeliveryFailedError`
        naming it. ``event_id`` (default: a fresh uuid) must be unique per publisher:
        nodes and listeners take a second event of an id for a repeat and drop it.
        """
        label = event_label(self.space, attrs)
        eid = event_id or uuid.uuid4().hex
        given = {k: v for k, v in attrs.items() if v is not None}  # None: an absent attribute
        value = encode_raw_event(self.node, self.client_id, eid, given, payload)
        topic = self._input(self.node, "publish", label_shard(label, self.shards))
        if self.client_inputs and topic not in self._control_ready:
            ensure_topics(self.bootstrap, [topic], kafka=self._kafka,  # the node sets it up
                          **self._replication)
            self._control_ready.add(topic)
        self._producer.produce(
            topic, value,
            headers=[(HEADER_LABEL, encode_label(label)),
                     (HEADER_ORIGIN, f"{self.node}/{self.client_id}".encode()),
                     (HEADER_EVENT_ID, eid.encode())],
            on_delivery=self._reports.of_event(eid))
        self._producer.poll(0)
        return eid

    def flush(self, timeout: float = 30.0) -> None:
        """Wait until everything sent so far is acknowledged.

        Raises:
            DeliveryFailedError: Kafka did not take some messages (since the last flush);
                its ``event_ids`` are the events to publish again.
            ConnectorError: Messages still unanswered after ``timeout``.
        """
        left = self._producer.flush(timeout)
        self._reports.check()
        if left:
            raise ConnectorError(f"{left} messages not acknowledged within {timeout} s",
                                 field="flush", value=left)

    def _input(self, node: str, kind: str, shard: int = 0) -> str:
        """Where this client writes its ``kind`` (subscribe, unsubscribe, publish).

        For ``node``, and of label shard ``shard`` in a sharded network.
        """
        t = self.topics if self.shards == 1 else self.topics.of_shard(shard)
        if self.client_inputs:
            return t.client_input(node, self.client_id, kind)
        return (t.node_subscribe(node) if kind == "subscribe"
                else t.node_unsubscribe(node) if kind == "unsubscribe"
                else t.node_publish(node))

    def _parts(self, labels: np.ndarray) -> dict[int, np.ndarray]:
        """A subscription's labels by shard (the shards it has labels of, in order)."""
        if self.shards == 1:
            return {0: labels}
        of = label_shards(labels, self.shards)
        return {int(k): labels[of == k] for k in np.unique(of)}

    def _send(self, topic: str, value: bytes) -> None:
        if topic not in self._control_ready:  # before the node does, if it has not run yet
            ensure_topics(self.bootstrap, [topic], config=CONTROL_TOPIC_CONFIG,
                          kafka=self._kafka, **self._replication)
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
            ensure_partitioned_topic(self.bootstrap, topic, self.shared_partitions,
                                     kafka=self._kafka, **self._replication)
            return TopicPartition(topic, delivery_partition(self.client_id,
                                                            self.shared_partitions))
        topic = self.topics.deliver(self.client_id)
        ensure_topics(self.bootstrap, [topic], kafka=self._kafka, **self._replication)
        shared = self.topics.shared_deliver
        # All topics: asking for one by name may make the broker auto-create it.
        if shared in admin(self.bootstrap, **self._kafka).list_topics(timeout=10).topics:
            # Reading the wrong place would look like "no events": say so once.
            _log.warning("client %s reads its own delivery topic %s, but %s exists: if node "
                         "%s runs with shared_delivery_partitions = N, pass the same N to "
                         "this client or nothing will arrive", self.client_id, topic, shared,
                         self.node)
        return TopicPartition(topic, 0)

    def _open_consumer(self) -> Consumer:
        """The delivery consumer: its partition assigned, from the group's committed offset.

        No group membership, so no rebalance: a restarted client reads again at once
        (module text: two listeners of one client).
        """
        if self._consumer is None:
            where = self._delivery_partition()
            self._consumer = Consumer(consumer_config(self.bootstrap, self._group,
                                                      **self._kafka))
            tp = TopicPartition(where.topic, where.partition)
            self._gaps.assigned(self._consumer, admin(self.bootstrap, **self._kafka), [tp])
            self._consumer.assign([tp])
        return self._consumer

    @property
    def lost_to_retention(self) -> int:
        """Delivery messages deleted (retention) before this client read them, at most."""
        return self._gaps.lost

    def deliveries(self, timeout: float = 1.0, max_idle: float | None = None, *,
                   include_false_positives: bool = False) -> Iterator[Delivery]:
        """Yield matching deliveries; stops after ``max_idle`` s without any (None: never).

        With ``include_false_positives`` the network's false positives are yielded too,
        with an empty ``subscriptions`` tuple (they are counted either way). A loop left
        early loses nothing: the next call goes on after the delivery then in hand
        (:mod:`connectors.handout`); a gap retention left is logged (:attr:`lost_to_retention`).
        """
        consumer = self._open_consumer()
        if not self._loaded:
            self.load_subscriptions()
        if self._handout is not None:
            self._gaps.moved(rewind(self._handout, self, self._seen, consumer))
            self._handout = None
        idle = 0.0
        while max_idle is None or idle < max_idle:
            msgs = consume_batch(consumer, 500, timeout)
            if not msgs:
                idle += timeout
                continue
            idle = 0.0
            self._gaps.batch(consumer, msgs)
            batch = self._handout = self._take_all(msgs, self._seen)
            for i, (_, d) in enumerate(batch.taken):
                if d.subscriptions or include_false_positives:
                    batch.hand = i
                    yield d
            self._handout = None
            consumer.commit(asynchronous=True)

    def drain(self, *, quiet_s: float = 0.5, timeout: float = 30.0,
              include_false_positives: bool = False) -> list[Delivery]:
        """Read the whole delivery topic from the start, without joining a group.

        Stops when the end offset is reached, or after ``quiet_s`` without a message (the
        end offset counts transaction markers, which are never delivered).
        """
        where = self._delivery_partition()
        topic, partition = where.topic, where.partition
        if not self._loaded:
            self.load_subscriptions()
        reader = Consumer(consumer_config(self.bootstrap, f"{self._group}-drain",
                                          **self._kafka))
        try:
            _, high = watermark_offsets(reader, TopicPartition(topic, partition), timeout=10)
            reader.assign([TopicPartition(topic, partition, 0)])
            out: list[Delivery] = []
            deadline = time.monotonic() + timeout
            quiet_since = time.monotonic()
            seen = RecentKeys(SEEN_MEMORY)
            while time.monotonic() < deadline:
                msgs = consume_batch(reader, 1000, 0.1)
                if msgs:
                    quiet_since = time.monotonic()
                out += [d for _, d in self._take_all(msgs, seen).taken
                        if d.subscriptions or include_false_positives]
                pos = reader.position([TopicPartition(topic, partition)])[0].offset
                if pos >= high or time.monotonic() - quiet_since >= quiet_s:
                    break
            return out
        finally:
            reader.close()

    def _take_all(self, msgs: list[Any], seen: RecentKeys) -> HandOut:
        """:meth:`_take` of each message, with a second look at what matches nothing.

        What matches no subscription known is checked again after reading what the
        client's subscriptions topic got since: another process of the client may have
        subscribed (its record is written before its subscription is sent).
        """
        out = HandOut(msgs)
        for j, msg in enumerate(msgs):
            out.marks.append(counters(self))
            if (d := self._take(msg, seen)) is not None:
                out.taken.append((j, d))
        taken = out.taken
        misses = [i for i, (_, d) in enumerate(taken) if not d.subscriptions]
        if misses and self._loaded and self._apply_stored(self._store.read_new()):
            live = list(self.subscriptions.items())
            for i in misses:
                j, d = taken[i]
                hits = tuple(sid for sid, s in live if s.matches(d.attrs))
                if hits:
                    taken[i] = (j, replace(d, subscriptions=hits))
                    self.false_positives -= 1
                    out.fixed.add(i)
        return out

    def _take(self, msg: Any, seen: RecentKeys) -> Delivery | None:
        """Check one delivered message; None if it is not one to yield.

        That is a message that does not decode (logged, counted in ``undecodable``), a
        repeat of an event seen (counted in ``duplicates``), a node's acknowledgement or,
        on the shared delivery topic, a message for other clients of the same partition
        (neither counted).
        """
        if self.shared_partitions and not self._for_me(msg):
            return None
        if ack_of(msg) is not None:
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
            self._repeats.add(source_of(msg.topic(), msg.partition(), msg.offset()),
                              d.event_id, d.origin)
            return None
        seen.add(key)
        self.delivered += 1
        if not d.subscriptions:
            self.false_positives += 1
        return d

    def _acked_for_me(self, msg: Any) -> bool:
        return not self.shared_partitions or self._for_me(msg)

    def _for_me(self, msg: Any) -> bool:
        for key, value in msg.headers() or ():
            if key == HEADER_CLIENTS:
                return names_client(value, self.client_id)
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
        if self._cancelled:  # published before an unsubscription: still that one's
            kind, published = msg.timestamp() if hasattr(msg, "timestamp") else (0, 0)
            if kind:
                hits += tuple(sid for sid, (s, until) in list(self._cancelled.items())
                              if published < until and s.matches(attrs))
        headers = dict(msg.headers() or [])
        origin = headers.get(HEADER_ORIGIN)  # what the nodes say, not what the value says:
        return Delivery(                     # with client_inputs the node sets it
            event_id=rec["id"], attrs=attrs, payload=rec.get("payload", b""),
            label=decode_label(headers[HEADER_LABEL]) if HEADER_LABEL in headers else -1,
            origin=(origin.decode("utf-8", "replace") if isinstance(origin, bytes)
                    else f"{rec['node']}/{rec['client']}"),
            source=source_of(msg.topic(), msg.partition(), msg.offset()),
            subscriptions=hits)

    def close(self) -> None:
        """Flush and close; then raise :class:`DeliveryFailedError` as :meth:`flush` does."""
        self._producer.flush(10)
        self._store.close()
        self._repeats.close()  # the repeats not said yet
        if self._consumer is not None:
            if self._handout is not None:  # the next reader starts after the delivery in hand
                release(self._handout, self, self._seen, self._consumer)
            self._consumer.close()  # assigned: no group to leave, no rebalance to serve
        self._consumer = self._handout = None
        self._reports.check()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
