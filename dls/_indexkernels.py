"""Compiled kernels of the exact label index (:class:`dls.label_index.LabelIndex`).

The index keeps, per label of a small label space, a list of *entries* in one pool: an
entry is ``owner << 39 | (column + 1) << 33 | slot << 1 | kind`` (kind 0: the slot's
subscription holds the label's cell wholly, 1: it cuts the cell and the event's values
decide; column: one value column the subscription cuts the cell in, -1 none), beside it in
``cut`` that column's bounds as float32 rounded outwards. Label ``l``'s list is
``pool[start[l]:start[l] + size[l]]`` with room for ``cap[l]``; a full list moves to the
pool's end with twice the room. Retired slots keep their entries until a compaction.

An entry alone decides most events: a cell held wholly delivers, and a value outside the
float32 bounds of the cut column rejects (they hold the exact bounds, so nothing is
rejected that matches); only the rest read the slot's record (exact bounds of every
column), which lies elsewhere in memory.

Like every kernel here these compile only when :data:`dls._jit.ENABLED`; the numpy
reference lives with the caller and ``tests/dls/test_label_index.py`` holds them equal.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dls._intrinsics import prefetch as _prefetch
from dls._jit import njit
from dls._slicekernels import entry_lists, part

__all__ = ["OWNER_SHIFT", "SLOT_MASK", "compact", "compose", "fold", "held_entries",
           "insert", "label_room", "label_slots", "lay_out", "match"]

SLOT_MASK = (1 << 32) - 1
HOLDS, CUTS = 0, 1  # an entry's kind: its subscription holds the cell wholly, or cuts it
COL_SHIFT, OWNER_SHIFT = 33, 39


@njit
def insert(pool: Any, cut: Any, start: Any, size: Any, cap: Any, end: int, labels: Any,
           entries: Any, cuts: Any, first: int) -> Any:
    """Append ``entries[i]`` (``cuts[i]``) to label ``labels[i]``'s list, from ``i = first``.

    Returns ``(end, i)``: the pool's new end, and ``len(labels)`` when every entry is in;
    else the first entry left out because its list had to move past the pool's end (the
    caller grows the pool, and goes on from there: what is in stays consistent).
    """
    for i in range(first, labels.shape[0]):
        lab = labels[i]
        n = size[lab]
        if n == cap[lab]:
            room = 4 if n < 2 else 2 * n
            if end + room > pool.shape[0]:
                return end, i
            at = start[lab]
            for t in range(n):
                pool[end + t] = pool[at + t]
                cut[end + t, 0] = cut[at + t, 0]
                cut[end + t, 1] = cut[at + t, 1]
            start[lab] = end
            cap[lab] = room
            end += room
        t = start[lab] + n
        pool[t] = entries[i]
        cut[t, 0] = cuts[i, 0]
        cut[t, 1] = cuts[i, 1]
        size[lab] = n + 1
    return end, labels.shape[0]


@njit
def compact(pool: Any, cut: Any, start: Any, size: Any, cap: Any, alive: Any, slot_n: Any,
            out: Any, out_cut: Any) -> int:
    """Copy every live entry into ``out`` (each list with a quarter more room).

    Entries of retired slots are dropped; ``slot_n`` is recounted. Returns the end.
    """
    slot_n[:] = 0
    end = 0
    for lab in range(start.shape[0]):
        n = size[lab]
        if n == 0:
            start[lab] = end
            cap[lab] = 0
            continue
        at = start[lab]
        k = 0
        for t in range(n):
            e = pool[at + t]
            s = (e >> 1) & SLOT_MASK
            if alive[s]:
                out[end + k] = e
                out_cut[end + k, 0] = cut[at + t, 0]
                out_cut[end + k, 1] = cut[at + t, 1]
                slot_n[s] += 1
                k += 1
        start[lab] = end
        size[lab] = k
        room = k + k // 4 + (2 if k else 0)
        cap[lab] = room
        end += room
    return end


@njit
def _sort_owners(out_owner: Any, first: int, k: int) -> None:
    """Sort an event's owners ``out_owner[first:k]`` (lists are short: insertion sort)."""
    for i in range(first + 1, k):
        x = out_owner[i]
        j = i - 1
        while j >= first and out_owner[j] > x:
            out_owner[j + 1] = out_owner[j]
            j -= 1
        out_owner[j + 1] = x


@njit
def _inside(values: Any, e: int, rec: Any, s: int) -> bool:
    """Whether event ``e``'s values lie within slot ``s``'s bounds (``rec[s, 1:]``)."""
    for j in range((rec.shape[1] - 1) // 2):
        v = values[e, j]
        if v < rec[s, 1 + 2 * j] or v > rec[s, 2 + 2 * j]:
            return False
    return True


@njit
def _admits(ent: int, e: int, t: int, okv: bool, values: Any, cut: Any) -> Any:
    """Entry ``pool[t] = ent`` for event ``e``: ``(cuts, may deliver)``, without a branch.

    It may deliver when it holds the cell wholly, keeps no cut column, the values were
    not read, or the cut column's value lies within its float32 bounds ``cut[t]``.
    """
    cuts = (ent & 1) == 1
    col = ((ent >> COL_SHIFT) & 63) - 1
    v = values[e, max(col, 0)]
    out = (v < cut[t, 0]) | (v > cut[t, 1])
    return cuts, (not cuts) | (col < 0) | (not okv) | (not out)


@njit
def _candidates(e: int, at: int, n: int, oe: int, okv: bool, tag: int, values: Any,
                pool: Any, cut: Any, alive_bits: Any, seen: Any, removed: Any,
                keep: Any, m: int, kept: bool) -> Any:
    """One pass over a list for event ``e``: its candidates, and the entries left to read.

    Every live entry of an owner but ``oe`` makes its owner a candidate (``seen``), counted
    once in ``removed``; the positions of those that may deliver (held wholly, cut with
    values unread, or with the cut column's value within the entry's float32 bounds) go
    to ``keep`` from ``keep[m]`` (when ``kept``: else the list is only counted). Written
    without branches on the data: most entries of a long list fail the cut column, half
    of them on each side, which a branch would mispredict. Returns ``(kept, new
    candidates, values compared, delivered by label)``.
    """
    fresh = 0
    cutting = 0
    for t in range(at, at + n):
        ent = pool[t]
        o = ent >> OWNER_SHIFT
        s = (ent >> 1) & SLOT_MASK
        cand = ((alive_bits[s >> 3] >> (s & 7)) & 1) == 1
        cand = cand & (o != oe)
        sn = seen[o]
        new = cand & (sn != tag)
        removed[o] += new
        fresh += new
        seen[o] = tag if cand else sn
        cuts, may = _admits(ent, e, t, okv, values, cut)
        cutting += cand & cuts & kept
        keep[m] = t
        m += cand & may & kept
    return m, fresh, cutting > 0 and okv, cutting > 0 and not okv


@njit
def _kept(e: int, at: int, n: int, okv: bool, values: Any, pool: Any, cut: Any,
          alive_bits: Any, keep: Any, m: int) -> Any:
    """:func:`_candidates` for an event whose owners are counted later (no origin).

    Returns ``(kept, values compared, delivered by label)``.
    """
    cutting = 0
    for t in range(at, at + n):
        ent = pool[t]
        s = (ent >> 1) & SLOT_MASK
        cand = ((alive_bits[s >> 3] >> (s & 7)) & 1) == 1
        cuts, may = _admits(ent, e, t, okv, values, cut)
        cutting += cand & cuts
        keep[m] = t
        m += cand & may
    return m, cutting > 0 and okv, cutting > 0 and not okv


@njit
def _deliver(e: int, m: int, keep: Any, okv: bool, tag: int, values: Any, pool: Any,
             rec: Any, stamp: Any, out_owner: Any, k: int, pend_event: Any, pend_slot: Any,
             g: int, removed: Any) -> Any:
    """The second pass: the kept entries of event ``e`` delivered, read or left pending.

    Each owner delivered to takes one from its ``removed``. Returns ``(k, g)`` moved on.
    """
    width = rec.shape[1]
    flat = rec.reshape(-1)
    for i in range(m):  # the records lie far apart in memory: their misses overlap
        ent = pool[keep[i]]
        if ent & 1 and okv:
            at = ((ent >> 1) & SLOT_MASK) * width
            _prefetch(flat, at)
            _prefetch(flat, at + width - 1)
    first = k
    for i in range(m):
        ent = pool[keep[i]]
        o = ent >> OWNER_SHIFT
        if stamp[o] == tag:
            continue
        if ent & 1 and okv:
            s = (ent >> 1) & SLOT_MASK
            if not _inside(values, e, rec, s):
                continue
            if rec[s, 0] > 0.0:
                pend_event[g] = e
                pend_slot[g] = s
                g += 1
                continue
        stamp[o] = tag
        removed[o] -= 1
        out_owner[k] = o
        k += 1
    _sort_owners(out_owner, first, k)
    return k, g


@njit
def _lists_read(e: int, lab: int, okv: bool, values: Any, base: int, sf: Any,
                si: Any) -> Any:
    """The lists event ``e`` of label place ``lab`` reads: ``(whole, slice)``.

    The slice is -1 for every list of the label (values not read); unsliced, ``whole`` is
    the label's one list.
    """
    lists = si[0]
    if lists == 1:
        return lab, 0
    v = values[e, si[2]]
    if not okv or v != v:
        return lab * lists, -1
    return lab * lists, lab * lists + 1 + part(v, ((base + lab) >> si[3]) & si[4], sf, si)


@njit
def match(labels: Any, origin: Any, ok: Any, values: Any, pool: Any, cut: Any,
          start: Any, size: Any, alive_bits: Any, rec: Any, stamp: Any, seen: Any,
          tag0: int, out_start: Any, out_owner: Any, removed: Any, pend_event: Any,
          pend_slot: Any, counts: Any, hits: Any, dirty: Any, base: int, sf: Any,
          si: Any) -> None:
    """Who each event goes to: its label's entries, deduplicated by owner.

    ``labels[e]``: event ``e``'s label place (-1: none); ``origin[e]``: an owner it never
    goes to (-1: none); ``ok[e]``: its ``values[e]`` could be read (else a cut cell
    delivers by label; ``values`` has at least one column). With slicing (``sf``, ``si``:
    :meth:`dls.label_slices.Slicing.params`; ``base`` the first label) it reads its
    label's whole list and its value's slice (every list when not read: an entry listed
    under several slices then delivers once). ``alive_bits``: bit ``s`` set when slot
    ``s`` is live; ``rec[s]``: general (1.0), then bounds (lo, hi per value). A first
    pass (:func:`_candidates`) finds the candidates and drops the cutting entries whose
    cut column's float32 bounds exclude the event; the second reads the slot's record for
    the rest: a cutting entry delivers when every value lies in the slot's bounds, and a
    general slot's pair whose values lie in its hull is left to the caller (``pend_*``).
    Owners delivered to go to ``out_owner[out_start[e]:out_start[e + 1]]``, ascending.
    ``removed[o]`` (zeros given) counts events for which owner ``o`` had live entries,
    less those it got. With ``hits`` (per label; empty: none) an event with no origin is
    not counted by owner: its label's ``hits`` go up (a label whose hits leave zero is
    appended to ``dirty[1:]``, ``dirty[0]`` of them) and :func:`fold` counts them later,
    by owner, once per list. ``stamp``/``seen``: scratch by owner, never reset (tags from
    ``tag0``). ``counts``: delivered, removed, pending, events compared by value, events
    delivered by label.
    """
    lists = si[0]
    keep = np.empty(label_room(labels, size, lists, True), dtype=np.int64)
    defer = hits.shape[0] > 0
    k = 0
    g = 0
    r_n = 0
    checked = 0
    unread = 0
    for e in range(labels.shape[0]):
        out_start[e] = k
        lab = labels[e]
        if lab < 0:
            continue
        tag = tag0 + e
        okv = ok[e]
        whole, part = _lists_read(e, lab, okv, values, base, sf, si)
        uncounted = defer and origin[e] < 0
        # counting now reads every list of the label (an owner counts whatever its slice)
        n_read = 2 if part >= 0 and lists > 1 and uncounted else lists
        if uncounted:
            if hits[lab] == 0:
                dirty[0] += 1
                dirty[dirty[0]] = lab
            hits[lab] += 1
        m = 0
        read = False
        blind = False
        for q in range(n_read):
            li = whole + q if part < 0 or not uncounted or q == 0 else part
            if uncounted:
                m, r, b = _kept(e, start[li], size[li], okv, values, pool, cut, alive_bits,
                                keep, m)
            else:
                m, fresh, r, b = _candidates(e, start[li], size[li], origin[e], okv, tag,
                                             values, pool, cut, alive_bits, seen, removed,
                                             keep, m, part < 0 or q == 0 or li == part)
                r_n += fresh
            read |= r
            blind |= b
        before = k
        k, g = _deliver(e, m, keep, okv, tag, values, pool, rec, stamp, out_owner, k,
                        pend_event, pend_slot, g, removed)
        r_n -= k - before
        checked += read
        unread += blind
    out_start[labels.shape[0]] = k
    counts[0] = k
    counts[1] = r_n
    counts[2] = g
    counts[3] = checked
    counts[4] = unread


@njit
def label_room(labels: Any, size: Any, lists: int, longest: bool = False) -> int:
    """Entries of every list of the events' labels (place -1: none), summed.

    ``longest``: the most of one event instead.
    """
    n = 0
    most = 0
    for e in range(labels.shape[0]):
        if labels[e] >= 0:
            m = 0
            for q in range(labels[e] * lists, (labels[e] + 1) * lists):
                m += size[q]
            n += m
            most = max(most, m)
    return most if longest else n


@njit
def fold(hits: Any, dirty: Any, pool: Any, start: Any, size: Any, alive_bits: Any,
         seen: Any, tag0: int, removed: Any, lists: int) -> int:
    """Count the events :func:`match` left in ``hits`` by owner, once per label.

    For each label of ``dirty[1:dirty[0] + 1]``, every owner with a live entry in its
    ``lists`` lists gets the label's hits in ``removed``; the hits and ``dirty`` are then
    cleared. Only right while each list's live owners are those the events found (fold
    before a list or a slot's liveness changes). Returns the tags used (from ``tag0``).
    """
    n = dirty[0]
    for i in range(n):
        lab = dirty[1 + i]
        h = hits[lab]
        tag = tag0 + i
        for t0 in range(lab * lists, (lab + 1) * lists):
            for t in range(start[t0], start[t0] + size[t0]):
                ent = pool[t]
                o = ent >> OWNER_SHIFT
                s = (ent >> 1) & SLOT_MASK
                if ((alive_bits[s >> 3] >> (s & 7)) & 1) == 1 and seen[o] != tag:
                    seen[o] = tag
                    removed[o] += h
        hits[lab] = 0
    dirty[0] = 0
    return n


@njit
def held_entries(labels: Any, sizes: Any, rows: Any, span: Any, masks: Any, numeric: Any,
                 discrete: Any, word_off: Any, shifts: Any, widths: Any, n_cells: Any,
                 cell_bits: int, app: int, offsets: Any, held: Any, kinds: Any,
                 cols: Any, avoid: int) -> None:
    """The index entries of simple rows: the labels each holds, their kinds and cut columns.

    Row ``rows[i]`` has the next ``sizes[i]`` of ``labels``; those whose cell it holds go
    to ``held[offsets[i]:offsets[i + 1]]``, with kind 0 (held wholly) or 1 (cut) and the
    first numeric column (by position in ``numeric``) that cuts the cell, column
    ``avoid`` (the index slices cells in it) only if no other does (-1: none).
    ``span[r, j]``: row ``r``'s cells held ``[0]..[1]`` and held wholly ``[2]..[3]`` of
    numeric attribute ``numeric[j]``; ``masks[r]`` the discrete attributes' cell masks side
    by side (attribute ``k`` from word ``word_off[k]``). A label that is not one of the
    space's cells (another app, a cell past an attribute's last) is held wholly. The numpy
    reference is :meth:`broker_node.edge.EdgeTable._index_rows`'s. While every label is
    held, ``held`` is not written (it would equal ``labels``; fresh memory is slow to touch).
    """
    n_attr = shifts.shape[0]
    cells = np.empty(n_attr, dtype=np.int64)
    k = 0
    t = 0
    for i in range(sizes.shape[0]):
        offsets[i] = k
        r = rows[i]
        for _ in range(sizes[i]):
            lab = labels[t]
            t += 1
            valid = (lab >> np.uint64(cell_bits)) == np.uint64(app)
            for a in range(n_attr):
                c = np.int64((lab >> np.uint64(shifts[a]))
                             & np.uint64((np.int64(1) << widths[a]) - 1))
                if c >= n_cells[a]:
                    valid = False
                cells[a] = c
            h = True
            w = True
            first = -1
            last = -1  # ``avoid``, when it cuts
            if valid:
                for j in range(numeric.shape[0]):
                    c = cells[numeric[j]]
                    if c < span[r, j, 0] or c > span[r, j, 1]:
                        h = False
                    if c < span[r, j, 2] or c > span[r, j, 3]:
                        w = False
                        if j == avoid:
                            last = j
                        elif first < 0:
                            first = j
                if first < 0:
                    first = last
                for q in range(discrete.shape[0]):
                    c = cells[discrete[q]]
                    word = masks[r, word_off[q] + (c >> 6)]
                    if not (word >> np.uint64(c & 63)) & np.uint64(1):
                        h = False
            if h:
                if k < t - 1:  # a label was left out before: from here ``held`` differs
                    held[k] = lab
                kinds[k] = 0 if w else 1
                cols[k] = first
                k += 1
            elif k == t - 1:  # the first left out: the labels before it are held as they are
                held[:k] = labels[:k]
    offsets[sizes.shape[0]] = k


@njit
def lay_out(pool: Any, cut: Any, start: Any, size: Any, new_start: Any, labels: Any,
            base: int, offsets: Any, owners: Any, slots: Any, kinds: Any, cols: Any, lo: Any,
            hi: Any, sb: Any, sf: Any, si: Any, order: Any, out: Any, out_cut: Any) -> None:
    """A bulk insert: every list copied to its new place, then the new entries composed.

    List ``l`` goes to ``new_start[l]`` in ``out``; then the entries of subscription ``i``
    (see :func:`compose`; ``i`` in the order of ``order``) are written at the ends of their
    lists (label ``labels[t]`` is place ``labels[t] - base``, its lists those of
    :func:`entry_lists`); the caller sized the lists, so none moves. The entry is composed
    here as :func:`compose` does, not by a shared helper: at a million subscriptions the
    call doubled the lay-out's time (7.0 s, 12-14 s).
    """
    for lab in range(start.shape[0]):
        a, b = start[lab], new_start[lab]
        for t in range(size[lab]):
            out[b + t] = pool[a + t]
            out_cut[b + t, 0] = cut[a + t, 0]
            out_cut[b + t, 1] = cut[a + t, 1]
    ncol = lo.shape[1]
    ub = np.uint64(base)
    for ii in range(owners.shape[0]):
        i = order[ii]
        head = np.int64(owners[i]) << OWNER_SHIFT | np.int64(slots[i]) << 1
        for t in range(offsets[i], offsets[i + 1]):
            k = np.int64(kinds[t])
            c = np.int64(cols[t]) if k == 1 else np.int64(-1)
            f, n = entry_lists(np.int64(labels[t] - ub), k == 1, sb[i, 0], sb[i, 1], base,
                               sf, si)
            for li in range(f, f + n):
                p = new_start[li] + size[li]
                size[li] += 1
                if 0 <= c < ncol:
                    out_cut[p, 0] = lo[i, c]
                    out_cut[p, 1] = hi[i, c]
                else:
                    out_cut[p, 0] = -np.inf
                    out_cut[p, 1] = np.inf
                out[p] = head | (c + 1) << COL_SHIFT | k


@njit
def label_slots(labels: Any, base: int, n_labels: int, idx: Any) -> int:
    """Each label's place in the index; the position of the first outside it, or -1.

    ``idx[i]``: label ``labels[i]``'s place; complete when every label is inside.
    """
    ub = np.uint64(base)
    for i in range(labels.shape[0]):
        lab = labels[i]
        if lab < ub or lab - ub >= np.uint64(n_labels):
            return i
        idx[i] = np.int64(lab - ub)
    return -1


@njit
def compose(offsets: Any, owners: Any, slots: Any, kinds: Any, cols: Any, lo: Any, hi: Any,
            entries: Any, cuts: Any) -> None:
    """The entries of subscriptions (see the module text) and their cut bounds.

    Subscription ``i`` (owner ``owners[i]``, slot ``slots[i]``) has entries
    ``offsets[i]..offsets[i + 1]`` of kinds ``kinds[t]``; a cut entry (kind 1) keeps column
    ``cols[t]`` (-1: none) and its float32 bounds ``lo[i, col]``, ``hi[i, col]``.
    """
    ncol = lo.shape[1]
    for i in range(owners.shape[0]):
        head = owners[i] << OWNER_SHIFT | slots[i] << 1
        for t in range(offsets[i], offsets[i + 1]):
            k = np.int64(kinds[t])
            c = np.int64(cols[t]) if k == 1 else np.int64(-1)
            if 0 <= c < ncol:
                cuts[t, 0] = lo[i, c]
                cuts[t, 1] = hi[i, c]
            else:
                cuts[t, 0] = -np.inf
                cuts[t, 1] = np.inf
            entries[t] = head | (c + 1) << COL_SHIFT | k
