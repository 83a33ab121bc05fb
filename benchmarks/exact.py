"""Exact delivery at the edge, on the local Kafka: what it costs and what it saves.

One run, one broker, the paper's workload (``benchmarks.workload``: box subscriptions over
``d`` numeric attributes, point events), each subscription written with its ``where`` as
the SDK writes it. Four nodes load the same subscriptions from topics of their own:

* ``topics-exact`` / ``topics-label``: a delivery topic per client, exact delivery on / off;
* ``shared-exact`` / ``shared-label``: one shared delivery topic of one partition, on / off;

all exactly once, beside the transactional ``passthrough`` (one input, one output topic).
In each of ``rounds`` rounds every system routes ``events`` fresh events of the same
workload (new ones each round: the route cache sees what a live stream gives it), in an
order that alternates between rounds. Per system: routed events/s (median over rounds),
Kafka messages produced per event (deliveries written plus forwards), and the deliveries
clients would see that match none of their subscriptions (``false_deliveries``: written
deliveries minus the brute-force count of matching pairs; the bar is 0 with exact
delivery on). Also the exact check's counters (removed, values read) and the route cache's
hit rate. CPU per event is the process's CPU time over the window's events.

Output: ``exact.json`` (records ``{"benchmark", "system", "params", "metric", "value",
"unit"}``) and ``exact.meta.json``. ``--quick`` is a small run for the tests.
``--general``: every ``where`` also excludes a value no event has (the same labels and
matches), so that the node holds each subscription as a general row
(``broker_node/edge.py``): what the check costs for OR, ``!=``, strings and the other
operators beyond ranges and sets.
"""

from __future__ import annotations

import argparse
import json
import os
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from confluent_kafka import Producer

import broker_node.service as service_mod
from benchmarks.core import (
    CLIENT_FP_RATE,
    ROUTING_FILTER,
    distinct_labels_per_client,
    event_columns,
    map_boxes,
    write_results,
)
from benchmarks.kafka import (
    DEFAULT_BOOTSTRAP,
    delete_run_topics,
    drive,
    event_message,
    passthrough,
    produce_all,
    window,
)
from benchmarks.workload import WorkloadParams, attr_names, generate, space_spec
from broker_node.config import NodeSettings
from broker_node.service import NodeService
from connectors.kafka import ensure_topics, producer_config
from connectors.serde import encode_label_subscription
from connectors.topics import Topics
from dls.mapping import event_labels_batch
from dls.space import ContentSpace

BENCHMARK = "exact"
SYSTEMS = ("topics-exact", "topics-label", "shared-exact", "shared-label")


@dataclass(frozen=True)
class Settings:
    """Sizes of one run."""

    n_clients: int = 1_000
    n_subs: int = 100_000
    events: int = 30_000  # per system and round
    rounds: int = 3
    d: int = 3
    g: int = 32
    distribution: str = "uniform"
    seed: int = 0
    general: bool = False  # each where also excludes a value inside its box: general rows


QUICK = Settings(n_clients=40, n_subs=2_000, events=2_000, rounds=1)


def where_of(lo: np.ndarray, hi: np.ndarray, names: list[str], general: bool = False) -> str:
    """The text of one box subscription, as the SDK normalises it.

    ``general``: also ``a0 != lo + 0.5``, a value no (integer) event has: the same labels
    and matches, but the node's exact check holds it as a general row (``sub.matches``),
    not as a simple one.
    """
    text = " and ".join(f"{n} between {a} and {b}"
                        for n, a, b in zip(names, lo.tolist(), hi.tolist(), strict=True))
    return f"{text} and {names[0]} != {float(lo[0]) + 0.5}" if general else text


def true_deliveries(lo: np.ndarray, hi: np.ndarray, owners: np.ndarray,
                    events: np.ndarray, block: int = 32) -> int:
    """Brute force: how many distinct (client, event) pairs match."""
    total = 0
    for a in range(0, len(events), block):
        ev = events[a:a + block]
        hit = ((lo[None, :, :] <= ev[:, None, :]) & (ev[:, None, :] <= hi[None, :, :])).all(2)
        for row in hit:
            total += len(np.unique(owners[row]))
    return total


def _node(settings: NodeSettings, space: ContentSpace, subs: list[bytes], producer: Producer,
          topics: Topics, n_subs: int) -> tuple[NodeService, float]:
    node = settings.node
    ensure_topics(settings.bootstrap, [topics.node_subscribe(node),
                                       topics.node_unsubscribe(node)],
                  config=service_mod.FOREVER)
    produce_all(producer, topics.node_subscribe(node), subs)
    service = NodeService(settings, space)
    service.start()
    t0 = time.perf_counter()
    drive(service, lambda: len(service.state) >= n_subs, 600.0, f"{node} load", slice_s=0.2)
    return service, time.perf_counter() - t0


def run(s: Settings, bootstrap: str, out: Path) -> list[dict[str, Any]]:
    """The whole benchmark; returns its records (also written to ``out``)."""
    started = time.time()
    prefix = f"bx{uuid.uuid4().hex[:8]}"
    topics = Topics(prefix)
    n_ev = s.events * s.rounds
    w = generate(WorkloadParams(s.distribution, s.d, s.g, s.n_subs, s.n_clients, n_ev,
                                seed=s.seed))
    space0 = ContentSpace.from_spec(space_spec(s.d, s.g))
    offsets, labels = map_boxes(space0, w.lo, w.hi)
    items = max(1, int(np.ceil(distinct_labels_per_client(
        offsets, labels, w.owners, s.n_clients, space0.label_space_size))))
    spec = space_spec(s.d, s.g, {"client": {"expected_items": items,
                                            "fp_rate": CLIENT_FP_RATE},
                                 "routing": dict(ROUTING_FILTER)})
    space_path = Path(f"/tmp/{prefix}-space.json")  # noqa: S108 - a run's own file
    space_path.write_text(json.dumps(spec))
    space = ContentSpace.from_spec(spec)
    names = attr_names(s.d)
    owners = w.owners.tolist()
    subs = [encode_label_subscription(f"c{owners[i]}", f"s{i}",
                                      labels[offsets[i]:offsets[i + 1]],
                                      where_of(w.lo[i], w.hi[i], names, s.general))
            for i in range(s.n_subs)]
    ev_labels, valid = event_labels_batch(space, event_columns(w))
    assert valid.all()  # noqa: S101 - generated inside the domain
    events = [event_message(f"e{i}", row, names, lab, b"")
              for i, (row, lab) in enumerate(zip(w.events.tolist(), ev_labels.tolist(),
                                                 strict=True))]
    truth = [true_deliveries(w.lo, w.hi, w.owners, w.events[r * s.events:(r + 1) * s.events])
             for r in range(s.rounds)]
    base = {**w.params.as_dict(), "events_per_round": s.events, "rounds": s.rounds,
            "client_expected_items": items, "labels_per_subscription": len(labels) / s.n_subs,
            "transport": "loopback, one Kafka broker (KRaft)", "delivery": "exactly_once",
            "edge_rows": "general" if s.general else "simple"}
    records: list[dict[str, Any]] = []

    def add(system: str, metric: str, value: float, unit: str, **params: Any) -> None:
        records.append({"benchmark": BENCHMARK, "system": system,
                        "params": {**base, **params}, "metric": metric, "value": value,
                        "unit": unit})

    producer = Producer(producer_config(bootstrap, **{"linger.ms": 5}))
    nodes: dict[str, NodeService] = {}
    groups: list[str] = []
    try:
        for i, system in enumerate(SYSTEMS):
            st = NodeSettings(node=f"N{i}", neighbours=(), space=space_path,
                              bootstrap=bootstrap, topic_prefix=prefix,
                              exact_delivery=system.endswith("exact"),
                              shared_delivery_partitions=1 if system.startswith("shared") else 0)
            groups += [st.consumer_group, f"{st.consumer_group}-recovery"]
            nodes[system], load_s = _node(st, space, subs, producer, topics, s.n_subs)
            add(system, "load_rate", s.n_subs / load_s, "subscriptions/s")
            print(f"{system}: loaded {s.n_subs} subscriptions in {load_s:.1f} s", flush=True)
        out_topic = f"{prefix}.bench.passthrough"
        ensure_topics(bootstrap, [out_topic])
        order = ["passthrough", *SYSTEMS]
        for r in range(s.rounds):
            part = events[r * s.events:(r + 1) * s.events]
            for system in (order if r % 2 == 0 else order[::-1]):
                _round(system, r, part, truth[r], nodes, topics, producer, bootstrap,
                       out_topic, groups, prefix, add)
    finally:
        for svc in nodes.values():
            svc.close()
        delete_run_topics(bootstrap, prefix, groups)
        space_path.unlink(missing_ok=True)
    write_results(out, records, benchmark=BENCHMARK, module="benchmarks.exact", argv=None,
                  started=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
                  wall=time.time() - started, settings=s.__dict__, bootstrap=bootstrap,
                  load_average=list(os.getloadavg()))
    _summarise(records)
    return records


def _round(system: str, r: int, part: list[tuple[bytes, list[tuple[str, bytes]]]],
           truth: int, nodes: dict[str, NodeService], topics: Topics, producer: Producer,
           bootstrap: str, out_topic: str, groups: list[str], prefix: str, add: Any) -> None:
    n = len(part)
    values, headers = [v for v, _ in part], [h for _, h in part]
    if system == "passthrough":
        source = f"{prefix}.bench.in{r}"
        ensure_topics(bootstrap, [source])
        produce_all(producer, source, values, headers)
        group = f"{prefix}-pt{r}"
        groups.append(group)
        c0 = time.process_time()
        win = window(passthrough(bootstrap, source, group, n, 1000, 0.05, transactional=True,
                                 out_topic=out_topic), n)
        add(system, "throughput", win.rate, "events/s", round=r)
        add(system, "messages_per_event", 1.0, "messages", round=r)
        add(system, "cpu_per_event", (time.process_time() - c0) / n * 1e6, "µs", round=r)
        print(f"round {r} passthrough: {win.rate:,.0f} events/s", flush=True)
        return
    svc = nodes[system]
    m = svc.metrics
    publish = topics.node_publish(svc.settings.node)
    produce_all(producer, publish, values, headers)
    before = (m.events_in, m.deliveries, m.delivery_messages, m.events_forwarded,
              m.edge_removed, m.edge_checked, m.route_cache_hits)
    c0 = time.process_time()
    win = window(drive(svc, lambda: m.events_in >= before[0] + n, 600.0, system), n)
    cpu = time.process_time() - c0
    deliveries = m.deliveries - before[1]
    messages = m.delivery_messages - before[2] + m.events_forwarded - before[3]
    add(system, "throughput", win.rate, "events/s", round=r)
    add(system, "messages_per_event", messages / n, "messages", round=r)
    add(system, "deliveries_per_event", deliveries / n, "deliveries", round=r)
    add(system, "false_deliveries", deliveries - truth, "deliveries", round=r,
        true_deliveries=truth)
    add(system, "edge_removed_per_event", (m.edge_removed - before[4]) / n, "candidates",
        round=r)
    add(system, "edge_values_read_per_event", (m.edge_checked - before[5]) / n, "events",
        round=r)
    add(system, "route_cache_hit_rate", (m.route_cache_hits - before[6]) / n, "share",
        round=r)
    add(system, "cpu_per_event", cpu / n * 1e6, "µs", round=r)
    print(f"round {r} {system}: {win.rate:,.0f} events/s, {messages / n:.2f} messages/event, "
          f"{deliveries - truth} false deliveries, cache hits "
          f"{(m.route_cache_hits - before[6]) / n:.0%}", flush=True)


def _summarise(records: list[dict[str, Any]]) -> None:
    def med(system: str, metric: str) -> float:
        vals = [x["value"] for x in records if x["system"] == system and x["metric"] == metric]
        return float(np.median(vals)) if vals else float("nan")

    pt = med("passthrough", "throughput")
    for system in SYSTEMS:
        print(f"{system:<14} {med(system, 'throughput'):>9,.0f} events/s "
              f"({med(system, 'throughput') / pt:.2f}x passthrough), "
              f"{med(system, 'messages_per_event'):.2f} messages/event, "
              f"{med(system, 'false_deliveries'):,.0f} false deliveries, "
              f"{med(system, 'cpu_per_event'):.1f} µs CPU/event")


def main(argv: list[str] | None = None) -> int:
    """Command line: ``python -m benchmarks.exact [--quick] [--bootstrap] [--out]``."""
    a = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    a.add_argument("--bootstrap", default=DEFAULT_BOOTSTRAP)
    a.add_argument("--out", type=Path, default=Path("benchmarks/results/exact.json"))
    a.add_argument("--quick", action="store_true")
    a.add_argument("--subscriptions", type=int, default=None)
    a.add_argument("--events", type=int, default=None)
    a.add_argument("--rounds", type=int, default=None)
    a.add_argument("--general", action="store_true",
                   help="every where also excludes a value no event has (general rows)")
    args = a.parse_args(argv)
    s = QUICK if args.quick else Settings()
    over = {k: v for k, v in (("n_subs", args.subscriptions), ("events", args.events),
                              ("rounds", args.rounds)) if v is not None}
    if args.general:
        over["general"] = True
    s = Settings(**{**s.__dict__, **over})
    run(s, args.bootstrap, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
