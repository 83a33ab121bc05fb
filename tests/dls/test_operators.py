"""The operators (!=, not in, prefix, exists/missing, OR) and attribute types (optional,
string, hashed) against a brute-force reading of the predicates.

The brute force below interprets the JSON predicates directly on an event; it shares no
code with :mod:`dls.constraints`. Properties: no false negative (a matching event's label is
among the subscription's labels), exact matching, interior labels hold only matching events,
and the text form compiles to the same subscription.
"""

from __future__ import annotations

import zlib
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from dls.edge import interior_labels, interior_mask
from dls.exceptions import EventError, PredicateError
from dls.mapping import event_label, event_labels_batch
from dls.predicates import Subscription
from dls.space import ContentSpace

SPEC = {"attributes": [
    {"name": "price", "type": "numeric", "low": 0, "high": 100, "granules": 8},
    {"name": "vol", "type": "numeric", "low": 0, "high": 10, "breakpoints": [2, 5],
     "optional": True},
    {"name": "sym", "type": "discrete", "values": ["A", "B", "C"], "optional": True},
    {"name": "name", "type": "string", "breakpoints": ["B", "Ga", "N"]},
    {"name": "user", "type": "hashed", "buckets": 5, "optional": True},
]}
SPACE = ContentSpace.from_spec(SPEC)
NUMS = {"price": [0, 12.5, 25, 30, 50, 99.5, 100], "vol": [0, 1.5, 2, 5, 7, 10]}
STRS = ["", "A", "AB", "ABC", "B", "B\x00", "Ga", "G", "Gz", "N", "Na", "Z", "a",
        "\U0010ffff", "A\U0010ffff", "\x00", "nan", "Inf", "or", 'a "b\\', "1x"]
USERS = ["u1", "u2", "u3", "zz", "", "é", "missing", "u 1"]
POOL = {"price": NUMS["price"], "vol": NUMS["vol"], "sym": ["A", "B", "C"], "name": STRS,
        "user": USERS}
OPS = {"price": ["=", "!=", "<", "<=", ">", ">=", "between", "in", "not in"],
       "vol": ["=", "!=", "<", ">=", "between", "in", "not in", "exists", "missing"],
       "sym": ["=", "!=", "in", "not in", "exists", "missing"],
       "name": ["=", "!=", "<", "<=", ">", ">=", "between", "in", "not in", "prefix"],
       "user": ["=", "!=", "in", "not in", "exists", "missing"]}


def brute(alts: list[list[dict[str, Any]]], event: dict[str, Any]) -> bool:
    """Does ``event`` satisfy some alternative, reading the predicates literally."""
    def ok(p: dict[str, Any]) -> bool:
        v, op = event.get(p["attr"]), p["op"]
        if op in ("exists", "missing"):
            return (v is None) == (op == "missing")
        if v is None:
            return False
        x = p.get("value")
        return {
            "=": lambda: v == x, "!=": lambda: v != x, "<": lambda: v < x,
            "<=": lambda: v <= x, ">": lambda: v > x, ">=": lambda: v >= x,
            "between": lambda: p["low"] <= v <= p["high"],
            "in": lambda: v in p["values"], "not in": lambda: v not in p["values"],
            "prefix": lambda: v.startswith(x),
        }[op]()
    return any(all(ok(p) for p in alt) for alt in alts)


@st.composite
def predicates(draw: Any) -> dict[str, Any]:
    attr = draw(st.sampled_from(sorted(OPS)))
    op = draw(st.sampled_from(OPS[attr]))
    pool = POOL[attr] + (["Gb", "M"] if attr == "name" else [])
    if op in ("exists", "missing"):
        return {"attr": attr, "op": op}
    if op in ("in", "not in"):
        return {"attr": attr, "op": op, "values": draw(st.lists(st.sampled_from(pool),
                                                                min_size=1, max_size=3))}
    if op == "between":
        a, b = sorted(draw(st.lists(st.sampled_from(pool), min_size=2, max_size=2)))
        return {"attr": attr, "op": op, "low": a, "high": b}
    if op == "prefix":
        return {"attr": attr, "op": op, "value": draw(st.sampled_from(
            ["", "A", "G", "Ga", "N", "\U0010ffff", "B"]))}
    return {"attr": attr, "op": op, "value": draw(st.sampled_from(pool))}


def _constants(alts: list[list[dict[str, Any]]]) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {name: [] for name in POOL}
    for alt in alts:
        for p in alt:
            out[p["attr"]] += [p[k] for k in ("value", "low", "high") if k in p]
            out[p["attr"]] += p.get("values", [])
    return out


@st.composite
def events(draw: Any, near: dict[str, list[Any]]) -> dict[str, Any]:
    """An event whose values are often the predicates' own constants (edges are where
    mistakes hide)."""
    ev: dict[str, Any] = {}
    for name, pool in POOL.items():
        optional = SPACE.by_name[name].optional
        if optional and draw(st.booleans()) and draw(st.booleans()):
            if draw(st.booleans()):
                ev[name] = None
            continue
        close = [v for v in near[name] if v in pool or name == "name"]
        use_near = bool(close) and draw(st.booleans())
        ev[name] = draw(st.sampled_from(close if use_near else pool))
    return ev


ALTS = st.lists(st.lists(predicates(), min_size=1, max_size=3), min_size=1, max_size=3)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(alts=ALTS, data=st.data())
def test_operators_match_the_brute_force(alts: list[list[dict[str, Any]]],
                                         data: st.DataObject) -> None:
    evs = data.draw(st.lists(events(_constants(alts)), min_size=20, max_size=40))
    where: Any = alts[0] if len(alts) == 1 else {"any": alts}
    try:
        sub = Subscription(SPACE, where)
    except PredicateError as exc:
        assert "can match nothing" in str(exc), exc
        # refused as empty: some alternative matches none of the events
        assert any(not any(brute([a], e) for e in evs) for a in alts)
        assume(False)
        return
    labels = sub.labels()
    assert np.all(np.diff(labels.astype(np.float64)) > 0) or len(labels) == 1
    inner = set(interior_labels(sub).tolist())
    mask = interior_mask(sub)
    assert set(labels[mask].tolist()) == inner
    as_set = set(labels.tolist())
    for e in evs:
        want = brute(alts, e)
        label = event_label(SPACE, e)
        assert sub.matches(e) == want, (str(sub), e)
        if want:
            assert label in as_set, (str(sub), e)  # no false negative
        if label in inner:
            assert want, (str(sub), e)  # an interior cell holds only matches
    again = Subscription(SPACE, str(sub))
    assert np.array_equal(again.labels(), labels)
    assert all(again.matches(e) == sub.matches(e) for e in evs), str(sub)
    assert Subscription(SPACE, sub.to_json()).to_json() == sub.to_json()


def test_optional_attribute_absent_cell_and_missing() -> None:
    ev = {"price": 10, "name": "x"}
    cells = SPACE.decompose(event_label(SPACE, ev))
    assert cells[1] == 3 and cells[2] == 3 and cells[4] == 5  # the absent cells
    assert event_label(SPACE, ev | {"vol": None, "sym": None}) == event_label(SPACE, ev)
    sub = Subscription(SPACE, "vol missing and sym exists")
    assert not sub.matches(ev) and sub.matches(ev | {"sym": "A"})
    assert SPACE.by_name["vol"].n_cells == 4 and SPACE.bits[1] == 2
    with pytest.raises(EventError, match="event lacks attribute 'price'"):
        event_label(SPACE, {"name": "x"})


def test_hashed_buckets_are_crc32_and_unseen_values_route() -> None:
    user = SPACE.by_name["user"]
    for v in ["u1", "never-seen-before", "", "é"]:
        assert user.cell(v) == zlib.crc32(v.encode("utf-8")) % 5
    label = event_label(SPACE, {"price": 1, "name": "x", "user": "never-seen-before"})
    assert label in set(Subscription(SPACE, "user != u1").labels().tolist())
    labels, ok = event_labels_batch(SPACE, {
        "price": [1.0, 2.0], "vol": [None, 3.0], "sym": ["A", None], "name": ["x", 5],
        "user": ["a", None]})
    assert ok.tolist() == [True, False]
    assert labels[0] == event_label(SPACE, {"price": 1.0, "sym": "A", "name": "x",
                                            "user": "a"})


def test_string_cells_and_prefix_ranges() -> None:
    name = SPACE.by_name["name"]
    assert [name.cell(s) for s in ["", "A", "B", "Ga", "Gz", "N", "zzz"]] == [0, 0, 1, 2, 2, 3, 3]
    # prefix "G" is ["G", "H"): cells 1 ("G" < "Ga") and 2; "H" is not in cell 3's range
    assert Subscription(SPACE, 'name prefix "G"').cells(name).tolist() == [1, 2]
    # open upper end at a breakpoint: strings < "Ga" stop in cell 1
    assert Subscription(SPACE, 'name < Ga').cells(name).tolist() == [0, 1]
    assert Subscription(SPACE, 'name <= Ga').cells(name).tolist() == [0, 1, 2]


@pytest.mark.parametrize(("where", "field", "reason"), [
    ("sym < A", "sym", "attribute 'sym' is discrete: '<' does not apply (it takes =, !=, in, "
     "not in, exists, missing)"),
    ("price prefix A", "price", "attribute 'price' is numeric: 'prefix' does not apply (it "
     "takes =, !=, <, <=, >, >=, between, in, not in)"),
    ("price exists", "price", "'exists' does not apply"),
    ("user > a", "user", "attribute 'user' is hashed: '>' does not apply"),
    ([{"attr": "sym", "op": "in", "values": []}], "sym",
     "attribute 'sym': 'in' needs a non-empty list of values, got []"),
    ([{"attr": "sym", "op": "not in", "values": []}], "sym",
     "attribute 'sym': 'not in' needs a non-empty list of values, got []"),
    ({"any": []}, "where", "'any' needs a non-empty list of alternatives, got []"),
    ({"any": [[{"attr": "sym", "op": "=", "value": "A"}], []]}, "where",
     "alternative 2 of 'any' is empty"),
    ("name = 5", "name", "attribute 'name' is string: values must be strings, got 5"),
    ("price != x", "price", "attribute 'price': value must be a number, got 'x'"),
    ("sym != Z", "sym", "attribute 'sym': unknown value 'Z'"),
    ("vol exists and vol missing", "vol", "can match nothing inside the domain"),
    ("vol > 3 and vol missing", "vol", "can match nothing inside the domain"),
    ("sym = A and sym != A", "sym", "can match nothing inside the domain"),
    ("name prefix A and name prefix B", "name", "can match nothing inside the domain"),
    ("price between 5 and 5 and price != 5", "price", "can match nothing inside the domain"),
    ("price > 1 and (vol < 3 or vol > 5)", "where",
     "parentheses may only enclose a whole alternative"),
    ("((price > 1))", "where", "parentheses may only enclose a whole alternative"),
    ("price > 1 or", "where", "expected an attribute name"),
])
def test_bad_forms_name_field_and_value(where: Any, field: str, reason: str) -> None:
    with pytest.raises(PredicateError) as info:
        Subscription(SPACE, where)
    assert info.value.field == field
    assert reason in str(info.value)


def test_or_labels_are_a_union_without_repeats() -> None:
    a = Subscription(SPACE, "price < 20")
    b = Subscription(SPACE, "price < 40")
    both = Subscription(SPACE, "(price < 20) or price < 40")
    assert np.array_equal(both.labels(), b.labels())
    assert set(a.labels().tolist()) <= set(both.labels().tolist())
    assert str(both) == "(price < 20) or (price < 40)"
