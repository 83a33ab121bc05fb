"""The comparison a Kafka user makes: every client filtering the raw topic, or dlsroute.

One run on the local Kafka, the paper's workload (``benchmarks.workload``: uniform box
subscriptions over d = 3 numeric attributes cut into g = 32 cells, point events; 100
subscriptions per client on average, as in ``benchmarks.kafka`` and ``benchmarks.exact``),
the same events, the same pacing and the same clients in two phases:

* ``raw-topic`` (a): every event goes to one raw topic; each of the ``n_clients`` clients
  consumes all of it (a consumer group each, ``read_committed``, offsets committed after
  each batch as the SDK does) and keeps the events that match one of its subscriptions,
  with the SDK's own exact matcher (``dls.predicates.Subscription.matches``, tried on every
  subscription of the client, as ``connectors.client.Client`` does);
* ``dlsroute`` (b): one node (``NodeSettings`` defaults: exact delivery on, exactly once,
  a delivery topic per client), the clients attached through the SDK (``Client.subscribe``,
  ``Client.deliveries``), the events published to the node's publish topic.

Why one delivery topic per client: each client then fetches its own matches and nothing
else. On the shared delivery topic (``shared_delivery_partitions = P``) a client reads
every delivery of its partition, to the other clients of that partition too: with one
partition, every event that matches anyone, whatever N (``exact.json`` measured that node
about 2x faster in events/s at 1,000 clients, but its clients' reads grow with N again).

Both phases publish the same records (a ``RawEvent`` value and ``Client.publish``'s three
headers) at ``rate`` events/s, stamped with their publication time as the record
timestamp (a node keeps it on its deliveries; a fourth header would send every event down
the node's slower path for unusual events). The clients of a phase all run in one child
process (one thread per client; its CPU is the client side's, measured with
``time.process_time`` in that process, librdkafka's threads included); the node runs on a
thread of the parent, beside the publisher.

Measured per phase:

* ``bytes_read_per_event``: the sizes (value + key + header names and values) of every
  record the clients' consumers returned, summed over the clients, / events published.
  The node's acknowledgements of subscriptions (no value) are read before the window and
  not counted;
* ``client_cpu_per_event``: CPU of the client process from the first publication until
  every client has read what it must (all events in (a), its matches in (b)) / events;
  ``client_idle_cpu``: the same process's CPU per second before any event, while its
  clients poll an empty topic;
* ``broker_bytes_out_per_event``: Kafka's own ``BytesOutPerSec`` meter (its ``Count``),
  read before and after the window from the broker's JVM through the Attach API
  (``java``, no JMX port); per topic: the clients' topics (``..._to_clients``) and every
  topic (the node's reads of its publish topic included). Without ``java`` or the broker's
  process, the sum of the record sizes the clients read stands in (``source`` says which);
* ``latency_p50`` / ``latency_p99``: the client's clock when its filter (its own in (a),
  the SDK's in (b)) has passed the batch that held a matching event, minus the event's
  record timestamp, over every (client, matching event) pair, in ms;
* ``node_cpu_per_event`` (b) and ``publisher_cpu_per_event``: CPU of the node loop's
  thread and of the publishing thread (``time.thread_time``; librdkafka's threads not
  included);
* ``deliveries`` and ``true_matches``: (client, event) pairs each phase gave its
  applications, and the brute-force count (numpy boxes); ``false_deliveries`` in (b).

Extrapolated to ``--extrapolate`` clients (default 1,000 and 10,000), each with the same
subscriptions per client: (a) reads every record once per client, so its bytes, broker
bytes and client CPU per event are N times the measured per-client cost; (b) reads each
client's matches, so its bytes are N x (matches per client per event) x (bytes per
delivery), and its client CPU N x the measured per-client cost, which at the same rate is
mostly idle polling. Both grow linearly in N; the ratio between them is about one over the
matches per client per event, and it does not depend on N. What does grow in (b) is the
node's cost per event (routing to more clients): see ``exact.json`` (1,000 clients).

Output: ``rawtopic.json`` (records ``{"benchmark", "system", "params", "metric", "value",
"unit"}``), ``rawtopic.meta.json`` and ``rawtopic.png`` (bytes and client CPU per event vs
clients). ``--quick`` is a small run for the tests (a few clients, g = 8 so that matches
are frequent).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import queue
import re
import shutil
import subprocess
import tempfile
import threading
import time
import traceback
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from confluent_kafka import Consumer, Producer

from benchmarks.core import (
    CLIENT_FP_RATE,
    ROUTING_FILTER,
    distinct_labels_per_client,
    event_columns,
    map_boxes,
    write_results,
)
from benchmarks.exact import where_of
from benchmarks.kafka import DEFAULT_BOOTSTRAP, delete_run_topics, event_message
from benchmarks.workload import Workload, WorkloadParams, attr_names, generate, space_spec
from broker_node.config import NodeSettings
from broker_node.service import NodeService
from connectors.client import Client
from connectors.client_state import ack_of
from connectors.kafka import consume_batch, consumer_config, ensure_topics, producer_config
from connectors.serde import decode_raw_event
from connectors.topics import Topics
from dls.mapping import event_labels_batch
from dls.predicates import Subscription
from dls.space import ContentSpace

BENCHMARK = "rawtopic"
SYSTEMS = ("raw-topic", "dlsroute")
NODE = "N0"


@dataclass(frozen=True)
class Settings:
    """Sizes of one run."""

    n_clients: int = 100
    subs_per_client: int = 100
    events: int = 3_000
    rate: float = 25.0  # events/s, both phases (the raw clients near half a core)
    d: int = 3
    g: int = 32
    distribution: str = "uniform"
    seed: int = 0
    idle_s: float = 3.0  # the client process's idle CPU is measured this long
    grace_s: float = 1.5  # reading on after the last expected record (extras would show)
    timeout_s: float = 300.0
    extrapolate: tuple[int, ...] = (1_000, 10_000)


QUICK = Settings(n_clients=6, subs_per_client=40, events=300, rate=150.0, g=8, idle_s=1.0,
                 grace_s=1.0, timeout_s=120.0)

JMX_SOURCE = r"""
import com.sun.tools.attach.VirtualMachine; import javax.management.*;
import javax.management.remote.*;
public class KafkaBytesOut { public static void main(String[] a) throws Exception {
  VirtualMachine vm = VirtualMachine.attach(a[0]);
  String addr = vm.startLocalManagementAgent(); vm.detach();
  try (JMXConnector c = JMXConnectorFactory.connect(new JMXServiceURL(addr))) {
    MBeanServerConnection s = c.getMBeanServerConnection();
    ObjectName q = new ObjectName("kafka.server:type=BrokerTopicMetrics,name=BytesOutPerSec,*");
    for (ObjectName n : s.queryNames(q, null)) { String t = n.getKeyProperty("topic");
      System.out.println((t == null ? "" : t) + "\t" + s.getAttribute(n, "Count")); } } } }
"""


def record_bytes(msg: Any) -> int:
    """What a consumer fetched of one record: value, key, header names and values."""
    return (len(msg.value() or b"") + len(msg.key() or b"")
            + sum(len(k.encode()) + len(v or b"") for k, v in msg.headers() or ()))


# -- the broker's own meter ---------------------------------------------------------------
def broker_pid(bootstrap: str) -> int | None:
    """The process listening on the bootstrap port (None if not found)."""
    port = bootstrap.rsplit(":", 1)[-1].split(",")[0]
    ss = shutil.which("ss")
    if ss is None:
        return None
    out = subprocess.run([ss, "-ltnpH", f"sport = :{port}"], capture_output=True,  # noqa: S603
                         text=True, timeout=10, check=False).stdout
    m = re.search(r"pid=(\d+)", out)
    return int(m.group(1)) if m else None


def bytes_out(pid: int | None, src_dir: Path) -> dict[str, int] | None:
    """Kafka's BytesOutPerSec counts by topic ("" the broker's total); None if unreadable."""
    java = shutil.which("java")
    if pid is None or java is None:
        return None
    src = src_dir / "KafkaBytesOut.java"
    if not src.exists():
        src.write_text(JMX_SOURCE)
    r = subprocess.run([java, str(src), str(pid)], capture_output=True, text=True,  # noqa: S603
                       timeout=120, check=False)
    if r.returncode != 0:
        print(f"broker meter unreadable ({r.stderr.strip()[:200]})", flush=True)
        return None
    counts = {}
    for line in r.stdout.splitlines():
        topic, _, count = line.partition("\t")
        counts[topic] = int(count)
    return counts


# -- the client side (a child process) ----------------------------------------------------
@dataclass
class Tally:
    """What one client read and kept (owned by its thread)."""

    records: int = 0
    bytes: int = 0
    matched: int = 0
    false: int = 0
    acks: int = 0
    latency_ms: list[float] = field(default_factory=list)


class MeteredClient(Client):
    """The SDK's client, counting what its consumer returned (the SDK itself unchanged)."""

    tally: Tally

    def _take_all(self, msgs: list[Any], seen: Any) -> Any:
        out = super()._take_all(msgs, seen)  # the SDK's exact check of the batch
        now_ms, t = time.time() * 1000.0, self.tally
        for msg in msgs:
            if msg.value() is None:
                t.acks += ack_of(msg) is not None
                continue
            t.records += 1
            t.bytes += record_bytes(msg)
            t.latency_ms.append(now_ms - msg.timestamp()[1])
        for _, d in out.taken:
            if d.subscriptions:
                t.matched += 1
            else:
                t.false += 1
        return out


class RawReader:
    """Case (a): one client consuming the whole raw topic, filtering with the SDK's matcher."""

    def __init__(self, job: dict[str, Any], k: int, space: ContentSpace):
        self.tally, self.target = Tally(), job["n_events"]
        self.subs = [(f"c{k}-s{j}", Subscription(space, w)) for j, w in enumerate(job["wheres"][k])]
        self.consumer = Consumer(consumer_config(job["bootstrap"], f"{job['prefix']}-raw-c{k}"))
        self.assigned = threading.Event()
        self.consumer.subscribe([job["raw_topic"]], on_assign=lambda *_: self.assigned.set())

    def setup(self) -> None:
        """Join the group (the topic is empty: nothing is read)."""
        deadline = time.monotonic() + 120
        while not self.assigned.is_set():
            if time.monotonic() > deadline:
                raise TimeoutError("raw consumer not assigned within 120 s")
            consume_batch(self.consumer, 1, 0.2)

    def loop(self, stop: threading.Event) -> None:
        """Read, decode and filter every record until ``stop``."""
        t, subs = self.tally, self.subs
        while not stop.is_set():
            msgs = consume_batch(self.consumer, 500, 0.1)
            if not msgs:
                continue
            hits = []
            for msg in msgs:
                t.records += 1
                t.bytes += record_bytes(msg)
                attrs = decode_raw_event(msg.value() or b"")["attrs"]
                if any(s.matches(attrs) for _, s in subs):
                    hits.append(msg.timestamp()[1])
            now_ms = time.time() * 1000.0
            t.matched += len(hits)
            t.latency_ms += [now_ms - ts for ts in hits]
            self.consumer.commit(asynchronous=True)

    def done(self) -> bool:
        """Every event read."""
        return self.tally.records >= self.target

    def close(self) -> None:
        """Leave the group."""
        self.consumer.close()


class SdkReader:
    """Case (b): one client attached to the node through the SDK."""

    def __init__(self, job: dict[str, Any], k: int, space: ContentSpace):
        self.wheres, self.target = job["wheres"][k], job["expected"][k]
        self.client = MeteredClient(job["bootstrap"], job["node"], f"c{k}", space,
                                    topic_prefix=job["prefix"])
        self.client.tally = self.tally = Tally()

    def setup(self) -> None:
        """Subscribe, then read the node's acknowledgements of every subscription."""
        for j, w in enumerate(self.wheres):
            self.client.subscribe(w, sub_id=f"{self.client.client_id}-s{j}")
        deadline = time.monotonic() + 240
        while self.tally.acks < len(self.wheres):
            if time.monotonic() > deadline:
                raise TimeoutError(f"client {self.client.client_id}: {self.tally.acks} of "
                                   f"{len(self.wheres)} subscriptions acknowledged in 240 s")
            for _ in self.client.deliveries(timeout=0.2, max_idle=0.2):
                pass

    def loop(self, stop: threading.Event) -> None:
        """Take deliveries (false ones too, to count them) until ``stop``."""
        while not stop.is_set():
            for _ in self.client.deliveries(timeout=0.1, max_idle=0.1,
                                            include_false_positives=True):
                pass

    def done(self) -> bool:
        """Every match delivered."""
        return self.tally.matched >= self.target

    def close(self) -> None:
        """Close the SDK client."""
        self.client.close()


def clients_proc(job: dict[str, Any], go: Any, out: Any) -> None:
    """Child process: the clients of one phase (see :func:`_clients_main`)."""
    try:
        _clients_main(job, go, out)
    except BaseException:  # the parent raises it
        out.put(("error", traceback.format_exc()))


def _clients_main(job: dict[str, Any], go: Any, out: Any) -> None:
    space = ContentSpace.from_spec(job["space"])
    kind = RawReader if job["mode"] == "raw" else SdkReader
    t0 = time.perf_counter()
    with ThreadPoolExecutor(16) as pool:
        readers = list(pool.map(lambda k: kind(job, k, space), range(len(job["wheres"]))))
        list(pool.map(lambda r: r.setup(), readers))
    setup_s = time.perf_counter() - t0
    stop = threading.Event()
    threads = [threading.Thread(target=r.loop, args=(stop,), daemon=True) for r in readers]
    for th in threads:
        th.start()
    c0 = time.process_time()
    time.sleep(job["idle_s"])
    idle = (time.process_time() - c0) / job["idle_s"]
    out.put(("armed", {"setup_s": setup_s, "idle_cpu_s_per_s": idle}))
    go.wait()
    c0, w0 = time.process_time(), time.perf_counter()
    deadline = time.monotonic() + job["timeout_s"]
    while not all(r.done() for r in readers) and time.monotonic() < deadline:
        time.sleep(0.02)
    cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    complete = all(r.done() for r in readers)
    time.sleep(job["grace_s"])
    stop.set()
    for th in threads:
        th.join(30)
    out.put(("result", {"cpu_s": cpu, "wall_s": wall, "complete": complete,
                        "tallies": [asdict(r.tally) for r in readers]}))
    for r in readers:
        r.close()


# -- the parent: workload, publisher, node, phases ----------------------------------------
@dataclass
class Run:
    """What both phases share."""

    s: Settings
    bootstrap: str
    prefix: str
    w: Workload
    spec: dict[str, Any]
    wheres: list[list[str]]
    truth: list[int]  # per client: events matching one of its subscriptions
    events: list[tuple[bytes, list[tuple[str, bytes]]]]
    pid: int | None
    tmp: Path
    groups: list[str] = field(default_factory=list)


def prepare(s: Settings, bootstrap: str, tmp: Path) -> Run:
    """Generate the workload, its subscriptions' text, the events and the exact truth."""
    w = generate(WorkloadParams(s.distribution, s.d, s.g, s.n_clients * s.subs_per_client,
                                s.n_clients, s.events, seed=s.seed))
    space0 = ContentSpace.from_spec(space_spec(s.d, s.g))
    offsets, labels = map_boxes(space0, w.lo, w.hi)
    items = max(1, int(np.ceil(distinct_labels_per_client(
        offsets, labels, w.owners, s.n_clients, space0.label_space_size))))
    spec = space_spec(s.d, s.g, {"client": {"expected_items": items, "fp_rate": CLIENT_FP_RATE},
                                 "routing": dict(ROUTING_FILTER)})
    names = attr_names(s.d)
    wheres: list[list[str]] = [[] for _ in range(s.n_clients)]
    for i, owner in enumerate(w.owners.tolist()):
        wheres[owner].append(where_of(w.lo[i], w.hi[i], names))
    ev_labels, valid = event_labels_batch(ContentSpace.from_spec(spec), event_columns(w))
    if not valid.all():
        raise ValueError("events outside the space")  # generated inside the domain
    events = [event_message(f"e{i}", row, names, lab, b"")
              for i, (row, lab) in enumerate(zip(w.events.tolist(), ev_labels.tolist(),
                                                 strict=True))]
    return Run(s, bootstrap, f"rt{uuid.uuid4().hex[:8]}", w, spec, wheres,
               true_matches(w, s.n_clients), events, broker_pid(bootstrap), tmp)


def true_matches(w: Workload, n_clients: int, block: int = 256) -> list[int]:
    """Brute force: per client, how many events match one of its subscriptions."""
    per = np.zeros(n_clients, dtype=np.int64)
    members = [np.flatnonzero(w.owners == c) for c in range(n_clients)]
    for a in range(0, len(w.events), block):
        ev = w.events[a:a + block]
        hit = ((w.lo[None] <= ev[:, None]) & (ev[:, None] <= w.hi[None])).all(2)
        for c, cols in enumerate(members):
            per[c] += int(hit[:, cols].any(1).sum())
    return per.tolist()


def publish(producer: Producer, topic: str, events: list[Any], rate: float) -> float:
    """Produce every event at ``rate`` events/s, stamped now; returns the achieved rate."""
    t0 = time.perf_counter()
    for i, (value, headers) in enumerate(events):
        pause = t0 + i / rate - time.perf_counter()
        if pause > 0:
            time.sleep(pause)
        producer.produce(topic, value, headers=headers, timestamp=int(time.time() * 1000))
        producer.poll(0)
    if producer.flush(60):
        raise TimeoutError(f"{topic}: events not acknowledged within 60 s")
    return len(events) / (time.perf_counter() - t0)


def _expect(out: Any, what: str, timeout: float, proc: Any) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            kind, body = out.get(timeout=1.0)
        except queue.Empty:
            if not proc.is_alive():
                raise RuntimeError(f"client process ended (exit {proc.exitcode}) before "
                                   f"{what!r}") from None
            continue
        if kind == "error":
            raise RuntimeError(f"client process failed:\n{body}")
        if kind == what:
            return body  # type: ignore[no-any-return]
    raise TimeoutError(f"client process: no {what!r} within {timeout:g} s")


class NodeLoop(threading.Thread):
    """The node's loop on a thread, adding up that thread's CPU (librdkafka's not included)."""

    def __init__(self, service: NodeService):
        super().__init__(name="rawtopic-node", daemon=True)
        self.service, self.cpu_s, self.halt = service, 0.0, threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        """``NodeService.run`` in 0.1 s slices until :attr:`halt`."""
        try:
            while not self.halt.is_set():
                c0 = time.thread_time()
                self.service.run(max_seconds=0.1)
                self.cpu_s += time.thread_time() - c0
        except BaseException as exc:  # raised by the phase
            self.error = exc


def phase(r: Run, mode: str, topic: str, producer: Producer,
          node: NodeLoop | None = None) -> dict[str, Any]:
    """One phase: its clients in a child process, the events published, the meters read."""
    s = r.s
    job = {"mode": mode, "bootstrap": r.bootstrap, "prefix": r.prefix, "space": r.spec,
           "node": NODE, "raw_topic": topic, "wheres": r.wheres, "expected": r.truth,
           "n_events": len(r.events), "idle_s": s.idle_s, "grace_s": s.grace_s,
           "timeout_s": s.timeout_s}
    r.groups += [f"{r.prefix}-raw-c{k}" for k in range(s.n_clients)] if mode == "raw" else [
        f"{r.prefix}-sdk-c{k}{x}" for k in range(s.n_clients) for x in ("", "-state")]
    ctx = mp.get_context("spawn")
    go, out = ctx.Event(), ctx.Queue()
    proc = ctx.Process(target=clients_proc, args=(job, go, out), daemon=True)
    proc.start()
    try:
        armed = _expect(out, "armed", 900.0, proc)
        meter0 = bytes_out(r.pid, r.tmp)
        c0, n0 = time.thread_time(), node.cpu_s if node else 0.0
        go.set()
        rate = publish(producer, topic, r.events, s.rate)
        publisher_cpu = time.thread_time() - c0
        res = _expect(out, "result", s.timeout_s + 120, proc)
        node_cpu = node.cpu_s - n0 if node else None
        if node is not None and node.error is not None:
            raise node.error
        meter1 = bytes_out(r.pid, r.tmp)
        proc.join(120)
    finally:
        if proc.is_alive():
            proc.kill()
    return {**armed, **res, "achieved_rate": rate, "publisher_cpu_s": publisher_cpu,
            "node_cpu_s": node_cpu,
            "meter": None if meter0 is None or meter1 is None
            else {t: v - meter0.get(t, 0) for t, v in meter1.items()}}


def run(s: Settings, bootstrap: str, out: Path) -> list[dict[str, Any]]:
    """The whole benchmark; returns its records (also written to ``out``)."""
    started = time.time()
    with tempfile.TemporaryDirectory(prefix="rawtopic-") as tmp:
        r = prepare(s, bootstrap, Path(tmp))
        print(f"{s.n_clients} clients, {len(r.w.lo):,} subscriptions, {s.events:,} events at "
              f"{s.rate:g}/s; {sum(r.truth):,} true (client, event) matches", flush=True)
        topics = Topics(r.prefix)
        raw_topic = f"{r.prefix}.raw.events"
        ensure_topics(bootstrap, [raw_topic])
        producer = Producer(producer_config(bootstrap, **{"linger.ms": 1}))
        results: dict[str, dict[str, Any]] = {}
        try:
            results["raw-topic"] = phase(r, "raw", raw_topic, producer)
            print("raw-topic done", flush=True)
            space_path = Path(tmp) / "space.json"
            space_path.write_text(json.dumps(r.spec))
            st = NodeSettings(node=NODE, neighbours=(), space=space_path, bootstrap=bootstrap,
                              topic_prefix=r.prefix)
            r.groups += [st.consumer_group, f"{st.consumer_group}-recovery"]
            service = NodeService(st, ContentSpace.from_spec(r.spec))
            service.start()
            loop = NodeLoop(service)
            loop.start()
            try:
                results["dlsroute"] = phase(r, "sdk", topics.node_publish(NODE), producer, loop)
            finally:
                loop.halt.set()
                loop.join(60)
                service.close()
            results["dlsroute"]["edge_removed"] = service.metrics.edge_removed
            print("dlsroute done", flush=True)
        finally:
            producer.flush(10)
            delete_run_topics(bootstrap, r.prefix, r.groups)
    records = make_records(r, results, topics_of_clients(r.prefix))
    write_results(out, records, benchmark=BENCHMARK, module="benchmarks.rawtopic", argv=None,
                  started=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
                  wall=time.time() - started, settings=asdict(s), bootstrap=bootstrap,
                  load_average=list(os.getloadavg()),
                  phases={k: {x: v for x, v in res.items() if x != "tallies"}
                          for k, res in results.items()})
    summarise(records)
    plot(records, out.with_suffix(".png"))
    return records


def topics_of_clients(prefix: str) -> dict[str, Any]:
    """Which of the broker meter's topics each phase's clients read."""
    return {"raw-topic": lambda t: t == f"{prefix}.raw.events",
            "dlsroute": lambda t: t.startswith(f"{prefix}.deliver.")}


def make_records(r: Run, results: dict[str, dict[str, Any]],
                 client_topic: dict[str, Any]) -> list[dict[str, Any]]:
    """Measured and extrapolated records of both phases."""
    s, n_ev = r.s, len(r.events)
    base = {**r.w.params.as_dict(), "subs_per_client": s.subs_per_client, "rate": s.rate,
            "clients_in": "one process, a thread per client",
            "transport": "loopback, one Kafka broker (KRaft)"}
    records: list[dict[str, Any]] = []

    def add(system: str, metric: str, value: float, unit: str, **params: Any) -> None:
        records.append({"benchmark": BENCHMARK, "system": system, "params": {**base, **params},
                        "metric": metric, "value": float(value), "unit": unit})

    for system, res in results.items():
        t = res["tallies"]
        read = sum(x["bytes"] for x in t)
        lat = np.concatenate([np.asarray(x["latency_ms"], dtype=np.float64) for x in t])
        meter = res["meter"]
        if meter is None:
            source, to_clients, total = "sum of consumed record sizes", read, read
        else:
            source = "Kafka BytesOutPerSec (JMX, Attach API)"
            to_clients = sum(v for k, v in meter.items() if k and client_topic[system](k))
            total = meter.get("", sum(v for k, v in meter.items() if k))
        add(system, "bytes_read_per_event", read / n_ev, "bytes")
        add(system, "records_read_per_event", sum(x["records"] for x in t) / n_ev, "records")
        add(system, "bytes_per_record", read / max(1, sum(x["records"] for x in t)), "bytes")
        add(system, "client_cpu_per_event", res["cpu_s"] / n_ev * 1e6, "µs",
            window_s=res["wall_s"], complete=res["complete"])
        add(system, "client_idle_cpu", res["idle_cpu_s_per_s"], "CPU s/s")
        add(system, "publisher_cpu_per_event", res["publisher_cpu_s"] / n_ev * 1e6, "µs",
            how="the publishing thread's CPU (pacing included)")
        if res["node_cpu_s"] is not None:
            add(system, "node_cpu_per_event", res["node_cpu_s"] / n_ev * 1e6, "µs",
                how="the node loop's thread, librdkafka's threads not included")
        add(system, "broker_bytes_out_to_clients_per_event", to_clients / n_ev, "bytes",
            source=source)
        add(system, "broker_bytes_out_per_event", total / n_ev, "bytes", source=source)
        add(system, "latency_p50", float(np.percentile(lat, 50)) if len(lat) else np.nan, "ms")
        add(system, "latency_p99", float(np.percentile(lat, 99)) if len(lat) else np.nan, "ms")
        add(system, "latency_samples", len(lat), "count")
        add(system, "deliveries", sum(x["matched"] for x in t), "deliveries")
        add(system, "true_matches", sum(r.truth), "deliveries")
        add(system, "false_deliveries", sum(x["false"] for x in t), "deliveries")
        add(system, "achieved_rate", res["achieved_rate"], "events/s")
        add(system, "client_setup_time", res["setup_s"], "s")
    if "edge_removed" in results.get("dlsroute", {}):
        add("dlsroute", "edge_removed", results["dlsroute"]["edge_removed"], "candidates")
    extrapolate(records, add, s.n_clients, s.extrapolate)
    return records


def extrapolate(records: list[dict[str, Any]], add: Any, n: int, sizes: tuple[int, ...]) -> None:
    """Per-client costs times N (see the module text), and the bar at the measured N."""
    def val(system: str, metric: str) -> float:
        return next(x["value"] for x in records
                    if x["system"] == system and x["metric"] == metric)

    raw, dls = val("raw-topic", "bytes_read_per_event"), val("dlsroute", "bytes_read_per_event")
    add("dlsroute", "bytes_read_ratio", raw / dls if dls else np.inf, "x", clients=n,
        bar=10.0, bar_met=bool(dls == 0 or raw / dls >= 10.0))
    per_match = val("dlsroute", "bytes_per_record")
    matches_per_client = val("dlsroute", "records_read_per_event") / n
    how = {"raw-topic": "N x measured per-client cost (every client reads every record)",
           "dlsroute": f"N x {matches_per_client:.5f} deliveries per client per event x "
                       f"{per_match:.1f} bytes (client CPU: N x measured per-client cost)"}
    for big in sizes:
        for system in SYSTEMS:
            for metric in ("bytes_read_per_event", "client_cpu_per_event",
                           "broker_bytes_out_to_clients_per_event"):
                unit = "µs" if metric == "client_cpu_per_event" else "bytes"
                add(system, metric, val(system, metric) / n * big, unit, clients=big,
                    extrapolated_from=n, how=how[system])
        add("dlsroute", "bytes_read_ratio", raw / dls if dls else np.inf, "x", clients=big,
            extrapolated_from=n)


def summarise(records: list[dict[str, Any]]) -> None:
    """Print the measured table and the extrapolation."""
    def val(system: str, metric: str, clients: int | None = None) -> float:
        return next((x["value"] for x in records if x["system"] == system
                     and x["metric"] == metric and x["params"].get("clients") == clients),
                    float("nan"))

    for system in SYSTEMS:
        print(f"{system:<10} {val(system, 'bytes_read_per_event'):>9,.1f} B read/event, "
              f"{val(system, 'client_cpu_per_event'):>8,.0f} µs client CPU/event, broker out "
              f"{val(system, 'broker_bytes_out_to_clients_per_event'):>9,.1f} B/event to "
              f"clients ({val(system, 'broker_bytes_out_per_event'):,.1f} in all), latency "
              f"p50 {val(system, 'latency_p50'):.1f} / p99 {val(system, 'latency_p99'):.1f} ms"
              f", {val(system, 'deliveries'):,.0f} deliveries of "
              f"{val(system, 'true_matches'):,.0f} true")
    ratio = next(x for x in records if x["metric"] == "bytes_read_ratio")
    print(f"clients read {ratio['value']:,.0f}x fewer bytes per event through dlsroute at "
          f"{ratio['params']['clients']} clients (bar 10x: "
          f"{'met' if ratio['params']['bar_met'] else 'NOT met'})")
    for x in records:
        if x["params"].get("extrapolated_from") and x["metric"] != "bytes_read_ratio":
            print(f"  N={x['params']['clients']:>6,} {x['system']:<10} {x['metric']:<38} "
                  f"{x['value']:>14,.1f} {x['unit']}")


def plot(records: list[dict[str, Any]], path: Path) -> bool:
    """Bytes read and client CPU per event vs clients, measured and extrapolated (log-log).

    Returns False when matplotlib is missing.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, metric, label in zip(axes, ("bytes_read_per_event", "client_cpu_per_event"),
                                 ("bytes read by all clients per event",
                                  "client CPU per event (µs)"), strict=True):
        for system, colour in zip(SYSTEMS, ("tab:red", "tab:blue"), strict=True):
            pts = sorted((x["params"].get("clients", x["params"]["n_clients"]), x["value"])
                         for x in records if x["system"] == system and x["metric"] == metric)
            ax.plot(*zip(*pts, strict=True), "--", color=colour, label=system)
            ax.plot(*pts[0], "o", color=colour)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("clients (dot: measured; dashed: per-client cost x N)")
        ax.set_title(label, fontsize=10)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def main(argv: list[str] | None = None) -> int:
    """Command line: ``python -m benchmarks.rawtopic [--quick] [--bootstrap] [--out]``."""
    a = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    a.add_argument("--bootstrap", default=DEFAULT_BOOTSTRAP)
    a.add_argument("--out", type=Path, default=Path("benchmarks/results/rawtopic.json"))
    a.add_argument("--quick", action="store_true")
    a.add_argument("--clients", type=int, default=None)
    a.add_argument("--subs-per-client", type=int, default=None)
    a.add_argument("--events", type=int, default=None)
    a.add_argument("--rate", type=float, default=None)
    a.add_argument("--extrapolate", type=lambda x: tuple(int(v) for v in x.split(",")),
                   default=None, help="client counts, comma-separated (default 1000,10000)")
    args = a.parse_args(argv)
    s = QUICK if args.quick else Settings()
    over = {k: v for k, v in (("n_clients", args.clients), ("events", args.events),
                              ("subs_per_client", args.subs_per_client), ("rate", args.rate),
                              ("extrapolate", args.extrapolate)) if v is not None}
    run(Settings(**{**asdict(s), **over}), args.bootstrap, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
