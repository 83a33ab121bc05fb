"""numba kernels of the core's hot loops; the numpy code beside each caller is the reference.

Imported only when :data:`dls._jit.ENABLED` (numba imports, ``DLS_NO_JIT`` unset). Every
kernel here gives exactly what its numpy reference gives (``tests/dls/test_jit_parity.py``):

* :func:`positions`: MurmurHash3 x64_128 of each label's 8 big-endian bytes and the
  Kirsch–Mitzenmacher positions (:func:`dls.hashing.positions`);
* :func:`bank_add`, :func:`bank_remove`: a bank's counter updates and the bits that flip,
  grouped by blocks of rows and applied one after another instead of sorting the batch's
  increments by counter (:meth:`dls.bitset_bank.BitsetBank._add_pairs`); an update that
  cannot be made (a counter below zero, an exact count past its type) undoes what was done
  and reports it, and the caller lets the reference raise; :func:`bank_add_packed` and
  :func:`bank_remove_packed` do the same on 4-bit counters packed two to a byte;
* :func:`cbf_add`, :func:`cbf_remove`, :func:`cbf_min`: the same for one filter
  (:class:`dls.cbf.CountingBloomFilter`);
* :func:`and_rows`, :func:`row_counts`, :func:`decode_into`: matching's AND of ``k`` bitset
  rows per event, popcounts, and set bits to client indices (:mod:`dls.bitset`).

Integer typing: numba turns a mix of signed and unsigned 64-bit operands into float64, so
every hash step uses uint64 constants, and positions are converted explicitly.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dls._cbfkernels import cbf_add, cbf_min, cbf_remove
from dls._intrinsics import bswap as _bswap
from dls._intrinsics import ctz as _ctz
from dls._intrinsics import popcount as _popcount
from dls._jit import njit
from dls._murmur import _C1, _C2, _F1, _F2, _LEN, _S31, _S33

__all__ = [
    "and_rows",
    "bank_add",
    "bank_add_packed",
    "bank_remove",
    "bank_remove_packed",
    "cbf_add",
    "cbf_min",
    "cbf_remove",
    "decode_into",
    "group_into",
    "positions",
    "row_counts",
    "warm_up",
]


# -- hashing ----------------------------------------------------------------------------
_ONE = np.uint64(1)
_SIX = np.uint64(6)
_LOW6 = np.uint64(63)


@njit
def _fmix64(h: Any) -> Any:
    h ^= h >> _S33
    h *= _F1
    h ^= h >> _S33
    h *= _F2
    h ^= h >> _S33
    return h


@njit
def _murmur(label: Any, seed: Any) -> Any:
    """(h1, h2) of MurmurHash3 x64_128 of one label's 8 big-endian bytes."""
    k1 = _bswap(label)  # the tail's little-endian read of the big-endian bytes
    k1 *= _C1
    k1 = (k1 << _S31) | (k1 >> _S33)
    k1 *= _C2
    h1 = (k1 ^ seed) ^ _LEN
    h2 = seed ^ _LEN
    h1 += h2
    h2 += h1
    h1 = _fmix64(h1)
    h2 = _fmix64(h2)
    h1 += h2
    h2 += h1
    return h1, h2


@njit
def positions(labels: Any, m: Any, k: Any, seed: Any, out: Any) -> None:
    """Kirsch–Mitzenmacher positions of uint64 ``labels`` into int64 ``out`` (n, k)."""
    mm = np.uint64(m)
    s = np.uint64(seed)
    pow2 = (mm & (mm - _ONE)) == 0
    mask = mm - _ONE
    for i in range(labels.shape[0]):
        h1, h2 = _murmur(labels[i], s)
        if pow2:
            a = h1 & mask
            b = h2 & mask
        else:
            a = h1 % mm
            b = h2 % mm
        out[i, 0] = np.int64(a)
        cur = a
        for j in range(1, k):
            cur += b  # both below m <= 2**63: no overflow
            if cur >= mm:
                cur -= mm
            out[i, j] = np.int64(cur)


# -- a bank's counter updates --------------------------------------------------------------
# A batch's counter updates land on random rows of a (rows, capacity) matrix far larger
# than the caches. They are first grouped by blocks of rows (a counting sort on
# row >> shift; a block holds about dls.bitset_bank._BLOCK_BYTES of counters), then applied
# block by block, so that a block's counters and bitset words stay in cache meanwhile. A
# large batch against a position table is sorted by label first, and only its (label,
# hash) entries by block: 7x fewer scattered writes at k = 7 (0.67 -> 0.47 us per
# subscription at d = 3, g = 32, 50,000-subscription batches; packed 4-bit banks now take
# such batches in row order instead, dls._rowkernels). The order inside a block
# changes no result: increments, saturation and decrements commute. The
# common path has no data-dependent branch: the bit of a counter that crosses zero is
# OR-ed (or AND-ed) in whether it changes or not.
_LOW32 = np.int64(0xFFFFFFFF)


@njit
def _grouped(table: Any, idx: Any, cli: Any, shift: Any, n_rows: Any) -> Any:
    """Every update ``(row << 32) | client``, grouped by ``row >> shift``.

    Pair ``i`` updates rows ``table[idx[i], :]`` of client ``cli[i]``. A batch with many
    pairs per table row (a broker's batch against its label -> positions table) is grouped
    through its labels (:func:`_grouped_by_label`), any other one update by update.
    """
    if idx.shape[0] >= 2 * table.shape[0]:
        return _grouped_by_label(table, idx, cli, shift, n_rows)
    return _grouped_by_update(table, idx, cli, shift, n_rows)


@njit
def group_into(idx: Any, cli: Any, n_lab: Any, clients: Any) -> Any:
    """A batch's clients grouped by label into ``clients``; returns ``lab_start``.

    A counting sort: the clients of label ``t`` are ``clients[lab_start[t]:lab_start[t +
    1]]``. ``clients`` has ``idx``'s length and any integer type that holds the client
    slots: a ``uint16`` buffer (slots below 65,536) halves the bytes that a walk reading a
    label's clients once per row of the label goes through (:mod:`dls._rowkernels`).
    """
    n = idx.shape[0]
    lab_start = np.zeros(n_lab + 1, dtype=np.int64)
    for i in range(n):
        lab_start[idx[i] + 1] += 1
    for t in range(n_lab):
        lab_start[t + 1] += lab_start[t]
    fill = lab_start[:-1].copy()
    for i in range(n):
        t = idx[i]
        clients[fill[t]] = cli[i]
        fill[t] += 1
    return lab_start


@njit
def _by_label(table: Any, idx: Any, cli: Any, shift: Any, n_rows: Any) -> Any:
    """A batch's clients sorted by label, and its ``(row, label)`` entries by block.

    Returns ``(entries, lab_start, clients)``: the clients of label ``t`` are
    ``clients[lab_start[t]:lab_start[t + 1]]``, and ``entries`` holds ``(row << 32) | t``
    for every label of the batch and each of its rows, block by block (``row >> shift``),
    label by label inside a block.
    """
    n_lab, r = table.shape
    clients = np.empty(idx.shape[0], dtype=np.int32)
    lab_start = group_into(idx, cli, n_lab, clients)
    n_blocks = (n_rows >> shift) + 1
    start = np.zeros(n_blocks + 1, dtype=np.int64)
    for t in range(n_lab):
        if lab_start[t + 1] > lab_start[t]:
            for j in range(r):
                start[(np.int64(table[t, j]) >> shift) + 1] += 1
    for b in range(n_blocks):
        start[b + 1] += start[b]
    entries = np.empty(start[n_blocks], dtype=np.int64)
    for t in range(n_lab):
        if lab_start[t + 1] > lab_start[t]:
            for j in range(r):
                row = np.int64(table[t, j])
                b = row >> shift
                entries[start[b]] = (row << 32) | t
                start[b] += 1
    return entries, lab_start, clients


@njit
def _grouped_by_label(table: Any, idx: Any, cli: Any, shift: Any, n_rows: Any) -> Any:
    """:func:`_grouped` through the labels (:func:`_by_label`), written out in order.

    The scatter into blocks moves one ``(row, label)`` entry per label and hash (at most
    ``table.size``) instead of one update per pair and hash.
    """
    entries, lab_start, clients = _by_label(table, idx, cli, shift, n_rows)
    out = np.empty(idx.shape[0] * table.shape[1], dtype=np.int64)
    at = 0
    for e in range(entries.shape[0]):
        high = (entries[e] >> 32) << 32
        t = entries[e] & _LOW32
        for q in range(lab_start[t], lab_start[t + 1]):
            out[at] = high | np.int64(clients[q])
            at += 1
    return out


@njit
def _grouped_by_update(table: Any, idx: Any, cli: Any, shift: Any, n_rows: Any) -> Any:
    """:func:`_grouped` update by update (a stable counting sort on ``row >> shift``)."""
    n = idx.shape[0]
    r = table.shape[1]
    n_blocks = (n_rows >> shift) + 1
    start = np.zeros(n_blocks + 1, dtype=np.int64)
    for i in range(n):
        t = idx[i]
        for j in range(r):
            start[(np.int64(table[t, j]) >> shift) + 1] += 1
    for b in range(n_blocks):
        start[b + 1] += start[b]
    out = np.empty(n * r, dtype=np.int64)
    for i in range(n):
        t = idx[i]
        c = cli[i]
        for j in range(r):
            row = np.int64(table[t, j])
            b = row >> shift
            out[start[b]] = (row << 32) | c
            start[b] += 1
    return out


@njit
def bank_add(counts: Any, bits: Any, table: Any, idx: Any, cli: Any, saturating: Any,
             top: Any, shift: Any) -> Any:
    """Increment ``counts[table[idx[i], j], cli[i]]`` for every pair ``i`` and ``j``.

    A counter going 0 -> 1 sets its bit in ``bits``. Saturating counts stop at ``top``;
    exact counts at ``top`` cannot grow: then everything done is undone and a
    non-negative number returned (-1 when all went in).
    """
    updates = _grouped(table, idx, cli, shift, counts.shape[0])
    for t in range(updates.shape[0]):
        u = updates[t]
        p = u >> 32
        c = u & _LOW32
        v = counts[p, c]
        if v >= top:  # rare: no branch to mispredict on the common path
            if saturating:
                continue
            for t2 in range(t):  # exact counts: every increment before happened
                u = updates[t2]
                p = u >> 32
                c = u & _LOW32
                v = counts[p, c]
                counts[p, c] = v - 1
                bits[p, c >> 6] &= ~(np.uint64(v == 1) << (np.uint64(c) & _LOW6))
            return t
        counts[p, c] = v + 1
        bits[p, c >> 6] |= np.uint64(v == 0) << (np.uint64(c) & _LOW6)
    return -1


@njit
def bank_remove(counts: Any, bits: Any, table: Any, idx: Any, cli: Any, saturating: Any,
                top: Any, shift: Any) -> Any:
    """Decrement ``counts[table[idx[i], j], cli[i]]`` for every pair, all or nothing.

    A counter going 1 -> 0 clears its bit; a saturated counter (``top``, saturating counts)
    stays. A counter that would go below zero makes the kernel undo everything and return
    a non-negative number (-1 when all went out).
    """
    updates = _grouped(table, idx, cli, shift, counts.shape[0])
    for t in range(updates.shape[0]):
        u = updates[t]
        p = u >> 32
        c = u & _LOW32
        v = counts[p, c]
        if saturating and v == top:
            continue
        if v == 0:
            for t2 in range(t):  # a saturated counter was skipped and still is
                u = updates[t2]
                p = u >> 32
                c = u & _LOW32
                v = counts[p, c]
                if saturating and v == top:
                    continue
                counts[p, c] = v + 1
                bits[p, c >> 6] |= np.uint64(v == 0) << (np.uint64(c) & _LOW6)
            return t
        counts[p, c] = v - 1
        bits[p, c >> 6] &= ~(np.uint64(v == 1) << (np.uint64(c) & _LOW6))
    return -1


# Packed 4-bit counters: client c's counter of row p is nibble c & 1 of byte (p, c >> 1).


_U1 = np.uint64(1)
_U4 = np.uint64(4)
_U6 = np.uint64(6)
_U15 = np.uint64(15)


@njit
def bank_add_packed(counts: Any, bits: Any, table: Any, idx: Any, cli: Any, saturating: Any,
                    top: Any, shift: Any) -> Any:
    """:func:`bank_add` on packed 4-bit counters, which saturate at ``top`` (always -1).

    Batches that cover most of a position table go in row order instead
    (:func:`dls._rowkernels.bank_add_rows`).
    """
    tp = np.uint64(top)
    updates = _grouped_by_update(table, idx, cli, shift, counts.shape[0])
    for t in range(updates.shape[0]):
        u = np.uint64(updates[t])
        p = u >> np.uint64(32)
        c = u & np.uint64(0xFFFFFFFF)
        h = c >> _U1
        sh = (c & _U1) * _U4
        byte = np.uint64(counts[p, h])
        v = (byte >> sh) & _U15
        if v >= tp:
            continue
        counts[p, h] = byte + (_U1 << sh)
        bits[p, c >> _U6] |= np.uint64(v == 0) << (c & _LOW6)
    return -1


@njit
def _packed_dec(counts: Any, bits: Any, p: Any, c: Any, tp: Any) -> Any:
    """Decrement one packed counter unless saturated; False when it is 0 already."""
    h = c >> _U1
    sh = (c & _U1) * _U4
    byte = np.uint64(counts[p, h])
    v = (byte >> sh) & _U15
    if v == tp:
        return True
    if v == 0:
        return False
    counts[p, h] = byte - (_U1 << sh)
    bits[p, c >> _U6] &= ~(np.uint64(v == 1) << (c & _LOW6))
    return True


@njit
def _packed_undo(counts: Any, bits: Any, p: Any, c: Any, tp: Any) -> None:
    """Undo :func:`_packed_dec` (a saturated counter was skipped and still is)."""
    h = c >> _U1
    sh = (c & _U1) * _U4
    byte = np.uint64(counts[p, h])
    v = (byte >> sh) & _U15
    if v != tp:
        counts[p, h] = byte + (_U1 << sh)
        bits[p, c >> _U6] |= np.uint64(v == 0) << (c & _LOW6)


@njit
def bank_remove_packed(counts: Any, bits: Any, table: Any, idx: Any, cli: Any,
                       saturating: Any, top: Any, shift: Any) -> Any:
    """:func:`bank_remove` on packed 4-bit counters (saturated ones stay), all or nothing.

    A counter that would go below zero undoes every decrement made, in the same order.
    Batches that cover most of a position table go in row order instead
    (:func:`dls._rowkernels.bank_remove_rows`).
    """
    tp = np.uint64(top)
    updates = _grouped_by_update(table, idx, cli, shift, counts.shape[0])
    for t in range(updates.shape[0]):
        u = np.uint64(updates[t])
        if _packed_dec(counts, bits, u >> np.uint64(32), u & np.uint64(0xFFFFFFFF), tp):
            continue
        for t2 in range(t):
            u = np.uint64(updates[t2])
            _packed_undo(counts, bits, u >> np.uint64(32), u & np.uint64(0xFFFFFFFF), tp)
        return t
    return -1


# -- matching ---------------------------------------------------------------------------
@njit
def and_rows(bits: Any, cols: Any, valid: Any, exclude: Any, acc: Any) -> None:
    """``acc[e]`` = the AND of rows ``cols[:, e]`` of ``bits``, less the excluded client.

    ``valid`` (bool, or empty: all valid) zeroes the events that cannot match; ``exclude``
    (int64, or empty: none) names a client per event to clear (ignored when negative or
    beyond the bank).
    """
    k, n_events = cols.shape
    n_words = bits.shape[1]
    width = n_words * 64
    check_valid = valid.shape[0] > 0
    check_exclude = exclude.shape[0] > 0
    for e in range(n_events):
        if check_valid and not valid[e]:
            for w in range(n_words):
                acc[e, w] = 0
            continue
        r = cols[0, e]
        for w in range(n_words):
            acc[e, w] = bits[r, w]
        for j in range(1, k):
            r = cols[j, e]
            for w in range(n_words):
                acc[e, w] &= bits[r, w]
        if check_exclude:
            x = exclude[e]
            if x >= 0 and x < width:
                acc[e, x >> 6] &= ~(_ONE << (np.uint64(x) & _LOW6))


@njit
def row_counts(acc: Any, out: Any) -> None:
    """``out[e]`` = set bits of row ``e`` of the uint64 bitset ``acc``."""
    n_events, n_words = acc.shape
    for e in range(n_events):
        total = 0
        for w in range(n_words):
            total += _popcount(acc[e, w])
        out[e] = total


@njit
def decode_into(acc: Any, offsets: Any, out: Any) -> None:
    """Set-bit indices of row ``e`` of ``acc`` into ``out[offsets[e]:offsets[e + 1]]``."""
    n_events, n_words = acc.shape
    for e in range(n_events):
        at = offsets[e]
        for w in range(n_words):
            x = acc[e, w]
            base = w * 64
            while x != 0:
                out[at] = base + np.int64(_ctz(x))
                at += 1
                x &= x - _ONE


def warm_up() -> None:
    """Call every kernel once on tiny inputs of the types the core passes.

    A kernel is compiled once per type signature (dtypes, dimensions, layout, and whether
    an array is read-only), so these are the signatures a broker's banks and filters use.
    """
    labels = np.arange(4, dtype=np.uint64)
    pos = np.empty((4, 3), dtype=np.int64)
    positions(labels, 64, 3, 0, pos)
    cli = np.arange(4, dtype=np.int64)
    bits = np.zeros((64, 1), dtype=np.uint64)
    table = pos.astype(np.uint32)  # a PositionTable's table: uint32, read-only
    table.flags.writeable = False
    for dtype, saturating, top in ((np.uint8, True, 15), (np.uint32, False, 2**32 - 1)):
        counts = np.zeros((64, 64), dtype=dtype)
        for rows in (pos, table):
            bank_add(counts, bits, rows, cli, cli, saturating, top, 3)
            bank_remove(counts, bits, rows, cli, cli, saturating, top, 3)
    packed = np.zeros((64, 32), dtype=np.uint8)
    for rows in (pos, table):
        bank_add_packed(packed, bits, rows, cli, cli, True, 15, 3)
        bank_remove_packed(packed, bits, rows, cli, cli, True, 15, 3)
    counters = np.zeros(64, dtype=np.uint8)
    cbf_add(counters, pos, 15)
    cbf_min(counters, pos, np.empty(4, dtype=np.uint8))
    cbf_remove(counters, pos, 15)
    acc = np.empty((4, 1), dtype=np.uint64)
    for cols in (np.ascontiguousarray(pos.T), np.ascontiguousarray(table.T)):
        and_rows(bits, cols, np.ones(4, dtype=np.bool_), cli, acc)
        and_rows(bits, cols, np.zeros(0, dtype=np.bool_), np.zeros(0, dtype=np.int64), acc)
    counts_out = np.empty(4, dtype=np.int64)
    row_counts(acc, counts_out)
    acc[:] = 0
    decode_into(acc, np.zeros(5, dtype=np.int64), np.empty(0, dtype=np.int64))
