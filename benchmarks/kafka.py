"""Kafka benchmark: one DLS broker node on a real Kafka vs a plain consume->produce passthrough.

Run (a Kafka must answer at ``--bootstrap``; ``KAFKA_PORT=19092 make kafka-up`` starts one)::

    .venv/bin/python -m benchmarks.kafka [--quick] [--bootstrap 127.0.0.1:19092]
        [--out benchmarks/results/kafka.json] [--no-plot] [--no-profile] [--no-latency]
        [--keep-topics] [--events N] [--batch-size B] [--poll-timeout S]
        [--shared-partitions N[,N...]] [--no-gc-freeze]

Everything runs in one process tree on loopback against one broker, under a fresh topic
prefix (``kb<hex>``) whose topics and consumer groups are deleted at the end.

Phases (every count and wait is bounded; see :class:`RunSettings`):

1. **Workload.** :mod:`benchmarks.workload` (uniform, d=3, g=32; full run: 100K
   subscriptions of 1,000 clients, 100K events), mapped with ``box_labels_batch`` and
   ``event_labels_batch``. Client filters are sized as in :mod:`benchmarks.core` (mean
   distinct labels per client, 1% fp), ERTs m=2**20 k=7.
2. **Load.** Every subscription is produced as a ``LabelSubscription`` to
   ``<prefix>.node.A.subscribe``; then the node ``A`` (no neighbours, default
   ``NodeSettings``) starts and its loop runs until ``len(service.state) == n_subs``.
   ``load_time`` is loop start -> that moment; ``load_topic_setup_time`` is the part spent
   in ``ensure_topics`` (the node creates the delivery topics of new clients; measured by
   wrapping ``broker_node.service.ensure_topics`` at run time).
3. **Warm-up.** A throwaway transactional producer writes ``warmup_rounds`` transactions of
   ``warmup_per_topic`` small messages to every delivery topic: on this machine the first
   transactions touching a thousand fresh partitions stalled for seconds, which the first
   measured system would otherwise pay.
4. **Events.** ``n_events`` events are produced to ``<prefix>.node.A.publish`` the way
   ``Client.publish`` does (value ``encode_raw_event``, headers ``dls-label``,
   ``dls-origin`` = ``A/pub``, ``dls-event-id`` = ``e<i>``; ``pub`` subscribes nothing).
5. **Throughput**, each system reading the same pre-produced events with its own consumer
   group, ``batch_size`` and ``poll_timeout_s`` equal to the node's:

   * ``passthrough``: ``Consumer`` (read_committed) + transactional ``Producer``; per batch
     ``begin_transaction``, forward each message's value and headers to one output topic,
     ``send_offsets_to_transaction``, ``commit_transaction`` -- the node's loop without DLS.
   * ``dls``: the node's own loop (``NodeService.run`` in slices of ``max_seconds``).
   * ``passthrough-fanout``: the ``passthrough`` loop, but each message goes to the delivery
     topics the node sends it to (the plan is ``state.route`` of the same labels on the
     loaded state, looked up by event id): the same Kafka output as ``dls`` without the DLS
     code, so ``dls / passthrough-fanout`` is the cost of the node's own work and
     ``passthrough-fanout / passthrough`` the cost of the fan-out. It runs half of the
     events before the node and half after (the log shows both halves), so that drift of
     the shared machine hits both alike.
   * ``passthrough-nontx``: for information, ``passthrough`` without transactions
     (idempotent producer, asynchronous offset commit per batch, one flush at the end).

   ``throughput`` is events/s from the first committed batch to the last (the events of
   the first batch excluded: ``(n - first) / (t_last - t_first)``); ``delivery_throughput``
   is messages produced per second over the same window; the ``*_median_batch`` metrics
   are the median over batches (first left out), robust to stalls of a shared machine.
   ``process_cpu_utilisation`` is this process's CPU seconds (Python and librdkafka
   threads) per wall second of the phase.
6. **Profile** (unless ``--no-profile``): ``profile_events`` more events go through the
   node under ``cProfile``; the top of the profile goes to ``kafka.profile.log`` and the
   share of the main parts of the loop to ``node_time_share`` records.
7. **Recovery.** A fresh ``NodeService`` with the same group rebuilds the subscriptions
   from the control topics (``recovery_time``, the time of ``NodeService.start``).
8. **Latency.** With that node running on a thread, a publisher process sends events at
   ``latency_rate_fraction`` (0.5) of the ``dls`` throughput, paced every millisecond, each
   with its send time (``time.time_ns``) in a ``bench-sent-ns`` header (the node forwards
   headers untouched), through a producer with ``Client``'s settings; a receiver process
   reads the delivery topics of ``latency_clients`` clients (``read_committed``, default
   fetch settings, assigned at their end offsets; ``poll`` for the first message, then
   what else is there) and records ``now - sent`` of each delivery sent after
   ``latency_warmup_s`` and before the end. This is repeated for each
   ``(batch_size, poll_timeout_s)`` of ``latency_configs``; the node's settings object is
   swapped between them (``model_copy``; ``run`` reads both at every batch), which is a
   restart with those settings minus the recovery. Then the same paced load goes through
   the transactional ``passthrough`` (one input and one output topic) with the same
   settings. Metrics: ``latency_p50``, ``latency_p99``, ``latency_p999``, ``latency_max``,
   ``latency_mean`` (ms), ``latency_samples``, ``achieved_rate``, ``events_per_transaction``
   (mean batch in the window) and ``backlog_at_end`` (events sent but not yet consumed when
   the publisher stopped).
9. **Variants** (``at_least_once``, ``shared_partitions``): further nodes with the same
   subscriptions and events, each through throughput and latency as above: ``dls-alo``
   (at least once), ``dls-shared`` / ``dls-shared-eos`` (one shared delivery topic of the
   first partition count, at least / exactly once) and ``dls-shared-p<N>`` /
   ``dls-shared-p<N>-eos`` for the others. A shared-topic node also gets
   ``paired_rounds`` rounds of the passthrough of the same kind and the node, back to back,
   alternating which goes first (``throughput_round`` records and
   ``throughput_ratio_paired_median``), each run on ``n_events`` events drawn anew from the
   workload (same subscriptions; :func:`fresh_events`), never the first window's again,
   and that passthrough's latency at the node's latency rate (records with ``rate_of``):
   the floor of that rate on this machine.

Garbage collection: with ``gc_freeze`` (default) the workload is frozen out of Python's
collector before any phase, and every node freezes its heap at start
(``NodeSettings.gc_freeze``); ``--no-gc-freeze`` measures both without. The process's
generation-0 collection threshold is set once, before any phase, to a node's
(``NodeSettings.gc_young_threshold``): a node sets it at start for its whole process, and
the passthroughs run in the same process, so all of them run with it (``gc_threshold`` in
the params).

Route cache: every node runs with ``NodeSettings.route_cache_mb`` (``--route-cache-mb
MB``; 0 turns it off). The workload's events fall into ~32,000 cells, so a node sees each
label about three times in its first 100,000 events and more often in later rounds: each
throughput window, paired round and node latency run records ``route_cache_hit_rate``,
the share of its events routed from a plan made earlier. Every paired round and every
latency run sends events drawn anew (a seed of their own, the same distribution and
subscriptions): replaying the first window's events, as the rounds once did, let the
cache answer 100 % of them (0.86-0.89x with the cache against 0.48-0.62x without, with
``--events 30000``, whose first window hit 34.5 %), which says nothing of a live stream.

The issue's bars are read off the records (never asserted): throughput ``dls`` /
``passthrough`` of the same kind at least 0.7 (``throughput_ratio``; for shared-topic
nodes the median of the paired rounds, ``throughput_ratio_paired_median``); latency: the
node's p99 at most ``BAR_P99_RATIO`` (1.5) x the passthrough's at the same rate, median
of five paired rounds at 25 % and 50 % of the node's maximum, one-partition layout --
judged by ``benchmarks.kafka_latency``; here each system runs once at half its maximum
and the log gives that one ratio for information. The log says whether each bar is met.

Output: ``kafka.json`` (records ``{"benchmark", "system", "params", "metric", "value",
"unit"}``), ``kafka.meta.json`` (machine, commit, command, wall time, settings, topic count
of the cluster and load average at start and end), ``kafka.log`` (what was printed),
``kafka.profile.log`` and ``kafka.png`` (if matplotlib imports): each node's throughput
as a ratio to the passthrough of the same kind (the median of the paired rounds where there
are any, the first window otherwise), the paired rounds' median rates, and, after a latency
phase, each node's best p99 at half its maximum beside that passthrough's.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import functools
import gc
import io
import json
import multiprocessing as mp
import os
import pstats
import tempfile
import threading
import time
import uuid
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
from confluent_kafka import Consumer, KafkaException, Producer

import broker_node.service as service_mod
from benchmarks.core import (
    CLIENT_FP_RATE,
    ROUTING_FILTER,
    distinct_labels_per_client,
    event_columns,
    map_boxes,
    write_results,
)
from benchmarks.paced import NODE, PUBLISHER, publisher_proc, receiver_proc
from benchmarks.workload import (
    Workload,
    WorkloadParams,
    attr_names,
    draw_values,
    generate,
    space_spec,
)
from broker_node.config import NodeSettings
from broker_node.heap import set_young_threshold
from broker_node.service import NodeService
from connectors.closing import close_consumer
from connectors.kafka import (
    PRODUCER_DEFAULTS,
    admin,
    consume_batch,
    consumer_config,
    ensure_topics,
    next_offsets,
    offsets_to_commit,
    producer_config,
    wait_for_broker,
)
from connectors.serde import encode_label_subscription, encode_raw_event
from connectors.topics import (
    HEADER_EVENT_ID,
    HEADER_LABEL,
    HEADER_ORIGIN,
    Topics,
    delivery_partition,
    encode_label,
)
from dls.mapping import event_labels_batch
from dls.space import ContentSpace

BENCHMARK = "kafka"
ALO_NODE = "B"
SHARED_NODE = "S"
SHARED_EOS_NODE = "T"
DEFAULT_OUT = Path("benchmarks/results/kafka.json")
DEFAULT_BOOTSTRAP = os.environ.get("DLS_KAFKA_BOOTSTRAP", "127.0.0.1:19092")
BAR_THROUGHPUT_RATIO = 0.7
#: The latency bar: node p99 at most this many times the passthrough's of the same kind at
#: the same rate (median of paired rounds; judged by ``benchmarks.kafka_latency``).
BAR_P99_RATIO = 1.5


@dataclass(frozen=True)
class RunSettings:
    """Sizes, node settings and time bounds of one run (full or quick)."""

    n_clients: int
    n_subs: int
    n_events: int
    distribution: str = "uniform"
    d: int = 3
    g: int = 32
    seed: int = 0
    payload_bytes: int = 0
    batch_size: int = 1000  # NodeSettings' default
    poll_timeout_s: float = 0.05  # NodeSettings' default
    profile_events: int = 50_000
    latency_s: float = 10.0
    latency_warmup_s: float = 1.0
    latency_rate_fraction: float = 0.5
    latency_clients: int = 10
    latency_drain_s: float = 20.0
    latency_quiet_s: float = 1.5  # the receiver ends after this long without a message
    latency_low_rates: tuple[float, ...] = (20.0, 100.0)
    latency_configs: tuple[tuple[int, float], ...] = ((1000, 0.05), (1000, 0.005), (1000, 0.001))
    warmup_per_topic: int = 34
    warmup_rounds: int = 6
    load_timeout_s: float = 600.0
    phase_timeout_s: float = 300.0
    at_least_once: bool = True  # also measure the node with delivery = "at_least_once"
    # Also measure it on a shared delivery topic of each of these partition counts (the
    # first is ``dls-shared``, the others ``dls-shared-p<N>``; empty: not at all).
    shared_partitions: tuple[int, ...] = (4, 1)
    # Freeze the workload out of garbage collection before any phase, and let every node
    # do the same at start (NodeSettings.gc_freeze); False measures both without.
    gc_freeze: bool = True
    # Shared-topic nodes: this many extra rounds of (passthrough, node) on fresh events,
    # alternating which goes first, for a paired throughput ratio (0: none).
    paired_rounds: int = 3
    # Every node's NodeSettings.route_cache_mb (0: each event matched afresh).
    route_cache_mb: float = NodeSettings.model_fields["route_cache_mb"].default


FULL = RunSettings(n_clients=1_000, n_subs=100_000, n_events=100_000, profile_events=20_000)
QUICK = RunSettings(n_clients=50, n_subs=2_000, n_events=5_000, profile_events=3_000,
                    warmup_per_topic=5, warmup_rounds=2,
                    latency_s=0.5, latency_warmup_s=0.15, latency_configs=((1000, 0.01),),
                    latency_drain_s=5.0, latency_quiet_s=0.3, latency_low_rates=(20.0,),
                    paired_rounds=1,
                    load_timeout_s=120.0, phase_timeout_s=120.0)


class Recorder:
    """Collects records; ``log`` prints and keeps every line for ``kafka.log``."""

    def __init__(self, benchmark: str = BENCHMARK) -> None:
        self.benchmark = benchmark
        self.records: list[dict[str, Any]] = []
        self.lines: list[str] = []

    def add(self, system: str, params: dict[str, Any], metric: str, value: float,
            unit: str) -> None:
        self.records.append({"benchmark": self.benchmark, "system": system,
                             "params": dict(params), "metric": metric, "value": float(value),
                             "unit": unit})

    def log(self, line: str) -> None:
        stamp = time.strftime("%H:%M:%S")
        print(f"[{stamp}] {line}", flush=True)
        self.lines.append(f"[{stamp}] {line}")


# -- workload -----------------------------------------------------------------------------
@dataclass
class Prepared:
    """The workload mapped to labels and encoded as Kafka messages."""

    workload: Workload
    spec: dict[str, Any]
    space: ContentSpace
    base: dict[str, Any]
    subscriptions: list[bytes]
    ev_labels: np.ndarray
    ev_values: list[bytes]
    ev_headers: list[list[tuple[str, bytes]]]


def event_message(eid: str, row: Sequence[int], names: Sequence[str], label: int,
                   payload: bytes) -> tuple[bytes, list[tuple[str, bytes]]]:
    """Value and headers of event ``eid`` exactly as ``Client.publish`` writes them."""
    value = encode_raw_event(NODE, PUBLISHER, eid, dict(zip(names, row, strict=True)), payload)
    return value, [(HEADER_LABEL, encode_label(label)),
                   (HEADER_ORIGIN, f"{NODE}/{PUBLISHER}".encode()),
                   (HEADER_EVENT_ID, eid.encode())]


def prepare(s: RunSettings, n_events: int, rec: Recorder) -> Prepared:
    """Generate, map and encode the workload (untimed except for the log)."""
    t0 = time.perf_counter()
    w = generate(WorkloadParams(s.distribution, s.d, s.g, s.n_subs, s.n_clients, n_events,
                                seed=s.seed))
    space0 = ContentSpace.from_spec(space_spec(s.d, s.g))
    offsets, labels = map_boxes(space0, w.lo, w.hi)
    per_client = distinct_labels_per_client(offsets, labels, w.owners, s.n_clients,
                                            space0.label_space_size)
    items = max(1, int(np.ceil(per_client)))
    spec = space_spec(s.d, s.g, {"client": {"expected_items": items, "fp_rate": CLIENT_FP_RATE},
                                 "routing": dict(ROUTING_FILTER)})
    space = ContentSpace.from_spec(spec)
    owners = w.owners.tolist()
    subs = [encode_label_subscription(f"c{owners[i]}", f"s{i}",
                                      labels[offsets[i]:offsets[i + 1]])
            for i in range(s.n_subs)]
    ev_labels, valid = event_labels_batch(space, event_columns(w))
    if not valid.all():
        raise AssertionError("generated events must be inside the domain")
    values, headers = encode_events(s, w.events, ev_labels, "e")
    base = {**w.params.as_dict(), "n_events": s.n_events, "payload_bytes": s.payload_bytes,
            "labels_per_subscription": len(labels) / s.n_subs,
            "client_expected_items": items, "client_fp_rate": CLIENT_FP_RATE,
            "routing_m": ROUTING_FILTER["m"], "routing_k": ROUTING_FILTER["k"],
            "neighbours": 0, "transport": "loopback, one Kafka broker (KRaft)"}
    rec.log(f"workload: {s.n_subs} subscriptions ({len(labels) / s.n_subs:.1f} labels each) "
            f"of {s.n_clients} clients, {n_events} events, d={s.d} g={s.g} {s.distribution}; "
            f"client filters for {items} labels; prepared in {time.perf_counter() - t0:.1f} s")
    return Prepared(w, spec, space, base, subs, ev_labels, values, headers)


def encode_events(s: RunSettings, events: np.ndarray, labels: np.ndarray,
                  id_prefix: str) -> tuple[list[bytes], list[list[tuple[str, bytes]]]]:
    """Values and headers of events as ``Client.publish`` writes them; ids ``<prefix><i>``."""
    names = attr_names(events.shape[1])
    payload = bytes(s.payload_bytes)
    values, headers = [], []
    for i, (row, label) in enumerate(zip(events.tolist(), labels.tolist(), strict=True)):
        v, h = event_message(f"{id_prefix}{i}", row, names, label, payload)
        values.append(v)
        headers.append(h)
    return values, headers


def fresh_events(p: Prepared, n: int, draw: str) -> tuple[np.ndarray, np.ndarray]:
    """``n`` events drawn anew from the workload's distribution, and their labels.

    The generator is seeded with the workload's seed and ``draw`` (a name unique within a
    run, e.g. the round's), so each round gets its own events of the same workload (same
    subscriptions), never the first window's again: replayed events are all answered by
    the route cache, which a live stream is not.
    """
    wp = p.workload.params
    rng = np.random.default_rng([wp.seed, zlib.crc32(draw.encode())])
    events = np.empty((n, wp.d), dtype=np.int64)
    for i in range(wp.d):
        events[:, i] = draw_values(rng, n, wp)
    labels, valid = event_labels_batch(
        p.space, {name: events[:, i] for i, name in enumerate(attr_names(wp.d))})
    if not valid.all():
        raise AssertionError("drawn events must be inside the domain")
    return events, labels


def events_digest(events: np.ndarray, labels: np.ndarray) -> int:
    """A CRC-32 of events and their labels (recorded, to tell the rounds' events apart)."""
    return zlib.crc32(np.ascontiguousarray(labels).tobytes(),
                      zlib.crc32(np.ascontiguousarray(events).tobytes()))


def young_threshold() -> int:
    """Give this process a node's generation-0 collection threshold; return it.

    A node sets it at start for its whole process (``NodeSettings.gc_young_threshold``);
    set here before any phase, every passthrough and node of a run gets the same.
    """
    threshold = int(NodeSettings.model_fields["gc_young_threshold"].default)
    set_young_threshold("benchmark process", threshold)
    return threshold


# -- Kafka helpers ------------------------------------------------------------------------
def produce_all(producer: Producer, topic: str, values: Sequence[bytes],
                headers: Sequence[Any] | None = None, timeout: float = 120.0) -> float:
    """Produce every value (with its headers), wait for the acks; return the seconds taken."""
    t0 = time.perf_counter()
    produce, poll = producer.produce, producer.poll
    for i, v in enumerate(values):
        h = None if headers is None else headers[i]
        while True:
            try:
                produce(topic, v, headers=h)
                break
            except BufferError:
                poll(0.05)
        if not i % 1000:
            poll(0)
    left = producer.flush(timeout)
    if left:
        raise RuntimeError(f"{left} messages to {topic} not acknowledged within {timeout} s")
    return time.perf_counter() - t0


def warm_up(bootstrap: str, topics: Sequence[str], per_topic: int, rounds: int,
            transactional_id: str) -> list[float]:
    """Transactions writing ``per_topic`` small messages to each topic; seconds per round."""
    producer = Producer(producer_config(bootstrap, transactional_id=transactional_id))
    producer.init_transactions()
    out = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        producer.begin_transaction()
        for _ in range(per_topic):
            for t in topics:
                producer.produce(t, b"warm-up")
        producer.commit_transaction()
        out.append(time.perf_counter() - t0)
    return out


def _timed_ensure_topics(acc: list[float]) -> Callable[..., None]:
    """``ensure_topics`` that adds its wall time to ``acc[0]`` (for the load breakdown)."""
    inner = service_mod.ensure_topics

    @functools.wraps(inner)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        t0 = time.perf_counter()
        try:
            inner(*args, **kwargs)
        finally:
            acc[0] += time.perf_counter() - t0
            acc[1] += 1

    return wrapper


def drive(service: NodeService, done: Callable[[], bool], timeout: float, what: str,
          slice_s: float = 0.02) -> list[tuple[float, int, int]]:
    """Run the node's loop on this thread until ``done()``; samples after each slice.

    ``NodeService.run(max_seconds)`` returns at the top of its loop, after a commit, so a
    sample ``(perf_counter, events_in, delivery_messages)`` is taken between transactions
    (messages written to delivery topics: one per delivery with a topic per client).
    """
    deadline = time.monotonic() + timeout
    m = service.metrics
    samples = [(time.perf_counter(), m.events_in, m.delivery_messages)]
    while not done():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not done within {timeout:g} s")
        service.run(max_seconds=slice_s)
        samples.append((time.perf_counter(), m.events_in, m.delivery_messages))
    return samples


@dataclass
class Window:
    """Events and messages between the first and the last committed batch."""

    events: int
    messages: int
    seconds: float
    first_batch: int
    batches: int
    median_rate: float = float("nan")
    median_message_rate: float = float("nan")

    @property
    def rate(self) -> float:
        return self.events / self.seconds if self.seconds > 0 else float("nan")

    @property
    def message_rate(self) -> float:
        return self.messages / self.seconds if self.seconds > 0 else float("nan")


def window(samples: Sequence[tuple[float, int, int]], n: int) -> Window:
    """The measurement window of ``n`` events in cumulative samples ``(t, events, msgs)``.

    From the first sample with events to the first with all ``n``; the first sample's
    events (and messages) are excluded from the counts. When one batch held them all, the
    window starts at the first sample (the call's start) instead.
    """
    start = samples[0]
    e_start = start[1]
    first = next(x for x in samples if x[1] > e_start)
    last = next(x for x in samples if x[1] >= e_start + n)
    if last is first:  # one batch: from the start of the call instead
        first = start
    batches = sum(1 for a, b in zip(samples, samples[1:], strict=False) if b[1] > a[1])
    med = median_rates([x for x in samples if x[0] <= last[0]])
    return Window(events=last[1] - first[1], messages=last[2] - first[2],
                  seconds=last[0] - first[0], first_batch=first[1] - e_start,
                  batches=batches, median_rate=med[0], median_message_rate=med[1])


def median_rates(samples: Sequence[tuple[float, int, int]]) -> tuple[float, float]:
    """Median events/s and messages/s over the batches of cumulative samples.

    Each interval between samples that took events is one rate (idle intervals before it
    are added to it); the first such interval (start-up) is left out. Robust to the stalls
    of a shared machine, unlike the window mean.
    """
    ev: list[float] = []
    msg: list[float] = []
    dt = 0.0
    for a, b in zip(samples, samples[1:], strict=False):
        dt += b[0] - a[0]
        if b[1] > a[1]:
            if dt > 0:
                ev.append((b[1] - a[1]) / dt)
                msg.append((b[2] - a[2]) / dt)
            dt = 0.0
    ev, msg = ev[1:] or ev, msg[1:] or msg
    if not ev:
        return float("nan"), float("nan")
    return float(np.median(ev)), float(np.median(msg))


def passthrough(bootstrap: str, source: str, group: str, n: int | None, batch: int,
                poll_s: float, *, transactional: bool, out_topic: str | None = None,
                plan: Sequence[Sequence[str]] | None = None, timeout: float = 300.0,
                stop: threading.Event | None = None,
                samples: list[tuple[float, int, int]] | None = None,
                kafka: Mapping[str, Any] | None = None) -> list[tuple[float, int, int]]:
    """Consume ``n`` messages of ``source`` (or until ``stop``) and forward them.

    Forward to ``out_topic``, or, with ``plan``, to ``plan[i]`` for the event whose
    ``dls-event-id`` is ``e<i>``. Returns cumulative samples ``(perf_counter, messages in,
    messages out)``, one after each committed batch (appended to ``samples`` if given).
    """
    consumer = Consumer(consumer_config(bootstrap, group, **(kafka or {})))
    producer = Producer(producer_config(
        bootstrap, transactional_id=f"{group}-tx" if transactional else None, **(kafka or {})))
    if transactional:
        producer.init_transactions()
    consumer.subscribe([source])
    produce, ppoll = producer.produce, producer.poll
    seen = sent = 0
    samples = [] if samples is None else samples
    samples.append((time.perf_counter(), 0, 0))
    deadline = time.monotonic() + timeout
    try:
        while (seen < n) if n is not None else not (stop and stop.is_set()):
            if time.monotonic() > deadline:
                raise TimeoutError(f"passthrough {group}: {seen}/{n} within {timeout:g} s")
            msgs = consume_batch(consumer, batch, poll_s)
            if not msgs:
                continue
            if transactional:
                producer.begin_transaction()
            for msg in msgs:
                value, headers = msg.value(), msg.headers()
                if plan is None:
                    targets: Sequence[str] = (out_topic,)  # type: ignore[assignment]
                else:
                    eid = next(v for k, v in headers if k == HEADER_EVENT_ID)
                    targets = plan[int(eid[1:])]
                for topic in targets:
                    try:
                        produce(topic, value, headers=headers)
                    except BufferError:
                        ppoll(0.05)
                        produce(topic, value, headers=headers)
                sent += len(targets)
            if transactional:
                producer.send_offsets_to_transaction(offsets_to_commit(next_offsets(msgs)),
                                                     consumer.consumer_group_metadata())
                producer.commit_transaction()
            else:
                ppoll(0)
                consumer.commit(asynchronous=True)
            seen += len(msgs)
            samples.append((time.perf_counter(), seen, sent))
        if not transactional:
            left = producer.flush(60)
            if left:
                raise RuntimeError(f"passthrough {group}: {left} messages not acknowledged")
            samples.append((time.perf_counter(), seen, sent))
    finally:
        close_consumer(consumer)
    return samples


def delete_run_topics(bootstrap: str, prefix: str, groups: Iterable[str] = (),
                      kafka: Mapping[str, Any] | None = None) -> int:
    """Delete the topics under ``prefix.`` and the run's consumer groups (best effort).

    ``kafka``: the admin client's further settings (a secure broker's).
    """
    client = admin(bootstrap, **(kafka or {}))
    names = [t for t in client.list_topics(timeout=30).topics if t.startswith(prefix + ".")]
    for i in range(0, len(names), 500):
        for fut in client.delete_topics(names[i:i + 500], operation_timeout=60).values():
            try:
                fut.result(timeout=120)
            except KafkaException:
                pass
    groups = list(groups)
    if groups:
        try:
            for fut in client.delete_consumer_groups(groups, request_timeout=30).values():
                try:
                    fut.result(timeout=60)
                except KafkaException:
                    pass
        except (KafkaException, ValueError):
            pass
    return len(names)


# -- latency helper processes -------------------------------------------------------------
def measure_latency(bootstrap: str, publish: str, watched: list[tuple[str, int]], group: str,
                    counts: Callable[[], tuple[int, int, int]], p: Prepared, s: RunSettings,
                    rate: float, tag: str, draw: str | None = None) -> dict[str, Any]:
    """One paced run: publisher and receiver processes around a running forwarder.

    ``counts()`` gives the forwarder's cumulative (events in, messages out, transactions).
    After the publisher stops, waits (at most ``latency_drain_s``) until the forwarder has
    taken every event sent, then lets the receiver drain (``latency_quiet_s`` without a
    message). The publisher starts beside the receiver and encodes its events meanwhile; its
    clock starts once the receiver reads.
    The publisher sends events drawn anew for this run (:func:`fresh_events`, seeded by
    ``draw``, default ``tag``), as many as it can send, so no event is sent twice.
    """
    total = s.latency_warmup_s + s.latency_s
    draw = tag if draw is None else draw
    drawn, labels = fresh_events(p, int(rate * total) + 1, draw)
    ctx = mp.get_context("spawn")
    ready, stop, go = ctx.Event(), ctx.Event(), ctx.Event()
    q_recv, q_pub = ctx.Queue(), ctx.Queue()
    receiver = ctx.Process(target=receiver_proc, args=(bootstrap, watched, group, ready, stop,
                                                        q_recv, s.latency_quiet_s), daemon=True)
    publisher = ctx.Process(target=publisher_proc, args=(
        bootstrap, publish, drawn, labels, rate, total, s.payload_bytes, tag, q_pub, go),
        daemon=True)
    receiver.start()
    publisher.start()  # imports and encodes while the receiver starts; sends after go
    if not ready.wait(60):
        receiver.kill()
        publisher.kill()
        raise TimeoutError("latency receiver did not start within 60 s")
    before = counts()
    go.set()
    pub = q_pub.get(timeout=total + 180)  # its encoding before the clock starts included
    publisher.join(30)
    at_end = counts()
    t_end = time.monotonic()
    while counts()[0] < before[0] + pub["sent"] and time.monotonic() - t_end < s.latency_drain_s:
        time.sleep(0.05)
    caught_up = time.monotonic() - t_end
    after = counts()
    stop.set()
    got = q_recv.get(timeout=120)
    receiver.join(30)
    # Only deliveries sent in the steady window count: after the warm-up of the
    # publisher's clock (its t0, once its values are encoded).
    sent_ns, lat_ns = got["sent_ns"], got["latency_ns"]
    lo = pub["t0_ns"] + int(s.latency_warmup_s * 1e9)
    hi = pub["t0_ns"] + int(total * 1e9)
    keep = (sent_ns >= lo) & (sent_ns < hi)
    events, batches = after[0] - before[0], after[2] - before[2]
    return {"latency_ms": lat_ns[keep] / 1e6,
            "to_forwarder_ms": got["to_forwarder_ns"][keep] / 1e6, "sent": pub["sent"],
            "achieved_rate": pub["sent"] / pub["seconds"], "events": events,
            "messages": after[1] - before[1], "batches": batches,
            "events_per_transaction": events / batches if batches else 0.0,
            "backlog_at_end": before[0] + pub["sent"] - at_end[0],
            "backlog_left": before[0] + pub["sent"] - after[0],
            "catch_up_s": caught_up, "event_draw": draw,
            "events_digest": events_digest(drawn, labels)}


def latency_records(rec: Recorder, system: str, lp: dict[str, Any],
                    r: dict[str, Any]) -> None:
    """Record one latency run and log a line.

    The params get the run's ``event_draw`` and ``events_digest``; a node's run also
    records its ``route_cache_hit_rate`` (``r`` has it when the forwarder is a node).
    """
    lat = r["latency_ms"]
    lp = {**lp, "event_draw": r["event_draw"], "events_digest": r["events_digest"]}
    rec.add(system, lp, "achieved_rate", r["achieved_rate"], "events/s")
    rec.add(system, lp, "events_per_transaction", r["events_per_transaction"], "events")
    rec.add(system, lp, "backlog_at_end", r["backlog_at_end"], "events")
    rec.add(system, lp, "latency_samples", len(lat), "count")
    head = (f"latency {system:<11} batch={lp['batch_size']:>5} poll={lp['poll_timeout_s']:<6}"
            f" at {r['achieved_rate']:.0f} events/s "
            f"({lp['rate_fraction_of_max']:.0%} of the node's max)")
    tail = (f"{r['events_per_transaction']:.1f} events per transaction, backlog "
            f"{r['backlog_at_end']} events at the end, {r['backlog_left']} left after "
            f"{r['catch_up_s']:.1f} s")
    if "route_cache_hit_rate" in r:
        rec.add(system, lp, "route_cache_hit_rate", r["route_cache_hit_rate"], "share")
        tail += f"; route cache hits {100 * r['route_cache_hit_rate']:.1f} %"
    if len(lat):
        q = np.percentile(lat, [50, 99, 99.9])
        for name, v in (("latency_p50", q[0]), ("latency_p99", q[1]), ("latency_p999", q[2]),
                        ("latency_max", lat.max()), ("latency_mean", lat.mean())):
            rec.add(system, lp, name, float(v), "ms")
        rec.log(f"{head}: p50 {q[0]:.1f} ms, p99 {q[1]:.1f} ms, p99.9 {q[2]:.1f} ms, max "
                f"{lat.max():.1f} ms ({len(lat)} samples); {tail}")
    else:
        rec.log(f"{head}: no samples; {tail}")


# -- profile ------------------------------------------------------------------------------
PROFILE_PARTS = (
    ("consume (Consumer.consume)", "method 'consume' of 'cimpl.Consumer'", "tt"),
    ("produce (Producer.produce)", "method 'produce' of 'cimpl.Producer'", "tt"),
    ("commit_transaction", "method 'commit_transaction' of", "tt"),
    ("send_offsets_to_transaction", "method 'send_offsets_to_transaction' of", "tt"),
    ("begin_transaction", "method 'begin_transaction' of", "tt"),
    ("consumer position/assignment", "of 'cimpl.Consumer' objects>", "tt-pos"),
    ("NodeService._route (total)", "_route", "broker_node/service.py"),
    ("Inbox.events (headers, repeats)", "events", "broker_node/inbox.py"),
    ("Router.route (plans, produce)", "route", "broker_node/router.py"),
    ("BrokerState.route (matching)", "route", "broker_node/state.py"),
    ("NodeService.process (total)", "process", "broker_node/service.py"),
)
"""(label, function name, how): ``tt`` / ``tt-pos`` sum the own time of C methods whose
name contains it; a path sums the cumulative time of the function of that name in that
file of the node."""


def profile_shares(stats: pstats.Stats, total: float) -> dict[str, float]:
    """Seconds of the main parts of the node loop in a profile (see ``PROFILE_PARTS``)."""
    out: dict[str, float] = {}
    raw: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    for label, needle, how in PROFILE_PARTS:
        secs = 0.0
        for (filename, _, func), (_, _, tt, ct, _) in raw.items():
            if how == "tt":
                if needle in func:
                    secs += tt
            elif how == "tt-pos":
                if needle in func and ("'position'" in func or "'assignment'" in func):
                    secs += tt
            elif func == needle and filename.endswith(how):
                secs += ct
        out[label] = secs
    out["total (profiled run)"] = total
    return out


# -- the run ------------------------------------------------------------------------------
def passthrough_latency(bootstrap: str, lat_in: str, out_topic: str, group: str, batch: int,
                        poll_s: float, transactional: bool, p: Prepared, s: RunSettings,
                        rate: float, tag: str, draw: str | None = None) -> dict[str, Any]:
    """One paced run (:func:`measure_latency`, events drawn with ``draw``) through a
    passthrough on a thread.

    The passthrough reads ``lat_in`` with ``group`` and writes ``out_topic``; the receiver
    uses the group ``<group>-recv``.
    """
    stop = threading.Event()
    samples: list[tuple[float, int, int]] = []
    errors: list[BaseException] = []

    def loop() -> None:
        try:
            passthrough(bootstrap, lat_in, group, None, batch, poll_s,
                        transactional=transactional, out_topic=out_topic, stop=stop,
                        samples=samples, timeout=s.phase_timeout_s)
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    def counts() -> tuple[int, int, int]:
        last = samples[-1] if samples else (0.0, 0, 0)
        return last[1], last[2], max(0, len(samples) - 1)

    thread = threading.Thread(target=loop, name=f"passthrough-{group}", daemon=True)
    thread.start()
    time.sleep(1.0)  # group join
    try:
        r = measure_latency(bootstrap, lat_in, [(out_topic, 0)], f"{group}-recv", counts, p,
                            s, rate, tag, draw)
    finally:
        stop.set()
        thread.join(60)
    if errors:
        raise errors[0]
    return r


@contextlib.contextmanager
def run_on_thread(service: NodeService, name: str) -> Iterator[list[BaseException]]:
    """Run ``service``'s loop (in 0.1 s slices) on a daemon thread for the ``with`` body.

    Yields the list the loop's exception lands in (the body may check it between
    steps). On leaving, the loop is stopped, joined and the service closed; then the
    loop's exception, if any, is raised.
    """
    stop = threading.Event()
    errors: list[BaseException] = []

    def loop() -> None:
        try:
            while not stop.is_set():
                service.run(max_seconds=0.1)
        except BaseException as exc:  # raised on leaving the context
            errors.append(exc)

    thread = threading.Thread(target=loop, name=name, daemon=True)
    thread.start()
    try:
        yield errors
    finally:
        stop.set()
        thread.join(60)
        service.close()
    if errors:
        raise errors[0]


@dataclass
class _Latency:
    """The latency measurements of one run: a node or a passthrough under paced load."""

    bootstrap: str
    rec: Recorder
    p: Prepared
    s: RunSettings
    groups: list[str]

    def node(self, service: NodeService, settings: NodeSettings, system: str, publish: str,
             watched: list[tuple[str, int]], max_rate: float, low_rates: Sequence[float],
             params: dict[str, Any], group_stem: str, tag: str) -> None:
        """Run ``service`` on a thread and measure it under paced load.

        Each of ``latency_configs`` at ``latency_rate_fraction`` of ``max_rate``, then the
        last one at each of ``low_rates``. The node's settings object is swapped between
        runs (``run`` reads it at every batch); the service is closed at the end.
        """
        s = self.s
        runs = [(batch, poll_s, s.latency_rate_fraction * max_rate, s.latency_rate_fraction)
                for batch, poll_s in s.latency_configs]
        if s.latency_configs:
            runs += [(*s.latency_configs[-1], low, low / max_rate) for low in low_rates]
        def node_counts() -> tuple[int, int, int]:
            m = service.metrics
            return m.events_in, m.delivery_messages, m.batches

        with run_on_thread(service, f"node-{system}") as errors:
            for k, (batch, poll_s, rate, frac) in enumerate(runs):
                service.settings = settings.model_copy(update={"batch_size": batch,
                                                               "poll_timeout_s": poll_s})
                time.sleep(0.5)
                group = f"{group_stem}-{k}"
                self.groups.append(group)
                hits0 = _cache_counts(service)
                r = measure_latency(self.bootstrap, publish, watched, group, node_counts,
                                    self.p, self.s, rate, f"{tag}{k}",
                                    draw=f"{system} latency {k}")
                r["route_cache_hit_rate"] = _cache_rate(service, hits0)
                if errors:
                    break  # raised on leaving the context
                latency_records(self.rec, system, {
                    **params, "batch_size": batch, "poll_timeout_s": poll_s,
                    "rate_events_s": rate, "rate_fraction_of_max": frac}, r)

    def passthrough(self, system: str, lat_in: str, out_topic: str, rate: float,
                    transactional: bool, params: dict[str, Any], group_stem: str,
                    tag: str, configs: Sequence[tuple[int, float]] | None = None) -> None:
        """The same paced load through a passthrough, once per ``configs`` entry.

        ``configs`` defaults to every ``latency_configs`` entry.
        """
        for k, (batch, poll_s) in enumerate(self.s.latency_configs if configs is None
                                            else configs):
            group = f"{group_stem}-{k}"
            self.groups.extend([group, f"{group}-recv"])
            r = passthrough_latency(self.bootstrap, lat_in, out_topic, group, batch, poll_s,
                                    transactional, self.p, self.s, rate, f"{tag}{k}",
                                    f"{system} for {params.get('rate_of', 'dls')} latency {k}")
            latency_records(self.rec, system, {**params, "batch_size": batch,
                                               "poll_timeout_s": poll_s}, r)

    def log_p99_ratio(self, system: str, base_name: str) -> None:
        """Log the node's best p99 at ``latency_rate_fraction`` of its maximum rate, and
        its ratio to the best p99 of ``base_name`` at the same rate.

        One run each, for information: the latency bar (node p99 at most
        ``BAR_P99_RATIO`` x the passthrough's, median of five paired rounds) is judged by
        ``benchmarks.kafka_latency``.
        """
        frac = self.s.latency_rate_fraction
        rows = [r for r in self.rec.records
                if r["metric"] == "latency_p99" and r["system"] == system
                and r["params"]["rate_fraction_of_max"] == frac]
        if not rows:
            return
        best = min(rows, key=lambda r: r["value"])
        rate = best["params"]["rate_events_s"]
        base = [r["value"] for r in self.rec.records
                if r["metric"] == "latency_p99" and r["system"] == base_name
                and r["params"].get("rate_of", system) == system
                and abs(r["params"]["rate_events_s"] - rate) < 1e-6]
        line = f"best {system} p99 at {frac:.0%} of its maximum rate: {best['value']:.1f} ms"
        if base:
            line += (f"; {base_name} at that rate {min(base):.1f} ms, ratio "
                     f"{best['value'] / min(base):.2f} (one run each; the bar, <= "
                     f"{BAR_P99_RATIO:g}x over five paired rounds, is judged by "
                     f"benchmarks.kafka_latency)")
        self.rec.log(line)


def _summary(name: str, win: Window) -> str:
    return (f"{name:>20}: {win.rate:10.0f} events/s {win.message_rate:11.0f} msgs/s  "
            f"({win.events} events, {win.messages} msgs in {win.seconds:.2f} s, "
            f"{win.batches} batches; median batch {win.median_rate:.0f} events/s)")


def run(s: RunSettings, bootstrap: str, rec: Recorder, *, profile: bool = True,
        keep_topics: bool = False, out_dir: Path | None = None) -> dict[str, Any]:
    """Run every phase; records go to ``rec``; returns extra facts for the meta file."""
    wait_for_broker(bootstrap, timeout=30)
    n_topics_start = len(admin(bootstrap).list_topics(timeout=30).topics)
    prefix = f"kb{uuid.uuid4().hex[:8]}"
    topics = Topics(prefix)
    groups: list[str] = []
    n_extra = s.profile_events if profile else 0
    p = prepare(s, s.n_events + n_extra, rec)
    if s.gc_freeze:
        # The workload (every encoded event and its header list) lives in this process
        # beside the nodes and the passthroughs. Frozen, Python's full collections skip
        # it, so none of them pays for scanning the benchmark's own data.
        gc.collect()
        gc.freeze()
    p.base["gc_freeze"] = s.gc_freeze
    p.base["gc_threshold"] = young_threshold()
    base = p.base
    node_params = {**base, "batch_size": s.batch_size, "poll_timeout_s": s.poll_timeout_s}
    facts: dict[str, Any] = {"topic_prefix": prefix, "topics_in_cluster_at_start": n_topics_start}
    with tempfile.TemporaryDirectory() as tmp:
        space_path = Path(tmp) / "space.json"
        space_path.write_text(json.dumps(p.spec))
        settings = NodeSettings(node=NODE, space=space_path, bootstrap=bootstrap,
                                topic_prefix=prefix, group_id=f"{prefix}-node-{NODE}",
                                batch_size=s.batch_size, poll_timeout_s=s.poll_timeout_s,
                                gc_freeze=s.gc_freeze, route_cache_mb=s.route_cache_mb,
                                resize_filters=False)  # the paper's sizes, as before
        groups.append(settings.consumer_group)
        groups.append(f"{settings.consumer_group}-recovery")
        try:
            _run_phases(s, bootstrap, rec, p, settings, topics, groups, node_params, facts,
                        profile, out_dir)
        finally:
            if not keep_topics:
                t0 = time.perf_counter()
                n = delete_run_topics(bootstrap, prefix, groups)
                rec.log(f"deleted {n} topics under {prefix}. in "
                        f"{time.perf_counter() - t0:.1f} s")
    return facts


def _run_phases(s: RunSettings, bootstrap: str, rec: Recorder, p: Prepared,
                settings: NodeSettings, topics: Topics, groups: list[str],
                node_params: dict[str, Any], facts: dict[str, Any], profile: bool,
                out_dir: Path | None) -> None:
    base = p.base
    publish = topics.node_publish(NODE)
    producer = Producer(producer_config(bootstrap, **{"linger.ms": 5}))

    # -- load ------------------------------------------------------------------------------
    ensure_topics(bootstrap, [topics.node_subscribe(NODE), topics.node_unsubscribe(NODE)],
                  config=service_mod.FOREVER)
    t_prod = produce_all(producer, topics.node_subscribe(NODE), p.subscriptions)
    rec.log(f"produced {s.n_subs} LabelSubscription messages in {t_prod:.1f} s")
    service = NodeService(settings, p.space)
    acc = [0.0, 0]
    original = service_mod.ensure_topics
    service_mod.ensure_topics = _timed_ensure_topics(acc)  # type: ignore[assignment]
    try:
        service.start()
        start_topics, start_calls = acc[0], acc[1]
        t0 = time.perf_counter()
        drive(service, lambda: len(service.state) >= s.n_subs, s.load_timeout_s, "load",
              slice_s=0.2)
        t_load = time.perf_counter() - t0
    finally:
        service_mod.ensure_topics = original  # type: ignore[assignment]
    load_topics, load_calls = acc[0] - start_topics, acc[1] - start_calls
    lp = {**node_params, "clients_with_new_topics": len(service.state.clients),
          "how": "LabelSubscription messages pre-produced; node loop start -> "
                 "len(state) == n_subs"}
    rec.add("dls", lp, "load_time", t_load, "s")
    rec.add("dls", lp, "load_rate", s.n_subs / t_load, "subscriptions/s")
    rec.add("dls", {**lp, "ensure_topics_calls": load_calls}, "load_topic_setup_time",
            load_topics, "s")
    rec.log(f"load: {s.n_subs} subscriptions in {t_load:.1f} s ({s.n_subs / t_load:.0f}/s); "
            f"{load_topics:.1f} s of it in ensure_topics ({load_calls} calls, "
            f"{1e3 * load_topics / max(1, load_calls):.0f} ms each)")
    if len(service.state) != s.n_subs:
        raise AssertionError(f"node holds {len(service.state)} subscriptions")

    # -- warm-up of the delivery partitions ---------------------------------------------------
    # The first transactions that touch a thousand fresh partitions stall for seconds (seen
    # here: 14 s, then 3 s, then 0.3 s per transaction of 34 messages per partition), and the
    # first writer after the load stayed slow for a while: whoever wrote first paid it. So a
    # throwaway transactional producer writes to every delivery partition first.
    deliver_topics = [topics.deliver(c) for c in service.state.clients]
    warm = warm_up(bootstrap, deliver_topics, s.warmup_per_topic, s.warmup_rounds,
                   f"{topics.prefix}-warm-up")
    rec.log(f"warm-up: {s.warmup_rounds} transactions of {s.warmup_per_topic} messages to each "
            f"of the {len(deliver_topics)} delivery topics: "
            + ", ".join(f"{x:.2f} s" for x in warm))
    facts["warm_up_rounds_s"] = warm

    # -- events ----------------------------------------------------------------------------
    n = s.n_events
    t_ev = produce_all(producer, publish, p.ev_values[:n], p.ev_headers[:n])
    rec.add("publisher", {**base, "linger.ms": 5, "acks": PRODUCER_DEFAULTS["acks"]},
            "publish_throughput", n / t_ev, "events/s")
    rec.log(f"pre-produced {n} events in {t_ev:.1f} s ({n / t_ev:.0f}/s)")
    gc.collect()

    # -- throughput ------------------------------------------------------------------------
    out_topic = f"{topics.prefix}.bench.passthrough"
    ensure_topics(bootstrap, [out_topic])
    pt_group = f"{topics.prefix}-passthrough"
    groups.append(pt_group)
    cpu: dict[str, float] = {}

    def timed(system: str, fn: Callable[[], list[tuple[float, int, int]]], n_: int) -> Window:
        c0, t0 = time.process_time(), time.perf_counter()
        win = window(fn(), n_)
        cpu[system] = cpu.get(system, 0.0) + time.process_time() - c0
        cpu[system + " wall"] = cpu.get(system + " wall", 0.0) + time.perf_counter() - t0
        return win

    pt = timed("passthrough", lambda: passthrough(
        bootstrap, publish, pt_group, n, s.batch_size, s.poll_timeout_s, transactional=True,
        out_topic=out_topic, timeout=s.phase_timeout_s), n)
    rec.log(_summary("passthrough", pt))

    # The fan-out baseline sends each event where the node sends it (the offline route of
    # the same labels on the loaded state); it runs half before and half after the node,
    # so that drift of the shared machine during the run hits both alike.
    routes = service.state.route(p.ev_labels[:n])
    deliver = [topics.deliver(c) for c in service.state.clients]
    offs, cl = routes.offsets.tolist(), routes.clients.tolist()
    plan = [[deliver[c] for c in cl[offs[e]:offs[e + 1]]] for e in range(n)]
    fo_group = f"{topics.prefix}-fanout"
    groups.append(fo_group)
    half = n // 2
    fo_samples: list[tuple[float, int, int]] = []
    fo1 = timed("passthrough-fanout", lambda: passthrough(
        bootstrap, publish, fo_group, half, s.batch_size, s.poll_timeout_s,
        transactional=True, plan=plan, timeout=s.phase_timeout_s, samples=fo_samples), half)
    done1 = fo_samples[-1][1]
    fo2_samples: list[tuple[float, int, int]] = []

    dls = timed("dls", lambda: drive(service, lambda: service.metrics.events_in >= n,
                                     s.phase_timeout_s, "dls throughput"), n)
    rec.log(_summary("dls", dls))
    if int(routes.offsets[-1]) != service.metrics.deliveries:
        rec.log(f"note: offline route gives {int(routes.offsets[-1])} deliveries, the node "
                f"made {service.metrics.deliveries}")

    fo2 = timed("passthrough-fanout", lambda: passthrough(
        bootstrap, publish, fo_group, n - done1, s.batch_size, s.poll_timeout_s,
        transactional=True, plan=plan, timeout=s.phase_timeout_s, samples=fo2_samples),
        n - done1)
    plan.clear()
    # Medians over the batches of both halves (each half's first batch left out).
    t_shift = fo_samples[-1][0] - fo2_samples[0][0]
    both = [*fo_samples, *((t + t_shift, e + done1, m + fo_samples[-1][2])
                           for t, e, m in fo2_samples[1:])]
    med = median_rates(both)
    fanout = Window(fo1.events + fo2.events, fo1.messages + fo2.messages,
                    fo1.seconds + fo2.seconds, fo1.first_batch, fo1.batches + fo2.batches,
                    *med)
    rec.log(_summary("passthrough-fanout", fanout) + f" [halves: {fo1.rate:.0f} before, "
            f"{fo2.rate:.0f} after the node]")

    nt_group = f"{topics.prefix}-nontx"
    groups.append(nt_group)
    nontx = timed("passthrough-nontx", lambda: passthrough(
        bootstrap, publish, nt_group, n, s.batch_size, s.poll_timeout_s, transactional=False,
        out_topic=out_topic, timeout=s.phase_timeout_s), n)
    rec.log(_summary("passthrough-nontx", nontx))

    tp = {**base, "batch_size": s.batch_size, "poll_timeout_s": s.poll_timeout_s,
          "window": "first to last committed batch, first batch excluded"}
    for system, win, extra in (
            ("passthrough", pt, {"transactional": True, "outputs_per_event": 1}),
            ("dls", dls, {"transactional": True}),
            ("passthrough-fanout", fanout, {"transactional": True,
                                            "outputs": "the node's delivery plan"}),
            ("passthrough-nontx", nontx, {"transactional": False, "outputs_per_event": 1})):
        params = {**tp, **extra, "window_events": win.events, "window_s": win.seconds,
                  "batches": win.batches}
        rec.add(system, params, "throughput", win.rate, "events/s")
        rec.add(system, params, "delivery_throughput", win.message_rate, "messages/s")
        rec.add(system, {**params, "statistic": "median over batches (first left out)"},
                "throughput_median_batch", win.median_rate, "events/s")
        rec.add(system, {**params, "statistic": "median over batches (first left out)"},
                "delivery_throughput_median_batch", win.median_message_rate, "messages/s")
        rec.add(system, params, "messages_per_event", win.messages / max(1, win.events),
                "messages")
        rec.add(system, {**params, "window": "whole phase incl. start-up",
                         "note": "process-wide: Python thread + librdkafka threads"},
                "process_cpu_utilisation", cpu[system] / cpu[system + " wall"], "cpu s / s")
    ratio = dls.rate / pt.rate
    rec.add("dls", {**tp, "bar": BAR_THROUGHPUT_RATIO, "met": ratio >= BAR_THROUGHPUT_RATIO},
            "throughput_ratio", ratio, "x passthrough")
    rec.add("dls", tp, "throughput_ratio_vs_fanout", dls.rate / fanout.rate,
            "x passthrough-fanout")
    med_tp = {**tp, "statistic": "median over batches (first left out)"}
    rec.add("dls", {**med_tp, "bar": BAR_THROUGHPUT_RATIO,
                    "met": dls.median_rate / pt.median_rate >= BAR_THROUGHPUT_RATIO},
            "throughput_ratio_median_batch", dls.median_rate / pt.median_rate, "x passthrough")
    rec.add("dls", med_tp, "throughput_ratio_vs_fanout_median_batch",
            dls.median_rate / fanout.median_rate, "x passthrough-fanout")
    rec.add("dls", tp, "deliveries_per_event", service.metrics.deliveries / n, "messages")
    rec.log(f"throughput ratio dls / passthrough = {ratio:.3f} (bar {BAR_THROUGHPUT_RATIO}: "
            f"{'met' if ratio >= BAR_THROUGHPUT_RATIO else 'NOT met'}; median batches "
            f"{dls.median_rate / pt.median_rate:.3f}); dls / passthrough-fanout = "
            f"{dls.rate / fanout.rate:.3f} (median batches "
            f"{dls.median_rate / fanout.median_rate:.3f}); "
            f"{service.metrics.deliveries / n:.1f} deliveries per event")
    facts["throughput"] = {"dls": dls.rate, "passthrough": pt.rate, "fanout": fanout.rate,
                           "nontx": nontx.rate}

    # -- profile ---------------------------------------------------------------------------
    if profile and s.profile_events:
        n2 = s.profile_events
        produce_all(producer, publish, p.ev_values[n:n + n2], p.ev_headers[n:n + n2])
        e0 = service.metrics.events_in
        prof = cProfile.Profile()
        t0 = time.perf_counter()
        prof.enable()
        try:
            psamples = drive(service, lambda: service.metrics.events_in >= e0 + n2,
                             s.phase_timeout_s, "profile")
        finally:
            prof.disable()
        total = time.perf_counter() - t0
        pw = window(psamples, n2)
        stats = pstats.Stats(prof)
        shares = profile_shares(stats, total)
        pp = {**tp, "profile_events": n2, "profiler": "cProfile (inflates Python time)"}
        rec.add("dls", pp, "throughput_profiled", pw.rate, "events/s")
        for part, secs in shares.items():
            rec.add("dls", {**pp, "part": part}, "node_time_share", secs / total, "fraction")
        rec.log(f"profile ({n2} events, {pw.rate:.0f} events/s under cProfile):")
        for part, secs in shares.items():
            rec.log(f"    {part:<34} {secs:7.2f} s  {100 * secs / total:5.1f} %")
        if out_dir is not None:
            buf = io.StringIO()
            st = pstats.Stats(prof, stream=buf)
            st.sort_stats("cumulative").print_stats(45)
            st.sort_stats("tottime").print_stats(30)
            (out_dir / f"{BENCHMARK}.profile.log").write_text(
                f"cProfile of NodeService.run over {n2} events ({pw.rate:.0f} events/s "
                f"profiled; {dls.rate:.0f} unprofiled), batch_size={s.batch_size}, "
                f"poll_timeout_s={s.poll_timeout_s}\n\n" + buf.getvalue())

    # -- recovery --------------------------------------------------------------------------
    service.close()
    service = NodeService(settings, p.space)
    t0 = time.perf_counter()
    service.start()
    t_rec = time.perf_counter() - t0
    rec.add("dls", {**node_params, "how": "NodeService.start with the same group: control "
                    "topics re-read up to the committed offsets"},
            "recovery_time", t_rec, "s")
    rec.log(f"recovery: a fresh node rebuilt {len(service.state)} subscriptions in "
            f"{t_rec:.1f} s")
    if len(service.state) != s.n_subs:
        raise AssertionError(f"recovered node holds {len(service.state)} subscriptions")

    # -- latency ---------------------------------------------------------------------------
    rate = s.latency_rate_fraction * dls.rate
    lat_base = {**base, "rate_events_s": rate, "rate_fraction_of_max": s.latency_rate_fraction,
                "seconds": s.latency_s, "warmup_s": s.latency_warmup_s,
                "publisher": f"producer_config defaults (linger.ms="
                             f"{PRODUCER_DEFAULTS['linger.ms']}), paced every 1 ms",
                "receiver": "read_committed consumer, default fetch settings"}
    watched = [(topics.deliver(c), 0) for c in service.state.clients[:s.latency_clients]]
    lat = _Latency(bootstrap, rec, p, s, groups)
    lat.node(service, settings, "dls", publish, watched, dls.rate, s.latency_low_rates,
             {**lat_base, "watched_clients": len(watched)}, f"{topics.prefix}-lat", "L")
    # The same paced load through the transactional passthrough (one output topic).
    lat_in = f"{topics.prefix}.bench.latency-in"
    ensure_topics(bootstrap, [lat_in])
    lat.passthrough("passthrough", lat_in, out_topic, rate, True,
                    {**lat_base, "watched_topics": 1}, f"{topics.prefix}-ptlat", "P")
    lat.log_p99_ratio("dls", "passthrough")

    if s.at_least_once:
        _variant_phase(s, bootstrap, rec, p, settings, topics, groups, facts, producer,
                       lat_base, out_topic, system="dls-alo", node=ALO_NODE, update={})
    for i, parts in enumerate(s.shared_partitions):
        name = "dls-shared" if i == 0 else f"dls-shared-p{parts}"
        # One shared topic per prefix: another partition count needs its own prefix (under
        # the run's, so that the clean-up finds it).
        vt = topics if i == 0 else Topics(f"{topics.prefix}.p{parts}")
        _variant_phase(s, bootstrap, rec, p, settings, vt, groups, facts, producer,
                       lat_base, out_topic, system=name, node=SHARED_NODE,
                       update={"shared_delivery_partitions": parts, "topic_prefix": vt.prefix})
        _variant_phase(s, bootstrap, rec, p, settings, vt, groups, facts, producer,
                       lat_base, out_topic, system=f"{name}-eos", node=SHARED_EOS_NODE,
                       update={"shared_delivery_partitions": parts, "topic_prefix": vt.prefix,
                               "delivery": "exactly_once"})


def _variant_phase(s: RunSettings, bootstrap: str, rec: Recorder, p: Prepared,
                   settings: NodeSettings, topics: Topics, groups: list[str],
                   facts: dict[str, Any], producer: Producer, lat_base: dict[str, Any],
                   out_topic: str, *, system: str, node: str, update: dict[str, Any]) -> None:
    """A node with ``delivery = "at_least_once"`` (no transaction) or as ``update`` says.

    Another node (``node``; same clients) loads the same subscriptions from its own
    subscribe topic, then routes the same ``n_events`` from its own publish topic; then
    its latency at half its own maximum rate. After ``dls-alo`` (per-client topics) comes
    the non-transactional passthrough's latency at the same rate; ``dls-shared`` writes
    to the shared delivery topic (``shared_delivery_partitions``) and its receiver reads
    one client's partition; ``dls-shared-eos`` is the same with exactly-once delivery,
    the like-for-like of the transactional ``passthrough``.
    """
    n = s.n_events
    alo = settings.model_copy(update={"node": node, "delivery": "at_least_once",
                                      "group_id": f"{topics.prefix}-node-{node}", **update})
    groups.extend([alo.consumer_group, f"{alo.consumer_group}-recovery"])
    ensure_topics(bootstrap, [topics.node_subscribe(node),
                              topics.node_unsubscribe(node)], config=service_mod.FOREVER)
    produce_all(producer, topics.node_subscribe(node), p.subscriptions)
    service = NodeService(alo, p.space)
    service.start()
    t0 = time.perf_counter()
    drive(service, lambda: len(service.state) >= s.n_subs, s.load_timeout_s, f"{system} load",
          slice_s=0.2)
    t_load = time.perf_counter() - t0
    node_params = {**lat_base, "delivery": "at_least_once", **update}
    transactional = node_params["delivery"] == "exactly_once"
    for drop in ("rate_events_s", "rate_fraction_of_max", "seconds", "warmup_s", "publisher",
              "receiver", "topic_prefix"):
        node_params.pop(drop, None)
    rec.add(system, {**node_params, "batch_size": s.batch_size}, "load_time", t_load, "s")
    rec.log(f"{system} node: loaded {s.n_subs} subscriptions in {t_load:.1f} s")
    publish = topics.node_publish(node)
    produce_all(producer, publish, p.ev_values[:n], p.ev_headers[:n])
    gc.collect()
    c0, w0 = time.process_time(), time.perf_counter()
    hits0 = _cache_counts(service)
    win = window(drive(service, lambda: service.metrics.events_in >= n, s.phase_timeout_s,
                       f"{system} throughput"), n)
    cpu = (time.process_time() - c0) / (time.perf_counter() - w0)
    rec.log(_summary(system, win) + _cache_note(service, hits0))
    tput = facts.get("throughput", {})
    params = {**node_params, "batch_size": s.batch_size, "poll_timeout_s": s.poll_timeout_s,
              "window": "first to last committed batch, first batch excluded",
              "transactional": transactional, "window_events": win.events,
              "window_s": win.seconds,
              "batches": win.batches}
    rec.add(system, params, "throughput", win.rate, "events/s")
    rec.add(system, params, "delivery_throughput", win.message_rate, "messages/s")
    rec.add(system, {**params, "statistic": "median over batches (first left out)"},
            "throughput_median_batch", win.median_rate, "events/s")
    rec.add(system, params, "messages_per_event", win.messages / max(1, win.events),
            "messages")
    rec.add(system, {**params, "note": "process-wide: Python thread + librdkafka threads"},
            "process_cpu_utilisation", cpu, "cpu s / s")
    for base_name, key in (("passthrough", "passthrough"), ("passthrough-nontx", "nontx"),
                           ("passthrough-fanout", "fanout"), ("dls", "dls")):
        if tput.get(key):
            ratio = win.rate / tput[key]
            extra = ({"bar": BAR_THROUGHPUT_RATIO, "met": ratio >= BAR_THROUGHPUT_RATIO}
                     if base_name.startswith("passthrough") and base_name != "passthrough-fanout"
                     else {})
            rec.add(system, {**params, **extra}, f"throughput_ratio_vs_{base_name}", ratio,
                    f"x {base_name}")
            rec.log(f"{system} / {base_name} = {ratio:.3f}")
    rec.add(system, params, "deliveries_per_event",
            service.metrics.deliveries / max(1, service.metrics.events_in), "deliveries")
    rec.add(system, params, "route_cache_hit_rate", _cache_rate(service, hits0), "share")
    facts.setdefault("throughput", {})[system] = win.rate
    parts = alo.shared_delivery_partitions
    if parts and s.paired_rounds:
        _paired_rounds(s, bootstrap, rec, p, service, producer, publish, out_topic, groups,
                       system, transactional, params)

    rate = s.latency_rate_fraction * win.rate
    # A client of the shared topic reads one partition (every message in it, its own or
    # not): the receiver does the same, for the first client.
    clients = service.state.clients[:1 if parts else s.latency_clients]
    watched = [(topics.shared_deliver, delivery_partition(clients[0], parts))] if parts \
        else [(topics.deliver(c), 0) for c in clients]
    # Also at the rate the per-client node was measured at, for a like-for-like look.
    per_client = "dls" if transactional else "dls-alo"
    low = (0.5 * tput[per_client],) if parts and tput.get(per_client) else ()
    base_lat = {**lat_base, "delivery": node_params["delivery"], "rate_events_s": rate,
                "rate_fraction_of_max": s.latency_rate_fraction}
    lat = _Latency(bootstrap, rec, p, s, groups)
    lat.node(service, alo, system, publish, watched, win.rate, low,
             {**base_lat, "watched_clients": len(clients), "watched_partitions": len(watched)},
             f"{topics.prefix}-{system}-lat", "S" if parts else "A")
    if system != "dls-alo":
        if s.latency_configs:
            # The like-for-like floor: a passthrough of the same kind at the same rate, on
            # the same machine with the same publisher and receiver processes around it.
            base_name = "passthrough" if transactional else "passthrough-nontx"
            lat_in = f"{topics.prefix}.bench.latency-in-{system}"
            ensure_topics(bootstrap, [lat_in])
            lat.passthrough(base_name, lat_in, out_topic, rate, transactional,
                            {**base_lat, "watched_topics": 1, "rate_of": system},
                            f"{topics.prefix}-{system}-ptlat", "Q",
                            configs=s.latency_configs[:1])
            lat.log_p99_ratio(system, base_name)
        return
    lat_in = f"{topics.prefix}.bench.latency-in-nontx"
    ensure_topics(bootstrap, [lat_in])
    lat.passthrough("passthrough-nontx", lat_in, out_topic, rate, False,
                    {**base_lat, "watched_topics": 1}, f"{topics.prefix}-ntlat", "N")
    lat.log_p99_ratio("dls-alo", "passthrough-nontx")


def _cache_counts(service: NodeService) -> tuple[int, int]:
    """The node's (events routed, events routed from a plan made earlier) so far."""
    return service.metrics.events_in, service.metrics.route_cache_hits


def _cache_rate(service: NodeService, before: tuple[int, int]) -> float:
    """Share of the events since ``before`` routed from the route cache (or a repeat)."""
    events, hits = _cache_counts(service)
    return (hits - before[1]) / max(1, events - before[0])


def _cache_note(service: NodeService, before: tuple[int, int]) -> str:
    if not service.settings.route_cache_mb:
        return "; route cache off"
    return f"; route cache hits {100 * _cache_rate(service, before):.1f} %"


def _round_events(s: RunSettings, p: Prepared, n: int, draw: str,
                  id_prefix: str) -> tuple[list[bytes], list[list[tuple[str, bytes]]], int]:
    """``n`` events drawn anew for one run of a paired round: values, headers, digest."""
    events, labels = fresh_events(p, n, draw)
    values, headers = encode_events(s, events, labels, id_prefix)
    return values, headers, events_digest(events, labels)


def _paired_rounds(s: RunSettings, bootstrap: str, rec: Recorder, p: Prepared,
                   service: NodeService, producer: Producer, publish: str, out_topic: str,
                   groups: list[str], system: str, transactional: bool,
                   params: dict[str, Any]) -> None:
    """Node and passthrough of the same kind, round after round, for a paired ratio.

    One window of ~100,000 events lasts about a second, and on a shared 2-core machine
    two such windows minutes apart differed by 1.5x for the same passthrough. Here each
    round measures the passthrough and the node back to back; the bar is judged on the
    median of the per-round ratios. Every run of every round gets ``n_events`` events
    drawn anew from the workload (:func:`fresh_events`; the draw is named
    ``<system> round <r> <run>``), produced just before it: the node's to its publish
    topic (new ids, or it would skip them as repeats), the passthrough's to a topic of
    its own for the round. Replaying the first window's events instead let the route
    cache answer all of them, which no live stream gets; each node run records its
    ``route_cache_hit_rate``, logged beside its ratio. When the node has a route cache,
    each round also runs the same node with the cache off (``<system>-nocache``), and
    the order of the runs rotates from round to round.
    """
    n = s.n_events
    base_name = "passthrough" if transactional else "passthrough-nontx"
    m = service.metrics
    cached = service.settings
    runs = [base_name, system] + ([f"{system}-nocache"] if cached.route_cache_mb else [])
    ratios: dict[str, list[float]] = {name: [] for name in runs[1:]}
    hit_rates: dict[str, list[float]] = {name: [] for name in runs[1:]}
    for r in range(s.paired_rounds):
        group = f"{publish}-pair-{r}"
        groups.append(group)
        rates: dict[str, float] = {}
        digests: dict[str, int] = {}
        order = runs[r % len(runs):] + runs[:r % len(runs)]
        for name in order:
            draw = f"{system} round {r} {name}"
            values, headers, digests[name] = _round_events(s, p, n, draw, f"p{r}-{name}-e")
            if name == base_name:
                source = f"{publish}.pair-{r}"
                ensure_topics(bootstrap, [source])
                produce_all(producer, source, values, headers)
                del values, headers
                gc.collect()
                w = window(passthrough(bootstrap, source, group, n, s.batch_size,
                                       s.poll_timeout_s, transactional=transactional,
                                       out_topic=out_topic, timeout=s.phase_timeout_s), n)
            else:
                # produced just before: the node's last slice may read past n, so a run
                # may not leave events for the next one
                produce_all(producer, publish, values, headers)
                del values, headers
                gc.collect()
                service.settings = (cached if name == system
                                    else cached.model_copy(update={"route_cache_mb": 0.0}))
                e0 = m.events_in
                before = _cache_counts(service)
                w = window(drive(service, lambda e0=e0: m.events_in >= e0 + n,
                                 s.phase_timeout_s, f"{name} round"), n)
                rates[f"{name} hits"] = _cache_rate(service, before)
            rates[name] = w.rate
        service.settings = cached
        rp = {**params, "round": r, "order": order, "events": "drawn anew per run"}
        for name in runs[1:]:
            ratios[name].append(rates[name] / rates[base_name])
            hit_rates[name].append(rates[f"{name} hits"])
            node_p = {**rp, "event_draw": f"{system} round {r} {name}",
                   "events_digest": digests[name]}
            rec.add(name, node_p, "throughput_round", rates[name], "events/s")
            rec.add(name, {**node_p, "route_cache_mb": 0.0 if name.endswith("-nocache")
                           else cached.route_cache_mb},
                    "route_cache_hit_rate", rates[f"{name} hits"], "share")
        rec.add(base_name, {**rp, "rate_of": system,
                            "event_draw": f"{system} round {r} {base_name}",
                            "events_digest": digests[base_name]},
                "throughput_round", rates[base_name], "events/s")
        rec.log(f"round {r} ({', '.join(order)}; fresh events): " + "; ".join(
            f"{name} {rates[name]:.0f} events/s" for name in runs) + "; ratios " + ", ".join(
            f"{name} {ratios[name][-1]:.3f} (route cache hits "
            f"{100 * rates[f'{name} hits']:.1f} %)" for name in runs[1:]))
    for name in runs[1:]:
        med = float(np.median(ratios[name]))
        met = med >= BAR_THROUGHPUT_RATIO
        rec.add(name, {**params, "rounds": len(ratios[name]), "baseline": base_name,
                       "ratios": [round(x, 4) for x in ratios[name]],
                       "route_cache_hit_rates": [round(x, 4) for x in hit_rates[name]],
                       "events": "drawn anew per run",
                       "bar": BAR_THROUGHPUT_RATIO, "met": met},
                "throughput_ratio_paired_median", med, f"x {base_name}")
        rec.log(f"{name} / {base_name}, median of {len(ratios[name])} paired rounds on fresh "
                f"events: {med:.3f} (bar {BAR_THROUGHPUT_RATIO}: "
                f"{'met' if met else 'NOT met'}; route cache hits "
                + ", ".join(f"{100 * x:.1f} %" for x in hit_rates[name]) + ")")


# -- plot ---------------------------------------------------------------------------------
# The PNG shows what the log concludes from: each node's throughput as a ratio to the
# passthrough of the same kind (the median of the paired rounds where there are any, else
# the first window), the paired rounds' median rates, and, when the run had a latency
# phase, each node's best p99 at half its maximum beside that passthrough's at that rate.
_KIND_COLOUR = {True: "#1f77b4", False: "#2ca02c"}  # exactly once / at least once
_BASE_COLOUR = "#999999"


@dataclass(frozen=True)
class _NodeBars:
    """What the plot shows for one node."""

    system: str
    transactional: bool
    baseline: str
    ratio: float
    paired: bool
    round_ratios: tuple[float, ...] = ()
    nocache: float | None = None
    rate: float | None = None  # median events/s of the paired rounds
    nocache_rate: float | None = None
    baseline_rate: float | None = None
    p99: float | None = None  # best p99 (ms) at the latency fraction of the node's maximum
    p99_rate: float | None = None
    baseline_p99: float | None = None


def _median(values: Iterable[float]) -> float | None:
    vals = list(values)
    return float(np.median(vals)) if vals else None


def _best_p99(records: list[dict[str, Any]], system: str, rate: float | None = None,
              fraction: float = 0.5) -> tuple[float, float] | None:
    """(best p99, its rate) of ``system`` at ``fraction`` of the maximum or at ``rate``."""
    rows = [r for r in records if r["system"] == system and r["metric"] == "latency_p99"
            and (r["params"].get("rate_fraction_of_max") == fraction if rate is None
                 else abs(r["params"].get("rate_events_s", -1.0) - rate) < 1e-6)]
    if not rows:
        return None
    best = min(rows, key=lambda r: r["value"])
    return float(best["value"]), float(best["params"]["rate_events_s"])


def plot_bars(records: list[dict[str, Any]]) -> list[_NodeBars]:
    """The plotted numbers of every node of a run, read off its records."""
    out = []
    for tr in (r for r in records if r["metric"] == "throughput"
               and r["system"].startswith("dls")):
        system, params = tr["system"], tr["params"]
        transactional = bool(params.get("transactional", True))
        baseline = "passthrough" if transactional else "passthrough-nontx"

        def one(metric: str, name: str = system) -> dict[str, Any] | None:
            return next((r for r in records if r["system"] == name
                         and r["metric"] == metric), None)

        paired = one("throughput_ratio_paired_median")
        window = one("throughput_ratio" if system == "dls"
                     else f"throughput_ratio_vs_{baseline}")
        if paired is None and window is None:
            continue
        nocache = one("throughput_ratio_paired_median", f"{system}-nocache")

        def rounds(name: str, of: str | None = None) -> float | None:
            return _median(r["value"] for r in records if r["system"] == name
                           and r["metric"] == "throughput_round"
                           and (of is None or r["params"].get("rate_of") == of))

        best = _best_p99(records, system)
        base_best = (None if best is None
                     else _best_p99(records, baseline, rate=best[1]))
        chosen = paired if paired is not None else window
        assert chosen is not None  # noqa: S101 - checked above
        out.append(_NodeBars(
            system=system, transactional=transactional, baseline=baseline,
            ratio=float(chosen["value"]), paired=paired is not None,
            round_ratios=tuple(paired["params"].get("ratios", ())) if paired else (),
            nocache=None if nocache is None else float(nocache["value"]),
            rate=rounds(system), nocache_rate=rounds(f"{system}-nocache"),
            baseline_rate=rounds(baseline, of=system),
            p99=None if best is None else best[0], p99_rate=None if best is None else best[1],
            baseline_p99=None if base_best is None else base_best[0]))
    return out


def _ticks(ax: Any, names: Sequence[str]) -> None:
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels(names, rotation=30, ha="right", fontsize=8)


def _ratio_panel(ax: Any, nodes: list[_NodeBars]) -> None:
    xs = np.arange(len(nodes))
    w = 0.38
    for i, n in enumerate(nodes):
        colour = _KIND_COLOUR[n.transactional]
        bar = ax.bar(i - w / 2 if n.nocache is not None else i, n.ratio, w,
                     color=colour, hatch="" if n.paired else "//", edgecolor="white")
        ax.bar_label(bar, fmt="%.3f", fontsize=7)
        if n.round_ratios:  # at the bar's left edge, clear of its label
            left = (i - w if n.nocache is not None else i - w / 2) - 0.04
            ax.plot([left] * len(n.round_ratios), n.round_ratios, "k.", ms=4)
        if n.nocache is not None:
            bar = ax.bar(i + w / 2, n.nocache, w, color=colour, alpha=0.4)
            ax.bar_label(bar, fmt="%.3f", fontsize=7)
    ax.axhline(BAR_THROUGHPUT_RATIO, color="red", ls="--", lw=1)
    ax.text(-0.55, BAR_THROUGHPUT_RATIO, f"bar {BAR_THROUGHPUT_RATIO:g}",
            color="red", fontsize=7, ha="left", va="bottom")
    _ticks(ax, [n.system if n.paired else f"{n.system}\n(first window)" for n in nodes])
    ax.set_xlim(xs.min() - 0.6, xs.max() + 0.6)
    ax.set_ylabel("node / passthrough of the same kind")
    ax.set_title("throughput ratio: median of the paired rounds\n(dots: each round; light: "
                 "route cache off)", fontsize=9)


def _rate_panel(ax: Any, nodes: list[_NodeBars]) -> None:
    w = 0.27
    for i, n in enumerate(nodes):
        for dx, value, colour, alpha in ((-w, n.baseline_rate, _BASE_COLOUR, 1.0),
                                         (0.0, n.rate, _KIND_COLOUR[n.transactional], 1.0),
                                         (w, n.nocache_rate, _KIND_COLOUR[n.transactional],
                                          0.4)):
            if value is not None:
                ax.bar(i + dx, value, w, color=colour, alpha=alpha)
    _ticks(ax, [f"{n.system}\nvs {n.baseline}" for n in nodes])
    ax.yaxis.set_major_formatter(lambda v, _pos: f"{v / 1000:,.0f}K")
    ax.set_ylabel("events/s, median of the paired rounds")
    ax.set_title("paired rounds (grey: passthrough; light: route cache off)", fontsize=9)


def _latency_panel(ax: Any, nodes: list[_NodeBars]) -> None:
    w = 0.38
    for i, n in enumerate(nodes):
        if n.baseline_p99 is not None:
            ax.bar(i - w / 2, n.baseline_p99, w, color=_BASE_COLOUR)
        if n.p99 is not None:
            bar = ax.bar(i + w / 2, n.p99, w, color=_KIND_COLOUR[n.transactional])
            ax.bar_label(bar, fmt="%.0f", fontsize=7)
    ax.set_yscale("log")
    _ticks(ax, [f"{n.system}\n{n.p99_rate:,.0f}/s" for n in nodes])
    ax.set_ylabel("p99 latency (ms, log)")
    ax.set_title("best p99 at half the node's maximum rate, one run each\n(grey: "
                 "passthrough of the same kind at that rate)", fontsize=9)


def plot_figure(records: list[dict[str, Any]]) -> Any:
    """The figure of a run's records, or None (matplotlib missing, or no node measured).

    One panel per thing the log concludes from; a panel without records is left out.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    nodes = plot_bars(records)
    if not nodes:
        return None
    panels: list[tuple[Callable[[Any, list[_NodeBars]], None], list[_NodeBars]]] = [
        (_ratio_panel, nodes)]
    paired = [n for n in nodes if n.rate is not None and n.baseline_rate is not None]
    if paired:
        panels.append((_rate_panel, paired))
    timed = [n for n in nodes if n.p99 is not None]
    if timed:
        panels.append((_latency_panel, timed))
    fig, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels), 5.0),
                             squeeze=False)
    for ax, (draw, which) in zip(axes[0], panels, strict=True):
        draw(ax, which)
        ax.grid(True, axis="y", which="both", alpha=0.3)
    fig.suptitle("one DLS node vs a passthrough of the same kind (same Kafka, same run); "
                 "blue: exactly once, green: at least once", fontsize=10)
    fig.tight_layout()
    return fig


def plot(records: list[dict[str, Any]], path: Path) -> bool:
    """Write the figure of :func:`plot_figure` to ``path``; False when there is none."""
    fig = plot_figure(records)
    if fig is None:
        return False
    import matplotlib.pyplot as plt

    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def _partition_counts(text: str) -> tuple[int, ...]:
    """``--shared-partitions``: comma-separated positive counts, or 0 for none."""
    try:
        counts = tuple(int(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"shared partitions must be comma-separated integers, got {text!r}") from None
    if counts == (0,):
        return ()
    if any(c < 1 for c in counts) or len(set(counts)) != len(counts):
        raise argparse.ArgumentTypeError(
            f"shared partitions must be distinct positive integers (or 0), got {text!r}")
    return counts


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true",
                    help="small sizes (50 clients, 2K subscriptions, 5K events, 3 s latency)")
    ap.add_argument("--bootstrap", default=DEFAULT_BOOTSTRAP,
                    help="Kafka bootstrap servers (default $DLS_KAFKA_BOOTSTRAP or "
                         "127.0.0.1:19092)")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON records file")
    ap.add_argument("--no-plot", action="store_true", help="skip the PNG")
    ap.add_argument("--no-profile", action="store_true", help="skip the cProfile pass")
    ap.add_argument("--no-latency", action="store_true", help="skip the latency phase")
    ap.add_argument("--no-gc-freeze", action="store_true",
                    help="leave garbage collection as Python sets it: no freeze of the "
                         "workload, nodes with gc_freeze = false")
    ap.add_argument("--keep-topics", action="store_true",
                    help="leave the run's topics and groups on the broker")
    ap.add_argument("--events", type=int, default=None, help="events instead of the preset's")
    ap.add_argument("--batch-size", type=int, default=None,
                    help="the node's (and the passthroughs') batch size for the throughput "
                         "phase (default: NodeSettings' 1000)")
    ap.add_argument("--poll-timeout", type=float, default=None,
                    help="their poll timeout in seconds (default: NodeSettings' 0.05)")
    ap.add_argument("--route-cache-mb", type=float, default=None, metavar="MB",
                    help="every node's route_cache_mb (default: NodeSettings'; 0: off)")
    ap.add_argument("--shared-partitions", type=_partition_counts, default=None,
                    metavar="N[,N...]",
                    help="partition counts of the shared delivery topic to measure: the "
                         "first as dls-shared, the others as dls-shared-p<N> (default 4,1; "
                         "0 skips them)")
    args = ap.parse_args(argv)
    settings = QUICK if args.quick else FULL
    if args.shared_partitions is not None:
        settings = replace(settings, shared_partitions=args.shared_partitions)
    if args.events:
        settings = replace(settings, n_events=args.events)
    if args.batch_size:
        settings = replace(settings, batch_size=args.batch_size)
    if args.poll_timeout:
        settings = replace(settings, poll_timeout_s=args.poll_timeout)
    if args.route_cache_mb is not None:
        settings = replace(settings, route_cache_mb=args.route_cache_mb)
    if args.no_gc_freeze:
        settings = replace(settings, gc_freeze=False)
    if args.no_latency:
        settings = replace(settings, latency_configs=())
    out: Path = args.out
    out.parent.mkdir(parents=True, exist_ok=True)
    rec = Recorder()
    started = datetime.now(UTC).isoformat(timespec="seconds")
    t0 = time.perf_counter()
    load_start = os.getloadavg()
    rec.log(f"benchmarks.kafka {'quick' if args.quick else 'full'} run on {args.bootstrap}; "
            f"load average {load_start[0]:.2f}")
    facts = run(settings, args.bootstrap, rec, profile=not args.no_profile,
                keep_topics=args.keep_topics, out_dir=out.parent)
    wall = time.perf_counter() - t0
    meta_path = write_results(
        out, rec.records, benchmark=BENCHMARK, module="benchmarks.kafka", argv=argv,
        started=started, wall=wall, quick=args.quick, bootstrap=args.bootstrap,
        settings=asdict(settings),
        loadavg_1min_start_end=[round(load_start[0], 2), round(os.getloadavg()[0], 2)],
        **facts)
    rec.log(f"wrote {len(rec.records)} records to {out} and {meta_path} in {wall:.1f} s")
    if not args.no_plot:
        png = out.with_name(out.stem + ".png")
        rec.log(f"wrote {png}" if plot(rec.records, png)
                else "no plot (matplotlib missing, or no node measured)")
    out.with_name(out.stem + ".log").write_text("\n".join(rec.lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
