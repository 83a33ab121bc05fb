"""Rows read straight from where texts equal the rows of the compiled subscriptions."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from benchmarks import quotes
from broker_node.edge import simple_parts
from broker_node.simple_rows import simple_row
from dls.exceptions import DLSError
from dls.predicates import Subscription
from dls.space import ContentSpace

SPACE = ContentSpace.from_spec({"attributes": [
    {"name": "sym", "type": "discrete", "values": ["A", "B", "BRK.B", "C-1", "x_y"]},
    {"name": "price", "type": "numeric", "low": 0, "high": 100, "granules": 8},
    {"name": "vol", "type": "numeric", "low": -50, "high": 50,
     "breakpoints": [-10, 0, 0.5, 20]},
    {"name": "q", "type": "numeric", "low": 0, "high": 10, "granules": 2, "optional": True},
    {"name": "name", "type": "string", "breakpoints": ["G", "N"]}]})

NUMS = st.one_of(st.sampled_from([0, 100, -50, 50, 12.5, 0.5, -10, 20, 37.5, 101, -51]),
                 st.sampled_from([0, 100, -50, 50, 12.5, 0.5, -10, 20, 37.5, 101, -51]),
                 st.floats(-60, 110, allow_nan=False).map(lambda v: round(v, 3)),
                 st.integers(-60, 110))  # the same few values often: ends that meet
WORDS = st.sampled_from(["A", "B", "BRK.B", "C-1", "x_y", "Z", "IBM"])


def _fmt(v: Any) -> str:
    return str(int(v)) if isinstance(v, float) and v.is_integer() else str(v)


@st.composite
def predicate(draw: Any) -> str:
    attr = draw(st.sampled_from(["sym", "price", "vol", "price", "vol", "sym", "q", "name",
                                 "nope"]))
    kind = draw(st.sampled_from(["between", "cmp", "in", "eq_word", "ne"]))
    if kind == "between":
        return f"{attr} between {_fmt(draw(NUMS))} and {_fmt(draw(NUMS))}"
    if kind == "cmp":
        op = draw(st.sampled_from(["<", "<=", ">", ">=", "="]))
        return f"{attr} {op} {_fmt(draw(NUMS))}"
    if kind == "in":
        vals = draw(st.lists(st.one_of(WORDS, NUMS.map(_fmt)), min_size=1, max_size=3))
        return f"{attr} in ({', '.join(map(str, vals))})"
    if kind == "eq_word":
        return f"{attr} = {draw(WORDS)}"
    if draw(st.booleans()):
        vals = draw(st.lists(WORDS, min_size=1, max_size=3))
        return f"{attr} not in ({', '.join(vals)})"
    return f"{attr} != {draw(st.one_of(WORDS, NUMS.map(_fmt)))}"


texts = st.one_of(
    st.lists(predicate(), min_size=1, max_size=5).map(" and ".join),
    st.lists(predicate(), min_size=2, max_size=4).map(" and ".join),
    st.lists(predicate(), min_size=2, max_size=3).map(" or ".join),
    st.lists(predicate(), min_size=1, max_size=3).map(lambda ps: "  and ".join(ps)),
    st.just(""), st.just("(everything)"), st.just('sym = "A"'))


def _compiled_row(space: ContentSpace, text: str) -> Any:
    """The row the node made before: compile, then simple_parts; None when not simple."""
    sub = Subscription(space, text)
    numeric = [i for i, a in enumerate(space.attributes) if a.kind == "numeric"]
    discrete = [i for i, a in enumerate(space.attributes) if a.kind == "discrete"]
    return simple_parts(sub, numeric, discrete)


def _same(a: Any, b: Any) -> bool:
    return np.array_equal(a[0], b[0]) and len(a[1]) == len(b[1]) and all(
        np.array_equal(x, y) for x, y in zip(a[1], b[1], strict=True))


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=texts)
def test_a_row_read_from_the_text_is_the_compiled_one(text: str) -> None:
    fast = simple_row(SPACE, text)
    if fast is None:
        return  # the node compiles it, as before
    row = _compiled_row(SPACE, text)  # raises if the text does not compile: a failure
    assert row is not None, text
    assert _same(fast, row), text


@settings(max_examples=300, deadline=None)
@given(text=st.lists(predicate(), min_size=1, max_size=4).map(" and ".join))
def test_the_sdk_spelling_of_a_simple_subscription_is_always_read(text: str) -> None:
    try:
        sub = Subscription(SPACE, text)
    except DLSError:
        return
    canonical = str(sub)  # what the SDK writes in the LabelSubscription
    row = _compiled_row(SPACE, canonical)
    if row is None or '"' in canonical:
        return
    fast = simple_row(SPACE, canonical)
    if fast is None and re.search(r"(price|vol) (!=|not in)", canonical):
        return  # a numeric exclusion outside the domain: simple, but left to the compiler
    assert fast is not None, canonical
    assert _same(fast, row), canonical


def test_the_quotes_workload_is_read_without_compiling() -> None:
    w = quotes.generate(quotes.QuotesParams(300, 10, 3))
    space = quotes.space()
    for i in range(len(w)):
        canonical = str(Subscription(space, w.where(i)))
        fast = simple_row(space, canonical)
        assert fast is not None, canonical
        assert _same(fast, _compiled_row(space, canonical))


@pytest.mark.parametrize("text", [
    "price between 60 and 20",  # inverted: the compiler refuses it
    "price > 100", "price < 0",  # outside the domain: nothing matches
    "sym in (A, Z)", "sym = IBM",  # unknown values
    "q between 1 and 2",  # optional attribute: a general row
    "name = A", "nope = 1", "price in (1, 2)", "price != 3", "sym not in (A, B, BRK.B, C-1, x_y)",
    "price between 1 and 2 or sym = A", "price between 1 and 2 and",
    "price between 1e3 and 2", 'sym = "A"', "price between 1 and 2 and sym in (A, B",
])
def test_what_the_reader_leaves_to_the_compiler(text: str) -> None:
    assert simple_row(SPACE, text) is None


@pytest.mark.parametrize("text", [
    "price > 12.5 and price >= 12.5", "price >= 12.5 and price > 12.5",
    "price < 20 and price <= 20", "price <= 20 and price < 20",
    "price between 12.5 and 20 and price > 12.5 and price < 20", "price = 0 and vol = 50",
    "price > 0 and vol < 50", "sym in (A, B) and sym != A and sym not in (C-1)",
])
def test_ends_that_meet_are_taken_as_the_compiler_takes_them(text: str) -> None:
    fast = simple_row(SPACE, text)
    assert fast is not None
    assert _same(fast, _compiled_row(SPACE, text))
