"""The broker-node service: the pure state machine inside a Kafka loop.

One flat loop (:meth:`NodeService.run`): consume a batch from the node's input topics,
process it (control messages change the state, runs of events are routed as numpy
batches), produce what it caused (deliveries, forwarded events, link control, dead
letters) and commit the input offsets; the metrics time each part. It uses the inbox
(what a message is), controls (subscriptions and links applied), the router (plans and
their production), committers (exactly or at least once), recovery (the state rebuilt
at start, snapshots between batches), metrics and heap (the collector tuned).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from functools import partial

from confluent_kafka import Consumer, KafkaException, Message, Producer, TopicPartition

from broker_node.client_inputs import ClientInputs
from broker_node.committers import (
    Committer,
    DeliveryErrors,
    committer_for,
    open_producer,
)
from broker_node.config import NodeSettings
from broker_node.controls import Controls, link_labels, probe_links
from broker_node.exceptions import BrokerError
from broker_node.heap import freeze_heap, set_young_threshold
from broker_node.inbox import DeadLetter, Inbox, RoutedIds
from broker_node.metrics import Metrics, MetricsServer, node_registry
from broker_node.oversize import MessageLimit, node_limit
from broker_node.progress import Progress
from broker_node.recovery import Snapshotter, recover
from broker_node.rehearsal import rehearse
from broker_node.router import Router
from broker_node.runs import EVENT_RUN_EVENTS, checkpoint, runs
from broker_node.state import BrokerState, LinkMessage
from broker_node.watchdog import Watchdog
from connectors.closing import close_consumer
from connectors.exceptions import ConnectorError
from connectors.kafka import (
    consume_batch,
    consumer_config,
    ensure_partitioned_topic,
    ensure_topics,
)
from connectors.retention import GapWatch
from connectors.serde import encode_heartbeat, encode_link
from connectors.topic_settings import enforce_topic_config
from connectors.topics import (
    CONTROL_TOPIC_CONFIG,
    HEADER_ACK,
    HEADER_CLIENTS,
    HEADER_LINK_EPOCH,
    HEADER_LINK_SEQ,
    HEADER_SHARD,
    HEARTBEAT_KEY,
    delivery_partition,
)
from dls.space import ContentSpace

__all__ = ["ENDS_KEPT", "FOREVER", "WAITING_POLL_S", "NodeService"]

log = logging.getLogger(__name__)

#: Topic settings of the control topics (kept forever: recovery reads them again).
FOREVER = dict(CONTROL_TOPIC_CONFIG)
#: At most this many ends of one input topic are kept, not yet read past (a node far
#: behind: later checks are noted once older ends are passed).
ENDS_KEPT = 10_000
#: How long the loop waits for a message (s) while a batch's reports wait for its commit
#: (at least once: the broker's answer comes between messages, not as one).
WAITING_POLL_S = 0.005


class NodeService(ClientInputs):
    """One logical DLS broker connected to Kafka."""

    def __init__(self, settings: NodeSettings, space: ContentSpace | None = None, *,
                 on_stuck: Callable[[str, float], None] | None = None,
                 hard_watchdog: bool = False):
        """Build the state and the rooms; nothing touches Kafka until :meth:`start`.

        ``on_stuck(call, seconds)`` runs when a Kafka call blocks past the watchdog's bound
        (default: log and end the process, :func:`broker_node.watchdog.exit_stuck`);
        ``hard_watchdog``: also arm the GIL-free timer (one node per process only).
        """
        s = settings
        self.space = space or ContentSpace.from_json(s.space)
        if s.shards > 1 and s.shard is None:
            raise BrokerError(f"node {s.node}: a network of {s.shards} shards is served shard "
                              f"by shard: say which (broker_node.replicas runs them)",
                              field="shard", value=None)
        self.topics = t = s.topics()
        self.state = BrokerState.for_space(
            s.node, list(s.neighbours), self.space, mode=s.mode,
            client_filter=s.client_filter, routing_filter=s.routing_filter,
            resize_filters=s.resize_filters, update_threads=s.update_threads)
        self.metrics = Metrics()
        self.registry = node_registry(s.node, self.metrics, self.state)
        self._routed = RoutedIds()
        #: routed_key(origin, event id) of the events routed in committed batches
        self.routed = self._routed.recent
        self.inbox = Inbox(s.node, t, self.state, self.metrics, self._routed, shards=s.shards)
        self.progress = Progress(s.neighbours, publish_delay_s=s.publish_delay_s,
                                 clock_skew_s=s.clock_skew_s)
        self.controls = Controls(s, self.state, self.inbox, self.metrics, self.progress,
                                 space=self.space)
        self._next_check = 0.0  # when to look again how far the inputs are read
        self._starts: dict[str, int] = {}  # the group's committed offsets, asked once
        self._gaps = GapWatch(f"node {s.node}")  # what retention deleted unread
        #: per input topic checked, (time asked, where it ended then), oldest first
        self._ends_seen: dict[str, deque[tuple[float, int]]] = {}
        #: per input topic checked, the latest time of a check whose end it is read past
        self._passed: dict[str, float] = {}
        self._ends: Consumer | None = None  # asks where topics end (see _at_end)
        #: subscriptions to acknowledge: (link control sequence numbers sent by the end of
        #: their batch, by neighbour; client; id; the batch that applied them), oldest first
        self._acks: deque[tuple[dict[str, int], str, str, int]] = deque()
        #: a (re)started node numbers its link afresh: see _probe
        self._probe_due = bool(s.neighbours)
        self._reacks: list[tuple[str, str]] = []
        self.router = Router(s, t, self.state, self.metrics, self.controls.edge)
        # removed matches counted by fold while the node has slack, at least every 30 s
        self._removed = self.router.defer_removed()
        self.watchdog = Watchdog(s.node, s.watchdog_bound_s, on_stuck=on_stuck,
                                 hard=hard_watchdog)
        self.committer: Committer | None = None  # made at start (or by connect)
        self.snapshots: Snapshotter | None = None  # made at start when snapshots are on
        self.settings = s
        self._consumer: Consumer | None = None
        self._metrics_server: MetricsServer | None = None
        self._stop = threading.Event()
        #: this incarnation's link epoch (HEADER_LINK_EPOCH): its start in µs, later than
        #: any earlier incarnation's (the same clock assumption as the link numbers)
        self.epoch = time.time_ns() // 1000
        self._delivery_topics: set[str] = set()
        self.limit = MessageLimit()  # until start reads what the topics take
        self._new_topics: set[str] = set()
        self.control_topics = [t.node_subscribe(s.node), t.node_unsubscribe(s.node)] + [
            t.link(n, s.node) for n in s.neighbours]
        self.input_topics = [*self.control_topics, t.node_publish(s.node)] + [
            t.forward(n, s.node) for n in s.neighbours]

    @property
    def settings(self) -> NodeSettings:
        """The node's settings; setting them (a benchmark does) reaches every room."""
        return self._settings

    @settings.setter
    def settings(self, s: NodeSettings) -> None:
        self._settings = self.controls.settings = self.router.settings = s
        if self.committer is not None:
            self.committer.settings = s

    @property
    def transactional(self) -> bool:
        """True when outputs and offsets go in one Kafka transaction (exactly once)."""
        return self.settings.delivery == "exactly_once"

    @property
    def metrics_port(self) -> int | None:
        """The port the metrics page is served on (None: not served)."""
        return None if self._metrics_server is None else self._metrics_server.port

    # -- lifecycle --------------------------------------------------------------------------
    def stop(self) -> None:
        """Ask the loop to finish its batch, commit and return."""
        self._stop.set()

    def start(self) -> None:
        """Create topics, open clients, rebuild the state from the committed offsets."""
        s, t = self.settings, self.topics
        log.info("node %s starting with settings %s", s.node, s.masked())
        # Every kernel the node calls, compiled before recovery and the first batch need them
        # (about 30 s with an empty disk cache, under a second with a warm one).
        if warm_s := rehearse(type(self)):
            log.info("node %s: compiled kernels ready in %.2f s", s.node, warm_s)
        # Control topics, in and out, keep everything: whoever creates one first (this node,
        # a neighbour, a client, the Spark job) creates it so, and a wrong one is repaired.
        self._topics_with(self.control_topics + [t.link(s.node, n) for n in s.neighbours],
                          FOREVER, "a control topic")
        # The publish topic refuses events older than publish_delay_s (the order rule).
        self._topics_with([t.node_publish(s.node)], self._publish_config,
                          "the order rule (publish_delay_s)")
        if s.client_inputs:  # the clients' own topics found now are recovered too
            found = self._client_inputs_now() or set()
            for topic in sorted(found):
                self._learn(topic, repair=False)
            self._repair_client_publish(sorted(found & self.inbox.publish_topics))
        ensure_topics(s.bootstrap, [t.deadletter]
                      + [t.forward(s.node, n) for n in s.neighbours]
                      + [t.forward(n, s.node) for n in s.neighbours],
                      kafka=s.kafka_security(), **s.topic_replication())
        if s.shared_delivery_partitions:
            try:
                ensure_partitioned_topic(s.bootstrap, t.shared_deliver,
                                         s.shared_delivery_partitions,
                                         kafka=s.kafka_security(), **s.topic_replication())
            except ConnectorError as exc:
                raise BrokerError(f"node {s.node}: {exc}", field="shared_delivery_partitions",
                                  value=s.shared_delivery_partitions) from exc
        self.limit = node_limit(s)  # a topic it writes may take less than a broker does
        self.controls.link_labels = link_labels(self.limit)
        # Static membership: a restarted node takes its partitions back at once instead of
        # waiting for the dead member's session to time out.
        refresh = ({"topic.metadata.refresh.interval.ms": int(s.client_inputs_refresh_s * 1000)}
                   if s.client_inputs else {})
        consumer = Consumer(consumer_config(
            s.bootstrap, s.consumer_group, **{"group.instance.id": f"{s.consumer_group}-0",
                                              "on_commit": self._offsets_committed,
                                              "session.timeout.ms": s.session_timeout_ms},
            **refresh, **s.kafka_security()))
        self._consumer = consumer
        # Where a topic ends is asked by a consumer that never fetches: the broker answers
        # the requests of one connection in turn, so behind the node consumer's long-poll
        # fetch the question would wait up to fetch.wait.max.ms, stalling the loop.
        self._ends = Consumer(consumer_config(s.bootstrap, f"{s.consumer_group}-ends",
                                              **s.kafka_security()))
        errors = DeliveryErrors()
        self.connect(open_producer(s, errors, self.watchdog, self.limit), consumer, errors)
        recovered = recover(s, consumer, self.control_topics, self.state, self.controls)
        self._reacks = recovered.reacks  # acknowledged again once the probes are out
        self._probe_due = bool(s.neighbours or self._reacks)
        self.snapshots = recovered.snapshotter(consumer, self.committer, self.metrics)
        if s.gc_freeze:
            freeze_heap(s.node)
        if s.gc_young_threshold:
            set_young_threshold(f"node {s.node}", s.gc_young_threshold)
        pattern = [t.client_inputs_pattern(s.node)] if s.client_inputs else []
        consumer.subscribe(self.input_topics + pattern, on_assign=self._assigned,
                           on_revoke=self._revoked)
        if s.metrics_port is not None:
            self._metrics_server = MetricsServer(self.registry, s.metrics_host, s.metrics_port,
                                                 s.node)

    def _topics_with(self, names: list[str], config: dict[str, str], why: str) -> None:
        """Create ``names`` with ``config``, and set it on those that exist otherwise.

        Raises:
            BrokerError: A setting could not be set: the node refuses to start, naming the
                topic and the setting.
        """
        s = self.settings
        ensure_topics(s.bootstrap, names, config=config, kafka=s.kafka_security(),
                      **s.topic_replication())
        try:
            enforce_topic_config(s.bootstrap, names, config, why=why, kafka=s.kafka_security())
        except ConnectorError as exc:
            raise BrokerError(f"node {s.node} refuses to start: {exc}", field=exc.field,
                              value=exc.value) from exc

    def _offsets_committed(self, err: object, partitions: list[TopicPartition]) -> None:
        """The consumer's commit callback: the committer learns which batches are durable."""
        if self.committer is not None:
            self.committer.offsets_committed(err, partitions)

    def connect(self, producer: Producer, consumer: Consumer | None = None,
                errors: DeliveryErrors | None = None) -> None:
        """Send outputs through ``producer`` and commit through ``consumer``.

        :meth:`start` passes the Kafka clients; a test without a broker passes a producer
        of its own (and no consumer: it calls :meth:`process`, which commits nothing).
        """
        self.committer = committer_for(self.settings, producer, consumer, self.metrics,
                                       errors=errors, on_commit=self._routed.settle,
                                       on_abort=self._routed.drop, watchdog=self.watchdog,
                                       limit=self.limit)

    def close(self) -> None:
        """Close the Kafka clients and the metrics server (at least once: commit first).

        Never raises: after a fatal error (which :meth:`run` raised already) every step
        fails the same way, and a failed step at close costs at most repeats after the
        restart, never a loss. Each failure is logged; every step runs under the watchdog.
        """
        committer, consumer = self.committer, self._consumer
        self._removed.settle()
        if committer is not None and consumer is not None:
            self._closing("the final commit", committer.finish)
        if consumer is not None:
            # A plain close() can hang mid-rebalance: close_consumer serves it first.
            self._closing("closing the consumer", partial(self._close_consumer, consumer))
            self._consumer = None
        if self._ends is not None:
            self._closing("closing the end reader", self._ends.close)
            self._ends = None
        if self.snapshots is not None:
            self._closing("closing the snapshot producer", self.snapshots.store.close)
            self.snapshots = None
        if committer is not None:
            self._closing("flushing and closing the producer", partial(committer.close, 10))
            self.committer = None
        if self._metrics_server is not None:
            self._metrics_server.close()
            self._metrics_server = None
        self.inbox.repeats.close()  # the repeats not said yet
        self.watchdog.close()

    def _close_consumer(self, consumer: Consumer) -> None:
        with self.watchdog.guard("closing the consumer"):
            close_consumer(consumer)

    def _closing(self, what: str, step: Callable[[], None]) -> None:
        try:
            step()
        except Exception as exc:  # logged once; the error that stopped the node was raised
            log.warning("node %s: %s failed at close (%r)", self.settings.node, what, exc)

    def run(self, max_seconds: float | None = None) -> None:
        """Consume, process, produce and commit until :meth:`stop` (or ``max_seconds``)."""
        if self._consumer is None:
            self.start()
        consumer, out = self._consumer, self.committer
        assert consumer is not None and out is not None  # noqa: S101
        until = None if max_seconds is None else time.monotonic() + max_seconds
        while not self._stop.is_set() and (until is None or time.monotonic() < until):
            if self.snapshots is not None:  # between batches: all committed so far
                self.snapshots.after_batch()
            self._check_inputs_read(consumer)  # before the batch: what is read is applied
            # A batch whose reports wait for its commit: look again soon (at least once).
            wait = (min(self.settings.poll_timeout_s, WAITING_POLL_S) if out.waiting
                    else self.settings.poll_timeout_s)
            t = time.perf_counter()
            msgs = self._read(consumer, consume_batch(consumer, self.settings.batch_size, wait))
            t = self.metrics.lap("consume", t)
            expired = self.controls.expired()
            self.progress.durable = out.durable
            beats = self.progress.beats(time.monotonic(),
                                        moved_every_s=self.settings.heartbeat_s,
                                        every_s=4 * self.settings.heartbeat_s)
            if not (msgs or expired or beats or self._probe_due
                    or self.controls.finalizable() or self._acks_due()):
                self._removed.settle()
                out.idle()
                continue
            out.begin()
            try:
                self._dead_letters(expired)
                self._probe()
                if msgs:
                    self.process(msgs)
                self._finalize()
                self._send_due_acks()
                self._send_beats(beats)
                t = self.metrics.lap("process", t)
                out.commit(msgs)
            except Exception as exc:  # KafkaException, BufferError, a bug: all the same
                out.abort(exc)
                raise
            t = self.metrics.lap("commit", t)
            self.metrics.batches += 1
            if len(msgs) < self.settings.batch_size:  # slack: fold now, after the commit
                self._removed.settle()
                self.metrics.lap("settle", t)

    # -- processing -------------------------------------------------------------------------
    def process(self, msgs: Sequence[Message]) -> None:
        """Apply one consumed batch, producing its outputs (inside the open batch).

        The batch is walked in order; runs of control messages and runs of events are each
        handled as one batch, and a transaction open too long is committed between two
        (:mod:`broker_node.runs`).
        """
        n, topics = len(msgs), list(map(Message.topic, msgs))
        if 0 < n <= EVENT_RUN_EVENTS and (topics.count(self.inbox.publish) == n or (
                self.inbox.client_origin and self.inbox.publish_topics.issuperset(topics))):
            self._route(list(msgs))  # no control message: no new delivery topic after it
            return
        done = 0  # a transaction open too long is committed between runs (broker_node.runs)
        for event, run in runs(msgs, self.inbox.is_event):
            checkpoint(self.committer, msgs, done, self.settings.node)
            (self._route if event else self._apply_controls)(run)
            done += len(run)
        self._create_new_topics()

    def _route(self, run: list[Message]) -> None:
        """Route a run of events (:class:`~broker_node.router.Router`); bad ones to dead letters."""
        assert self.committer is not None  # noqa: S101
        self._create_new_topics()
        events = self.inbox.events(run)
        self._dead_letters(events.dead)
        self.router.route(events, self.committer)

    def _apply_controls(self, msgs: Sequence[Message]) -> None:
        """Apply a run of control messages; produce the link messages and dead letters."""
        outcome = self.controls.apply(msgs, replay=False)
        self._send_links(outcome.links)
        self._dead_letters(outcome.letters)
        self._need_delivery_topics(outcome.clients)
        if outcome.acks:  # sent once every neighbour has applied what this batch sent
            assert self.committer is not None  # noqa: S101
            required, batch = dict(self.progress.seq_out), self.committer.batch
            self._acks.extend((required, client, sid, batch) for client, sid in outcome.acks)
            self.committer.need(batch)

    def _acks_due(self) -> bool:
        """True when the oldest subscription waiting for its acknowledgement may have it."""
        if not self._acks:
            return False
        assert self.committer is not None  # noqa: S101
        required, _, _, batch = self._acks[0]
        return batch <= self.committer.durable and self.progress.acked(required)

    def _send_due_acks(self) -> None:
        """Acknowledge the subscriptions the whole network has applied (broker_node.progress).

        A subscription is acknowledged once every neighbour reports, in its heartbeats, the
        link control this node had sent by the end of the subscription's batch as applied
        by it and every node behind it, and once this node has committed that batch: an
        event published anywhere after the acknowledgement then finds the subscription's
        labels on its way, even if a node on the way crashed in between.
        """
        due = []
        while self._acks_due():
            _, client, sid, _ = self._acks.popleft()
            due.append((client, sid))
        if due:
            self._create_new_topics()  # a new client's delivery topic
            self._send_acks(due)

    def _send_acks(self, acks: list[tuple[str, str]]) -> None:
        """Acknowledge applied subscriptions where their clients read their deliveries."""
        assert self.committer is not None  # noqa: S101
        n = self.settings.shared_delivery_partitions
        shard = ([] if self.settings.shard is None
                 else [(HEADER_SHARD, str(self.settings.shard).encode())])
        for client, sid in acks:
            if n:
                self.committer.produce(self.topics.shared_deliver, None, [
                    (HEADER_ACK, sid.encode()), (HEADER_CLIENTS, client.encode()), *shard],
                    delivery_partition(client, n))
            else:
                self.committer.produce(self.topics.deliver(client), None,
                                       [(HEADER_ACK, sid.encode()), *shard])

    def _send_links(self, links: list[LinkMessage]) -> None:
        assert self.committer is not None  # noqa: S101
        node, epoch = self.settings.node, self.epoch.to_bytes(8, "big")
        for m in links:
            seq = self.progress.next_seq(m.to).to_bytes(8, "big")
            self.committer.produce(self.topics.link(node, m.to),
                                   encode_link(node, m.kind, m.labels),
                                   [(HEADER_LINK_SEQ, seq), (HEADER_LINK_EPOCH, epoch)])

    # -- the order rule (broker_node.progress) ----------------------------------------------
    def _check_inputs_read(self, consumer: Consumer) -> None:
        """Every ``heartbeat_s``, note how far inputs are read (before a batch: read is applied).

        The publish topic while watermarks are wanted (the order rule); the subscribe topic
        while an unsubscription of an unknown id is past its grace (it expires only once
        the subscribe topic is read past where it ended when it was read).
        """
        now = time.monotonic()
        if now < self._next_check:
            return
        publish = self.progress.watermark_wanted
        subscribe = bool(self.controls.pending) and self.controls.overdue()
        if not (publish or subscribe):
            return
        self._next_check = now + self.settings.heartbeat_s
        clients: set[str] = set()
        if self.settings.client_inputs:  # every client's topic the broker has, read or not
            found = self._client_inputs_now()
            if found is None:
                return  # not known now: no progress, nothing lost
            clients = found
        if publish and (at := self._read_past_all(
                consumer, [self.inbox.publish,
                           *sorted(c for c in clients if c.endswith(".publish"))],
                time.time())):
            self.progress.publish_caught_up(at)
        if subscribe and (at := self._read_past_all(
                consumer, [self.inbox.subscribe_topic,
                           *sorted(c for c in clients if c.endswith(".subscribe"))], now)):
            self.controls.subscribe_caught_up(at)

    def _read_past_all(self, consumer: Consumer, topics: list[str], asked: float
                       ) -> float | None:
        """The latest time of a check whose end every one of ``topics`` is read past.

        A topic the node has not read yet (a client's topic not assigned so far) holds it
        back, as one whose end is not known now.
        """
        passed = self._passed
        for topic in topics:
            at = self._read_past(consumer, topic, asked)
            if at is not None:
                passed[topic] = max(passed.get(topic, at), at)
        times = [passed.get(topic) for topic in topics]
        return None if None in times else min(times)  # type: ignore[type-var]

    def _read_past(self, consumer: Consumer, topic: str, asked: float) -> float | None:
        """The latest time ``asked`` of a check whose end of ``topic`` is read (None: none).

        Each check notes where the broker says the topic ends (everything appended before
        ``asked`` lies below); once the consumer's position passes that end, the topic is
        read past that time, though more may have come since: under a steady stream the
        position is seldom exactly at the end.
        """
        tp = TopicPartition(topic, 0)
        try:
            low, high = (self._ends or consumer).get_watermark_offsets(tp, timeout=2.0,
                                                                       cached=False)
            at = consumer.position([tp])[0].offset
            if at < 0:  # nothing read since the start: from the committed offset (asked once)
                if topic not in self._starts:
                    self._starts[topic] = consumer.committed([tp], timeout=2.0)[0].offset
                at = self._starts[topic]
                if at < 0 and low == high:  # none committed, and nothing to read
                    at = high
        except KafkaException as exc:  # the broker is away: no progress, nothing lost
            log.debug("node %s: end of %s unknown (%s)", self.settings.node, topic, exc)
            return None
        ends = self._ends_seen.setdefault(topic, deque())
        if ends and ends[-1][1] == high:
            ends[-1] = (asked, high)  # nothing appended since: the later time says more
        elif len(ends) < ENDS_KEPT:
            ends.append((asked, high))
        done = None
        while ends and ends[0][1] <= at:
            done = ends.popleft()[0]
        return done

    def _probe(self) -> None:
        """Once at start: to every neighbour, with a new number, what the state advertises it.

        A recovery replays a cancelled subscription without its removal (no input message):
        the state may count labels as advertised that the neighbour was told to withdraw,
        and would then swallow another neighbour's advertisement of them (count 1 -> 2,
        nothing sent). Advertising them again makes the neighbour's view meet the state; a
        repeat is a no-op there.

        What a neighbour applied before this node (re)started counts as applied behind it
        once the probes are, so a neighbour waiting to acknowledge a subscription is not
        left waiting for link control that never comes. The subscriptions of the replayed
        tail are acknowledged again once the probes are applied behind every neighbour
        (their first acknowledgement may have been lost with the process).
        """
        if self._probe_due:
            self._probe_due = False
            self._send_links([m for n in self.settings.neighbours
                              for m in probe_links(self.state, n, self.controls.link_labels)])
            required = dict(self.progress.seq_out)  # the tail replayed is committed: batch 0
            self._acks.extend((required, c, sid, 0) for c, sid in self._reacks)
            self._reacks = []

    def _finalize(self) -> None:
        """Remove the retiring subscriptions every input has passed; send the withdrawals."""
        if self.controls.finalizable():
            outcome = self.controls.finalize()
            self._send_links(outcome.links)
        assert self.committer is not None  # noqa: S101
        if self.progress.end_batch(self.committer.batch):
            self.committer.need(self.committer.batch)

    def _send_beats(self, beats: list[tuple[str, int, int, bool]]) -> None:
        """Tell each neighbour how far this node has got (on its forwarded-event topic)."""
        assert self.committer is not None  # noqa: S101
        node = self.settings.node
        for to, watermark, applied, want in beats:
            self.committer.produce(self.topics.forward(node, to),
                                   encode_heartbeat(node, watermark, applied, want),
                                   key=HEARTBEAT_KEY)
        self.metrics.heartbeats += len(beats)

    def _dead_letters(self, letters: Sequence[DeadLetter]) -> None:
        for letter in letters:
            assert self.committer is not None  # noqa: S101
            log.warning("node %s: %s -> dead letter: %s", self.settings.node, letter.source,
                        letter.reason)
            value, headers = letter.message(self.limit)
            self.committer.produce(self.topics.deadletter, value, headers=headers)
            self.metrics.dead_letters += 1

    def _need_delivery_topics(self, clients: Sequence[str]) -> None:
        """Note the delivery topics of ``clients`` that may not exist yet.

        None with a shared delivery topic: that one is made at start.
        """
        if clients and not self.settings.shared_delivery_partitions:
            self._new_topics.update(t for t in map(self.topics.deliver, set(clients))
                                    if t not in self._delivery_topics)

    def _create_new_topics(self) -> None:
        """Create the delivery topics of clients first seen in this batch, in one call."""
        if self._new_topics:
            ensure_topics(self.settings.bootstrap, sorted(self._new_topics),
                          kafka=self.settings.kafka_security(),
                          **self.settings.topic_replication())
            self._delivery_topics |= self._new_topics
            self._new_topics.clear()
