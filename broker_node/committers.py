"""How a batch is committed: its outputs produced and its input offsets committed.

Two strategies behind one small interface (:class:`Committer`), chosen by
``NodeSettings.delivery``:

- :class:`ExactlyOnce`: the batch's outputs and its input offsets go in one Kafka
  transaction; a crash loses nothing and duplicates nothing for ``read_committed`` readers.
- :class:`AtLeastOnce`: no transaction. The input offsets of a batch are committed once
  everything produced for it (and before it) is acknowledged by the broker, learnt from
  one delivery callback per batch and ``(topic, partition)`` written, without ever waiting
  (the hold-back rule, :meth:`AtLeastOnce.produce`). A crash repeats the outputs of the
  batches not committed yet; nothing is lost, and repeats are dropped by event id
  downstream.

The loop calls :meth:`Committer.begin`, produces through :meth:`Committer.produce` (or the
bulk :meth:`Committer.produce_spread` of the router), then :meth:`Committer.commit`; on an
error :meth:`Committer.abort`, then it stops. Why at least once holds back messages rather
than flushing: docs/architecture.md#at-least-once-hold-back.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from functools import partial
from typing import Any

from confluent_kafka import Consumer, KafkaException, Message, Producer, TopicPartition

from broker_node.config import NodeSettings
from broker_node.exceptions import BrokerError
from broker_node.inbox import DeadLetter
from broker_node.metrics import Metrics
from broker_node.oversize import MessageLimit, halves, is_too_large, refusal_hint
from broker_node.watchdog import Watchdog
from connectors.closing import close_producer
from connectors.kafka import next_offsets, offsets_to_commit, producer_config
from connectors.topics import HEADER_EVENT_ID, HEADER_LINK_SEQ

__all__ = [
    "TRANSACTION_RETRY_BACKOFF_MS",
    "AtLeastOnce",
    "Committer",
    "DeliveryErrors",
    "ExactlyOnce",
    "committer_for",
    "log_failed_commit",
    "open_producer",
]

log = logging.getLogger(__name__)

#: One output message: (partition, the header that completes the carried ones).
Spread = Sequence[tuple[int, tuple[str, bytes]]]

#: The transactional producer's first retry backoff (``retry.backoff.ms``, ms). The
#: transaction coordinator answers CONCURRENT_TRANSACTIONS while it still completes the
#: previous commit, and librdkafka retries after this backoff: at its default, a batch
#: that follows another at once waited a whole backoff for a few milliseconds of the
#: coordinator's work (docs/architecture.md#the-node-loop). Later retries back off
#: exponentially up to ``retry.backoff.max.ms``, so a broker that is away is not pressed.
TRANSACTION_RETRY_BACKOFF_MS = 10


class DeliveryErrors:
    """The first delivery failure librdkafka reports (at least once stops on it)."""

    def __init__(self) -> None:
        """No failure yet."""
        self.first: str | None = None

    def on_delivery(self, err: Any, msg: Message) -> None:
        """A delivery report: remember the first failure (a success returns at once)."""
        if err is not None and self.first is None:
            self.first = (f"delivery to {msg.topic()}[{msg.partition()}] failed: {err}"
                          f"{refusal_hint(err)}")


def log_failed_commit(node: str, err: Any, partitions: list[TopicPartition]) -> None:
    """Log an asynchronous offset commit that failed (the next one covers it)."""
    if err is not None:
        log.warning("node %s: offset commit failed (%s); the next commit covers it", node, err)


def open_producer(s: NodeSettings, errors: DeliveryErrors, watchdog: Watchdog | None = None,
                  limit: MessageLimit | None = None) -> Producer:
    """The Kafka producer the node's delivery mode needs (transactions initialised).

    Its messages and batches stay within ``limit`` (the node's default when None).
    """
    sec = s.kafka_security()
    queue: dict[str, Any] = {"queue.buffering.max.messages": s.producer_queue_messages,
                             **(limit or MessageLimit()).producer_config()}
    if s.delivery == "exactly_once":
        producer = Producer(producer_config(
            s.bootstrap, transactional_id=f"{s.consumer_group}-tx",
            **{"transaction.timeout.ms": s.transaction_timeout_ms,
               "retry.backoff.ms": TRANSACTION_RETRY_BACKOFF_MS, **queue}, **sec))
        with _guard(watchdog, "init_transactions"):
            producer.init_transactions(s.transaction_timeout_ms / 1000.0)
        return producer
    # Every message gets a delivery report: the held-back last ones of a batch carry their
    # own callback (its success is what completes the batch); the others go to
    # errors.on_delivery, which returns at once on success. An error is served before the
    # success of a later message of its partition, so it is seen before that batch could be
    # committed.
    return Producer(producer_config(s.bootstrap, **queue, on_delivery=errors.on_delivery,
                                    **sec))


def _guard(watchdog: Watchdog | None, call: str) -> AbstractContextManager[None]:
    """``watchdog.guard(call)``, or nothing without a watchdog (a test without Kafka)."""
    return nullcontext() if watchdog is None else watchdog.guard(call)


class Committer:
    """Produces a batch's outputs and commits its input offsets (see the module text).

    ``on_commit`` runs once a batch's offsets are committed (or sure to be), ``on_abort``
    when a batch fails: the routed-id memory follows the batches that count. Every call
    that can block on the broker runs under the ``watchdog`` (:mod:`broker_node.watchdog`).
    """

    transactional = False

    def __init__(self, producer: Producer, consumer: Consumer | None, settings: NodeSettings,
                 metrics: Metrics, *, on_commit: Callable[[], None] = lambda: None,
                 on_abort: Callable[[], None] = lambda: None,
                 watchdog: Watchdog | None = None, limit: MessageLimit | None = None) -> None:
        """Wrap the node's producer and consumer (the consumer may be None without Kafka).

        ``limit``: what the producer was opened with (:func:`open_producer`).
        """
        self.producer, self.consumer = producer, consumer
        self.limit = limit or MessageLimit()
        self.settings, self.metrics = settings, metrics
        self.on_commit, self.on_abort = on_commit, on_abort
        self.watchdog = watchdog
        self.dead_letter_topic = settings.topics().deadletter  # of outputs too large
        #: the number of batches begun: the current (or last) batch's number
        self.batch, self.opened = 0, time.monotonic()
        self._durable = 0  # the last batch whose input offsets are surely committed
        self._needed = 0  # the last batch something waits to see committed (see need)

    @property
    def durable(self) -> int:
        """The last batch whose input offsets are committed (so are all batches before it).

        What a node tells others about a batch (link control applied, a subscription
        acknowledged) waits until then: a node that crashed before would re-read the batch
        after events that come later, and route those without it
        (docs/architecture.md#acknowledged-means-committed). Without a consumer (a test
        without Kafka) nothing is committed and every batch counts as durable.
        """
        return self.batch if self.consumer is None else self._durable

    def need(self, batch: int) -> None:
        """Something waits for batch ``batch`` to be committed: commit it without delay."""
        self._needed = max(self._needed, batch)

    @property
    def waiting(self) -> bool:
        """True while a batch passed to :meth:`need` is not committed yet."""
        return self.durable < self._needed

    def offsets_committed(self, err: Any, partitions: list[TopicPartition]) -> None:
        """The consumer's commit callback (``on_commit``): log a commit that failed."""
        log_failed_commit(self.settings.node, err, partitions)

    def guard(self, call: str) -> AbstractContextManager[None]:
        """The watchdog's bound around ``call`` (nothing without a watchdog)."""
        return _guard(self.watchdog, call)

    def send(self, topic: str, value: bytes | None, headers: Any = None, partition: int = -1,
             on_delivery: Callable[[Any, Message], None] | None = None,
             timestamp: int = 0, key: bytes | None = None) -> None:
        """Produce now, waiting for room when librdkafka's local queue is full.

        ``timestamp``: the message's time in ms (0: now); an event keeps its publication
        time through every node (docs/architecture.md#order-of-changes-and-events).
        """
        try:
            self._produce(topic, value, headers, partition, on_delivery, timestamp, key)
            return
        except BufferError:
            pass
        except KafkaException as exc:
            self.too_large(exc, topic, value, headers, partition, on_delivery, timestamp, key)
            return
        # The queue is full: the broker is slow or gone. Wait, bounded by the watchdog, and
        # say so every few seconds.
        with self.guard(f"waiting for room in the producer queue for {topic}"):
            since = last_note = time.monotonic()
            while True:
                self.metrics.queue_full_waits += 1
                self.producer.poll(0.05)  # serve delivery reports until there is room
                try:
                    self._produce(topic, value, headers, partition, on_delivery, timestamp,
                                  key)
                    return
                except KafkaException as exc:
                    self.too_large(exc, topic, value, headers, partition, on_delivery,
                                   timestamp, key)
                    return
                except BufferError:
                    if time.monotonic() - last_note >= 10.0:
                        last_note = time.monotonic()
                        log.warning("node %s: the producer queue has been full for %.0f s "
                                    "(is the broker reachable?)", self.settings.node,
                                    last_note - since)

    def too_large(self, exc: KafkaException, topic: str, value: bytes | None, headers: Any,
                  partition: int, on_delivery: Callable[[Any, Message], None] | None,
                  timestamp: int, key: bytes | None) -> None:
        """An output librdkafka refused (``exc``): split it, or make it a dead letter.

        Any other error than its size is raised, and so is the refusal of a link message
        (:data:`~broker_node.controls.LINK_LABELS` keeps them small) or of a dead letter
        (cut to fit). A shared-topic delivery goes as two, each naming half of its clients
        (:func:`~broker_node.oversize.halves`; the second carries ``on_delivery``: it is
        acknowledged last). What cannot be split goes to the dead letters, cut, and
        ``on_delivery`` is called once every message produced before it is acknowledged
        (:mod:`broker_node.oversize`).
        """
        if (not is_too_large(exc) or topic == self.dead_letter_topic
                or any(k == HEADER_LINK_SEQ for k, _ in headers or ())):
            raise exc  # a link message lost would leave the neighbour's state wrong
        split = halves(headers)
        if split is not None:
            self.send(topic, value, split[0], partition, None, timestamp, key)
            self.send(topic, value, split[1], partition, on_delivery, timestamp, key)
            return
        size = len(value or b"") + sum(len(k) + len(v or b"") for k, v in headers or ())
        eid = dict(headers or ()).get(HEADER_EVENT_ID, b"").decode("utf-8", "replace")
        where = f"{topic}[{partition}]" if partition >= 0 else topic
        reason = (f"an output of event {eid!r} to {where} is {size:,} bytes with "
                  f"its headers, more than the node's producer sends ({self.limit}): "
                  f"not sent")
        log.error("node %s: %s", self.settings.node, reason)
        letter = DeadLetter(where, reason, value or b"",
                            [(k, v or b"") for k, v in headers or ()])
        record, letter_headers = letter.message(self.limit)
        self.send(self.dead_letter_topic, record, letter_headers)
        self.metrics.dead_letters += 1
        self.metrics.outputs_too_large += 1
        if on_delivery is not None:  # what it vouched for: every message before it
            with self.guard("flush"):
                self.producer.flush()
            on_delivery(None, None)  # type: ignore[arg-type]

    def _produce(self, topic: str, value: bytes | None, headers: Any, partition: int,
                 on_delivery: Callable[[Any, Message], None] | None, timestamp: int,
                 key: bytes | None) -> None:
        if key is None and on_delivery is None:  # every event's copy: no dict per call
            self.producer.produce(topic, value, headers=headers, partition=partition,
                                  timestamp=timestamp)
            return
        extra: dict[str, Any] = {} if key is None else {"key": key}
        if on_delivery is not None:
            extra["on_delivery"] = on_delivery
        self.producer.produce(topic, value, headers=headers, partition=partition,
                              timestamp=timestamp, **extra)

    def produce(self, topic: str, value: bytes | None, headers: Any = None,
                partition: int = -1, timestamp: int = 0, key: bytes | None = None) -> None:
        """Produce one output of the current batch (``timestamp`` in ms, 0: now)."""
        self.send(topic, value, headers, partition, timestamp=timestamp, key=key)

    def produce_spread(self, topic: str, values: Sequence[bytes | None],
                       carried_of: Sequence[Any], spreads: Sequence[Spread],
                       partitions: int, stamps: Sequence[int] | None = None) -> None:
        """Produce event ``i`` once per ``(partition, header)`` of ``spreads[i]``.

        Each copy carries the event's headers ``carried_of[i]`` and that one header more,
        and the event's time ``stamps[i]`` (ms; None: now). The bulk form of
        :meth:`produce` for the shared delivery topic (``partitions`` partitions), with one
        ``produce`` call per message and no other work per message.
        """
        fast, send = self.producer.produce, self.send  # send when the queue is full
        times = stamps if stamps is not None else [0] * len(values)
        for value, carried, msgs, ts in zip(values, carried_of, spreads, times, strict=True):
            for part, header in msgs:
                try:
                    fast(topic, value, headers=[*carried, header], partition=part,
                         timestamp=ts)
                except BufferError:
                    send(topic, value, [*carried, header], part, timestamp=ts)
                except KafkaException as exc:
                    self.too_large(exc, topic, value, [*carried, header], part, None, ts,
                                   None)

    def begin(self) -> None:
        """Open a batch (numbered: :attr:`batch`; :attr:`opened` when, monotonic)."""
        self.batch, self.opened = self.batch + 1, time.monotonic()

    def commit(self, msgs: Sequence[Message]) -> None:
        """Close the batch that consumed ``msgs`` (possibly none: expired controls only)."""
        raise NotImplementedError

    def abort(self, exc: BaseException) -> None:
        """The batch failed with ``exc``: give up on it (the node then stops)."""
        raise NotImplementedError

    def idle(self) -> None:
        """Nothing was consumed: a chance to commit what is ready."""

    def finish(self) -> None:
        """At close, before the consumer goes: commit what can be committed."""

    def flush(self, timeout: float = 10.0) -> None:
        """Wait for the outputs still queued (at close)."""
        with self.guard("flush"):
            self.producer.flush(timeout)

    def close(self, timeout: float = 10.0) -> None:
        """At close: wait up to ``timeout`` s for the outputs still queued, then end the producer.

        What is still queued after that is dropped, as it was when the handle went with its
        last reference. Closing explicitly matters: a node that froze its heap
        (``gc_freeze``) keeps the producer in a frozen reference cycle, which is never
        collected, so its librdkafka threads would outlive the node (in a process that
        hosts several nodes, one set per node run) and retry a stopped broker until exit.
        """
        try:
            self.flush(timeout)
        finally:  # a flush that failed (a fatal error) still ends the handle
            with self.guard("closing the producer"):
                close_producer(self.producer)


class ExactlyOnce(Committer):
    """Each batch is one Kafka transaction: outputs and input offsets together."""

    transactional = True

    @property
    def _limit(self) -> float:
        """Bound of each transactional call: the transaction's own timeout.

        librdkafka's default is forever: a stuck coordinator would hang the node silently
        instead of stopping it with an error.
        """
        return self.settings.transaction_timeout_ms / 1000.0

    def begin(self) -> None:
        """Begin the batch's transaction."""
        super().begin()
        with self.guard("begin_transaction"):
            self.producer.begin_transaction()

    def commit(self, msgs: Sequence[Message]) -> None:
        """Add the input offsets to the transaction and commit it."""
        if msgs:
            assert self.consumer is not None  # noqa: S101
            offsets = offsets_to_commit(next_offsets(msgs))
            with self.guard("send_offsets_to_transaction"):
                self.producer.send_offsets_to_transaction(
                    offsets, self.consumer.consumer_group_metadata(), self._limit)
        with self.guard("commit_transaction"):
            self.producer.commit_transaction(self._limit)
        self._durable = self.batch
        self.on_commit()

    def abort(self, exc: BaseException) -> None:
        """Abort the transaction: nothing of the batch shows, its offsets stay.

        The state already holds the batch: the safe recovery is a restart, which rebuilds
        it from what was committed. An abort that fails too (a fenced or fatal producer
        fails every call) is logged, not raised: ``exc`` is the error that counts.
        """
        log.error("node %s: batch failed (%r%s); aborting the transaction and stopping",
                  self.settings.node, exc, refusal_hint(exc))
        self.on_abort()
        try:
            with self.guard("abort_transaction"):
                self.producer.abort_transaction(self._limit)
        except Exception as again:  # the producer is unusable; the restart recovers
            log.error("node %s: aborting the transaction failed too (%r)", self.settings.node,
                      again)


class AtLeastOnce(Committer):
    """Commit a batch's offsets once all its outputs are acknowledged; never wait.

    The idempotent producer delivers the messages of one partition in the order they were
    produced, so once the last message of a batch for a partition is acknowledged, all of
    the batch's (and the earlier batches') messages for that partition are too. That last
    message per ``(topic, partition)`` is held back (:meth:`produce`, the one place of the
    rule) and produced at the end of the batch with a delivery callback; when all of a
    batch's callbacks have come, and all of the batches before it are complete, its offsets
    become committable. They are committed once per ``commit_interval_s`` (or when the
    loop is idle), asynchronously: the outputs are acknowledged already, so a late or lost
    commit only means repeats after a crash.
    """

    def __init__(self, producer: Producer, consumer: Consumer | None, settings: NodeSettings,
                 metrics: Metrics, *, errors: DeliveryErrors | None = None,
                 on_commit: Callable[[], None] = lambda: None,
                 on_abort: Callable[[], None] = lambda: None,
                 watchdog: Watchdog | None = None, limit: MessageLimit | None = None) -> None:
        """``errors``: where the producer's default delivery callback writes failures."""
        super().__init__(producer, consumer, settings, metrics, on_commit=on_commit,
                         on_abort=on_abort, watchdog=watchdog, limit=limit)
        self.errors = errors or DeliveryErrors()
        # The last message of the current batch for each (topic, partition); the batches
        # whose outputs are not all acknowledged yet, oldest first, as [offsets to commit,
        # callbacks still to come]; the offsets of those that are, not committed yet.
        self._tails: dict[tuple[str, int], tuple[bytes | None, Any, int, bytes | None]] = {}
        self._inflight: deque[list[Any]] = deque()  # [offsets, callbacks to come, batch]
        self._ready: dict[tuple[str, int], int] = {}
        self._ready_batch = 0  # the last batch whose offsets are in _ready (or committed)
        self._last_commit = time.monotonic()
        # Commits asked for, oldest first: (the last batch they cover, their offsets); a
        # batch is durable once the broker confirms offsets at least as high
        # (offsets_committed), or at once when it consumed nothing.
        self._asked: deque[tuple[int, dict[tuple[str, int], int]]] = deque()
        self._confirmed: dict[tuple[str, int], int] = {}
        self._failed_at = float("-inf")  # when a commit last failed (retried after a pause)

    @property
    def held(self) -> dict[tuple[str, int], tuple[bytes | None, Any]]:
        """The messages held back so far in this batch, by ``(topic, partition)`` (a copy)."""
        return {k: (v, h) for k, (v, h, _, _) in self._tails.items()}

    def produce(self, topic: str, value: bytes | None, headers: Any = None,
                partition: int = -1, timestamp: int = 0, key: bytes | None = None) -> None:
        """Hold the message back as the batch's last for its ``(topic, partition)``.

        The one it replaces is produced now. A message without a partition counts as
        partition 0 (the node's own topics have one), so that "the last message of a
        partition" is known.
        """
        where = (topic, partition if partition >= 0 else 0)
        held = self._tails.get(where)
        self._tails[where] = (value, headers, timestamp, key)
        if held is not None:
            self.send(topic, held[0], held[1], where[1], timestamp=held[2], key=held[3])

    def produce_spread(self, topic: str, values: Sequence[bytes | None],
                       carried_of: Sequence[Any], spreads: Sequence[Spread],
                       partitions: int, stamps: Sequence[int] | None = None) -> None:
        """:meth:`Committer.produce_spread` with the hold-back rule of :meth:`produce`.

        Only events from the first one that is some partition's last go through
        :meth:`produce`; those before it take the fast path, after any message held from an
        earlier run for their partitions is sent (one partition's order is kept).
        """
        last: dict[int, int] = {}  # partition -> the last event of the run sent to it
        for i in range(len(spreads) - 1, -1, -1):
            for part, _ in spreads[i]:
                last.setdefault(part, i)
            if len(last) == partitions:
                break
        for part in last:
            held = self._tails.pop((topic, part), None)
            if held is not None:
                self.send(topic, held[0], held[1], part, timestamp=held[2], key=held[3])
        hold = min(last.values()) if last else len(spreads)
        times = stamps if stamps is not None else [0] * len(values)
        super().produce_spread(topic, values[:hold], carried_of[:hold], spreads[:hold],
                               partitions, times[:hold])
        for i in range(hold, len(spreads)):
            value, carried, ts = values[i], carried_of[i], times[i]
            for part, header in spreads[i]:
                self.produce(topic, value, [*carried, header], part, ts)

    def commit(self, msgs: Sequence[Message]) -> None:
        """Send the held-back messages with their callbacks; commit what is acknowledged."""
        entry = [next_offsets(msgs) if msgs else {}, len(self._tails), self.batch]
        self._inflight.append(entry)
        tails, self._tails = self._tails, {}
        for (topic, partition), (value, headers, ts, key) in tails.items():
            self.send(topic, value, headers, partition, partial(self._tail_delivered, entry),
                      timestamp=ts, key=key)
        self._commit_delivered(wait=False)

    def abort(self, exc: BaseException) -> None:
        """Leave the batch uncommitted: a restart repeats what was not committed."""
        log.error("node %s: batch failed (%r); stopping without committing it",
                  self.settings.node, exc)

    def idle(self) -> None:
        """Commit at once what is acknowledged."""
        if self._inflight or self._ready:
            self._commit_delivered(wait=False, idle=True)

    def finish(self) -> None:
        """Flush, then commit every batch synchronously (failures are logged)."""
        if self.consumer is None or not (self._inflight or self._ready):
            return
        try:
            self._commit_delivered(wait=True)
        except Exception as exc:  # the restart repeats the uncommitted batches
            log.error("node %s: final commit failed (%r)", self.settings.node, exc)

    def _tail_delivered(self, entry: list[Any], err: Any, msg: Message) -> None:
        """A held-back last message was delivered (or failed): count it for its batch."""
        if err is not None:
            self.errors.on_delivery(err, msg)
            return
        entry[1] -= 1

    def offsets_committed(self, err: Any, partitions: list[TopicPartition]) -> None:
        """The broker's answer to a commit: the batches it covers become durable.

        A commit that failed puts its offsets back, to be committed again after
        ``commit_interval_s`` (at once when nothing waits): a batch whose reports wait for
        it must not stay uncommitted for want of a later batch.
        """
        super().offsets_committed(err, partitions)
        for tp in partitions:
            key = (tp.topic, tp.partition)
            if err is None and tp.error is None and tp.offset >= 0:
                if tp.offset > self._confirmed.get(key, -1):
                    self._confirmed[key] = tp.offset
            elif tp.offset >= 0 and tp.offset > self._confirmed.get(key, -1):
                self._ready[key] = max(self._ready.get(key, -1), tp.offset)
                self._failed_at = time.monotonic()
        self._advance()

    def _advance(self) -> None:
        """Mark durable the asked commits whose offsets the broker confirmed, in order."""
        asked, confirmed = self._asked, self._confirmed
        while asked and all(confirmed.get(k, -1) >= o for k, o in asked[0][1].items()):
            self._durable = max(self._durable, asked.popleft()[0])

    def _commit_delivered(self, *, wait: bool, idle: bool = False) -> None:
        """Commit the offsets of the batches whose outputs are all acknowledged.

        ``wait`` (at close): flush first, so that every batch is complete, and commit
        synchronously. Otherwise commit what is complete once ``commit_interval_s`` has
        passed since the last commit, or at once when ``idle`` or when a complete batch is
        one that something waits for (:meth:`Committer.need`).
        """
        if wait:
            with self.guard("flush"):
                while self.producer.flush(1.0) > 0:
                    pass
        else:
            self.producer.poll(0)  # serve the delivery callbacks that are due
        if self.errors.first is not None:
            raise BrokerError(f"node {self.settings.node}: {self.errors.first}",
                              field="delivery", value=self.errors.first)
        inflight = self._inflight
        while inflight and inflight[0][1] <= 0:
            offsets, _, batch = inflight.popleft()
            self._ready.update(offsets)
            self._ready_batch = batch
        now = time.monotonic()
        if not self._ready and self._ready_batch > (self._asked[-1][0] if self._asked
                                                    else self._durable):
            self._asked.append((self._ready_batch, {}))  # batches that consumed nothing
            self._advance()
        asked = self._asked[-1][0] if self._asked else self._durable
        urgent = self._ready_batch >= self._needed > asked  # complete, and not asked yet
        if not (wait or ((idle or urgent) and now - self._failed_at
                         >= self.settings.commit_interval_s)
                or now - self._last_commit >= self.settings.commit_interval_s):
            return
        if self._ready:
            assert self.consumer is not None  # noqa: S101
            offsets = offsets_to_commit(self._ready)
            self._asked.append((self._ready_batch, self._ready))
            self._ready = {}
            if wait:  # two calls: the stubs type each value of asynchronous apart
                with self.guard("commit"):
                    done = self.consumer.commit(offsets=offsets, asynchronous=False)
                self.offsets_committed(None, done or [])
            else:
                self.consumer.commit(offsets=offsets, asynchronous=True)
        self._last_commit = now
        # Ids of batches still in flight move too: a failed delivery stops the node, and
        # its restart begins with an empty memory anyway.
        self.on_commit()


def committer_for(settings: NodeSettings, producer: Producer, consumer: Consumer | None,
                  metrics: Metrics, *, errors: DeliveryErrors | None = None,
                  on_commit: Callable[[], None] = lambda: None,
                  on_abort: Callable[[], None] = lambda: None,
                  watchdog: Watchdog | None = None,
                  limit: MessageLimit | None = None) -> Committer:
    """The committer of ``settings.delivery`` around the node's producer and consumer."""
    if settings.delivery == "exactly_once":
        return ExactlyOnce(producer, consumer, settings, metrics, on_commit=on_commit,
                           on_abort=on_abort, watchdog=watchdog, limit=limit)
    return AtLeastOnce(producer, consumer, settings, metrics, errors=errors,
                       on_commit=on_commit, on_abort=on_abort, watchdog=watchdog, limit=limit)
