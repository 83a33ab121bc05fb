"""The independent checker of the fault harness: reads the recorded history, nothing else.

It imports no routing code (not even the predicate parser): predicates are evaluated here
from their JSON form, by brute force over every recorded event.

The invariant: for every client C and every subscription S of C acknowledged at time
``ack`` (``subscribe()`` returned) and cancelled at time ``cancel`` (``unsubscribe()`` was
called; never: +inf), every event E whose publication was confirmed (delivery report
ok) with ``E.t0 > ack`` (``publish()`` was called after the acknowledgement) and
``E.t1 < cancel`` (``publish()`` returned before the cancellation) whose attributes satisfy
S's predicate is delivered to C: the pair (E, C) is *expected*.

Counted per run:

- ``missing``: expected pairs no raw ``read_committed`` read of C's delivery partition saw;
- ``duplicates``: copies of an (event, client) pair beyond the first, at distinct offsets;
- ``unexpected``: delivered pairs that are not expected, split by why (not errors: the
  network delivers a superset, and the SDK filters it): ``false_positive`` (no predicate
  of C matches the event: label granularity, Bloom filters), ``boundary`` (a matching
  subscription was being made or cancelled while the event was published, or its
  outcome was unknown), ``out_of_window`` (a subscription of C matches but was not live
  at publication), ``unknown_event`` (an id with no confirmed publication).
"""

from __future__ import annotations

import argparse
import bisect
import json
import math
import sys
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

INF = math.inf


# -- predicates ----------------------------------------------------------------------------
def _holds(pred: Mapping[str, Any], value: Any) -> bool:
    op = pred["op"]
    if value is None:
        return False
    if op == "in":
        return value in pred["values"]
    if op == "between":
        return bool(pred["low"] <= value <= pred["high"])
    v = pred["value"]
    if op == "=":
        return bool(value == v)
    if op == "<":
        return bool(value < v)
    if op == "<=":
        return bool(value <= v)
    if op == ">":
        return bool(value > v)
    if op == ">=":
        return bool(value >= v)
    raise ValueError(f"predicate op {op!r} unknown to the checker")


def matches(where: Sequence[Mapping[str, Any]], attrs: Mapping[str, Any]) -> bool:
    """True when ``attrs`` satisfies every predicate of ``where`` (JSON form)."""
    return all(_holds(p, attrs.get(p["attr"])) for p in where)


# -- history -------------------------------------------------------------------------------
@dataclass
class Sub:
    """One subscription of one client, as its client process recorded it."""

    sid: str
    client: str
    where: list[dict[str, Any]]
    call: float
    ack: float | None = None  # subscribe() returned
    failed: bool = False  # subscribe() raised: the outcome is unknown
    cancel: float = INF  # unsubscribe() called
    cancelled: float = INF  # unsubscribe() returned (INF: never, or it raised)


@dataclass
class Event:
    """One published event with a confirmed delivery report."""

    eid: str
    attrs: dict[str, Any]
    t0: float
    t1: float


@dataclass
class History:
    """Everything a run recorded."""

    events: dict[str, Event] = field(default_factory=dict)
    subs: dict[str, list[Sub]] = field(default_factory=lambda: defaultdict(list))
    #: client -> event id -> distinct (partition, offset) it was read at
    copies: dict[str, dict[str, set[tuple[int, int]]]] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(set)))
    publish: Counter[str] = field(default_factory=Counter)
    restarts: Counter[str] = field(default_factory=Counter)


def _read(path: Path) -> Iterable[dict[str, Any]]:
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            if line.endswith("\n"):
                try:
                    yield json.loads(line)
                except json.JSONDecodeError:
                    continue  # a line cut by a SIGKILL (its process wrote a newline after)


def load(run_dir: Path) -> History:
    """Read ``run_dir/publishers/*.jsonl`` and ``run_dir/clients/*.{subs,deliv}.jsonl``."""
    h = History()
    for path in sorted((run_dir / "publishers").glob("*.jsonl")):
        pubs: dict[str, dict[str, Any]] = {}
        reports: dict[str, bool] = {}
        for r in _read(path):
            if r["k"] == "pub":
                pubs[r["id"]] = r
            elif r["k"] == "dr":
                reports[r["id"]] = reports.get(r["id"], False) or bool(r["ok"])
            elif r["k"] == "pub_fail":
                h.publish["not_sent"] += 1
        for eid, r in pubs.items():
            ok = reports.get(eid)
            h.publish["confirmed" if ok else "failed" if ok is False else "unreported"] += 1
            if ok:
                h.events[eid] = Event(eid, r["a"], r["t0"], r["t1"])
    for path in sorted((run_dir / "clients").glob("*.subs.jsonl")):
        client = path.name[: -len(".subs.jsonl")]
        by_id: dict[str, Sub] = {}
        for r in _read(path):
            k = r["k"]
            if k == "start" and r.get("restart"):
                h.restarts[client] += 1
            elif k == "sub_call":
                by_id[r["sid"]] = Sub(r["sid"], client, r["where"], r["t"])
            elif k in ("sub_ack", "sub_fail", "unsub_call", "unsub_done") and r["sid"] in by_id:
                s = by_id[r["sid"]]
                if k == "sub_ack":
                    s.ack = r["t"]
                elif k == "sub_fail":
                    s.failed = True
                elif k == "unsub_call":
                    s.cancel = r["t"]
                else:
                    s.cancelled = r["t"]
        h.subs[client] = list(by_id.values())
        deliv = run_dir / "clients" / f"{client}.deliv.jsonl"
        if deliv.exists():
            for r in _read(deliv):
                h.copies[client][r["id"]].add((r["p"], r["o"]))
    return h


# -- verdict -------------------------------------------------------------------------------
def expected_pairs(h: History) -> dict[str, dict[str, str]]:
    """client -> event id -> the id of one subscription that required the delivery."""
    order = sorted(h.events.values(), key=lambda e: e.t0)
    starts = [e.t0 for e in order]
    out: dict[str, dict[str, str]] = {}
    for client, subs in h.subs.items():
        need: dict[str, str] = {}
        for s in subs:
            if s.ack is None:
                continue
            i = bisect.bisect_right(starts, s.ack)  # t0 > ack
            for e in order[i:]:
                if e.t0 >= s.cancel:
                    break
                if e.t1 < s.cancel and e.eid not in need and matches(s.where, e.attrs):
                    need[e.eid] = s.sid
        out[client] = need
    return out


def _why_unexpected(h: History, client: str, eid: str) -> str:
    e = h.events.get(eid)
    if e is None:
        return "unknown_event"
    hits = [s for s in h.subs.get(client, ()) if matches(s.where, e.attrs)]
    if not hits:
        return "false_positive"
    for s in hits:
        if s.call <= e.t1 and e.t0 <= s.cancelled:  # loosely live during the publication
            return "boundary"
    return "out_of_window"


def history_counts(publish: Counter[str], subs: Mapping[str, Sequence[Sub]],
                   restarts: Counter[str]) -> dict[str, int]:
    """Publications and subscriptions as recorded (also :mod:`benchmarks.soak.check`'s)."""
    every = [s for ss in subs.values() for s in ss]
    return {
        "published": publish["confirmed"],
        "publish_failed": publish["failed"] + publish["not_sent"],
        "publish_unreported": publish["unreported"],
        "subscriptions": len(every),
        "subscriptions_acknowledged": sum(s.ack is not None for s in every),
        "subscriptions_failed": sum(s.failed for s in every),
        "client_restarts": sum(restarts.values()),
    }


def verdict(h: History, *, sample: int = 10) -> dict[str, Any]:
    """The counts of the module docstring (and a few missing pairs, for a look)."""
    need = expected_pairs(h)
    missing: list[dict[str, Any]] = []
    unexpected: Counter[str] = Counter()
    duplicates = delivered = expected = 0
    dup_clients: Counter[str] = Counter()
    for client in sorted(set(need) | set(h.copies)):
        want, got = need.get(client, {}), h.copies.get(client, {})
        expected += len(want)
        for eid, sid in want.items():
            if eid not in got:
                missing.append({"client": client, "event": eid, "sub": sid})
        for eid, where in got.items():
            delivered += 1
            if len(where) > 1:
                duplicates += len(where) - 1
                dup_clients[client] += len(where) - 1
            if eid not in want:
                unexpected[_why_unexpected(h, client, eid)] += 1
    return {
        **history_counts(h.publish, h.subs, h.restarts),
        "expected": expected,
        "delivered_pairs": delivered,
        "missing": len(missing),
        "missing_by_margin": _margins(h, missing),
        "duplicates": duplicates,
        "unexpected": sum(unexpected.values()),
        "unexpected_by_reason": dict(sorted(unexpected.items())),
        "missing_sample": _sample(h, missing, sample),
    }


#: A missing pair published within this many seconds after its subscription's
#: acknowledgement or before its cancellation is counted as near that boundary.
NEAR_S = 1.0


def _margins(h: History, missing: list[dict[str, Any]]) -> dict[str, int]:
    """Missing pairs by where their event fell in the subscription's window.

    ``after_ack``: within :data:`NEAR_S` of the acknowledgement (the subscription had not
    reached every node yet); ``before_cancel``: within :data:`NEAR_S` of the cancellation
    (the unsubscription overtook the event); ``interior``: neither (a loss, not an order).
    """
    subs = {s.sid: s for ss in h.subs.values() for s in ss}
    out: Counter[str] = Counter()
    for m in missing:
        e, s = h.events[m["event"]], subs[m["sub"]]
        assert s.ack is not None  # noqa: S101 - an expected pair has an acknowledgement
        out["after_ack" if e.t0 - s.ack < NEAR_S else "before_cancel"
            if s.cancel - e.t1 < NEAR_S else "interior"] += 1
    return dict(sorted(out.items()))


def _sample(h: History, missing: list[dict[str, Any]], n: int) -> list[dict[str, Any]]:
    """A few missing pairs, spread over the run, with their margins to the window."""
    if not missing:
        return []
    step = max(1, len(missing) // n)
    subs = {s.sid: s for ss in h.subs.values() for s in ss}
    out = []
    for m in missing[::step][:n]:
        e, s = h.events[m["event"]], subs[m["sub"]]
        assert s.ack is not None  # noqa: S101 - an expected pair has an acknowledgement
        out.append(m | {"t0": round(e.t0, 3), "after_ack_s": round(e.t0 - s.ack, 3),
                        "before_cancel_s": None if s.cancel == INF
                        else round(s.cancel - e.t1, 3)})
    return out


def check(run_dir: Path) -> dict[str, Any]:
    """The verdict on the history recorded in ``run_dir``."""
    return verdict(load(run_dir))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run_dir", type=Path, help="a scenario's directory of recorded history")
    a = p.parse_args(argv)
    result = check(a.run_dir)
    print(json.dumps(result, indent=2))
    return 1 if result["missing"] else 0


if __name__ == "__main__":
    sys.exit(main())
