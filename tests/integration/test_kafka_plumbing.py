"""connectors/kafka.py on a real broker: topics, transactions, read_committed, offsets."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import ConfigResource, ResourceType

from connectors.exceptions import ConnectorError
from connectors.kafka import (
    admin,
    check_message,
    consume_batch,
    consumer_config,
    ensure_topics,
    is_fatal,
    producer_config,
    source_of,
    wait_for_broker,
)

pytestmark = pytest.mark.integration

N = 100
TX_TIMEOUT = 15.0


def _consume(consumer: Consumer, n: int, timeout: float = 20.0) -> list[Message]:
    """Up to ``n`` messages via consume_batch, waiting at most ``timeout`` seconds."""
    out: list[Message] = []
    deadline = time.monotonic() + timeout
    while len(out) < n and time.monotonic() < deadline:
        out.extend(consume_batch(consumer, n - len(out), 0.5))
    return out


def _reader(bootstrap: str, topic: str, **overrides: object) -> Consumer:
    """A consumer assigned to partition 0 of ``topic`` from the beginning (no group join)."""
    consumer = Consumer(consumer_config(bootstrap, f"reader-{uuid.uuid4()}", **overrides))
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    return consumer


def _txn_producer(bootstrap: str, transactional_id: str | None = None) -> Producer:
    producer = Producer(
        producer_config(bootstrap, transactional_id=transactional_id or f"tx-{uuid.uuid4()}")
    )
    producer.init_transactions(TX_TIMEOUT)
    return producer


def _payload(i: int) -> bytes:
    """Binary value bytes: NULs, non-UTF-8, the Avro single-object marker."""
    return b"\xc3\x01" + i.to_bytes(8, "big") + bytes([0, 0xFF, 0x80, i % 256]) * (i % 5)


def _headers(i: int) -> list[tuple[str, str | bytes | None]]:
    return [
        ("dls-label", (i * 0x0101010101).to_bytes(8, "big")),
        ("dls-origin", b"A"),
        ("dls-event-id", f"e{i}".encode()),
        ("dls-label", b""),  # repeated key, empty value
    ]


def test_config_builders() -> None:
    p = producer_config("h:1", transactional_id="x", **{"linger.ms": 0, "compression.type": None})
    assert p["bootstrap.servers"] == "h:1"
    assert p["acks"] == "all" and p["enable.idempotence"] is True
    assert p["transactional.id"] == "x" and p["linger.ms"] == 0
    assert "compression.type" not in p
    c = consumer_config("h:1", "g", **{"session.timeout.ms": 7000}, on_commit=print)
    assert c["group.id"] == "g" and c["session.timeout.ms"] == 7000 and c["on_commit"] is print
    assert c["enable.auto.commit"] is False and c["isolation.level"] == "read_committed"
    assert c["auto.offset.reset"] == "earliest" and c["enable.partition.eof"] is False
    with pytest.raises(ValueError):
        consumer_config("h:1", "")
    with pytest.raises(ValueError):
        producer_config("  ")


def test_wait_for_broker(kafka_bootstrap: str) -> None:
    wait_for_broker(kafka_bootstrap, 10.0)
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        closed = f"127.0.0.1:{s.getsockname()[1]}"
    t0 = time.monotonic()
    with pytest.raises(ConnectorError, match=closed):
        wait_for_broker(closed, 0.5)
    assert time.monotonic() - t0 < 3.0


def test_ensure_topics_creates_and_is_idempotent(kafka_bootstrap: str, topic_prefix: str) -> None:
    a, b, c = (f"{topic_prefix}.{x}" for x in "abc")
    ensure_topics(kafka_bootstrap, [a, b, a], partitions=2, config={"retention.ms": -1})
    client = admin(kafka_bootstrap)
    md = client.list_topics(timeout=10)
    assert {a, b} <= set(md.topics)
    assert len(md.topics[a].partitions) == len(md.topics[b].partitions) == 2
    res = ConfigResource(ResourceType.TOPIC, a)
    entries = client.describe_configs([res])[res].result(timeout=10)
    assert entries["retention.ms"].value == "-1"

    # Again, and with one new topic: no error, existing topics untouched.
    ensure_topics(kafka_bootstrap, [a, b], partitions=3)
    ensure_topics(kafka_bootstrap, [b, c])
    md = client.list_topics(timeout=10)
    assert len(md.topics[a].partitions) == 2
    assert len(md.topics[c].partitions) == 1
    ensure_topics(kafka_bootstrap, [])

    with pytest.raises(ConnectorError, match="cannot create topic"):
        ensure_topics(kafka_bootstrap, [f"{topic_prefix} bad name!"], timeout=10)


def test_committed_transaction_is_read_exactly(kafka_bootstrap: str, topic_prefix: str) -> None:
    topic = f"{topic_prefix}.tx"
    ensure_topics(kafka_bootstrap, [topic])
    producer = _txn_producer(kafka_bootstrap)
    producer.begin_transaction()
    for i in range(N):
        producer.produce(topic, value=_payload(i), key=str(i).encode(), headers=_headers(i))
    producer.commit_transaction(TX_TIMEOUT)

    reader = _reader(kafka_bootstrap, topic)
    try:
        got = _consume(reader, N)
        extra = consume_batch(reader, 10, 0.3)
    finally:
        reader.close()
    assert extra == []
    assert [m.offset() for m in got] == list(range(N))
    assert [m.value() for m in got] == [_payload(i) for i in range(N)]
    assert [m.key() for m in got] == [str(i).encode() for i in range(N)]
    assert [m.headers() for m in got] == [_headers(i) for i in range(N)]
    assert source_of(got[7]) == f"{topic}[0]@7"


def test_aborted_transaction_is_invisible(kafka_bootstrap: str, topic_prefix: str) -> None:
    topic = f"{topic_prefix}.abort"
    ensure_topics(kafka_bootstrap, [topic])
    producer = _txn_producer(kafka_bootstrap)
    producer.begin_transaction()
    for i in range(10):
        producer.produce(topic, value=f"aborted-{i}".encode())
    producer.flush(TX_TIMEOUT)  # written to the log, then aborted
    producer.abort_transaction(TX_TIMEOUT)
    producer.begin_transaction()
    for i in range(5):
        producer.produce(topic, value=f"kept-{i}".encode())
    producer.commit_transaction(TX_TIMEOUT)

    committed = _reader(kafka_bootstrap, topic)
    uncommitted = _reader(kafka_bootstrap, topic, **{"isolation.level": "read_uncommitted"})
    try:
        seen = _consume(committed, 5)
        extra = consume_batch(committed, 10, 0.3)
        raw = _consume(uncommitted, 15)
    finally:
        committed.close()
        uncommitted.close()
    assert [m.value() for m in seen] == [f"kept-{i}".encode() for i in range(5)]
    assert extra == []
    # The aborted records really are in the log; only read_committed hides them.
    assert [m.value() for m in raw][:10] == [f"aborted-{i}".encode() for i in range(10)]
    assert len(raw) == 15


def test_offsets_sent_to_transaction_are_where_the_group_resumes(
    kafka_bootstrap: str, topic_prefix: str, group_id: str
) -> None:
    src, out = f"{topic_prefix}.in", f"{topic_prefix}.out"
    ensure_topics(kafka_bootstrap, [src, out])
    plain = Producer(producer_config(kafka_bootstrap))
    for i in range(10):
        plain.produce(src, value=f"m{i}".encode())
    assert plain.flush(10) == 0

    first = Consumer(consumer_config(kafka_bootstrap, group_id))
    first.subscribe([src])
    producer = _txn_producer(kafka_bootstrap)
    try:
        msgs = _consume(first, 10)
        assert [m.value() for m in msgs] == [f"m{i}".encode() for i in range(10)]
        meta = first.consumer_group_metadata()
        # Messages 0..5 processed: outputs and input offset 6 committed together.
        producer.begin_transaction()
        for m in msgs[:6]:
            producer.produce(out, value=m.value(), headers=[("src", source_of(m).encode())])
        producer.send_offsets_to_transaction([TopicPartition(src, 0, 6)], meta, TX_TIMEOUT)
        producer.commit_transaction(TX_TIMEOUT)
        # Messages 6..8 in an aborted transaction: neither outputs nor offset 9 count.
        producer.begin_transaction()
        for m in msgs[6:9]:
            producer.produce(out, value=m.value())
        producer.send_offsets_to_transaction([TopicPartition(src, 0, 9)], meta, TX_TIMEOUT)
        producer.abort_transaction(TX_TIMEOUT)
    finally:
        first.close()

    second = Consumer(consumer_config(kafka_bootstrap, group_id))
    second.subscribe([src])
    reader = _reader(kafka_bootstrap, out)
    try:
        committed = second.committed([TopicPartition(src, 0)], timeout=10)
        resumed = _consume(second, 4)
        outputs = _consume(reader, 6)
        extra = consume_batch(reader, 10, 0.3)
    finally:
        second.close()
        reader.close()
    assert committed[0].offset == 6
    assert [m.offset() for m in resumed] == [6, 7, 8, 9]
    assert [m.value() for m in outputs] == [f"m{i}".encode() for i in range(6)]
    assert [dict(m.headers() or [])["src"] for m in outputs] == [
        f"{src}[0]@{i}".encode() for i in range(6)
    ]
    assert extra == []


def test_fenced_producer_error_is_fatal(
    kafka_bootstrap: str, topic_prefix: str, unique_name: str
) -> None:
    topic = f"{topic_prefix}.fence"
    ensure_topics(kafka_bootstrap, [topic])
    old = _txn_producer(kafka_bootstrap, f"tx-{unique_name}")
    _txn_producer(kafka_bootstrap, f"tx-{unique_name}")  # same id: fences `old`
    with pytest.raises(KafkaException) as info:
        old.begin_transaction()
        old.produce(topic, value=b"zombie")
        old.commit_transaction(TX_TIMEOUT)
    err = info.value.args[0]
    assert is_fatal(err), err
    old.purge()  # drop the zombie's unsent record and its delivery report quietly
    old.flush(1.0)
    # The same error on a consumed message makes check_message raise.
    with pytest.raises(ConnectorError, match="fatal Kafka error"):
        check_message(Message(topic=topic, partition=0, offset=0, error=err))


def test_partition_eof_is_skipped(kafka_bootstrap: str, topic_prefix: str) -> None:
    topic = f"{topic_prefix}.empty"
    ensure_topics(kafka_bootstrap, [topic])
    consumer = _reader(kafka_bootstrap, topic, **{"enable.partition.eof": True})
    try:
        msg = None
        deadline = time.monotonic() + 10
        while msg is None and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
        assert msg is not None
        err = msg.error()
        assert err is not None and err.code() == KafkaError._PARTITION_EOF
        assert not is_fatal(err)
        assert check_message(msg) is None
        assert consume_batch(consumer, 10, 0.3) == []
    finally:
        consumer.close()


# A static member (the node's consumer) closed soon after subscribe(): a plain close() hung
# for good, holding the GIL, within 1-3 tries here; close_consumer must not. A hang freezes
# every thread, so the tries run in a child process that the test can time out.
_CLOSE_TRIES = """
import random, sys, time
from confluent_kafka import Consumer
from connectors.closing import close_consumer
from connectors.kafka import consumer_config
boot, prefix, tries = sys.argv[1], sys.argv[2], int(sys.argv[3])
rnd = random.Random(7)
for i in range(tries):
    group = f"{prefix}-close-{i}"
    c = Consumer(consumer_config(boot, group, **{"group.instance.id": f"{group}-0"}))
    c.subscribe([f"{prefix}.close.a", f"{prefix}.close.b"])
    time.sleep(rnd.uniform(0, 0.3))
    close_consumer(c)
    print(i, flush=True)
"""


def _close_tries(bootstrap: str, prefix: str, tries: int,
                 timeout: float) -> subprocess.CompletedProcess[str] | None:
    try:
        return subprocess.run(  # noqa: S603 - this interpreter, a script of this test
            [sys.executable, "-c", _CLOSE_TRIES, bootstrap, prefix, str(tries)],
            capture_output=True, text=True, timeout=timeout,
            cwd=Path(__file__).resolve().parents[2])
    except subprocess.TimeoutExpired:
        return None


def test_close_soon_after_subscribe_does_not_hang(kafka_bootstrap: str,
                                                  topic_prefix: str) -> None:
    ensure_topics(kafka_bootstrap, [f"{topic_prefix}.close.a", f"{topic_prefix}.close.b"])
    done = _close_tries(kafka_bootstrap, topic_prefix, 25, timeout=120)
    assert done is not None, "close_consumer hung"
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str(i) for i in range(25)]
