"""Exact matcher on an R-tree (``rtree``, libspatialindex): boxes stored, events are points.

Subscriptions are inserted as ``d``-dimensional boxes (float64, inclusive bounds) under
their insertion number; an event is a degenerate box and a batch of events is answered by
one ``intersection_v`` call (libspatialindex's bulk query, no Python loop per event).
libspatialindex treats boxes as closed, so a point on a box's face matches it, as in the
brute force.

Updates come in batches, and a batch that is large next to the tree rebuilds it:

* insertion into an empty tree, or of a batch of at least ``insert_rebuild`` (default
  1/32) times the live entries, bulk-loads a new tree from numpy arrays with every live
  entry (libspatialindex's bulk loader, which packs full nodes); a smaller batch is
  inserted entry by entry (the R*-tree insertion, one Python call each);
* deleting at least ``delete_rebuild`` (default 1/512) times the live entries bulk-loads
  the survivors; fewer are deleted with one ``delete`` call each.

The defaults come from what each costs here (100K-500K boxes, d = 3-4): a bulk load about
1.5 us per live entry, an entry-by-entry insertion 20-50 us, a deletion 0.3-0.8 ms
(libspatialindex condenses the tree and reinserts orphaned entries). ``None`` turns a
rebuild off.

libspatialindex keeps its nodes in C++ memory that Python cannot see, so
:meth:`RTreeMatcher.memory_bytes` measures it: the change of the C heap in use
(glibc ``mallinfo2``: ``uordblks + hblkhd``) across each tree operation, summed, plus the
owner array. Without glibc it falls back to an estimate, ``entries * (16 d + 8) / 0.7``
(bounds and id per entry at the default 70 % node fill); :attr:`memory_measured` says
which.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from typing import Any

import numpy as np
from rtree import index as rtree_index

from benchmarks.baselines._common import check_boxes, check_events, check_ids, pairs_to_csr
from benchmarks.workload import DOMAIN_HIGH

__all__ = ["RTreeMatcher"]


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]


def _load_mallinfo2() -> Any:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        fn = libc.mallinfo2
    except (OSError, AttributeError):
        return None
    fn.restype = _MallInfo2
    fn.argtypes = []
    return fn


_MALLINFO2 = _load_mallinfo2()


def _heap_in_use() -> int:
    if _MALLINFO2 is None:
        return 0
    info = _MALLINFO2()
    return int(info.uordblks + info.hblkhd)


class RTreeMatcher:
    """Exact content-based matcher on a libspatialindex R-tree.

    Args:
        d: Number of numeric attributes.
        n_clients: Owners are client indexes in ``[0, n_clients)``.
        low: Lower end of every attribute's domain.
        high: Upper end of every attribute's domain.
        leaf_capacity: Entries per leaf node.
        index_capacity: Children per inner node.
        insert_rebuild: Insert batches of at least this fraction of the live entries
            rebuild the tree (``None``: never, except into an empty tree).
        delete_rebuild: The same for delete batches (``None``: never).
        name: Benchmark system name.
    """

    supports_delete = True
    #: Exact matchers forward nothing in the paper's sense.
    traffic_unit = "none"

    def __init__(self, d: int, n_clients: int, *, low: float = 0.0,
                 high: float = float(DOMAIN_HIGH), leaf_capacity: int = 100,
                 index_capacity: int = 100, insert_rebuild: float | None = 1 / 32,
                 delete_rebuild: float | None = 1 / 512,
                 name: str = "rtree") -> None:
        if not isinstance(d, int) or d < 1:
            raise ValueError(f"d must be a positive integer, got {d!r}")
        if not isinstance(n_clients, int) or n_clients < 1:
            raise ValueError(f"n_clients must be a positive integer, got {n_clients!r}")
        for field, v in (("leaf_capacity", leaf_capacity), ("index_capacity", index_capacity)):
            if not isinstance(v, int) or v < 4:
                raise ValueError(f"{field} must be an integer >= 4, got {v!r}")
        for field, frac in (("insert_rebuild", insert_rebuild),
                            ("delete_rebuild", delete_rebuild)):
            if frac is not None and not frac > 0:
                raise ValueError(f"{field} must be positive or None, got {frac!r}")
        self.d = d
        self.n_clients = n_clients
        self.low, self.high = float(low), float(high)
        self.name = name
        self.insert_rebuild = insert_rebuild
        self.delete_rebuild = delete_rebuild
        self.leaf_capacity = leaf_capacity
        self.index_capacity = index_capacity
        self.memory_measured = _MALLINFO2 is not None
        self._n = 0
        self._owner = np.empty(0, dtype=np.int32)
        self._alive = np.empty(0, dtype=bool)
        self._lo = np.empty((0, d), dtype=np.float64)  # kept for deletion (libspatialindex
        self._hi = np.empty((0, d), dtype=np.float64)  # deletes by id and box)
        self._heap = 0
        self._idx = self._new_index()

    def _props(self) -> rtree_index.Property:
        p = rtree_index.Property()
        p.dimension = self.d
        p.leaf_capacity = self.leaf_capacity
        p.index_capacity = self.index_capacity
        p.near_minimum_overlap_factor = min(32, self.leaf_capacity - 1,
                                            self.index_capacity - 1)
        return p

    def _new_index(self, arrays: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
                   ) -> rtree_index.Index:
        if arrays is None:
            return rtree_index.Index(properties=self._props())
        return rtree_index.Index(arrays, properties=self._props())

    def __len__(self) -> int:
        return int(self._alive[: self._n].sum())

    def memory_bytes(self) -> int:
        """C heap held by the tree (measured, see the module docstring) plus our arrays."""
        ours = self._n * (4 + 1 + 16 * self.d)
        if self.memory_measured:
            return max(0, self._heap) + ours
        return int(len(self) * (16 * self.d + 8) / 0.7) + ours

    def _grow(self, need: int) -> None:
        cap = len(self._owner)
        if need <= cap:
            return
        new = max(need, 2 * cap, 1024)
        owner = np.empty(new, dtype=np.int32)
        owner[: self._n] = self._owner[: self._n]
        alive = np.zeros(new, dtype=bool)
        alive[: self._n] = self._alive[: self._n]
        lo = np.empty((new, self.d), dtype=np.float64)
        lo[: self._n] = self._lo[: self._n]
        hi = np.empty((new, self.d), dtype=np.float64)
        hi[: self._n] = self._hi[: self._n]
        self._owner, self._alive, self._lo, self._hi = owner, alive, lo, hi

    def insert(self, lo: np.ndarray, hi: np.ndarray, owners: np.ndarray) -> int:
        """Add subscriptions (see the module docstring for bulk loads); forwards nothing."""
        lo_f, hi_f, own = check_boxes(lo, hi, owners, self.d, self.n_clients, self.low,
                                      self.high)
        n = len(own)
        if n == 0:
            return 0
        self._grow(self._n + n)
        ids = np.arange(self._n, self._n + n, dtype=np.int64)
        lo_c = np.ascontiguousarray(lo_f)
        hi_c = np.ascontiguousarray(hi_f)
        s = slice(self._n, self._n + n)
        live = len(self)
        self._owner[s] = own
        self._lo[s] = lo_c
        self._hi[s] = hi_c
        if live == 0 or self._rebuilds(self.insert_rebuild, n, live):
            self._alive[s] = True
            self._n += n
            self._rebuild()
            return 0
        boxes = np.concatenate([lo_c, hi_c], axis=1).tolist()
        ins = self._idx.insert
        h0 = _heap_in_use()
        for i, box in zip(ids.tolist(), boxes, strict=True):
            ins(i, box)
        self._heap += _heap_in_use() - h0
        self._alive[s] = True
        self._n += n
        return 0

    @staticmethod
    def _rebuilds(frac: float | None, batch: int, live: int) -> bool:
        return frac is not None and batch >= frac * live

    def _rebuild(self) -> None:
        """Bulk-load a new tree with every live entry."""
        ids = np.flatnonzero(self._alive[: self._n]).astype(np.int64)
        self._idx.close()
        self._heap = 0
        if len(ids) == 0:
            self._idx = self._new_index()
            return
        lo = np.ascontiguousarray(self._lo[ids])
        hi = np.ascontiguousarray(self._hi[ids])
        h0 = _heap_in_use()
        self._idx = self._new_index((ids, lo, hi))
        self._heap += _heap_in_use() - h0

    def delete(self, ids: np.ndarray) -> int:
        """Remove subscriptions by insertion number; forwards nothing (0)."""
        a = check_ids(ids, self._alive[: self._n])
        if len(a) == 0:
            return 0
        if self._rebuilds(self.delete_rebuild, len(a), len(self)):
            self._alive[a] = False
            self._rebuild()
            return 0
        boxes = np.concatenate([self._lo[a], self._hi[a]], axis=1).tolist()
        rm = self._idx.delete
        h0 = _heap_in_use()
        for i, box in zip(a.tolist(), boxes, strict=True):
            rm(i, box)
        self._heap += _heap_in_use() - h0
        self._alive[a] = False
        return 0

    def match(self, events: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Match events ``(E, d)``: CSR ``(offsets, clients)``, clients sorted per event."""
        ev = np.ascontiguousarray(check_events(events, self.d))
        n_ev = len(ev)
        offsets = np.zeros(n_ev + 1, dtype=np.int64)
        if n_ev == 0 or len(self) == 0:
            return offsets, np.zeros(0, dtype=np.int64)
        hits, counts = self._idx.intersection_v(ev, ev)
        evi = np.repeat(np.arange(n_ev, dtype=np.int64), np.asarray(counts, dtype=np.int64))
        owners = self._owner[np.asarray(hits, dtype=np.int64)]
        return pairs_to_csr(evi, owners, n_ev, self.n_clients)
