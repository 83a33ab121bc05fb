"""Run the fault harness: scenarios on a Kafka broker of its own, then the checker.

    .venv/bin/python -m benchmarks.chaos                       # every scenario (make chaos)
    .venv/bin/python -m benchmarks.chaos --scenarios node_kill-eos-topics --duration 40
    .venv/bin/python -m benchmarks.chaos --seed 1234           # the plan of an earlier run

The seed is printed first; the same seed gives the same fault plan, subscriptions and
events (the moments the processes reach are the machine's). Each scenario's history stays
in ``--work-dir/<scenario>`` (JSONL files and every process's log) for
``python -m benchmarks.chaos.check <dir>``. Results go to ``--out`` (JSON) and a table to
stdout; the exit code is 1 when a scenario failed the invariant (docs/testing.md).
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
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from benchmarks.chaos.brokers import MIN_INSYNC, REPLICATION, Cluster, pauses
from benchmarks.chaos.check import INF, check
from benchmarks.chaos.cluster import (
    Broker,
    Proc,
    Supervisor,
    metrics,
    node_lag,
    page,
    parse_metrics,
    parse_shards,
    shards_served,
    spark_lag,
)
from benchmarks.chaos.common import SPACE, JsonLines, now, read_jsonl
from benchmarks.chaos.scenarios import (
    DEFAULT_SCENARIOS,
    EOS,
    SCENARIOS,
    Fault,
    FaultCounts,
    Scenario,
    joiner_name,
    min_duration,
    plan,
    replica_names,
)
from connectors.local_kafka import free_port

NODES = {"A": ["B"], "B": ["A", "C"], "C": ["B"]}
#: Subscriptions each client makes before publishing starts (the client's default).
INITIAL_SUBS = 2
#: Seconds a replica that leaves (SIGTERM) has to stop its engines before a SIGKILL.
LEAVE_TIMEOUT_S = 60.0
#: Seconds between a broker's return and the next fault.
BROKER_SETTLE_S = 10.0
#: The nodes' publish_delay_s in the Spark scenario: a job killed in the middle of a
#: micro-batch must be back within it (docs/architecture.md, through the Spark job), and on
#: the shared 2-core machine a job killed twice in a row was back after up to 120 s.
SPARK_PUBLISH_DELAY_S = 180.0


@dataclass(frozen=True)
class Params:
    """Everything a run is made of (recorded in the results)."""

    seed: int
    duration: float = 60.0  # publishing phase per scenario, seconds
    rate: float = 60.0  # events per second, all publishers together
    clients_per_node: int = 2
    shared_partitions: int = 3
    churn_min: float = 2.0
    churn_max: float = 5.0
    churn: bool = True  # False: every client keeps its first subscriptions
    settle_s: float = 0.0  # pause between the clients' first subscriptions and publishing
    drain_max: float = 90.0  # longest wait for the missing pairs after publishing stops
    port: int = 29092
    counts: FaultCounts = FaultCounts()


class ScenarioRun:
    """One scenario: its processes, its fault injector, its history directory."""

    def __init__(self, sc: Scenario, p: Params, broker: Broker | Cluster, root: Path) -> None:
        self.sc, self.p, self.broker = sc, p, broker
        self.dir = root / sc.name
        for sub in ("clients", "publishers", "logs", "config"):
            (self.dir / sub).mkdir(parents=True, exist_ok=True)
        self.prefix = f"chaos{uuid.uuid4().hex[:8]}"
        self.faults = JsonLines(self.dir / "faults.jsonl")
        self.space = self.dir / "config" / "space.json"
        self.space.write_text(json.dumps(SPACE))
        self.ports: dict[str, int] = {}
        #: the node processes by name (``A``, ``B``, ``C``; with replicas ``B1``, ``B2``
        #: and the joiner ``B3``) and the node each runs
        self.node_of: dict[str, str] = {}
        for n in NODES:
            names = replica_names(sc, n) if n == "B" else [n]
            if n == "B" and sc.fault == "replica_kill":
                names.append(joiner_name(sc, n))
            self.node_of.update(dict.fromkeys(names, n))
        self.nodes = {name: self._node(name, n, NODES[n]) for name, n in self.node_of.items()}
        #: processes that start with the run (the joiner starts as a fault)
        self.initial = [name for name in self.nodes
                        if sc.fault != "replica_kill" or name != joiner_name(sc)]
        self.clients = {c.name: c for c in self._clients()}
        self.publishers = [self._publisher(n) for n in NODES]
        self.spark = self._spark() if sc.spark else None
        self.t_start = 0.0

    # -- processes ---------------------------------------------------------------------------
    def _node(self, name: str, node: str, neighbours: list[str]) -> Proc:
        """The process ``name`` of ``node`` (replicas of one node share its config)."""
        p, sc = self.p, self.sc
        cfg = self.dir / "config" / f"{node}.toml"
        cfg.write_text("\n".join([
            f'node = "{node}"', f"neighbours = {json.dumps(neighbours)}",
            f'space = "{self.space}"', f'bootstrap = "{self.broker.bootstrap}"',
            f'topic_prefix = "{self.prefix}"', f'delivery = "{sc.delivery}"',
            f"shared_delivery_partitions = {p.shared_partitions if sc.shared else 0}",
            *([f"shards = {sc.shards}"] if sc.shards > 1 else []),
            *([f"session_timeout_ms = {sc.session_timeout_ms}"]
              if sc.session_timeout_ms is not None else []),
            *([f"publish_delay_s = {SPARK_PUBLISH_DELAY_S}"] if sc.spark else []),
            *([f"replication_factor = {REPLICATION}", f"min_insync_replicas = {MIN_INSYNC}"]
              if sc.brokers > 1 else []), ""]))
        port = self.ports[name] = free_port()
        return Proc(name, "node", [sys.executable, "-m", "dlsroute", "node", "--config",
                                   str(cfg), "--metrics-port", str(port)],
                    self.dir / "logs" / f"node-{name}.log",
                    ready=lambda: metrics(port) is not None)

    def _clients(self) -> list[Proc]:
        out = []
        for node in NODES:
            for i in range(self.p.clients_per_node):
                name = f"c{node}{i}"
                subs = self.dir / "clients" / f"{name}.subs.jsonl"
                out.append(Proc(name, "client", [
                    sys.executable, "-m", "benchmarks.chaos.client", "--bootstrap",
                    self.broker.bootstrap, "--node", node, "--client", name, "--prefix",
                    self.prefix, "--space", str(self.space), "--run-dir", str(self.dir),
                    "--seed", str(self.p.seed), "--initial-subs", str(INITIAL_SUBS), "--shared",
                    str(self.p.shared_partitions if self.sc.shared else 0),
                    "--churn-min", str(self.p.churn_min), "--churn-max", str(self.p.churn_max),
                    "--shards", str(self.sc.shards),
                    *([] if self.p.churn else ["--no-churn"]), *self._raw()],
                    self.dir / "logs" / f"client-{name}.log",
                    ready=lambda subs=subs: any(  # type: ignore[misc]
                        r.get("k") == "ready" for r in read_jsonl(subs))))
        return out

    def _spark(self) -> Proc:
        return Proc("spark", "spark", [
            sys.executable, "-m", "dlsroute", "spark-map", "--bootstrap",
            self.broker.bootstrap, "--space", str(self.space), "--topic-prefix", self.prefix,
            "--checkpoint", str(self.dir / "spark-checkpoint"), "--nodes", ",".join(NODES),
            "--master", "local[1]"], self.dir / "logs" / "spark.log")

    def _raw(self) -> list[str]:
        return ["--raw"] if self.sc.spark else []

    def _publisher(self, node: str) -> Proc:
        name = f"p{node}"
        return Proc(name, "publisher", [
            sys.executable, "-m", "benchmarks.chaos.publisher", "--bootstrap",
            self.broker.bootstrap, "--node", node, "--name", name, "--prefix", self.prefix,
            "--space", str(self.space), "--rate", str(self.p.rate / len(NODES)), "--seed",
            str(self.p.seed), "--run-dir", str(self.dir), "--shards", str(self.sc.shards),
            *self._raw()], self.dir / "logs" / f"publisher-{name}.log")

    def log_fault(self, **rec: Any) -> None:
        rec["t"] = round(now(), 3)
        rec["at"] = round(rec["t"] - self.t_start, 3) if self.t_start else None
        self.faults.write(**rec)
        print(f"  [{self.sc.name}] {rec}", flush=True)

    # -- faults ------------------------------------------------------------------------------
    def inject(self, faults: list[Fault], stop: threading.Event) -> None:
        """Carry out ``faults`` in order, each at its moment or once the one before is over.

        After a broker restart the next fault waits :data:`BROKER_SETTLE_S` more, so that
        nodes are back at work (mid transaction) when it strikes.
        """
        ready = 0.0
        for f in faults:
            if stop.wait(max(0.0, self.t_start + f.at - now(), ready - now())):
                return
            getattr(self, f"_{f.kind}")(f)
            ready = now() + (BROKER_SETTLE_S if f.kind.startswith("broker") else 0.0)

    def _hold(self, proc: Proc, how: str, f: Fault) -> None:
        with proc.lock:
            proc.held = True
            self.log_fault(kind=f.kind, target=f.target, planned_at=f.at, down_s=f.down_s,
                           pid=proc.pid)
            if how == "kill":
                proc.kill()
            else:
                proc.signal(signal.SIGSTOP)
        time.sleep(f.down_s)
        with proc.lock:
            if how == "kill":
                proc.start()
                self.log_fault(kind="restart", target=f.target, pid=proc.pid)
            else:
                proc.signal(signal.SIGCONT)
                self.log_fault(kind="cont", target=f.target, pid=proc.pid)
            proc.held = False

    def _node_kill(self, f: Fault) -> None:
        self._hold(self.nodes[f.target], "kill", f)

    def _replica_kill(self, f: Fault) -> None:
        self._hold(self.nodes[f.target], "kill", f)

    def _replica_join(self, f: Fault) -> None:
        """Start one more process of the node: the group gives it some of the shards."""
        proc = self.nodes[f.target]
        with proc.lock:
            proc.start()
            self.log_fault(kind=f.kind, target=f.target, planned_at=f.at, pid=proc.pid)

    def _replica_leave(self, f: Fault) -> None:
        """SIGTERM the joiner: it stops its engines and leaves the group (its shards move).

        The leave is waited for on a thread of its own, so the next fault keeps its moment;
        ``replica_left`` logs the exit code and how long the leave took.
        """
        proc = self.nodes[f.target]
        with proc.lock:
            proc.held = proc.retired = True
            self.log_fault(kind=f.kind, target=f.target, planned_at=f.at, pid=proc.pid)
            t0 = time.monotonic()

        def leave() -> None:
            rc = proc.terminate(LEAVE_TIMEOUT_S)
            self.log_fault(kind="replica_left", target=f.target, rc=rc,
                           took_s=round(time.monotonic() - t0, 2))

        threading.Thread(target=leave, name="leave", daemon=True).start()

    def _node_stop(self, f: Fault) -> None:
        self._hold(self.nodes[f.target], "stop", f)

    def _client_kill(self, f: Fault) -> None:
        self._hold(self.clients[f.target], "kill", f)

    def _spark_kill(self, f: Fault) -> None:
        assert self.spark is not None  # noqa: S101
        self._hold(self.spark, "kill", f)

    def _broker_kill(self, f: Fault) -> None:
        self.log_fault(kind=f.kind, target="kafka", planned_at=f.at, down_s=f.down_s,
                       pid=self.broker.pid())
        self.broker.kill()
        time.sleep(f.down_s)
        self.log_fault(kind="broker_up_called", target="kafka")
        self.broker.up()
        self.log_fault(kind="broker_ready", target="kafka", pid=self.broker.pid())

    def _broker3_kill(self, f: Fault) -> None:
        """SIGKILL one server of the cluster; time the elections; restart it after down_s."""
        assert isinstance(self.broker, Cluster)  # noqa: S101
        server = int(f.target.removeprefix("kafka"))
        self.log_fault(kind=f.kind, target=f.target, planned_at=f.at, down_s=f.down_s,
                       pid=self.broker.pid(server))
        t0 = now()
        self.broker.kill(server)
        self.log_fault(kind="leaders_moved", target=f.target,
                       **self.broker.leaders_away(server))
        time.sleep(max(0.0, t0 + f.down_s - now()))
        self.log_fault(kind="broker_up_called", target=f.target)
        self.broker.up()
        self.log_fault(kind="broker_ready", target=f.target, pid=self.broker.pid(server))

    # -- phases ------------------------------------------------------------------------------
    def _start_all(self, procs: list[Proc], timeout: float) -> None:
        for proc in procs:
            proc.start()
        for proc in procs:
            if not proc.wait_ready(timeout):
                raise RuntimeError(f"{proc.kind} {proc.name} not ready within {timeout:.0f} s; "
                                   f"see {proc.log}")

    def _wait_shards(self, timeout: float) -> None:
        """Wait until every shard of every node is routed by one of its processes."""
        want = set(range(self.sc.shards))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            served: dict[str, set[int]] = {n: set() for n in NODES}
            for name in self.initial:
                served[self.node_of[name]] |= shards_served(self.ports[name]) or set()
            if all(s == want for s in served.values()):
                return
            time.sleep(1.0)
        raise RuntimeError(f"shards routed {served} after {timeout:.0f} s, not {sorted(want)} "
                           f"each; see {self.dir / 'logs'}")

    def _wait_subscriptions(self, timeout: float) -> None:
        """Wait until every node holds a subscription of each of its clients.

        The Spark path: the job must be up and mapping before publishing starts. A client
        has at least one live subscription from its first on (it churns between 1 and 3).
        """
        want = self.p.clients_per_node
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            seen = [(metrics(self.ports[name]) or {}).get("dls_subscriptions", 0)
                    for name in self.initial]
            if all(n >= want for n in seen):
                return
            time.sleep(1.0)
        raise RuntimeError(f"nodes hold {seen} subscriptions after {timeout:.0f} s, not "
                           f"{want} each; see {self.dir / 'logs'}")

    def _sample(self, out: JsonLines) -> None:
        """One sample of each node process (``node``: the process's name; a replica
        that has not joined yet, or has left, is not sampled)."""
        for node, port in self.ports.items():
            proc = self.nodes[node]
            if proc.popen is None or proc.retired:
                continue
            text = page(port, timeout=0.5)
            m = None if text is None else parse_metrics(text)
            shards = ({"shards": None if text is None else sorted(parse_shards(text))}
                      if self.sc.shards > 1 else {})
            out.write(t=round(now(), 3), node=node, up=m is not None,
                      batches=None if m is None else m.get("dls_batches_total"),
                      events_in=None if m is None else m.get("dls_events_in_total"),
                      subscriptions=None if m is None else m.get("dls_subscriptions"),
                      **shards)

    def _wait(self, until: float, samples: JsonLines) -> None:
        while now() < until:
            self._sample(samples)
            time.sleep(min(2.0, max(0.0, until - now())))

    def run(self) -> dict[str, Any]:
        """Start, publish under faults, drain, stop; the scenario's record."""
        sc, p = self.sc, self.p
        duration = max(p.duration, min_duration(sc, p.counts))
        targets = replica_names(sc) if sc.fault == "replica_kill" else list(NODES)
        faults = plan(sc, p.seed, duration, targets, list(self.clients), p.counts)
        for f in faults:
            self.faults.write(planned=True, **asdict(f))
        samples = JsonLines(self.dir / "nodes.jsonl")
        spark = [self.spark] if self.spark is not None else []
        everyone = [*self.nodes.values(), *spark, *self.clients.values(), *self.publishers]
        supervisor = Supervisor([*self.nodes.values(), *spark, *self.clients.values()],
                                self.log_fault)
        stop = threading.Event()
        injector = threading.Thread(target=self.inject, args=(faults, stop), daemon=True)
        wall0 = time.monotonic()
        record: dict[str, Any] = {"scenario": sc.name, "fault": sc.fault,
                                  "delivery": sc.delivery,
                                  "layout": "shared" if sc.shared else "topics",
                                  "prefix": self.prefix, "dir": str(self.dir),
                                  "duration_s": duration}
        try:
            self._start_all([self.nodes[n] for n in self.initial], 180)
            if sc.shards > 1:
                self._wait_shards(180)
            self._start_all(spark, 60)
            # Through the job a client is ready once its first subscriptions are
            # acknowledged: after the job's start, which is slow.
            self._start_all(list(self.clients.values()), 400 if spark else 120)
            if spark:
                self._wait_subscriptions(300)
            supervisor.start()
            time.sleep(p.settle_s)
            self.t_start = now()
            self.log_fault(kind="publishing", target="all")
            for pub in self.publishers:
                pub.start()
            injector.start()
            self._wait(self.t_start + duration, samples)
            for what in ("stop-publish", "stop-churn"):
                (self.dir / what).touch()
            self.log_fault(kind="stopped_publishing", target="all")
            record["t_stop"] = now()
            injector.join()
            for pub in self.publishers:
                if pub.popen is not None:
                    pub.popen.wait(240)
            record["drain_s"], record["drain_end"] = self._drain(samples)
        except Exception as exc:  # a scenario that cannot run is recorded, the next one runs
            record["error"] = repr(exc)
        finally:
            stop.set()
            supervisor.stop.set()
            if supervisor.ident is not None:  # an error before the start: nothing to join
                supervisor.join(5)
            for proc in everyone:
                with proc.lock:
                    proc.held = True
                proc.terminate(20)
            if injector.ident is not None:
                injector.join(60)
        self.broker.up()  # a broker_kill scenario may end with it down
        record.update(self._verdict(record))
        record["wall_s"] = round(time.monotonic() - wall0, 1)
        return record

    def _drain(self, samples: JsonLines) -> tuple[float, str]:
        """Wait for the missing pairs, bounded; how long, and why it stopped.

        ``complete``: none missing (then a moment more for late repeats); ``caught_up``:
        every node has read all its inputs (and the Spark job, if any, has mapped every raw
        record) and nothing changed for two checks, so nothing more will come; ``timeout``:
        :attr:`Params.drain_max` passed (a node or the job still had work: hung, or slow).
        """
        t0, calm, last = now(), 0, None
        while True:
            self._sample(samples)
            v = check(self.dir)
            if v["missing"] == 0:
                time.sleep(3.0)
                return round(now() - t0, 1), "complete"
            if now() - t0 > self.p.drain_max:
                return round(now() - t0, 1), "timeout"
            lags = [node_lag(self.broker.bootstrap, self.prefix, n, nb, self.sc.shards)
                    for n, nb in NODES.items()]
            if self.spark is not None:  # and the job has mapped every raw record
                lags.append(spark_lag(self.broker.bootstrap, self.prefix,
                                      self.dir / "spark-checkpoint"))
            state = (v["missing"], v["delivered_pairs"])
            calm = calm + 1 if state == last and all(lag == 0 for lag in lags) else 0
            if calm >= 2:
                return round(now() - t0, 1), "caught_up"
            last = state
            time.sleep(5.0)

    def _verdict(self, record: dict[str, Any]) -> dict[str, Any]:
        v = check(self.dir)
        events = read_jsonl(self.dir / "faults.jsonl")
        v["faults"] = [e for e in events if not e.get("planned")]
        kinds = {e["kind"] for e in events if e.get("planned")} | {self.sc.fault}
        v["faults_done"] = sum(e["kind"] in kinds for e in v["faults"])
        v["node_exits"] = sum(e["kind"] == "exit" and e["target"] in self.nodes
                              for e in v["faults"])
        v["max_stall_s"] = _stalls(read_jsonl(self.dir / "nodes.jsonl"),
                                   record.get("t_stop", INF))
        v["stall_s"] = max(v["max_stall_s"].values(), default=0.0)
        if self.sc.fault == "broker3_kill":
            v["pauses"] = pauses(self.dir, v["faults"])
            v["pause_s"], v["failover_s"] = v["pauses"]["pause_s"], v["pauses"]["failover_s"]
        if self.sc.shards > 1:
            samples = read_jsonl(self.dir / "nodes.jsonl")
            v["shard_seconds"] = _shard_seconds(samples, record.get("t_stop", INF))
            v["shard_gap_s"] = _shard_gaps(samples, record.get("t_stop", INF), self.node_of,
                                           self.sc.shards)
            v["max_shard_gap_s"] = max((g for gaps in v["shard_gap_s"].values()
                                        for g in gaps.values()), default=0.0)
        v["missing_interior"] = v["missing_by_margin"].get("interior", 0)
        v["ok"] = ("error" not in record and v["expected"] > 0 and v["missing"] == 0
                   and (self.sc.delivery != EOS or v["duplicates"] == 0))
        return v


def _stalls(samples: list[dict[str, Any]], until: float) -> dict[str, float]:
    """Per node, the longest time its batch counter did not move (or its page was down).

    Only while events were being published (before ``until``): an idle node commits
    no batch.
    """
    out: dict[str, float] = {}
    last: dict[str, tuple[float, Any]] = {}
    for s in samples:
        node, t, b = s["node"], s["t"], s.get("batches")
        if t > until:
            break
        if node not in last or (b is not None and b != last[node][1]):
            last[node] = (t, b)
        out[node] = round(max(out.get(node, 0.0), t - last[node][0]), 1)
    return out


def _shard_seconds(samples: list[dict[str, Any]], until: float) -> dict[str, dict[str, float]]:
    """Per process of a sharded node, about how long it routed each shard while publishing.

    From the samples (one every ~2 s): each sample's shards count for the time to the
    process's next sample. Shows the hand-overs: which replicas held which shards.
    """
    out: dict[str, dict[str, float]] = {}
    last: dict[str, dict[str, Any]] = {}
    for s in samples:
        if s["t"] > until:
            break
        prev = last.get(s["node"])
        if prev is not None:
            held = out.setdefault(s["node"], {})
            for shard in prev.get("shards") or []:
                held[str(shard)] = round(held.get(str(shard), 0.0) + s["t"] - prev["t"], 1)
        last[s["node"]] = s
    return out


def _shard_gaps(samples: list[dict[str, Any]], until: float, node_of: dict[str, str],
                shards: int) -> dict[str, dict[str, float]]:
    """Per node and shard, the longest time no process of the node routed the shard.

    While publishing (the samples up to ``until``), at the samples' resolution (each
    process's page every ~2 s): the longest time between two samples that showed the
    shard at one of the node's processes (the first and last samples bound it).
    """
    seen: dict[tuple[str, int], list[float]] = {}
    t0 = t1 = None
    for s in samples:
        if s["t"] > until:
            break
        t0 = s["t"] if t0 is None else t0
        t1 = s["t"]
        for shard in s.get("shards") or []:
            seen.setdefault((node_of.get(s["node"], s["node"]), shard), []).append(s["t"])
    out: dict[str, dict[str, float]] = {}
    if t0 is None or t1 is None:
        return out
    for node in dict.fromkeys(node_of.values()):
        for shard in range(shards):
            times = [t0, *seen.get((node, shard), []), t1]
            gap = max(b - a for a, b in zip(times, times[1:], strict=False))
            out.setdefault(node, {})[str(shard)] = round(gap, 1)
    return out


def run(names: list[str], p: Params, out: Path, work: Path) -> dict[str, Any]:
    """Run the scenarios ``names`` on a fresh broker; write ``out``; the results.

    A scenario on three brokers gets a fresh cluster on the same port (``kafka.sh``'s
    ``BROKERS=3``: client ports ``port``..``port+2``, controllers ``port+1000``..), the
    single broker stopped meanwhile: one Kafka of the run's at a time.
    """
    work.mkdir(parents=True, exist_ok=True)
    print(f"chaos: seed {p.seed}; history in {work}; Kafka from port {p.port}", flush=True)
    results: dict[str, Any] = {"seed": p.seed, "params": asdict(p), "work_dir": str(work),
                               "command": " ".join(sys.argv), "started": now(),
                               "scenarios": []}
    broker: Broker | Cluster | None = None
    try:
        for name in names:
            sc = SCENARIOS[name]
            if sc.unavailable:
                results["scenarios"].append({"scenario": name, "fault": sc.fault,
                                             "skipped": sc.unavailable})
                continue
            if broker is None or isinstance(broker, Cluster) != (sc.brokers > 1):
                if broker is not None:
                    broker.down()
                broker = (Cluster(p.port, work / "kafka3.log") if sc.brokers > 1
                          else Broker(p.port, work / "kafka.log"))
                broker.clean()
                broker.up()
                print(f"chaos: Kafka on {broker.bootstrap}", flush=True)
            print(f"chaos: scenario {name} ...", flush=True)
            rec = ScenarioRun(sc, p, broker, work).run()
            results["scenarios"].append(rec)
            print(table([rec], header=False), flush=True)
            _write(out, results)
    finally:
        if broker is not None:
            broker.down()
    results["wall_s"] = round(now() - results["started"], 1)
    _write(out, results)
    return results


def _write(out: Path, results: dict[str, Any]) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1) + "\n")


#: missing_interior: missing pairs more than 1 s inside their window (a loss rather than
#: an order at the window's edge); stall_s: the longest a node process committed no batch
#: (a replica holding no shard commits none); max_shard_gap_s (sharded scenarios): the
#: longest a shard of a node was routed by none of its processes; pause_s and failover_s
#: (three brokers): the longest no client read anything after a broker's SIGKILL, and the
#: longest the metadata took to show new leaders for every partition the dead broker led
#: and in-sync sets without it (benchmarks/chaos/brokers.py).
COLUMNS = ("scenario", "published", "expected", "missing", "missing_interior", "duplicates",
           "unexpected", "faults_done", "node_exits", "stall_s", "max_shard_gap_s", "pause_s",
           "failover_s", "verdict")


def table(records: list[dict[str, Any]], header: bool = True) -> str:
    """A fixed-width table of scenario records."""
    rows = [COLUMNS] if header else []
    for r in records:
        if "skipped" in r:
            rows.append((r["scenario"], *["-"] * (len(COLUMNS) - 2), "skipped"))
            continue
        verdict = "ok" if r.get("ok") else "FAIL" + (" (error)" if "error" in r else "")
        rows.append((r["scenario"], *(str(r.get(c, "-")) for c in COLUMNS[1:-1]), verdict))
    widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS))] if rows else []
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True))
                     for row in rows)


def main(argv: list[str] | None = None) -> int:
    a = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    a.add_argument("--seed", type=int, default=None, help="default: a random one (printed)")
    a.add_argument("--scenarios", default=",".join(DEFAULT_SCENARIOS),
                   help=f"comma-separated, of: {', '.join(SCENARIOS)}")
    a.add_argument("--duration", type=float, default=60.0,
                   help="publishing seconds per scenario (longer where its faults need it)")
    a.add_argument("--rate", type=float, default=60.0, help="events/s, all publishers")
    a.add_argument("--clients-per-node", type=int, default=2)
    a.add_argument("--node-kills", type=int, default=10)
    a.add_argument("--broker-kills", type=int, default=2)
    a.add_argument("--client-kills", type=int, default=2)
    a.add_argument("--spark-kills", type=int, default=2)
    a.add_argument("--stop-seconds", type=float, default=50.0,
                   help="SIGSTOP length (above the consumer session timeout, 45 s)")
    a.add_argument("--no-churn", action="store_true",
                   help="clients keep their first subscriptions (no changes while publishing)")
    a.add_argument("--settle", type=float, default=0.0,
                   help="seconds between the clients' first subscriptions and publishing")
    a.add_argument("--drain", type=float, default=90.0,
                   help="longest wait for missing pairs after publishing stops")
    a.add_argument("--port", type=int, default=29092, help="this run's own Kafka port")
    a.add_argument("--out", type=Path, default=Path("benchmarks/results/chaos.json"))
    a.add_argument("--work-dir", type=Path, default=None,
                   help="history directory (default /tmp/dlsroute-chaos/<seed>-<time>)")
    args = a.parse_args(argv)
    names = [n.strip() for n in args.scenarios.split(",") if n.strip()]
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        a.error(f"unknown scenario {unknown[0]!r}; known: {', '.join(SCENARIOS)}")
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(10**6)
    p = Params(seed=seed, duration=args.duration, rate=args.rate,
               clients_per_node=args.clients_per_node, churn=not args.no_churn,
               settle_s=args.settle, drain_max=args.drain, port=args.port,
               counts=FaultCounts(args.node_kills, args.broker_kills, args.client_kills,
                                  args.stop_seconds, args.spark_kills))
    work = args.work_dir or Path(tempfile.gettempdir(), "dlsroute-chaos",
                                 f"{seed}-{int(time.time())}")
    results = run(names, p, args.out, work)
    print(table(results["scenarios"]))
    print(f"chaos: seed {seed}; results in {args.out}; history in {work}")
    return 0 if all(r.get("ok") or "skipped" in r for r in results["scenarios"]) else 1
