"""Latency probe: a shared-topic node and a passthrough at the same fixed rates, in rounds.

Run (a Kafka must answer at ``--bootstrap``)::

    .venv/bin/python -m benchmarks.kafka_latency [--rates 25000,45000] [--rounds 3]
        [--partitions 1] [--delivery at_least_once] [--quick]
        [--out benchmarks/results/kafka_latency.json]

``benchmarks.kafka`` measures each system once at half of its own maximum rate, so two
systems meet at different rates and single 10-second runs on a shared 2-core machine vary
by up to 5x. This probe holds the rate fixed and alternates, round after round, the node
(one node with ``shared_delivery_partitions`` and the same 1,000 clients and 100K
subscriptions as ``benchmarks.kafka``) and the passthrough of the same kind (transactional
for ``exactly_once``), with the same publisher and receiver processes
(``benchmarks.kafka.measure_latency``). Each round starts a fresh node (its loop on a
thread, as in ``benchmarks.kafka``) and a fresh passthrough group.

Per run it records ``latency_p50`` / ``latency_p99`` / ``latency_p999`` (ms), and splits
each delivery's latency at the forwarder: ``to_forwarder`` is the output message's
timestamp (set by the forwarder's producer when it produced it, 1 ms resolution) minus
the send time, ``after_forwarder`` the rest (the output's batching, the broker, the
receiver). It also records the forwarder process's garbage-collection time during the
run. The records go to ``kafka_latency.json`` (as in ``core.json``) with a meta file.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
from confluent_kafka import Producer

from benchmarks import kafka as bk
from benchmarks.core import write_results
from broker_node.config import NodeSettings
from broker_node.service import NodeService
from connectors.kafka import ensure_topics, producer_config
from connectors.topics import Topics, delivery_partition

BENCHMARK = "kafka_latency"
DEFAULT_OUT = Path(__file__).parent / "results" / "kafka_latency.json"


class _GcClock:
    """Total and longest time spent in garbage collections inside a ``with`` block."""

    def __init__(self) -> None:
        self.total = 0.0
        self.longest = 0.0
        self._t0 = 0.0

    def __enter__(self) -> _GcClock:
        gc.callbacks.append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self)

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._t0 = time.perf_counter()
        else:
            d = time.perf_counter() - self._t0
            self.total += d
            self.longest = max(self.longest, d)


def _split(r: dict[str, Any]) -> dict[str, float]:
    lat = r["latency_ms"]
    out: dict[str, float] = {}
    if not len(lat):
        return out
    for name, q in (("p50", 50), ("p99", 99), ("p999", 99.9)):
        out[f"latency_{name}"] = float(np.percentile(lat, q))
    fwd = r.get("to_forwarder_ms")
    if fwd is not None and len(fwd) == len(lat):
        for name, q in (("p50", 50), ("p99", 99)):
            out[f"to_forwarder_{name}"] = float(np.percentile(fwd, q))
            out[f"after_forwarder_{name}"] = float(np.percentile(lat - fwd, q))
    return out


def _node_run(s: bk.RunSettings, boot: str, p: bk.Prepared, space_path: Path, prefix: str,
              producer: Producer, groups: list[str], rate: float, parts: int,
              delivery: str, tag: str) -> dict[str, Any]:
    """Load a fresh node, run it on a thread, measure one paced run; close it."""
    topics = Topics(prefix)
    node = bk.SHARED_NODE
    st = NodeSettings(node=node, space=space_path, bootstrap=boot, topic_prefix=prefix,
                      group_id=f"{prefix}-node", delivery=delivery,  # type: ignore[arg-type]
                      shared_delivery_partitions=parts)
    groups += [st.consumer_group, f"{st.consumer_group}-recovery"]
    ensure_topics(boot, [topics.node_subscribe(node), topics.node_unsubscribe(node)],
                  config=bk.service_mod.FOREVER)
    bk.produce_all(producer, topics.node_subscribe(node), p.subscriptions)
    svc = NodeService(st, p.space)
    svc.start()
    bk.drive(svc, lambda: len(svc.state) >= s.n_subs, s.load_timeout_s, "load", slice_s=0.2)
    m = svc.metrics
    with bk.run_on_thread(svc, "node"):
        watched = [(topics.shared_deliver, delivery_partition(svc.state.clients[0], parts))]
        group = f"{prefix}-recv"
        groups.append(group)
        with _GcClock() as clock:
            r = bk.measure_latency(boot, topics.node_publish(node), watched, group,
                                   lambda: (m.events_in, m.delivery_messages, m.batches), p,
                                   s, rate, tag)
    r["gc_s"], r["gc_longest_ms"] = clock.total, clock.longest * 1e3
    return r


def _passthrough_run(s: bk.RunSettings, boot: str, p: bk.Prepared, prefix: str,
                     groups: list[str], rate: float, transactional: bool,
                     tag: str) -> dict[str, Any]:
    """The same paced load through a passthrough of the kind."""
    lat_in, out = f"{prefix}.lat-in", f"{prefix}.pt-out"
    ensure_topics(boot, [lat_in, out])
    group = f"{prefix}-pt"
    groups.extend([group, f"{group}-recv"])
    with _GcClock() as clock:
        r = bk.passthrough_latency(boot, lat_in, out, group, s.batch_size, s.poll_timeout_s,
                                   transactional, p, s, rate, tag)
    r["gc_s"], r["gc_longest_ms"] = clock.total, clock.longest * 1e3
    return r


def run(s: bk.RunSettings, boot: str, rates: Sequence[float], rounds: int, parts: int,
        delivery: str, rec: bk.Recorder) -> None:
    """Every rate, ``rounds`` times: node and passthrough, alternating which goes first."""
    bk.wait_for_broker(boot, timeout=30)
    p = bk.prepare(s, s.n_events, rec)
    gc.collect()
    gc.freeze()  # as benchmarks.kafka does: neither forwarder scans the workload
    p.base["gc_threshold"] = bk.young_threshold()  # a node's, for both forwarders
    transactional = delivery == "exactly_once"
    node_name = f"dls-shared-p{parts}" + ("-eos" if transactional else "")
    pt_name = "passthrough" if transactional else "passthrough-nontx"
    base = {**p.base, "shared_delivery_partitions": parts, "delivery": delivery,
            "batch_size": s.batch_size, "poll_timeout_s": s.poll_timeout_s,
            "seconds": s.latency_s, "warmup_s": s.latency_warmup_s}
    producer = Producer(producer_config(boot, **{"linger.ms": 5}))
    root = f"kl{uuid.uuid4().hex[:8]}"
    groups: list[str] = []
    k = 0
    try:
        with tempfile.TemporaryDirectory() as tmp:
            space_path = Path(tmp) / "space.json"
            space_path.write_text(json.dumps(p.spec))
            for rate in rates:
                for rnd in range(rounds):
                    order = ("node", "pt") if rnd % 2 == 0 else ("pt", "node")
                    for which in order:
                        k += 1
                        prefix = f"{root}.r{k}"
                        if which == "node":
                            system = node_name
                            r = _node_run(s, boot, p, space_path, prefix, producer, groups,
                                          rate, parts, delivery, f"K{k}-")
                        else:
                            system = pt_name
                            r = _passthrough_run(s, boot, p, prefix, groups, rate,
                                                 transactional, f"K{k}-")
                        params = {**base, "rate_events_s": rate, "round": rnd,
                                  "first": order[0], "achieved_rate": r["achieved_rate"],
                                  "backlog_at_end": r["backlog_at_end"]}
                        q = _split(r)
                        for name, v in q.items():
                            rec.add(system, params, name, v, "ms")
                        rec.add(system, params, "gc_time", r["gc_s"], "s")
                        rec.add(system, params, "gc_longest", r["gc_longest_ms"], "ms")
                        rec.log(f"{system:<20} {rate:>7.0f} events/s round {rnd}: "
                                + ", ".join(f"{n} {v:.1f}" for n, v in q.items())
                                + f" ms; gc {r['gc_s'] * 1e3:.0f} ms (longest "
                                f"{r['gc_longest_ms']:.1f} ms)")
                _log_medians(rec, rate, node_name, pt_name)
    finally:
        n = bk.delete_run_topics(boot, root, groups)
        rec.log(f"deleted {n} topics under {root}.")


def _log_medians(rec: bk.Recorder, rate: float, *systems: str) -> None:
    for system in systems:
        vals = [r["value"] for r in rec.records if r["system"] == system
                and r["metric"] == "latency_p99" and r["params"]["rate_events_s"] == rate]
        if vals:
            rec.log(f"{system} at {rate:.0f} events/s: median p99 over {len(vals)} rounds "
                    f"{float(np.median(vals)):.1f} ms (bar {bk.BAR_P99_MS:g} ms)")


def _rates(text: str) -> tuple[float, ...]:
    try:
        out = tuple(float(x) for x in text.split(","))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"rates must be numbers, got {text!r}") from exc
    if not out or any(not np.isfinite(x) or x <= 0 for x in out):
        raise argparse.ArgumentTypeError(f"rates must be positive, got {text!r}")
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bootstrap", default=bk.DEFAULT_BOOTSTRAP)
    ap.add_argument("--rates", type=_rates, default=(25_000.0, 45_000.0),
                    help="events/s, comma-separated (default 25000,45000)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds per rate (default 3)")
    ap.add_argument("--partitions", type=int, default=1,
                    help="partitions of the shared delivery topic (default 1)")
    ap.add_argument("--delivery", choices=("at_least_once", "exactly_once"),
                    default="at_least_once")
    ap.add_argument("--quick", action="store_true",
                    help="benchmarks.kafka's quick sizes, one 3-second run per rate")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = ap.parse_args(argv)
    if args.rounds < 1 or args.partitions < 1:
        ap.error("--rounds and --partitions must be at least 1")
    s = replace(bk.QUICK if args.quick else bk.FULL, latency_low_rates=(),
                latency_configs=((1000, 0.05),))
    rec = bk.Recorder()
    started = datetime.now(UTC).isoformat(timespec="seconds")
    t0 = time.perf_counter()
    load = os.getloadavg()
    rec.log(f"benchmarks.kafka_latency on {args.bootstrap}: rates {args.rates}, "
            f"{args.rounds} rounds, {args.partitions} partition(s), {args.delivery}; "
            f"load average {load[0]:.2f}")
    run(s, args.bootstrap, args.rates, args.rounds, args.partitions, args.delivery, rec)
    wall = time.perf_counter() - t0
    out: Path = args.out
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = write_results(out, rec.records, benchmark=BENCHMARK,
                         module="benchmarks.kafka_latency", argv=argv, started=started,
                         wall=wall, quick=args.quick, bootstrap=args.bootstrap,
                         rates=list(args.rates), rounds=args.rounds,
                         partitions=args.partitions, delivery=args.delivery,
                         loadavg_1min_start_end=[round(load[0], 2),
                                                 round(os.getloadavg()[0], 2)])
    rec.log(f"wrote {len(rec.records)} records to {out} and {meta} in {wall:.1f} s")
    out.with_name(out.stem + ".log").write_text("\n".join(rec.lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
