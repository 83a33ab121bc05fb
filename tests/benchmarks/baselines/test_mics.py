"""MICS: hand-worked traffic on a 4x4 grid, exact deliveries, deletion, bad input.

The 2-D grid of the traffic tests has ``g = 4`` cells per attribute over ``[0, 4]``, so
the cell of a value is its integer part (4 falls in cell 3). Attribute 0 runs down,
attribute 1 across, and each cell shows its Hilbert position::

           a1=0 a1=1 a1=2 a1=3
    a0=0     0    3    4    5
    a0=1     1    2    7    6
    a0=2    14   13    8    9
    a0=3    15   12   11   10

Subscriptions (boxes of cells, a0 range x a1 range) and what inserting them in this order
forwards to a neighbour:

===  =============  ===============  ==================  =====================  =======
id   a0 x a1        positions        ranges              not yet covered        forwarded
===  =============  ===============  ==================  =====================  =======
A 0  0-1 x 0-1      0 1 2 3          [0,3]               0 1 2 3 -> [0,3]       1
B 1  0-1 x 1-2      3 4 2 7          [2,4] [7,7]         4, 7 -> [4,4] [7,7]    2
C 2  0   x 2-3      4 5              [4,5]               5 -> [5,5]             1
D 3  1   x 0-3      1 2 7 6          [1,2] [6,7]         6 -> [6,6]             1
E 4  2   x 0-3      14 13 8 9        [8,9] [13,14]       all -> two ranges      2
F 5  2-3 x 0-3      8..15            [8,15]              10 11 12, 15           2
G 6  0   x 0        0                [0,0]               nothing                0
===  =============  ===============  ==================  =====================  =======

Total 9. Deleting A forwards nothing (0 is still G's, 1 and 2 D's, 3 B's); then deleting
G withdraws [0,0]; then deleting B withdraws [3,3] (2 is D's, 4 C's, 7 D's).
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks.baselines.base import Matcher
from benchmarks.baselines.dls import DLSMatcher
from benchmarks.baselines.mics import MICSMatcher
from benchmarks.workload import WorkloadParams, generate
from tests.benchmarks.baselines.helpers import boundary_events, csr_lists, exact_sets

# (a0 lo, a0 hi, a1 lo, a1 hi) in cells; the boxes use values inside the cells.
BOXES = [(0, 1, 0, 1), (0, 1, 1, 2), (0, 0, 2, 3), (1, 1, 0, 3), (2, 2, 0, 3), (2, 3, 0, 3),
         (0, 0, 0, 0)]
TRAFFIC = [1, 2, 1, 1, 2, 2, 0]
RANGES = [[(0, 3)], [(2, 4), (7, 7)], [(4, 5)], [(1, 2), (6, 7)], [(8, 9), (13, 14)],
          [(8, 15)], [(0, 0)]]


def grid_boxes(rows):
    lo = np.array([[a, c] for a, _, c, _ in rows], dtype=np.float64) + 0.25
    hi = np.array([[b, e] for _, b, _, e in rows], dtype=np.float64) + 0.75
    return lo, hi


def grid_mics(**kw) -> MICSMatcher:
    return MICSMatcher(2, 4, 3, high=4.0, **kw)


def test_protocol():
    assert isinstance(grid_mics(), Matcher)


def test_traffic_one_by_one():
    m = grid_mics()
    lo, hi = grid_boxes(BOXES)
    got = [m.insert(lo[i:i + 1], hi[i:i + 1], np.array([i % 3])) for i in range(len(BOXES))]
    assert got == TRAFFIC
    assert [m.ranges_of(i) for i in range(len(BOXES))] == RANGES
    assert m.advertised() == [(0, 15)]
    assert m.delete(np.array([0])) == 0
    assert m.delete(np.array([6])) == 1
    assert m.delete(np.array([1])) == 1
    assert m.advertised() == [(1, 2), (4, 15)]


def test_traffic_batch_equals_one_by_one():
    m = grid_mics()
    lo, hi = grid_boxes(BOXES)
    assert m.insert(lo, hi, np.arange(len(BOXES)) % 3) == sum(TRAFFIC)
    assert m.delete(np.array([0, 6, 1])) == 2


def test_withdrawals_are_per_subscription():
    """[0,3] then [4,5]: contiguous, but two subscriptions withdraw them: two ranges."""
    m = grid_mics()
    lo, hi = grid_boxes([BOXES[0], BOXES[2]])
    assert m.insert(lo, hi, np.array([0, 1])) == 2
    assert m.advertised() == [(0, 5)]
    assert m.delete(np.array([0, 1])) == 2
    assert m.advertised() == []
    assert m.n_segments == 1 and m.index_state()[1].size == 0


def test_grid_matching_exact_and_cell():
    lo, hi = grid_boxes(BOXES)
    owners = np.arange(len(BOXES)) % 3
    ev = np.array([[0.1, 0.1], [0.8, 0.5], [3.9, 3.9], [4.0, 4.0], [1.5, 2.9], [2.9, 2.9]])
    exact = grid_mics()
    cell = grid_mics(precision="cell")
    for m in (exact, cell):
        m.insert(lo, hi, owners)
    want = exact_sets(lo, hi, owners, np.ones(len(BOXES), bool), ev)
    assert csr_lists(*exact.match(ev)) == want
    # Cells: (0,0) is covered by A and G; (0,0) events at 0.1 miss the boxes (from .25).
    assert csr_lists(*cell.match(ev))[0] == [0]
    assert want[0] == []


def _workload(dist, d, g, n, seed):
    return generate(WorkloadParams(dist, d, g, n, 25, 300, seed=seed))


@pytest.mark.parametrize(("dist", "d", "g"), [("uniform", 2, 16), ("zipf", 3, 8),
                                              ("uniform", 4, 4)])
def test_exact_against_brute_force_with_deletes(dist, d, g):
    w = _workload(dist, d, g, 3000, seed=d)
    rng = np.random.default_rng(d)
    ev = np.concatenate([w.events, boundary_events(w.lo, w.hi, rng, 200)])
    m = MICSMatcher(d, g, 25)
    for a in range(0, 3000, 700):
        m.insert(w.lo[a:a + 700], w.hi[a:a + 700], w.owners[a:a + 700])
    alive = np.ones(3000, dtype=bool)
    assert csr_lists(*m.match(ev)) == exact_sets(w.lo, w.hi, w.owners, alive, ev)
    gone = rng.permutation(3000)[:1800]
    m.delete(gone[:900])
    m.delete(gone[900:])
    alive[gone] = False
    assert len(m) == 1200
    assert csr_lists(*m.match(ev)) == exact_sets(w.lo, w.hi, w.owners, alive, ev)
    # The index is the one a fresh matcher builds from the survivors.
    keep = np.flatnonzero(alive)
    fresh = MICSMatcher(d, g, 25)
    fresh.insert(w.lo[keep], w.hi[keep], w.owners[keep])
    b1, p1 = m.index_state()
    b2, p2 = fresh.index_state()
    assert (b1 == b2).all()
    renumber = (p2 & np.uint64(0xFFFFFFFF)).astype(np.int64)
    p2_old = ((p2 >> np.uint64(32)) << np.uint64(32)) | keep[renumber].astype(np.uint64)
    assert (np.sort(p2_old) == p1).all()
    assert m.advertised() == fresh.advertised()


def test_small_deletes_mark_postings_dead_until_compaction():
    """Deletes below a quarter of the postings only mark them; results stay exact."""
    w = _workload("uniform", 3, 8, 2000, seed=11)
    m = MICSMatcher(3, 8, 25)
    one = MICSMatcher(3, 8, 25)
    m.insert(w.lo[:1500], w.hi[:1500], w.owners[:1500])
    one.insert(w.lo[:1500], w.hi[:1500], w.owners[:1500])
    alive = np.zeros(2000, dtype=bool)
    alive[:1500] = True
    rng = np.random.default_rng(11)
    gone = rng.permutation(1500)[:120]
    t_batch = m.delete(gone[:60]) + m.delete(gone[60:])
    t_one = sum(one.delete(gone[i:i + 1]) for i in range(120))
    assert t_batch == t_one
    assert m._n_dead > 0  # still marked, not dropped
    alive[gone] = False
    want = exact_sets(w.lo, w.hi, w.owners, alive, w.events)
    assert csr_lists(*m.match(w.events)) == want
    assert m.advertised() == one.advertised()
    m.insert(w.lo[1500:], w.hi[1500:], w.owners[1500:])  # drops the dead postings
    alive[1500:] = True
    assert m._n_dead == 0
    assert csr_lists(*m.match(w.events)) == exact_sets(w.lo, w.hi, w.owners, alive, w.events)
    keep = np.flatnonzero(alive)
    fresh = MICSMatcher(3, 8, 25)
    fresh.insert(w.lo[keep], w.hi[keep], w.owners[keep])
    assert (m.index_state()[0] == fresh.index_state()[0]).all()
    assert m.advertised() == fresh.advertised()
    assert m.n_ranges == fresh.n_ranges


def test_sparse_bounds_path_gives_the_same_index(monkeypatch):
    """Curves too long for a byte map find segment bounds with np.unique instead."""
    import benchmarks.baselines.mics as mics_mod

    w = _workload("zipf", 3, 8, 1500, seed=8)
    dense = MICSMatcher(3, 8, 25)
    monkeypatch.setattr(mics_mod, "_DENSE_KEYS", 0)
    sparse = MICSMatcher(3, 8, 25)
    for m in (dense, sparse):
        m.insert(w.lo[:900], w.hi[:900], w.owners[:900])
        m.insert(w.lo[900:], w.hi[900:], w.owners[900:])
        m.delete(np.arange(0, 1500, 3))
    for a, b in zip(dense.index_state(), sparse.index_state(), strict=True):
        assert (a == b).all()


def test_chunked_expansion_gives_the_same_ranges(monkeypatch):
    import benchmarks.baselines.mics as mics_mod

    w = _workload("uniform", 3, 16, 800, seed=9)
    whole = MICSMatcher(3, 16, 25)
    t_whole = whole.insert(w.lo, w.hi, w.owners)
    monkeypatch.setattr(mics_mod, "_CHUNK_CELLS", 37)
    chunked = MICSMatcher(3, 16, 25)
    assert chunked.insert(w.lo, w.hi, w.owners) == t_whole
    for a, b in zip(whole.index_state(), chunked.index_state(), strict=True):
        assert (a == b).all()
    assert [chunked.ranges_of(i) for i in range(0, 800, 97)] == [
        whole.ranges_of(i) for i in range(0, 800, 97)]
    bad_hi = w.hi.copy()
    bad_hi[500] = np.minimum(w.lo[500] + 2**19, 2**20 - 1)  # more cells than the budget
    small = MICSMatcher(3, 16, 25, cell_budget=200)
    with pytest.raises(ValueError, match="subscription 500 touches"):
        small.insert(w.lo, bad_hi, w.owners)


def test_cell_precision_equals_dls_direct():
    w = _workload("uniform", 3, 8, 2000, seed=5)
    mics = MICSMatcher(3, 8, 25, precision="cell")
    dls = DLSMatcher(3, 8, 25, client_filter="direct")
    for m in (mics, dls):
        m.insert(w.lo, w.hi, w.owners)
        m.delete(np.arange(0, 2000, 3))
    a, b = mics.match(w.events), dls.match(w.events)
    assert (a[0] == b[0]).all() and (a[1] == b[1]).all()


def test_delete_everything_leaves_nothing():
    w = _workload("zipf", 2, 16, 1500, seed=6)
    m = MICSMatcher(2, 16, 25)
    fwd = m.insert(w.lo, w.hi, w.owners)
    withdrawn = m.delete(np.arange(1500))
    assert fwd > 0 and withdrawn > 0
    assert len(m) == 0 and m.n_ranges == 0 and m.n_segments == 1
    assert m.advertised() == []
    off, cl = m.match(w.events)
    assert cl.size == 0 and (off == 0).all()


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 7), st.integers(0, 3), st.integers(0, 7),
                          st.integers(0, 3)), min_size=1, max_size=25),
       st.integers(1, 5), st.randoms(use_true_random=False))
def test_batches_cost_what_one_by_one_costs(boxes, cut, rnd):
    """Insert and delete traffic of a batch = the sum over the same ops one at a time."""
    lo = np.array([[a, c] for a, _, c, _ in boxes], dtype=np.float64)
    hi = np.array([[min(7, a + la), min(7, c + lc)] for a, la, c, lc in boxes],
                  dtype=np.float64)
    owners = np.arange(len(boxes)) % 3
    one, batch = MICSMatcher(2, 8, 3, high=8.0), MICSMatcher(2, 8, 3, high=8.0)
    t_one = sum(one.insert(lo[i:i + 1], hi[i:i + 1], owners[i:i + 1])
                for i in range(len(boxes)))
    t_batch = sum(batch.insert(lo[a:a + cut], hi[a:a + cut], owners[a:a + cut])
                  for a in range(0, len(boxes), cut))
    assert t_one == t_batch
    assert one.advertised() == batch.advertised()
    order = list(range(len(boxes)))
    rnd.shuffle(order)
    ids = np.array(order[: max(1, len(order) // 2)])
    d_one = sum(one.delete(ids[i:i + 1]) for i in range(len(ids)))
    assert d_one == batch.delete(ids)
    assert one.advertised() == batch.advertised()
    # Every deletion: what remains advertised is exactly the union of the live boxes' cells.
    alive = np.ones(len(boxes), dtype=bool)
    alive[ids] = False
    cov = np.zeros((8, 8), dtype=bool)
    for i in np.flatnonzero(alive):
        cov[int(lo[i, 0]):int(hi[i, 0]) + 1, int(lo[i, 1]):int(hi[i, 1]) + 1] = True
    from benchmarks.baselines.hilbert import hilbert_index
    keys = set(hilbert_index(np.argwhere(cov), 3).tolist())
    adv = {k for s, e in one.advertised() for k in range(s, e + 1)}
    assert adv == keys


def _bad_inputs():
    ok_lo, ok_hi = np.array([[1.0, 1.0]]), np.array([[2.0, 2.0]])
    return [
        (ok_lo, np.array([[0.5, 2.0]]), [0], "lo\\[0, 0\\] = 1.0 > hi\\[0, 0\\] = 0.5"),
        (np.array([[np.nan, 1.0]]), ok_hi, [0], "lo\\[0, 0\\] = nan is outside"),
        (ok_lo, np.array([[2.0, 4.5]]), [0], "hi\\[0, 1\\] = 4.5 is outside"),
        (ok_lo, ok_hi, [3], "owners\\[0\\] = 3 is not a client"),
        (np.array([1.0, 1.0]), ok_hi, [0], "lo must be an \\(n, 2\\) array"),
        (ok_lo, ok_hi, [0, 1], "owners must be \\(1,\\)"),
    ]


@pytest.mark.parametrize(("lo", "hi", "owners", "match"), _bad_inputs())
def test_bad_insert_changes_nothing(lo, hi, owners, match):
    m = grid_mics()
    glo, ghi = grid_boxes(BOXES)
    m.insert(glo, ghi, np.arange(len(BOXES)) % 3)
    before = m.index_state()
    with pytest.raises(ValueError, match=match):
        m.insert(lo, hi, np.array(owners))
    after = m.index_state()
    assert len(m) == len(BOXES)
    assert (before[0] == after[0]).all() and (before[1] == after[1]).all()


def test_bad_delete_changes_nothing():
    m = grid_mics()
    glo, ghi = grid_boxes(BOXES)
    m.insert(glo, ghi, np.arange(len(BOXES)) % 3)
    m.delete(np.array([2]))
    before = m.index_state()
    with pytest.raises(KeyError, match="ids\\[1\\] = 9 is not a subscription number"):
        m.delete(np.array([0, 9]))
    with pytest.raises(KeyError, match="ids\\[0\\] = 2 names a deleted subscription"):
        m.delete(np.array([2]))
    with pytest.raises(ValueError, match="ids repeat subscription 1"):
        m.delete(np.array([1, 1]))
    assert len(m) == len(BOXES) - 1
    assert (before[1] == m.index_state()[1]).all()


def test_bad_settings_and_budget():
    with pytest.raises(ValueError, match="g must be a power of two"):
        MICSMatcher(2, 12, 3)
    with pytest.raises(ValueError, match="at most 2\\*\\*32 cells"):
        MICSMatcher(5, 256, 3)
    with pytest.raises(ValueError, match="precision"):
        MICSMatcher(2, 4, 3, precision="fuzzy")  # type: ignore[arg-type]
    m = MICSMatcher(2, 16, 3, high=16.0, cell_budget=10)
    with pytest.raises(ValueError, match="subscription 1 touches 16 cells, more than "
                                         "cell_budget=10"):
        m.insert(np.array([[0.0, 0.0], [0.0, 0.0]]), np.array([[1.0, 1.0], [3.0, 3.0]]),
                 np.array([0, 1]))
    assert len(m) == 0
    with pytest.raises(ValueError, match="events\\[0, 1\\] = inf is not finite"):
        m.match(np.array([[1.0, np.inf]]))


def test_events_outside_the_domain_match_nothing():
    m = grid_mics()
    m.insert(np.array([[0.0, 0.0]]), np.array([[4.0, 4.0]]), np.array([1]))
    off, cl = m.match(np.array([[-0.5, 1.0], [2.0, 2.0], [4.5, 0.0]]))
    assert csr_lists(off, cl) == [[], [1], []]
