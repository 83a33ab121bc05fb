"""Subscriptions, unsubscriptions and neighbours' link messages applied to the state.

:meth:`Controls.apply` takes control messages in order and returns what they cause as data
(:class:`Outcome`): link messages for the neighbours, dead letters, and the clients whose
delivery topics may be new. Runs of subscriptions go to the state in one
``subscribe_many``.

What an at-least-once writer upstream may repeat changes nothing: link messages are
idempotent (``BrokerState.on_link``), a repeated subscription with the same labels is a
no-op, a repeated unsubscription is counted as a duplicate, and a subscription reusing a
cancelled id is refused (the node remembers recently cancelled ids).

A subscription carrying more labels than the space's ``filters.label_budget`` (the budget
the SDK and the Spark job map within) is refused: a dead letter naming the count and the
budget. A neighbour's advertisement has no such budget: it carries the union of whatever
lies behind that neighbour, which may rightly be many subscriptions' labels; its labels
must lie in this node's label space (``BrokerState.on_link`` refuses others).

Subscribe and unsubscribe arrive on different topics, so their relative order is not
guaranteed: an unsubscription of an id not seen yet waits for it ``unsubscribe_grace_s``
(ordered by message timestamps), and at least until the node has read its subscribe topic
up to the end the broker had when the unsubscription was read (:meth:`subscribe_caught_up`):
a node far behind on its subscribe topic (the consumer reads its topics unevenly) thus never
drops a cancellation whose subscription is still in its backlog. A subscription that comes
meanwhile is applied and retires at once, as of the later of the two timestamps, whatever
their order (a writer such as the Spark job stamps both with its write time, in any order
within a micro-batch; ids are not reused). Past both waits the unsubscription is
dead-lettered as unknown (:meth:`expired`) and the id counts as cancelled, so that a
subscription coming later still is refused, not live for ever.

An unsubscription does not remove its subscription at once: the subscription *retires*
and stays in the state until every input of the node has passed the unsubscription's time
(:meth:`Controls.finalize`, the order rule of :mod:`broker_node.progress`), so that events
published before it still reach the client, however late they arrive.
"""

from __future__ import annotations

import heapq
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from confluent_kafka import Message

from broker_node.config import NodeSettings
from broker_node.edge import EdgeTable, SimpleParts
from broker_node.exceptions import SubscriptionOwnerError, UnknownSubscriptionError
from broker_node.inbox import (
    Beat,
    ControlRecord,
    DeadLetter,
    Inbox,
    LinkChange,
    Subscribe,
    Unsubscribe,
    timestamp_of,
    topic_of,
)
from broker_node.metrics import Metrics
from broker_node.oversize import MessageLimit
from broker_node.progress import Progress
from broker_node.simple_rows import simple_row
from broker_node.state import ADVERTISE, BrokerState, LinkMessage
from connectors.kafka import source_of
from connectors.recent import RecentKeys
from connectors.serde import SERDE
from connectors.serde.label_runs import read_run
from connectors.topics import decode_labels
from dls.exact_row import RowLayout
from dls.exceptions import DLSError
from dls.predicates import Subscription
from dls.space import ContentSpace

log = logging.getLogger(__name__)

__all__ = ["CANCELLED_MEMORY", "LINK_LABELS", "Controls", "Outcome", "link_chunks",
           "link_labels", "probe_links"]

#: How many cancelled subscriptions (at least) the node remembers.
CANCELLED_MEMORY = 100_000

#: How many compiled where texts the node keeps for subscriptions that repeat one.
COMPILED_KEPT = 10_000

#: Labels per link message at most (8 bytes each: 400 KB, well under Kafka's 1 MB default
#: message size). A batch of broad subscriptions can advertise far more at once: one
#: message of them all stopped the node before (librdkafka refuses it, again at each
#: restart); as several, the neighbour applies the same labels.
LINK_LABELS = 50_000


def link_chunks(m: LinkMessage, size: int = LINK_LABELS) -> list[LinkMessage]:
    """``m`` as messages of at most ``size`` labels (at least one), in order."""
    if len(m.labels) <= size:
        return [m]
    return [LinkMessage(m.to, m.kind, m.labels[i:i + size])
            for i in range(0, len(m.labels), size)]


def link_labels(limit: MessageLimit) -> int:
    """Labels of one link message under the node's ``limit``: 8 bytes each, half of it."""
    return limit.share(LINK_LABELS, 8)


def probe_links(state: BrokerState, neighbour: str, size: int = LINK_LABELS
                ) -> list[LinkMessage]:
    """A (re)started node's first link control to ``neighbour``: what the state advertises it.

    At least one message (its number counts even without labels), in chunks of ``size``
    labels.
    """
    return link_chunks(LinkMessage(neighbour, ADVERTISE, state.advertised_to(neighbour)),
                       size)


@dataclass
class Outcome:
    """What applying control messages caused."""

    links: list[LinkMessage] = field(default_factory=list)
    letters: list[DeadLetter] = field(default_factory=list)
    clients: list[str] = field(default_factory=list)  # their delivery topics may be new
    #: (client, subscription id) of each subscription applied (not replayed): acknowledged
    acks: list[tuple[str, str]] = field(default_factory=list)


@dataclass
class _Pending:
    """An unsubscription waiting for its subscription."""

    client: str
    timestamp: int
    deadline: float
    msg: Message
    read_at: float  # monotonic: its subscription, if any, was written before this


class Controls:
    """Applies control messages to the state; remembers pending and cancelled ids."""

    def __init__(self, settings: NodeSettings, state: BrokerState, inbox: Inbox,
                 metrics: Metrics, progress: Progress | None = None,
                 label_budget: int | None = None, space: ContentSpace | None = None
                 ) -> None:
        """Controls of one node (its inbox reads the messages).

        ``label_budget``: the most labels a subscription may carry (default: the
        ``filters.label_budget`` of the space); ``space``: the node's (default: read from
        the space file of ``settings``).
        """
        space = space or ContentSpace.from_json(settings.space)
        self.settings, self.state, self.inbox, self.metrics = settings, state, inbox, metrics
        self.progress = progress or Progress(state.neighbours,
                                             publish_delay_s=settings.publish_delay_s,
                                             clock_skew_s=settings.clock_skew_s)
        self.label_budget = (space.filters.label_budget
                             if label_budget is None else label_budget)
        #: Unsubscriptions waiting for their subscription, by (client, id): another
        #: client's cancellation of the same id is another (bad) one, not a replacement.
        self.pending: dict[tuple[str, str], _Pending] = {}
        #: subscription id -> (client, the unsubscription's time in ms): cancelled, still in
        #: the state until every input has passed that time
        self.retiring: dict[str, tuple[str, int]] = {}
        self._due: list[tuple[int, str]] = []  # (time, id) of self.retiring, a min-heap
        #: (client, id) of subscriptions cancelled recently: a repeated unsubscription is a
        #: no-op, and a subscription reusing the id (a replay upstream) is not re-applied.
        self.cancelled = RecentKeys(CANCELLED_MEMORY)
        #: labels of one link message (the node sets it from its MessageLimit at start)
        self.link_labels = LINK_LABELS
        #: the epoch of the newest link control applied from each neighbour (0: none yet)
        self.link_epoch: dict[str, int] = {}
        #: the subscribe topic was read up to the end the broker had at this monotonic time
        self.subscribe_read_at = float("-inf")
        #: the exact check of local deliveries (None: off); its subscriptions follow the state
        self.edge = (EdgeTable(space, settings.index_slices)
                     if settings.exact_delivery else None)
        # the node finds its clients by the edge's index: the client bank waits (the
        # router turns it back on should the index ever not serve)
        state.defer_client_bank(self.edge is not None and self.edge.index is not None)
        self._compiled: dict[str, Subscription] = {}  # recent where texts, compiled
        self._layout = RowLayout(space)
        self._header = SERDE.header("LabelSubscription")  # of runs read at once
        self._named: set[str] = set()  # client names known to make a delivery topic

    def apply(self, msgs: Sequence[Message], *, replay: bool) -> Outcome:
        """Apply control messages in order; runs of subscriptions go in one batch.

        ``replay`` (recovery): the state is rebuilt and nothing is counted; the outcome
        holds no link message, dead letter or client, since those outputs were produced the
        first time round, but it lists the subscriptions applied (``acks``): their
        acknowledgements may have been lost with the process.
        """
        out = Outcome()
        sub_topics, control = self.inbox.subscribe_topics, self.inbox.control
        i = 0
        while i < len(msgs):
            j = i
            while j < len(msgs) and topic_of(msgs[j]) in sub_topics:
                j += 1
            if j - i < 2:
                self._one(control(msgs[i]), replay, out)
                i += 1
                continue
            if not self._subscribe_fast(msgs[i:j], replay, out):
                records = [control(m) for m in msgs[i:j]]
                if not self._subscribe_run(records, replay, out):
                    for record in records:  # one by one: exact reasons for bad ones
                        self._one(record, replay, out)
            i = j
        return out

    def finalizable(self) -> bool:
        """True when a retiring subscription is due for removal."""
        return bool(self._due) and self.progress.passed(self._due[0][0])

    def finalize(self) -> Outcome:
        """Remove the retiring subscriptions whose unsubscription every input has passed."""
        out = Outcome()
        done = []
        due, passed = self._due, self.progress.passed
        while due and passed(due[0][0]):
            done.append(heapq.heappop(due)[1])
        if not done:
            return out
        clients = [self.retiring[sid][0] for sid in done]
        links = self.state.unsubscribe_many(clients, done)
        for sid, client in zip(done, clients, strict=True):
            del self.retiring[sid]
            self.cancelled.add((client, sid))
            if self.edge is not None:
                self.edge.remove(client, sid)
        self.progress.local_want = bool(self.retiring)
        self.metrics.unsubscriptions_done += len(done)
        self._links(links, False, out)
        return out

    def _read_rows(self, rows: Sequence[bytes | None]) -> list[SimpleParts | None]:
        """The rows sent with subscriptions, read and checked (None where none came).

        Raises:
            DLSError: A row is not one of the space's (field ``row``).
        """
        out: list[SimpleParts | None] = [None] * len(rows)
        given = [i for i, r in enumerate(rows) if r is not None]
        if not given or self.edge is None:  # no exact check: rows are not used
            return out
        bounds, masks = self._layout.read([rows[i] for i in given])  # type: ignore[misc]
        off = self._layout.word_off.tolist()
        for j, i in enumerate(given):
            out[i] = (bounds[j], [masks[j, a:b] for a, b in zip(off, off[1:], strict=False)])
        return out

    def _edge_add(self, clients: list[str], ids: list[str], wheres: list[str | None],
                  labels: list[np.ndarray], rows: list[SimpleParts | None]) -> None:
        """Give the exact check subscriptions just applied (each compiled once, if it can be).

        ``labels``: those the state routes each by (the index lists it under them);
        ``rows``: those the senders compiled (:meth:`_read_rows`), else the where is read.
        """
        edge = self.edge
        if edge is None:
            return
        subs: list[Subscription | SimpleParts | None] = []
        for client, sid, where, sent in zip(clients, ids, wheres, rows, strict=True):
            if sent is not None:
                subs.append(sent)
                continue
            row = simple_row(edge.space, where)
            if row is not None:
                subs.append(row)
                continue
            sub = self._compiled.get(where) if where else None
            if sub is None and where:
                try:
                    sub = Subscription(edge.space, where)
                except DLSError as exc:
                    log.info("node %s: subscription %r of client %r: its where %r does not "
                             "compile (%s): delivered by label", self.settings.node, sid,
                             client, where, exc)
                else:
                    if len(self._compiled) >= COMPILED_KEPT:
                        self._compiled.clear()
                    self._compiled[where] = sub
            if sub is None:
                self.metrics.edge_unchecked += 1
            subs.append(sub)
        edge.add_many(clients, ids, subs, labels)

    def subscribe_caught_up(self, at: float) -> None:
        """The subscribe topic was read up to the end the broker had at ``at`` (monotonic)."""
        self.subscribe_read_at = max(self.subscribe_read_at, at)

    def overdue(self) -> bool:
        """True when an unsubscription's grace is over (it may expire: :meth:`expired`)."""
        now = time.monotonic()
        return any(p.deadline <= now for p in self.pending.values())

    def expired(self) -> list[DeadLetter]:
        """Unsubscriptions of unknown ids whose wait is over: dead letters.

        Over once their grace is, and the subscribe topic was read past where it ended
        when they were read (:meth:`subscribe_caught_up`).
        """
        if not self.pending:
            return []
        now, read = time.monotonic(), self.subscribe_read_at
        gone = [key for key, p in self.pending.items() if p.deadline <= now
                and p.read_at <= read]
        letters = []
        for key in gone:
            p, sid = self.pending.pop(key), key[1]
            self.cancelled.add(key)  # a subscription coming later is refused
            letters.append(DeadLetter.of(
                p.msg, f"unknown subscription id {sid!r} (client {p.client!r})", "id", sid))
        return letters

    def _subscribe_fast(self, msgs: Sequence[Message], replay: bool, out: Outcome) -> bool:
        """:meth:`_subscribe_run` of messages of the subscribe topic, read as one run.

        Returns False, having changed nothing, unless every message is of the usual kind
        (:func:`connectors.serde.label_runs.read_run`: current schema, a row, nothing
        wrong) and the run needs nothing of the one-by-one path; the caller then decodes
        them one by one.
        """
        topic = self.inbox.subscribe_topic
        if self.inbox.shards > 1 or any(topic_of(m) != topic for m in msgs):
            return False
        run = read_run([m.value() for m in msgs], self._header, self._layout.size)
        if run is None or (np.diff(run.offsets) > self.label_budget).any():
            return False
        pending, retiring, cancelled, named = self.pending, self.retiring, self.cancelled, \
            self._named
        for key in zip(run.clients, run.ids, strict=True):
            if key in pending or key[1] in retiring or key in cancelled:
                return False
            if key[0] not in named:
                try:
                    self.inbox.deliver_topic(key[0])
                except DLSError:
                    return False
                if len(named) > COMPILED_KEPT:
                    named.clear()
                named.add(key[0])
        try:
            rows = None if self.edge is None else self._layout.read_block(run.rows)
            links = self.state.subscribe_many(run.clients, run.ids, run.offsets, run.labels)
        except DLSError:
            return False
        if self.edge is not None and rows is not None:
            self.edge.add_rows(run.clients, run.ids, *rows, run.offsets, run.labels)
        out.acks += zip(run.clients, run.ids, strict=True)  # on replay too: see recovery
        if not replay:
            self.metrics.control_in += len(msgs)
            out.clients += run.clients
        self._links(links, replay, out)
        return True

    def _subscribe_run(self, run: Sequence[ControlRecord], replay: bool, out: Outcome) -> bool:
        """Apply consecutive subscriptions with one ``subscribe_many``.

        Returns False, having changed nothing, when any of them needs the one-by-one path
        (undecodable, a pending unsubscription, or refused by the state).
        """
        clients: list[str] = []
        ids: list[str] = []
        parts: list[np.ndarray] = []
        for rec in run:
            if type(rec) is not Subscribe or (rec.client, rec.sub_id) in self.pending \
                    or rec.sub_id in self.retiring or (rec.client, rec.sub_id) in self.cancelled \
                    or len(rec.labels) > 8 * self.label_budget:
                return False
            try:
                parts.append(decode_labels(rec.labels))
            except DLSError:
                return False
            clients.append(rec.client)
            ids.append(rec.sub_id)
        try:
            rows = self._read_rows([rec.row for rec in run])  # type: ignore[union-attr]
        except DLSError:
            return False
        offsets = np.zeros(len(parts) + 1, dtype=np.int64)
        np.cumsum([len(p) for p in parts], out=offsets[1:])
        try:
            links = self.state.subscribe_many(clients, ids, offsets, np.concatenate(parts))
        except DLSError:
            return False
        self._edge_add(clients, ids, [rec.where for rec in run],  # type: ignore[union-attr]
                       parts, rows)
        out.acks += zip(clients, ids, strict=True)  # on replay too: see recovery
        if not replay:
            self.metrics.control_in += len(run)
            out.clients += clients
        self._links(links, replay, out)
        return True

    def _one(self, rec: ControlRecord, replay: bool, out: Outcome) -> None:
        """Apply one record; a bad one becomes a dead letter (none on replay)."""
        self.metrics.control_in += 0 if replay else 1
        if isinstance(rec, DeadLetter):
            letter: DeadLetter | None = rec
        else:
            try:
                letter = self._change(rec, replay, out)
            except DLSError as exc:  # the state (or the labels' encoding) refused it
                letter = DeadLetter.of(rec.msg, str(exc), exc.field, exc.value)
        if letter is not None and not replay:  # on replay it was dead-lettered already
            out.letters.append(letter)

    def _change(self, rec: Subscribe | Unsubscribe | LinkChange | Beat, replay: bool,
                out: Outcome) -> DeadLetter | None:
        """Apply one decoded record to the state (raises what the state raises)."""
        if isinstance(rec, Subscribe):
            return self._subscribe(rec, replay, out)
        if isinstance(rec, Unsubscribe):
            return self._unsubscribe(rec, replay, out)
        if isinstance(rec, Beat):
            self.progress.on_heartbeat(rec.source, rec.watermark_ms, rec.link_applied,
                                       rec.wants_watermark)
            return None
        if not self._current(rec):
            return None
        labels = decode_labels(rec.labels)
        # An empty one is a probe (a neighbour restarted): only its number counts.
        links = self.state.on_link(rec.source, rec.kind, labels) if len(labels) else []
        self.progress.on_link_seq(rec.source, rec.seq)
        self._links(links, replay, out)
        return None

    def _subscribe(self, rec: Subscribe, replay: bool, out: Outcome) -> DeadLetter | None:
        client, sid = rec.client, rec.sub_id
        if len(rec.labels) > 8 * self.label_budget and not len(rec.labels) % 8:
            n = len(rec.labels) // 8
            return DeadLetter.of(rec.msg, f"subscription {sid!r} of client {client!r} has {n} "
                                 f"labels, over the label budget of {self.label_budget}",
                                 "labels", n)
        if (client, sid) in self.cancelled or self.retiring.get(sid, ("",))[0] == client:
            return DeadLetter.of(
                rec.msg, f"subscription id {sid!r} of client {client!r} was cancelled; ids "
                f"are not reused (a repeat from an at-least-once writer?)", "id", sid)
        pending = self.pending.get((client, sid))
        labels = decode_labels(rec.labels)
        rows = self._read_rows([rec.row])
        links = self.state.subscribe(client, sid, labels)
        self._edge_add([client], [sid], [rec.where], [labels], rows)
        out.acks.append((client, sid))  # on replay too: see recovery
        if not replay:
            out.clients.append(client)
        self._links(links, replay, out)
        if pending is not None:
            # Subscribed and cancelled before we saw it: live between the two times, so it
            # retires at once, like any cancelled subscription.
            del self.pending[client, sid]
            self.retire(client, sid, max(pending.timestamp, timestamp_of(rec.msg)))
        return None

    def _unsubscribe(self, rec: Unsubscribe, replay: bool, out: Outcome) -> DeadLetter | None:
        client, sid = rec.client, rec.sub_id
        if self.retiring.get(sid, ("",))[0] == client or (client, sid) in self.cancelled:
            self.metrics.duplicates += 0 if replay else 1  # cancelled already: a repeat
            return None
        try:
            owner, _ = self.state.subscription(sid)
        except UnknownSubscriptionError:
            held = self.pending.get((client, sid))
            if held is not None:  # a repeat
                self.metrics.duplicates += 0 if replay else 1
                # one pending cancellation, as late as the latest
                held.timestamp = max(held.timestamp, timestamp_of(rec.msg))
                return None
            now = time.monotonic()
            self.pending[client, sid] = _Pending(
                client, timestamp_of(rec.msg), now + self.settings.unsubscribe_grace_s,
                rec.msg, now)
            return None
        if owner != client:
            raise SubscriptionOwnerError(
                f"subscription {sid!r} belongs to client {owner!r}, not {client!r}",
                field="client", value=client)
        self.retire(client, sid, timestamp_of(rec.msg))  # removed by finalize
        return None

    def retire(self, client: str, sid: str, cancelled_ms: int) -> None:
        """Cancel a live subscription: it stays until the inputs passed ``cancelled_ms``."""
        self.retiring[sid] = (client, cancelled_ms)
        heapq.heappush(self._due, (cancelled_ms, sid))
        self.progress.local_want = True

    def _current(self, rec: LinkChange) -> bool:
        """False for link control of an older epoch than one applied from its neighbour.

        Such a message comes from an incarnation of the neighbour (or of its shard's
        engine) that was replaced but still wrote: at least once nothing fences it. Applied,
        a late withdrawal of it would cancel what its successor advertised since. A newer
        epoch starts the neighbour's numbering afresh (its link_applied too).
        """
        known = self.link_epoch.get(rec.source, 0)
        if rec.epoch < known:
            self.metrics.stale_links += 1
            log.info("node %s: %s is link control of %s's epoch %d, older than %d: ignored",
                     self.settings.node, source_of(rec.msg), rec.source, rec.epoch, known)
            return False
        if rec.epoch > known:
            self.link_epoch[rec.source] = rec.epoch
            if known:
                self.progress.new_link_epoch(rec.source)
        return True

    def _links(self, links: list[LinkMessage], replay: bool, out: Outcome) -> None:
        """Keep the link messages to send, in chunks (none on replay); count their labels."""
        if replay or not links:
            return
        for m in links:
            if m.kind == ADVERTISE:
                self.metrics.labels_advertised += len(m.labels)
            else:
                self.metrics.labels_withdrawn += len(m.labels)
            out.links += link_chunks(m, self.link_labels)
