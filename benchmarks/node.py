"""The dlsroute node vs a quixstreams router vs a passthrough, through one Kafka, on quotes.

Run (a Kafka must answer at ``--bootstrap``; ``make kafka-up`` starts one on 9092)::

    .venv/bin/python -m benchmarks.node --bootstrap 127.0.0.1:9092 \
        --out benchmarks/results/node.json [--quick] [--sizes 10000,100000@380,...]
        [--rounds 3] [--events N] [--node-setting KEY=VALUE] [--no-peer] [--no-plot]
        [--keep-topics]

``make bench-node`` is the full run (not in CI); ``--quick`` is what the test runs.

The workload is :mod:`benchmarks.quotes` (the demo's space: ``sym``, ``price``, ``change``,
``volume``). Per workload size (``--sizes``: ``N`` picks every preset of ``N``
subscriptions, ``N@F`` the one of fan-out ``F``, or a new one with 1,000 clients, 10,000
from 1M on), three systems read the same events from the same broker, each writing its
outputs exactly once:

* ``node``: ``dlsroute node --config <toml>`` as a user starts it, a subprocess of the
  project's venv. The TOML has only what it needs: ``node``, ``space``
  (``docker/examples/space.json``), ``bootstrap``, ``topic_prefix`` (unique per run and
  size) and ``shared_delivery_partitions = 1``; everything else is the default (exactly
  once, exact delivery on, the route cache on). ``--metrics-port`` serves its page, read
  only between rounds (route cache hits) and to tell that it has started.
* ``quix``: ``benchmarks/peers/quix_router.py``, the router a Kafka user writes with
  quixstreams (``QUIX_VERSION``, in its own venv ``.cache/bench/quix-venv``, created on
  first use: its pins of confluent-kafka need not be the project's). It decodes the same
  RawEvent bytes with fastavro, checks every subscription with numpy (columns from a
  ``.npz`` this harness writes) and writes one JSON message per matching event naming its
  clients, with ``processing_guarantee="exactly-once"``. A checkpoint (transaction) every
  ``peer_commit_every`` (1,000, the node's batch size) events or ``peer_commit_interval_s``
  (0.1 s), polling ``peer_poll_timeout_s`` (0.05 s, the node's): quixstreams' defaults (a
  checkpoint every 5 s, polls of 1 s) would end each round up to seconds after its last
  event, since a round's end is the commit of its last event; the node commits every batch.
* ``passthrough``: :func:`benchmarks.kafka.passthrough` in a process of its own:
  consume -> produce each event to one topic, one transaction per batch (the node's batch
  size and poll timeout). Its progress is its own: the time after each commit
  (``perf_counter``, one clock for every process), since it commits faster than an outside
  reader can tell its commits apart.

Steps per size:

1. **Subscriptions.** Their labels as the SDK maps them (``Subscription(space, where)``:
   about 270 us each, so computed on every core and cached in
   ``.cache/bench/quotes-labels-*.npz``, keyed by the workload's parameters, its columns
   and the space),
   encoded as ``LabelSubscription`` messages (client ``q<i>``, id ``s<i>``, labels, the where
   text, the compiled row: :class:`dls.exact_row.RowLayout`) like ``Client.subscribe``.
   Once the node's metrics page answers and its consumer group is stable, they are
   produced to its subscribe topic; ``subscribe_rate`` is subscriptions per second from
   the first one written to the acknowledgement of the last read from the shared delivery
   topic (``read_committed``; the node acknowledges in the order it applies, after its
   commit), ``subscribe_rate_to_commit`` to the node's commit of the last (its group's
   committed offset of the subscribe topic, polled every 50 ms). Then the
   acknowledgements are counted (one per subscription).
2. **Rounds.** One unmeasured warm-up round (``warmup_events``), then ``rounds`` paired
   rounds. Round ``r`` draws ``n_events`` fresh events (``draw_events`` with seed
   ``101 + r``; ids ``r<r>-e<i>``), encoded as ``Client.publish`` writes them (value
   ``encode_raw_event``, headers ``dls-label``, ``dls-origin`` = ``A/pub``,
   ``dls-event-id``), and gives them to each system in turn, the order rotating by round:
   the node gets them on its publish topic and the router on its input topic, each
   produced while that process is paused (``SIGSTOP``; ``SIGCONT`` after the flush), so
   that it finds them all there; the passthrough gets a topic of its own per round and
   starts after them. The node's and the router's progress is their consumer group's
   committed offset on their input (polled every ``poll_interval_s``): with transactions,
   the offsets commit with the outputs, so it is what a ``read_committed`` reader can see;
   the passthrough's, the time after each of its commits. ``events/s`` is
   ``(done_last - done_first) / (t_last - t_first)`` from the first committed batch to the
   one that completes the round (the events of the first batch excluded, as in
   :mod:`benchmarks.kafka`), the system's median over the rounds is ``throughput``, and the
   ratios ``node / quix`` and ``node / passthrough`` are taken from the same run, of the
   medians and (``*_paired_median``) the median of the per-round ratios.
3. **Exactness.** After each round the node's deliveries (the shared topic's messages,
   their ``dls-clients`` by ``dls-event-id``) and the router's outputs are read back, and
   for ``exact_sample`` events drawn at random they must name exactly the clients of
   :func:`benchmarks.quotes.brute_force`. A mismatch is logged in capitals and recorded
   (``exact_mismatches``, with examples in its params); the run then exits 1 after writing
   its results. ``deliveries_per_event`` is measured on every event of the round. A size
   that fails (a timeout, a process that ended) is logged and named in the meta file's
   ``failed_sizes``; the next size runs, and the run exits 1.
4. **Restart.** With every subscription live, the node is stopped (``SIGTERM``) and
   started again, then killed (``SIGKILL``: a crash) and started again; as each new
   process starts, ``RESTART_EVENTS`` fresh events go to its publish topic, and
   ``restart_to_routing_stopped`` / ``_killed`` is the time from the process's start to
   its commit covering them (imports, group join, snapshot and replay, then routing); those
   events are checked like a round's.

Output: ``node.json`` (records ``{"benchmark", "system", "params", "metric", "value",
"unit"}``), ``node.meta.json`` (machine, versions of confluent-kafka and quixstreams in
both venvs, the node's TOML, command, wall time), ``node.log`` and ``node.png`` (events/s
against subscriptions per system, if matplotlib imports). The node's own log goes to
``.cache/bench/logs/<prefix>-node.log`` and the router's beside it.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import multiprocessing as mp
import os
import queue
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
from confluent_kafka import (
    Consumer,
    ConsumerGroupState,
    KafkaException,
    Producer,
    TopicPartition,
)

from benchmarks import kafka
from benchmarks.core import write_results
from benchmarks.kafka import delete_run_topics, passthrough, produce_all
from benchmarks.quotes import (
    SPACE_FILE,
    SYMBOLS,
    QuoteEvents,
    QuotesParams,
    QuotesWorkload,
    brute_force,
    client_name,
    draw_events,
    generate,
    space,
    space_spec,
)
from connectors.kafka import admin, consumer_config, ensure_topics, producer_config
from connectors.local_kafka import free_port
from connectors.serde import encode_label_subscription, encode_raw_event
from connectors.topics import (
    HEADER_ACK,
    HEADER_CLIENTS,
    HEADER_EVENT_ID,
    HEADER_LABEL,
    HEADER_ORIGIN,
    Topics,
    decode_clients,
    encode_label,
)
from dls.exact_row import RowLayout
from dls.predicates import Subscription

BENCHMARK = "node"
NODE = "A"
PUBLISHER = "pub"
ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / ".cache" / "bench"
DEFAULT_OUT = Path("benchmarks/results/node.json")
DEFAULT_BOOTSTRAP = os.environ.get("DLS_KAFKA_BOOTSTRAP", "127.0.0.1:9092")
SCHEMA_FILE = ROOT / "schemas" / "avro" / "RawEvent.avsc"
QUIX_APP = Path(__file__).resolve().parent / "peers" / "quix_router.py"
#: The newest quixstreams the package index served when this was written (2026-12-06).
QUIX_VERSION = os.environ.get("DLS_BENCH_QUIX_VERSION", "3.28.1")
QUIX_VENV = CACHE / "quix-venv"
SYSTEMS = ("node", "quix", "passthrough")
LABELS_CACHE_FORMAT = 2  # 2: rows beside the labels
LINGER: dict[str, Any] = {"linger.ms": 5}  # the harness's producers (events, subscriptions)


@dataclass(frozen=True)
class Size:
    """One workload size: subscriptions, clients, fan-out, events per round."""

    n_subs: int
    n_clients: int
    fanout: float
    n_events: int

    @property
    def tag(self) -> str:
        """A name for topics and logs: ``n<subs>c<clients>f<fanout>``."""
        return f"n{self.n_subs}c{self.n_clients}f{self.fanout:g}"


RESTART_EVENTS = 1_000  # produced as a restarted node starts: routing again once committed
QUICK_SIZES = (Size(2_000, 100, 16, 3_000),)
FULL_SIZES = (Size(10_000, 1_000, 64, 20_000), Size(100_000, 1_000, 64, 20_000),
              Size(100_000, 1_000, 380, 20_000), Size(1_000_000, 10_000, 64, 10_000))


@dataclass(frozen=True)
class Settings:
    """Everything else a run depends on (recorded in the meta file)."""

    rounds: int = 3
    warmup_events: int = 2_000
    exact_sample: int = 500
    batch_size: int = 1000  # the passthrough's; NodeSettings' default
    poll_timeout_s: float = 0.05  # likewise
    peer_commit_every: int = 1000
    peer_commit_interval_s: float = 0.1
    peer_poll_timeout_s: float = 0.05
    poll_interval_s: float = 0.01
    start_timeout_s: float = 180.0
    peer: bool = True
    restart: bool = True  # after the rounds: the node stopped, then killed, and restarted
    seed: int = 0  # the workload's
    # Further lines of the node's TOML (``--node-setting KEY=VALUE``, the value in TOML
    # syntax), e.g. ("route_cache_mb", "0"); none by default: only the required settings.
    node_settings: tuple[tuple[str, str], ...] = ()


QUICK = Settings(exact_sample=3_000, warmup_events=500)
FULL = Settings()


class Recorder(kafka.Recorder):
    """Records and log lines (kept for ``node.log``), and the exactness mismatches."""

    def __init__(self) -> None:
        super().__init__(BENCHMARK)
        self.mismatches = 0


# -- subscriptions: labels as the SDK maps them, cached --------------------------------------
_POOL_W: QuotesWorkload | None = None


def _pool_init(params: dict[str, Any]) -> None:
    global _POOL_W
    _POOL_W = generate(QuotesParams(**params))


def _map_range(bounds: tuple[int, int]
               ) -> tuple[np.ndarray, np.ndarray, list[str], np.ndarray]:
    """Labels and canonical where text of subscriptions ``lo..hi`` (a pool worker's part)."""
    assert _POOL_W is not None  # noqa: S101 - set by _pool_init
    return _map(_POOL_W, *bounds)


def _map(w: QuotesWorkload, lo: int, hi: int
         ) -> tuple[np.ndarray, np.ndarray, list[str], np.ndarray]:
    """Labels (lengths, flat), where texts and rows (empty: none) of subscriptions."""
    sp = space()
    layout = RowLayout(sp)
    lens = np.empty(hi - lo, dtype=np.int64)
    rows = np.zeros((hi - lo, layout.size), dtype=np.uint8)
    parts, wheres = [], []
    for k, i in enumerate(range(lo, hi)):
        sub = Subscription(sp, w.where(i))  # what Client.subscribe does
        labels = sub.labels()
        lens[k] = len(labels)
        parts.append(labels)
        wheres.append(str(sub))
        row = layout.of(sub)
        if row is not None:
            rows[k] = np.frombuffer(row, dtype=np.uint8)
    return lens, np.concatenate(parts).astype(np.uint64), wheres, rows


def labels_cache_path(w: QuotesWorkload) -> Path:
    """Where the labels of ``w`` are cached: keyed by its params, its columns (what its
    where texts are written from) and the space."""
    p = w.params
    key = json.dumps({"format": LABELS_CACHE_FORMAT, "params": p.as_dict(),
                      "space": space_spec()}, sort_keys=True)
    h = hashlib.sha256(key.encode())
    for col in (w.syms, w.price, w.change, w.volume, w.owners):
        h.update(np.ascontiguousarray(col).tobytes())
    digest = h.hexdigest()[:12]
    return CACHE / (f"quotes-labels-{p.n_subs}-{p.n_clients}-{p.fanout:g}-{p.seed}-"
                    f"{digest}.npz")


def subscription_labels(w: QuotesWorkload, rec: Recorder
                        ) -> tuple[np.ndarray, np.ndarray, list[str], np.ndarray]:
    """``(offsets, labels, wheres, rows)`` of every subscription of ``w`` (rows as the SDK
    sends them, a row of zeros where it sends none): from the cache, or mapped on every
    core (then cached)."""
    path = labels_cache_path(w)
    if path.exists():
        with np.load(path) as z:
            offsets, labels = z["offsets"], z["labels"].astype(np.uint64)
            wheres = z["wheres"].tobytes().decode().split("\n")
            rows = z["rows"]
        if len(offsets) == len(w) + 1 and len(wheres) == len(w) == len(rows):
            rec.log(f"labels of {len(w):,} subscriptions from {path}")
            return offsets, labels, wheres, rows
    t0 = time.perf_counter()
    n = len(w)
    if n <= 20_000:
        lens, labels, wheres, rows = _map(w, 0, n)
    else:
        step = 5_000
        chunks = [(lo, min(n, lo + step)) for lo in range(0, n, step)]
        workers = max(1, os.cpu_count() or 1)
        with ProcessPoolExecutor(workers, mp.get_context("spawn"), _pool_init,
                                 (w.params.as_dict(),)) as pool:
            done = list(pool.map(_map_range, chunks))
        lens = np.concatenate([d[0] for d in done])
        labels = np.concatenate([d[1] for d in done])
        wheres = [x for d in done for x in d[2]]
        rows = np.concatenate([d[3] for d in done])
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lens, out=offsets[1:])
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp.npz")
    small = labels.astype(np.uint32) if labels.size and labels.max() < 2**32 else labels
    np.savez(tmp, offsets=offsets, labels=small,
             wheres=np.frombuffer("\n".join(wheres).encode(), dtype=np.uint8), rows=rows)
    tmp.replace(path)
    rec.log(f"mapped {n:,} subscriptions in {time.perf_counter() - t0:.1f} s "
            f"({len(labels) / n:.1f} labels each); cached in {path}")
    return offsets, labels, wheres, rows


@dataclass
class Prepared:
    """A size's workload, its subscriptions encoded, and its records' base params."""

    size: Size
    w: QuotesWorkload
    subscriptions: list[bytes]
    base: dict[str, Any]
    owner_names: np.ndarray  # client name by client index


def prepare(size: Size, s: Settings, rec: Recorder) -> Prepared:
    t0 = time.perf_counter()
    w = generate(QuotesParams(size.n_subs, size.n_clients, size.fanout, seed=s.seed))
    offsets, labels, wheres, rows = subscription_labels(w, rec)
    off = offsets.tolist()
    sent = [r.tobytes() if r.any() else None for r in rows]  # what Client.subscribe sends
    subs = [encode_label_subscription(w.client(i), f"s{i}", labels[off[i]:off[i + 1]],
                                      wheres[i], sent[i]) for i in range(len(w))]
    per_sub = len(labels) / len(w)
    del labels
    base = {**w.params.as_dict(), "n_events": size.n_events, "price_width_mean": w.scale,
            "labels_per_subscription": round(per_sub, 2),
            "subscription_bytes_mean": round(sum(map(len, subs)) / len(subs), 1),
            **({"node_settings": dict(s.node_settings)} if s.node_settings else {})}
    rec.log(f"[{size.tag}] workload: {size.n_subs:,} subscriptions of {size.n_clients:,} "
            f"clients, fan-out {size.fanout:g} (price ranges {w.scale:.2f} wide on average, "
            f"{per_sub:.1f} labels each), prepared in {time.perf_counter() - t0:.1f} s")
    names = np.array([client_name(c) for c in range(size.n_clients)], dtype=object)
    return Prepared(size, w, subs, base, names)


def write_columns(w: QuotesWorkload, path: Path) -> None:
    """The subscriptions as the router's columns (see ``benchmarks/peers/quix_router.py``)."""
    np.savez(path, syms=w.syms, symbols=np.array(SYMBOLS), price_lo=w.price[:, 0],
             price_hi=w.price[:, 1], change_lo=w.change[:, 0], change_hi=w.change[:, 1],
             volume_lo=w.volume, owners=w.owners,
             clients=np.array([client_name(c) for c in range(w.params.n_clients)]))


# -- events ------------------------------------------------------------------------------------
@dataclass
class RoundEvents:
    """One round's events, encoded as ``Client.publish`` writes them."""

    seed: int
    ev: QuoteEvents
    ids: list[str]
    values: list[bytes]
    headers: list[list[tuple[str, bytes]]]


def round_events(n: int, seed: int, tag: str) -> RoundEvents:
    ev = draw_events(n, seed)
    ids = [f"{tag}-e{i}" for i in range(n)]
    origin = f"{NODE}/{PUBLISHER}".encode()
    values, headers = [], []
    for i, label in enumerate(ev.labels.tolist()):
        values.append(encode_raw_event(NODE, PUBLISHER, ids[i], ev.attrs(i)))
        headers.append([(HEADER_LABEL, encode_label(label)), (HEADER_ORIGIN, origin),
                        (HEADER_EVENT_ID, ids[i].encode())])
    return RoundEvents(seed, ev, ids, values, headers)


# -- Kafka helpers -----------------------------------------------------------------------------
class Committed:
    """A group's committed offsets, read by a consumer that never joins the group."""

    def __init__(self, bootstrap: str, group: str) -> None:
        self.group = group
        # read_uncommitted: librdkafka then asks without require_stable, so the broker
        # answers at once with what is committed rather than holding the request while a
        # transaction has offsets pending (they count once that transaction commits).
        self.consumer = Consumer(consumer_config(bootstrap, group,
                                                 **{"isolation.level": "read_uncommitted"}))

    def offset(self, topic: str) -> int:
        """The committed offset of partition 0 of ``topic`` (0 when none)."""
        try:
            tp = self.consumer.committed([TopicPartition(topic, 0)], timeout=10)[0]
        except KafkaException:
            return -1  # unknown now (e.g. a commit in flight): the caller asks again
        return max(0, tp.offset)

    def close(self) -> None:
        self.consumer.close()


def settled(committed: Committed, topic: str, timeout: float = 30.0) -> int:
    """The committed offset of ``topic``, asked until the broker gives one."""
    deadline = time.monotonic() + timeout
    while (off := committed.offset(topic)) < 0:
        if time.monotonic() > deadline:
            raise TimeoutError(f"group {committed.group}: no committed offset of {topic}")
        time.sleep(0.1)
    return off


def end_offset(bootstrap: str, topic: str) -> int:
    """The high watermark of partition 0 of ``topic``."""
    c = Consumer(consumer_config(bootstrap, f"bench-ends-{uuid.uuid4().hex[:8]}"))
    try:
        return int(c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1])
    finally:
        c.close()


def track(committed: Committed, topic: str, start: int, n: int, timeout: float,
          interval: float, alive: Callable[[], bool] = lambda: True
          ) -> list[tuple[float, int]]:
    """Samples ``(perf_counter, committed - start)`` until ``n`` are committed.

    A sample is kept whenever the count changed (the first is the call's start).
    """
    samples = [(time.perf_counter(), 0)]
    deadline = time.monotonic() + timeout
    while samples[-1][1] < n:
        if time.monotonic() > deadline:
            raise TimeoutError(f"group {committed.group}: {samples[-1][1]} of {n} committed "
                               f"on {topic} within {timeout:g} s")
        if not alive():
            raise RuntimeError(f"group {committed.group}: its process ended with "
                               f"{samples[-1][1]} of {n} committed on {topic}")
        off = committed.offset(topic)
        t = time.perf_counter()
        if off >= 0 and off - start != samples[-1][1]:
            samples.append((t, off - start))
        else:
            time.sleep(interval)
    return samples


@dataclass
class Rate:
    """Events per second between the first commit and the one that completed the round."""

    events: int
    seconds: float
    first_commit: int  # events in the first commit (left out)
    commits: int
    since_start_s: float  # from the call's start (resume, or process start) to the end
    extra: dict[str, float] = field(default_factory=dict)  # the node's cache hits, ...
    samples: list[tuple[float, int]] = field(default_factory=list)  # (s since start, done)

    @property
    def rate(self) -> float:
        return self.events / self.seconds if self.seconds > 0 else float("nan")


def rate_of(samples: Sequence[tuple[float, int]], n: int) -> Rate:
    """The window of ``samples`` (from :func:`track`), the first commit's events excluded.

    When a single commit held all ``n``, the window starts at the call's start instead.
    """
    start = samples[0]
    first = next(x for x in samples if x[1] > 0)
    last = next(x for x in samples if x[1] >= n)
    if last is first:
        first = start
    return Rate(events=last[1] - first[1], seconds=last[0] - first[0],
                first_commit=first[1], commits=len(samples) - 1,
                since_start_s=last[0] - start[0],
                samples=[(round(t - start[0], 4), k) for t, k in samples[1:]])


def iter_range(bootstrap: str, topic: str, start: int, end: int,
               timeout: float = 300.0) -> Iterator[Any]:
    """The committed messages of partition 0 of ``topic`` from ``start`` to ``end``."""
    c = Consumer(consumer_config(bootstrap, f"bench-read-{uuid.uuid4().hex[:8]}"))
    try:
        c.assign([TopicPartition(topic, 0, start)])
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            last = -1
            for m in c.consume(num_messages=10_000, timeout=0.5):
                if m.error() is None:
                    last = m.offset() or 0
                    yield m
            if last >= end - 1:
                return
            pos = c.position([TopicPartition(topic, 0)])[0].offset
            if pos >= end:  # past the last message (and any transaction marker)
                return
        raise TimeoutError(f"{topic}: not read up to {end} within {timeout:g} s")
    finally:
        c.close()


def wait_for_ack(bootstrap: str, topic: str, sid: str, start: int, timeout: float) -> float:
    """``perf_counter`` when the acknowledgement of ``sid`` is read from ``topic``."""
    c = Consumer(consumer_config(bootstrap, f"bench-ack-{uuid.uuid4().hex[:8]}"))
    want = sid.encode()
    try:
        c.assign([TopicPartition(topic, 0, start)])
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for m in c.consume(num_messages=10_000, timeout=0.05):
                if m.error() is None and _header(m.headers(), HEADER_ACK) == want:
                    return time.perf_counter()
    finally:
        c.close()
    raise TimeoutError(f"no acknowledgement of {sid} on {topic} within {timeout:g} s")


def wait_group_stable(bootstrap: str, group: str, timeout: float,
                      alive: Callable[[], bool]) -> float:
    """Wait until ``group`` is stable with a member that has partitions; the seconds taken."""
    client = admin(bootstrap)
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if not alive():
            raise RuntimeError(f"the process of group {group} ended before it joined")
        try:
            d = client.describe_consumer_groups([group])[group].result(timeout=10)
            if d.state == ConsumerGroupState.STABLE and any(
                    m.assignment and m.assignment.topic_partitions for m in d.members):
                return time.monotonic() - t0
        except KafkaException:
            pass
        time.sleep(0.2)
    raise TimeoutError(f"group {group} not stable within {timeout:g} s")


def _header(headers: Any, key: str) -> bytes | None:
    for k, v in headers or ():
        if k == key:
            return bytes(v) if v is not None else None
    return None


# -- processes ---------------------------------------------------------------------------------
class Proc:
    """A subprocess whose output goes to a log file; pausable (SIGSTOP / SIGCONT)."""

    def __init__(self, name: str, cmd: list[str], log_path: Path, cwd: Path = ROOT,
                 env: dict[str, str] | None = None) -> None:
        self.name, self.cmd, self.log_path = name, cmd, log_path
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = log_path.open("wb")
        self.p = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT,  # noqa: S603
                                  cwd=cwd, env=env)

    def alive(self) -> bool:
        return self.p.poll() is None

    def pause(self) -> None:
        self.p.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.p.send_signal(signal.SIGCONT)

    def tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def count(self, needle: str) -> int:
        """Lines of its log that contain ``needle``."""
        try:
            return sum(needle in line for line in
                       self.log_path.read_text(errors="replace").splitlines())
        except OSError:
            return 0

    def stop(self, timeout: float = 60.0) -> int | None:
        if self.alive():
            self.resume()  # a paused process cannot act on SIGTERM
            self.p.send_signal(signal.SIGTERM)
            try:
                self.p.wait(timeout)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait(30)
        self._log.close()
        return self.p.returncode


def dlsroute_command() -> list[str]:
    """``dlsroute`` of this interpreter's venv (``python -m dlsroute`` without the script)."""
    script = Path(sys.executable).parent / "dlsroute"
    return [str(script)] if script.exists() else [sys.executable, "-m", "dlsroute"]


def node_toml(bootstrap: str, prefix: str, extra: Sequence[tuple[str, str]] = ()) -> str:
    """The node's config: the required settings, a prefix, one shared delivery partition
    (and ``extra`` lines, ``--node-setting``)."""
    return (f'node = "{NODE}"\n'
            f'space = "{SPACE_FILE}"\n'
            f'bootstrap = "{bootstrap}"\n'
            f'topic_prefix = "{prefix}"\n'
            "shared_delivery_partitions = 1\n"
            + "".join(f"{k} = {v}\n" for k, v in extra))


def scrape(port: int) -> dict[str, float]:
    """The node's counters (``dls_*_total``) from its metrics page."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:  # noqa: S310
        text = r.read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("dls_") and "_total{" in line and "client=" not in line:
            name, _, value = line.rpartition(" ")
            out[name.split("{", 1)[0]] = float(value)
    return out


#: the parts of the node's loop its metrics time (``dls_loop_<part>_seconds_total``)
LOOP_PARTS = ("consume", "process", "commit", "settle")


def loop_split(m0: dict[str, float], m1: dict[str, float], events: float
               ) -> dict[str, float]:
    """Microseconds per event of each part of the node's loop between two scrapes.

    ``consume`` includes the waits for input (and the pause while a round is produced).
    """
    return {f"loop_{part}_us_per_event": round(1e6 * (
        m1.get(f"dls_loop_{part}_seconds_total", 0.0)
        - m0.get(f"dls_loop_{part}_seconds_total", 0.0)) / max(1.0, events), 2)
        for part in LOOP_PARTS}


def wait_metrics(proc: Proc, port: int, timeout: float) -> float:
    """Wait until the node's metrics page answers (its start is over); the seconds taken."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if not proc.alive():
            raise RuntimeError(f"the node ended at start (exit {proc.p.returncode}):\n"
                               f"{proc.tail()}")
        with contextlib.suppress(OSError):
            scrape(port)
            return time.monotonic() - t0
        time.sleep(0.2)
    raise TimeoutError(f"the node's metrics page did not answer within {timeout:g} s:\n"
                       f"{proc.tail()}")


# -- the peer's venv ---------------------------------------------------------------------------
def peer_python(rec: Recorder) -> Path:
    """The quixstreams venv's python: ``.cache/bench/quix-venv``, made on first use."""
    py = QUIX_VENV / "bin" / "python"
    stamp = QUIX_VENV / f".installed-quixstreams-{QUIX_VERSION}"
    CACHE.mkdir(parents=True, exist_ok=True)
    with (CACHE / "quix-venv.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another run making it at the same time waits
        if stamp.exists() and py.exists():
            return py
        t0 = time.perf_counter()
        rec.log(f"creating {QUIX_VENV} (quixstreams=={QUIX_VERSION}, fastavro, numpy) ...")
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(QUIX_VENV)],  # noqa: S603
                       check=True)
        subprocess.run([str(py), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",  # noqa: S603
                        f"quixstreams=={QUIX_VERSION}", "fastavro", "numpy"], check=True)
        stamp.touch()
        rec.log(f"created {QUIX_VENV} in {time.perf_counter() - t0:.0f} s")
    return py


def peer_versions(py: Path) -> dict[str, str]:
    """Versions of the peer venv's packages (python, quixstreams, confluent-kafka, ...)."""
    code = ("import json, platform, quixstreams, confluent_kafka, numpy, fastavro; "
            "print(json.dumps({'python': platform.python_version(), "
            "'quixstreams': quixstreams.__version__, "
            "'confluent_kafka': confluent_kafka.__version__, "
            "'librdkafka': confluent_kafka.libversion()[0], "
            "'numpy': numpy.__version__, 'fastavro': fastavro.__version__}))")
    out = subprocess.run([str(py), "-c", code], capture_output=True, text=True,  # noqa: S603
                         check=True).stdout
    versions: dict[str, str] = json.loads(out.strip().splitlines()[-1])
    return versions


# -- the passthrough in a process of its own ---------------------------------------------------
def _passthrough_proc(bootstrap: str, source: str, group: str, out_topic: str, n: int,
                      batch: int, poll_s: float, timeout: float, q: Any, t0: float) -> None:
    """The passthrough; puts its samples ``(perf_counter, done)`` on ``q`` (from ``t0``)."""
    samples = passthrough(bootstrap, source, group, n, batch, poll_s, transactional=True,
                          out_topic=out_topic, timeout=timeout)
    q.put([(t0, 0)] + [(t, k) for t, k, _ in samples if k > 0])


# -- one size ----------------------------------------------------------------------------------
@dataclass
class SizeRun:
    """What one size's rounds need: its processes, topics and progress readers."""

    p: Prepared
    s: Settings
    bootstrap: str
    prefix: str
    rec: Recorder
    groups: list[str] = field(default_factory=list)
    node: Proc | None = None
    peer: Proc | None = None
    metrics_port: int = 0
    node_group: str = ""
    peer_group: str = ""
    committed: dict[str, Committed] = field(default_factory=dict)
    rates: dict[str, list[float]] = field(default_factory=dict)
    deliveries: dict[str, list[float]] = field(default_factory=dict)
    checked: dict[str, int] = field(default_factory=dict)
    mismatches: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    expected: list[float] = field(default_factory=list)

    @property
    def topics(self) -> Topics:
        return Topics(self.prefix)

    @property
    def peer_in(self) -> str:
        return f"{self.prefix}.quix.events"

    @property
    def peer_out(self) -> str:
        return f"{self.prefix}.quix.deliveries"

    @property
    def pt_out(self) -> str:
        return f"{self.prefix}.passthrough.out"

    def timeout(self, n: int) -> float:
        """A round's bound: generous (a slow system at 1M subscriptions, a shared machine)."""
        return 120.0 + n / 20.0


def start_node(r: SizeRun, tmp: Path) -> None:
    s, rec = r.s, r.rec
    toml = tmp / f"{r.prefix}-node.toml"
    toml.write_text(node_toml(r.bootstrap, r.prefix, r.s.node_settings))
    r.metrics_port = free_port()
    r.node_group = f"{r.prefix}-node-{NODE}"
    r.groups += [r.node_group, f"{r.node_group}-ends", f"{r.node_group}-replicas"]
    cmd = [*dlsroute_command(), "node", "--config", str(toml),
           "--metrics-port", str(r.metrics_port)]
    t0 = time.monotonic()
    r.node = Proc("node", cmd, CACHE / "logs" / f"{r.prefix}-node.log")
    wait_metrics(r.node, r.metrics_port, s.start_timeout_s)
    wait_group_stable(r.bootstrap, r.node_group, s.start_timeout_s, r.node.alive)
    rec.log(f"[{r.p.size.tag}] node started in {time.monotonic() - t0:.1f} s "
            f"({' '.join(cmd)}; log {r.node.log_path})")
    r.committed["node"] = Committed(r.bootstrap, r.node_group)


def load_subscriptions(r: SizeRun) -> None:
    """Produce every subscription to the node's subscribe topic; time until it committed
    the last; then count its acknowledgements."""
    assert r.node is not None  # noqa: S101
    n = len(r.p.subscriptions)
    topic = r.topics.node_subscribe(NODE)
    start = end_offset(r.bootstrap, topic)
    producer = Producer(producer_config(r.bootstrap, **LINGER))
    t0 = time.perf_counter()
    t_prod = produce_all(producer, topic, r.p.subscriptions, timeout=600)
    samples = track(r.committed["node"], topic, start, n, timeout=120.0 + n / 500.0,
                    interval=0.05, alive=r.node.alive)
    to_commit = samples[-1][0] - t0
    # The last one's acknowledgement (the node sends them in the order it applied them,
    # after the commit): read from a little before the delivery topic's end.
    deliver = r.topics.shared_deliver
    t_ack = wait_for_ack(r.bootstrap, deliver, f"s{n - 1}",
                         max(0, end_offset(r.bootstrap, deliver) - 20_000), timeout=120.0)
    took = t_ack - t0
    params = {**r.p.base, "how": "LabelSubscription messages (labels + where, as "
              "Client.subscribe sends them) to the running node's subscribe topic; first "
              "written -> the acknowledgement of the last read (read_committed) from the "
              "shared delivery topic", "produce_s": round(t_prod, 3),
              "to_commit_s": round(to_commit, 3)}
    # The acknowledgements: one message per subscription on the shared delivery topic.
    acks = 0
    deadline = time.monotonic() + 60.0 + n / 10_000
    while acks < n and time.monotonic() < deadline:
        acks = sum(1 for m in iter_range(r.bootstrap, deliver, 0,
                                         end_offset(r.bootstrap, deliver))
                   if _header(m.headers(), HEADER_ACK) is not None)
        if acks < n:
            time.sleep(1.0)
    r.rec.add("node", params, "subscribe_time", took, "s")
    r.rec.add("node", params, "subscribe_rate", n / took, "subscriptions/s")
    r.rec.add("node", {**params, "how": "first written -> the node's committed offset of "
                       "the subscribe topic covers the last"},
              "subscribe_rate_to_commit", n / to_commit, "subscriptions/s")
    r.rec.add("node", params, "subscribe_acks", acks, "count")
    r.rec.log(f"[{r.p.size.tag}] node took {n:,} subscriptions in {took:.1f} s to the last "
              f"acknowledgement ({n / took:,.0f}/s; {to_commit:.1f} s to its commit of the "
              f"last; produced in {t_prod:.1f} s); {acks:,} acknowledged")
    if acks != n:
        r.rec.log(f"!!! [{r.p.size.tag}] {acks} ACKNOWLEDGEMENTS FOR {n} SUBSCRIPTIONS")
        r.mismatches.setdefault("node", []).append(
            {"what": "acknowledgements", "expected": n, "got": acks})


def start_peer(r: SizeRun, py: Path, tmp: Path) -> None:
    cols = tmp / f"{r.prefix}-subs.npz"
    write_columns(r.p.w, cols)
    ensure_topics(r.bootstrap, [r.peer_in, r.peer_out])
    r.peer_group = f"{r.prefix}-quix"
    r.groups.append(r.peer_group)
    cmd = [str(py), str(QUIX_APP), "--bootstrap", r.bootstrap, "--input", r.peer_in,
           "--output", r.peer_out, "--group", r.peer_group, "--subs", str(cols),
           "--schema", str(SCHEMA_FILE), "--commit-interval", str(r.s.peer_commit_interval_s),
           "--commit-every", str(r.s.peer_commit_every),
           "--poll-timeout", str(r.s.peer_poll_timeout_s)]
    t0 = time.monotonic()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    # Its working directory is the run's temporary one: quixstreams makes ./state there.
    r.peer = Proc("quix", cmd, CACHE / "logs" / f"{r.prefix}-quix.log", cwd=tmp, env=env)
    try:
        wait_group_stable(r.bootstrap, r.peer_group, r.s.start_timeout_s, r.peer.alive)
    except RuntimeError as exc:
        raise RuntimeError(f"{exc}:\n{r.peer.tail()}") from exc
    r.rec.log(f"[{r.p.size.tag}] quixstreams router started in "
              f"{time.monotonic() - t0:.1f} s (log {r.peer.log_path})")
    r.committed["quix"] = Committed(r.bootstrap, r.peer_group)


def run_paused(r: SizeRun, system: str, proc: Proc, topic: str, ev: RoundEvents,
               producer: Producer) -> Rate:
    """Produce the round's events while ``proc`` is paused, resume it, time its commits."""
    committed = r.committed[system]
    start, end = settled(committed, topic), end_offset(r.bootstrap, topic)
    if start != end:
        raise RuntimeError(f"{system}: committed {start} of {end} on {topic} before the "
                           f"round: the last round is not over")
    proc.pause()
    try:
        produce_all(producer, topic, ev.values, ev.headers)
    finally:
        proc.resume()
    n = len(ev.values)
    return rate_of(track(committed, topic, start, n, r.timeout(n), r.s.poll_interval_s,
                         proc.alive), n)


def run_passthrough(r: SizeRun, tag: str, ev: RoundEvents, producer: Producer) -> Rate:
    """The round's events to a topic of its own, then a passthrough process through them."""
    source = f"{r.prefix}.passthrough.in-{tag}"
    group = f"{r.prefix}-passthrough-{tag}"
    r.groups.append(group)
    ensure_topics(r.bootstrap, [source, r.pt_out])
    produce_all(producer, source, ev.values, ev.headers)
    n = len(ev.values)
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    child = ctx.Process(target=_passthrough_proc, name=f"passthrough-{tag}", args=(
        r.bootstrap, source, group, r.pt_out, n, r.s.batch_size, r.s.poll_timeout_s,
        r.timeout(n), q, time.perf_counter()), daemon=True)
    try:
        child.start()
        deadline = time.monotonic() + r.timeout(n) + 60
        samples: list[tuple[float, int]] | None = None
        while samples is None:
            try:
                samples = q.get(timeout=1.0)
            except queue.Empty:
                if not child.is_alive():
                    raise RuntimeError(f"passthrough {tag} exited with {child.exitcode}") \
                        from None
                if time.monotonic() > deadline:
                    raise TimeoutError(f"passthrough {tag}: not done in time") from None
        child.join(60)
    finally:
        if child.is_alive():
            child.kill()
            child.join(10)
    return rate_of(samples, n)


def check_round(r: SizeRun, system: str, got: dict[str, set[str]], ev: RoundEvents,
                rnd: int, rounds: bool = True) -> float:
    """Compare a sample of the round's events with brute force; deliveries per event."""
    n = len(ev.ids)
    w = r.p.w
    rng = np.random.default_rng([r.s.seed, rnd, 7])
    sample = np.sort(rng.choice(n, size=min(n, r.s.exact_sample), replace=False))
    bad = r.mismatches.setdefault(system, [])
    expected_sizes = []
    for i in sample.tolist():
        want = set(r.p.owner_names[np.unique(w.owners[brute_force(w, ev.ev, i)])].tolist())
        expected_sizes.append(len(want))
        have = got.get(ev.ids[i], set())
        if have != want:
            bad.append({"round": rnd, "event": ev.ids[i], "attrs": ev.ev.attrs(i),
                        "missing": sorted(want - have)[:10], "extra": sorted(have - want)[:10],
                        "n_missing": len(want - have), "n_extra": len(have - want)})
    r.checked[system] = r.checked.get(system, 0) + len(sample)
    if system == "node" and rounds:  # (a restart's events are checked, not averaged in)
        r.expected.append(float(np.mean(expected_sizes)) if expected_sizes else 0.0)
    return sum(len(v) for v in got.values()) / n


def node_deliveries(r: SizeRun, start: int, end: int) -> dict[str, set[str]]:
    got: dict[str, set[str]] = {}
    for m in iter_range(r.bootstrap, r.topics.shared_deliver, start, end):
        hs = m.headers()
        if m.value() is None or _header(hs, HEADER_ACK) is not None:
            continue
        eid = (_header(hs, HEADER_EVENT_ID) or b"").decode()
        got.setdefault(eid, set()).update(decode_clients(_header(hs, HEADER_CLIENTS)))
    return got


def peer_deliveries(r: SizeRun, start: int, end: int) -> dict[str, set[str]]:
    got: dict[str, set[str]] = {}
    for m in iter_range(r.bootstrap, r.peer_out, start, end):
        d = json.loads(m.value())
        clients = d["clients"]
        if len(set(clients)) != len(clients):  # the router deduplicates: a repeat is an error
            got.setdefault(d["id"], set()).add(f"(repeated in {clients})")
        got.setdefault(d["id"], set()).update(clients)
    return got


def one_round(r: SizeRun, rnd: int, order: Sequence[str], ev: RoundEvents,
              producer: Producer, measured: bool) -> dict[str, Rate]:
    """Every system of ``order`` through the round's events; checked when ``measured``."""
    out: dict[str, Rate] = {}
    tag = f"r{rnd}" if measured else "warm"
    for system in order:
        if system == "node":
            assert r.node is not None  # noqa: S101
            deliver = r.topics.shared_deliver
            d0 = end_offset(r.bootstrap, deliver)
            m0 = scrape(r.metrics_port)
            snaps0 = r.node.count(": snapshot ") if measured else 0
            out[system] = run_paused(r, system, r.node, r.topics.node_publish(NODE), ev,
                                     producer)
            m1 = scrape(r.metrics_port)
            if not measured:
                continue
            events = m1.get("dls_events_in_total", 0) - m0.get("dls_events_in_total", 0)
            hits = (m1.get("dls_route_cache_hits_total", 0)
                    - m0.get("dls_route_cache_hits_total", 0))
            out[system].extra.update(route_cache_hit_rate=hits / max(1.0, events),
                                     snapshot_log_lines=r.node.count(": snapshot ") - snaps0,
                                     **loop_split(m0, m1, events))
            got = node_deliveries(r, d0, end_offset(r.bootstrap, deliver))
        elif system == "quix":
            assert r.peer is not None  # noqa: S101
            d0 = end_offset(r.bootstrap, r.peer_out)
            out[system] = run_paused(r, system, r.peer, r.peer_in, ev, producer)
            if not measured:
                continue
            got = peer_deliveries(r, d0, end_offset(r.bootstrap, r.peer_out))
        else:
            out[system] = run_passthrough(r, tag, ev, producer)
            continue
        per_event = check_round(r, system, got, ev, rnd)
        r.deliveries.setdefault(system, []).append(per_event)
    return out


def restart_node(r: SizeRun, tmp: Path, producer: Producer, kill: bool) -> None:
    """Stop the node (SIGTERM, or SIGKILL: a crash), start it again, and time until it
    routes: from the new process's start until its commit covers fresh events produced
    at that moment (``restart_to_routing``; the deliveries checked as a round's are)."""
    assert r.node is not None  # noqa: S101
    how = "killed" if kill else "stopped"
    t = time.monotonic()
    if kill:
        r.node.p.kill()
    r.node.stop()
    stop_s = time.monotonic() - t
    ev = round_events(RESTART_EVENTS, 990 + int(kill), f"restart-{how}")
    topic, deliver = r.topics.node_publish(NODE), r.topics.shared_deliver
    start, d0 = end_offset(r.bootstrap, topic), end_offset(r.bootstrap, deliver)
    toml = tmp / f"{r.prefix}-node.toml"
    r.metrics_port = free_port()
    cmd = [*dlsroute_command(), "node", "--config", str(toml),
           "--metrics-port", str(r.metrics_port)]
    t0 = time.perf_counter()
    r.node = Proc("node", cmd, CACHE / "logs" / f"{r.prefix}-node-{how}.log")
    produce_all(producer, topic, ev.values, ev.headers)
    samples = track(r.committed["node"], topic, start, len(ev.values),
                    timeout=r.s.start_timeout_s + r.timeout(len(ev.values)),
                    interval=0.05, alive=r.node.alive)
    took = samples[-1][0] - t0
    got = node_deliveries(r, d0, end_offset(r.bootstrap, deliver))
    per_event = check_round(r, "node", got, ev, 90 + int(kill), rounds=False)
    params = {**r.p.base, "how": f"node {how} (after the rounds: every subscription live), "
              f"started again; {len(ev.values):,} fresh events produced at its start; "
              "process start -> its commit covers them", "stop_s": round(stop_s, 3),
              "deliveries_per_event": round(per_event, 2)}
    r.rec.add("node", params, f"restart_to_routing_{how}", took, "s")
    r.rec.log(f"[{r.p.size.tag}] node {how} in {stop_s:.1f} s; started again and routing "
              f"{len(ev.values):,} fresh events {took:.1f} s after its start "
              f"({per_event:.1f} deliveries per event; log {r.node.log_path})")


def run_size(size: Size, s: Settings, bootstrap: str, run_prefix: str, rec: Recorder,
             peer_py: Path | None, tmp: Path, keep_topics: bool) -> None:
    p = prepare(size, s, rec)
    r = SizeRun(p, s, bootstrap, f"{run_prefix}.{size.tag}", rec)
    systems = [x for x in SYSTEMS if x != "quix" or peer_py is not None]
    producer = Producer(producer_config(bootstrap, **LINGER))
    try:
        start_node(r, tmp)
        load_subscriptions(r)
        if peer_py is not None:
            start_peer(r, peer_py, tmp)
        warm = round_events(min(s.warmup_events, size.n_events), 100, "warm")
        t0 = time.perf_counter()
        one_round(r, -1, systems, warm, producer, measured=False)
        rec.log(f"[{size.tag}] warm-up round of {len(warm.ids):,} events through "
                f"{', '.join(systems)} in {time.perf_counter() - t0:.1f} s")
        for rnd in range(s.rounds):
            ev = round_events(size.n_events, 101 + rnd, f"r{rnd}")
            order = systems[rnd % len(systems):] + systems[:rnd % len(systems)]
            res = one_round(r, rnd, order, ev, producer, measured=True)
            for system, rate in res.items():
                r.rates.setdefault(system, []).append(rate.rate)
                extra = rate.extra
                rec.add(system, {**p.base, "round": rnd, "order": list(order),
                                 "event_seed": ev.seed, "window_events": rate.events,
                                 "window_s": round(rate.seconds, 4),
                                 "first_commit_events": rate.first_commit,
                                 "commits": rate.commits,
                                 "since_start_s": round(rate.since_start_s, 4),
                                 "commits_at": rate.samples, **extra},
                        "throughput_round", rate.rate, "events/s")
            rec.log(f"[{size.tag}] round {rnd} ({', '.join(order)}; {size.n_events:,} fresh "
                    "events, seed " + f"{ev.seed}): " + "; ".join(
                        f"{x} {res[x].rate:,.0f} events/s" for x in systems)
                    + (f" (node route cache hits "
                       f"{100 * res['node'].extra['route_cache_hit_rate']:.1f} %; loop µs "
                       "per event: " + ", ".join(
                           f"{part} {res['node'].extra[f'loop_{part}_us_per_event']:.1f}"
                           for part in LOOP_PARTS) + ")"))
        if s.restart:
            for kill in (False, True):
                restart_node(r, tmp, producer, kill)
        summarise(r, systems)
    finally:
        for proc in (r.node, r.peer):
            if proc is not None:
                code = proc.stop()
                if code not in (0, None, -signal.SIGTERM):
                    rec.log(f"[{size.tag}] {proc.name} exited with {code}:\n{proc.tail()}")
        for c in r.committed.values():
            c.close()
        producer.flush(30)
        if not keep_topics:
            t0 = time.perf_counter()
            n = delete_run_topics(bootstrap, r.prefix, r.groups)
            rec.log(f"[{size.tag}] deleted {n} topics under {r.prefix}. in "
                    f"{time.perf_counter() - t0:.1f} s")


def summarise(r: SizeRun, systems: Sequence[str]) -> None:
    """Medians, deliveries per event, exactness and ratios of one size."""
    rec, base, tag = r.rec, r.p.base, r.p.size.tag
    med = {x: float(np.median(r.rates[x])) for x in systems}
    for x in systems:
        rec.add(x, {**base, "rounds": len(r.rates[x]),
                    "rates": [round(v, 1) for v in r.rates[x]],
                    "statistic": "median of the rounds"}, "throughput", med[x], "events/s")
    if r.expected:
        rec.add("brute_force", {**base, "sample": r.s.exact_sample},
                "deliveries_per_event", float(np.mean(r.expected)), "deliveries")
    for x in systems:
        if x == "passthrough":
            continue
        rec.add(x, {**base, "how": "clients named per event, every event of each round"},
                "deliveries_per_event", float(np.mean(r.deliveries[x])), "deliveries")
        bad = r.mismatches.get(x, [])
        rec.add(x, {**base, "checked_events": r.checked.get(x, 0), "examples": bad[:5]},
                "exact_mismatches", len(bad), "events")
        if bad:
            rec.mismatches += len(bad)
            rec.log(f"!!! [{tag}] {x.upper()}: {len(bad)} OF {r.checked.get(x, 0)} CHECKED "
                    f"EVENTS DO NOT MATCH BRUTE FORCE, e.g. {bad[0]}")
        else:
            rec.log(f"[{tag}] {x}: {r.checked.get(x, 0):,} sampled events exactly as brute "
                    f"force")
    for other in systems:
        if other == "node":
            continue
        ratio = med["node"] / med[other]
        paired = float(np.median([a / b for a, b in zip(r.rates["node"], r.rates[other],
                                                         strict=True)]))
        rec.add("node", {**base, "baseline": other}, f"ratio_vs_{other}", ratio,
                f"x {other}")
        rec.add("node", {**base, "baseline": other, "ratios": [
            round(a / b, 4) for a, b in zip(r.rates["node"], r.rates[other], strict=True)]},
            f"ratio_vs_{other}_paired_median", paired, f"x {other}")
    rec.log(f"[{tag}] medians: " + "; ".join(f"{x} {med[x]:,.0f} events/s" for x in systems)
            + "; node / " + ", node / ".join(
                f"{o} {med['node'] / med[o]:.2f}" for o in systems if o != "node")
            + "; deliveries per event " + ", ".join(
                f"{x} {np.mean(r.deliveries[x]):.1f}" for x in systems if x in r.deliveries)
            + (f" (brute force {np.mean(r.expected):.1f} on the sample)" if r.expected else ""))


# -- plot --------------------------------------------------------------------------------------
_COLOURS = {"node": "#1f77b4", "quix": "#d62728", "passthrough": "#7f7f7f"}


def plot(records: list[dict[str, Any]], path: Path) -> bool:
    """Events/s against subscriptions per system (log-log; one line per fan-out)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    rows = [x for x in records if x["metric"] == "throughput"]
    if not rows:
        return False
    fig, ax = plt.subplots(figsize=(7.5, 5.0))
    fanouts = sorted({x["params"]["fanout"] for x in rows})
    markers = "osD^v<>"
    for system in SYSTEMS:
        for k, f in enumerate(fanouts):
            pts = sorted((x["params"]["n_subs"], x["value"]) for x in rows
                         if x["system"] == system and x["params"]["fanout"] == f)
            if not pts:
                continue
            xs, ys = zip(*pts, strict=True)
            ax.plot(xs, ys, "-" + markers[k % len(markers)], color=_COLOURS[system],
                    label=f"{system}, fan-out {f:g}", markersize=6,
                    alpha=1.0 if k == 0 else 0.7)
            for x, y in pts:
                ax.annotate(f"{y:,.0f}", (x, y), textcoords="offset points", xytext=(4, 4),
                            fontsize=7, color=_COLOURS[system])
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("subscriptions")
    ax.set_ylabel("events/s (median of the paired rounds)")
    ax.set_title("quotes workload, one Kafka, exactly once: dlsroute node vs a quixstreams "
                 "router\n(numpy, every subscription) vs a passthrough", fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


# -- the run -----------------------------------------------------------------------------------
def parse_sizes(text: str, n_events: int | None = None) -> list[Size]:
    """``--sizes``: ``N`` (every preset of N subscriptions) or ``N@F``, comma-separated."""
    out: list[Size] = []
    for tok in (t.strip() for t in text.split(",") if t.strip()):
        try:
            n_text, _, f_text = tok.partition("@")
            n = int(n_text.replace("_", ""))
            f = float(f_text) if f_text else None
        except ValueError:
            raise argparse.ArgumentTypeError(f"a size is N or N@FANOUT, got {tok!r}") from None
        found = [x for x in FULL_SIZES + QUICK_SIZES
                 if x.n_subs == n and (f is None or x.fanout == f)]
        if not found:
            clients = 10_000 if n >= 1_000_000 else 1_000
            found = [Size(n, clients, f if f is not None else 64.0,
                          10_000 if n >= 1_000_000 else 20_000)]
        out += [x for x in found if x not in out]
    if n_events:
        out = [replace(x, n_events=n_events) for x in out]
    return out


def run(sizes: Sequence[Size], s: Settings, bootstrap: str, rec: Recorder,
        keep_topics: bool = False) -> dict[str, Any]:
    """Every size in turn; returns facts for the meta file."""
    import tempfile

    run_prefix = f"nb{uuid.uuid4().hex[:8]}"
    facts: dict[str, Any] = {"topic_prefix": run_prefix,
                             "node_toml": node_toml(bootstrap, f"{run_prefix}.<size>",
                                                    s.node_settings),
                             "node_process": "subprocess: " + " ".join(dlsroute_command())
                             + " node --config <toml> --metrics-port <port>",
                             "peer_app": str(QUIX_APP.relative_to(ROOT))}
    import confluent_kafka

    facts["versions"] = {"confluent_kafka": confluent_kafka.__version__,
                         "librdkafka": confluent_kafka.libversion()[0]}
    peer_py = None
    if s.peer:
        peer_py = peer_python(rec)
        facts["peer_versions"] = peer_versions(peer_py)
        rec.log(f"peer venv {QUIX_VENV}: {facts['peer_versions']}")
    else:
        facts["peer_skipped"] = "no peer (--no-peer or DLS_BENCH_NO_PEER=1)"
        rec.log("the quixstreams router is left out (--no-peer or DLS_BENCH_NO_PEER=1)")
    failed: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="bench-node-") as tmp:
        for size in sizes:
            try:
                run_size(size, s, bootstrap, run_prefix, rec, peer_py, Path(tmp), keep_topics)
            except Exception as exc:  # the other sizes still run; the exit code says it
                failed[size.tag] = f"{type(exc).__name__}: {exc}"
                rec.log(f"!!! [{size.tag}] FAILED: {failed[size.tag]}")
    facts["failed_sizes"] = failed
    return facts


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point (1 when an exactness check or a size failed)."""
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--bootstrap", default=DEFAULT_BOOTSTRAP,
                    help="Kafka bootstrap servers (default $DLS_KAFKA_BOOTSTRAP or "
                         "127.0.0.1:9092)")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON records file")
    ap.add_argument("--quick", action="store_true",
                    help="2,000 subscriptions of 100 clients, fan-out 16, 3,000 events a round")
    ap.add_argument("--sizes", default=None,
                    help="comma-separated N or N@FANOUT (default: 10000,100000,1000000: "
                         "every preset)")
    ap.add_argument("--rounds", type=int, default=None, help="paired rounds (default 3)")
    ap.add_argument("--events", type=int, default=None, help="events per round")
    ap.add_argument("--no-peer", action="store_true",
                    help="leave the quixstreams router out (also DLS_BENCH_NO_PEER=1)")
    ap.add_argument("--node-setting", action="append", default=[], metavar="KEY=VALUE",
                    help="a further line of the node's TOML (VALUE in TOML syntax, e.g. "
                         "route_cache_mb=0); repeatable; default: none")
    ap.add_argument("--no-plot", action="store_true", help="skip the PNG")
    ap.add_argument("--keep-topics", action="store_true",
                    help="leave the run's topics and groups on the broker")
    args = ap.parse_args(argv)
    s = QUICK if args.quick else FULL
    if args.rounds:
        s = replace(s, rounds=args.rounds)
    if args.node_setting:
        pairs = [x.split("=", 1) for x in args.node_setting]
        if any(len(x) != 2 or not x[0].strip() for x in pairs):
            ap.error(f"--node-setting takes KEY=VALUE, got {args.node_setting}")
        s = replace(s, node_settings=tuple((k.strip(), v.strip()) for k, v in pairs))
    if args.no_peer or os.environ.get("DLS_BENCH_NO_PEER") == "1":
        s = replace(s, peer=False)
    if args.sizes:
        sizes = parse_sizes(args.sizes, args.events)
    else:
        sizes = [replace(x, n_events=args.events) if args.events else x
                 for x in (QUICK_SIZES if args.quick else FULL_SIZES)]
    out: Path = args.out
    rec = Recorder()
    started = datetime.now(UTC).isoformat(timespec="seconds")
    t0 = time.perf_counter()
    load0 = os.getloadavg()[0]
    rec.log(f"benchmarks.node on {args.bootstrap}: sizes "
            + ", ".join(f"{x.tag} ({x.n_events:,} events a round)" for x in sizes)
            + f"; load average {load0:.2f}")
    facts = run(sizes, s, args.bootstrap, rec, keep_topics=args.keep_topics)
    wall = time.perf_counter() - t0
    meta = write_results(out, rec.records, benchmark=BENCHMARK, module="benchmarks.node",
                         argv=argv, started=started, wall=wall, quick=args.quick,
                         bootstrap=args.bootstrap, settings=asdict(s),
                         sizes=[asdict(x) for x in sizes],
                         loadavg_1min_start_end=[round(load0, 2),
                                                 round(os.getloadavg()[0], 2)],
                         exact_mismatches=rec.mismatches, **facts)
    rec.log(f"wrote {len(rec.records)} records to {out} and {meta} in {wall:.1f} s")
    if not args.no_plot:
        png = out.with_name(out.stem + ".png")
        rec.log(f"wrote {png}" if plot(rec.records, png)
                else "no plot (matplotlib missing, or nothing measured)")
    if rec.mismatches:
        rec.log(f"!!! {rec.mismatches} EXACTNESS MISMATCHES (see exact_mismatches records)")
    if facts["failed_sizes"]:
        rec.log(f"!!! {len(facts['failed_sizes'])} SIZE(S) FAILED: "
                f"{', '.join(facts['failed_sizes'])}")
    out.with_name(out.stem + ".log").write_text("\n".join(rec.lines) + "\n")
    return 1 if rec.mismatches or facts["failed_sizes"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
