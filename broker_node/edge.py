"""The exact check at a client's node: which label-matched clients an event really matches.

Routing between nodes is by label only. The node a client is attached to holds the
client's subscriptions, and with them what an exact check needs (:mod:`dls.edge`): per
subscription, the bounds of each numeric attribute and the allowed cells of each discrete
one. A label-matched candidate is then one of three things for a given label:

* **sure**: one of its subscriptions holds the label's cell wholly (an interior cell), so
  every event of that label matches it: delivered without reading the value;
* **check**: its subscriptions that hold the label all cut the cell (boundary cells):
  delivered when the event's numeric values lie inside the bounds of one of them;
* **none**: no subscription of it holds the label at all (the client's filter answered a
  false positive): not delivered, whatever the value.

A client never given to the table is *sure* for every label: the table may only ever
remove what it knows no subscription matches, never what it was not told of.

:meth:`EdgeTable.verdicts` decides this once per label and candidate (a route plan keeps
it); :func:`values_match` checks an event's numeric values against the rows a "check"
verdict names. A subscription whose ``where`` the node could not compile (a raw writer may
send labels alone) makes its client *sure* for every label (delivered by label, as
without the check): the check may only ever remove an event that no subscription of the
client matches.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain

import numpy as np

from connectors.serde import decode_raw_event
from dls.edge import needs_values, numeric_bounds
from dls.exceptions import DLSError
from dls.predicates import DiscreteConstraint, Subscription
from dls.space import ContentSpace, DiscreteAttribute

__all__ = ["CHECK", "NONE", "SURE", "Checks", "EdgeRows", "EdgeTable", "Verdict", "checked",
           "split_routes", "values_match"]

SURE, CHECK, NONE = 0, 1, 2


@dataclass(frozen=True)
class Verdict:
    """What the edge does with one candidate client for one label."""

    kind: int  # SURE, CHECK or NONE
    bounds: np.ndarray | None = None  # CHECK: (rows, numeric attributes, 2) float64
    subs: tuple[Subscription, ...] = ()  # CHECK: rows a numeric value set restricts


_SURE = Verdict(SURE)
_NONE = Verdict(NONE)


def values_match(verdict: Verdict, values: np.ndarray, event: dict[str, object]) -> bool:
    """True when the event's numeric ``values`` (space order) lie in one row's bounds.

    ``event``: its attributes, for the rows whose numeric constraint is a set of values.
    """
    if verdict.kind != CHECK:
        return verdict.kind == SURE
    b = verdict.bounds
    assert b is not None  # noqa: S101 - a CHECK verdict has its bounds
    if len(b) and bool(((b[:, :, 0] <= values) & (values <= b[:, :, 1])).all(axis=1).any()):
        return True
    return any(s.matches(event) for s in verdict.subs)


@dataclass(frozen=True)
class EdgeRows:
    """The checked subscriptions of a snapshot: their indexes there, bounds, masks, sets."""

    index: np.ndarray  # int64: which of the snapshot's subscriptions these rows are
    bounds: np.ndarray  # (rows, numeric attributes, 2) float64
    masks: list[np.ndarray]  # per discrete attribute, (rows, words) uint64
    sets: dict[int, str]  # subscription index -> its JSON where (a numeric set of values)


class EdgeTable:
    """Each local subscription's exact constraints, by client (rows reused after removal)."""

    def __init__(self, space: ContentSpace) -> None:
        """An empty table for ``space``."""
        self.space = space
        attrs = space.attributes
        self._numeric = [i for i, a in enumerate(attrs) if not isinstance(a, DiscreteAttribute)]
        #: the names of the numeric attributes, in the order of a row's bounds
        self.numeric_names = tuple(attrs[i].name for i in self._numeric)
        self._discrete = [i for i, a in enumerate(attrs) if isinstance(a, DiscreteAttribute)]
        self._words = [(attrs[i].n_cells + 63) // 64 for i in self._discrete]
        self._bounds = np.zeros((0, len(self._numeric), 2), dtype=np.float64)
        self._allowed = [np.zeros((0, w), dtype=np.uint64) for w in self._words]
        self._rows: dict[tuple[str, str], int] = {}  # (client, id) -> row
        self._by_client: dict[str, list[int]] = {}
        self._free: list[int] = []
        self._unchecked: dict[str, int] = {}  # client -> subscriptions without a where
        self._unchecked_ids: set[tuple[str, str]] = set()
        self._known: set[str] = set()  # clients given to the table (a few bytes per client)
        self._sets: dict[int, Subscription] = {}  # rows with a numeric set of values

    def __len__(self) -> int:
        """How many subscriptions the table holds (checked or not)."""
        return len(self._rows) + len(self._unchecked_ids)

    def memory_bytes(self) -> int:
        """The bytes of the table's arrays (the dicts' entries not counted)."""
        return int(self._bounds.nbytes + sum(a.nbytes for a in self._allowed))

    def add(self, client: str, sub_id: str, sub: Subscription | None) -> None:
        """Hold subscription ``sub_id`` of ``client``; None: its ``where`` is unknown.

        A repeat (the same client and id again) changes nothing, as in the state.
        """
        key = (client, sub_id)
        if key in self._rows or key in self._unchecked_ids:
            return
        self._known.add(client)
        if sub is None:
            self._unchecked_ids.add(key)
            self._unchecked[client] = self._unchecked.get(client, 0) + 1
            return
        row = self._free.pop() if self._free else self._grow()
        self._bounds[row] = numeric_bounds(sub)
        for k, i in enumerate(self._discrete):
            self._allowed[k][row] = self._mask(sub, i, self._words[k])
        if needs_values(sub):
            self._sets[row] = sub
        self._rows[client, sub_id] = row
        self._by_client.setdefault(client, []).append(row)

    def remove(self, client: str, sub_id: str) -> None:
        """Forget a subscription (none held: nothing changes)."""
        row = self._rows.pop((client, sub_id), None)
        if row is None:
            if (client, sub_id) in self._unchecked_ids:
                self._unchecked_ids.remove((client, sub_id))
                left = self._unchecked[client] - 1
                if left:
                    self._unchecked[client] = left
                else:
                    del self._unchecked[client]
            return
        rows = self._by_client[client]
        rows.remove(row)
        if not rows:
            del self._by_client[client]
        self._sets.pop(row, None)
        self._free.append(row)

    def export(self, clients: Sequence[str], ids: Sequence[str]) -> EdgeRows:
        """The rows of the given subscriptions that are checked, for a snapshot."""
        rows = np.array([self._rows.get(k, -1) for k in zip(clients, ids, strict=True)],
                        dtype=np.int64)
        index = np.flatnonzero(rows >= 0)
        held = rows[index]
        sets = {int(i): json.dumps(self._sets[int(r)].to_json())
                for i, r in zip(index.tolist(), held.tolist(), strict=True) if r in self._sets}
        return EdgeRows(index, self._bounds[held], [a[held] for a in self._allowed], sets)

    def restore(self, clients: Sequence[str], ids: Sequence[str], rows: EdgeRows | None
                ) -> None:
        """Hold the subscriptions of a snapshot (those without rows go by label)."""
        fits = rows is not None and rows.bounds.shape[1:] == (len(self._numeric), 2) and [
            m.shape[1] for m in rows.masks] == self._words
        at = {} if rows is None or not fits else dict(
            zip(rows.index.tolist(), range(len(rows.index)), strict=True))
        for i, (client, sid) in enumerate(zip(clients, ids, strict=True)):
            j = at.get(i)
            key = (client, sid)
            if j is None or rows is None:
                self.add(client, sid, None)
                continue
            if key in self._rows or key in self._unchecked_ids:
                continue
            self._known.add(client)
            row = self._free.pop() if self._free else self._grow()
            self._bounds[row] = rows.bounds[j]
            for k, m in enumerate(rows.masks):
                self._allowed[k][row] = m[j]
            if i in rows.sets:
                self._sets[row] = Subscription(self.space, json.loads(rows.sets[i]))
            self._rows[key] = row
            self._by_client.setdefault(client, []).append(row)

    def verdicts(self, label: int, clients: list[str]) -> list[Verdict]:
        """The verdict of each candidate client for events of ``label``."""
        return self.verdicts_many([label], [clients])[0]

    def verdicts_many(self, labels: Sequence[int], candidates: Sequence[Sequence[str]]
                      ) -> list[list[Verdict]]:
        """The verdicts of ``candidates[e]`` for events of ``labels[e]``, in one numpy pass.

        A label that is not one of this space's cells leaves its candidates *sure*.
        """
        out: list[list[Verdict]] = [[_SURE] * len(c) for c in candidates]
        keys: list[int] = []
        where: list[tuple[int, int]] = []
        held: list[list[int]] = []
        known, unchecked, by_client = self._known, self._unchecked, self._by_client
        for e, names in enumerate(candidates):
            for k, c in enumerate(names):
                if c not in known or c in unchecked:
                    continue  # never given to the edge, or held without a where: by label
                mine = by_client.get(c)
                if not mine:
                    out[e][k] = _NONE
                    continue
                keys.append(e)
                where.append((e, k))
                held.append(mine)
        if not held:
            return out
        cells, valid = self._cells(labels)
        sizes = np.fromiter(map(len, held), np.int64, len(held))
        rows = np.fromiter(chain.from_iterable(held), np.int64, int(sizes.sum()))
        key_of_row = np.repeat(np.asarray(keys, dtype=np.int64), sizes)
        holds, interior = self._classify(rows, cells[key_of_row])
        sets = (np.array([r in self._sets for r in rows.tolist()], dtype=np.bool_)
                if self._sets else np.zeros(len(rows), dtype=np.bool_))
        starts = np.r_[0, np.cumsum(sizes)[:-1]]
        sure = np.logical_or.reduceat(holds & interior & np.logical_not(sets), starts).tolist()
        some = np.logical_or.reduceat(holds, starts).tolist()
        ends = (starts + sizes).tolist()
        ok = valid.tolist()
        for j, (e, k) in enumerate(where):
            if sure[j] or not ok[e]:
                out[e][k] = _SURE
            elif not some[j]:
                out[e][k] = _NONE
            else:
                lo, hi = int(starts[j]), ends[j]
                h, st = holds[lo:hi], sets[lo:hi]
                own = rows[lo:hi]
                out[e][k] = Verdict(CHECK, self._bounds[own[h & np.logical_not(st)]],
                                    tuple(self._sets[int(r)] for r in own[h & st]))
        return out

    # -- inside -----------------------------------------------------------------------------
    def _cells(self, labels: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
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

    def _classify(self, rows: np.ndarray, cells: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per row: whether its subscription holds the row's cells, and wholly (interior)."""
        holds = np.ones(len(rows), dtype=bool)
        interior = np.ones(len(rows), dtype=bool)
        attrs = self.space.attributes
        one = np.uint64(1)
        for k, i in enumerate(self._discrete):
            word, bit = np.divmod(cells[:, i], 64)
            holds &= (self._allowed[k][rows, word] >> bit.astype(np.uint64)) & one == one
        bounds = self._bounds[rows]
        for j, i in enumerate(self._numeric):
            a, cell = attrs[i], cells[:, i]
            lo, hi = bounds[:, j, 0], bounds[:, j, 1]
            c_lo, c_hi = a.cells(lo), a.cells(hi)
            holds &= (c_lo <= cell) & (cell <= c_hi)
            inside_lo = (lo <= a.low) | (c_lo < cell)  # type: ignore[union-attr]
            inside_hi = (hi >= a.high) | (cell < c_hi)  # type: ignore[union-attr]
            interior &= inside_lo & inside_hi
        return holds, interior

    def _grow(self) -> int:
        row = len(self._bounds)
        size = max(16, 2 * row)
        self._bounds = np.resize(self._bounds, (size, *self._bounds.shape[1:]))
        self._allowed = [np.resize(a, (size, a.shape[1])) for a in self._allowed]
        self._free.extend(range(size - 1, row, -1))
        return row

    def _mask(self, sub: Subscription, i: int, words: int) -> np.ndarray:
        attr = self.space.attributes[i]
        assert isinstance(attr, DiscreteAttribute)  # noqa: S101 - _discrete holds these
        out = np.zeros(words, dtype=np.uint64)
        c = sub.constraints.get(attr.name)
        cells = ([attr.cell(v) for v in c.values] if isinstance(c, DiscreteConstraint)
                 else range(attr.n_cells))
        for cell in cells:
            out[cell // 64] |= np.uint64(1) << np.uint64(cell % 64)
        return out


#: What the edge left to decide per event for one plan: (client index, verdict) of each
#: candidate whose verdict is CHECK.
Checks = tuple[tuple[int, Verdict], ...]


def split_routes(edge: EdgeTable, names: Sequence[str], labels: list[int], offsets: np.ndarray,
                 clients: np.ndarray) -> tuple[np.ndarray, np.ndarray, list[Checks], list[int]]:
    """Split routed candidates (``clients[offsets[e]:offsets[e + 1]]`` for ``labels[e]``).

    Returns the SURE candidates in the same form, the CHECK ones per event, and the number
    of NONE ones per event (false positives of the client filters, removed).
    """
    n = len(labels)
    checks: list[Checks] = [()] * n
    removed = [0] * n
    if not len(clients):
        return offsets, clients, checks, removed
    keep = np.ones(len(clients), dtype=bool)
    bounds = offsets.tolist()
    idx = clients.tolist()
    some = [e for e in range(n) if bounds[e + 1] > bounds[e]]
    verdicts = edge.verdicts_many([labels[e] for e in some],
                                  [[names[i] for i in idx[bounds[e]:bounds[e + 1]]]
                                   for e in some])
    for e, vs in zip(some, verdicts, strict=True):
        a = bounds[e]
        ck = []
        for j, v in enumerate(vs):
            if v.kind == SURE:
                continue
            keep[a + j] = False
            if v.kind == CHECK:
                ck.append((idx[a + j], v))
            else:
                removed[e] += 1
        checks[e] = tuple(ck)
    event_of = np.repeat(np.arange(n, dtype=np.int64), np.diff(offsets))
    new_offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(event_of[keep], minlength=n), out=new_offsets[1:])
    return new_offsets, clients[keep], checks, removed


def checked(edge: EdgeTable, checks: Checks, value: bytes | None) -> list[int] | None:
    """The clients of ``checks`` whose subscriptions the event ``value`` matches.

    None when the value cannot be read (not a RawEvent, or a numeric attribute missing or
    not a number): the caller delivers by label to all of them.
    """
    try:
        attrs = decode_raw_event(value or b"")["attrs"]
        values = np.array([attrs[a] for a in edge.numeric_names], dtype=np.float64)
    except (DLSError, KeyError, TypeError, ValueError):
        return None
    if np.isnan(values).any():
        return None
    return [i for i, v in checks if values_match(v, values, attrs)]
