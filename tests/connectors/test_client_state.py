"""A client's state without a broker: subscription records, acknowledgements, and how a
Client takes what its subscriptions topic holds."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from confluent_kafka import Message

from connectors.client import Client
from connectors.client_state import StoredSubscription, ack_of, decode_stored, encode_stored
from connectors.exceptions import SerdeError
from connectors.recent import RecentKeys
from connectors.serde import encode_raw_event
from connectors.topics import HEADER_ACK, HEADER_CLIENTS, HEADER_LABEL, encode_label
from dls.mapping import event_label
from dls.predicates import Subscription
from dls.space import ContentSpace

SPACE = ContentSpace.from_spec({"attributes": [
    {"name": "price", "type": "numeric", "low": 0, "high": 100, "granules": 8}]})
CHEAP = Subscription(SPACE, "price < 45").to_json()


@pytest.fixture
def alice() -> Iterator[Client]:
    client = Client("127.0.0.1:1", "A", "alice", SPACE)
    yield client
    client.close()


def _ack(sid: str, clients: str | None = None, topic: str = "dls.deliver.alice") -> Message:
    headers: list[tuple[str, str | bytes | None]] = [(HEADER_ACK, sid.encode())]
    if clients is not None:
        headers.append((HEADER_CLIENTS, clients.encode()))
    return Message(topic=topic, partition=0, offset=1, value=None, headers=headers)


def _event(price: float, eid: str) -> Message:
    attrs = {"price": price}
    return Message(topic="dls.deliver.alice", partition=0, offset=2,
                   value=encode_raw_event("B", "bob", eid, attrs, b""),
                   headers=[(HEADER_LABEL, encode_label(event_label(SPACE, attrs)))])


# ------------------------------------------------------------------------ records


def test_a_record_rebuilds_the_subscription_exactly() -> None:
    rec = decode_stored(b"s1", encode_stored(CHEAP, "A", False), "t[0]@4")
    assert rec == StoredSubscription("s1", CHEAP, "A", False, "t[0]@4")
    assert rec.where is not None
    again = Subscription(SPACE, rec.where)
    assert str(again) == "price < 45"
    assert again.matches({"price": 44.9}) and not again.matches({"price": 45.0})
    assert decode_stored(b"s1", None).where is None  # a tombstone


@pytest.mark.parametrize(("key", "value", "field", "text"), [
    (None, b"{}", "key", "has no key"),
    (b"s1", b"not json", "value", "is not JSON"),
    (b"s1", b'{"node": "A"}', "where", "has no 'where' list"),
    (b"s1", b'["price < 3"]', "where", "has no 'where' list"),
])
def test_a_bad_record_is_a_serde_error(key: bytes | None, value: bytes, field: str,
                                       text: str) -> None:
    with pytest.raises(SerdeError, match=text) as err:
        decode_stored(key, value, "t[0]@9")
    assert err.value.field == field and "t[0]@9" in str(err.value)


# ------------------------------------------------------------------- acknowledgements


def test_ack_of_reads_only_valueless_messages_with_the_header() -> None:
    assert ack_of(_ack("s1")) == "s1"
    assert ack_of(_event(10.0, "e1")) is None
    with_value = Message(topic="t", value=b"x", headers=[(HEADER_ACK, b"s1")])
    assert ack_of(with_value) is None
    assert ack_of(Message(topic="t", value=None)) is None  # a bare tombstone


def test_an_ack_is_no_delivery_and_counts_nothing(alice: Client) -> None:
    alice.subscriptions["cheap"] = Subscription(SPACE, "price < 45")
    seen = RecentKeys(10)
    assert alice._take(_ack("cheap"), seen) is None
    assert (alice.delivered, alice.undecodable, alice.false_positives) == (0, 0, 0)
    shared = Client("127.0.0.1:1", "A", "alice", SPACE, shared_delivery_partitions=4)
    try:
        assert shared._take(_ack("x", "alice", "dls.deliver"), seen) is None
        assert shared._acked_for_me(_ack("x", "bob,alice", "dls.deliver"))
        assert not shared._acked_for_me(_ack("x", "bob", "dls.deliver"))
        assert shared.undecodable == 0
    finally:
        shared.close()
    assert alice._acked_for_me(_ack("x"))  # the own topic: every ack is this client's


# ------------------------------------------------------------- taking stored records


def test_stored_records_become_the_live_subscriptions(
        alice: Client, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    sent: list[tuple[str, bytes]] = []
    monkeypatch.setattr(alice, "_send", lambda topic, value: sent.append((topic, value)))
    alice.subscriptions["local"] = Subscription(SPACE, "price > 90")
    records = [
        StoredSubscription("s1", CHEAP, "A", True, "t[0]@0"),
        StoredSubscription("s2", CHEAP, "A", False, "t[0]@1"),  # a crash between writes
        StoredSubscription("s3", CHEAP, "A", False, "t[0]@2"),
        StoredSubscription("s3", CHEAP, "A", True, "t[0]@3"),  # ... but finished later
        StoredSubscription("s1", None, source="t[0]@4"),  # unsubscribed
        StoredSubscription("s4", [{"attr": "colour", "op": "=", "value": 1}], "A", True,
                           "t[0]@5"),  # the space changed since
    ]
    with caplog.at_level(logging.WARNING, logger="connectors"):
        assert alice._apply_stored(records, resend=True)
    assert sorted(alice.subscriptions) == ["local", "s2", "s3"]
    assert str(alice.subscriptions["s2"]) == "price < 45"
    assert [t for t, _ in sent] == ["dls.node.A.subscribe"]  # s2 only: the latest unsent
    assert b"s2" in sent[0][1]
    assert "'s4' at t[0]@5 does not compile" in caplog.text
    assert not alice._apply_stored([])
    assert alice._apply_stored(records[1:2]) and len(sent) == 1  # a second look: no resend


def test_a_delivery_that_matches_nothing_known_reads_the_topic_again(
        alice: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    news = [[StoredSubscription("s9", CHEAP, "A", True, "t[0]@0")], []]
    monkeypatch.setattr(alice._store, "read_new", lambda: news.pop(0))
    alice._loaded = True
    got = alice._take_all([_event(10.0, "e1"), _event(47.0, "e2")], RecentKeys(10))
    assert [(d.event_id, d.subscriptions) for _, d in got.taken] == [("e1", ("s9",)),
                                                                     ("e2", ())]
    assert (alice.delivered, alice.false_positives) == (2, 1)
    assert got.fixed == {0}  # counted as a false positive first, then taken off
    got = alice._take_all([_event(47.0, "e3")], RecentKeys(10))  # nothing new this time
    assert got.taken[0][1].subscriptions == () and alice.false_positives == 2 and not news
