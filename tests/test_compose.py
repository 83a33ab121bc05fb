"""The deployment of docker/compose.yaml, started: three Kafka servers and the line A - B - C,
two replica processes per node, on the images ``make images`` built from this checkout.

Skipped, in one line, when no Docker engine answers or the images are not built; with
``DLS_TEST_KAFKA=testcontainers`` (CI, once its engine is up) that is a failure instead.
``DLS_TEST_KAFKA=local`` leaves it out.
Ports: ``DLS_TEST_COMPOSE_PORT`` and the five above it; by default a free block under the
kernel's ephemeral range (``connectors.local_kafka.free_ports``), never one an outgoing
connection may hold when the Kafka servers bind it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from connectors.client import Client
from connectors.kafka import admin
from connectors.local_kafka import free_ports
from dls.space import ContentSpace
from tests.containers import (
    COMPOSE_FILE,
    ROOT,
    compose_command,
    containers_required,
    engine_answers,
    image_present,
    kafka_choice,
    project_images,
)
from tests.waiting import wait_for

pytestmark = pytest.mark.integration

SHARDS = 2  # docker/examples/node-*.toml
REPLICAS = 2  # deploy.replicas of every node service
SPACE = ContentSpace.from_json(ROOT / "docker" / "examples" / "space.json")
NODE_SERVICES = ("node-a", "node-b", "node-c")


def _unavailable(why: str) -> None:
    if containers_required():
        pytest.fail(f"containers expected (DLS_TEST_KAFKA=testcontainers) but {why}")
    pytest.skip(f"compose deployment not started: {why}")


@dataclass
class Deployment:
    """A started compose project: how to reach it and run compose commands on it."""

    command: list[str]
    project: str
    env: dict[str, str]
    bootstrap: str
    log: list[str] = field(default_factory=list)

    def compose(self, *args: str, timeout: float = 300) -> str:
        proc = subprocess.run([*self.command, "-f", str(COMPOSE_FILE), "-p", self.project,  # noqa: S603
                               *args], env=self.env, capture_output=True, text=True,
                              timeout=timeout, check=False)
        if proc.returncode != 0:
            raise AssertionError(f"compose {' '.join(args)} failed:\n{proc.stderr[-3000:]}")
        return proc.stdout

    def containers(self, service: str) -> list[str]:
        return sorted(self.compose("ps", "-q", service).split())

    def inspect(self, container: str) -> dict:
        out = subprocess.run(["docker", "inspect", container], capture_output=True,  # noqa: S603,S607
                             text=True, timeout=60, check=True).stdout
        return json.loads(out)[0]


@pytest.fixture(scope="module")
def deployment() -> Iterator[Deployment]:
    if kafka_choice() == "local":
        pytest.skip("compose deployment not started: DLS_TEST_KAFKA=local (no containers)")
    if not engine_answers():
        _unavailable("no Docker engine answers (as root: bash docker/engine.sh up)")
    command = compose_command()
    if command is None:
        _unavailable("neither docker-compose nor `docker compose` is installed")
    assert command is not None
    images = project_images()
    missing = [tag for tag in images.values() if not image_present(tag)]
    if missing:
        _unavailable(f"images of this checkout not built: {', '.join(missing)} (make images)")
    given = os.environ.get("DLS_TEST_COMPOSE_PORT", "").strip()
    base = int(given) if given else free_ports(range(6))
    env = dict(os.environ, **images)
    for i in range(3):
        env[f"DLS_BROKER_PORT_{i + 1}"] = str(base + 2 * i)
        env[f"DLS_CONTROLLER_PORT_{i + 1}"] = str(base + 2 * i + 1)
    bootstrap = ",".join(f"127.0.0.1:{base + 2 * i}" for i in range(3))
    dep = Deployment(command, f"dlstest{uuid.uuid4().hex[:6]}", env, bootstrap)
    t0 = time.monotonic()
    try:
        try:
            dep.compose("up", "-d", timeout=600)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{_kafka_logs(dep)}") from None
        dep.log.append(f"compose up: {time.monotonic() - t0:.0f} s")
        yield dep
    finally:
        t1 = time.monotonic()
        try:
            _keep_logs(dep)
            dep.compose("down", "-v", "-t", "10", timeout=300)
        finally:
            print(f"\ncompose: {'; '.join(dep.log)}; down: {time.monotonic() - t1:.0f} s")


def _keep_logs(dep: Deployment) -> None:
    """Every line of the nodes and servers, in ``DLS_TEST_COMPOSE_LOGS`` when that is set."""
    path = os.environ.get("DLS_TEST_COMPOSE_LOGS", "").strip()
    if path:
        try:
            with open(path, "w", encoding="utf-8") as out:
                out.write(dep.compose("logs", "--no-color", "--timestamps", timeout=120))
        except (AssertionError, OSError) as exc:
            print(f"compose logs not kept in {path}: {exc}")


def _kafka_logs(dep: Deployment) -> str:
    """The Kafka servers' last lines and states: why one turned unhealthy."""
    servers = ("kafka-1", "kafka-2", "kafka-3")
    out = [f"ports {dep.bootstrap} (clients); the Kafka servers:"]
    try:
        out.append(dep.compose("ps", *servers, timeout=60))
        for server in servers:
            lines = dep.compose("logs", "--no-color", "--tail", "400", server,
                                timeout=60).splitlines()
            errors = [line for line in lines if " ERROR " in line or "Exception:" in line]
            out += [f"{server}: {len(errors)} error lines in its last 400, the first 6:",
                    *errors[:6], f"{server}: last lines:", *lines[-4:]]
    except AssertionError as exc:
        out.append(str(exc))
    return "\n".join(out)


def _node_logs(dep: Deployment) -> str:
    try:
        return dep.compose("logs", "--no-color", "--tail", "30", *NODE_SERVICES, timeout=60)
    except AssertionError as exc:
        return str(exc)


def _node_summary(dep: Deployment) -> str:
    """Per node service, its last five lines that are not librdkafka's (for a failure's message)."""
    out = []
    for service in NODE_SERVICES:
        try:
            lines = dep.compose("logs", "--no-color", "--tail", "300", service,
                                timeout=60).splitlines()
        except AssertionError as exc:
            return str(exc)[:2000]
        own = [line[:220] for line in lines if "rdkafka" not in line]
        out += [f"{service}: {len(own)} of its last {len(lines)} lines are its own; the last:",
                *own[-5:]]
    return "\n".join(out)


def _collect(client: Client, want: int, max_idle: float) -> list[str]:
    got = []
    for d in client.deliveries(timeout=0.5, max_idle=max_idle):
        got.append(d.event_id)
        if len(got) >= want:
            break
    return got


def test_the_replicated_deployment_routes_exactly_and_a_killed_node_restarts_losing_nothing(
        deployment: Deployment) -> None:
    dep = deployment
    t0 = time.monotonic()
    for service in NODE_SERVICES:
        assert len(dep.containers(service)) == REPLICAS, service
    client = admin(dep.bootstrap)
    md = client.list_topics(timeout=30)
    assert sorted(md.brokers) == [1, 2, 3]
    alice = Client(dep.bootstrap, "A", "alice", SPACE, shards=SHARDS)
    bob = Client(dep.bootstrap, "B", "bob", SPACE, shards=SHARDS)
    carol = Client(dep.bootstrap, "C", "carol", SPACE, shards=SHARDS)
    try:
        # Returns once every node on the way has applied it: the deployment serves.
        try:
            alice.subscribe("sym = IBM and price < 500", wait=240)
            bob.subscribe("price >= 900", wait=120)
        except Exception as exc:
            print(_node_logs(dep))
            pytest.fail(f"not served: {exc}; {'; '.join(dep.log)}\n{_node_summary(dep)}",
                        pytrace=False)
        dep.log.append(f"first subscription acknowledged after {time.monotonic() - t0:.0f} s")
        _check_replication(dep)

        sent: list[tuple[str, dict]] = []
        stop = threading.Event()

        def publish() -> None:  # a steady stream from C, through B, to A
            i = 0
            while not stop.is_set():
                attrs = {"sym": ("IBM", "MSFT")[i % 2], "price": float((i * 37) % 1000),
                         "change": 0.5, "volume": 1000 + i}
                sent.append((carol.publish(attrs), attrs))
                carol.flush()
                i += 1
                time.sleep(0.05)

        pub = threading.Thread(target=publish, daemon=True)
        pub.start()
        time.sleep(5)
        victim = dep.containers("node-b")[0]
        before = dep.inspect(victim)
        assert before["State"]["Running"]
        os.kill(before["State"]["Pid"], signal.SIGKILL)  # a crash, not a `docker stop`
        killed = time.monotonic()
        wait_for(lambda: dep.inspect(victim)["RestartCount"] > before["RestartCount"]
                 and dep.inspect(victim)["State"]["Running"], timeout=60, interval=0.5,
                 what="the killed node container restarted by its restart policy")
        dep.log.append(f"killed replica back in {time.monotonic() - killed:.1f} s")
        time.sleep(15)  # past the replica group's session: the shards have moved
        stop.set()
        pub.join(10)
        want_a = sorted(e for e, a in sent if a["sym"] == "IBM" and a["price"] < 500)
        want_b = sorted(e for e, a in sent if a["price"] >= 900)
        assert want_a and want_b
        got_a = _collect(alice, len(want_a), max_idle=60)
        got_b = _collect(bob, len(want_b), max_idle=30)
        dep.log.append(f"{len(sent)} events published, {len(got_a) + len(got_b)} delivered")
        lost = {who: len(set(want) - set(got)) for who, want, got in
                (("alice", want_a, got_a), ("bob", want_b, got_b))}
        if any(lost.values()):  # nothing lost across the kill; said in a few lines
            print(_node_logs(dep))
            pytest.fail(f"events lost: {lost} (of {len(want_a)} and {len(want_b)}); "
                        f"{'; '.join(dep.log)}\n{_node_summary(dep)}", pytrace=False)
        assert sorted(got_a) == want_a and sorted(got_b) == want_b  # and none made up
        assert alice.duplicates == bob.duplicates == 0  # exactly once: none repeated
    finally:
        for c in (alice, bob, carol):
            c.close()


def _check_replication(dep: Deployment) -> None:
    """Kafka's own topics and the nodes' have three replicas, two in sync for a write."""
    from confluent_kafka.admin import ConfigResource

    client = admin(dep.bootstrap)
    md = client.list_topics(timeout=30)
    node_topics = [name for name in md.topics if name.startswith("dls.node.")]
    assert node_topics
    for name in ["__consumer_offsets", "__transaction_state", *node_topics]:
        replicas = {len(p.replicas) for p in md.topics[name].partitions.values()}
        assert replicas == {3}, (name, replicas)
    resources = [ConfigResource(ConfigResource.Type.TOPIC, name) for name in node_topics]
    for res, future in client.describe_configs(resources).items():
        assert future.result(timeout=30)["min.insync.replicas"].value == "2", res
