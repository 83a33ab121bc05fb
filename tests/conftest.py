"""Fixtures shared by every test: a real Kafka broker and unique names.

``kafka_bootstrap`` gives a ``"host:port"`` of a real broker, chosen in this order:

1. ``DLS_KAFKA_BOOTSTRAP`` if set, used as is (nothing is started or stopped);
2. testcontainers' Kafka module (KRaft) when a Docker engine answers a ping
   (image from ``DLS_TEST_KAFKA_IMAGE``, default the module's own);
3. the local Kafka of ``docker/kafka/kafka.sh`` (Java 17+, Maven once for the jars) on
   ``127.0.0.1:$DLS_TEST_KAFKA_PORT`` (default 19092, so a developer's 9092 is untouched).
   It is stopped at session end only if this session started it: keep one running across
   sessions with ``KAFKA_PORT=19092 make kafka-up``.

Tests that use it are skipped only when neither Java nor a Docker engine is available.
Every test that requests ``kafka_bootstrap`` is marked ``integration``
(``pytest -m "not integration"`` leaves them out).
"""

from __future__ import annotations

import gc
import inspect
import os
import shutil
import uuid
from collections.abc import Generator, Iterator

import pytest
from _pytest.faulthandler import fault_handler_stderr_fd_key

from connectors.local_kafka import (
    docker_engine_available,
    ensure_local_kafka,
    port_answers,
    stop_local_kafka,
)
from tests.hang_watchdog import HangWatchdog, limit_from_env

DEFAULT_TEST_KAFKA_PORT = 19092

# Topic prefixes handed out in this session; their topics are deleted at session end, so
# that a Kafka kept running across sessions does not pile up thousands of test topics.
_PREFIXES: list[str] = []


def _delete_test_topics(bootstrap: str) -> None:
    """Delete the topics under this session's prefixes (best effort, bounded)."""
    if not _PREFIXES:
        return
    from connectors.kafka import admin

    try:
        client = admin(bootstrap)
        heads = tuple(f"{p}." for p in _PREFIXES)
        names = [t for t in client.list_topics(timeout=10).topics if t.startswith(heads)]
        for i in range(0, len(names), 500):
            for fut in client.delete_topics(names[i:i + 500], operation_timeout=30).values():
                try:
                    fut.result(timeout=60)
                except Exception:  # noqa: S110 - best effort: a leftover topic is harmless
                    pass
    except Exception:  # noqa: S110 - the broker may be gone already
        pass


_WATCHDOG: HangWatchdog | None = None


def pytest_configure(config: pytest.Config) -> None:
    """Start the hang watchdog (see ``tests/hang_watchdog.py``), writing past capture."""
    global _WATCHDOG
    limit = limit_from_env()
    if limit > 0 and _WATCHDOG is None:
        fd = config.stash.get(fault_handler_stderr_fd_key, None)
        if fd is None:
            fd = os.dup(2)
        _WATCHDOG = HangWatchdog(limit, fd)


def pytest_unconfigure(config: pytest.Config) -> None:
    """Stop the hang watchdog's process."""
    global _WATCHDOG
    if _WATCHDOG is not None:
        _WATCHDOG.close()
        _WATCHDOG = None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None, object, object]:
    """Arm the hang watchdog for the whole of one test: setup, call and teardown."""
    if _WATCHDOG is None:
        return (yield)
    _WATCHDOG.arm(item.nodeid)
    try:
        return (yield)
    finally:
        _WATCHDOG.disarm()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test that needs a Kafka broker as ``integration``."""
    for item in items:
        if "kafka_bootstrap" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.integration)


def _java_available() -> bool:
    """Tell whether a ``java`` binary is there, as ``kafka.sh`` would look it up."""
    java = os.environ.get("JAVA")
    if java:
        return shutil.which(java) is not None
    home = os.environ.get("JAVA_HOME")
    if home and os.access(os.path.join(home, "bin", "java"), os.X_OK):
        return True
    return shutil.which("java") is not None


def _testcontainers_kafka() -> Iterator[str]:
    """Run a KRaft Kafka container for the session and yield its bootstrap server."""
    try:
        from testcontainers.community.kafka import KafkaContainer
    except ImportError:  # testcontainers < 4.9
        from testcontainers.kafka import KafkaContainer

    image = os.environ.get("DLS_TEST_KAFKA_IMAGE")
    container = KafkaContainer(image) if image else KafkaContainer()
    if hasattr(container, "with_kraft"):
        container = container.with_kraft()
    # First pull plus KRaft start can exceed the module's 30 s default (newer versions).
    if "timeout" in inspect.signature(container.start).parameters:
        container.start(timeout=180)
    else:
        container.start()
    try:
        yield container.get_bootstrap_server()
    finally:
        container.stop()


@pytest.fixture(scope="session")
def kafka_bootstrap() -> Iterator[str]:
    """Bootstrap servers (``"host:port"``) of a real Kafka broker for the whole session."""
    given = os.environ.get("DLS_KAFKA_BOOTSTRAP", "").strip()
    if given:
        yield given
        _delete_test_topics(given)
        return
    if docker_engine_available():
        yield from _testcontainers_kafka()
        return
    if not _java_available():
        pytest.skip("no Kafka: neither a Docker engine nor Java 17+ is available")
    port = int(os.environ.get("DLS_TEST_KAFKA_PORT", DEFAULT_TEST_KAFKA_PORT))
    started_here = not port_answers(port)
    bootstrap = ensure_local_kafka(port)
    try:
        yield bootstrap
        _delete_test_topics(bootstrap)
    finally:
        # Under pytest-xdist every worker is a session; the first to finish must not stop
        # the broker under the others, so there it is left running (`make kafka-down`).
        if started_here and "PYTEST_XDIST_WORKER" not in os.environ:
            # Kafka clients that tests dropped without closing are destroyed now, while the
            # broker still answers, instead of retrying against a stopped one in the log.
            gc.collect()
            stop_local_kafka(port)


@pytest.fixture(autouse=True)
def _gc_thresholds() -> Iterator[None]:
    """Give Python's collection thresholds back after each test.

    A node sets the generation-0 threshold for its whole process at start (and the Kafka
    benchmarks before any phase): without this, every test after the first node would run
    with the node's threshold instead of Python's.
    """
    thresholds = gc.get_threshold()
    yield
    gc.set_threshold(*thresholds)


@pytest.fixture
def unique_name() -> str:
    """A fresh 12-character ``[a-z0-9]`` string, usable in topic, group and client names."""
    return uuid.uuid4().hex[:12]


@pytest.fixture
def topic_prefix() -> str:
    """A fresh topic namespace for one test, e.g. ``"t1a2b3c4d"`` (``[a-z0-9]``)."""
    prefix = f"t{uuid.uuid4().hex[:8]}"
    _PREFIXES.append(prefix)
    return prefix


@pytest.fixture
def group_id() -> str:
    """A fresh consumer group id (a uuid string)."""
    return str(uuid.uuid4())
