"""Interior cells and the bounds of the edge check, against brute force at every cell edge."""

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dls.edge import interior_cells, interior_mask, needs_values, numeric_bounds
from dls.mapping import event_label
from dls.predicates import Subscription
from dls.space import ContentSpace, DiscreteAttribute
from tests.dls.test_mapping import edge_values, space_and_predicates


def _events(space, rnd, n):
    for _ in range(n):
        event = {}
        for a in space.attributes:
            if isinstance(a, DiscreteAttribute):
                event[a.name] = rnd.choice(a.values)
            else:
                event[a.name] = rnd.choice(edge_values(a) + [rnd.uniform(a.low, a.high)])
        yield event


def _bounds_check(space, bounds, event):
    num = [a for a in space.attributes if not isinstance(a, DiscreteAttribute)]
    return all(lo <= event[a.name] <= hi for a, (lo, hi) in zip(num, bounds, strict=True))


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(space_and_predicates(), st.randoms(use_true_random=False))
def test_an_event_in_an_interior_cell_matches_and_the_bounds_decide_the_rest(sp, rnd):
    space, preds = sp
    try:
        sub = Subscription(space, preds)
    except Exception as exc:  # a predicate that can match nothing is a legitimate refusal
        assert "can match nothing" in str(exc)
        return
    labels = sub.labels(budget=10**7)
    mask = interior_mask(sub)
    assert mask.shape == labels.shape
    interior = dict(zip(labels.tolist(), mask.tolist(), strict=True))
    bounds = numeric_bounds(sub)
    assert not needs_values(sub)  # no numeric `in` among these predicates
    for event in _events(space, rnd, 80):
        label = event_label(space, event)
        if label not in interior:
            assert not sub.matches(event)
            continue
        if interior[label]:
            assert sub.matches(event), (event, sub)
        # Where the label is the subscription's, the bounds say exactly whether it matches.
        assert _bounds_check(space, bounds, event) == sub.matches(event), (event, sub)


def _space():
    return ContentSpace.from_spec({"attributes": [
        {"name": "sym", "type": "discrete", "values": ["A", "B", "C"]},
        {"name": "price", "type": "numeric", "low": 0, "high": 100, "granules": 10}]})


def test_a_range_is_interior_strictly_inside_and_at_the_domain_edge():
    space = _space()
    price = space.by_name["price"]
    # cells 2..5 touched; 2 (from 25) and 5 (to 55) are boundary, 3 and 4 interior
    sub = Subscription(space, "price between 25 and 55")
    assert sub.cells(price).tolist() == [2, 3, 4, 5]
    assert interior_cells(sub, price).tolist() == [False, True, True, False]
    # an exact edge still counts as boundary (no arithmetic on cell edges is trusted)
    assert interior_cells(Subscription(space, "price >= 20"), price).tolist() == (
        [False] + [True] * 7)
    assert interior_cells(Subscription(space, "price < 100"), price).tolist() == (
        [True] * 9 + [False])
    assert interior_cells(Subscription(space, "price <= 100"), price).all()
    # the discrete attribute never needs the value: its cell is its value
    sub = Subscription(space, "sym in (A, C) and price between 25 and 55")
    assert interior_mask(sub).tolist() == [False, True, True, False] * 2


def test_a_numeric_set_of_values_is_never_interior():
    space = _space()
    sub = Subscription(space, [{"attr": "price", "op": "in", "values": [5, 50]}])
    assert needs_values(sub)
    assert not interior_mask(sub).any()
    assert np.array_equal(numeric_bounds(sub), [[0.0, 100.0]])  # the set is checked apart
