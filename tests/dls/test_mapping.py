"""Mapping checked against a brute-force reference, boundaries included."""

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dls.exceptions import EventError, PredicateError
from dls.mapping import box_labels_batch, event_label, event_labels_batch, validate_event
from dls.predicates import NumericConstraint, Subscription
from dls.space import ContentSpace, DiscreteAttribute, UniformAttribute

SYMS = ["A", "B", "C", "D", "E"]


@st.composite
def spaces(draw):
    attrs = []
    for i in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["uniform", "breakpoints", "discrete"]))
        if kind == "discrete":
            vals = draw(st.lists(st.sampled_from(SYMS), min_size=1, max_size=5, unique=True))
            attrs.append({"name": f"a{i}", "type": "discrete", "values": vals})
            continue
        low = draw(st.integers(-1000, 1000)) / draw(st.sampled_from([1, 4, 10]))
        high = low + draw(st.integers(1, 2000)) / draw(st.sampled_from([1, 3, 8]))
        if kind == "uniform":
            attrs.append({"name": f"a{i}", "type": "numeric", "low": low, "high": high,
                          "granules": draw(st.integers(1, 40))})
        else:
            n = draw(st.integers(1, 6))
            bps = sorted({low + (high - low) * f for f in
                          draw(st.lists(st.floats(0.01, 0.99), min_size=n, max_size=n))})
            bps = [b for b in bps if low < b < high]
            if not bps:
                bps = [(low + high) / 2]
            attrs.append({"name": f"a{i}", "type": "numeric", "low": low, "high": high,
                          "breakpoints": bps})
    app = draw(st.one_of(st.none(), st.integers(0, 65535)))
    spec = {"attributes": attrs}
    if app is not None:
        spec["app_id"] = app
    return ContentSpace.from_spec(spec)


def edge_values(attr):
    """Values around every cell edge, every cell middle and the domain ends."""
    if isinstance(attr, UniformAttribute):
        w = (attr.high - attr.low) / attr.granules
        edges = [attr.low + j * w for j in range(attr.granules + 1)]
    else:
        edges = [attr.low, *attr.breakpoints, attr.high]
    out = {(a + b) / 2 for a, b in zip(edges, edges[1:], strict=False)}  # cell middles
    for e in edges:
        for v in (e, math.nextafter(e, -math.inf), math.nextafter(e, math.inf)):
            if attr.low <= v <= attr.high:
                out.add(v)
    return sorted(out)


@st.composite
def space_and_predicates(draw):
    space = draw(spaces())
    return space, draw(predicates_for(space))


@st.composite
def predicates_for(draw, space):
    """Predicates over ``space``: each attribute left out or constrained, edges likely."""
    preds = []
    for attr in space.attributes:
        if draw(st.booleans()):
            continue
        if isinstance(attr, DiscreteAttribute):
            vals = draw(st.lists(st.sampled_from(attr.values), min_size=1, unique=True))
            preds.append({"attr": attr.name, "op": "in", "values": vals})
            continue
        cands = edge_values(attr) + [attr.low - 5, attr.high + 5]
        op = draw(st.sampled_from(["between", "<", "<=", ">", ">=", "="]))
        a = draw(st.one_of(st.sampled_from(cands), st.floats(attr.low, attr.high)))
        if op == "between":
            b = draw(st.one_of(st.sampled_from(cands), st.floats(attr.low, attr.high)))
            preds.append({"attr": attr.name, "op": op, "low": min(a, b), "high": max(a, b)})
        else:
            preds.append({"attr": attr.name, "op": op, "value": a})
    return preds


def reference_cells(attr, constraint):
    """Brute force: cells reached by every candidate value that satisfies the constraint."""
    if constraint is None:
        return list(range(attr.n_cells))
    if isinstance(attr, DiscreteAttribute):
        return sorted(attr.cell(v) for v in constraint.values)
    assert isinstance(constraint, NumericConstraint)
    lo, hi = constraint.effective_bounds()
    cands = [v for v in edge_values(attr) if constraint.contains(v)]
    cands += [v for v in (lo, hi) if attr.low <= v <= attr.high and constraint.contains(v)]
    return sorted({attr.cell(v) for v in cands})


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(space_and_predicates(), st.randoms(use_true_random=False))
def test_subscription_labels_equal_brute_force_and_cover_every_match(sp, rnd):
    space, preds = sp
    try:
        sub = Subscription(space, preds)
    except Exception as exc:  # a predicate that can match nothing is a legitimate refusal
        assert "can match nothing" in str(exc)
        return
    per_attr = [reference_cells(a, sub.constraints.get(a.name)) for a in space.attributes]
    want = sorted(space.compose(c) for c in np.array(np.meshgrid(*per_attr, indexing="ij"))
                  .reshape(len(per_attr), -1).T.tolist())
    got = sub.labels(budget=10**7).tolist()
    assert got == want
    assert got == sorted(set(got))
    labelset = set(got)
    # Every matching event, edges included, maps into the set (no false negative).
    for _ in range(50):
        event = {}
        for a in space.attributes:
            if isinstance(a, DiscreteAttribute):
                event[a.name] = rnd.choice(a.values)
            else:
                event[a.name] = rnd.choice(edge_values(a) + [rnd.uniform(a.low, a.high)])
        if sub.matches(event):
            assert event_label(space, event) in labelset


@settings(max_examples=100, deadline=None)
@given(spaces(), st.integers(0, 2**32))
def test_event_batch_equals_scalar(space, seed):
    rng = np.random.default_rng(seed)
    n = 64
    cols = {}
    for a in space.attributes:
        if isinstance(a, DiscreteAttribute):
            cols[a.name] = rng.choice(list(a.values) + ["zz"], n)
        else:
            edges = np.array(edge_values(a))
            cols[a.name] = np.where(rng.random(n) < 0.5, rng.choice(edges, n),
                                    rng.uniform(a.low - 1, a.high + 1, n))
    labels, valid = event_labels_batch(space, cols)
    for i in range(n):
        event = {k: (v[i].item() if hasattr(v[i], "item") else v[i]) for k, v in cols.items()}
        try:
            want = event_label(space, event)
        except EventError:
            assert not valid[i]
            continue
        assert valid[i] and int(labels[i]) == want


@settings(max_examples=100, deadline=None)
@given(spaces(), st.integers(0, 2**32))
def test_box_batch_equals_scalar_cross_product(space, seed):
    rng = np.random.default_rng(seed)
    n = 20
    d = len(space.attributes)
    cells = np.array([a.n_cells for a in space.attributes])
    a = rng.integers(0, cells, (n, d))
    b = rng.integers(0, cells, (n, d))
    lo, hi = np.minimum(a, b), np.maximum(a, b)
    offsets, labels = box_labels_batch(space, lo, hi, budget=10**7)
    for i in range(n):
        per = [np.arange(lo[i, j], hi[i, j] + 1) for j in range(d)]
        want = sorted(space.compose(c) for c in
                      np.array(np.meshgrid(*per, indexing="ij")).reshape(d, -1).T.tolist())
        assert labels[offsets[i]:offsets[i + 1]].tolist() == want


SPACE = ContentSpace.from_spec({"attributes": [
    {"name": "price", "type": "numeric", "low": 0, "high": 1000, "granules": 32},
    {"name": "sym", "type": "discrete", "values": ["AAPL", "IBM"]},
]})


@pytest.mark.parametrize("event, fragment", [
    ({"price": 10}, "lacks attribute 'sym'"),
    ({"price": 10, "sym": "IBM", "x": 1}, "unknown attribute 'x'"),
    ({"price": 1000.5, "sym": "IBM"}, "outside the domain"),
    ({"price": -0.1, "sym": "IBM"}, "outside the domain"),
    ({"price": float("nan"), "sym": "IBM"}, "value is NaN"),
    ({"price": "10", "sym": "IBM"}, "must be a number"),
    ({"price": 10, "sym": "GOOG"}, "unknown value 'GOOG'"),
    ({"price": 10, "sym": 3}, "must be a string"),
    ([1, 2], "must be an object"),
])
def test_bad_events_are_refused(event, fragment):
    with pytest.raises(EventError) as exc:
        validate_event(SPACE, event)
    assert fragment in str(exc.value)


def test_domain_ends_are_inside():
    assert SPACE.decompose(event_label(SPACE, {"price": 1000, "sym": "IBM"})) == (31, 1)
    assert SPACE.decompose(event_label(SPACE, {"price": 0, "sym": "AAPL"})) == (0, 0)


def test_box_batch_refuses_mismatched_shapes():
    lo = np.zeros((3, 2), dtype=np.int64)
    with pytest.raises(PredicateError) as exc:
        box_labels_batch(SPACE, lo, np.zeros((3, 3), dtype=np.int64))
    assert isinstance(exc.value, ValueError)
    assert exc.value.field == "cells" and exc.value.value == ((3, 2), (3, 3))
    assert "(n, 2)" in str(exc.value)


def test_mapping_does_not_import_predicates():
    """The arrow runs one way: predicates use the mapping for their labels, not back."""
    import ast
    from pathlib import Path

    import dls.mapping

    tree = ast.parse(Path(dls.mapping.__file__).read_text())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert "dls.predicates" not in imported
    assert Subscription(SPACE, "price < 10").labels().size > 0
