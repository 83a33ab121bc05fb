"""Removed deliveries counted later: the per-client false positives of a busy node.

The exact check removes, per client, the events whose label the client's filter held and
that none of its subscriptions matched (``dls_client_edge_removed``). Counting them as each
event is routed touches every live owner of the event's label, most of the cost of a long
list at a million subscriptions. With ``deferred`` the label index counts only the owners
an event goes to (one taken from each) and leaves the rest in a per-label count of events;
a fold (:meth:`dls.label_index.LabelIndex.fold`) counts those by owner once per label,
however many events it had. :class:`RemovedLater` holds the part counted at routing and
adds it to the fold's when it settles, so the metrics only ever move up and are, once
settled, as if every event had been counted when routed. A node settles after each batch
short of its ``batch_size`` (it has slack: a fold then costs at most what counting each
event did) and at least every :data:`SETTLE_EVERY_S`: only a saturated node defers long.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from broker_node.metrics import Metrics
from dls.label_index import LabelIndex

__all__ = ["SETTLE_EVERY_S", "RemovedLater"]

#: Longest a node routing without pause leaves removed deliveries uncounted (s).
SETTLE_EVERY_S = 30.0


class RemovedLater:
    """The removed deliveries of events matched with ``deferred``, until settled."""

    def __init__(self, metrics: Metrics, to_state: Callable[[], np.ndarray]) -> None:
        """Count into ``metrics``; ``to_state()``: the state's index of each edge client."""
        self.metrics, self._to_state = metrics, to_state
        self._index: LabelIndex | None = None  # the index whose folds are owed
        self._owed = np.zeros(0, dtype=np.int64)  # by edge client: removed less delivered
        self._due = time.monotonic() + SETTLE_EVERY_S

    def add(self, index: LabelIndex, removed: np.ndarray) -> None:
        """Hold a deferred match's ``removed`` (by edge client) made on ``index``.

        Settles when due, or first when ``index`` is another one (the old index's counts
        are folded while its lists are still those its events found).
        """
        if index is not self._index:
            self.settle()
            self._index = index
        self._owed = _summed(self._owed, removed)
        if time.monotonic() >= self._due:
            self.settle()

    def settle(self) -> None:
        """Count what is held and what the index folds into the metrics, per client."""
        self._due = time.monotonic() + SETTLE_EVERY_S
        if self._index is None:
            return
        total = _summed(self._owed, self._index.fold())
        self._owed = self._owed[:0]
        gone = np.flatnonzero(total)
        if len(gone):
            self.metrics.edge_removed += int(total[gone].sum())
            self.metrics.per_client.add_counts(gone[:0], self._to_state()[gone], total[gone])


def _summed(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a + b`` of two int64 arrays, the shorter one padded with zeros."""
    if len(a) < len(b):
        a, b = b, a
    out = a.copy()
    out[:len(b)] += b
    return out
