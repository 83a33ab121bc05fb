"""The plan to internet scale: how many replicas, shards, partitions and brokers a network needs.

Run (after ``benchmarks.scaleout`` and ``benchmarks.recovery`` wrote their records)::

    .venv/bin/python -m benchmarks.scaling_model [--scaleout benchmarks/results/scaleout.json]
        [--recovery benchmarks/results/recovery.json] [--out docs/scaling.md]
        [--subscriptions 10e6] [--clients 1e6] [--events 1e6] [--nodes 100] [--reach 1.0]

It reads the measured costs from the records and writes the tables of ``docs/scaling.md``
between its two markers, so that they change when the numbers do. Every figure it uses is
either a measured record (named in the table) or an assumption given on the command line
(listed with the table); nothing else.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["Measured", "main", "plan"]

BEGIN, END = "<!-- scaling-model:begin -->", "<!-- scaling-model:end -->"


@dataclass(frozen=True)
class Measured:
    """The costs read from benchmark records (this machine, its date)."""

    cpu_us_per_event: float  # one engine, CPU per routed event (scaleout: dls, 1 replica)
    cpu_us_unsharded: float  # the unsharded node on the same workload
    engine_events_s: float  # events/s of one engine alone in its process (the unsharded node)
    state_bytes_per_part: float  # state bytes per further subscription part (marginal)
    engine_fixed_bytes: float  # an engine's state with no subscription (its fixed part)
    parts_per_subscription: float  # shard parts a subscription is split into
    labels_per_subscription: float
    shards_measured: int
    recovery_s_fixed: float  # restart time: fixed part and per live subscription (snapshots),
    recovery_s_per_sub: float  # a line through the medians at 10K and 1M live
    sources: dict[str, str]


def _records(path: Path) -> list[dict[str, Any]]:
    return list(json.loads(path.read_text()))


def _one(records: list[dict[str, Any]], **want: Any) -> dict[str, Any]:
    for r in records:
        params = r["params"]
        if all((r.get(k) if k in ("system", "metric") else params.get(k)) == v
               for k, v in want.items()) and "replica" not in params:
            return r
    raise LookupError(f"no record with {want}")


def measured(scaleout: Path, recovery: Path, memory: Path | None = None) -> Measured:
    """The costs the model uses, from the records.

    The state's bytes: a line through one replica's state at the main run's subscriptions
    and at ``memory``'s (``scaleout --memory-subscriptions``), per subscription part, its
    intercept shared by the engines; without ``memory``, all of it per part.
    """
    so, rec = _records(scaleout), _records(recovery)
    cpu = _one(so, system="dls", metric="cpu_per_event", replicas=1)
    base = _one(so, system="dls-unsharded", metric="cpu_per_event", replicas=1)
    rate = _one(so, system="dls-unsharded", metric="throughput", replicas=1)
    state = _one(so, system="dls", metric="state_per_replica", replicas=1)
    p = cpu["params"]
    def median_at(live: int) -> float:
        times = sorted(r["value"] for r in rec if r["system"] == "snapshot"
                       and r["metric"] == "recovery_time"
                       and r["params"].get("case") == f"live-{live}")
        if not times:
            raise LookupError(f"{recovery}: no snapshot recovery_time of {live} live")
        return times[len(times) // 2]

    small, big = median_at(10_000), median_at(1_000_000)
    per_sub = (big - small) / (1_000_000 - 10_000)
    parts = p["subscription_parts"] / p["subscriptions"]
    s = p["shards"]
    # the labels per subscription that spread as measured over s shards by the hash:
    # parts = s (1 - (1 - 1/s)^L)
    labels = math.log(1 - parts / s) / math.log(1 - 1 / s) if parts < s else float(s)
    small_bytes, small_parts = state["value"] * 2**20, p["subscription_parts"]
    per_part, fixed = small_bytes / small_parts, 0.0
    if memory is not None and memory.exists():
        more = _one(_records(memory), system="dls-memory", metric="state_per_replica",
                    replicas=1)
        big_bytes, big_parts = more["value"] * 2**20, more["params"]["subscription_parts"]
        per_part = (big_bytes - small_bytes) / (big_parts - small_parts)
        fixed = (small_bytes - per_part * small_parts) / p["shards"]
    return Measured(
        cpu_us_per_event=cpu["value"], cpu_us_unsharded=base["value"],
        engine_events_s=rate["value"],
        state_bytes_per_part=per_part, engine_fixed_bytes=fixed,
        parts_per_subscription=parts, labels_per_subscription=labels,
        shards_measured=s, recovery_s_fixed=small - per_sub * 10_000,
        recovery_s_per_sub=per_sub,
        sources={"scaleout": str(scaleout), "recovery": str(recovery),
                 "memory": str(memory) if memory is not None else ""})


@dataclass(frozen=True)
class Target:
    """The network to plan for, and the assumptions the records cannot give."""

    subscriptions: float
    clients: float
    events: float
    nodes: int
    reach: float  # share of all events that every logical node routes
    utilisation: float  # the share of a core a replica may use (headroom)
    clients_per_delivery_partition: int
    partitions_per_broker: int
    neighbours: int  # of a logical node in the tree (its degree)
    process_mb: float  # a replica's memory besides its state (interpreter, libraries)


def plan(m: Measured, t: Target) -> dict[str, float]:
    """The sizes of the network ``t`` at the costs ``m`` (see docs/scaling.md)."""
    events_per_node = t.events * t.reach
    cores = events_per_node * m.cpu_us_per_event / 1e6 / t.utilisation
    replicas = max(1, math.ceil(cores))
    shards = 1 << max(0, math.ceil(math.log2(replicas)))  # >= replicas, a power of two
    subs_per_node = t.subscriptions / t.nodes
    # a subscription of L labels hashed over S shards touches S (1 - (1 - 1/S)^L) of them
    # (the measured parts per subscription check this at the measured shard count)
    per_sub = shards * (1 - (1 - 1 / shards) ** m.labels_per_subscription)
    parts = subs_per_node * per_sub
    state_mb = (parts * m.state_bytes_per_part + shards * m.engine_fixed_bytes) / 2**20
    memory_per_replica = state_mb / replicas + t.process_mb
    # topics of one node per shard: subscribe, unsubscribe, publish, snapshot (2 partitions),
    # link and forward topics in and out per neighbour; plus the shards topic and the
    # shared delivery topic of its clients
    clients_per_node = t.clients / t.nodes
    delivery = math.ceil(clients_per_node / t.clients_per_delivery_partition)
    per_node = shards * (5 + 4 * t.neighbours) + shards + delivery
    partitions = per_node * t.nodes
    brokers_for_partitions = math.ceil(partitions / t.partitions_per_broker)
    return {
        "events_per_node": events_per_node, "cores_per_node": cores,
        "replicas_per_node": replicas, "shards": shards,
        "replicas_total": replicas * t.nodes, "subscriptions_per_node": subs_per_node,
        "parts_per_node": parts, "state_mb_per_node": state_mb,
        "memory_mb_per_replica": memory_per_replica,
        "delivery_partitions_per_node": delivery, "partitions_per_node": per_node,
        "partitions_total": partitions, "brokers_for_partitions": brokers_for_partitions,
        "hot_label_events_s": m.engine_events_s,
        "parts_per_subscription": per_sub,
        "shard_move_s": m.recovery_s_fixed + parts / shards * m.recovery_s_per_sub,
    }


def render(m: Measured, t: Target, p: dict[str, float]) -> str:
    """The tables of docs/scaling.md (between the markers)."""
    def n(x: float) -> str:
        return f"{x:,.0f}" if x >= 100 or float(x).is_integer() else f"{x:,.2f}"

    return "\n".join([
        BEGIN,
        "",
        "Measured (" + ", ".join(f"`{v}`" for v in m.sources.values() if v) + "):",
        "",
        "| cost | value |",
        "|---|---|",
        f"| CPU per routed event, one engine (sharded, 1 replica) | {n(m.cpu_us_per_event)} µs |",
        f"| CPU per routed event, the unsharded node, same workload | {n(m.cpu_us_unsharded)} µs |",
        f"| events/s of one engine alone in a process (the unsharded node) | "
        f"{n(m.engine_events_s)} |",
        f"| state per further subscription part / an engine's fixed state | "
        f"{n(m.state_bytes_per_part)} B / {m.engine_fixed_bytes / 2**20:,.1f} MB |",
        f"| shard parts per subscription ({m.shards_measured} shards; as if "
        f"{n(m.labels_per_subscription)} labels hashed each) | {n(m.parts_per_subscription)} |",
        f"| restart (snapshot): fixed, per live subscription (line through 10K and 1M) | "
        f"{m.recovery_s_fixed:,.2f} s, {m.recovery_s_per_sub * 1e6:,.2f} µs |",
        "",
        f"Assumed: {t.subscriptions:,.0f} subscriptions of {t.clients:,.0f} clients, "
        f"{t.events:,.0f} events/s, {t.nodes} logical nodes in a tree of degree "
        f"{t.neighbours}, each node routing {t.reach:.0%} of all events (no locality: the "
        f"worst case), a replica using {t.utilisation:.0%} of a core, "
        f"{t.clients_per_delivery_partition:,} clients per delivery partition, "
        f"{t.partitions_per_broker:,} partitions per broker, {t.process_mb:,.0f} MB per "
        "replica besides its state.",
        "",
        "| planned | per logical node | network |",
        "|---|---|---|",
        f"| events routed per second | {n(p['events_per_node'])} | |",
        f"| cores (CPU per event x rate / utilisation) | {n(p['cores_per_node'])} | |",
        f"| replicas (processes) | {n(p['replicas_per_node'])} | "
        f"{n(p['replicas_total'])} |",
        f"| label shards (>= replicas, a power of two) | {n(p['shards'])} | "
        f"{n(p['shards'])} |",
        f"| subscriptions / their shard parts ({n(p['parts_per_subscription'])} each) | "
        f"{n(p['subscriptions_per_node'])} / {n(p['parts_per_node'])} | |",
        f"| state / memory per replica | {n(p['state_mb_per_node'])} MB / "
        f"{n(p['memory_mb_per_replica'])} MB | |",
        f"| Kafka partitions | {n(p['partitions_per_node'])} "
        f"({n(p['delivery_partitions_per_node'])} of deliveries) | "
        f"{n(p['partitions_total'])} |",
        f"| brokers for the partitions alone | | {n(p['brokers_for_partitions'])} |",
        f"| one label's events/s at most (one engine) | {n(p['hot_label_events_s'])} | |",
        f"| a moved shard's pause (its recovery) | {n(p['shard_move_s'])} s | |",
        "",
        END,
    ])


def main(argv: Sequence[str] | None = None) -> int:
    """Read the records, plan, write the tables into ``--out``."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scaleout", type=Path, default=Path("benchmarks/results/scaleout.json"))
    ap.add_argument("--recovery", type=Path, default=Path("benchmarks/results/recovery.json"))
    ap.add_argument("--memory", type=Path,
                    default=Path("benchmarks/results/scaleout_memory.json"))
    ap.add_argument("--out", type=Path, default=Path("docs/scaling.md"))
    ap.add_argument("--subscriptions", type=float, default=10e6)
    ap.add_argument("--clients", type=float, default=1e6)
    ap.add_argument("--events", type=float, default=1e6)
    ap.add_argument("--nodes", type=int, default=100)
    ap.add_argument("--reach", type=float, default=1.0)
    ap.add_argument("--utilisation", type=float, default=0.7)
    ap.add_argument("--clients-per-delivery-partition", type=int, default=1_000)
    ap.add_argument("--partitions-per-broker", type=int, default=4_000)
    ap.add_argument("--neighbours", type=int, default=3)
    ap.add_argument("--process-mb", type=float, default=250.0)
    a = ap.parse_args(argv)
    m = measured(a.scaleout, a.recovery, a.memory)
    t = Target(a.subscriptions, a.clients, a.events, a.nodes, a.reach, a.utilisation,
               a.clients_per_delivery_partition, a.partitions_per_broker, a.neighbours,
               a.process_mb)
    tables = render(m, t, plan(m, t))
    text = a.out.read_text() if a.out.exists() else f"{BEGIN}\n{END}\n"
    if BEGIN not in text or END not in text:
        raise SystemExit(f"{a.out} has no {BEGIN} ... {END} markers to fill")
    head, rest = text.split(BEGIN, 1)
    a.out.write_text(head + tables + rest.split(END, 1)[1])
    print(tables)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
