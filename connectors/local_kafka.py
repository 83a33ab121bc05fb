"""A real single-node Kafka on loopback for tests and demos, without a Docker engine.

``ensure_local_kafka`` runs ``docker/kafka/kafka.sh up``, which fetches the Kafka 4.x jars
from Maven Central once (into ``$DLS_CACHE/kafka``, default ``<repo>/.cache/kafka``), formats
a KRaft storage directory once and starts a combined broker+controller with ``java``
(``brokers=3``: three of them in one cluster, on consecutive ports). It needs Java 17+
and, for the first fetch, Maven. ``docker_engine_available`` tells whether
testcontainers could be used instead.
"""

from __future__ import annotations

import importlib
import os
import random
import shutil
import socket
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from connectors.exceptions import ConnectorSettingError, LocalKafkaError

__all__ = [
    "KAFKA_SCRIPT",
    "LocalKafkaError",
    "docker_engine_available",
    "ensure_local_kafka",
    "ephemeral_low",
    "free_port",
    "free_ports",
    "local_bootstrap",
    "port_answers",
    "secure_admin_properties",
    "stop_local_kafka",
]

KAFKA_SCRIPT: Path = Path(__file__).resolve().parent.parent / "docker" / "kafka" / "kafka.sh"
"""The shell script that fetches, starts and stops the local broker."""


def port_answers(port: int, host: str = "127.0.0.1") -> bool:
    """Tell whether something accepts TCP connections on ``host:port``."""
    try:
        with socket.create_connection((host, port), timeout=1.0):
            return True
    except OSError:
        return False


EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
LOWEST_PORT = 21000
"""free_ports' lower end: above the local Kafka's defaults (9092, the tests' 19092, their
controllers one above, a cluster's from 10092 and 20092), which may start after a port is
chosen."""


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
    """A port P of loopback with P + o free for every o in ``offsets``.

    All of them lie under the kernel's ephemeral range when it leaves room. That is for a
    server started (or restarted) on them a little later: under the range no outgoing
    connection takes a port meanwhile, where a port from the range (``bind(0)``) can become
    the local end of any of them. A Kafka server that finds its port so taken exits (tests:
    its container turned unhealthy when the compose deployment sat on 39092-39097, inside
    Linux's range 32768-60999); a restarted node cannot serve its metrics.
    """
    offsets = tuple(offsets) or (0,)
    span = max(offsets)
    top = ephemeral_low() - span
    low, high = (LOWEST_PORT, top) if top - LOWEST_PORT > 1000 else (1024, 65536 - span)
    rng = random.SystemRandom()
    for _ in range(500):
        p = rng.randrange(low, high)
        if all(_bindable(p + o) for o in offsets):
            return p
    raise LocalKafkaError(f"no free ports at offsets {list(offsets)} in {low}..{high + span - 1}")


def free_port() -> int:
    """A TCP port of loopback that nothing uses now, under the ephemeral range."""
    return free_ports((0,))


def _run_script(command: str, port: int, timeout: float, secure: bool = False,
                brokers: int = 1) -> None:
    """Run ``kafka.sh <command>`` for the broker on ``port`` (``secure``: ``SECURE=1``).

    ``brokers`` > 1: the cluster of that many servers whose first client port is ``port``.

    Raises:
        LocalKafkaError: The script is missing, took longer than ``timeout`` or failed (the
            message holds the tail of its error output).
        ConnectorSettingError: ``port`` or ``brokers`` is out of range.
    """
    _check_port(port)
    _check_brokers(brokers, secure)
    bash = shutil.which("bash")
    if bash is None:
        raise LocalKafkaError("bash not found on PATH")
    if not KAFKA_SCRIPT.is_file():
        raise LocalKafkaError(f"{KAFKA_SCRIPT} is missing")
    env = dict(os.environ)
    env["KAFKA_PORT"] = str(port)
    env["SECURE"] = "1" if secure else "0"
    env["BROKERS"] = str(brokers)
    # The readiness check in kafka.sh uses confluent-kafka; this interpreter has it.
    env.setdefault("PYTHON", sys.executable)
    try:
        # Fixed argv, no shell: the only variable part is the validated port.
        proc = subprocess.run(  # noqa: S603
            [bash, str(KAFKA_SCRIPT), command],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise LocalKafkaError(f"kafka.sh {command} took longer than {timeout:g}s") from exc
    if proc.returncode != 0:
        raise LocalKafkaError(
            f"kafka.sh {command} failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}"
        )


def _check_port(port: int) -> None:
    """Raise unless ``port`` is a usable TCP port (the controller takes port+1)."""
    if not 1 <= port <= 65534:
        raise ConnectorSettingError(f"port must be in 1..65534, got {port}", field="port",
                                    value=port)


def _check_brokers(brokers: int, secure: bool) -> None:
    """Raise unless ``brokers`` is a server count ``kafka.sh`` runs (1 with ``secure``)."""
    if isinstance(brokers, bool) or not isinstance(brokers, int) or not 1 <= brokers <= 9:
        raise ConnectorSettingError(f"brokers must be in 1..9, got {brokers!r}",
                                    field="brokers", value=brokers)
    if secure and brokers != 1:
        raise ConnectorSettingError(f"the secure profile runs one broker, got brokers={brokers}",
                                    field="brokers", value=brokers)


def local_bootstrap(port: int = 9092, brokers: int = 1) -> str:
    """The bootstrap servers of the local Kafka: ``127.0.0.1:<port>`` and the ports after."""
    return ",".join(f"127.0.0.1:{port + i}" for i in range(brokers))


def ensure_local_kafka(port: int = 9092, *, timeout: float = 300.0,
                       secure: bool = False, brokers: int = 1) -> str:
    """Start the local Kafka broker on ``127.0.0.1:port`` unless it already runs.

    Idempotent: returns at once when the broker already answers. The first call may take a
    while (jar download, storage format); later starts take a few seconds. The controller
    listens on ``port + 1`` unless ``KAFKA_CONTROLLER_PORT`` is set.

    Args:
        port: The client (PLAINTEXT) port on loopback.
        timeout: Seconds to allow for fetch plus start-up.
        secure: The secure profile (SASL_SSL, SCRAM, ACLs): admin's client settings are
            then in :func:`secure_admin_properties`.
        brokers: Servers of the cluster (1..9; > 1: client ports ``port`` to
            ``port + brokers - 1``, controllers from ``port + 1000``, every topic's
            replication factor min(3, brokers) and ``min.insync.replicas`` one less by
            default; not with ``secure``).

    Returns:
        The bootstrap servers string, ``"127.0.0.1:<port>[,127.0.0.1:<port+1>...]"``.

    Raises:
        LocalKafkaError: The broker did not come up; the message holds the log tail.
        ConnectorSettingError: ``port`` or ``brokers`` is out of range (a ``ValueError``
            too).
    """
    _run_script("up", port, timeout, secure, brokers)
    return local_bootstrap(port, brokers)


def stop_local_kafka(port: int = 9092, *, timeout: float = 60.0,
                     secure: bool = False, brokers: int = 1) -> None:
    """Stop the local Kafka broker on ``port``; a no-op when it is not running.

    Args:
        port: The client port the broker was started with.
        timeout: Seconds to allow for the shutdown.
        secure: The secure profile's broker (``SECURE=1``).
        brokers: The cluster's server count it was started with (every server stops).

    Raises:
        LocalKafkaError: ``kafka.sh down`` failed.
        ConnectorSettingError: ``port`` or ``brokers`` is out of range (a ``ValueError``
            too).
    """
    _run_script("down", port, timeout, secure, brokers)


def secure_admin_properties() -> Path:
    """Where ``kafka.sh`` (``SECURE=1``) writes the super user's client settings."""
    cache = Path(os.environ.get("DLS_CACHE") or KAFKA_SCRIPT.parent.parent.parent / ".cache")
    return cache / "kafka" / "secure" / "admin.properties"


def docker_engine_available(timeout: float = 3.0) -> bool:
    """Tell whether a Docker engine answers a ping (so testcontainers would work).

    A ``docker`` CLI or Python package without a reachable engine socket counts as
    unavailable. Never raises.

    Args:
        timeout: Seconds to wait for the engine.

    Returns:
        ``True`` when ``docker.from_env().ping()`` succeeds.
    """
    try:
        # Not a plain `import docker`: the repo's own docker/ folder (no __init__.py) would
        # make mypy see an empty namespace package. At run time the installed package wins.
        docker = importlib.import_module("docker")
    except ImportError:
        return False
    try:
        client = docker.from_env(timeout=timeout)
    except Exception:
        return False
    try:
        return bool(client.ping())
    except Exception:
        return False
    finally:
        client.close()
