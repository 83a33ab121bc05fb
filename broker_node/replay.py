"""``dlsroute replay``: the trace of ``dlsroute simulate``, played on real Kafka.

One node service per topology node runs in this process (on threads) against the given
Kafka, or, with ``attach``, the nodes already run elsewhere (``dlsroute node`` processes,
containers) and are watched through Kafka alone (:mod:`broker_node.attached`); every op
goes through the client SDK. After each subscription change the replay
waits until the real nodes have settled: their live subscriptions and the labels each
node has heard from each neighbour equal those of an in-process overlay that applies the
same ops (attached: until every node has taken all its input and nothing moves).
Publishes are then sent, and at the end every client's delivery topic is read
back. The output has the format of ``simulate``; on any trace ``matched`` must equal
``simulate``'s.
"""

from __future__ import annotations

import json
import logging
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from broker_node.attached import AttachedNetwork
from broker_node.local import LocalNetwork
from broker_node.overlay import Overlay, Topology
from broker_node.simulate import read_ops
from connectors.client import Client
from dls.exceptions import DLSError
from dls.space import ContentSpace

__all__ = ["replay_files"]

log = logging.getLogger("dlsroute.replay")


def replay_files(bootstrap: str, space_path: str | Path, topology_path: str | Path,
                 ops_path: str | Path, out_path: str | Path, *, topic_prefix: str = "dls",
                 settle_timeout_s: float = 60.0, drain_idle_s: float = 0.5,
                 attach: bool = False, groups: dict[str, str] | None = None,
                 shared_delivery_partitions: int = 0, **config: Any) -> dict[str, Any]:
    """Play a trace through real nodes on Kafka; write simulate's output format.

    With ``attach`` the nodes must already run under ``topic_prefix`` (their consumer
    groups ``<prefix>-node-<node>`` unless ``groups`` says otherwise); ``config`` then only
    shapes the reference overlay. ``shared_delivery_partitions`` is the nodes' setting of
    that name (the nodes started here get it; attached ones must have it already).
    """
    space = ContentSpace.from_json(space_path)
    topology = Topology.from_spec(json.loads(Path(topology_path).read_text()))
    overlay = Overlay(space, topology, **{k: v for k, v in config.items()
                                          if k in ("mode", "client_filter",
                                                   "routing_filter")})
    nodes: LocalNetwork | AttachedNetwork
    if attach:
        nodes = AttachedNetwork(bootstrap, topic_prefix, topology, groups)
        nodes.wait_ready(settle_timeout_s)
    else:
        nodes = LocalNetwork(bootstrap, topic_prefix, Path(space_path), space, topology,
                             shared_delivery_partitions=shared_delivery_partitions, **config)
    clients: dict[tuple[str, str], Client] = {}

    def client(node: str, cid: str) -> Client:
        key = (node, cid)
        if key not in clients:
            clients[key] = Client(bootstrap, node, cid, space, topic_prefix=topic_prefix,
                                  group_id=f"{topic_prefix}-replay-{node}-{cid}",
                                  shared_delivery_partitions=shared_delivery_partitions)
        return clients[key]

    publishes: list[str] = []
    # What each client subscribed to when each event was published: exact filtering of a
    # delivery is judged against the subscriptions live at publish time.
    live_at: dict[str, dict[tuple[str, str], list[Any]]] = {}
    rejected: list[dict[str, Any]] = []
    try:
        with open(ops_path) as src:
            for n, op, error in read_ops(src):
                if error is None:
                    try:
                        _apply(op, overlay, client, publishes)
                        if op["op"] == "publish":
                            live_at[op["id"]] = {k: list(c.subscriptions.values())
                                                 for k, c in clients.items()}
                    except DLSError as exc:
                        error = f"line {n}: {exc}"
                if error is not None:
                    rejected.append({"line": n, "op": op, "reason": error})
                    if isinstance(op, dict) and op.get("op") == "publish":
                        publishes.append(str(op.get("id")))
                    continue
                if op["op"] == "publish":
                    # Fully propagated before the next op: every node the reference
                    # overlay routed it through has routed it too (or the wait times out
                    # and the output shows the difference).
                    clients[(op["node"], op["client"])].flush()
                    _wait_routed(nodes, overlay.last_visited, f"{op['node']}/{op['client']}",
                                 op["id"], settle_timeout_s)
                if op["op"] in ("subscribe", "unsubscribe"):
                    deadline = time.monotonic() + settle_timeout_s
                    while not nodes.settled(overlay):
                        nodes.check()
                        if time.monotonic() > deadline:
                            raise TimeoutError(f"line {n}: nodes did not settle within "
                                               f"{settle_timeout_s} s")
                        time.sleep(0.02)
        for c in clients.values():
            c.flush()
        delivered: dict[str, list[list[str]]] = defaultdict(list)
        matched: dict[str, list[list[str]]] = defaultdict(list)
        for (node, cid), c in clients.items():
            for d in c.drain(quiet_s=drain_idle_s, include_false_positives=True):
                delivered[d.event_id].append([node, cid])
                subs = live_at.get(d.event_id, {}).get((node, cid), [])
                if any(s.matches(d.attrs) for s in subs):
                    matched[d.event_id].append([node, cid])
    finally:
        nodes.stop()
        for c in clients.values():
            c.close()
    rejected_ids = {str(r["op"].get("id")) for r in rejected
                    if isinstance(r["op"], dict) and r["op"].get("op") == "publish"}
    n_delivered = sum(len(v) for v in delivered.values())
    n_matched = sum(len(v) for v in matched.values())
    summary: dict[str, Any] = {"publishes": len(publishes), "rejected": rejected,
                               "deliveries": n_delivered, "matched": n_matched,
                               "false_positives": n_delivered - n_matched}
    with open(out_path, "w") as out:
        for eid in publishes:
            rec: dict[str, Any] = {"id": eid, "delivered": sorted(delivered.get(eid, [])),
                                   "matched": sorted(matched.get(eid, []))}
            if eid in rejected_ids:
                rec["rejected"] = next(r["reason"] for r in rejected
                                       if str(r["op"].get("id")) == eid)
            out.write(json.dumps(rec) + "\n")
        out.write(json.dumps({"summary": summary}) + "\n")
    return summary


def _wait_routed(nodes: LocalNetwork | AttachedNetwork, visited: list[str], origin: str,
                 event_id: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        nodes.check()
        if nodes.routed(origin, event_id, visited):
            return
        time.sleep(0.01)
    log.warning("event %s was not routed through %s within %s s", event_id, visited, timeout)


def _apply(op: Any, overlay: Overlay, client: Any, publishes: list[str]) -> None:
    """Apply one op to the reference overlay and, if it accepts it, to the real network."""
    overlay.apply(op)  # validates exactly as simulate does; raises on a bad op
    kind = op["op"]
    c = client(op["node"], op["client"])
    if kind == "subscribe":
        c.subscribe(op["where"], sub_id=op["id"])
    elif kind == "unsubscribe":
        c.unsubscribe(op["id"])
    else:
        c.publish(op["attrs"], event_id=op["id"])
        publishes.append(op["id"])
