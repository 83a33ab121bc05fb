"""What a counting Bloom filter and a bank of them share.

:class:`dls.cbf.CountingBloomFilter` (one filter) and :class:`dls.bank.BitSlicedCBFBank`
(one filter per client, bit-sliced) are the same filter laid out twice: both take their
``(m, k, counter_bits, seed)`` and optional position function through
:class:`CountingParams`, compute a label's positions the same way, and aggregate counter
increments with :func:`count_keys`. The errors they raise about their arguments
(:class:`FilterInputError`, :class:`FilterTypeError`) live in :mod:`dls.exceptions` with
the core's others and are re-exported here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from dls.exceptions import (
    AbsentLabelError,
    FilterInputError,
    FilterParamsError,
    FilterTypeError,
)
from dls.hashing import PositionFn, check_k, check_m, check_seed, hash_params_of, positions

__all__ = [
    "AbsentLabelError",
    "CBFParams",
    "CountingParams",
    "FilterInputError",
    "FilterTypeError",
    "check_counter_bits",
    "check_positive_int",
    "count_keys",
    "counter_max",
    "read_only",
]

_BINCOUNT_MIN_DOMAIN = 1 << 10


def _is_int(value: Any) -> bool:
    return isinstance(value, int | np.integer) and not isinstance(value, bool | np.bool_)


def check_counter_bits(counter_bits: Any) -> int:
    """Validate a counter width (4 or 8) and return it as int.

    Raises:
        FilterParamsError: If ``counter_bits`` is not 4 or 8.
    """
    if not _is_int(counter_bits) or int(counter_bits) not in (4, 8):
        raise FilterParamsError(
            f"counter_bits must be 4 or 8, got {counter_bits!r}",
            field="counter_bits",
            value=counter_bits,
        )
    return int(counter_bits)


def check_positive_int(value: Any, field: str) -> int:
    """Validate a positive integer (bools refused) named ``field`` and return it as int.

    Raises:
        FilterParamsError: Naming ``field`` and ``value``, if ``value`` is not one.
    """
    if not _is_int(value) or int(value) <= 0:
        raise FilterParamsError(
            f"{field} must be a positive integer, got {value!r}", field=field, value=value
        )
    return int(value)


def counter_max(counter_bits: int) -> int:
    """Saturation value of a counter of ``counter_bits`` bits (15 or 255)."""
    return (1 << counter_bits) - 1


def read_only(array: np.ndarray) -> np.ndarray:
    """A view of ``array`` that cannot be written through."""
    view = array.view()
    view.flags.writeable = False
    return view


def count_keys(keys: np.ndarray, domain: int) -> tuple[np.ndarray, np.ndarray]:
    """Aggregate non-negative integer keys into (sorted unique keys, multiplicities).

    Uses ``np.bincount`` when the key domain is small relative to the number of keys, and
    a sort + run-length encoding otherwise (uint32 keys when the domain allows it).

    Args:
        keys: 1-D array of integer keys in ``[0, domain)``.
        domain: Exclusive upper bound of the keys.

    Returns:
        ``(unique_keys, counts)``: int64 arrays, ``unique_keys`` ascending.
    """
    keys = np.asarray(keys).reshape(-1)
    n = keys.shape[0]
    if n == 0:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
    if domain <= max(_BINCOUNT_MIN_DOMAIN, 2 * n):
        counts = np.bincount(keys.astype(np.int64, copy=False), minlength=domain)
        uniq = np.flatnonzero(counts)
        return uniq.astype(np.int64, copy=False), counts[uniq].astype(np.int64, copy=False)
    if domain <= 2**32:
        srt = np.sort(keys.astype(np.uint32))
    else:
        srt = np.sort(keys.astype(np.int64, copy=False))
    flags = np.empty(n, dtype=bool)
    flags[0] = True
    np.not_equal(srt[1:], srt[:-1], out=flags[1:])
    starts = np.flatnonzero(flags)
    counts = np.diff(starts, append=n)
    return srt[starts].astype(np.int64), counts.astype(np.int64, copy=False)


@dataclass(frozen=True, slots=True)
class CBFParams:
    """The parameters two filters must share to be combined or compared."""

    m: int
    k: int
    counter_bits: int
    seed: int


class CountingParams:
    """Mixin: a counting Bloom filter's parameters, position function and positions.

    A class using it calls :meth:`_init_params` once, then reads ``self._m``,
    ``self._k``, ``self._seed``, ``self._max`` and ``self._position_fn`` directly on its
    hot paths.
    """

    __slots__ = ("_check_positions", "_counter_bits", "_k", "_m", "_max", "_position_fn",
                 "_seed")

    _m: int
    _k: int
    _counter_bits: int
    _seed: int
    _max: int
    _position_fn: PositionFn | None
    _check_positions: bool

    def _init_params(
        self, m: Any, k: Any, counter_bits: Any, seed: Any, position_fn: PositionFn | None
    ) -> None:
        """Validate and set the parameters.

        Raises:
            FilterParamsError: If a parameter is invalid (checked in signature order).
        """
        self._m = check_m(m)
        self._k = check_k(k)
        self._counter_bits = check_counter_bits(counter_bits)
        self._seed = check_seed(seed)
        self._max = counter_max(self._counter_bits)
        if position_fn is not None and not callable(position_fn):
            raise FilterParamsError(
                f"position_fn must be callable, got {position_fn!r}",
                field="position_fn",
                value=position_fn,
            )
        self._position_fn = position_fn
        # A position function of dls.hashing with these parameters gives positions in
        # [0, m); another one's are checked (the compiled kernels index without bounds).
        self._check_positions = position_fn is not None and hash_params_of(position_fn) != (
            self._m, self._k, self._seed)

    @property
    def m(self) -> int:
        """Number of counters (per filter)."""
        return self._m

    @property
    def k(self) -> int:
        """Number of hash functions."""
        return self._k

    @property
    def counter_bits(self) -> int:
        """Counter width in bits (4 or 8)."""
        return self._counter_bits

    @property
    def seed(self) -> int:
        """MurmurHash3 seed."""
        return self._seed

    @property
    def max_count(self) -> int:
        """Saturation value of a counter."""
        return self._max

    @property
    def params(self) -> CBFParams:
        """The parameters ``(m, k, counter_bits, seed)``."""
        return CBFParams(self._m, self._k, self._counter_bits, self._seed)

    def _params_text(self) -> str:
        """``m=…, k=…, counter_bits=…, seed=…``, for a ``repr`` or an error."""
        return (f"m={self._m}, k={self._k}, counter_bits={self._counter_bits}, "
                f"seed={self._seed}")

    def _positions(self, labels: np.ndarray) -> np.ndarray:
        """The int64 ``(n, k)`` counter positions of validated uint64 ``labels``.

        Raises:
            FilterParamsError: If the position function returns another shape, or
                positions outside ``[0, m)``.
        """
        if self._position_fn is None:
            return positions(labels, self._m, self._k, self._seed)
        out = np.asarray(self._position_fn(labels))
        if out.shape != (labels.shape[0], self._k):
            raise FilterParamsError(
                f"position_fn returned shape {out.shape}, expected {(labels.shape[0], self._k)}",
                field="position_fn",
                value=out.shape,
            )
        out = out.astype(np.int64, copy=False)
        if self._check_positions and out.size:
            low, high = int(out.min()), int(out.max())
            if low < 0 or high >= self._m:
                raise FilterParamsError(
                    f"position_fn returned positions from {low} to {high}, outside "
                    f"[0, {self._m})", field="position_fn", value=(low, high))
        return out
