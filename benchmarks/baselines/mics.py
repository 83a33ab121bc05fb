"""MICS (Jafarpour et al., DEBS 2009) as the DLS paper describes it in §2.2, with deletion.

**Model.** Each of the ``d`` numeric attributes is cut into ``g = 2**bits`` equal cells
(the same cell rule as DLS: ``min(g-1, floor((v-low)*g/(high-low)))``), and the cells are
numbered along a Hilbert curve (:mod:`benchmarks.baselines.hilbert`). A subscription box
touches a set of cells; sorted by curve position, those cells fall into maximal runs of
consecutive positions, the subscription's *ranges*. An event is one cell, so one position.

**Index.** The broker keeps the ranges of all its subscriptions in one ordered index over
curve positions. The boundaries of every stored range (its start and one past its end)
cut the curve into disjoint *segments*; each segment lists the subscriptions whose ranges
cover it (postings). Matching an event is one ordered search for the segment holding its
position (the B+-tree descent) and a read of that segment's postings. Here the index is a
sorted numpy array of segment starts plus the postings as sorted ``start << 32 | sub``
keys, a B+-tree's leaf level laid out flat: a search is the same ``O(log S)`` binary
search (a whole batch of events in one ``searchsorted``). An insert merges its batch
into the arrays in ``O(S + P)`` (plus sorting the new postings) where a B+-tree pays
``O(log S)`` per range, so an insert batch has a fixed cost of a pass over the index
(about 20 ms at 500K subscriptions, d = 3) and large batches are what make it fast. A
delete finds its postings by binary search and only marks them dead (``O(k log P)``);
they are dropped, and segments merged, when a quarter of the postings are dead
(:meth:`MICSMatcher.compact`), as a B+-tree merges underfull leaves.

**Aggregation and traffic.** Towards a neighbour the broker advertises the union of its
subscriptions' ranges. A new range already covered by stored ranges forwards nothing;
otherwise the parts of it nobody covered yet are forwarded, one *range* per maximal run of
newly covered positions (the unit of the paper's Tables 3-4). A batch costs exactly what
inserting its subscriptions one at a time, in order, would. Coverage is counted per
segment (its number of postings), so deletion, which the paper's MICS does not have,
removes exactly what a subscription inserted: a segment is withdrawn when its last
covering subscription leaves, again one range per maximal run, attributed to the last
deleted subscription of the batch that covered it (the one-at-a-time result).

**Precision.** Cells make MICS approximate, like DLS: a subscription covers every cell its
box touches, so routing on cells alone delivers some events just outside the box. The DLS
paper compares against that cell-level MICS and says nothing of a final check. Here
``precision="exact"`` (the default) checks each candidate subscription's box against the
event, so deliveries are exactly the brute-force ones; ``precision="cell"`` stops at the
cells and then delivers exactly what a DLS direct-address bank delivers (same cells).
Traffic and the index are the same in both.

**Against the paper's numbers.** The paper's Table 3 gives MICS exactly one forwarded
range per subscription under the uniform workload (100,000 at 100K, ..., 500,000 at
500K), i.e. no aggregation at all, while its DLS rows saturate at the number of cells.
Aggregating as described above, MICS saturates too, at the number of maximal runs the
covered cells form along the curve (on this project's workload: 21,797 ranges at 100K
uniform subscriptions, d = 3, g = 32, against 32,767 DLS labels). The paper's uniform row
cannot come from range aggregation (its Zipf row, about g, could); this module counts
aggregated ranges, as the tables' heading says, and the report should say so.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from benchmarks.baselines._common import check_boxes, check_events, check_ids, pairs_to_csr
from benchmarks.baselines.hilbert import HilbertCurve
from benchmarks.workload import DOMAIN_HIGH

__all__ = ["MICSMatcher"]

_SHIFT = np.uint64(32)
_DENSE_KEYS = 1 << 26  # curves up to this many positions find bounds with a byte map
_CHUNK_CELLS = 1 << 21  # cells expanded at once when turning boxes into ranges
_LOW32 = np.uint64(0xFFFFFFFF)


def _csr_gather(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Indexes ``starts[i] .. starts[i] + counts[i] - 1`` for every i, concatenated."""
    total = int(counts.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    first = np.cumsum(counts) - counts
    return np.repeat(starts - first, counts) + np.arange(total, dtype=np.int64)


def _merge_sorted(parts: list[np.ndarray]) -> np.ndarray:
    """Concatenate sorted uint64 arrays into one sorted array (timsort merges the runs)."""
    parts = [p for p in parts if len(p)]
    if not parts:
        return np.empty(0, dtype=np.uint64)
    if len(parts) == 1:
        return parts[0]
    return np.sort(np.concatenate(parts), kind="stable")


def _count_runs(group: np.ndarray, pos: np.ndarray) -> int:
    """Number of maximal runs ``pos, pos+1, ...`` within each group; rows sorted by both."""
    if len(pos) == 0:
        return 0
    brk = (group[1:] != group[:-1]) | (pos[1:] != pos[:-1] + 1)
    return 1 + int(brk.sum())


class MICSMatcher:
    """Hilbert-range subscription index with range aggregation (see the module docstring).

    Args:
        d: Number of numeric attributes.
        g: Cells per attribute, a power of two with ``g**d <= 2**32``.
        n_clients: Owners are client indexes in ``[0, n_clients)``.
        low: Lower end of every attribute's domain.
        high: Upper end of every attribute's domain.
        precision: ``"exact"`` (check boxes) or ``"cell"`` (the paper's cell-level MICS).
        cell_budget: Most cells one subscription may touch (a larger one is refused).
        hilbert_table: Keep a cell -> position lookup table (``None``: when the grid has
            at most 2**22 cells; the table takes 4 bytes per cell and is counted in
            :meth:`memory_bytes`); without one, positions are computed (about 0.14 us
            per cell at 8 bits per attribute, d = 3).
        name: Benchmark system name (default ``mics`` / ``mics-cell``).
    """

    supports_delete = True
    #: What ``insert`` / ``delete`` count.
    traffic_unit = "ranges"

    def __init__(self, d: int, g: int, n_clients: int, *, low: float = 0.0,
                 high: float = float(DOMAIN_HIGH),
                 precision: Literal["exact", "cell"] = "exact", cell_budget: int = 1 << 16,
                 hilbert_table: bool | None = None, name: str | None = None) -> None:
        if not isinstance(d, int) or d < 1:
            raise ValueError(f"d must be a positive integer, got {d!r}")
        if not isinstance(g, int) or g < 2 or g & (g - 1):
            raise ValueError(f"g must be a power of two >= 2, got {g!r}")
        bits = g.bit_length() - 1
        if d * bits > 32:
            raise ValueError(f"g**d must be at most 2**32 cells, got g={g}, d={d}")
        if not isinstance(n_clients, int) or n_clients < 1:
            raise ValueError(f"n_clients must be a positive integer, got {n_clients!r}")
        if not (np.isfinite(low) and np.isfinite(high) and low < high):
            raise ValueError(f"domain must be finite with low < high, got [{low}, {high}]")
        if precision not in ("exact", "cell"):
            raise ValueError(f"precision must be 'exact' or 'cell', got {precision!r}")
        if not isinstance(cell_budget, int) or cell_budget < 1:
            raise ValueError(f"cell_budget must be a positive integer, got {cell_budget!r}")
        self.d, self.g, self.bits = d, g, bits
        self.n_clients = n_clients
        self.low, self.high = float(low), float(high)
        self.precision = precision
        self.cell_budget = cell_budget
        self.name = name or ("mics" if precision == "exact" else "mics-cell")
        self.n_keys = 1 << (d * bits)
        self._curve = HilbertCurve(d, bits, table=hilbert_table)
        # Per subscription, indexed by insertion number.
        self._n = 0
        self._lo = np.empty((d, 0), dtype=np.float64)
        self._hi = np.empty((d, 0), dtype=np.float64)
        self._owner = np.empty(0, dtype=np.int32)
        self._alive = np.empty(0, dtype=bool)
        # Ranges of live subscriptions (curve positions, inclusive).
        self._r_start = np.empty(0, dtype=np.uint32)
        self._r_end = np.empty(0, dtype=np.uint32)
        self._r_sub = np.empty(0, dtype=np.uint32)
        # The index: segment starts, postings (start << 32 | sub, sorted), CSR pointers,
        # deleted postings not yet dropped, and live postings per segment (its coverage).
        self._bounds = np.zeros(1, dtype=np.int64)
        self._post = np.empty(0, dtype=np.uint64)
        self._ptr = np.zeros(2, dtype=np.int64)
        self._dead = np.zeros(0, dtype=bool)
        self._n_dead = 0
        self._cov = np.zeros(1, dtype=np.int64)

    # -- introspection ------------------------------------------------------------------
    def __len__(self) -> int:
        return int(self._alive[: self._n].sum())

    @property
    def n_segments(self) -> int:
        """Segments the curve is cut into (1 when empty; see :meth:`compact`)."""
        return len(self._bounds)

    @property
    def n_ranges(self) -> int:
        """Ranges held by live subscriptions."""
        return int(self._alive[self._r_sub.astype(np.int64)].sum())

    def ranges_of(self, sub: int) -> list[tuple[int, int]]:
        """The ``(start, end)`` curve ranges a live subscription was stored as."""
        rows = np.flatnonzero(self._r_sub == sub)
        return [(int(self._r_start[r]), int(self._r_end[r])) for r in rows]

    def advertised(self) -> list[tuple[int, int]]:
        """The maximal ranges currently advertised to a neighbour (union of all ranges)."""
        segs = np.flatnonzero(self._cov > 0)
        if len(segs) == 0:
            return []
        ends = np.append(self._bounds[1:], self.n_keys) - 1
        brk = np.flatnonzero(segs[1:] != segs[:-1] + 1) + 1
        first = np.concatenate([[0], brk])
        last = np.concatenate([brk - 1, [len(segs) - 1]])
        return [(int(self._bounds[segs[a]]), int(ends[segs[b]]))
                for a, b in zip(first.tolist(), last.tolist(), strict=True)]

    def index_state(self) -> tuple[np.ndarray, np.ndarray]:
        """Copies of the segment starts and the postings ``(start, sub)`` pairs (sorted).

        Compacts first, so that the state depends only on the live subscriptions.
        """
        self.compact()
        return self._bounds.copy(), self._post.copy()

    def memory_bytes(self) -> int:
        """Bytes of the index, the ranges, the per-subscription arrays and the curve table."""
        per_sub = self._n * (16 * self.d + 4 + 1)
        return int(self._bounds.nbytes + self._post.nbytes + self._ptr.nbytes
                   + self._dead.nbytes + self._cov.nbytes + self._r_start.nbytes
                   + self._r_end.nbytes + self._r_sub.nbytes
                   + per_sub + self._curve.memory_bytes())

    # -- helpers ----------------------------------------------------------------------------
    def cells(self, values: np.ndarray) -> np.ndarray:
        """Cell index (int64) of in-domain values (any shape), as DLS computes it."""
        v = np.asarray(values, dtype=np.float64)
        raw = np.floor(((v - self.low) * float(self.g)) / (self.high - self.low))
        return np.minimum(float(self.g - 1), raw).astype(np.int64)

    def box_ranges(self, lo_c: np.ndarray, hi_c: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Ranges of boxes of cells ``(n, d)``: ``(row, start, end)``, by row then start."""
        span = hi_c - lo_c + 1
        tot = np.prod(span, axis=1)
        over = tot > self.cell_budget
        if over.any():
            r = int(np.flatnonzero(over)[0])
            raise ValueError(f"subscription {r} touches {int(tot[r])} cells, more than "
                             f"cell_budget={self.cell_budget}")
        n = len(tot)
        row = np.repeat(np.arange(n, dtype=np.int64), tot)
        rest = np.arange(len(row), dtype=np.int64) - np.repeat(np.cumsum(tot) - tot, tot)
        coords = np.empty((len(row), self.d), dtype=np.int64)
        for i in range(self.d - 1, -1, -1):
            s = span[row, i]
            coords[:, i] = lo_c[row, i] + rest % s
            rest //= s
        keys = self._curve.index(coords)
        comb = (row.astype(np.uint64) << _SHIFT) | keys
        comb.sort()
        row_s = (comb >> _SHIFT).astype(np.int64)
        key_s = (comb & _LOW32).astype(np.int64)
        if len(key_s) == 0:
            empty = np.zeros(0, dtype=np.int64)
            return empty, empty, empty
        brk = np.ones(len(key_s), dtype=bool)
        brk[1:] = (row_s[1:] != row_s[:-1]) | (key_s[1:] != key_s[:-1] + 1)
        first = np.flatnonzero(brk)
        last = np.append(first[1:] - 1, len(key_s) - 1)
        return row_s[first], key_s[first], key_s[last]

    def _ranges_chunked(self, lo_c: np.ndarray, hi_c: np.ndarray
                        ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`box_ranges` over chunks of at most ``_CHUNK_CELLS`` cells (bounded memory)."""
        tot = np.prod(hi_c - lo_c + 1, axis=1)
        if int(tot.sum()) <= _CHUNK_CELLS:
            return self.box_ranges(lo_c, hi_c)
        if (tot > self.cell_budget).any():
            return self.box_ranges(lo_c, hi_c)  # raises, naming the row in the whole batch
        ends = np.searchsorted(np.cumsum(tot), np.arange(_CHUNK_CELLS, int(tot.sum()),
                                                         _CHUNK_CELLS), side="right")
        cuts = [0, *sorted(set(ends.tolist()) - {0}), len(tot)]
        parts = []
        for a, b in zip(cuts[:-1], cuts[1:], strict=True):
            if a < b:
                row, rs, re = self.box_ranges(lo_c[a:b], hi_c[a:b])
                parts.append((row + a, rs, re))
        return (np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]),
                np.concatenate([p[2] for p in parts]))

    def _grow(self, need: int) -> None:
        cap = len(self._owner)
        if need <= cap:
            return
        new = max(need, 2 * cap, 1024)
        for name in ("_lo", "_hi"):
            arr = np.empty((self.d, new), dtype=np.float64)
            arr[:, : self._n] = getattr(self, name)[:, : self._n]
            setattr(self, name, arr)
        owner = np.empty(new, dtype=np.int32)
        owner[: self._n] = self._owner[: self._n]
        alive = np.zeros(new, dtype=bool)
        alive[: self._n] = self._alive[: self._n]
        self._owner, self._alive = owner, alive

    def _bounds_of(self, *keys: np.ndarray) -> np.ndarray:
        """Sorted distinct positions below ``n_keys`` among ``keys`` (and always 0)."""
        if self.n_keys <= _DENSE_KEYS:
            mark = np.zeros(self.n_keys + 1, dtype=bool)
            mark[0] = True
            for k in keys:
                mark[k] = True
            return np.flatnonzero(mark[: self.n_keys]).astype(np.int64)
        cand = np.concatenate([np.zeros(1, dtype=np.int64), *keys])
        return np.unique(cand[cand < self.n_keys])

    def _set_postings(self, post: np.ndarray) -> None:
        self._post = post
        lower = self._bounds.astype(np.uint64) << _SHIFT
        self._ptr = np.append(np.searchsorted(post, lower), len(post)).astype(np.int64)
        self._dead = np.zeros(len(post), dtype=bool)
        self._n_dead = 0
        self._cov = np.diff(self._ptr)

    def compact(self) -> None:
        """Drop deleted postings and ranges, and merge segments no live range separates.

        Deletion only marks postings dead (and keeps segment bounds); this rewrites the
        index as a fresh insert of the live subscriptions would build it. It runs by
        itself once a quarter of the postings are dead.
        """
        keep_r = self._alive[self._r_sub.astype(np.int64)]
        if not keep_r.all():
            self._r_start = self._r_start[keep_r]
            self._r_end = self._r_end[keep_r]
            self._r_sub = self._r_sub[keep_r]
        newb = self._bounds_of(self._r_start.astype(np.int64),
                               self._r_end.astype(np.int64) + 1)
        post = self._post[~self._dead] if self._n_dead else self._post
        n_seg = len(self._bounds)
        if len(newb) != n_seg and len(post):
            # Postings of segments that merged into their left neighbour move there.
            start = (post >> _SHIFT).astype(np.int64)
            gone_b = np.ones(n_seg, dtype=bool)
            gone_b[np.searchsorted(self._bounds, newb)] = False
            moved = gone_b[np.searchsorted(self._bounds, start)]
            if moved.any():
                seg = np.searchsorted(newb, start[moved], side="right") - 1
                remapped = np.unique((newb[seg].astype(np.uint64) << _SHIFT)
                                     | (post[moved] & _LOW32))
                merged = _merge_sorted([post[~moved], remapped])
                # A remapped posting may equal one that stayed (same segment, same sub).
                dup = np.zeros(len(merged), dtype=bool)
                dup[1:] = merged[1:] == merged[:-1]
                post = merged[~dup] if dup.any() else merged
        self._bounds = newb
        self._set_postings(post)

    # -- the Matcher interface ----------------------------------------------------------------
    def insert(self, lo: np.ndarray, hi: np.ndarray, owners: np.ndarray) -> int:
        """Add subscriptions; return the ranges forwarded to one neighbour."""
        lo_f, hi_f, own = check_boxes(lo, hi, owners, self.d, self.n_clients, self.low,
                                      self.high)
        n = len(own)
        if n == 0:
            return 0
        if self._n + n >= 1 << 32:
            raise ValueError("MICSMatcher holds at most 2**32 subscriptions")
        row, rs, re = self._ranges_chunked(self.cells(lo_f), self.cells(hi_f))
        sub = row + self._n
        if self._n_dead:  # the merge below rewrites the postings anyway
            self._set_postings(self._post[~self._dead])
        big = self.n_keys
        old_b, old_ptr = self._bounds, self._ptr
        newb = self._bounds_of(old_b, rs, re + 1)
        # Pieces (new segments) of every new range.
        i0 = np.searchsorted(newb, rs)
        i1 = np.searchsorted(newb, re + 1)
        cnt = i1 - i0
        piece = _csr_gather(i0, cnt)
        psub = np.repeat(sub, cnt)
        # Coverage before the batch of every new segment.
        old_seg = np.searchsorted(old_b, newb, side="right") - 1
        old_cov = self._cov[old_seg]
        # Traffic: an uncovered piece is forwarded by the first subscription covering it.
        unc = old_cov[piece] == 0
        pu, su = piece[unc], psub[unc]
        o = np.lexsort((su, pu))
        pu, su = pu[o], su[o]
        first = np.ones(len(pu), dtype=bool)
        first[1:] = pu[1:] != pu[:-1]
        fp, fs = pu[first], su[first]
        o = np.lexsort((fp, fs))
        traffic = _count_runs(fs[o], fp[o])
        # Postings: split the old ones on the new boundaries, add the new ones.
        post = self._post
        if len(newb) != len(old_b) and len(post):
            old_end = np.append(old_b[1:], big)
            j0 = np.searchsorted(newb, old_b)
            split = np.searchsorted(newb, old_end) - j0
            seg_of = np.repeat(np.arange(len(old_b), dtype=np.int64), np.diff(old_ptr))
            c = split[seg_of]
            cut = c != 1
            if cut.any():
                pieces = _csr_gather(j0[seg_of[cut]], c[cut])
                subs = np.repeat(post[cut] & _LOW32, c[cut])
                expanded = (newb[pieces].astype(np.uint64) << _SHIFT) | subs
                expanded.sort()
                post = _merge_sorted([post[~cut], expanded])
        new_post = (newb[piece].astype(np.uint64) << _SHIFT) | psub.astype(np.uint64)
        new_post.sort()
        merged = _merge_sorted([post, new_post])
        # Commit.
        self._grow(self._n + n)
        s = slice(self._n, self._n + n)
        self._lo[:, s] = lo_f.T
        self._hi[:, s] = hi_f.T
        self._owner[s] = own
        self._alive[s] = True
        self._n += n
        self._r_start = np.concatenate([self._r_start, rs.astype(np.uint32)])
        self._r_end = np.concatenate([self._r_end, re.astype(np.uint32)])
        self._r_sub = np.concatenate([self._r_sub, sub.astype(np.uint32)])
        self._bounds = newb
        self._set_postings(merged)
        return traffic

    def delete(self, ids: np.ndarray) -> int:
        """Remove subscriptions by insertion number; return the ranges withdrawn.

        The postings of the deleted subscriptions are found from their ranges (binary
        searches, ``O(k log P)`` for ``k`` postings) and marked dead; :meth:`compact`
        drops them once they are a quarter of all postings.
        """
        a = check_ids(ids, self._alive[: self._n])
        if len(a) == 0:
            return 0
        order = np.full(self._n, -1, dtype=np.int64)
        order[a] = np.arange(len(a))
        # Ranges of the deleted subscriptions (ranges are stored by subscription number).
        first = np.searchsorted(self._r_sub, a.astype(np.uint32), side="left")
        last = np.searchsorted(self._r_sub, a.astype(np.uint32), side="right")
        ridx = _csr_gather(first, last - first)
        rsub = self._r_sub[ridx].astype(np.int64)
        # Their segments (every range start and end + 1 is a segment bound) and postings.
        s0 = np.searchsorted(self._bounds, self._r_start[ridx].astype(np.int64))
        s1 = np.searchsorted(self._bounds, self._r_end[ridx].astype(np.int64) + 1)
        segs = _csr_gather(s0, s1 - s0)
        dsub = np.repeat(rsub, s1 - s0)
        keys = (self._bounds[segs].astype(np.uint64) << _SHIFT) | dsub.astype(np.uint64)
        pos = np.searchsorted(self._post, keys)
        if (pos >= len(self._post)).any() or (self._post[np.minimum(
                pos, len(self._post) - 1)] != keys).any() or self._dead[pos].any():
            raise RuntimeError("MICS index inconsistent: a posting of a live subscription "
                               "is missing")
        # Coverage after the batch; a segment it empties is withdrawn, with the last
        # deleted subscription that covered it.
        useg, inv, ucnt = np.unique(segs, return_inverse=True, return_counts=True)
        left = self._cov[useg] - ucnt
        w = (left == 0)[inv]
        ws, wo = segs[w], order[dsub[w]]
        o = np.lexsort((wo, ws))
        ws, wo = ws[o], wo[o]
        keep = np.ones(len(ws), dtype=bool)
        keep[:-1] = ws[1:] != ws[:-1]
        ws, wo = ws[keep], wo[keep]
        o = np.lexsort((ws, wo))
        traffic = _count_runs(wo[o], ws[o])
        # Commit.
        self._alive[a] = False
        self._cov[useg] = left
        self._dead[pos] = True
        self._n_dead += len(pos)
        if 4 * self._n_dead >= len(self._post):
            self.compact()
        return traffic

    def match(self, events: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Match events ``(E, d)``: CSR ``(offsets, clients)``, clients sorted per event."""
        ev = check_events(events, self.d)
        n_ev = len(ev)
        valid: np.ndarray = np.asarray(((ev >= self.low) & (ev <= self.high)).all(axis=1))
        inside = valid[:, None]
        cells = np.where(inside, self.cells(np.where(inside, ev, self.low)), 0)
        h = self._curve.index(cells).astype(np.int64)
        seg = np.searchsorted(self._bounds, h, side="right") - 1
        a = self._ptr[seg]
        cnt = (self._ptr[seg + 1] - a) * valid
        idx = _csr_gather(a, cnt)
        evi = np.repeat(np.arange(n_ev, dtype=np.int64), cnt)
        if self._n_dead:
            live = ~self._dead[idx]
            idx, evi = idx[live], evi[live]
        subs = (self._post[idx] & _LOW32).astype(np.int64)
        if self.precision == "exact" and len(subs):
            ok = np.ones(len(subs), dtype=bool)
            for i in range(self.d):
                col = ev[evi, i]
                ok &= self._lo[i, subs] <= col
                ok &= col <= self._hi[i, subs]
            subs, evi = subs[ok], evi[ok]
        return pairs_to_csr(evi, self._owner[subs], n_ev, self.n_clients)
