"""An exact index from labels to subscriptions, for label spaces small enough to address.

Routing by filters (a counting Bloom filter per client) finds the *clients* whose filter
may hold an event's label; delivering exactly then means walking every subscription of
each such client. When the label space is small (the quotes space has 65,536 labels),
a list per label of the subscriptions that touch its cell is cheaper: an event reads the
list of its label and nothing else, so its cost follows the subscriptions that touch its
cell, not the number of clients or of subscriptions.

Each subscription has a *slot*: its owner (a client number), its row of bounds (the
caller's, see :meth:`LabelIndex.match`) and whether it is alive. Each of its labels gets an
*entry* in that label's list saying whether the subscription holds the cell wholly (every
event of the cell matches it) or cuts it (the event's values decide). Retiring a slot is
O(1): its entries stay, skipped, until a compaction drops them once they are as many as the
live ones; only then is the slot number given out again.

The lists live in one pool (:mod:`dls._indexkernels`): appending is amortised O(1), a full
list moves to the pool's end with twice the room. With :data:`dls._jit.ENABLED` False the
same structure is updated and read by numpy code (``*_reference``), which the tests hold
equal to the kernels.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dls import _indexkernels as _ik
from dls import _jit
from dls.exceptions import DLSError

__all__ = ["HOLDS", "MAX_LABELS", "CUTS", "IndexMatch", "LabelIndex"]

HOLDS, CUTS = 0, 1
#: The largest label space the index addresses directly (4 arrays of this many ints).
MAX_LABELS = 1 << 22


@dataclass(frozen=True)
class IndexMatch:
    """What :meth:`LabelIndex.match` found for a batch of events.

    Event ``e`` goes to ``owners[offsets[e]:offsets[e + 1]]`` (ascending). ``removed``:
    one owner per (event, owner) whose entries delivered nothing (the owner's filter
    would have matched by label). ``pending``: ``(events, slots)`` of cut cells of general
    rows whose values lie in the row's hull: the caller decides those (and, for one it
    delivers, takes its owner out of ``removed`` once). ``checked``: events whose values
    were compared with a row's.
    """

    offsets: np.ndarray
    owners: np.ndarray
    removed: np.ndarray
    pending: tuple[np.ndarray, np.ndarray]
    checked: int
    unread: int  # events whose cut cells were delivered without values (not ``ok``)


class LabelIndex:
    """Label -> entries of live subscriptions (slots), for labels ``base .. base + size``."""

    def __init__(self, base: int, n_labels: int, compiled: bool | None = None) -> None:
        """An empty index of ``n_labels`` labels from ``base`` (at most :data:`MAX_LABELS`).

        ``compiled``: the kernels (None: when :data:`dls._jit.ENABLED`) or numpy.
        """
        if not 0 < n_labels <= MAX_LABELS:
            raise DLSError(f"a label index addresses 1 to {MAX_LABELS} labels, got "
                           f"{n_labels}", field="n_labels", value=n_labels)
        self.base, self.n_labels = int(base), int(n_labels)
        self.compiled = _jit.ENABLED if compiled is None else compiled
        self._start = np.zeros(n_labels, dtype=np.int64)
        self._size = np.zeros(n_labels, dtype=np.int64)
        self._cap = np.zeros(n_labels, dtype=np.int64)
        self._pool = np.zeros(1024, dtype=np.int64)
        self._end = 0
        self._live = 0  # entries of alive slots
        self._dead = 0  # entries of retired slots not yet compacted
        self._alive = np.zeros(0, dtype=np.bool_)
        self._owner = np.zeros(0, dtype=np.int64)
        self._row = np.zeros(0, dtype=np.int64)
        self._slot_n = np.zeros(0, dtype=np.int64)  # entries per slot
        self._free: list[int] = []  # slots with no entry left
        self._swept: list[int] = []  # retired slots whose entries a compaction will drop
        self._slots_used = 0
        self._stamp = np.full(0, -1, dtype=np.int64)
        self._seen = np.full(0, -1, dtype=np.int64)
        self._tag = 0

    def __len__(self) -> int:
        """How many live subscriptions (slots) the index holds."""
        return self._slots_used - len(self._free) - len(self._swept)

    @property
    def entries(self) -> int:
        """Entries of live subscriptions."""
        return self._live

    def memory_bytes(self) -> int:
        """Bytes of the index's arrays."""
        return int(sum(a.nbytes for a in (self._start, self._size, self._cap, self._pool,
                                          self._alive, self._owner, self._row, self._slot_n,
                                          self._stamp, self._seen)))

    def owner_of(self, slot: int) -> int:
        """The owner of a slot."""
        return int(self._owner[slot])

    def row_of(self, slot: int) -> int:
        """The bounds row of a slot."""
        return int(self._row[slot])

    # -- changes ----------------------------------------------------------------------------
    def add(self, owners: np.ndarray, rows: np.ndarray, offsets: np.ndarray,
            labels: np.ndarray, kinds: np.ndarray) -> np.ndarray:
        """Add subscriptions; returns their slots.

        Subscription ``i`` belongs to owner ``owners[i]`` with bounds row ``rows[i]`` and
        has the entries ``labels[offsets[i]:offsets[i + 1]]`` of kinds :data:`HOLDS` /
        :data:`CUTS` (labels outside the index's range are refused: nothing changes).
        """
        owners = np.asarray(owners, dtype=np.int64)
        n = len(owners)
        labels = np.asarray(labels, dtype=np.uint64)
        idx = labels.astype(np.int64) - self.base  # uint64 -> int64: large ones go negative
        bad = (labels < np.uint64(self.base)) | (idx >= self.n_labels) | (idx < 0)
        if bad.any():
            v = int(labels[np.flatnonzero(bad)[0]])
            raise DLSError(f"label {v:#x} lies outside the index's labels "
                           f"[{self.base:#x}, {self.base + self.n_labels:#x})",
                           field="labels", value=v)
        slots = self._take_slots(n)
        self._owner[slots] = owners
        self._row[slots] = np.asarray(rows, dtype=np.int64)
        self._alive[slots] = True
        sizes: np.ndarray = np.diff(np.asarray(offsets, dtype=np.int64)).astype(np.int64)
        self._slot_n[slots] = sizes
        self._grow_owners(int(owners.max()) + 1 if n else 0)
        entries = 2 * np.repeat(slots, sizes) + np.asarray(kinds, dtype=np.int64)
        if self.compiled:
            self._room(idx)
            self._end = _ik.insert(self._pool, self._start, self._size, self._cap, self._end,
                                   idx, entries)
        else:
            self._insert_reference(idx, entries)
        self._live += len(entries)
        return slots

    def retire(self, slots: np.ndarray) -> None:
        """Retire subscriptions (their slots); compacts when dead entries outnumber live."""
        slots = np.asarray(slots, dtype=np.int64)
        if not len(slots):
            return
        if not self._alive[slots].all():
            bad = int(slots[np.flatnonzero(~self._alive[slots])[0]])
            raise DLSError(f"slot {bad} is not a live subscription of the index",
                           field="slot", value=bad)
        self._alive[slots] = False
        n = int(self._slot_n[slots].sum())
        self._live -= n
        self._dead += n
        self._swept += slots.tolist()
        if self._dead > max(self._live, 1 << 16):
            self.compact()

    def compact(self) -> None:
        """Drop the entries of retired slots (their slots are given out again)."""
        out = np.zeros(max(1024, self._live + self._live // 4 + 2 * self.n_labels),
                       dtype=np.int64)
        if self.compiled:
            self._end = _ik.compact(self._pool, self._start, self._size, self._cap,
                                    self._alive, self._slot_n, out)
        else:
            self._end = self._compact_reference(out)
        self._pool = out
        self._dead = 0
        self._free += self._swept
        self._swept = []

    # -- matching ---------------------------------------------------------------------------
    def match(self, labels: np.ndarray, origins: np.ndarray, ok: np.ndarray,
              values: np.ndarray, bounds: np.ndarray, general: np.ndarray) -> IndexMatch:
        """Who events of ``labels`` go to (see :class:`IndexMatch`).

        ``origins[e]``: an owner event ``e`` never goes to (-1: none); ``values[e]`` its
        values, one column per column of ``bounds`` (rows ``(n, columns, 2)``: ``[lo, hi]``
        per column), read when ``ok[e]``; ``general[row]``: that row's bounds are a hull
        only. A label outside the index's range goes to nobody.
        """
        ls = np.asarray(labels, dtype=np.uint64)
        idx = ls.astype(np.int64) - self.base
        idx[(ls < np.uint64(self.base)) | (idx >= self.n_labels) | (idx < 0)] = -1
        origins = np.asarray(origins, dtype=np.int64)
        if self.compiled:
            return self._match_compiled(idx, origins, ok, values, bounds, general)
        return self._match_reference(idx, origins, ok, values, bounds, general)

    def _match_compiled(self, idx: np.ndarray, origins: np.ndarray, ok: np.ndarray,
                        values: np.ndarray, bounds: np.ndarray, general: np.ndarray
                        ) -> IndexMatch:
        n = len(idx)
        valid = idx >= 0
        room = int(self._size[idx[valid]].sum())
        out_start = np.zeros(n + 1, dtype=np.int64)
        owners = np.empty(room, dtype=np.int64)
        removed = np.empty(room, dtype=np.int64)
        pend_e = np.empty(room, dtype=np.int64)
        pend_s = np.empty(room, dtype=np.int64)
        counts = np.zeros(5, dtype=np.int64)
        _ik.match(idx, origins, ok, values, self._pool, self._start, self._size, self._alive,
                  self._owner, self._row, bounds, general, self._stamp, self._seen,
                  self._tag, out_start, owners, removed, pend_e, pend_s, counts)
        self._tag += n
        k, r, g, checked, unread = counts.tolist()
        return IndexMatch(out_start, owners[:k], removed[:r], (pend_e[:g], pend_s[:g]),
                          checked, unread)

    def _match_reference(self, idx: np.ndarray, origins: np.ndarray, ok: np.ndarray,
                         values: np.ndarray, bounds: np.ndarray, general: np.ndarray
                         ) -> IndexMatch:
        """Numpy: every entry of every event gathered, checked and deduplicated at once."""
        n = len(idx)
        valid = idx >= 0
        sizes = np.where(valid, self._size[np.where(valid, idx, 0)], 0)
        first = np.cumsum(sizes) - sizes
        ev = np.repeat(np.arange(n, dtype=np.int64), sizes)
        at = np.repeat(self._start[np.where(valid, idx, 0)] - first, sizes) + np.arange(
            int(sizes.sum()))
        ent = self._pool[at]
        slot, cut = ent >> 1, (ent & 1).astype(bool)
        o = self._owner[slot]
        keep = self._alive[slot] & (o != origins[ev])
        ev, slot, cut, o = ev[keep], slot[keep], cut[keep], o[keep]
        r = self._row[slot]
        test = cut & ok[ev]
        inside = np.ones(len(ev), dtype=bool)
        if len(ev) and bounds.shape[1]:
            b, v = bounds[r], values[ev]
            inside = ((b[:, :, 0] <= v) & (v <= b[:, :, 1])).all(axis=1)
        pend = test & inside & general[r] if len(ev) else np.zeros(0, dtype=bool)
        deliver = ~test | (inside & ~pend)
        width = int(o.max()) + 1 if len(o) else 1
        every = np.unique(ev * width + o)
        hit = np.unique(ev[deliver] * width + o[deliver])
        gone = np.setdiff1d(every, hit, assume_unique=True) % width
        offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.bincount(hit // width, minlength=n), out=offsets[1:])
        return IndexMatch(offsets, hit % width, gone, (ev[pend], slot[pend]),
                          len(np.unique(ev[test])), len(np.unique(ev[cut & ~ok[ev]])))

    # -- inside -----------------------------------------------------------------------------
    def _take_slots(self, n: int) -> np.ndarray:
        reuse = min(n, len(self._free))
        got = self._free[len(self._free) - reuse:]
        del self._free[len(self._free) - reuse:]
        fresh = np.arange(self._slots_used, self._slots_used + n - reuse, dtype=np.int64)
        self._slots_used += n - reuse
        if self._slots_used > len(self._alive):
            size = max(self._slots_used, 2 * len(self._alive), 64)
            self._alive = _grown(self._alive, size)
            self._owner = _grown(self._owner, size)
            self._row = _grown(self._row, size)
            self._slot_n = _grown(self._slot_n, size)
        return np.concatenate([np.asarray(got, dtype=np.int64), fresh])

    def _grow_owners(self, n: int) -> None:
        if n > len(self._stamp):
            size = max(n, 2 * len(self._stamp), 64)
            self._stamp = np.concatenate([self._stamp,
                                          np.full(size - len(self._stamp), -1, np.int64)])
            self._seen = np.concatenate([self._seen,
                                         np.full(size - len(self._seen), -1, np.int64)])

    def _room(self, idx: np.ndarray) -> None:
        """Grow the pool so that appending to the lists of ``idx`` cannot pass its end."""
        touched, added = np.unique(idx, return_counts=True)
        need = int((2 * (self._size[touched] + added) + 4).sum())
        if self._end + need > len(self._pool):
            if self._dead + (self._end - self._live - self._dead) > self._live:
                self.compact()  # much of the pool is garbage: shed it before growing
            if self._end + need > len(self._pool):
                self._pool = _grown(self._pool, max(2 * len(self._pool), self._end + need))

    def _insert_reference(self, idx: np.ndarray, entries: np.ndarray) -> None:
        """Numpy: the pool laid out again with the new entries (lists exactly full)."""
        old_lab = np.repeat(np.arange(self.n_labels, dtype=np.int64), self._size)
        old_at = np.repeat(self._start - (np.cumsum(self._size) - self._size),
                           self._size) + np.arange(int(self._size.sum()))
        lab = np.concatenate([old_lab, idx])
        ent = np.concatenate([self._pool[old_at], entries])
        order = np.argsort(lab, kind="stable")
        self._size = np.bincount(lab, minlength=self.n_labels).astype(np.int64)
        self._cap = self._size.copy()
        self._start = np.cumsum(self._size) - self._size
        self._pool = np.concatenate([ent[order], np.zeros(1, dtype=np.int64)])
        self._end = len(ent)

    def _compact_reference(self, out: np.ndarray) -> int:
        at = np.repeat(self._start - (np.cumsum(self._size) - self._size),
                       self._size) + np.arange(int(self._size.sum()))
        lab = np.repeat(np.arange(self.n_labels, dtype=np.int64), self._size)
        ent = self._pool[at]
        keep = self._alive[ent >> 1]
        ent, lab = ent[keep], lab[keep]
        self._size = np.bincount(lab, minlength=self.n_labels).astype(np.int64)
        self._cap = self._size.copy()
        self._start = np.cumsum(self._size) - self._size
        self._slot_n[:] = np.bincount(ent >> 1, minlength=len(self._slot_n))[
            :len(self._slot_n)]
        out[:len(ent)] = ent
        return len(ent)


def _grown(a: np.ndarray, size: int) -> np.ndarray:
    out = np.zeros(size, dtype=a.dtype)
    out[:len(a)] = a
    return out
