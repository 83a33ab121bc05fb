"""R-tree and brute-force baselines: exact deliveries against plain numpy, deletion, errors."""

import numpy as np
import pytest

from benchmarks.baselines.base import Matcher
from benchmarks.baselines.bruteforce import BruteForceBaseline
from benchmarks.baselines.rtree_index import RTreeMatcher
from benchmarks.workload import WorkloadParams, generate
from tests.benchmarks.baselines.helpers import boundary_events, csr_lists, exact_sets

MAKERS = {
    "rtree": lambda d, nc: RTreeMatcher(d, nc),
    "rtree-small-nodes": lambda d, nc: RTreeMatcher(d, nc, leaf_capacity=8, index_capacity=8),
    "rtree-never-rebuilds": lambda d, nc: RTreeMatcher(d, nc, insert_rebuild=None,
                                                         delete_rebuild=None),
    "bruteforce": lambda d, nc: BruteForceBaseline(d, nc),
}


@pytest.mark.parametrize("kind", sorted(MAKERS))
@pytest.mark.parametrize(("dist", "d"), [("uniform", 2), ("zipf", 3), ("uniform", 4)])
def test_exact_with_inserts_and_deletes(kind, dist, d):
    w = generate(WorkloadParams(dist, d, 16, 2500, 30, 250, seed=d))
    rng = np.random.default_rng(d + 10)
    ev = np.concatenate([w.events, boundary_events(w.lo, w.hi, rng, 250)])
    m = MAKERS[kind](d, 30)
    assert isinstance(m, Matcher)
    alive = np.zeros(2500, dtype=bool)
    m.insert(w.lo[:1500], w.hi[:1500], w.owners[:1500])  # bulk load (R-tree)
    alive[:1500] = True
    gone = rng.permutation(1500)[:600]
    m.delete(gone[:2])  # entry by entry
    m.delete(gone[2:])  # a rebuild (unless never)
    alive[gone] = False
    m.insert(w.lo[1500:1520], w.hi[1500:1520], w.owners[1500:1520])  # entry by entry
    m.insert(w.lo[1520:], w.hi[1520:], w.owners[1520:])  # a rebuild (unless never)
    alive[1500:] = True
    assert len(m) == int(alive.sum())
    assert csr_lists(*m.match(ev)) == exact_sets(w.lo, w.hi, w.owners, alive, ev)
    m.delete(np.flatnonzero(alive))
    assert len(m) == 0
    assert m.match(ev)[1].size == 0
    m.insert(w.lo[:10], w.hi[:10], w.owners[:10])  # empty again: bulk load again
    alive[:] = False
    alive[:10] = True
    assert csr_lists(*m.match(ev)) == exact_sets(w.lo, w.hi, w.owners, alive, ev)


def test_rtree_memory_grows_with_entries():
    w = generate(WorkloadParams("uniform", 3, 32, 20000, 10, 10, seed=1))
    small, big = RTreeMatcher(3, 10), RTreeMatcher(3, 10)
    small.insert(w.lo[:2000], w.hi[:2000], w.owners[:2000])
    big.insert(w.lo, w.hi, w.owners)
    assert 0 < small.memory_bytes() < big.memory_bytes()
    if big.memory_measured:  # the tree holds at least its boxes and ids
        assert big.memory_bytes() >= 20000 * (16 * 3 + 8)


@pytest.mark.parametrize("kind", sorted(MAKERS))
def test_bad_input_changes_nothing(kind):
    m = MAKERS[kind](2, 3)
    m.insert(np.array([[1.0, 1.0]]), np.array([[2.0, 2.0]]), np.array([0]))
    with pytest.raises(ValueError, match="lo\\[0, 1\\] = 3.0 > hi\\[0, 1\\] = 2.0"):
        m.insert(np.array([[0.0, 3.0]]), np.array([[1.0, 2.0]]), np.array([1]))
    with pytest.raises(ValueError, match="owners\\[0\\] = -1"):
        m.insert(np.array([[0.0, 0.0]]), np.array([[1.0, 2.0]]), np.array([-1]))
    with pytest.raises(KeyError, match="ids\\[0\\] = 5"):
        m.delete(np.array([5]))
    with pytest.raises(ValueError, match="events must be an \\(E, 2\\) array"):
        m.match(np.array([1.0, 1.0, 1.0]))
    assert len(m) == 1
    assert csr_lists(*m.match(np.array([[1.5, 1.5]]))) == [[0]]
