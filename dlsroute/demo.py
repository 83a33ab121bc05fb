"""``dlsroute demo``: a three-node overlay A-B-C routing synthetic stock quotes.

Runs in-process (no Kafka needed): thirteen clients subscribe with varied predicates (one
with OR and !=), a publisher at every node streams quotes for a few seconds, one client
changes its mind half-way, and the demo prints what each client received and what the network saved.
Every kept delivery is also checked against a brute-force matcher: the demo says so if
anything was missed.
"""

from __future__ import annotations

import random
import sys
import time
from typing import Any

from broker_node.overlay import Overlay, Topology
from dls.mapping import event_label
from dls.predicates import Subscription
from dls.space import ContentSpace

__all__ = ["DEMO_SPACE", "SUBSCRIPTIONS", "Quotes", "run_demo"]

SYMBOLS = ["AAPL", "MSFT", "IBM", "GOOG", "AMZN", "TSLA", "NVDA", "META"]

DEMO_SPACE: dict[str, Any] = {
    "attributes": [
        {"name": "sym", "type": "discrete", "values": SYMBOLS},
        {"name": "price", "type": "numeric", "low": 0, "high": 1000, "granules": 64},
        {"name": "change", "type": "numeric", "low": -20, "high": 20, "granules": 16},
        {"name": "volume", "type": "numeric", "low": 0, "high": 1_000_000,
         "breakpoints": [1_000, 10_000, 100_000, 500_000]},
    ],
    "filters": {"client": {"expected_items": 20000, "fp_rate": 0.01},
                "routing": {"expected_items": 16384, "fp_rate": 0.001}},
}

# (node, client) of the three publishers, one per node
_PUBLISHERS = [("A", "feed-a"), ("B", "feed-b"), ("C", "feed-c")]

# (node, client, subscription)
SUBSCRIPTIONS: list[tuple[str, str, str]] = [
    ("A", "apple-desk", "sym = AAPL"),
    ("A", "cheap-tech", "price < 150 and sym in (IBM, MSFT, META)"),
    ("A", "crash-alarm", "change < -5"),
    ("A", "whale-watch", "volume >= 500000"),
    ("B", "rally-bot", "change > 4 and volume >= 10000"),
    ("B", "nvda-band", "sym = NVDA and price between 400 and 600"),
    ("B", "big-caps", "sym in (AAPL, MSFT, GOOG, AMZN) and price >= 300"),
    ("B", "penny", "price < 20"),
    ("C", "tsla-fan", "sym = TSLA and change between -2 and 2"),
    ("C", "quiet-days", "volume < 1000 and change between -1 and 1"),
    ("C", "mid-range", "price between 200.5 and 250.25"),
    ("C", "goog-spike", "sym = GOOG and change >= 3"),
    ("C", "movers", "(sym != TSLA and change >= 6) or volume >= 900000"),
]


class Quotes:
    """A random walk per symbol, generating quote events."""

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.price = {s: rng.uniform(10, 900) for s in SYMBOLS}

    def next(self) -> dict[str, Any]:
        """The next quote of a random symbol."""
        s = self.rng.choice(SYMBOLS)
        change = max(-20.0, min(20.0, self.rng.gauss(0, 3)))
        self.price[s] = max(0.0, min(1000.0, self.price[s] * (1 + change / 500)))
        volume = min(1_000_000.0, self.rng.lognormvariate(9, 2))
        return {"sym": s, "price": round(self.price[s], 2), "change": round(change, 2),
                "volume": round(volume)}


def run_demo(seconds: float = 5.0, seed: int = 7, out: Any = None) -> int:
    """Run the demo for about ``seconds``; returns 0, or 1 if any event was missed."""
    out = out or sys.stdout
    rng = random.Random(seed)  # noqa: S311 - a demo workload, not cryptography
    space = ContentSpace.from_spec(DEMO_SPACE)
    topo = Topology.from_spec({"nodes": ["A", "B", "C"], "links": [["A", "B"], ["B", "C"]]})
    net = Overlay(space, topo)
    print("dlsroute demo: nodes A - B - C, content space "
          f"{' x '.join(f'{a.name}[{a.n_cells}]' for a in space.attributes)} "
          f"= {space.n_cells} cells, {space.total_bits}-bit labels", file=out)
    run = _Run(net, space, out)
    elapsed = run.stream(rng, seconds)
    run.summary(elapsed)
    return 0 if run.missed == 0 else 1


class _Run:
    """One in-process demo: the overlay, the live subscriptions and what clients got."""

    def __init__(self, net: Overlay, space: ContentSpace, out: Any):
        self.net, self.space, self.out = net, space, out
        self.live: dict[tuple[str, str], Subscription] = {}
        for i, (node, client, where) in enumerate(SUBSCRIPTIONS):
            sub = net.subscribe(node, client, f"sub-{i}", where)
            self.live[(node, client)] = sub
            print(f"  {node}:{client:<12} {where}  -> {len(sub.labels())} labels", file=out)
        self.per_client = {(n, c): {"delivered": 0, "dropped": 0, "kept": 0}
                           for n, c, _ in SUBSCRIPTIONS}
        self.missed = self.events = self.cell_fp = self.bloom_fp = 0
        self.tty = hasattr(out, "isatty") and out.isatty()

    def stream(self, rng: random.Random, seconds: float) -> float:
        """Publish quotes for ``seconds``, a change of mind half-way; returns the time."""
        quotes = Quotes(rng)
        step = 0.25 if self.tty else seconds / 4
        start = time.monotonic()
        next_report = start
        switched = False
        while time.monotonic() - start < seconds:
            if not switched and time.monotonic() - start > seconds / 2:
                self.switch()
                switched = True
            node, pub = rng.choice(_PUBLISHERS)
            self.publish(node, pub, quotes.next())
            now = time.monotonic()
            if now >= next_report:
                self.progress(min(1.0, (now - start) / seconds), end="" if self.tty else "\n")
                next_report = now + step
        elapsed = time.monotonic() - start
        self.progress(1.0, end="\n", flush=False)
        return elapsed

    def switch(self) -> None:
        """One client changes its mind: exact withdrawal, then a new interest."""
        self.net.unsubscribe("A", "apple-desk", "sub-0")
        self.live[("A", "apple-desk")] = self.net.subscribe("A", "apple-desk", "sub-0b",
                                                            "sym = AAPL and change < 0")
        print("  ~ A:apple-desk now wants only falling AAPL quotes", file=self.out)

    def publish(self, node: str, pub: str, event: dict[str, Any]) -> None:
        """Route one quote; count deliveries, false positives and misses per client."""
        delivered, matched = self.net.publish(node, pub, event)
        self.events += 1
        for key in delivered:
            self.per_client[key]["delivered"] += 1
        for key in matched:
            self.per_client[key]["kept"] += 1
        dropped = set(delivered) - set(matched)
        if dropped:
            label = event_label(self.space, event)
        for key in dropped:
            self.per_client[key]["dropped"] += 1
            # A cell false positive: the event's cell touches the subscription, the
            # event does not satisfy it. Otherwise the client's Bloom filter erred.
            if label in set(self.live[key].labels().tolist()):
                self.cell_fp += 1
            else:
                self.bloom_fp += 1
        want = {k for k, s in self.live.items() if s.matches(event)}
        self.missed += len(want - set(matched))

    def progress(self, done: float, end: str, flush: bool = True) -> None:
        """The progress line: quotes published, deliveries made so far."""
        bar = "#" * int(30 * done)
        print(f"{chr(13) if self.tty else ''}  [{bar:<30}] {self.events:>7} quotes, "
              f"{self.net.stats.deliveries:>7} deliveries", end=end, file=self.out,
              flush=flush)

    def summary(self, elapsed: float) -> None:
        """Per-client counts, the network's savings and the brute-force check."""
        out = self.out
        print(f"\n{'client':<16}{'delivered':>10}{'fp dropped':>12}{'kept':>8}", file=out)
        for (node, client), c in self.per_client.items():
            print(f"{node + ':' + client:<16}{c['delivered']:>10}{c['dropped']:>12}"
                  f"{c['kept']:>8}", file=out)
        s = self.net.stats
        fp = s.false_positives / s.deliveries if s.deliveries else 0.0
        print(f"\nnetwork: {s.subscriptions} subscriptions made ({s.subscription_labels} "
              f"labels), {s.forwarded_subscription_labels} labels advertised and "
              f"{s.forwarded_unsubscription_labels} withdrawn between nodes in "
              f"{s.link_messages} link messages", file=out)
        print(f"events: {self.events} published in {elapsed:.1f}s "
              f"({self.events / elapsed:,.0f}/s), "
              f"{s.event_hops} hops between nodes, {s.deliveries} deliveries, "
              f"{s.false_positives} false positives ({fp:.2%}) dropped by clients: "
              f"{self.cell_fp} from cell quantisation, {self.bloom_fp} from Bloom filters",
              file=out)
        print(f"check against brute force: {self.missed} missed deliveries", file=out)
