"""Bad input on the raw topics of the Spark job, tried systematically (issue 19, item 5).

The job's two paths (the Catalyst expressions of ``spark/catalyst`` and the Java UDFs of
``spark/fastpath.py``) share no Python code at run time: each implements the rules of
:func:`connectors.serde.decode_raw` and :mod:`dls.mapping`, and
``tests/spark/test_mapping_parity.py`` holds them to Python's answers. So:

* Hypothesis fuzzes the Python rules themselves (:func:`python_map`, the reference the
  parity tests compare with) with the bad-input classes of the issue: random bytes,
  truncated and bit-flipped records (Avro and JSON), unknown fingerprints, records of
  another schema or kind, values outside the space, subscriptions over the label budget,
  names no topic can carry, fields of the wrong type. A bad record is refused with one
  ``DLSError`` naming the field (a dead letter), never another exception; a flipped bit
  may leave a record valid, never a crash.
* A fixed batch drawn from the same classes (seeded) goes through both Spark paths: one
  output row per record, a dead letter exactly when Python refuses it, naming its source
  and carrying its bytes; the others are the node records Python makes.
* One integration test runs the real streaming job on the local Kafka on a small batch of
  bad records on all three raw topics: one dead letter each, nothing else.

Headers of a raw record are not read by the mapping (they are copied into a dead letter),
so header widths are no input here; ids of other clients mean nothing to the stateless
mapping (a node refuses them: ``tests/broker_node/test_fuzz.py``).
"""

from __future__ import annotations

import json
import random
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from hypothesis import given, settings
from hypothesis import strategies as st

from connectors.kafka import consume_batch, consumer_config, producer_config
from connectors.serde import (
    SERDE,
    decode_dead_letter,
    decode_label_subscription,
    decode_label_unsubscription,
    decode_raw,
    encode_dead_letter,
    encode_label_subscription,
    encode_raw_event,
    encode_raw_subscription,
    encode_raw_unsubscription,
)
from connectors.serde.framing import HEADER_SIZE, MARKER
from connectors.topics import HEADER_DLQ_SOURCE, HEADER_LABEL, Topics, encode_label
from dls.exceptions import DLSError
from dls.mapping import event_label
from dls.predicates import Subscription
from dls.space import ContentSpace

SPEC = {"attributes": [
    {"name": "sym", "type": "discrete", "values": ["AAPL", "IBM", "MSFT"]},
    {"name": "price", "type": "numeric", "low": 0, "high": 100, "granules": 16},
    {"name": "temp", "type": "numeric", "low": 30, "high": 45,
     "breakpoints": [35, 37.5, 40]}],
    "filters": {"label_budget": 64}, "app_id": 5}
SPACE = ContentSpace.from_spec(SPEC)
KINDS = ("event", "subscription", "unsubscription")
SOURCE_SCHEMA = ("value binary, topic string, partition int, offset long, "
                 "headers array<struct<key:string,value:binary>>")


def python_map(kind: str, value: bytes) -> Any:
    """What the Python rules make of a raw record (raises DLSError: a dead letter)."""
    rec = decode_raw(value, kind)  # type: ignore[arg-type]
    if kind == "event":
        return ("event", rec["node"], event_label(SPACE, rec["attrs"]))
    if kind == "subscription":
        return ("subscription", rec["node"], Subscription(SPACE, rec["where"]).labels())
    return ("unsubscription", rec["node"], rec["client"], rec["id"])


# -- records, good and bad (functions of a Random: hypothesis and the Spark batch share them) --
def _fields(rng: random.Random, kind: str) -> dict[str, Any]:
    base = {"node": rng.choice("ABC"), "client": rng.choice(["c1", "feed", "x-2"]),
            "id": f"r{rng.randrange(10**6)}"}
    if kind == "event":
        base["attrs"] = {"sym": rng.choice(["AAPL", "IBM", "MSFT"]),
                         "price": rng.choice([0, 12.5, 99, rng.uniform(0, 100)]),
                         "temp": rng.choice([30, 36.2, 44.9])}
    elif kind == "subscription":
        base["where"] = rng.choice(["price < 20 and sym = IBM", "sym in (AAPL, MSFT) and "
                                    "temp between 35 and 37", [{"attr": "price", "op": "<",
                                                                "value": 10}]])
    return base


def _encode(kind: str, rec: dict[str, Any], avro: bool) -> bytes:
    if not avro:
        return json.dumps(rec).encode()
    if kind == "event":
        return encode_raw_event(rec["node"], rec["client"], rec["id"], rec["attrs"])
    if kind == "subscription":
        return encode_raw_subscription(rec["node"], rec["client"], rec["id"], rec["where"])
    return encode_raw_unsubscription(rec["node"], rec["client"], rec["id"])


def good(rng: random.Random, kind: str) -> bytes:
    return _encode(kind, _fields(rng, kind), rng.random() < 0.5)


def random_bytes(rng: random.Random, kind: str) -> bytes:
    head = rng.choice([b"", MARKER, b"{", b"\xef\xbb\xbf"])
    return head + rng.randbytes(rng.randrange(0, 40))


def truncated(rng: random.Random, kind: str) -> bytes:
    whole = good(rng, kind)
    return whole[:rng.randrange(len(whole))]


def bit_flip(rng: random.Random, kind: str) -> bytes:
    """A flipped bit anywhere: the record may stay valid (then it is a good one)."""
    whole = bytearray(good(rng, kind))
    bit = rng.randrange(8 * len(whole))
    whole[bit // 8] ^= 1 << (bit % 8)
    return bytes(whole)


def unknown_fingerprint(rng: random.Random, kind: str) -> bytes:
    whole = _encode(kind, _fields(rng, kind), True)
    return MARKER + rng.randbytes(8) + whole[HEADER_SIZE:]


def wrong_schema(rng: random.Random, kind: str) -> bytes:
    """Avro of another schema, or JSON of another kind (or op)."""
    other = rng.choice([k for k in KINDS if k != kind])
    return rng.choice([
        _encode(other, _fields(rng, other), True),
        encode_label_subscription("c1", "s1", np.array([SPACE.app_prefix])),
        encode_dead_letter("t[0]@1", "r", b"", None),
        json.dumps({**_fields(rng, other), "op": {"event": "publish", "subscription":
                                                  "subscribe"}.get(other, "unsubscribe")})
        .encode(),
        json.dumps([_fields(rng, kind)]).encode(),
    ])


def outside(rng: random.Random, kind: str) -> bytes:
    """An event outside the space, a subscription on nothing in it (or over the budget)."""
    rec = _fields(rng, kind)
    if kind == "event":
        attr, value = rng.choice([("sym", "ZZZ"), ("price", 100.5), ("price", -1),
                                  ("temp", 29), ("nope", 1), ("price", None)])
        if value is None:
            del rec["attrs"][attr]
        else:
            rec["attrs"][attr] = value
    elif kind == "subscription":
        rec["where"] = rng.choice(["ghost = 1", "sym = ZZZ", "price > 1000", "price < -5",
                                   "price between 50 and 10", "", "price >= 0",
                                   "sym in (AAPL, IBM) and temp > 31"])  # the last 3: budget
    else:
        return bad_name(rng, kind)
    return _encode(kind, rec, rng.random() < 0.5)


def bad_name(rng: random.Random, kind: str) -> bytes:
    """A node or client no topic name can carry, or no id.

    (A client name too long for a delivery topic passes: no topic of the job is named
    after a client; the node refuses the subscription.)
    """
    rec = _fields(rng, kind)
    field, value = rng.choice([("node", "a.b"), ("node", ""), ("client", "x/y"),
                               ("client", "é"), ("id", ""),
                               ("node", "A\n")])
    rec[field] = value
    return _encode(kind, rec, rng.random() < 0.5)


def ill_typed(rng: random.Random, kind: str) -> bytes:
    """JSON with a field of the wrong type, a missing or an unknown one."""
    rec: dict[str, Any] = _fields(rng, kind)
    change = rng.choice(["id", "missing", "unknown", "special"])
    if change == "id":
        rec["id"] = rng.choice([5, None, ["r1"], {"a": 1}])
    elif change == "missing":
        del rec[rng.choice(sorted(rec))]
    elif change == "unknown":
        rec["extra"] = 1
    elif kind == "event":
        rec[rng.choice(["attrs", "payload"])] = rng.choice([[1], 3, True])
    elif kind == "subscription":
        rec["where"] = rng.choice([3, {"attr": "price"}, True])
    else:
        rec["op"] = "subscribe"
    return json.dumps(rec).encode()


#: Each class of bad input, and whether every record of it is bad.
BAD: dict[str, tuple[Callable[[random.Random, str], bytes], bool]] = {
    "random bytes": (random_bytes, True), "truncated": (truncated, True),
    "bit flip": (bit_flip, False), "unknown fingerprint": (unknown_fingerprint, True),
    "wrong schema": (wrong_schema, True), "outside the space": (outside, True),
    "bad name": (bad_name, True), "ill-typed": (ill_typed, True),
}


@settings(max_examples=400, deadline=None)
@given(rng=st.randoms(use_true_random=False), kind=st.sampled_from(KINDS),
       cls=st.sampled_from(sorted(BAD)))
def test_python_refuses_each_bad_record_with_one_named_error(rng: random.Random, kind: str,
                                                             cls: str) -> None:
    make, always_bad = BAD[cls]
    value = make(rng, kind)
    try:
        python_map(kind, value)
    except DLSError as exc:  # one refusal, naming the field; anything else fails the test
        assert str(exc) and exc.field, (cls, value)
        return
    assert not always_bad, f"{cls} {kind} record accepted: {value!r}"


@settings(max_examples=100, deadline=None)
@given(rng=st.randoms(use_true_random=False), kind=st.sampled_from(KINDS))
def test_python_maps_the_good_records(rng: random.Random, kind: str) -> None:
    assert python_map(kind, good(rng, kind))[0] == kind


# -- the Spark job ----------------------------------------------------------------------------
TOPICS = Topics("p")


def raw_topic(topics: Topics, kind: str) -> str:
    return {"event": topics.raw_events, "subscription": topics.raw_subscriptions,
            "unsubscription": topics.raw_unsubscriptions}[kind]


def batch(kind: str, seed: int, per_class: int) -> list[bytes]:
    """A fixed mix: ``per_class`` records of every bad class, a good one after each class."""
    rng = random.Random(seed)
    out: list[bytes] = []
    for cls in sorted(BAD):
        out += [BAD[cls][0](rng, kind) for _ in range(per_class)]
        out.append(good(rng, kind))
    return out


def _verdicts(kind: str, values: list[bytes]) -> list[Any]:
    """Python's answer per record: the mapping, or None (refused: a dead letter)."""
    out = []
    for v in values:
        try:
            out.append(python_map(kind, v))
        except DLSError:
            out.append(None)
    return out


def check_rows(kind: str, topics: Topics, values: list[bytes], rows: list[Any]) -> None:
    """One row per record: a dead letter exactly when Python refuses it, else its mapping.

    ``rows``: (topic, value bytes, headers dict) of what the job wrote for ``values``, the
    records at offsets 0, 1, ... of the raw topic of ``kind``.
    """
    want = _verdicts(kind, values)
    topic = raw_topic(topics, kind)
    assert len(rows) == len(values)
    dead: dict[int, dict[str, Any]] = {}
    mapped: Counter[Any] = Counter()
    for out_topic, value, headers in rows:
        if out_topic == topics.deadletter:
            dl = decode_dead_letter(value)
            assert headers[HEADER_DLQ_SOURCE].decode() == dl["source"]
            at, offset = dl["source"].rsplit("@", 1)
            assert at == f"{topic}[0]" and int(offset) not in dead
            assert dl["reason"] and dl["raw"] == values[int(offset)]
            dead[int(offset)] = dl
        elif kind == "event":
            assert out_topic == topics.node_publish(SERDE.decode(value)[1]["node"])
            mapped[(out_topic, headers[HEADER_LABEL])] += 1
        elif kind == "subscription":
            rec = decode_label_subscription(value)
            mapped[(out_topic, rec["labels"].tobytes())] += 1
        else:
            rec = decode_label_unsubscription(value)
            mapped[(out_topic, rec["client"], rec["id"])] += 1
    assert sorted(dead) == [i for i, w in enumerate(want) if w is None]
    expect: Counter[Any] = Counter()
    for w in want:
        if w is None:
            continue
        if w[0] == "event":
            expect[(topics.node_publish(w[1]), encode_label(w[2]))] += 1
        elif w[0] == "subscription":
            expect[(topics.node_subscribe(w[1]), np.asarray(w[2], np.uint64).tobytes())] += 1
        else:
            expect[(topics.node_unsubscribe(w[1]), w[2], w[3])] += 1
    assert mapped == expect


def _map(spark: Any, kind: str, values: list[bytes], fast: bool | None) -> list[Any]:
    from spark.mapping import map_events, map_subscriptions, map_unsubscriptions

    topic = raw_topic(TOPICS, kind)
    df = spark.createDataFrame([(bytearray(v), topic, 0, i, [("h", bytearray(b"\x00"))])
                                for i, v in enumerate(values)], SOURCE_SCHEMA)
    if kind == "event":
        out = map_events(SPACE, df, TOPICS, fast=fast)
    elif kind == "subscription":
        out = map_subscriptions(SPACE, df, TOPICS, fast=fast)
    else:
        out = map_unsubscriptions(SPACE, df, TOPICS)
    return [(r.topic, bytes(r.value), {h.key: bytes(h.value) for h in r.headers})
            for r in out.collect()]


@pytest.mark.parametrize("fast", [None, False])
@pytest.mark.parametrize("kind", KINDS)
def test_spark_makes_one_dead_letter_per_bad_record(spark: Any, kind: str,
                                                    fast: bool | None) -> None:
    """Both paths of the job (fast=None takes the Java UDFs when the jar is there)."""
    if kind == "unsubscription" and fast is None:
        pytest.skip("unsubscriptions have one path")
    values = batch(kind, seed=19, per_class=6)
    check_rows(kind, TOPICS, values, _map(spark, kind, values, fast))


@pytest.mark.integration
def test_the_streaming_job_makes_one_dead_letter_per_bad_record(
        spark: Any, kafka_bootstrap: str, topic_prefix: str, tmp_path: Any) -> None:
    """The real job (``start_query``, availableNow) from the raw topics on Kafka."""
    from spark.stream import prepare_topics, start_query

    topics = Topics(topic_prefix)
    prepare_topics(kafka_bootstrap, topics, "ABC")
    values = {kind: batch(kind, seed=7, per_class=2) for kind in KINDS}
    producer = Producer(producer_config(kafka_bootstrap))
    for kind in KINDS:
        for v in values[kind]:
            producer.produce(raw_topic(topics, kind), v, headers=[("h", b"\x00")])
    assert producer.flush(30) == 0
    query = start_query(spark, SPACE, kafka_bootstrap, topics=topics,
                        checkpoint=tmp_path / "ck", once=True)
    query.awaitTermination(300)
    assert query.exception() is None, query.exception()
    wanted = {t for n in "ABC" for t in (topics.node_publish(n), topics.node_subscribe(n),
                                         topics.node_unsubscribe(n))} | {topics.deadletter}
    rows = _read_all(kafka_bootstrap, topic_prefix, sorted(wanted),
                     sum(len(v) for v in values.values()))
    for kind in KINDS:
        check_rows(kind, topics, values[kind], [r for r in rows if _is_output_of(r, kind, topics)])


def _is_output_of(row: tuple[str, bytes, dict[str, bytes]], kind: str, topics: Topics) -> bool:
    topic, value, _ = row
    if topic == topics.deadletter:
        return decode_dead_letter(value)["source"].startswith(raw_topic(topics, kind) + "[")
    return topic.endswith({"event": ".publish", "subscription": ".subscribe",
                           "unsubscription": ".unsubscribe"}[kind])


def _read_all(bootstrap: str, prefix: str, topic_names: list[str], n: int
              ) -> list[tuple[str, bytes, dict[str, bytes]]]:
    """Every record of the topics (one partition each), waiting for ``n`` of them."""
    reader = Consumer(consumer_config(bootstrap, f"{prefix}-fuzz-check"))
    try:
        reader.assign([TopicPartition(t, 0, 0) for t in topic_names])
        out: list[tuple[str, bytes, dict[str, bytes]]] = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            for m in consume_batch(reader, 500, 0.5):
                out.append((m.topic() or "", m.value() or b"", dict(m.headers() or [])))
            if len(out) >= n:
                time.sleep(1.0)  # and nothing more comes
                out += [(m.topic() or "", m.value() or b"", dict(m.headers() or []))
                        for m in consume_batch(reader, 500, 0.5)]
                return out
        return out
    finally:
        reader.close()


# -- regression tests of what the fuzz found ----------------------------------------------------
def _swap(data: bytes, old: bytes, new: bytes) -> bytes:
    assert data.count(old) == 1 and len(old) == len(new)
    return data.replace(old, new)


FOUND = {  # kind -> records Python refuses and Spark's from_avro took
    "event": [_swap(encode_raw_event("A", "c1", "eX", {"sym": "IBM", "price": 1, "temp": 36}),
                    b"eX", b"e\xf2")],
    "subscription": [
        _swap(encode_raw_subscription("A", "c1", "s1", "price < 20 and sym = IBMX"), b"IBMX",
              b"IBM\xb8"),
        encode_raw_subscription("A", "c1", "s2", "price < 20") + b"\x00",
        encode_raw_subscription("A", "c1", "s3", "price < 20") + b"abc"],
    "unsubscription": [_swap(encode_raw_unsubscription("A", "c1", "rX"), b"rX", b"r\xb8"),
                       encode_raw_unsubscription("A", "c1", "s4") + b"\x02"],
}


@pytest.mark.parametrize("fast", [None, False])
@pytest.mark.parametrize("kind", KINDS)
def test_avro_strings_that_are_not_utf8_or_bytes_after_the_body_are_dead_letters(
        spark: Any, kind: str, fast: bool | None) -> None:
    """Found by the fuzz (bit flips): Spark's from_avro neither checks UTF-8 nor looks
    past the record, so these became node records (an undecodable LabelSubscription, an
    event clients cannot read) where Python makes dead letters."""
    if kind == "unsubscription" and fast is None:
        pytest.skip("unsubscriptions have one path")
    values = [*FOUND[kind], good(random.Random(3), kind)]
    for v in FOUND[kind]:
        with pytest.raises(DLSError):
            python_map(kind, v)
    rows = _map(spark, kind, values, fast)
    check_rows(kind, TOPICS, values, rows)
    reasons = sorted(decode_dead_letter(v)["reason"] for t, v, _ in rows
                     if t == TOPICS.deadletter)
    assert all("does not decode" in r or "unread bytes" in r for r in reasons), reasons


@pytest.mark.xfail(strict=True, reason="an Avro RawEvent's size is no function of its "
                   "fields alone (a map may come in blocks): bytes after its body pass")
def test_bytes_after_an_avro_events_body_are_a_dead_letter(spark: Any) -> None:
    value = encode_raw_event("A", "c1", "e1", {"sym": "IBM", "price": 1, "temp": 36}) + b"\x00"
    with pytest.raises(DLSError):
        python_map("event", value)
    check_rows("event", TOPICS, [value], _map(spark, "event", [value], False))
