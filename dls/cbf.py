"""Counting Bloom filter of labels, with a set-like API (shaped like ``rbloom``).

Counters are 4-bit (default) or 8-bit, held one per byte in a numpy ``uint8`` array and
packed only for serialisation. A counter that reaches its maximum (15 or 255) is
*saturated* and stays so for ever: adds keep it at the maximum and removes never decrement
it. This can only add false positives, never false negatives.

Each of a label's ``k`` positions (see :mod:`dls.hashing`) is one increment, so a label
whose positions repeat increments that counter several times. A removal is refused with
:class:`~dls.exceptions.AbsentLabelError` (a ``KeyError``; changing nothing) when it is
certain that what is removed was never inserted: some non-saturated counter would have to
go below zero.

Batched operations run compiled kernels (:mod:`dls._kernels`: one pass over the
positions) unless ``DLS_NO_JIT=1``; the numpy reference aggregates increments per counter
with a sort + run-length (or ``np.bincount`` over a small domain). Neither has a per-label
Python loop.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Iterable
from typing import Any

import mmh3
import numpy as np

from dls import _jit
from dls.counting import (
    AbsentLabelError,
    CBFParams,
    CountingParams,
    FilterTypeError,
    check_counter_bits,
    check_positive_int,
    count_keys,
    counter_max,
    read_only,
)
from dls.exceptions import FilterParamsError, IncompatibleFiltersError
from dls.hashing import PositionFn, as_label_array, check_k, check_label, check_m, hash_params_of

if _jit.ENABLED:
    from dls import _kernels

__all__ = [
    "CBFParams",
    "CountingBloomFilter",
    "HEADER_SIZE",
    "K_SLACK",
    "MAGIC",
    "VERSION",
    "check_counter_bits",
    "count_keys",
    "counter_max",
    "size_for",
]

MAGIC = b"DLSCBF"
"""Magic bytes opening a serialised filter."""

VERSION = 1
"""Serialisation format version."""

_HEADER = struct.Struct(">6sBBBIQq")
HEADER_SIZE = _HEADER.size
"""Size of the serialised header: magic, version, counter_bits, k, seed, m, n_items."""


K_SLACK = 0.03
"""How much larger than the optimal ``m`` a filter may be to need fewer hash functions."""


def size_for(n: int, p: float) -> tuple[int, int]:
    """``(m, k)`` of a filter for ``n`` items at false-positive rate ``p``.

    The optimum, ``m = ceil(-n ln p / (ln 2)^2)`` and ``k = round(m / n * ln 2)``, unless
    fewer hash functions reach ``p`` with at most :data:`K_SLACK` more counters: then the
    fewest that do, with the ``m`` they need, ``ceil(-k n / ln(1 - p^(1/k)))``. Every
    hash function is one more counter touched by each insert, delete and query: at
    ``p = 0.01``, 5 instead of 7 for 2.8 % more counters.
    """
    ln2 = math.log(2)
    m_opt = max(1, math.ceil(-n * math.log(p) / ln2**2))
    k_opt = min(64, max(1, round(m_opt / n * ln2)))
    for k in range(1, k_opt):
        root = p ** (1.0 / k)
        if root >= 1.0:  # pragma: no cover - k_opt > 1 needs p below 0.35
            continue
        m = math.ceil(-k * n / math.log1p(-root))
        if m <= m_opt * (1.0 + K_SLACK):
            return max(1, m), k
    return m_opt, k_opt


def _is_int(value: Any) -> bool:
    return isinstance(value, int | np.integer) and not isinstance(value, bool | np.bool_)


class CountingBloomFilter(CountingParams):
    """A counting Bloom filter of unsigned 64-bit labels.

    Args:
        expected_items: Number of labels the filter is sized for (``n``).
        fp_rate: Target false-positive rate ``p`` at ``n`` items, in ``(0, 1)``.
        counter_bits: Counter width, 4 or 8.
        seed: MurmurHash3 seed in ``[0, 2**32)``.

    The filter has the ``m`` counters and ``k`` hash functions of :func:`size_for`: the
    optimum, or fewer hash functions for at most 3 % more counters. Use
    :meth:`with_params` to give ``m`` and ``k`` directly.

    Raises:
        FilterParamsError: If a parameter is invalid.
    """

    __slots__ = ("_counters", "_n", "_scalar_hash")  # and those of CountingParams

    def __init__(
        self,
        expected_items: int,
        fp_rate: float,
        *,
        counter_bits: int = 4,
        seed: int = 0,
    ) -> None:
        n = check_positive_int(expected_items, "expected_items")
        if (
            isinstance(fp_rate, bool | np.bool_)
            or not isinstance(fp_rate, int | float | np.integer | np.floating)
            or not 0.0 < float(fp_rate) < 1.0  # also rejects NaN
        ):
            raise FilterParamsError(
                f"fp_rate must be in (0, 1), got {fp_rate!r}", field="fp_rate", value=fp_rate
            )
        m, k = size_for(n, float(fp_rate))
        self._init(m, k, counter_bits, seed, None)

    def _init(
        self, m: int, k: int, counter_bits: int, seed: int, position_fn: PositionFn | None
    ) -> None:
        self._init_params(m, k, counter_bits, seed, position_fn)
        # One label at a time is hashed with mmh3 (see _scalar_positions) unless the position
        # function is another than dls.hashing's own with these parameters: both give the
        # same positions then.
        self._scalar_hash = position_fn is None or hash_params_of(position_fn) == (
            self._m, self._k, self._seed)
        self._counters = np.zeros(self._m, dtype=np.uint8)
        self._n = 0

    @classmethod
    def with_params(
        cls,
        m: int,
        k: int,
        *,
        counter_bits: int = 4,
        seed: int = 0,
        position_fn: PositionFn | None = None,
    ) -> CountingBloomFilter:
        """Create an empty filter with ``m`` counters and ``k`` hash functions.

        Args:
            m: Number of counters (positive).
            k: Number of hash functions, in ``[1, 64]``.
            counter_bits: Counter width, 4 or 8.
            seed: MurmurHash3 seed in ``[0, 2**32)``.
            position_fn: Optional replacement of the hashing, e.g. a
                :class:`dls.hashing.PositionTable` built with the same ``(m, k, seed)``;
                it must return exactly :func:`dls.hashing.positions` of its input.

        Raises:
            FilterParamsError: If a parameter is invalid.
        """
        new = cls.__new__(cls)
        new._init(m, k, counter_bits, seed, position_fn)
        return new

    @classmethod
    def from_counters(
        cls,
        counters: np.ndarray,
        k: int,
        *,
        counter_bits: int = 4,
        seed: int = 0,
        n_items: int = 0,
        position_fn: PositionFn | None = None,
    ) -> CountingBloomFilter:
        """Create a filter holding a copy of the given counters (``m = len(counters)``).

        Raises:
            FilterParamsError: If a parameter is invalid or a counter exceeds the maximum.
        """
        arr = np.asarray(counters)
        if arr.ndim != 1 or arr.dtype.kind not in "ui":
            raise FilterParamsError(
                "counters must be a 1-D integer array", field="counters", value=arr.shape
            )
        new = cls.with_params(
            int(arr.shape[0]), k, counter_bits=counter_bits, seed=seed, position_fn=position_fn
        )
        if arr.size and (int(arr.min()) < 0 or int(arr.max()) > new._max):
            raise FilterParamsError(
                f"counters must be in [0, {new._max}]", field="counters", value=None
            )
        if not _is_int(n_items):
            raise FilterParamsError(
                f"n_items must be an integer, got {n_items!r}", field="n_items", value=n_items
            )
        new._counters[:] = arr
        new._n = int(n_items)
        return new

    # ------------------------------------------------------------------ properties
    # m, k, counter_bits, seed, max_count, params: see CountingParams.
    @property
    def n_items(self) -> int:
        """Insertions minus removals (may be negative only after removing saturated items)."""
        return self._n

    @property
    def counters(self) -> np.ndarray:
        """A read-only view of the counters (uint8, length ``m``)."""
        return read_only(self._counters)

    # ------------------------------------------------------------------ positions
    def positions(self, labels: Any) -> np.ndarray:
        """Return the int64 ``(n, k)`` counter positions of ``labels``."""
        return self._positions(as_label_array(labels))

    # ------------------------------------------------------------------ updates
    def _apply_add_reference(self, pos: np.ndarray) -> None:
        uniq, inc = count_keys(pos, self._m)
        cur = self._counters[uniq].astype(np.int64)
        self._counters[uniq] = np.minimum(cur + inc, self._max)

    def _check_remove(self, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Return (unique positions, decrements, offending mask) for removing ``pos``."""
        uniq, dec = count_keys(pos, self._m)
        cur = self._counters[uniq].astype(np.int64)
        bad = (cur < self._max) & (dec > cur)
        return uniq, dec, bad

    def _commit_remove(self, uniq: np.ndarray, dec: np.ndarray) -> None:
        cur = self._counters[uniq].astype(np.int64)
        self._counters[uniq] = np.where(cur == self._max, cur, cur - dec)

    def _apply_add_compiled(self, pos: np.ndarray) -> None:
        _kernels.cbf_add(self._counters, pos, self._max)

    _apply_add = _apply_add_compiled if _jit.ENABLED else _apply_add_reference

    # Scalar operations (one label) do not go through the numpy batch machinery: they hash
    # with mmh3 and touch the k counters as Python ints (see
    # docs/architecture.md#counting-bloom-filters).
    def _scalar_positions(self, label: Any) -> list[int]:
        value = check_label(label)
        if self._scalar_hash:
            h1, h2 = mmh3.hash64(value.to_bytes(8, "big"), self._seed, signed=False)
            m = self._m
            a, b = h1 % m, h2 % m
            return [(a + i * b) % m for i in range(self._k)]
        return [int(p) for p in self._positions(np.array([value], dtype=np.uint64))[0]]

    def add(self, label: int) -> None:
        """Insert one label."""
        counters, top = self._counters, self._max
        for p in self._scalar_positions(label):  # a repeated position counts twice
            c = int(counters[p])
            if c < top:
                counters[p] = c + 1
        self._n += 1

    def remove(self, label: int) -> None:
        """Remove one label previously inserted.

        Raises:
            AbsentLabelError: If the filter definitely does not contain ``label`` (nothing
                changes; a ``KeyError`` too).
        """
        pos = self._scalar_positions(label)
        counters, top = self._counters, self._max
        dec: dict[int, int] = {}
        for p in pos:
            dec[p] = dec.get(p, 0) + 1
        cur = {p: int(counters[p]) for p in dec}
        if any(cur[p] < top and d > cur[p] for p, d in dec.items()):
            value = check_label(label)
            raise AbsentLabelError(f"label {value} is not in the filter", field="label",
                                   value=value)
        for p, d in dec.items():
            if cur[p] != top:  # a saturated counter stays saturated
                counters[p] = cur[p] - d
        self._n -= 1

    def discard(self, label: int) -> None:
        """Remove one label if the filter may contain it; do nothing otherwise."""
        try:
            self.remove(label)
        except AbsentLabelError:
            pass

    def add_many(self, labels: Iterable[int] | np.ndarray) -> None:
        """Insert every label of ``labels`` (repeats are inserted repeatedly)."""
        arr = as_label_array(labels if isinstance(labels, np.ndarray) else list(labels))
        if arr.size == 0:
            return
        self._apply_add(self._positions(arr))
        self._n += int(arr.shape[0])

    def _remove_many_reference(self, labels: Iterable[int] | np.ndarray) -> None:
        """Remove every label of ``labels``, all or nothing.

        Raises:
            AbsentLabelError: Naming a label that is definitely absent (the filter is
                unchanged; a ``KeyError`` too).
        """
        arr = as_label_array(labels if isinstance(labels, np.ndarray) else list(labels))
        if arr.size == 0:
            return
        pos = self._positions(arr)
        self._remove_positions(arr, pos)

    def _remove_positions(self, arr: np.ndarray, pos: np.ndarray) -> None:
        uniq, dec, bad = self._check_remove(pos)
        if bad.any():
            offending = np.isin(pos, uniq[bad]).any(axis=1)
            first = int(arr[int(np.argmax(offending))])
            raise AbsentLabelError(f"label {first} is not in the filter", field="label",
                                   value=first)
        self._commit_remove(uniq, dec)
        self._n -= int(arr.shape[0])

    def _remove_many_compiled(self, labels: Iterable[int] | np.ndarray) -> None:
        arr = as_label_array(labels if isinstance(labels, np.ndarray) else list(labels))
        if arr.size == 0:
            return
        pos = self._positions(arr)
        if _kernels.cbf_remove(self._counters, pos, self._max) >= 0:
            self._remove_positions(arr, pos)  # undone by the kernel: the reference raises
            return  # pragma: no cover - the reference raised
        self._n -= int(arr.shape[0])

    remove_many = _remove_many_compiled if _jit.ENABLED else _remove_many_reference
    remove_many.__doc__ = _remove_many_reference.__doc__

    def clear(self) -> None:
        """Remove everything."""
        self._counters[:] = 0
        self._n = 0

    # ------------------------------------------------------------------ queries
    def count(self, label: int) -> int:
        """Return the minimum counter over the label's positions (0 = definitely absent)."""
        counters = self._counters
        return min(int(counters[p]) for p in self._scalar_positions(label))

    def __contains__(self, label: object) -> bool:
        return self.count(label) > 0  # type: ignore[arg-type]

    def _count_many_reference(self, labels: Iterable[int] | np.ndarray) -> np.ndarray:
        """Minimum counter per label, as a uint8 array."""
        arr = as_label_array(labels if isinstance(labels, np.ndarray) else list(labels))
        if arr.size == 0:
            return np.empty(0, dtype=np.uint8)
        return self._counters[self._positions(arr)].min(axis=1)

    def _count_many_compiled(self, labels: Iterable[int] | np.ndarray) -> np.ndarray:
        arr = as_label_array(labels if isinstance(labels, np.ndarray) else list(labels))
        if arr.size == 0:
            return np.empty(0, dtype=np.uint8)
        out = np.empty(arr.shape[0], dtype=np.uint8)
        _kernels.cbf_min(self._counters, self._positions(arr), out)
        return out

    count_many = _count_many_compiled if _jit.ENABLED else _count_many_reference
    count_many.__doc__ = _count_many_reference.__doc__

    def contains_many(self, labels: Iterable[int] | np.ndarray) -> np.ndarray:
        """Membership of each label, as a bool array."""
        return self.count_many(labels) > 0

    def __len__(self) -> int:
        return max(self._n, 0)

    def fill_ratio(self) -> float:
        """Fraction of non-zero counters."""
        return float(np.count_nonzero(self._counters)) / self._m

    def estimated_fpr(self) -> float:
        """Estimated false-positive rate: ``fill_ratio() ** k``."""
        return self.fill_ratio() ** self._k

    def memory_bytes(self) -> int:
        """Packed size of the counters in bytes (``ceil(m * counter_bits / 8)``)."""
        return (self._m * self._counter_bits + 7) // 8

    # ------------------------------------------------------------------ comparison / copy
    def __eq__(self, other: object) -> bool:
        if not isinstance(other, CountingBloomFilter):
            return NotImplemented
        return (
            self.params == other.params
            and self._n == other._n
            and bool(np.array_equal(self._counters, other._counters))
        )

    __hash__ = None  # type: ignore[assignment]

    def copy(self) -> CountingBloomFilter:
        """Return an independent copy (sharing the position function)."""
        new = CountingBloomFilter.with_params(
            self._m,
            self._k,
            counter_bits=self._counter_bits,
            seed=self._seed,
            position_fn=self._position_fn,
        )
        new._counters[:] = self._counters
        new._n = self._n
        return new

    def __copy__(self) -> CountingBloomFilter:
        return self.copy()

    def __repr__(self) -> str:
        return (
            f"CountingBloomFilter({self._params_text()}, items={self._n}, "
            f"fill_ratio={self.fill_ratio():.4f})"
        )

    # ------------------------------------------------------------------ combining
    def _check_compatible(self, other: object) -> CountingBloomFilter:
        if not isinstance(other, CountingBloomFilter):
            raise FilterTypeError(
                f"cannot combine a CountingBloomFilter with {type(other).__name__}",
                field="other", value=other)
        if self.params != other.params:
            raise IncompatibleFiltersError(
                f"cannot combine filters with different parameters: {self.params} vs "
                f"{other.params}",
                field="params",
                value=(self.params, other.params),
            )
        return other

    def _union_into(self, other: CountingBloomFilter) -> None:
        total = self._counters.astype(np.uint16) + other._counters
        self._counters[:] = np.minimum(total, self._max)
        self._n += other._n

    def union(self, other: CountingBloomFilter) -> CountingBloomFilter:
        """Return a new filter holding both multisets (counters added, saturating).

        Raises:
            TypeError: If ``other`` is not a CountingBloomFilter.
            IncompatibleFiltersError: If the parameters differ.
        """
        checked = self._check_compatible(other)
        new = self.copy()
        new._union_into(checked)
        return new

    def update(self, other: CountingBloomFilter) -> None:
        """In-place :meth:`union`."""
        self._union_into(self._check_compatible(other))

    def __or__(self, other: object) -> CountingBloomFilter:
        if not isinstance(other, CountingBloomFilter):
            return NotImplemented
        return self.union(other)

    def __ior__(self, other: object) -> CountingBloomFilter:
        if not isinstance(other, CountingBloomFilter):
            return NotImplemented
        self.update(other)
        return self

    # ------------------------------------------------------------------ serialisation
    def to_bytes(self) -> bytes:
        """Serialise: header (see :data:`HEADER_SIZE`) then the packed counters.

        Header, big-endian: magic ``b"DLSCBF"``, version (u8), counter_bits (u8), k (u8),
        seed (u32), m (u64), n_items (i64). Counters: 4-bit packed two per byte, high
        nibble first (a final odd counter takes the high nibble, low nibble 0); 8-bit one
        per byte.
        """
        header = _HEADER.pack(MAGIC, VERSION, self._counter_bits, self._k, self._seed, self._m,
                              self._n)
        if self._counter_bits == 8:
            return header + self._counters.tobytes()
        c = self._counters
        if self._m % 2:
            c = np.append(c, np.uint8(0))
        packed = (c[0::2] << np.uint8(4)) | c[1::2]
        return header + packed.tobytes()

    @classmethod
    def from_bytes(
        cls, data: bytes | bytearray | memoryview, *, position_fn: PositionFn | None = None
    ) -> CountingBloomFilter:
        """Deserialise a filter written by :meth:`to_bytes`.

        Raises:
            FilterParamsError: If the data is truncated, has a wrong magic, version,
                length or parameter.
        """
        buf = bytes(data)
        if len(buf) < HEADER_SIZE:
            raise FilterParamsError(
                f"serialised filter too short: {len(buf)} bytes, header needs {HEADER_SIZE}",
                field="data",
                value=len(buf),
            )
        magic, version, bits, k, seed, m, n_items = _HEADER.unpack_from(buf)
        if magic != MAGIC:
            raise FilterParamsError(
                f"bad magic {magic!r}, expected {MAGIC!r}", field="magic", value=magic
            )
        if version != VERSION:
            raise FilterParamsError(
                f"unsupported version {version}, expected {VERSION}",
                field="version",
                value=version,
            )
        bits = check_counter_bits(bits)
        k = check_k(k)
        m = check_m(m)
        payload = (m * bits + 7) // 8
        if len(buf) != HEADER_SIZE + payload:
            raise FilterParamsError(
                f"serialised filter has {len(buf)} bytes, expected {HEADER_SIZE + payload} "
                f"for m={m}, counter_bits={bits}",
                field="data",
                value=len(buf),
            )
        body = np.frombuffer(buf, dtype=np.uint8, offset=HEADER_SIZE)
        if bits == 8:
            counters = body
        else:
            counters = np.empty(2 * payload, dtype=np.uint8)
            counters[0::2] = body >> np.uint8(4)
            counters[1::2] = body & np.uint8(0x0F)
            if m % 2 and counters[-1] != 0:
                raise FilterParamsError(
                    "padding nibble of the last byte must be 0", field="data", value=None
                )
            counters = counters[:m]
        new = cls.with_params(m, k, counter_bits=bits, seed=seed, position_fn=position_fn)
        new._counters[:] = counters
        new._n = int(n_items)
        return new
