"""Docker helpers of the tests: the engine, the images of ``docker/images.sh``, compose.

Nothing here starts an engine (``bash docker/engine.sh up`` does, as root). The tests say in
one line why they take the local Kafka or skip when there is no engine; when the
environment says containers are expected (``DLS_TEST_KAFKA=testcontainers``, as CI sets
once its engine is up), they fail instead.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from connectors.local_kafka import docker_engine_available

ROOT = Path(__file__).resolve().parents[1]
IMAGES_SH = ROOT / "docker" / "images.sh"
COMPOSE_FILE = ROOT / "docker" / "compose.yaml"

SESSION_KAFKA: dict[str, str] = {}
"""The session's ``kafka_bootstrap`` once used: ``kind`` (``testcontainers``, ``local`` or
``given``) and ``line``, what the session said about it."""


def local_kafka_port(secure: bool = False) -> int:
    """The local test broker's client port: ``DLS_TEST_KAFKA_PORT`` (default 19092), or the
    secure one's, ``DLS_TEST_SECURE_KAFKA_PORT`` (default 19392)."""
    if secure:
        return int(os.environ.get("DLS_TEST_SECURE_KAFKA_PORT", "19392"))
    return int(os.environ.get("DLS_TEST_KAFKA_PORT", "19092"))


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


def compose_command() -> list[str] | None:
    """``docker-compose`` (1.29, Debian's) or ``docker compose`` (v2), whichever is there."""
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    docker = shutil.which("docker")
    if docker and subprocess.run([docker, "compose", "version"], capture_output=True,  # noqa: S603
                                 timeout=30, check=False).returncode == 0:
        return [docker, "compose"]
    return None
