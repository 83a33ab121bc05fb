"""What the baseline matchers share: input checks, and (event, client) pairs -> CSR.

A bad batch raises before anything changes. Every error is a ``ValueError`` (or
``KeyError`` for an unknown subscription number) whose message names the field, the row
and the value at fault.
"""

from __future__ import annotations

import numpy as np

__all__ = ["check_boxes", "check_events", "check_ids", "pairs_to_csr"]

_BITMAP_CELLS = 1 << 24


def _first_bad(mask: np.ndarray) -> tuple[int, ...]:
    return tuple(int(i) for i in np.argwhere(mask)[0])


def check_boxes(lo: np.ndarray, hi: np.ndarray, owners: np.ndarray, d: int, n_clients: int,
                low: float, high: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Checked ``(lo float64 (n, d), hi float64 (n, d), owners int64 (n,))``.

    Bounds must be finite, inside ``[low, high]`` and ``lo <= hi``; owners must be integers
    in ``[0, n_clients)``.
    """
    lo_a = np.asarray(lo)
    hi_a = np.asarray(hi)
    own = np.asarray(owners)
    if lo_a.ndim != 2 or lo_a.shape[1] != d:
        raise ValueError(f"lo must be an (n, {d}) array, got shape {lo_a.shape}")
    if hi_a.shape != lo_a.shape:
        raise ValueError(f"hi must have the shape of lo {lo_a.shape}, got {hi_a.shape}")
    if own.shape != (lo_a.shape[0],):
        raise ValueError(f"owners must be ({lo_a.shape[0]},), got shape {own.shape}")
    for name, arr in (("lo", lo_a), ("hi", hi_a)):
        if arr.dtype.kind not in "iuf":
            raise ValueError(f"{name} must be numeric, got dtype {arr.dtype}")
    if own.size and own.dtype.kind not in "iu":
        raise ValueError(f"owners must be integers, got dtype {own.dtype}")
    lo_f = lo_a.astype(np.float64)
    hi_f = hi_a.astype(np.float64)
    for name, arr in (("lo", lo_f), ("hi", hi_f)):
        bad = ~np.isfinite(arr) | (arr < low) | (arr > high)
        if bad.any():
            r, c = _first_bad(bad)
            raise ValueError(f"{name}[{r}, {c}] = {float(arr[r, c])!r} is outside the domain "
                             f"[{low}, {high}]")
    inv = lo_f > hi_f
    if inv.any():
        r, c = _first_bad(inv)
        raise ValueError(f"subscription {r}: lo[{r}, {c}] = {float(lo_f[r, c])!r} > "
                         f"hi[{r}, {c}] = {float(hi_f[r, c])!r}")
    own_i = own.astype(np.int64)
    bad_o = (own_i < 0) | (own_i >= n_clients)
    if bad_o.any():
        r = int(np.flatnonzero(bad_o)[0])
        raise ValueError(f"owners[{r}] = {int(own_i[r])} is not a client in [0, {n_clients})")
    return lo_f, hi_f, own_i


def check_events(events: np.ndarray, d: int) -> np.ndarray:
    """Checked events ``(E, d)`` as float64; values must be finite (any value may match)."""
    ev = np.asarray(events)
    if ev.ndim != 2 or ev.shape[1] != d:
        raise ValueError(f"events must be an (E, {d}) array, got shape {ev.shape}")
    if ev.dtype.kind not in "iuf":
        raise ValueError(f"events must be numeric, got dtype {ev.dtype}")
    ev_f = ev.astype(np.float64)
    bad = ~np.isfinite(ev_f)
    if bad.any():
        r, c = _first_bad(bad)
        raise ValueError(f"events[{r}, {c}] = {float(ev_f[r, c])!r} is not finite")
    return ev_f


def check_ids(ids: np.ndarray, alive: np.ndarray) -> np.ndarray:
    """Checked subscription numbers (int64): integers, distinct, each of a live subscription.

    ``alive`` is the bool mask over every insertion number given so far.
    """
    arr = np.asarray(ids)
    if arr.ndim != 1:
        raise ValueError(f"ids must be a 1-D array, got shape {arr.shape}")
    if arr.size and arr.dtype.kind not in "iu":
        raise ValueError(f"ids must be integers, got dtype {arr.dtype}")
    a = arr.astype(np.int64)
    out = (a < 0) | (a >= len(alive))
    if out.any():
        r = int(np.flatnonzero(out)[0])
        raise KeyError(f"ids[{r}] = {int(a[r])} is not a subscription number "
                       f"(0..{len(alive) - 1})")
    dead = ~alive[a]
    if dead.any():
        r = int(np.flatnonzero(dead)[0])
        raise KeyError(f"ids[{r}] = {int(a[r])} names a deleted subscription")
    seen = np.zeros(len(alive), dtype=np.bool_)  # a repeat marks no new slot
    seen[a] = True
    if np.count_nonzero(seen) != len(a):
        s = np.sort(a)
        dup = int(s[np.flatnonzero(s[1:] == s[:-1])[0]])
        raise ValueError(f"ids repeat subscription {dup} in one batch")
    return a


def pairs_to_csr(events: np.ndarray, clients: np.ndarray, n_events: int, n_clients: int
                 ) -> tuple[np.ndarray, np.ndarray]:
    """Distinct ``(event, client)`` pairs (any order, repeats allowed) as CSR.

    Returns ``(offsets (n_events + 1,), clients)`` with each event's clients sorted. When
    ``n_events * n_clients`` is at most 2**24 the pairs are marked in a byte map and read
    back in order (linear time); otherwise they are sorted with ``np.unique``.
    """
    ev = np.asarray(events, dtype=np.int64)
    cl = np.asarray(clients, dtype=np.int64)
    keys = ev * n_clients + cl
    size = n_events * n_clients
    if size <= _BITMAP_CELLS:
        seen = np.zeros(size, dtype=bool)
        seen[keys] = True
        uniq = np.flatnonzero(seen)
    else:
        uniq = np.unique(keys)
    offsets = np.zeros(n_events + 1, dtype=np.int64)
    np.cumsum(np.bincount(uniq // n_clients, minlength=n_events), out=offsets[1:])
    return offsets, uniq % n_clients
