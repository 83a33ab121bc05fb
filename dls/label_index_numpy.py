"""The numpy form of :class:`dls.label_index.LabelIndex`, when the kernels are off.

The same lists, updated and read by whole-array numpy code: the index calls these when
built with ``compiled=False`` (or with :data:`dls._jit.ENABLED` False), and the tests hold
both forms equal to a brute-force model. Each function reads and writes the index's
arrays, as its methods would.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dls import _indexkernels as _ik
from dls.label_slices import Slicing

#: the index these functions read and write (:class:`dls.label_index.LabelIndex`, which
#: imports this module)
LabelIndex = Any

__all__ = ["compact", "compose", "insert", "lists_read", "match", "outwards", "reslice"]


def compose(n: int, offsets: np.ndarray, owners: np.ndarray, slots: np.ndarray,
            bounds: np.ndarray, kinds: np.ndarray, cols: np.ndarray | None, columns: int
            ) -> tuple[np.ndarray, np.ndarray]:
    """The entries and cut bounds of :meth:`LabelIndex.add`'s subscriptions."""
    sizes = np.diff(offsets)
    col = (np.full(len(kinds), -1, dtype=np.int64) if cols is None
           else np.where(kinds == _ik.CUTS, np.asarray(cols, dtype=np.int64), -1))
    sub = np.repeat(np.arange(n), sizes)
    cuts = np.empty((len(kinds), 2), dtype=np.float32)
    cuts[:, 0], cuts[:, 1] = -np.inf, np.inf
    if columns and (col >= 0).any():
        at = np.flatnonzero(col >= 0)
        b = np.asarray(bounds, dtype=np.float64)[sub[at], col[at]]
        cuts[at, 0], cuts[at, 1] = outwards(b[:, 0], -np.inf), outwards(b[:, 1], np.inf)
    entries = (np.repeat(owners, sizes) << _ik.OWNER_SHIFT | (col + 1) << _ik.COL_SHIFT
               | np.repeat(slots, sizes) << 1 | kinds)
    return entries, cuts


def match(ix: LabelIndex, idx: np.ndarray, origins: np.ndarray, ok: np.ndarray,
          values: np.ndarray) -> tuple[Any, ...]:
    """Who events of label places ``idx`` go to: ``IndexMatch``'s fields, counting now.

    Every entry of every list of each event's label gathered (an owner counts in
    ``removed`` whatever its slice), checked and deduplicated at once; only the lists the
    kernel reads deliver.
    """
    n = len(idx)
    ev = np.flatnonzero(idx >= 0)
    lists = ix._lists
    ev = np.repeat(ev, lists)
    li = idx[ev] * lists + np.tile(np.arange(lists), len(ev) // lists)
    r_ev, r_li = lists_read(ix, idx, ok, values)
    reads = np.isin(ev * len(ix._size) + li, r_ev * len(ix._size) + r_li)
    sizes = ix._size[li]
    first = np.cumsum(sizes) - sizes
    reads = np.repeat(reads, sizes)
    ev = np.repeat(ev, sizes)
    at = np.repeat(ix._start[li] - first, sizes) + np.arange(int(sizes.sum()))
    ent = ix._pool[at]
    slot, cut = (ent >> 1) & _ik.SLOT_MASK, (ent & 1).astype(bool)
    o = ent >> _ik.OWNER_SHIFT
    keep = ix._alive[slot] & (o != origins[ev])
    ev, slot, cut, o, reads = ev[keep], slot[keep], cut[keep], o[keep], reads[keep]
    rec = ix._rec[slot]
    test = cut & ok[ev] & reads
    inside = np.ones(len(ev), dtype=bool)
    if len(ev) and ix.columns:
        b, v = rec[:, 1:].reshape(len(ev), ix.columns, 2), values[ev]
        inside = ((b[:, :, 0] <= v) & (v <= b[:, :, 1])).all(axis=1)
    pend = test & inside & (rec[:, 0] > 0)
    deliver = reads & (~test | (inside & ~pend))
    width = int(o.max()) + 1 if len(o) else 1
    every = np.unique(ev * width + o)
    hit = np.unique(ev[deliver] * width + o[deliver])
    gone = np.bincount(np.setdiff1d(every, hit, assume_unique=True) % width,
                       minlength=len(ix._stamp))
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(hit // width, minlength=n), out=offsets[1:])
    return (offsets, hit % width, gone, (ev[pend], slot[pend]), len(np.unique(ev[test])),
            len(np.unique(ev[cut & ~ok[ev] & reads])))


def lists_read(ix: LabelIndex, idx: np.ndarray, ok: np.ndarray, values: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray]:
    """``(event, list)`` of the lists each event reads (the kernel's rule)."""
    ev = np.flatnonzero(idx >= 0)
    places = idx[ev]
    lists = ix._lists
    if lists == 1:
        return ev, places
    v = values[ev, ix.slicing.column] if len(ev) else np.zeros(0)
    one = ok[ev] & ~np.isnan(v)
    part = ix.slicing.part(v, ix.slicing.cell_of(places, ix.base))
    pairs_ev = [ev, ev[one], np.repeat(ev[~one], lists - 1)]
    pairs_li = [places * lists, (places * lists + 1 + part)[one],
                (np.repeat(places[~one] * lists, lists - 1)
                 + np.tile(np.arange(1, lists), int((~one).sum())))]
    ev, li = np.concatenate(pairs_ev), np.concatenate(pairs_li)
    order = np.argsort(ev, kind="stable")
    return ev[order], li[order]


def insert(ix: LabelIndex, idx: np.ndarray, entries: np.ndarray, cuts: np.ndarray) -> None:
    """Entries ``entries`` added to lists ``idx``: the pool laid out again, lists full."""
    old_lab = np.repeat(np.arange(len(ix._size), dtype=np.int64), ix._size)
    old_at = np.repeat(ix._start - (np.cumsum(ix._size) - ix._size),
                       ix._size) + np.arange(int(ix._size.sum()))
    lab = np.concatenate([old_lab, idx])
    ent = np.concatenate([ix._pool[old_at], entries])
    cut = np.concatenate([ix._cut[old_at], cuts])
    order = np.argsort(lab, kind="stable")
    ix._size = np.bincount(lab, minlength=len(ix._size)).astype(np.int64)
    ix._cap = ix._size.copy()
    ix._start = np.cumsum(ix._size) - ix._size
    ix._pool = np.concatenate([ent[order], np.zeros(1, dtype=np.int64)])
    ix._cut = np.concatenate([cut[order], np.zeros((1, 2), dtype=np.float32)])
    ix._end = len(ent)


def compact(ix: LabelIndex, out: np.ndarray, out_cut: np.ndarray) -> int:
    """:meth:`LabelIndex.compact` into ``out``; returns the end."""
    at = np.repeat(ix._start - (np.cumsum(ix._size) - ix._size),
                   ix._size) + np.arange(int(ix._size.sum()))
    lab = np.repeat(np.arange(len(ix._size), dtype=np.int64), ix._size)
    ent, cut = ix._pool[at], ix._cut[at]
    keep = ix._alive[(ent >> 1) & _ik.SLOT_MASK]
    ent, lab, cut = ent[keep], lab[keep], cut[keep]
    ix._size = np.bincount(lab, minlength=len(ix._size)).astype(np.int64)
    ix._cap = ix._size.copy()
    ix._start = np.cumsum(ix._size) - ix._size
    ix._slot_n[:] = np.bincount((ent >> 1) & _ik.SLOT_MASK,
                                  minlength=len(ix._slot_n))[:len(ix._slot_n)]
    out[:len(ent)] = ent
    out_cut[:len(ent)] = cut
    return len(ent)


def outwards(x: np.ndarray, towards: float) -> np.ndarray:
    """``x`` as float32, moved one step ``towards`` where rounding went the other way."""
    f = x.astype(np.float32)
    wrong = f > x if towards < 0 else f < x
    f[wrong] = np.nextafter(f[wrong], np.float32(towards))
    return f


def reslice(ix: LabelIndex, new: Slicing) -> None:
    """:meth:`LabelIndex.reslice`'s lists: each live entry's first copy spread again."""
    old, lists = ix.slicing, ix._lists
    lab = np.repeat(np.arange(len(ix._size), dtype=np.int64), ix._size)
    at = np.repeat(ix._start - (np.cumsum(ix._size) - ix._size),
                   ix._size) + np.arange(int(ix._size.sum()))
    ent, cut = ix._pool[at], ix._cut[at]
    slot = (ent >> 1) & _ik.SLOT_MASK
    col = (old if old.lists > 1 else new).column
    lo, hi = ix._rec[slot, 1 + 2 * col], ix._rec[slot, 2 + 2 * col]
    cuts, places = (ent & 1) == 1, lab // lists
    first, _ = old.entry_lists(places, ix.base, cuts, lo, hi)
    keep = ix._alive[slot] & (first == lab)
    first, count = new.entry_lists(places[keep], ix.base, cuts[keep], lo[keep], hi[keep])
    starts = np.cumsum(count) - count
    to = np.repeat(first - starts, count) + np.arange(int(count.sum()))
    ent, cut = np.repeat(ent[keep], count), np.repeat(cut[keep], count, axis=0)
    order = np.argsort(to, kind="stable")
    ix._size = np.bincount(to, minlength=ix.n_labels * new.lists).astype(np.int64)
    ix._cap = ix._size.copy()
    ix._start = np.cumsum(ix._size) - ix._size
    ix._pool = np.concatenate([ent[order], np.zeros(1, dtype=np.int64)])
    ix._cut = np.concatenate([cut[order], np.zeros((1, 2), dtype=np.float32)])
    ix._end = len(ent)
    ix._slot_n[:] = np.bincount((ent >> 1) & _ik.SLOT_MASK,
                                minlength=len(ix._slot_n))[:len(ix._slot_n)]
