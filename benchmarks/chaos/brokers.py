"""The harness's three-broker Kafka (``BROKERS=3 kafka.sh``) and what a broker's death costs.

:class:`Cluster` has :class:`~benchmarks.chaos.cluster.Broker`'s interface (``bootstrap``,
``up``, ``down``, ``clean``, ``pid``, ``kill``) for a cluster of three combined
broker+controllers on client ports ``port``..``port+2``; ``kill`` and ``pid`` take the
server (1..3). :meth:`Cluster.leaders_away` times the leader elections that follow a
SIGKILL from the metadata; :func:`event_waits` and :func:`pauses` measure, from the run's
records alone, how long events waited for their first delivery around each kill.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaException

from benchmarks.chaos.common import read_jsonl
from connectors.kafka import admin

REPO = Path(__file__).resolve().parents[2]
KAFKA_SH = REPO / "docker" / "kafka" / "kafka.sh"
#: Servers of the cluster, replication factor and min.insync.replicas of its topics.
SERVERS, REPLICATION, MIN_INSYNC = 3, 3, 2


class Cluster:
    """``SERVERS`` KRaft servers of ``kafka.sh`` (``BROKERS=3``) from ``port``, killable."""

    def __init__(self, port: int, log: Path) -> None:
        self.port, self.log = port, log
        cache = Path(os.environ.get("DLS_CACHE", REPO / ".cache"))
        self.dir = cache / "kafka" / f"brokers{SERVERS}-{port}"

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{self.port + i}" for i in range(SERVERS))

    def _sh(self, cmd: str, timeout: float = 240.0) -> None:
        env = dict(os.environ, KAFKA_PORT=str(self.port), BROKERS=str(SERVERS),
                   PYTHON=sys.executable)
        with self.log.open("ab") as out:
            subprocess.run(["bash", str(KAFKA_SH), cmd], env=env, stdout=out,  # noqa: S603,S607
                           stderr=subprocess.STDOUT, timeout=timeout, check=True)

    def up(self) -> None:
        """Start every server that is not running (a killed one on its data) and wait."""
        self._sh("up")

    def clean(self) -> None:
        self._sh("clean")

    def down(self) -> None:
        self._sh("down")

    def pid(self, server: int = 1) -> int | None:
        try:
            pid = int((self.dir / f"node-{server}" / "kafka.pid").read_text().strip())
            os.kill(pid, 0)
        except (OSError, ValueError):
            return None
        return pid

    def kill(self, server: int = 1) -> bool:
        """SIGKILL server ``server``'s JVM and wait until it is gone."""
        pid = self.pid(server)
        if pid is None:
            return False
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and self.pid(server) is not None:
            time.sleep(0.05)
        return True

    def leaders_away(self, server: int, timeout: float = 90.0) -> dict[str, Any]:
        """After ``server`` died: how long until no partition it led lacks a new leader,
        and until no in-sync replica set names it (seconds, from the metadata, polled every
        0.1 s; None: not within ``timeout``), and how many partitions it led."""
        t0, led, leader_s, isr_s = time.monotonic(), None, None, None
        client = admin(self.bootstrap, log_level=0)
        while time.monotonic() - t0 < timeout and isr_s is None:
            try:
                parts = [p for t in client.list_topics(timeout=2).topics.values()
                         for p in t.partitions.values()]
            except KafkaException:
                time.sleep(0.1)
                continue
            if led is None:
                led = sum(p.leader == server for p in parts)
            if leader_s is None and not any(p.leader in (server, -1) for p in parts):
                leader_s = round(time.monotonic() - t0, 2)
            if leader_s is not None and not any(server in p.isrs for p in parts):
                isr_s = round(time.monotonic() - t0, 2)
            time.sleep(0.1)
        return {"leader_s": leader_s, "isr_s": isr_s, "led": led}


def _reads(run_dir: Path) -> list[tuple[str, float]]:
    """(event id, when a client read it) of every copy any client read, in time order."""
    return sorted(((r["id"], r["t"]) for path in (run_dir / "clients").glob("*.deliv.jsonl")
                   for r in read_jsonl(path)), key=lambda x: x[1])


def event_waits(run_dir: Path) -> list[tuple[float, float]]:
    """(``publish()`` called, seconds until a client first read it) of every delivered event.

    From the publishers' and clients' records only (any client: the first copy read).
    """
    called: dict[str, float] = {}
    for path in (run_dir / "publishers").glob("*.jsonl"):
        called.update((r["id"], r["t0"]) for r in read_jsonl(path) if r.get("k") == "pub")
    first: dict[str, float] = {}
    for eid, t in _reads(run_dir):
        if eid in called and eid not in first:
            first[eid] = t
    return sorted((called[e], t - called[e]) for e, t in first.items())


def _longest_gap(reads: list[float], lo: float, hi: float) -> tuple[float, float]:
    """The longest time no client read anything that began in [lo, hi]: (start, length)."""
    best = (lo, 0.0)
    for a, b in zip(reads, reads[1:], strict=False):
        if lo <= a <= hi and b - a > best[1]:
            best = (a, b - a)
    return best


def pauses(run_dir: Path, faults: list[dict[str, Any]]) -> dict[str, Any]:
    """Per broker kill: the failover the metadata showed, how long no client read anything
    (the routing pause, seen from the clients), and the longest an event published around
    it waited for its first read; and the waits away from any kill (the usual).

    ``failover_s`` is the later of ``leader_s`` (every partition the dead broker led has
    another leader) and ``isr_s`` (no in-sync set names it any more: until then an
    ``acks=all`` write to a partition it followed waits for it); both come from the
    harness's metadata polls after the kill.
    """
    waits = event_waits(run_dir)
    reads = [t for _, t in _reads(run_dir)]
    kills = [f for f in faults if f["kind"] == "broker3_kill"]
    moved = [f for f in faults if f["kind"] == "leaders_moved"]
    out: dict[str, Any] = {"kills": []}
    near: set[int] = set()
    for k, m in zip(kills, moved, strict=False):
        failover = max(m.get("leader_s") or 0.0, m.get("isr_s") or 0.0)
        lo, hi = k["t"] - 2.0, k["t"] + failover + 2.0
        idx = [i for i, (t0, _) in enumerate(waits) if lo <= t0 <= hi]
        near.update(idx)
        start, gap = _longest_gap(reads, k["t"] - 1.0, k["t"] + failover)
        out["kills"].append({
            "target": k["target"], "at": k.get("at"), "led": m.get("led"),
            "leader_s": m.get("leader_s"), "isr_s": m.get("isr_s"), "failover_s": failover,
            "pause_s": round(gap, 2), "pause_from_kill_s": round(start - k["t"], 2),
            "reads_again_after_failover_s": round(start + gap - k["t"] - failover, 2),
            "events": len(idx),
            "max_wait_s": round(max((waits[i][1] for i in idx), default=0.0), 2)})
    usual = sorted(w for i, (_, w) in enumerate(waits) if i not in near)
    for q, name in ((0.5, "usual_p50_s"), (0.99, "usual_p99_s"), (1.0, "usual_max_s")):
        out[name] = round(usual[min(len(usual) - 1, int(len(usual) * q))], 3) if usual else None
    out["pause_s"] = max((k["pause_s"] for k in out["kills"]), default=0.0)
    out["failover_s"] = max((k["failover_s"] for k in out["kills"]), default=0.0)
    out["max_wait_s"] = max((k["max_wait_s"] for k in out["kills"]), default=0.0)
    return out
