"""Latency bar: a one-partition shared-topic node against the passthrough, paired rounds.

Run (a Kafka must answer at ``--bootstrap``)::

    .venv/bin/python -m benchmarks.kafka_latency [--max-rate R] [--fractions 0.25,0.5]
        [--rounds 5] [--partitions 1] [--delivery at_least_once] [--quick]
        [--out benchmarks/results/kafka_latency.json]

The bar (issue 17): the node's p99 is at most ``BAR_P99_RATIO`` (1.5) x the p99 of the
passthrough of the same kind at the same rate, the median of five paired rounds, at 25 %
and 50 % of the node's measured maximum, one-partition layout. On a shared 2-core machine
single 10-second runs vary by up to 5x, so an absolute bar said more about the machine
than about the node; a ratio of runs back to back at the same rate does not.

1. **Maximum.** Unless ``--max-rate`` gives it, a fresh node (one node with
   ``shared_delivery_partitions``, the same 1,000 clients and 100K subscriptions as
   ``benchmarks.kafka``) routes the workload's ``n_events`` events from its publish topic,
   its loop on this thread, as ``benchmarks.kafka``'s throughput window: its rate from the
   first committed batch to the last is the maximum (``throughput`` and
   ``route_cache_hit_rate`` records with ``phase = "maximum"``).
2. **Paired rounds.** At each fraction of it (``--fractions``), ``--rounds`` times: the node
   and the passthrough of the same kind (transactional for ``exactly_once``), alternating
   which goes first, with the same publisher and receiver processes
   (``benchmarks.kafka.measure_latency``). Each round starts a fresh node (its loop on a
   thread) and a fresh passthrough group, and its publisher sends events drawn anew from
   the workload for that round (``benchmarks.kafka.fresh_events``: its own seed, the same
   distribution and subscriptions; both systems of a round get the same draw). Replaying
   one set of events let the node's route cache answer all of them, which a live stream
   does not get; each node run records its ``route_cache_hit_rate``.

Per run it records ``latency_p50`` / ``latency_p99`` / ``latency_p999`` (ms; absolute
numbers, no bar), splits each delivery's latency at the forwarder (``to_forwarder`` is the
output message's timestamp, set by the forwarder's producer, 1 ms resolution, minus the
send time; ``after_forwarder`` the rest) and records the forwarder process's
garbage-collection time. Per round, ``latency_p99_ratio_round`` (node / passthrough, with
the node's ``route_cache_hit_rate`` in the params); per rate, ``latency_p99_ratio_median``
with the rounds' ``ratios``, their ``route_cache_hit_rates``, the ``bar`` and ``met``. The
records go to ``kafka_latency.json`` (as in ``core.json``) with a meta file and a log.
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
from dataclasses import dataclass, field, replace
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


def _load_node(s: bk.RunSettings, boot: str, p: bk.Prepared, space_path: Path, prefix: str,
               producer: Producer, groups: list[str], parts: int,
               delivery: str) -> tuple[NodeService, Topics]:
    """A fresh shared-topic node under ``prefix`` that has loaded every subscription."""
    topics = Topics(prefix)
    node = bk.SHARED_NODE
    st = NodeSettings(node=node, space=space_path, bootstrap=boot, topic_prefix=prefix,
                      group_id=f"{prefix}-node", delivery=delivery,  # type: ignore[arg-type]
                      shared_delivery_partitions=parts, route_cache_mb=s.route_cache_mb)
    groups += [st.consumer_group, f"{st.consumer_group}-recovery"]
    ensure_topics(boot, [topics.node_subscribe(node), topics.node_unsubscribe(node)],
                  config=bk.service_mod.FOREVER)
    bk.produce_all(producer, topics.node_subscribe(node), p.subscriptions)
    svc = NodeService(st, p.space)
    svc.start()
    bk.drive(svc, lambda: len(svc.state) >= s.n_subs, s.load_timeout_s, "load", slice_s=0.2)
    return svc, topics


def _hits(svc: NodeService) -> tuple[int, int]:
    return svc.metrics.events_in, svc.metrics.route_cache_hits


def _hit_rate(svc: NodeService, before: tuple[int, int]) -> float:
    events, hits = _hits(svc)
    return (hits - before[1]) / max(1, events - before[0])


def _node_run(s: bk.RunSettings, boot: str, p: bk.Prepared, space_path: Path, prefix: str,
              producer: Producer, groups: list[str], rate: float, parts: int,
              delivery: str, tag: str, draw: str) -> dict[str, Any]:
    """Load a fresh node, run it on a thread, measure one paced run; close it."""
    svc, topics = _load_node(s, boot, p, space_path, prefix, producer, groups, parts,
                             delivery)
    m = svc.metrics
    with bk.run_on_thread(svc, "node"):
        watched = [(topics.shared_deliver, delivery_partition(svc.state.clients[0], parts))]
        group = f"{prefix}-recv"
        groups.append(group)
        before = _hits(svc)
        with _GcClock() as clock:
            r = bk.measure_latency(boot, topics.node_publish(bk.SHARED_NODE), watched, group,
                                   lambda: (m.events_in, m.delivery_messages, m.batches), p,
                                   s, rate, tag, draw)
        r["route_cache_hit_rate"] = _hit_rate(svc, before)
    r["gc_s"], r["gc_longest_ms"] = clock.total, clock.longest * 1e3
    return r


def _passthrough_run(s: bk.RunSettings, boot: str, p: bk.Prepared, prefix: str,
                     groups: list[str], rate: float, transactional: bool,
                     tag: str, draw: str) -> dict[str, Any]:
    """The same paced load through a passthrough of the kind."""
    lat_in, out = f"{prefix}.lat-in", f"{prefix}.pt-out"
    ensure_topics(boot, [lat_in, out])
    group = f"{prefix}-pt"
    groups.extend([group, f"{group}-recv"])
    with _GcClock() as clock:
        r = bk.passthrough_latency(boot, lat_in, out, group, s.batch_size, s.poll_timeout_s,
                                   transactional, p, s, rate, tag, draw)
    r["gc_s"], r["gc_longest_ms"] = clock.total, clock.longest * 1e3
    return r


def measure_max(s: bk.RunSettings, boot: str, p: bk.Prepared, space_path: Path,
                prefix: str, producer: Producer, groups: list[str], parts: int,
                delivery: str, system: str, base: dict[str, Any],
                rec: bk.Recorder) -> float:
    """The node's maximum: a fresh node routes ``n_events`` pre-produced events."""
    svc, topics = _load_node(s, boot, p, space_path, prefix, producer, groups, parts,
                             delivery)
    n = s.n_events
    try:
        bk.produce_all(producer, topics.node_publish(bk.SHARED_NODE), p.ev_values[:n],
                       p.ev_headers[:n])
        gc.collect()
        before = _hits(svc)
        win = bk.window(bk.drive(svc, lambda: svc.metrics.events_in >= n, s.phase_timeout_s,
                                 "maximum"), n)
        hit_rate = _hit_rate(svc, before)
    finally:
        svc.close()
    params = {**base, "phase": "maximum", "window_events": win.events,
              "window_s": win.seconds,
              "window": "first to last committed batch, first batch excluded"}
    rec.add(system, params, "throughput", win.rate, "events/s")
    rec.add(system, params, "route_cache_hit_rate", hit_rate, "share")
    rec.log(f"{system} maximum: {win.rate:.0f} events/s ({win.events} events in "
            f"{win.seconds:.2f} s; route cache hits {100 * hit_rate:.1f} %)")
    return win.rate


@dataclass
class _Ratios:
    """The paired p99 ratios (node / passthrough) at one rate, and the node's hit rates."""

    ratios: list[float] = field(default_factory=list)
    hit_rates: list[float] = field(default_factory=list)


def _record_run(rec: bk.Recorder, system: str, params: dict[str, Any],
                r: dict[str, Any]) -> dict[str, float]:
    q = _split(r)
    for name, v in q.items():
        rec.add(system, params, name, v, "ms")
    rec.add(system, params, "gc_time", r["gc_s"], "s")
    rec.add(system, params, "gc_longest", r["gc_longest_ms"], "ms")
    hits = ""
    if "route_cache_hit_rate" in r:
        rec.add(system, params, "route_cache_hit_rate", r["route_cache_hit_rate"], "share")
        hits = f"; route cache hits {100 * r['route_cache_hit_rate']:.1f} %"
    rec.log(f"{system:<20} {params['rate_events_s']:>7.0f} events/s round "
            f"{params['round']}: " + ", ".join(f"{n} {v:.1f}" for n, v in q.items())
            + f" ms; gc {r['gc_s'] * 1e3:.0f} ms (longest {r['gc_longest_ms']:.1f} ms){hits}")
    return q


def run(s: bk.RunSettings, boot: str, fractions: Sequence[float], max_rate: float | None,
        rounds: int, parts: int, delivery: str, rec: bk.Recorder) -> float:
    """The node's maximum (unless given), then at each fraction of it ``rounds`` paired
    rounds of node and passthrough, alternating which goes first; returns the maximum."""
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
            "route_cache_mb": s.route_cache_mb}
    producer = Producer(producer_config(boot, **{"linger.ms": 5}))
    root = f"kl{uuid.uuid4().hex[:8]}"
    groups: list[str] = []
    k = 0
    try:
        with tempfile.TemporaryDirectory() as tmp:
            space_path = Path(tmp) / "space.json"
            space_path.write_text(json.dumps(p.spec))
            measured = max_rate is None
            if max_rate is None:
                max_rate = measure_max(s, boot, p, space_path, f"{root}.max", producer,
                                       groups, parts, delivery, node_name, base, rec)
            base.update({"max_rate": max_rate, "max_rate_measured": measured,
                         "seconds": s.latency_s, "warmup_s": s.latency_warmup_s})
            for frac in fractions:
                rate = frac * max_rate
                paired = _Ratios()
                node_hits = float("nan")
                for rnd in range(rounds):
                    order = ("node", "pt") if rnd % 2 == 0 else ("pt", "node")
                    draw = f"{frac:g} of the maximum, round {rnd}"
                    p99: dict[str, float] = {}
                    for which in order:
                        k += 1
                        prefix = f"{root}.r{k}"
                        if which == "node":
                            system = node_name
                            r = _node_run(s, boot, p, space_path, prefix, producer, groups,
                                          rate, parts, delivery, f"K{k}-", draw)
                        else:
                            system = pt_name
                            r = _passthrough_run(s, boot, p, prefix, groups, rate,
                                                 transactional, f"K{k}-", draw)
                        params = {**base, "rate_events_s": rate, "rate_fraction_of_max": frac,
                                  "round": rnd, "first": order[0],
                                  "achieved_rate": r["achieved_rate"],
                                  "backlog_at_end": r["backlog_at_end"],
                                  "event_draw": r["event_draw"],
                                  "events_digest": r["events_digest"]}
                        q = _record_run(rec, system, params, r)
                        if "latency_p99" in q:
                            p99[which] = q["latency_p99"]
                        if which == "node":
                            node_hits = r["route_cache_hit_rate"]
                    _record_round(rec, node_name, pt_name, {
                        **base, "rate_events_s": rate, "rate_fraction_of_max": frac,
                        "round": rnd, "first": order[0], "event_draw": draw}, p99, node_hits,
                        paired)
                _record_rate(rec, node_name, pt_name, {
                    **base, "rate_events_s": rate, "rate_fraction_of_max": frac}, paired)
                _log_medians(rec, rate, node_name, pt_name)
    finally:
        n = bk.delete_run_topics(boot, root, groups)
        rec.log(f"deleted {n} topics under {root}.")
    return max_rate


def _record_round(rec: bk.Recorder, node_name: str, pt_name: str, params: dict[str, Any],
                  p99: dict[str, float], hit_rate: float, paired: _Ratios) -> None:
    """One round's p99 ratio node / passthrough, with the node's route cache hit rate."""
    rnd, rate = params["round"], params["rate_events_s"]
    if "node" not in p99 or "pt" not in p99 or p99["pt"] <= 0:
        rec.log(f"round {rnd} at {rate:.0f} events/s: no p99 ratio (a run had no samples)")
        return
    ratio = p99["node"] / p99["pt"]
    paired.ratios.append(ratio)
    paired.hit_rates.append(hit_rate)
    rec.add(node_name, {**params, "baseline": pt_name, "node_p99_ms": p99["node"],
                        "baseline_p99_ms": p99["pt"], "route_cache_hit_rate": hit_rate},
            "latency_p99_ratio_round", ratio, f"x {pt_name}")
    rec.log(f"round {rnd} at {rate:.0f} events/s (fresh events): p99 {node_name} "
            f"{p99['node']:.1f} ms / {pt_name} {p99['pt']:.1f} ms = {ratio:.2f} "
            f"(route cache hits {100 * hit_rate:.1f} %)")


def _record_rate(rec: bk.Recorder, node_name: str, pt_name: str, params: dict[str, Any],
                 paired: _Ratios) -> None:
    """The median of the rounds' p99 ratios at one rate against the bar."""
    rate, frac = params["rate_events_s"], params["rate_fraction_of_max"]
    if not paired.ratios:
        rec.log(f"{node_name} at {rate:.0f} events/s: no round gave a p99 ratio")
        return
    med = float(np.median(paired.ratios))
    met = med <= bk.BAR_P99_RATIO
    rec.add(node_name, {**params, "baseline": pt_name, "rounds": len(paired.ratios),
                        "ratios": [round(x, 4) for x in paired.ratios],
                        "route_cache_hit_rates": [round(x, 4) for x in paired.hit_rates],
                        "bar": bk.BAR_P99_RATIO, "met": met},
            "latency_p99_ratio_median", med, f"x {pt_name}")
    rec.log(f"{node_name} / {pt_name} p99 at {rate:.0f} events/s ({frac:.0%} of the "
            f"maximum), median of {len(paired.ratios)} paired rounds: {med:.2f} (bar <= "
            f"{bk.BAR_P99_RATIO:g}: {'met' if met else 'NOT met'}; ratios "
            + ", ".join(f"{x:.2f}" for x in paired.ratios) + "; route cache hits "
            + ", ".join(f"{100 * x:.1f} %" for x in paired.hit_rates) + ")")


def _log_medians(rec: bk.Recorder, rate: float, *systems: str) -> None:
    for system in systems:
        vals = [r["value"] for r in rec.records if r["system"] == system
                and r["metric"] == "latency_p99" and r["params"]["rate_events_s"] == rate]
        if vals:
            rec.log(f"{system} at {rate:.0f} events/s: median p99 over {len(vals)} rounds "
                    f"{float(np.median(vals)):.1f} ms")


def _fractions(text: str) -> tuple[float, ...]:
    try:
        out = tuple(float(x) for x in text.split(","))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(
            f"fractions must be comma-separated numbers, got {text!r}") from exc
    if not out or any(not np.isfinite(x) or x <= 0 or x > 1 for x in out):
        raise argparse.ArgumentTypeError(f"fractions must be in (0, 1], got {text!r}")
    if len(set(out)) != len(out):  # a rate's rounds are named (and drawn) by its fraction
        raise argparse.ArgumentTypeError(f"fractions must be distinct, got {text!r}")
    return out


def _max_rate(text: str) -> float:
    try:
        out = float(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"max rate must be a number, got {text!r}") from exc
    if not np.isfinite(out) or out <= 0:
        raise argparse.ArgumentTypeError(f"max rate must be positive, got {text!r}")
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bootstrap", default=bk.DEFAULT_BOOTSTRAP)
    ap.add_argument("--max-rate", type=_max_rate, default=None, metavar="EVENTS_S",
                    help="the node's maximum in events/s (default: measured first)")
    ap.add_argument("--fractions", type=_fractions, default=(0.25, 0.5),
                    help="rates as fractions of the maximum, comma-separated "
                         "(default 0.25,0.5)")
    ap.add_argument("--rounds", type=int, default=5, help="paired rounds per rate (default 5)")
    ap.add_argument("--partitions", type=int, default=1,
                    help="partitions of the shared delivery topic (default 1)")
    ap.add_argument("--delivery", choices=("at_least_once", "exactly_once"),
                    default="at_least_once")
    ap.add_argument("--quick", action="store_true",
                    help="benchmarks.kafka's quick sizes, 1-second runs")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = ap.parse_args(argv)
    if args.rounds < 1 or args.partitions < 1:
        ap.error(f"--rounds and --partitions must be at least 1, got {args.rounds} and "
                 f"{args.partitions}")
    s = replace(bk.QUICK if args.quick else bk.FULL, latency_low_rates=(),
                latency_configs=((1000, 0.05),))
    rec = bk.Recorder()
    started = datetime.now(UTC).isoformat(timespec="seconds")
    t0 = time.perf_counter()
    load = os.getloadavg()
    rec.log(f"benchmarks.kafka_latency on {args.bootstrap}: maximum "
            f"{'measured' if args.max_rate is None else f'{args.max_rate:g} events/s'}, "
            f"fractions {args.fractions}, {args.rounds} rounds, {args.partitions} "
            f"partition(s), {args.delivery}; load average {load[0]:.2f}")
    max_rate = run(s, args.bootstrap, args.fractions, args.max_rate, args.rounds,
                   args.partitions, args.delivery, rec)
    wall = time.perf_counter() - t0
    out: Path = args.out
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = write_results(out, rec.records, benchmark=BENCHMARK,
                         module="benchmarks.kafka_latency", argv=argv, started=started,
                         wall=wall, quick=args.quick, bootstrap=args.bootstrap,
                         max_rate=max_rate, max_rate_measured=args.max_rate is None,
                         fractions=list(args.fractions), rounds=args.rounds,
                         partitions=args.partitions, delivery=args.delivery,
                         bar_p99_ratio=bk.BAR_P99_RATIO,
                         loadavg_1min_start_end=[round(load[0], 2),
                                                 round(os.getloadavg()[0], 2)])
    rec.log(f"wrote {len(rec.records)} records to {out} and {meta} in {wall:.1f} s")
    out.with_name(out.stem + ".log").write_text("\n".join(rec.lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
