"""The broker-node service: the pure state machine inside a transactional Kafka loop.

One flat loop: consume a batch from the node's input topics, process it (control messages
change the state, runs of events are routed as numpy batches), produce what it caused
(deliveries, forwarded events, link control, dead letters) and commit the input offsets
in the same Kafka transaction. A crash therefore loses nothing and duplicates nothing for
``read_committed`` readers.

With ``delivery = "at_least_once"`` the loop uses no transaction: it commits input offsets
only once everything produced before is acknowledged by the broker, which it learns from
one delivery callback per batch and partition written, without ever stopping to wait
(``_step_at_least_once``). A crash repeats
the outputs of the batches not yet committed; nothing is lost. Repeats are dropped by
event id: the node keeps the ids of the most recent events it routed (``ROUTED_MEMORY``,
keyed by origin and id) and skips an event it has already routed, and the client SDK does
the same on its delivery topic. Link messages are idempotent (``BrokerState.on_link``) and
a repeated subscription with the same labels is a no-op, so control repeats are harmless.

The state lives in memory. At start the node rebuilds it by reading its control topics
(subscribe, unsubscribe, inbound links) from the beginning up to the committed offsets,
without producing anything (those outputs were produced before), then resumes the normal
loop from the committed offsets. Control topics are created with unlimited retention.

Subscribe and unsubscribe arrive on different topics, so their relative order is not
guaranteed; an unsubscription of an id not seen yet waits ``unsubscribe_grace_s`` for it
(ordered by message timestamps) before it is dead-lettered as unknown.
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from functools import partial
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from operator import itemgetter
from typing import Any

import numpy as np
from confluent_kafka import Consumer, Message, Producer, TopicPartition

from broker_node.config import NodeSettings
from broker_node.exceptions import BrokerError, UnknownSubscriptionError
from broker_node.state import ADVERTISE, BrokerState, LinkMessage
from connectors.exceptions import ConnectorError
from connectors.kafka import (
    close_consumer,
    committed_offsets,
    consume_batch,
    consumer_config,
    ensure_partitioned_topic,
    ensure_topics,
    next_offsets,
    offsets_to_commit,
    producer_config,
    source_of,
)
from connectors.recent import RecentKeys, routed_key
from connectors.serde import SERDE, encode_dead_letter, encode_link
from connectors.topics import (
    CONTROL_TOPIC_CONFIG,
    HEADER_CLIENTS,
    HEADER_DLQ_REASON,
    HEADER_DLQ_SOURCE,
    HEADER_EVENT_ID,
    HEADER_LABEL,
    HEADER_ORIGIN,
    Topics,
    decode_label,
    decode_labels,
    delivery_partition,
)
from dls.exceptions import DLSError
from dls.space import ContentSpace

__all__ = ["Metrics", "NodeService", "RecentKeys", "routed_key"]

log = logging.getLogger("dlsroute.node")

FOREVER = dict(CONTROL_TOPIC_CONFIG)
ROUTED_MEMORY = 100_000


@dataclass
class Metrics:
    """Counters served in Prometheus text format."""

    events_in: int = 0
    deliveries: int = 0
    delivery_messages: int = 0
    events_forwarded: int = 0
    control_in: int = 0
    labels_advertised: int = 0
    labels_withdrawn: int = 0
    dead_letters: int = 0
    duplicates: int = 0
    queue_full_waits: int = 0
    # events routed from a plan made earlier (cached, or for an event of the same key
    # earlier in the run), and plans made
    route_cache_hits: int = 0
    route_cache_misses: int = 0
    batches: int = 0
    gauges: dict[str, Callable[[], float]] = field(default_factory=dict)

    def render(self, node: str) -> str:
        """Prometheus text exposition (every int field is a counter)."""
        lines = []
        for name in (f.name for f in fields(self) if f.name != "gauges"):
            lines.append(f"# TYPE dls_{name}_total counter")
            lines.append(f'dls_{name}_total{{node="{node}"}} {getattr(self, name)}')
        for name, fn in self.gauges.items():
            lines.append(f"# TYPE dls_{name} gauge")
            lines.append(f'dls_{name}{{node="{node}"}} {fn()}')
        return "\n".join(lines) + "\n"


@dataclass
class _PendingUnsub:
    sub_id: str
    client: str
    timestamp: int
    deadline: float
    msg_source: str
    raw: bytes
    headers: list[tuple[str, bytes]]


class _Skip(Exception):
    """A message that goes to the dead-letter topic (reason, field, value)."""

    def __init__(self, reason: str, field: str | None = None, value: Any = None):
        super().__init__(reason)
        self.reason, self.field, self.value = reason, field, value


#: What routing an event depends on: (label, bank index of its publisher if a local
#: client or -1, index of the neighbour it came from or -1). The usual case, a label from
#: a publisher that is no client here and not from a neighbour, ``(label, -1, -1)``, is
#: keyed by the label header's 8 bytes alone: no int to decode, no tuple to build and hash
#: per event (see NodeService._parse).
_Key = bytes | tuple[int, int, int]
#: What routing an event of one key produces: (messages, deliveries, neighbour indexes);
#: see NodeService._plans.
_Plan = tuple[tuple[Any, ...], int, tuple[int, ...]]


def _plan_bytes(plan: _Plan, shared: bool) -> int:
    """About how much memory a cached plan holds (with its key and its dict slot)."""
    msgs = plan[0]
    if shared:  # (partition, (HEADER_CLIENTS, header bytes)) pairs
        return 250 + sum(len(h[1]) + 150 for _, h in msgs)
    return 250 + 40 * len(msgs)  # client indexes


#: A parsed run of events: (messages, headers to pass on, keys), one entry per event to
#: route.
_Parsed = tuple[list[Message], list[Any], list[_Key]]


def _timestamp(msg: Message) -> int:
    kind, ts = msg.timestamp()
    return int(ts) if kind else 0


def _topic(msg: Message) -> str:
    return msg.topic() or ""


def _offset(msg: Message) -> int:
    offset = msg.offset()
    return -1 if offset is None else int(offset)


def _headers(msg: Message) -> list[tuple[str, bytes]]:
    """The message's headers as (name, bytes) pairs (a missing value becomes b"")."""
    raw = msg.headers() or []
    pairs = raw.items() if isinstance(raw, dict) else raw
    return [(k, v if isinstance(v, bytes) else (v or "").encode()) for k, v in pairs]


def freeze_heap(node: str) -> int:
    """Collect once, then move every live object into the permanent generation.

    Python's full (generation 2) collections scan every tracked object. In a process that
    holds a big heap (the modules, the rebuilt state, anything its host keeps), each one
    stalled the loop: 50-200 ms at ~150,000 objects in the Kafka benchmark, where events
    waiting out the stall made the p99 latency. Frozen objects are never scanned again;
    an object freed later is still freed by reference counting (only a frozen reference
    cycle would stay). Returns how many objects are frozen.
    """
    t0 = time.perf_counter()
    gc.collect()
    gc.freeze()
    frozen = gc.get_freeze_count()
    log.info("node %s: %d objects frozen out of garbage collection in %.0f ms", node, frozen,
             1e3 * (time.perf_counter() - t0))
    return frozen


def set_young_threshold(who: str, threshold: int) -> tuple[int, ...]:
    """Set Python's generation-0 collection threshold; return the thresholds before.

    ``who`` names the process in the log line (``"node A"``).

    Python collects generation 0 each time the tracked objects alive grow by its threshold
    (700 by default), and survivors move up until a full collection. A batch of 1,000
    events keeps about 5,000 tracked objects alive until it is produced (each message and
    its header list and tuples): at the default, a node at 45,000 events/s ran 600-1,070
    collections (125-347 ms) in an 11-second latency run, every one a pause of the loop,
    and with 50,000 it ran 3 (11-66 ms). What a batch allocates is freed by reference
    counting when the batch ends, so the higher threshold adds no memory but that of
    reference cycles, which wait longer for a collection.
    """
    before = gc.get_threshold()
    gc.set_threshold(threshold, *before[1:])
    log.info("%s: garbage collection thresholds %s (were %s)", who, gc.get_threshold(),
             before)
    return before


class NodeService:
    """One logical DLS broker connected to Kafka."""

    def __init__(self, settings: NodeSettings, space: ContentSpace | None = None):
        """Build the state; nothing touches Kafka until :meth:`start`."""
        self.settings = s = settings
        self.space = space or ContentSpace.from_json(s.space)
        self.topics = Topics(s.topic_prefix)
        self.state = BrokerState.for_space(
            s.node, list(s.neighbours), self.space, mode=s.mode,
            client_filter=s.client_filter, routing_filter=s.routing_filter)
        self.metrics = Metrics()
        self.metrics.gauges = {
            "subscriptions": lambda: float(len(self.state)),
            "clients": lambda: float(len(self.state.clients)),
        }
        for n in s.neighbours:
            self.metrics.gauges[f'ert_fill{{neighbour="{n}"}}'] = self._stat("ert_fill", n)
            self.metrics.gauges[f'ert_estimated_fpr{{neighbour="{n}"}}'] = \
                self._stat("ert_estimated_fpr", n)
        self._stop = threading.Event()
        self._pending: dict[str, _PendingUnsub] = {}
        # routed_key(origin, event id) of the events routed in committed batches (the most
        # recent ROUTED_MEMORY at least): a repeat is skipped (an at-least-once writer
        # upstream, such as Spark's Kafka sink, may send one twice), and a driver such as
        # ``dlsroute replay`` can tell when an event has passed this node.
        self.routed = RecentKeys(ROUTED_MEMORY)
        self._batch_routed: dict[bytes, None] = {}  # keys: routed_key
        # (client, id) of subscriptions cancelled recently: a repeated unsubscription is a
        # no-op, and a subscription reusing the id (a replay upstream) is not re-applied.
        self._removed: OrderedDict[tuple[str, str], None] = OrderedDict()
        self._delivery_error: str | None = None
        # At least once (see _step_at_least_once): the last message of the current batch for
        # each (topic, partition), held back to be produced with a delivery callback; the
        # batches whose outputs are not all acknowledged yet, oldest first, as [offsets to
        # commit, callbacks still to come]; the offsets of those that are, not committed yet.
        self._tails: dict[tuple[str, int], tuple[bytes | None, Any]] = {}
        self._inflight: deque[list[Any]] = deque()
        self._ready: dict[tuple[str, int], int] = {}
        self._last_commit = time.monotonic()
        self._delivery_topics: set[str] = set()
        self._new_topics: set[str] = set()
        self._deliver_topics: list[str] = []  # by client index
        # _Key -> _Plan of recent events, valid while state.version is _route_version
        self._route_cache: dict[_Key, _Plan] = {}
        self._route_version = -1
        self._route_cache_bytes = 0  # estimated by _plan_bytes
        self._client_partition = np.zeros(0, dtype=np.int64)  # shared delivery, by client
        self._client_names = np.zeros(0, dtype=object)  # shared delivery: name bytes, by client
        self._client_name_len = np.zeros(0, dtype=np.int64)
        self._producer: Producer | None = None
        self._consumer: Consumer | None = None
        self._http: ThreadingHTTPServer | None = None
        t = self.topics
        self.control_topics = [t.node_subscribe(s.node), t.node_unsubscribe(s.node)] + [
            t.link(n, s.node) for n in s.neighbours]
        self.input_topics = [*self.control_topics, t.node_publish(s.node)]
        self._link_source = {t.link(n, s.node): n for n in s.neighbours}

    @property
    def transactional(self) -> bool:
        """True when outputs and offsets go in one Kafka transaction (exactly once)."""
        return self.settings.delivery == "exactly_once"

    @property
    def _tx_call_timeout_s(self) -> float:
        """Bound of each transactional call: the transaction's own timeout."""
        return self.settings.transaction_timeout_ms / 1000.0

    def _stat(self, key: str, neighbour: str) -> Callable[[], float]:
        return lambda: float(self.state.stats()[key][neighbour])

    # -- lifecycle --------------------------------------------------------------------------
    def stop(self) -> None:
        """Ask the loop to finish its batch, commit and return."""
        self._stop.set()

    def start(self) -> None:
        """Create topics, open clients, rebuild the state from the committed offsets."""
        s, t = self.settings, self.topics
        log.info("node %s starting with settings %s", s.node, s.masked())
        sec = s.kafka_security()
        ensure_topics(s.bootstrap, self.control_topics, config=FOREVER)
        ensure_topics(s.bootstrap, [t.node_publish(s.node), t.deadletter]
                      + [t.link(s.node, n) for n in s.neighbours])
        if s.shared_delivery_partitions:
            try:
                ensure_partitioned_topic(s.bootstrap, t.shared_deliver,
                                         s.shared_delivery_partitions)
            except ConnectorError as exc:
                raise BrokerError(f"node {s.node}: {exc}", field="shared_delivery_partitions",
                                  value=s.shared_delivery_partitions) from exc
        # Static membership: a restarted node takes its partitions back at once instead of
        # waiting for the dead member's session to time out.
        self._consumer = Consumer(consumer_config(
            s.bootstrap, s.consumer_group, **{"group.instance.id": f"{s.consumer_group}-0",
                                              "on_commit": self._on_commit},
            **sec))
        if self.transactional:
            self._producer = Producer(producer_config(
                s.bootstrap, transactional_id=f"{s.consumer_group}-tx",
                **{"transaction.timeout.ms": s.transaction_timeout_ms,
                   "queue.buffering.max.messages": s.producer_queue_messages}, **sec))
            self._producer.init_transactions(self._tx_call_timeout_s)
        else:
            # Every message gets a delivery report: the held-back last ones of a batch
            # carry their own callback (its success is what completes the batch); the
            # others go to _on_delivery_error, which returns at once on success (measured
            # ~0.3 us a message). An error is served before the success of a later message
            # of its partition, so it is seen before that batch could be committed.
            alo: dict[str, Any] = {"queue.buffering.max.messages": s.producer_queue_messages,
                                   "on_delivery": self._on_delivery_error}
            self._producer = Producer(producer_config(s.bootstrap, **alo, **sec))
        self._recover()
        if s.gc_freeze:
            freeze_heap(s.node)
        if s.gc_young_threshold:
            set_young_threshold(f"node {s.node}", s.gc_young_threshold)
        self._consumer.subscribe(self.input_topics)
        if s.metrics_port is not None:
            self._serve_metrics(s.metrics_port)

    def close(self) -> None:
        """Close the Kafka clients and the metrics server (at least once: commit first)."""
        if (self._consumer is not None and self._producer is not None
                and not self.transactional and (self._inflight or self._ready)):
            try:
                self._commit_delivered(self._consumer, self._producer, wait=True)
            except Exception as exc:  # the restart repeats the uncommitted batches
                log.error("node %s: final commit failed (%r)", self.settings.node, exc)
        if self._consumer is not None:
            close_consumer(self._consumer)  # a plain close() can hang mid-rebalance
            self._consumer = None
        if self._producer is not None:
            self._producer.flush(10)
            self._producer = None  # released with its last reference
        if self._http is not None:
            self._http.shutdown()
            self._http = None

    def run(self, max_seconds: float | None = None) -> None:
        """Consume, process, produce and commit until :meth:`stop` (or ``max_seconds``)."""
        if self._consumer is None:
            self.start()
        assert self._consumer is not None and self._producer is not None  # noqa: S101
        consumer, producer = self._consumer, self._producer
        until = None if max_seconds is None else time.monotonic() + max_seconds
        step = self._step_transactional if self.transactional else self._step_at_least_once
        while not self._stop.is_set() and (until is None or time.monotonic() < until):
            msgs = consume_batch(consumer, self.settings.batch_size,
                                 self.settings.poll_timeout_s)
            expired = self._expired_unsubs()
            if not msgs and not expired:
                if self._inflight or self._ready:
                    self._commit_delivered(consumer, producer, wait=False, idle=True)
                continue
            step(consumer, producer, msgs, expired)
            self.metrics.batches += 1

    def _outputs(self, msgs: list[Message], expired: list[_PendingUnsub]) -> None:
        for p in expired:
            self._dead_letter(p.msg_source, p.raw, p.headers,
                              _Skip(f"unknown subscription id {p.sub_id!r} (client "
                                    f"{p.client!r})", "id", p.sub_id))
        if msgs:
            self.process(msgs)

    def _step_transactional(self, consumer: Consumer, producer: Producer, msgs: list[Message],
                            expired: list[_PendingUnsub]) -> None:
        producer.begin_transaction()
        # Every call that waits on the broker is bounded (librdkafka's default is forever):
        # a stuck coordinator stops the node with an error instead of hanging it silently.
        limit = self._tx_call_timeout_s
        try:
            self._outputs(msgs, expired)
            if msgs:
                producer.send_offsets_to_transaction(
                    offsets_to_commit(next_offsets(msgs)), consumer.consumer_group_metadata(),
                    limit)
            producer.commit_transaction(limit)
        except Exception as exc:  # KafkaException, BufferError, a bug: all the same here
            # The state already holds this batch: the safe recovery is a restart,
            # which rebuilds it from what was committed.
            log.error("node %s: batch failed (%r); aborting the transaction and stopping",
                      self.settings.node, exc)
            self._batch_routed.clear()
            try:
                producer.abort_transaction(limit)
            finally:
                raise
        self._remember_routed()

    def _step_at_least_once(self, consumer: Consumer, producer: Producer,
                            msgs: list[Message], expired: list[_PendingUnsub]) -> None:
        """Produce what the batch caused; commit its offsets once all of it is acknowledged.

        The loop never waits for acknowledgements. The idempotent producer delivers the
        messages of one partition in the order they were produced, so once the last message
        of a batch for a partition is acknowledged, all of the batch's (and the earlier
        batches') messages for that partition are too. That last message per
        ``(topic, partition)`` is held back (:meth:`_produce`) and produced at the end of the
        batch with a delivery callback; when all of a batch's callbacks have come, and all of
        the batches before it are complete, its offsets become committable. They are
        committed once per ``commit_interval_s`` (or when the loop is idle), asynchronously:
        the outputs are acknowledged already, so a late or lost commit only means repeats
        after a crash.
        """
        try:
            self._outputs(msgs, expired)
            entry = [next_offsets(msgs) if msgs else {}, len(self._tails)]
            self._inflight.append(entry)
            self._send_tails(entry)
            self._commit_delivered(consumer, producer, wait=False)
        except Exception as exc:
            # Offsets not committed: a restart repeats what was not (at least once).
            log.error("node %s: batch failed (%r); stopping without committing it",
                      self.settings.node, exc)
            raise

    def _send_tails(self, entry: list[Any]) -> None:
        """Produce the held-back last messages of a batch, each with a callback."""
        tails, self._tails = self._tails, {}
        for (topic, partition), (value, headers) in tails.items():
            self._send(topic, value, headers, partition, partial(self._tail_delivered, entry))

    def _tail_delivered(self, entry: list[Any], err: Any, msg: Message) -> None:
        """A held-back last message was delivered (or failed): count it for its batch."""
        if err is not None:
            self._on_delivery_error(err, msg)
            return
        entry[1] -= 1

    def _commit_delivered(self, consumer: Consumer, producer: Producer, *, wait: bool,
                          idle: bool = False) -> None:
        """Commit the offsets of the batches whose outputs are all acknowledged.

        ``wait`` (at close): flush first, so that every batch is complete, and commit
        synchronously. Otherwise commit what is complete once ``commit_interval_s`` has
        passed since the last commit, or at once when ``idle``.
        """
        if wait:
            while producer.flush(1.0) > 0:
                pass
        else:
            producer.poll(0)  # serve the delivery callbacks that are due
        if self._delivery_error is not None:
            raise BrokerError(f"node {self.settings.node}: {self._delivery_error}",
                              field="delivery", value=self._delivery_error)
        inflight = self._inflight
        while inflight and inflight[0][1] <= 0:
            self._ready.update(inflight.popleft()[0])
        if not (wait or idle) and (time.monotonic() - self._last_commit
                                   < self.settings.commit_interval_s):
            return
        if self._ready:
            offsets = offsets_to_commit(self._ready)
            if wait:  # two calls: the stubs type each value of asynchronous apart
                consumer.commit(offsets=offsets, asynchronous=False)
            else:
                consumer.commit(offsets=offsets, asynchronous=True)
            self._ready = {}
        self._last_commit = time.monotonic()
        # Ids of batches still in flight move too: a failed delivery stops the node, and
        # its restart begins with an empty memory anyway.
        self._remember_routed()

    def _on_commit(self, err: Any, partitions: list[TopicPartition]) -> None:
        """Log an asynchronous offset commit that failed (the next one covers it)."""
        if err is not None:
            log.warning("node %s: offset commit failed (%s); the next commit covers it",
                        self.settings.node, err)

    def _on_delivery_error(self, err: Any, msg: Message) -> None:
        """Remember the first failure librdkafka reports (a success returns at once)."""
        if err is not None and self._delivery_error is None:
            self._delivery_error = (f"delivery to {msg.topic()}[{msg.partition()}] failed: "
                                    f"{err}")

    def _produce(self, topic: str, value: bytes | None, headers: Any = None,
                 partition: int = -1) -> None:
        """Produce one output of the current batch.

        At least once, the message is held back as the batch's last one for its
        ``(topic, partition)`` and the one it replaces is produced; a message without a
        partition goes to partition 0 (the node's topics have one), so that "the last
        message of a partition" is known (see :meth:`_step_at_least_once`).
        """
        if self.transactional:
            self._send(topic, value, headers, partition)
            return
        key = (topic, partition if partition >= 0 else 0)
        held = self._tails.get(key)
        self._tails[key] = (value, headers)
        if held is not None:
            self._send(topic, held[0], held[1], key[1])

    def _send(self, topic: str, value: bytes | None, headers: Any = None, partition: int = -1,
              on_delivery: Callable[[Any, Message], None] | None = None) -> None:
        """Produce, waiting for room when librdkafka's local queue is full."""
        assert self._producer is not None  # noqa: S101
        while True:
            try:
                if on_delivery is None:
                    self._producer.produce(topic, value, headers=headers, partition=partition)
                else:
                    self._producer.produce(topic, value, headers=headers, partition=partition,
                                           on_delivery=on_delivery)
                return
            except BufferError:
                self.metrics.queue_full_waits += 1
                self._producer.poll(0.05)  # serve delivery reports until there is room

    def _remember_routed(self) -> None:
        self.routed.update(self._batch_routed)
        self._batch_routed.clear()

    # -- recovery ---------------------------------------------------------------------------
    def _recover(self) -> None:
        """Replay control topics up to the committed offsets, producing nothing."""
        s = self.settings
        assert self._consumer is not None  # noqa: S101
        parts = [TopicPartition(topic, 0) for topic in self.control_topics]
        committed = committed_offsets(self._consumer, parts)
        todo = [tp for tp in committed if tp.offset > 0]
        if not todo:
            return
        reader = Consumer(consumer_config(s.bootstrap, f"{s.consumer_group}-recovery",
                                          **s.kafka_security()))
        reader.assign([TopicPartition(tp.topic, 0, 0) for tp in todo])
        end = {tp.topic: tp.offset for tp in todo}
        seen: list[Message] = []
        # Transaction markers take offsets too, so the last record of a topic may sit
        # below ``end - 1``: a topic is done when the reader's position reaches ``end``,
        # or when nothing more arrives for a while (all below ``end`` is then read).
        deadline = time.monotonic() + 120
        quiet = 0
        while time.monotonic() < deadline:
            batch = consume_batch(reader, 10_000, 0.5)
            for msg in batch:
                if _offset(msg) < end[_topic(msg)]:
                    seen.append(msg)
            positions = reader.position([TopicPartition(t, 0) for t in end])
            if all(p.offset >= end[p.topic] for p in positions):
                break
            quiet = 0 if batch else quiet + 1
            if quiet >= 4:
                break
        else:
            reader.close()
            raise BrokerError(f"node {s.node}: could not re-read control topics "
                              f"{sorted(end)} within 120 s", field="recovery",
                              value=sorted(end))
        reader.close()
        seen.sort(key=lambda m: (_timestamp(m), _topic(m), _offset(m)))
        self._apply_controls(seen, replay=True)
        log.info("node %s recovered %d control messages: %d subscriptions, %d clients",
                 s.node, len(seen), len(self.state), len(self.state.clients))

    # -- processing -------------------------------------------------------------------------
    def process(self, msgs: Sequence[Message]) -> None:
        """Apply one consumed batch, producing its outputs (inside the open transaction).

        The batch is walked in order; runs of control messages and runs of events are each
        handled as one batch.
        """
        publish = self.topics.node_publish(self.settings.node)
        if msgs and list(map(Message.topic, msgs)).count(publish) == len(msgs):  # events only
            self._route(list(msgs))  # no control message: no new delivery topic after it
            return
        events: list[Message] = []
        controls: list[Message] = []
        for msg in msgs:
            topic = _topic(msg)
            if topic == publish or (topic in self._link_source and self._has_label(msg)):
                if controls:
                    self._apply_controls(controls, replay=False)
                    controls = []
                events.append(msg)
            else:
                if events:
                    self._route(events)
                    events = []
                controls.append(msg)
        if controls:
            self._apply_controls(controls, replay=False)
        if events:
            self._route(events)
        self._create_new_topics()

    def _apply_controls(self, msgs: Sequence[Message], *, replay: bool) -> None:
        """Apply control messages in order; runs of subscriptions go in one batch."""
        sub_topic = self.topics.node_subscribe(self.settings.node)
        i = 0
        while i < len(msgs):
            j = i
            while j < len(msgs) and _topic(msgs[j]) == sub_topic:
                j += 1
            if j - i >= 2 and self._subscribe_run(msgs[i:j], replay):
                i = j
                continue
            for msg in msgs[i:max(j, i + 1)]:  # one by one: exact reasons for bad ones
                try:
                    self._control(msg, replay=replay)
                except _Skip as skip:
                    if not replay:  # on replay it was dead-lettered the first time round
                        self._dead_letter(source_of(msg), msg.value() or b"", _headers(msg),
                                          skip)
            i = max(j, i + 1)

    def _subscribe_run(self, run: Sequence[Message], replay: bool) -> bool:
        """Apply consecutive subscriptions with one ``subscribe_many``.

        Returns False, having changed nothing, when any of them needs the one-by-one path
        (undecodable, a pending unsubscription, or refused by the state).
        """
        clients: list[str] = []
        ids: list[str] = []
        parts: list[np.ndarray] = []
        for msg in run:
            try:
                name, rec = SERDE.decode(msg.value() or b"")
            except DLSError:
                return False
            if name != "LabelSubscription" or rec["id"] in self._pending \
                    or (rec["client"], rec["id"]) in self._removed:
                return False
            try:
                parts.append(decode_labels(rec["labels"]))
            except DLSError:
                return False
            clients.append(rec["client"])
            ids.append(rec["id"])
        offsets = np.zeros(len(parts) + 1, dtype=np.int64)
        np.cumsum([len(p) for p in parts], out=offsets[1:])
        try:
            out = self.state.subscribe_many(clients, ids, offsets, np.concatenate(parts))
        except DLSError:
            return False
        if not replay:
            self.metrics.control_in += len(run)
            self._need_delivery_topics(clients)
        self._emit_links(out, replay)
        return True

    @staticmethod
    def _has_label(msg: Message) -> bool:
        return any(k == HEADER_LABEL for k, _ in _headers(msg))

    def _control(self, msg: Message, *, replay: bool) -> None:
        topic, node = _topic(msg), self.settings.node
        t = self.topics
        self.metrics.control_in += 0 if replay else 1
        try:
            name, rec = SERDE.decode(msg.value() or b"")
        except DLSError as exc:
            raise _Skip(f"undecodable: {exc}", getattr(exc, "field", None)) from exc
        try:
            if topic == t.node_subscribe(node):
                if name != "LabelSubscription":
                    raise _Skip(f"expected a LabelSubscription, got {name}", "schema", name)
                self._subscribe(msg, rec, replay)
            elif topic == t.node_unsubscribe(node):
                if name != "LabelUnsubscription":
                    raise _Skip(f"expected a LabelUnsubscription, got {name}", "schema", name)
                self._unsubscribe(msg, rec, replay)
            else:
                if name != "LinkControl":
                    raise _Skip(f"expected a LinkControl, got {name}", "schema", name)
                source = self._link_source[topic]
                kind = str(rec["kind"]).lower()
                out = self.state.on_link(source, kind, decode_labels(rec["labels"]))
                self._emit_links(out, replay)
        except DLSError as exc:
            raise _Skip(str(exc), exc.field, exc.value) from exc

    def _subscribe(self, msg: Message, rec: dict[str, Any], replay: bool) -> None:
        client, sid = rec["client"], rec["id"]
        if (client, sid) in self._removed:
            raise _Skip(f"subscription id {sid!r} of client {client!r} was cancelled; ids "
                        f"are not reused (a repeat from an at-least-once writer?)", "id", sid)
        pending = self._pending.get(sid)
        if pending is not None and pending.client == client \
                and _timestamp(msg) <= pending.timestamp:
            del self._pending[sid]  # subscribed and cancelled before we saw it: no-op
            self._removed[(client, sid)] = None
            return
        labels = decode_labels(rec["labels"])
        if not replay:
            self._need_delivery_topics([client])
        self._emit_links(self.state.subscribe(client, sid, labels), replay)

    def _unsubscribe(self, msg: Message, rec: dict[str, Any], replay: bool) -> None:
        client, sid = rec["client"], rec["id"]
        try:
            self._emit_links(self.state.unsubscribe(client, sid), replay)
        except UnknownSubscriptionError:
            if (client, sid) in self._removed:  # cancelled already: a repeat
                self.metrics.duplicates += 0 if replay else 1
                return
            self._pending[sid] = _PendingUnsub(
                sid, client, _timestamp(msg), time.monotonic() + self.settings.unsubscribe_grace_s,
                source_of(msg), msg.value() or b"", _headers(msg))
        else:
            self._removed[(client, sid)] = None
            while len(self._removed) > ROUTED_MEMORY:
                self._removed.popitem(last=False)

    def _expired_unsubs(self) -> list[_PendingUnsub]:
        if not self._pending:
            return []
        now = time.monotonic()
        gone = [sid for sid, p in self._pending.items() if p.deadline <= now]
        return [self._pending.pop(sid) for sid in gone]

    def _need_delivery_topics(self, clients: Sequence[str]) -> None:
        """Note the delivery topics of ``clients`` that may not exist yet.

        None with a shared delivery topic: that one is made at start.
        """
        if not self.settings.shared_delivery_partitions:
            self._new_topics.update(t for t in map(self.topics.deliver, set(clients))
                                    if t not in self._delivery_topics)

    def _create_new_topics(self) -> None:
        """Create the delivery topics of clients first seen in this batch, in one call."""
        if self._new_topics:
            ensure_topics(self.settings.bootstrap, sorted(self._new_topics))
            self._delivery_topics |= self._new_topics
            self._new_topics.clear()

    def _emit_links(self, out: list[LinkMessage], replay: bool) -> None:
        if replay or not out:
            return
        assert self._producer is not None  # noqa: S101
        node = self.settings.node
        for m in out:
            self._produce(self.topics.link(node, m.to), encode_link(node, m.kind, m.labels))
            if m.kind == ADVERTISE:
                self.metrics.labels_advertised += len(m.labels)
            else:
                self.metrics.labels_withdrawn += len(m.labels)

    def _route(self, run: list[Message]) -> None:
        """Route a run of events; bad headers go to dead letters.

        Each event's plan (its output messages and neighbours) comes from the route cache
        or, for the events it lacks, from one numpy batch (:meth:`_plans`).
        """
        assert self._producer is not None  # noqa: S101
        self._create_new_topics()
        node = self.settings.node
        good, carried_of, keys = self._parse(run)
        if not good:
            return
        self.metrics.events_in += len(good)
        plans = self._plans(keys)
        values = list(map(Message.value, good))
        deliveries = messages = 0
        if self.settings.shared_delivery_partitions:
            topic = self.topics.shared_deliver
            fast = self._producer.produce  # _send only when the local queue is full
            send = self._send
            # At least once, the last message of each partition is held back (_produce's
            # rule, inlined): after any held from an earlier run of the batch is sent.
            last: dict[int, int] = {}  # partition -> the last event of the run sent to it
            if not self.transactional:
                n_parts = self.settings.shared_delivery_partitions
                for i in range(len(plans) - 1, -1, -1):
                    for part, _ in plans[i][0]:
                        last.setdefault(part, i)
                    if len(last) == n_parts:
                        break
            tails = self._tails
            for part in last:
                held = tails.pop((topic, part), None)
                if held is not None:
                    send(topic, held[0], held[1], part)
            deliveries = sum(map(itemgetter(1), plans))
            messages = sum(map(len, map(itemgetter(0), plans)))
            # Events before the first held-back one need no check: the per-event hot loop.
            hold = min(last.values()) if last else len(plans)
            for value, carried, (msgs, _, _) in zip(values[:hold], carried_of[:hold],
                                                    plans[:hold], strict=True):
                for part, header in msgs:
                    try:
                        fast(topic, value, headers=[*carried, header], partition=part)
                    except BufferError:
                        send(topic, value, [*carried, header], part)
            for i in range(hold, len(plans)):
                value, carried = values[i], carried_of[i]
                for part, header in plans[i][0]:
                    hdrs = [*carried, header]
                    if last[part] == i:
                        tails[(topic, part)] = (value, hdrs)
                        continue
                    try:
                        fast(topic, value, headers=hdrs, partition=part)
                    except BufferError:
                        send(topic, value, hdrs, part)
        else:
            names = self.state.clients
            while len(self._deliver_topics) < len(names):  # topic names, once per client
                self._deliver_topics.append(
                    self.topics.deliver(names[len(self._deliver_topics)]))
            deliver = self._deliver_topics
            produce = self._produce
            for (clients, count, _), value, carried in zip(plans, values, carried_of,
                                                           strict=True):
                deliveries += count
                for c in clients:
                    produce(deliver[c], value, carried)
            messages = deliveries
        self.metrics.deliveries += deliveries
        self.metrics.delivery_messages += messages
        if self.state.neighbours:
            links = [self.topics.link(node, n) for n in self.state.neighbours]
            forwarded = 0
            for (_, _, to), value, carried in zip(plans, values, carried_of, strict=True):
                for j in to:
                    self._produce(links[j], value, carried)
                forwarded += len(to)
            self.metrics.events_forwarded += forwarded

    def _plans(self, keys: list[_Key]) -> list[_Plan]:
        """The plan of each event ``(label, origin client, origin neighbour)`` of a run.

        A plan is what routing an event of that key produces: ``(messages, deliveries,
        neighbours)``. Messages are ``(partition, (HEADER_CLIENTS, value))`` pairs with a
        shared delivery topic, else the client indexes to deliver to; neighbours are the indexes
        of those to forward to. Plans come from the cache while the state's version is the
        one they were computed at (any subscription or link change empties it); the other
        keys are routed as one numpy batch, each distinct key once, and cached.
        """
        state, cache = self.state, self._route_cache
        budget = self.settings.route_cache_mb * 1e6
        if self._route_version != state.version:
            cache.clear()
            self._route_version, self._route_cache_bytes = state.version, 0
        found: list[_Plan | None] = (list(map(cache.get, keys)) if budget
                                     else [None] * len(keys))
        todo = list(dict.fromkeys(k for k, p in zip(keys, found, strict=True) if p is None))
        self.metrics.route_cache_misses += len(todo)
        self.metrics.route_cache_hits += len(keys) - len(todo)
        if not todo:
            return found  # type: ignore[return-value]
        made = dict(zip(todo, self._route_keys(todo), strict=True))
        if budget:
            shared = bool(self.settings.shared_delivery_partitions)
            size = sum(_plan_bytes(plan, shared) for plan in made.values())
            if self._route_cache_bytes + size > budget:
                cache.clear()  # bounded: start over rather than track ages
                self._route_cache_bytes = 0
            if size <= budget:
                cache.update(made)
                self._route_cache_bytes += size
        return [made[k] if p is None else p for k, p in zip(keys, found, strict=True)]

    def _route_keys(self, keys: list[_Key]) -> list[_Plan]:
        """Route distinct keys as one numpy batch (``state.route``) into plans."""
        full = [(int.from_bytes(k, "big"), -1, -1) if type(k) is bytes else k for k in keys]
        routes = self.state.route(np.array([k[0] for k in full], dtype=np.uint64),
                                  np.array([k[1] for k in full], dtype=np.int64),
                                  np.array([k[2] for k in full], dtype=np.int64))
        n = len(keys)
        counts = np.diff(routes.offsets).tolist()
        to: list[list[int]] = [[] for _ in range(n)]
        rows, cols = np.nonzero(routes.neighbours)
        for e, j in zip(rows.tolist(), cols.tolist(), strict=True):
            to[e].append(j)
        msgs: list[list[Any]] = [[] for _ in range(n)]
        if self.settings.shared_delivery_partitions:
            events, parts, named = self._shared_deliveries(routes.offsets, routes.clients)
            for e, part, header in zip(events, parts, named, strict=True):
                msgs[e].append((part, (HEADER_CLIENTS, header)))
        else:
            offsets = routes.offsets.tolist()
            clients = routes.clients.tolist()
            msgs = [clients[offsets[e]:offsets[e + 1]] for e in range(n)]
        return [(tuple(m), c, tuple(t)) for m, c, t in zip(msgs, counts, to, strict=True)]

    def _parse(self, run: list[Message]) -> _Parsed:
        """The headers of a run, event by event: dead letters and repeats, in order.

        Events with the usual three headers in the usual order are read by position:
        0.79-0.94 µs per event against 1.18-1.25 µs through a dict (offline, messages
        built by hand, 100,000 events). (A bulk version, one comprehension per header over
        the run, measured no faster than the dict per event.)
        """
        node, state = self.settings.node, self.state
        link_source, batch_routed = self._link_source, self._batch_routed
        routed_new, routed_old = self.routed.new, self.routed.old  # fixed during a run
        from_bytes = int.from_bytes
        good: list[Message] = []
        carried_of: list[Any] = []  # each good event's headers, passed on as they came
        keys: list[_Key] = []
        # Origin header value -> (origin, bank index of a local publisher or -1), once per
        # distinct origin of the run: a batch comes from few publishers, and the state does
        # not change while a run is routed.
        origins: dict[bytes | None, tuple[str, int, bytes]] = {}
        for msg in run:
            carried: list[tuple[str, bytes | None]] = msg.headers() or []  # type: ignore[assignment]
            # Values of consumed headers are bytes (or None), never str. The usual headers
            # (Client.publish's and the Spark job's, passed on unchanged by nodes) are the
            # label, origin and id in this order: read by position, no dict needed.
            if len(carried) == 3:
                (k0, raw), (k1, raw_origin), (k2, eid) = carried
                plain = (k0 == HEADER_LABEL and k1 == HEADER_ORIGIN and k2 == HEADER_EVENT_ID
                         and type(raw) is bytes and len(raw) == 8)
            else:
                plain = False
            if plain:
                label8: bytes = raw  # type: ignore[assignment]
                clean: Any = carried
            else:
                headers = dict(carried)
                raw = headers.get(HEADER_LABEL)
                if type(raw) is bytes and len(raw) == 8:
                    label8 = raw
                else:
                    try:
                        label8 = self._bad_label(headers, raw).to_bytes(8, "big")
                    except _Skip as skip:
                        self._dead_letter(source_of(msg), msg.value() or b"", _headers(msg),
                                          skip)
                        continue
                raw_origin = headers.get(HEADER_ORIGIN)
                eid = headers.get(HEADER_EVENT_ID)
                clean = (carried if HEADER_CLIENTS not in headers
                         else [h for h in carried if h[0] != HEADER_CLIENTS])
            known = origins.get(raw_origin)
            if known is None:
                origin = (raw_origin or b"").decode("utf-8", "replace")
                o_node, _, o_client = origin.partition("/")
                known = origins[raw_origin] = (
                    origin, state.client_index(o_client, create=False) if o_node == node
                    else -1, (raw_origin or b"") + b"\x00")
            origin, local, id_prefix = known
            came_from = link_source.get(msg.topic()) if link_source else None  # type: ignore[arg-type]
            if eid is not None:
                key = id_prefix + eid  # routed_key(origin, event id), from the raw bytes
                if key in routed_new or key in routed_old or key in batch_routed:
                    self.metrics.duplicates += 1
                    log.debug("node %s: %s repeats event %r of %s: skipped", node,
                              source_of(msg), eid.decode("utf-8", "replace"), origin)
                    continue
                batch_routed[key] = None
            good.append(msg)
            carried_of.append(clean)
            if came_from is None and local < 0:  # the usual key: the label's 8 bytes
                keys.append(label8)
            else:
                label = from_bytes(label8, "big")
                keys.append((label, local, -1) if came_from is None
                            else (label, -1, state.neighbour_index(came_from)))
        return good, carried_of, keys

    @staticmethod
    def _bad_label(headers: dict[str, bytes | None], raw: bytes | None) -> int:
        """The label of a header that is not plain 8 bytes, or the reason it is unusable.

        Raises:
            _Skip: No label header, or one that :func:`decode_label` refuses.
        """
        if raw is None:
            if HEADER_LABEL not in headers:
                raise _Skip(f"event without a {HEADER_LABEL} header", HEADER_LABEL)
            raw = b""  # present without a value: refused by decode_label
        try:
            return decode_label(raw)
        except DLSError as exc:
            raise _Skip(str(exc), HEADER_LABEL, raw.hex()) from exc

    def _shared_deliveries(self, offsets: np.ndarray, clients: np.ndarray
                           ) -> tuple[list[int], list[int], list[bytes]]:
        """The messages for the shared delivery topic: ``(events, partitions, clients)``.

        Deliveries of an event are grouped by the partition of each client
        (``delivery_partition``), so an event reaching 30 clients in 8 partitions is
        written 8 times, each copy naming the clients of its partition. Message ``i`` is
        event ``events[i]`` (an index into the batch) for partition ``partitions[i]`` with
        the :data:`HEADER_CLIENTS` value ``clients[i]``; events come in batch order.
        """
        names = self.state.clients
        n_parts = self.settings.shared_delivery_partitions
        have = len(self._client_names)
        if have < len(names):  # the partition and name bytes of each client, computed once
            self._client_partition = np.concatenate([
                self._client_partition,
                np.array([delivery_partition(c, n_parts) for c in names[have:]],
                         dtype=np.int64)])
            new = [c.encode() for c in names[have:]]
            self._client_names = np.concatenate([self._client_names,
                                                 np.array(new, dtype=object)])
            self._client_name_len = np.concatenate([
                self._client_name_len, np.array([len(b) for b in new], dtype=np.int64)])
        if len(clients) == 0:
            return [], [], []
        n_events = len(offsets) - 1
        event_of = np.repeat(np.arange(n_events, dtype=np.int64), np.diff(offsets))
        if n_parts == 1:  # one message per event: the deliveries are grouped already
            key, grouped = event_of, clients
        else:
            key = event_of * n_parts + self._client_partition[clients]
            order = np.argsort(key, kind="stable")
            key, grouped = key[order], clients[order]
        starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
        first = key[starts]
        # Every name of the batch joined once (the bytes of encode_clients, without
        # decoding); each message's header is then one slice of it: the names of its group.
        joined = b",".join(self._client_names[grouped].tolist())
        ends = np.cumsum(self._client_name_len[grouped] + 1)  # one past each name's comma
        lo = np.r_[0, ends[starts[1:] - 1]].tolist()
        hi = (np.r_[ends[starts[1:] - 1], ends[-1]] - 1).tolist()
        named = [joined[a:b] for a, b in zip(lo, hi, strict=True)]
        return (first // n_parts).tolist(), (first % n_parts).tolist(), named

    def _dead_letter(self, source: str, raw: bytes, headers: list[tuple[str, bytes]],
                     skip: _Skip) -> None:
        assert self._producer is not None  # noqa: S101
        log.warning("node %s: %s -> dead letter: %s", self.settings.node, source, skip.reason)
        value = None if skip.value is None else str(skip.value)
        self._produce(
            self.topics.deadletter,
            encode_dead_letter(source, skip.reason, raw, dict(headers), field=skip.field,
                               value=value),
            headers=[(HEADER_DLQ_REASON, skip.reason.encode()),
                     (HEADER_DLQ_SOURCE, source.encode())])
        self.metrics.dead_letters += 1

    # -- metrics ----------------------------------------------------------------------------
    def _serve_metrics(self, port: int) -> None:
        service = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                body = service.metrics.render(service.settings.node).encode()
                self.send_response(200 if self.path in ("/", "/metrics") else 404)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                return

        self._http = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        threading.Thread(target=self._http.serve_forever, daemon=True).start()
        log.info("node %s serves metrics on 127.0.0.1:%d", self.settings.node,
                 self._http.server_address[1])
