"""An exact index from labels to subscriptions, for label spaces small enough to address.

Routing by filters (a counting Bloom filter per client) finds the *clients* whose filter
may hold an event's label; delivering exactly then means walking every subscription of
each such client. When the label space is small (the quotes space has 65,536 labels),
a list per label of the subscriptions that touch its cell is cheaper: an event reads the
list of its label and nothing else, so its cost follows the subscriptions that touch its
cell, not the number of clients or of subscriptions.

Each subscription has a *slot*: its owner (a client number), its bounds (``[lo, hi]`` per
value column; for a *general* subscription a hull, the caller deciding inside it), the
caller's row number and whether it is alive. Each of its labels gets an *entry* in that
label's list saying whether the subscription holds the cell wholly (every event of the cell
matches it) or cuts it (the event's values decide); an entry also holds the owner and the
float32 bounds of one column its cell is cut in, so most events are decided from the list
alone, and only the rest read the slot's record (``1 + 2 * columns`` float64: general or
not, the bounds). Retiring a slot is O(1): its entries stay, skipped, until a compaction
drops them once they are as many as the live ones; only then is the slot number given out
again.

The lists live in one pool (:mod:`dls._indexkernels`): appending is amortised O(1), a full
list moves to the pool's end with twice the room. With :data:`dls._jit.ENABLED` False the
same structure is updated and read by numpy code (:mod:`dls.label_index_numpy`), which
the tests hold equal to the kernels.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dls import _indexkernels as _ik
from dls import _jit
from dls import _slicekernels as _sk
from dls import label_index_numpy as _np
from dls.exceptions import DLSError
from dls.label_index_numpy import outwards
from dls.label_slices import AutoSlices, Slicing

__all__ = ["CUTS", "HOLDS", "MAX_LABELS", "MAX_OWNERS", "IndexMatch", "LabelIndex"]

HOLDS, CUTS = _ik.HOLDS, _ik.CUTS
#: The largest label space the index addresses directly (4 arrays of this many ints).
MAX_LABELS = 1 << 22
#: Owners are numbered below this (an entry holds its owner in 24 bits).
MAX_OWNERS = 1 << 24


@dataclass(frozen=True)
class IndexMatch:
    """What :meth:`LabelIndex.match` found for a batch of events.

    Event ``e`` goes to ``owners[offsets[e]:offsets[e + 1]]`` (ascending). ``removed``:
    by owner, how many events it had live entries for and got nothing (the owner's filter
    would have matched by label). ``pending``: ``(events, slots)`` of cut cells of general
    rows whose values lie in the row's hull: the caller decides those (and, for one it
    delivers, takes one from its owner's ``removed``). ``checked``: events whose values
    were compared with a row's.
    """

    offsets: np.ndarray
    owners: np.ndarray
    removed: np.ndarray
    pending: tuple[np.ndarray, np.ndarray]
    checked: int
    unread: int  # events whose cut cells were delivered without values (not ``ok``)


#: entries an insert lays out at once rather than append, if the index holds fewer
BULK = 1 << 16
#: an insert of at least 1/BULK_SHARE of the entries held lays the pool out again at once:
#: appending costs more per entry than copying one (lists move and the pool grows);
#: measured at a million subscriptions, 239,000 more took 9.6 s appended, 5.2 s laid out
BULK_SHARE = 4


class LabelIndex:
    """Label -> entries of live subscriptions (slots), for labels ``base .. base + size``."""

    def __init__(self, base: int, n_labels: int, columns: int,
                 compiled: bool | None = None, slicing: Slicing | None = None,
                 auto_slices: bool = False) -> None:
        """An empty index of ``n_labels`` labels from ``base`` (at most :data:`MAX_LABELS`).

        ``columns``: the values an event brings for cut cells; ``compiled``: the kernels
        (None: when :data:`dls._jit.ENABLED`) or numpy; ``slicing``: how cells are sliced
        in one of the columns (:mod:`dls.label_slices`; None: one list per label, ever);
        ``auto_slices``: the index chooses the slices as its lists grow and shrink
        (:class:`dls.label_slices.AutoSlices`), from ``slicing``'s.
        """
        if not 0 < n_labels <= MAX_LABELS:
            raise DLSError(f"a label index addresses 1 to {MAX_LABELS} labels, got "
                           f"{n_labels}", field="n_labels", value=n_labels)
        self.slicing = slicing or Slicing(0, 0, 0, 0, 0.0, 1.0, 1)
        self._sliceable = slicing is not None
        self._auto = AutoSlices() if auto_slices and self._sliceable else None
        if self._sliceable and self.slicing.column >= columns:
            raise DLSError(f"slicing column {self.slicing.column} is not one of the index's "
                           f"{columns} columns", field="column", value=self.slicing.column)
        self.base, self.n_labels = int(base), int(n_labels)
        self.compiled = _jit.ENABLED if compiled is None else compiled
        self._lists = self.slicing.lists  # lists per label
        self._sf, self._si = self.slicing.params()
        n_lists = n_labels * self._lists
        self._start = np.zeros(n_lists, dtype=np.int64)
        self._size = np.zeros(n_lists, dtype=np.int64)
        self._cap = np.zeros(n_lists, dtype=np.int64)
        self._pool = np.zeros(1024, dtype=np.int64)
        self._cut = np.zeros((1024, 2), dtype=np.float32)  # per entry: its cut column's
        self._end = 0
        self._live = 0  # entries of alive slots
        self._dead = 0  # entries of retired slots not yet compacted
        self._alive = np.zeros(0, dtype=np.bool_)
        self._alive_bits = np.zeros(0, dtype=np.uint8)  # the same, 8 slots a byte
        self._owner = np.zeros(0, dtype=np.int64)
        self._row = np.zeros(0, dtype=np.int64)
        self.columns = int(columns)
        #: per slot: 1.0 if general, then lo, hi of each column
        self._rec = np.zeros((0, 1 + 2 * self.columns), dtype=np.float64)
        self._slot_n = np.zeros(0, dtype=np.int64)  # entries per slot
        self._slot_d = np.zeros(0, dtype=np.int64)  # its labels (entries less copies)
        self._distinct = 0  # labels of live slots
        self._free: list[int] = []  # slots with no entry left
        self._swept: list[int] = []  # retired slots whose entries a compaction will drop
        self._slots_used = 0
        self._stamp = np.full(0, -1, dtype=np.int64)
        self._seen = np.full(0, -1, dtype=np.int64)
        self._tag = 0
        # events matched with ``deferred`` and not yet counted by owner (:meth:`fold`):
        # per label, and the labels with any (``_dirty[0]`` of them, from ``_dirty[1]``)
        self._hits = np.zeros(0, dtype=np.int64)
        self._dirty = np.zeros(1, dtype=np.int64)
        self._folded = np.zeros(0, dtype=np.int64)  # by owner: folded, not yet taken

    def __len__(self) -> int:
        """How many live subscriptions (slots) the index holds."""
        return self._slots_used - len(self._free) - len(self._swept)

    @property
    def entries(self) -> int:
        """Entries of live subscriptions (one listed under several slices: each time)."""
        return self._live

    def memory_bytes(self) -> int:
        """Bytes of the index's arrays."""
        return int(sum(a.nbytes for a in (self._start, self._size, self._cap, self._pool,
                                          self._cut, self._alive, self._alive_bits,
                                          self._owner, self._row, self._slot_n,
                                          self._stamp, self._seen, self._rec, self._hits,
                                          self._dirty, self._folded)))

    def owner_of(self, slot: int) -> int:
        """The owner of a slot."""
        return int(self._owner[slot])

    def row_of(self, slot: int) -> int:
        """The bounds row of a slot."""
        return int(self._row[slot])

    # -- changes ----------------------------------------------------------------------------
    def add(self, owners: np.ndarray, rows: np.ndarray, bounds: np.ndarray,
            general: np.ndarray, offsets: np.ndarray, labels: np.ndarray, kinds: np.ndarray,
            cols: np.ndarray | None = None) -> np.ndarray:
        """Add subscriptions; returns their slots.

        Subscription ``i`` belongs to owner ``owners[i]``, is the caller's row ``rows[i]``
        with ``bounds[i]`` (``(columns, 2)``; ``general[i]``: a hull, see :meth:`match`),
        and has the entries ``labels[offsets[i]:offsets[i + 1]]`` of kinds :data:`HOLDS` /
        :data:`CUTS` (labels outside the index's range are refused: nothing changes).
        ``cols``: per entry, a column its subscription cuts the cell in (-1: none known),
        whose bounds the entry keeps to decide most events alone.
        """
        owners = np.asarray(owners, dtype=np.int64)
        n = len(owners)
        if n and (owners.min() < 0 or owners.max() >= MAX_OWNERS):
            wrong = int(owners[(owners < 0) | (owners >= MAX_OWNERS)][0])
            raise DLSError(f"owner {wrong} outside 0..{MAX_OWNERS - 1}", field="owners",
                           value=wrong)
        labels = np.asarray(labels, dtype=np.uint64)
        offsets = np.asarray(offsets, dtype=np.int64)
        kinds = np.asarray(kinds)
        if not np.issubdtype(kinds.dtype, np.integer):
            kinds = kinds.astype(np.int64)
        sb = self._slice_bounds(n, bounds)
        per_sub = np.zeros(n, dtype=np.int64)  # list entries of each subscription
        self._fold_into()  # lists and liveness change below
        # a batch large beside what the index holds (a restore, the first subscriptions,
        # a replayed tail) is laid out at once, its entries composed in place
        bulk = self.compiled and len(labels) >= max(self._live // BULK_SHARE, BULK)
        if bulk and self._auto is not None:  # sliced as the lists will be, before they are laid
            self._tune_for(labels, offsets, kinds, sb)
        if bulk:
            idx = np.zeros(len(self._size), dtype=np.int64)  # entries per list
            first_bad = _sk.list_counts(labels, self.base, self.n_labels, offsets, kinds, sb,
                                        self._sf, self._si, idx, per_sub)
        elif self.compiled:
            idx = np.empty(len(labels), dtype=np.int64)
            first_bad = _ik.label_slots(labels, self.base, self.n_labels, idx)
        else:
            idx = labels.astype(np.int64) - self.base  # uint64 -> int64: large ones negative
            bad = (labels < np.uint64(self.base)) | (idx >= self.n_labels) | (idx < 0)
            first_bad = int(np.flatnonzero(bad)[0]) if bad.any() else -1
        if first_bad >= 0:
            v = int(labels[first_bad])
            raise DLSError(f"label {v:#x} lies outside the index's labels "
                           f"[{self.base:#x}, {self.base + self.n_labels:#x})",
                           field="labels", value=v)
        slots = self._take_slots(n)
        self._owner[slots] = owners
        self._row[slots] = np.asarray(rows, dtype=np.int64)
        self._alive[slots] = True
        self._pack_alive(slots)
        general = np.asarray(general, dtype=bool)
        self._rec[slots, 0] = general
        self._rec[slots, 1:] = np.asarray(bounds, dtype=np.float64).reshape(n, -1)
        self._grow_owners(int(owners.max()) + 1 if n else 0)
        if bulk:
            self._lay_out(idx, n, labels, offsets, owners, slots, bounds, kinds, cols, sb)
        else:
            lists, src = self._spread(idx, offsets, kinds, sb, per_sub)
            if self.compiled:
                entries, cuts = self._compose(n, offsets, owners, slots, bounds, kinds, cols)
            else:
                entries, cuts = _np.compose(n, offsets, owners, slots, bounds, kinds, cols,
                                           self.columns)
            if src is not None:
                entries, cuts = entries[src], cuts[src]
            if self.compiled:
                self._insert_compiled(lists, entries, cuts)
            else:
                _np.insert(self, lists, entries, cuts)
        self._slot_n[slots] = per_sub  # a compaction on the way counted part of them
        self._slot_d[slots] = np.diff(offsets)
        self._live += int(per_sub.sum())
        self._distinct += len(labels)
        self._tune()
        return slots

    def _slice_bounds(self, n: int, bounds: np.ndarray) -> np.ndarray:
        """Per subscription its bounds in the sliced column (zeros if none)."""
        if not self._sliceable:
            return np.zeros((n, 2), dtype=np.float64)
        b = np.asarray(bounds, dtype=np.float64).reshape(n, self.columns, 2)
        return np.ascontiguousarray(b[:, self.slicing.column, :])

    def _spread(self, places: np.ndarray, offsets: np.ndarray, kinds: np.ndarray,
                sb: np.ndarray, per_sub: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """Entries at label ``places`` spread over their lists: ``(list, entry)`` pairs.

        Entry None: each entry once, in order. ``per_sub`` gets each subscription's pairs.
        """
        if self._lists == 1:
            per_sub[:] = np.diff(offsets)
            return places, None
        if self.compiled:
            first = np.empty(len(places), dtype=np.int64)
            count = np.empty(len(places), dtype=np.int64)
            _sk.entry_spans(places, offsets, kinds, sb, self.base, self._sf, self._si, first,
                            count)
        else:
            sub = np.repeat(np.arange(len(per_sub)), np.diff(offsets))
            first, count = self.slicing.entry_lists(places, self.base, kinds == CUTS,
                                                    sb[sub, 0], sb[sub, 1])
        ends = np.zeros(len(count) + 1, dtype=np.int64)
        np.cumsum(count, out=ends[1:])
        per_sub[:] = ends[offsets[1:]] - ends[offsets[:-1]]
        src = np.repeat(np.arange(len(places)), count)
        return np.repeat(first - ends[:-1], count) + np.arange(int(ends[-1])), src

    def _compose(self, n: int, offsets: np.ndarray, owners: np.ndarray, slots: np.ndarray,
                 bounds: np.ndarray, kinds: np.ndarray, cols: np.ndarray | None
                 ) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`add`'s entries and cut bounds, by one kernel (the numpy path is above)."""
        lo, hi = self._cut_bounds(n, bounds)
        total = len(kinds)
        entries = np.empty(total, dtype=np.int64)
        cuts = np.empty((total, 2), dtype=np.float32)
        _ik.compose(np.asarray(offsets, dtype=np.int64), owners, slots, kinds,
                    _columns(cols, total), lo, hi, entries, cuts)
        return entries, cuts

    def _cut_bounds(self, n: int, bounds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per subscription and column its bounds as float32, rounded outwards."""
        b = np.asarray(bounds, dtype=np.float64).reshape(n, self.columns, 2)
        return outwards(b[:, :, 0], -np.inf), outwards(b[:, :, 1], np.inf)

    def retire(self, slots: np.ndarray) -> None:
        """Retire subscriptions (their slots); compacts when dead entries outnumber live."""
        slots = np.asarray(slots, dtype=np.int64)
        if not len(slots):
            return
        if not self._alive[slots].all():
            bad = int(slots[np.flatnonzero(~self._alive[slots])[0]])
            raise DLSError(f"slot {bad} is not a live subscription of the index",
                           field="slot", value=bad)
        self._fold_into()
        self._alive[slots] = False
        self._pack_alive(slots)
        n = int(self._slot_n[slots].sum())
        self._live -= n
        self._dead += n
        self._distinct -= int(self._slot_d[slots].sum())
        self._swept += slots.tolist()
        if self._dead > max(self._live, 1 << 16):
            self.compact()
        self._tune()

    # -- slices -----------------------------------------------------------------------------
    def reslice(self, parts: int) -> None:
        """List every live entry again with ``parts`` slices a cell, in the same column.

        Drops the retired slots' entries, as :meth:`compact` does.
        """
        if not self._sliceable:
            raise DLSError("this index was made without slicing", field="parts",
                           value=parts)
        new = self.slicing.with_parts(parts)
        self._fold_into()  # the lists change
        if self.compiled:
            self._reslice_compiled(new)
        else:
            _np.reslice(self, new)
        self.slicing, self._lists = new, new.lists
        self._sf, self._si = new.params()
        self._live = int(self._size.sum())
        self._dead = 0
        self._free += self._swept
        self._swept = []

    def _reslice_compiled(self, new: Slicing) -> None:
        """:meth:`reslice` by the kernel: lists counted, sized, then filled."""
        sf2, si2 = new.params()
        counts = np.zeros(self.n_labels * new.lists, dtype=np.int64)
        none, none_cut = np.zeros(0, dtype=np.int64), np.zeros((0, 2), dtype=np.float32)
        args = (self._pool, self._cut, self._start, self._size, self._alive, self._rec,
                self.base, self._sf, self._si, sf2, si2, counts, self._slot_n)
        _sk.reslice(*args, none, none_cut, none)
        cap = counts + counts // 4 + 2 * (counts > 0)
        start = np.zeros(len(cap) + 1, dtype=np.int64)
        np.cumsum(cap, out=start[1:])
        end = int(start[-1])
        out = np.zeros(end + 1024, dtype=np.int64)
        out_cut = np.zeros((end + 1024, 2), dtype=np.float32)
        counts[:] = 0
        _sk.reslice(*args, out, out_cut, start)
        self._pool, self._cut, self._start, self._size = out, out_cut, start[:-1], counts
        self._cap, self._end = cap, end

    def _used_labels(self) -> np.ndarray:
        """Entries per label, copies included."""
        return self._size.reshape(self.n_labels, self._lists).sum(axis=1)

    def _tune(self) -> None:
        """Automatic slicing, when it is due (:class:`dls.label_slices.AutoSlices`)."""
        if self._auto is None or not self._auto.due(self._distinct):
            return
        parts = self._auto.parts(self.slicing.parts, self._distinct,
                                 int(np.count_nonzero(self._used_labels())))
        if parts != self.slicing.parts:
            self.reslice(parts)

    def _tune_for(self, labels: np.ndarray, offsets: np.ndarray, kinds: np.ndarray,
                  sb: np.ndarray) -> None:
        """Automatic slicing for a bulk insert of ``labels``, before it is laid out."""
        per_label = self._used_labels()  # counted unsliced: one list a label
        unsliced_f, unsliced_i = self.slicing.with_parts(1).params()
        if _sk.list_counts(labels, self.base, self.n_labels, offsets, kinds, sb, unsliced_f,
                           unsliced_i, per_label, np.zeros(len(offsets), dtype=np.int64)) >= 0:
            return  # a label outside: refused next, nothing changes
        assert self._auto is not None  # noqa: S101 - called when automatic
        parts = self._auto.parts(self.slicing.parts, self._distinct + len(labels),
                                 int(np.count_nonzero(per_label)))
        if parts != self.slicing.parts:
            self.reslice(parts)

    def compact(self, inserting: int = 0) -> None:
        """Drop the entries of retired slots (their slots are given out again).

        ``inserting``: entries of an insert under way, in the pool but not yet counted live.
        """
        live = self._live + inserting
        size = max(1024, 2 * live + 2 * len(self._size))
        out = np.zeros(size, dtype=np.int64)
        out_cut = np.zeros((size, 2), dtype=np.float32)
        if self.compiled:
            self._end = _ik.compact(self._pool, self._cut, self._start, self._size, self._cap,
                                    self._alive, self._slot_n, out, out_cut)
        else:
            self._end = _np.compact(self, out, out_cut)
        self._pool, self._cut = out, out_cut
        self._dead = 0
        self._free += self._swept
        self._swept = []

    # -- matching ---------------------------------------------------------------------------
    def match(self, labels: np.ndarray, origins: np.ndarray, ok: np.ndarray,
              values: np.ndarray, deferred: bool = False) -> IndexMatch:
        """Who events of ``labels`` go to (see :class:`IndexMatch`).

        ``origins[e]``: an owner event ``e`` never goes to (-1: none); ``values[e]`` its
        values (``columns`` of them), read when ``ok[e]``: a cut cell delivers when every
        value lies in the slot's bounds, or, for a general slot, is left to the caller. A
        label outside the index's range goes to nobody.

        ``deferred``: an event with no origin is counted in ``removed`` only for the
        owners it goes to (one taken from each); the events that had each owner's entries
        are counted by :meth:`fold`, once per label however many events it had. ``removed``
        of the match and of the folds add up to the counts without ``deferred``. Counting
        by owner at each event would touch every live owner of the label, most of a
        long list's cost; a fold touches them once for all the label's events.
        """
        ls = np.asarray(labels, dtype=np.uint64)
        idx = ls.astype(np.int64) - self.base
        idx[(ls < np.uint64(self.base)) | (idx >= self.n_labels) | (idx < 0)] = -1
        origins = np.asarray(origins, dtype=np.int64)
        if self.compiled:
            return self._match_compiled(idx, origins, ok, values, deferred)
        return IndexMatch(*_np.match(self, idx, origins, ok, values))  # counts at once

    def fold(self) -> np.ndarray:
        """By owner, the events :meth:`match` deferred that had the owner's live entries.

        Counts every label's deferred events since the last fold (the index also folds
        before each change of its lists or liveness, which would change whose they are)
        and clears them: an array as long as the owners known, zeros if nothing was.
        """
        self._fold_into()
        out = np.zeros(len(self._stamp), dtype=np.int64)
        out[:len(self._folded)] = self._folded
        self._folded[:] = 0
        return out

    def _fold_into(self) -> None:
        """Fold the deferred events into ``_folded`` (the kernel; nothing if none)."""
        if not self._dirty[0]:
            return
        if len(self._folded) < len(self._stamp):
            self._folded = _grown(self._folded, len(self._stamp))
        self._tag += _ik.fold(self._hits, self._dirty, self._pool, self._start, self._size,
                              self._alive_bits, self._seen, self._tag, self._folded,
                              self._lists)

    def _match_compiled(self, idx: np.ndarray, origins: np.ndarray, ok: np.ndarray,
                        values: np.ndarray, deferred: bool) -> IndexMatch:
        n = len(idx)
        if deferred and not len(self._hits):  # memory for labels only once asked
            self._hits = np.zeros(self.n_labels, dtype=np.int64)
            self._dirty = np.zeros(self.n_labels + 1, dtype=np.int64)
        room = _ik.label_room(idx, self._size, self._lists)
        out_start = np.zeros(n + 1, dtype=np.int64)
        owners = np.empty(room, dtype=np.int64)
        removed = np.zeros(len(self._stamp), dtype=np.int64)
        pend_e = np.empty(room, dtype=np.int64)
        pend_s = np.empty(room, dtype=np.int64)
        counts = np.zeros(5, dtype=np.int64)
        if not self.columns:  # the kernel reads a column of each event, unused here
            values = np.zeros((n, 1), dtype=np.float64)
        _ik.match(idx, origins, ok, values, self._pool, self._cut, self._start, self._size,
                  self._alive_bits, self._rec, self._stamp, self._seen, self._tag, out_start,
                  owners, removed, pend_e, pend_s, counts,
                  self._hits if deferred else self._hits[:0], self._dirty, self.base, self._sf,
                  self._si)
        self._tag += n
        k, _, g, checked, unread = counts.tolist()
        return IndexMatch(out_start, owners[:k], removed, (pend_e[:g], pend_s[:g]),
                          checked, unread)

    # -- inside -----------------------------------------------------------------------------
    def _take_slots(self, n: int) -> np.ndarray:
        reuse = min(n, len(self._free))
        got = self._free[len(self._free) - reuse:]
        del self._free[len(self._free) - reuse:]
        if self._slots_used + n - reuse > _ik.SLOT_MASK:
            raise DLSError(f"a label index holds at most {_ik.SLOT_MASK} subscriptions",
                           field="slots", value=self._slots_used + n - reuse)
        fresh = np.arange(self._slots_used, self._slots_used + n - reuse, dtype=np.int64)
        self._slots_used += n - reuse
        if self._slots_used > len(self._alive):
            size = max(self._slots_used, 2 * len(self._alive), 64)
            self._alive = _grown(self._alive, size)
            self._owner = _grown(self._owner, size)
            self._row = _grown(self._row, size)
            rec = np.zeros((size, self._rec.shape[1]), dtype=np.float64)
            rec[:len(self._rec)] = self._rec
            self._rec = rec
            self._slot_n = _grown(self._slot_n, size)
            self._slot_d = _grown(self._slot_d, size)
        return np.concatenate([np.asarray(got, dtype=np.int64), fresh])

    def _pack_alive(self, slots: np.ndarray) -> None:
        """The bits of ``_alive`` (which the match kernel reads) again, around ``slots``.

        A bit per slot keeps the liveness of a million slots in 128 KiB, within a core's
        cache: a long list reads it at random.
        """
        if len(self._alive_bits) * 8 < len(self._alive):
            self._alive_bits = np.packbits(self._alive, bitorder="little")
            return
        if not len(slots):
            return
        lo, hi = int(slots.min()) >> 3, (int(slots.max()) >> 3) + 1
        self._alive_bits[lo:hi] = np.packbits(self._alive[8 * lo:8 * hi], bitorder="little")

    def _grow_owners(self, n: int) -> None:
        if n > len(self._stamp):
            size = max(n, 2 * len(self._stamp), 64)
            self._stamp = np.concatenate([self._stamp,
                                          np.full(size - len(self._stamp), -1, np.int64)])
            self._seen = np.concatenate([self._seen,
                                         np.full(size - len(self._seen), -1, np.int64)])

    def _insert_compiled(self, idx: np.ndarray, entries: np.ndarray, cuts: np.ndarray
                         ) -> None:
        """The insert kernel, the pool grown (or first compacted) each time it runs out."""
        done = 0
        while True:
            self._end, done = _ik.insert(self._pool, self._cut, self._start, self._size,
                                         self._cap, self._end, idx, entries, cuts, done)
            if done == len(idx):
                return
            # a list cannot move: shed the garbage once it is half the pool (moved lists'
            # old places, retired entries; lists' spare room is up to half of a list),
            # else grow it. At 4x, a million subscriptions' pool ended 3.3x its live
            # entries (3.4 GB; new memory is dear where pages fault from a host)
            if self._end > 2 * (self._live + done):
                self.compact(done)
            room = 2 * int(self._size[idx[done]]) + 8
            if self._end + room > len(self._pool):
                size = max(2 * len(self._pool), self._end + room)
                self._grow_pool(size)

    def _grow_pool(self, size: int) -> None:
        """The pool (and its cut bounds) grown to ``size`` entries, zeros after.

        The pool is the index's largest array: copied into fresh memory at each growth,
        every page of it was touched again. When nothing else holds it (numpy checks),
        it is resized where it is, and the system moves its pages rather than its bytes.
        """
        try:
            self._pool.resize(size, refcheck=True)
            self._cut.resize((size, 2), refcheck=True)
        except ValueError:  # held elsewhere (a caller's view): copies
            self._pool, self._cut = _grown(self._pool, size), _grown(self._cut, size)

    def _lay_out(self, counts: np.ndarray, n: int, labels: np.ndarray, offsets: np.ndarray,
                 owners: np.ndarray, slots: np.ndarray, bounds: np.ndarray,
                 kinds: np.ndarray, cols: np.ndarray | None, sb: np.ndarray) -> None:
        """A bulk insert: each list sized once, the new entries composed in their places.

        Every list gets room for what it gets and a quarter more; the old lists are copied
        once (:func:`dls._indexkernels.lay_out`). ``counts``: new entries per list;
        ``sb``: the subscriptions' bounds in the sliced column.

        Nothing of the batch's size is made beside the new pool: at a million subscriptions
        each array of one number per entry is half a gigabyte, and fresh memory is slow to
        touch the first time. At a million subscriptions, writing them in the order of their
        first labels took the lay-out from 12.0 s to 5.9 s (one list per label).
        """
        size = self._size + counts
        cap = np.maximum(self._cap, size + size // 4)
        start = np.cumsum(cap) - cap
        total = int(cap.sum())
        out = np.zeros(total + 1024, dtype=np.int64)
        out_cut = np.zeros((total + 1024, 2), dtype=np.float32)
        lo, hi = self._cut_bounds(n, bounds)
        # subscriptions in the order of their first label, then of their sliced column:
        # those written one after the other go to the same lists, whose ends stay in the
        # cache (in the order given, each entry went to a list far from the last one's)
        firsts = labels[np.minimum(offsets[:-1], len(labels) - 1)] if len(labels) else sb[:, 0]
        order = np.lexsort((sb[:, 0], firsts))
        _ik.lay_out(self._pool, self._cut, self._start, self._size, start, labels, self.base,
                    offsets, owners, slots, kinds, _columns(cols, len(labels)), lo, hi, sb,
                    self._sf, self._si, order, out, out_cut)
        self._pool, self._cut, self._start, self._cap, self._end = out, out_cut, start, cap, total



def _columns(cols: np.ndarray | None, n: int) -> np.ndarray:
    """Entries' cut columns as given (any integer type), or -1 for each of ``n``."""
    if cols is None:
        return np.full(n, -1, dtype=np.int8)
    cols = np.asarray(cols)
    return cols if np.issubdtype(cols.dtype, np.integer) else cols.astype(np.int64)


def _grown(a: np.ndarray, size: int) -> np.ndarray:
    out = np.zeros((size, *a.shape[1:]), dtype=a.dtype)
    out[:len(a)] = a
    return out

