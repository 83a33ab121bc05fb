"""What a consumed message is: an event to route, a control record, or a dead letter.

The inbox reads messages and returns data: for a run of events an :class:`EventRun` (the
events to route, the headers to pass on, their routing keys, and the dead letters), for a
control message a :class:`Subscribe`, :class:`Unsubscribe`, :class:`LinkChange` or
:class:`DeadLetter`. Nothing is raised for a bad message: a dead letter is a value, which
the service produces to the dead-letter topic.

An event repeated by an at-least-once writer upstream is dropped here, by its
``(origin, event id)`` (:class:`RoutedIds`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
from confluent_kafka import Message

from broker_node.metrics import Metrics
from broker_node.oversize import MessageLimit
from broker_node.state import BrokerState
from connectors.kafka import source_of
from connectors.recent import (
    ROUTED_KEY_BYTES,
    RecentKeys,
    RepeatNotice,
    bounded_key,
    routed_prefix,
)
from connectors.serde import SERDE, encode_dead_letter
from connectors.topics import (
    HEADER_CLIENTS,
    HEADER_DLQ_REASON,
    HEADER_DLQ_SOURCE,
    HEADER_EVENT_ID,
    HEADER_LABEL,
    HEADER_LINK_EPOCH,
    HEADER_LINK_SEQ,
    HEADER_ORIGIN,
    HEADER_PUBLISHED,
    HEARTBEAT_KEY,
    Topics,
    decode_label,
)
from dls.exceptions import DLSError
from dls.shards import label_shard, label_shards

__all__ = [
    "ROUTED_MEMORY",
    "Beat",
    "ControlRecord",
    "DeadLetter",
    "EventRun",
    "Inbox",
    "Key",
    "LinkChange",
    "RoutedIds",
    "Subscribe",
    "Unsubscribe",
    "message_headers",
    "offset_of",
    "publication_ms",
    "timestamp_of",
    "topic_of",
]

log = logging.getLogger(__name__)

#: How many routed events (at least) the node remembers to drop repeats.
ROUTED_MEMORY = 100_000
#: How many labels' shards the inbox remembers (a sharded network) before it starts over.
SHARD_MEMORY = 1_000_000

#: What routing an event depends on: (label, bank index of its publisher if a local
#: client or -1, index of the neighbour it came from or -1). The usual case, a label from
#: a publisher that is no client here and not from a neighbour, ``(label, -1, -1)``, is
#: keyed by the label header's 8 bytes alone: no int to decode, no tuple to build and hash
#: per event.
Key = bytes | tuple[int, int, int]


def timestamp_of(msg: Message) -> int:
    """The message's timestamp (0 when it has none)."""
    kind, ts = msg.timestamp()
    return int(ts) if kind else 0


def publication_ms(msg: Message, carried: list[tuple[str, bytes | None]]) -> int:
    """An event's publication time in ms (0: none; its copies are then stamped when sent).

    Its :data:`HEADER_PUBLISHED` header when it has one (the Spark job writes it: the
    record's own timestamp is then the job's write time), else the record's timestamp.
    ``carried``: the event's headers, whose width :meth:`Inbox.events` has checked.
    """
    if len(carried) != 3 or carried[2][0] != HEADER_EVENT_ID:
        for key, value in carried:
            if key == HEADER_PUBLISHED and value:
                return int.from_bytes(value, "big")
    kind, ts = msg.timestamp()
    return ts if kind and ts > 0 else 0


def topic_of(msg: Message) -> str:
    """The message's topic ("" for none)."""
    return msg.topic() or ""


def offset_of(msg: Message) -> int:
    """The message's offset (-1 for none)."""
    offset = msg.offset()
    return -1 if offset is None else int(offset)


def message_headers(msg: Message) -> list[tuple[str, bytes]]:
    """The message's headers as (name, bytes) pairs (a missing value becomes b"")."""
    raw = msg.headers() or []
    pairs = raw.items() if isinstance(raw, dict) else raw
    return [(k, v if isinstance(v, bytes) else (v or "").encode()) for k, v in pairs]


@dataclass(frozen=True)
class DeadLetter:
    """A message the node cannot use: where it came from, why, and what it was."""

    source: str
    reason: str
    raw: bytes
    headers: list[tuple[str, bytes]]
    field: str | None = None
    value: Any = None

    @classmethod
    def of(cls, msg: Message, reason: str, field: str | None = None,
           value: Any = None) -> DeadLetter:
        """The dead letter of a consumed message."""
        return cls(source_of(msg), reason, msg.value() or b"", message_headers(msg), field,
                   value)

    def message(self, limit: MessageLimit | None = None
                ) -> tuple[bytes, list[tuple[str, bytes]]]:
        """The DeadLetter record and headers to produce to the dead-letter topic.

        A dead letter must fit in a message of ``limit`` (the node's
        :class:`~broker_node.oversize.MessageLimit`): a value past its ``dead_letter_raw``
        is cut, and headers past its ``dead_letter_headers`` are left out; the reason
        says so.
        """
        limit = limit or MessageLimit()
        most_raw, most_headers = limit.dead_letter_raw, limit.dead_letter_headers
        value = None if self.value is None else str(self.value)
        reason, raw, headers = self.reason, self.raw, self.headers
        if len(raw) > most_raw:
            reason += f" (raw value cut to {most_raw:,} of {len(raw):,} bytes)"
            raw = raw[:most_raw]
        kept: list[tuple[str, bytes]] = []
        size = 0
        for name, data in headers:
            size += len(name) + len(data)
            if size > most_headers:
                reason += f" ({len(headers) - len(kept)} of {len(headers)} headers left out)"
                break
            kept.append((name, data))
        record = encode_dead_letter(self.source, reason, raw, dict(kept), field=self.field,
                                    value=value)
        return record, [(HEADER_DLQ_REASON, reason.encode()),
                        (HEADER_DLQ_SOURCE, self.source.encode())]


class EventRun(NamedTuple):
    """A run of events read: the good ones (with headers to pass on and keys) and the bad."""

    msgs: list[Message]
    carried: list[Any]  # each good event's headers, passed on as they came
    keys: list[Key]
    dead: list[DeadLetter]


@dataclass(frozen=True)
class Subscribe:
    """A LabelSubscription (its labels still encoded: decoded where they are used)."""

    msg: Message
    client: str
    sub_id: str
    labels: bytes
    where: str | None = None  # as written (the SDK's normalised text), for the exact check
    row: bytes | None = None  # the exact check's row, compiled by the sender (dls.exact_row)


@dataclass(frozen=True)
class Unsubscribe:
    """A LabelUnsubscription."""

    msg: Message
    client: str
    sub_id: str


@dataclass(frozen=True)
class LinkChange:
    """A LinkControl from neighbour ``source`` (advertise or withdraw), number ``seq``."""

    msg: Message
    source: str
    kind: str
    labels: bytes
    seq: int = 0  # HEADER_LINK_SEQ (0: none, from a node that does not number them)
    epoch: int = 0  # HEADER_LINK_EPOCH (0: none)


@dataclass(frozen=True)
class Beat:
    """A Heartbeat from neighbour ``source`` (see :mod:`broker_node.progress`)."""

    msg: Message
    source: str
    watermark_ms: int
    link_applied: int
    wants_watermark: bool = False


ControlRecord = Subscribe | Unsubscribe | LinkChange | Beat | DeadLetter


class RoutedIds:
    """The ids of routed events: those of committed batches, and those of the batch now.

    ``recent`` holds ``routed_key(origin, event id)`` of the events routed in committed
    batches (the most recent :data:`ROUTED_MEMORY` at least): a repeat is skipped, and a
    driver such as ``dlsroute replay`` can tell when an event has passed this node.
    """

    def __init__(self, size: int = ROUTED_MEMORY) -> None:
        """Empty memories."""
        self.recent = RecentKeys(size)
        self.batch: dict[bytes, None] = {}

    def settle(self) -> None:
        """The batch counts (committed): remember its ids."""
        self.recent.update(self.batch)
        self.batch.clear()

    def drop(self) -> None:
        """The batch failed: forget its ids."""
        self.batch.clear()


def _published_ok(value: bytes | None) -> bool:
    """A :data:`HEADER_PUBLISHED` value is 8 bytes big-endian of a non-negative int64."""
    return type(value) is bytes and len(value) == 8 and value < b"\x80"


def _unusual(msg: Message, carried: list[tuple[str, bytes | None]], space: tuple[bytes, bytes]
             ) -> tuple[bytes, bytes | None, bytes | None, Any] | DeadLetter:
    """The label, origin, id and headers to pass on of an event not in the usual form.

    ``space``: the first and last label of the node's space, as label headers.
    """
    headers = dict(carried)
    if HEADER_PUBLISHED in headers and not _published_ok(headers[HEADER_PUBLISHED]):
        value = headers[HEADER_PUBLISHED] or b""
        return DeadLetter.of(msg, f"a {HEADER_PUBLISHED} header must be 8 bytes, a time in ms "
                             f"from 0 to 2**63-1, got {value.hex() or 'nothing'}",
                             HEADER_PUBLISHED, value.hex())
    raw = headers.get(HEADER_LABEL)
    if type(raw) is bytes and len(raw) == 8:
        label8 = raw
    else:
        if raw is None:
            if HEADER_LABEL not in headers:
                return DeadLetter.of(msg, f"event without a {HEADER_LABEL} header",
                                     HEADER_LABEL)
            raw = b""  # present without a value: refused by decode_label
        try:
            label8 = decode_label(raw).to_bytes(8, "big")
        except DLSError as exc:
            return DeadLetter.of(msg, str(exc), HEADER_LABEL, raw.hex())
    if not space[0] <= label8 <= space[1]:
        label = int.from_bytes(label8, "big")
        return DeadLetter.of(msg, f"event label {label:#x} is outside this node's label space",
                             HEADER_LABEL, label8.hex())
    clean = (carried if HEADER_CLIENTS not in headers
             else [h for h in carried if h[0] != HEADER_CLIENTS])
    return label8, headers.get(HEADER_ORIGIN), headers.get(HEADER_EVENT_ID), clean


def _link_numbers(msg: Message) -> tuple[int, int]:
    """The HEADER_LINK_SEQ and HEADER_LINK_EPOCH of a link control message (0: absent)."""
    seq = epoch = 0
    for key, value in message_headers(msg):
        if key == HEADER_LINK_SEQ and len(value) == 8:
            seq = int.from_bytes(value, "big")
        elif key == HEADER_LINK_EPOCH and len(value) == 8:
            epoch = int.from_bytes(value, "big")
    return seq, epoch


class Inbox:
    """Reads the node's input messages into events, control records and dead letters."""

    def __init__(self, node: str, topics: Topics, state: BrokerState, metrics: Metrics,
                 routed: RoutedIds | None = None, *, shards: int = 1) -> None:
        """The inbox of ``node``; its neighbours are the state's.

        ``shards`` > 1: the node serves shard ``topics.shard`` of a sharded network, and a
        label of another shard (in an event or a subscription) is a dead letter: its
        writer sent it to the wrong shard, where it would be lost unseen.
        """
        self.node, self.state, self.metrics = node, state, metrics
        self.shards = shards if topics.shard is not None else 1
        self.shard = topics.shard or 0
        self._shard_of: dict[bytes, bool] = {}  # label header -> in this shard
        self.deliver_topic = topics.deliver  # refuses a client name no topic can carry
        base, size = state.label_base, state.label_space_size
        #: The first and last label of the space as label headers (8 bytes big-endian
        #: compare as the numbers do): an event's label outside is a dead letter.
        self.space = ((b"", b"\xff" * 8) if base is None or size is None
                      else (base.to_bytes(8, "big"), (base + size - 1).to_bytes(8, "big")))
        self.routed = routed or RoutedIds()
        self.repeats = RepeatNotice(f"node {node}", log)  # said once a minute at most
        self.topics = topics
        self.publish = topics.node_publish(node)
        self.subscribe_topic = topics.node_subscribe(node)
        self.unsubscribe_topic = topics.node_unsubscribe(node)
        #: every publish topic read: the node's own, and its clients' own (learned)
        self.publish_topics: set[str] = {self.publish}
        #: every subscribe topic read: the node's own, and its clients' own (learned)
        self.subscribe_topics: set[str] = {self.subscribe_topic}
        #: a client's own publish topic -> the origin its events get, whatever they carry
        self.client_origin: dict[str, bytes] = {}
        #: a client's own subscribe or unsubscribe topic -> (record wanted, the client)
        self.client_control: dict[str, tuple[str, str]] = {}
        self._not_client: set[str] = set()  # topics looked at that are no client input here
        #: link control topic -> the neighbour it comes from
        self.link_source = {topics.link(n, node): n for n in state.neighbours}
        #: forwarded-event topic -> the neighbour it comes from
        self.forward_source = {topics.forward(n, node): n for n in state.neighbours}

    def learn(self, topic: str) -> bool:
        """Note ``topic`` if it is one of this node's clients' own inputs; True if it is.

        A client's own topic names the client (``Topics.client_input``): the node takes
        the client of a subscription and the origin of an event from it, never from what
        the client wrote. Learned when the consumer is assigned the topic, before any of
        its messages is read.
        """
        if topic in self.client_control or topic in self.client_origin:
            return True
        if topic in self._not_client:
            return False
        parsed = self.topics.parse_client_input(topic)
        if parsed is None or parsed[0] != self.node:
            self._not_client.add(topic)
            return False
        _, client, kind = parsed
        if kind == "publish":
            self.client_origin[topic] = f"{self.node}/{client}".encode()
            self.publish_topics.add(topic)
        else:
            self.client_control[topic] = (
                "LabelSubscription" if kind == "subscribe" else "LabelUnsubscription", client)
            if kind == "subscribe":
                self.subscribe_topics.add(topic)
        return True

    def is_event(self, msg: Message) -> bool:
        """An event: published here, or forwarded by a neighbour (and not a heartbeat)."""
        topic = topic_of(msg)
        if topic in self.publish_topics:
            return True
        if topic in self.forward_source:
            return msg.key() != HEARTBEAT_KEY
        return (topic not in self.client_control and topic not in self._not_client
                and self.learn(topic) and topic in self.publish_topics)

    def events(self, run: list[Message]) -> EventRun:
        """The headers of a run, event by event: dead letters and repeats, in order.

        Events with the usual three headers in the usual order (``Client.publish``'s and
        the Spark job's, passed on unchanged by nodes: label, origin, id; the job's with
        :data:`HEADER_PUBLISHED` fourth) are read by position, without a dict (see
        docs/architecture.md). A bad :data:`HEADER_PUBLISHED` makes a dead letter.
        """
        state, link_source = self.state, self.forward_source
        first, last = space = self.space
        batch_routed = self.routed.batch
        routed_new, routed_old = self.routed.recent.new, self.routed.recent.old  # fixed now
        from_bytes, key_max = int.from_bytes, ROUTED_KEY_BYTES
        out = EventRun([], [], [], [])
        good, carried_of, keys = out.msgs, out.carried, out.keys
        # Origin header value -> (origin, bank index of a local publisher or -1, id prefix),
        # once per distinct origin of the run: a run comes from few publishers, and the
        # state does not change while a run is routed.
        origins: dict[bytes | None, tuple[str, int, bytes]] = {}
        forced_of = self.client_origin  # empty unless clients write topics of their own
        for msg in run:
            carried: list[tuple[str, bytes | None]] = msg.headers() or []  # type: ignore[assignment]
            if forced_of and (forced := forced_of.get(msg.topic())) is not None:  # type: ignore[arg-type]
                carried = self._own_origin(msg, carried, forced)
            n = len(carried)  # the Spark job's events carry the publication time too
            if n == 3 or (n == 4 and carried[3][0] == HEADER_PUBLISHED
                          and _published_ok(carried[3][1])):
                # consumed header values are bytes (or None), never str
                (k0, raw), (k1, raw_origin), (k2, eid) = carried if n == 3 else carried[:3]
                plain = (k0 == HEADER_LABEL and k1 == HEADER_ORIGIN and k2 == HEADER_EVENT_ID
                         and type(raw) is bytes and len(raw) == 8 and first <= raw <= last)
            else:
                plain = False
            if plain:
                label8: bytes = raw  # type: ignore[assignment]
                clean: Any = carried
            else:
                read = _unusual(msg, carried, space)
                if type(read) is DeadLetter:
                    out.dead.append(read)
                    continue
                label8, raw_origin, eid, clean = read  # type: ignore[misc]
            known = origins.get(raw_origin)
            if known is None:
                known = origins[raw_origin] = self._origin(raw_origin)
            if self.shards > 1 and not self._in_shard(label8):
                out.dead.append(self._wrong_shard(msg, label8))
                continue
            origin, local, id_prefix = known
            came_from = link_source.get(msg.topic()) if link_source else None  # type: ignore[arg-type]
            if eid is not None:
                key = id_prefix + eid  # routed_key(origin, event id), from the raw bytes
                if len(key) > key_max:
                    key = bounded_key(key)
                if key in routed_new or key in routed_old or key in batch_routed:
                    self.metrics.duplicates += 1
                    self.repeats.add(source_of(msg), eid.decode("utf-8", "replace"), origin)
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
        return out

    def _in_shard(self, label8: bytes) -> bool:
        """True if the label (a header's 8 bytes) is of this node's shard."""
        ok = self._shard_of.get(label8)
        if ok is None:
            if len(self._shard_of) > SHARD_MEMORY:
                self._shard_of.clear()
            ok = self._shard_of[label8] = (
                label_shard(int.from_bytes(label8, "big"), self.shards) == self.shard)
        return ok

    def _wrong_shard(self, msg: Message, label8: bytes) -> DeadLetter:
        label = int.from_bytes(label8, "big")
        return DeadLetter.of(msg, f"label {label:#x} is of shard {label_shard(label, self.shards)}"
                             f" of {self.shards}, not of this node's shard {self.shard}: its "
                             f"writer sent it to the wrong shard", HEADER_LABEL, label8.hex())

    def _own_origin(self, msg: Message, carried: list[tuple[str, bytes | None]],
                    origin: bytes) -> list[tuple[str, bytes | None]]:
        """The headers of an event read from a client's own topic, its origin that client.

        What the client wrote as origin (or as publication time, which only the mapping
        job, a trusted gateway, may set) does not count: another origin is replaced and
        counted, so no client can publish as another (and no repeat of another's event
        ids can hide that client's events).
        """
        if (len(carried) == 3 and carried[1][0] == HEADER_ORIGIN and carried[1][1] == origin
                and carried[0][0] == HEADER_LABEL and carried[2][0] == HEADER_EVENT_ID):
            return carried  # the usual, honest case: as it came
        keep = [h for h in carried if h[0] not in (HEADER_ORIGIN, HEADER_PUBLISHED)]
        written = [v for k, v in carried if k == HEADER_ORIGIN]
        if written and written != [origin]:
            self.metrics.origins_replaced += 1
            log.warning("node %s: %s names origin %r on the topic of %s: replaced", self.node,
                        source_of(msg), b"|".join(v or b"" for v in written).decode(
                            "utf-8", "replace"), origin.decode())
        # label, origin, id first (the usual order: read by position on every hop)
        first = [h for h in keep if h[0] == HEADER_LABEL][:1]
        rest = [h for h in keep if h not in first]
        ids = [h for h in rest if h[0] == HEADER_EVENT_ID][:1]
        return [*first, (HEADER_ORIGIN, origin), *ids, *[h for h in rest if h not in ids]]

    def _origin(self, raw_origin: bytes | None) -> tuple[str, int, bytes]:
        """(origin, bank index of a local publisher or -1, the prefix of its routed keys)."""
        origin = (raw_origin or b"").decode("utf-8", "replace")
        o_node, _, o_client = origin.partition("/")
        local = self.state.client_index(o_client, create=False) if o_node == self.node else -1
        return origin, local, routed_prefix(raw_origin or b"")

    def control(self, msg: Message) -> ControlRecord:
        """The record of a control message, or the reason it is unusable."""
        try:
            name, rec = SERDE.decode(msg.value() or b"")
        except DLSError as exc:
            return DeadLetter.of(msg, f"undecodable: {exc}", getattr(exc, "field", None))
        topic = topic_of(msg)
        own = self.client_control.get(topic) or (
            self.client_control.get(topic) if self.learn(topic) else None)
        want = ("LabelSubscription" if topic == self.subscribe_topic
                else "LabelUnsubscription" if topic == self.unsubscribe_topic
                else own[0] if own is not None
                else "Heartbeat" if topic in self.forward_source
                else "LinkControl")
        if name != want:
            return DeadLetter.of(msg, f"expected a {want}, got {name}", "schema", name)
        if own is not None and rec["client"] != own[1]:
            return DeadLetter.of(msg, f"a {want} on client {own[1]!r}'s own topic names "
                                 f"client {rec['client']!r}: a client acts only for itself",
                                 "client", rec["client"])
        if want == "LinkControl":
            if rec["source"] != self.link_source[topic]:
                return DeadLetter.of(msg, f"a link message on {topic} names source "
                                     f"{rec['source']!r}", "source", rec["source"])
        elif want != "Heartbeat":
            try:
                self.deliver_topic(rec["client"])
            except DLSError as exc:
                return DeadLetter.of(msg, str(exc), exc.field, exc.value)
        if want == "LabelSubscription":
            if self.shards > 1:
                labels = np.frombuffer(rec["labels"], dtype=">u8")
                wrong = labels[label_shards(labels, self.shards) != self.shard]
                if wrong.size:
                    return self._wrong_shard(msg, int(wrong[0]).to_bytes(8, "big"))
            return Subscribe(msg, rec["client"], rec["id"], rec["labels"], rec.get("where"),
                             rec.get("row"))
        if want == "LabelUnsubscription":
            return Unsubscribe(msg, rec["client"], rec["id"])
        if want == "Heartbeat":
            source = self.forward_source[topic]
            if rec["source"] != source:
                return DeadLetter.of(msg, f"a heartbeat on {topic} must come from {source}, "
                                     f"it names {rec['source']!r}", "source", rec["source"])
            return Beat(msg, source, rec["watermark_ms"], rec["link_applied"],
                        rec["wants_watermark"])
        return LinkChange(msg, self.link_source[topic], str(rec["kind"]).lower(),
                          rec["labels"], *_link_numbers(msg))
