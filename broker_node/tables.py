"""Exact per-label count tables used for aggregation decisions.

The broker decides to advertise a label to a neighbour when the label's exact count goes
0 -> 1 and to withdraw it when it goes 1 -> 0 (:mod:`broker_node.links`; the why is in
docs/architecture.md#exact-aggregation). Counts are
exact, so these decisions never suffer from Bloom-filter false positives.

Two layouts behind one interface:

* :class:`DenseLabelTable` — a numpy array indexed by ``label - base``; for label spaces up
  to a few million labels. Lookups and updates are numpy gathers/scatters.
* :class:`SparseLabelTable` — a dict; for label spaces too large to index directly.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from broker_node.exceptions import LabelSpaceError

__all__ = ["DenseLabelTable", "LabelTable", "SparseLabelTable", "make_table", "unique_counts"]

DENSE_LIMIT = 1 << 22


def unique_counts(labels: np.ndarray, base: int | None = None, size: int | None = None
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Sorted unique labels and how often each occurs.

    With a known dense label space ``base..base+size-1`` and a batch that is large next to
    it, one ``bincount`` replaces the sort; otherwise sort + run length.
    """
    labels = np.asarray(labels, dtype=np.uint64)
    if base is not None and size is not None and 4 * labels.size >= size:
        counts = np.bincount((labels - np.uint64(base)).astype(np.int64), minlength=size)
        idx = np.flatnonzero(counts)
        return idx.astype(np.uint64) + np.uint64(base), counts[idx]
    s = np.sort(labels)
    if s.size == 0:
        return s, np.zeros(0, dtype=np.int64)
    starts = np.flatnonzero(np.concatenate(([True], s[1:] != s[:-1])))
    counts = np.diff(np.append(starts, s.size))
    return s[starts], counts.astype(np.int64)


class LabelTable(Protocol):
    """Exact count per label."""

    def get(self, labels: np.ndarray) -> np.ndarray:
        """Counts (int64) of each label."""
        ...

    def add(self, labels: np.ndarray, deltas: np.ndarray | int) -> None:
        """Add ``deltas`` to the counts of unique ``labels``."""
        ...

    def nonzero(self) -> np.ndarray:
        """Sorted labels whose count is not zero."""
        ...

    def memory_bytes(self) -> int:
        """Approximate memory used."""
        ...


class DenseLabelTable:
    """Counts in a numpy array indexed by ``label - base``."""

    def __init__(self, base: int, size: int, dtype: type = np.int32):
        self.base = np.uint64(base)
        self.size = size
        self.counts: np.ndarray = np.zeros(size, dtype=dtype)

    def _index(self, labels: np.ndarray) -> np.ndarray:
        idx = np.asarray(labels, dtype=np.uint64) - self.base
        if idx.size and int(idx.max()) >= self.size:
            bad = labels[idx >= self.size][0]
            first = int(self.base)
            raise LabelSpaceError(f"label {int(bad):#x} is outside this table's label space "
                                  f"({first:#x} to {first + self.size - 1:#x})",
                                  field="labels", value=int(bad))
        return idx.astype(np.int64)

    def get(self, labels: np.ndarray) -> np.ndarray:
        """Counts (int64) of each label."""
        return self.counts[self._index(labels)].astype(np.int64)

    def add(self, labels: np.ndarray, deltas: np.ndarray | int) -> None:
        """Add ``deltas`` to the counts of unique ``labels``."""
        idx = self._index(labels)
        self.counts[idx] = self.counts[idx] + deltas

    def nonzero(self) -> np.ndarray:
        """Sorted labels whose count is not zero.

        Reads a copy: a thread that reads while the node's thread writes (a test, a probe)
        sees one state or the other, never numpy's error for a count that changed mid-call.
        """
        return np.flatnonzero(self.counts.copy()).astype(np.uint64) + self.base

    def memory_bytes(self) -> int:
        """Memory of the count array."""
        return int(self.counts.nbytes)


class SparseLabelTable:
    """Counts in a dict; only labels with a non-zero count are kept."""

    def __init__(self) -> None:
        self.counts: dict[int, int] = {}

    def get(self, labels: np.ndarray) -> np.ndarray:
        """Counts (int64) of each label."""
        c = self.counts
        return np.fromiter((c.get(x, 0) for x in labels.tolist()), dtype=np.int64,
                           count=len(labels))

    def add(self, labels: np.ndarray, deltas: np.ndarray | int) -> None:
        """Add ``deltas`` to the counts of unique ``labels``."""
        c = self.counts
        ds = np.broadcast_to(np.asarray(deltas, dtype=np.int64), labels.shape).tolist()
        for x, d in zip(labels.tolist(), ds, strict=True):
            v = c.get(x, 0) + d
            if v:
                c[x] = v
            else:
                c.pop(x, None)

    def nonzero(self) -> np.ndarray:
        """Sorted labels whose count is not zero (from a copy of the keys, as above)."""
        return np.sort(np.array(list(self.counts), dtype=np.uint64))

    def memory_bytes(self) -> int:
        """Rough memory of the dict (about 100 bytes an entry)."""
        return 100 * len(self.counts)


def make_table(base: int | None, size: int | None, dtype: type = np.int32) -> LabelTable:
    """A dense table when the label space is known and small enough, else a sparse one."""
    if base is not None and size is not None and size <= DENSE_LIMIT:
        return DenseLabelTable(base, size, dtype)
    return SparseLabelTable()
