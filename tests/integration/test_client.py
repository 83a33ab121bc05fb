"""The client SDK against a node on a real Kafka: restart speed, subscriptions kept in Kafka,
and the node's acknowledgement of a subscription."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from broker_node.config import NodeSettings
from broker_node.service import NodeService
from connectors.client import Client
from connectors.exceptions import ConnectorError
from connectors.kafka import consume_batch, consumer_config
from connectors.topics import HEADER_ACK, HEADER_CLIENTS, Topics, decode_clients
from dls.space import ContentSpace

pytestmark = pytest.mark.integration

# 8 cells of 12.5: "price < 45" covers cells 0-3, so an event at 47 is a false positive.
SPEC = {"attributes": [{"name": "price", "type": "numeric", "low": 0, "high": 100,
                        "granules": 8}]}
ROOT = Path(__file__).resolve().parents[2]


class OneNode:
    """Node A (no neighbours) on a thread.

    Its exact check is off: these tests are of the SDK's own filter, which needs the
    network's false positives to reach it (test_exact_delivery.py has the node's check).
    """

    def __init__(self, bootstrap: str, prefix: str, space: Path, shared: int = 0,
                 **settings: Any) -> None:
        """``settings``: further NodeSettings, over these (test_large_messages.py's)."""
        self.bootstrap, self.prefix, self.space_path, self.shared = (
            bootstrap, prefix, space, shared)
        self.space = ContentSpace.from_json(space)
        self.topics = Topics(prefix)
        self.service = NodeService(NodeSettings(**{
            "node": "A", "neighbours": (), "space": space, "bootstrap": bootstrap,
            "topic_prefix": prefix, "shared_delivery_partitions": shared,
            "unsubscribe_grace_s": 1.0, "exact_delivery": False, **settings}), self.space)
        self.errors: list[BaseException] = []
        self.service.start()
        self.thread = threading.Thread(target=self._run, name="node-A", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.service.run()
        except BaseException as exc:  # surfaced by the fixture
            self.errors.append(exc)
        finally:
            self.service.close()

    def client(self, name: str) -> Client:
        return Client(self.bootstrap, "A", name, self.space, topic_prefix=self.prefix,
                      shared_delivery_partitions=self.shared)

    def stop(self) -> None:
        self.service.stop()
        self.thread.join(30)
        assert not self.thread.is_alive() and not self.errors, self.errors


@pytest.fixture
def space_path(tmp_path: Path) -> Path:
    path = tmp_path / "space.json"
    path.write_text(json.dumps(SPEC))
    return path


@pytest.fixture(params=[0, 4], ids=["own-topic", "shared-topic"])
def node(request: pytest.FixtureRequest, kafka_bootstrap: str, topic_prefix: str,
         space_path: Path) -> Iterator[OneNode]:
    n = OneNode(kafka_bootstrap, topic_prefix, space_path, shared=request.param)
    yield n
    n.stop()


@pytest.fixture
def node_own(kafka_bootstrap: str, topic_prefix: str, space_path: Path) -> Iterator[OneNode]:
    n = OneNode(kafka_bootstrap, topic_prefix, space_path)
    yield n
    n.stop()


# -------------------------------------------------------------------- restart speed


def _listen(node: OneNode, log: IO[bytes]) -> tuple[subprocess.Popen[bytes], queue.Queue[str]]:
    """``dlsroute listen`` for alice in a process of its own; its lines in a queue."""
    proc = subprocess.Popen(  # noqa: S603 - fixed argv
        [sys.executable, "-m", "dlsroute", "listen", "--bootstrap", node.bootstrap,
         "--space", str(node.space_path), "--node", "A", "--client", "alice",
         "--topic-prefix", node.prefix, "--where", "price < 45"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=log, start_new_session=True)
    lines: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        assert proc.stdout is not None  # noqa: S101
        for line in proc.stdout:
            lines.put(line.decode())

    threading.Thread(target=pump, daemon=True).start()
    return proc, lines


def _until_seen(lines: queue.Queue[str], event_id: str, timeout: float,
                before: list[str] | None = None) -> float | None:
    """When the listener printed ``event_id`` (monotonic), or None after ``timeout``; the
    ids printed before it go to ``before``."""
    deadline = time.monotonic() + timeout
    while (left := deadline - time.monotonic()) > 0:
        try:
            line = lines.get(timeout=left)
        except queue.Empty:
            return None
        if json.loads(line)["id"] == event_id:
            return time.monotonic()
        if before is not None:
            before.append(json.loads(line)["id"])
    return None


def test_a_restarted_listener_receives_within_seconds(node_own: OneNode,
                                                      tmp_path: Path) -> None:
    """Regression: with a consumer group, the restart waited out the dead member's 45 s
    session before its first delivery."""
    alice, feed = node_own.client("alice"), node_own.client("feed")
    log = (tmp_path / "listen.log").open("wb")
    first = second = None
    try:
        alice.subscribe("price < 45", wait=30)
        first, lines = _listen(node_own, log)
        old = feed.publish({"price": 10.0})
        feed.flush()
        assert _until_seen(lines, old, 60) is not None, (tmp_path / "listen.log").read_text()
        time.sleep(1.0)  # its offset commit goes out
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(10)
        t0 = time.monotonic()
        second, lines = _listen(node_own, log)
        eid = feed.publish({"price": 20.0})  # published after the restart
        feed.flush()
        before: list[str] = []
        seen = _until_seen(lines, eid, 30, before)
        assert seen is not None, "the restarted listener got nothing in 30 s"
        assert seen - t0 < 15.0, f"first delivery {seen - t0:.1f} s after the restart"
        assert before == []  # resumed from the offset the first one committed, past `old`
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
        log.close()
        alice.close()
        feed.close()


# -------------------------------------------------------------- subscriptions in Kafka


def test_a_new_client_knows_the_subscriptions_and_filters_exactly(node: OneNode) -> None:
    first = node.client("alice")
    try:
        sid = first.subscribe("price < 45", wait=30)
    finally:
        first.close()
    feed = node.client("feed")
    again = node.client("alice")
    try:
        hit = feed.publish({"price": 10.0})
        feed.publish({"price": 47.0})  # same cell as 44: delivered, but no match
        feed.flush()
        got: list[tuple[str, tuple[str, ...]]] = []
        for d in again.deliveries(timeout=0.5, max_idle=10.0, include_false_positives=True):
            got.append((d.event_id, d.subscriptions))
            if len(got) == 2:
                break
        assert set(again.subscriptions) == {sid}
        assert got[0] == (hit, (sid,)) and got[1][1] == ()
        assert (again.delivered, again.false_positives, again.undecodable) == (2, 1, 0)
        again.unsubscribe(sid)  # known from the topic alone
    finally:
        again.close()
        feed.close()
    last = node.client("alice")
    try:
        assert last.load_subscriptions() == {}
    finally:
        last.close()


def test_a_listener_learns_a_subscription_made_in_another_process(node_own: OneNode) -> None:
    listener, other, feed = (node_own.client(n) for n in ("alice", "alice", "feed"))
    try:
        assert listener.load_subscriptions() == {}
        sid = other.subscribe("price < 45", wait=30)
        eid = feed.publish({"price": 10.0})
        feed.flush()
        got = next(listener.deliveries(timeout=0.5, max_idle=10.0))
        assert (got.event_id, got.subscriptions) == (eid, (sid,))
        assert listener.false_positives == 0
    finally:
        for c in (listener, other, feed):
            c.close()


# ------------------------------------------------------------------ acknowledgement


def _acks(node: OneNode, client: Client) -> list[tuple[str, frozenset[str]]]:
    """The acknowledgements on ``client``'s delivery partition: (id, clients header)."""
    where = client._delivery_partition()
    reader = Consumer(consumer_config(node.bootstrap, f"{node.prefix}-raw"))
    try:
        reader.assign([TopicPartition(where.topic, where.partition, 0)])
        out = []
        for msg in consume_batch(reader, 1000, 5.0):
            headers = dict(msg.headers() or [])
            if HEADER_ACK in headers:
                assert msg.value() is None
                out.append((headers[HEADER_ACK].decode(),
                            decode_clients(headers.get(HEADER_CLIENTS))))
        return out
    finally:
        reader.close()


def test_subscribe_waits_for_the_node_and_the_next_event_is_delivered(node: OneNode) -> None:
    alice, feed = node.client("alice"), node.client("feed")
    try:
        t0 = time.monotonic()
        sid = alice.subscribe("price < 45", wait=10)
        assert time.monotonic() - t0 < 10
        assert len(node.service.state) == 1  # applied when the wait returned
        eid = feed.publish({"price": 10.0})  # at once after
        feed.flush()
        got = [d.event_id for d in alice.deliveries(timeout=0.5, max_idle=5.0)]
        assert got == [eid]
        assert (alice.delivered, alice.undecodable) == (1, 0)  # the ack is no delivery
        names = frozenset({"alice"}) if node.shared else frozenset()
        assert _acks(node, alice) == [(sid, names)]
    finally:
        alice.close()
        feed.close()


def test_a_refused_subscription_is_never_acknowledged(node_own: OneNode) -> None:
    alice = node_own.client("alice")
    try:
        alice.subscribe("price < 45", "s1", wait=30)
        alice.unsubscribe("s1")
        with pytest.raises(ConnectorError, match=r"subscription 's1' of client 'alice': node "
                           r"'A' did not acknowledge it within 3 s .* refuses") as err:
            alice.subscribe("price < 45", "s1", wait=3)  # a cancelled id: a dead letter
        assert err.value.field == "wait" and err.value.value == 3
        assert [a for a, _ in _acks(node_own, alice)] == ["s1"]
    finally:
        alice.close()


# ------------------------------------------------------------------------------ CLI


def _cli(node: OneNode, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(  # noqa: S603 - fixed argv
        [sys.executable, "-m", "dlsroute", *args, "--bootstrap", node.bootstrap,
         "--space", str(node.space_path), "--node", "A", "--client", "alice",
         "--topic-prefix", node.prefix], cwd=ROOT, capture_output=True, text=True,
        timeout=timeout, check=False)


def test_cli_subscribe_waits_and_listen_filters_without_where(node_own: OneNode) -> None:
    sub = _cli(node_own, "subscribe", "--where", "price < 45", "--wait", "20")
    assert sub.returncode == 0, sub.stderr
    sid = sub.stdout.strip()
    assert len(node_own.service.state) == 1  # applied before the command returned
    feed = node_own.client("feed")
    try:
        miss = feed.publish({"price": 47.0})  # a false positive, dropped
        hit = feed.publish({"price": 10.0})
        feed.flush()
    finally:
        feed.close()
    out = _cli(node_own, "listen", "--count", "1", "--max-idle", "15")
    assert out.returncode == 0, out.stderr
    assert [json.loads(line)["id"] for line in out.stdout.splitlines()] == [hit]
    assert "false positives dropped 1" in out.stderr and miss not in out.stdout
    late = _cli(node_own, "unsubscribe", "--id", sid)
    assert late.returncode == 0, late.stderr
    bad = _cli(node_own, "subscribe", "--where", "price < 45", "--id", sid, "--wait", "2")
    assert bad.returncode == 2
    assert f"subscription {sid!r} of client 'alice': node 'A' did not acknowledge it " \
           f"within 2.0 s" in bad.stderr
