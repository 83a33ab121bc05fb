"""Random interleavings of insert, delete and match: every matcher against plain numpy."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks.baselines.bruteforce import BruteForceBaseline
from benchmarks.baselines.dls import DLSMatcher
from benchmarks.baselines.mics import MICSMatcher
from benchmarks.baselines.rtree_index import RTreeMatcher
from tests.benchmarks.baselines.helpers import csr_lists, exact_sets

D, G, NC, HIGH = 2, 8, 4, 16.0
value = st.integers(0, 32).map(lambda v: v / 2)  # 0.0 .. 16.0 in halves: edges are common
box = st.tuples(value, value, value, value, st.integers(0, NC - 1))
op = st.one_of(st.tuples(st.just("insert"), st.lists(box, min_size=1, max_size=6)),
               st.tuples(st.just("delete"), st.lists(st.integers(0, 10**6), max_size=4)),
               st.tuples(st.just("match"), st.lists(st.tuples(value, value), min_size=1,
                                                    max_size=8)))


@settings(max_examples=60, deadline=None)
@given(st.lists(op, min_size=1, max_size=12))
def test_interleaving(ops):
    exact = {"mics": MICSMatcher(D, G, NC, high=HIGH),
             "rtree": RTreeMatcher(D, NC, high=HIGH, leaf_capacity=4, index_capacity=4),
             "bruteforce": BruteForceBaseline(D, NC, high=HIGH)}
    approx = {"mics-cell": MICSMatcher(D, G, NC, high=HIGH, precision="cell"),
              "dls-direct": DLSMatcher(D, G, NC, client_filter="direct", high=int(HIGH)),
              "dls": DLSMatcher(D, G, NC, high=int(HIGH), client_expected_items=8)}
    lo = np.zeros((0, D))
    hi = np.zeros((0, D))
    owners = np.zeros(0, dtype=np.int64)
    alive = np.zeros(0, dtype=bool)
    for kind, arg in ops:
        if kind == "insert":
            b_lo = np.array([[min(a, b), min(c, e)] for a, b, c, e, _ in arg])
            b_hi = np.array([[max(a, b), max(c, e)] for a, b, c, e, _ in arg])
            own = np.array([o for *_, o in arg])
            for m in (*exact.values(), *approx.values()):
                m.insert(b_lo, b_hi, own)
            lo, hi = np.concatenate([lo, b_lo]), np.concatenate([hi, b_hi])
            owners = np.concatenate([owners, own])
            alive = np.concatenate([alive, np.ones(len(arg), dtype=bool)])
        elif kind == "delete":
            live = np.flatnonzero(alive)
            if len(live) == 0:
                continue
            ids = np.unique(live[np.array(arg, dtype=np.int64) % len(live)])
            for m in (*exact.values(), *approx.values()):
                m.delete(ids)
            alive[ids] = False
        else:
            ev = np.array(arg, dtype=np.float64)
            want = exact_sets(lo, hi, owners, alive, ev)
            for m in exact.values():
                assert csr_lists(*m.match(ev)) == want, m.name
            cells = csr_lists(*approx["mics-cell"].match(ev))
            assert csr_lists(*approx["dls-direct"].match(ev)) == cells
            for name, m in approx.items():
                got = csr_lists(*m.match(ev))
                assert all(set(x) <= set(g) for g, x in zip(got, want, strict=True)), name
    for m in (*exact.values(), *approx.values()):
        assert len(m) == int(alive.sum())
