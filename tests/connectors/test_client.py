"""The client SDK: construction and the checks of a delivered message, without a broker
(Kafka clients connect lazily; messages are real ``confluent_kafka.Message`` objects), and
one listener run against a real broker."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from confluent_kafka import Message, Producer

from connectors.client import Client
from connectors.exceptions import ConnectorError, ConnectorSettingError
from connectors.kafka import ensure_topics, producer_config
from connectors.recent import RecentKeys
from connectors.serde import encode_label_subscription, encode_raw_event
from connectors.topics import HEADER_CLIENTS, HEADER_LABEL, encode_clients, encode_label
from dls.mapping import event_label
from dls.predicates import Subscription
from dls.space import ContentSpace

SPEC = {"attributes": [{"name": "price", "type": "numeric", "low": 0, "high": 100,
                        "granules": 8}]}
SPACE = ContentSpace.from_spec(SPEC)
TOPIC = "dls.deliver.alice"


def test_the_consumer_group_is_per_client_and_network() -> None:
    space = ContentSpace.from_spec(SPEC)
    default = Client("127.0.0.1:1", "A", "alice", space)
    other = Client("127.0.0.1:1", "A", "alice", space, topic_prefix="t1")
    given = Client("127.0.0.1:1", "A", "alice", space, topic_prefix="t1", group_id="mine")
    try:
        assert default._group == "dls-sdk-alice"  # unchanged for the default network
        assert other._group == "t1-sdk-alice"
        assert given._group == "mine"
    finally:
        for c in (default, other, given):
            c.close()


def test_client_refuses_a_negative_partition_count(tmp_path: Path) -> None:
    space = tmp_path / "space.json"
    space.write_text(json.dumps({"attributes": [
        {"name": "x", "type": "numeric", "low": 0, "high": 1, "granules": 2}]}))
    with pytest.raises(ConnectorError, match="shared_delivery_partitions must be an integer "
                                             ">= 0, got -2") as err:
        Client("127.0.0.1:1", "A", "alice", space, shared_delivery_partitions=-2)
    assert err.value.field == "shared_delivery_partitions" and err.value.value == -2
    assert isinstance(err.value, ConnectorSettingError) and isinstance(err.value, ValueError)


@pytest.mark.parametrize("rf, isr, field", [(0, None, "replication_factor"),
                                            (None, 0, "min_insync_replicas"),
                                            (2, 3, "min_insync_replicas")])
def test_client_refuses_replication_settings_that_cannot_be(rf: int | None, isr: int | None,
                                                            field: str) -> None:
    with pytest.raises(ConnectorSettingError, match=field) as err:
        Client("127.0.0.1:1", "A", "alice", SPACE, replication_factor=rf,
               min_insync_replicas=isr)
    assert err.value.field == field


def test_client_topics_take_its_replication_settings() -> None:
    client = Client("127.0.0.1:1", "A", "alice", SPACE, replication_factor=3,
                    min_insync_replicas=2)
    assert client._replication == {"replication": 3, "min_insync": 2}
    assert client._store._replication == client._replication
    client.close()


# ------------------------------------------------------------------------ _take, _check


@pytest.fixture
def alice() -> Any:
    client = Client("127.0.0.1:1", "A", "alice", SPACE)
    client.subscriptions["cheap"] = Subscription(SPACE, "price < 50")
    yield client
    client.close()


def _event(offset: int, price: float, eid: str = "e1", *, label: bool = True,
           value: bytes | None = None, headers: list[tuple[str, bytes]] | None = None,
           topic: str = TOPIC) -> Message:
    attrs = {"price": price}
    hdrs: list[tuple[str, str | bytes | None]] = []
    if label:
        hdrs.append((HEADER_LABEL, encode_label(event_label(SPACE, attrs))))
    hdrs += headers or []
    return Message(topic=topic, partition=0, offset=offset,
                   value=encode_raw_event("B", "bob", eid, attrs, b"pay") if value is None
                   else value, headers=hdrs)


def test_check_builds_the_delivery_and_matches_it_exactly(alice: Client) -> None:
    d = alice._check(_event(3, 10.0))
    assert d.event_id == "e1" and d.attrs == {"price": 10.0} and d.payload == b"pay"
    assert d.label == event_label(SPACE, {"price": 10.0})
    assert d.origin == "B/bob" and d.source == f"{TOPIC}[0]@3"
    assert d.subscriptions == ("cheap",)
    assert alice._check(_event(4, 90.0)).subscriptions == ()  # the network's false positive
    assert alice._check(_event(5, 10.0, label=False)).label == -1


def test_take_counts_deliveries_false_positives_and_repeats(
        alice: Client, caplog: pytest.LogCaptureFixture) -> None:
    seen = RecentKeys(10)
    first = alice._take(_event(0, 10.0, "e1"), seen)
    assert first is not None and first.subscriptions == ("cheap",)
    fp = alice._take(_event(1, 90.0, "e2"), seen)
    assert fp is not None and fp.subscriptions == ()
    with caplog.at_level(logging.WARNING, logger="connectors"):
        assert alice._take(_event(2, 10.0, "e1"), seen) is None  # same origin and id again
    assert (alice.delivered, alice.false_positives, alice.duplicates) == (2, 1, 1)
    assert f"client alice: 1 repeated event(s) skipped, the latest 'e1' of B/bob at " \
        f"{TOPIC}[0]@2" in caplog.text  # an id used for two events loses the second: said
    other = alice._take(_event(3, 10.0, "e1"), RecentKeys(10))  # another memory: new
    assert other is not None and alice.delivered == 3


def test_take_skips_and_counts_what_does_not_decode(
        alice: Client, caplog: pytest.LogCaptureFixture) -> None:
    seen = RecentKeys(10)
    bad = [
        _event(7, 10.0, value=b"not avro at all"),
        _event(8, 10.0, value=b""),  # a tombstone
        _event(9, 10.0, value=encode_label_subscription(
            "c", "s", np.array([1], dtype=np.uint64))),  # another schema
        _event(10, 10.0, label=False, headers=[(HEADER_LABEL, b"\x01\x02\x03")]),
    ]
    with caplog.at_level(logging.WARNING, logger="connectors"):
        assert [alice._take(m, seen) for m in bad] == [None] * 4
        good = alice._take(_event(11, 10.0, "e9"), seen)  # and the next one goes through
    assert good is not None and good.event_id == "e9"
    assert (alice.undecodable, alice.delivered, alice.duplicates) == (4, 1, 0)
    for offset in (7, 8, 9, 10):
        assert f"{TOPIC}[0]@{offset}" in caplog.text
    assert "expected a RawEvent message, got a LabelSubscription" in caplog.text
    assert "multiple of 8" in caplog.text or "8 bytes" in caplog.text


def test_for_me_reads_the_clients_header_of_the_shared_topic() -> None:
    client = Client("127.0.0.1:1", "A", "alice", SPACE, shared_delivery_partitions=4)
    try:
        client.subscriptions["all"] = Subscription(SPACE, "price >= 0")
        mine = _event(0, 5.0, headers=[(HEADER_CLIENTS, encode_clients(["bob", "alice"]))],
                      topic="dls.deliver")
        theirs = _event(1, 5.0, "e2", headers=[(HEADER_CLIENTS, encode_clients(["bob"]))],
                        topic="dls.deliver")
        nobody = _event(2, 5.0, "e3", topic="dls.deliver")
        assert client._for_me(mine) and not client._for_me(theirs)
        assert not client._for_me(nobody)
        seen = RecentKeys(10)
        assert client._take(theirs, seen) is None and client._take(nobody, seen) is None
        assert (client.delivered, client.duplicates, client.undecodable) == (0, 0, 0)
        d = client._take(mine, seen)
        assert d is not None and d.subscriptions == ("all",) and client.delivered == 1
    finally:
        client.close()


# ------------------------------------------------------------------------ with a broker


def test_a_listener_goes_past_an_undecodable_delivery(kafka_bootstrap: str, topic_prefix: str,
                                                      group_id: str) -> None:
    client = Client(kafka_bootstrap, "A", "alice", SPACE, topic_prefix=topic_prefix,
                    group_id=group_id)
    try:
        client.subscriptions["cheap"] = Subscription(SPACE, "price < 50")
        topic = client.topics.deliver("alice")
        ensure_topics(kafka_bootstrap, [topic])
        producer = Producer(producer_config(kafka_bootstrap))
        producer.produce(topic, b"garbage")
        good = _event(0, 10.0, "e1")
        producer.produce(topic, good.value(), headers=good.headers())
        assert producer.flush(30) == 0
        got = list(client.deliveries(timeout=0.5, max_idle=5.0))
        assert [d.event_id for d in got] == ["e1"]
        assert (client.undecodable, client.delivered) == (1, 1)
    finally:
        client.close()


@pytest.mark.parametrize("wait", [True, 0, -1.0, "5"])
def test_subscribe_refuses_a_wait_that_is_no_number_of_seconds(wait: object, tmp_path: Path
                                                                ) -> None:
    space = tmp_path / "space.json"
    space.write_text(json.dumps({"attributes": [
        {"name": "x", "type": "numeric", "low": 0, "high": 100, "granules": 8}]}))
    client = Client("127.0.0.1:1", "A", "ann", space)
    with pytest.raises(ConnectorSettingError) as info:
        client.subscribe("x > 5", wait=wait)  # type: ignore[arg-type]
    assert info.value.field == "wait" and info.value.value == wait


def test_a_subscription_too_large_for_a_message_is_refused_before_anything_is_kept() -> None:
    from connectors.client import MAX_SUBSCRIPTION_BYTES
    from connectors.exceptions import SubscriptionTooLargeError

    wide = ContentSpace.from_spec({"attributes": [  # a budget raised past one message
        {"name": "x", "type": "numeric", "low": 0, "high": 262_144, "granules": 262_144}],
        "filters": {"label_budget": 300_000}})
    client = Client("127.0.0.1:1", "A", "ann", wide)  # nothing reaches a broker
    try:
        with pytest.raises(SubscriptionTooLargeError) as info:
            client.subscribe("x >= 100000")  # 162,144 labels: 1.3 MB
        assert info.value.field == "where" and info.value.value == "x >= 100000"
        assert "covers 162,144 labels" in str(info.value)
        assert f"({MAX_SUBSCRIPTION_BYTES:,})" in str(info.value)
        assert client.subscriptions == {}
    finally:
        client.close()
