"""Exact brute-force matcher: every event is compared with every subscription box.

Subscriptions are kept column-major as float32 ``lo[d, N]`` and ``hi[d, N]`` plus the owner
client of each one (int32). Matching one event is the AND of ``2d`` vectorised comparisons
over all ``N`` subscriptions, then the set of owner clients of the hits (a presence mask
over clients, returned as sorted client indexes). Bounds are inclusive (``between``).

Storage grows by doubling, so appending a batch is amortised O(batch). Deleting a batch
compacts the arrays (O(N) per batch).

:class:`BruteForceBaseline` puts the matcher behind the :class:`benchmarks.baselines.base.
Matcher` interface (subscriptions named by insertion number, checked input); the matcher
itself is unchanged, as ``benchmarks.core`` uses it.
"""

from __future__ import annotations

import numpy as np

from benchmarks.baselines._common import check_boxes, check_events, check_ids
from benchmarks.workload import DOMAIN_HIGH

__all__ = ["BruteForceBaseline", "BruteForceMatcher"]


class BruteForceMatcher:
    """Exact content-based matcher over ``d`` numeric attributes."""

    def __init__(self, d: int, n_clients: int, capacity: int = 1024) -> None:
        self.d = d
        self.n_clients = n_clients
        self._n = 0
        cap = max(1, capacity)
        self._lo = np.empty((d, cap), dtype=np.float32)
        self._hi = np.empty((d, cap), dtype=np.float32)
        self._owner = np.empty(cap, dtype=np.int32)
        self._buf: np.ndarray | None = None
        self._tmp: np.ndarray | None = None

    def __len__(self) -> int:
        return self._n

    @property
    def lo(self) -> np.ndarray:
        """Live lower bounds, shape (d, N)."""
        return self._lo[:, : self._n]

    @property
    def hi(self) -> np.ndarray:
        """Live upper bounds, shape (d, N)."""
        return self._hi[:, : self._n]

    @property
    def owners(self) -> np.ndarray:
        """Owner client of each live subscription, shape (N,)."""
        return self._owner[: self._n]

    def memory_bytes(self) -> int:
        """Bytes of the live arrays (bounds and owners)."""
        return self._n * (8 * self.d + 4)

    def _grow(self, need: int) -> None:
        cap = self._owner.shape[0]
        if need <= cap:
            return
        new = max(need, 2 * cap)
        for name in ("_lo", "_hi"):
            old = getattr(self, name)
            arr = np.empty((self.d, new), dtype=np.float32)
            arr[:, : self._n] = old[:, : self._n]
            setattr(self, name, arr)
        owner = np.empty(new, dtype=np.int32)
        owner[: self._n] = self._owner[: self._n]
        self._owner = owner

    def add(self, lo: np.ndarray, hi: np.ndarray, owners: np.ndarray) -> None:
        """Append subscriptions given row-major ``lo``/``hi`` (n, d) and ``owners`` (n,)."""
        n = len(owners)
        self._grow(self._n + n)
        s = slice(self._n, self._n + n)
        self._lo[:, s] = np.asarray(lo).T
        self._hi[:, s] = np.asarray(hi).T
        self._owner[s] = owners
        self._n += n

    def remove_rows(self, rows: np.ndarray) -> None:
        """Delete the subscriptions at positions ``rows`` (current order), compacting."""
        keep = np.ones(self._n, dtype=bool)
        keep[rows] = False
        m = int(keep.sum())
        self._lo[:, :m] = self._lo[:, : self._n][:, keep]
        self._hi[:, :m] = self._hi[:, : self._n][:, keep]
        self._owner[:m] = self._owner[: self._n][keep]
        self._n = m

    def remove_prefix(self, n: int) -> None:
        """Delete the ``n`` oldest subscriptions (a contiguous block: one memmove)."""
        m = self._n - n
        self._lo[:, :m] = self._lo[:, n : self._n]
        self._hi[:, :m] = self._hi[:, n : self._n]
        self._owner[:m] = self._owner[n : self._n]
        self._n = m

    def match_mask(self, event: np.ndarray) -> np.ndarray:
        """Bool mask (N,) of the subscriptions containing one event (d values)."""
        n = self._n
        if self._buf is None or self._buf.shape[0] < n:
            self._buf = np.empty(n, dtype=bool)
            self._tmp = np.empty(n, dtype=bool)
        acc = self._buf[:n]
        tmp = self._tmp[:n]  # type: ignore[index]
        ev = np.asarray(event, dtype=np.float32)
        np.less_equal(self._lo[0, :n], ev[0], out=acc)
        np.greater_equal(self._hi[0, :n], ev[0], out=tmp)
        acc &= tmp
        for i in range(1, self.d):
            np.less_equal(self._lo[i, :n], ev[i], out=tmp)
            acc &= tmp
            np.greater_equal(self._hi[i, :n], ev[i], out=tmp)
            acc &= tmp
        return acc

    def match_one(self, event: np.ndarray) -> np.ndarray:
        """Sorted client indexes owning at least one subscription that contains ``event``."""
        hits = self._owner[: self._n][self.match_mask(event)]
        present = np.zeros(self.n_clients, dtype=bool)
        present[hits] = True
        return np.flatnonzero(present)

    def match(self, events: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Match events (E, d) one by one; CSR ``(offsets, clients)`` like ``Routes``."""
        parts = [self.match_one(e) for e in np.asarray(events)]
        offsets = np.zeros(len(parts) + 1, dtype=np.int64)
        np.cumsum([len(p) for p in parts], out=offsets[1:])
        clients = (np.concatenate(parts).astype(np.int64) if parts
                   else np.zeros(0, dtype=np.int64))
        return offsets, clients


class BruteForceBaseline:
    """:class:`BruteForceMatcher` behind the ``Matcher`` interface.

    Keeps the insertion number of every row so that ``delete`` can find the rows of the
    numbers it is given (a ``searchsorted``: rows stay in insertion order). Bounds are
    stored as float32, as in the matcher; inputs must be in ``[low, high]``.
    """

    supports_delete = True
    #: Exact matchers forward nothing in the paper's sense.
    traffic_unit = "none"

    def __init__(self, d: int, n_clients: int, *, low: float = 0.0,
                 high: float = float(DOMAIN_HIGH), name: str = "bruteforce") -> None:
        if not isinstance(d, int) or d < 1:
            raise ValueError(f"d must be a positive integer, got {d!r}")
        if not isinstance(n_clients, int) or n_clients < 1:
            raise ValueError(f"n_clients must be a positive integer, got {n_clients!r}")
        self.d = d
        self.n_clients = n_clients
        self.low, self.high = float(low), float(high)
        self.name = name
        self.matcher = BruteForceMatcher(d, n_clients)
        self._ids = np.empty(0, dtype=np.int64)  # insertion number of each row
        self._alive = np.empty(0, dtype=bool)
        self._n = 0

    def __len__(self) -> int:
        return len(self.matcher)

    def memory_bytes(self) -> int:
        """Bytes of the matcher's live arrays plus the row -> number map."""
        return self.matcher.memory_bytes() + len(self.matcher) * 8

    def insert(self, lo: np.ndarray, hi: np.ndarray, owners: np.ndarray) -> int:
        """Append subscriptions; forwards nothing (0)."""
        lo_f, hi_f, own = check_boxes(lo, hi, owners, self.d, self.n_clients, self.low,
                                      self.high)
        n = len(own)
        if n == 0:
            return 0
        self.matcher.add(lo_f.astype(np.float32), hi_f.astype(np.float32), own)
        new_ids = np.arange(self._n, self._n + n, dtype=np.int64)
        self._ids = np.concatenate([self._ids, new_ids])
        alive = np.zeros(self._n + n, dtype=bool)
        alive[: self._n] = self._alive
        alive[self._n:] = True
        self._alive = alive
        self._n += n
        return 0

    def delete(self, ids: np.ndarray) -> int:
        """Remove subscriptions by insertion number (compacting); forwards nothing (0)."""
        a = check_ids(ids, self._alive)
        if len(a) == 0:
            return 0
        rows = np.searchsorted(self._ids, a)
        self.matcher.remove_rows(rows)
        keep = np.ones(len(self._ids), dtype=bool)
        keep[rows] = False
        self._ids = self._ids[keep]
        self._alive[a] = False
        return 0

    def match(self, events: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Match events ``(E, d)`` one by one: CSR ``(offsets, clients)``, sorted."""
        ev = check_events(events, self.d)
        if len(self.matcher) == 0:
            return np.zeros(len(ev) + 1, dtype=np.int64), np.zeros(0, dtype=np.int64)
        return self.matcher.match(ev.astype(np.float32))
