"""Recovery benchmark: how long a node's restart takes, against live state and against history.

Run (a Kafka must answer at ``--bootstrap``; ``KAFKA_PORT=19192 bash docker/kafka/kafka.sh
up`` starts one of your own)::

    .venv/bin/python -m benchmarks.recovery [--quick] [--bootstrap 127.0.0.1:19092]
        [--out benchmarks/results/recovery.json] [--no-plot]

One process, one broker, everything in one run; each case under a fresh topic prefix
(``rb<hex>``) whose topics and groups are deleted at its end. Node ``A`` (no neighbours,
default ``NodeSettings`` except one shared delivery topic, so that a thousand clients do
not make a thousand topics; recovery is the same) runs its loop on a thread while a bulk
writer (a raw ``Producer`` and the encoders of ``connectors.serde``) writes its control
messages, as clients would. Then the node is closed and restarted, and the time of
``NodeService.start()`` is measured (``recovery_time``; it holds topic checks, the
transactional producer's ``init_transactions``, the state's rebuild and the heap freeze):

* ``snapshot``: default settings, i.e. the latest snapshot then the control tail after it
  (its length is the ``messages_replayed`` record);
* ``replay``: ``snapshot_every_messages = 0``: every control message from offset 0, as
  before snapshots.

Cases, from one workload (:mod:`benchmarks.workload`, uniform, d=3, g=32, 1,000 clients;
the subscription ``s<i>`` is row ``i``):

* ``live``: ``s0 .. s<N-1>`` subscribed, N in ``--live`` (10K, 100K, 1M);
* ``churn``: the same 100K ``s<i>`` live at the end of 1M operations: 10 rounds, each
  subscribing a tenth of them and 45K transient ones (``t<j>``, other rows), then
  unsubscribing those 45K (the writer waits for the node between the halves, so the
  node applies them in order); 550K subscriptions and 450K unsubscriptions. Its recovered
  state must have the digest of the 100K ``live`` case, else the run fails;
* ``churn-worst``: the same history with the control tail just under the bound the
  defaults allow (a restart replays at most ``snapshot_every_messages``, or 1/``LIVE_SHARE``
  of the live subscriptions if more): the node is restarted, fed pairs of a subscription
  and its unsubscription until one more message would make a snapshot due, and restarted
  again.

The bar: ``churn`` recovery (snapshot) within 1.5x of ``live`` at 100K (snapshot): medians
of restarts of the two taken in turn (paired, so that the drift of a shared machine hits
both alike); the same for ``churn-worst``. The snapshot itself is measured at every size:
the loop's pause to take it (``snapshot_pause``: commit check, capture, encoding,
producing the chunks) and the time until its manifest is acknowledged (``snapshot_write``,
the loop running meanwhile).
Writes ``recovery.json`` (records as in ``core.json``), ``recovery.meta.json``,
``recovery.log`` and ``recovery.png``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
from confluent_kafka import Producer

from benchmarks.core import (
    CLIENT_FP_RATE,
    ROUTING_FILTER,
    distinct_labels_per_client,
    map_boxes,
    write_results,
)
from benchmarks.kafka import Recorder, delete_run_topics
from benchmarks.report import _plot_lib
from benchmarks.workload import WorkloadParams, generate, space_spec
from broker_node.config import NodeSettings
from broker_node.recovery import LIVE_SHARE
from broker_node.service import NodeService
from broker_node.snapshot import state_digest
from connectors.kafka import producer_config, wait_for_broker
from connectors.serde import encode_label_subscription, encode_label_unsubscription
from connectors.topics import Topics
from dls.space import ContentSpace

BENCHMARK = "recovery"
DEFAULT_OUT = Path("benchmarks/results/recovery.json")
DEFAULT_BOOTSTRAP = os.environ.get("DLS_KAFKA_BOOTSTRAP", "127.0.0.1:19092")
BAR = 1.5


@dataclass(frozen=True)
class RunSettings:
    """Sizes and repetitions of one run."""

    live: tuple[int, ...] = (10_000, 100_000, 1_000_000)
    churn_live: int = 100_000
    churn_ops: int = 1_000_000
    churn_rounds: int = 10
    n_clients: int = 1_000
    d: int = 3
    g: int = 32
    seed: int = 0
    samples: int = 5  # restarts measured per case and mode (1M: 2)
    wait_s: float = 1800.0


FULL = RunSettings()
QUICK = RunSettings(live=(2_000, 10_000), churn_live=10_000, churn_ops=50_000, churn_rounds=4,
                    n_clients=50, samples=2, wait_s=300.0)


@dataclass
class Workload:
    """Subscriptions as CSR labels and owners; the space spec per case size."""

    offsets: np.ndarray
    labels: np.ndarray
    owners: np.ndarray
    s: RunSettings

    def spec(self, n: int) -> dict[str, Any]:
        """The space of a node holding rows ``0..n-1`` (client filters sized for them)."""
        per_client = distinct_labels_per_client(
            self.offsets[:n + 1], self.labels[:self.offsets[n]], self.owners[:n],
            self.s.n_clients, ContentSpace.from_spec(space_spec(self.s.d, self.s.g))
            .label_space_size)
        return space_spec(self.s.d, self.s.g, {
            "client": {"expected_items": max(1, int(np.ceil(per_client))),
                       "fp_rate": CLIENT_FP_RATE}, "routing": dict(ROUTING_FILTER)})

    def subscription(self, row: int, sid: str) -> bytes:
        return encode_label_subscription(f"c{self.owners[row]}", sid,
                                         self.labels[self.offsets[row]:self.offsets[row + 1]])

    def unsubscription(self, row: int, sid: str) -> bytes:
        return encode_label_unsubscription(f"c{self.owners[row]}", sid)


def make_workload(s: RunSettings, rows: int) -> Workload:
    w = generate(WorkloadParams("uniform", s.d, s.g, rows, s.n_clients, 1, seed=s.seed))
    space = ContentSpace.from_spec(space_spec(s.d, s.g))
    offsets, labels = map_boxes(space, w.lo, w.hi)
    return Workload(offsets, labels, w.owners, s)


class Case:
    """One node's history on a fresh prefix: the node run while it is written, restarts."""

    def __init__(self, bootstrap: str, name: str, spec: dict[str, Any], tmp: Path,
                 rec: Recorder) -> None:
        self.name, self.rec, self.bootstrap = name, rec, bootstrap
        self.prefix = f"rb{uuid.uuid4().hex[:8]}"
        path = tmp / f"{self.prefix}.json"
        path.write_text(json.dumps(spec))
        self.space = ContentSpace.from_json(path)
        self.base: dict[str, Any] = {
            "node": "A", "space": path, "bootstrap": bootstrap, "topic_prefix": self.prefix,
            "shared_delivery_partitions": 1,
            # The order rule keeps a cancelled subscription until the node's inputs passed
            # publish_delay_s beyond it: short here (one clock), so that the live state is
            # the live set soon after the churn.
            "publish_delay_s": 0.5, "clock_skew_s": 0.0, "heartbeat_s": 0.1}
        t = Topics(self.prefix)
        self.sub, self.unsub = t.node_subscribe("A"), t.node_unsubscribe("A")
        self.producer = Producer(producer_config(bootstrap, **{"linger.ms": 50}))
        self.written = 0
        self.pauses: list[tuple[int, float]] = []  # (subscriptions, seconds) per snapshot
        self.times: dict[tuple[str, str, bool], list[float]] = {}
        self.replayed: dict[str, int] = {}

    def settings(self, **kw: Any) -> NodeSettings:
        return NodeSettings(**{**self.base, **kw})

    def write(self, topic: str, values: Sequence[bytes]) -> None:
        produce, poll = self.producer.produce, self.producer.poll
        for i, v in enumerate(values):
            while True:
                try:
                    produce(topic, v)
                    break
                except BufferError:
                    poll(0.05)
            if not i % 5000:
                poll(0)
        if self.producer.flush(120):
            raise RuntimeError(f"{topic}: messages not acknowledged within 120 s")
        self.written += len(values)

    def started(self, **kw: Any) -> tuple[NodeService, float]:
        gc.unfreeze()  # the frozen heap of the node before, freed with it
        gc.collect()
        svc = NodeService(self.settings(**kw), self.space)
        t0 = time.perf_counter()
        svc.start()
        took = time.perf_counter() - t0
        if svc.snapshots is not None:
            take = svc.snapshots.take

            def timed() -> bool:
                t = time.perf_counter()
                ok = take()
                if ok:
                    self.pauses.append((len(svc.state), time.perf_counter() - t))
                return ok

            svc.snapshots.take = timed  # type: ignore[method-assign]
        return svc, took

    @contextmanager
    def running(self, svc: NodeService, timeout: float) -> Iterator[Callable[[], None]]:
        """The node's loop on a thread; the function waits until it applied all written."""
        errors: list[BaseException] = []
        start_count = svc.metrics.control_in

        def loop() -> None:
            try:
                svc.run()
            except BaseException as exc:  # reported below
                errors.append(exc)

        def caught_up() -> None:
            deadline = time.monotonic() + timeout
            while (svc.metrics.control_in - start_count < self.written - self.applied_before
                   or svc.controls.retiring):
                if errors or time.monotonic() > deadline:
                    raise RuntimeError(f"{self.name}: node stuck at "
                                       f"{svc.metrics.control_in} ({errors})")
                time.sleep(0.05)

        t = threading.Thread(target=loop, name=f"node-{self.name}", daemon=True)
        t.start()
        try:
            yield caught_up
            caught_up()
            time.sleep(1.0)  # idle rounds: last commit, a due snapshot
        finally:
            svc.stop()
            t.join(120)
        if errors:
            raise errors[0]
        if svc.snapshots is not None and not svc.snapshots.store.wait(120):
            raise RuntimeError(f"{self.name}: snapshot write not done in 120 s")

    applied_before = 0  # messages written before the node now running started

    def tail(self, svc: NodeService) -> int:
        """Control messages a restart would replay now (applied since the last snapshot)."""
        sn = svc.snapshots
        return -1 if sn is None else sn.tail + svc.metrics.control_in - sn.seen

    def restart(self, system: str, sample: int, paired: bool = False) -> float:
        """One timed restart (``snapshot``: default settings; ``replay``: no snapshots);
        checks the recovered state against the case's live set."""
        svc, took = self.started(**({} if system == "snapshot"
                                    else {"snapshot_every_messages": 0}))
        replayed = svc.snapshots.tail if svc.snapshots is not None else self.written
        # A restart re-reads the unsubscriptions of its tail (all of them, replaying
        # everything): they retire again until the loop's first look at the inputs.
        retiring = len(svc.controls.retiring)
        digest = state_digest(svc.state) if sample == 0 and not retiring else self.digest
        svc.close()
        if len(svc.state) - retiring != self.live or digest != self.digest:
            raise AssertionError(f"{self.name} {system}: recovered {len(svc.state)} "
                                 f"subscriptions, {self.live} live; digest {digest[:12]}, "
                                 f"expected {self.digest[:12]}")
        params = {"case": self.name, "live": self.live, "history_ops": self.written,
                  "messages_replayed": replayed, "sample": sample, "paired": paired}
        self.rec.add(system, params, "recovery_time", took, "s")
        self.rec.log(f"  {self.name}: restart with {system}: {took:6.2f} s "
                     f"({replayed} control messages replayed)")
        self.times.setdefault((self.name, system, paired), []).append(took)
        self.replayed[system] = replayed
        return took

    def median(self, system: str) -> float:
        """Median of the restarts of ``system`` in the current case, recorded."""
        times = [t for (n, sy, _), ts in self.times.items() if (n, sy) == (self.name, system)
                 for t in ts]
        out = statistics.median(times)
        self.rec.add(system, {"case": self.name, "live": self.live,
                              "history_ops": self.written, "samples": len(times),
                              "messages_replayed": self.replayed.get(system)},
                     "recovery_time_median", out, "s")
        return out

    def close(self) -> None:
        delete_run_topics(self.bootstrap, self.prefix, [f"{self.prefix}-node-A",
                                                        f"{self.prefix}-node-A-recovery"])

    live = 0
    digest = ""


def snapshot_records(case: Case, svc: NodeService, rec: Recorder) -> None:
    """One more snapshot of the loaded node, timed: pause, write, size."""
    if svc.snapshots is None:
        raise AssertionError(f"{case.name}: the node takes no snapshots")
    t0 = time.perf_counter()
    if not svc.snapshots.take():
        raise AssertionError(f"{case.name}: snapshot refused (offsets not committed?)")
    pause = time.perf_counter() - t0
    svc.snapshots.store.wait(300)
    write = time.perf_counter() - t0
    m = svc.snapshots.store.latest or {}
    n = len(svc.state)
    params = {"case": case.name, "live": n, "chunks": m.get("chunks")}
    rec.add("snapshot", params, "snapshot_pause", pause, "s")
    rec.add("snapshot", params, "snapshot_write", write, "s")
    rec.add("snapshot", params, "snapshot_bytes", m.get("bytes", 0), "B")
    rec.log(f"  {case.name}: snapshot of {n} subscriptions: loop paused {pause:.2f} s, "
            f"written (manifest acknowledged) after {write:.2f} s, {m.get('bytes', 0) / 1e6:.1f}"
            f" MB in {m.get('chunks')} chunks")


def pause_records(case: Case, rec: Recorder) -> None:
    if case.pauses:
        worst = max(case.pauses, key=lambda p: p[1])
        median = statistics.median(p[1] for p in case.pauses)
        params = {"case": case.name, "snapshots": len(case.pauses), "live_at_worst": worst[0],
                  "live_at_end": case.pauses[-1][0]}
        rec.add("snapshot", params, "snapshot_pause_max_in_loop", worst[1], "s")
        rec.add("snapshot", params, "snapshot_pause_median_in_loop", median, "s")
        rec.log(f"  {case.name}: {len(case.pauses)} snapshots in the loop, median pause "
                f"{median:.3f} s, longest {worst[1]:.2f} s at {worst[0]} subscriptions")
        case.pauses.clear()


def loaded(case: Case, svc: NodeService, t0: float, rec: Recorder) -> None:
    """The node has applied the case's history: log, record, close; the state's digest."""
    case.live, case.digest = len(svc.state), state_digest(svc.state)
    rec.log(f"{case.name}: {case.written} control messages written and applied in "
            f"{time.perf_counter() - t0:.1f} s ({case.live} live); tail {case.tail(svc)}")
    rec.add("snapshot", {"case": case.name, "live": case.live, "history_ops": case.written},
            "live_phase_time", time.perf_counter() - t0, "s")
    pause_records(case, rec)


def live_case(bootstrap: str, w: Workload, n: int, s: RunSettings, tmp: Path,
              rec: Recorder) -> Case:
    """Node A fed ``s0 .. s<n-1>``; its restarts measured. Its topics stay (close later)."""
    values = [w.subscription(i, f"s{i}") for i in range(n)]
    # The same load on a node without snapshots first: what taking them costs the loop.
    plain = Case(bootstrap, f"live-{n}", w.spec(n), tmp, rec)
    try:
        svc, _ = plain.started(snapshot_every_messages=0)
        t0 = time.perf_counter()
        with plain.running(svc, s.wait_s):
            plain.write(plain.sub, values)
        took = time.perf_counter() - t0
        svc.close()
        rec.add("replay", {"case": plain.name, "live": n, "history_ops": n},
                "live_phase_time", took, "s")
        rec.log(f"{plain.name}: {n} subscriptions applied in {took:.1f} s without snapshots")
    finally:
        plain.close()
    case = Case(bootstrap, f"live-{n}", w.spec(n), tmp, rec)
    svc, _ = case.started()
    t0 = time.perf_counter()
    with case.running(svc, s.wait_s):
        case.write(case.sub, values)
    del values
    loaded(case, svc, t0, rec)
    snapshot_records(case, svc, rec)
    svc.close()
    k = 2 if n >= 1_000_000 else s.samples
    for i in range(k):
        case.restart("snapshot", i)
    for i in range(max(1, k - 1)):
        case.restart("replay", i)
    return case


def churn_case(bootstrap: str, w: Workload, s: RunSettings, tmp: Path, rec: Recorder
               ) -> tuple[Case, int]:
    """Node A through the churn; returns the case and the next free workload row."""
    live, rounds = s.churn_live, s.churn_rounds
    transient = (s.churn_ops - live) // 2
    case = Case(bootstrap, "churn", w.spec(live), tmp, rec)
    svc, _ = case.started()
    t0 = time.perf_counter()
    nxt = live  # the next row for a transient subscription
    with case.running(svc, s.wait_s) as caught_up:
        for r in range(rounds):
            keep = range(r * live // rounds, (r + 1) * live // rounds)
            temp = range(nxt, nxt + transient // rounds)
            nxt += len(temp)
            case.write(case.sub, [w.subscription(i, f"s{i}") for i in keep]
                       + [w.subscription(j, f"t{j}") for j in temp])
            caught_up()
            case.write(case.unsub, [w.unsubscription(j, f"t{j}") for j in temp])
            caught_up()
    loaded(case, svc, t0, rec)
    svc.close()
    return case, nxt


def worst_tail(case: Case, w: Workload, nxt: int, s: RunSettings, rec: Recorder) -> None:
    """Feed pairs of a subscription and its unsubscription until one more control message
    would make a snapshot due: the longest tail a restart with the defaults replays."""
    case.name = "churn-worst"
    svc, _ = case.started()
    bound = max(svc.settings.snapshot_every_messages, len(svc.state) // LIVE_SHARE)
    pairs = (bound - 1 - case.tail(svc)) // 2
    case.applied_before = case.written
    with case.running(svc, s.wait_s) as caught_up:
        rows = range(nxt, nxt + pairs)
        case.write(case.sub, [w.subscription(j, f"t{j}") for j in rows])
        caught_up()
        case.write(case.unsub, [w.unsubscription(j, f"t{j}") for j in rows])
    rec.log(f"churn-worst: {2 * pairs} more control messages; tail now {case.tail(svc)} of "
            f"a bound of {bound}")
    svc.close()


def paired(base: Case, other: Case, samples: int) -> None:
    """Restarts of both cases in turn (the machine's drift hits both alike)."""
    for i in range(samples):
        for c in (base, other) if i % 2 == 0 else (other, base):
            c.restart("snapshot", 1 + i, paired=True)


def bar(base: Case, other: Case, rec: Recorder) -> float:
    """The ratio of the paired medians (snapshot restarts), recorded and logged."""
    b = statistics.median(base.times[(base.name, "snapshot", True)])
    o = statistics.median(other.times[(other.name, "snapshot", True)])
    ratio = o / b
    rec.add("snapshot", {"case": other.name, "against": base.name, "bar": BAR},
            "churn_ratio", ratio, "x")
    rec.log(f"bar: {other.name} recovery {o:.2f} s / {base.name} {b:.2f} s = {ratio:.2f}x "
            f"({'within' if ratio <= BAR else 'OVER'} {BAR}x)")
    return ratio


def plot(records: list[dict[str, Any]], path: Path) -> bool:
    """Recovery time vs live subscriptions, and the churn cases against live 100K."""
    plt = _plot_lib()  # matplotlib's pyplot on the Agg backend, None without matplotlib
    if plt is None:
        return False
    med = {(r["system"], r["params"]["case"]): r for r in records
           if r["metric"] == "recovery_time_median"}
    if not med:
        return False
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    for system, style in (("snapshot", "o-"), ("replay", "s--")):
        pts = sorted((r["params"]["live"], r["value"]) for (sy, c), r in med.items()
                     if sy == system and c.startswith("live-"))
        if pts:
            left.plot(*zip(*pts, strict=True), style, label=system)
    left.set(xscale="log", yscale="log", xlabel="live subscriptions (no churn)",
             ylabel="NodeService.start() (s)", title="recovery vs live state")
    left.legend()
    live_cases = sorted((r["params"]["live"], c) for (_, c), r in med.items()
                        if c.startswith("live-"))
    churn_live = next((r["params"]["live"] for (_, c), r in med.items() if c == "churn"), None)
    cases = [c for n, c in live_cases if n == churn_live][:1] + ["churn", "churn-worst"]
    x = np.arange(len(cases))
    for k, system in enumerate(("snapshot", "replay")):
        vals = [med[(system, c)]["value"] if (system, c) in med else 0 for c in cases]
        right.bar(x + (k - 0.5) * 0.38, vals, 0.38, label=system)
    if (("snapshot", cases[0]) in med):
        right.axhline(BAR * med[("snapshot", cases[0])]["value"], color="k", lw=0.8, ls=":",
                      label=f"bar: {BAR}x {cases[0]} (snapshot)")
    labels = []
    for c in cases:
        r = med.get(("snapshot", c))
        labels.append(f"{c}\n{r['params']['history_ops']:,} ops\ntail "
                      f"{r['params']['messages_replayed']:,}" if r else c)
    right.set_xticks(x, labels, fontsize=8)
    for bars in right.containers:
        right.bar_label(bars, fmt="%.1f", fontsize=7)
    right.set(yscale="log", ylabel="NodeService.start() (s)",
              title=f"{churn_live:,} live: no churn vs after churn")
    right.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def run(s: RunSettings, bootstrap: str, rec: Recorder) -> dict[str, Any]:
    wait_for_broker(bootstrap, 60)
    t0 = time.perf_counter()
    rows = max(max(s.live), s.churn_live + (s.churn_ops - s.churn_live) // 2
               + NodeSettings.model_fields["snapshot_every_messages"].default
               + s.churn_live // LIVE_SHARE)
    w = make_workload(s, rows)
    rec.log(f"workload: {rows} subscriptions ({len(w.labels) / rows:.2f} labels each) of "
            f"{s.n_clients} clients, d={s.d} g={s.g}; made in {time.perf_counter() - t0:.1f} s")
    cases: list[Case] = []
    facts: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        try:
            for n in s.live:
                cases.append(live_case(bootstrap, w, n, s, Path(tmp), rec))
            base = next(c for c in cases if c.name == f"live-{s.churn_live}")
            for c in cases:
                c.median("snapshot")
                c.median("replay")
            churn, nxt = churn_case(bootstrap, w, s, Path(tmp), rec)
            cases.append(churn)
            if churn.digest != base.digest:
                raise AssertionError("churn: the live state differs from the live case's")
            churn.restart("snapshot", 0)
            churn.restart("replay", 0)
            paired(base, churn, s.samples)
            facts["churn_ratio"] = round(bar(base, churn, rec), 3)
            churn.median("snapshot")
            churn.median("replay")
            worst_tail(churn, w, nxt, s, rec)
            churn.restart("snapshot", 0)
            churn.restart("replay", 0)
            base.name = f"live-{s.churn_live}-again"
            paired(base, churn, s.samples)
            facts["churn_worst_ratio"] = round(bar(base, churn, rec), 3)
            churn.median("snapshot")
            churn.median("replay")
        finally:
            for c in cases:
                c.close()
    return facts


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small sizes (2K/10K live, 50K ops)")
    ap.add_argument("--bootstrap", default=DEFAULT_BOOTSTRAP,
                    help="Kafka bootstrap servers (default $DLS_KAFKA_BOOTSTRAP or "
                         "127.0.0.1:19092)")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON records file")
    ap.add_argument("--no-plot", action="store_true", help="skip the PNG")
    args = ap.parse_args(argv)
    s = QUICK if args.quick else FULL
    rec = Recorder()
    rec.records = []
    started = datetime.now(UTC).isoformat(timespec="seconds")
    t0 = time.perf_counter()
    load = os.getloadavg()
    rec.log(f"benchmarks.recovery {'quick' if args.quick else 'full'} run on "
            f"{args.bootstrap}; load average {load[0]:.2f}")
    facts = run(s, args.bootstrap, rec)
    for r in rec.records:
        r["benchmark"] = BENCHMARK
    wall = time.perf_counter() - t0
    meta = write_results(args.out, rec.records, benchmark=BENCHMARK,
                         module="benchmarks.recovery", argv=argv, started=started, wall=wall,
                         quick=args.quick, bootstrap=args.bootstrap, settings=asdict(s),
                         node_defaults={k: NodeSettings.model_fields[k].default for k in (
                             "snapshot_every_messages", "snapshot_interval_s",
                             "recovery_stall_s", "batch_size", "delivery")},
                         loadavg_1min_start_end=[round(load[0], 2),
                                                 round(os.getloadavg()[0], 2)], **facts)
    rec.log(f"wrote {len(rec.records)} records to {args.out} and {meta} in {wall:.1f} s")
    if not args.no_plot:
        png = args.out.with_name(args.out.stem + ".png")
        rec.log(f"wrote {png}" if plot(rec.records, png) else "no plot")
    args.out.with_name(args.out.stem + ".log").write_text("\n".join(rec.lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
