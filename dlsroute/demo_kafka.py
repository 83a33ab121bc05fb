"""The demo on a real Kafka: three node services A-B-C routing synthetic stock quotes.

The same scene as :mod:`dlsroute.demo`, but every message goes through Kafka: the local
broker of ``docker/kafka/kafka.sh`` (started here unless it already runs, and then stopped
at the end), three :class:`~broker_node.service.NodeService` on threads, the dozen
clients of :data:`~dlsroute.demo.SUBSCRIPTIONS` on the client SDK, each consuming its
delivery topic on its own thread with exact filtering, and one publisher per node
streaming quotes at a steady rate. Half-way, ``A:apple-desk`` changes its subscription.

An in-process :class:`~broker_node.overlay.Overlay` applies the same subscriptions and
quotes: it tells when the real nodes have settled, and its counts are printed beside the
real ones. Every quote is also checked against a brute-force matcher: each client must
keep exactly the quotes its subscription matched when they were published.

Each run uses a fresh topic prefix, so runs never mix, and deletes its topics at the end.
"""

from __future__ import annotations

import concurrent.futures
import gc
import json
import queue
import random
import sys
import tempfile
import threading
import time
import traceback
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from confluent_kafka import Producer

from broker_node.overlay import Overlay, Topology
from connectors.client import Client, Delivery
from connectors.kafka import admin, ensure_topics, producer_config, wait_for_broker
from connectors.kafka_config import load_kafka_config
from connectors.local_kafka import (
    LocalKafkaError,
    ensure_local_kafka,
    port_answers,
    stop_local_kafka,
)
from dls.predicates import Subscription
from dls.space import ContentSpace
from dlsroute.demo import DEMO_SPACE, SUBSCRIPTIONS, Quotes
from dlsroute.exceptions import DemoError
from dlsroute.tools.local_network import LocalNetwork

__all__ = ["run_kafka_demo"]

TOPOLOGY: dict[str, Any] = {"nodes": ["A", "B", "C"], "links": [["A", "B"], ["B", "C"]]}
PUBLISHERS = [("A", "feed-a"), ("B", "feed-b"), ("C", "feed-c")]
SWITCH = ("A", "apple-desk", "sub-0", "sub-0b", "sym = AAPL and change < 0")
SETTLE_TIMEOUT_S = 60.0
DRAIN_TIMEOUT_S = 60.0


class _Receiver:
    """One subscribing client; its thread consumes deliveries and runs its commands."""

    def __init__(self, client: Client):
        self.client = client
        self.kept: list[str] = []
        self.cell_fp = 0
        self.bloom_fp = 0
        self.error: BaseException | None = None
        self._labels: dict[str, set[int]] = {}
        self._commands: queue.SimpleQueue[
            tuple[Callable[[Client], Any], concurrent.futures.Future[Any]]] = \
            queue.SimpleQueue()
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name=f"client-{client.client_id}",
                                       daemon=True)

    def submit(self, fn: Callable[[Client], Any]) -> concurrent.futures.Future[Any]:
        """Have ``fn(client)`` run on the receiver's thread (the client is not thread-safe)."""
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self._commands.put((fn, future))
        return future

    def call(self, fn: Callable[[Client], Any], timeout: float = 30.0) -> Any:
        """Run ``fn(client)`` on the receiver's thread and return its result."""
        return self.submit(fn).result(timeout)

    def _run_commands(self) -> None:
        while not self._commands.empty():
            fn, future = self._commands.get()
            try:
                future.set_result(fn(self.client))
            except BaseException as exc:
                future.set_exception(exc)

    def _take(self, d: Delivery) -> None:
        if d.subscriptions:
            self.kept.append(d.event_id)
            return
        # A false positive: a cell one if the event's cell is among the subscription's
        # labels (quantisation), a Bloom one otherwise (the node's client filter erred).
        cells: set[int] = set()
        for sid, sub in self.client.subscriptions.items():
            if sid not in self._labels:
                self._labels[sid] = set(sub.labels().tolist())
            cells |= self._labels[sid]
        if d.label in cells:
            self.cell_fp += 1
        else:
            self.bloom_fp += 1

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                self._run_commands()
                for d in self.client.deliveries(timeout=0.1, max_idle=0.1,
                                                include_false_positives=True):
                    self._take(d)
                    self._run_commands()
                    if self._stop.is_set():
                        break
        except BaseException as exc:  # reported by the demo's main thread
            self.error = exc
        finally:
            self._run_commands()

    def start(self) -> None:
        """Start consuming."""
        self.thread.start()

    def stop(self) -> None:
        """Stop consuming (after the delivery in hand) and wait for the thread."""
        self._stop.set()
        self.thread.join(30)


def _subscribe(where: str, sub_id: str) -> Callable[[Client], str]:
    """A command for a :class:`_Receiver`: subscribe its client."""
    return lambda client: client.subscribe(where, sub_id=sub_id)


class _Demo:
    """One run: nodes, clients, the quote stream, the summary."""

    def __init__(self, bootstrap: str, prefix: str, space_path: Path, seconds: float,
                 seed: int, rate: float, out: TextIO, kafka_config: Path | None = None):
        self.bootstrap, self.prefix, self.space_path = bootstrap, prefix, space_path
        self.kafka_config = kafka_config
        self.kafka: dict[str, Any] = load_kafka_config(kafka_config)
        self.seconds, self.rate, self.out = seconds, rate, out
        self.rng = random.Random(seed)  # noqa: S311 - a demo workload, not cryptography
        self.space = ContentSpace.from_spec(DEMO_SPACE)
        self.topology = Topology.from_spec(TOPOLOGY)
        self.overlay = Overlay(self.space, self.topology)
        self.tty = bool(getattr(out, "isatty", lambda: False)())
        self.nodes: LocalNetwork | None = None
        self.receivers: dict[tuple[str, str], _Receiver] = {}
        self.publishers: dict[str, Client] = {}
        # Brute force: every client's live subscription, and the quotes it must keep.
        self.live: dict[tuple[str, str], Subscription] = {}
        self.expected: dict[tuple[str, str], set[str]] = {}
        self.subscription_labels = 0
        self.sent = 0
        self.paused = 0.0

    # -- helpers ----------------------------------------------------------------------------
    def say(self, line: str) -> None:
        """Print one line (over the progress line on a terminal)."""
        print(f"\r{line:<72}" if self.tty else line, file=self.out, flush=True)

    def client(self, node: str, name: str) -> Client:
        """An SDK client of this run (own topic prefix and consumer group)."""
        return Client(self.bootstrap, node, name, self.space, topic_prefix=self.prefix,
                      group_id=f"{self.prefix}-{name}", **self.kafka)

    def net(self) -> LocalNetwork:
        """The running nodes (started by :meth:`setup`)."""
        if self.nodes is None:
            raise DemoError("the nodes are not started yet", field="nodes", value=None)
        return self.nodes

    def check(self) -> None:
        """Raise if a node or a client thread has failed."""
        self.net().check()
        for (node, name), r in self.receivers.items():
            if r.error is not None:
                raise DemoError(f"client {node}:{name} failed: {r.error!r}",
                                field="client", value=f"{node}:{name}") from r.error

    def wait_settled(self, timeout: float = SETTLE_TIMEOUT_S) -> float:
        """Wait until the nodes' state equals the in-process overlay's; returns seconds."""
        nodes = self.net()
        t0 = time.monotonic()
        while not nodes.settled(self.overlay):
            self.check()
            if time.monotonic() - t0 > timeout:
                raise DemoError(f"the nodes did not settle within {timeout:g} s",
                                field="timeout", value=timeout)
            time.sleep(0.02)
        return time.monotonic() - t0

    def wait_drained(self, timeout: float = DRAIN_TIMEOUT_S) -> bool:
        """Wait until every quote sent is routed and every delivery consumed.

        Every quote enters its node once and every forwarded copy enters a neighbour once;
        every delivery the nodes made is read by its client. Both equalities must hold
        and every counter stand still for a moment (a node counts a batch's input before
        its forwards).
        """
        nodes = self.net()
        for p in self.publishers.values():
            p.flush()
        deadline = time.monotonic() + timeout
        last: tuple[int, ...] = ()
        while time.monotonic() < deadline:
            self.check()
            snap = (nodes.total("events_in"), nodes.total("events_forwarded"),
                    nodes.total("deliveries"), nodes.total("batches"),
                    sum(r.client.delivered for r in self.receivers.values()))
            if snap[0] == self.sent + snap[1] and snap[4] == snap[2] and snap == last:
                return True
            last = snap
            time.sleep(0.1)
        return False

    def progress(self, done: float, end: str = "") -> None:
        """The progress line: quotes sent, deliveries made by the nodes so far."""
        bar = "#" * int(30 * min(1.0, done))
        line = (f"  [{bar:<30}] {self.sent:>7} quotes, "
                f"{self.net().total('deliveries'):>7} deliveries")
        if self.tty:
            print(f"\r{line}", end=end, file=self.out, flush=True)
        else:
            print(line, file=self.out, flush=True)

    # -- the run ----------------------------------------------------------------------------
    def setup(self) -> None:
        """Start the nodes, attach the clients, subscribe, wait until it has settled."""
        space, t0 = self.space, time.monotonic()
        print(f"  nodes A - B - C on threads, topics {self.prefix}.*; content space "
              f"{' x '.join(f'{a.name}[{a.n_cells}]' for a in space.attributes)} "
              f"= {space.n_cells} cells, {space.total_bits}-bit labels", file=self.out)
        _warm_up(self.bootstrap, self.prefix, kafka=self.kafka)
        self.nodes = LocalNetwork(self.bootstrap, self.prefix, self.space_path, space,
                                  self.topology, kafka_config=self.kafka_config)
        sent: list[concurrent.futures.Future[Any]] = []
        for i, (node, name, where) in enumerate(SUBSCRIPTIONS):
            r = _Receiver(self.client(node, name))
            sid = f"sub-{i}"
            # Each client subscribes from its own thread: they all go out together.
            sent.append(r.submit(_subscribe(where, sid)))
            sub = self.overlay.subscribe(node, name, sid, where)
            self.live[(node, name)] = sub
            self.expected[(node, name)] = set()
            self.subscription_labels += len(sub.labels())
            self.receivers[(node, name)] = r
            r.start()
            print(f"  {node}:{name:<12} {where}  -> {len(sub.labels())} labels", file=self.out)
        for node, name in PUBLISHERS:
            self.publishers[node] = self.client(node, name)
        for future in sent:
            future.result(SETTLE_TIMEOUT_S)
        self.wait_settled()
        print(f"  nodes up and subscriptions settled in {time.monotonic() - t0:.1f}s; "
              f"streaming quotes "
              f"for {self.seconds:g}s at {self.rate:g}/s from "
              f"{', '.join(f'{n}:{c}' for n, c in PUBLISHERS)}", file=self.out, flush=True)

    def switch(self) -> None:
        """A:apple-desk changes its mind: the stream pauses while it is applied exactly."""
        t0 = time.monotonic()
        node, name, old, new, where = SWITCH
        r = self.receivers[(node, name)]
        # Nothing in flight, so every quote so far is judged by the old subscription.
        if not self.wait_drained():
            raise DemoError("quotes still in flight after "
                            f"{DRAIN_TIMEOUT_S:g} s before the subscription change",
                            field="drain_timeout_s", value=DRAIN_TIMEOUT_S)
        r.call(lambda c: c.unsubscribe(old))
        self.overlay.unsubscribe(node, name, old)
        self.wait_settled()
        r.call(_subscribe(where, new))
        sub = self.overlay.subscribe(node, name, new, where)
        self.live[(node, name)] = sub
        self.subscription_labels += len(sub.labels())
        self.wait_settled()
        self.paused = time.monotonic() - t0
        self.say(f"  ~ {node}:{name} now wants only falling AAPL quotes "
                 f"(stream paused {self.paused:.1f}s while the nodes applied it)")

    def publish_one(self, quotes: Quotes) -> None:
        """Publish the next quote from a random node; note who must keep it."""
        node, pub = self.rng.choice(PUBLISHERS)
        event = quotes.next()
        eid = f"q{self.sent:07d}"
        self.publishers[node].publish(event, event_id=eid)
        self.overlay.publish(node, pub, event)
        for key, sub in self.live.items():
            if sub.matches(event):
                self.expected[key].add(eid)
        self.sent += 1

    def stream(self) -> float:
        """Publish ``seconds * rate`` quotes at a steady rate; returns the streaming time.

        The count is fixed and the change of mind comes after exactly half of them, so a
        seed gives the same quotes, the same deliveries and the same summary every run.
        """
        quotes = Quotes(self.rng)
        total = max(2, round(self.seconds * self.rate))
        step = 0.25 if self.tty else self.seconds / 4
        start = time.monotonic()
        next_report = start + step
        switched = False
        while self.sent < total:
            if not switched and self.sent >= total // 2:
                self.switch()
                switched = True
            now = time.monotonic()
            elapsed = now - start - self.paused
            due = min(int(elapsed * self.rate) + 1, total if switched else total // 2)
            while self.sent < due:
                self.publish_one(quotes)
            if now >= next_report:
                self.check()
                self.progress(elapsed / self.seconds)
                next_report = now + step
            time.sleep(0.002)
        return time.monotonic() - start - self.paused

    def summary(self, streamed: float, drained: bool, drain_s: float) -> int:
        """Per-client and network summary, and the brute-force check; 0 if none missed."""
        out, nodes, ref = self.out, self.net(), self.overlay.stats
        self.progress(1.0, end="\n")
        if drained:
            print(f"  all quotes routed and consumed {drain_s:.1f}s after the last one",
                  file=out)
        else:
            print(f"  ! still not drained {drain_s:.0f}s after the last quote", file=out)
        print(f"\n{'client':<16}{'delivered':>10}{'fp dropped':>12}{'kept':>8}"
              f"{'expected':>10}{'missed':>8}", file=out)
        missed = unexpected = kept_total = expected_total = cell_fp = bloom_fp = 0
        delivered_total = dropped_total = 0
        for (node, name), r in self.receivers.items():
            c = r.client
            kept, want = set(r.kept), self.expected[(node, name)]
            miss = len(want - kept)
            missed += miss
            unexpected += len(kept - want) + len(r.kept) - len(kept)  # extra or duplicate
            kept_total += len(r.kept)
            expected_total += len(want)
            delivered_total += c.delivered
            dropped_total += c.false_positives
            cell_fp += r.cell_fp
            bloom_fp += r.bloom_fp
            print(f"{node + ':' + name:<16}{c.delivered:>10}{c.false_positives:>12}"
                  f"{len(r.kept):>8}{len(want):>10}{miss:>8}", file=out)
        deliveries = nodes.total("deliveries")
        fp = dropped_total / delivered_total if delivered_total else 0.0
        print(f"\nnetwork: {ref.subscriptions} subscriptions made ({self.subscription_labels} "
              f"labels); the nodes advertised {nodes.total('labels_advertised')} labels and "
              f"withdrew {nodes.total('labels_withdrawn')} between them (in-process overlay: "
              f"{ref.forwarded_subscription_labels} and {ref.forwarded_unsubscription_labels})"
              f"; {nodes.total('dead_letters')} dead letters", file=out)
        print(f"events: {self.sent} published in {streamed:.1f}s "
              f"({self.sent / max(streamed, 1e-9):,.0f}/s), "
              f"{nodes.total('events_forwarded')} forwarded on links (overlay: "
              f"{ref.event_hops}), {deliveries} deliveries (overlay: {ref.deliveries}), "
              f"{dropped_total} false positives ({fp:.2%}) reached clients and were dropped "
              f"there: {cell_fp} from cell quantisation, {bloom_fp} from Bloom filters; the "
              f"clients' nodes removed {nodes.total('edge_removed')} before writing them "
              f"(exact delivery)", file=out)
        print(f"check against brute force: {missed} missed deliveries ({expected_total} "
              f"expected, {kept_total} kept, {unexpected} unexpected)", file=out, flush=True)
        return 0 if missed == 0 and unexpected == 0 else 1

    def run(self) -> int:
        """Set up, stream, drain, summarise; always stops and closes what it opened."""
        try:
            self.setup()
            streamed = self.stream()
            t0 = time.monotonic()
            drained = self.wait_drained()
            return self.summary(streamed, drained, time.monotonic() - t0)
        except KeyboardInterrupt:
            print("\n  interrupted: stopping the clients and the nodes", file=self.out,
                  flush=True)
            return 130
        except DemoError as exc:
            print(f"\ndlsroute demo: {exc}", file=sys.stderr, flush=True)
            return 1
        except Exception:
            traceback.print_exc()
            return 1
        finally:
            self.close()

    def close(self) -> None:
        """Stop the client threads and the nodes, close every client, delete the topics."""
        for r in self.receivers.values():
            r.stop()
        for r in self.receivers.values():
            r.client.close()
        for p in self.publishers.values():
            p.close()
        if self.nodes is not None:
            self.nodes.stop()
        _delete_topics(self.bootstrap, self.prefix, self.kafka)
        # librdkafka handles go when their Python objects do: drop them all now, so that
        # none is left to complain once the broker stops.
        self.receivers.clear()
        self.publishers.clear()
        self.nodes = None
        gc.collect()


def _warm_up(bootstrap: str, prefix: str, timeout: float = 60.0,
             kafka: dict[str, str] | None = None) -> None:
    """Wait until the broker hands out producer ids, idempotent and transactional.

    A broker that has just started answers "coordinator load in progress" for a while;
    librdkafka would print a warning per producer and retry. Two quiet producers take
    that wait here instead.
    """
    topic = f"{prefix}.warmup"
    kafka = kafka or {}
    ensure_topics(bootstrap, [topic], kafka=kafka)
    idempotent = Producer(producer_config(bootstrap, log_level=2, **kafka))
    idempotent.produce(topic, b"")
    idempotent.flush(timeout)
    transactional = Producer(producer_config(bootstrap, transactional_id=f"{prefix}-warmup",
                                             log_level=2, **kafka))
    transactional.init_transactions(timeout)


def _delete_topics(bootstrap: str, prefix: str, kafka: dict[str, str] | None = None) -> None:
    """Delete this run's topics (best effort)."""
    client = admin(bootstrap, **{**(kafka or {}), "log_level": 4})
    try:
        names = [t for t in client.list_topics(timeout=10).topics if t.startswith(prefix + ".")]
        if names:
            concurrent.futures.wait(list(client.delete_topics(names, operation_timeout=10)
                                         .values()), timeout=15)
    except Exception:  # noqa: S110 - leftover topics of a demo are harmless
        pass


def run_kafka_demo(seconds: float = 20.0, seed: int = 7, port: int = 9092,
                   out: TextIO | None = None, *, bootstrap: str | None = None,
                   rate: float = 300.0, kafka_config: str | Path | None = None) -> int:
    """Run the demo on Kafka for about ``seconds`` of streaming.

    Args:
        seconds: How long the publishers stream quotes.
        seed: Seed of the quote stream (the in-process demo's stream for the same seed).
        port: Port of the local Kafka (``docker/kafka/kafka.sh``), started here if it is not
            running and then stopped at the end.
        out: Where to print (default ``sys.stdout``).
        bootstrap: Use this Kafka instead (nothing is started or stopped).
        rate: Quotes per second, over the three publishers.
        kafka_config: With ``bootstrap``: a librdkafka properties file whose settings
            every Kafka client of the demo gets (nodes, clients, admin), e.g. the secure
            profile's ``.cache/kafka/secure/admin.properties``.

    Returns:
        0 when every client kept exactly what the brute-force matcher expected; 1 if not
        or if something failed; 2 if Kafka could not be started; 130 on Ctrl+C.
    """
    out = out or sys.stdout
    started = False
    t0 = time.monotonic()
    try:
        if bootstrap is None:
            if port_answers(port):
                print(f"dlsroute demo on Kafka: using the Kafka running on 127.0.0.1:{port}",
                      file=out, flush=True)
            else:
                print(f"dlsroute demo on Kafka: starting a local Kafka on 127.0.0.1:{port} ...",
                      file=out, flush=True)
                started = True
            bootstrap = ensure_local_kafka(port)
            if started:
                print(f"  Kafka ready in {time.monotonic() - t0:.1f}s", file=out, flush=True)
        else:
            print(f"dlsroute demo on Kafka: using the Kafka at {bootstrap}", file=out,
                  flush=True)
            wait_for_broker(bootstrap, timeout=30, kafka=load_kafka_config(kafka_config))
    except LocalKafkaError as exc:
        print(f"dlsroute demo: cannot start a local Kafka: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\n  interrupted", file=out)
        if started:
            _stop_quietly(port)
        return 130
    prefix = f"demo{uuid.uuid4().hex[:8]}"
    try:
        with tempfile.TemporaryDirectory(prefix="dlsroute-demo-") as tmp:
            space_path = Path(tmp) / "space.json"
            space_path.write_text(json.dumps(DEMO_SPACE))
            code = _Demo(bootstrap, prefix, space_path, seconds, seed, rate, out,
                         None if kafka_config is None else Path(kafka_config)).run()
    finally:
        if started:
            print(f"  stopping the local Kafka on 127.0.0.1:{port}", file=out, flush=True)
            _stop_quietly(port)
    print(f"  done in {time.monotonic() - t0:.1f}s", file=out, flush=True)
    return code


def _stop_quietly(port: int) -> None:
    """Stop the local Kafka; a failure is reported, not raised."""
    try:
        stop_local_kafka(port)
    except LocalKafkaError as exc:
        print(f"dlsroute demo: {exc}", file=sys.stderr)
