"""A node killed with SIGKILL and restarted loses nothing (and duplicates nothing, exactly once)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from connectors.client import Client

pytestmark = pytest.mark.integration

SPEC = {"attributes": [
    {"name": "sym", "type": "discrete", "values": ["AAPL", "IBM"]},
    {"name": "price", "type": "numeric", "low": 0, "high": 1000, "granules": 32}]}


def start_node(config: Path, log: Path, metrics_port: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen(  # noqa: S603 - fixed argv
        [sys.executable, "-m", "dlsroute", "node", "--config", str(config),
         "--metrics-port", str(metrics_port)],
        stdout=log.open("ab"), stderr=subprocess.STDOUT, start_new_session=True)


def metrics(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:  # noqa: S310
        return r.read().decode()


def wait_metric(port: int, name: str, at_least: float, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            for line in metrics(port).splitlines():
                if line.startswith(f"dls_{name}{{") and float(line.split()[-1]) >= at_least:
                    return
        except OSError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"metric {name} never reached {at_least}")


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("delivery", ["exactly_once", "at_least_once"])
def test_sigkill_and_restart(kafka_bootstrap: str, topic_prefix: str, tmp_path: Path,
                             delivery: str) -> None:
    space = tmp_path / "space.json"
    space.write_text(json.dumps(SPEC))
    config = tmp_path / "node.toml"
    config.write_text(f'node = "A"\nspace = "{space}"\nbootstrap = "{kafka_bootstrap}"\n'
                      f'topic_prefix = "{topic_prefix}"\ngroup_id = "{topic_prefix}-A"\n'
                      f'batch_size = 50\ndelivery = "{delivery}"\n')
    log = tmp_path / "node.log"
    port = free_port()
    node = start_node(config, log, port)
    alice = Client(kafka_bootstrap, "A", "alice", space, topic_prefix=topic_prefix)
    feed = Client(kafka_bootstrap, "A", "feed", space, topic_prefix=topic_prefix)
    try:
        alice.subscribe("sym = IBM and price < 500")
        wait_metric(port, "subscriptions", 1)
        sent = [feed.publish({"sym": "IBM", "price": float(i % 500)}) for i in range(300)]
        feed.flush()
        wait_metric(port, "events_in_total", 50)
        os.killpg(node.pid, signal.SIGKILL)  # mid-stream, maybe mid-transaction
        node.wait(10)
        sent += [feed.publish({"sym": "IBM", "price": float(i % 500)}) for i in range(300)]
        feed.publish({"sym": "AAPL", "price": 1.0})  # not for alice
        feed.flush()
        node = start_node(config, log, port)  # state comes back from Kafka alone
        wait_metric(port, "subscriptions", 1)
        deadline = time.monotonic() + 60
        got: list[str] = []
        while time.monotonic() < deadline:
            got = [d.event_id for d in alice.drain(quiet_s=1.0)]
            if len(got) >= len(sent):
                break
        assert sorted(got) == sorted(sent), log.read_text()[-3000:]
        if delivery == "exactly_once":
            assert alice.duplicates == 0  # read_committed: the killed batch never shows
    finally:
        alice.close()
        feed.close()
        if node.poll() is None:
            os.killpg(node.pid, signal.SIGTERM)
            node.wait(30)
