"""The exact check at a client's node: which label-matched clients an event really matches.

Routing between nodes is by label only. The node a client is attached to holds the
client's subscriptions in an :class:`EdgeTable`, one *row* per subscription. For a given
label a label-matched candidate client is one of three things:

* **sure**: one of its subscriptions holds the label's cell wholly (an interior cell), so
  every event of that label matches it: delivered without reading the value;
* **check**: its subscriptions that hold the label all cut the cell (boundary cells):
  delivered when the event's value satisfies one of them;
* **none**: no subscription of it holds the label at all (the client's filter answered a
  false positive): not delivered, whatever the value.

Rows come in two kinds. A *simple* row (one alternative whose constrained attributes are
numeric ranges or discrete sets: the paper's subscriptions) is a few numbers in arrays
shared by all rows: per numeric attribute its float bounds and the ranges of cells it
holds and holds wholly, per discrete attribute a bit mask of the cells it holds. Verdicts
of simple rows are integer comparisons over gathered rows; their value check is one float
comparison over gathered rows. Any other subscription (an OR, a string or hashed
constraint, an exclusion, a numeric set of values, ``exists``/``missing``) is a *general*
row: it keeps its compiled :class:`~dls.predicates.Subscription`; it holds a label when the
label is one of its labels, wholly when :mod:`dls.edge` calls the cell interior, and its
value check is ``sub.matches(event)``.

A route plan names the rows a CHECK verdict left to decide, never copies of them: row
numbers are valid while :attr:`EdgeTable.version` is the one the plan was made at (every
add, remove or restore moves it, and the router drops its plans), so a row freed and given
to another subscription is never read through an old plan. The router then decides the
CHECK candidates of a whole run of events in one vectorised step (:meth:`EdgeTable.passes`:
a gather of every named row, one comparison), decoding an event's value only when its
plan has candidates to check (:mod:`broker_node.router`).

A client never given to the table is *sure* for every label: the table may only ever
remove what it knows no subscription matches, never what it was not told of. A
subscription whose ``where`` the node could not compile (a raw writer may send labels
alone) makes its client *sure* for every label (delivered by label, as without the check).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from connectors.serde import decode_raw_event
from dls.edge import interior_mask
from dls.exceptions import DLSError
from dls.predicates import DiscreteConstraint, NumericConstraint, Subscription
from dls.space import BreakpointAttribute, ContentSpace, DiscreteAttribute, UniformAttribute

__all__ = ["CHECK", "NONE", "SURE", "EdgeRows", "EdgeTable", "Verdict", "values_match"]

SURE, CHECK, NONE = 0, 1, 2
_EMPTY32 = np.zeros(0, dtype=np.int32)


@dataclass(frozen=True)
class Verdict:
    """What the edge does with one candidate client for one label."""

    kind: int  # SURE, CHECK or NONE
    rows: np.ndarray = field(default_factory=lambda: _EMPTY32)  # CHECK: rows cutting the cell
    table: EdgeTable | None = field(default=None, compare=False, repr=False)  # CHECK: whose


def values_match(verdict: Verdict, values: np.ndarray, event: dict[str, Any]) -> bool:
    """Whether an event passes ``verdict`` (one of :meth:`EdgeTable.verdicts`).

    ``values``: its numeric values in the table's order; ``event``: its attributes.
    """
    if verdict.kind != CHECK:
        return verdict.kind == SURE
    assert verdict.table is not None  # noqa: S101 - a CHECK verdict names its table
    return verdict.table.matches(verdict, event, values)


@dataclass(frozen=True)
class EdgeRows:
    """The checked subscriptions of a snapshot: their indexes there, bounds, masks, wheres.

    ``bounds`` of a general row are NaN; ``sets`` holds the JSON ``where`` of each general
    row (by subscription index), which a restore compiles again.
    """

    index: np.ndarray  # int64: which of the snapshot's subscriptions these rows are
    bounds: np.ndarray  # (rows, numeric attributes, 2) float64
    masks: list[np.ndarray]  # per discrete attribute, (rows, words) uint64
    sets: dict[int, str]  # subscription index -> its JSON where (a general row)


#: A simple row: its bounds ``(numeric attributes, 2)`` and its mask per discrete attribute.
SimpleParts = tuple[np.ndarray, list[np.ndarray]]


def _is_numeric(attr: Any) -> bool:
    return isinstance(attr, UniformAttribute | BreakpointAttribute)


def simple_parts(sub: Subscription, numeric: list[int], discrete: list[int]
                 ) -> SimpleParts | None:
    """The row of a simple subscription; None when it needs a general row.

    Simple: every constrained attribute is a numeric range (no set of values) or a
    discrete set. An attribute left out has the bounds ``[-inf, inf]``.
    """
    attrs = sub.space.attributes
    cons = sub.constraints
    bounds = np.empty((len(numeric), 2), dtype=np.float64)
    for j, i in enumerate(numeric):
        c = cons.get(attrs[i].name)
        if c is None:
            bounds[j] = (-math.inf, math.inf)
        elif isinstance(c, NumericConstraint) and c.values is None:
            bounds[j] = c.effective_bounds()
        else:
            return None
    masks = []
    for i in discrete:
        a = attrs[i]
        assert isinstance(a, DiscreteAttribute)  # noqa: S101 - discrete holds these
        c = cons.get(a.name)
        if c is not None and not isinstance(c, DiscreteConstraint):
            return None
        out = np.zeros((a.n_cells + 63) // 64, dtype=np.uint64)
        for cell in (range(a.n_cells) if c is None else [a.cell(v) for v in c.values]):
            out[cell // 64] |= np.uint64(1) << np.uint64(cell % 64)
        masks.append(out)
    if len(cons) > sum(1 for i in (*numeric, *discrete) if attrs[i].name in cons):
        return None  # a constraint on an attribute of another kind
    return bounds, masks


class GeneralRows:
    """The general rows: each one's subscription, its labels, and its interior labels."""

    def __init__(self) -> None:
        """None yet."""
        self._subs: dict[int, tuple[Subscription, np.ndarray, np.ndarray]] = {}

    def __bool__(self) -> bool:
        """Whether any row is general."""
        return bool(self._subs)

    def put(self, row: int, sub: Subscription) -> None:
        """Row ``row`` is ``sub``'s."""
        labels = sub.labels()
        self._subs[row] = (sub, labels, labels[interior_mask(sub)])

    def drop(self, row: int) -> None:
        """Row ``row`` is free."""
        del self._subs[row]

    def sub(self, row: int) -> Subscription:
        """The subscription of a general row."""
        return self._subs[row][0]

    def classify(self, row: int, label: int) -> tuple[bool, bool]:
        """Whether the row's subscription holds ``label``, and wholly (an interior cell)."""
        _, labels, inside = self._subs[row]
        return _has(labels, label), _has(inside, label)

    def memory_bytes(self) -> int:
        """The bytes of the label arrays held."""
        return sum(a.nbytes + b.nbytes for _, a, b in self._subs.values())


def _has(sorted_labels: np.ndarray, label: int) -> bool:
    i = int(np.searchsorted(sorted_labels, np.uint64(label)))
    return i < len(sorted_labels) and int(sorted_labels[i]) == label


class EdgeTable:
    """Each local subscription's exact constraints, by client (rows reused after removal)."""

    def __init__(self, space: ContentSpace) -> None:
        """An empty table for ``space``."""
        self.space = space
        attrs = space.attributes
        self._numeric = [i for i, a in enumerate(attrs) if _is_numeric(a)]
        #: the names of the numeric attributes, in the order of a row's bounds
        self.numeric_names = tuple(attrs[i].name for i in self._numeric)
        self._optional = [bool(getattr(attrs[i], "optional", False)) for i in self._numeric]
        self._discrete = [i for i, a in enumerate(attrs) if isinstance(a, DiscreteAttribute)]
        self._words = [(attrs[i].n_cells + 63) // 64 for i in self._discrete]
        n_num = len(self._numeric)
        self._bounds = np.zeros((0, n_num, 2), dtype=np.float64)
        self._held = np.zeros((0, n_num, 2), dtype=np.int32)  # cells held: [first, last]
        self._inside = np.zeros((0, n_num, 2), dtype=np.int32)  # cells held wholly
        self._allowed = [np.zeros((0, w), dtype=np.uint64) for w in self._words]
        self._general_flag = np.zeros(0, dtype=np.bool_)
        self._general = GeneralRows()
        self._rows: dict[tuple[str, str], int] = {}  # (client, id) -> row
        self._cid: dict[str, int] = {}  # client -> its number in the table (kept forever)
        self._client_rows: list[list[int]] = []  # by client number
        self._unchecked_n: list[int] = []  # by client number: subscriptions without a where
        self._unchecked_ids: set[tuple[str, str]] = set()
        self._free: list[int] = []
        self._csr: tuple[int, np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None
        #: moves at every change of the rows; a plan naming rows is valid at its version only
        self.version = 0

    def __len__(self) -> int:
        """How many subscriptions the table holds (checked or not)."""
        return len(self._rows) + len(self._unchecked_ids)

    @property
    def n_clients(self) -> int:
        """How many clients were ever given to the table (their numbers never change)."""
        return len(self._client_rows)

    def client_ids(self, names: Sequence[str]) -> np.ndarray:
        """The table's number of each client (int64; -1: never given to the table)."""
        get = self._cid.get
        return np.fromiter((get(n, -1) for n in names), np.int64, len(names))

    def memory_bytes(self) -> int:
        """The bytes of the table's arrays (the dicts' entries not counted)."""
        return int(self._bounds.nbytes + self._held.nbytes + self._inside.nbytes
                   + sum(a.nbytes for a in self._allowed) + self._general_flag.nbytes
                   + self._general.memory_bytes())

    # -- changes ------------------------------------------------------------------------------
    def add(self, client: str, sub_id: str, sub: Subscription | None) -> None:
        """Hold subscription ``sub_id`` of ``client``; None: its ``where`` is unknown.

        A repeat (the same client and id again) changes nothing, as in the state.
        """
        key = (client, sub_id)
        if key in self._rows or key in self._unchecked_ids:
            return
        cid = self._client(client)
        self.version += 1
        if sub is None:
            self._unchecked_ids.add(key)
            self._unchecked_n[cid] += 1
            return
        parts = simple_parts(sub, self._numeric, self._discrete)
        row = self._take(key, cid)
        if parts is None:
            self._set_general(row, sub)
        else:
            self._set_simple(row, parts)

    def remove(self, client: str, sub_id: str) -> None:
        """Forget a subscription (none held: nothing changes)."""
        key = (client, sub_id)
        row = self._rows.pop(key, None)
        if row is None:
            if key in self._unchecked_ids:
                self._unchecked_ids.remove(key)
                self._unchecked_n[self._cid[client]] -= 1
                self.version += 1
            return
        self.version += 1
        self._client_rows[self._cid[client]].remove(row)
        if self._general_flag[row]:
            self._general.drop(row)
            self._general_flag[row] = False
        self._free.append(row)

    def export(self, clients: Sequence[str], ids: Sequence[str]) -> EdgeRows:
        """The rows of the given subscriptions that are checked, for a snapshot."""
        rows = np.array([self._rows.get(k, -1) for k in zip(clients, ids, strict=True)],
                        dtype=np.int64)
        index = np.flatnonzero(rows >= 0)
        held = rows[index]
        general = self._general_flag[held] if len(held) else np.zeros(0, dtype=np.bool_)
        sets = {int(i): json.dumps(self._general.sub(int(r)).to_json())
                for i, r in zip(index[general].tolist(), held[general].tolist(), strict=True)}
        return EdgeRows(index, self._bounds[held], [a[held] for a in self._allowed], sets)

    def restore(self, clients: Sequence[str], ids: Sequence[str], rows: EdgeRows | None
                ) -> None:
        """Hold the subscriptions of a snapshot (those without rows go by label)."""
        fits = rows is not None and rows.bounds.shape[1:] == (len(self._numeric), 2) and [
            m.shape[1] for m in rows.masks] == self._words
        at = {} if rows is None or not fits else dict(
            zip(rows.index.tolist(), range(len(rows.index)), strict=True))
        self.version += 1
        for i, (client, sid) in enumerate(zip(clients, ids, strict=True)):
            j = at.get(i)
            key = (client, sid)
            if j is None or rows is None:
                self.add(client, sid, None)
                continue
            if key in self._rows or key in self._unchecked_ids:
                continue
            row = self._take(key, self._client(client))
            if i in rows.sets:
                self._set_general(row, Subscription(self.space, json.loads(rows.sets[i])))
                continue
            masks = [m[j] for m in rows.masks]
            self._set_simple(row, (rows.bounds[j], masks))

    # -- verdicts -----------------------------------------------------------------------------
    def verdicts(self, label: int, clients: list[str]) -> list[Verdict]:
        """The verdict of each candidate client for events of ``label``."""
        return self.verdicts_many([label], [clients])[0]

    def verdicts_many(self, labels: Sequence[int], candidates: Sequence[Sequence[str]]
                      ) -> list[list[Verdict]]:
        """The verdicts of ``candidates[e]`` for events of ``labels[e]`` (see :meth:`classify`)."""
        sizes = [len(c) for c in candidates]
        offsets = np.r_[0, np.cumsum(sizes, dtype=np.int64)]
        ids = self.client_ids([n for c in candidates for n in c])
        kinds, rows, owner = self.classify(np.asarray(labels, dtype=np.uint64), offsets, ids)
        out: list[list[Verdict]] = []
        for e in range(len(candidates)):
            vs = []
            for j in range(int(offsets[e]), int(offsets[e + 1])):
                k = int(kinds[j])
                vs.append(Verdict(k, rows[owner == j], self) if k == CHECK else Verdict(k))
            out.append(vs)
        return out

    def classify(self, labels: np.ndarray, offsets: np.ndarray, ids: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Verdicts of candidates ``ids[offsets[e]:offsets[e + 1]]`` for ``labels[e]``.

        ``ids``: the table's client numbers (-1: never given to it). Returns the kind of
        each candidate (int8), and for the CHECK ones the rows that cut the cell (int32)
        with the candidate each belongs to (int64), in candidate order. A label that is
        not one of this space's cells leaves its candidates *sure*. A few numpy calls for
        the whole batch, plus a Python step per (general row, candidate) pair.
        """
        n = len(ids)
        kinds = np.full(n, SURE, dtype=np.int8)
        if not n or not self._client_rows:
            return kinds, _EMPTY32, np.zeros(0, dtype=np.int64)
        _, start, count, unchecked, flat = self._by_client()
        event_of = np.repeat(np.arange(len(labels), dtype=np.int64), np.diff(offsets))
        cells, valid = self._cells(labels)
        known = ids >= 0
        cid = np.where(known, ids, 0)
        active = known & ~unchecked[cid] & valid[event_of]
        sizes = np.where(active, count[cid], 0)
        kinds[active & (sizes == 0)] = NONE
        sel = np.flatnonzero(sizes)
        if not len(sel):
            return kinds, _EMPTY32, np.zeros(0, dtype=np.int64)
        sz = sizes[sel]
        first = np.cumsum(sz) - sz
        rows = flat[np.repeat(start[cid[sel]] - first, sz) + np.arange(int(sz.sum()))]
        cand = np.repeat(sel, sz)
        ev = event_of[cand]
        holds, wholly = self._classify(rows, cells[ev], labels[ev])
        sure = np.logical_or.reduceat(holds & wholly, first)
        some = np.logical_or.reduceat(holds, first)
        kinds[sel] = np.where(sure, SURE, np.where(some, CHECK, NONE))
        keep = holds & (kinds[cand] == CHECK)
        return kinds, rows[keep].astype(np.int32), cand[keep]

    # -- value checks -------------------------------------------------------------------------
    def read(self, value: bytes | None) -> tuple[dict[str, Any], np.ndarray] | None:
        """An event's attributes and its numeric values (the row order of the bounds).

        None when the value cannot be read: not a RawEvent, or a numeric attribute missing
        (an optional one absent reads as 0: no simple row holding its absent cell
        constrains it) or not a finite number.
        """
        try:
            attrs = decode_raw_event(value or b"")["attrs"]
        except (DLSError, KeyError, TypeError, ValueError):
            return None
        out = np.empty(len(self.numeric_names), dtype=np.float64)
        for j, name in enumerate(self.numeric_names):
            v = attrs.get(name)
            if v is None and self._optional[j]:
                v = 0.0
            if type(v) is not float and (type(v) is not int):
                return None
            if not math.isfinite(v):
                return None
            out[j] = v
        return attrs, out

    def passes(self, rows: np.ndarray, values: np.ndarray, attrs: Sequence[dict[str, Any]],
               event_of: np.ndarray) -> np.ndarray:
        """Whether event ``event_of[i]`` satisfies row ``rows[i]``, for each ``i``.

        ``values``: ``(events, numeric attributes)`` from :meth:`read`; ``attrs``: each
        event's attributes (for general rows). One gather and one comparison for the
        simple rows; ``sub.matches`` for each general one.
        """
        b = self._bounds[rows]
        v = values[event_of]
        ok = ((b[:, :, 0] <= v) & (v <= b[:, :, 1])).all(axis=1)
        if self._general:
            sub = self._general.sub
            for i in np.flatnonzero(self._general_flag[rows]).tolist():
                ok[i] = sub(int(rows[i])).matches(attrs[int(event_of[i])])
        return ok

    def matches(self, verdict: Verdict, event: dict[str, Any], values: np.ndarray) -> bool:
        """Whether the event (its attributes, its numeric values) passes ``verdict``."""
        if verdict.kind != CHECK:
            return verdict.kind == SURE
        rows = verdict.rows
        return bool(self.passes(rows, values[None, :], [event],
                                np.zeros(len(rows), dtype=np.int64)).any())

    def row_bounds(self, rows: np.ndarray) -> np.ndarray:
        """The bounds of ``rows`` (NaN for a general row): what a snapshot test compares."""
        return self._bounds[rows]

    # -- inside -------------------------------------------------------------------------------
    def _client(self, client: str) -> int:
        cid = self._cid.get(client)
        if cid is None:
            cid = self._cid[client] = len(self._client_rows)
            self._client_rows.append([])
            self._unchecked_n.append(0)
        return cid

    def _take(self, key: tuple[str, str], cid: int) -> int:
        row = self._free.pop() if self._free else self._grow()
        self._rows[key] = row
        self._client_rows[cid].append(row)
        return row

    def _set_simple(self, row: int, parts: SimpleParts) -> None:
        bounds, masks = parts
        self._bounds[row] = bounds
        held, inside = self._ranges(np.asarray(bounds, dtype=np.float64)[None])
        self._held[row], self._inside[row] = held[0], inside[0]
        for k, m in enumerate(masks):
            self._allowed[k][row] = m

    def _set_general(self, row: int, sub: Subscription) -> None:
        self._bounds[row] = np.nan
        self._held[row] = (1, 0)  # holds no cell: the general rows decide for themselves
        self._inside[row] = (1, 0)
        for a in self._allowed:
            a[row] = 0
        self._general_flag[row] = True
        self._general.put(row, sub)

    def _ranges(self, bounds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Cells held and held wholly, ``(rows, numeric, 2)`` int32, from float bounds.

        ``[-inf, inf]``: the attribute left out (every cell, the absent one too). Else the
        cells ``cell(lo)..cell(hi)``, wholly those strictly between, and the end cells too
        where the range reaches the domain's edge (:func:`dls.edge.interior_cells`).
        """
        held = np.zeros((*bounds.shape[:2], 2), dtype=np.int32)
        inside = np.zeros_like(held)
        attrs = self.space.attributes
        for j, i in enumerate(self._numeric):
            a = attrs[i]
            lo, hi = bounds[:, j, 0], bounds[:, j, 1]
            free = np.isneginf(lo) & np.isposinf(hi)
            low, high = float(a.low), float(a.high)  # type: ignore[union-attr]
            c_lo = a.cells(np.clip(lo, low, high))
            c_hi = a.cells(np.clip(hi, low, high))
            last = a.n_cells - 1 - int(self._optional[j])
            held[:, j, 0] = np.where(free, 0, c_lo)
            held[:, j, 1] = np.where(free, a.n_cells - 1, c_hi)
            inside[:, j, 0] = np.where(free, 0, np.where(lo <= low, 0, c_lo + 1))
            inside[:, j, 1] = np.where(free, a.n_cells - 1,
                                       np.where(hi >= high, last, c_hi - 1))
        return held, inside

    def _by_client(self) -> tuple[int, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Per client number: first place in ``flat``, row count, unchecked; ``flat`` rows.

        Made again after a change (:attr:`version`), else reused.
        """
        if self._csr is not None and self._csr[0] == self.version:
            return self._csr
        count = np.fromiter(map(len, self._client_rows), np.int64, len(self._client_rows))
        start = np.cumsum(count) - count
        flat = np.fromiter((r for rows in self._client_rows for r in rows), np.int64,
                           int(count.sum()))
        unchecked = np.array(self._unchecked_n, dtype=np.int64) > 0
        self._csr = (self.version, start, count, unchecked, flat)
        return self._csr

    def _cells(self, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Cell indexes ``(labels, attributes)`` and whether each label is the space's.

        The cells of a label that is not one of the space's cells are zeros.
        """
        space = self.space
        ls = np.asarray(labels, dtype=np.uint64)
        cells = np.zeros((len(ls), len(space.attributes)), dtype=np.int64)
        valid = (ls >> np.uint64(space.cell_bits)) == np.uint64(
            space.app_id if space.app_id is not None else 0)
        for i, (a, b, sh) in enumerate(zip(space.attributes, space.bits, space.shifts,
                                           strict=True)):
            c = ((ls >> np.uint64(sh)) & np.uint64((1 << b) - 1)).astype(np.int64)
            valid &= c < a.n_cells
            cells[:, i] = c
        cells[~valid] = 0
        return cells, valid

    def _classify(self, rows: np.ndarray, cells: np.ndarray, labels: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray]:
        """Per row: whether its subscription holds the row's cells, and wholly (interior)."""
        cn = cells[:, self._numeric][:, :, None] if self._numeric else None
        if cn is not None:
            held, inside = self._held[rows], self._inside[rows]
            holds = ((held[:, :, :1] <= cn) & (cn <= held[:, :, 1:])).all(axis=(1, 2))
            wholly = ((inside[:, :, :1] <= cn) & (cn <= inside[:, :, 1:])).all(axis=(1, 2))
        else:
            holds = np.ones(len(rows), dtype=bool)
            wholly = np.ones(len(rows), dtype=bool)
        one = np.uint64(1)
        for k, i in enumerate(self._discrete):
            word, bit = np.divmod(cells[:, i], 64)
            holds &= (self._allowed[k][rows, word] >> bit.astype(np.uint64)) & one == one
        if self._general:
            for j in np.flatnonzero(self._general_flag[rows]).tolist():
                holds[j], wholly[j] = self._general.classify(int(rows[j]), int(labels[j]))
        return holds, wholly

    def _grow(self) -> int:
        row = len(self._bounds)
        size = max(16, 2 * row)
        self._bounds = np.resize(self._bounds, (size, *self._bounds.shape[1:]))
        self._held = np.resize(self._held, (size, *self._held.shape[1:]))
        self._inside = np.resize(self._inside, (size, *self._inside.shape[1:]))
        self._allowed = [np.resize(a, (size, a.shape[1])) for a in self._allowed]
        flags = np.zeros(size, dtype=np.bool_)
        flags[:row] = self._general_flag
        self._general_flag = flags
        self._free.extend(range(size - 1, row, -1))
        return row
