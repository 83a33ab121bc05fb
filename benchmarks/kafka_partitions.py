"""Kafka alone: publish-to-read latency when the same message rate is spread over K topics.

Why the shared delivery topic exists. No DLS code runs here: one producer process sends
``rate`` messages/s (paced every millisecond, ``Client``'s producer settings), each to one
of ``K`` single-partition topics picked at random, each carrying its send time in the
``bench-sent-ns`` header; the receiver process of :mod:`benchmarks.kafka` reads
``watched`` of those topics from their end offsets and records ``now - sent`` of every
message. The same rate with K = 1,000 (a topic per client, as a
node with a thousand clients writes) and K = 4 (a shared delivery topic of four
partitions; here four topics of one partition, the same thing to the broker) shows what
the partition count alone costs.

Run (a Kafka must answer at ``--bootstrap``)::

    .venv/bin/python -m benchmarks.kafka_partitions [--quick] [--bootstrap 127.0.0.1:19092]
        [--out benchmarks/results/kafka_partitions.json] [--rate 27000] [--seconds 10]

Output: records ``{"benchmark", "system", "params", "metric", "value", "unit"}`` with
``latency_p50``, ``latency_p99``, ``latency_max`` (ms) and ``latency_samples`` per topic
count, and ``<out>.meta.json``. Topics are created under a fresh prefix and deleted at the
end. Nothing is asserted; the numbers depend on the machine and what else runs on it (the
meta file records the load average).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import random
import time
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
from confluent_kafka import Producer

from benchmarks.core import write_results
from benchmarks.paced import HEADER_SENT, SENT_STAMP, receiver_proc
from connectors.kafka import admin, ensure_topics, producer_config

BENCHMARK = "kafka_partitions"
DEFAULT_OUT = Path("benchmarks/results/kafka_partitions.json")
DEFAULT_BOOTSTRAP = os.environ.get("DLS_KAFKA_BOOTSTRAP", "127.0.0.1:19092")


def one_run(bootstrap: str, n_topics: int, rate: float, seconds: float, warmup_s: float,
            watched: int, seed: int = 0) -> dict[str, Any]:
    """Spread ``rate`` messages/s over ``n_topics`` fresh topics; latencies of ``watched``."""
    prefix = f"kp{uuid.uuid4().hex[:8]}"
    topics = [f"{prefix}.{i}" for i in range(n_topics)]
    ensure_topics(bootstrap, topics, timeout=300)
    try:
        producer = Producer(producer_config(bootstrap, **{"queue.buffering.max.messages":
                                                          1_000_000}))
        for t in topics:  # first write to each partition outside the measured window
            producer.produce(t, b"")
        producer.flush(60)
        ctx = mp.get_context("spawn")
        ready, stop, out = ctx.Event(), ctx.Event(), ctx.Queue()
        recv = ctx.Process(target=receiver_proc, args=(
            bootstrap, [(t, 0) for t in topics[:watched]], f"kp-{uuid.uuid4().hex}", ready,
            stop, out), daemon=True)
        recv.start()
        if not ready.wait(60):
            recv.kill()
            raise TimeoutError("receiver did not start within 60 s")
        rng = random.Random(seed)
        produce, pick = producer.produce, rng.randrange
        total = warmup_s + seconds
        t0 = time.perf_counter()
        t0_ns = time.time_ns()
        n = 0
        while True:
            elapsed = time.perf_counter() - t0
            if elapsed >= total:
                break
            due = int(elapsed * rate)
            while n < due:
                produce(topics[pick(n_topics)], b"",
                        headers=[(HEADER_SENT, SENT_STAMP.pack(time.time_ns()))])
                n += 1
            producer.poll(0)
            time.sleep(0.001)
        achieved = n / (time.perf_counter() - t0)
        producer.flush(60)
        stop.set()  # the receiver drains until 1.5 s pass without a message
        got = out.get(timeout=120)
        recv.join(30)
    finally:
        client = admin(bootstrap)  # kept alive until the deletions are answered
        for fut in client.delete_topics(topics, operation_timeout=60).values():
            fut.result(timeout=120)
    sent, lat = got["sent_ns"], got["latency_ns"]
    keep = sent >= t0_ns + int(warmup_s * 1e9)
    ms = np.sort(lat[keep] / 1e6)
    return {"latency_ms": ms, "achieved_rate": achieved}


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="2 s per run, 2,000 messages/s")
    ap.add_argument("--bootstrap", default=DEFAULT_BOOTSTRAP)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--rate", type=float, default=None,
                    help="messages/s (default 27,000: dls-alo's deliveries/s at half its "
                         "maximum event rate in benchmarks.kafka)")
    ap.add_argument("--seconds", type=float, default=None, help="measured seconds per run")
    ap.add_argument("--topics", type=int, nargs="+", default=[1000, 4],
                    help="topic counts to compare (default 1000 4)")
    args = ap.parse_args(argv)
    rate = args.rate or (2_000.0 if args.quick else 27_000.0)
    seconds = args.seconds or (2.0 if args.quick else 10.0)
    warmup = 0.5 if args.quick else 1.0
    watched = 10
    started = datetime.now(UTC).isoformat(timespec="seconds")
    load0 = os.getloadavg()[0]
    t0 = time.perf_counter()
    records: list[dict[str, Any]] = []
    for k in args.topics:
        r = one_run(args.bootstrap, k, rate, seconds, warmup, min(watched, k))
        ms = r["latency_ms"]
        params = {"topics": k, "partitions_per_topic": 1, "rate_messages_s": rate,
                  "achieved_rate": round(r["achieved_rate"], 1), "seconds": seconds,
                  "watched_topics": min(watched, k), "producer": "producer_config defaults",
                  "receiver": "read_committed consumer, default fetch settings"}
        stats = {"latency_p50": float(np.percentile(ms, 50)) if len(ms) else float("nan"),
                 "latency_p99": float(np.percentile(ms, 99)) if len(ms) else float("nan"),
                 "latency_max": float(ms[-1]) if len(ms) else float("nan")}
        for metric, value in stats.items():
            records.append({"benchmark": BENCHMARK, "system": f"{k}-topics", "params": params,
                            "metric": metric, "value": value, "unit": "ms"})
        records.append({"benchmark": BENCHMARK, "system": f"{k}-topics", "params": params,
                        "metric": "latency_samples", "value": float(len(ms)),
                        "unit": "count"})
        print(f"{k:>5} topics at {rate:.0f} msgs/s: p50 {stats['latency_p50']:.1f} ms, "
              f"p99 {stats['latency_p99']:.1f} ms, max {stats['latency_max']:.1f} ms "
              f"({len(ms)} samples)", flush=True)
    meta = write_results(args.out, records, benchmark=BENCHMARK,
                         module="benchmarks.kafka_partitions", argv=argv, started=started,
                         wall=time.perf_counter() - t0, quick=args.quick,
                         bootstrap=args.bootstrap,
                         loadavg_1min_start_end=[round(load0, 2),
                                                 round(os.getloadavg()[0], 2)])
    print(f"wrote {len(records)} records to {args.out} and {meta}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
