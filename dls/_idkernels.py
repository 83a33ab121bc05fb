r"""numba kernels of :class:`dls.ids.HashIdIndex`, a compact table of string ids.

Imported only when :data:`dls._jit.ENABLED`; the reference path keeps ids in a dict
(:class:`dls.ids.DictIdIndex`), and ``tests/dls/test_ids.py`` holds the two to the same
answers.

The ids' bytes live in one arena, id ``seq`` at ``arena[off[seq]:off[seq + 1]]``. The table
is an open-addressing (linear probing) array of ``2**w``-bit entries, ``w`` 32 or 64: the low
``s`` bits hold ``seq + 1`` (0: an empty slot, all ones: a tombstone), the bits above a tag
of the id's hash. A probe compares the arena's bytes only when the tags agree, so a hash
collision costs a comparison, never a wrong answer. The home slot of an id is
``(h mod 2**32) * cap >> 32`` (any capacity) and its tag the next bits of its 64-bit hash.

Ids are given as a byte buffer and ``starts`` (``n + 1`` entries): id ``i`` is
``buf[starts[i]:starts[i + 1] - sep]``, ``sep`` 1 when the ids are separated by a NUL byte
(``"\0".join(ids)``), 0 when they are back to back.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dls._jit import njit
from dls._kernels import _fmix64 as _fmix
from dls._murmur import _C1, _C2, _S31, _S33

__all__ = [
    "copy_rows",
    "id_codes",
    "id_discard",
    "id_equal",
    "id_gather",
    "id_insert",
    "id_live",
    "id_rebuild",
    "id_remap",
    "id_stage",
    "sep_starts",
    "warm_up",
]

_M32 = np.uint64(0xFFFFFFFF)
_ONE = np.uint64(1)
_EIGHT = np.uint64(8)
_R27 = np.uint64(27)
_R37 = np.uint64(37)
_FIVE = np.uint64(5)
_N1 = np.uint64(0x52DCE729)
_THIRTY2 = np.uint64(32)
_LOW6 = np.uint64(63)


@njit
def _mix(k: Any) -> Any:
    k *= _C1
    k = (k << _S31) | (k >> _S33)
    return k * _C2


@njit
def id_hash(buf: Any, a: Any, b: Any, seed: Any) -> Any:
    """A 64-bit hash of ``buf[a:b]`` (MurmurHash3's mixing, 8 bytes at a time).

    Ids of up to 8 bytes and one length go through the finaliser alone, a bijection: two
    of them never share a hash.
    """
    h = seed ^ (np.uint64(b - a) * _C2)
    i = a
    while i + 8 <= b:
        k = np.uint64(0)
        for j in range(8):
            k |= np.uint64(buf[i + j]) << (_EIGHT * np.uint64(j))
        h ^= _mix(k)
        h = ((h << _R27) | (h >> _R37)) * _FIVE + _N1
        i += 8
    if i < b:  # the last 1 to 7 bytes: the finaliser mixes them (a bijection)
        k = np.uint64(0)
        for j in range(b - i):
            k |= np.uint64(buf[i + j]) << (_EIGHT * np.uint64(j))
        h ^= k
    return _fmix(h)


@njit
def _same(arena: Any, s: Any, e: Any, buf: Any, a: Any, b: Any) -> Any:
    if e - s != b - a:
        return False
    for t in range(b - a):
        if arena[s + t] != buf[a + t]:
            return False
    return True


@njit
def sep_starts(buf: Any, n: Any, starts: Any) -> None:
    """``starts`` of ``n`` ids separated by NUL bytes in ``buf`` (the caller counted them)."""
    starts[0] = 0
    at = 1
    for p in range(buf.shape[0]):
        if buf[p] == 0:
            starts[at] = p + 1
            at += 1
    starts[n] = buf.shape[0] + 1


@njit
def id_stage(buf: Any, starts: Any, sep: Any, arena: Any, at: Any, off: Any,
             first: Any) -> Any:
    """Copy the ids of ``buf`` into ``arena`` from ``at`` as seqs ``first...``; new end."""
    n = starts.shape[0] - 1
    off[first] = at
    for i in range(n):
        a = starts[i]
        b = starts[i + 1] - sep
        for p in range(a, b):
            arena[at] = buf[p]
            at += 1
        off[first + i + 1] = at
    return at


@njit
def _probe(table: Any, s: Any, h: Any, arena: Any, off: Any, buf: Any, a: Any,
           b: Any) -> Any:
    """(slot of the id, or -1; first reusable slot met, or the empty slot that ended it)."""
    cap = table.shape[0]
    fmask = (_ONE << np.uint64(s)) - _ONE
    tmask = (_ONE << np.uint64(min(table.itemsize * 8 - s, 32))) - _ONE
    tag = (h >> _THIRTY2) & tmask
    slot: Any = np.int64(((h & _M32) * np.uint64(cap)) >> _THIRTY2)
    free: Any = -1
    while True:
        e = np.uint64(table[slot])
        f = e & fmask
        if f == 0:
            return -1, slot if free < 0 else free
        if f == fmask:
            if free < 0:
                free = slot
        elif (e >> np.uint64(s)) == tag:
            q = np.int64(f) - 1
            if _same(arena, np.int64(off[q]), np.int64(off[q + 1]), buf, a, b):
                return slot, free
        slot += 1
        if slot == cap:
            slot = 0


_CHUNK = 1024  # ids hashed, and their cache lines touched, ahead of the probes


@njit
def _touch(table: Any, s: Any, seed: Any, arena: Any, off: Any, buf: Any, starts: Any,
           sep: Any, c0: Any, c1: Any, hs: Any) -> Any:
    """Hash ids ``c0..c1 - 1`` into ``hs`` and load the lines their probes will read.

    The loads of one pass do not wait for each other (their sum is returned so that they
    stay): the table's home slots, then the offsets and the bytes of the ids whose tag
    matches there. The probes after find them in cache instead of waiting for each miss
    in turn (50,000 ids against a 3 MB table: about 75 -> 30 ns per id).
    """
    cap = np.uint64(table.shape[0])
    sh = np.uint64(s)
    fmask = (_ONE << sh) - _ONE
    tmask = (_ONE << np.uint64(min(table.itemsize * 8 - s, 32))) - _ONE
    acc = np.uint64(0)
    for i in range(c0, c1):
        h = id_hash(buf, np.int64(starts[i]), np.int64(starts[i + 1]) - sep, seed)
        hs[i - c0] = h
        acc += np.uint64(table[np.int64(((h & _M32) * cap) >> _THIRTY2)])
    for i in range(c0, c1):
        h = hs[i - c0]
        e = np.uint64(table[np.int64(((h & _M32) * cap) >> _THIRTY2)])
        f = e & fmask
        if f != 0 and f != fmask and (e >> sh) == ((h >> _THIRTY2) & tmask):
            acc += np.uint64(off[np.int64(f) - 1])
    for i in range(c0, c1):
        h = hs[i - c0]
        e = np.uint64(table[np.int64(((h & _M32) * cap) >> _THIRTY2)])
        f = e & fmask
        if f != 0 and f != fmask and (e >> sh) == ((h >> _THIRTY2) & tmask):
            acc += np.uint64(arena[np.int64(off[np.int64(f) - 1])])
    return acc


@njit
def id_insert(table: Any, s: Any, seed: Any, arena: Any, off: Any, first: Any, n: Any,
              flags: Any) -> Any:
    """Register the staged seqs ``first..first + n - 1``, all or none.

    ``flags[i]``: 1 when the id of ``first + i`` was registered before, 2 when it repeats
    an earlier id of the batch, else 0. When any flag is set nothing stays registered (the
    slots taken meanwhile become tombstones). Returns (ids flagged, empty slots taken,
    a sum of no meaning).
    """
    fmask = (_ONE << np.uint64(s)) - _ONE
    tmask = (_ONE << np.uint64(min(table.itemsize * 8 - s, 32))) - _ONE
    taken = np.empty(n, dtype=np.int64)
    hs = np.empty(_CHUNK, dtype=np.uint64)
    starts = off[first:first + n + 1]
    flagged = 0
    filled = 0
    acc = np.uint64(0)
    for c0 in range(0, n, _CHUNK):
        c1 = min(n, c0 + _CHUNK)
        acc += _touch(table, s, seed, arena, off, arena, starts, 0, c0, c1, hs)
        for i in range(c0, c1):
            a = np.int64(starts[i])
            b = np.int64(starts[i + 1])
            h = hs[i - c0]
            hit, free = _probe(table, s, h, arena, off, arena, a, b)
            if hit >= 0:
                old = np.int64(np.uint64(table[hit]) & fmask) - 1
                flags[i] = 1 if old < first else 2
                flagged += 1
                taken[i] = -1
                continue
            flags[i] = 0
            if np.uint64(table[free]) & fmask == 0:
                filled += 1
            table[free] = (((h >> _THIRTY2) & tmask) << np.uint64(s)) | np.uint64(
                first + i + 1)
            taken[i] = free
    if flagged:
        for i in range(n):
            if taken[i] >= 0:
                table[taken[i]] = fmask
    return flagged, filled, acc


@njit
def id_codes(table: Any, s: Any, seed: Any, arena: Any, off: Any, buf: Any, starts: Any,
             sep: Any, codes: Any) -> Any:
    """``codes[i]`` = ``slot << 32 | seq`` of id ``i`` (-1: unknown).

    Returns (the first index whose id occurs earlier in the batch, among the known ids,
    or -1; a sum of no meaning).
    """
    n = starts.shape[0] - 1
    fmask = (_ONE << np.uint64(s)) - _ONE
    small = n <= 32  # a few ids: compared with each other, no bitmap of the table's slots
    seen = np.zeros(1 if small else (table.shape[0] >> 6) + 1, dtype=np.uint64)
    hs = np.empty(_CHUNK, dtype=np.uint64)
    repeat = -1
    acc = np.uint64(0)
    for c0 in range(0, n, _CHUNK):
        c1 = min(n, c0 + _CHUNK)
        acc += _touch(table, s, seed, arena, off, buf, starts, sep, c0, c1, hs)
        for i in range(c0, c1):
            a = starts[i]
            b = starts[i + 1] - sep
            hit, _ = _probe(table, s, hs[i - c0], arena, off, buf, a, b)
            if hit < 0:
                codes[i] = -1
                continue
            q = np.int64(np.uint64(table[hit]) & fmask) - 1
            codes[i] = (hit << 32) | q
            if repeat >= 0:
                continue
            if small:
                for j in range(i):
                    if codes[j] == codes[i]:
                        repeat = i
                continue
            bit = _ONE << (np.uint64(hit) & _LOW6)
            if seen[hit >> 6] & bit:
                repeat = i
            seen[hit >> 6] |= bit
    return repeat, acc


@njit
def id_discard(table: Any, s: Any, codes: Any) -> Any:
    """Make the slots of ``codes`` tombstones; the index of a stale code (-1: none)."""
    fmask = (_ONE << np.uint64(s)) - _ONE
    for i in range(codes.shape[0]):
        slot = codes[i] >> 32
        q = codes[i] & 0xFFFFFFFF
        if np.uint64(table[slot]) & fmask != np.uint64(q + 1):
            return i
        table[slot] = fmask
    return -1


@njit
def id_rebuild(table: Any, s: Any, seed: Any, arena: Any, off: Any, seqs: Any,
               new_seqs: Any) -> Any:
    """Insert seqs (renamed ``new_seqs``) into an empty table, hashing the arena's ids."""
    tmask = (_ONE << np.uint64(min(table.itemsize * 8 - s, 32))) - _ONE
    cap = table.shape[0]
    hs = np.empty(_CHUNK, dtype=np.uint64)
    acc = np.uint64(0)
    n = seqs.shape[0]
    for c0 in range(0, n, _CHUNK):
        c1 = min(n, c0 + _CHUNK)
        for i in range(c0, c1):
            q = seqs[i]
            h = id_hash(arena, np.int64(off[q]), np.int64(off[q + 1]), seed)
            hs[i - c0] = h
            acc += np.uint64(table[np.int64(((h & _M32) * np.uint64(cap)) >> _THIRTY2)])
        for i in range(c0, c1):
            h = hs[i - c0]
            slot: Any = np.int64(((h & _M32) * np.uint64(cap)) >> _THIRTY2)
            while table[slot] != 0:
                slot += 1
                if slot == cap:
                    slot = 0
            table[slot] = (((h >> _THIRTY2) & tmask) << np.uint64(s)) | np.uint64(
                new_seqs[i] + 1)
    return acc


@njit
def id_equal(arena: Any, off: Any, seqs: Any, buf: Any, starts: Any, sep: Any) -> Any:
    """The first ``i`` whose id ``i`` of ``buf`` is not the arena's id of ``seqs[i]`` (-1: none).

    Compares bytes only (no hashing, no probe); ``seqs`` name ids whose bytes are in the
    arena.
    """
    for i in range(seqs.shape[0]):
        q = seqs[i]
        if not _same(arena, np.int64(off[q]), np.int64(off[q + 1]), buf, starts[i],
                     starts[i + 1] - sep):
            return i
    return -1


@njit
def id_remap(table: Any, s: Any, new_of_old: Any) -> None:
    """Give every live entry of the table the seq ``new_of_old[seq]`` (tags and slots stay)."""
    fmask = (_ONE << np.uint64(s)) - _ONE
    keep = ~fmask
    for slot in range(table.shape[0]):
        e = np.uint64(table[slot])
        f = e & fmask
        if f != 0 and f != fmask:
            table[slot] = (e & keep) | (np.uint64(new_of_old[np.int64(f) - 1]) + _ONE)


@njit
def id_live(table: Any, s: Any, out: Any) -> Any:
    """The live seqs (in slot order) into ``out``; returns how many."""
    fmask = (_ONE << np.uint64(s)) - _ONE
    at = 0
    for slot in range(table.shape[0]):
        f = np.uint64(table[slot]) & fmask
        if f != 0 and f != fmask:
            out[at] = np.int64(f) - 1
            at += 1
    return at


@njit
def id_gather(arena: Any, off: Any, seqs: Any, out: Any, out_off: Any, sep: Any) -> Any:
    """The ids of ``seqs`` back to back (``sep``: a NUL after each) into ``out``; its end.

    ``out_off`` (``len(seqs) + 1``) gets where each starts (the new ``off`` when ``sep``
    is 0).
    """
    at = 0
    for i in range(seqs.shape[0]):
        q = seqs[i]
        out_off[i] = at
        for p in range(np.int64(off[q]), np.int64(off[q + 1])):
            out[at] = arena[p]
            at += 1
        if sep:
            out[at] = 0
            at += 1
    out_off[seqs.shape[0]] = at
    return at


@njit
def copy_rows(labels: Any, offsets: Any, rows: Any, where: Any, out: Any, out_off: Any,
              base: Any) -> None:
    """Row ``rows[i]`` of the CSR ``(offsets, labels)``, plus ``base``, at ``out_off[where[i]]``.

    The registry's gather of stored labels (:meth:`SubscriptionRegistry.gather`).
    """
    for i in range(rows.shape[0]):
        r = rows[i]
        at = out_off[where[i]]
        for p in range(np.int64(offsets[r]), np.int64(offsets[r + 1])):
            out[at] = np.uint64(labels[p]) + base
            at += 1


def warm_up() -> None:
    """Call every kernel once on tiny inputs of the types :class:`HashIdIndex` passes."""
    raw = np.frombuffer(b"a\0bc", dtype=np.uint8)
    starts = np.empty(3, dtype=np.int64)
    sep_starts(raw, 2, starts)
    arena = np.zeros(16, dtype=np.uint8)
    off = np.zeros(8, dtype=np.uint32)
    id_stage(raw, starts, 1, arena, 0, off, 0)
    id_stage(raw, np.array([0, 1, 4]), 0, arena, 0, off, 0)
    seed = np.uint64(7)
    flags = np.zeros(2, dtype=np.int8)
    # 32-bit entries only: 64-bit ones (past 2**26 seqs) compile when first needed
    table = np.zeros(8, dtype=np.uint32)
    id_insert(table, 16, seed, arena, off, 0, 2, flags)
    codes = np.empty(2, dtype=np.int64)
    id_codes(table, 16, seed, arena, off, raw, starts, 1, codes)
    id_live(table, 16, np.empty(8, dtype=np.int64))
    id_remap(table, 16, np.arange(2, dtype=np.uint32))
    id_equal(arena, off, np.arange(2, dtype=np.int64), raw, starts, 1)
    id_discard(table, 16, codes)
    table[:] = 0
    seqs = np.arange(2, dtype=np.int64)
    id_rebuild(table, 16, seed, arena, off, seqs, seqs)
    out_off = np.empty(3, dtype=np.int64)
    rows = np.zeros(1, dtype=np.int64)
    for label_type in (np.uint8, np.uint16, np.uint32, np.uint64):
        copy_rows(np.zeros(2, dtype=label_type), np.array([0, 2], dtype=np.int32), rows, rows,
                  np.empty(2, dtype=np.uint64), out_off, np.uint64(0))
    id_gather(arena, off, np.arange(2, dtype=np.int64), np.empty(8, dtype=np.uint8),
              out_off, 1)
