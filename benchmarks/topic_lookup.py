"""What a delivery costs the node's producer with a topic per client, against one shared topic.

Run (no Kafka needed: nothing is sent)::

    .venv/bin/python -m benchmarks.topic_lookup [--quick] [--no-plot]
        [--out benchmarks/results/topic_lookup.json]

A node with a delivery topic per client (the default layout) calls ``Producer.produce``
once per delivery, naming the client's topic. librdkafka finds the topic's handle by
name in a list of every topic the producer has written (``rd_kafka_topic_find``, a linear
scan from the first topic made; see librdkafka issue 3098), so a call's cost grows with
the number of clients, and most with the clients that subscribed last. On the shared
delivery topic (``shared_delivery_partitions``) every delivery names the same topic.

One producer per measurement, pointed at a loopback port nobody answers: messages are
queued in the producer and purged after each timed loop, so the time is the call alone,
which is what the node's loop pays (the sending is librdkafka's own threads'). Each
producer first writes one message to each of its ``N`` topics (``Topics.deliver`` of
``c0 .. c<N-1>``, made in that order, as a node makes them when clients subscribe), then
``n_messages`` calls are timed, best of ``repeats``, with the node's message shape: a
100-byte value, the three event headers (label, origin, id) and a timestamp.

Systems and metrics (``produce_time``, µs per call):

* ``topic-per-client`` with ``order``:
  ``round-robin`` (every client in turn: an event delivered to everyone),
  ``newest`` (every call to the topic made last: the latest client's deliveries),
  ``oldest`` (every call to the topic made first);
* ``shared-topic``: the same calls to one topic of ``partitions`` partitions (the
  partition named, as the node names it), from a producer that made eight other topics
  first (a node's dead-letter, link and forward topics), measured at each ``N`` right
  after the others, so that drift of the shared machine hits both alike;
* ``ratio``: ``topic-per-client`` round-robin / ``shared-topic`` at the same ``N``.

Output: ``topic_lookup.json`` (records ``{"benchmark", "system", "params", "metric",
"value", "unit"}``), ``topic_lookup.meta.json`` and ``topic_lookup.png`` (µs per call
against N, log-log) when matplotlib imports.
"""

from __future__ import annotations

import argparse
import gc
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

from benchmarks.core import write_results
from connectors.topics import HEADER_EVENT_ID, HEADER_LABEL, HEADER_ORIGIN, Topics

BENCHMARK = "topic_lookup"
DEFAULT_OUT = Path(__file__).parent / "results" / "topic_lookup.json"
NOBODY = "127.0.0.1:1"  # loopback; nothing listens, nothing is sent
#: Topics a node's producer writes besides deliveries (dead letters, links, forwards...):
#: made before the shared delivery topic, as a node makes them at start.
NODE_TOPICS = tuple(f"dls.node.A.other-{i}" for i in range(8))


@dataclass(frozen=True)
class LookupSettings:
    """Topic counts, calls per timed loop, repeats and the shared topic's partitions."""

    topic_counts: tuple[int, ...] = (1, 10, 100, 300, 1_000, 3_000, 10_000)
    n_messages: int = 100_000
    repeats: int = 3
    partitions: int = 16
    value_bytes: int = 100


FULL = LookupSettings()
QUICK = LookupSettings(topic_counts=(1, 100, 1_000), n_messages=5_000, repeats=2)


def _producer(topics: Sequence[str], value: bytes) -> Producer:
    """A producer that wrote once to each of ``topics``, in order (its handles made)."""
    producer = Producer({"bootstrap.servers": NOBODY, "log_level": 0,
                         "queue.buffering.max.messages": 10_000_000,
                         "queue.buffering.max.kbytes": 4_000_000})
    for name in topics:
        producer.produce(name, value)
    producer.purge()
    return producer


def _timed(producer: Producer, calls: Sequence[tuple[str, int]], value: bytes,
           headers: list[tuple[str, bytes]], repeats: int) -> float:
    """Best time of one ``produce`` per ``(topic, partition)`` of ``calls``, µs per call."""
    produce = producer.produce
    best = float("inf")
    for _ in range(repeats):
        gc.collect()
        t0 = time.perf_counter()
        for topic, part in calls:
            produce(topic, value, headers=headers, partition=part, timestamp=1)
        best = min(best, time.perf_counter() - t0)
        producer.purge()
        producer.poll(0)
    return best / len(calls) * 1e6


def run(settings: LookupSettings = FULL, log: Callable[[str], None] = print
        ) -> list[dict[str, Any]]:
    """Measure every layout at every topic count; return the records."""
    s = settings
    records: list[dict[str, Any]] = []
    topics = Topics("dls")
    value = bytes(s.value_bytes)
    headers = [(HEADER_LABEL, bytes(8)), (HEADER_ORIGIN, b"A/pub"), (HEADER_EVENT_ID, b"e1")]

    def add(system: str, params: dict[str, Any], metric: str, val: float, unit: str) -> None:
        records.append({"benchmark": BENCHMARK, "system": system, "params": dict(params),
                        "metric": metric, "value": float(val), "unit": unit})

    log(f"{'topics':>7} {'round-robin':>12} {'newest':>8} {'oldest':>8} {'shared':>8} "
        f"{'ratio':>7}  (µs per produce call)")
    for n in s.topic_counts:
        params = {"topics": n, "n_messages": s.n_messages, "repeats": s.repeats,
                  "value_bytes": s.value_bytes, "headers": len(headers),
                  "timing": "best of repeats; messages queued, never sent, purged after"}
        names = [topics.deliver(f"c{i}") for i in range(n)]
        producer = _producer(names, value)  # the handles of a node of n clients, oldest first
        times = {
            "round-robin": _timed(producer, [(names[i % n], -1) for i in range(s.n_messages)],
                                  value, headers, s.repeats),
            "newest": _timed(producer, [(names[-1], -1)] * s.n_messages, value, headers,
                             s.repeats),
            "oldest": _timed(producer, [(names[0], -1)] * s.n_messages, value, headers,
                             s.repeats)}
        # a shared-topic node's producer: a handful of topics
        producer = _producer((*NODE_TOPICS, topics.shared_deliver), value)
        shared = _timed(producer, [(topics.shared_deliver, i % s.partitions)
                                   for i in range(s.n_messages)], value, headers, s.repeats)
        del producer
        for order, t in times.items():
            add("topic-per-client", {**params, "order": order}, "produce_time", t, "us/call")
        add("shared-topic", {**params, "partitions": s.partitions}, "produce_time", shared,
            "us/call")
        ratio = times["round-robin"] / shared
        add("ratio", {**params, "of": "topic-per-client round-robin / shared-topic"},
            "produce_time_ratio", ratio, "x")
        log(f"{n:>7} {times['round-robin']:>12.2f} {times['newest']:>8.2f} "
            f"{times['oldest']:>8.2f} {shared:>8.2f} {ratio:>7.1f}")
    return records


def plot(records: list[dict[str, Any]], path: Path) -> bool:
    """µs per produce call against the number of topics, log-log; False without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(7, 4.5))
    series: dict[str, list[tuple[int, float]]] = {}
    for r in records:
        if r["metric"] != "produce_time":
            continue
        name = (f"topic per client, {r['params']['order']}" if r["system"] == "topic-per-client"
                else "one shared topic")
        series.setdefault(name, []).append((r["params"]["topics"], r["value"]))
    for name, pts in series.items():
        xs, ys = zip(*sorted(pts), strict=True)
        ax.plot(xs, ys, marker="o", label=name, linestyle="--" if "shared" in name else "-")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("delivery topics written by the producer (clients)")
    ax.set_ylabel("µs per Producer.produce call")
    ax.set_title("librdkafka finds a topic by name in a list")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="three small counts (seconds)")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON records file")
    ap.add_argument("--no-plot", action="store_true", help="skip the PNG")
    args = ap.parse_args(argv)
    settings = QUICK if args.quick else FULL
    started = datetime.now(UTC).isoformat(timespec="seconds")
    t0 = time.perf_counter()
    records = run(settings)
    wall = time.perf_counter() - t0
    out: Path = args.out
    meta_path = write_results(out, records, benchmark=BENCHMARK,
                              module="benchmarks.topic_lookup", argv=argv, started=started,
                              wall=wall, quick=args.quick,
                              load_average_1_5_15=list(os.getloadavg()),
                              settings=asdict(settings))
    print(f"wrote {len(records)} records to {out} and {meta_path} in {wall:.1f} s")
    if not args.no_plot and plot(records, out.with_suffix(".png")):
        print(f"wrote {out.with_suffix('.png')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
