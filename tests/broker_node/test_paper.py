"""The paper mode's batched SFF rules against the literal label-by-label loops."""

import numpy as np
import pytest

from broker_node.paper import PaperCounts, earlier_label_counts
from broker_node.state import BrokerState
from dls.space import ContentSpace


def paper(state: BrokerState) -> PaperCounts:
    """The paper-mode aggregation of a state."""
    agg = state._aggregation
    assert isinstance(agg, PaperCounts)
    return agg


def paper_twins(rng):
    """Two identical paper-mode states with a small random routing filter (collisions)."""
    m, k = int(rng.integers(8, 64)), int(rng.integers(1, 5))
    space = ContentSpace.from_spec({
        "attributes": [{"name": "x", "type": "numeric", "low": 0, "high": 64, "granules": 64}],
        "filters": {"routing": {"m": m, "k": k}}})
    return tuple(BrokerState.for_space("B", ["A", "C"], space, mode="paper") for _ in range(2))


@pytest.mark.parametrize("seed", range(6))
def test_paper_add_batched_equals_label_by_label(seed):
    """The batched Algorithm 2 forwards what the literal loop forwards, counters included."""
    rng = np.random.default_rng(seed)
    fast, slow = paper_twins(rng)
    for _ in range(8):
        batch = rng.integers(0, 64, int(rng.integers(1, 30))).astype(np.uint64)
        source = [None, "A"][int(rng.integers(0, 2))]
        got = paper(fast).add(batch, source)
        want = paper(slow).add_one_by_one(batch, source)
        assert [(x.to, x.kind, x.labels.tolist()) for x in got] == \
            [(x.to, x.kind, x.labels.tolist()) for x in want]
        for n in ("A", "C"):
            assert fast._sff[n] == slow._sff[n]
    assert fast.counters.advertised == slow.counters.advertised


@pytest.mark.parametrize("seed", range(8))
def test_paper_remove_batched_equals_label_by_label(seed):
    """The batched Algorithm 3 withdraws what the literal loop withdraws, counters included
    (also when a label is found absent and the batch falls back to one by one)."""
    rng = np.random.default_rng(100 + seed)
    fast, slow = paper_twins(rng)
    added = rng.integers(0, 64, 60).astype(np.uint64)
    paper(fast).add(added, None)
    paper(slow).add(added, None)
    pool = list(added.tolist())
    for _ in range(6):
        take = rng.permutation(len(pool))[:int(rng.integers(1, 12))]
        batch = np.array([pool[i] for i in take], dtype=np.uint64)
        if seed % 2:  # sometimes a label that was never added: found absent or not
            batch = np.r_[batch, np.uint64(rng.integers(0, 64))]
        pool = [x for i, x in enumerate(pool) if i not in set(take.tolist())]
        got = paper(fast).remove(batch, None)
        want = paper(slow).remove_one_by_one(batch)
        assert [(x.to, x.kind, x.labels.tolist()) for x in got] == \
            [(x.to, x.kind, x.labels.tolist()) for x in want]
        for n in ("A", "C"):
            assert fast._sff[n] == slow._sff[n]
    pos = np.array([[3, 5, 3], [5, 5, 1], [3, 1, 7]])
    assert earlier_label_counts(pos).tolist() == [[0, 0, 0], [1, 1, 0], [2, 1, 0]]
