"""One client of the fault harness, in a process of its own (the harness may SIGKILL it).

It changes its subscriptions every few seconds through the SDK (:class:`Client`) and
records them in ``<run>/clients/<client>.subs.jsonl``: ``sub_call`` (id, predicate, time
the call began), ``sub_ack`` (time ``subscribe()`` RETURNED: the acknowledgement) or
``sub_fail``, ``unsub_call`` (time ``unsubscribe()`` was CALLED) and ``unsub_done``.

With ``--raw`` (the Spark scenario) it writes raw JSON records for the mapping job instead,
and a subscription counts from the same moment as through the SDK: when its node's
network-wide acknowledgement (a ``dls-ack`` message on the client's delivery partition,
read as ``subscribe(wait=...)`` reads it) has come, not when Kafka took the raw record
(the job and the nodes apply it later).

Deliveries are recorded apart from the SDK's filtering, by a raw ``read_committed``
consumer of the client's delivery partition that joins no group and commits nothing:
every (event id, partition, offset) it reads goes to ``<client>.deliv.jsonl``, so repeats
are seen. A restarted process reads both files back: it resumes the raw consumer after
the last recorded offset (nothing is recorded twice by the harness itself) and keeps
churning the subscriptions its predecessor left live (unsubscribing them with
``known_only=False``), as a user's restarted program would.
"""

from __future__ import annotations

import argparse
import inspect
import logging
import os
import random
import signal
import sys
import threading
import time
import uuid
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from benchmarks.chaos.common import (
    JsonLines,
    RawWriter,
    now,
    process_args,
    random_where,
    read_jsonl,
    stop_requested,
)
from connectors.client import Client, DeliveryFailedError
from connectors.client_state import AckWaiter
from connectors.kafka import consumer_config, ensure_partitioned_topic, ensure_topics
from connectors.serde import decode_raw_event
from connectors.topics import (
    HEADER_ACK,
    HEADER_CLIENTS,
    HEADER_EVENT_ID,
    Topics,
    delivery_partition,
    names_client,
)

log = logging.getLogger("chaos.client")

#: Seconds ``subscribe(wait=...)`` may wait for its node's acknowledgement, when the SDK
#: has that parameter.
ACK_TIMEOUT_S = 30.0
#: The same through the raw topics: the Spark job may be restarting (a minute or more on
#: a loaded machine) when the raw record is written.
RAW_ACK_TIMEOUT_S = 180.0


def subscribe_kwargs() -> dict[str, Any]:
    """``wait=`` for :meth:`Client.subscribe` if the SDK has it (a timeout in seconds)."""
    param = inspect.signature(Client.subscribe).parameters.get("wait")
    if param is None:
        return {}
    return {"wait": ACK_TIMEOUT_S}


def live_from_history(recs: list[dict[str, Any]]) -> list[str]:
    """Ids subscribed (acknowledged or not) and not yet unsubscribed, in order."""
    live: dict[str, None] = {}
    for r in recs:
        if r.get("k") == "sub_call":
            live[r["sid"]] = None
        elif r.get("k") == "unsub_call":
            live.pop(r["sid"], None)
    return list(live)


def next_offsets(recs: list[dict[str, Any]]) -> dict[int, int]:
    """Per partition, the offset after the last recorded delivery."""
    out: dict[int, int] = {}
    for r in recs:
        out[r["p"]] = max(out.get(r["p"], 0), r["o"] + 1)
    return out


def delivery_tp(a: argparse.Namespace) -> TopicPartition:
    """The client's delivery partition (its topic created if need be)."""
    topics = Topics(a.prefix)
    if a.shared:
        ensure_partitioned_topic(a.bootstrap, topics.shared_deliver, a.shared)
        return TopicPartition(topics.shared_deliver, delivery_partition(a.client, a.shared))
    topic = topics.deliver(a.client)
    ensure_topics(a.bootstrap, [topic])
    return TopicPartition(topic, 0)


class Recorder(threading.Thread):
    """Reads the client's delivery partition raw and records every event copy in it."""

    def __init__(self, args: argparse.Namespace, out: JsonLines, start_at: dict[int, int]):
        super().__init__(name="recorder", daemon=True)
        self.args, self.out, self.start_at = args, out, start_at
        self.stop = threading.Event()
        self.ready = threading.Event()

    def run(self) -> None:
        a = self.args
        where = delivery_tp(a)
        where.offset = self.start_at.get(where.partition, OFFSET_BEGINNING)
        consumer = Consumer(consumer_config(
            a.bootstrap, f"{a.prefix}-chaos-recorder-{a.client}", log_level=3))
        consumer.assign([where])
        self.ready.set()
        try:
            while not self.stop.is_set():
                for msg in consumer.consume(500, 0.5):
                    if msg.error() is None:
                        self._record(msg)
        finally:
            consumer.close()

    def _record(self, msg: Any) -> None:
        headers = dict(msg.headers() or ())
        if HEADER_ACK in headers or not msg.value():
            return  # an acknowledgement of a subscription, no event
        if self.args.shared and not names_client(headers.get(HEADER_CLIENTS),
                                                 self.args.client):
            return  # another client's event in the same partition
        eid = headers[HEADER_EVENT_ID].decode() if HEADER_EVENT_ID in headers else (
            decode_raw_event(msg.value())["id"])
        self.out.write(id=eid, p=msg.partition(), o=msg.offset(), t=now())


class Churn:
    """Subscribes and unsubscribes at random moments; records each call."""

    def __init__(self, args: argparse.Namespace, out: JsonLines, live: list[str],
                 rng: random.Random):
        self.args, self.out, self.live, self.rng = args, out, live, rng
        self.wait = subscribe_kwargs()
        self.client: Client | None = None
        self.raw: RawWriter | None = None
        if args.raw:  # through the raw topics and the Spark job
            self.raw = RawWriter(args.bootstrap, args.prefix, args.node, args.client)
        else:
            self.client = Client(args.bootstrap, args.node, args.client, args.space,
                                 topic_prefix=args.prefix,
                                 shared_delivery_partitions=args.shared, shards=args.shards)

    def close(self) -> None:
        if self.client is not None:
            try:
                self.client.close()
            except DeliveryFailedError as exc:  # each was logged and written when it came
                self.out.write(k="close_fail", t=now(), err=repr(exc)[:300])
        if self.raw is not None:
            self.raw.flush(10)

    def subscribe(self) -> None:
        sid = f"{self.args.client}-{uuid.uuid4().hex[:10]}"
        where = random_where(self.rng)
        self.out.write(k="sub_call", sid=sid, where=where, t=now())
        self.live.append(sid)
        try:
            if self.raw is not None:
                self._raw_subscribe(sid, where)
            else:
                assert self.client is not None  # noqa: S101
                self.client.subscribe(where, sub_id=sid, **self.wait)
        except Exception as exc:  # the broker may be down: the outcome is unknown
            self.out.write(k="sub_fail", sid=sid, t=now(), err=repr(exc)[:300])
            return
        self.out.write(k="sub_ack", sid=sid, t=now())

    def _raw_subscribe(self, sid: str, where: Any) -> None:
        """Write the raw record, then wait for the node's acknowledgement, as the SDK does."""
        assert self.raw is not None  # noqa: S101
        a = self.args
        waiter = AckWaiter(a.bootstrap, f"{a.prefix}-chaos-ack-{a.client}", delivery_tp(a), {})
        try:
            self.raw.subscribe(sid, where)
            if not waiter.wait(sid, RAW_ACK_TIMEOUT_S, self._mine):
                raise TimeoutError(f"subscription {sid}: no acknowledgement within "
                                   f"{RAW_ACK_TIMEOUT_S} s")
        finally:
            waiter.close()

    def _mine(self, msg: Any) -> bool:
        """An acknowledgement for this client (the shared delivery topic names its clients)."""
        return not self.args.shared or names_client(
            dict(msg.headers() or ()).get(HEADER_CLIENTS), self.args.client)

    def unsubscribe(self) -> None:
        sid = self.live.pop(self.rng.randrange(len(self.live)))
        self.out.write(k="unsub_call", sid=sid, t=now())
        try:
            if self.raw is not None:
                self.raw.unsubscribe(sid)
            else:
                assert self.client is not None  # noqa: S101
                self.client.unsubscribe(sid, known_only=False)
        except Exception as exc:
            self.out.write(k="unsub_fail", sid=sid, t=now(), err=repr(exc)[:300])
            return
        self.out.write(k="unsub_done", sid=sid, t=now())

    def step(self) -> None:
        a = self.args
        if not self.live or (len(self.live) < a.max_subs and self.rng.random() < 0.55):
            self.subscribe()
        else:
            self.unsubscribe()


def main(argv: list[str] | None = None) -> int:
    a = process_args(__doc__, "--client", argv, {
        "--shared": {"type": int, "default": 0, "help": "shared_delivery_partitions"},
        "--initial-subs": {"type": int, "default": 2},
        "--max-subs": {"type": int, "default": 3},
        "--churn-min": {"type": float, "default": 2.0},
        "--churn-max": {"type": float, "default": 5.0},
        "--no-churn": {"action": "store_true",
                       "help": "keep the initial subscriptions for the whole run"},
        "--raw": {"action": "store_true",
                  "help": "(un)subscribe through the raw topics (the Spark job maps them)"}})
    base = a.run_dir / "clients"
    subs_path, deliv_path = base / f"{a.client}.subs.jsonl", base / f"{a.client}.deliv.jsonl"
    history = read_jsonl(subs_path)
    starts = sum(1 for r in history if r.get("k") == "start")
    live = live_from_history(history)
    subs = JsonLines(subs_path)
    subs.write(k="start", t=now(), restart=starts > 0, live=live, pid=os.getpid())
    recorder = Recorder(a, JsonLines(deliv_path), next_offsets(read_jsonl(deliv_path)))
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    recorder.start()
    recorder.ready.wait(60)
    rng = random.Random(f"{a.seed}:{a.client}:{starts}")
    churn = Churn(a, subs, live, rng)
    if not starts:
        for _ in range(a.initial_subs):
            churn.subscribe()
    subs.write(k="ready", t=now())
    while not (a.no_churn or stopping.is_set() or stop_requested(a.run_dir, "stop-churn")):
        until = time.monotonic() + rng.uniform(a.churn_min, a.churn_max)
        while time.monotonic() < until and not stopping.is_set():
            time.sleep(0.1)
        if stopping.is_set() or stop_requested(a.run_dir, "stop-churn"):
            break
        churn.step()
    stopping.wait()  # deliveries are recorded until the harness ends the run
    recorder.stop.set()
    recorder.join(10)
    subs.write(k="end", t=now())
    churn.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
