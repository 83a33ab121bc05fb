"""The exact check of routes found by label (the plans path, when the edge has no index).

A plan's candidates come from the routing state by label: :func:`split_routes` splits
them, by the edge's rows, into those sure to match, those a row must decide per event,
and the filters' false positives; :func:`check_run` decides the per-event ones of a whole
run at once, reading each event's value once.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from broker_node.edge import NONE, SURE, EdgeTable

__all__ = ["RunCheck", "check_run", "split_routes"]


def split_routes(edge: EdgeTable, ids: np.ndarray, labels: list[int], offsets: np.ndarray,
                 clients: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray, list[np.ndarray | None], np.ndarray]:
    """Split routed candidates (``clients[offsets[e]:offsets[e + 1]]`` for ``labels[e]``).

    ``ids``: the table's number of each of the state's clients (:meth:`EdgeTable.client_ids`).
    Returns the SURE candidates in the same form; per event, its CHECK candidates as a
    ``(2, rows)`` int32 array (the client index and a row it must satisfy one of; None
    when there is none); and the NONE ones (the filters' false positives, removed) as
    offsets per event into the flat client indexes that follow them.
    """
    n = len(labels)
    checks: list[np.ndarray | None] = [None] * n
    if not len(clients):
        return offsets, clients, checks, np.zeros((2, 0), dtype=np.int64)
    kinds, rows, owner = edge.classify(np.asarray(labels, dtype=np.uint64), offsets,
                                       ids[clients])
    event_of = np.repeat(np.arange(n, dtype=np.int64), np.diff(offsets))
    if len(rows):
        ev = event_of[owner]
        pairs = np.stack([clients[owner], rows]).astype(np.int32)
        cut = np.flatnonzero(np.r_[True, ev[1:] != ev[:-1]])
        for e, part in zip(ev[cut].tolist(), np.split(pairs, cut[1:], axis=1), strict=True):
            checks[e] = part
    keep = kinds == SURE
    gone = kinds == NONE
    new_offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(event_of[keep], minlength=n), out=new_offsets[1:])
    removed = np.stack([event_of[gone], clients[gone]])
    return new_offsets, clients[keep], checks, removed


@dataclass
class RunCheck:
    """What :func:`check_run` decided for a run's checked events."""

    passed: dict[int, list[int]]  # event -> the clients it goes to (checked ones)
    removed: list[int]  # client indexes the check removed (one per removed delivery)
    values_read: int  # events whose value was decoded
    unreadable: int  # of those, the ones that could not be read (delivered by label)


def check_run(edge: EdgeTable, events: list[int], checks: list[np.ndarray],
              values: list[bytes | None]) -> RunCheck:
    """The CHECK candidates of a run: ``checks[i]`` (a plan's) for event ``events[i]``.

    ``values[i]``: that event's value, decoded here (an unreadable one goes to all its
    candidates). Every named row is gathered and compared at once.
    """
    out = RunCheck({}, [], len(events), 0)
    read = [edge.read(v) for v in values]
    good = [i for i, r in enumerate(read) if r is not None]
    for i, r in enumerate(read):
        if r is None:
            out.unreadable += 1
            out.passed[events[i]] = np.unique(checks[i][0]).tolist()
    if not good:
        return out
    parts = [checks[i] for i in good]
    sizes = np.fromiter((p.shape[1] for p in parts), np.int64, len(parts))
    pairs = np.concatenate(parts, axis=1).astype(np.int64)
    at = np.repeat(np.arange(len(good), dtype=np.int64), sizes)
    values_of = np.stack([read[i][1] for i in good])  # type: ignore[index]
    attrs = [read[i][0] for i in good]  # type: ignore[index]
    ok = edge.passes(pairs[1], values_of, attrs, at)
    width = int(pairs[0].max()) + 1
    every = np.unique(at * width + pairs[0])
    hit = np.unique(at[ok] * width + pairs[0][ok])
    out.removed = (np.setdiff1d(every, hit, assume_unique=True) % width).tolist()
    if len(hit):
        cut = np.flatnonzero(np.r_[True, hit[1:] // width != hit[:-1] // width])
        for e, part in zip((hit[cut] // width).tolist(), np.split(hit % width, cut[1:]),
                           strict=True):
            out.passed[events[good[e]]] = part.tolist()
    return out
