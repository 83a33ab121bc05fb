"""The processes of a harness run: its own Kafka broker, nodes, clients and publishers.

Every process is started in a session of its own (``start_new_session``), so that a
signal sent to its process group reaches it and nothing else. A process that exits
without the harness asking for it is restarted by :class:`Supervisor` (as systemd or
Kubernetes would restart a node that exits on a fatal error), and the exit is logged.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition

from connectors.kafka import consumer_config
from connectors.topics import Topics

REPO = Path(__file__).resolve().parents[2]
KAFKA_SH = REPO / "docker" / "kafka" / "kafka.sh"


class Broker:
    """A single-node Kafka of ``docker/kafka/kafka.sh`` on a port of its own, killable."""

    def __init__(self, port: int, log: Path) -> None:
        self.port, self.log = port, log
        cache = Path(os.environ.get("DLS_CACHE", REPO / ".cache"))
        self.pid_file = cache / "kafka" / f"broker-{port}" / "kafka.pid"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _sh(self, cmd: str, timeout: float = 180.0) -> None:
        env = dict(os.environ, KAFKA_PORT=str(self.port), PYTHON=sys.executable)
        with self.log.open("ab") as out:
            subprocess.run(["bash", str(KAFKA_SH), cmd], env=env, stdout=out,  # noqa: S603,S607
                           stderr=subprocess.STDOUT, timeout=timeout, check=True)

    def up(self) -> None:
        """Start (or restart on the same data) and wait until it answers."""
        self._sh("up")

    def clean(self) -> None:
        """Stop and delete the data: the next :meth:`up` starts an empty broker."""
        self._sh("clean")

    def down(self) -> None:
        self._sh("down")

    def pid(self) -> int | None:
        try:
            pid = int(self.pid_file.read_text().strip())
        except (OSError, ValueError):
            return None
        try:
            os.kill(pid, 0)
        except OSError:
            return None
        return pid

    def kill(self) -> bool:
        """SIGKILL the broker's JVM and wait until it is gone; False if it was not running."""
        pid = self.pid()
        if pid is None:
            return False
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except OSError:
                return True
            time.sleep(0.05)
        return True


class Proc:
    """One harness-managed process: a command line, a log file, a process group."""

    def __init__(self, name: str, kind: str, argv: Sequence[str], log: Path,
                 ready: Callable[[], bool] | None = None) -> None:
        self.name, self.kind, self.argv, self.log = name, kind, list(argv), log
        self.ready_check = ready
        self.popen: subprocess.Popen[bytes] | None = None
        self.starts = 0
        #: True while the harness holds it down (killed or stopped) or is ending it
        self.held = False
        #: True once the harness ended it for good mid-run (a replica that left)
        self.retired = False
        self.lock = threading.Lock()

    def start(self) -> None:
        out = self.log.open("ab")
        out.write(f"\n==== start {self.starts} at {time.time():.3f}\n".encode())
        out.flush()
        self.popen = subprocess.Popen(self.argv, cwd=REPO, stdout=out,  # noqa: S603
                                      stderr=subprocess.STDOUT, start_new_session=True)
        out.close()
        self.starts += 1

    @property
    def pid(self) -> int | None:
        return None if self.popen is None else self.popen.pid

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def signal(self, sig: int) -> None:
        if self.alive():
            assert self.popen is not None  # noqa: S101
            try:
                os.killpg(self.popen.pid, sig)
            except ProcessLookupError:
                pass

    def kill(self) -> None:
        """SIGKILL and reap."""
        self.signal(signal.SIGKILL)
        if self.popen is not None:
            self.popen.wait(30)

    def terminate(self, timeout: float = 20.0) -> int | None:
        """SIGTERM, SIGKILL after ``timeout``; the exit code."""
        if self.popen is None:
            return None
        self.signal(signal.SIGCONT)
        self.signal(signal.SIGTERM)
        try:
            return self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            return self.popen.returncode

    def wait_ready(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.ready_check is None or self.ready_check():
                return True
            if not self.alive():
                return False
            time.sleep(0.2)
        return False


def node_lag(bootstrap: str, prefix: str, node: str, neighbours: Sequence[str],
             shards: int = 1) -> int | None:
    """Records on the node's input topics past its committed offsets (None: unknown).

    One record per partition is not counted: the marker of the last transaction, which an
    idle node has no reason to commit past. Reads the node's group's offsets without
    joining the group. A sharded node (``shards`` > 1): every shard's topics against that
    shard's group (``<prefix>-node-<node>-s<k>``), whichever process routes it.
    """
    lag = 0
    for shard in range(shards) if shards > 1 else (None,):
        t = Topics(prefix).of_shard(shard)
        group = f"{prefix}-node-{node}" + ("" if shard is None else f"-s{shard}")
        topics = [t.node_subscribe(node), t.node_unsubscribe(node), t.node_publish(node),
                  *(t.link(n, node) for n in neighbours),
                  *(t.forward(n, node) for n in neighbours)]
        consumer = Consumer(consumer_config(bootstrap, group, log_level=2))
        try:
            for tp in consumer.committed([TopicPartition(x, 0) for x in topics], timeout=5):
                low, high = consumer.get_watermark_offsets(TopicPartition(tp.topic, 0),
                                                           timeout=5)
                lag += max(0, high - (tp.offset if tp.offset >= 0 else low) - 1)
        except KafkaException:
            return None
        finally:
            consumer.close()
    return lag


def spark_lag(bootstrap: str, prefix: str, checkpoint: Path) -> int | None:
    """Raw records past what the Spark job's last committed micro-batch covers (None: unknown).

    Read from the job's checkpoint (``commits/N`` and the offsets of batch N in
    ``offsets/N``), not from the job, which may be down.
    """
    done = [int(p.name) for p in (checkpoint / "commits").glob("[0-9]*") if p.name.isdigit()]
    if not done:
        return None
    try:
        lines = (checkpoint / "offsets" / str(max(done))).read_text().splitlines()
        covered = {t: offsets for line in lines[2:] for t, offsets in json.loads(line).items()}
    except (OSError, ValueError):
        return None
    t = Topics(prefix)
    consumer = Consumer(consumer_config(bootstrap, f"{prefix}-chaos-spark-lag", log_level=2))
    try:
        lag = 0
        for topic in (t.raw_subscriptions, t.raw_unsubscriptions, t.raw_events):
            _, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=5)
            lag += max(0, high - int(covered.get(topic, {}).get("0", 0)))
        return lag
    except KafkaException:
        return None
    finally:
        consumer.close()


def page(port: int, timeout: float = 1.0) -> str | None:
    """The text of the metrics page on ``port``, or None if it does not answer."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics",  # noqa: S310
                                    timeout=timeout) as r:
            return str(r.read().decode())
    except OSError:
        return None


def parse_metrics(text: str) -> dict[str, float]:
    """The counters and gauges (``dls_<name>``) of a metrics page, summed over shards.

    A process of a sharded node serves one sample per shard it routes (label ``shard``);
    a name's value is their sum (0 shards: the name is absent). Per-neighbour and
    per-client samples are left out.
    """
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("dls_") and "neighbour=" not in line and "client=" not in line:
            name = line.split("{", 1)[0].split(" ", 1)[0]
            try:
                value = float(line.rsplit(" ", 1)[-1])
            except ValueError:
                continue
            out[name] = out.get(name, 0.0) + value
    return out


_SHARD = re.compile(r'shard="(\d+)"')


def parse_shards(text: str) -> set[int]:
    """The shards a metrics page has samples of (empty: an unsharded node, or none yet)."""
    return {int(m) for m in _SHARD.findall(text)}


def metrics(port: int, timeout: float = 1.0) -> dict[str, float] | None:
    """The node's counters and gauges (``dls_<name>``), or None if the page does not answer."""
    text = page(port, timeout)
    return None if text is None else parse_metrics(text)


def shards_served(port: int, timeout: float = 1.0) -> set[int] | None:
    """The shards the process on ``port`` routes now, or None if its page does not answer."""
    text = page(port, timeout)
    return None if text is None else parse_shards(text)


class Supervisor(threading.Thread):
    """Restarts processes that exit on their own; logs each exit through ``log_fault``."""

    def __init__(self, procs: Sequence[Proc], log_fault: Callable[..., Any],
                 delay: float = 1.0) -> None:
        super().__init__(name="supervisor", daemon=True)
        self.procs, self.log_fault, self.delay = list(procs), log_fault, delay
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(0.5):
            for p in self.procs:
                with p.lock:
                    if p.held or p.popen is None or p.popen.poll() is None:
                        continue
                    rc = p.popen.returncode
                    tail = _tail(p.log, 3)
                    self.log_fault(kind="exit", target=p.name, rc=rc, tail=tail)
                    time.sleep(self.delay)
                    if not self.stop.is_set():
                        p.start()


def _tail(path: Path, n: int) -> list[str]:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return []
    return [line[-300:] for line in lines[-n:]]
