"""The node tables of docs/benchmarks.md, generated from the committed results.

Run::

    .venv/bin/python -m benchmarks.node_table            # rewrite the tables in the page
    .venv/bin/python -m benchmarks.node_table --check    # exit 1 if the page is stale

Reads ``benchmarks/results/node.json`` (``make bench-node``: the node, the quixstreams
router and the passthrough through one broker) and ``benchmarks/results/route_path.json``
(``benchmarks.route_path``: the node's loop by part in one process) and replaces what lies
between the page's ``<!-- node-tables -->`` and ``<!-- /node-tables -->`` markers. A test
checks that the page says what the results say.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
NODE = ROOT / "benchmarks" / "results" / "node.json"
ROUTE = ROOT / "benchmarks" / "results" / "route_path.json"
PAGE = ROOT / "docs" / "benchmarks.md"
START, END = "<!-- node-tables -->", "<!-- /node-tables -->"


def _key(params: dict[str, Any]) -> tuple[int, int, float]:
    return int(params["n_subs"]), int(params["n_clients"]), float(params["fanout"])


def node_rows(records: list[dict[str, Any]]) -> list[str]:
    """One table row per workload of ``make bench-node``."""
    by: dict[tuple[int, int, float], dict[tuple[str, str], float]] = {}
    for r in records:
        by.setdefault(_key(r["params"]), {})[(r["system"], r["metric"])] = r["value"]
    rows = []
    for (n, c, f), m in sorted(by.items()):
        def get(system: str, metric: str, m: dict[tuple[str, str], float] = m) -> str:
            v = m.get((system, metric))
            if v is None:
                return "-"
            if metric.startswith("restart"):
                return f"{v:.1f}"
            return f"{v:.2f}" if metric.startswith("ratio") else f"{v:,.0f}"
        rows.append(
            f"| {n:,} | {c:,} | {f:g} | {m.get(('node', 'deliveries_per_event'), 0):.1f} | "
            f"{get('node', 'throughput')} | {get('quix', 'throughput')} | "
            f"{get('passthrough', 'throughput')} | "
            f"{get('node', 'ratio_vs_quix_paired_median')} | "
            f"{get('node', 'ratio_vs_passthrough_paired_median')} | "
            f"{get('node', 'subscribe_rate')} | "
            f"{get('node', 'restart_to_routing_stopped')} / "
            f"{get('node', 'restart_to_routing_killed')} | "
            f"{int(m.get(('node', 'exact_mismatches'), 0))} |")
    return rows


def route_rows(doc: dict[str, Any]) -> list[str]:
    """One table row per workload of ``benchmarks.route_path``: µs per event by part."""
    rows = []
    for r in doc["records"]:
        p, n = r["params"], r["events_per_round"]
        parts = r["node_parts_s"]
        us = {k: 1e6 * v / n for k, v in parts.items()}
        peers = [("–" if r[k] is None else f"{r[k]:,.0f}")  # not timed at this size
                 for k in ("plans_events_per_s", "brute_events_per_s")]
        exact = "yes" if r["exact"] else "NO"
        if "sample" in r:
            exact += f" ({r['sample']['events']} events)"
        rows.append(
            f"| {p['n_subs']:,} | {p['n_clients']:,} | {p['fanout']:g} | "
            f"{us.get('inbox', 0):.1f} | {us.get('plans', 0):.1f} | "
            f"{us.get('match', 0):.1f} | {us.get('produce', 0):.1f} | {us['total']:.1f} | "
            f"{r['node_events_per_s']:,.0f} | {peers[0]} | {peers[1]} | {exact} |")
    return rows


def tables(node: list[dict[str, Any]] | None, route: dict[str, Any] | None) -> str:
    """The markdown between the markers."""
    out = [START, ""]
    if node:
        out += ["Through Kafka (`make bench-node`, `benchmarks/results/node.json`; events/s "
                "are medians of 3 rounds of fresh events, ratios the median of the "
                "rounds' own ratios):", "",
                "| subscriptions | clients | fan-out asked | deliveries/event | node ev/s | "
                "quixstreams ev/s | passthrough ev/s | node/quix | node/passthrough | "
                "subscriptions/s | restart to routing, s (stopped / killed) | mismatches |",
                "|---|---|---|---|---|---|---|---|---|---|---|---|", *node_rows(node), ""]
    if route:
        out += ["The node's own work by part, in one process without a broker "
                "(`benchmarks.route_path`, `benchmarks/results/route_path.json`; µs per event "
                "from a profiled pass, events/s from the timed rounds; `plans`: the same node "
                "without its label index; `brute`: numpy over every subscription, – where "
                "not timed; exact: the node's deliveries are brute force's, on every round "
                "or on a sample of events):", "",
                "| subscriptions | clients | fan-out | inbox µs | plans µs | match µs | "
                "produce µs | total µs | node ev/s | plans path ev/s | brute ev/s | exact |",
                "|---|---|---|---|---|---|---|---|---|---|---|---|", *route_rows(route), ""]
    out.append(END)
    return "\n".join(out)


def render(page: str, node: list[dict[str, Any]] | None, route: dict[str, Any] | None
           ) -> str:
    """``page`` with its node tables made from the results."""
    a, b = page.index(START), page.index(END) + len(END)
    return page[:a] + tables(node, route) + page[b:]


def _load(path: Path) -> Any:
    return json.loads(path.read_text()) if path.exists() else None


def main(argv: Sequence[str] | None = None) -> int:
    """Rewrite the page (or, with --check, say whether it is current)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true")
    a = ap.parse_args(argv)
    page = PAGE.read_text()
    new = render(page, _load(NODE), _load(ROUTE))
    if a.check:
        if new != page:
            print(f"{PAGE} is stale: run python -m benchmarks.node_table")
            return 1
        return 0
    PAGE.write_text(new)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
