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


def test_a_batch_advertising_more_labels_than_a_message_holds_sends_them_all(
        tmp_path: Path) -> None:
    """150,000 new labels in one batch (1.2 MB): advertised whole, in messages that fit."""
    import json

    import numpy as np
    from confluent_kafka import Message

    from broker_node.config import NodeSettings
    from broker_node.controls import LINK_LABELS
    from broker_node.oversize import NODE_MESSAGE_MAX_BYTES
    from broker_node.service import NodeService
    from connectors.serde import decode_link, encode_label_subscription

    space = tmp_path / "space.json"
    space.write_text(json.dumps({"attributes": [
        {"name": "x", "type": "numeric", "low": 0, "high": 262_144, "granules": 262_144}]}))
    svc = NodeService(NodeSettings(node="A", neighbours=("B",), space=space,
                                   shared_delivery_partitions=1))  # no topic to make
    p = SizedProducer(NODE_MESSAGE_MAX_BYTES)  # refuses what librdkafka would
    svc.connect(p)  # type: ignore[arg-type]
    per = 50_000  # 400 KB of labels per subscription: each fits in a message
    svc.process([Message(topic="dls.node.A.subscribe", partition=0, offset=i,
                         value=encode_label_subscription(
                             f"c{i}", f"s{i}", np.arange(i * per, (i + 1) * per,
                                                         dtype=np.uint64)))
                 for i in range(3)])
    links = [decode_link(v) for t, v, _, _ in p.sent if t == "dls.link.A.B"]
    assert [m["kind"] for m in links] == ["advertise"] * len(links)
    assert max(len(m["labels"]) for m in links) <= LINK_LABELS
    labels = np.concatenate([m["labels"] for m in links])
    assert np.array_equal(labels, np.arange(3 * per, dtype=np.uint64))  # each once, in order
    assert svc.metrics.dead_letters == 0
