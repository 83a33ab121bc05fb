"""The Spark mapping of the issue-16 operators and attribute types gives the SDK's answers.

Optional, string and hashed attributes, and the operators ``!=``, ``not in``, ``prefix``,
``exists``, ``missing`` and OR (``{"any": ...}`` and a text ``or`` with parentheses), in
seeded random draws like ``test_mapping_parity.py``'s: every record goes through both
paths of the job (``fast=False``, the Catalyst expressions in the plan; ``fast=True``, the
Java UDFs, where FastMap declines these records and ``General`` maps them) and through
``dls`` + ``connectors.serde``. A record Python refuses must be a dead letter naming the
same field (and, for the refusals of the operator contract, giving the same reason); any
other must give the same labels and bytes.

Cost: one SparkSession (shared); each space's records are mapped once per path (a module
fixture), about 60 s of Spark jobs on two cores, most of it building the Catalyst plans.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pytest

from connectors.serde import (
    decode_dead_letter,
    decode_label_subscription,
    encode_raw_event,
    encode_raw_subscription,
)
from connectors.topics import HEADER_DLQ_SOURCE, HEADER_LABEL, Topics, encode_label
from dls.exceptions import DLSError
from dls.mapping import event_label
from dls.predicates import Subscription
from dls.space import ContentSpace
from spark.fastpath import fast_config
from spark.mapping import map_events, map_subscriptions

TOPICS = Topics("p")
SOURCE_SCHEMA = ("value binary, topic string, partition int, offset long, "
                 "headers array<struct<key:string,value:binary>>")
MAX = chr(0x10FFFF)
SPACE = ContentSpace.from_spec({
    "attributes": [
        # Breakpoints on the edges of each UTF-8 length and around U+10FFFF.
        {"name": "sym", "type": "string", "breakpoints": sorted([
            "\x7f", "\x80", "G", "N", "T", "b", "b\U0010ffff", "é", "߿", "ࠀ", "\uffff",
            "\U00010000"])},
        {"name": "user", "type": "hashed", "buckets": 16, "optional": True},
        {"name": "price", "type": "numeric", "low": 0, "high": 10, "granules": 8,
         "optional": True},
        {"name": "temp", "type": "numeric", "low": 30, "high": 45,
         "breakpoints": [35, 37.5, 40]},
        {"name": "side", "type": "discrete", "values": ["buy", "sell", "x y"],
         "optional": True}],
    "app_id": 9, "filters": {"label_budget": 3000}})
# The space of the parity tests: FastMap maps its plain records, and must decline the new
# operators (the general path maps them).
OLD = ContentSpace.from_spec({
    "attributes": [
        {"name": "sym", "type": "discrete", "values": ["AAPL", "IBM", "MSFT", "x y", "é"]},
        {"name": "price", "type": "numeric", "low": -3.7, "high": 12.1, "granules": 37},
        {"name": "temp", "type": "numeric", "low": 30, "high": 45,
         "breakpoints": [35, 36.5, 37.5, 38.5, 40]}],
    "app_id": 7})
STRINGS = ["", "nan", "Or", "A", "G", "Ga", "G" + MAX, "M", "N", "NZ", "T", "Tz", "z", "é", "éa",
           "x y", "\U0001f600", "a'b", 'q"', MAX, "b" + MAX, "߿", "\uffff"]


def _source(spark: Any, values: list[bytes], topic: str) -> Any:
    rows = [(bytearray(v), topic, 0, i, [("h", bytearray(b"x"))]) for i, v in enumerate(values)]
    return spark.createDataFrame(rows, SOURCE_SCHEMA)


def _rows(df: Any) -> list[tuple[Any, ...]]:
    return [(r.topic, bytes(r.value), {h.key: bytes(h.value) for h in r.headers})
            for r in df.collect()]


def _both(spark: Any, mapper: Any, space: ContentSpace, values: list[bytes],
          topic: str) -> list[tuple[Any, ...]]:
    """The rows of both paths (which must be the same), in offset order."""
    src = _source(spark, values, topic)
    slow = _rows(mapper(space, src, TOPICS, fast=False))
    fast = _rows(mapper(space, src, TOPICS, fast=True))
    assert fast == slow
    return slow


def _python(space: ContentSpace, where: Any) -> tuple[Any, DLSError | None]:
    try:
        return Subscription(space, where).labels(), None
    except DLSError as exc:
        return None, exc


# -- random draws -----------------------------------------------------------------------------
def _string(rng: np.random.Generator) -> str:
    return str(STRINGS[int(rng.integers(0, len(STRINGS)))])


def _number(rng: np.random.Generator, a: Any) -> Any:
    edges = ([a.low + k * (a.high - a.low) / a.granules for k in range(a.granules + 1)]
             if hasattr(a, "granules") else [a.low, *a.breakpoints, a.high])
    v = float(rng.choice(edges))
    r = rng.random()
    if r < 0.3:
        v = math.nextafter(v, math.inf if rng.random() < 0.5 else -math.inf)
    elif r < 0.5:
        v = float(rng.uniform(a.low, a.high))
    return int(v) if v.is_integer() and rng.random() < 0.5 else v


def _value(rng: np.random.Generator, a: Any) -> Any:
    if a.kind == "numeric":
        return _number(rng, a)
    if a.kind == "discrete":
        return str(a.values[int(rng.integers(0, len(a.values)))])
    return _string(rng)


def _event(rng: np.random.Generator, space: ContentSpace, i: int) -> dict[str, Any]:
    attrs = {}
    for a in space.attributes:
        if a.optional and rng.random() < 0.25:
            continue
        attrs[a.name] = _value(rng, a)
    if rng.random() < 0.1:  # a value of the wrong type
        a = space.attributes[int(rng.integers(0, len(space.attributes)))]
        attrs[a.name] = 5 if a.kind != "numeric" else "5"
    return {"node": "A", "client": "c", "id": f"e{i}", "attrs": attrs}


def _pred(rng: np.random.Generator, a: Any) -> dict[str, Any]:
    ops = {"numeric": ["=", "!=", "<", "<=", ">", ">=", "between", "in", "not in"],
           "discrete": ["=", "!=", "in", "not in"],
           "string": ["=", "!=", "<", "<=", ">", ">=", "between", "in", "not in", "prefix",
                      "prefix"],
           "hashed": ["=", "!=", "in", "not in"]}[a.kind]
    if a.optional:
        ops = [*ops, "exists", "missing"]
    op = str(rng.choice(ops))
    if rng.random() < 0.03:  # an operator of another type
        op = str(rng.choice(["prefix", "<", "exists"]))
    p: dict[str, Any] = {"attr": a.name, "op": op}
    if op == "between":
        x, y = _value(rng, a), _value(rng, a)
        if type(x) is type(y) and x > y and rng.random() < 0.9:
            x, y = y, x
        p |= {"low": x, "high": y}
    elif op in ("in", "not in"):
        p["values"] = [_value(rng, a) for _ in range(int(rng.integers(1, 4)))]
    elif op not in ("exists", "missing"):
        p["value"] = _value(rng, a)
    return p


def _alternative(rng: np.random.Generator, space: ContentSpace) -> list[dict[str, Any]]:
    preds = []
    for a in space.attributes:
        mine = [_pred(rng, a) for _ in range(int(rng.choice([0, 0, 1, 1, 1, 2])))]
        if any(p["op"] == "missing" for p in mine) and rng.random() < 0.8:
            mine = [{"attr": a.name, "op": "missing"}]  # mostly alone: else it is refused
        preds += mine
    rng.shuffle(preds)  # type: ignore[arg-type]
    return preds or [_pred(rng, space.attributes[0])]


def _text(preds: list[dict[str, Any]]) -> str:
    from dls.predicates import Predicate

    return " and ".join(Predicate.from_json(p).to_text() for p in preds)


def _where(rng: np.random.Generator, space: ContentSpace) -> Any:
    alts = [_alternative(rng, space) for _ in range(int(rng.choice([1, 1, 2, 3])))]
    r = rng.random()
    if r < 0.35:
        return alts[0] if len(alts) == 1 else {"any": alts}
    texts = [_text(a) for a in alts]
    return " or ".join(f"({t})" if rng.random() < 0.5 else t for t in texts)


# -- tests ------------------------------------------------------------------------------------
PREFIXES = ["", "\x7e", "\x7f", "߾", "߿", "\ufffe", "\uffff", "\U0010fffe", MAX, "a" + MAX, "b",
            "b" + MAX, "b" + MAX + MAX, "T", "T\x00"]


def _wheres(space: ContentSpace) -> list[Any]:
    """Random draws, and for the new types the bad forms and prefixes on code-point edges."""
    rng = np.random.default_rng(1600 if space is SPACE else 1601)
    wheres = [_where(rng, space) for _ in range(50)]
    if space is SPACE:
        wheres += [f"price {w[1]}" if isinstance(w, tuple) else w for w in BAD]
        wheres += [f"sym prefix {json.dumps(p, ensure_ascii=False)}" for p in PREFIXES]
        wheres += [[{"attr": "sym", "op": "prefix", "value": p},
                    {"attr": "sym", "op": "<", "value": q}]
                   for p in PREFIXES[::2] for q in ("b", "é", "\uffff")]
    return wheres


@pytest.fixture(scope="module")
def mapped(spark: Any) -> dict[str, tuple[list[Any], list[tuple[Any, ...]]]]:
    """Each space's subscriptions (``_wheres``), mapped by both paths (checked alike)."""
    out = {}
    for name, space in (("new", SPACE), ("old", OLD)):
        wheres = _wheres(space)
        values = [encode_raw_subscription("A", "c", f"s{i}", w) if i % 5 == 4 else
                  json.dumps({"node": "A", "client": "c", "id": f"s{i}", "where": w}).encode()
                  for i, w in enumerate(wheres)]
        out[name] = (wheres, _both(spark, map_subscriptions, space, values,
                                   TOPICS.raw_subscriptions))
    return out


def test_events_of_every_attribute_type_match_python(spark: Any) -> None:
    rng = np.random.default_rng(16)
    events = [_event(rng, SPACE, i) for i in range(50)]
    values = []
    for i, e in enumerate(events):
        try:
            if i % 4 == 3:
                values.append(encode_raw_event("A", "c", e["id"], e["attrs"], b""))
                continue
        except DLSError:
            pass
        values.append(json.dumps(e).encode())
    rows = _both(spark, map_events, SPACE, values, TOPICS.raw_events)
    n_good = 0
    for raw, e, (topic, value, headers) in zip(values, events, rows, strict=True):
        try:
            label = event_label(SPACE, e["attrs"])
        except DLSError as exc:
            assert topic == TOPICS.deadletter, e
            dl = decode_dead_letter(value)
            assert dl["field"] == exc.field, e
            # The new refusals word for word (a float's text differs: Java's, not Python's).
            if " attribute: value must be a string" in str(exc) or "lacks" in str(exc):
                assert dl["reason"] == str(exc), e
            continue
        assert topic == TOPICS.node_publish("A"), (e, decode_dead_letter(value)["reason"])
        assert headers[HEADER_LABEL] == encode_label(label), e
        assert value == raw if raw[:2] == b"\xc3\x01" else value == encode_raw_event(
            "A", "c", e["id"], e["attrs"], b"")
        n_good += 1
    assert n_good > 25


@pytest.mark.parametrize("name", ["new", "old"])
def test_subscriptions_with_every_operator_match_python(mapped: Any, name: str) -> None:
    """Labels, or the dead letter's field and reason, as the SDK's (on both paths: the
    fixture checks they agree)."""
    space = SPACE if name == "new" else OLD
    wheres, rows = mapped[name]
    n_good = n_same_reason = 0
    for w, (topic, value, _headers) in zip(wheres, rows, strict=True):
        want, exc = _python(space, w)
        if exc is not None:
            assert topic == TOPICS.deadletter, f"{w!r} should be refused: {exc}"
            dl = decode_dead_letter(value)
            assert dl["field"] == exc.field, (w, dl["reason"], str(exc))
            if _contract_reason(str(exc)):
                assert dl["reason"] == str(exc), w
                n_same_reason += 1
            continue
        assert topic == TOPICS.node_subscribe("A"), (w, decode_dead_letter(value)["reason"])
        assert np.array_equal(decode_label_subscription(value)["labels"], want), w
        n_good += 1
    assert n_good > 12 and n_same_reason > 12, (n_good, n_same_reason)


def test_bad_subscriptions_get_the_sdks_field_and_reason(mapped: Any) -> None:
    """The bad forms of the issue (an operator on the wrong type, an empty 'in' / 'not in',
    an OR over nothing, a prefix on a numeric attribute, exists on a required attribute, a
    value of the wrong type...): the SDK's compile and the job (both paths) refuse each
    with the same field and reason."""
    wheres, rows = mapped["new"]
    bad = {json.dumps(f"price {w[1]}" if isinstance(w, tuple) else w) for w in BAD}
    n = 0
    for i, (w, (topic, value, headers)) in enumerate(zip(wheres, rows, strict=True)):
        if json.dumps(w) not in bad:
            continue
        _, exc = _python(SPACE, w)
        assert exc is not None, w
        assert topic == TOPICS.deadletter, w
        dl = decode_dead_letter(value)
        assert headers[HEADER_DLQ_SOURCE].decode() == dl["source"]
        assert dl["source"].endswith(f"@{i}")
        assert (dl["field"], dl["reason"]) == (exc.field, str(exc)), w
        n += 1
    assert n == len(BAD)


def _contract_reason(reason: str) -> bool:
    """A refusal whose words the job gives as the SDK does: all but the text form's parse
    errors (the job reads the text with one regular expression, not token by token)."""
    return "in subscription text" not in reason and "subscription text at" not in reason


BAD = [
    ("price", "between 1 and 2 and price prefix 'A'"),
    [{"attr": "side", "op": "<", "value": "buy"}],
    [{"attr": "user", "op": "between", "low": "a", "high": "b"}],
    [{"attr": "sym", "op": "in", "values": []}],
    [{"attr": "sym", "op": "not in", "values": []}],
    {"any": []},
    {"any": [[{"attr": "temp", "op": ">", "value": 36}], []]},
    {"any": [[{"attr": "temp", "op": ">", "value": 36}], "temp > 1"]},
    {"all": [[{"attr": "temp", "op": ">", "value": 36}]]},
    [{"attr": "price", "op": "prefix", "value": "1"}],
    [{"attr": "temp", "op": "exists"}],
    [{"attr": "sym", "op": "missing"}],
    [{"attr": "sym", "op": "=", "value": 5}],
    [{"attr": "user", "op": "not in", "values": ["a", 5.5]}],
    [{"attr": "side", "op": "!=", "value": "hold"}],
    [{"attr": "side", "op": "in", "values": [True]}],
    [{"attr": "sym", "op": "prefix", "value": 1}],
    [{"attr": "price", "op": "like", "value": 1}],
    [{"attr": "price", "op": "exists", "value": 1}],
    [{"attr": "sym", "op": "between", "low": "b", "high": "a"}],
    [{"attr": "ghost", "op": "exists"}],
    "temp > 36 or side < buy", "user prefix abc", "temp exists", "sym = 5 or temp > 40",
    "side in (buy, hold)", "(temp > 36) or sym missing", "price not in (1) and price > a",
    "temp missing or user between a and b",
]


def test_fast_map_declines_every_record_of_a_space_with_new_types(spark: Any) -> None:
    from pyspark.sql import functions as F

    map_events(OLD, _source(spark, [b"{}"], TOPICS.raw_events), TOPICS, fast=True)
    plain = json.dumps({"node": "A", "client": "c", "id": "e1",
                        "attrs": {"sym": "A", "temp": 36}}).encode()
    cfg = fast_config(SPACE, TOPICS, "event")
    assert b"decline all" in cfg and b"attr " not in cfg
    df = spark.createDataFrame([(bytearray(plain),)], "value binary")
    got = df.select(F.call_function("dlsroute_fast_map", F.lit(bytearray(cfg)),
                                    F.col("value")).alias("m")).collect()
    assert got[0].m is None
    old = json.dumps({"node": "A", "client": "c", "id": "e1",
                      "attrs": {"sym": "IBM", "price": 1, "temp": 36}}).encode()
    df = spark.createDataFrame([(bytearray(old),)], "value binary")
    got = df.select(F.call_function("dlsroute_fast_map",
                                    F.lit(bytearray(fast_config(OLD, TOPICS, "event"))),
                                    F.col("value")).alias("m")).collect()
    assert got[0].m is not None


def test_fast_map_maps_numeric_exclusions_and_declines_the_other_new_forms(spark: Any) -> None:
    """``!=`` / ``not in`` of finite numbers on a numeric attribute are FastMap's (the
    labels are the test_mapping_fast cases'); every other new form goes to General."""
    from pyspark.sql import functions as F

    map_subscriptions(OLD, _source(spark, [b"{}"], TOPICS.raw_subscriptions), TOPICS,
                      fast=True)
    mine = ["price != 3", "price > 1 and price != 3 and price not in (4, 5.5)",
            "temp not in(36) and price < 2"]
    others = ["price between 2 and 2 and price != 2", "sym != IBM", "price < 1 or price > 3",
              "(price < 1)", "sym not in (IBM)", "price != 1e999", "price not in (1, x)"]
    values = [json.dumps({"node": "A", "client": "c", "id": f"s{i}", "where": w}).encode()
              for i, w in enumerate(mine + others)]
    df = spark.createDataFrame([(bytearray(v),) for v in values], "value binary")
    cfg = bytearray(fast_config(OLD, TOPICS, "subscription"))
    got = df.select(F.call_function("dlsroute_fast_map", F.lit(cfg), F.col("value"))
                    .alias("m")).collect()
    assert [r.m is not None for r in got] == [True] * len(mine) + [False] * len(others)
    for w, r in zip(mine, got[:len(mine)], strict=True):
        labels = decode_label_subscription(bytes(r.m.value))["labels"]
        assert np.array_equal(labels, Subscription(OLD, w).labels()), w
