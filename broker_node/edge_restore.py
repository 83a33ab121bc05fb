"""An exact-check table made again from a snapshot (:meth:`broker_node.edge.EdgeTable.restore`).

A restarting node gets back every subscription at once, a million of them or more, and
routes nothing until it has them. Into an empty table the simple rows go as arrays: their
bounds and masks copied in one step, their cells computed in one step, their index entries
listed in one batch (laid out at once by the label index). The rest (general rows,
compiled from their ``where``; subscriptions without a row, which go by label; anything
restored into a table that already holds rows) go one by one, as they always did.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np

from broker_node.edge_rows import EdgeRows
from dls.exceptions import DLSError
from dls.predicates import Subscription

__all__ = ["restore"]


def restore(table: Any, clients: Sequence[str], ids: Sequence[str], rows: EdgeRows | None,
            offsets: np.ndarray | None, labels: np.ndarray | None) -> None:
    """Hold the subscriptions of a snapshot in ``table`` (an ``EdgeTable``).

    Subscription ``i`` is ``(clients[i], ids[i])`` with the labels
    ``labels[offsets[i]:offsets[i + 1]]`` (needed by the index; without them, a general
    row's own labels and none for the others); ``rows`` holds the rows of those checked.
    """
    fits = rows is not None and rows.bounds.shape[1:] == (len(table._numeric), 2) and [
        m.shape[1] for m in rows.masks] == table._words
    todo: Sequence[int] = range(len(clients))
    if (fits and rows is not None and offsets is not None and labels is not None
            and len(table) == 0 and len(table._bounds) == 0):
        todo = _simple_at_once(table, clients, ids, rows, offsets, labels)
    _each(table, clients, ids, rows if fits else None, offsets, labels, todo)


def _simple_at_once(table: Any, clients: Sequence[str], ids: Sequence[str], rows: EdgeRows,
                    offsets: np.ndarray, labels: np.ndarray) -> list[int]:
    """The simple rows into an empty table as arrays; returns the subscriptions left."""
    n = len(clients)
    j_of = np.full(n, -1, dtype=np.int64)
    j_of[rows.index] = np.arange(len(rows.index))
    simple = j_of >= 0
    if rows.sets:
        simple[np.fromiter(rows.sets, np.int64, len(rows.sets))] = False
    at = np.flatnonzero(simple)
    if not len(at):
        return list(range(n))
    js, m = j_of[at], len(at)
    names = [clients[i] for i in at.tolist()] if m < n else list(clients)
    keys = list(zip(names, [ids[i] for i in at.tolist()] if m < n else ids, strict=True))
    number = {c: table._client(c) for c in dict.fromkeys(names)}
    cids = np.fromiter(map(number.__getitem__, names), np.int64, m)
    size = max(16, m)
    k, words = len(table._numeric), table._masks.shape[1]
    table._bounds = np.zeros((size, k, 2), dtype=np.float64)
    table._bounds[:m] = rows.bounds[js]
    table._span = np.zeros((size, k, 4), dtype=np.int32)
    table._span[:m] = table._ranges(table._bounds[:m])
    table._masks = np.zeros((size, words), dtype=np.uint64)
    if words:
        table._masks[:m] = np.concatenate([mk[js] for mk in rows.masks], axis=1)
    table._general_flag = np.zeros(size, dtype=np.bool_)
    table._free = list(range(size - 1, m - 1, -1))
    table._rows = dict(zip(keys, range(m), strict=True))
    order = np.argsort(cids, kind="stable")
    ends = np.cumsum(np.bincount(cids, minlength=len(table._client_rows)))
    for cid, (a, b) in enumerate(zip(np.r_[0, ends[:-1]].tolist(), ends.tolist(),
                                     strict=True)):
        if b > a:
            table._client_rows[cid].extend(order[a:b].tolist())
    table.version += 1  # every row is set: what is computed from here on sees them all
    if table.index is not None:
        sizes = (offsets[at + 1] - offsets[at]).astype(np.int64)
        flat = (labels[int(offsets[0]):int(offsets[-1])] if m == n else np.concatenate(
            [labels[int(offsets[i]):int(offsets[i + 1])] for i in at.tolist()]))
        table._index_rows(keys, cids, np.arange(m, dtype=np.int64), sizes,
                          np.asarray(flat, dtype=np.uint64))
    return np.flatnonzero(~simple).tolist()


def _each(table: Any, clients: Sequence[str], ids: Sequence[str], rows: EdgeRows | None,
          offsets: np.ndarray | None, labels: np.ndarray | None, todo: Sequence[int]
          ) -> None:
    """Subscriptions ``todo`` one by one (``rows`` None: none has a usable row)."""
    at = {} if rows is None else dict(
        zip(rows.index.tolist(), range(len(rows.index)), strict=True))
    by_clients: list[str] = []
    by_ids: list[str] = []
    by_labels: list[np.ndarray | None] = []
    listed: list[tuple[tuple[str, str], int, int, np.ndarray]] = []
    spans: list[int] = []
    for i in todo:
        client, sid = clients[i], ids[i]
        own = (None if labels is None or offsets is None
               else labels[int(offsets[i]):int(offsets[i + 1])])
        j = at.get(i)
        key = (client, sid)
        sub = None
        if j is not None and rows is not None and i in rows.sets:
            try:
                sub = Subscription(table.space, json.loads(rows.sets[i]))
            except (DLSError, ValueError):  # not of this space: by label
                j = None
        if j is None or rows is None:
            by_clients.append(client)
            by_ids.append(sid)
            by_labels.append(own)
            continue
        if key in table._rows or key in table._unchecked_ids:
            continue
        cid = table._client(client)
        row = table._take(key, cid)
        if sub is not None:
            table._set_general(row, sub)
            own = sub.labels() if own is None else own
        else:
            table._set_simple(row, (rows.bounds[j], [m[j] for m in rows.masks]), cells=False)
            spans.append(row)
        if own is None and table.index is not None:  # cannot be listed: would be missed
            table.index = None
        if own is not None:
            listed.append((key, cid, row, np.asarray(own, dtype=np.uint64)))
    if spans:
        table._span[spans] = table._ranges(table._bounds[spans])
    table.version += 1  # every row is set: what is computed from here on sees them all
    if table.index is not None and listed:
        table._index_add(listed)
    if by_clients:
        table.add_many(by_clients, by_ids, [None] * len(by_clients), by_labels)
