"""Bad input at every input of a node, tried systematically (issue 19, item 5).

A real :class:`NodeService` without a broker (messages built by hand, a producer that
records what it is given, :meth:`NodeService.process` as the loop calls it). Hypothesis
draws a stream of good messages (subscriptions, unsubscriptions, early unsubscriptions,
neighbours' link control, published and forwarded events) with bad ones at random places,
cut into random batches:

* on the control topics (subscribe, unsubscribe, ``dls.link.N.M``): random bytes,
  truncated records, records with a flipped bit, unknown fingerprints, valid records of
  another schema, labels outside the space or not 8 bytes each, no labels, label sets over
  the budget, names that cannot be a topic's, ids of other clients, cancelled ids, a link
  record naming another source; random headers on every control message (the node must
  not care);
* on the event topics (publish, ``dls.fwd.N.M``): no label header, a label header of
  another width or with no value, no headers at all, a label outside the space; random
  values and random extra headers on the good events (the value is opaque to the node: it
  is delivered byte for byte).

Required, for every stream: each bad message becomes exactly one dead letter, whose reason
says what is wrong; after every batch the node's state digest is that of a fresh node fed
the good messages alone; what it sends besides dead letters (deliveries, forwards, link
control) is what that node sends; and deliveries, forwards and advertisements are those a
brute-force model of the good messages expects (exactly, with exact filters; none missing
with Bloom filters).
"""

from __future__ import annotations

import json
import logging
import os
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import pytest
from confluent_kafka import Message
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import broker_node.controls as controls_mod
from broker_node.config import NodeSettings
from broker_node.digest import state_digest
from broker_node.service import NodeService
from connectors.serde import (
    SERDE,
    decode_dead_letter,
    decode_link,
    encode_dead_letter,
    encode_label_subscription,
    encode_label_unsubscription,
    encode_link,
    encode_raw_event,
)
from connectors.serde.framing import HEADER_SIZE, MARKER
from connectors.topics import (
    HEADER_CLIENTS,
    HEADER_EVENT_ID,
    HEADER_LABEL,
    HEADER_ORIGIN,
    Topics,
)
from dls.space import ContentSpace

BUDGET = 6
SPEC = {"attributes": [
    {"name": "x", "type": "numeric", "low": 0, "high": 100, "granules": 8},
    {"name": "y", "type": "discrete", "values": ["a", "b", "c", "d"]}],
    "filters": {"label_budget": BUDGET}, "app_id": 7}
SPACE = ContentSpace.from_spec(SPEC)
BASE, SIZE = SPACE.app_prefix, SPACE.label_space_size
LABELS = [BASE + i for i in range(SIZE)]
OUTSIDE = [BASE - 1, BASE + SIZE, BASE + SIZE + 12345, 0, (1 << 64) - 1, 1 << 40]
assert BASE > 0 and all(not BASE <= x < BASE + SIZE for x in OUTSIDE)
NODE, NEIGHBOURS, POOL = "A", ("B", "C"), ("ann", "bob", "cy")
T = Topics("dls")
SUB, UNSUB, PUB = T.node_subscribe(NODE), T.node_unsubscribe(NODE), T.node_publish(NODE)
LINK = {n: T.link(n, NODE) for n in NEIGHBOURS}
FWD = {n: T.forward(n, NODE) for n in NEIGHBOURS}
SCHEMA_OF = {SUB: "LabelSubscription", UNSUB: "LabelUnsubscription",
             **dict.fromkeys(LINK.values(), "LinkControl")}
GRACE_S = 2.5  # an early unsubscription waits this long (a fake clock: 1 s per batch)

#: (partitions of the shared delivery topic, client filter, routing filter); "direct"
#: filters are exact, so deliveries and forwards are checked against the model exactly.
PROFILES = [(0, "direct", "direct"), (2, "direct", "direct"), (0, "cbf", "cbf"),
            (3, "cbf", "cbf")]


@pytest.fixture(scope="module", autouse=True)
def _quiet() -> Iterator[None]:
    """A dead letter is logged as a warning: thousands of them here, all expected."""
    log = logging.getLogger("broker_node")
    level = log.level
    log.setLevel(logging.ERROR)
    yield
    log.setLevel(level)


@pytest.fixture(scope="module")
def space_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("fuzz") / "space.json"
    path.write_text(json.dumps(SPEC))
    return path


class _Producer:
    """What the node sends: (topic, value, headers, partition), in order."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes | None, list[Any], int]] = []

    def produce(self, topic: str, value: bytes | None, headers: Any = None,
                partition: int = -1, on_delivery: Any = None, timestamp: int = 0,
                key: Any = None) -> None:
        self.sent.append((topic, value, list(headers or []), partition))


def make_node(space_file: Path, profile: tuple[int, str, str]) -> NodeService:
    parts, client_filter, routing_filter = profile
    svc = NodeService(NodeSettings(
        node=NODE, neighbours=NEIGHBOURS, space=space_file, shared_delivery_partitions=parts,
        client_filter=client_filter, routing_filter=routing_filter, route_cache_mb=1.0,
        unsubscribe_grace_s=GRACE_S), SPACE)
    svc.connect(_Producer())  # type: ignore[arg-type]
    # The pool's delivery topics exist (no broker to create them): a client the node
    # accepts is one of them.
    svc._delivery_topics.update(T.deliver(c) for c in POOL)  # noqa: SLF001
    return svc


class Clock:
    """The controls' clock: one second per batch, so early unsubscriptions expire."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


@contextmanager
def fake_clock() -> Iterator[Clock]:
    clock = Clock()
    with mock.patch.object(controls_mod, "time", clock):
        yield clock


def step(svc: NodeService, batch: list[Message]) -> None:
    """One turn of the node's loop (NodeService.run without Kafka).

    Every input has passed everything (the order rule's watermarks far ahead, the
    subscribe topic read to its end), so the subscriptions cancelled in the batch are
    removed at its end, as the loop does.
    """
    svc.controls.subscribe_caught_up(controls_mod.time.monotonic())
    svc._dead_letters(svc.controls.expired())  # noqa: SLF001
    if batch:
        svc.process(batch)
    svc.progress.publish_caught_up(10.0**10)
    for n in NEIGHBOURS:
        svc.progress.on_heartbeat(n, 10**13, 0)
    svc._finalize()  # noqa: SLF001


# -- the stream -------------------------------------------------------------------------------
@dataclass
class Item:
    """A message, and what it is: good, or bad with words its dead letter must contain."""

    msg: Message
    bad: str | None = None  # the class of bad input
    reason: str | None = None  # expected in the dead letter's reason


@dataclass
class Model:
    """The good messages' effect, by brute force: live subscriptions and link state."""

    subs: dict[str, tuple[str, frozenset[int]]] = field(default_factory=dict)  # id -> owner
    #: cancelled in the batch now: still routed to until the batch ends (the order rule)
    retiring: dict[str, tuple[str, frozenset[int]]] = field(default_factory=dict)
    gone: list[tuple[str, str]] = field(default_factory=list)  # cancelled (client, id)
    recv: dict[str, set[int]] = field(default_factory=lambda: {n: set() for n in NEIGHBOURS})
    #: event id -> (clients, neighbours) it must reach
    expect: dict[bytes, tuple[Counter[str], Counter[str]]] = field(default_factory=dict)

    def route(self, label: int, publisher: str | None, came_from: str | None
              ) -> tuple[Counter[str], Counter[str]]:
        live = [*self.subs.values(), *self.retiring.values()]
        clients = Counter({c for c, ls in live if label in ls and c != publisher})
        nbrs = Counter({n for n in NEIGHBOURS if label in self.recv[n] and n != came_from})
        return clients, nbrs

    def advertised(self, n: str) -> set[int]:
        """What this node must advertise to neighbour ``n`` (exact mode)."""
        out = {x for _, ls in self.subs.values() for x in ls}
        for m in NEIGHBOURS:
            if m != n:
                out |= self.recv[m]
        return out


def _bad_client_reason(client: str) -> str:
    return "makes the topic name" if len(client) > 200 else "client must be a non-empty name"


class Stream:
    """Draws items, keeping the model of the good ones up to date."""

    def __init__(self, data: st.DataObject) -> None:
        self.data, self.model = data, Model()
        self.items: list[Item | None] = []  # None: the end of a batch
        #: (client, id) of the bad unsubscriptions: each once (a repeat is a duplicate,
        #: not a bad message: test_a_repeated_early_unsubscription_is_a_duplicate)
        self.cancelling: set[tuple[str, str]] = set()
        self.offset = 0
        self.ids = 0

    def draw(self, strategy: st.SearchStrategy[Any]) -> Any:
        return self.data.draw(strategy)

    def msg(self, topic: str, value: bytes | None, headers: Any = None,
            ts: int | None = None) -> Message:
        self.offset += 1
        return Message(topic=topic, partition=0, offset=self.offset, value=value,
                       headers=headers, timestamp=(1, 10 * self.offset if ts is None else ts))

    def add(self, msg: Message, bad: str | None = None, reason: str | None = None) -> None:
        self.items.append(Item(msg, bad, reason))

    def noise(self) -> list[tuple[str, bytes | None]] | None:
        """Headers a control message may carry: the node reads none of them."""
        return self.draw(st.one_of(st.none(), st.lists(st.tuples(
            st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=12))), max_size=3)))

    def labels(self, lo: int = 1, hi: int = BUDGET) -> list[int]:
        return self.draw(st.lists(st.sampled_from(LABELS), min_size=lo, max_size=hi))

    def fresh_id(self) -> str:
        self.ids += 1
        return f"s{self.ids}"

    # -- good messages ------------------------------------------------------------------------
    def subscribe(self) -> None:
        client, sid, labels = self.draw(st.sampled_from(POOL)), self.fresh_id(), self.labels()
        self.add(self.msg(SUB, encode_label_subscription(client, sid, np.array(
            labels, dtype=np.uint64)), self.noise()))
        self.model.subs[sid] = (client, frozenset(labels))

    def unsubscribe(self) -> None:
        if not self.model.subs:
            return self.subscribe()
        sid = self.draw(st.sampled_from(sorted(self.model.subs)))
        client, labels = self.model.subs.pop(sid)
        self.model.retiring[sid] = (client, labels)
        self.model.gone.append((client, sid))
        self.add(self.msg(UNSUB, encode_label_unsubscription(client, sid), self.noise()))
        return None

    def cut(self) -> None:
        """The end of a batch: the subscriptions cancelled in it are gone."""
        self.items.append(None)
        self.model.retiring.clear()

    def early(self) -> None:
        """Subscribed and cancelled, the cancellation read first: live until the batch ends."""
        client, sid, labels = self.draw(st.sampled_from(POOL)), self.fresh_id(), self.labels()
        self.add(self.msg(UNSUB, encode_label_unsubscription(client, sid), self.noise()))
        ts = 10 * self.offset - 5
        if self.draw(st.booleans()):  # meanwhile, another client cancels the same id
            other = self.draw(st.sampled_from([c for c in POOL if c != client]))
            self.cancelling.add((other, sid))
            self.add(self.msg(UNSUB, encode_label_unsubscription(other, sid), self.noise()),
                     "unsubscription: another client's early id", "unknown subscription id")
        self.add(self.msg(SUB, encode_label_subscription(client, sid, np.array(
            labels, dtype=np.uint64)), self.noise(), ts=ts))
        self.model.retiring[sid] = (client, frozenset(labels))
        self.model.gone.append((client, sid))

    def link(self) -> None:
        n = self.draw(st.sampled_from(NEIGHBOURS))
        kind = self.draw(st.sampled_from(("advertise", "withdraw")))
        labels = self.labels(1, 12)
        self.add(self.msg(LINK[n], encode_link(n, kind, np.array(labels, dtype=np.uint64)),
                          self.noise()))
        if kind == "advertise":
            self.model.recv[n] |= set(labels)
        else:
            self.model.recv[n] -= set(labels)

    def event(self) -> None:
        label = self.draw(st.sampled_from(LABELS))
        who = self.draw(st.sampled_from(("pub", *POOL, *NEIGHBOURS)))
        came_from = who if who in NEIGHBOURS else None
        origin = f"{who}/pub" if came_from else f"{NODE}/{who}"
        self.ids += 1
        eid = b"e%d" % self.ids
        headers: list[tuple[str, bytes | None]] = [
            (HEADER_LABEL, label.to_bytes(8, "big")), (HEADER_ORIGIN, origin.encode()),
            (HEADER_EVENT_ID, eid)]
        if self.draw(st.integers(0, 7)) == 0:  # an origin the node cannot read: no client
            headers[1] = (HEADER_ORIGIN, self.draw(st.sampled_from((None, b"", b"A/\xff"))))
            self.model.expect[eid] = self.model.route(label, None, came_from)
        if self.draw(st.booleans()):  # not the usual form: shuffled, with more headers
            headers += self.draw(st.lists(st.tuples(st.sampled_from(["x-a", HEADER_CLIENTS]),
                                                    st.binary(max_size=6)), max_size=2))
            headers = self.draw(st.permutations(headers))
        value = self.draw(st.one_of(st.binary(max_size=40), st.just(encode_raw_event(
            NODE, "pub", eid.decode(), {"x": 1.0, "y": "a"}))))
        topic = FWD[came_from] if came_from else PUB
        self.add(self.msg(topic, value, headers))
        self.model.expect.setdefault(
            eid, self.model.route(label, None if came_from else who, came_from))

    # -- bad messages -------------------------------------------------------------------------
    def control_topic(self) -> str:
        return self.draw(st.sampled_from((SUB, UNSUB, *LINK.values())))

    def valid_record(self, topic: str) -> bytes:
        """A good record for ``topic`` (not added to the model: it is about to be broken)."""
        if topic == SUB:
            return encode_label_subscription("ann", "z1", np.array(LABELS[:3], np.uint64))
        if topic == UNSUB:
            return encode_label_unsubscription("ann", "z1")
        n = next(k for k, v in LINK.items() if v == topic)
        return encode_link(n, "advertise", np.array(LABELS[:3], np.uint64))

    def bad_bytes(self) -> None:
        topic = self.control_topic()
        value = self.draw(st.one_of(st.none(), st.binary(max_size=60),
                                    st.binary(max_size=50).map(lambda b: MARKER + b)))
        self.add(self.msg(topic, value, self.noise()), "random bytes", "undecodable")

    def truncated(self) -> None:
        topic = self.control_topic()
        whole = self.valid_record(topic)
        cut = self.draw(st.integers(0, len(whole) - 1))
        self.add(self.msg(topic, whole[:cut], self.noise()), "truncated", "undecodable")

    def bit_flip(self) -> None:
        """A flipped bit: in the header always bad; in the body when it no longer decodes."""
        topic = self.control_topic()
        whole = bytearray(self.valid_record(topic))
        bit = self.draw(st.integers(0, 8 * len(whole) - 1))
        whole[bit // 8] ^= 1 << (bit % 8)
        try:
            if SERDE.decode(bytes(whole))[0] == SCHEMA_OF[topic]:
                whole[0] ^= 1  # still a record of the right schema: break the marker
        except Exception:  # noqa: BLE001, S110 - undecodable is what we want
            pass
        self.add(self.msg(topic, bytes(whole), self.noise()), "bit flip", "undecodable")

    def unknown_fingerprint(self) -> None:
        topic = self.control_topic()
        whole = self.valid_record(topic)
        fp = self.draw(st.binary(min_size=8, max_size=8))
        self.add(self.msg(topic, MARKER + fp + whole[HEADER_SIZE:], self.noise()),
                 "unknown fingerprint", "unknown schema fingerprint")

    def wrong_schema(self) -> None:
        topic = self.control_topic()
        others = {
            "LabelSubscription": encode_label_subscription("ann", "z2", np.array(LABELS[:1])),
            "LabelUnsubscription": encode_label_unsubscription("ann", "z2"),
            "LinkControl": encode_link("B", "advertise", np.array(LABELS[:1])),
            "RawEvent": encode_raw_event("A", "ann", "e", {"x": 1.0}),
            "RawSubscription": SERDE.encode("RawSubscription", {
                "node": "A", "client": "ann", "id": "z2", "where": "x < 3"}),
            "DeadLetter": encode_dead_letter("t[0]@1", "r", b"", None),
        }
        name = self.draw(st.sampled_from(sorted(set(others) - {SCHEMA_OF[topic]})))
        self.add(self.msg(topic, others[name], self.noise()), "wrong schema",
                 f"expected a {SCHEMA_OF[topic]}, got {name}")

    def bad_subscription(self) -> None:
        what = self.draw(st.sampled_from((
            "outside", "over budget", "ragged labels", "no labels", "bad client",
            "another client's id", "cancelled id")))
        client, sid = self.draw(st.sampled_from(POOL)), self.fresh_id()
        raw = np.array(self.labels(1, BUDGET - 1), dtype=">u8").tobytes()
        reason = {"outside": "outside this node's label space", "ragged labels": "multiple of 8",
                  "no labels": "non-empty"}
        if what == "outside":
            raw += self.draw(st.sampled_from(OUTSIDE)).to_bytes(8, "big")
        elif what == "over budget":
            n = self.draw(st.integers(BUDGET + 1, 3 * BUDGET))
            raw = np.array(LABELS[:n], dtype=">u8").tobytes()
            reason[what] = f"has {n} labels, over the label budget of {BUDGET}"
        elif what == "ragged labels":
            raw += self.draw(st.binary(min_size=1, max_size=7))
        elif what == "no labels":
            raw = b""
        elif what == "bad client":
            client = self.draw(st.sampled_from(("", "a.b", "x/y", "é", "n" * 300, "a b")))
            reason[what] = _bad_client_reason(client)
        elif what == "another client's id" and self.model.subs:
            sid = self.draw(st.sampled_from(sorted(self.model.subs)))
            owner, labels = self.model.subs[sid]
            if client == owner:  # the same id and client with other labels
                other = set(labels) ^ {LABELS[-1]}
                if not other or len(other) > BUDGET:
                    other = {LABELS[1] if LABELS[0] in labels else LABELS[0]}
                raw = np.array(sorted(other), dtype=">u8").tobytes()
            reason[what] = "already used by client"
        elif what == "cancelled id" and self.model.gone:
            client, sid = self.draw(st.sampled_from(self.model.gone))
            reason[what] = "was cancelled"
        else:
            return self.subscribe()
        self.add(self.msg(SUB, SERDE.encode("LabelSubscription", {
            "client": client, "id": sid, "labels": raw, "where": None}), self.noise()),
            f"subscription: {what}", reason[what])
        return None

    def bad_unsubscription(self) -> None:
        what = self.draw(st.sampled_from(("another client's id", "unknown id", "bad client")))
        client = self.draw(st.sampled_from(POOL))
        if what == "another client's id" and self.model.subs:
            sid = self.draw(st.sampled_from(sorted(self.model.subs)))
            owner = self.model.subs[sid][0]
            client = self.draw(st.sampled_from([c for c in POOL if c != owner]))
            reason = f"belongs to client {owner!r}, not {client!r}"
        elif what == "another client's id" and self.model.gone:  # an early or a cancelled id
            owner, sid = self.draw(st.sampled_from(self.model.gone))
            client = self.draw(st.sampled_from([c for c in POOL if c != owner]))
            reason = (f"belongs to client {owner!r}, not {client!r}"  # still in the state
                      if sid in self.model.retiring else "unknown subscription id")
        elif what == "bad client":
            client, sid = self.draw(st.sampled_from(("", "a.b", "n" * 300))), "s1"
            reason = _bad_client_reason(client)
        else:
            sid, reason = f"ghost{self.fresh_id()}", "unknown subscription id"
        if (client, sid) in self.cancelling:
            client, sid, reason = "ann", f"ghost{self.fresh_id()}", "unknown subscription id"
        self.cancelling.add((client, sid))
        self.add(self.msg(UNSUB, encode_label_unsubscription(client, sid), self.noise()),
                 f"unsubscription: {what}", reason)

    def bad_link(self) -> None:
        n = self.draw(st.sampled_from(NEIGHBOURS))
        # (No labels is no bad input: an empty link control is a restarted node's probe.)
        what = self.draw(st.sampled_from(("outside", "ragged labels", "another source")))
        source, raw = n, np.array(self.labels(1, 12), dtype=">u8").tobytes()
        reason = {"outside": "outside this node's label space",
                  "ragged labels": "multiple of 8"}
        if what == "outside":
            raw += self.draw(st.sampled_from(OUTSIDE)).to_bytes(8, "big")
        elif what == "ragged labels":
            raw += b"\x01"
        else:
            source = self.draw(st.sampled_from([m for m in (*NEIGHBOURS, "Z", NODE)
                                                if m != n]))
            reason[what] = f"names source {source!r}"
        kind = self.draw(st.sampled_from(("ADVERTISE", "WITHDRAW")))
        self.add(self.msg(LINK[n], SERDE.encode("LinkControl", {
            "source": source, "kind": kind, "labels": raw}), self.noise()),
            f"link: {what}", reason[what])

    def bad_event(self) -> None:
        what = self.draw(st.sampled_from(("no label", "width", "no value", "no headers",
                                          "outside")))
        self.ids += 1
        rest = [(HEADER_ORIGIN, b"A/pub"), (HEADER_EVENT_ID, b"bad%d" % self.ids)]
        reason = "exactly 8 bytes"
        headers: list[tuple[str, bytes | None]] | None
        if what == "no label":
            headers, reason = rest, f"without a {HEADER_LABEL} header"
        elif what == "width":
            width = self.draw(st.integers(0, 16).filter(lambda w: w != 8))
            headers = [(HEADER_LABEL, LABELS[0].to_bytes(16, "big")[-width:] if width
                        else b""), *rest]
        elif what == "no value":
            headers = [(HEADER_LABEL, None), *rest]
        elif what == "no headers":
            headers, reason = None, f"without a {HEADER_LABEL} header"
        else:
            label = self.draw(st.sampled_from(OUTSIDE))
            headers, reason = [(HEADER_LABEL, label.to_bytes(8, "big")), *rest], "outside"
        topic = self.draw(st.sampled_from((PUB, *FWD.values())))
        self.add(self.msg(topic, self.draw(st.binary(max_size=20)), headers),
                 f"event: {what}", reason)


GOOD = ("subscribe", "subscribe", "unsubscribe", "early", "link", "event", "event", "event",
        "cut")
BAD = ("bad_bytes", "truncated", "bit_flip", "unknown_fingerprint", "wrong_schema",
       "bad_subscription", "bad_subscription", "bad_unsubscription", "bad_link", "bad_event",
       "bad_event")


# -- running it -------------------------------------------------------------------------------
def _outputs(svc: NodeService, start: int) -> tuple[list[Any], list[Any], list[Any]]:
    """(dead letters, link messages, deliveries and forwards) sent since ``start``."""
    sent = svc.committer.producer.sent[start:]  # type: ignore[union-attr]
    dead = [s for s in sent if s[0] == T.deadletter]
    links = [s for s in sent if s[0].startswith("dls.link.")]
    events = [s for s in sent if s[0] != T.deadletter and not s[0].startswith("dls.link.")]
    return dead, links, events


def _by_partition(sent: list[Any]) -> dict[tuple[str, int], list[Any]]:
    """Messages per (topic, partition), in order: what a reader can tell apart.

    (The node writes a run's deliveries, then its forwards: where a bad control message
    splits a run in two, the interleaving across topics differs, not any topic's order.)
    """
    out: dict[tuple[str, int], list[Any]] = {}
    for topic, value, headers, part in sent:
        out.setdefault((topic, part), []).append((value, headers))
    return out


def _link_labels(links: list[Any]) -> Counter[tuple[str, str, int]]:
    out: Counter[tuple[str, str, int]] = Counter()
    for topic, value, _, _ in links:
        rec = decode_link(value)
        out.update((topic.rsplit(".", 1)[1], rec["kind"], int(x)) for x in rec["labels"])
    return out


def _reached(events: list[Any]) -> dict[bytes, tuple[Counter[str], Counter[str]]]:
    """Event id -> (clients delivered to, neighbours forwarded to), from what was sent."""
    out: dict[bytes, tuple[Counter[str], Counter[str]]] = {}
    for topic, _, headers, _ in events:
        h = dict(headers)
        clients, nbrs = out.setdefault(h[HEADER_EVENT_ID], (Counter(), Counter()))
        if topic == T.shared_deliver:
            clients.update(h[HEADER_CLIENTS].decode().split(","))
        elif topic.startswith("dls.deliver."):
            clients[topic[len("dls.deliver."):]] += 1
        else:
            assert topic.startswith(f"dls.fwd.{NODE}."), topic
            nbrs[topic.rsplit(".", 1)[1]] += 1
    return out


def run_stream(space_file: Path, profile: tuple[int, str, str], data: st.DataObject,
               max_ops: int) -> None:
    stream = Stream(data)
    for _ in range(data.draw(st.integers(1, max_ops))):
        getattr(stream, data.draw(st.sampled_from(GOOD + BAD)))()
    stream.cut()
    batches: list[list[Item]] = [[]]
    for item in stream.items:  # a cut (None) ends a batch
        if item is None:
            batches.append([])
        else:
            batches[-1].append(item)
    items = [i for batch in batches for i in batch]
    exact = profile[1] == "direct"
    with fake_clock() as clock:
        x, y = make_node(space_file, profile), make_node(space_file, profile)
        for batch in [*batches, [], [], [], []]:  # then time for early ones to expire
            clock.now += 1.0
            before = [len(n.committer.producer.sent) for n in (x, y)]  # type: ignore[union-attr]
            step(x, [i.msg for i in batch])
            step(y, [i.msg for i in batch if i.bad is None])
            (_, xl, xe), (yd, yl, ye) = _outputs(x, before[0]), _outputs(y, before[1])
            assert yd == []
            assert state_digest(x.state) == state_digest(y.state)
            assert _by_partition(xe) == _by_partition(ye)  # deliveries and forwards
            assert _link_labels(xl) == _link_labels(yl)
    _check_dead_letters(x, items)
    reached = _reached(_outputs(x, 0)[2])
    for eid, (clients, nbrs) in stream.model.expect.items():
        got_c, got_n = reached.get(eid, (Counter(), Counter()))
        if exact:
            assert (got_c, got_n) == (clients, nbrs), eid
        else:  # Bloom filters: false positives allowed, never a missed one
            assert not clients - got_c and not nbrs - got_n, eid
    for n in NEIGHBOURS:
        assert set(x.state.advertised_to(n).tolist()) == stream.model.advertised(n)
        assert set(x.state.received_from(n).tolist()) == stream.model.recv[n]
    assert {sid: (c, frozenset(x.state.subscription(sid)[1].tolist()))
            for sid, (c, _) in stream.model.subs.items()} == stream.model.subs
    assert len(x.state) == len(stream.model.subs)


def _check_dead_letters(x: NodeService, items: list[Item]) -> None:
    """One dead letter per bad message, none for a good one, each with its reason."""
    letters = [decode_dead_letter(v) for _, v, _, _ in _outputs(x, 0)[0]]
    by_source = Counter(d["source"] for d in letters)
    bad = {f"{i.msg.topic()}[0]@{i.msg.offset()}": i for i in items if i.bad}
    assert set(by_source) == set(bad), {s: bad.get(s) for s in set(by_source) ^ set(bad)}
    assert max(by_source.values(), default=1) == 1, by_source.most_common(3)
    for d in letters:
        item = bad[d["source"]]
        assert item.reason is not None and item.reason in d["reason"], (item.bad, d["reason"])
        assert d["raw"] == (item.msg.value() or b"")
    assert x.metrics.dead_letters == len(bad)


@settings(max_examples=60, deadline=None, report_multiple_bugs=False,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data(), profile=st.sampled_from(PROFILES))
def test_bad_input_is_one_dead_letter_and_changes_nothing(space_file: Path,
                                                          data: st.DataObject,
                                                          profile: tuple[int, str, str]) -> None:
    run_stream(space_file, profile, data, max_ops=25)


@pytest.mark.slow
@settings(max_examples=int(os.environ.get("DLS_FUZZ_EXAMPLES", "120")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data(), profile=st.sampled_from(PROFILES))
def test_bad_input_long_run(space_file: Path, data: st.DataObject,
                            profile: tuple[int, str, str]) -> None:
    run_stream(space_file, profile, data, max_ops=80)


# -- regression tests of what the fuzz found ----------------------------------------------------
def _letters(svc: NodeService) -> list[dict[str, Any]]:
    return [decode_dead_letter(v) for _, v, _, _ in _outputs(svc, 0)[0]]


def _at(topic: str, offset: int, value: bytes | None, headers: Any = None,
        ts: int = 0) -> Message:
    return Message(topic=topic, partition=0, offset=offset, value=value, headers=headers,
                   timestamp=(1, ts))


def test_another_clients_cancellation_of_an_early_id_does_not_take_its_place(
        space_file: Path) -> None:
    """Found by the fuzz: early unsubscriptions were kept by id alone, so bob's bad one
    replaced ann's; ann's subscription then went live although ann had cancelled it."""
    labels = np.array(LABELS[:2], dtype=np.uint64)
    with fake_clock() as clock:
        svc = make_node(space_file, PROFILES[0])
        step(svc, [_at(UNSUB, 1, encode_label_unsubscription("ann", "s9"), ts=20),
                   _at(UNSUB, 2, encode_label_unsubscription("bob", "s9"), ts=25),
                   _at(SUB, 1, encode_label_subscription("ann", "s9", labels), ts=10)])
        before = state_digest(svc.state)
        assert len(svc.state) == 0
        clock.now += 10
        step(svc, [])
    assert state_digest(svc.state) == before
    (letter,) = _letters(svc)
    assert letter["source"] == f"{UNSUB}[0]@2"
    assert letter["reason"] == "unknown subscription id 's9' (client 'bob')"


@pytest.mark.parametrize("client", ["", "a.b", "é", "n" * 300])
@pytest.mark.parametrize("partitions", [0, 2])
def test_a_client_name_no_topic_can_carry_is_a_dead_letter(space_file: Path, client: str,
                                                           partitions: int) -> None:
    """Found by the fuzz: the subscription was applied, then making its delivery topic's
    name (or its shared partition) raised out of process(): the node stopped, and stopped
    again on every restart, replaying it."""
    svc = make_node(space_file, (partitions, "direct", "direct"))
    label = LABELS[3]
    step(svc, [_at(SUB, 1, encode_label_subscription(client, "s1", np.array([label]))),
               _at(PUB, 1, b"v", [(HEADER_LABEL, label.to_bytes(8, "big")),
                                  (HEADER_ORIGIN, b"A/pub"), (HEADER_EVENT_ID, b"e1")])])
    (letter,) = _letters(svc)
    assert letter["field"] == "client" and letter["source"] == f"{SUB}[0]@1"
    assert len(svc.state) == 0 and svc.state.clients == ()


@pytest.mark.parametrize("label", OUTSIDE)
@pytest.mark.parametrize("usual", [True, False])
def test_an_event_label_outside_the_space_is_a_dead_letter(space_file: Path, label: int,
                                                           usual: bool) -> None:
    """Found by the fuzz: such an event was routed to nobody, silently."""
    svc = make_node(space_file, PROFILES[0])
    headers = [(HEADER_LABEL, label.to_bytes(8, "big")), (HEADER_ORIGIN, b"A/pub"),
               (HEADER_EVENT_ID, b"e1")]
    step(svc, [_at(PUB, 7, b"v", headers if usual else headers[::-1])])
    (letter,) = _letters(svc)
    assert letter["reason"] == f"event label {label:#x} is outside this node's label space"
    assert (letter["field"], letter["source"]) == (HEADER_LABEL, f"{PUB}[0]@7")
    assert svc.metrics.events_in == 0


def test_a_link_message_naming_another_source_is_a_dead_letter(space_file: Path) -> None:
    """Found by the fuzz: the record's source was never read; C's advertisement written to
    B's topic was taken as B's."""
    svc = make_node(space_file, PROFILES[0])
    before = state_digest(svc.state)
    step(svc, [_at(LINK["B"], 1, encode_link("C", "advertise", np.array(LABELS[:2])))])
    (letter,) = _letters(svc)
    assert letter["reason"] == f"a link message on {LINK['B']} names source 'C'"
    assert state_digest(svc.state) == before


@pytest.mark.parametrize("n", [BUDGET + 1, 5 * BUDGET])
def test_a_subscription_over_the_label_budget_is_a_dead_letter(space_file: Path,
                                                               n: int) -> None:
    """The node checks the budget itself (it took any number of labels), in a run of
    subscriptions (the batch path) as alone."""
    svc = make_node(space_file, PROFILES[0])
    big = encode_label_subscription("bob", "big", np.array(LABELS[:n]))
    step(svc, [_at(SUB, 1, encode_label_subscription("ann", "s1", np.array(LABELS[:1]))),
               _at(SUB, 2, big),
               _at(SUB, 3, encode_label_subscription("ann", "s3", np.array(LABELS[:BUDGET])))])
    step(svc, [_at(SUB, 4, big)])
    assert [(d["reason"], d["field"], d["value"]) for d in _letters(svc)] == [
        (f"subscription 'big' of client 'bob' has {n} labels, over the label budget of "
         f"{BUDGET}", "labels", str(n))] * 2
    assert len(svc.state) == 2 and svc.state.clients == ("ann",)


def test_a_repeated_early_unsubscription_is_a_duplicate(space_file: Path) -> None:
    """Found by the fuzz: a second unsubscription of an id not seen yet replaced the
    first, which then had no dead letter. A repeat is a duplicate (counted), as a repeat of
    a done unsubscription is; the later timestamp of the two is the one that counts."""
    labels = np.array(LABELS[:1], dtype=np.uint64)
    with fake_clock() as clock:
        svc = make_node(space_file, PROFILES[0])
        step(svc, [_at(UNSUB, 1, encode_label_unsubscription("bob", "s8"), ts=10),
                   _at(UNSUB, 2, encode_label_unsubscription("bob", "s8"), ts=30),
                   _at(UNSUB, 3, encode_label_unsubscription("ann", "s9"), ts=10),
                   _at(UNSUB, 4, encode_label_unsubscription("ann", "s9"), ts=30),
                   _at(SUB, 1, encode_label_subscription("ann", "s9", labels), ts=20)])
        assert svc.metrics.duplicates == 2 and len(svc.state) == 0
        clock.now += 10
        step(svc, [])
    (letter,) = _letters(svc)
    assert letter["source"] == f"{UNSUB}[0]@1"
    assert letter["reason"] == "unknown subscription id 's8' (client 'bob')"
