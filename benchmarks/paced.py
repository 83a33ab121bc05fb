"""The paced publisher and the receiver of a latency run, each in a process of its own.

:func:`benchmarks.kafka.measure_latency` starts both with ``spawn`` for every run: a child
imports the module its target lives in, so they live here, with the light imports they
need (about 0.3 s), rather than in :mod:`benchmarks.kafka`, whose imports (the node, the
core, numba's kernels) took 0.9 s of each run's start.
"""

from __future__ import annotations

import gc
import struct
import time
from typing import Any

import numpy as np
from confluent_kafka import OFFSET_END, Consumer, Producer, TopicPartition

from benchmarks.workload import attr_names
from connectors.kafka import consume_batch, consumer_config, producer_config
from connectors.serde import encode_raw_event
from connectors.topics import HEADER_EVENT_ID, HEADER_LABEL, HEADER_ORIGIN, encode_label

__all__ = ["HEADER_SENT", "NODE", "PUBLISHER", "SENT_STAMP", "publisher_proc", "receiver_proc"]

NODE = "A"
PUBLISHER = "pub"
HEADER_SENT = "bench-sent-ns"
SENT_STAMP = struct.Struct(">q")  # the HEADER_SENT value: ns since the epoch, big-endian


def publisher_proc(bootstrap: str, topic: str, events: np.ndarray, labels: np.ndarray,
                    rate: float, seconds: float, payload_bytes: int, tag: str,
                    result: Any, go: Any) -> None:
    """Send events at ``rate``/s for ``seconds``, each with its send time in a header.

    Every value and header but the send time is encoded before the clock starts: on a
    2-core machine the publisher's Avro encoding (several µs an event) would otherwise take
    CPU from the forwarder under test and from the broker. The clock starts once ``go`` (an
    event) is set: the caller starts this process while the receiver starts.
    """
    producer = Producer(producer_config(bootstrap))
    names = attr_names(events.shape[1])
    rows, labs = events.tolist(), labels.tolist()
    payload = bytes(payload_bytes)
    origin = f"{NODE}/{PUBLISHER}".encode()
    n_max = int(rate * seconds) + 1
    values: list[bytes] = []
    fixed: list[tuple[tuple[str, bytes], ...]] = []
    for k in range(n_max):
        i = k % len(rows)
        eid = f"{tag}-{k}"
        values.append(encode_raw_event(NODE, PUBLISHER, eid,
                                       dict(zip(names, rows[i], strict=True)), payload))
        fixed.append(((HEADER_LABEL, encode_label(labs[i])), (HEADER_ORIGIN, origin),
                      (HEADER_EVENT_ID, eid.encode())))
    produce, poll, pack, now_ns = producer.produce, producer.poll, SENT_STAMP.pack, time.time_ns
    # Out of the collector's sight: otherwise each full collection walks the encoded
    # events (over a million objects at 45,000 events/s), stalling the publisher, which
    # then sends the overdue events in one burst.
    gc.collect()
    gc.freeze()
    if not go.wait(300):
        raise TimeoutError("latency publisher: no go within 300 s")
    sent = 0
    t0_ns = time.time_ns()
    t0 = time.perf_counter()
    while True:
        elapsed = time.perf_counter() - t0
        if elapsed >= seconds:
            break
        due = min(n_max, int(elapsed * rate))
        while sent < due:
            produce(topic, values[sent], headers=[*fixed[sent], (HEADER_SENT, pack(now_ns()))])
            sent += 1
        poll(0)
        time.sleep(0.001)
    producer.flush(30)
    result.put({"sent": sent, "seconds": time.perf_counter() - t0, "t0_ns": t0_ns})


def receiver_proc(bootstrap: str, topics: list[tuple[str, int]], group: str, ready: Any,
                   stop: Any, result: Any, quiet_s: float = 1.5) -> None:
    """Read ``(topic, partition)`` pairs from their end offsets; put the latencies.

    Once ``stop`` is set, ends after ``quiet_s`` without a message.

    Per delivery: its send time, its latency and the part of it up to the forwarder's
    produce (the output message's timestamp, set when the forwarder produced it).
    """
    consumer = Consumer(consumer_config(bootstrap, group))
    parts = []
    for t, part in topics:
        _, high = consumer.get_watermark_offsets(TopicPartition(t, part), timeout=10)
        parts.append(TopicPartition(t, part, high if high >= 0 else OFFSET_END))
    consumer.assign(parts)
    consume_batch(consumer, 1, 0.2)  # first fetch: the assignment is live
    ready.set()
    sent: list[int] = []
    lat: list[int] = []
    fwd: list[int] = []
    quiet_since = None
    while True:
        # consume(n, timeout) returns only when n messages are there or the timeout ends:
        # wait for one message with poll, then take what else is there without waiting.
        first = consumer.poll(0.05)
        now = time.time_ns()
        msgs = [] if first is None or first.error() else [first]
        if first is not None:
            msgs += consume_batch(consumer, 1000, 0)
        for msg in msgs:
            for k, v in msg.headers() or ():
                if k == HEADER_SENT:
                    t = SENT_STAMP.unpack(v)[0]
                    sent.append(t)
                    lat.append(now - t)
                    fwd.append(msg.timestamp()[1] * 1_000_000 - t)
                    break
        if stop.is_set():
            if msgs:
                quiet_since = None
            elif quiet_since is None:
                quiet_since = time.monotonic()
            elif time.monotonic() - quiet_since > quiet_s:
                break
    consumer.close()
    result.put({"sent_ns": np.array(sent, dtype=np.int64),
                "latency_ns": np.array(lat, dtype=np.int64),
                "to_forwarder_ns": np.array(fwd, dtype=np.int64)})
