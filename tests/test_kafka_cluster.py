"""``BROKERS=3 docker/kafka/kafka.sh``: three KRaft servers, replicated topics, one killed.

Starts a cluster of its own (client ports P..P+2, controllers P+1000..P+1002), checks that
a topic made with ``replication=3, min_insync=2`` and one made with the cluster's defaults
both have three replicas and ``min.insync.replicas`` 2, that ``acks=all`` writes go on
with one server SIGKILLed (two in sync still), that ``status`` names the dead one, and
stops and deletes the cluster. About 40-50 s, most of it the three JVMs' start and the
controller's wait for the dead server's session (``broker.session.timeout.ms``, 9 s).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import ConfigResource

from connectors.kafka import admin, ensure_topics, producer_config
from connectors.local_kafka import KAFKA_SCRIPT, ensure_local_kafka, free_ports
from connectors.topic_settings import record_batch_limits
from tests.waiting import wait_for

ROOT = Path(__file__).resolve().parents[1]
BROKERS = 3

pytestmark = pytest.mark.integration


def _free_ports() -> int:
    """A port P with P..P+2 and P+1000..P+1002 all free."""
    return free_ports([*range(BROKERS), *range(1000, 1000 + BROKERS)])


def _script(command: str, port: int, **env: str) -> subprocess.CompletedProcess[str]:
    e = dict(os.environ, KAFKA_PORT=str(port), BROKERS=str(BROKERS), PYTHON=sys.executable,
             **env)
    return subprocess.run(["bash", str(KAFKA_SCRIPT), command], env=e,  # noqa: S603,S607
                          capture_output=True, text=True, timeout=180, check=False)


@pytest.fixture
def cluster() -> Iterator[tuple[str, int]]:
    if shutil.which(os.environ.get("JAVA", "java")) is None:
        pytest.skip("no java: the local cluster runs Kafka's jars")
    port = _free_ports()
    try:
        yield ensure_local_kafka(port, brokers=BROKERS, timeout=300), port
    finally:
        _script("clean", port)  # every server stopped, the cluster's data deleted


def _pid(port: int, server: int) -> int:
    cache = Path(os.environ.get("DLS_CACHE") or ROOT / ".cache")
    return int((cache / "kafka" / f"brokers{BROKERS}-{port}" / f"node-{server}" / "kafka.pid"
                ).read_text())


def _produce(bootstrap: str, topic: str, n: int) -> None:
    p = Producer(producer_config(bootstrap, **{"delivery.timeout.ms": 60_000}))
    errors: list[object] = []
    for i in range(n):
        p.produce(topic, str(i).encode(), on_delivery=lambda err, _m: errors.append(err))
    assert p.flush(90) == 0
    assert errors == [None] * n


def _in_sync(a: object, topics: list[str]) -> bool:
    md = a.list_topics(timeout=10)  # type: ignore[attr-defined]
    return all(t in md.topics and md.topics[t].partitions
               and len(md.topics[t].partitions[0].isrs) == BROKERS for t in topics)


def _described(a: Any, res: ConfigResource, out: list[dict[str, Any]]) -> bool:
    """Put ``res``'s configs in ``out``; False while a broker does not know the topic."""
    try:
        out.append(a.describe_configs([res])[res].result(timeout=10))
    except KafkaException as exc:
        if exc.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
            raise
        return False
    return True


def test_three_brokers_replicate_and_survive_one_kill(cluster: tuple[str, int]) -> None:
    t0 = time.monotonic()
    bootstrap, port = cluster
    assert bootstrap == ",".join(f"127.0.0.1:{port + i}" for i in range(BROKERS))
    a = admin(bootstrap)
    assert len(a.list_topics(timeout=10).brokers) == BROKERS
    ensure_topics(bootstrap, ["rf3.given"], replication=3, min_insync=2)
    ensure_topics(bootstrap, ["rf3.default"])  # the cluster's defaults
    # A broker may answer before the new topics reach its metadata cache.
    wait_for(lambda: _in_sync(a, ["rf3.given", "rf3.default"]), 30,
             "the new topics in the metadata, three replicas in sync")
    md = a.list_topics(timeout=10)
    for topic in ("rf3.given", "rf3.default"):
        part = md.topics[topic].partitions[0]
        assert sorted(part.replicas) == [1, 2, 3] and sorted(part.isrs) == [1, 2, 3]
        res = ConfigResource(ConfigResource.Type.TOPIC, topic)
        confs: list[dict[str, Any]] = []
        # The broker asked may not know the topic yet either (UNKNOWN_TOPIC_OR_PART seen).
        wait_for(lambda r=res, c=confs: _described(a, r, c), 30, f"the configs of {topic}")
        conf = confs[0]
        assert conf["min.insync.replicas"].value == "2"
    _produce(bootstrap, "rf3.given", 100)
    # what a node reads at start: every server's message.max.bytes (one broker a call)
    limits, unread = record_batch_limits(bootstrap, ["rf3.given"])
    assert unread == {}
    assert sorted(limits) == ["broker 1", "broker 2", "broker 3", "rf3.given"]

    leader = md.topics["rf3.given"].partitions[0].leader
    os.kill(_pid(port, leader), signal.SIGKILL)
    t_kill = time.monotonic()
    _produce(bootstrap, "rf3.given", 100)  # a new leader, two replicas in sync: acks=all ok
    took = time.monotonic() - t_kill
    part = admin(bootstrap).list_topics(timeout=10).topics["rf3.given"].partitions[0]
    assert part.leader != leader and leader not in part.isrs and len(part.isrs) == 2
    status = _script("status", port)
    assert status.returncode == 3
    assert f"not running: server {leader} (127.0.0.1:{port + leader - 1})" in status.stdout
    print(f"3-broker cluster: writes back {took:.1f} s after the leader's SIGKILL; "
          f"{time.monotonic() - t0:.1f} s since it answered")
