"""The mapping for a sharded network writes what the SDK writes, on both paths.

A label's shard in Spark (the Catalyst expression, exact with and without ANSI mode, and
the Java ``FastMap``) is :func:`dls.shards.label_shard` on edge and random labels. Events,
subscriptions and unsubscriptions mapped with ``shards`` > 1 through the Java UDFs
(``fast=True``) and the Catalyst expressions alone (``fast=False``) give the same rows, and
those are the SDK's: the SDK's own split (``Client._parts``) and topic names
(``Client._input``) are the expected values. A refused record is one dead letter, not one
per shard.

Cost: the shared SparkSession and about a minute of Spark jobs on two cores (the general
mapping is built once per space and shard count).
"""

from __future__ import annotations

import json
from collections import defaultdict
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from connectors.client import Client
from connectors.serde import (
    decode_label_subscription,
    decode_label_unsubscription,
    encode_raw_event,
    encode_raw_subscription,
    encode_raw_unsubscription,
)
from connectors.topics import (
    HEADER_DLQ_SOURCE,
    HEADER_EVENT_ID,
    HEADER_LABEL,
    MAX_TOPIC_LENGTH,
    encode_label,
)
from dls.exceptions import DLSError
from dls.mapping import event_label
from dls.predicates import Subscription
from dls.shards import label_shards
from dls.space import ContentSpace
from spark.exceptions import MappingArgumentError
from spark.mapping import fast_config, map_events, map_subscriptions, map_unsubscriptions
from tests.spark.test_mapping_parity import (
    SPACES,
    TOPICS,
    _event,
    _predicates,
    _source,
    _where_forms,
)

EDGES = [0, 1, 2, (1 << 32) - 1, 1 << 32, (1 << 63) - 1, 1 << 63, (1 << 63) + 1,
         (1 << 64) - 1]
# The longest node name whose unsharded publish topic fits: with shards its topics do not.
LONG = "N" * (MAX_TOPIC_LENGTH - len(f"{TOPICS.prefix}.node..publish"))


def _sdk(shards: int) -> Any:
    """The SDK's own split and topic names (``Client._parts``, ``Client._input``)."""
    me = SimpleNamespace(shards=shards, topics=TOPICS, client_inputs=False)
    return (lambda labels: Client._parts(me, labels),  # noqa: SLF001
            lambda node, kind, shard: Client._input(me, node, kind, shard))  # noqa: SLF001


def _rows(df: Any) -> list[tuple[Any, ...]]:
    return [(r.topic, r.key, bytes(r.value), [(h.key, bytes(h.value)) for h in r.headers])
            for r in df.collect()]


def _both(mapper: Any, space: ContentSpace, src: Any, shards: int) -> list[tuple[Any, ...]]:
    """The rows of ``mapper`` through the Java UDFs, checked equal to the Catalyst path's."""
    fast = _rows(mapper(space, src, TOPICS, fast=True, shards=shards))
    slow = _rows(mapper(space, src, TOPICS, fast=False, shards=shards))
    assert fast == slow
    return fast


def _offset(row: tuple[Any, ...]) -> int:
    return int(dict(row[3])[HEADER_DLQ_SOURCE].decode().rsplit("@", 1)[1])


def test_label_shards_agree_with_dls_on_both_paths(spark: Any) -> None:
    """Edge and random labels: Catalyst (ANSI mode on and off: a bigint product that
    overflows throws under ANSI) and Java give ``dls.shards.label_shards``."""
    from pyspark.sql import functions as F

    from spark.catalyst.shards import with_label_shards

    rng = np.random.default_rng(21)
    labels = EDGES + [int(x) for x in rng.integers(0, 1 << 64, 300, dtype=np.uint64)]
    signed = [x - (1 << 64) if x >= 1 << 63 else x for x in labels]
    df = spark.createDataFrame([(signed,)], "labels array<bigint>")
    counts = (2, 3, 7, 1000, 1024)
    want = [label_shards(np.array(labels, dtype=np.uint64), n).tolist() for n in counts]
    ansi = spark.conf.get("spark.sql.ansi.enabled")
    try:
        for mode in ("true", "false"):
            spark.conf.set("spark.sql.ansi.enabled", mode)
            out = df
            for n in counts:
                out = with_label_shards(out, F.col("labels"), f"s{n}", n)
            got = out.select(*[f"s{n}" for n in counts]).first()
            assert list(got) == want, mode
    finally:
        spark.conf.set("spark.sql.ansi.enabled", ansi)
    fast_map = spark._jvm.dlsroute.spark.FastMap  # noqa: SLF001 - the py4j gateway
    for n, shards in zip(counts, want, strict=True):
        assert [fast_map.labelShard(x, n) for x in signed[:60]] == shards[:60], n


@pytest.mark.parametrize(("n", "shards"), [(0, 2), (2, 5)])
def test_sharded_events_go_where_the_sdk_sends_them(spark: Any, n: int, shards: int) -> None:
    space = ContentSpace.from_spec(SPACES[n])
    rng = np.random.default_rng(3000 + n)
    events = [_event(rng, space, i) for i in range(120)]
    values = [encode_raw_event(e["node"], e["client"], e["id"], e["attrs"], b"p")
              if i % 5 == 4 and not _refused(space, e) else json.dumps(e).encode()
              for i, e in enumerate(events)]
    values.append(json.dumps({"node": LONG, "client": "c", "id": "long",
                              "attrs": events[0]["attrs"]}).encode())
    src = _source(spark, values, TOPICS.raw_events)
    unsharded = _rows(map_events(space, src, TOPICS))
    assert len(unsharded) == len(values)
    assert unsharded[-1][0] == TOPICS.node_publish(LONG)  # fits unsharded
    _, topic_of = _sdk(shards)
    rows = _both(map_events, space, src, shards)
    assert len(rows) == len(values)
    seen = set()
    for i, (row, plain) in enumerate(zip(rows, unsharded, strict=True)):
        if i == len(values) - 1 or plain[0] == TOPICS.deadletter:
            assert row[0] == TOPICS.deadletter, i  # the last: its shard topics are too long
            assert _offset(row) == i
            continue
        # The record is the unsharded one (pinned to the SDK by the parity tests) ...
        assert row[1:] == plain[1:]
        # ... on the topic the SDK writes it to.
        label = int.from_bytes(dict(row[3])[HEADER_LABEL], "big")
        shard = int(label_shards(np.array([label], dtype=np.uint64), shards)[0])
        e = events[i]
        assert row[0] == topic_of(e["node"], "publish", shard)
        assert dict(row[3])[HEADER_EVENT_ID] == e["id"].encode()
        assert dict(row[3])[HEADER_LABEL] == encode_label(event_label(space, e["attrs"]))
        seen.add(shard)
    assert seen == set(range(shards))  # every shard takes events


def _refused(space: ContentSpace, e: dict[str, Any]) -> bool:
    try:
        event_label(space, e["attrs"])
        encode_raw_event(e["node"], e["client"], e["id"], e["attrs"], b"p")
    except DLSError:
        return True
    return False


def _labels(space: ContentSpace, where: Any) -> np.ndarray | None:
    try:
        return Subscription(space, where).labels()
    except DLSError:
        return None


@pytest.mark.parametrize(("n", "shards"), [(0, 3), (1, 8)])
def test_sharded_subscriptions_are_the_sdks_parts(spark: Any, n: int, shards: int) -> None:
    space = ContentSpace.from_spec(SPACES[n])
    rng = np.random.default_rng(4000 + n)
    subs = [{"node": f"N{i % 2}", "client": f"c{i % 3}", "id": f"s{i}",
             "where": _where_forms(rng, _predicates(rng, space))} for i in range(100)]
    # Its unsharded subscribe topic fits; with shards it does not.
    subs.append({"node": LONG[:-2], "client": "c", "id": "s100", "where": ""})
    values = [encode_raw_subscription(s["node"], s["client"], s["id"], s["where"])
              if i % 4 == 3 else json.dumps(s).encode() for i, s in enumerate(subs)]
    src = _source(spark, values, TOPICS.raw_subscriptions)
    split, topic_of = _sdk(shards)
    rows = _both(map_subscriptions, space, src, shards)
    parts: dict[str, list[tuple[str, np.ndarray]]] = defaultdict(list)
    dead: dict[int, int] = defaultdict(int)
    for row in rows:
        if row[0] == TOPICS.deadletter:
            dead[_offset(row)] += 1
        else:
            m = decode_label_subscription(row[2])
            parts[m["id"]].append((row[0], m["labels"]))
    assert set(dead.values()) == {1}  # one dead letter per refused record
    n_split = 0
    for i, s in enumerate(subs):
        labels = _labels(space, s["where"]) if s["id"] != "s100" else None
        if labels is None:
            assert i in dead and s["id"] not in parts, s
            continue
        want = [(topic_of(s["node"], "subscribe", k), part)
                for k, part in split(labels).items()]
        got = parts[s["id"]]
        assert [t for t, _ in got] == [t for t, _ in want], s
        for (_, have), (_, part) in zip(got, want, strict=True):
            assert np.array_equal(have, part), s
        n_split += len(want) > 1
    assert n_split > 20


def test_a_subscription_over_the_budget_is_one_dead_letter(spark: Any) -> None:
    space = ContentSpace.from_spec(SPACES[1])  # a budget of 5000 labels
    subs = [{"node": "A", "client": "c", "id": "big", "where": "b > -1e6"},
            {"node": "A", "client": "c", "id": "ok", "where": "b < -999000"}]
    src = _source(spark, [json.dumps(s).encode() for s in subs], TOPICS.raw_subscriptions)
    rows = _both(map_subscriptions, space, src, 8)  # as above: its general mapping is built
    assert [r[0] for r in rows].count(TOPICS.deadletter) == 1
    assert _offset(next(r for r in rows if r[0] == TOPICS.deadletter)) == 0
    assert len(rows) > 2  # "ok" spans several shards


def test_fast_map_splits_the_common_records_itself(spark: Any) -> None:
    """The Java path is in use for sharded records (not declining them all to the general
    mapping): it names the event's shard and returns a subscription's parts."""
    from pyspark.sql import functions as F

    space = ContentSpace.from_spec(SPACES[0])
    event = {"node": "A", "client": "c", "id": "e1",
             "attrs": {"sym": "IBM", "price": 1, "temp": 36}}
    sub = {"node": "A", "client": "c", "id": "s1", "where": "price < 5 and temp > 36"}
    for kind, record, mapper, fn, shards in (
            ("event", event, map_events, "dlsroute_fast_map", 2),
            ("subscription", sub, map_subscriptions, "dlsroute_fast_map_parts", 3)):
        split, topic_of = _sdk(shards)
        src = _source(spark, [json.dumps(record).encode()], TOPICS.raw_events)
        mapper(space, src, TOPICS, fast=True, shards=shards)  # registers the function
        cfg = bytearray(fast_config(space, TOPICS, kind, shards))
        (m,) = [r.m for r in src.select(F.call_function(fn, F.lit(cfg), F.col("value"))
                                        .alias("m")).collect()]
        assert m is not None, kind
        if kind == "event":
            shard = label_shards(np.array([event_label(space, event["attrs"])],
                                          dtype=np.uint64), shards)[0]
            assert bytes(m.topic).decode() == topic_of("A", "publish", int(shard))
        else:
            want = split(Subscription(space, sub["where"]).labels())
            assert len(want) > 1
            assert [bytes(p.topic).decode() for p in m.parts] == [
                topic_of("A", "subscribe", k) for k in want]
            for p, part in zip(m.parts, want.values(), strict=True):
                assert np.array_equal(decode_label_subscription(bytes(p.value))["labels"], part)


def test_sharded_unsubscriptions_go_to_every_shard(spark: Any) -> None:
    space = ContentSpace.from_spec(SPACES[0])
    values = [json.dumps({"node": "A", "client": "c", "id": "s1"}).encode(),
              encode_raw_unsubscription("B", "d", "s2"),
              json.dumps({"node": "A", "client": "c"}).encode(),
              json.dumps({"node": LONG[:-4], "client": "c", "id": "s3"}).encode()]
    _, topic_of = _sdk(3)
    rows = _rows(map_unsubscriptions(space, _source(spark, values, TOPICS.raw_unsubscriptions),
                                     TOPICS, shards=3))
    good = [(r[0], decode_label_unsubscription(r[2])) for r in rows
            if r[0] != TOPICS.deadletter]
    assert good == [(topic_of(node, "unsubscribe", k), {"client": c, "id": i})
                    for node, c, i in (("A", "c", "s1"), ("B", "d", "s2")) for k in range(3)]
    assert sorted(_offset(r) for r in rows if r[0] == TOPICS.deadletter) == [2, 3]
    assert all(_headers_ok(r) for r in rows)


def _headers_ok(row: tuple[Any, ...]) -> bool:
    return row[0] == TOPICS.deadletter or row[3] == []


def test_bad_shard_counts_are_refused(spark: Any) -> None:
    space = ContentSpace.from_spec(SPACES[0])
    src = _source(spark, [b"{}"], TOPICS.raw_events)
    for bad in (0, -1, 1025, 2.0, True):
        with pytest.raises(MappingArgumentError, match="shards"):
            map_events(space, src, TOPICS, shards=bad)
