"""Run the soak: calibrate the network's maximum rate, then ten minutes at half of it.

    .venv/bin/python -m benchmarks.soak                      # make soak (~17 min)
    .venv/bin/python -m benchmarks.soak --duration 120 --calibrate 20   # a short look
    .venv/bin/python -m benchmarks.soak --rate 500           # no calibration: this rate

Both phases run the fault harness's network (:mod:`benchmarks.chaos`: nodes A-B-C in a
line, ``dlsroute node`` processes, two clients per node subscribing and unsubscribing
every 2-5 s, one publisher per node) without faults, on a Kafka broker of its own
(``--port``, wiped at the start, stopped at the end), each phase under a fresh topic
prefix with fresh processes:

1. **Calibration**: a node's maximum is its routing rate while saturated (a backlog at
   its inputs), in published events per second: its ``dls_events_in_total`` rate divided
   by its *share* (events it routed per published event, forwarded copies included,
   counted once the network drained). Two ways to saturate it, one after the other:

   - *burst* (``--calibrate`` s): publishers as fast as they can, nodes running, read
     every 2 s. A node whose lag at the end exceeds 1 s of its routing, and grew over the
     second half, was saturated: its rate there is its maximum with the publishers
     competing for the same cores, as they do in the soak;
   - *backlog* (``--calibrate``/2 s more): nodes SIGSTOPped (below the 45 s session and
     60 s transaction timeouts) while the publishers go on, then publishers stopped and
     nodes SIGCONTed; each node's counter read every 0.5 s until it last moved, the
     machine to the nodes alone.

   The network's maximum is the smallest over the nodes saturated in the burst; when none
   was (the publishers could not outrun the nodes), the backlog's: the events published
   while the nodes were stopped over the time until the last node routed its last event
   (end to end, the network's slowest path included).
2. **Soak** (``--warmup`` then ``--duration`` s, one run) at half that maximum (or
   ``--rate``), churn as above. The warm-up lets each node fill its bounded memories (the
   routed-id memory of :data:`broker_node.inbox.ROUTED_MEMORY` events, two generations):
   by default ``WARMUP_ROUTED * ROUTED_MEMORY / rate`` s, at least ``WARMUP_MIN_S``. Its
   events are checked like the others; only the memory fit leaves it out. Every
   ``--sample`` s: ``/proc/<pid>/status`` of every node, client, publisher and of the
   broker's JVM (:mod:`benchmarks.soak.memory`), the nodes' metrics and input lag, the
   machine's load. Then the drain and the verdict of :mod:`benchmarks.soak.check` (every
   confirmed event against every subscription window, brute force) and a least-squares
   slope of RSS over the last ``--window`` s (of the measured part) per process, flat or not as
   :mod:`benchmarks.soak.memory` defines it.

Results: ``--out`` (JSON, every sample included) and a PNG of RSS over time beside it.
The exit code is 1 when a pair is missing or repeated or a node's memory grows.
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import sys
import tempfile
import threading
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from benchmarks.chaos.cluster import Broker, Proc, Supervisor, metrics, node_lag
from benchmarks.chaos.common import JsonLines, now
from benchmarks.chaos.run import NODES, Params, ScenarioRun
from benchmarks.chaos.scenarios import Scenario
from benchmarks.soak.check import INF, check
from benchmarks.soak.memory import fit_slope, loadavg, read_status
from broker_node.inbox import ROUTED_MEMORY

#: Publisher rate (events/s, all together) that no publisher reaches: as fast as they can.
UNTHROTTLED = 1e6
#: The default warm-up lasts until this many times ROUTED_MEMORY events were published
#: (a node remembers up to twice ROUTED_MEMORY routed ids, and routes at least its own
#: publisher's third of the events), and at least WARMUP_MIN_S: the nodes' RSS rose for
#: about 4 minutes at 1,729 events/s (benchmarks/results/soak_nowarmup.json) and 3.5 at
#: 3,886/s (soak.json), then stayed flat; the fit's window starts 2 minutes after the
#: warm-up (10 min measured, the last 8 fitted).
WARMUP_ROUTED = 4
WARMUP_MIN_S, WARMUP_MAX_S = 120.0, 900.0


def default_warmup(rate: float) -> float:
    """Seconds of warm-up at ``rate`` events/s (see :data:`WARMUP_ROUTED`)."""
    return round(min(WARMUP_MAX_S, max(WARMUP_MIN_S, WARMUP_ROUTED * ROUTED_MEMORY / rate)))
#: Seconds between metric samples during the calibration.
CAL_SAMPLE_S = 2.0
#: Seconds between counter reads while the backlog drains.
CAL_POLL_S = 0.5
#: A node is saturated in the burst when its lag ends above this many seconds of its own
#: routing, and grew.
SATURATED_S = 1.0
#: Records a node may have left unread and still count as caught up: an idle network's
#: heartbeats and transaction markers (a few per input; a backlog is thousands).
CAUGHT_UP_RECORDS = 50


class Network(ScenarioRun):
    """The harness's fault-free network, driven phase by phase."""

    def __init__(self, name: str, p: Params, broker: Broker, root: Path) -> None:
        super().__init__(Scenario(name, "none"), p, broker, root)
        self.supervisor = Supervisor([*self.nodes.values(), *self.clients.values()],
                                     self.log_fault)

    def procs(self) -> list[Proc]:
        return [*self.nodes.values(), *self.clients.values(), *self.publishers]

    def start(self) -> None:
        """Nodes, then clients (each with its first subscriptions); no publisher yet."""
        self._start_all(list(self.nodes.values()), 180)
        self._start_all(list(self.clients.values()), 120)
        self.supervisor.start()

    def publish(self) -> None:
        self.t_start = now()
        self.log_fault(kind="publishing", target="all", rate=self.p.rate)
        for pub in self.publishers:
            pub.start()

    def stop_publishing(self) -> float:
        """Stop publishers and churn; wait for the publishers' last reports; the stop time."""
        for what in ("stop-publish", "stop-churn"):
            (self.dir / what).touch()
        t = now()
        self.log_fault(kind="stopped_publishing", target="all")
        for pub in self.publishers:
            if pub.popen is not None:
                pub.popen.wait(240)
        return t

    def lags(self) -> dict[str, int | None]:
        return {n: node_lag(self.broker.bootstrap, self.prefix, n, nb) for n, nb in NODES.items()}

    def caught_up(self) -> bool:
        """Every node has read its inputs (:data:`CAUGHT_UP_RECORDS`)."""
        return all(v is not None and v <= CAUGHT_UP_RECORDS for v in self.lags().values())

    def counters(self, name: str = "dls_events_in_total") -> dict[str, float | None]:
        return {n: (metrics(port, timeout=2.0) or {}).get(name) for n, port in self.ports.items()}

    def wait_caught_up(self, max_s: float) -> float | None:
        """Seconds until every node read all its inputs (twice in a row); None: not in time."""
        t0, calm = now(), 0
        while now() - t0 < max_s:
            calm = calm + 1 if self.caught_up() else 0
            if calm >= 2:
                return round(now() - t0, 1)
            time.sleep(2.0)
        return None

    def drain(self, max_s: float) -> tuple[dict[str, Any], float, str]:
        """Wait for missing pairs as the chaos harness does; the verdict, seconds, why."""
        t0, calm, last = now(), 0, None
        while True:
            v = check(self.dir)
            if v["missing"] == 0:
                time.sleep(3.0)  # late repeats, if any, are counted
                return check(self.dir), round(now() - t0, 1), "complete"
            if now() - t0 > max_s:
                return v, round(now() - t0, 1), "timeout"
            state = (v["missing"], v["delivered_pairs"])
            calm = calm + 1 if state == last and self.caught_up() else 0
            if calm >= 2:
                return v, round(now() - t0, 1), "caught_up"
            last = state
            time.sleep(5.0)

    def stop(self) -> None:
        self.supervisor.stop.set()
        self.supervisor.join(5)
        for proc in self.procs():
            with proc.lock:
                proc.held = True
            proc.terminate(20)

    def exits(self) -> list[dict[str, Any]]:
        path = self.dir / "faults.jsonl"
        recs = [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []
        return [r for r in recs if r.get("kind") == "exit"]


def _confirmed(net: Network) -> int:
    """Events with an ok delivery report, from the publishers' files (a cheap count)."""
    return sum('"k":"dr"' in line and '"ok":true' in line
               for path in (net.dir / "publishers").glob("*.jsonl")
               for line in path.open(encoding="utf-8"))


def _rate(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of (t, count) points: events per second."""
    n = len(points)
    tm = sum(t for t, _ in points) / n
    cm = sum(c for _, c in points) / n
    sxx = sum((t - tm) ** 2 for t, _ in points)
    return sum((t - tm) * (c - cm) for t, c in points) / sxx if sxx > 0 else 0.0


def _hold_nodes(net: Network, sig: signal.Signals) -> None:
    """SIGSTOP (held by the harness: the supervisor leaves them be) or SIGCONT every node."""
    for proc in net.nodes.values():
        with proc.lock:
            proc.held = sig == signal.SIGSTOP
            proc.signal(sig)
    net.log_fault(kind=sig.name.lower(), target="nodes")


def _burst(net: Network, seconds: float) -> tuple[dict[str, list[tuple[float, float]]],
                                                   dict[str, list[int]]]:
    """Publishers unthrottled for ``seconds``; each node's events_in and lag every 2 s."""
    series: dict[str, list[tuple[float, float]]] = {n: [] for n in NODES}
    lags: dict[str, list[int]] = {n: [] for n in NODES}
    net.publish()
    while (t := now() - net.t_start) < seconds:
        for n, c in net.counters().items():
            if c is not None:
                series[n].append((t, c))
        if t >= seconds / 2:
            for n, lag in net.lags().items():
                if lag is not None:
                    lags[n].append(lag)
        time.sleep(CAL_SAMPLE_S)
    return series, lags


def _backlog(net: Network, seconds: float, drain_max: float
             ) -> tuple[dict[str, float | None], dict[str, float | None], float | None]:
    """Nodes stopped, publishers on for ``seconds``, then nodes on: the drain, timed.

    Returns each node's events_in when stopped, the seconds from SIGCONT until its
    counter last moved, and the seconds until every node had read all its inputs.
    """
    at_stop = net.counters()
    _hold_nodes(net, signal.SIGSTOP)
    time.sleep(seconds)
    net.stop_publishing()
    t_cont = now()
    _hold_nodes(net, signal.SIGCONT)
    last: dict[str, tuple[float | None, float | None]] = {n: (None, None) for n in NODES}
    drained, calm, t_lag = None, 0, 0.0
    while now() - t_cont < drain_max:
        t = now() - t_cont
        for n, c in net.counters().items():
            if c is not None and c != last[n][1]:
                last[n] = (t, c)
        if t - t_lag >= 2.0:
            t_lag = t
            calm = calm + 1 if net.caught_up() else 0
            if calm >= 2:
                drained = round(now() - t_cont, 1)
                break
        time.sleep(CAL_POLL_S)
    return at_stop, {n: v[0] for n, v in last.items()}, drained


def calibrate(broker: Broker, p: Params, work: Path, seconds: float) -> dict[str, Any]:
    """The network's maximum rate (module docstring, phase 1), with its parts."""
    net = Network("calibration", replace(p, rate=UNTHROTTLED), broker, work)
    try:
        net.start()
        series, lags = _burst(net, seconds)
        t_burst = now() - net.t_start
        at_stop, drain_s, drained = _backlog(net, seconds / 2, 300.0)
        t_stop = now() - net.t_start
        in_burst = _published_between(net, net.t_start, net.t_start + t_burst)
        in_backlog = _published_between(net, net.t_start + t_burst, INF)
        totals = net.counters()
        published = _confirmed(net)
        verdict = check(net.dir) if drained is not None else None
    finally:
        net.stop()
    nodes: dict[str, Any] = {}
    for n in NODES:
        share = (totals[n] or 0.0) / published if published else 0.0
        pts = [(t, c) for t, c in series[n] if t >= seconds / 2]
        rate = _rate(pts) if len(pts) >= 3 else 0.0
        lag = lags[n] or [0]
        saturated = lag[-1] > max(lag[0], rate * SATURATED_S)
        routed = (totals[n] or 0.0) - (at_stop[n] or 0.0)
        took = drain_s[n]
        drain_rate = routed / took if took else 0.0
        nodes[n] = {"share": share, "burst_events_in_per_s": rate, "burst_lag_first": lag[0],
                    "burst_lag_last": lag[-1], "saturated_in_burst": saturated,
                    "burst_max": rate / share if share and saturated else None,
                    "backlog_events": routed, "backlog_drain_s": drain_s[n],
                    "backlog_events_in_per_s": drain_rate}
    burst = [v["burst_max"] for v in nodes.values() if v["burst_max"]]
    ends = [v for v in drain_s.values() if v]
    # the events published while the nodes were stopped, routed end to end (to the last
    # node's last event) in this long: the burst's leftover, when it had none, is small
    backlog = in_backlog / max(ends) if ends and drained is not None else 0.0
    return {"burst_s": round(t_burst, 1), "published": published,
            "burst_published_per_s": round(in_burst / t_burst, 1),
            "backlog_publish_s": round(seconds / 2, 1), "backlog_published": in_backlog,
            "drained_s": drained, "total_s": round(t_stop, 1), "nodes": nodes,
            "publisher_limited": not burst, "max_from": "burst" if burst else "backlog",
            "max_rate": min(burst) if burst else backlog, "backlog_max_rate": backlog,
            "check": verdict, "dir": str(net.dir), "prefix": net.prefix}


def _published_between(net: Network, t_from: float, t_to: float) -> int:
    """Events whose ``publish()`` was called between two times (``pub`` records)."""
    n = 0
    for path in (net.dir / "publishers").glob("*.jsonl"):
        for line in path.open(encoding="utf-8"):
            if line.startswith('{"k":"pub"') and t_from <= json.loads(line)["t0"] < t_to:
                n += 1
    return n


class Sampler(threading.Thread):
    """Every ``period`` s from the soak's start: RSS and CPU of every process, node metrics.

    Samples are taken at ``t_start + k * period`` (no drift); the node metrics and lags
    after the ``/proc`` reads, so that the memory samples are on time.
    """

    def __init__(self, net: Network, period: float) -> None:
        super().__init__(name="sampler", daemon=True)
        self.net, self.period = net, period
        self.samples: list[dict[str, Any]] = []
        self.nodes: list[dict[str, Any]] = []
        self.stop = threading.Event()
        self.out = JsonLines(net.dir / "memory.jsonl")

    def targets(self) -> list[tuple[str, str, int | None]]:
        procs = [(p.name, p.kind, p.pid if p.alive() else None) for p in self.net.procs()]
        return [*procs, ("kafka", "broker", self.net.broker.pid())]

    def sample(self, t: float) -> None:
        for name, kind, pid in self.targets():
            st = read_status(pid) if pid is not None else None
            rec = {"t": round(t, 2), "name": name, "kind": kind, "pid": pid,
                   **({} if st is None else {k: round(v, 3) for k, v in st.items()})}
            self.samples.append(rec)
            self.out.write(**rec)
        m = {n: metrics(port, timeout=2.0) or {} for n, port in self.net.ports.items()}
        lags = self.net.lags()
        for n in NODES:
            rec = {"t": round(t, 2), "node": n, "lag": lags[n], "load1": loadavg(),
                   **{k[4:]: m[n].get(k) for k in ("dls_subscriptions", "dls_events_in_total",
                                                    "dls_batches_total",
                                                    "dls_deliveries_total")}}
            self.nodes.append(rec)

    def run(self) -> None:
        k = 0
        while True:
            due = self.net.t_start + k * self.period
            if self.stop.wait(max(0.0, due - now())):
                return
            self.sample(now() - self.net.t_start)
            k += 1


def memory_fits(samples: list[dict[str, Any]], duration: float,
                window: float) -> dict[str, Any]:
    """Per process: the fit of VmRSS (and RssAnon) over the last ``window`` s."""
    out: dict[str, Any] = {}
    for name in dict.fromkeys(s["name"] for s in samples):
        mine = [s for s in samples if s["name"] == name and "VmRSS" in s]
        if not mine:
            continue
        pids = list(dict.fromkeys(s["pid"] for s in mine))
        last = [s for s in mine if s["pid"] == pids[-1] and s["t"] >= duration - window - 1e-6]
        rec: dict[str, Any] = {"kind": mine[0]["kind"], "pids": pids, "restarts": len(pids) - 1,
                               "rss_start_mib": mine[0]["VmRSS"],
                               "rss_max_mib": max(s["VmRSS"] for s in mine)}
        if len(last) >= 3:
            rec["rss"] = fit_slope([s["t"] for s in last], [s["VmRSS"] for s in last]).record()
            if all("RssAnon" in s for s in last):
                rec["anon"] = fit_slope([s["t"] for s in last],
                                        [s["RssAnon"] for s in last]).record()
        cpu = [s for s in mine if "cpu_s" in s and s["pid"] == pids[-1]]
        if len(cpu) >= 2 and cpu[-1]["t"] > cpu[0]["t"]:
            rec["cpu_share"] = round((cpu[-1]["cpu_s"] - cpu[0]["cpu_s"])
                                     / (cpu[-1]["t"] - cpu[0]["t"]), 3)
        out[name] = rec
    return out


def soak(broker: Broker, p: Params, work: Path, duration: float, period: float,
         window: float, drain_max: float, warmup: float = 0.0) -> dict[str, Any]:
    """Phase 2 of the module docstring: the record of the soak itself.

    Times in the record count from the start of publishing, the warm-up included.
    """
    net = Network("soak", p, broker, work)
    sampler = Sampler(net, period)
    try:
        net.start()
        net.publish()
        sampler.start()
        end = warmup + duration
        while now() - net.t_start < end + 0.5 * period:  # the sample at `end` too
            time.sleep(1.0)
        sampler.stop.set()
        sampler.join(60)
        t_stop = net.stop_publishing() - net.t_start
        verdict, drain_s, drain_end = net.drain(drain_max)
    finally:
        sampler.stop.set()
        net.stop()
    loads = [r["load1"] for r in sampler.nodes if r["load1"] is not None]
    return {"rate": p.rate, "warmup_s": warmup, "publishing_s": round(t_stop, 1),
            "drain_s": drain_s,
            "drain_end": drain_end, **{k: v for k, v in verdict.items()},
            "published_per_s": round(verdict["published"] / t_stop, 1),
            "exits": net.exits(), "dir": str(net.dir), "prefix": net.prefix,
            "memory": memory_fits(sampler.samples, end, window),
            "load1_mean": round(sum(loads) / len(loads), 2) if loads else None,
            "load1_max": max(loads, default=None),
            "samples": sampler.samples, "node_samples": sampler.nodes}


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Broker up (wiped), calibration unless ``--rate``, soak, broker down; the results."""
    work = args.work_dir or Path(tempfile.gettempdir(), "dlsroute-soak",
                                 f"{args.seed}-{int(time.time())}")
    work.mkdir(parents=True, exist_ok=True)
    broker = Broker(args.port, work / "kafka.log")
    p = Params(seed=args.seed, duration=args.duration, port=args.port,
               clients_per_node=args.clients_per_node)
    print(f"soak: seed {args.seed}; history in {work}; broker on {broker.bootstrap}", flush=True)
    results: dict[str, Any] = {"benchmark": "soak", "seed": args.seed,
                               "command": " ".join(sys.argv), "started": now(),
                               "work_dir": str(work),
                               "params": {**asdict(p), "calibrate_s": args.calibrate,
                                          "sample_s": args.sample, "window_s": args.window,
                                          "drain_max_s": args.drain}}
    broker.clean()
    broker.up()
    try:
        if args.rate is None:
            print(f"soak: calibration, publishers unthrottled for {args.calibrate:.0f} s",
                  flush=True)
            cal = results["calibration"] = calibrate(broker, p, work, args.calibrate)
            rate = round(cal["max_rate"] / 2, 1)
            print(f"soak: maximum {cal['max_rate']:.0f} events/s (from the {cal['max_from']}; "
                  f"publishers sent {cal['burst_published_per_s']:.0f}/s); soak at {rate}/s",
                  flush=True)
        else:
            rate = args.rate
            results["calibration"] = {"given_rate": rate}
        warmup = default_warmup(rate) if args.warmup is None else args.warmup
        results["params"]["warmup_s"] = warmup
        print(f"soak: {warmup:.0f} s of warm-up, then {args.duration:.0f} s, at {rate} "
              f"events/s", flush=True)
        results["soak"] = soak(broker, replace(p, rate=rate), work, args.duration,
                               args.sample, args.window, args.drain, warmup)
    finally:
        broker.down()
    results["wall_s"] = round(now() - results["started"], 1)
    results["verdict"] = verdict(results["soak"])
    return results


def verdict(s: dict[str, Any]) -> dict[str, Any]:
    """Required: nothing missing, nothing repeated (exactly once), no node's RSS grows."""
    grows = {n: m["rss"]["grows"] for n, m in s["memory"].items() if "rss" in m}
    nodes = {n: grows.get(n) for n in NODES}
    ok = (s["expected"] > 0 and s["missing"] == 0 and s["duplicates"] == 0
          and not any(v is None or v for v in nodes.values()) and not s["exits"])
    return {"ok": ok, "no_loss": s["missing"] == 0, "no_duplicates": s["duplicates"] == 0,
            "nodes_grow": nodes, "others_grow": {n: g for n, g in grows.items()
                                                 if n not in NODES},
            "process_exits": len(s["exits"])}


def summary(results: dict[str, Any]) -> str:
    """The lines printed at the end (and the numbers docs/testing.md quotes)."""
    s, lines = results["soak"], []
    cal = results.get("calibration", {})
    if "max_rate" in cal:
        lines.append(f"maximum {cal['max_rate']:.0f} events/s from the {cal['max_from']} "
                     f"(backlog {cal['backlog_max_rate'] or 0:.0f}/s; publishers sent "
                     f"{cal['burst_published_per_s']:.0f}/s unthrottled)")
    lines.append(f"soak {s['rate']} events/s for {s['publishing_s']} s (warm-up "
                 f"{s.get('warmup_s', 0):.0f} s): published "
                 f"{s['published']}, expected pairs {s['expected']}, missing {s['missing']}, "
                 f"duplicates {s['duplicates']}, unexpected {s['unexpected']}; drain "
                 f"{s['drain_s']} s ({s['drain_end']}); load {s['load1_mean']} mean")
    for name, m in s["memory"].items():
        f = m.get("rss")
        if f:
            lines.append(f"  {name:7} RSS {f['first_mib']:7.1f} -> {f['last_mib']:7.1f} MiB  "
                         f"slope {f['slope_mib_per_min']:+.3f} ± {f['ci95_mib_per_min']:.3f} "
                         f"MiB/min  {f['why']}")
    lines.append(f"verdict: {'ok' if results['verdict']['ok'] else 'FAIL'}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    a = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    a.add_argument("--duration", type=float, default=600.0, help="soak seconds (10 min)")
    a.add_argument("--rate", type=float, default=None,
                   help="events/s, all publishers (default: half the calibrated maximum)")
    a.add_argument("--warmup", type=float, default=None,
                   help="seconds at the soak's rate before the measured part (default: "
                        "WARMUP_ROUTED * ROUTED_MEMORY / rate, 120-900 s)")
    a.add_argument("--calibrate", type=float, default=30.0,
                   help="seconds of unthrottled publishing to find the maximum")
    a.add_argument("--port", type=int, default=29110, help="this run's own Kafka port")
    a.add_argument("--out", type=Path, default=Path("benchmarks/results/soak.json"))
    a.add_argument("--seed", type=int, default=None, help="default: a random one (printed)")
    a.add_argument("--sample", type=float, default=10.0, help="seconds between RSS samples")
    a.add_argument("--window", type=float, default=480.0,
                   help="the last seconds of the soak the memory slope is fitted over")
    a.add_argument("--clients-per-node", type=int, default=2)
    a.add_argument("--drain", type=float, default=180.0,
                   help="longest wait for missing pairs after publishing stops")
    a.add_argument("--work-dir", type=Path, default=None,
                   help="history directory (default /tmp/dlsroute-soak/<seed>-<time>)")
    args = a.parse_args(argv)
    if args.seed is None:
        args.seed = random.SystemRandom().randrange(10**6)
    if args.window > args.duration:
        a.error(f"--window {args.window} is longer than --duration {args.duration}")
    results = run(args)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1) + "\n")
    from benchmarks.soak.plot import plot

    png = args.out.with_suffix(".png")
    plot(results, png)
    print(summary(results))
    print(f"soak: results in {args.out} and {png}; history in {results['work_dir']}")
    return 0 if results["verdict"]["ok"] else 1
