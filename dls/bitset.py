"""From bitsets of matching clients to CSR client lists, and the threads that decode them.

A batch of ``E`` events matched against a bank is an ``(E, W)`` ``uint64`` bitset: bit ``c``
of row ``e`` says client ``c`` matches event ``e`` (``W`` words of :data:`WORD_BITS`
clients). :func:`decode` turns it into CSR: ``offsets`` (int64, length ``E + 1``) and
``clients`` (int64, ascending within each event), without any per-event Python work.

:func:`row_counts` and :func:`decode_into` are compiled kernels (:mod:`dls._kernels`: a
popcount per word; one trailing-zero count per set bit) unless ``DLS_NO_JIT=1``; the
``*_reference`` functions are the numpy code.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from dls import _jit
from dls.exceptions import FilterInputError

if _jit.ENABLED:
    from dls import _kernels

__all__ = [
    "WORD_BITS",
    "decode",
    "decode_into",
    "decode_into_reference",
    "round_up",
    "row_counts",
    "row_counts_reference",
    "row_offsets",
    "shared_pool",
]

WORD_BITS = 64
"""Clients per bitset word; capacities are multiples of it."""

_LE_U64 = np.dtype("<u8")
_DECODE_BLOCK_BYTES = 2**19
"""Unpacked bytes decoded at a time, so that the unpacked block stays in cache."""


def round_up(n: int) -> int:
    """``n`` rounded up to a multiple of :data:`WORD_BITS`."""
    return -(-n // WORD_BITS) * WORD_BITS


_LANES_16 = np.uint64(0x00FF00FF00FF00FF)
_SUM_LANES = np.uint64(0x0001000100010001)


def row_counts_reference(acc: np.ndarray) -> np.ndarray:
    """Set bits of each row of an (E, W) uint64 bitset, int64 (numpy).

    ``bitwise_count(acc).sum(axis=1)`` reduces along short rows, one row at a time. When
    ``W`` is a multiple of 8 (up to 1,000 words), the per-word counts (bytes, at most
    64) are summed eight at a time in 64-bit words instead: bytes added pairwise into
    16-bit lanes (at most 128 each, at most 16,000 once the ``W // 8`` words of a row are
    added), then the four lanes summed by one multiply (the total, at most ``64 W``,
    fits the top 16 bits): fewer, wider additions than the row-wise sum (the measurement
    is in benchmarks/README.md, the rule in docs/architecture.md#decode-and-match-choices).
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


def _row_counts_compiled(acc: np.ndarray) -> np.ndarray:
    out = np.empty(acc.shape[0], dtype=np.int64)
    _kernels.row_counts(acc, out)
    return out


row_counts = _row_counts_compiled if _jit.ENABLED else row_counts_reference
"""Set bits of each row of an (E, W) uint64 bitset, int64 (compiled unless DLS_NO_JIT=1)."""


def row_offsets(acc: np.ndarray) -> np.ndarray:
    """CSR offsets of an (E, W) uint64 bitset: the running sum of its rows' popcounts."""
    offsets = np.zeros(acc.shape[0] + 1, dtype=np.int64)
    np.cumsum(row_counts(acc), out=offsets[1:])
    return offsets


def decode_into_reference(acc: np.ndarray, offsets: np.ndarray, out: np.ndarray) -> None:
    """Write the set-bit indices of the rows of ``acc`` to ``out[offsets[0]:offsets[-1]]``.

    ``offsets`` (length ``E + 1``) are where each row's indices go in ``out`` (row ``e``
    fills ``out[offsets[e]:offsets[e + 1]]``), e.g. :func:`row_offsets` shifted by the
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
    # block boundaries only: no Python int per event (no tolist() of all the offsets)
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


def _decode_into_compiled(acc: np.ndarray, offsets: np.ndarray, out: np.ndarray) -> None:
    if offsets.shape[0] != acc.shape[0] + 1 or (
            acc.shape[0] and int(offsets[-1]) > out.shape[0]):
        raise FilterInputError(f"offsets of {offsets.shape[0]} rows and an output of "
                               f"{out.shape[0]} do not fit a bitset of {acc.shape[0]} rows",
                               field="offsets", value=offsets.shape[0])
    _kernels.decode_into(acc, offsets, out)


decode_into = _decode_into_compiled if _jit.ENABLED else decode_into_reference
"""Set-bit indices of each row of ``acc`` into ``out[offsets[e]:offsets[e + 1]]``.

Compiled unless DLS_NO_JIT=1; see :func:`decode_into_reference`. ``offsets`` must be the
rows' running popcounts (e.g. :func:`row_offsets`, shifted), which bound the writes.
"""


def decode(acc: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Turn an (E, W) uint64 bitset into CSR (offsets, sorted client indices).

    Counts come from a popcount per row, so the output is allocated once at its final
    size and filled by :func:`decode_into`. Its byte-per-client scan (``flatnonzero``
    of the unpacked bits, one byte per client slot and event) is what matching costs when
    many clients match (docs/architecture.md#decode-and-match-choices).
    """
    offsets = row_offsets(acc)
    clients = np.empty(int(offsets[-1]), dtype=np.int64)
    decode_into(acc, offsets, clients)
    return offsets, clients


_POOLS: dict[tuple[int, int], ThreadPoolExecutor] = {}
_POOLS_LOCK = threading.Lock()


def shared_pool(workers: int) -> ThreadPoolExecutor:
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

