"""The soak's checker: :mod:`benchmarks.chaos.check`'s verdict, vectorised for millions.

Same files, same invariant, same counts (``tests/benchmarks/test_soak.py`` compares the
two on random histories); like it, it imports no routing code and evaluates predicates
from their JSON form, by brute force: every confirmed event against every acknowledged
subscription's window, with numpy over columns of the events instead of Python objects
(the chaos checker's ``Event`` per event and nested loops take minutes and gigabytes at
the soak's hundreds of thousands of events).

The history is read once, line by line; what is kept is one row per event (its
attributes as columns, ``t0``, ``t1``), the subscriptions, and per client the (event,
partition, offset) of every copy read.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from array import array
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.chaos.check import NEAR_S, Sub, history_counts
from benchmarks.chaos.check import _read as read_records

INF = math.inf


@dataclass
class Events:
    """Confirmed events as columns, rows sorted by ``t0`` (stable), ids as bytes."""

    ids: np.ndarray  # id of each row (bytes)
    t0: np.ndarray
    t1: np.ndarray
    cols: dict[str, tuple[np.ndarray, np.ndarray]]  # attr -> (values, present)

    def __post_init__(self) -> None:
        self._by_id = np.argsort(self.ids, kind="stable")
        self._sorted = self.ids[self._by_id]

    def __len__(self) -> int:
        return len(self.ids)

    def rows(self, ids: list[str]) -> np.ndarray:
        """The row of each id (-1: not a confirmed event)."""
        if not len(self) or not ids:
            return np.full(len(ids), -1, dtype=np.int64)
        want = np.array([i.encode() for i in ids], dtype=bytes)
        at = np.minimum(np.searchsorted(self._sorted, want), len(self) - 1)
        return np.where(self._sorted[at] == want, self._by_id[at], -1).astype(np.int64)


@dataclass
class Copies:
    """One client's delivered copies: known events by row, others by id."""

    rows: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    places: np.ndarray = field(default_factory=lambda: np.zeros((0, 2), np.int64))
    unknown: dict[str, set[tuple[int, int]]] = field(default_factory=dict)


@dataclass
class History:
    events: Events
    subs: dict[str, list[Sub]]
    copies: dict[str, Copies]
    publish: Counter[str]
    restarts: Counter[str]


def _column(values: list[Any]) -> tuple[np.ndarray, np.ndarray]:
    """A numpy column of one attribute (None: absent) and its presence mask."""
    present = np.array([v is not None for v in values], dtype=bool)
    kinds = {type(v) for v in values if v is not None}
    if kinds and kinds <= {int, float}:
        return np.array([np.nan if v is None else v for v in values], dtype=float), present
    if kinds <= {str}:
        return np.array(["" if v is None else v for v in values], dtype=str), present
    return np.array(values, dtype=object), present


class _Published:
    """One publisher file's events, a row per id (a repeated id: its last record wins)."""

    def __init__(self) -> None:
        self.index: dict[str, int] = {}
        self.ids: list[str] = []
        self.t0, self.t1 = array("d"), array("d")
        self.attrs: dict[str, list[Any]] = {}

    def add(self, eid: str, attrs: dict[str, Any], t0: float, t1: float) -> None:
        i = self.index.get(eid)
        if i is None:
            i = self.index[eid] = len(self.ids)
            self.ids.append(eid)
            self.t0.append(t0)
            self.t1.append(t1)
            for col in self.attrs.values():
                col.append(None)
        else:
            self.t0[i], self.t1[i] = t0, t1
            for col in self.attrs.values():
                col[i] = None
        for name, value in attrs.items():
            if name not in self.attrs:
                self.attrs[name] = [None] * len(self.ids)
            self.attrs[name][i] = value


def _load_events(run_dir: Path, publish: Counter[str]) -> Events:
    parts: list[tuple[_Published, np.ndarray]] = []
    for path in sorted((run_dir / "publishers").glob("*.jsonl")):
        mine = _Published()
        reports: dict[str, bool] = {}
        for r in read_records(path):
            k = r["k"]
            if k == "pub":
                mine.add(r["id"], r["a"], r["t0"], r["t1"])
            elif k == "dr":
                reports[r["id"]] = reports.get(r["id"], False) or bool(r["ok"])
            elif k == "pub_fail":
                publish["not_sent"] += 1
        ok = [reports.get(eid) for eid in mine.ids]
        publish["confirmed"] += sum(x is True for x in ok)
        publish["failed"] += sum(x is False for x in ok)
        publish["unreported"] += sum(x is None for x in ok)
        parts.append((mine, np.array([x is True for x in ok], dtype=bool)))
    names = sorted({a for mine, _ in parts for a in mine.attrs})
    ids = [eid for mine, keep in parts for eid, k in zip(mine.ids, keep, strict=True) if k]
    t0 = np.concatenate([np.frombuffer(m.t0, dtype=float)[k] for m, k in parts] or [[]])
    t1 = np.concatenate([np.frombuffer(m.t1, dtype=float)[k] for m, k in parts] or [[]])
    cols = {a: [v for m, keep in parts
                for v, k in zip(m.attrs.get(a) or [None] * len(keep), keep, strict=True) if k]
            for a in names}
    order = np.argsort(t0, kind="stable")
    id_arr = np.array([i.encode() for i in ids], dtype=bytes) if ids else np.zeros(0, "S1")
    columns = {a: _column(v) for a, v in cols.items()}
    return Events(id_arr[order], t0[order], t1[order],
                  {a: (c[order], present[order]) for a, (c, present) in columns.items()})


#: A subscription's record kinds that set one of its times.
_TIMES = {"sub_ack": "ack", "unsub_call": "cancel", "unsub_done": "cancelled"}


def _load_subs(path: Path, restarts: Counter[str], client: str) -> list[Sub]:
    by_id: dict[str, Sub] = {}
    for r in read_records(path):
        kind = r["k"]
        if kind == "sub_call":
            by_id[r["sid"]] = Sub(r["sid"], client, r["where"], r["t"])
        elif kind == "start":
            restarts[client] += bool(r.get("restart"))
        elif (sub := by_id.get(r.get("sid", ""))) is not None:
            if kind == "sub_fail":
                sub.failed = True
            elif kind in _TIMES:
                setattr(sub, _TIMES[kind], r["t"])
    return list(by_id.values())


def _load_copies(path: Path, ev: Events) -> Copies:
    ids: list[str] = []
    places = array("q")
    if path.exists():
        for r in read_records(path):
            ids.append(r["id"])
            places.extend((r["p"], r["o"]))
    rows = ev.rows(ids)
    at = np.frombuffer(places, dtype=np.int64).reshape(-1, 2) if ids else np.zeros((0, 2),
                                                                                    np.int64)
    unknown: dict[str, set[tuple[int, int]]] = {}
    for i in np.flatnonzero(rows < 0):
        unknown.setdefault(ids[i], set()).add((int(at[i, 0]), int(at[i, 1])))
    known = rows >= 0
    return Copies(rows[known], at[known], unknown)


def load(run_dir: Path) -> History:
    """Read a run directory (the files :func:`benchmarks.chaos.check.load` reads)."""
    publish: Counter[str] = Counter()
    restarts: Counter[str] = Counter()
    events = _load_events(run_dir, publish)
    subs: dict[str, list[Sub]] = {}
    copies: dict[str, Copies] = {}
    for path in sorted((run_dir / "clients").glob("*.subs.jsonl")):
        client = path.name[: -len(".subs.jsonl")]
        subs[client] = _load_subs(path, restarts, client)
        copies[client] = _load_copies(run_dir / "clients" / f"{client}.deliv.jsonl", events)
    return History(events, subs, copies, publish, restarts)


# -- predicates over columns -----------------------------------------------------------------
def _holds(pred: Mapping[str, Any], col: tuple[np.ndarray, np.ndarray] | None,
           sel: slice | np.ndarray, n: int) -> np.ndarray:
    """Which of the ``n`` rows of ``sel`` satisfy ``pred`` (``col`` None: attribute absent)."""
    if col is None:
        return np.zeros(n, dtype=bool)
    values, present = col[0][sel], col[1][sel]
    op = pred["op"]
    if op == "in":
        kind = values.dtype.kind
        allowed = [v for v in pred["values"] if kind == "O"
                   or (isinstance(v, str) if kind == "U" else isinstance(v, int | float))]
        hit = np.isin(values, np.array(allowed, dtype=values.dtype if allowed else None))
    elif op == "between":
        hit = (pred["low"] <= values) & (values <= pred["high"])
    elif op in ("=", "<", "<=", ">", ">="):
        v = pred["value"]
        hit = {"=": values == v, "<": values < v, "<=": values <= v, ">": values > v,
               ">=": values >= v}[op]
    else:
        raise ValueError(f"predicate op {op!r} unknown to the checker")
    return np.asarray(hit, dtype=bool) & present


def matches(where: Sequence[Mapping[str, Any]], ev: Events, sel: slice | np.ndarray
            ) -> np.ndarray:
    """Rows of ``sel`` whose attributes satisfy every predicate of ``where``."""
    n = (sel.stop - sel.start) if isinstance(sel, slice) else len(sel)
    out = np.ones(n, dtype=bool)
    for p in where:
        out &= _holds(p, ev.cols.get(p["attr"]), sel, n)
    return out


# -- verdict ---------------------------------------------------------------------------------
def required_by(ev: Events, subs: Sequence[Sub]) -> np.ndarray:
    """Per event row, the index in ``subs`` of the first subscription that owes it (-1)."""
    need = np.full(len(ev), -1, dtype=np.int64)
    for k, s in enumerate(subs):
        if s.ack is None:
            continue
        i = int(np.searchsorted(ev.t0, s.ack, side="right"))  # t0 > ack
        j = int(np.searchsorted(ev.t0, s.cancel, side="left"))  # t0 < cancel
        if j <= i:
            continue
        sel = slice(i, j)
        rows = i + np.flatnonzero((ev.t1[sel] < s.cancel) & matches(s.where, ev, sel))
        rows = rows[need[rows] < 0]
        need[rows] = k
    return need


def _reasons(ev: Events, subs: Sequence[Sub], rows: np.ndarray) -> Counter[str]:
    """Why the delivered rows ``rows`` were not owed (the chaos checker's reasons)."""
    hit = np.zeros(len(rows), dtype=bool)
    boundary = np.zeros(len(rows), dtype=bool)
    t0, t1 = ev.t0[rows], ev.t1[rows]
    for s in subs:
        m = matches(s.where, ev, rows)
        hit |= m
        boundary |= m & (s.call <= t1) & (t0 <= s.cancelled)
    return Counter({"false_positive": int((~hit).sum()), "boundary": int(boundary.sum()),
                    "out_of_window": int((hit & ~boundary).sum())})


def verdict(h: History, *, sample: int = 10) -> dict[str, Any]:
    """The counts of :func:`benchmarks.chaos.check.verdict`, from :func:`load`'s history."""
    ev = h.events
    expected = delivered = duplicates = 0
    unexpected: Counter[str] = Counter()
    margins: Counter[str] = Counter()
    missing_rows: list[tuple[str, int, Sub]] = []
    for client in sorted(set(h.subs) | set(h.copies)):
        subs, got = h.subs.get(client, []), h.copies.get(client, Copies())
        need = required_by(ev, subs)
        want = need >= 0
        expected += int(want.sum())
        triples = np.unique(np.column_stack([got.rows, got.places]), axis=0)
        rows, per = np.unique(triples[:, 0], return_counts=True)
        delivered += len(rows) + len(got.unknown)
        duplicates += int((per - 1).sum()) + sum(len(v) - 1 for v in got.unknown.values())
        unexpected["unknown_event"] += len(got.unknown)
        seen = np.zeros(len(ev), dtype=bool)
        seen[rows] = True
        unexpected += _reasons(ev, subs, rows[~want[rows]])
        miss = np.flatnonzero(want & ~seen)
        if len(miss):
            acks = np.array([subs[k].ack for k in need[miss]], dtype=float)
            cancels = np.array([subs[k].cancel for k in need[miss]], dtype=float)
            near_ack = ev.t0[miss] - acks < NEAR_S
            near_cancel = ~near_ack & (cancels - ev.t1[miss] < NEAR_S)
            margins["after_ack"] += int(near_ack.sum())
            margins["before_cancel"] += int(near_cancel.sum())
            margins["interior"] += int((~near_ack & ~near_cancel).sum())
            missing_rows += [(client, int(r), subs[int(need[r])]) for r in miss]
    unexpected = +unexpected
    step = max(1, len(missing_rows) // sample) if missing_rows else 1
    return {
        **history_counts(h.publish, h.subs, h.restarts),
        "expected": expected,
        "delivered_pairs": delivered,
        "missing": len(missing_rows),
        "missing_by_margin": dict(sorted((+margins).items())),
        "duplicates": duplicates,
        "unexpected": sum(unexpected.values()),
        "unexpected_by_reason": dict(sorted(unexpected.items())),
        "missing_sample": [
            {"client": c, "event": ev.ids[r].decode(), "sub": s.sid,
             "t0": round(float(ev.t0[r]), 3),
             "after_ack_s": round(float(ev.t0[r]) - (s.ack or 0.0), 3),
             "before_cancel_s": None if s.cancel == INF else round(s.cancel - ev.t1[r], 3)}
            for c, r, s in missing_rows[::step][:sample]],
    }


def check(run_dir: Path) -> dict[str, Any]:
    """The verdict on the history recorded in ``run_dir`` (:func:`verdict` of :func:`load`)."""
    return verdict(load(run_dir))


def main(argv: list[str] | None = None) -> int:
    """``python -m benchmarks.soak.check <dir>``: the verdict as JSON; 1 if a pair is missing."""
    parser = argparse.ArgumentParser(prog="benchmarks.soak.check", description=__doc__)
    parser.add_argument("run_dir", type=Path)
    out = check(parser.parse_args(argv).run_dir)
    json.dump(out, sys.stdout, indent=2)
    print()
    return int(out["missing"] > 0)


if __name__ == "__main__":
    sys.exit(main())
