"""Matching a batch of event labels against many client filters at once (DESIGN §4).

A *bank* holds one filter per client (client index ``0..capacity-1``) and answers, for a
batch of ``E`` event labels, which clients' filters contain each label, without any
per-client or per-event Python work. Two implementations share the
:class:`ClientFilterBank` interface:

* :class:`BitSlicedCBFBank`: every client has its own counting Bloom filter with the same
  ``(m, k, seed)``. Counters are a ``uint8`` matrix of shape ``(m, capacity)`` (position
  major, so the 64 clients of one word are contiguous) and ``bits`` is the bit-sliced
  ``(m, capacity // 64)`` ``uint64`` matrix whose bit ``c`` of row ``p`` says
  ``counter[p, c] > 0``. Matching an event is ``k`` row gathers and ANDs.
* :class:`DirectLabelBank`: exact, for small label spaces: a ``(labels, capacity)`` count
  matrix and its ``(labels, capacity // 64)`` bitset; matching is one row gather.

Matches are returned as CSR: ``offsets`` (int64, length ``E + 1``) and ``clients`` (int64,
ascending within each event); the clients of event ``e`` are
``clients[offsets[e]:offsets[e + 1]]``. A bank's ``match_threads`` (default 1) lets a large
batch be matched on several threads, with the same result.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol, runtime_checkable

import numpy as np

from dls.cbf import CountingBloomFilter, check_counter_bits, count_keys, counter_max
from dls.exceptions import FilterParamsError, IncompatibleFiltersError
from dls.hashing import (
    PositionFn,
    PositionTable,
    as_label_array,
    check_k,
    check_label,
    check_m,
    check_seed,
    positions,
)

__all__ = [
    "BitSlicedCBFBank",
    "ClientFilterBank",
    "DirectLabelBank",
    "WORD_BITS",
]

WORD_BITS = 64
"""Clients per bitset word; capacities are multiples of it."""

_LE_U64 = np.dtype("<u8")
_MATCH_CHUNK_BYTES = 64 * 2**20
_DECODE_BLOCK_BYTES = 2**19
# Events per thread below which handing a batch to threads costs more than it saves
# (one hand-off is tens of microseconds; matching an event about a microsecond).
_PARALLEL_MIN_EVENTS = 1024
# Largest position table the CBF bank keeps a transposed copy of for matching.
_COLS_TABLE_MAX_BYTES = 16 * 2**20


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
        """Remove each (client, label) pair once, all or nothing (KeyError if absent)."""
        ...

    match_threads: int
    """Threads :meth:`match` may use on a large batch (1: none)."""

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


def _round_up(n: int) -> int:
    return -(-n // WORD_BITS) * WORD_BITS


def _check_client(client: Any) -> int:
    if not isinstance(client, int | np.integer) or isinstance(client, bool | np.bool_):
        raise TypeError(f"client must be an integer, got {client!r}")
    if int(client) < 0:
        raise ValueError(f"client must be non-negative, got {int(client)}")
    return int(client)


def _check_pairs(clients: Any, labels: Any) -> tuple[np.ndarray, np.ndarray]:
    lab = as_label_array(labels)
    cli = np.asarray(clients)
    if cli.ndim == 0:
        cli = cli.reshape(1)
    if cli.ndim != 1 or (cli.size and cli.dtype.kind not in "iu"):
        raise TypeError(f"clients must be a 1-D integer array, got {cli.dtype} {cli.shape}")
    if cli.shape != lab.shape:
        raise ValueError(
            f"clients and labels must have the same length, got {cli.shape[0]} and {lab.shape[0]}"
        )
    if cli.size and cli.dtype.kind == "u" and int(cli.max()) > np.iinfo(np.int64).max:
        raise ValueError(f"client index too large: {int(cli.max())}")
    cli = cli.astype(np.int64, copy=False)
    if cli.size and int(cli.min()) < 0:
        raise ValueError(f"clients must be non-negative, got {int(cli.min())}")
    return cli, lab


def _check_exclude(exclude: Any, n_events: int) -> np.ndarray | None:
    if exclude is None:
        return None
    ex = np.asarray(exclude)
    if ex.ndim == 0:
        ex = ex.reshape(1)
    if ex.shape != (n_events,) or (ex.size and ex.dtype.kind not in "iu"):
        raise ValueError(
            f"exclude must be an integer array of shape ({n_events},), got {ex.dtype} {ex.shape}"
        )
    return ex.astype(np.int64, copy=False)


_LANES_16 = np.uint64(0x00FF00FF00FF00FF)
_SUM_LANES = np.uint64(0x0001000100010001)


def _row_counts(acc: np.ndarray) -> np.ndarray:
    """Set bits of each row of an (E, W) uint64 bitset, int64.

    ``bitwise_count(acc).sum(axis=1)`` reduces along short rows, one row at a time. When
    ``W`` is a multiple of 8 (up to 1,000 words), the per-word counts (bytes, at most
    64) are summed eight at a time in 64-bit words instead: bytes added pairwise into
    16-bit lanes (at most 128 each, at most 16,000 once the ``W // 8`` words of a row are
    added), then the four lanes summed by one multiply (the total, at most ``64 W``,
    fits the top 16 bits). That is a third of the time.
    """
    counts = np.bitwise_count(acc)
    n_words = acc.shape[1]
    if n_words % 8 or n_words > 1000 or not counts.flags.c_contiguous:
        return counts.sum(axis=1, dtype=np.int64)
    words = counts.view(np.uint64)  # (E, W // 8); byte order does not change a sum
    lanes = words & _LANES_16
    lanes += (words >> np.uint64(8)) & _LANES_16
    total = lanes[:, 0].copy()
    for j in range(1, lanes.shape[1]):  # loop over W // 8 columns, not over events
        total += lanes[:, j]
    total *= _SUM_LANES
    total >>= np.uint64(48)
    return total.astype(np.int64)


def _row_offsets(acc: np.ndarray) -> np.ndarray:
    """CSR offsets of an (E, W) uint64 bitset: the running sum of its rows' popcounts."""
    offsets = np.zeros(acc.shape[0] + 1, dtype=np.int64)
    np.cumsum(_row_counts(acc), out=offsets[1:])
    return offsets


def _decode_into(acc: np.ndarray, offsets: np.ndarray, out: np.ndarray) -> None:
    """Write the set-bit indices of the rows of ``acc`` to ``out[offsets[0]:offsets[-1]]``.

    ``offsets`` (length ``E + 1``) are where each row's indices go in ``out`` (row ``e``
    fills ``out[offsets[e]:offsets[e + 1]]``), e.g. :func:`_row_offsets` shifted by the
    rows before ``acc``. The indices are decoded a block of rows at a time (about
    ``_DECODE_BLOCK_BYTES`` unpacked bytes, so the unpacked block stays in cache): one
    unpack of the block viewed as bool, whose flat non-zero positions are
    ``row * 64W + client``; the client is that position masked (``64W`` a power of two)
    or reduced modulo ``64W``, written straight into ``out``.
    """
    n_events, n_words = acc.shape
    width = n_words * WORD_BITS
    if n_events == 0 or int(offsets[-1]) == int(offsets[0]):
        return
    raw = np.ascontiguousarray(acc, dtype=_LE_U64).view(np.uint8)
    step = max(1, _DECODE_BLOCK_BYTES // width)
    mask = width - 1 if width & (width - 1) == 0 else None
    # block boundaries only (not one Python int per event: tolist() of all the offsets
    # costs about as much as decoding a block)
    starts = list(range(0, n_events, step))
    bounds = offsets[[*starts, n_events]].tolist()
    for i, start in enumerate(starts):  # loop over blocks, not over events or clients
        a, b = bounds[i], bounds[i + 1]
        if a == b:
            continue
        stop = min(start + step, n_events)
        flat = np.flatnonzero(np.unpackbits(raw[start:stop], axis=1,
                                            bitorder="little").view(bool))
        if mask is not None:
            np.bitwise_and(flat, mask, out=out[a:b])
        else:
            np.remainder(flat, width, out=out[a:b])


def _decode(acc: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Turn an (E, W) uint64 bitset into CSR (offsets, sorted client indices).

    Counts come from a popcount per row, so the output is allocated once at its final
    size and filled by :func:`_decode_into`. Its byte-per-client scan (``flatnonzero``
    of the unpacked bits, about 0.5 ns per client slot and event) is what matching costs
    when many clients match.
    """
    offsets = _row_offsets(acc)
    clients = np.empty(int(offsets[-1]), dtype=np.int64)
    _decode_into(acc, offsets, clients)
    return offsets, clients


_POOLS: dict[tuple[int, int], ThreadPoolExecutor] = {}
_POOLS_LOCK = threading.Lock()


def _pool(workers: int) -> ThreadPoolExecutor:
    """A shared pool of ``workers`` threads for this process.

    Keyed by process id too: a pool inherited through ``fork`` has no threads in the
    child and would never run a task.
    """
    key = (os.getpid(), workers)
    with _POOLS_LOCK:
        pool = _POOLS.get(key)
        if pool is None:
            pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="dls-bank")
            _POOLS[key] = pool
        return pool


class _BitsetBank:
    """Common machinery: a (rows, capacity) count matrix and its bit-sliced mirror."""

    _count_dtype: np.dtype[Any]

    def __init__(self, n_rows: int, capacity: int) -> None:
        self._rows = n_rows
        self._cap = 0
        self._n_clients = 0
        self._counts = np.zeros((n_rows, 0), dtype=self._count_dtype)
        self._bits = np.zeros((n_rows, 0), dtype=np.uint64)
        self._threads = 1
        self._grow_to(_round_up(max(capacity, WORD_BITS)))

    # -- to specialise ------------------------------------------------------------
    def _saturation(self) -> int | None:
        """Saturation value of the counts, or None when counts are exact."""
        raise NotImplementedError

    def _pair_rows(self, labels: np.ndarray) -> np.ndarray:
        """Count-matrix rows incremented by each label, int64 (n, r)."""
        raise NotImplementedError

    def _match_rows(self, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """Rows to AND for each event label, and a mask of labels that can match."""
        raise NotImplementedError

    def _match_cols(self, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """:meth:`_match_rows` as a (k, E) int array: one contiguous index vector per hash."""
        rows, valid = self._match_rows(labels)
        return np.ascontiguousarray(rows.T), valid

    def _check_capacity(self, capacity: int) -> None:
        """Raise if ``capacity`` client slots cannot be allocated."""

    # -- capacity -----------------------------------------------------------------
    @property
    def n_clients(self) -> int:
        """One more than the highest client index ever added (0 when empty)."""
        return self._n_clients

    @property
    def capacity(self) -> int:
        """Number of client slots allocated (a multiple of 64)."""
        return self._cap

    def _grow_to(self, capacity: int) -> None:
        self._check_capacity(capacity)
        counts = np.zeros((self._rows, capacity), dtype=self._count_dtype)
        counts[:, : self._cap] = self._counts
        bits = np.zeros((self._rows, capacity // WORD_BITS), dtype=np.uint64)
        bits[:, : self._cap // WORD_BITS] = self._bits
        self._counts, self._bits, self._cap = counts, bits, capacity

    def _ensure_clients(self, n_clients: int) -> None:
        if n_clients > self._cap:
            needed = _round_up(n_clients)
            target = max(needed, 2 * self._cap)
            try:
                self._check_capacity(target)
            except FilterParamsError:
                target = needed
            self._grow_to(target)
        self._n_clients = max(self._n_clients, n_clients)

    def memory_bytes(self) -> int:
        """Bytes held by the count matrix and the bitset."""
        return int(self._counts.nbytes + self._bits.nbytes)

    # -- updates --------------------------------------------------------------------
    def _refresh(self, flat_keys: np.ndarray, old_counts: np.ndarray,
                 new_counts: np.ndarray) -> None:
        """Flip the bitset bits of the counters (sorted unique flat indices) that crossed 0.

        Only counters going 0 -> non-zero or non-zero -> 0 change a bit. Bits of one
        64-client word are OR-reduced together (``reduceat`` over the sorted keys), so each
        touched word is written once, without re-reading its 64 counters.
        """
        flat_bits = self._bits.reshape(-1)
        was, now = old_counts != 0, new_counts != 0
        for keys, setting in ((flat_keys[now & ~was], True), (flat_keys[was & ~now], False)):
            if keys.size == 0:
                continue
            words = keys >> 6  # WORD_BITS == 64
            masks = np.left_shift(np.uint64(1), (keys & 63).astype(np.uint64))
            starts = np.flatnonzero(np.concatenate(([True], words[1:] != words[:-1])))
            merged = np.bitwise_or.reduceat(masks, starts)
            w = words[starts]
            if setting:
                flat_bits[w] |= merged
            else:
                flat_bits[w] &= ~merged

    def _add_pairs(self, clients: Any, labels: Any) -> np.ndarray:
        cli, lab = _check_pairs(clients, labels)
        if cli.size == 0:
            return cli
        rows = self._pair_rows(lab)  # validates labels before anything changes
        self._ensure_clients(int(cli.max()) + 1)
        keys = rows * np.int64(self._cap)
        keys += cli[:, None]
        uniq, inc = count_keys(keys.reshape(-1), self._rows * self._cap)
        flat = self._counts.reshape(-1)
        old = flat[uniq].astype(np.int64)
        new = old + inc
        sat = self._saturation()
        if sat is not None:
            np.minimum(new, sat, out=new)
        else:
            limit = int(np.iinfo(self._count_dtype).max)
            if int(new.max()) > limit:
                raise FilterParamsError(
                    f"a count would exceed {limit}", field="labels", value=int(new.max())
                )
        flat[uniq] = new
        self._refresh(uniq, old, new)
        return cli

    def _remove_pairs(self, clients: Any, labels: Any) -> np.ndarray:
        cli, lab = _check_pairs(clients, labels)
        if cli.size == 0:
            return cli
        rows = self._pair_rows(lab)
        outside = cli >= self._cap
        if outside.any():
            i = int(np.argmax(outside))
            raise KeyError(f"client {int(cli[i])} does not contain label {int(lab[i])}")
        keys = rows * np.int64(self._cap)
        keys += cli[:, None]
        uniq, dec = count_keys(keys.reshape(-1), self._rows * self._cap)
        flat = self._counts.reshape(-1)
        cur = flat[uniq].astype(np.int64)
        sat = self._saturation()
        bad = dec > cur
        if sat is not None:
            bad &= cur < sat
        if bad.any():
            offending = np.isin(keys, uniq[bad]).any(axis=1)
            i = int(np.argmax(offending))
            raise KeyError(f"client {int(cli[i])} does not contain label {int(lab[i])}")
        new = cur - dec
        if sat is not None:
            new[cur == sat] = sat  # a saturated counter stays saturated
        flat[uniq] = new
        self._refresh(uniq, cur, new)
        return cli

    # -- queries --------------------------------------------------------------------
    @property
    def match_threads(self) -> int:
        """Threads :meth:`match` may use on a large batch (1, the default: no threads)."""
        return self._threads

    @match_threads.setter
    def match_threads(self, value: int) -> None:
        if (not isinstance(value, int | np.integer) or isinstance(value, bool | np.bool_)
                or int(value) < 1):
            raise ValueError(f"match_threads must be a positive integer, got {value!r}")
        self._threads = int(value)

    def match(
        self, labels: np.ndarray, exclude: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Clients whose filter contains each event label, as CSR.

        With :attr:`match_threads` above 1, a batch of at least that many times
        ``_PARALLEL_MIN_EVENTS`` events is split into contiguous parts matched on that
        many threads (numpy releases the GIL in the gathers and the decode); the result
        is the same.

        Args:
            labels: ``E`` event labels (uint64).
            exclude: Optional int64 array of shape ``(E,)``: a client not to return for
                each event (the publisher), or -1 for none.

        Returns:
            ``(offsets, clients)``: int64 arrays of lengths ``E + 1`` and
            ``offsets[-1]``; clients ascending within each event.
        """
        lab = as_label_array(labels)
        n_events = lab.shape[0]
        ex = _check_exclude(exclude, n_events)
        words = self._cap // WORD_BITS
        # bounded memory: the bitset of a chunk and its gather buffer (8 bytes a word)
        chunk = max(1, _MATCH_CHUNK_BYTES // max(1, 16 * words))
        parts = min(self.match_threads, n_events // _PARALLEL_MIN_EVENTS)
        if n_events <= chunk:
            if parts > 1:
                return self._match_parallel(lab, ex, parts)
            return self._match_chunk(lab, ex)
        parts_off: list[np.ndarray] = []
        parts_cli: list[np.ndarray] = []
        base = 0
        for start in range(0, n_events, chunk):  # bounded memory; loop over chunks only
            stop = min(start + chunk, n_events)
            sub_ex = None if ex is None else ex[start:stop]
            sub_parts = min(parts, (stop - start) // _PARALLEL_MIN_EVENTS)
            off, cli = (self._match_parallel(lab[start:stop], sub_ex, sub_parts)
                        if sub_parts > 1 else self._match_chunk(lab[start:stop], sub_ex))
            parts_off.append(off[1:] + base)
            parts_cli.append(cli)
            base += int(off[-1])
        offsets = np.concatenate([np.zeros(1, dtype=np.int64), *parts_off])
        return offsets, np.concatenate(parts_cli)

    def _accumulate(self, labels: np.ndarray, exclude: np.ndarray | None) -> np.ndarray:
        """The (E, W) uint64 bitset of the clients matching each label (AND of its rows)."""
        cols, valid = self._match_cols(labels)
        acc = np.take(self._bits, cols[0], axis=0)
        if len(cols) > 1:
            tmp = np.empty_like(acc)
            for j in range(1, len(cols)):  # loop over k, not over events or clients
                np.take(self._bits, cols[j], axis=0, out=tmp)
                acc &= tmp
        if valid is not None:
            acc[~valid] = 0
        if exclude is not None:
            ev = np.flatnonzero((exclude >= 0) & (exclude < self._cap))
            who = exclude[ev]
            acc[ev, who // WORD_BITS] &= ~(np.uint64(1) << (who % WORD_BITS).astype(np.uint64))
        return acc

    def _match_chunk(
        self, labels: np.ndarray, exclude: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray]:
        return _decode(self._accumulate(labels, exclude))

    def _match_parallel(
        self, labels: np.ndarray, exclude: np.ndarray | None, parts: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`_match_chunk` on ``parts`` threads, each on a contiguous slice of events.

        Two rounds, so that no part's clients are copied twice: each thread gathers its
        slice's bitset and row counts; the offsets of the whole batch follow; then each
        thread decodes its bitset straight into its range of the one output array.
        """
        n_events = labels.shape[0]
        edges = [n_events * i // parts for i in range(parts + 1)]
        pool = _pool(parts - 1)  # the calling thread takes the first part itself

        def gather(i: int) -> tuple[np.ndarray, np.ndarray]:
            a, b = edges[i], edges[i + 1]
            acc = self._accumulate(labels[a:b], None if exclude is None else exclude[a:b])
            return acc, _row_counts(acc)

        others = [pool.submit(gather, i) for i in range(1, parts)]
        accs = [gather(0), *(f.result() for f in others)]
        offsets = np.zeros(n_events + 1, dtype=np.int64)
        np.cumsum(np.concatenate([c for _, c in accs]), out=offsets[1:])
        clients = np.empty(int(offsets[-1]), dtype=np.int64)

        def decode(i: int) -> None:
            _decode_into(accs[i][0], offsets[edges[i]:edges[i + 1] + 1], clients)

        done = [pool.submit(decode, i) for i in range(1, parts)]
        decode(0)
        for f in done:
            f.result()
        return offsets, clients


class BitSlicedCBFBank(_BitsetBank):
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
        # A precomputed position table, transposed to (k, labels): matching then gathers
        # each hash's positions as one contiguous vector, without the (E, k) int64 rows
        # and their transpose (a few percent of matching a batch). Small tables only.
        table = (position_fn if isinstance(position_fn, PositionTable)
                 else getattr(position_fn, "__self__", None))  # a table or its lookup
        self._cols_table: np.ndarray | None = None
        self._cols_base = 0
        if (isinstance(table, PositionTable) and table.k == self._k
                and table.table.nbytes <= _COLS_TABLE_MAX_BYTES):
            self._cols_table = np.ascontiguousarray(table.table.T)
            self._cols_base = table.base
        self._items = np.zeros(0, dtype=np.int64)
        super().__init__(self._m, initial_capacity)

    @property
    def m(self) -> int:
        """Counters per client filter."""
        return self._m

    @property
    def k(self) -> int:
        """Hash functions."""
        return self._k

    @property
    def counter_bits(self) -> int:
        """Counter width in bits."""
        return self._counter_bits

    @property
    def seed(self) -> int:
        """MurmurHash3 seed."""
        return self._seed

    @property
    def counters(self) -> np.ndarray:
        """Read-only view of the ``(m, capacity)`` uint8 counter matrix."""
        view = self._counts.view()
        view.flags.writeable = False
        return view

    @property
    def bits(self) -> np.ndarray:
        """Read-only view of the ``(m, capacity // 64)`` uint64 bit-sliced matrix."""
        view = self._bits.view()
        view.flags.writeable = False
        return view

    def _saturation(self) -> int | None:
        return self._max

    def _positions(self, labels: np.ndarray) -> np.ndarray:
        if self._position_fn is None:
            return positions(labels, self._m, self._k, self._seed)
        out = np.asarray(self._position_fn(labels))
        if out.shape != (labels.shape[0], self._k):
            raise ValueError(
                f"position_fn returned shape {out.shape}, expected {(labels.shape[0], self._k)}"
            )
        return out.astype(np.int64, copy=False)

    def _pair_rows(self, labels: np.ndarray) -> np.ndarray:
        return self._positions(labels)

    def _match_rows(self, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        return self._positions(labels), None

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
            KeyError: Naming a pair whose client filter definitely does not contain the
                label (nothing changes).
        """
        cli = self._remove_pairs(clients, labels)
        if cli.size:
            self._items -= np.bincount(cli, minlength=self._cap)

    def contains(self, client: int, label: int) -> bool:
        """Whether ``client``'s filter (possibly) contains ``label``."""
        c = _check_client(client)
        value = check_label(label)
        if c >= self._cap:
            return False
        pos = self._positions(np.array([value], dtype=np.uint64))[0]
        return bool(self._counts[pos, c].min() > 0)

    def memory_bytes(self) -> int:
        """Bytes held by the bank's arrays.

        The counter matrix, the bitset, the per-client item counts and the transposed copy
        of a position table (not the position function's own table).
        """
        extra = 0 if self._cols_table is None else int(self._cols_table.nbytes)
        return super().memory_bytes() + int(self._items.nbytes) + extra

    def client_filter(self, client: int) -> CountingBloomFilter:
        """Return a standalone copy of ``client``'s filter (same parameters)."""
        c = _check_client(client)
        if c >= self._cap:
            return CountingBloomFilter.with_params(
                self._m,
                self._k,
                counter_bits=self._counter_bits,
                seed=self._seed,
                position_fn=self._position_fn,
            )
        return CountingBloomFilter.from_counters(
            self._counts[:, c],
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
        c = _check_client(client)
        if not isinstance(cbf, CountingBloomFilter):
            raise TypeError(f"expected a CountingBloomFilter, got {type(cbf).__name__}")
        mine = (self._m, self._k, self._counter_bits, self._seed)
        theirs = (cbf.m, cbf.k, cbf.counter_bits, cbf.seed)
        if mine != theirs:
            raise IncompatibleFiltersError(
                f"cannot load a filter with parameters {cbf.params} into a bank with "
                f"(m={self._m}, k={self._k}, counter_bits={self._counter_bits}, "
                f"seed={self._seed})",
                field="params",
                value=(mine, theirs),
            )
        self._ensure_clients(c + 1)
        self._counts[:, c] = cbf.counters
        self._items[c] = cbf.n_items
        rows = np.arange(self._m, dtype=np.int64)
        self._bits[:, c // WORD_BITS] &= ~(np.uint64(1) << np.uint64(c % WORD_BITS))
        self._refresh(rows * self._cap + c, np.zeros(self._m, dtype=np.int64),
                      self._counts[:, c].astype(np.int64))

    def __repr__(self) -> str:
        return (
            f"BitSlicedCBFBank(m={self._m}, k={self._k}, counter_bits={self._counter_bits}, "
            f"seed={self._seed}, n_clients={self._n_clients}, capacity={self._cap})"
        )


class DirectLabelBank(_BitsetBank):
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
        if (
            not isinstance(label_space_size, int | np.integer)
            or isinstance(label_space_size, bool | np.bool_)
            or int(label_space_size) <= 0
        ):
            raise FilterParamsError(
                f"label_space_size must be a positive integer, got {label_space_size!r}",
                field="label_space_size",
                value=label_space_size,
            )
        self._labels = int(label_space_size)
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
        view = self._counts.view()
        view.flags.writeable = False
        return view

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
        rows = self._row(labels)
        if rows.size and int(rows.max()) >= self._labels:
            bad = int(labels[int(np.argmax(rows))])
            raise FilterParamsError(
                f"label {bad} is outside the label space "
                f"{self._base}..{self._base + self._labels - 1}",
                field="labels",
                value=bad,
            )
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
            KeyError: Naming a pair removed more often than it was added (nothing changes).
        """
        self._remove_pairs(clients, labels)

    def contains(self, client: int, label: int) -> bool:
        """Whether ``client`` holds ``label`` (exact)."""
        c = _check_client(client)
        value = check_label(label) - self._base
        if c >= self._cap or not 0 <= value < self._labels:
            return False
        return bool(self._counts[value, c] > 0)

    def count(self, client: int, label: int) -> int:
        """How many times the pair is currently held."""
        c = _check_client(client)
        value = check_label(label) - self._base
        if c >= self._cap or not 0 <= value < self._labels:
            return 0
        return int(self._counts[value, c])

    def __repr__(self) -> str:
        return (
            f"DirectLabelBank(label_space_size={self._labels}, n_clients={self._n_clients}, "
            f"capacity={self._cap})"
        )
