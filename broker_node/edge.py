"""The exact check at a client's node: which label-matched clients an event really matches.

An :class:`EdgeTable` holds the local subscriptions, one *row* each. For a label, a
candidate client is **sure** when one of its rows holds the label's cell wholly (an
interior cell: delivered without reading the value), **check** when those that hold the
cell all cut it (delivered when the value satisfies one), **none** when none holds it (a
false positive of its filter). A *simple* row (one alternative of numeric ranges and
discrete sets on required attributes) is a few numbers in shared arrays; any other is a
*general* row: its labels, its interior labels (:mod:`dls.edge`) and ``sub.matches``.
Plans name rows (valid at :attr:`EdgeTable.version`, which every change moves), never
copies. A client never given to the table, or with a ``where`` the node could not
compile, is *sure* for every label: the table only removes what no subscription matches.
See docs/architecture.md, "Exact delivery at the edge".

When the label space is small enough to address, the table also lists each subscription
under its labels (:mod:`broker_node.edge_index`), and a node's local deliveries come from
that list rather than from plans. What a row is lives in :mod:`broker_node.edge_rows`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from itertools import repeat
from typing import Any

import numpy as np

from broker_node.edge_index import EdgeIndex
from broker_node.edge_restore import restore
from broker_node.edge_rows import (
    CHECK,
    NONE,
    SURE,
    EdgeRows,
    SimpleParts,
    Verdict,
    cut_columns,
    general_row,
    has_label,
    hull,
    label_cells,
    row_cells,
    simple_held,
    simple_parts,
    values_match,
)
from connectors.serde.raw_numbers import read_event, values_of
from dls import _edgekernels as _ek
from dls import _jit
from dls.label_index import CUTS, HOLDS, MAX_LABELS
from dls.predicates import Subscription
from dls.space import ContentSpace

#: EdgeRows, SimpleParts, Verdict, simple_parts and values_match live in
#: :mod:`broker_node.edge_rows` and are re-exported here.
__all__ = ["CHECK", "NONE", "SURE", "EdgeRows", "EdgeTable", "SimpleParts", "Verdict",
           "simple_parts", "values_match"]

_EMPTY32 = np.zeros(0, dtype=np.int32)


class EdgeTable:
    """Each local subscription's exact constraints, by client (rows reused after removal)."""

    def __init__(self, space: ContentSpace, slices: int = 1) -> None:
        """An empty table for ``space`` (``slices``: its index's, see ``EdgeIndex``)."""
        self.space = space
        attrs = space.attributes
        self._numeric = [i for i, a in enumerate(attrs) if a.kind == "numeric"]
        #: the names of the numeric attributes, in the order of a row's bounds
        self.numeric_names = tuple(attrs[i].name for i in self._numeric)
        self._optional = [attrs[i].optional for i in self._numeric]
        self._optional_mask = np.array(self._optional, dtype=bool)
        self._discrete = [i for i, a in enumerate(attrs) if a.kind == "discrete"]
        self._words = [(attrs[i].n_cells + 63) // 64 for i in self._discrete]
        n_num = len(self._numeric)
        self._bounds = np.zeros((0, n_num, 2), dtype=np.float64)
        # per numeric attribute the cells held [first, last], then those held wholly
        self._span = np.zeros((0, n_num, 4), dtype=np.int32)
        #: the discrete attributes' masks side by side: attribute k from word _word_off[k]
        self._word_off = np.r_[0, np.cumsum(self._words)].astype(np.int64)
        self._masks = np.zeros((0, int(self._word_off[-1])), dtype=np.uint64)
        self._general_flag = np.zeros(0, dtype=np.bool_)
        self._general: dict[int, tuple[Subscription, np.ndarray, np.ndarray]] = {}
        self._rows: dict[tuple[str, str], int] = {}  # (client, id) -> row
        self._cid: dict[str, int] = {}  # client -> its number in the table (kept forever)
        #: by number, the name of each client the table was given
        self.client_names: list[str] = []
        self._client_rows: list[list[int]] = []  # by client number
        self._unchecked_n: list[int] = []  # by client number: subscriptions without a where
        self._unchecked_ids: set[tuple[str, str]] = set()
        self._free: list[int] = []
        self._csr: tuple[int, np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None
        self._gcsr: tuple[int, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] | None = (
            None)
        self._gkeys: tuple[int, np.ndarray, np.ndarray] | None = None
        #: moves at every change of the rows; a plan naming rows is valid at its version only
        self.version = 0
        #: a batch of simple rows' index entries classified by a kernel (else numpy)
        self.compiled_kinds = _jit.ENABLED
        #: label -> the subscriptions touching its cell (None: a label space too large to
        #: address; plans then name candidates' rows, :meth:`classify`)
        self.index = (EdgeIndex(space, self.numeric_names, self._optional,
                                self._general_matches, slices)
                      if space.label_space_size <= MAX_LABELS else None)

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
        return int(self._bounds.nbytes + self._span.nbytes
                   + self._masks.nbytes + self._general_flag.nbytes
                   + sum(a.nbytes + b.nbytes for _, a, b in self._general.values()))

    # -- changes ------------------------------------------------------------------------------
    def add(self, client: str, sub_id: str, sub: Subscription | None,
            labels: np.ndarray | None = None) -> None:
        """Hold subscription ``sub_id`` of ``client``; None: its ``where`` is unknown.

        ``labels``: the labels the node routes it by (default: ``sub.labels()``); the
        index lists it under those of them its ``where`` holds. Neither known: the table
        drops its index (the node then checks candidates as without one). A repeat (the
        same client and id again) changes nothing, as in the state.
        """
        self.add_many([client], [sub_id], [sub], [labels])

    def add_many(self, clients: Sequence[str], ids: Sequence[str],
                 subs: Sequence[Subscription | SimpleParts | None],
                 labels: Sequence[np.ndarray | None]) -> None:
        """:meth:`add` of each; the rows' cells and the index's entries made at once.

        A subscription may come as its simple row already (:mod:`broker_node.simple_rows`);
        it then needs its labels.
        """
        spans: list[int] = []  # simple rows whose cells are still to compute
        listed: list[tuple[tuple[str, str], int, int, np.ndarray]] = []  # for the index
        for client, sub_id, sub, own in zip(clients, ids, subs, labels, strict=True):
            key = (client, sub_id)
            if key in self._rows or key in self._unchecked_ids:
                continue
            if own is None and self.index is not None:
                if not isinstance(sub, Subscription):  # cannot be listed: would be missed
                    self.index = None
                else:
                    own = sub.labels()
            cid = self._client(client)
            self.version += 1
            if sub is None:
                self._unchecked_ids.add(key)
                self._unchecked_n[cid] += 1
                row = -1
            else:
                parts = (sub if isinstance(sub, tuple)
                         else simple_parts(sub, self._numeric, self._discrete))
                row = self._take(key, cid)
                if parts is None:
                    self._set_general(row, sub)  # type: ignore[arg-type]
                else:
                    self._set_simple(row, parts, cells=False)
                    spans.append(row)
            if own is not None:
                listed.append((key, cid, row, np.asarray(own, dtype=np.uint64)))
        if spans:
            self._span[spans] = self._ranges(self._bounds[spans])
        if self.index is not None and listed:
            self._index_add(listed)

    def add_rows(self, clients: Sequence[str], ids: Sequence[str], bounds: np.ndarray,
                 masks: np.ndarray, offsets: np.ndarray, labels: np.ndarray) -> None:
        """:meth:`add_many` of simple subscriptions given as arrays, as senders' rows read.

        Subscription ``i`` has ``bounds[i]`` and ``masks[i]`` (:class:`dls.exact_row.
        RowLayout`, whose order is this table's) and ``labels[offsets[i]:offsets[i + 1]]``.
        """
        keep, keys, cids, rows = [], [], [], []
        for i, key in enumerate(zip(clients, ids, strict=True)):
            if key in self._rows or key in self._unchecked_ids:
                continue  # a repeat: nothing changes
            cid = self._client(key[0])
            keep.append(i)
            keys.append(key)
            cids.append(cid)
            rows.append(self._take(key, cid))
        if not keep:
            return
        self.version += 1
        at, r = np.array(keep), np.array(rows)
        self._bounds[r], self._masks[r] = bounds[at], masks[at]
        self._span[r] = self._ranges(self._bounds[r])
        if self.index is not None:
            sizes = np.diff(offsets)[at]
            flat = labels if len(keep) == len(clients) else np.concatenate(
                [labels[offsets[i]:offsets[i + 1]] for i in keep])
            self._index_rows(keys, np.array(cids, dtype=np.int64), r, sizes, flat)

    def _index_add(self, listed: list[tuple[tuple[str, str], int, int, np.ndarray]]
                   ) -> None:
        """List subscriptions just held under their labels (row -1: unchecked, all held).

        Each entry is ``(key, client number, row, labels)``; the kinds of every simple
        row's labels come from one pass over all of them.
        """
        sizes = np.fromiter((len(x[3]) for x in listed), np.int64, len(listed))
        flat = (np.concatenate([x[3] for x in listed]) if len(listed) > 1
                else listed[0][3])
        self._index_rows([x[0] for x in listed],
                         np.fromiter((x[1] for x in listed), np.int64, len(listed)),
                         np.fromiter((x[2] for x in listed), np.int64, len(listed)), sizes,
                         flat)

    def _index_rows(self, keys: list[tuple[str, str]], cids: np.ndarray, rows: np.ndarray,
                    sizes: np.ndarray, flat: np.ndarray) -> None:
        """:meth:`_index_add` of subscriptions ``keys`` given as arrays.

        Subscription ``i``, of client number ``cids[i]`` and row ``rows[i]``, has the next
        ``sizes[i]`` labels of ``flat``.
        """
        assert self.index is not None  # noqa: S101 - called with an index only
        general = np.zeros(len(keys), dtype=bool)
        checked = rows >= 0
        general[checked] = self._general_flag[rows[checked]]
        if self.compiled_kinds and checked.all() and not general.any():
            # the usual batch (and a restore): one kernel lists the held labels
            offsets, held, kinds, cols = simple_held(
                self.space, self._numeric, self._discrete, self._word_off, self._span,
                self._masks, flat, rows, sizes, self.index.sliced_column)
            self.index.add(keys, cids, rows, self._bounds[rows], general, offsets, held,
                           kinds, cols)
            return
        at = np.repeat(rows, sizes)
        holds = np.ones(len(flat), dtype=bool)
        wholly = np.ones(len(flat), dtype=bool)
        simple = np.repeat(checked & ~general, sizes)
        cols = np.full(len(flat), -1, dtype=np.int64)
        if simple.any():
            cells, valid = self._cells(flat[simple])
            h, w = self._classify(at[simple], cells, flat[simple])
            holds[simple], wholly[simple] = h | ~valid, w | ~valid
            if self._numeric:  # the first numeric attribute each cut cell is cut in
                cn, span = cells[:, self._numeric], self._span[at[simple]]
                inside = (span[:, :, 2] <= cn) & (cn <= span[:, :, 3])
                cols[simple] = cut_columns(inside, valid, self.index.sliced_column)
        if general.any():
            first = np.cumsum(sizes) - sizes
            for i in np.flatnonzero(general).tolist():
                part = slice(int(first[i]), int(first[i] + sizes[i]))
                holds[part], wholly[part] = self.entry_kinds(int(rows[i]), flat[part])
        held = np.zeros(len(flat) + 1, dtype=np.int64)
        np.cumsum(holds, out=held[1:])
        offsets = held[np.r_[0, np.cumsum(sizes)]]  # each subscription's held labels
        bounds = np.empty((len(keys), len(self._numeric), 2), dtype=np.float64)
        bounds[...] = (-np.inf, np.inf)  # an unchecked subscription: all its cells held
        bounds[checked] = self._bounds[rows[checked]]
        self.index.add(
            keys, cids, np.maximum(rows, 0), bounds, general, offsets, flat[holds],
            np.where(wholly[holds], HOLDS, CUTS), cols[holds])

    def entry_kinds(self, row: int, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Whether ``row`` holds each label's cell, and wholly.

        A label of another space, or a cell past an attribute's last, is held wholly (as
        :meth:`classify` leaves its candidates sure).
        """
        cells, valid = self._cells(labels)
        if self._general_flag[row]:
            _, own, inside = self._general[row]
            holds, wholly = np.isin(labels, own), np.isin(labels, inside)
        else:
            holds, wholly = self._classify(np.full(len(labels), row, dtype=np.int64), cells,
                                           labels)
        return holds | ~valid, wholly | ~valid

    def remove(self, client: str, sub_id: str) -> None:
        """Forget a subscription (none held: nothing changes)."""
        key = (client, sub_id)
        if self.index is not None:
            self.index.remove(key)
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
            del self._general[row]
            self._general_flag[row] = False
        self._free.append(row)

    def export(self, clients: Sequence[str], ids: Sequence[str]) -> EdgeRows:
        """The rows of the given subscriptions that are checked, for a snapshot."""
        keys = zip(clients, ids, strict=True)  # one lookup each, no list (1M in a snapshot)
        rows = np.fromiter(map(self._rows.get, keys, repeat(-1)), np.int64, len(ids))
        index = np.flatnonzero(rows >= 0)
        held = rows[index]
        general = self._general_flag[held] if len(held) else np.zeros(0, dtype=np.bool_)
        sets = {int(i): json.dumps(self._general[int(r)][0].to_json())
                for i, r in zip(index[general].tolist(), held[general].tolist(), strict=True)}
        masks = self._masks[held]
        off = self._word_off.tolist()
        return EdgeRows(index, self._bounds[held],
                        [masks[:, a:b] for a, b in zip(off, off[1:], strict=False)], sets)

    def restore(self, clients: Sequence[str], ids: Sequence[str], rows: EdgeRows | None,
                offsets: np.ndarray | None = None, labels: np.ndarray | None = None
                ) -> None:
        """Hold the subscriptions of a snapshot (those without rows go by label).

        Subscription ``i``'s labels are ``labels[offsets[i]:offsets[i + 1]]`` (needed by
        the index; without them, a general row's own labels and none for the others).
        See :func:`broker_node.edge_restore.restore`.
        """
        restore(self, clients, ids, rows, offsets, labels)

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
        vs = [Verdict(int(k), rows[owner == j], self) if k == CHECK else Verdict(int(k))
              for j, k in enumerate(kinds.tolist())]
        return [vs[int(offsets[e]):int(offsets[e + 1])] for e in range(len(candidates))]

    def classify(self, labels: np.ndarray, offsets: np.ndarray, ids: np.ndarray,
                 compiled: bool | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Verdicts of candidates ``ids[offsets[e]:offsets[e + 1]]`` for ``labels[e]``.

        ``ids``: the table's client numbers (-1: never given to it). Returns the kind of
        each candidate (int8), and for the CHECK ones the rows that cut the cell (int32)
        with the candidate each belongs to (int64), in candidate order. A label that is
        not one of this space's cells leaves its candidates *sure*. ``compiled``: the
        kernels of :mod:`dls._edgekernels` (None: when :data:`dls._jit.ENABLED`) or the
        numpy reference; both give the same answer.
        """
        n = len(ids)
        kinds = np.full(n, SURE, dtype=np.int8)
        no_rows = (_EMPTY32, np.zeros(0, dtype=np.int64))
        if not n or not self._client_rows:
            return (kinds, *no_rows)
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
            return (kinds, *no_rows)
        args = (cid[sel], event_of[sel], cells, labels, start, count, flat)
        use = _jit.ENABLED if compiled is None else compiled
        k, rows, owner = self._compiled(*args) if use else self._reference(*args)
        kinds[sel] = k
        return kinds, rows.astype(np.int32), sel[owner]

    def _reference(self, cid: np.ndarray, ev: np.ndarray, cells: np.ndarray,
                   labels: np.ndarray, start: np.ndarray, count: np.ndarray, flat: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Numpy: every row of every candidate gathered and compared at once."""
        sz = count[cid]
        first = np.cumsum(sz) - sz
        rows = flat[np.repeat(start[cid] - first, sz) + np.arange(int(sz.sum()))]
        cand = np.repeat(np.arange(len(cid)), sz)
        holds, wholly = self._classify(rows, cells[ev[cand]], labels[ev[cand]])
        sure = np.logical_or.reduceat(holds & wholly, first)
        some = np.logical_or.reduceat(holds, first)
        k = np.where(sure, SURE, np.where(some, CHECK, NONE)).astype(np.int8)
        keep = holds & (k[cand] == CHECK)
        return k, rows[keep], cand[keep]

    def _compiled(self, cid: np.ndarray, ev: np.ndarray, cells: np.ndarray,
                  labels: np.ndarray, start: np.ndarray, count: np.ndarray, flat: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The kernels: each candidate's rows walked until one holds the cell wholly."""
        k = np.empty(len(cid), dtype=np.int8)
        n_rows = np.empty(len(cid), dtype=np.int64)
        args = (cells, labels, np.asarray(self._numeric, dtype=np.int64),
                np.asarray(self._discrete, dtype=np.int64), self._word_off, start, count,
                flat, self._span, self._masks, self._general_flag, *self._general_csr())
        none = np.zeros(0, dtype=np.int64)
        _ek.edge_walk(np.arange(len(cid)), cid, ev, *args, k, n_rows, none, none, none, False)
        which = np.flatnonzero(k == CHECK)
        sz = n_rows[which]
        rows = np.empty(int(sz.sum()), dtype=np.int64)
        owner = np.empty(len(rows), dtype=np.int64)
        _ek.edge_walk(which, cid, ev, *args, k, n_rows, np.cumsum(sz) - sz, rows, owner, True)
        return k, rows, owner

    def _general_csr(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The general rows' labels for the kernels (made again after a change).

        By row, its first place and count in the flat sorted labels; the flat interior flags.
        """
        if self._gcsr is not None and self._gcsr[0] == self.version:
            return self._gcsr[1]
        n = len(self._general_flag)
        g_start = np.zeros(n, dtype=np.int64)
        g_count = np.zeros(n, dtype=np.int64)
        parts, inside = [np.zeros(0, dtype=np.uint64)], [np.zeros(0, dtype=np.bool_)]
        at = 0
        for r, (_, labels, interior) in self._general.items():
            g_start[r], g_count[r] = at, len(labels)
            parts.append(labels)
            inside.append(np.isin(labels, interior, assume_unique=True))
            at += len(labels)
        out = (g_start, g_count, np.concatenate(parts), np.concatenate(inside))
        self._gcsr = (self.version, out)
        return out

    # -- value checks -------------------------------------------------------------------------
    def read(self, value: bytes | None) -> tuple[dict[str, Any], np.ndarray] | None:
        """An event's attributes and its numeric values, in the order of a row's bounds.

        None when the value is not a RawEvent or its numeric values cannot be read
        (:func:`read_event`).
        """
        return read_event(value, self.numeric_names, self._optional)

    def values_of(self, attrs: dict[str, Any]) -> np.ndarray | None:
        """The event's numeric values, in the order of a row's bounds (:func:`values_of`)."""
        return values_of(attrs, self.numeric_names, self._optional)

    def _general_matches(self, row: int, attrs: dict[str, Any]) -> bool:
        """Whether an event (its attributes) matches the general row ``row``."""
        return bool(self._general[row][0].matches(attrs))

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
            general = self._general
            for i in np.flatnonzero(self._general_flag[rows] & ok).tolist():  # in its hull
                ok[i] = general[int(rows[i])][0].matches(attrs[int(event_of[i])])
        return ok

    def matches(self, verdict: Verdict, event: dict[str, Any], values: np.ndarray) -> bool:
        """Whether the event (its attributes, its numeric values) passes ``verdict``.

        An optional attribute left out may be given as NaN (read as :meth:`values_of` does).
        """
        if verdict.kind != CHECK:
            return verdict.kind == SURE
        rows = verdict.rows
        values = np.where(np.isnan(values) & self._optional_mask, 0.0, values)
        return bool(self.passes(rows, values[None, :], [event],
                                np.zeros(len(rows), dtype=np.int64)).any())

    def row_bounds(self, rows: np.ndarray) -> np.ndarray:
        """The bounds of ``rows`` (a general row: its hull): what a snapshot test compares."""
        return self._bounds[rows]

    # -- inside -------------------------------------------------------------------------------
    def _client(self, client: str) -> int:
        cid = self._cid.get(client)
        if cid is None:
            cid = self._cid[client] = len(self._client_rows)
            self.client_names.append(client)
            self._client_rows.append([])
            self._unchecked_n.append(0)
        return cid

    def _take(self, key: tuple[str, str], cid: int) -> int:
        row = self._free.pop() if self._free else self._grow()
        self._rows[key] = row
        self._client_rows[cid].append(row)
        return row

    def _set_simple(self, row: int, parts: SimpleParts, cells: bool = True) -> None:
        """Set a simple row (``cells`` False: its cells, ``_span``, are the caller's)."""
        bounds, masks = parts
        self._bounds[row] = bounds
        if cells:
            self._span[row] = self._ranges(np.asarray(bounds, dtype=np.float64)[None])[0]
        for k, m in enumerate(masks):
            self._masks[row, self._word_off[k]:self._word_off[k + 1]] = m

    def _set_general(self, row: int, sub: Subscription) -> None:
        self._bounds[row] = hull(sub, self._numeric)  # a first test before sub.matches
        self._span[row] = (1, 0, 1, 0)  # holds no cell: a general row decides for itself
        self._masks[row] = 0
        self._general_flag[row] = True
        self._general[row] = general_row(sub)

    def _ranges(self, bounds: np.ndarray) -> np.ndarray:
        """Cells held, then held wholly, of rows of ``bounds`` (:func:`row_cells`)."""
        return row_cells(self.space, self._numeric, self._optional, bounds)

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
        """Cell indexes of labels and whether each is the space's (:func:`label_cells`)."""
        return label_cells(self.space, labels)

    def _classify(self, rows: np.ndarray, cells: np.ndarray, labels: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray]:
        """Per row: whether its subscription holds the row's cells, and wholly (interior)."""
        cn = cells[:, self._numeric][:, :, None] if self._numeric else None
        if cn is not None:
            span = self._span[rows]
            holds = ((span[:, :, :1] <= cn) & (cn <= span[:, :, 1:2])).all(axis=(1, 2))
            wholly = ((span[:, :, 2:3] <= cn) & (cn <= span[:, :, 3:])).all(axis=(1, 2))
        else:
            holds = np.ones(len(rows), dtype=bool)
            wholly = np.ones(len(rows), dtype=bool)
        one = np.uint64(1)
        for k, i in enumerate(self._discrete):
            word, bit = np.divmod(cells[:, i], 64)
            word += self._word_off[k]
            holds &= (self._masks[rows, word] >> bit.astype(np.uint64)) & one == one
        if self._general:
            g = np.flatnonzero(self._general_flag[rows])
            if len(g):
                holds[g], wholly[g] = self._general_lookup(rows[g], labels[g])
        return holds, wholly

    def _general_lookup(self, rows: np.ndarray, labels: np.ndarray
                        ) -> tuple[np.ndarray, np.ndarray]:
        """Whether general row ``rows[i]`` holds ``labels[i]`` (a space's label), and wholly.

        One search in the sorted keys ``row * label space + cell bits`` of every general
        row's labels (made again after a change).
        """
        size, base = self.space.label_space_size, np.uint64(self.space.app_prefix)
        g_start, g_count, g_labels, g_inside = self._general_csr()
        if len(g_start) * size >= 2**63:  # keys would not fit: one row at a time
            out = np.array([[has_label(self._general[r][1], x), has_label(self._general[r][2], x)]
                            for r, x in zip(rows.tolist(), labels.tolist(), strict=True)],
                           dtype=bool).reshape(-1, 2)
            return out[:, 0], out[:, 1]
        if self._gkeys is None or self._gkeys[0] != self.version:
            nz = np.flatnonzero(g_count)
            by_place = nz[np.argsort(g_start[nz])]  # the rows in the order of their labels
            row_of = np.repeat(by_place, g_count[by_place]).astype(np.uint64)
            keys = row_of * np.uint64(size) + (g_labels - base)
            order = np.argsort(keys, kind="stable")
            self._gkeys = (self.version, np.r_[keys[order], np.uint64(2**64 - 1)],
                           np.r_[g_inside[order], False])  # an end key no query equals
        _, keys, inside = self._gkeys
        q = rows.astype(np.uint64) * np.uint64(size) + (labels.astype(np.uint64) - base)
        at = np.searchsorted(keys, q)
        found = keys[at] == q
        return found, found & inside[at]

    def _grow(self) -> int:
        row = len(self._bounds)
        size = max(16, 2 * row)
        self._bounds = np.resize(self._bounds, (size, *self._bounds.shape[1:]))
        self._span = np.resize(self._span, (size, *self._span.shape[1:]))
        self._masks = np.resize(self._masks, (size, self._masks.shape[1]))
        flags = np.zeros(size, dtype=np.bool_)
        flags[:row] = self._general_flag
        self._general_flag = flags
        self._free.extend(range(size - 1, row, -1))
        return row
