"""Matching a batch of event labels against many client filters at once.

A *bank* holds one filter per client (client index ``0..capacity-1``) and answers, for a
batch of ``E`` event labels, which clients' filters contain each label, without any
per-client or per-event Python work. Two implementations share the
:class:`ClientFilterBank` interface:

* :class:`BitSlicedCBFBank`: every client has its own counting Bloom filter with the same
  ``(m, k, seed)``. Counters are a ``uint8`` matrix of shape ``(m, capacity)`` (position
  major, so the 64 clients of one word are contiguous; 4-bit counters are stored two to a
  byte, a ``(m, capacity // 2)`` matrix, and :attr:`~BitSlicedCBFBank.counters` unpacks
  them) and ``bits`` is the bit-sliced
  ``(m, capacity // 64)`` ``uint64`` matrix whose bit ``c`` of row ``p`` says
  ``counter[p, c] > 0``. Matching an event is ``k`` row gathers and ANDs.
* :class:`DirectLabelBank`: exact, for small label spaces: a ``(labels, capacity)`` count
  matrix and its ``(labels, capacity // 64)`` bitset; matching is one row gather.

Matches are returned as CSR: ``offsets`` (int64, length ``E + 1``) and ``clients`` (int64,
ascending within each event); the clients of event ``e`` are
``clients[offsets[e]:offsets[e + 1]]``. A bank's ``match_threads`` (default 1) lets a large
batch be matched on several threads, with the same result.

What both banks share (the count matrix, its bitset, updates and matching) is
:class:`dls.bitset_bank.BitsetBank`; turning matched bitsets into CSR is :mod:`dls.bitset`;
the design is in docs/architecture.md#the-client-filter-bank.
"""

from __future__ import annotations

import threading
import time
from typing import Protocol, runtime_checkable

import numpy as np

from dls import _jit
from dls.bitset import WORD_BITS
from dls.bitset_bank import BitsetBank, check_client
from dls.cbf import CountingBloomFilter
from dls.counting import (
    CountingParams,
    FilterTypeError,
    check_positive_int,
    read_only,
)
from dls.exceptions import FilterParamsError, IncompatibleFiltersError
from dls.hashing import PositionFn, PositionTable, check_label, label_rows

__all__ = [
    "BitSlicedCBFBank",
    "ClientFilterBank",
    "DirectLabelBank",
    "WORD_BITS",
    "warm_up_kernels",
]

_COLS_TABLE_MAX_BYTES = 16 * 2**20
"""Largest position table the CBF bank keeps a transposed copy of for matching."""


_WARM_UP = threading.Lock()


def warm_up_kernels() -> float:
    """Compile (or load from the disk cache) the filters' kernels, for the types a broker passes.

    A node calls it at start through :func:`broker_node.rehearsal.rehearse`, which then
    walks the node's own path for the edge's kernels, so that no batch waits for
    compilation (about 19 s for these with an empty cache on this project's machine, 0.3 s
    to load a warm one).
    Returns the seconds it took (0.0 on the numpy reference path, ``DLS_NO_JIT=1``).
    """
    if not _jit.ENABLED:
        return 0.0
    from dls import _idkernels, _kernels, _mapkernels, _rowkernels

    t0 = time.perf_counter()
    # One thread at a time: a process running several engines starts them together, and
    # numba loading and writing its disk cache from several threads at once was seen to
    # crash the process (SIGSEGV) when the cache was cold.
    with _WARM_UP:
        _kernels.warm_up()
        _rowkernels.warm_up()
        _mapkernels.warm_up()
        _idkernels.warm_up()
    return time.perf_counter() - t0


@runtime_checkable
class ClientFilterBank(Protocol):
    """The interface shared by the client-filter banks."""

    @property
    def n_clients(self) -> int:
        """One more than the highest client index ever added (0 when empty)."""
        ...

    @property
    def capacity(self) -> int:
        """Number of client slots allocated (a multiple of 64)."""
        ...

    def add(self, clients: np.ndarray, labels: np.ndarray) -> None:
        """Insert each (client, label) pair once (pairs may repeat)."""
        ...

    def remove(self, clients: np.ndarray, labels: np.ndarray) -> None:
        """Remove each (client, label) pair once, all or nothing (AbsentLabelError if absent)."""
        ...

    match_threads: int
    """Threads :meth:`match` may use on a large batch (1: none)."""

    update_threads: int
    """Threads a large batch's counter updates may use (1: none)."""

    def match(
        self, labels: np.ndarray, exclude: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Return the CSR ``(offsets, clients)`` of the clients matching each label."""
        ...

    def contains(self, client: int, label: int) -> bool:
        """Whether ``client``'s filter (possibly) contains ``label``."""
        ...

    def memory_bytes(self) -> int:
        """Bytes held by the bank's arrays."""
        ...

    def fill_ratios(self) -> np.ndarray:
        """Share of non-zero counters (or labels present) in each client's filter."""
        ...


class BitSlicedCBFBank(BitsetBank, CountingParams):
    """One counting Bloom filter per client, laid out bit-sliced for batch matching.

    Every client's filter has the same ``(m, k, counter_bits, seed)``; the filter of
    client ``c`` behaves exactly like a :class:`~dls.cbf.CountingBloomFilter` with those
    parameters that received the same adds and removes (see :meth:`client_filter`).

    Args:
        m: Counters per client filter.
        k: Hash functions.
        counter_bits: Counter width, 4 or 8 (saturating, as in the CBF).
        seed: MurmurHash3 seed.
        position_fn: Optional replacement of the hashing (e.g. a
            :class:`dls.hashing.PositionTable`) giving identical positions.
        initial_capacity: Client slots to allocate up front (rounded up to 64).

    Raises:
        FilterParamsError: If a parameter is invalid.
    """

    _count_dtype = np.dtype(np.uint8)

    def __init__(
        self,
        m: int,
        k: int,
        *,
        counter_bits: int = 4,
        seed: int = 0,
        position_fn: PositionFn | None = None,
        initial_capacity: int = WORD_BITS,
    ) -> None:
        self._init_params(m, k, counter_bits, seed, position_fn)
        self._packed = self._counter_bits == 4  # two counters a byte
        # A precomputed position table, transposed to (k, labels): matching then gathers
        # each hash's positions as one contiguous vector, without the (E, k) int64 rows
        # and their transpose. Small tables only (_COLS_TABLE_MAX_BYTES).
        table = (position_fn if isinstance(position_fn, PositionTable)
                 else getattr(position_fn, "__self__", None))  # a table or its lookup
        self._cols_table: np.ndarray | None = None
        self._cols_base = 0
        if (isinstance(table, PositionTable) and table.k == self._k
                and table.table.nbytes <= _COLS_TABLE_MAX_BYTES):
            self._cols_table = np.ascontiguousarray(table.table.T)
            self._cols_base = table.base
        # The table itself, for the compiled updates: a label's rows are its table row.
        self._pair_table: PositionTable | None = None
        if isinstance(table, PositionTable) and not self._check_positions:
            self._pair_table = table
        self._inverse: tuple[np.ndarray, np.ndarray] | None = None  # built at first use
        self._items = np.zeros(0, dtype=np.int64)
        super().__init__(self._m, initial_capacity)

    # m, k, counter_bits, seed, max_count, params and _positions: see CountingParams.
    @property
    def counters(self) -> np.ndarray:
        """Read-only ``(m, capacity)`` uint8 counter matrix (unpacked: a copy for 4 bits)."""
        if not self._packed:
            return read_only(self._counts)
        out = np.empty((self._m, self._cap), dtype=np.uint8)
        np.bitwise_and(self._counts, 15, out=out[:, 0::2])
        np.right_shift(self._counts, 4, out=out[:, 1::2])
        return read_only(out)

    @property
    def bits(self) -> np.ndarray:
        """Read-only view of the ``(m, capacity // 64)`` uint64 bit-sliced matrix."""
        return read_only(self._bits)

    def _column(self, client: int) -> np.ndarray:
        """Client ``client``'s ``m`` counters (uint8; a copy when packed)."""
        if not self._packed:
            return self._counts[:, client]
        return (self._counts[:, client >> 1] >> np.uint8(4 * (client & 1))) & np.uint8(15)

    def fill_ratios(self) -> np.ndarray:
        """Share of non-zero counters in each client's filter, by client index (float64)."""
        n = self.n_clients
        if not self._packed:
            return np.count_nonzero(self._counts[:, :n], axis=0) / float(self._m)
        half = self._counts[:, :(n + 1) // 2]
        out = np.empty(2 * half.shape[1], dtype=np.int64)
        out[0::2] = np.count_nonzero(half & np.uint8(15), axis=0)
        out[1::2] = np.count_nonzero(half >> np.uint8(4), axis=0)
        return out[:n] / float(self._m)

    def _saturation(self) -> int | None:
        return self._max

    def _pair_rows(self, labels: np.ndarray) -> np.ndarray:
        return self._positions(labels)

    def _match_rows(self, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        return self._positions(labels), None

    def _pair_source(self, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        table = self._pair_table
        if table is None:
            return super()._pair_source(labels)
        idx = label_rows(labels, table.base, table.n_labels, "the table's")
        return table.table, idx.view(np.int64)

    def _pair_inverse(self, table: np.ndarray, idx: np.ndarray
                      ) -> tuple[np.ndarray, np.ndarray] | None:
        # A batch with two pairs per label of the table or more touches most of its rows.
        if self._pair_table is None or idx.shape[0] < 2 * table.shape[0]:
            return None
        if self._inverse is None:
            from dls._rowkernels import inverse

            self._inverse = inverse(self._pair_table.table, self._m)
        return self._inverse

    def _match_cols(self, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        table = self._cols_table
        if table is None:
            return super()._match_cols(labels)
        rel = labels - np.uint64(self._cols_base)  # labels below the base wrap to huge
        if rel.size and int(rel.max()) >= table.shape[1]:
            return super()._match_cols(labels)  # the position function's own error
        return np.take(table, rel.astype(np.intp), axis=1), None

    def _grow_to(self, capacity: int) -> None:
        super()._grow_to(capacity)
        items = np.zeros(capacity, dtype=np.int64)
        items[: self._items.shape[0]] = self._items
        self._items = items

    def add(self, clients: np.ndarray, labels: np.ndarray) -> None:
        """Insert each (client, label) pair once; the capacity grows as needed.

        Args:
            clients: int64 client indices (non-negative).
            labels: uint64 labels, same length.
        """
        cli = self._add_pairs(clients, labels)
        if cli.size:
            self._items += np.bincount(cli, minlength=self._cap)

    def remove(self, clients: np.ndarray, labels: np.ndarray) -> None:
        """Remove each (client, label) pair once, all or nothing.

        Raises:
            AbsentLabelError: (a ``KeyError``) Naming a pair whose client filter definitely
                does not contain the label (nothing changes).
        """
        cli = self._remove_pairs(clients, labels)
        if cli.size:
            self._items -= np.bincount(cli, minlength=self._cap)

    @property
    def item_counts(self) -> np.ndarray:
        """Read-only pairs added minus removed, per client slot (repeats counted)."""
        return read_only(self._items)

    def fill_of(self, clients: np.ndarray) -> np.ndarray:
        """:meth:`fill_ratios` of some clients only (indexes below the capacity)."""
        cli = np.asarray(clients, dtype=np.int64)
        if not self._packed:
            return np.count_nonzero(self._counts[:, cli], axis=0) / float(self._m)
        shift = (4 * (cli & 1)).astype(np.uint8)
        cols = (self._counts[:, cli >> 1] >> shift) & np.uint8(15)
        return np.count_nonzero(cols, axis=0) / float(self._m)

    def estimated_fprs(self) -> np.ndarray:
        """Estimated false-positive rate of each client's filter: ``fill ** k``."""
        return self.fill_ratios() ** self._k

    def resized(self, m: int, k: int, clients: np.ndarray, labels: np.ndarray, *,
                position_fn: PositionFn | None = None) -> BitSlicedCBFBank:
        """A new bank of ``(m, k)`` holding exactly the given (client, label) pairs.

        The counter width, seed, client slots and match threads are this bank's, which is
        left unchanged: the owner swaps the new one in once it is built (a node rebuilds
        its client bank larger from its exact tables, ``broker_node.resize``).
        """
        new = BitSlicedCBFBank(m, k, counter_bits=self._counter_bits, seed=self._seed,
                               position_fn=position_fn, initial_capacity=self._cap)
        new.match_threads = self.match_threads
        new.update_threads = self.update_threads
        new.add(clients, labels)
        new._ensure_clients(self._n_clients)
        return new

    def contains(self, client: int, label: int) -> bool:
        """Whether ``client``'s filter (possibly) contains ``label``."""
        c = check_client(client)
        value = check_label(label)
        if c >= self._cap:
            return False
        pos = self._positions(np.array([value], dtype=np.uint64))[0]
        return bool(self._column(c)[pos].min() > 0)

    def memory_bytes(self) -> int:
        """Bytes held by the bank's arrays.

        The counter matrix, the bitset, the per-client item counts and the transposed copy
        of a position table and its row inverse once built (not the position function's
        own table).
        """
        extra = 0 if self._cols_table is None else int(self._cols_table.nbytes)
        if self._inverse is not None:
            extra += int(self._inverse[0].nbytes + self._inverse[1].nbytes)
        return super().memory_bytes() + int(self._items.nbytes) + extra

    def client_filter(self, client: int) -> CountingBloomFilter:
        """Return a standalone copy of ``client``'s filter (same parameters)."""
        c = check_client(client)
        if c >= self._cap:
            return CountingBloomFilter.with_params(
                self._m,
                self._k,
                counter_bits=self._counter_bits,
                seed=self._seed,
                position_fn=self._position_fn,
            )
        return CountingBloomFilter.from_counters(
            self._column(c),
            self._k,
            counter_bits=self._counter_bits,
            seed=self._seed,
            n_items=int(self._items[c]),
            position_fn=self._position_fn,
        )

    def load_client_filter(self, client: int, cbf: CountingBloomFilter) -> None:
        """Replace ``client``'s filter by a copy of ``cbf`` (e.g. restored from bytes).

        Raises:
            IncompatibleFiltersError: If ``cbf``'s parameters differ from the bank's.
        """
        c = check_client(client)
        if not isinstance(cbf, CountingBloomFilter):
            raise FilterTypeError(f"expected a CountingBloomFilter, got {type(cbf).__name__}",
                                  field="cbf", value=cbf)
        mine = (self._m, self._k, self._counter_bits, self._seed)
        theirs = (cbf.m, cbf.k, cbf.counter_bits, cbf.seed)
        if mine != theirs:
            raise IncompatibleFiltersError(
                f"cannot load a filter with parameters {cbf.params} into a bank with "
                f"({self._params_text()})",
                field="params",
                value=(mine, theirs),
            )
        self._ensure_clients(c + 1)
        if self._packed:
            sh = np.uint8(4 * (c & 1))
            keep = self._counts[:, c >> 1] & ~(np.uint8(15) << sh)
            self._counts[:, c >> 1] = keep | (cbf.counters.astype(np.uint8) << sh)
        else:
            self._counts[:, c] = cbf.counters
        self._items[c] = cbf.n_items
        rows = np.arange(self._m, dtype=np.int64)
        self._bits[:, c // WORD_BITS] &= ~(np.uint64(1) << np.uint64(c % WORD_BITS))
        self._refresh(rows * self._cap + c, np.zeros(self._m, dtype=np.int64),
                      self._column(c).astype(np.int64))

    def __repr__(self) -> str:
        return (
            f"BitSlicedCBFBank({self._params_text()}, n_clients={self._n_clients}, "
            f"capacity={self._cap})"
        )


class DirectLabelBank(BitsetBank):
    """Exact per-client label counts over a small dense label space ``base..base+L-1``.

    Args:
        label_space_size: Number of labels ``L``.
        base: First label of the space (e.g. the application-id prefix).
        max_bytes: Budget of the count matrix (``L * capacity * 4`` bytes).
        initial_capacity: Client slots to allocate up front (rounded up to 64).

    Raises:
        FilterParamsError: If ``label_space_size`` is invalid or the count matrix would
            exceed ``max_bytes`` (here or when growing).
    """

    _count_dtype = np.dtype(np.uint32)

    def __init__(
        self,
        label_space_size: int,
        *,
        base: int = 0,
        max_bytes: int = 2**30,
        initial_capacity: int = WORD_BITS,
    ) -> None:
        self._labels = check_positive_int(label_space_size, "label_space_size")
        self._base = check_label(base, field="base")
        self._max_bytes = int(max_bytes)
        super().__init__(self._labels, initial_capacity)

    @property
    def label_space_size(self) -> int:
        """Number of labels ``L``."""
        return self._labels

    @property
    def counts(self) -> np.ndarray:
        """Read-only view of the ``(L, capacity)`` uint32 count matrix."""
        return read_only(self._counts)

    def fill_ratios(self) -> np.ndarray:
        """Share of the label space present in each client's filter, by client index."""
        return np.count_nonzero(self._counts[:, :self.n_clients], axis=0) / float(self._labels)

    def _check_capacity(self, capacity: int) -> None:
        need = self._labels * capacity * 4
        if need > self._max_bytes:
            raise FilterParamsError(
                f"DirectLabelBank of {self._labels} labels x {capacity} clients needs {need} "
                f"bytes, over the budget of {self._max_bytes}",
                field="capacity",
                value=capacity,
            )

    def _saturation(self) -> int | None:
        return None

    def _row(self, labels: np.ndarray) -> np.ndarray:
        """Row of each label: ``label - base`` (labels below base wrap to huge values)."""
        return labels - np.uint64(self._base)

    def _pair_rows(self, labels: np.ndarray) -> np.ndarray:
        rows = label_rows(labels, self._base, self._labels, error=FilterParamsError)
        return rows.astype(np.int64).reshape(-1, 1)

    def _match_rows(self, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        rel = self._row(labels)
        valid = rel < np.uint64(self._labels)
        if valid.all():
            return rel.astype(np.int64).reshape(-1, 1), None
        rows = np.where(valid, rel, np.uint64(0)).astype(np.int64).reshape(-1, 1)
        return rows, valid

    def add(self, clients: np.ndarray, labels: np.ndarray) -> None:
        """Insert each (client, label) pair once; the capacity grows as needed.

        Raises:
            FilterParamsError: If a label is outside the label space or growing would
                exceed the memory budget (nothing changes).
        """
        self._add_pairs(clients, labels)

    def remove(self, clients: np.ndarray, labels: np.ndarray) -> None:
        """Remove each (client, label) pair once, all or nothing.

        Raises:
            AbsentLabelError: (a ``KeyError``) Naming a pair removed more often than it was
                added (nothing changes).
        """
        self._remove_pairs(clients, labels)

    def contains(self, client: int, label: int) -> bool:
        """Whether ``client`` holds ``label`` (exact)."""
        c = check_client(client)
        value = check_label(label) - self._base
        if c >= self._cap or not 0 <= value < self._labels:
            return False
        return bool(self._counts[value, c] > 0)

    def count(self, client: int, label: int) -> int:
        """How many times the pair is currently held."""
        c = check_client(client)
        value = check_label(label) - self._base
        if c >= self._cap or not 0 <= value < self._labels:
            return 0
        return int(self._counts[value, c])

    def __repr__(self) -> str:
        return (
            f"DirectLabelBank(label_space_size={self._labels}, n_clients={self._n_clients}, "
            f"capacity={self._cap})"
        )
