"""Topic names and Kafka header conventions: the naming half of the wire contract.

Every topic name starts with a configurable prefix (default ``dls``)::

    dls.raw.subscriptions    dls.raw.unsubscriptions    dls.raw.events   (mapping job input)
    dls.node.N.subscribe     dls.node.N.unsubscribe     dls.node.N.publish
    dls.link.N.M             link control node N sends to node M (advertisements and
                             withdrawals: state, kept forever like the node's control topics)
    dls.fwd.N.M              events node N forwards to node M (ordinary retention)
    dls.deliver.CLIENT       what client CLIENT receives (one topic per client), or
    dls.deliver              every client's deliveries in one topic of N partitions, when
                             the network runs with shared delivery (client C reads
                             partition ``delivery_partition(C, N)``)
    dls.deadletter           what could not be used, with the reason
    dls.node.N.client.C.subscribe | .unsubscribe | .publish
                             client C's own inputs at node N (per-client inputs, the secure
                             layout: only C's principal may write them, so the topic names
                             the client)
    dls.node.N.snapshot      node N's state snapshots (compacted; recovery starts there)
    dls.client.C.subscriptions  client C's live subscriptions (compacted, keyed by id): a
                             restarted client reads them back

Node and client names are topic name parts: non-empty, ``[A-Za-z0-9_-]`` (no dots, which
separate the parts). A whole topic name is at most 249 characters (Kafka's limit).

Events carry their routing data in headers, never in the value: :data:`HEADER_LABEL` (the
label, 8 bytes big-endian), :data:`HEADER_ORIGIN` (``"NODE/CLIENT"`` of the publisher) and
:data:`HEADER_EVENT_ID`, and when another writer (the Spark job) wrote it for its publisher
:data:`HEADER_PUBLISHED`. On the shared delivery topic a message carries one event for
every client of its partition the event goes to, listed in :data:`HEADER_CLIENTS`
(comma-separated). Dead letters carry :data:`HEADER_DLQ_REASON` and
:data:`HEADER_DLQ_SOURCE` (``"topic[partition]@offset"``).
"""

from __future__ import annotations

import operator
import re
import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import mmh3
import numpy as np

from connectors.exceptions import ConnectorSettingError, SerdeError, TopicNameError

__all__ = [
    "NAME_PATTERN",
    "NAME_RE",
    "CLIENT_INPUT_KINDS",
    "CONTROL_TOPIC_CONFIG",
    "HEADER_ACK",
    "HEADER_LINK_EPOCH",
    "HEADER_LINK_SEQ",
    "HEARTBEAT_KEY",
    "HEADER_CLIENTS",
    "HEADER_DLQ_REASON",
    "HEADER_DLQ_SOURCE",
    "HEADER_EVENT_ID",
    "HEADER_LABEL",
    "HEADER_ORIGIN",
    "HEADER_PUBLISHED",
    "HEADER_SHARD",
    "MAX_SHARDS",
    "MAX_MESSAGE_LABELS",
    "MAX_TOPIC_LENGTH",
    "HeaderValue",
    "Headers",
    "Topics",
    "check_name",
    "decode_clients",
    "decode_label",
    "decode_labels",
    "delivery_partition",
    "encode_clients",
    "names_client",
    "encode_label",
    "encode_labels",
    "headers_dict",
    "source_of",
]

CONTROL_TOPIC_CONFIG: Mapping[str, str] = MappingProxyType(
    {"retention.ms": "-1", "retention.bytes": "-1", "cleanup.policy": "delete"})
"""Settings of the control topics (a node's subscribe and unsubscribe, link control).

A node rebuilds its state from them, so they keep everything (and are not compacted:
their records have no keys). Whoever writes to one first creates it with these settings
(Kafka would otherwise auto-create it with the broker's default retention, and old
subscriptions would vanish); a node that finds other settings on one repairs them at
start (:mod:`connectors.topic_settings`). Forwarded events and deliveries are not control:
their topics keep the broker's default retention.
"""

HEADER_LABEL = "dls-label"
"""Header with the event's label: an unsigned 64-bit integer, 8 bytes big-endian."""
HEADER_ORIGIN = "dls-origin"
"""Header with the original publisher, UTF-8 ``"NODE/CLIENT"``."""
HEADER_EVENT_ID = "dls-event-id"
"""Header with the publisher's event id, UTF-8."""
HEADER_PUBLISHED = "dls-published-ms"
"""Header of an event written for its publisher by another writer (the Spark job): the
publication time, the raw record's timestamp in ms since the epoch, 8 bytes big-endian (a
non-negative 64-bit integer). A node takes it, not the record's own timestamp (the
writer's), as the event's publication time, and keeps it on every copy
(docs/architecture.md#order-of-changes-and-events)."""
HEADER_CLIENTS = "dls-clients"
"""Header of a message on the shared delivery topic: its clients, UTF-8, comma-separated."""
HEADER_LINK_SEQ = "dls-link-seq"
"""Header of a link control message: its sequence number on its link, 8 bytes big-endian
(increasing; a neighbour's heartbeat says up to which one it has applied)."""
HEADER_LINK_EPOCH = "dls-link-epoch"
"""Header of a link control message: the epoch of the process (an engine's incarnation)
that sent it, 8 bytes big-endian (its start time in µs). A receiver ignores link control
of an older epoch than one it applied: a process that lost its place but still runs (a
zombie, at least once: nothing fences it) cannot undo what its successor sent."""
HEARTBEAT_KEY = b"dls-heartbeat"
"""Key of a Heartbeat on a forwarded-event topic (events there have no key)."""
HEADER_ACK = "dls-ack"
"""Header of an acknowledgement on a delivery topic: the subscription id its node applied
(UTF-8); such a message has no value and is no event."""
HEADER_SHARD = "dls-shard"
"""Header of an acknowledgement from the engine of one label shard: its number, UTF-8
decimal (a client of a sharded network waits for each shard its subscription went to)."""
HEADER_DLQ_REASON = "dls-dlq-reason"
"""Header of a dead letter: why the message was rejected, UTF-8."""
HEADER_DLQ_SOURCE = "dls-dlq-source"
"""Header of a dead letter: where the message was read, UTF-8 ``"topic[partition]@offset"``."""

CLIENT_INPUT_KINDS = ("subscribe", "unsubscribe", "publish")
"""The kinds of a client's own input topics (:meth:`Topics.client_input`)."""

MAX_SHARDS = 1024
"""The most label shards a network may have (``NodeSettings.shards``)."""

MAX_TOPIC_LENGTH = 249
"""Kafka's limit on the length of a topic name."""

MAX_MESSAGE_LABELS = 120_000
"""Labels one LabelSubscription carries at most, whatever the space's ``label_budget``:
960,000 bytes of labels, under the 1,000,000 bytes a producer sends by default, with room for
the rest of the message. The Spark job refuses a subscription with more as a dead letter;
the SDK checks the encoded message itself (``connectors.client.MAX_SUBSCRIPTION_BYTES``)."""

_PREFIX_RE = re.compile(r"[A-Za-z0-9._-]+")
NAME_PATTERN = "[A-Za-z0-9_-]+"
"""A node or client name: it is part of topic names (letters, digits, ``_``, ``-``)."""
NAME_RE = re.compile(NAME_PATTERN)
_LABEL = struct.Struct(">Q")
_COMMA = ord(",")
_BE_U64 = np.dtype(">u8")


def check_name(name: Any, field: str) -> str:
    """Return ``name`` if it can be a topic name part (node or client), else raise.

    Raises:
        TopicNameError: ``name`` is not a non-empty string of ``[A-Za-z0-9_-]``; the error
            names ``field`` and carries the value.
    """
    if not isinstance(name, str) or NAME_RE.fullmatch(name) is None:
        raise TopicNameError(
            f"{field} must be a non-empty name of letters, digits, '_' and '-' (it is part of "
            f"a topic name), got {name!r}", field=field, value=name)
    return name


def _fit(topic: str, field: str, value: str) -> str:
    if len(topic) > MAX_TOPIC_LENGTH:
        raise TopicNameError(
            f"{field} {value[:40]!r}{'...' if len(value) > 40 else ''} makes the topic name "
            f"{len(topic)} characters long; Kafka allows {MAX_TOPIC_LENGTH}",
            field=field, value=value)
    return topic


@dataclass(frozen=True)
class Topics:
    """The topic names of one dlsroute installation, all under ``prefix``.

    ``shard``: the names of one label shard of a sharded network (``shards`` > 1 on the
    nodes): the nodes' own topics (subscribe, unsubscribe, publish, snapshot, link,
    forward, clients' own inputs) get a part ``s<shard>``; what clients read and the
    fixed topics (deliveries, dead letters, raw topics, a client's subscriptions) are the
    network's, shared by its shards. ``None``: the unsharded names.
    """

    prefix: str = "dls"
    shard: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.prefix, str) or _PREFIX_RE.fullmatch(self.prefix) is None:
            raise TopicNameError(
                f"topic prefix must be a non-empty string of letters, digits, '.', '_' and "
                f"'-', got {self.prefix!r}", field="prefix", value=self.prefix)
        if self.shard is not None and (type(self.shard) is not int
                                       or not 0 <= self.shard < MAX_SHARDS):
            raise TopicNameError(f"shard must be None or an integer in [0, {MAX_SHARDS}), got "
                                 f"{self.shard!r}", field="shard", value=self.shard)
        # The longest fixed name; per-node and per-client names are checked when made.
        _fit(self.raw_unsubscriptions, "prefix", self.prefix)

    @property
    def _s(self) -> str:
        """The shard part of a node topic's name (empty when unsharded)."""
        return "" if self.shard is None else f".s{self.shard}"

    def of_shard(self, shard: int | None) -> Topics:
        """The names of ``shard`` of the same network (None: unsharded)."""
        return Topics(self.prefix, shard)

    # -- fixed topics ---------------------------------------------------------------------
    @property
    def raw_subscriptions(self) -> str:
        """Raw subscriptions from applications (input of the mapping job)."""
        return f"{self.prefix}.raw.subscriptions"

    @property
    def raw_unsubscriptions(self) -> str:
        """Raw unsubscriptions from applications (input of the mapping job)."""
        return f"{self.prefix}.raw.unsubscriptions"

    @property
    def raw_events(self) -> str:
        """Raw events from applications (input of the mapping job)."""
        return f"{self.prefix}.raw.events"

    @property
    def deadletter(self) -> str:
        """Messages that could not be used, with the reason."""
        return f"{self.prefix}.deadletter"

    # -- per node, link and client ----------------------------------------------------------
    def node_subscribe(self, node: str) -> str:
        """Label-set subscriptions for ``node``."""
        check_name(node, "node")
        return _fit(f"{self.prefix}.node.{node}{self._s}.subscribe", "node", node)

    def node_unsubscribe(self, node: str) -> str:
        """Label-set unsubscriptions for ``node``."""
        check_name(node, "node")
        return _fit(f"{self.prefix}.node.{node}{self._s}.unsubscribe", "node", node)

    def node_publish(self, node: str) -> str:
        """Events published by the clients of ``node`` (label and origin in headers)."""
        check_name(node, "node")
        return _fit(f"{self.prefix}.node.{node}{self._s}.publish", "node", node)

    def node_snapshot(self, node: str) -> str:
        """Snapshots of ``node``'s state (compacted): where its recovery starts."""
        check_name(node, "node")
        return _fit(f"{self.prefix}.node.{node}{self._s}.snapshot", "node", node)

    def node_shards(self, node: str) -> str:
        """One partition per label shard of ``node``, never written.

        The processes running the node share its shards as a consumer group of this topic.
        """
        check_name(node, "node")
        return _fit(f"{self.prefix}.node.{node}.shards", "node", node)

    def client_subscriptions(self, client: str) -> str:
        """Client ``client``'s live subscriptions (compacted, keyed by subscription id)."""
        check_name(client, "client")
        return _fit(f"{self.prefix}.client.{client}.subscriptions", "client", client)

    # -- per-client inputs (the secure layout: the topic names its writer) -------------------
    def client_input(self, node: str, client: str, kind: str) -> str:
        """Client ``client``'s own ``kind`` input topic at ``node``.

        ``kind`` is ``subscribe``, ``unsubscribe`` or ``publish``. With per-client inputs
        (``client_inputs`` on the node and the SDK) a client writes only these topics, and
        only its principal may (``dlsroute access``): the node takes the client's name from
        the topic, never from what the client wrote.

        Raises:
            TopicNameError: A name is invalid, or ``kind`` is not one of the three.
        """
        check_name(node, "node")
        check_name(client, "client")
        if kind not in CLIENT_INPUT_KINDS:
            raise TopicNameError(f"kind must be one of {list(CLIENT_INPUT_KINDS)}, got {kind!r}",
                                 field="kind", value=kind)
        field, value = ("node", node) if len(node) >= len(client) else ("client", client)
        return _fit(f"{self.client_input_prefix(node, client)}{self._s[1:]}{'.' * bool(self._s)}"
                    f"{kind}", field, value)

    def client_input_prefix(self, node: str, client: str) -> str:
        """What every input topic of ``client`` at ``node`` starts with (an ACL prefix).

        It ends in a dot, which no name contains: client ``al``'s prefix is no prefix of
        client ``alice``'s topics. The same for every shard.
        """
        check_name(node, "node")
        check_name(client, "client")
        return f"{self.prefix}.node.{node}.client.{client}."

    def client_inputs_pattern(self, node: str) -> str:
        """The regular expression (librdkafka's ``^`` form) of every client input of ``node``."""
        check_name(node, "node")
        return (f"^{re.escape(self.prefix)}\\.node\\.{node}\\.client\\.{NAME_PATTERN}"
                f"{re.escape(self._s)}\\.({'|'.join(CLIENT_INPUT_KINDS)})$")

    def parse_client_input(self, topic: str) -> tuple[str, str, str] | None:
        """``(node, client, kind)`` of a per-client input topic, ``None`` for any other name."""
        head = f"{self.prefix}.node."
        if not isinstance(topic, str) or not topic.startswith(head):
            return None
        parts = topic[len(head):].split(".")
        if self.shard is not None:
            if len(parts) != 5 or parts[3] != f"s{self.shard}":
                return None
            del parts[3]
        if (len(parts) != 4 or parts[1] != "client" or parts[3] not in CLIENT_INPUT_KINDS
                or NAME_RE.fullmatch(parts[0]) is None or NAME_RE.fullmatch(parts[2]) is None
                or len(topic) > MAX_TOPIC_LENGTH):
            return None
        return parts[0], parts[2], parts[3]

    def link(self, src: str, dst: str) -> str:
        """Link control node ``src`` sends to its neighbour ``dst`` (kept forever).

        Raises:
            TopicNameError: A name is invalid, or ``src == dst`` (a link joins two nodes).
        """
        return self._pair("link", src, dst)

    def forward(self, src: str, dst: str) -> str:
        """Events node ``src`` forwards to its neighbour ``dst`` (ordinary retention).

        Raises:
            TopicNameError: A name is invalid, or ``src == dst`` (a link joins two nodes).
        """
        return self._pair("fwd", src, dst)

    def _pair(self, kind: str, src: str, dst: str) -> str:
        check_name(src, "src")
        check_name(dst, "dst")
        if src == dst:
            raise TopicNameError(f"a link joins two different nodes, got {src!r} twice",
                                 field="dst", value=dst)
        field, value = ("src", src) if len(src) >= len(dst) else ("dst", dst)
        return _fit(f"{self.prefix}.{kind}.{src}.{dst}{self._s}", field, value)

    def deliver(self, client: str) -> str:
        """What client ``client`` receives (one topic per client)."""
        check_name(client, "client")
        return _fit(f"{self.prefix}.deliver.{client}", "client", client)

    @property
    def shared_deliver(self) -> str:
        """Every client's deliveries, when the network runs with shared delivery."""
        return f"{self.prefix}.deliver"

    def node_inputs(self, node: str, neighbours: Iterable[str]) -> list[str]:
        """Every topic ``node`` consumes, in a fixed order.

        Its subscribe, unsubscribe and publish topics, then the inbound link control topic
        ``link(neighbour, node)`` of each neighbour (in the order given, each once), then
        the inbound event topic ``forward(neighbour, node)`` of each.
        """
        out = [self.node_subscribe(node), self.node_unsubscribe(node), self.node_publish(node)]
        unique = list(dict.fromkeys(neighbours))
        out += [self.link(n, node) for n in unique]
        out += [self.forward(n, node) for n in unique]
        return out

    def parse_link(self, topic: str) -> tuple[str, str] | None:
        """``(src, dst)`` of a link topic under this prefix, ``None`` for any other name."""
        head = f"{self.prefix}.link."
        if not isinstance(topic, str) or not topic.startswith(head):
            return None
        parts = topic[len(head):].split(".")
        if self.shard is not None:
            if len(parts) != 3 or parts[2] != f"s{self.shard}":
                return None
            del parts[2]
        if len(parts) != 2:
            return None
        src, dst = parts
        if (NAME_RE.fullmatch(src) is None or NAME_RE.fullmatch(dst) is None or src == dst
                or len(topic) > MAX_TOPIC_LENGTH):
            return None
        return src, dst


# -- headers ------------------------------------------------------------------------------
def encode_label(label: int | np.integer[Any]) -> bytes:
    """The :data:`HEADER_LABEL` value of ``label``: 8 bytes big-endian.

    Raises:
        SerdeError: ``label`` is not an integer in ``[0, 2**64)``.
    """
    try:
        return _LABEL.pack(label)  # ints and numpy integers (via __index__)
    except struct.error:
        raise SerdeError(f"a label must be an integer in [0, 2**64), got {label!r}",
                         field="label", value=label) from None


def decode_label(b: bytes | bytearray) -> int:
    """The label in a :data:`HEADER_LABEL` value.

    Raises:
        SerdeError: ``b`` is not exactly 8 bytes.
    """
    if (type(b) is bytes or isinstance(b, bytearray)) and len(b) == 8:
        return int(_LABEL.unpack(b)[0])
    is_bytes = isinstance(b, bytes | bytearray)
    raise SerdeError(
        f"a {HEADER_LABEL} header must be exactly 8 bytes, got "
        f"{f'{len(b)} bytes' if is_bytes else type(b).__name__}",
        field=HEADER_LABEL, value=bytes(b).hex() if is_bytes else b)


def encode_labels(labels: np.ndarray) -> bytes:
    """Concatenated 8-byte big-endian labels (the ``labels`` field of the Avro messages).

    ``labels`` is a 1-d array of unsigned integers (signed ones must be non-negative); a
    Python sequence of ints is accepted too.

    Raises:
        SerdeError: Not a 1-d integer array, or a negative label.
    """
    arr = np.asarray(labels)
    if not isinstance(labels, np.ndarray) and arr.dtype.kind in "fO" and arr.ndim == 1:
        # A Python sequence mixing large and small ints comes out float or object: go exact.
        try:
            arr = np.array([operator.index(x) for x in labels], dtype=np.uint64)
        except (TypeError, OverflowError, ValueError):
            raise SerdeError(f"labels must be integers in [0, 2**64), got {labels!r}",
                             field="labels", value=labels) from None
    if arr.ndim != 1:
        raise SerdeError(f"labels must be a 1-d array, got shape {arr.shape}",
                         field="labels", value=arr.shape)
    if arr.size == 0:
        return b""
    if arr.dtype.kind == "i":
        if int(arr.min()) < 0:
            raise SerdeError(f"labels must be non-negative, got {int(arr.min())}",
                             field="labels", value=int(arr.min()))
    elif arr.dtype.kind != "u":
        raise SerdeError(f"labels must be unsigned integers, got dtype {arr.dtype}",
                         field="labels", value=str(arr.dtype))
    return arr.astype(_BE_U64, copy=False).tobytes()


def decode_labels(b: bytes) -> np.ndarray:
    """The labels (native ``uint64``, a fresh writable array) of concatenated 8-byte labels.

    Raises:
        SerdeError: The length is not a multiple of 8.
    """
    if not isinstance(b, bytes | bytearray | memoryview):
        raise SerdeError(f"labels must be bytes, got {type(b).__name__}",
                         field="labels", value=b)
    if len(b) % 8:
        raise SerdeError(f"labels must be a multiple of 8 bytes long, got {len(b)} bytes",
                         field="labels", value=len(b))
    return np.frombuffer(b, dtype=_BE_U64).astype(np.uint64)


def delivery_partition(client: str, partitions: int) -> int:
    """The partition of the shared delivery topic that ``client`` reads.

    A stable hash (MurmurHash3 x86 32-bit, seed 0, of the UTF-8 name) modulo
    ``partitions``: every node and every client computes the same partition, on any
    machine and in any process.

    Raises:
        TopicNameError: ``client`` is not a valid client name.
        ConnectorSettingError: ``partitions`` is below 1 (a ``ValueError`` too).
    """
    check_name(client, "client")
    if not isinstance(partitions, int) or partitions < 1:
        raise ConnectorSettingError(f"partitions must be an integer >= 1, got {partitions!r}",
                                    field="partitions", value=partitions)
    return int(mmh3.hash(client.encode(), 0, signed=False)) % partitions


def encode_clients(clients: Iterable[str]) -> bytes:
    """The :data:`HEADER_CLIENTS` value for ``clients`` (names, comma-separated)."""
    return ",".join(clients).encode()


def decode_clients(raw: bytes | bytearray | None) -> frozenset[str]:
    """The client names of a :data:`HEADER_CLIENTS` value (empty for ``None``)."""
    if not raw:
        return frozenset()
    return frozenset(bytes(raw).decode("utf-8", "replace").split(","))


def names_client(raw: bytes | bytearray | None, client: str) -> bool:
    """True if the :data:`HEADER_CLIENTS` value ``raw`` names ``client``.

    The same answer as ``client in decode_clients(raw)``, without splitting the value: a
    delivery for thousands of clients carries a header of up to
    ``broker_node.router.CLIENTS_HEADER_BYTES`` (256 KiB), which every client of the
    partition reads.
    """
    if not raw:
        return False
    name = client.encode()
    end, size = len(raw), len(name)
    i = raw.find(name)
    while i >= 0:
        j = i + size
        if (i == 0 or raw[i - 1] == _COMMA) and (j == end or raw[j] == _COMMA):
            return True
        i = raw.find(name, i + 1)
    return False


def source_of(topic: str | None, partition: int | None, offset: int | None) -> str:
    """A message's position as ``"topic[partition]@offset"`` (for :data:`HEADER_DLQ_SOURCE`).

    Takes confluent-kafka's ``msg.topic()``, ``msg.partition()`` and ``msg.offset()`` as they
    are (each may be ``None``, which is written as ``None``).
    """
    return f"{topic}[{partition}]@{offset}"


HeaderValue = str | bytes | bytearray | None
"""A header value as confluent-kafka types it."""
Headers = Mapping[str, HeaderValue] | Sequence[tuple[str, HeaderValue]]
"""Headers as confluent-kafka types them: a list of ``(key, value)`` pairs or a dict."""


def headers_dict(headers: Headers | None) -> dict[str, bytes]:
    """Kafka headers (confluent-kafka's ``msg.headers()``: a list of pairs) as a dict.

    A repeated key keeps its last value (Kafka's "last header" rule); a null value becomes
    ``b""``, a ``str`` value its UTF-8 bytes; ``None`` (no headers) gives ``{}``. A dict is
    accepted too and normalised the same way.
    """
    if not headers:
        return {}
    pairs = headers.items() if isinstance(headers, Mapping) else headers
    return {k: _header_bytes(v) for k, v in pairs}


def _header_bytes(v: HeaderValue) -> bytes:
    if v is None:
        return b""
    if isinstance(v, str):
        return v.encode("utf-8")
    return bytes(v)
