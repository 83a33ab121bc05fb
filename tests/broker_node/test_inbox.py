"""What the inbox makes of consumed messages: events, control records, dead letters."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from confluent_kafka import Message

from broker_node.inbox import (
    Beat,
    DeadLetter,
    Inbox,
    LinkChange,
    RoutedIds,
    Subscribe,
    Unsubscribe,
    publication_ms,
)
from broker_node.metrics import Metrics
from broker_node.state import BrokerState
from connectors.serde import (
    SERDE,
    encode_label_subscription,
    encode_label_unsubscription,
    encode_link,
)
from connectors.topics import (
    HEADER_CLIENTS,
    HEADER_DLQ_REASON,
    HEADER_DLQ_SOURCE,
    HEADER_EVENT_ID,
    HEADER_LABEL,
    HEADER_ORIGIN,
    HEADER_PUBLISHED,
    Topics,
)
from dls.mapping import event_label
from dls.space import ContentSpace

SPEC = {"attributes": [{"name": "x", "type": "numeric", "low": 0, "high": 100,
                        "granules": 8}]}
PUBLISH, LINK, FWD = "dls.node.A.publish", "dls.link.B.A", "dls.fwd.B.A"


@pytest.fixture
def space(tmp_path: Path) -> ContentSpace:
    path = tmp_path / "space.json"
    path.write_text(json.dumps(SPEC))
    return ContentSpace.from_json(path)


@pytest.fixture
def inbox(space: ContentSpace) -> Inbox:
    state = BrokerState.for_space("A", ["B"], space)
    state.client_index("ann")
    return Inbox("A", Topics("dls"), state, Metrics())


def _event(topic: str, offset: int, headers: list[tuple[str, Any]]) -> Message:
    return Message(topic=topic, partition=0, offset=offset, value=b"e%d" % offset,
                   headers=headers)


def _usual(label: int, origin: bytes, eid: bytes) -> list[tuple[str, bytes]]:
    return [(HEADER_LABEL, label.to_bytes(8, "big")), (HEADER_ORIGIN, origin),
            (HEADER_EVENT_ID, eid)]


def test_events_are_keyed_by_label_publisher_and_neighbour(inbox: Inbox,
                                                           space: ContentSpace) -> None:
    label = event_label(space, {"x": 10})
    run = inbox.events([
        _event(PUBLISH, 0, _usual(label, b"C/pub", b"e0")),  # the usual key: 8 bytes
        _event(PUBLISH, 1, _usual(label, b"A/ann", b"e1")),  # a local client published it
        _event(FWD, 2, _usual(label, b"B/bob", b"e2")),  # from neighbour B
        _event(PUBLISH, 3, [(HEADER_EVENT_ID, b"e3"), (HEADER_ORIGIN, b"C/pub"),
                            (HEADER_LABEL, label.to_bytes(8, "big")),
                            (HEADER_CLIENTS, b"zed")]),  # unusual order, a stray header
    ])
    assert run.keys == [label.to_bytes(8, "big"), (label, 0, -1), (label, -1, 0),
                        label.to_bytes(8, "big")]
    assert [m.offset() for m in run.msgs] == [0, 1, 2, 3]
    assert run.carried[3] == [(HEADER_EVENT_ID, b"e3"), (HEADER_ORIGIN, b"C/pub"),
                              (HEADER_LABEL, label.to_bytes(8, "big"))]  # dls-clients gone
    assert run.dead == []


def test_bad_events_are_dead_letters_in_order(inbox: Inbox, space: ContentSpace) -> None:
    label = event_label(space, {"x": 10})
    run = inbox.events([
        _event(PUBLISH, 0, [(HEADER_ORIGIN, b"C/pub")]),
        _event(PUBLISH, 1, [(HEADER_LABEL, b"\x01")]),
        _event(PUBLISH, 2, [(HEADER_LABEL, None)]),
        _event(PUBLISH, 3, _usual(label, b"C/pub", b"ok")),
    ])
    assert [m.offset() for m in run.msgs] == [3]
    reasons = [d.reason for d in run.dead]
    assert reasons[0] == f"event without a {HEADER_LABEL} header"
    assert all(d.field == HEADER_LABEL for d in run.dead)
    assert run.dead[1].value == "01"
    assert [d.source for d in run.dead] == [f"{PUBLISH}[0]@{i}" for i in range(3)]
    assert run.dead[2].headers == [(HEADER_LABEL, b"")]


def test_the_publication_time_header_is_the_events_time(inbox: Inbox,
                                                        space: ContentSpace) -> None:
    """The Spark job's events carry their raw record's time: it wins over the record's."""
    label = event_label(space, {"x": 10})
    published = (1_700_000_000_123).to_bytes(8, "big")
    msgs = [Message(topic=PUBLISH, partition=0, offset=i, value=b"e", timestamp=(1, 1_800_000),
                    headers=h) for i, h in enumerate([
                        [*_usual(label, b"C/pub", b"e0"), (HEADER_PUBLISHED, published)],
                        [(HEADER_PUBLISHED, published), *_usual(label, b"C/pub", b"e1")],
                        _usual(label, b"C/pub", b"e2")])]
    run = inbox.events(msgs)
    assert run.dead == [] and run.keys == [label.to_bytes(8, "big")] * 3
    assert run.carried[0][3] == (HEADER_PUBLISHED, published)  # passed on to every copy
    assert [publication_ms(m, c) for m, c in zip(run.msgs, run.carried, strict=True)] == [
        1_700_000_000_123, 1_700_000_000_123, 1_800_000]


@pytest.mark.parametrize("value", [b"\x01" * 7, b"", None, b"\x80" + b"\x00" * 7,
                                   b"\x00" * 9])
@pytest.mark.parametrize("first", [False, True])
def test_a_bad_publication_time_header_is_a_dead_letter(inbox: Inbox, space: ContentSpace,
                                                        value: bytes | None,
                                                        first: bool) -> None:
    label = event_label(space, {"x": 10})
    bad = (HEADER_PUBLISHED, value)
    usual = _usual(label, b"C/pub", b"e0")
    run = inbox.events([_event(PUBLISH, 0, [bad, *usual] if first else [*usual, bad]),
                        _event(PUBLISH, 1, _usual(label, b"C/pub", b"e1"))])
    assert [m.offset() for m in run.msgs] == [1]
    (dead,) = run.dead
    assert (dead.field, dead.value) == (HEADER_PUBLISHED, (value or b"").hex())
    assert dead.reason.startswith(f"a {HEADER_PUBLISHED} header must be 8 bytes")
    assert dead.source == f"{PUBLISH}[0]@0"


def test_a_repeated_event_is_dropped_counted_and_said(
        inbox: Inbox, space: ContentSpace, caplog: pytest.LogCaptureFixture) -> None:
    label = event_label(space, {"x": 10})
    with caplog.at_level(logging.WARNING, logger="broker_node"):
        first = inbox.events([_event(PUBLISH, 0, _usual(label, b"C/pub", b"same")),
                              _event(PUBLISH, 1, _usual(label, b"C/pub", b"same")),
                              _event(PUBLISH, 2, _usual(label, b"B/pub", b"same"))])
    assert [m.offset() for m in first.msgs] == [0, 2]  # another origin: another event
    assert inbox.metrics.duplicates == 1
    assert f"1 repeated event(s) skipped, the latest 'same' of C/pub at {PUBLISH}[0]@1" in (
        caplog.text)  # an id used for two events is lost: said where an operator sees it
    assert ("C/pub", "same") not in inbox.routed.recent  # the batch is not committed yet
    inbox.routed.settle()
    assert ("C/pub", "same") in inbox.routed.recent
    again = inbox.events([_event(PUBLISH, 3, _usual(label, b"C/pub", b"same"))])
    assert again.msgs == [] and inbox.metrics.duplicates == 2


def test_a_repeat_of_an_event_with_a_huge_id_is_dropped_and_kept_small(
        inbox: Inbox, space: ContentSpace) -> None:
    """Ids and origins come from headers: the memory keeps a digest of a long key."""
    from connectors.recent import ROUTED_KEY_BYTES

    label = event_label(space, {"x": 10})
    huge, other = b"i" * 500_000, b"i" * 499_999 + b"j"
    run = inbox.events([_event(PUBLISH, 0, _usual(label, b"C/pub", huge)),
                        _event(PUBLISH, 1, _usual(label, b"C/pub", huge)),
                        _event(PUBLISH, 2, _usual(label, b"C/pub", other))])
    assert [m.offset() for m in run.msgs] == [0, 2] and inbox.metrics.duplicates == 1
    inbox.routed.settle()
    assert max(map(len, inbox.routed.recent.new)) <= ROUTED_KEY_BYTES
    assert ("C/pub", huge) in inbox.routed.recent  # the SDK's routed_key: the same key
    again = inbox.events([_event(PUBLISH, 3, _usual(label, b"C/pub", huge))])
    assert again.msgs == [] and inbox.metrics.duplicates == 2


def test_a_failed_batch_forgets_its_ids() -> None:
    routed = RoutedIds(10)
    routed.batch[b"o\x00e"] = None
    routed.drop()
    routed.settle()
    assert ("o", "e") not in routed.recent


def test_control_records(inbox: Inbox) -> None:
    labels = np.array([1 << 40], dtype=np.uint64)
    sub = inbox.control(_event("dls.node.A.subscribe", 0, []))
    assert isinstance(sub, DeadLetter) and sub.reason.startswith("undecodable")
    good = Message(topic="dls.node.A.subscribe", partition=0, offset=1,
                   value=encode_label_subscription("ann", "s1", labels, None))
    rec = inbox.control(good)
    assert isinstance(rec, Subscribe) and (rec.client, rec.sub_id) == ("ann", "s1")
    assert rec.labels == labels.astype(">u8").tobytes()
    wrong = Message(topic="dls.node.A.subscribe", partition=0, offset=2,
                    value=encode_label_unsubscription("ann", "s1"))
    letter = inbox.control(wrong)
    assert isinstance(letter, DeadLetter)
    assert letter.reason == "expected a LabelSubscription, got LabelUnsubscription"
    assert (letter.field, letter.value) == ("schema", "LabelUnsubscription")
    unsub = inbox.control(Message(topic="dls.node.A.unsubscribe", partition=0, offset=0,
                                  value=encode_label_unsubscription("ann", "s1")))
    assert isinstance(unsub, Unsubscribe) and unsub.sub_id == "s1"
    link = inbox.control(Message(topic=LINK, partition=0, offset=0,
                                 value=encode_link("B", "ADVERTISE", labels)))
    assert isinstance(link, LinkChange) and (link.source, link.kind) == ("B", "advertise")


def test_events_and_link_control_come_on_topics_of_their_own(inbox: Inbox) -> None:
    assert inbox.is_event(_event(PUBLISH, 0, []))
    assert inbox.is_event(_event(FWD, 0, []))
    assert inbox.is_event(_event(FWD, 0, [(HEADER_LABEL, b"x")]))
    assert not inbox.is_event(_event(LINK, 0, [(HEADER_LABEL, b"x")]))  # a dead letter
    assert not inbox.is_event(_event(LINK, 0, []))
    assert not inbox.is_event(_event("dls.node.A.subscribe", 0, [(HEADER_LABEL, b"x")]))


def test_a_dead_letter_message_names_its_source_and_reason() -> None:
    msg = _event(PUBLISH, 7, [(HEADER_LABEL, b"\x01")])
    value, headers = DeadLetter.of(msg, "bad label", HEADER_LABEL, "01").message()
    name, rec = SERDE.decode(value)
    assert name == "DeadLetter"
    assert (rec["source"], rec["reason"], rec["field"], rec["raw"]) == \
        (f"{PUBLISH}[0]@7", "bad label", HEADER_LABEL, b"e7")
    assert dict(headers) == {HEADER_DLQ_REASON: b"bad label",
                             HEADER_DLQ_SOURCE: f"{PUBLISH}[0]@7".encode()}


def test_a_dead_letter_of_a_large_message_cuts_its_value_and_headers() -> None:
    from broker_node.oversize import DEAD_LETTER_HEADER_BYTES, DEAD_LETTER_RAW_BYTES

    big = [(f"h{i}", b"v" * 1000) for i in range(100)]  # 100 headers of 1,002 bytes
    letter = DeadLetter("t[0]@1", "undecodable", b"r" * 900_000, big)
    value, headers = letter.message()
    _, rec = SERDE.decode(value)
    assert rec["raw"] == b"r" * DEAD_LETTER_RAW_BYTES
    kept = DEAD_LETTER_HEADER_BYTES // 1002
    assert list(rec["headers"]) == [f"h{i}" for i in range(kept)]
    assert rec["reason"] == (f"undecodable (raw value cut to {DEAD_LETTER_RAW_BYTES:,} of "
                             f"900,000 bytes) ({100 - kept} of 100 headers left out)")
    assert dict(headers)[HEADER_DLQ_REASON] == rec["reason"].encode()
    assert len(value) < DEAD_LETTER_RAW_BYTES + DEAD_LETTER_HEADER_BYTES + 1000
    small = DeadLetter("t[0]@1", "undecodable", b"r", big[:3]).message()[0]
    assert SERDE.decode(small)[1]["reason"] == "undecodable"  # nothing cut: as it was


def test_a_heartbeat_on_a_forwarded_event_topic_is_read_as_one(inbox: Inbox) -> None:
    from connectors.serde import encode_heartbeat
    from connectors.topics import HEARTBEAT_KEY

    beat = Message(topic=FWD, partition=0, offset=3, key=HEARTBEAT_KEY,
                   value=encode_heartbeat("B", 1234, 56, True))
    assert not inbox.is_event(beat)
    rec = inbox.control(beat)
    assert isinstance(rec, Beat)
    assert (rec.source, rec.watermark_ms, rec.link_applied, rec.wants_watermark) == (
        "B", 1234, 56, True)
    spoofed = inbox.control(Message(topic=FWD, partition=0, offset=4, key=HEARTBEAT_KEY,
                                    value=encode_heartbeat("C", 1, 1)))
    assert isinstance(spoofed, DeadLetter) and "must come from B" in spoofed.reason


# -- clients' own input topics (client_inputs) -------------------------------------------------
OWN_PUB, OWN_SUB = "dls.node.A.client.bob.publish", "dls.node.A.client.bob.subscribe"


def test_a_clients_own_topics_are_learned_by_kind(inbox: Inbox) -> None:
    assert inbox.learn(OWN_PUB) and inbox.learn(OWN_SUB)
    assert not inbox.learn("dls.node.B.client.bob.publish")  # another node's client
    assert not inbox.learn(LINK)
    assert OWN_PUB in inbox.publish_topics and OWN_SUB in inbox.subscribe_topics
    assert inbox.is_event(_event("dls.node.A.client.eve.publish", 0, []))  # learned on sight
    assert not inbox.is_event(_event("dls.node.A.client.eve.unsubscribe", 0, []))


def test_an_event_on_a_clients_own_topic_gets_that_clients_origin(
        inbox: Inbox, space: ContentSpace) -> None:
    inbox.learn(OWN_PUB)
    label = event_label(space, {"x": 10})
    honest = _usual(label, b"A/bob", b"1")
    forged = _usual(label, b"A/ann", b"2") + [(HEADER_PUBLISHED, (5).to_bytes(8, "big"))]
    bare = [(HEADER_EVENT_ID, b"3"), ("app", b"v"), (HEADER_LABEL, label.to_bytes(8, "big"))]
    run = inbox.events([_event(OWN_PUB, 0, honest), _event(OWN_PUB, 1, forged),
                        _event(OWN_PUB, 2, bare)])
    assert run.carried[0] is honest  # as it came: nothing to change
    label8 = label.to_bytes(8, "big")
    assert run.carried[1] == _usual(label, b"A/bob", b"2")  # no publication time either
    assert run.carried[2] == _usual(label, b"A/bob", b"3") + [("app", b"v")]
    assert inbox.metrics.origins_replaced == 1  # a missing origin is no forgery
    # bob is no local client of the bank yet: keyed by label, as any other publisher
    assert run.keys == [label8, label8, label8]
    # ann's own event with the same id is no repeat of bob's
    again = inbox.events([_event(PUBLISH, 3, _usual(label, b"A/ann", b"2"))])
    assert len(again.msgs) == 1


def test_a_control_message_on_a_clients_own_topic_may_name_only_that_client(
        inbox: Inbox) -> None:
    labels = np.array([1 << 40], dtype=np.uint64)
    own = inbox.control(Message(topic=OWN_SUB, partition=0, offset=0,
                                value=encode_label_subscription("bob", "s1", labels, None)))
    assert isinstance(own, Subscribe) and own.client == "bob"
    other = inbox.control(Message(topic=OWN_SUB, partition=0, offset=1,
                                  value=encode_label_subscription("ann", "s2", labels, None)))
    assert isinstance(other, DeadLetter) and (other.field, other.value) == ("client", "ann")
    assert "a client acts only for itself" in other.reason
    cancel = inbox.control(Message(topic="dls.node.A.client.bob.unsubscribe", partition=0,
                                   offset=0, value=encode_label_unsubscription("ann", "s1")))
    assert isinstance(cancel, DeadLetter) and cancel.field == "client"
    wrong = inbox.control(Message(topic=OWN_SUB, partition=0, offset=2,
                                  value=encode_label_unsubscription("bob", "s1")))
    assert isinstance(wrong, DeadLetter) and wrong.field == "schema"
