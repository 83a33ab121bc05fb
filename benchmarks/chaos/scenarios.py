"""The scenarios of the fault harness and their faults, planned from the run's seed.

A scenario is one network (nodes A-B-C, a fresh topic prefix) in one delivery mode and
delivery layout, under one kind of fault. Its faults are drawn up front from
``Random(f"{seed}:{scenario}")`` (moments, targets, down times), so a seed reproduces the
plan; the moments actually reached are logged (a fault waits for the one before it).

Fault kinds:

- ``node_kill``: SIGKILL of a node's process group, restart with the same config (same
  consumer group and transactional id) after 0.5-3 s;
- ``node_stop``: SIGSTOP of a node for longer than its consumer session timeout
  (librdkafka's default 45 s; the node has no setting for it), then SIGCONT;
- ``broker_kill``: SIGKILL of the Kafka broker's JVM under load (nodes are mid
  transaction nearly always at the harness's rates), restart on the same data after
  2-5 s (``kafka.sh up``; the restart itself then took ~45 s in the first runs: the
  restarted controller refuses the broker's registration until the dead one's session
  has expired);
- ``client_kill``: SIGKILL of a client process, restart with the same client id after
  0.5-3 s; the new process resumes its recorder after the last recorded offset and keeps
  the subscriptions its predecessor left live (they are live at the node: nobody
  cancelled them), so they stay expected until it unsubscribes them;
- ``spark_kill``: SIGKILL of the Spark mapping job (``dlsroute spark-map``: its Python
  driver and its JVM, one process group), restart on the same checkpoint after 0.5-3 s.
  In that scenario clients and publishers write JSON records to the raw topics
  (``dls.raw.*``) instead of using the SDK, so every subscription and event goes through
  the job; a subscription counts from its node's network-wide acknowledgement, as
  through the SDK, and the drain also waits for the job to map every raw record;
- ``replica_kill`` (a sharded network, ``shards`` label shards, every node a replica set):
  node B runs as two processes, ``B1`` and ``B2``, of the same config; SIGKILL of one of
  them (drawn from the seed), restart after 0.5-3 s, ``node_kills`` times, each a session
  timeout and 3 s after the one before (:func:`kill_gap`); and a third,
  ``B3``, that starts at about a third of the publishing phase (``replica_join``) and is
  stopped with SIGTERM at about two thirds (``replica_leave``: a graceful leave, its
  shards handed over);
- ``broker3_kill`` (on a cluster of three brokers, ``brokers=3``: ``kafka.sh`` with
  ``BROKERS=3`` on the run's port, every topic replicated three times with
  ``min.insync.replicas`` 2, the nodes given all three addresses): SIGKILL of one server
  (drawn from the seed) under load, ``broker_kills`` times, restart on its data after
  20-30 s (past the controller's 9 s wait for the dead server's session, so the election
  happens while it is down); the other two keep the quorum and two replicas in sync, so
  every ``acks=all`` write goes on once the partitions it led have new leaders;
- ``none``: no fault (the control: what subscription churn alone does).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

EOS, ALO = "exactly_once", "at_least_once"
#: The replica scenarios' consumer group session: a SIGKILLed replica keeps its shards
#: (unrouted) until its session expires, so with the default 45 s ten kills a minute
#: would leave B's killed shards unrouted most of the run. A deployment that expects its
#: replicas to crash sets ``session_timeout_ms`` low in the same way.
REPLICA_SESSION_MS = 10_000
#: Seconds past the session between two replica kills: a killed replica's shards go to the
#: others only once its session has expired, and a rebalance waits for every member, so
#: kills closer than that keep the group rebalancing (the dead one's shards unrouted, a
#: joining replica given nothing) until the kills stop.
REPLICA_SETTLE_S = 3.0


@dataclass(frozen=True)
class Scenario:
    """One network under one kind of fault."""

    name: str
    fault: str
    delivery: str = EOS
    shared: bool = False  # the shared delivery topic instead of one topic per client
    spark: bool = False  # subscriptions and events through the raw topics and spark-map
    #: label shards of the network (> 1: every node runs as a replica set, clients split)
    shards: int = 1
    #: processes of node B at the start (``B1``, ``B2``, ...); 1: one process named ``B``
    replicas: int = 1
    #: the nodes' consumer group session (None: the node's default, 45 s)
    session_timeout_ms: int | None = None
    #: Kafka servers under the network (3: ``BROKERS=3 kafka.sh``, replicated topics)
    brokers: int = 1
    #: why the scenario cannot run yet (None: it runs)
    unavailable: str | None = None


SCENARIOS: dict[str, Scenario] = {s.name: s for s in (
    Scenario("baseline", "none"),
    Scenario("node_kill-eos-topics", "node_kill", EOS, False),
    Scenario("node_kill-eos-shared", "node_kill", EOS, True),
    Scenario("node_kill-alo-topics", "node_kill", ALO, False),
    Scenario("node_kill-alo-shared", "node_kill", ALO, True),
    Scenario("node_stop-eos-topics", "node_stop", EOS, False),
    Scenario("client_kill-eos-topics", "client_kill", EOS, False),
    Scenario("broker_kill-eos-topics", "broker_kill", EOS, False),
    Scenario("broker3_kill-eos-topics", "broker3_kill", EOS, False, brokers=3),
    Scenario("broker3_kill-alo-topics", "broker3_kill", ALO, False, brokers=3),
    Scenario("spark_kill-eos-topics", "spark_kill", EOS, False, spark=True),
    Scenario("replicas-eos-topics", "replica_kill", EOS, False, shards=4, replicas=2,
             session_timeout_ms=REPLICA_SESSION_MS),
    Scenario("replicas-alo-topics", "replica_kill", ALO, False, shards=4, replicas=2,
             session_timeout_ms=REPLICA_SESSION_MS),
)}
DEFAULT_SCENARIOS = tuple(n for n, s in SCENARIOS.items() if s.unavailable is None)


@dataclass(frozen=True)
class Fault:
    """One planned fault: ``at`` seconds after the publishers started."""

    at: float
    kind: str
    target: str
    down_s: float


@dataclass(frozen=True)
class FaultCounts:
    """How many faults of each kind a scenario gets, and how long a node stays stopped."""

    node_kills: int = 10
    broker_kills: int = 2
    client_kills: int = 2
    stop_s: float = 50.0  # above librdkafka's default session timeout (45 s)
    spark_kills: int = 2

    def __post_init__(self) -> None:
        if min(self.node_kills, self.broker_kills, self.client_kills, self.spark_kills) < 0:
            raise ValueError(f"fault counts must be >= 0: {self}")


def min_duration(s: Scenario, counts: FaultCounts) -> float:
    """The shortest publishing phase that holds the scenario's faults."""
    if s.fault == "node_stop":
        return counts.stop_s + 30.0
    if s.fault == "spark_kill":  # the job takes tens of seconds to start again
        return 40.0 * counts.spark_kills + 20.0
    if s.fault == "broker_kill":  # a restart of the broker after a SIGKILL takes ~45 s
        return 65.0 * counts.broker_kills + 10.0
    if s.fault == "broker3_kill":  # 20-30 s down, ~10 s to start again, 10 s to settle
        return 60.0 * counts.broker_kills + 20.0
    if s.fault == "replica_kill":  # kills :func:`kill_gap` apart (and 2 s of jitter)
        return max(20.0, (counts.node_kills * (kill_gap(s) + 2.0) + 8.0) / 0.8)
    return 20.0


def kill_gap(s: Scenario) -> float:
    """The least time between two replica kills: the session, then a few seconds."""
    return (s.session_timeout_ms or 45_000) / 1000.0 + REPLICA_SETTLE_S


def replica_names(s: Scenario, node: str = "B") -> list[str]:
    """The processes of the middle node at the start: ``B`` alone, or ``B1``, ``B2``, ..."""
    return [node] if s.replicas == 1 else [f"{node}{i + 1}" for i in range(s.replicas)]


def joiner_name(s: Scenario, node: str = "B") -> str:
    """The replica of the middle node that joins mid-run and leaves (``B3`` after two)."""
    return f"{node}{s.replicas + 1}"


def plan(s: Scenario, seed: int, duration: float, nodes: Sequence[str],
         clients: Sequence[str], counts: FaultCounts) -> list[Fault]:
    """The faults of ``s`` in a publishing phase of ``duration`` s (deterministic).

    ``replica_kill``: the kills strike ``nodes`` (the replicas of B), at least
    :func:`kill_gap` apart if ``duration`` allows it (:func:`min_duration` does), and the
    joiner's start and leave come at about 1/3 and 2/3 of the phase; the plan is sorted by
    moment.
    """
    rng = random.Random(f"{seed}:{s.name}")
    if s.fault == "none":
        return []
    first, last = min(8.0, 0.1 * duration), 0.8 * duration
    if s.fault == "node_stop":
        at = first + rng.uniform(0, 3.0)
        return [Fault(round(at, 3), "node_stop", rng.choice(nodes), counts.stop_s)]
    n, targets, down = {
        "node_kill": (counts.node_kills, nodes, (0.5, 3.0)),
        "broker_kill": (counts.broker_kills, ["kafka"], (2.0, 5.0)),
        "broker3_kill": (counts.broker_kills, ["kafka1", "kafka2", "kafka3"], (20.0, 30.0)),
        "client_kill": (counts.client_kills, clients, (0.5, 3.0)),
        "spark_kill": (counts.spark_kills, ["spark"], (0.5, 3.0)),
        "replica_kill": (counts.node_kills, nodes, (0.5, 3.0)),
    }[s.fault]
    slot = (last - first) / max(n, 1)
    # Replica kills at least kill_gap apart when the phase is long enough (the default).
    spread = (min(0.5 * slot, max(0.0, slot - kill_gap(s))) if s.fault == "replica_kill"
              else 0.5 * slot)
    out = [Fault(round(first + i * slot + rng.uniform(0, spread), 3), s.fault,
                 rng.choice(list(targets)), round(rng.uniform(*down), 3))
           for i in range(n)]
    if s.fault == "replica_kill":
        joiner = joiner_name(s)
        out += [Fault(round(duration * frac + rng.uniform(-1.0, 1.0), 3), kind, joiner, 0.0)
                for frac, kind in ((1 / 3, "replica_join"), (2 / 3, "replica_leave"))]
        out.sort(key=lambda f: f.at)
    return out
