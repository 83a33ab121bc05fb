"""A bank of client filters as a count matrix and its bit-sliced mirror.

:class:`BitsetBank` is what both banks of :mod:`dls.bank` are: a ``(rows, capacity)``
count matrix (one column per client) and beside it the ``(rows, capacity // 64)``
``uint64`` bitset whose bit ``c`` of row ``r`` says ``count[r, c] > 0``. It adds and removes
(client, label) pairs and matches a batch of event labels; a subclass says which rows a
label touches (:meth:`BitsetBank._pair_rows`, :meth:`BitsetBank._match_rows`) and whether
counts saturate.

Updates and the AND of matching are compiled kernels (:mod:`dls._kernels`) unless
``DLS_NO_JIT=1``: an update walks its pairs once, touching each counter and flipping a bit
when the counter crosses zero; the ``*_reference`` methods are the numpy code, which sorts
the batch's counter keys and writes each touched counter and bitset word once.

A bank of 4-bit counters keeps two of them in a byte (:attr:`BitsetBank._packed`): client
``c``'s counter of row ``r`` is the low nibble of byte ``(r, c // 2)`` for an even ``c``,
the high one for an odd ``c``. That halves the count matrix, the largest part of a
broker's memory, and the memory an update walks through.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dls import _jit
from dls.bitset import WORD_BITS, decode, decode_into, round_up, row_counts, shared_pool
from dls.counting import AbsentLabelError, FilterInputError, FilterTypeError, count_keys
from dls.exceptions import FilterParamsError
from dls.hashing import as_label_array

if _jit.ENABLED:
    from dls import _kernels, _rowkernels

__all__ = ["BitsetBank", "check_client", "check_exclude", "check_pairs"]

_MATCH_CHUNK_BYTES = 64 * 2**20
"""Bitset bytes of one chunk of a batch: a larger batch is matched a chunk at a time."""

_BLOCK_BYTES = 64 * 2**10
"""Counters of one block of rows that a compiled update applies its updates to at a time
(grouped first, so that the block stays in cache; 64 KiB was fastest at 1,024 clients)."""

_PACKED_BLOCK_BYTES = 2**20
"""The same for packed 4-bit counters (1 MiB was fastest at 1,024 clients, d = 3 and 4, on a
machine with 1 MiB of L2 per core). Batches that cover most of a position table are not
grouped: they go in row order (dls._rowkernels)."""

_NO_VALID = np.zeros(0, dtype=np.bool_)
_NO_EXCLUDE = np.zeros(0, dtype=np.int64)

_PARALLEL_MIN_EVENTS = 1024
"""Events per thread below which a batch is not handed to threads: handing a part to a
thread must cost less than matching it (docs/architecture.md#decode-and-match-choices)."""


def check_client(client: Any) -> int:
    """Validate one client index (a non-negative integer, bools refused) and return it.

    Raises:
        FilterTypeError: If ``client`` is not an integer (a ``TypeError`` too).
        FilterInputError: If it is negative (a ``ValueError`` too).
    """
    if not isinstance(client, int | np.integer) or isinstance(client, bool | np.bool_):
        raise FilterTypeError(f"client must be an integer, got {client!r}", field="client",
                              value=client)
    if int(client) < 0:
        raise FilterInputError(f"client must be non-negative, got {int(client)}",
                               field="client", value=int(client))
    return int(client)


def check_pairs(clients: Any, labels: Any) -> tuple[np.ndarray, np.ndarray]:
    """Validate (client, label) pairs: int64 clients and uint64 labels of one length.

    Raises:
        FilterTypeError: If ``clients`` is not a 1-D integer array (a ``TypeError`` too).
        FilterInputError: If the lengths differ or a client is negative or too large (a
            ``ValueError`` too); labels are checked by :func:`dls.hashing.as_label_array`.
    """
    lab = as_label_array(labels)
    cli = np.asarray(clients)
    if cli.ndim == 0:
        cli = cli.reshape(1)
    if cli.ndim != 1 or (cli.size and cli.dtype.kind not in "iu"):
        raise FilterTypeError(
            f"clients must be a 1-D integer array, got {cli.dtype} {cli.shape}",
            field="clients", value=(str(cli.dtype), cli.shape))
    if cli.shape != lab.shape:
        raise FilterInputError(
            f"clients and labels must have the same length, got {cli.shape[0]} and {lab.shape[0]}",
            field="clients", value=(cli.shape[0], lab.shape[0]))
    if cli.size and cli.dtype.kind == "u" and int(cli.max()) > np.iinfo(np.int64).max:
        raise FilterInputError(f"client index too large: {int(cli.max())}", field="clients",
                               value=int(cli.max()))
    cli = cli.astype(np.int64, copy=False)
    if cli.size and int(cli.min()) < 0:
        raise FilterInputError(f"clients must be non-negative, got {int(cli.min())}",
                               field="clients", value=int(cli.min()))
    return cli, lab


def check_exclude(exclude: Any, n_events: int) -> np.ndarray | None:
    """Validate a match's ``exclude`` (None, or an integer array of shape ``(n_events,)``).

    Raises:
        FilterInputError: If it has another shape or is not integer (a ``ValueError`` too).
    """
    if exclude is None:
        return None
    ex = np.asarray(exclude)
    if ex.ndim == 0:
        ex = ex.reshape(1)
    if ex.shape != (n_events,) or (ex.size and ex.dtype.kind not in "iu"):
        raise FilterInputError(
            f"exclude must be an integer array of shape ({n_events},), got {ex.dtype} {ex.shape}",
            field="exclude", value=(str(ex.dtype), ex.shape))
    return ex.astype(np.int64, copy=False)


def _absent(client: int, label: int) -> AbsentLabelError:
    return AbsentLabelError(f"client {client} does not contain label {label}", field="label",
                            value=(client, label))


def _threads_value(value: Any, field: str) -> int:
    """A thread count (a positive integer, not a bool), or a FilterParamsError naming it."""
    if (not isinstance(value, int | np.integer) or isinstance(value, bool | np.bool_)
            or int(value) < 1):
        raise FilterParamsError(f"{field} must be a positive integer, got {value!r}",
                                field=field, value=value)
    return int(value)


class BitsetBank:
    """A (rows, capacity) count matrix and its bit-sliced mirror: updates and matching."""

    _count_dtype: np.dtype[Any]
    _packed = False
    """Two 4-bit counters per byte (the count matrix is ``(rows, capacity // 2)``)."""

    def __init__(self, n_rows: int, capacity: int) -> None:
        self._rows = n_rows
        self._cap = 0
        self._n_clients = 0
        self._counts = np.zeros((n_rows, 0), dtype=self._count_dtype)
        self._bits = np.zeros((n_rows, 0), dtype=np.uint64)
        self._threads = 1
        self._update_threads = 1
        self._grow_to(round_up(max(capacity, WORD_BITS)))

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

    def _pair_source(self, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(table, idx)``: label ``i`` touches rows ``table[idx[i], :]`` (validated).

        :meth:`_pair_rows` and an identity index by default; a bank with a precomputed
        position table gives the table itself, and no (n, k) array is built.
        """
        rows = self._pair_rows(labels)
        return rows, np.arange(rows.shape[0], dtype=np.int64)

    def _pair_inverse(self, table: np.ndarray, idx: np.ndarray
                      ) -> tuple[np.ndarray, np.ndarray] | None:
        """``table``'s row -> labels inverse, when a packed batch ``idx`` should use it.

        None (the default): the update kernels sort the batch's entries themselves. A bank
        with a position table returns the table's inverse for a batch that touches most
        of the table (:mod:`dls._rowkernels`).
        """
        return None

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
        cols = capacity // 2 if self._packed else capacity
        counts = np.zeros((self._rows, cols), dtype=self._count_dtype)
        counts[:, : self._counts.shape[1]] = self._counts
        bits = np.zeros((self._rows, capacity // WORD_BITS), dtype=np.uint64)
        bits[:, : self._cap // WORD_BITS] = self._bits
        self._counts, self._bits, self._cap = counts, bits, capacity

    def _ensure_clients(self, n_clients: int) -> None:
        if n_clients > self._cap:
            needed = round_up(n_clients)
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
    def _read_flat(self, keys: np.ndarray) -> np.ndarray:
        """Counters at flat keys ``row * capacity + client`` (int64)."""
        flat = self._counts.reshape(-1)
        if not self._packed:
            return flat[keys].astype(np.int64)
        return (flat[keys >> 1].astype(np.int64) >> ((keys & 1) << 2)) & 15

    def _write_flat(self, keys: np.ndarray, old: np.ndarray, new: np.ndarray) -> None:
        """Set the counters at sorted unique flat keys from ``old`` to ``new``."""
        flat = self._counts.reshape(-1)
        if not self._packed:
            flat[keys] = new
            return
        # Both nibbles of a byte may change: their shifted differences are summed per
        # byte (adjacent, the keys being sorted) and each byte written once.
        byte = keys >> 1
        delta = (new - old) << ((keys & 1) << 2)
        starts = np.flatnonzero(np.concatenate(([True], byte[1:] != byte[:-1])))
        b = byte[starts]
        flat[b] = (flat[b].astype(np.int64) + np.add.reduceat(delta, starts)).astype(np.uint8)

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

    def _add_pairs_reference(self, clients: Any, labels: Any) -> np.ndarray:
        cli, lab = check_pairs(clients, labels)
        if cli.size == 0:
            return cli
        rows = self._pair_rows(lab)  # validates labels before anything changes
        self._ensure_clients(int(cli.max()) + 1)
        keys = rows * np.int64(self._cap)
        keys += cli[:, None]
        uniq, inc = count_keys(keys.reshape(-1), self._rows * self._cap)
        old = self._read_flat(uniq)
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
        self._write_flat(uniq, old, new)
        self._refresh(uniq, old, new)
        return cli

    def _remove_pairs_reference(self, clients: Any, labels: Any) -> np.ndarray:
        cli, lab = check_pairs(clients, labels)
        if cli.size == 0:
            return cli
        rows = self._pair_rows(lab)
        outside = cli >= self._cap
        if outside.any():
            i = int(np.argmax(outside))
            raise _absent(int(cli[i]), int(lab[i]))
        keys = rows * np.int64(self._cap)
        keys += cli[:, None]
        uniq, dec = count_keys(keys.reshape(-1), self._rows * self._cap)
        cur = self._read_flat(uniq)
        sat = self._saturation()
        bad = dec > cur
        if sat is not None:
            bad &= cur < sat
        if bad.any():
            offending = np.isin(keys, uniq[bad]).any(axis=1)
            i = int(np.argmax(offending))
            raise _absent(int(cli[i]), int(lab[i]))
        new = cur - dec
        if sat is not None:
            new[cur == sat] = sat  # a saturated counter stays saturated
        self._write_flat(uniq, cur, new)
        self._refresh(uniq, cur, new)
        return cli

    def _kernel_args(self) -> tuple[bool, int, int]:
        """(saturating, top, shift) for the update kernels.

        ``top`` is the saturation or the count type's maximum; ``shift`` groups rows into
        blocks of about :data:`_BLOCK_BYTES` of counters.
        """
        sat = self._saturation()
        row_bytes = max(1, self._counts.shape[1] * self._count_dtype.itemsize)
        block = _PACKED_BLOCK_BYTES if self._packed else _BLOCK_BYTES
        shift = max(0, (block // row_bytes).bit_length() - 1)
        if sat is not None:
            return True, sat, shift
        return False, int(np.iinfo(self._count_dtype).max), shift

    def _add_pairs_compiled(self, clients: Any, labels: Any) -> np.ndarray:
        cli, lab = check_pairs(clients, labels)
        if cli.size == 0:
            return cli
        table, idx = self._pair_source(lab)  # validates labels before anything changes
        self._ensure_clients(int(cli.max()) + 1)
        saturating, top, shift = self._kernel_args()
        inv = self._pair_inverse(table, idx) if self._packed else None
        if inv is not None:  # packed counters saturate: nothing can fail
            self._rows_update(inv, table.shape[0], idx, cli, top, remove=False)
            return cli
        add = _kernels.bank_add_packed if self._packed else _kernels.bank_add
        if add(self._counts, self._bits, table, idx, cli, saturating, top, shift) >= 0:
            return self._add_pairs_reference(clients, labels)  # undone: the reference raises
        return cli

    def _remove_pairs_compiled(self, clients: Any, labels: Any) -> np.ndarray:
        cli, lab = check_pairs(clients, labels)
        if cli.size == 0:
            return cli
        table, idx = self._pair_source(lab)
        if int(cli.max()) >= self._cap:
            return self._remove_pairs_reference(clients, labels)  # it names the pair
        saturating, top, shift = self._kernel_args()
        inv = self._pair_inverse(table, idx) if self._packed else None
        if inv is not None:
            if not self._rows_update(inv, table.shape[0], idx, cli, top, remove=True):
                return self._remove_pairs_reference(clients, labels)  # undone: it raises
            return cli
        remove = _kernels.bank_remove_packed if self._packed else _kernels.bank_remove
        if remove(self._counts, self._bits, table, idx, cli, saturating, top, shift) >= 0:
            return self._remove_pairs_reference(clients, labels)  # undone: the reference raises
        return cli

    def _rows_update(self, inv: tuple[np.ndarray, np.ndarray], n_lab: int, idx: np.ndarray,
                     cli: np.ndarray, top: int, *, remove: bool) -> bool:
        """A packed batch in row order (:mod:`dls._rowkernels`); False: a remove was refused.

        With :attr:`update_threads` above 1 the rows are split into that many ranges of
        about equal entries, one per thread (disjoint parts of the matrix). A refused remove
        leaves nothing changed: the range that met the zero counter undoes itself, and
        the ranges that went out whole are added back.
        """
        rstart, rlabs = inv
        parts = self._update_threads
        clients = np.empty(idx.shape[0], dtype=np.uint16 if self._cap <= 1 << 16 else np.int32)
        if parts == 1:
            fn = _rowkernels.bank_remove_rows if remove else _rowkernels.bank_add_rows
            return bool(fn(self._counts, self._bits, rstart, rlabs, n_lab, idx, cli, top,
                           clients) < 0)
        lab_start = _rowkernels.group_into(idx, cli, n_lab, clients)
        cut = np.searchsorted(rstart, [rlabs.shape[0] * i // parts for i in range(parts + 1)])
        edges = [0, *np.minimum(cut[1:-1], rstart.shape[0] - 1).tolist(), rstart.shape[0] - 1]
        kernel = _rowkernels.remove_row_range if remove else _rowkernels.add_row_range

        def part(i: int) -> Any:
            return kernel(self._counts, self._bits, rstart, rlabs, lab_start, clients,
                          edges[i], edges[i + 1], top)

        pool = shared_pool(parts - 1)  # the calling thread takes the first range itself
        others = [pool.submit(part, i) for i in range(1, parts)]
        results = [part(0), *(f.result() for f in others)]
        if not remove or all(r < 0 for r in results):
            return True
        for i, r in enumerate(results):
            if r < 0:  # went out whole: put it back
                _rowkernels.add_row_range(self._counts, self._bits, rstart, rlabs, lab_start,
                                          clients, edges[i], edges[i + 1], top)
        return False

    _add_pairs = _add_pairs_compiled if _jit.ENABLED else _add_pairs_reference
    _remove_pairs = _remove_pairs_compiled if _jit.ENABLED else _remove_pairs_reference

    # -- queries --------------------------------------------------------------------
    @property
    def match_threads(self) -> int:
        """Threads :meth:`match` may use on a large batch (1, the default: no threads)."""
        return self._threads

    @match_threads.setter
    def match_threads(self, value: int) -> None:
        self._threads = _threads_value(value, "match_threads")

    @property
    def update_threads(self) -> int:
        """Threads a large packed batch's counter updates may run on (1, the default).

        The result is the same; only worth it with a core to spare.
        """
        return self._update_threads

    @update_threads.setter
    def update_threads(self, value: int) -> None:
        self._update_threads = _threads_value(value, "update_threads")

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
        ex = check_exclude(exclude, n_events)
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

    def _accumulate_reference(self, labels: np.ndarray, exclude: np.ndarray | None
                              ) -> np.ndarray:
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

    def _accumulate_compiled(self, labels: np.ndarray, exclude: np.ndarray | None
                             ) -> np.ndarray:
        cols, valid = self._match_cols(labels)
        acc = np.empty((labels.shape[0], self._bits.shape[1]), dtype=np.uint64)
        _kernels.and_rows(self._bits, cols, _NO_VALID if valid is None else valid,
                          _NO_EXCLUDE if exclude is None else exclude, acc)
        return acc

    _accumulate = _accumulate_compiled if _jit.ENABLED else _accumulate_reference

    def _match_chunk(
        self, labels: np.ndarray, exclude: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray]:
        return decode(self._accumulate(labels, exclude))

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
        pool = shared_pool(parts - 1)  # the calling thread takes the first part itself

        def gather(i: int) -> tuple[np.ndarray, np.ndarray]:
            a, b = edges[i], edges[i + 1]
            acc = self._accumulate(labels[a:b], None if exclude is None else exclude[a:b])
            return acc, row_counts(acc)

        others = [pool.submit(gather, i) for i in range(1, parts)]
        accs = [gather(0), *(f.result() for f in others)]
        offsets = np.zeros(n_events + 1, dtype=np.int64)
        np.cumsum(np.concatenate([c for _, c in accs]), out=offsets[1:])
        clients = np.empty(int(offsets[-1]), dtype=np.int64)

        def decode_part(i: int) -> None:
            decode_into(accs[i][0], offsets[edges[i]:edges[i + 1] + 1], clients)

        done = [pool.submit(decode_part, i) for i in range(1, parts)]
        decode_part(0)
        for f in done:
            f.result()
        return offsets, clients

