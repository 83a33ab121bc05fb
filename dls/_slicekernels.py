"""Compiled kernels of the label index's slices (:mod:`dls.label_slices`).

An entry of label place ``p`` goes to lists ``first .. first + count - 1`` of
:func:`entry_lists`: the whole list ``p * lists``, or the slices its range in the sliced
column touches, ``p * lists + 1 + slice``. ``sf``, ``si`` are
:meth:`dls.label_slices.Slicing.params`. Like every kernel here these compile only when
:data:`dls._jit.ENABLED`; the numpy forms are :class:`dls.label_slices.Slicing`'s.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dls._jit import njit

__all__ = ["entry_lists", "entry_spans", "list_counts", "part", "reslice"]

SLOT_MASK = (1 << 32) - 1  # as dls._indexkernels' entries


@njit
def part(v: float, cell: int, sf: Any, si: Any) -> int:
    """Slice of value ``v`` in ``cell``, clipped (:meth:`dls.label_slices.Slicing.part`)."""
    k = si[1]
    f = (v - sf[0]) * sf[1]
    first = np.float64(k * cell)
    if not f >= first:
        return 0
    if f >= first + k:
        return k - 1
    return np.int64(f) - k * cell


@njit
def entry_lists(place: Any, cuts: bool, lo: float, hi: float, base: int, sf: Any,
                si: Any) -> Any:
    """An entry's first list and how many (:meth:`dls.label_slices.Slicing.entry_lists`).

    ``sf``, ``si``: :meth:`dls.label_slices.Slicing.params`.
    """
    lists = si[0]
    if lists == 1:
        return place, 1
    cell = ((base + place) >> si[3]) & si[4]
    if not cuts or cell >= si[5]:
        return place * lists, 1
    p0 = part(lo, cell, sf, si)
    p1 = part(hi, cell, sf, si)
    if p0 == 0 and p1 == si[1] - 1:
        return place * lists, 1
    return place * lists + 1 + p0, p1 - p0 + 1


@njit
def entry_spans(places: Any, offsets: Any, kinds: Any, sb: Any, base: int, sf: Any,
                si: Any, first: Any, count: Any) -> None:
    """:func:`entry_lists` of every entry, into ``first`` and ``count``.

    Subscription ``i`` has entries ``offsets[i]..``; ``sb[i]``: its sliced column's bounds.
    """
    for i in range(offsets.shape[0] - 1):
        for t in range(offsets[i], offsets[i + 1]):
            first[t], count[t] = entry_lists(places[t], kinds[t] == 1, sb[i, 0], sb[i, 1],
                                             base, sf, si)


@njit
def _canonical(ent: Any, li: int, lists: int, base: int, rec: Any, sf: Any, si: Any,
               sf2: Any, si2: Any) -> Any:
    """Where entry ``ent`` of list ``li`` goes under the slicing ``sf2``/``si2``.

    ``(first list, how many)``, or ``(0, 0)`` for a copy (a list past its first slice).
    """
    lab = li // lists
    s = (ent >> 1) & SLOT_MASK
    cuts = (ent & 1) == 1
    col = si[2] if si[0] > 1 else si2[2]
    lo, hi = rec[s, 1 + 2 * col], rec[s, 2 + 2 * col]
    f, _ = entry_lists(lab, cuts, lo, hi, base, sf, si)
    if f != li:
        return 0, 0
    return entry_lists(lab, cuts, lo, hi, base, sf2, si2)


@njit
def reslice(pool: Any, cut: Any, start: Any, size: Any, alive: Any, rec: Any, base: int,
            sf: Any, si: Any, sf2: Any, si2: Any, counts: Any, slot_n: Any, out: Any,
            out_cut: Any, new_start: Any) -> None:
    """Every live entry listed again under the slicing ``sf2``/``si2`` (from ``sf``/``si``).

    With ``out`` empty, counts the entries of each new list (``counts``) only;
    else writes them from ``new_start`` (sized from those counts; ``counts`` zeros again
    at the start) and recounts ``slot_n``. Entries of retired slots are
    dropped; an entry's bounds in the sliced column come from its slot's record.
    """
    lists = si[0]
    write = out.shape[0] > 0
    if write:
        slot_n[:] = 0
    for li in range(start.shape[0]):
        for t in range(start[li], start[li] + size[li]):
            ent = pool[t]
            s = (ent >> 1) & SLOT_MASK
            if not alive[s]:
                continue
            f, n = _canonical(ent, li, lists, base, rec, sf, si, sf2, si2)
            for q in range(f, f + n):
                if write:
                    p = new_start[q] + counts[q]
                    out[p] = ent
                    out_cut[p, 0] = cut[t, 0]
                    out_cut[p, 1] = cut[t, 1]
                    slot_n[s] += 1
                counts[q] += 1


@njit
def list_counts(labels: Any, base: int, n_labels: int, offsets: Any, kinds: Any, sb: Any,
                sf: Any, si: Any, counts: Any, per_sub: Any) -> int:
    """Entries per list and per subscription, added to ``counts`` and ``per_sub``.

    Returns the first label outside the index, or -1 (counts are complete only then);
    see :func:`entry_spans` for the rest.
    """
    ub = np.uint64(base)
    for i in range(offsets.shape[0] - 1):
        for t in range(offsets[i], offsets[i + 1]):
            lab = labels[t]
            if lab < ub or lab - ub >= np.uint64(n_labels):
                return t
            f, c = entry_lists(np.int64(lab - ub), kinds[t] == 1, sb[i, 0], sb[i, 1], base,
                               sf, si)
            for q in range(f, f + c):
                counts[q] += 1
            per_sub[i] += c
    return -1
