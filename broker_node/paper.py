"""The ``paper`` mode's aggregation: per neighbour *j* a counting Bloom filter ``SFF_j``.

The paper decides what to advertise to *j* with ``SFF_j``, of the same size as the ERTs:
query-then-add (Algorithm 2: forward a label found absent) and query-then-delete
(Algorithm 3: withdraw a label whose count is 1). That rule loses live subscriptions
through the filters' false positives (docs/architecture.md#exact-aggregation;
tests/broker_node/test_paper_counterexample.py). It is kept to reproduce the paper's
numbers; never use it to route real traffic.
"""

from __future__ import annotations

import numpy as np

from broker_node.links import ADVERTISE, WITHDRAW, LinkCounters, LinkMessage
from broker_node.tables import LabelTable, unique_counts
from dls.cbf import CountingBloomFilter

__all__ = ["PaperCounts", "earlier_label_counts"]


class PaperCounts:
    """Algorithms 2 and 3 on every ``SFF_j``, batched, with the literal loops beside them.

    ``total`` is the broker's exact count of every label (kept in this mode too, for the
    exact introspection); the SFFs, the table and the counters are shared, not copied.
    """

    def __init__(self, sffs: dict[str, CountingBloomFilter], total: LabelTable,
                 counters: LinkCounters):
        """Decide on the broker's SFFs (all of the same m, k and seed)."""
        self.sffs = sffs
        self.total = total
        self.counters = counters

    def add(self, labels: np.ndarray, source: str | None) -> list[LinkMessage]:
        """Paper Algorithm 2 on every SFF_j (j != source): forward a label found absent.

        Label by label, "absent" means one of its counters is still zero when its turn
        comes: zero before the batch and not touched by an earlier label of the batch. That
        is decided for the whole batch at once (the first label to touch each counter), and
        the counters are then added in one batched, saturating update, which equals adding
        them one by one.
        """
        out: list[LinkMessage] = []
        labels = np.asarray(labels, dtype=np.uint64)
        if labels.size == 0:
            return out
        pos = None
        for n, sff in self.sffs.items():
            if n == source:
                continue
            if pos is None:  # every SFF has the same m, k and seed
                pos = sff.positions(labels)
                flat = pos.ravel()
                uniq, first = np.unique(flat, return_index=True)
                first_label = np.empty(sff.m, dtype=np.int64)
                first_label[uniq] = first // pos.shape[1]
                own = first_label[pos] == np.arange(len(labels))[:, None]
            fwd = labels[((sff.counters[pos] == 0) & own).any(axis=1)]
            sff.add_many(labels)
            if fwd.size:
                out.append(LinkMessage(n, ADVERTISE, fwd))
                self.counters.count(n, ADVERTISE, len(fwd))
        self.total.add(*unique_counts(labels))
        return out

    def add_one_by_one(self, labels: np.ndarray, source: str | None) -> list[LinkMessage]:
        """Algorithm 2 literally, label by label (the reference the tests compare with)."""
        out: list[LinkMessage] = []
        for n, sff in self.sffs.items():
            if n == source:
                continue
            fwd = []
            for label in labels.tolist():
                if sff.count(label) == 0:
                    fwd.append(label)
                sff.add(label)
            if fwd:
                out.append(LinkMessage(n, ADVERTISE, np.asarray(fwd, dtype=np.uint64)))
                self.counters.count(n, ADVERTISE, len(fwd))
        self.total.add(*unique_counts(labels))
        return out

    def remove(self, labels: np.ndarray, source: str | None) -> list[LinkMessage]:
        """Paper Algorithm 3 on every SFF_j (j != source): withdraw a label whose count is 1.

        Label by label, a label's count is the minimum of its counters after the earlier
        labels of the batch were removed (a saturated counter never moves). That is
        computed for the whole batch at once, assuming every label is found present (count
        not 0) and so removed; if one is not, that SFF is done one label at a time.
        """
        out: list[LinkMessage] = []
        labels = np.asarray(labels, dtype=np.uint64)
        if labels.size == 0:
            return out
        pos = earlier = None
        for n, sff in self.sffs.items():
            if n == source:
                continue
            if pos is None:  # every SFF has the same m, k and seed
                pos = sff.positions(labels)
                earlier = earlier_label_counts(pos)
            c0 = sff.counters[pos].astype(np.int64)
            now = np.where(c0 == sff.max_count, c0, c0 - earlier)
            q = now.min(axis=1)
            if (q <= 0).any():
                out += self.remove_one_by_one(labels, n)
                continue
            wd = labels[q == 1]
            sff.remove_many(labels)
            if wd.size:
                out.append(LinkMessage(n, WITHDRAW, wd))
                self.counters.count(n, WITHDRAW, len(wd))
        u, c = unique_counts(labels)
        self.total.add(u, -c)
        return out

    def remove_one_by_one(self, labels: np.ndarray, only: str | None = None
                          ) -> list[LinkMessage]:
        """Algorithm 3 literally on SFF ``only`` (on every SFF when None).

        Changes no exact count (the caller or the tests do).
        """
        out: list[LinkMessage] = []
        for n, sff in self.sffs.items():
            if only is not None and n != only:
                continue
            wd = []
            for label in labels.tolist():
                q = sff.count(label)
                if q == 1:
                    wd.append(label)
                if q != 0:
                    sff.remove(label)
            if wd:
                out.append(LinkMessage(n, WITHDRAW, np.asarray(wd, dtype=np.uint64)))
                self.counters.count(n, WITHDRAW, len(wd))
        return out


def earlier_label_counts(pos: np.ndarray) -> np.ndarray:
    """For each entry ``pos[i, t]``: how often that position occurs in rows before ``i``."""
    n, k = pos.shape
    flat = pos.ravel()
    order = np.argsort(flat, kind="stable")
    sorted_pos = flat[order]
    starts = np.flatnonzero(np.r_[True, sorted_pos[1:] != sorted_pos[:-1]])
    group_start = np.repeat(starts, np.diff(np.r_[starts, flat.size]))
    rank = np.empty(flat.size, dtype=np.int64)
    rank[order] = np.arange(flat.size) - group_start  # earlier entries with that position
    same_row_before = (pos[:, :, None] == pos[:, None, :]) & np.tri(k, k, -1, dtype=bool)
    return rank.reshape(n, k) - same_row_before.sum(axis=2)
