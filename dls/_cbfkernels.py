"""Compiled kernels of one counting Bloom filter (routing filters), beside dls._kernels.

Imported only when :data:`dls._jit.ENABLED`; :mod:`dls._kernels` re-exports them, and the
numpy reference of each lives with its caller (:mod:`dls.cbf`).
"""

from __future__ import annotations

from typing import Any

from dls._jit import njit

__all__ = ["cbf_add", "cbf_min", "cbf_remove"]


# -- one counting Bloom filter ----------------------------------------------------------
@njit
def cbf_add(counters: Any, pos: Any, top: Any) -> None:
    """Increment ``counters`` at every position of ``pos`` (n, k), saturating at ``top``."""
    n, k = pos.shape
    for i in range(n):
        for j in range(k):
            p = pos[i, j]
            v = counters[p]
            if v < top:
                counters[p] = v + 1


@njit
def cbf_remove(counters: Any, pos: Any, top: Any) -> Any:
    """Decrement ``counters`` at every position of ``pos``, all or nothing.

    Saturated counters stay; the row that would take a counter below zero is returned
    after everything is undone (-1 when all went out).
    """
    n, k = pos.shape
    for i in range(n):
        for j in range(k):
            p = pos[i, j]
            v = counters[p]
            if v == top:
                continue
            if v == 0:
                for i2 in range(i + 1):
                    for j2 in range(k if i2 < i else j):
                        p2 = pos[i2, j2]
                        v2 = counters[p2]
                        if v2 != top:
                            counters[p2] = v2 + 1
                return i
            counters[p] = v - 1
    return -1


@njit
def cbf_min(counters: Any, pos: Any, out: Any) -> None:
    """``out[i]`` = the least counter at the positions of row ``i`` of ``pos``."""
    n, k = pos.shape
    for i in range(n):
        low = counters[pos[i, 0]]
        for j in range(1, k):
            v = counters[pos[i, j]]
            if v < low:
                low = v
        out[i] = low
