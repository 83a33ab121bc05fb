"""Fixtures shared by every test: a real Kafka broker and unique names.

``kafka_bootstrap`` gives a ``"host:port"`` of a real broker, chosen in this order:

1. ``DLS_KAFKA_BOOTSTRAP`` if set, used as is (nothing is started or stopped);
2. a Kafka container started through testcontainers when a Docker engine answers a ping and
   the image is there: ``DLS_TEST_KAFKA_IMAGE``, default the ``dlsroute-kafka`` image that
   ``make images`` built from this checkout (any image that takes apache/kafka's ``KAFKA_*``
   environment will do, e.g. ``apache/kafka:4.2.0``, pulled if missing). It runs on the
   host's network (``docker/engine.sh`` starts an engine with no bridge) on a free port of
   loopback, and is removed at session end;
3. the local Kafka of ``docker/kafka/kafka.sh`` (Java 17+, Maven once for the jars) on
   ``127.0.0.1:$DLS_TEST_KAFKA_PORT`` (default 19092, so a developer's 9092 is untouched).
   It is stopped at session end only if this session started it: keep one running across
   sessions with ``KAFKA_PORT=19092 make kafka-up``.

``DLS_TEST_KAFKA`` chooses: ``auto`` (the default: 2 when it can, else 3, saying why in one
line), ``local`` (3 even with an engine), ``testcontainers`` (2 or the tests fail: CI sets
it where its engine is up, so that a silent fall-back cannot pass). The terminal summary
names the Kafka the session used.

Tests that use it are skipped only when neither Java nor a Docker engine is available.
Every test that requests ``kafka_bootstrap`` is marked ``integration``
(``pytest -m "not integration"`` leaves them out).
"""

from __future__ import annotations

import gc
import os
import shutil
import uuid
from collections.abc import Generator, Iterator

import pytest
from _pytest.faulthandler import fault_handler_stderr_fd_key

from connectors.local_kafka import (
    ensure_local_kafka,
    free_port,
    port_answers,
    stop_local_kafka,
)
from tests import containers
from tests.hang_watchdog import HangWatchdog, limit_from_env

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


def _close_left_clients(limit_s: float = 10.0) -> int:
    """Close the Kafka clients tests left open; return how many there were.

    A client that outlives the session is destroyed at interpreter exit, when librdkafka's
    threads may still call back into a Python that is being torn down (delivery reports,
    rebalance callbacks): a crash after the last test. Here they are closed while the
    broker still answers: producers drop what they still queue, each close has
    ``limit_s`` seconds (in a daemon thread, so that a close that hangs cannot hold the
    session).
    """
    import threading

    from confluent_kafka import Consumer, Producer

    from connectors.closing import close_consumer, close_producer

    gc.unfreeze()  # a node run in this process froze its heap, clients and all
    gc.collect()
    left = [o for o in gc.get_objects() if isinstance(o, (Producer, Consumer))]

    closed: list[bool] = []

    def close(client: Producer | Consumer) -> None:
        try:
            if isinstance(client, Producer):
                close_producer(client)
            else:  # a plain close() can hang mid-rebalance (holding the GIL)
                close_consumer(client, timeout=limit_s)
            closed.append(True)
        except Exception:  # noqa: S110 - closed already, or the broker is gone
            pass

    for client in left:
        t = threading.Thread(target=close, args=(client,), daemon=True)
        t.start()
        t.join(limit_s)
    del left
    return len(closed)


def _session_end(bootstrap: str) -> None:
    """Close the clients tests left open and delete this session's topics."""
    n = _close_left_clients()
    if n:
        containers.SESSION_KAFKA["left_open"] = str(n)
    _delete_test_topics(bootstrap)


_WATCHDOG: HangWatchdog | None = None


def _local_ports() -> list[tuple[int, bool]]:
    """``(port, secure)`` of the local test brokers (the plaintext one, the secure one)."""
    return [(containers.local_kafka_port(secure), secure) for secure in (False, True)]


def _xdist_controller(config: pytest.Config) -> bool:
    """True in the process that hands tests to pytest-xdist workers (not in a worker)."""
    return (not hasattr(config, "workerinput")
            and getattr(config.option, "dist", "no") != "no"
            and bool(getattr(config.option, "numprocesses", 0)))


_STARTED_BEFORE = pytest.StashKey[list[tuple[int, bool]]]()


def pytest_configure(config: pytest.Config) -> None:
    """Start the hang watchdog (see ``tests/hang_watchdog.py``), writing past capture.

    Under pytest-xdist every worker is a session of its own, and none may stop a local
    broker the others still use; the controller notes which local test brokers answer
    before the workers start, and stops at the end those that came up during the run.
    """
    global _WATCHDOG
    if _xdist_controller(config):
        config.stash[_STARTED_BEFORE] = [p for p in _local_ports() if port_answers(p[0])]
    limit = limit_from_env()
    if limit > 0 and _WATCHDOG is None:
        fd = config.stash.get(fault_handler_stderr_fd_key, None)
        if fd is None:
            fd = os.dup(2)
        _WATCHDOG = HangWatchdog(limit, fd)


def pytest_unconfigure(config: pytest.Config) -> None:
    """Stop the hang watchdog's process, and the local brokers the workers started."""
    global _WATCHDOG
    before = config.stash.get(_STARTED_BEFORE, None)
    if before is not None:
        for port, secure in _local_ports():
            if (port, secure) not in before and port_answers(port):
                stop_local_kafka(port, secure=secure)
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
    """Mark every test that needs a Kafka broker as ``integration``.

    A test on the session's Spark must live where the xdist scheduler groups them
    (:func:`_spark_module`), or every worker would start a Spark of its own.
    """
    for item in items:
        names = getattr(item, "fixturenames", ())
        if "kafka_bootstrap" in names:
            item.add_marker(pytest.mark.integration)
        if "spark" in names and not _spark_module(item.nodeid):
            raise pytest.UsageError(f"{item.nodeid} uses the session's Spark: put it under "
                                    f"tests/spark/ (or name it in SPARK_MODULES)")


#: Modules outside tests/spark/ whose tests use the ``spark`` fixture.
SPARK_MODULES = frozenset({"tests/benchmarks/test_spark_bench.py"})


def _spark_module(nodeid: str) -> bool:
    """True for a test of a module that the xdist scheduler keeps with the Spark tests."""
    path = nodeid.split("::", 1)[0]
    return path.startswith("tests/spark/") or path in SPARK_MODULES


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    """``--dist loadfile`` (``make test``), but every Spark module is one unit of work.

    A module's tests stay on one worker (its module fixtures are set up once; tests of one
    module may share a port, as the chaos tests' cluster does), and the Spark modules all
    go to one worker: one Spark JVM for the run, not one per worker. Other ``--dist``
    modes are pytest-xdist's own.
    """
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class ModuleScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return "spark" if _spark_module(nodeid) else nodeid.split("::", 1)[0]

    return ModuleScheduling(config, log)


def _java_available() -> bool:
    """Tell whether a ``java`` binary is there, as ``kafka.sh`` would look it up."""
    java = os.environ.get("JAVA")
    if java:
        return shutil.which(java) is not None
    home = os.environ.get("JAVA_HOME")
    if home and os.access(os.path.join(home, "bin", "java"), os.X_OK):
        return True
    return shutil.which("java") is not None


def _say(kind: str, line: str) -> None:
    """Record the session's Kafka (``containers.SESSION_KAFKA``), said in the summary."""
    containers.SESSION_KAFKA.update(kind=kind, line=line)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """In a pytest-xdist worker: hand what it said of its Kafka to the controller."""
    output = getattr(session.config, "workeroutput", None)
    if output is not None and containers.SESSION_KAFKA:
        output["session_kafka"] = dict(containers.SESSION_KAFKA)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: object, error: object) -> None:
    """In the controller: keep a worker's Kafka line for the summary, add up left clients."""
    said = getattr(node, "workeroutput", {}).get("session_kafka")
    if not said:
        return
    left = int(containers.SESSION_KAFKA.get("left_open", 0)) + int(said.get("left_open", 0))
    containers.SESSION_KAFKA.update(kind=said["kind"], line=said["line"])
    if left:
        containers.SESSION_KAFKA["left_open"] = str(left)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Name the Kafka the integration tests ran on."""
    if containers.SESSION_KAFKA:
        terminalreporter.write_line(f"kafka_bootstrap: {containers.SESSION_KAFKA['line']}")
        left = containers.SESSION_KAFKA.get("left_open")
        if left:
            terminalreporter.write_line(
                f"kafka clients left open by tests, closed at session end: {left}")


def _container_image() -> tuple[str | None, str]:
    """The Kafka image to run through testcontainers, or None and why not."""
    if not containers.engine_answers():
        return None, "no Docker engine answers"
    given = os.environ.get("DLS_TEST_KAFKA_IMAGE", "").strip()
    if given:
        return given, ""  # testcontainers pulls it if the engine does not have it
    image = containers.project_images()["DLS_KAFKA_IMAGE"]
    if not containers.image_present(image):
        return None, f"the engine answers but has no {image} (make images)"
    return image, ""


def _testcontainers_kafka(image: str, port: int) -> Iterator[str]:
    """Run a single-node KRaft Kafka of ``image`` on the host's network; yield its bootstrap.

    Not testcontainers' KafkaContainer: that one is made for Confluent's images and mapped
    ports. This is the generic container with apache/kafka's ``KAFKA_*`` environment, which
    the project's image takes too. No reaper container (its image comes from a registry):
    the container is removed here.
    """
    from testcontainers.core.config import testcontainers_config
    from testcontainers.core.container import DockerContainer

    from connectors.kafka import wait_for_broker

    testcontainers_config.ryuk_disabled = True
    controller = free_port()
    container = (
        DockerContainer(image, name=f"dlsroute-test-kafka-{port}")
        .with_kwargs(network_mode="host")
        .with_envs(
            CLUSTER_ID="dlsrouteTestKafkaAAAAA", KAFKA_NODE_ID="1",
            KAFKA_PROCESS_ROLES="broker,controller",
            KAFKA_LISTENERS=f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller}",
            KAFKA_ADVERTISED_LISTENERS=f"PLAINTEXT://127.0.0.1:{port}",
            KAFKA_CONTROLLER_LISTENER_NAMES="CONTROLLER",
            KAFKA_LISTENER_SECURITY_PROTOCOL_MAP="CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            KAFKA_CONTROLLER_QUORUM_VOTERS=f"1@127.0.0.1:{controller}",
            # as docker/kafka/kafka.sh configures the local broker
            KAFKA_NUM_PARTITIONS="1", KAFKA_AUTO_CREATE_TOPICS_ENABLE="true",
            KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR="1", KAFKA_OFFSETS_TOPIC_NUM_PARTITIONS="1",
            KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR="1",
            KAFKA_TRANSACTION_STATE_LOG_MIN_ISR="1",
            KAFKA_SHARE_COORDINATOR_STATE_TOPIC_REPLICATION_FACTOR="1",
            KAFKA_SHARE_COORDINATOR_STATE_TOPIC_MIN_ISR="1",
            KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS="0", KAFKA_NUM_NETWORK_THREADS="2",
            KAFKA_NUM_IO_THREADS="4", KAFKA_HEAP_OPTS="-Xmx1g -Xms256m"))
    container.start()
    bootstrap = f"127.0.0.1:{port}"
    try:
        wait_for_broker(bootstrap, timeout=180)
        yield bootstrap
        _session_end(bootstrap)
    finally:
        container.stop()


@pytest.fixture(scope="session")
def kafka_bootstrap() -> Iterator[str]:
    """Bootstrap servers (``"host:port"``) of a real Kafka broker for the whole session."""
    given = os.environ.get("DLS_KAFKA_BOOTSTRAP", "").strip()
    if given:
        _say("given", f"{given} (DLS_KAFKA_BOOTSTRAP)")
        yield given
        _session_end(given)
        return
    choice = containers.kafka_choice()
    why = "DLS_TEST_KAFKA=local"
    if choice != "local":
        image, why = _container_image()
        if image is not None:
            port = free_port()
            _say("testcontainers",
                 f"testcontainers, {image} on 127.0.0.1:{port} (host network)")
            yield from _testcontainers_kafka(image, port)
            return
        if choice == "testcontainers":
            pytest.fail(f"DLS_TEST_KAFKA=testcontainers, but {why}")
    if not _java_available():
        pytest.skip("no Kafka: neither a Docker engine nor Java 17+ is available")
    port = containers.local_kafka_port()
    _say("local",
         f"the local Kafka (docker/kafka/kafka.sh) on 127.0.0.1:{port}: {why}")
    started_here = not port_answers(port)
    bootstrap = ensure_local_kafka(port)
    try:
        yield bootstrap
        _session_end(bootstrap)
    finally:
        # Under pytest-xdist every worker is a session; the first to finish must not stop
        # the broker under the others, so there it is left running (`make kafka-down`).
        if started_here and "PYTEST_XDIST_WORKER" not in os.environ:
            # Kafka clients that tests dropped without closing are destroyed now, while the
            # broker still answers, instead of retrying against a stopped one in the log.
            gc.collect()
            stop_local_kafka(port)


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    """A local[2] SparkSession with the Kafka and Avro connectors, stopped at session end.

    One for the whole session (each start costs a JVM and about 15 s): the Spark tests and
    the Spark benchmark's quick run share it (the benchmark leaves an active session up).
    """
    if shutil.which("java") is None:
        pytest.skip("Spark needs Java 17+")
    from spark.session import spark_session

    # 2 GiB of heap, not Spark's default 1: with the tests spread over two xdist workers,
    # one Spark test once ran out of the default (java.lang.OutOfMemoryError).
    session = spark_session("dlsroute-tests", conf={"spark.driver.memory": "2g"})
    try:
        yield session
    finally:
        session.stop()


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
