"""``dlsroute replay``: the trace of ``dlsroute simulate``, played on real Kafka.

One node service per topology node runs in this process (on threads) against the given
Kafka, or, with ``attach``, the nodes already run elsewhere (``dlsroute node`` processes,
containers) and are watched through Kafka alone (:mod:`dlsroute.tools.attached_network`);
every op goes through the client SDK. After each subscription change the replay
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
from collections.abc import Iterable
from pathlib import Path
from typing import Any, cast

from broker_node.overlay import Overlay, Topology
from connectors.client import Client
from dls.exceptions import DLSError
from dls.space import ContentSpace
from dlsroute.exceptions import SettleTimeoutError
from dlsroute.tools.attached_network import AttachedNetwork
from dlsroute.tools.local_network import LocalNetwork
from dlsroute.tools.simulate import read_ops

__all__ = ["replay_files"]

log = logging.getLogger(__name__)

_OVERLAY_SETTINGS = ("mode", "client_filter", "routing_filter")

_Nodes = LocalNetwork | AttachedNetwork
# Per event id: the [node, client] pairs that got it.
_PerEvent = dict[str, list[list[str]]]


def replay_files(bootstrap: str, space_path: str | Path, topology_path: str | Path,
                 ops_path: str | Path, out_path: str | Path, *, topic_prefix: str = "dls",
                 settle_timeout_s: float = 60.0, drain_idle_s: float = 0.5,
                 attach: bool = False, groups: dict[str, str] | None = None,
                 shared_delivery_partitions: int = 0,
                 kafka_config: str | Path | None = None, **config: Any) -> dict[str, Any]:
    """Play a trace through real nodes on Kafka; write simulate's output format.

    With ``attach`` the nodes must already run under ``topic_prefix`` (their consumer
    groups ``<prefix>-node-<node>`` unless ``groups`` says otherwise); ``config`` then only
    shapes the reference overlay. ``shared_delivery_partitions`` is the nodes' setting of
    that name (the nodes started here get it; attached ones must have it already).
    ``kafka_config``: a librdkafka properties file whose settings every Kafka client of the
    replay gets (its SDK clients and watchers, and the nodes it starts).
    """
    from connectors.kafka_config import load_kafka_config

    kafka: dict[str, Any] = load_kafka_config(kafka_config)
    if kafka_config is not None:
        config = {**config, "kafka_config": Path(kafka_config)}
    space = ContentSpace.from_json(space_path)
    topology = Topology.from_spec(json.loads(Path(topology_path).read_text()))
    overlay = Overlay(space, topology, **{k: v for k, v in config.items()
                                          if k in _OVERLAY_SETTINGS})
    nodes: _Nodes
    if attach:
        nodes = AttachedNetwork(bootstrap, topic_prefix, topology, groups, **kafka)
        nodes.wait_ready(settle_timeout_s)
    else:
        nodes = LocalNetwork(bootstrap, topic_prefix, Path(space_path), space, topology,
                             shared_delivery_partitions=shared_delivery_partitions, **config)
    run = _Replay(bootstrap, space, nodes, overlay, topic_prefix=topic_prefix,
                  shared_delivery_partitions=shared_delivery_partitions,
                  settle_timeout_s=settle_timeout_s, kafka=kafka)
    try:
        with open(ops_path) as src:
            run.play(read_ops(src))
        delivered, matched = run.read_back(drain_idle_s)
    finally:
        run.close()
    return _write_output(out_path, run.publishes, run.rejected, delivered, matched)


class _Replay:
    """One replay: the reference overlay, the real nodes, the SDK clients, what was sent."""

    def __init__(self, bootstrap: str, space: ContentSpace, nodes: _Nodes, overlay: Overlay,
                 *, topic_prefix: str, shared_delivery_partitions: int,
                 settle_timeout_s: float, kafka: dict[str, str] | None = None):
        self.bootstrap, self.space, self.nodes, self.overlay = bootstrap, space, nodes, overlay
        self.prefix, self.shared = topic_prefix, shared_delivery_partitions
        self.settle_timeout_s = settle_timeout_s
        self.kafka = kafka or {}
        self.clients: dict[tuple[str, str], Client] = {}
        self.publishes: list[str] = []
        self.rejected: list[dict[str, Any]] = []
        # What each client subscribed to when each event was published: exact filtering
        # of a delivery is judged against the subscriptions live at publish time.
        self.live_at: dict[str, dict[tuple[str, str], list[Any]]] = {}

    def client(self, node: str, cid: str) -> Client:
        """The SDK client ``cid`` at ``node``, created on first use."""
        key = (node, cid)
        if key not in self.clients:
            self.clients[key] = Client(self.bootstrap, node, cid, self.space,
                                       topic_prefix=self.prefix,
                                       group_id=f"{self.prefix}-replay-{node}-{cid}",
                                       shared_delivery_partitions=self.shared,
                                       **cast(dict[str, Any], self.kafka))
        return self.clients[key]

    def play(self, ops: Iterable[tuple[int, Any, str | None]]) -> None:
        """Apply every op in order, each propagated before the next; bad ops are kept."""
        for n, op, error in ops:
            if error is None:
                error = self._apply(n, op)
            if error is not None:
                self._reject(n, op, error)
                continue
            if op["op"] == "publish":
                self._wait_routed(op)
            if op["op"] in ("subscribe", "unsubscribe"):
                self._wait_settled(n)

    def _apply(self, n: int, op: Any) -> str | None:
        """Apply one op to the overlay and the real network; the reason if it is refused."""
        try:
            self.overlay.apply(op)  # validates exactly as simulate does; raises on a bad op
            kind = op["op"]
            c = self.client(op["node"], op["client"])
            if kind == "subscribe":
                c.subscribe(op["where"], sub_id=op["id"])
            elif kind == "unsubscribe":
                c.unsubscribe(op["id"])
            else:
                c.publish(op["attrs"], event_id=op["id"])
                self.publishes.append(op["id"])
                self.live_at[op["id"]] = {k: list(cl.subscriptions.values())
                                          for k, cl in self.clients.items()}
        except DLSError as exc:
            return f"line {n}: {exc}"
        return None

    def _reject(self, n: int, op: Any, error: str) -> None:
        self.rejected.append({"line": n, "op": op, "reason": error})
        if isinstance(op, dict) and op.get("op") == "publish":
            self.publishes.append(str(op.get("id")))

    def _wait_routed(self, op: dict[str, Any]) -> None:
        """Wait until every node the overlay routed the event through has routed it too.

        Or the wait times out, and the output shows the difference.
        """
        self.clients[(op["node"], op["client"])].flush()
        visited, event_id = self.overlay.last_visited, op["id"]
        deadline = time.monotonic() + self.settle_timeout_s
        while time.monotonic() < deadline:
            self.nodes.check()
            if self.nodes.routed(f"{op['node']}/{op['client']}", event_id, visited):
                return
            time.sleep(0.01)
        log.warning("event %s was not routed through %s within %s s", event_id, visited,
                    self.settle_timeout_s)

    def _wait_settled(self, n: int) -> None:
        """Wait until the nodes hold what the overlay holds after the op of line ``n``."""
        deadline = time.monotonic() + self.settle_timeout_s
        while not self.nodes.settled(self.overlay):
            self.nodes.check()
            if time.monotonic() > deadline:
                raise SettleTimeoutError(f"line {n}: nodes did not settle within "
                                         f"{self.settle_timeout_s} s",
                                         field="settle_timeout_s",
                                         value=self.settle_timeout_s)
            time.sleep(0.02)

    def read_back(self, quiet_s: float) -> tuple[_PerEvent, _PerEvent]:
        """Every client's deliveries: all of them, and those its live subscriptions match."""
        for c in self.clients.values():
            c.flush()
        delivered: _PerEvent = defaultdict(list)
        matched: _PerEvent = defaultdict(list)
        for (node, cid), c in self.clients.items():
            for d in c.drain(quiet_s=quiet_s, include_false_positives=True):
                delivered[d.event_id].append([node, cid])
                subs = self.live_at.get(d.event_id, {}).get((node, cid), [])
                if any(s.matches(d.attrs) for s in subs):
                    matched[d.event_id].append([node, cid])
        return delivered, matched

    def close(self) -> None:
        """Stop the nodes (or the watching of them), then close every client."""
        self.nodes.stop()
        for c in self.clients.values():
            c.close()


def _write_output(out_path: str | Path, publishes: list[str], rejected: list[dict[str, Any]],
                  delivered: _PerEvent, matched: _PerEvent) -> dict[str, Any]:
    """Write one record per publish and the summary line, as simulate does."""
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
