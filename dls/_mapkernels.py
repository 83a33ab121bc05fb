"""Compiled kernel of the batch mapping: boxes of cells into their labels.

Imported only when :data:`dls._jit.ENABLED`; the numpy reference is
:func:`dls.mapping.box_labels_batch_reference`, held to the same labels by
``tests/dls/test_jit_parity.py``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dls._jit import njit

__all__ = ["box_labels_into", "warm_up"]


@njit
def box_labels_into(lo: Any, hi: Any, shifts: Any, prefix: Any, offsets: Any,
                    out: Any) -> None:
    """Labels of box ``b`` (cells ``lo[b, i]..hi[b, i]``) into ``out[offsets[b]:...]``.

    Label = ``prefix | sum(cell_i << shifts[i])``. The last attribute varies fastest, so
    each box's labels come out ascending when the shifts decrease (the first attribute
    highest, as :attr:`dls.space.ContentSpace.shifts` places them). An odometer over the
    other attributes, one store per label: no division, no temporaries.
    """
    n, d = lo.shape
    last = d - 1
    cur = np.empty(d, dtype=np.int64)
    sh_last = np.uint64(shifts[last])
    for b in range(n):
        at = offsets[b]
        for i in range(d):
            cur[i] = lo[b, i]
        c0 = lo[b, last]
        c1 = hi[b, last]
        while True:
            head = prefix
            for i in range(last):
                head |= np.uint64(cur[i]) << np.uint64(shifts[i])
            for c in range(c0, c1 + 1):
                out[at] = head | (np.uint64(c) << sh_last)
                at += 1
            i = last - 1
            while i >= 0:
                cur[i] += 1
                if cur[i] <= hi[b, i]:
                    break
                cur[i] = lo[b, i]
                i -= 1
            if i < 0:
                break


def warm_up() -> None:
    """Compile the kernel for the types :func:`dls.mapping.box_labels_batch` passes."""
    lo = np.zeros((2, 3), dtype=np.int64)
    hi = np.ones((2, 3), dtype=np.int64)
    offsets = np.array([0, 8, 16], dtype=np.int64)
    out = np.empty(16, dtype=np.uint64)
    box_labels_into(lo, hi, np.array([8, 4, 0], dtype=np.int64), np.uint64(1 << 40),
                    offsets, out)
