"""Propagation of a new subscription across a three-node line, from subscribe() to delivery.

Run (a Kafka must answer at ``--bootstrap``)::

    .venv/bin/python -m benchmarks.propagation [--rounds 60] [--interval-ms 5]
        [--delivery exactly_once,at_least_once] [--quick]
        [--out benchmarks/results/propagation.json]

Three node services in a line A - B - C (``dlsroute.tools.local_network``: each its loop on
a thread of this process, default settings) on one Kafka; a first round, not recorded,
waits until every node is up. Publishers at C (the far end) and at A (the baseline: no link to
cross) publish an event every ``--interval-ms`` each, all of the current round's value. Each
round a client at A subscribes to a fresh predicate (one cell no earlier round used) that
matches the round's events; measured from the ``subscribe()`` call to the client's first
delivery of a matching event published at C (``far_ms``) and at A (``local_ms``), as the
client's ``deliveries()`` hands them out. The subscription is cancelled at the round's end.
Each round also times ``subscribe(wait=...)`` of a second fresh subscription that no event
matches (``wait_ms``: until the node at A acknowledges it) and the plain ``subscribe()``
call (``call_ms``: a write to the client's subscriptions topic and one to the node's
subscribe topic, each acknowledged by the broker).

Per delivery mode it records every round and p50/p99 of each measure; a PNG draws the
distributions. The records go to ``propagation.json`` with a meta file.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import threading
import time
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.core import write_results
from broker_node.overlay import Topology
from connectors.client import Client
from dls.space import ContentSpace
from dlsroute.tools.local_network import LocalNetwork

BENCHMARK = "propagation"
DEFAULT_OUT = Path(__file__).parent / "results" / "propagation.json"
DEFAULT_BOOTSTRAP = os.environ.get("DLS_KAFKA_BOOTSTRAP", "127.0.0.1:19092")
LINE = Topology.from_spec({"nodes": ["A", "B", "C"], "links": [["A", "B"], ["B", "C"]]})
MEASURES = ("far_ms", "local_ms", "wait_ms", "call_ms")


def _space(rounds: int) -> dict[str, Any]:
    """One cell per value of ``round``: rounds use cells 0..R-1, their waits R..2R-1, the
    warm-up cell 2R."""
    cells = 2 * rounds + 1
    return {"attributes": [{"name": "round", "type": "numeric", "low": 0, "high": cells,
                            "granules": cells}]}


class Publisher(threading.Thread):
    """Publishes ``{"round": value}`` every ``interval`` s at one node until stopped."""

    def __init__(self, client: Client, interval: float) -> None:
        super().__init__(daemon=True)
        self.client, self.interval = client, interval
        self.value = 0.5
        self.sent = 0
        self.halt = threading.Event()

    def run(self) -> None:
        next_at = time.perf_counter()
        while not self.halt.is_set():
            self.client.publish({"round": self.value})
            self.sent += 1
            next_at += self.interval
            time.sleep(max(0.0, next_at - time.perf_counter()))
        self.client.flush()


def _round(alice: Client, cell: int, wait_cell: int, pubs: Sequence[Publisher],
           timeout: float) -> dict[str, float]:
    """One round: the fresh subscription's first deliveries, then a waited subscription."""
    for p in pubs:
        p.value = cell + 0.5
    time.sleep(0.05)  # the round's events are flowing before the subscription
    origins = {"C/feed-c": "far_ms", "A/feed-a": "local_ms"}
    out: dict[str, float] = {}
    t0 = time.perf_counter()
    sid = alice.subscribe(f"round between {cell} and {cell + 0.99}")
    out["call_ms"] = 1e3 * (time.perf_counter() - t0)
    for d in alice.deliveries(timeout=0.005, max_idle=timeout):
        name = origins.get(d.origin)
        if sid in d.subscriptions and name is not None and name not in out:
            out[name] = 1e3 * (time.perf_counter() - t0)
            if len(out) == 3:
                break
    t1 = time.perf_counter()
    other = alice.subscribe(f"round between {wait_cell} and {wait_cell + 0.99}",
                            wait=timeout)
    out["wait_ms"] = 1e3 * (time.perf_counter() - t1)
    alice.unsubscribe(sid)
    alice.unsubscribe(other)
    return out


def run_mode(bootstrap: str, delivery: str, rounds: int, interval: float,
             timeout: float, log: list[str]) -> list[dict[str, Any]]:
    """Every round of one delivery mode on a fresh line (its own topic prefix)."""
    prefix = f"bprop{uuid.uuid4().hex[:8]}"
    with tempfile.TemporaryDirectory() as tmp:
        space_path = Path(tmp) / "space.json"
        space_path.write_text(json.dumps(_space(rounds)))
        space = ContentSpace.from_json(space_path)
        line = LocalNetwork(bootstrap, prefix, space_path, space, LINE, delivery=delivery)
        clients = {name: Client(bootstrap, node, name, space, topic_prefix=prefix)
                   for name, node in (("alice", "A"), ("feed-a", "A"), ("feed-c", "C"))}
        pubs = [Publisher(clients["feed-a"], interval), Publisher(clients["feed-c"], interval)]
        rows: list[dict[str, Any]] = []
        try:
            alice = clients["alice"]
            alice.load_subscriptions()
            next(alice.deliveries(timeout=0.1, max_idle=1.0), None)  # consumer open
            for p in pubs:
                p.start()
            _round(alice, 2 * rounds, 2 * rounds, pubs, 60.0)  # every node is up
            for r in range(rounds):
                got = _round(alice, r, rounds + r, pubs, timeout)
                rows.append({"round": r, **got})
                _say(log, f"{delivery} round {r}: " + ", ".join(
                    f"{k} {v:.0f}" for k, v in got.items()))
                time.sleep(0.1)
        finally:
            for p in pubs:
                p.halt.set()
                p.join(30)
            for c in clients.values():
                c.close()
            line.stop()
            line.check()
        _say(log, f"{delivery}: published {sum(p.sent for p in pubs)} events")
    return rows


def _say(log: list[str], line: str) -> None:
    stamp = time.strftime("%H:%M:%S")
    print(f"[{stamp}] {line}", flush=True)
    log.append(f"[{stamp}] {line}")


def records(delivery: str, rows: list[dict[str, Any]], params: dict[str, Any]
            ) -> list[dict[str, Any]]:
    """Per-round records and the p50/p99 of each measure (missing rounds counted)."""
    base = {"benchmark": BENCHMARK, "system": "dls", "unit": "ms"}
    p = {**params, "delivery": delivery}
    out = [{**base, "params": {**p, "round": row["round"]}, "metric": m, "value": row[m]}
           for row in rows for m in MEASURES if m in row]
    for m in MEASURES:
        vals = np.array([row[m] for row in rows if m in row])
        for q in (50, 99):
            if len(vals):
                out.append({**base, "params": {**p, "n": len(vals),
                                               "missing": len(rows) - len(vals)},
                            "metric": f"{m[:-3]}_p{q}", "value": float(np.percentile(vals, q))})
    return out


def plot(by_mode: dict[str, list[dict[str, Any]]], path: Path) -> bool:
    """One panel per delivery mode: sorted latencies of each measure. False without
    matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, axes = plt.subplots(1, len(by_mode), figsize=(6 * len(by_mode), 4), squeeze=False)
    labels = {"far_ms": "first delivery, published at C (2 hops)",
              "local_ms": "first delivery, published at A",
              "wait_ms": "subscribe(wait=...) returns", "call_ms": "subscribe() returns"}
    for ax, (mode, rows) in zip(axes[0], by_mode.items(), strict=True):
        for m in MEASURES:
            vals = np.sort([row[m] for row in rows if m in row])
            if len(vals):
                ax.plot(vals, np.arange(1, len(vals) + 1) / len(vals), label=labels[m])
        ax.set_xscale("log")
        ax.set_xlabel("ms from the subscribe() call")
        ax.set_ylabel("fraction of subscriptions")
        ax.set_title(f"A - B - C, {mode}")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bootstrap", default=DEFAULT_BOOTSTRAP)
    ap.add_argument("--rounds", type=int, default=60, help="subscriptions per mode (60)")
    ap.add_argument("--interval-ms", type=float, default=5.0,
                    help="each publisher's period (5 ms)")
    ap.add_argument("--delivery", default="exactly_once,at_least_once",
                    help="comma-separated delivery modes")
    ap.add_argument("--timeout", type=float, default=30.0,
                    help="seconds a round waits for a delivery or an acknowledgement")
    ap.add_argument("--quick", action="store_true", help="5 rounds, exactly_once only")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = ap.parse_args(argv)
    modes = ["exactly_once"] if args.quick else args.delivery.split(",")
    rounds = 5 if args.quick else args.rounds
    if rounds < 1 or any(m not in ("exactly_once", "at_least_once") for m in modes):
        ap.error("--rounds must be at least 1 and --delivery exactly_once/at_least_once")
    started = datetime.now(UTC).isoformat(timespec="seconds")
    t0 = time.perf_counter()
    load = os.getloadavg()
    log: list[str] = []
    params = {"topology": "A-B-C", "interval_ms": args.interval_ms, "rounds": rounds,
              "transport": "loopback, one Kafka broker (KRaft)"}
    by_mode = {m: run_mode(args.bootstrap, m, rounds, args.interval_ms / 1e3, args.timeout,
                           log) for m in modes}
    recs = [r for m, rows in by_mode.items() for r in records(m, rows, params)]
    for r in recs:
        if r["metric"].endswith(("_p50", "_p99")):
            _say(log, f"{r['params']['delivery']} {r['metric']}: {r['value']:.0f} ms "
                 f"(n {r['params']['n']}, missing {r['params']['missing']})")
    out: Path = args.out
    meta = write_results(out, recs, benchmark=BENCHMARK, module="benchmarks.propagation",
                         argv=argv, started=started, wall=time.perf_counter() - t0,
                         quick=args.quick, bootstrap=args.bootstrap, modes=modes,
                         loadavg_1min_start_end=[round(load[0], 2),
                                                 round(os.getloadavg()[0], 2)])
    if plot(by_mode, out.with_suffix(".png")):
        _say(log, f"wrote {out.with_suffix('.png')}")
    _say(log, f"wrote {len(recs)} records to {out} and {meta}")
    out.with_name(out.stem + ".log").write_text("\n".join(log) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
