"""Outputs larger than the producer sends: split by client names, or dead letters (no broker)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from hypothesis import given, settings
from hypothesis import strategies as st

from broker_node.committers import AtLeastOnce, committer_for
from broker_node.metrics import Metrics
from broker_node.oversize import DEAD_LETTER_RAW_BYTES, halves, is_too_large
from connectors.serde import decode_dead_letter
from connectors.topics import HEADER_CLIENTS, HEADER_EVENT_ID, HEADER_LINK_SEQ
from tests.broker_node.test_committers import Consumer, Producer, _in, _settings


class SizedProducer(Producer):
    """Refuses, as librdkafka does, a message whose value and headers pass ``limit``."""

    def __init__(self, limit: int, error: int = KafkaError.MSG_SIZE_TOO_LARGE) -> None:
        super().__init__()
        self.limit, self.error, self.flushes = limit, error, 0

    def produce(self, topic: str, value: Any = None, headers: Any = None, partition: int = -1,
                on_delivery: Any = None, timestamp: int = 0, key: Any = None) -> None:
        size = len(value or b"") + sum(len(k) + len(v) for k, v in headers or ())
        if size > self.limit:
            raise KafkaException(KafkaError(self.error))
        super().produce(topic, value, headers, partition, on_delivery, timestamp, key)

    def flush(self, timeout: float = 0) -> int:
        self.flushes += 1
        return super().flush(timeout)


def test_halves_cut_the_names_near_the_middle_and_only_names() -> None:
    carried = [("k", b"v")]
    a, b = halves([*carried, (HEADER_CLIENTS, b"ann,bob,cy,dee")])  # type: ignore[misc]
    assert a == [*carried, (HEADER_CLIENTS, b"ann,bob")]
    assert b == [*carried, (HEADER_CLIENTS, b"cy,dee")]
    assert halves([(HEADER_CLIENTS, b"a-very-long-name,b")]) == (
        [(HEADER_CLIENTS, b"a-very-long-name")], [(HEADER_CLIENTS, b"b")])
    assert halves([(HEADER_CLIENTS, b"ann")]) is None  # one client
    assert halves([("k", b"v")]) is None and halves(None) is None  # no names


def test_only_a_size_refusal_counts() -> None:
    assert is_too_large(KafkaException(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE)))
    assert not is_too_large(KafkaException(KafkaError(KafkaError._TIMED_OUT)))
    assert not is_too_large(BufferError("queue full"))


_NAMES = st.lists(st.text("abcxyz", min_size=1, max_size=9), min_size=2, max_size=60,
                  unique=True)


@settings(max_examples=100, deadline=None)
@given(names=_NAMES, limit=st.integers(40, 200),
       delivery=st.sampled_from(["exactly_once", "at_least_once"]))
def test_a_delivery_too_large_goes_as_several_each_client_once_in_order(
        names: list[str], limit: int, delivery: str) -> None:
    p, consumer = SizedProducer(limit), Consumer()
    c = committer_for(_settings(delivery), p, consumer, Metrics())  # type: ignore[arg-type]
    header = (HEADER_CLIENTS, ",".join(names).encode())
    c.begin()
    c.produce_spread("dls.deliver", [b"v1", b"v2"], [[("id", b"e1")], [("id", b"e2")]],
                     [[(0, header)], [(0, header)]], 1)
    c.commit([_in(3)])
    for event in (b"v1", b"v2"):  # the held-back last one too, once committed
        sent = [h for _, v, h, _ in p.sent if v == event]
        assert all(len(event) + sum(len(k) + len(x) for k, x in h) <= limit for h in sent)
        assert b",".join(h[-1][1] for h in sent).decode().split(",") == names
    assert c.metrics.dead_letters == 0
    if isinstance(c, AtLeastOnce):  # the last piece carried the batch's callback
        c.idle()
        assert consumer.commits == [([("dls.node.A.publish", 0, 4)], True)]


@pytest.mark.parametrize("delivery", ["exactly_once", "at_least_once"])
def test_what_cannot_be_split_is_a_dead_letter_and_the_batch_goes_on(delivery: str) -> None:
    p, consumer = SizedProducer(DEAD_LETTER_RAW_BYTES + 100_000), Consumer()
    c = committer_for(_settings(delivery), p, consumer, Metrics())  # type: ignore[arg-type]
    big = b"x" * (DEAD_LETTER_RAW_BYTES + 100_000)
    c.begin()
    c.produce("dls.deliver.ann", b"small", [(HEADER_EVENT_ID, b"e0")])
    c.produce("dls.deliver.ann", big, [(HEADER_EVENT_ID, b"e1")])  # the last: held back
    c.commit([_in(5)])
    assert [(t, v) for t, v, _, _ in p.sent if t == "dls.deliver.ann"] == [
        ("dls.deliver.ann", b"small")]
    [(topic, record, headers, _)] = [s for s in p.sent if s[0] != "dls.deliver.ann"]
    assert topic == "dls.deadletter"
    letter = decode_dead_letter(record)
    assert letter["source"] in ("dls.deliver.ann", "dls.deliver.ann[0]")  # ALO: partition 0
    assert "an output of event 'e1'" in letter["reason"]
    assert f"raw value cut to {DEAD_LETTER_RAW_BYTES:,} of {len(big):,}" in letter["reason"]
    assert letter["raw"] == big[:DEAD_LETTER_RAW_BYTES]
    assert (c.metrics.dead_letters, c.metrics.outputs_too_large) == (1, 1)
    if isinstance(c, AtLeastOnce):  # its callback came once the messages before it went
        assert p.flushes == 1
        c.idle()
        assert consumer.commits == [([("dls.node.A.publish", 0, 6)], True)]


def test_another_refusal_stops_the_batch() -> None:
    p = SizedProducer(10, error=KafkaError._UNKNOWN_TOPIC)
    c = committer_for(_settings("exactly_once"), p, None, Metrics())  # type: ignore[arg-type]
    with pytest.raises(KafkaException):
        c.produce("t", b"x" * 20)
    with pytest.raises(KafkaException):
        c.produce_spread("t", [b"x" * 20], [[]], [[(0, (HEADER_CLIENTS, b"a,b"))]], 1)


def test_a_link_message_or_a_dead_letter_refused_stops_the_batch() -> None:
    c = committer_for(_settings("exactly_once"), SizedProducer(10), None,  # type: ignore[arg-type]
                      Metrics())
    with pytest.raises(KafkaException):  # a link message is never dropped
        c.produce("dls.link.A.B", b"x" * 20, [(HEADER_LINK_SEQ, b"\0" * 8)])
    with pytest.raises(KafkaException):  # its dead letter does not fit either: no loop
        c.produce("dls.deliver.ann", b"x" * 20)
    assert c.metrics.dead_letters == 0


@pytest.mark.parametrize("limit", [None, 100_000], ids=["default", "topic-of-100K"])
def test_a_batch_advertising_more_labels_than_a_message_holds_sends_them_all(
        tmp_path: Path, limit: int | None) -> None:
    """150,000 new labels in one batch (1.2 MB): advertised whole, in messages that fit."""
    import json

    import numpy as np
    from confluent_kafka import Message

    from broker_node.config import NodeSettings
    from broker_node.controls import LINK_LABELS, link_labels
    from broker_node.oversize import NODE_MESSAGE_MAX_BYTES, MessageLimit
    from broker_node.service import NodeService
    from connectors.serde import decode_link, encode_label_subscription

    space = tmp_path / "space.json"
    space.write_text(json.dumps({"attributes": [
        {"name": "x", "type": "numeric", "low": 0, "high": 262_144, "granules": 262_144}]}))
    svc = NodeService(NodeSettings(node="A", neighbours=("B",), space=space,
                                   shared_delivery_partitions=1))  # no topic to make
    if limit is not None:  # as start sets them from what the topics take
        svc.limit = MessageLimit(limit, "t")
        svc.controls.link_labels = link_labels(svc.limit)
    p = SizedProducer(limit or NODE_MESSAGE_MAX_BYTES)  # refuses what librdkafka would
    svc.connect(p)  # type: ignore[arg-type]
    per = 50_000  # 400 KB of labels per subscription: each fits a default message
    svc.process([Message(topic="dls.node.A.subscribe", partition=0, offset=i,
                         value=encode_label_subscription(
                             f"c{i}", f"s{i}", np.arange(i * per, (i + 1) * per,
                                                         dtype=np.uint64)))
                 for i in range(3)])
    links = [decode_link(v) for t, v, _, _ in p.sent if t == "dls.link.A.B"]
    assert [m["kind"] for m in links] == ["advertise"] * len(links)
    assert max(len(m["labels"]) for m in links) <= (LINK_LABELS if limit is None else 6_250)
    labels = np.concatenate([m["labels"] for m in links])
    assert np.array_equal(labels, np.arange(3 * per, dtype=np.uint64))  # each once, in order
    assert svc.metrics.dead_letters == 0


def test_the_limit_is_the_smallest_setting_less_the_framing_and_never_above_the_default(
        ) -> None:
    from broker_node.exceptions import BrokerError
    from broker_node.oversize import (
        BATCH_FRAMING_BYTES,
        MIN_MESSAGE_BYTES,
        NODE_MESSAGE_MAX_BYTES,
        MessageLimit,
        limit_of,
    )

    assert limit_of({}) == MessageLimit()  # nothing read: the node's default
    assert limit_of({"broker 1": 1_048_588, "d": 2_000_000}).bytes == NODE_MESSAGE_MAX_BYTES
    small = limit_of({"broker 1": 1_048_588, "t.deliver": 100_000, "t.dlq": 200_000})
    assert small.bytes == 100_000 - BATCH_FRAMING_BYTES
    assert "t.deliver takes 100,000" in str(small)
    assert small.producer_config() == {"message.max.bytes": small.bytes,
                                       "batch.size": small.bytes}
    assert MessageLimit().producer_config()["batch.size"] == 1_000_000  # librdkafka's
    floor = MIN_MESSAGE_BYTES + BATCH_FRAMING_BYTES
    assert limit_of({"t.x": floor}).bytes == MIN_MESSAGE_BYTES
    with pytest.raises(BrokerError) as err:
        limit_of({"broker 1": 1_048_588, "t.x": floor - 1})
    assert (err.value.field, err.value.value) == ("max.message.bytes", "t.x")
    assert f"at most {floor - 1:,} bytes" in str(err.value)
    with pytest.raises(BrokerError) as err:
        limit_of({"broker 2": 5_000})
    assert (err.value.field, err.value.value) == ("message.max.bytes", "broker 2")


def test_what_the_node_cuts_fits_half_a_message_of_a_smaller_limit() -> None:
    from broker_node.controls import LINK_LABELS, link_labels
    from broker_node.oversize import DEAD_LETTER_HEADER_BYTES, MessageLimit

    default = MessageLimit()
    assert (default.dead_letter_raw, default.dead_letter_headers) == (
        DEAD_LETTER_RAW_BYTES, DEAD_LETTER_HEADER_BYTES)
    assert link_labels(default) == LINK_LABELS
    small = MessageLimit(40_000, "t")
    assert (small.dead_letter_raw, small.dead_letter_headers) == (20_000, 5_000)
    assert link_labels(small) == 2_500  # 8 bytes each: 20,000 bytes
    assert MessageLimit(10, "t").share(100, 8) == 1  # never none


def test_a_dead_letter_fits_a_smaller_limit() -> None:
    from broker_node.inbox import DeadLetter
    from broker_node.oversize import MessageLimit

    limit = MessageLimit(40_000, "t")
    headers = [(f"h{i}", b"v" * 900) for i in range(20)]  # 18 KB of headers
    letter = DeadLetter("t.in[0]@7", "undecodable", b"\xff" * 100_000, headers)
    record, letter_headers = letter.message(limit)
    size = len(record) + sum(len(k) + len(v) for k, v in letter_headers)
    assert size <= limit.bytes
    got = decode_dead_letter(record)
    assert got["raw"] == b"\xff" * limit.dead_letter_raw
    assert "raw value cut to 20,000 of 100,000 bytes" in got["reason"]
    assert "(15 of 20 headers left out)" in got["reason"]


@pytest.mark.parametrize("delivery", ["exactly_once", "at_least_once"])
def test_under_a_smaller_limit_what_cannot_be_split_is_a_dead_letter_that_fits(
        delivery: str) -> None:
    from broker_node.oversize import MessageLimit

    limit = MessageLimit(30_000, "dls.deliver.ann takes 31,024")
    p = SizedProducer(limit.bytes)
    c = committer_for(_settings(delivery), p, Consumer(), Metrics(),  # type: ignore[arg-type]
                      limit=limit)
    c.begin()
    c.produce("dls.deliver.ann", b"x" * 50_000, [(HEADER_EVENT_ID, b"e1")])
    c.produce("dls.deliver.ann", b"small", [(HEADER_EVENT_ID, b"e2")])
    c.commit([_in(5)])
    [(topic, record, _, _)] = [s for s in p.sent if s[0] == "dls.deadletter"]
    letter = decode_dead_letter(record)
    assert "more than the node's producer sends (30,000 bytes: dls.deliver.ann" in (
        letter["reason"])
    assert letter["raw"] == b"x" * 15_000
    assert [v for t, v, _, _ in p.sent if t == "dls.deliver.ann"] == [b"small"]


def test_a_size_refusal_from_the_broker_says_a_restart_reads_the_limits_again() -> None:
    from confluent_kafka import Message

    from broker_node.committers import DeliveryErrors
    from broker_node.oversize import MISSING_HINT, REFUSED_HINT, refusal_hint

    errors = DeliveryErrors()
    errors.on_delivery(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE), Message(topic="t", partition=2))
    assert errors.first is not None and errors.first.startswith("delivery to t[2] failed")
    assert errors.first.endswith(REFUSED_HINT)
    assert refusal_hint(KafkaException(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE))) == REFUSED_HINT
    assert refusal_hint(KafkaException(KafkaError(KafkaError._TIMED_OUT))) == ""
    gone = KafkaException(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART))
    assert refusal_hint(gone) == MISSING_HINT  # a delivery topic deleted under the node
    assert refusal_hint(None) == ""
