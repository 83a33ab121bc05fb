"""A counting Bloom filter from PyPI beside ``dls.cbf``: fastbloom-rs, behind a tiny adapter.

``fastbloom-rs`` (Rust, PyO3) has a real counting filter, ``CountingBloomFilter``, with
4-bit counters packed two per byte, ``add`` / ``remove`` / ``contains`` on ints, strings
and bytes, and batch ``add_int_batch`` / ``contains_int_batch`` (there is no batch
removal). That makes it a like-for-like peer of :class:`dls.cbf.CountingBloomFilter`.

Equal ``m`` and ``k``: the library sizes filters from (expected items, false-positive
rate), but ``CountingBloomFilter.from_bytes(zeros, k)`` builds one with exactly
``2 * len(zeros)`` counters and ``k`` hashes; its counters live in 64-bit words, so ``m``
must be a multiple of 16. ``enable_repeat_insert=True`` is required for counting: with it
off, adding a label already present does not increment, and a later removal of one copy
would drop the other.

What differs from ``dls.cbf`` (checked by the tests):

* labels: the library hashes signed 64-bit ints; a DLS label (unsigned 64-bit) is passed as
  the int64 with the same bits, so every label maps to a distinct key;
* saturation: counters stop at 15, but ``remove`` *does* decrement a saturated counter, so
  after more than 15 copies of one position a removal can cause a false negative;
  ``dls.cbf`` never decrements a saturated counter;
* removal of a label that was never inserted is not refused: it decrements whatever
  counters it hashes to (floored at 0); ``dls.cbf`` raises ``KeyError`` and changes nothing;
* hashing is the library's own, so the same label lands on other positions than in
  ``dls.cbf``; false-positive rates are comparable, positions are not.
"""

from __future__ import annotations

from importlib.metadata import version

import fastbloom_rs
import numpy as np

__all__ = ["PeerCountingBloomFilter"]


def _as_int64(labels: np.ndarray | list[int]) -> np.ndarray:
    """Labels (uint64 values) as the int64 with the same bits."""
    arr = np.asarray(labels)
    if arr.dtype.kind == "u":
        return arr.astype(np.uint64).view(np.int64)
    if arr.size and arr.dtype.kind != "i":
        raise ValueError(f"labels must be integers, got dtype {arr.dtype}")
    a = arr.astype(np.int64)
    if a.size and int(a.min()) < 0:
        raise ValueError(f"labels must be non-negative, got {int(a.min())}")
    return a


def _one(label: int) -> int:
    if isinstance(label, bool) or not isinstance(label, int | np.integer):
        raise ValueError(f"label must be an integer, got {label!r}")
    v = int(label)
    if not 0 <= v < 1 << 64:
        raise ValueError(f"label must be in [0, 2**64), got {v}")
    return v - (1 << 64) if v >= 1 << 63 else v


class PeerCountingBloomFilter:
    """fastbloom-rs's counting Bloom filter with ``m`` 4-bit counters and ``k`` hashes.

    Args:
        m: Number of counters, a positive multiple of 16.
        k: Number of hash functions, in ``[1, 64]``.
    """

    library = "fastbloom-rs"
    library_version = version("fastbloom-rs")
    counting = True
    deletable = True
    counter_bits = 4

    def __init__(self, m: int, k: int) -> None:
        if isinstance(m, bool) or not isinstance(m, int) or m < 16 or m % 16:
            raise ValueError(f"m must be a positive multiple of 16, got {m!r}")
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= 64:
            raise ValueError(f"k must be an integer in [1, 64], got {k!r}")
        self.m = m
        self.k = k
        self._f = fastbloom_rs.CountingBloomFilter.from_bytes(bytes(m // 2), k, True)
        got = self._f.config().size()
        if got != m or self._f.hashes() != k:
            raise RuntimeError(f"fastbloom-rs built m={got}, k={self._f.hashes()} "
                               f"instead of m={m}, k={k}")

    def add(self, label: int) -> None:
        """Insert one label."""
        self._f.add_int(_one(label))

    def remove(self, label: int) -> None:
        """Remove one label (not checked: see the module docstring)."""
        self._f.remove_int(_one(label))

    def contains(self, label: int) -> bool:
        """Whether the label may be in the filter."""
        return bool(self._f.contains_int(_one(label)))

    def __contains__(self, label: object) -> bool:
        return self.contains(label)  # type: ignore[arg-type]

    def add_many(self, labels: np.ndarray | list[int]) -> None:
        """Insert every label (the library's ``add_int_batch``)."""
        self._f.add_int_batch(_as_int64(labels).tolist())

    def remove_many(self, labels: np.ndarray | list[int]) -> None:
        """Remove every label: a Python loop of ``remove_int`` (no batch removal exists)."""
        rm = self._f.remove_int
        for v in _as_int64(labels).tolist():
            rm(v)

    def contains_many(self, labels: np.ndarray | list[int]) -> np.ndarray:
        """Membership of each label (the library's ``contains_int_batch``), as bools."""
        out = self._f.contains_int_batch(_as_int64(labels).tolist(), check_type=False)
        return np.asarray(out, dtype=bool)

    def counter(self, index: int) -> int:
        """The counter at a position."""
        return int(self._f.counter_at(index))

    def memory_bytes(self) -> int:
        """Bytes of the packed counters (``m / 2``)."""
        return self.m // 2
