"""Compiled kernels of the exact label index (:class:`dls.label_index.LabelIndex`).

The index keeps, per label of a small label space, a list of *entries* in one pool: an
entry is ``2 * slot + kind`` (kind 0: the slot's subscription holds the label's cell
wholly, 1: it cuts the cell and the event's values decide). Label ``l``'s list is
``pool[start[l]:start[l] + size[l]]`` with room for ``cap[l]``; a full list moves to the
pool's end with twice the room. Retired slots keep their entries until a compaction.

Like every kernel here these compile only when :data:`dls._jit.ENABLED`; the numpy
reference lives with the caller and ``tests/dls/test_label_index.py`` holds them equal.
"""

from __future__ import annotations

from typing import Any

from dls._jit import njit

__all__ = ["compact", "insert", "match"]


@njit
def insert(pool: Any, start: Any, size: Any, cap: Any, end: int, labels: Any,
           entries: Any) -> int:
    """Append ``entries[i]`` to label ``labels[i]``'s list; returns the pool's new end.

    The caller leaves room enough past ``end`` (:meth:`LabelIndex._room`).
    """
    for i in range(labels.shape[0]):
        lab = labels[i]
        n = size[lab]
        if n == cap[lab]:
            room = 4 if n < 2 else 2 * n
            at = start[lab]
            for t in range(n):
                pool[end + t] = pool[at + t]
            start[lab] = end
            cap[lab] = room
            end += room
        pool[start[lab] + n] = entries[i]
        size[lab] = n + 1
    return end


@njit
def compact(pool: Any, start: Any, size: Any, cap: Any, alive: Any, slot_n: Any,
            out: Any) -> int:
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
            s = e >> 1
            if alive[s]:
                out[end + k] = e
                slot_n[s] += 1
                k += 1
        start[lab] = end
        size[lab] = k
        room = k + k // 4 + (2 if k else 0)
        cap[lab] = room
        end += room
    return end


@njit
def match(labels: Any, origin: Any, ok: Any, values: Any, pool: Any, start: Any,
          size: Any, alive: Any, owner: Any, row: Any, bounds: Any, general: Any,
          stamp: Any, seen: Any, tag0: int, out_start: Any, out_owner: Any,
          removed: Any, pend_event: Any, pend_slot: Any, counts: Any) -> None:
    """Who each event goes to: its label's entries, deduplicated by owner.

    ``labels[e]``: the list of event ``e`` (-1: none); ``origin[e]``: an owner it never
    goes to (-1: none); ``ok[e]``: its values ``values[e]`` could be read (else a cut
    cell delivers, as by label). A cutting entry of a simple row delivers when every value
    lies in the row's bounds; of a general row (``general[row]``), when the values lie in
    its hull the pair is left to the caller (``pend_*``). Owners delivered to per event go
    to ``out_owner[out_start[e]:out_start[e + 1]]``, ascending; owners with entries that
    got nothing go to ``removed``. ``stamp``/``seen``: scratch by owner, never reset (tags
    from ``tag0``). ``counts``: delivered, removed, pending, events whose values were
    compared, events delivered by label for want of values.
    """
    k = 0
    g = 0
    r_n = 0
    checked = 0
    unread = 0
    n_num = bounds.shape[1]
    for e in range(labels.shape[0]):
        out_start[e] = k
        lab = labels[e]
        if lab < 0:
            continue
        tag = tag0 + e
        first = k
        at = start[lab]
        cand0 = r_n
        read = False
        blind = False
        for t in range(at, at + size[lab]):
            ent = pool[t]
            s = ent >> 1
            if not alive[s]:
                continue
            o = owner[s]
            if o == origin[e] or stamp[o] == tag:
                continue
            if seen[o] != tag:
                seen[o] = tag
                removed[r_n] = o  # a candidate until it is delivered to
                r_n += 1
            deliver = True
            if ent & 1 and not ok[e]:
                blind = True
            elif ent & 1:
                r = row[s]
                read = True
                for j in range(n_num):
                    v = values[e, j]
                    if v < bounds[r, j, 0] or v > bounds[r, j, 1]:
                        deliver = False
                        break
                if deliver and general[r]:
                    pend_event[g] = e
                    pend_slot[g] = s
                    g += 1
                    deliver = False
            if deliver:
                stamp[o] = tag
                out_owner[k] = o
                k += 1
        # ascending owners (lists are short: insertion sort)
        for i in range(first + 1, k):
            x = out_owner[i]
            j = i - 1
            while j >= first and out_owner[j] > x:
                out_owner[j + 1] = out_owner[j]
                j -= 1
            out_owner[j + 1] = x
        w = cand0
        for i in range(cand0, r_n):
            if stamp[removed[i]] != tag:
                removed[w] = removed[i]
                w += 1
        r_n = w
        checked += read
        unread += blind
    out_start[labels.shape[0]] = k
    counts[0] = k
    counts[1] = r_n
    counts[2] = g
    counts[3] = checked
    counts[4] = unread
