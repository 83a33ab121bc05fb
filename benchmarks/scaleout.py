"""Scale-out: one sharded node routed by 1, 2 and 4 replica processes, beside a passthrough.

Run (a Kafka must answer at ``--bootstrap``)::

    .venv/bin/python -m benchmarks.scaleout [--bootstrap 127.0.0.1:9092] [--shards 4]
        [--replicas 1,2,4] [--subscriptions 100000] [--events 200000] [--quick]
        [--out benchmarks/results/scaleout.json] [--no-plot]

One workload (:mod:`benchmarks.workload`: uniform, d = 3, g = 32, ``--clients`` clients)
for every case; its subscriptions are split into their shards' parts as the SDK splits
them, and its events go to their labels' shards. For each replica count ``R``, under a
fresh topic prefix:

1. The parts are written to node ``A``'s shard subscribe topics (no neighbours; one shared
   delivery topic of ``--delivery-partitions`` partitions, so that a thousand clients do
   not make a thousand topics per case; exactly once; otherwise default settings).
2. ``R`` processes ``dlsroute node --config a.toml`` start (a replica set each); once the
   group has placed every shard and every engine has recovered, each process's resident
   memory is read (``memory_per_replica``, from ``/proc``: it keeps the high-water mark of
   shards it held while the group settled) and the bytes its engines' states hold
   (``state_per_replica``, the ``dls_state_bytes`` gauge summed over its shards).
3. The events are written to the shards' publish topics as fast as one producer can, the
   replicas routing meanwhile, and the time from the first write to the last routed event
   is measured from the processes' metrics pages (``throughput``: aggregate routed
   events/s; writing is several times faster than routing at the default sizes), and each
   process's CPU seconds (all its threads, from ``/proc/<pid>/stat``) over the same window,
   divided by the events it routed (``cpu_per_event`` per replica; the median over
   replicas is the record without a ``replica`` parameter).
4. ``dls-unsharded`` (first, unless ``--no-baseline``): the same workload on the unsharded
   node (``shards = 1``, one process): what sharding costs per event.
5. ``passthrough``: ``R`` processes in one consumer group read the same shard publish
   topics (their partitions shared out by the group) and forward each event to one topic,
   a transaction per batch, the node's batch size: the same Kafka work without DLS; the
   same records.

The bar of the issue (never asserted): ``cpu_per_event`` at 2 and 4 replicas within 1.2x
of 1 replica's. This machine has two cores shared with the broker, so the aggregate cannot
grow linearly; it is reported as measured. Output: ``scaleout.json`` (records
``{"benchmark", "system", "params", "metric", "value", "unit"}``), ``scaleout.meta.json``
and ``scaleout.png`` (CPU per event and aggregate throughput against replicas).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
from confluent_kafka import Consumer, Producer, TopicPartition

from benchmarks.core import map_boxes, write_results
from benchmarks.kafka import delete_run_topics, produce_all
from benchmarks.workload import WorkloadParams, attr_names, generate, space_spec
from connectors.kafka import (
    consume_batch,
    consumer_config,
    ensure_topics,
    next_offsets,
    offsets_to_commit,
    producer_config,
)
from connectors.local_kafka import free_port
from connectors.serde import encode_label_subscription, encode_raw_event
from connectors.topics import HEADER_EVENT_ID, HEADER_LABEL, HEADER_ORIGIN, Topics, encode_label
from dls.mapping import event_labels_batch
from dls.shards import label_shards
from dls.space import ContentSpace

__all__ = ["main"]

log = logging.getLogger("dlsroute.bench.scaleout")

DEFAULT_OUT = Path("benchmarks/results/scaleout.json")
TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (every thread)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def rss_mb(pid: int) -> float:
    """Resident memory of ``pid`` in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def page(port: int) -> dict[str, float]:
    """A process's metrics page: each ``dls_`` metric summed over its shards (no clients)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics",  # noqa: S310
                                    timeout=2) as r:
            text = r.read().decode()
    except OSError:
        return {}
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("dls_") and "client=" not in line and "neighbour=" not in line:
            name = line.split("{", 1)[0].split(" ", 1)[0]
            try:
                out[name] = out.get(name, 0.0) + float(line.rsplit(" ", 1)[-1])
            except ValueError:
                continue
    return out


class Workload:
    """Subscription parts and events, by shard, as the SDK writes them."""

    def __init__(self, n_subs: int, n_clients: int, n_events: int, shards: int, seed: int):
        w = generate(WorkloadParams("uniform", 3, 32, n_subs, n_clients, n_events, seed=seed))
        self.spec = space_spec(3, 32)
        space = ContentSpace.from_spec(self.spec)
        offsets, labels = map_boxes(space, w.lo, w.hi)
        self.labels_per_subscription = len(labels) / n_subs
        owners = w.owners.tolist()
        self.parts: dict[int, list[bytes]] = {k: [] for k in range(shards)}
        for i in range(n_subs):
            mine = labels[offsets[i]:offsets[i + 1]]
            of = label_shards(mine, shards)
            for k in np.unique(of).tolist():
                self.parts[k].append(encode_label_subscription(f"c{owners[i]}", f"s{i}",
                                                               mine[of == k]))
        ev_labels, _ = event_labels_batch(space, {n: w.events[:, j] for j, n
                                                  in enumerate(attr_names(3))})
        shard_of = label_shards(ev_labels, shards).tolist()
        names = attr_names(3)
        self.events: dict[int, tuple[list[bytes], list[Any]]] = {k: ([], [])
                                                                 for k in range(shards)}
        for i, (row, label) in enumerate(zip(w.events.tolist(), ev_labels.tolist(),
                                             strict=True)):
            values, headers = self.events[shard_of[i]]
            eid = f"e{i}"
            values.append(encode_raw_event("A", "pub", eid, dict(zip(names, row, strict=True))))
            headers.append([(HEADER_LABEL, encode_label(label)), (HEADER_ORIGIN, b"A/pub"),
                            (HEADER_EVENT_ID, eid.encode())])
        self.n_parts = sum(len(v) for v in self.parts.values())
        self.n_events = n_events
        self.n_subscriptions = n_subs
        self.shards = shards


def _start(cmd: list[str], logf: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(cmd, stdout=logf.open("ab"), stderr=subprocess.STDOUT,  # noqa: S603
                            start_new_session=True)


def node_case(bootstrap: str, w: Workload, r: int, args: argparse.Namespace, tmp: Path,
              system: str = "dls", *, route: bool = True) -> list[dict[str, Any]]:
    """``r`` replica processes of node A route the workload; their records.

    A workload of one shard is the unsharded node (one process, no replica group).
    """
    prefix = f"so{uuid.uuid4().hex[:8]}"
    base = Topics(prefix)
    space_path = tmp / f"{prefix}.space.json"
    space_path.write_text(json.dumps(w.spec))
    cfg = tmp / f"{prefix}.toml"
    cfg.write_text("\n".join([
        'node = "A"', f'space = "{space_path}"', f'bootstrap = "{bootstrap}"',
        f'topic_prefix = "{prefix}"', f"shards = {w.shards}",
        f"shared_delivery_partitions = {args.delivery_partitions}",
        f"batch_size = {args.batch_size}", "session_timeout_ms = 10000", ""]))
    producer = Producer(producer_config(bootstrap))
    shard = base.of_shard if w.shards > 1 else (lambda _k: base)
    ensure_topics(bootstrap, [shard(k).node_subscribe("A") for k in range(w.shards)]
                  + [shard(k).node_publish("A") for k in range(w.shards)])
    for k, parts in w.parts.items():
        produce_all(producer, shard(k).node_subscribe("A"), parts)
    ports = [free_port() for _ in range(r)]
    procs = [_start([sys.executable, "-m", "dlsroute", "node", "--config", str(cfg),
                     "--metrics-port", str(p)], tmp / f"{prefix}-r{i}.log")
             for i, p in enumerate(ports)]
    params = {"replicas": r, "shards": w.shards, "subscriptions": w.n_subscriptions,
              "subscription_parts": w.n_parts, "clients": args.clients,
              "labels_per_subscription": round(w.labels_per_subscription, 3),
              "events": w.n_events, "batch_size": args.batch_size,
              "delivery_partitions": args.delivery_partitions}
    out: list[dict[str, Any]] = []
    try:
        deadline = time.monotonic() + args.timeout
        while True:  # every shard placed and recovered, no process with them all but one
            pages = [page(p) for p in ports]
            if (all(pages) and sum(pg.get("dls_subscriptions", 0) for pg in pages) >= w.n_parts
                    and all(pg.get("dls_subscriptions", 0) > 0 for pg in pages)):
                break
            if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                tails = "\n".join(
                    f"--- replica {i} (exit {p.poll()}):\n" + "\n".join(
                        (tmp / f"{prefix}-r{i}.log").read_text(errors="replace")
                        .splitlines()[-15:]) for i, p in enumerate(procs))
                raise RuntimeError(f"replicas not ready ({pages}):\n{tails}")
            time.sleep(0.5)
        time.sleep(2.0)  # the group settles
        mem = [rss_mb(p.pid) for p in procs]
        state = [page(p).get("dls_state_bytes", float("nan")) / 2**20 for p in ports]
        for i, (m, st) in enumerate(zip(mem, state, strict=True)):
            out.append(_rec(system, {**params, "replica": i}, "memory_per_replica", m, "MB"))
            out.append(_rec(system, {**params, "replica": i}, "state_per_replica", st, "MB"))
        out.append(_rec(system, params, "memory_per_replica", float(np.median(mem)), "MB"))
        out.append(_rec(system, params, "state_per_replica", float(np.median(state)), "MB"))
        if not route:  # memory only
            log.info("%s x%d, %d subscriptions: RSS %s MB, state %s MB", system, r,
                     args.subscriptions if system != "dls-memory" else w.n_subscriptions,
                     [round(m) for m in mem], [round(x, 1) for x in state])
            return out
        before = [page(p) for p in ports]
        cpu0 = [cpu_seconds(p.pid) for p in procs]
        t0 = time.perf_counter()  # the replicas route while the events are written
        for k, (values, headers) in w.events.items():
            produce_all(producer, shard(k).node_publish("A"), values, headers)
        last = None
        routed0 = sum(pg.get("dls_events_in_total", 0) for pg in before)
        while True:
            pages = [page(p) for p in ports]
            routed = sum(pg.get("dls_events_in_total", 0) for pg in pages) - routed0
            now = time.perf_counter()
            if routed >= w.n_events:
                last = (now, routed)
                break
            if now - t0 > args.timeout:
                raise RuntimeError(f"{routed} of {w.n_events} events routed in "
                                   f"{args.timeout} s; see {tmp}")
            time.sleep(0.05)
        cpu1 = [cpu_seconds(p.pid) for p in procs]
        seconds = last[0] - t0
        out.append(_rec(system, params, "throughput", last[1] / seconds, "events/s"))
        per = []
        for i, (pg0, pg1) in enumerate(zip(before, pages, strict=True)):
            n = pg1.get("dls_events_in_total", 0) - pg0.get("dls_events_in_total", 0)
            cpu = cpu1[i] - cpu0[i]
            out.append(_rec(system, {**params, "replica": i}, "events_routed", n, "events"))
            out.append(_rec(system, {**params, "replica": i}, "cpu_seconds", cpu, "s"))
            if n > 0:
                per.append(cpu / n)
                out.append(_rec(system, {**params, "replica": i}, "cpu_per_event",
                                cpu / n * 1e6, "µs"))
        out.append(_rec(system, params, "cpu_per_event", float(np.median(per)) * 1e6, "µs"))
        log.info(system + " x%d: %.0f events/s, CPU %s µs/event, RSS %s MB, state %s MB", r,
                 last[1] / seconds, [round(x * 1e6, 1) for x in per],
                 [round(m) for m in mem], [round(x, 1) for x in state])
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(60)
            except subprocess.TimeoutExpired:
                p.kill()
    if system == "dls" and route:
        out += passthrough_case(bootstrap, base, w, r, args, tmp, params)
    delete_run_topics(bootstrap, prefix)
    return out


def passthrough_case(bootstrap: str, base: Topics, w: Workload, r: int,
                     args: argparse.Namespace, tmp: Path, params: dict[str, Any]
                     ) -> list[dict[str, Any]]:
    """``r`` passthrough processes in one group over the same shard publish topics."""
    topics = [base.of_shard(k).node_publish("A") for k in range(args.shards)]
    group, target = f"{base.prefix}-pass", f"{base.prefix}.passthrough"
    ensure_topics(bootstrap, [target])
    reports = [tmp / f"{base.prefix}-pass{i}.json" for i in range(r)]
    go = tmp / f"{base.prefix}-go"
    procs = [_start([sys.executable, "-m", "benchmarks.scaleout", "--passthrough-worker",
                     "--bootstrap", bootstrap, "--worker-topics", ",".join(topics),
                     "--worker-group", group, "--worker-target", target,
                     "--worker-report", str(rep), "--worker-go", str(go),
                     "--batch-size", str(args.batch_size)],
                    tmp / f"{base.prefix}-pass{i}.log") for i, rep in enumerate(reports)]
    # The events are there already: every worker waits until the group has given each
    # of them partitions, so that the first to join does not take them all.
    deadline = time.monotonic() + args.timeout
    while time.monotonic() < deadline and not all(
            Path(f"{rep}.assigned").exists() and Path(f"{rep}.assigned").read_text()
            for rep in reports[:min(r, len(topics))]):
        time.sleep(0.2)
    time.sleep(3.0)  # the last rebalance settles
    go.touch()
    for p in procs:
        p.wait(args.timeout)
    done = [d for d in (json.loads(rep.read_text()) for rep in reports if rep.exists())
            if d["events"]]
    out = []
    total = sum(d["events"] for d in done)
    if total != w.n_events:
        log.warning("passthrough x%d forwarded %d of %d events", r, total, w.n_events)
    per = []
    for i, d in enumerate(done):
        out.append(_rec("passthrough", {**params, "replica": i}, "events_routed", d["events"],
                        "events"))
        if d["events"]:
            per.append(d["cpu"] / d["events"])
            out.append(_rec("passthrough", {**params, "replica": i}, "cpu_per_event",
                            d["cpu"] / d["events"] * 1e6, "µs"))
    t0, t1 = min(d["first"] for d in done), max(d["last"] for d in done)
    out.append(_rec("passthrough", params, "throughput",
                    total / (t1 - t0) if t1 > t0 else float("nan"), "events/s"))
    out.append(_rec("passthrough", params, "cpu_per_event", float(np.median(per)) * 1e6, "µs"))
    log.info("passthrough x%d: %.0f events/s, CPU %s µs/event", r, out[-2]["value"],
             [round(x * 1e6, 1) for x in per])
    return out


def passthrough_worker(args: argparse.Namespace) -> int:
    """One passthrough process: forward until idle for 5 s after the first event."""
    consumer = Consumer(consumer_config(  # one partition per topic: range would give all
        args.bootstrap, args.worker_group,  # of them to one worker
        **{"session.timeout.ms": 10000, "partition.assignment.strategy": "roundrobin"}))
    producer = Producer(producer_config(args.bootstrap,
                                        transactional_id=f"{args.worker_group}-{os.getpid()}"))
    producer.init_transactions()
    assigned = Path(f"{args.worker_report}.assigned")

    def on_assign(c: Consumer, parts: list[Any]) -> None:
        assigned.write_text(",".join(f"{p.topic}:{p.partition}" for p in parts))

    consumer.subscribe(args.worker_topics.split(","), on_assign=on_assign)
    go = Path(args.worker_go)
    while not go.exists():  # in the group, reading nothing until every worker is
        consumer.pause(consumer.assignment())
        msg = consumer.poll(0.2)  # a partition given since the pause may yield one
        if msg is not None and msg.error() is None:
            consumer.seek(TopicPartition(str(msg.topic()), int(msg.partition() or 0),
                                         int(msg.offset() or 0)))
    consumer.resume(consumer.assignment())
    n, first, last, idle_since = 0, None, None, time.monotonic()
    cpu0 = time.process_time()
    while True:
        msgs = consume_batch(consumer, args.batch_size, 0.1)
        now = time.monotonic()
        if not msgs:
            if (first is not None and now - idle_since > 5.0) or now - idle_since > 120:
                break
            continue
        idle_since = now
        producer.begin_transaction()
        for m in msgs:
            producer.produce(args.worker_target, m.value(), headers=m.headers())
        producer.send_offsets_to_transaction(offsets_to_commit(next_offsets(msgs)),
                                             consumer.consumer_group_metadata())
        producer.commit_transaction()
        n += len(msgs)
        t = time.time()
        first = first if first is not None else t
        last = t
    cpu = time.process_time() - cpu0
    consumer.close()
    Path(args.worker_report).write_text(json.dumps(
        {"events": n, "cpu": cpu, "first": first or 0.0, "last": last or 0.0}))
    return 0


def _rec(system: str, params: dict[str, Any], metric: str, value: float, unit: str
         ) -> dict[str, Any]:
    return {"benchmark": "scaleout", "system": system, "params": dict(params),
            "metric": metric, "value": value, "unit": unit}


def plot(records: list[dict[str, Any]], path: Path) -> bool:
    """CPU per event and aggregate throughput against replicas, node beside passthrough."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    for system, style in (("dls", "o-"), ("passthrough", "s--"), ("dls-unsharded", "^:")):
        for ax, metric in ((ax1, "cpu_per_event"), (ax2, "throughput")):
            pts = sorted((r["params"]["replicas"], r["value"]) for r in records
                         if r["system"] == system and r["metric"] == metric
                         and "replica" not in r["params"])
            if pts:
                ax.plot(*zip(*pts, strict=True), style, label=system)
    ax1.set(xlabel="replicas", ylabel="CPU µs per routed event (median replica)",
            title="CPU per event per replica")
    ax2.set(xlabel="replicas", ylabel="events/s (all replicas)", title="aggregate throughput")
    for ax in (ax1, ax2):
        ax.legend()
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def main(argv: Sequence[str] | None = None) -> int:
    """Run every replica count and write the records."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bootstrap", default="127.0.0.1:9092")
    ap.add_argument("--shards", type=int, default=4)
    ap.add_argument("--replicas", type=lambda v: [int(x) for x in v.split(",")],
                    default=[1, 2, 4])
    ap.add_argument("--subscriptions", type=int, default=100_000)
    ap.add_argument("--clients", type=int, default=1_000)
    ap.add_argument("--events", type=int, default=200_000)
    ap.add_argument("--batch-size", type=int, default=1_000)
    ap.add_argument("--delivery-partitions", type=int, default=4)
    ap.add_argument("--timeout", type=float, default=600.0)
    ap.add_argument("--seed", type=int, default=21)
    ap.add_argument("--quick", action="store_true",
                    help="10K subscriptions, 20K events, replicas 1,2")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--no-plot", action="store_true")
    ap.add_argument("--memory-subscriptions", type=int, default=0, metavar="N",
                    help="also load N subscriptions for each replica count, no events: "
                         "memory per replica (0: not)")
    ap.add_argument("--no-baseline", action="store_true",
                    help="skip the unsharded node (one process) on the same workload")
    ap.add_argument("--passthrough-worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--worker-topics", help=argparse.SUPPRESS)
    ap.add_argument("--worker-group", help=argparse.SUPPRESS)
    ap.add_argument("--worker-target", help=argparse.SUPPRESS)
    ap.add_argument("--worker-report", help=argparse.SUPPRESS)
    ap.add_argument("--worker-go", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.passthrough_worker:
        return passthrough_worker(args)
    if args.quick:
        args.subscriptions, args.events, args.replicas = 10_000, 20_000, [1, 2]
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    logging.getLogger("dlsroute").setLevel(logging.WARNING)
    log.setLevel(logging.INFO)
    started, t0 = datetime.now(UTC).isoformat(timespec="seconds"), time.monotonic()
    w = Workload(args.subscriptions, args.clients, args.events, args.shards, args.seed)
    log.info("workload: %d subscriptions in %d parts over %d shards, %d events",
             args.subscriptions, w.n_parts, args.shards, args.events)
    records: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        if not args.no_baseline:  # the same workload on the unsharded node, one process
            one = Workload(args.subscriptions, args.clients, args.events, 1, args.seed)
            records += node_case(args.bootstrap, one, 1, args, Path(tmp), "dls-unsharded")
        for r in args.replicas:
            records += node_case(args.bootstrap, w, r, args, Path(tmp))
    base = next((x["value"] for x in records if x["system"] == "dls"
                 and x["metric"] == "cpu_per_event" and x["params"]["replicas"] == 1
                 and "replica" not in x["params"]), None)
    for x in list(records):
        if (base and x["system"] == "dls" and x["metric"] == "cpu_per_event"
                and "replica" not in x["params"]):
            records.append(_rec("dls", x["params"], "cpu_per_event_ratio", x["value"] / base,
                                "ratio"))
            log.info("cpu per event at %d replicas / at 1: %.2f (bar: <= 1.2)",
                     x["params"]["replicas"], x["value"] / base)
    write_results(args.out, records, benchmark="scaleout", module="benchmarks.scaleout",
                  argv=argv, started=started, wall=time.monotonic() - t0,
                  settings={k: v for k, v in vars(args).items() if not k.startswith("worker")}
                  | {"out": str(args.out)})
    if args.memory_subscriptions:  # memory per replica at more subscriptions, no events
        m = Workload(args.memory_subscriptions, args.clients, 1, args.shards, args.seed)
        with tempfile.TemporaryDirectory() as tmp:
            for r in args.replicas:
                records += node_case(args.bootstrap, m, r, args, Path(tmp), "dls-memory",
                                     route=False)
        write_results(args.out, records, benchmark="scaleout", module="benchmarks.scaleout",
                      argv=argv, started=started, wall=time.monotonic() - t0,
                      settings={k: v for k, v in vars(args).items()
                                if not k.startswith("worker")} | {"out": str(args.out)})
    if not args.no_plot:
        plot(records, args.out.with_suffix(".png"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
