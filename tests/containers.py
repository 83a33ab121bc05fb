"""Docker helpers of the tests: the engine, the images of ``docker/images.sh``, compose.

Nothing here starts an engine (``bash docker/engine.sh up`` does, as root). The tests say in
one line why they take the local Kafka or skip when there is no engine; when the
environment says containers are expected (``DLS_TEST_KAFKA=testcontainers``, as CI sets
once its engine is up), they fail instead.
"""

from __future__ import annotations

import os
import random
import shutil
import socket
import subprocess
from collections.abc import Sequence
from pathlib import Path

from connectors.local_kafka import docker_engine_available

ROOT = Path(__file__).resolve().parents[1]
IMAGES_SH = ROOT / "docker" / "images.sh"
COMPOSE_FILE = ROOT / "docker" / "compose.yaml"

SESSION_KAFKA: dict[str, str] = {}
"""The session's ``kafka_bootstrap`` once used: ``kind`` (``testcontainers``, ``local`` or
``given``) and ``line``, what the session said about it."""


def kafka_choice() -> str:
    """``DLS_TEST_KAFKA``: ``auto`` (default), ``testcontainers`` (required) or ``local``."""
    value = os.environ.get("DLS_TEST_KAFKA", "auto").strip().lower() or "auto"
    if value not in ("auto", "testcontainers", "local"):
        raise ValueError(f"DLS_TEST_KAFKA must be auto, testcontainers or local, got {value!r}")
    return value


def containers_required() -> bool:
    """Whether this run must use containers (a fall-back is then a failure)."""
    return kafka_choice() == "testcontainers"


def engine_answers() -> bool:
    """Whether a Docker engine answers a ping."""
    return docker_engine_available()


def image_present(name: str) -> bool:
    """Whether the engine has the image ``name`` (no pull is tried)."""
    import importlib

    docker = importlib.import_module("docker")  # the package, not the repo's docker/ folder
    client = docker.from_env(timeout=10)
    try:
        client.images.get(name)
        return True
    except docker.errors.ImageNotFound:
        return False
    finally:
        client.close()


def project_images() -> dict[str, str]:
    """``{"DLS_KAFKA_IMAGE": tag, "DLS_NODE_IMAGE": tag}`` of the current inputs.

    The tags ``docker/images.sh`` gives the images of this checkout (content hashes), so a
    node image built from older code is never taken for this one.
    """
    out = subprocess.run(["bash", str(IMAGES_SH), "env"], capture_output=True,  # noqa: S603,S607
                         text=True, timeout=60, check=True).stdout
    return dict(line.split("=", 1) for line in out.split() if "=" in line)


EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
LOWEST_PORT = 21000
"""free_ports' lower end: above the local Kafka's defaults (docker/kafka/kafka.sh, tests'
session: 19092 and its controller 19093; a cluster's controllers from 20092), which may
start after a port is chosen."""


def ephemeral_low() -> int:
    """The lowest port the kernel hands out to outgoing connections (Linux: 32768)."""
    try:
        return int(EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _bindable(port: int) -> bool:
    with socket.socket() as s:  # no SO_REUSEADDR: a port in any use, even TIME_WAIT, fails
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_ports(offsets: Sequence[int] = (0,)) -> int:
    """A port P of loopback with P + o free for every o in ``offsets``, all under the
    kernel's ephemeral range when it leaves room.

    Under that range no client connection takes the port between this choice and the
    server's bind (or a restart's): a port from the range (``bind(0)``) can become the local
    end of any outgoing connection meanwhile. A Kafka server that finds its port so taken
    exits, and its container turns unhealthy (CI, stop 31: the compose deployment's fixed
    ports 39092-39097 lay in Linux's range 32768-60999).
    """
    span = max(offsets)
    top = ephemeral_low() - span
    low, high = (LOWEST_PORT, top) if top - LOWEST_PORT > 1000 else (1024, 65536 - span)
    rng = random.SystemRandom()
    for _ in range(500):
        p = rng.randrange(low, high)
        if all(_bindable(p + o) for o in offsets):
            return p
    raise RuntimeError(f"no free ports at offsets {list(offsets)} in {low}..{high + span - 1}")


def free_port() -> int:
    """A TCP port of loopback that nothing uses now, under the ephemeral range."""
    return free_ports((0,))


def compose_command() -> list[str] | None:
    """``docker-compose`` (1.29, Debian's) or ``docker compose`` (v2), whichever is there."""
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    docker = shutil.which("docker")
    if docker and subprocess.run([docker, "compose", "version"], capture_output=True,  # noqa: S603
                                 timeout=30, check=False).returncode == 0:
        return [docker, "compose"]
    return None
