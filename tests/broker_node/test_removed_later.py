"""Removed deliveries counted later: nothing lost, nothing counted twice, never a counter down."""

import numpy as np

from broker_node.metrics import Metrics
from broker_node.removed_later import RemovedLater
from dls.label_index import CUTS, LabelIndex

BASE = 1 << 16
#: owner 0 holds x in [0, 1], owner 1 x in [5, 6], owner 2 both: all cut label 0's cell
SUBS = [(0, 0.0, 1.0), (1, 5.0, 6.0), (2, 0.0, 1.0), (2, 5.0, 6.0)]


def _index() -> LabelIndex:
    ix = LabelIndex(BASE, 4, 1)
    n = len(SUBS)
    bounds = np.array([[[lo, hi]] for _, lo, hi in SUBS])
    ix.add(np.array([o for o, _, _ in SUBS]), np.arange(n), bounds, np.zeros(n, bool),
           np.arange(n + 1), np.full(n, BASE, dtype=np.uint64), np.full(n, CUTS),
           np.zeros(n, int))
    return ix


def _match(ix: LabelIndex, xs: list[float], origin: int = -1):
    n = len(xs)
    return ix.match(np.full(n, BASE, dtype=np.uint64), np.full(n, origin), np.ones(n, bool),
                    np.array(xs).reshape(n, 1), deferred=True)


def test_removed_deliveries_are_counted_at_settle_as_if_counted_per_event():
    metrics = Metrics()
    later = RemovedLater(metrics, lambda: np.arange(10) + 100)  # state ids differ
    ix = _index()
    later.add(ix, _match(ix, [0.5, 0.5, 5.5]).removed)  # removed: owner 1 twice, 0 once
    later.add(ix, _match(ix, [5.5], origin=1).removed)  # counted at once: owner 0 once
    assert metrics.edge_removed == 0  # nothing until settled: never a count taken back
    later.settle()
    assert metrics.edge_removed == 4
    totals = metrics.per_client.removed_totals()
    assert totals[100:].tolist() == [2, 2] and not totals[:100].any()  # owner 2 got each
    later.settle()  # nothing twice
    assert metrics.edge_removed == 4


def test_an_index_replaced_is_counted_before_the_next_one():
    metrics = Metrics()
    later = RemovedLater(metrics, lambda: np.arange(10))
    old = _index()
    later.add(old, _match(old, [0.5, 9.0]).removed)  # 9.0: every owner removed
    new = LabelIndex(BASE, 4, 1)  # a rebuilt edge: the old lists are gone
    later.add(new, _match(new, [0.5]).removed)
    assert metrics.edge_removed == 1 + 3  # the old index's, settled when the new came
    assert not old.fold().any()
