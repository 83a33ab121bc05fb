"""The slack-optimal cells: exact over their candidates, never worse than equi-depth."""

from __future__ import annotations

import itertools

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks.cells_fit import fit_attributes, slack_cost, slack_optimal_cuts
from dls.space import ContentSpace
from dls.tuning import equi_depth_breakpoints

HIGH = 63


def _instance(seed: int, n_subs: int = 12, n_events: int = 40):
    rng = np.random.default_rng(seed)
    events = np.sort(rng.integers(0, HIGH + 1, n_events)).astype(np.float64)
    lo = rng.integers(0, HIGH + 1, n_subs)
    hi = np.minimum(HIGH, lo + rng.integers(0, 20, n_subs))
    w = rng.random(n_subs)
    return events, lo.astype(np.float64), hi.astype(np.float64), w


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**31), cells=st.integers(1, 4),
       n_cand=st.integers(1, 7))
def test_dynamic_programme_is_the_brute_force_optimum(seed, cells, n_cand):
    events, lo, hi, w = _instance(seed)
    rng = np.random.default_rng(seed + 1)
    cand = np.unique(rng.integers(1, HIGH + 1, n_cand)).astype(np.float64)
    cuts, cost = slack_optimal_cuts(events, lo, hi, cells, 0, HIGH, weights=w,
                                    candidates=cand)
    k = min(cells - 1, len(cand))
    assert len(cuts) == k and list(cuts) == sorted(set(cuts))
    assert set(cuts) <= set(cand.tolist())
    best = min(slack_cost(c, events, lo, hi, w, 0, HIGH)
               for c in itertools.combinations(cand.tolist(), k))
    assert cost == np.float64(cost)
    assert abs(cost - best) < 1e-9
    assert abs(slack_cost(cuts, events, lo, hi, w, 0, HIGH) - best) < 1e-9


def test_cut_at_every_bound_leaves_no_slack():
    lo = np.array([3.0, 10.0])
    hi = np.array([5.0, 20.0])
    events = np.arange(0, HIGH + 1, dtype=np.float64)
    cuts, cost = slack_optimal_cuts(events, lo, hi, 5, 0, HIGH, candidates=[3, 6, 10, 21, 40])
    assert cuts == (3.0, 6.0, 10.0, 21.0) and cost == 0.0
    # one cell too few: the cheapest bound to leave uncut is the one with the least mass
    cuts, cost = slack_optimal_cuts(events, lo, hi, 4, 0, HIGH, candidates=[3, 6, 10, 21])
    assert cost == min(slack_cost(c, events, lo, hi, np.ones(2), 0, HIGH)
                       for c in itertools.combinations([3, 6, 10, 21], 3))
    assert cost > 0


def test_no_worse_than_equi_depth_on_skewed_data():
    rng = np.random.default_rng(7)
    events = np.sort(np.minimum(HIGH * 16, rng.zipf(1.5, 3000))).astype(np.float64)
    lo = np.minimum(HIGH * 16, rng.zipf(1.5, 500)).astype(np.float64)
    hi = np.minimum(HIGH * 16, lo + rng.integers(0, 30, 500))
    eq = equi_depth_breakpoints(events, 8, 0, HIGH * 16)
    cuts, cost = slack_optimal_cuts(events, lo, hi, 8, 0, HIGH * 16,
                                    candidates=np.arange(1, HIGH * 16 + 1))
    assert cost <= slack_cost(eq, events, lo, hi, np.ones(500), 0, HIGH * 16) + 1e-12
    assert len(cuts) == 7


def test_fit_attributes_gives_a_valid_space_of_the_same_width():
    rng = np.random.default_rng(3)
    attrs = [{"name": f"a{i}", "type": "numeric", "low": 0, "high": 1023, "granules": 8}
             for i in range(2)]
    events = rng.integers(0, 1024, (400, 2))
    lo = rng.integers(0, 1024, (100, 2))
    hi = np.minimum(1023, lo + rng.integers(0, 100, (100, 2)))
    fitted = fit_attributes(attrs, events, lo, hi, rounds=1)
    assert [a["name"] for a in fitted] == ["a0", "a1"]
    assert all("granules" not in a and len(a["breakpoints"]) == 7 for a in fitted)
    assert attrs[0]["granules"] == 8  # the input is not changed
    space = ContentSpace.from_spec({"attributes": fitted})
    assert [a.n_cells for a in space.attributes] == [8, 8]
