"""docker/kafka/kafka.sh refuses to start when its controller port is taken, and says so."""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path

import pytest

from connectors.local_kafka import free_ports

ROOT = Path(__file__).resolve().parents[1]


def _two_free_ports() -> int:
    """A port P with P and P+1 both free (P is the client port, P+1 the controller's)."""
    return free_ports((0, 1))


def test_up_names_a_taken_controller_port(tmp_path: Path) -> None:
    port = _two_free_ports()
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", port + 1))
        squatter.listen()
        env = dict(os.environ, KAFKA_PORT=str(port), DLS_CACHE=str(tmp_path))
        proc = subprocess.run(["bash", str(ROOT / "docker/kafka/kafka.sh"), "up"],  # noqa: S603,S607
                              env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0
    assert f"controller port 127.0.0.1:{port + 1}" in proc.stderr + proc.stdout
    assert "is taken" in proc.stderr + proc.stdout
    # Nothing was fetched or formatted for a start that could not happen.
    assert not (tmp_path / "kafka" / f"broker-{port}" / "formatted-for").exists()
    assert not (tmp_path / "kafka" / "kafka-libs").exists()


def test_secure_takes_only_1_or_0(tmp_path: Path) -> None:
    env = dict(os.environ, SECURE="yes", DLS_CACHE=str(tmp_path))
    proc = subprocess.run(["bash", str(ROOT / "docker/kafka/kafka.sh"), "status"],  # noqa: S603,S607
                          env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "SECURE must be 1 or 0" in proc.stderr
    env = dict(os.environ, SECURE="1", DLS_CACHE=str(tmp_path), KAFKA_PORT="1")
    proc = subprocess.run(["bash", str(ROOT / "docker/kafka/kafka.sh"), "status"],  # noqa: S603,S607
                          env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 3 and "not running" in proc.stdout


@pytest.mark.parametrize("env, message", [
    ({"BROKERS": "0"}, "BROKERS must be 1..9, got '0'"),
    ({"BROKERS": "three"}, "BROKERS must be 1..9, got 'three'"),
    ({"BROKERS": "3", "SECURE": "1"}, "BROKERS=3 is not supported with it"),
    ({"BROKERS": "3", "KAFKA_NODE": "4"}, "KAFKA_NODE must be a server number 1..3, got '4'"),
])
def test_brokers_and_node_are_checked(tmp_path: Path, env: dict[str, str], message: str) -> None:
    e = dict(os.environ, DLS_CACHE=str(tmp_path), KAFKA_PORT="1", **env)
    proc = subprocess.run(["bash", str(ROOT / "docker/kafka/kafka.sh"), "status"],  # noqa: S603,S607
                          env=e, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and message in proc.stderr


def test_a_cluster_names_a_taken_controller_port(tmp_path: Path) -> None:
    """BROKERS=3: server i's controller is KAFKA_PORT+1000+i-1; a taken one stops `up`."""
    port = _two_free_ports()
    with socket.socket() as squatter:
        try:
            squatter.bind(("127.0.0.1", port + 1000))
        except OSError:
            pytest.skip(f"port {port + 1000} in use")
        squatter.listen()
        env = dict(os.environ, KAFKA_PORT=str(port), BROKERS="3", DLS_CACHE=str(tmp_path))
        proc = subprocess.run(["bash", str(ROOT / "docker/kafka/kafka.sh"), "up"],  # noqa: S603,S607
                              env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0
    assert f"controller port 127.0.0.1:{port + 1000} (server 1" in proc.stderr
    assert not (tmp_path / "kafka" / "kafka-libs").exists()  # nothing fetched
    status = subprocess.run(["bash", str(ROOT / "docker/kafka/kafka.sh"), "status"],  # noqa: S603,S607
                            env=env, capture_output=True, text=True, timeout=60)
    assert status.returncode == 3
    assert [line.split(":")[0] for line in status.stdout.splitlines()] == ["not running"] * 3
