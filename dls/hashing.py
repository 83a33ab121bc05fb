"""Stable hash positions of labels for counting Bloom filters.

A label is an unsigned 64-bit integer. Its hash is MurmurHash3 x64_128 (seed 0 unless
stated) of the label's 8-byte **big-endian** representation, i.e. of
``int(label).to_bytes(8, "big")``; the two 64-bit halves ``(h1, h2)`` are exactly those
returned by ``mmh3.hash64(key, seed, signed=False)``.

The ``k`` counter positions of a label in a filter of ``m`` counters follow the
Kirsch–Mitzenmacher double-hashing scheme, defined exactly (in unbounded integer
arithmetic) as::

    pos_i = ((h1 % m) + i * (h2 % m)) % m        for i = 0, 1, ..., k - 1

Any other implementation (Spark, JVM, C, ...) must reproduce this formula bit for bit so
that filters built in different languages agree.

Everything batched here is vectorised with numpy (uint64 wrap-around arithmetic); there is
no per-label Python loop. :func:`positions` is a compiled kernel (:mod:`dls._kernels`)
unless ``DLS_NO_JIT=1`` (:mod:`dls._jit`); :func:`positions_reference` is the numpy code.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import mmh3
import numpy as np

from dls import _jit
from dls._murmur import _C1, _C2, _F1, _F2, _LEN, _S31, _S33
from dls.exceptions import DLSError, FilterParamsError, LabelError, LabelTypeError

if _jit.ENABLED:
    from dls import _kernels

__all__ = [
    "label_rows",
    "DEFAULT_TABLE_BUDGET",
    "MAX_K",
    "MAX_LABEL",
    "MAX_SEED",
    "PositionFn",
    "PositionTable",
    "as_label_array",
    "check_label",
    "check_m",
    "check_k",
    "check_seed",
    "hash_params_of",
    "label_hash128",
    "make_position_fn",
    "positions",
    "positions_reference",
    "positions_scalar",
]

MAX_LABEL = 2**64 - 1
"""Largest valid label."""

MAX_SEED = 2**32 - 1
"""Largest valid hash seed (MurmurHash3 seeds are 32-bit)."""

MAX_K = 64
"""Largest supported number of hash functions."""

MAX_M = 2**63 - 1
"""Largest supported number of counters (positions are returned as int64)."""

DEFAULT_TABLE_BUDGET = 256 * 2**20
"""Default memory budget (bytes) of a :class:`PositionTable`."""

PositionFn = Callable[[np.ndarray], np.ndarray]
"""A function mapping a uint64 label array of shape (n,) to int64 positions (n, k)."""



def _is_int(value: Any) -> bool:
    return isinstance(value, int | np.integer) and not isinstance(value, bool | np.bool_)


def check_label(label: Any, *, field: str = "label") -> int:
    """Validate one label and return it as a Python int.

    Args:
        label: A Python or numpy integer in ``[0, 2**64)``; bools are rejected.
        field: Name of the argument, used in the error.

    Returns:
        The label as a Python ``int``.

    Raises:
        LabelTypeError: If ``label`` is not an integer (a ``TypeError``).
        LabelError: If ``label`` is outside ``[0, 2**64)`` (a ``ValueError``).
    """
    if not _is_int(label):
        raise LabelTypeError(f"{field} must be an unsigned 64-bit integer, got {label!r}",
                             field=field, value=label)
    value = int(label)
    if not 0 <= value <= MAX_LABEL:
        raise LabelError(f"{field} must be in [0, 2**64), got {value}", field=field,
                         value=value)
    return value


def as_label_array(labels: Any, *, field: str = "labels") -> np.ndarray:
    """Convert ``labels`` to a 1-D contiguous uint64 array, validating the values.

    Args:
        labels: A 1-D array-like of non-negative integers (any integer dtype, or Python
            ints up to ``2**64 - 1``). A scalar is treated as one label.
        field: Name of the argument, used in errors.

    Returns:
        A C-contiguous ``np.uint64`` array of shape ``(n,)`` (no copy when ``labels`` is
        already such an array).

    Raises:
        LabelTypeError: If the values are not integers (a ``TypeError``).
        LabelError: If a value is negative or too large, or the array is not 1-D (a
            ``ValueError``).
    """
    arr = np.asarray(labels)
    if not isinstance(labels, np.ndarray) and arr.dtype.kind not in "iu":
        # Python sequences mixing ints beyond int64 become float64 or object: keep exact ints.
        arr = np.asarray(labels, dtype=object)
    if arr.ndim == 0:
        arr = arr.reshape(1)
    if arr.ndim != 1:
        raise LabelError(f"{field} must be a 1-D array, got shape {arr.shape}", field=field,
                         value=arr.shape)
    if arr.dtype == np.uint64:
        return np.ascontiguousarray(arr)
    if arr.size == 0:
        return np.empty(0, dtype=np.uint64)
    if arr.dtype.kind == "u":
        return arr.astype(np.uint64)
    if arr.dtype.kind == "i":
        if int(arr.min()) < 0:
            raise LabelError(f"{field} must be non-negative, got {int(arr.min())}",
                             field=field, value=int(arr.min()))
        return arr.astype(np.uint64)
    if arr.dtype.kind == "O":
        for value in arr:  # object arrays only: Python ints beyond int64
            check_label(value, field=field)
        return arr.astype(np.uint64)
    raise LabelTypeError(f"{field} must be an integer array, got dtype {arr.dtype}",
                         field=field, value=str(arr.dtype))


def check_seed(seed: Any) -> int:
    """Validate a hash seed (an integer in ``[0, 2**32)``) and return it as int.

    Raises:
        FilterParamsError: If ``seed`` is not such an integer.
    """
    if not _is_int(seed) or not 0 <= int(seed) <= MAX_SEED:
        raise FilterParamsError(
            f"seed must be an integer in [0, 2**32), got {seed!r}", field="seed", value=seed
        )
    return int(seed)


def check_m(m: Any) -> int:
    """Validate a number of counters ``m`` and return it as int.

    Raises:
        FilterParamsError: If ``m`` is not a positive integer below ``2**63``.
    """
    if not _is_int(m) or int(m) <= 0:
        raise FilterParamsError(f"m must be a positive integer, got {m!r}", field="m", value=m)
    if int(m) > MAX_M:
        raise FilterParamsError(f"m must be below 2**63, got {m!r}", field="m", value=m)
    return int(m)


def check_k(k: Any) -> int:
    """Validate a number of hash functions ``k`` and return it as int.

    Raises:
        FilterParamsError: If ``k`` is not an integer in ``[1, 64]``.
    """
    if not _is_int(k) or not 1 <= int(k) <= MAX_K:
        raise FilterParamsError(f"k must be between 1 and {MAX_K}, got {k!r}", field="k", value=k)
    return int(k)


def _fmix64(h: np.ndarray) -> np.ndarray:
    h ^= h >> _S33
    h *= _F1
    h ^= h >> _S33
    h *= _F2
    h ^= h >> _S33
    return h


def label_hash128(labels: Any, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Vectorised MurmurHash3 x64_128 of each label's 8 big-endian bytes.

    Bit-identical to ``mmh3.hash64(int(label).to_bytes(8, "big"), seed, signed=False)``.

    Args:
        labels: 1-D array-like of labels (see :func:`as_label_array`).
        seed: MurmurHash3 seed in ``[0, 2**32)``.

    Returns:
        ``(h1, h2)``, two uint64 arrays of shape ``(n,)``.
    """
    arr = as_label_array(labels)
    seed = check_seed(seed)
    with np.errstate(over="ignore"):
        # 8-byte key: no 16-byte block; the tail k1 is the little-endian read of the
        # big-endian bytes, i.e. the byte-swapped label.
        k1 = arr.byteswap()
        k1 *= _C1
        k1 = (k1 << _S31) | (k1 >> _S33)
        k1 *= _C2
        h1 = k1 ^ np.uint64(seed)
        h1 ^= _LEN
        h2 = np.full(arr.shape, np.uint64(seed) ^ _LEN, dtype=np.uint64)
        h1 += h2
        h2 += h1
        _fmix64(h1)
        _fmix64(h2)
        h1 += h2
        h2 += h1
    return h1, h2


def positions_reference(labels: Any, m: int, k: int, seed: int = 0) -> np.ndarray:
    """Counter positions of each label by Kirsch–Mitzenmacher double hashing (numpy).

    ``pos_i = ((h1 % m) + i * (h2 % m)) % m`` for ``i`` in ``0..k-1`` (see module doc).

    Args:
        labels: 1-D array-like of labels.
        m: Number of counters, in ``[1, 2**63)``.
        k: Number of hash functions, in ``[1, 64]``.
        seed: MurmurHash3 seed.

    Returns:
        An int64 array of shape ``(n, k)``.
    """
    m = check_m(m)
    k = check_k(k)
    h1, h2 = label_hash128(labels, seed)
    mm = np.uint64(m)
    if m & (m - 1) == 0:
        mask = np.uint64(m - 1)
        a = h1 & mask
        b = h2 & mask
    else:
        a = h1 % mm
        b = h2 % mm
    out = np.empty((a.shape[0], k), dtype=np.int64)
    out_u = out.view(np.uint64)
    out_u[:, 0] = a
    # pos_{i+1} = (pos_i + b) mod m, which equals the formula above. As pos_i, b < m <= 2**63
    # the sum cannot overflow, and the reduction is one conditional subtraction done as
    # min(t, t - m) in wrap-around arithmetic (t - m wraps to a huge value when t < m).
    cur = a
    with np.errstate(over="ignore"):
        for i in range(1, k):  # loop over k (<= 64), not over labels
            cur = cur + b
            np.minimum(cur, cur - mm, out=cur)
            out_u[:, i] = cur
    return out


def _positions_compiled(labels: Any, m: int, k: int, seed: int = 0) -> np.ndarray:
    """:func:`positions_reference` as one compiled loop over the labels."""
    m = check_m(m)
    k = check_k(k)
    arr = as_label_array(labels)
    seed = check_seed(seed)
    out = np.empty((arr.shape[0], k), dtype=np.int64)
    _kernels.positions(arr, m, k, seed, out)
    return out


positions = _positions_compiled if _jit.ENABLED else positions_reference
"""Counter positions of each label: ``pos_i = ((h1 % m) + i * (h2 % m)) % m``, int64 (n, k).

See :func:`positions_reference` for the arguments; compiled unless ``DLS_NO_JIT=1``.
"""


def positions_scalar(label: int, m: int, k: int, seed: int = 0) -> list[int]:
    """Positions of a single label (same values as :func:`positions`), via ``mmh3``.

    Args:
        label: One label in ``[0, 2**64)``.
        m: Number of counters.
        k: Number of hash functions.
        seed: MurmurHash3 seed.

    Returns:
        The ``k`` positions as Python ints.
    """
    label = check_label(label)
    m = check_m(m)
    k = check_k(k)
    h1, h2 = mmh3.hash64(label.to_bytes(8, "big"), check_seed(seed), signed=False)
    a = h1 % m
    b = h2 % m
    return [(a + i * b) % m for i in range(k)]


def label_rows(labels: np.ndarray, base: int, n_labels: int, whose: str = "the",
               error: type[DLSError] = LabelError) -> np.ndarray:
    """Row of each label in a space of ``n_labels`` labels from ``base``: ``label - base``.

    Labels below ``base`` wrap around to huge rows, so one comparison finds any label
    outside. Raises ``error`` (a :class:`LabelError` by default) naming the first such
    label, with ``whose`` before "label space" in its message.
    """
    rows = labels - np.uint64(base)
    if rows.size and int(rows.max()) >= n_labels:
        bad = int(labels[int(np.argmax(rows))])
        raise error(f"label {bad} is outside {whose} label space {base}..{base + n_labels - 1}",
                    field="labels", value=bad)
    return rows


class PositionTable:
    """Precomputed label -> positions for a dense label space ``base..base+n_labels-1``.

    Hashing then becomes a gather. The table takes ``n_labels * k * 4`` bytes (uint32
    entries, when ``m < 2**32``; 8 bytes per entry otherwise) and is only built when that
    fits in ``max_bytes``.

    Args:
        n_labels: Size of the label space (labels ``base..base+n_labels-1``).
        m: Number of counters.
        k: Number of hash functions.
        seed: MurmurHash3 seed.
        base: First label of the space (e.g. the application-id prefix).
        max_bytes: Memory budget of the table.

    Raises:
        FilterParamsError: If the parameters are invalid or the table exceeds the budget.
    """

    def __init__(
        self,
        n_labels: int,
        m: int,
        k: int,
        seed: int = 0,
        *,
        base: int = 0,
        max_bytes: int = DEFAULT_TABLE_BUDGET,
    ) -> None:
        if not _is_int(n_labels) or int(n_labels) <= 0:
            raise FilterParamsError(
                f"n_labels must be a positive integer, got {n_labels!r}",
                field="n_labels",
                value=n_labels,
            )
        self.m = check_m(m)
        self.k = check_k(k)
        self.seed = check_seed(seed)
        self.n_labels = int(n_labels)
        self.base = check_label(base)
        if self.base + self.n_labels - 1 > MAX_LABEL:
            raise FilterParamsError(
                f"labels {self.base}..{self.base + self.n_labels - 1} exceed 64 bits",
                field="base",
                value=base,
            )
        dtype = np.dtype(np.uint32) if self.m < 2**32 else np.dtype(np.int64)
        need = PositionTable.table_bytes(self.n_labels, self.m, self.k)
        if need > max_bytes:
            raise FilterParamsError(
                f"position table for {self.n_labels} labels x k={self.k} needs {need} bytes, "
                f"over the budget of {max_bytes} bytes",
                field="n_labels",
                value=self.n_labels,
            )
        table = np.empty((self.n_labels, self.k), dtype=dtype)
        chunk = 1 << 20
        for start in range(0, self.n_labels, chunk):  # chunks bound temporary memory
            stop = min(start + chunk, self.n_labels)
            labels = np.arange(start, stop, dtype=np.uint64) + np.uint64(self.base)
            table[start:stop] = positions(labels, self.m, self.k, self.seed)
        table.flags.writeable = False
        self.table = table

    @staticmethod
    def table_bytes(n_labels: int, m: int, k: int) -> int:
        """Bytes a table for these parameters would take."""
        return int(n_labels) * int(k) * (4 if int(m) < 2**32 else 8)

    def lookup(self, labels: Any) -> np.ndarray:
        """Positions of ``labels`` (identical to :func:`positions`), as an int64 (n, k) array.

        Raises:
            LabelError: If a label is outside ``base..base+n_labels-1`` (a ``ValueError``).
        """
        idx = label_rows(as_label_array(labels), self.base, self.n_labels, "the table's")
        return self.table[idx].astype(np.int64, copy=False)

    def __call__(self, labels: Any) -> np.ndarray:
        """Alias of :meth:`lookup`, so a table is a position function."""
        return self.lookup(labels)

    def __repr__(self) -> str:
        return f"PositionTable(n_labels={self.n_labels}, m={self.m}, k={self.k}, seed={self.seed})"


def make_position_fn(
    m: int,
    k: int,
    seed: int = 0,
    label_space_size: int | None = None,
    *,
    base: int = 0,
    max_bytes: int = DEFAULT_TABLE_BUDGET,
) -> PositionFn:
    """Return a callable ``labels -> int64 positions (n, k)``.

    Uses a :class:`PositionTable` when ``label_space_size`` is given and the table fits in
    ``max_bytes``, and hashing (:func:`positions`) otherwise. Both give identical results.

    Args:
        m: Number of counters.
        k: Number of hash functions.
        seed: MurmurHash3 seed.
        label_space_size: Number of labels (``base..base+label_space_size-1``), or None if
            unknown or unbounded.
        base: First label of the space.
        max_bytes: Memory budget of the table.
    """
    m = check_m(m)
    k = check_k(k)
    seed = check_seed(seed)
    if (
        label_space_size is not None
        and label_space_size > 0
        and PositionTable.table_bytes(label_space_size, m, k) <= max_bytes
    ):
        return PositionTable(label_space_size, m, k, seed, base=base, max_bytes=max_bytes).lookup

    def hashed(labels: np.ndarray) -> np.ndarray:
        return positions(labels, m, k, seed)

    hashed.hash_params = (m, k, seed)  # type: ignore[attr-defined]
    return hashed


def hash_params_of(position_fn: Any) -> tuple[int, int, int] | None:
    """``(m, k, seed)`` if ``position_fn`` is plain hashing with them (made here), else None.

    A filter may then compute one label's positions with :func:`positions_scalar`
    instead of calling ``position_fn`` on a one-element array.
    """
    if isinstance(position_fn, PositionTable):
        return position_fn.m, position_fn.k, position_fn.seed
    owner = getattr(position_fn, "__self__", None)
    if isinstance(owner, PositionTable) and getattr(position_fn, "__func__", None) is \
            PositionTable.lookup:
        return owner.m, owner.k, owner.seed
    params = getattr(position_fn, "hash_params", None)
    return params if isinstance(params, tuple) and len(params) == 3 else None
