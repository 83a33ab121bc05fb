"""The Java path of the mapping (``spark/jvm``) gives the Catalyst path's and the SDK's bytes.

``dlsroute.spark.FastMap`` maps the common JSON records itself and declines the rest, which
``dlsroute.spark.General`` (the Catalyst mapping run as a UDF) maps; these tests feed both
paths records on each edge of what FastMap accepts (whitespace, escapes, non-ASCII text,
repeated keys, long integers, number spellings, keywords in any case, bounds, budgets,
Avro input, bad records) and want the same rows from ``fast=True`` and ``fast=False``,
and the SDK's labels and bytes for every record that is not a dead letter.

Cost: one SparkSession (shared) and about 20 s of Spark jobs.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from connectors.serde import decode_label_subscription, encode_raw_event, encode_raw_subscription
from connectors.topics import HEADER_LABEL, Topics, encode_label
from dls.exceptions import DLSError
from dls.mapping import event_label
from dls.predicates import Subscription
from dls.space import ContentSpace
from spark.mapping import fast_config, map_events, map_subscriptions

TOPICS = Topics("p")
SOURCE_SCHEMA = ("value binary, topic string, partition int, offset long, "
                 "headers array<struct<key:string,value:binary>>")
SPACE = ContentSpace.from_spec({
    "attributes": [
        {"name": "sym", "type": "discrete", "values": ["AAPL", "IBM", "x y", "é"]},
        {"name": "price", "type": "numeric", "low": -3.7, "high": 12.1, "granules": 37},
        {"name": "temp", "type": "numeric", "low": 30, "high": 45,
         "breakpoints": [35, 36.5, 37.5, 38.5, 40]}],
    "app_id": 7, "filters": {"label_budget": 200}})

OK = '"node": "A", "client": "c", "id": "%s"'
EVENTS = [
    '{%s, "attrs": {"sym": "IBM", "price": 1, "temp": 36}}',
    '{%s,"attrs":{"temp":36.5,"price":-0.0,"sym":"x y"}}',
    ' \t\r\n{ %s , "attrs" : { "price" : -3.7 , "temp" : 45 , "sym" : "AAPL" } } \n',
    '{%s, "attrs": {"sym": "IBM", "price": 12.1, "temp": 30}, "payload": "p q"}',
    '{%s, "op": "publish", "attrs": {"sym": "IBM", "price": 1e0, "temp": 3.6E1}}',
    '{%s, "op": "subscribe", "attrs": {"sym": "IBM", "price": 1, "temp": 36}}',
    '{%s, "attrs": {"sym": "IBM", "price": 123456789012345, "temp": 36}}',
    '{%s, "attrs": {"sym": "IBM", "price": 1234567890123456, "temp": 36}}',
    '{%s, "attrs": {"sym": "IBM", "price": 12345678901234567890, "temp": 36}}',
    '{%s, "attrs": {"sym": "IBM", "price": -0, "temp": 36.000000000000001}}',
    '{%s, "attrs": {"sym": "IBM", "price": 0.1, "temp": 35}}',
    '{%s, "attrs": {"sym": "IBM", "price": 12.100000000000001, "temp": 36}}',
    '{%s, "attrs": {"sym": "IBM", "price": -3.7000000000000006, "temp": 36}}',
    '{%s, "attrs": {"sym": "IBM", "price": NaN, "temp": 36}}',
    '{%s, "attrs": {"sym": "IBM", "price": Infinity, "temp": 36}}',
    '{%s, "attrs": {"sym": "IBM", "price": true, "temp": 36}}',
    '{%s, "attrs": {"sym": "IBM", "price": null, "temp": 36}}',
    '{%s, "attrs": {"sym": "IBM", "price": "1", "temp": 36}}',
    '{%s, "attrs": {"sym": 1, "price": 1, "temp": 36}}',
    '{%s, "attrs": {"sym": "ibm", "price": 1, "temp": 36}}',
    '{%s, "attrs": {"sym": "\\u00e9", "price": 1, "temp": 36}}',
    '{%s, "attrs": {"sym": "é", "price": 1, "temp": 36}}',
    '{%s, "attrs": {"sym": "x\\u0020y", "price": 1, "temp": 36}}',
    '{%s, "attrs": {"sym": "IBM", "price": 1, "temp": 36, "price": 2}}',
    '{%s, "attrs": {"sym": "IBM", "price": 1, "temp": 36, "x": 2}}',
    '{%s, "attrs": {"sym": "IBM", "price": 1}}',
    '{%s, "attrs": {}}',
    '{%s, "attrs": {"sym": "IBM", "price": 01, "temp": 36}}',
    '{%s, "attrs": {"sym": "IBM", "price": 1., "temp": 36}}',
    '{%s, "attrs": {"sym": "IBM", "price": .5, "temp": 36}}',
    '{%s, "attrs": {"sym": "IBM", "price": +1, "temp": 36}}',
    '{%s, "attrs": {"sym": "IBM", "price": 1, "temp": 36},}',
    '{%s, "attrs": {"sym": "IBM", "price": 1, "temp": 36}} x',
    '{%s, "attrs": {"sym": "IBM", "price": 1, "temp": 36}, "payload": "\\"q\\""}',
    '{%s, "attrs": {"sym": "IBM", "price": 1, "temp": 36}, "payload": "é"}',
    '{%s, "attrs": {"sym": "IBM", "price": 1, "temp": 36}, "payload": 5}',
    '{%s, "attrs": {"sym": "IBM", "price": 1, "temp": 36}, "extra": 5}',
    '{%s, "attrs": {"sym": "IBM", "price": 1, "temp": 36}, "id": "again"}',
    '{"node": "a.b", "client": "c", "id": "%s", "attrs": {"sym": "IBM", "price": 1, "temp": 36}}',
    '{"node": "A", "client": "", "id": "%s", "attrs": {"sym": "IBM", "price": 1, "temp": 36}}',
    '{"node": "' + "N" * 240 + '", "client": "c", "id": "%s", '
    '"attrs": {"sym": "IBM", "price": 1, "temp": 36}}',
    '{"client": "c", "node": "A", "id": "%s\\t", "attrs": {"sym": "IBM", "price": 1, "temp": 36}}',
    '{"client": "c", "node": "A", "id": "%s", "attrs": {"sym": "IBM", "price": 1, "temp": 36}}',
]
WHERES = [
    "price between 1 and 2", "price < 3", "price<3", "price <= 3 and temp >= 36.5",
    "  price > 1   AND   temp < 38.5  ", "price BETWEEN -3.7 and 12.1", "price >= -3.7",
    "price > 12.1", "price < -3.7", "price = 12.1", "price = 1.", "price < +5.", "price < .5e1",
    "price > -0.0", "price between 3 and 1", "price between 1 and 1", "price < 1e999",
    "price < 123456789012345", "price < 1234567890123456", "price < 1e-400",
    "price < 3 and price > 1", "price < 3 and", "and price < 3", "price < 3 temp > 36",
    "price between1 and 2", "price between 1and 2", "price between 1 and2", "price =< 3",
    "price == 3", "price < 3\tand temp > 36", "price < nan", "price < inf", "price in (1, 2)",
    "sym = IBM", "sym in ('IBM', \"x y\")", "ghost < 3", "", "   ", "temp between 30 and 45",
    "temp < 35 and price < 0", "price <3and temp> 36", "Price < 3", "price < 3 and temp = 40",
    "price < -1 and temp >= 38.5", "price < 5\x01", "price < 'é'", "price < 3 AnD temp > 40",
    # exclusions (FastMap maps those of finite numbers on numeric attributes)
    "price != 3", "price > 1 and price != 3 and price != 4", "price not in (1, 2.5,3)",
    "price NOT IN(1)", "price not in ( -1 , +2 ) and temp != 36", "price between 2 and 2 and "
    "price != 2", "price = 1 and price not in (1.0)", "price != 1e999", "price != nan",
    "price not in (1, x)", "price not in ()", "price not (1)", "price != 3 and",
    "sym != IBM and price != 3", "temp != 36 and temp != 36.5 and temp < 40",
]


def _source(spark: Any, values: list[bytes | None], topic: str) -> Any:
    rows = [(None if v is None else bytearray(v), topic, 0, i, [("h", bytearray(b"x"))])
            for i, v in enumerate(values)]
    return spark.createDataFrame(rows, SOURCE_SCHEMA)


def _rows(df: Any) -> list[tuple[Any, ...]]:
    return [(r.topic, r.key, bytes(r.value), [(h.key, bytes(h.value)) for h in r.headers])
            for r in df.collect()]


def _event(template: str, ident: str) -> bytes:
    """A record of ``EVENTS``: ``{%s`` opens with node A, client c and the id."""
    if template.startswith("{%s") or "{ %s" in template:
        return template.replace("%s", OK % ident, 1).encode()
    return (template % ident).encode()


def _events() -> list[bytes]:
    out = [_event(e, f"e{i}") for i, e in enumerate(EVENTS)]
    out.append(b"\xef\xbb\xbf" + _event(EVENTS[0], "e-bom"))
    out.append(encode_raw_event("A", "c", "e-avro", {"sym": "IBM", "price": 1, "temp": 36}))
    out += [b"", b"\xff", None]
    return out


def _both_paths(spark: Any, mapper: Any, values: list[Any], topic: str) -> list[Any]:
    """Map ``values`` both ways, check both give the same rows; the (raw, row) pairs that
    are not dead letters."""
    src = _source(spark, values, topic)
    fast = _rows(mapper(SPACE, src, TOPICS, fast=True))
    slow = _rows(mapper(SPACE, src, TOPICS, fast=False))
    assert fast == slow
    return [(raw, row) for raw, row in zip(values, fast, strict=True)
            if row[0] != TOPICS.deadletter]


def test_events_fast_path_matches_catalyst_and_python(spark: Any) -> None:
    values = _events()
    good = _both_paths(spark, map_events, values, TOPICS.raw_events)
    for raw, (_topic, _key, value, headers) in good:
        if raw[:2] == b"\xc3\x01":
            assert value == raw
            continue
        # Text Python's json refuses (trailing text) is a dead letter on both paths.
        e = json.loads(raw.decode("utf-8-sig"))
        assert value == encode_raw_event(e["node"], e["client"], e["id"], e["attrs"],
                                         e.get("payload", "").encode())
        assert dict(headers)[HEADER_LABEL] == encode_label(event_label(SPACE, e["attrs"]))
    assert len(good) >= 15


def test_subscriptions_fast_path_matches_catalyst_and_python(spark: Any) -> None:
    values = [json.dumps({"node": "A", "client": "c", "id": f"s{i}", "where": w}).encode()
              for i, w in enumerate(WHERES)]
    values += [
        json.dumps({"node": "A", "client": "c", "id": "s-list",
                    "where": [{"attr": "price", "op": "<", "value": 3}]}).encode(),
        json.dumps({"op": "subscribe", "node": "A", "client": "c", "id": "s-op",
                    "where": "price < 3"}).encode(),
        json.dumps({"op": "publish", "node": "A", "client": "c", "id": "s-op2",
                    "where": "price < 3"}).encode(),
        b'{"node": "A", "client": "c", "id": "s-dup", "where": "price < 3", "where": "x"}',
        b'{"node": "A", "client": "c", "id": "s-esc", "where": "price < 3 and sym = \\"IBM\\""}',
        encode_raw_subscription("A", "c", "s-avro", "price < 3"),
    ]
    good = _both_paths(spark, map_subscriptions, values, TOPICS.raw_subscriptions)
    for raw, (_topic, _key, value, _headers) in good:
        m = decode_label_subscription(value)
        if raw[:2] == b"\xc3\x01":
            continue
        where = json.loads(raw)["where"]
        try:
            want = Subscription(SPACE, where).labels()
        except DLSError:
            pytest.fail(f"{where!r} should be refused")
        assert np.array_equal(m["labels"], want), where
        assert m["where"] == (where if isinstance(where, str) else m["where"])
    assert len(good) >= 10


def test_fast_map_takes_the_common_records_and_declines_the_rest(spark: Any) -> None:
    """The shortcut is in use (a plain record is mapped in Java) and declines what it does
    not know (those go to the general mapping)."""
    from pyspark.sql import functions as F

    map_events(SPACE, _source(spark, [b"{}"], TOPICS.raw_events), TOPICS, fast=True)
    cfg = bytearray(fast_config(SPACE, TOPICS, "event"))
    values = [_event(EVENTS[0], "e1"), _event(EVENTS[21], "e2"), _event(EVENTS[24], "e3"),
              b"\xc3\x01"]
    df = spark.createDataFrame([(bytearray(v),) for v in values], "value binary")
    got = df.select(F.call_function("dlsroute_fast_map", F.lit(cfg), F.col("value"))
                    .alias("m")).collect()
    assert got[0].m is not None and bytes(got[0].m.topic).decode() == TOPICS.node_publish("A")
    assert [r.m for r in got[1:]] == [None, None, None]


def test_declined_rows_on_concurrent_tasks(spark: Any) -> None:
    """Many declined records (JSON lists, lambdas in the general mapping) on tasks that run
    at once: each task reads its own copy of the general mapping's expressions, whose lambda
    variables hold state while they run."""
    wheres = [[{"attr": "price", "op": "in", "values": [i % 12, 1.5]},
               {"attr": "sym", "op": "in", "values": ["IBM", "x y"][: 1 + i % 2]}]
              for i in range(600)]
    values = [json.dumps({"node": "A", "client": "c", "id": f"s{i}", "where": w}).encode()
              for i, w in enumerate(wheres)]
    src = _source(spark, values, TOPICS.raw_subscriptions).repartition(4)
    fast = sorted(_rows(map_subscriptions(SPACE, src, TOPICS, fast=True)))
    slow = sorted(_rows(map_subscriptions(SPACE, src, TOPICS, fast=False)))
    assert fast == slow
    assert sum(r[0] == TOPICS.deadletter for r in fast) == 0


def test_fast_path_with_labels_on_the_64th_bit(spark: Any) -> None:
    """16 app-id bits over 48 cell bits: labels above 2**63 (negative as a Java long)."""
    space = ContentSpace.from_spec({"attributes": [
        {"name": "x", "type": "numeric", "low": -1, "high": 1, "granules": 1 << 20},
        {"name": "y", "type": "numeric", "low": 0, "high": 65536, "granules": 1 << 20},
        {"name": "k", "type": "discrete", "values": [f"v{i}" for i in range(200)]}],
        "app_id": 65535})
    events = [{"node": "A", "client": "c", "id": f"e{i}", "attrs": a} for i, a in enumerate([
        {"x": 0.999999, "y": 65536, "k": "v1"}, {"x": -1, "y": 0, "k": "v0"},
        {"k": "v1", "y": 12345.678, "x": 0.1}])]
    src = _source(spark, [json.dumps(e).encode() for e in events], TOPICS.raw_events)
    rows = _rows(map_events(space, src, TOPICS, fast=True))
    assert rows == _rows(map_events(space, src, TOPICS, fast=False))
    for e, (topic, _key, value, headers) in zip(events, rows, strict=True):
        assert topic == TOPICS.node_publish("A")
        assert dict(headers)[HEADER_LABEL] == encode_label(event_label(space, e["attrs"]))
        assert value == encode_raw_event("A", "c", e["id"], e["attrs"], b"")
    wheres = ["x between 0.5 and 0.500001 and y < 0.2", "y = 65536 and x > 0.9999995"]
    values = [json.dumps({"node": "A", "client": "c", "id": f"s{i}", "where": w}).encode()
              for i, w in enumerate(wheres)]
    src = _source(spark, values, TOPICS.raw_subscriptions)
    rows = _rows(map_subscriptions(space, src, TOPICS, fast=True))
    assert rows == _rows(map_subscriptions(space, src, TOPICS, fast=False))
    for w, (topic, _key, value, _headers) in zip(wheres, rows, strict=True):
        assert topic == TOPICS.node_subscribe("A"), w
        labels = decode_label_subscription(value)["labels"]
        assert np.array_equal(labels, Subscription(space, w).labels()), w
        assert int(labels[0]) >= 1 << 63
