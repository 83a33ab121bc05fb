"""The Spark mapping gives the Python mapping's labels and bytes, bit for bit.

Seeded random inputs over several content spaces (uniform cells with awkward bounds,
breakpoints, discrete values, app ids up to the 64th label bit): values sit on cell edges,
breakpoints, domain bounds and their float64 neighbours as often as anywhere else. Every
record goes through ``spark.mapping`` (as JSON and as Avro) and through ``dls`` +
``connectors.serde``; a record Python refuses must come out as a dead letter naming its
source, and every other one must give the same label(s), headers and value bytes.

Cost: one SparkSession (shared) and about 20 s of Spark jobs on two cores.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pytest

from connectors.serde import (
    SERDE,
    decode_dead_letter,
    decode_label_subscription,
    decode_label_unsubscription,
    encode_raw_event,
    encode_raw_subscription,
    encode_raw_unsubscription,
)
from connectors.topics import (
    HEADER_DLQ_REASON,
    HEADER_DLQ_SOURCE,
    HEADER_EVENT_ID,
    HEADER_LABEL,
    HEADER_ORIGIN,
    Topics,
    encode_label,
)
from dls.exceptions import DLSError
from dls.mapping import event_label
from dls.predicates import Predicate, Subscription
from dls.space import BreakpointAttribute, ContentSpace, DiscreteAttribute, UniformAttribute
from spark.mapping import map_events, map_subscriptions, map_unsubscriptions

TOPICS = Topics("p")
SOURCE_SCHEMA = ("value binary, topic string, partition int, offset long, "
                 "headers array<struct<key:string,value:binary>>")

SPACES = [
    {"attributes": [
        {"name": "sym", "type": "discrete", "values": ["AAPL", "IBM", "MSFT", "x y", "é"]},
        {"name": "price", "type": "numeric", "low": -3.7, "high": 12.1, "granules": 37},
        {"name": "temp", "type": "numeric", "low": 30, "high": 45,
         "breakpoints": [35, 36.5, 37.5, 38.5, 40]}],
     "app_id": 7},
    {"attributes": [
        {"name": "a", "type": "numeric", "low": 0, "high": 1, "granules": 10},
        {"name": "b", "type": "numeric", "low": -1e6, "high": 1e6, "granules": 1000},
        {"name": "c", "type": "numeric", "low": 0, "high": 0.3, "breakpoints": [0.1, 0.2]}],
     "filters": {"label_budget": 5000}},
    # 16 app-id bits + 48 cell bits: labels use the 64th bit (negative as Spark's bigint).
    {"attributes": [
        {"name": "x", "type": "numeric", "low": -1, "high": 1, "granules": 1 << 20},
        {"name": "y", "type": "numeric", "low": 0, "high": 65536, "granules": 1 << 20},
        {"name": "k", "type": "discrete", "values": [f"v{i}" for i in range(200)]}],
     "app_id": 65535},
]


def _source(spark: Any, values: list[bytes | None], topic: str) -> Any:
    rows = [(None if v is None else bytearray(v), topic, 0, i,
             [("h1", bytearray(b"\x00\x01")), ("h2", None)]) for i, v in enumerate(values)]
    return spark.createDataFrame(rows, SOURCE_SCHEMA)


def _edges(a: UniformAttribute | BreakpointAttribute) -> list[float]:
    if isinstance(a, UniformAttribute):
        g = a.granules
        step = (a.high - a.low) / g
        ks = range(g + 1) if g <= 64 else [0, 1, 2, g // 3, g // 2, g - 1, g]
        return [a.low + k * step for k in ks] + [a.low, a.high]
    return [a.low, *a.breakpoints, a.high]


def _number(rng: np.random.Generator, a: UniformAttribute | BreakpointAttribute) -> Any:
    r = rng.random()
    if r < 0.45:
        v = float(rng.choice(_edges(a)))
        w = rng.integers(0, 3)
        v = v if w == 0 else math.nextafter(v, math.inf if w == 1 else -math.inf)
    elif r < 0.55:
        v = float(rng.integers(math.ceil(a.low), math.floor(a.high) + 1))
        return int(v) if rng.random() < 0.7 else v
    else:
        v = float(rng.uniform(a.low, a.high))
    if rng.random() < 0.3:  # a short decimal, as people write them
        v = float(f"{v:.{int(rng.integers(0, 4))}f}")
    return v


def _value(rng: np.random.Generator, a: Any) -> Any:
    if isinstance(a, DiscreteAttribute):
        return str(a.values[int(rng.integers(0, len(a.values)))])
    return _number(rng, a)


def _event(rng: np.random.Generator, space: ContentSpace, i: int) -> dict[str, Any]:
    attrs = {a.name: _value(rng, a) for a in space.attributes}
    r = rng.random()
    if r < 0.04:
        attrs.pop(space.names[int(rng.integers(0, len(space.names)))])
    elif r < 0.08:
        attrs["nope"] = 1
    elif r < 0.14:
        a = space.attributes[int(rng.integers(0, len(space.attributes)))]
        attrs[a.name] = ("zzz" if isinstance(a, DiscreteAttribute) else
                         [a.high + 1, a.low - 0.5, "12", True, None][int(rng.integers(0, 5))])
    names = list(attrs)
    rng.shuffle(names)  # key order must be kept in the value bytes
    return {"node": f"N{i % 3}", "client": f"c{i % 5}", "id": f"e{i}",
            "attrs": {k: attrs[k] for k in names}}


def _predicates(rng: np.random.Generator, space: ContentSpace) -> list[Predicate]:
    preds: list[Predicate] = []
    for a in space.attributes:
        r = rng.random()
        if r < 0.35:
            continue
        if isinstance(a, DiscreteAttribute):
            k = int(rng.integers(1, 4))
            vals = tuple(str(v) for v in rng.choice(a.values, size=k))
            if rng.random() < 0.03:
                vals = ("unknown",)
            preds.append(Predicate(a.name, "=", vals) if k == 1 else Predicate(a.name, "in", vals))
            continue
        op = ["between", "<", "<=", ">", ">=", "=", "in"][int(rng.integers(0, 7))]
        x, y = _number(rng, a), _number(rng, a)
        if op == "between":
            lo, hi = (x, y) if (x <= y or rng.random() < 0.05) else (y, x)
            preds.append(Predicate(a.name, "between", (lo, hi)))
        elif op == "in":
            preds.append(Predicate(a.name, "in", tuple(_number(rng, a) for _ in range(3))))
        else:
            preds.append(Predicate(a.name, op, (x,)))
        if a.n_cells > 1000 and rng.random() < 0.8:  # narrow, or over the label budget
            w = (a.high - a.low) * 1e-4 * rng.random()
            preds[-1] = Predicate(a.name, "between", (x, min(a.high, x + w)))
        if rng.random() < 0.15:  # a second predicate on the same attribute intersects
            op2 = [">", "<=", "between"][int(rng.integers(0, 3))]
            preds.append(Predicate(a.name, op2, (min(x, y), max(x, y)) if op2 == "between"
                                   else (y,)))
    if rng.random() < 0.03:
        preds.append(Predicate("ghost", "=", (1,)))
    return preds


def _python_labels(space: ContentSpace, where: Any) -> np.ndarray | None:
    try:
        return Subscription(space, where).labels()
    except DLSError:
        return None


def _headers(row: Any) -> dict[str, bytes]:
    return {h.key: bytes(h.value) for h in row.headers}


def _labels_by_id(out: list[Any]) -> dict[str, Any]:
    """Labels of each mapped subscription by id; None for id ``s<offset>`` if refused.

    For inputs whose ids are ``s0, s1, ...`` in offset order (a dead letter names only
    its source offset).
    """
    got: dict[str, Any] = {}
    for r in out:
        if r.topic == TOPICS.deadletter:
            got[f"s{_headers(r)[HEADER_DLQ_SOURCE].decode().rsplit('@', 1)[1]}"] = None
        else:
            m = decode_label_subscription(bytes(r.value))
            got[m["id"]] = m["labels"]
    return got


def _check_dead(row: Any, topic: str, offset: int, raw: bytes) -> None:
    h = _headers(row)
    assert h[HEADER_DLQ_SOURCE].decode() == f"{topic}[0]@{offset}"
    dl = decode_dead_letter(bytes(row.value))
    assert dl["source"] == f"{topic}[0]@{offset}"
    assert dl["reason"] == h[HEADER_DLQ_REASON].decode() and dl["reason"]
    assert dl["raw"] == raw
    assert dl["headers"] == {"h1": b"\x00\x01", "h2": b""}


@pytest.mark.parametrize("n", range(len(SPACES)))
def test_events_match_python(spark: Any, n: int) -> None:
    space = ContentSpace.from_spec(SPACES[n])
    rng = np.random.default_rng(1000 + n)
    events = [_event(rng, space, i) for i in range(200)]
    values: list[bytes] = []
    for i, e in enumerate(events):
        if i % 4 == 3:  # Avro RawEvent input, when the SDK could encode it at all
            try:
                values.append(encode_raw_event(e["node"], e["client"], e["id"], e["attrs"],
                                               b"pay"))
                continue
            except DLSError:
                pass
        values.append(json.dumps(e | ({"payload": "pé"} if i % 2 else {})).encode())
    out = map_events(space, _source(spark, values, TOPICS.raw_events), TOPICS).collect()
    assert len(out) == len(values)
    good = {_headers(r)[HEADER_EVENT_ID].decode(): r for r in out if r.topic != TOPICS.deadletter}
    dead = {int(_headers(r)[HEADER_DLQ_SOURCE].decode().rsplit("@", 1)[1]): r
            for r in out if r.topic == TOPICS.deadletter}
    assert len(good) + len(dead) == len(values)
    n_good = 0
    for i, (e, raw) in enumerate(zip(events, values, strict=True)):
        if raw[:2] == b"\xc3\x01":
            payload = b"pay"
        else:
            e = json.loads(raw)  # the types exactly as a JSON reader sees them
            payload = e.get("payload", "").encode()
        try:
            label = event_label(space, e["attrs"])
            expected = encode_raw_event(e["node"], e["client"], e["id"], e["attrs"], payload)
        except DLSError:
            assert i in dead, f"{e} should be refused"
            _check_dead(dead[i], TOPICS.raw_events, i, raw)
            continue
        assert e["id"] in good, f"{e} refused: {_headers(dead[i])[HEADER_DLQ_REASON]!r}"
        row = good[e["id"]]
        n_good += 1
        assert row.topic == TOPICS.node_publish(e["node"])
        h = _headers(row)
        assert h[HEADER_LABEL] == encode_label(label), e
        assert h[HEADER_ORIGIN] == f"{e['node']}/{e['client']}".encode()
        assert [x.key for x in row.headers] == [HEADER_LABEL, HEADER_ORIGIN, HEADER_EVENT_ID]
        assert bytes(row.value) == expected, e
    assert n_good > 100 and len(dead) > 5


def _where_forms(rng: np.random.Generator, preds: list[Predicate]) -> Any:
    r = rng.random()
    if r < 0.5:
        return " and ".join(p.to_text() for p in preds)
    if r < 0.6:  # the same text, spelt loosely
        return "  AND ".join(p.to_text().replace(" between ", " BETWEEN ").replace(", ", ",")
                             for p in preds) + " "
    return [p.to_json() for p in preds]


@pytest.mark.parametrize("n", range(len(SPACES)))
def test_subscriptions_match_python(spark: Any, n: int) -> None:
    space = ContentSpace.from_spec(SPACES[n])
    rng = np.random.default_rng(2000 + n)
    subs = []
    for i in range(160):
        where = _where_forms(rng, _predicates(rng, space))
        subs.append({"node": f"N{i % 2}", "client": f"c{i % 7}", "id": f"s{i}", "where": where})
    values = [encode_raw_subscription(s["node"], s["client"], s["id"], s["where"]) if i % 3 == 2
              else json.dumps(s).encode() for i, s in enumerate(subs)]
    out = map_subscriptions(space, _source(spark, values, TOPICS.raw_subscriptions),
                            TOPICS).collect()
    assert len(out) == len(values)
    good = {}
    for r in out:
        if r.topic != TOPICS.deadletter:
            m = decode_label_subscription(bytes(r.value))
            good[m["id"]] = (r.topic, m)
    dead = {int(_headers(r)[HEADER_DLQ_SOURCE].decode().rsplit("@", 1)[1]): r
            for r in out if r.topic == TOPICS.deadletter}
    n_good = 0
    for i, s in enumerate(subs):
        labels = _python_labels(space, s["where"])
        if labels is None:
            assert i in dead, f"{s['where']!r} should be refused"
            _check_dead(dead[i], TOPICS.raw_subscriptions, i, values[i])
            continue
        assert s["id"] in good, (f"{s['where']!r} refused: "
                                 f"{_headers(dead[i])[HEADER_DLQ_REASON]!r}")
        topic, m = good[s["id"]]
        n_good += 1
        assert topic == TOPICS.node_subscribe(s["node"])
        assert m["client"] == s["client"]
        assert np.array_equal(m["labels"], labels), s["where"]
    assert n_good >= (60 if n < 2 else 12) and len(dead) > 3


def test_text_form_edge_cases(spark: Any) -> None:
    space = ContentSpace.from_spec(SPACES[0])
    wheres = [
        "", "   ", "price < 0", "price<=-3.7", "price > 12.1", "price >= 12.1",
        "price between 1 and 1", "price between 2 and 1", "price = 1e-3", "price in (1, 2.5, 99)",
        "price < nan", "price < inf", "price < 1e999", "sym = IBM", "sym = 'x y'",
        'sym in ("x y", \'IBM\', "\\u00e9")', "sym in (é)", "sym = 5", "sym > IBM",
        "sym = and", "price between 1 and", "price between1 and 2", "price < 5 and",
        "and price < 5", "price < 5 and temp >= 36.5 and temp < 38.5", "temp = 40",
        "temp in (35, 36.49999, 45)", "Price < 3", "price < 5 temp > 3", "price < +5.",
        "price < .5e1", "price < 5 AND sym IN (IBM)", "price = -0.0", "temp between 30 and 30",
        "price < 3 and price > 2 and price <= 2.5", "price in (1) and price in (2)",
        "price between -1e300 and 1e300", "sym = \"IBM\"and price < 3", "price<3and sym=IBM",
    ]
    subs = [{"node": "A", "client": "c", "id": f"s{i}", "where": w} for i, w in enumerate(wheres)]
    values = [json.dumps(s).encode() for s in subs]
    out = map_subscriptions(space, _source(spark, values, TOPICS.raw_subscriptions),
                            TOPICS).collect()
    got = _labels_by_id(out)
    for s in subs:
        want = _python_labels(space, s["where"])
        have = got[s["id"]]
        if want is None:
            assert have is None, f"{s['where']!r} should be refused"
        else:
            assert have is not None, f"{s['where']!r} was refused"
            assert np.array_equal(have, want), s["where"]


def test_bad_raw_records_are_dead_letters(spark: Any) -> None:
    space = ContentSpace.from_spec(SPACES[0])
    ok = {"node": "A", "client": "c", "id": "e1",
          "attrs": {"sym": "IBM", "price": 1, "temp": 36}}
    bad = [
        b"", b"\xff\xfe", b"[1, 2]", b"{not json", json.dumps(ok | {"op": "subscribe"}).encode(),
        json.dumps(ok | {"extra": 1}).encode(), json.dumps({**ok, "node": "a.b"}).encode(),
        json.dumps({**ok, "client": 5}).encode(), json.dumps({**ok, "id": ""}).encode(),
        json.dumps({k: v for k, v in ok.items() if k != "attrs"}).encode(),
        json.dumps({**ok, "attrs": [1]}).encode(), json.dumps({**ok, "payload": 3}).encode(),
        json.dumps({**ok, "attrs": {**ok["attrs"], "price": {"x": 1}}}).encode(),
        SERDE.header("RawSubscription") + b"\x00", b"\xc3\x01abc",
        encode_raw_event("A", "c", "e9", {"sym": "IBM", "price": float("nan"), "temp": 36}),
        encode_raw_event("A", "c", "e9", {"sym": 3, "price": 1, "temp": 36}),
        encode_raw_event("A", "c", "", {"sym": "IBM", "price": 1, "temp": 36}),
        encode_raw_event("A", "c", "e9", {"sym": "IBM", "price": 1, "temp": 36})[:-3],
        json.dumps({**ok, "node": "N" * 240}).encode(),
        # a number beyond float64 (Python reads inf), and JSON followed by more text
        json.dumps(ok).encode().replace(b'"price": 1', b'"price": 1e400'),
        json.dumps(ok).encode() + b" x",
    ]
    values = [json.dumps(ok | {"op": "publish"}).encode(), *bad, None]
    out = map_events(space, _source(spark, values, TOPICS.raw_events), TOPICS).collect()
    assert [r.topic for r in out].count(TOPICS.node_publish("A")) == 1
    dead = sorted((r for r in out if r.topic == TOPICS.deadletter),
                  key=lambda r: int(_headers(r)[HEADER_DLQ_SOURCE].rsplit(b"@", 1)[1]))
    assert len(dead) == len(bad) + 1
    for row, i in zip(dead, range(1, len(values)), strict=True):
        _check_dead(row, TOPICS.raw_events, i, values[i] or b"")
    reasons = [decode_dead_letter(bytes(r.value)) for r in dead]
    assert reasons[0]["reason"] == "raw event: empty message"
    assert reasons[5]["field"] == "extra" and "unknown field 'extra'" in reasons[5]["reason"]
    assert reasons[6]["field"] == "node" and "'a.b'" in reasons[6]["reason"]
    assert reasons[15]["field"] == "price" and "NaN" in reasons[15]["reason"]
    assert reasons[16]["field"] == "sym"
    assert reasons[20]["field"] == "price" and reasons[20]["value"] == "inf"
    assert "beyond the float64 range" in reasons[20]["reason"]
    assert "JSON" in reasons[21]["reason"]


def test_unsubscriptions(spark: Any) -> None:
    space = ContentSpace.from_spec(SPACES[0])
    values = [json.dumps({"node": "A", "client": "c", "id": "s1"}).encode(),
              encode_raw_unsubscription("B", "d", "s2"),
              json.dumps({"node": "A", "client": "c"}).encode(),
              json.dumps({"node": "A", "client": "c", "id": "s1", "where": "x"}).encode()]
    out = map_unsubscriptions(space, _source(spark, values, TOPICS.raw_unsubscriptions),
                              TOPICS).collect()
    good = [(r.topic, decode_label_unsubscription(bytes(r.value))) for r in out
            if r.topic != TOPICS.deadletter]
    assert sorted(good, key=lambda g: g[0]) == [
        (TOPICS.node_unsubscribe("A"), decode_label_unsubscription(
            SERDE.encode("LabelUnsubscription", {"client": "c", "id": "s1"}))),
        (TOPICS.node_unsubscribe("B"), decode_label_unsubscription(
            SERDE.encode("LabelUnsubscription", {"client": "d", "id": "s2"})))]
    assert sum(r.topic == TOPICS.deadletter for r in out) == 2


def test_names_ending_in_a_line_break_are_dead_letters(spark: Any) -> None:
    """Python refuses a node or client ``"A\\n"`` (``fullmatch``); so must Spark's rlike, whose
    ``$`` would match before a final line break (the record would name a topic Kafka refuses)."""
    space = ContentSpace.from_spec(SPACES[0])
    attrs = {"sym": "IBM", "price": 1, "temp": 36}
    names = [("A\n", "c"), ("A", "c\n"), ("A\r\n", "c")]
    events = [json.dumps({"node": n, "client": c, "id": "e", "attrs": attrs}).encode()
              for n, c in names]
    events += [SERDE.encode("RawEvent", {"node": n, "client": c, "id": "e", "attrs": attrs,
                                         "payload": b""}) for n, c in names]
    for fast in (None, False):
        out = map_events(space, _source(spark, events, TOPICS.raw_events), TOPICS,
                         fast=fast).collect()
        assert [r.topic for r in out] == [TOPICS.deadletter] * len(events), fast
        fields = [decode_dead_letter(bytes(r.value))["field"] for r in out]
        assert sorted(fields) == ["client", "client", "node", "node", "node", "node"], fast
    unsubs = [json.dumps({"node": n, "client": c, "id": "s"}).encode() for n, c in names]
    out = map_unsubscriptions(space, _source(spark, unsubs, TOPICS.raw_unsubscriptions),
                              TOPICS).collect()
    assert [r.topic for r in out] == [TOPICS.deadletter] * len(unsubs)


def test_repeated_json_keys_and_huge_label_counts(spark: Any) -> None:
    """A repeated key keeps its last value and first place (Python's json); a subscription
    of 2**64 cells is refused as over the budget, not an overflow that stops the query."""
    space = ContentSpace.from_spec(SPACES[0])
    raw = (b'{"node": "A", "client": "c", "id": "e1", "attrs": {"price": 1, "sym": "IBM", '
           b'"temp": 36, "price": 2.5}}')
    e = json.loads(raw)
    (row,) = map_events(space, _source(spark, [raw], TOPICS.raw_events), TOPICS).collect()
    assert row.topic == TOPICS.node_publish("A")
    assert bytes(row.value) == encode_raw_event("A", "c", "e1", e["attrs"], b"")
    assert _headers(row)[HEADER_LABEL] == encode_label(event_label(space, e["attrs"]))
    huge = ContentSpace.from_spec({"attributes": [
        {"name": f"a{i}", "type": "numeric", "low": 0, "high": 1, "granules": 1 << 16}
        for i in range(4)]})
    subs = [{"node": "A", "client": "c", "id": "s1", "where": ""},
            {"node": "A", "client": "c", "id": "s2",
             "where": "a0 = 0.5 and a1 = 0.5 and a2 = 0.25 and a3 between 0 and 0.001"}]
    out = map_subscriptions(huge, _source(spark, [json.dumps(s).encode() for s in subs],
                                          TOPICS.raw_subscriptions), TOPICS).collect()
    by_topic = {r.topic: r for r in out}
    dl = decode_dead_letter(bytes(by_topic[TOPICS.deadletter].value))
    assert dl["reason"] == ("subscription '(everything)' expands to 18446744073709551616 "
                            "labels (a0: 65536, a1: 65536, a2: 65536, a3: 65536 cells), over "
                            "the budget of 65536") and dl["field"] == "labels"
    with pytest.raises(DLSError) as exc:
        Subscription(huge, "").labels()
    assert str(exc.value) == dl["reason"]
    m = decode_label_subscription(bytes(by_topic[TOPICS.node_subscribe("A")].value))
    assert np.array_equal(m["labels"], Subscription(huge, subs[1]["where"]).labels())


def test_a_subscription_past_one_kafka_message_is_a_dead_letter(spark: Any) -> None:
    """A label budget raised past MAX_MESSAGE_LABELS: the job still writes no record that
    Kafka refuses (its sink would fail the query, again at each restart)."""
    from connectors.topics import MAX_MESSAGE_LABELS

    wide = ContentSpace.from_spec({"attributes": [
        {"name": "x", "type": "numeric", "low": 0, "high": 262_144, "granules": 262_144}],
        "filters": {"label_budget": 300_000}})
    subs = [{"node": "A", "client": "c", "id": "big", "where": "x >= 100000"},
            {"node": "A", "client": "c", "id": "fits", "where": "x >= 200000"}]
    raw = [json.dumps(s).encode() for s in subs]
    for fast in (None, False):
        out = map_subscriptions(wide, _source(spark, raw, TOPICS.raw_subscriptions), TOPICS,
                                fast=fast).collect()
        by_topic = {r.topic: r for r in out}
        assert len(out) == 2, fast
        dl = decode_dead_letter(bytes(by_topic[TOPICS.deadletter].value))
        assert dl["reason"] == (f"subscription 'x >= 100000' expands to 162144 labels (x: "
                                f"162144 cells), over the budget of {MAX_MESSAGE_LABELS}, "
                                f"what one Kafka message holds"), fast
        m = decode_label_subscription(bytes(by_topic[TOPICS.node_subscribe("A")].value))
        assert m["id"] == "fits" and len(m["labels"]) == 62_144, fast


def test_fast_path_edges(spark: Any) -> None:
    """Records at the edges of the mapping's shortcuts (a byte-order mark, control
    characters in the text form, numbers as the text form's tokens spell them, a repeated
    or inverted predicate, more keys than attributes) give what the Python side gives."""
    space = ContentSpace.from_spec(SPACES[0])
    ok = {"sym": "IBM", "price": 1, "temp": 36}
    events = [
        b"\xef\xbb\xbf" + json.dumps({"node": "A", "client": "c", "id": "e0",
                                       "attrs": ok}).encode(),
        json.dumps({"node": "A", "client": "c", "id": "e1",
                    "attrs": {"temp": 36.0, "price": -0, "sym": "x y"}}).encode(),
        json.dumps({"node": "A", "client": "c", "id": "e2",
                    "attrs": {**ok, "price": 12345678901234567890}}).encode(),
        json.dumps({"node": "A", "client": "c", "id": "e3",
                    "attrs": {"price": 2, "temp": 37, "sym": "IBM", "x": 1}}).encode(),
        b'{"node": "A", "client": "c", "id": "e4", "attrs": {"price": "1", "temp": 36, '
        b'"sym": "IBM", "price": 3e0}}',
        b'{"node": "A", "client": "c", "id": "e5", "attrs": {"price": 1, "temp": 36}}',
    ]
    out = map_events(space, _source(spark, events, TOPICS.raw_events), TOPICS).collect()
    assert len(out) == len(events)
    got = {}
    for r in out:
        h = _headers(r)
        if r.topic == TOPICS.deadletter:
            got[int(h[HEADER_DLQ_SOURCE].decode().rsplit("@", 1)[1])] = None
        else:
            got[int(h[HEADER_EVENT_ID].decode()[1:])] = (h[HEADER_LABEL], bytes(r.value))
    for i, raw in enumerate(events):
        e = json.loads(raw.decode("utf-8-sig"))
        try:
            want = (encode_label(event_label(space, e["attrs"])),
                    encode_raw_event(e["node"], e["client"], e["id"], e["attrs"], b""))
        except DLSError:
            want = None
        assert got[i] == want, raw
    wheres = [
        "price < 5\x01", "sym in ('IBM', 'x\x02y')", "price between +1 and .5e1",
        "price between 1 and 1e999", "price > -0.0 and temp <= 36.5", "price < 3 and price > 1",
        "price between 3 and 1", "price = 12.1", "price > 12.1", "temp between 30 and 45",
        "price between 1 and 2 and temp between 36 and 37 and sym = IBM", "price = 1e-400",
        "price < 1 and ghost > 2", "price <= 1E1", "price >= -.5", "price = 1.",
    ]
    subs = [b"\xef\xbb\xbf" + json.dumps({"node": "A", "client": "c", "id": f"s{i}",
                                           "where": w}).encode() for i, w in enumerate(wheres)]
    out = map_subscriptions(space, _source(spark, subs, TOPICS.raw_subscriptions),
                            TOPICS).collect()
    labels = _labels_by_id(out)
    for i, w in enumerate(wheres):
        want = _python_labels(space, w)
        have = labels[f"s{i}"]
        if want is None:
            assert have is None, f"{w!r} should be refused"
        else:
            assert have is not None and np.array_equal(have, want), w
