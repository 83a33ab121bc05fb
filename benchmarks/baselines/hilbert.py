"""Hilbert space-filling curve over a grid of ``2**bits`` cells per dimension, in numpy.

The curve visits every cell of a ``d``-dimensional grid once, and two cells visited one
after the other always share a face. :func:`hilbert_index` gives each cell its position on
the curve and :func:`hilbert_cells` goes back; both work on whole arrays of cells.

The encoding is J. Skilling's "transpose" formulation (AIP Conf. Proc. 707, 381 (2004),
*Programming the Hilbert curve*): the cell coordinates are turned, one bit plane at a time
from the most significant, into a Gray-coded "transposed" index, and the index is read
off by interleaving the bits of the ``d`` transposed words, coordinate 0 giving the most
significant bit of every group of ``d``. Each step is a handful of vectorised numpy
operations on all cells at once, so encoding costs ``O(bits * d)`` array passes.

:class:`HilbertCurve` adds a precomputed cell -> index table for grids of up to
``2**22`` cells (the row-major cell number is the table index), so that encoding a batch
is a single gather there.
"""

from __future__ import annotations

import numpy as np

__all__ = ["TABLE_MAX_CELLS", "HilbertCurve", "hilbert_cells", "hilbert_index"]

TABLE_MAX_CELLS = 1 << 22
"""Largest grid (in cells) for which :class:`HilbertCurve` keeps a lookup table."""

_U1 = np.uint64(1)


def _check(d: int, bits: int) -> None:
    if not isinstance(d, int) or d < 1:
        raise ValueError(f"d must be a positive integer, got {d!r}")
    if not isinstance(bits, int) or bits < 1:
        raise ValueError(f"bits must be a positive integer, got {bits!r}")
    if d * bits > 64:
        raise ValueError(f"d * bits must be at most 64, got d={d}, bits={bits}")


def hilbert_index(cells: np.ndarray, bits: int) -> np.ndarray:
    """Positions on the Hilbert curve (uint64) of cells given as an ``(n, d)`` array.

    Every coordinate must be in ``[0, 2**bits)``.
    """
    c = np.asarray(cells)
    if c.ndim != 2:
        raise ValueError(f"cells must be a 2-D (n, d) array, got shape {c.shape}")
    n, d = c.shape
    _check(d, bits)
    if n and (int(c.min()) < 0 or int(c.max()) >= (1 << bits)):
        raise ValueError(f"cell coordinates must be in [0, {1 << bits}), got "
                         f"[{int(c.min())}, {int(c.max())}]")
    ct = np.uint32 if bits <= 32 else np.uint64  # coordinates
    ht = np.uint32 if d * bits <= 32 else np.uint64  # positions
    x = [np.ascontiguousarray(c[:, i]).astype(ct) for i in range(d)]
    one = ct(1)
    f = np.empty(n, dtype=ct)
    t = np.empty(n, dtype=ct)
    # Undo the rotations and reflections, from the top bit plane down. Where bit q of
    # x[i] is set, x[0] is inverted below q; elsewhere the low bits of x[0] and x[i] swap.
    for plane in range(bits - 1, 0, -1):
        p = ct((1 << plane) - 1)
        for i in range(d):
            np.right_shift(x[i], ct(plane), out=f)
            np.bitwise_and(f, one, out=f)
            np.multiply(f, p, out=f)  # p where the bit is set, else 0
            np.bitwise_xor(x[0], f, out=x[0])
            if i == 0:
                continue
            np.subtract(p, f, out=f)  # p where the bit is clear, else 0
            np.bitwise_xor(x[0], x[i], out=t)
            np.bitwise_and(t, f, out=t)
            np.bitwise_xor(x[0], t, out=x[0])
            np.bitwise_xor(x[i], t, out=x[i])
    # Gray encode.
    for i in range(1, d):
        np.bitwise_xor(x[i], x[i - 1], out=x[i])
    t[:] = 0
    for plane in range(bits - 1, 0, -1):
        np.right_shift(x[d - 1], ct(plane), out=f)
        np.bitwise_and(f, one, out=f)
        np.multiply(f, ct((1 << plane) - 1), out=f)
        np.bitwise_xor(t, f, out=t)
    for i in range(d):
        np.bitwise_xor(x[i], t, out=x[i])
    # Interleave: bit plane j of coordinate i lands at position j*d + (d-1-i).
    h = np.zeros(n, dtype=ht)
    b = np.empty(n, dtype=ht)
    for j in range(bits - 1, -1, -1):
        for i in range(d):
            np.left_shift(h, ht(1), out=h)
            np.right_shift(x[i], ct(j), out=f)
            np.bitwise_and(f, one, out=f)
            b[:] = f
            np.bitwise_or(h, b, out=h)
    return h.astype(np.uint64)


def hilbert_cells(index: np.ndarray, d: int, bits: int) -> np.ndarray:
    """Cells ``(n, d)`` (int64) at the given positions on the curve (the inverse map)."""
    _check(d, bits)
    h = np.asarray(index).astype(np.uint64)
    if h.ndim != 1:
        raise ValueError(f"index must be a 1-D array, got shape {h.shape}")
    n = len(h)
    if d * bits < 64 and n and int(h.max()) >= (1 << (d * bits)):
        raise ValueError(f"index must be below {1 << (d * bits)}, got {int(h.max())}")
    x = [np.zeros(n, dtype=np.uint64) for _ in range(d)]
    pos = d * bits - 1
    for j in range(bits - 1, -1, -1):
        for i in range(d):
            x[i] = x[i] | (((h >> np.uint64(pos)) & _U1) << np.uint64(j))
            pos -= 1
    # Gray decode.
    t = x[d - 1] >> _U1
    for i in range(d - 1, 0, -1):
        x[i] = x[i] ^ x[i - 1]
    x[0] = x[0] ^ t
    # Redo the rotations and reflections, from the bottom bit plane up.
    q = 2
    top = 1 << bits
    while q != top:
        p = np.uint64(q - 1)
        qq = np.uint64(q)
        for i in range(d - 1, -1, -1):
            flip = (x[i] & qq) != 0
            if i == 0:
                x[0] = np.where(flip, x[0] ^ p, x[0])
                continue
            x[0] = np.where(flip, x[0] ^ p, x[0])
            t = np.where(flip, np.uint64(0), (x[0] ^ x[i]) & p)
            x[0] = x[0] ^ t
            x[i] = x[i] ^ t
        q <<= 1
    return np.stack(x, axis=1).astype(np.int64)


class HilbertCurve:
    """The curve of one grid (``d`` dimensions, ``2**bits`` cells each), with a table.

    Args:
        d: Number of dimensions.
        bits: Bits per coordinate (the grid has ``2**bits`` cells per dimension).
        table: Keep a cell -> index lookup table; ``None`` keeps one when the grid has at
            most :data:`TABLE_MAX_CELLS` cells.
    """

    def __init__(self, d: int, bits: int, table: bool | None = None) -> None:
        _check(d, bits)
        self.d = d
        self.bits = bits
        self.n_cells = 1 << (d * bits)
        use = self.n_cells <= TABLE_MAX_CELLS if table is None else table
        self._table: np.ndarray | None = None
        if use:
            side = 1 << bits
            grid = np.stack(np.unravel_index(np.arange(self.n_cells, dtype=np.int64),
                                             (side,) * d), axis=1)
            dtype = np.uint32 if d * bits <= 32 else np.uint64
            self._table = hilbert_index(grid, bits).astype(dtype)

    def index(self, cells: np.ndarray) -> np.ndarray:
        """Positions (uint64) of cells ``(n, d)`` with coordinates in ``[0, 2**bits)``."""
        c = np.asarray(cells, dtype=np.int64)
        if self._table is None:
            return hilbert_index(c, self.bits)
        if c.ndim != 2 or c.shape[1] != self.d:
            raise ValueError(f"cells must be (n, {self.d}), got shape {c.shape}")
        if len(c) and (int(c.min()) < 0 or int(c.max()) >= (1 << self.bits)):
            raise ValueError(f"cell coordinates must be in [0, {1 << self.bits}), got "
                             f"[{int(c.min())}, {int(c.max())}]")
        flat = np.zeros(len(c), dtype=np.int64)
        for i in range(self.d):
            flat = (flat << self.bits) | c[:, i]
        return self._table[flat].astype(np.uint64)

    def memory_bytes(self) -> int:
        """Bytes of the lookup table (0 without one)."""
        return 0 if self._table is None else int(self._table.nbytes)
