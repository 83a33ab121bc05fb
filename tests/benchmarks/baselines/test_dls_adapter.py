"""The DLS adapters: no missed delivery, traffic in labels, deletion, errors."""

import numpy as np
import pytest

from benchmarks.baselines.base import Matcher
from benchmarks.baselines.dls import DLSMatcher
from benchmarks.workload import WorkloadParams, generate
from tests.benchmarks.baselines.helpers import csr_lists, exact_sets

VARIANTS = [({}, "dls"), ({"client_filter": "direct"}, "dls-direct"),
            ({"mode": "paper"}, "dls-paper"),
            ({"mode": "paper", "client_filter": "direct"}, "dls-paper-direct")]


@pytest.mark.parametrize(("kw", "name"), VARIANTS)
def test_no_false_negatives_and_deletion(kw, name):
    n = 300 if "paper" in name else 1500  # paper mode's SFF rule walks label by label
    w = generate(WorkloadParams("zipf", 3, 8, n, 20, 300, seed=2))
    m = DLSMatcher.for_workload(w, **kw)
    assert isinstance(m, Matcher) and m.name == name
    fwd = m.insert(w.lo[:200], w.hi[:200], w.owners[:200])
    fwd += m.insert(w.lo[200:], w.hi[200:], w.owners[200:])
    assert 0 < fwd <= 8**3
    alive = np.ones(n, dtype=bool)
    gone = np.arange(0, n, 2)
    m.delete(gone)
    alive[gone] = False
    got = csr_lists(*m.match(w.events))
    want = exact_sets(w.lo, w.hi, w.owners, alive, w.events)
    assert all(g == sorted(set(g)) for g in got)
    assert all(set(x) <= set(g) for g, x in zip(got, want, strict=True))
    assert m.memory_bytes() > 0
    m.delete(np.flatnonzero(alive))
    assert len(m) == 0


def test_traffic_counts_labels_of_new_cells():
    """g=4, d=2 over [0, 4]: a 2x2-cell box is 4 labels; a box inside it adds none."""
    m = DLSMatcher(2, 4, 2, client_filter="direct", high=4)
    assert m.insert(np.array([[0.5, 0.5]]), np.array([[1.5, 1.5]]), np.array([0])) == 4
    assert m.insert(np.array([[0.2, 0.2]]), np.array([[0.7, 0.7]]), np.array([1])) == 0
    assert m.insert(np.array([[1.5, 1.5]]), np.array([[2.5, 1.5]]), np.array([1])) == 1
    assert m.delete(np.array([0])) == 2  # cells (0,1) and (1,0); (0,0) and (1,1) remain
    assert m.delete(np.array([1, 2])) == 3  # (0,0), (1,1) and (2,1)
    assert csr_lists(*m.match(np.array([[0.3, 0.3], [4.5, 1.0]]))) == [[], []]


def test_bad_input():
    m = DLSMatcher(2, 4, 2, high=4)
    with pytest.raises(ValueError, match="hi\\[0, 0\\] = 5.0 is outside the domain"):
        m.insert(np.array([[0.0, 0.0]]), np.array([[5.0, 1.0]]), np.array([0]))
    with pytest.raises(KeyError, match="ids\\[0\\] = 0 is not a subscription number"):
        m.delete(np.array([0]))
    with pytest.raises(ValueError, match="mode must be"):
        DLSMatcher(2, 4, 2, mode="fast")  # type: ignore[arg-type]
    assert len(m) == 0
