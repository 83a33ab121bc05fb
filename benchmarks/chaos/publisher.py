"""One publisher of the fault harness, in a process of its own.

Publishes random events at a steady rate through the SDK (:meth:`Client.publish`), each
with a unique id ``<name>-<n>``, and records in ``<run>/publishers/<name>.jsonl``:

- ``pub``: id, attributes, ``t0`` (just before ``publish()`` was called) and ``t1`` (just
  after it returned);
- ``dr``: the producer's final delivery report for that id (``ok`` true or false; while
  the broker is down librdkafka retries, so a report comes once it is back or the
  message's timeout has passed).

Only events with an ``ok`` report count as published. It stops when the harness creates
``<run>/stop-publish`` (or on SIGTERM), then waits for the outstanding reports.
"""

from __future__ import annotations

import json
import random
import signal
import sys
import threading
import time
from typing import Any

from benchmarks.chaos.common import (
    JsonLines,
    RawWriter,
    now,
    process_args,
    random_event,
    stop_requested,
)
from connectors.client import Client
from connectors.serde import decode_raw_event

#: Seconds the last flush waits for delivery reports (librdkafka's message timeout is
#: longer; what is still unreported then is recorded as such).
FINAL_FLUSH_S = 120.0


def main(argv: list[str] | None = None) -> int:
    a = process_args(__doc__, "--name", argv, {
        "--rate": {"type": float, "default": 20.0, "help": "events per second"},
        "--raw": {"action": "store_true",
                  "help": "publish to the raw topic (the Spark job maps the events)"}})
    out = JsonLines(a.run_dir / "publishers" / f"{a.name}.jsonl")

    def on_delivery(err: Any, msg: Any) -> None:
        value = msg.value()  # a report carries no headers
        eid = json.loads(value)["id"] if a.raw else decode_raw_event(value)["id"]
        if err is None:
            out.write(k="dr", id=eid, ok=True, t=now(), p=msg.partition(), o=msg.offset())
        else:
            out.write(k="dr", id=eid, ok=False, t=now(), err=str(err)[:300])

    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    if a.raw:  # raw JSON records, mapped by the Spark job
        raw = RawWriter(a.bootstrap, a.prefix, a.node, a.name, on_delivery=on_delivery)
        publish: Any = lambda attrs, event_id: raw.event(event_id, attrs)  # noqa: E731
        producer: Any = raw.producer
    else:
        client = Client(a.bootstrap, a.node, a.name, a.space, topic_prefix=a.prefix,
                        on_delivery=on_delivery, shards=a.shards)
        publish, producer = client.publish, client._producer
    rng = random.Random(f"{a.seed}:{a.name}")
    out.write(k="start", t=now(), rate=a.rate)
    period, n = 1.0 / a.rate, 0
    due = time.monotonic()
    while not stopping.is_set() and not stop_requested(a.run_dir, "stop-publish"):
        due += period
        lag = due - time.monotonic()
        if lag > 0:
            time.sleep(lag)
        elif lag < -1.0:
            due = time.monotonic()  # fell behind (a full queue, a pause): no burst after it
        eid, attrs = f"{a.name}-{n}", random_event(rng)
        n += 1
        t0 = now()
        try:
            publish(attrs, event_id=eid)
        except BufferError as exc:  # librdkafka's queue is full: this event is not sent
            out.write(k="pub_fail", id=eid, t0=t0, t=now(), err=repr(exc)[:200])
            producer.poll(0.5)
            continue
        out.write(k="pub", id=eid, a=attrs, t0=t0, t1=now())
    left = producer.flush(FINAL_FLUSH_S)
    out.write(k="end", t=now(), published=n, unreported=left)
    return 0


if __name__ == "__main__":
    sys.exit(main())
