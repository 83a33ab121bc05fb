"""Reference evaluation shared by the baseline tests."""

from __future__ import annotations

import numpy as np


def exact_sets(lo: np.ndarray, hi: np.ndarray, owners: np.ndarray, alive: np.ndarray,
               events: np.ndarray) -> list[list[int]]:
    """Sorted owners of live boxes containing each event (plain numpy, float64)."""
    lo = np.asarray(lo, dtype=np.float64)
    hi = np.asarray(hi, dtype=np.float64)
    out = []
    for e in np.asarray(events, dtype=np.float64):
        hit = alive & (lo <= e).all(axis=1) & (hi >= e).all(axis=1)
        out.append(sorted(set(np.asarray(owners)[hit].tolist())))
    return out


def csr_lists(offsets: np.ndarray, clients: np.ndarray) -> list[list[int]]:
    """CSR -> one list per event."""
    return [clients[offsets[i]:offsets[i + 1]].tolist() for i in range(len(offsets) - 1)]


def boundary_events(lo: np.ndarray, hi: np.ndarray, rng: np.random.Generator,
                    n: int) -> np.ndarray:
    """Events sitting on box corners and faces (where inclusive bounds matter)."""
    rows = rng.integers(0, len(lo), size=n)
    pick = rng.integers(0, 2, size=(n, lo.shape[1])).astype(bool)
    return np.where(pick, lo[rows], hi[rows])
