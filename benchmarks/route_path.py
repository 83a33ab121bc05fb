"""The node's loop by part on the quotes workload, in one process, without a broker.

Run::

    .venv/bin/python -m benchmarks.route_path [--sizes 10000@64,100000@64,1000000]
        [--rounds 3] [--events N] [--peers-up-to 100000]
        [--out benchmarks/results/route_path.json]

A :class:`~broker_node.service.NodeService` (exactly once, exact delivery, one shared
delivery partition) is given a producer that only counts what it is handed, so what is
timed is the node's own work: taking the subscriptions (``process`` of LabelSubscription
messages, as read from its subscribe topic) and routing fresh events (``process`` of
RawEvent messages with the headers the SDK writes), batches of 1,000. Each round draws new
events. Beside the node, in the same run and on the same events:

* ``plans``: the same node with its label index switched off (candidates from the client
  filters, each candidate's rows walked: the route path before the index);
* ``brute``: every subscription checked per event with numpy (what a router without DLS
  does; the quixstreams peer of ``benchmarks.node`` does this over Kafka).

Sizes are ``benchmarks.node``'s (``N`` or ``N@FANOUT``: the same clients and events per
round; 1M subscriptions have 10,000 clients), their labels from its cache. Above
``--peers-up-to`` subscriptions the two peers are not timed (at 1M each takes minutes a
round); the node's deliveries are still compared with brute force on a sample of events.

The parts of the node's routing (``inbox``: headers read; ``plans``: neighbour plans;
``match``: values read and the index walked; ``produce``: messages handed to the producer)
come from a second, profiled pass. This is not the Kafka benchmark (``make bench-node``):
it says where the node's own time goes, and how it grows with subscriptions.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import platform
import pstats
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from confluent_kafka import Message

from benchmarks import quotes
from benchmarks.node import Recorder, Size, parse_sizes, subscription_labels
from broker_node.config import NodeSettings
from broker_node.service import NodeService
from connectors.serde import encode_raw_event
from connectors.serde.messages import encode_label_subscription
from connectors.topics import HEADER_EVENT_ID, HEADER_LABEL, HEADER_ORIGIN

BATCH = 1000
SAMPLE = 500  # events compared with brute force where the peers are not timed
PARTS = {"inbox": ("inbox.py", "events"), "plans": ("router.py", "plans"),
         "match": ("edge_index.py", "match_run"), "produce": ("router.py", "_deliver_local"),
         "produce (plans)": ("router.py", "_deliver_planned")}


class CountingProducer:
    """A producer that counts the messages it is handed (and keeps nothing)."""

    def __init__(self) -> None:
        """Nothing produced yet."""
        self.messages = 0

    def produce(self, topic: str, value: bytes | None = None, headers: Any = None,
                partition: int = -1, on_delivery: Any = None, timestamp: int = 0,
                key: Any = None) -> None:
        """Count one message."""
        self.messages += 1

    def poll(self, timeout: float = 0) -> int:
        """Nothing to serve."""
        return 0


def make_node(space_file: Path) -> NodeService:
    """A node A (no neighbours) on a counting producer."""
    svc = NodeService(NodeSettings(node="A", neighbours=(), space=space_file,
                                   delivery="exactly_once", shared_delivery_partitions=1))
    svc.connect(CountingProducer())  # type: ignore[arg-type]
    return svc


def subscription_messages(w: quotes.QuotesWorkload) -> tuple[list[Message], float]:
    """The LabelSubscription messages of the workload, as its node reads them, and the
    labels per subscription.

    Labels, canonical where texts and rows as the SDK makes them, from
    :func:`benchmarks.node.subscription_labels` (cached).
    """
    offsets, labels, wheres, rows = subscription_labels(w, Recorder())
    out = []
    for i in range(len(w)):
        row = rows[i].tobytes() if rows[i].any() else None
        out.append(Message(topic="dls.node.A.subscribe", partition=0, offset=i,
                           value=encode_label_subscription(
                               w.client(i), f"s{i}", labels[offsets[i]:offsets[i + 1]],
                               wheres[i], row)))
    return out, len(labels) / max(1, len(w))


def event_messages(ev: quotes.QuoteEvents, round_no: int) -> list[Message]:
    """The RawEvent messages of ``ev`` on node A's publish topic."""
    out = []
    for i in range(len(ev)):
        eid = f"r{round_no}e{i}"
        out.append(Message(
            topic="dls.node.A.publish", partition=0, offset=i,
            value=encode_raw_event("A", "pub", eid, ev.attrs(i)),
            headers=[(HEADER_LABEL, int(ev.labels[i]).to_bytes(8, "big")),
                     (HEADER_ORIGIN, b"A/pub"), (HEADER_EVENT_ID, eid.encode())]))
    return out


def route_all(svc: NodeService, msgs: Sequence[Message]) -> float:
    """Seconds to route ``msgs`` in batches of :data:`BATCH`."""
    t = time.perf_counter()
    for a in range(0, len(msgs), BATCH):
        svc.process(msgs[a:a + BATCH])
    return time.perf_counter() - t


def brute_seconds(w: quotes.QuotesWorkload, ev: quotes.QuoteEvents) -> tuple[float, int]:
    """Seconds to match every event against every subscription (numpy), and deliveries."""
    cols = (w.syms, w.price[:, 0], w.price[:, 1], w.change[:, 0], w.change[:, 1], w.volume)
    syms, p_lo, p_hi, c_lo, c_hi, v_lo = cols
    t = time.perf_counter()
    total = 0
    for i in range(len(ev)):
        p, c = ev.price[i], ev.change[i]
        ok = syms[:, ev.sym[i]] & (p_lo <= p) & (p <= p_hi) & (c_lo <= c) & (c <= c_hi) & (
            v_lo <= ev.volume[i])
        total += len(np.unique(w.owners[ok]))
    return time.perf_counter() - t, total


def parts_of(stats: pstats.Stats, total: float) -> dict[str, float]:
    """Seconds of each part (cumulative time of its function)."""
    out = {}
    for name, (file, fn) in PARTS.items():
        for (f, _, func), row in stats.stats.items():  # type: ignore[attr-defined]
            if func == fn and f.endswith(file):
                out[name] = row[3]
    out["total"] = total
    return out


def run_size(space_file: Path, size: Size, rounds: int, peers: bool) -> dict[str, Any]:
    """One workload: subscriptions taken, then rounds of fresh events.

    ``peers``: time the plans path and brute force beside the node; else brute force
    only checks the node's deliveries on :data:`SAMPLE` events.
    """
    p = quotes.QuotesParams(size.n_subs, size.n_clients, size.fanout)
    w = quotes.generate(p)
    sp = quotes.space()
    t = time.perf_counter()
    subs, per_sub = subscription_messages(w)
    rec: dict[str, Any] = {"params": p.as_dict(), "price_width": w.scale,
                           "labels_per_sub": per_sub, "messages_s": time.perf_counter() - t}
    svc = make_node(space_file)
    t = time.perf_counter()
    for a in range(0, len(subs), BATCH):
        svc.process(subs[a:a + BATCH])
    rec["subscribe_per_s"] = len(subs) / (time.perf_counter() - t)
    plain = make_node(space_file) if peers else None
    if plain is not None:
        for a in range(0, len(subs), BATCH):
            plain.process(subs[a:a + BATCH])
        assert plain.router.edge is not None  # noqa: S101 - exact delivery is on
        plain.router.edge.index = None  # the plans path
    del subs
    n_events = size.n_events
    rounds_out = []
    for r in range(rounds):
        ev = quotes.draw_events(n_events, seed=1000 + r, sp=sp)
        d0 = svc.metrics.deliveries
        x: dict[str, Any] = {"node_s": route_all(svc, event_messages(ev, r))}
        x["deliveries"] = svc.metrics.deliveries - d0
        if plain is not None:
            d0 = plain.metrics.deliveries
            x["plans_s"] = route_all(plain, event_messages(ev, r + 100))
            x["plans_deliveries"] = plain.metrics.deliveries - d0
            x["brute_s"], x["brute_deliveries"] = brute_seconds(w, ev)
        rounds_out.append(x)
        print(f"  {size.n_subs} subs, round {r}: node {n_events / x['node_s']:,.0f} ev/s"
              + (f", plans {n_events / x['plans_s']:,.0f}, brute "
                 f"{n_events / x['brute_s']:,.0f}" if plain is not None else "")
              + f"; deliveries/event {x['deliveries'] / n_events:.1f}", flush=True)
    if plain is None:  # the node's deliveries on a sample, against brute force
        ev = quotes.draw_events(SAMPLE, seed=2000, sp=sp)
        d0 = svc.metrics.deliveries
        route_all(svc, event_messages(ev, 2000))
        rec["sample"] = {"events": SAMPLE, "deliveries": svc.metrics.deliveries - d0,
                         "brute_deliveries": brute_seconds(w, ev)[1]}
    ev = quotes.draw_events(n_events, seed=999, sp=sp)
    rec["node_parts_s"] = _profiled(svc, event_messages(ev, 999))
    if plain is not None:
        rec["plans_parts_s"] = _profiled(plain, event_messages(ev, 998))
    rec["rounds"] = rounds_out
    for k in ("node", "plans", "brute"):
        rec[f"{k}_events_per_s"] = (float(np.median([n_events / x[f"{k}_s"]
                                                     for x in rounds_out]))
                                    if f"{k}_s" in rounds_out[0] else None)
    rec["events_per_round"] = n_events
    rec["exact"] = (all(x["deliveries"] == x["brute_deliveries"] for x in rounds_out)
                    if plain is not None
                    else rec["sample"]["deliveries"] == rec["sample"]["brute_deliveries"])
    return rec


def _profiled(svc: NodeService, msgs: Sequence[Message]) -> dict[str, float]:
    """Seconds of each part of routing ``msgs`` (a profiled pass)."""
    prof = cProfile.Profile()
    t = time.perf_counter()
    prof.enable()
    route_all(svc, msgs)
    prof.disable()
    return parts_of(pstats.Stats(prof), time.perf_counter() - t)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the sizes asked for; write the JSON."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="10000@64,100000@64,1000000")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--events", type=int, default=None, help="per round (default: the size's)")
    ap.add_argument("--peers-up-to", type=int, default=100_000,
                    help="time the plans path and brute force up to this many subscriptions")
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args(argv)
    space_file = quotes.SPACE_FILE
    records = []
    for size in parse_sizes(a.sizes, a.events):
        print(f"{size.n_subs} subscriptions, {size.n_clients} clients, fan-out {size.fanout}",
              flush=True)
        records.append(run_size(space_file, size, a.rounds, size.n_subs <= a.peers_up_to))
        r = records[-1]
        print(f"  -> node {r['node_events_per_s']:,.0f} ev/s; subscribe "
              f"{r['subscribe_per_s']:,.0f}/s; exact {r['exact']}; parts "
              f"{ {k: round(v, 3) for k, v in r['node_parts_s'].items()} }", flush=True)
    doc = {"benchmark": "route_path", "machine": {"cpus": __import__("os").cpu_count(),
                                                  "python": platform.python_version()},
           "records": records}
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
