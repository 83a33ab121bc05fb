"""An in-process overlay of DLS brokers, for simulation, tests and the first demo.

Each operation is propagated through the whole overlay before the next one starts, so the
result is that of a network that has settled. Clients filter exactly (as the SDK does):
``delivered`` is what the network hands to clients, false positives included; ``matched``
is what the clients keep.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from broker_node.edge import EdgeTable, values_match
from broker_node.exceptions import BrokerError, TopologyError, UnknownSubscriptionError
from broker_node.state import ADVERTISE, BrokerState, LinkMessage
from connectors.topics import NAME_RE
from dls.mapping import event_label
from dls.predicates import Subscription
from dls.space import ContentSpace, is_number

__all__ = ["Overlay", "OverlayStats", "Topology"]


@dataclass(frozen=True)
class Topology:
    """Nodes and undirected links of an acyclic, connected overlay."""

    nodes: tuple[str, ...]
    links: tuple[tuple[str, str], ...]

    @classmethod
    def from_spec(cls, spec: Any) -> Topology:
        """Validate ``{"nodes": [...], "links": [[a, b], ...]}``."""
        if not isinstance(spec, Mapping):
            raise TopologyError(f"a topology must be an object, got {spec!r}",
                                field="topology", value=spec)
        nodes, links = spec.get("nodes"), spec.get("links", [])
        if not isinstance(nodes, list) or not nodes:
            raise TopologyError(f"nodes must be a non-empty list, got {nodes!r}",
                                field="nodes", value=nodes)
        for n in nodes:
            if not isinstance(n, str) or NAME_RE.fullmatch(n) is None:
                raise TopologyError(f"node names must be non-empty [A-Za-z0-9_-] strings, "
                                    f"got {n!r}", field="nodes", value=n)
        if len(set(nodes)) != len(nodes):
            dup = next(n for n in nodes if nodes.count(n) > 1)
            raise TopologyError(f"duplicate node {dup!r}", field="nodes", value=dup)
        if not isinstance(links, list):
            raise TopologyError(f"links must be a list, got {links!r}", field="links",
                                value=links)
        known = set(nodes)
        parent = {n: n for n in nodes}

        def root(x: str) -> str:
            while parent[x] != x:
                parent[x] = parent[parent[x]]
                x = parent[x]
            return x

        out: list[tuple[str, str]] = []
        for link in links:
            if not isinstance(link, list | tuple) or len(link) != 2:
                raise TopologyError(f"a link must be a pair of nodes, got {link!r}",
                                    field="links", value=link)
            a, b = link
            for x in (a, b):
                if x not in known:
                    raise TopologyError(f"link {list(link)} names unknown node {x!r}",
                                        field="links", value=x)
            if a == b:
                raise TopologyError(f"self-link on node {a!r}", field="links", value=list(link))
            ra, rb = root(a), root(b)
            if ra == rb:
                raise TopologyError(
                    f"link {list(link)} closes a cycle (or repeats a link); the overlay "
                    f"must be acyclic", field="links", value=list(link))
            parent[ra] = rb
            out.append((a, b))
        roots = {root(n) for n in nodes}
        if len(roots) > 1:
            raise TopologyError(f"the overlay is not connected ({len(roots)} parts)",
                                field="links", value=len(roots))
        return cls(tuple(nodes), tuple(out))

    def neighbours(self, node: str) -> list[str]:
        """Neighbours of a node, in link order."""
        return [b if a == node else a for a, b in self.links if node in (a, b)]

    def to_spec(self) -> dict[str, Any]:
        """JSON form."""
        return {"nodes": list(self.nodes), "links": [list(link) for link in self.links]}


@dataclass
class OverlayStats:
    """Counters of one overlay run."""

    subscriptions: int = 0
    unsubscriptions: int = 0
    publishes: int = 0
    subscription_labels: int = 0
    forwarded_subscription_labels: int = 0
    forwarded_unsubscription_labels: int = 0
    link_messages: int = 0
    event_hops: int = 0
    deliveries: int = 0
    false_positives: int = 0
    matched: int = 0
    edge_removed: int = 0
    rejected: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """JSON form."""
        return dict(self.__dict__)


_OP_FIELDS = {
    "subscribe": ("node", "client", "id", "where"),
    "unsubscribe": ("node", "client", "id"),
    "publish": ("node", "client", "id", "attrs"),
}


class Overlay:
    """Brokers wired along a topology, with exact-filtering clients attached."""

    def __init__(self, space: ContentSpace, topology: Topology, *,
                 exact_delivery: bool = False, **config: Any):
        """Create one broker per node; ``config`` goes to :class:`BrokerConfig`.

        ``exact_delivery``: each node checks its label-matched clients against their
        subscriptions (:mod:`broker_node.edge`), as a node service does by default; then
        ``delivered`` equals ``matched``. Off (the paper's network): by label.
        """
        self.space = space
        self.topology = topology
        self.nodes = {n: BrokerState.for_space(n, topology.neighbours(n), space, **config)
                      for n in topology.nodes}
        self.edges = ({n: EdgeTable(space) for n in topology.nodes} if exact_delivery
                      else None)
        self._client_subs: dict[tuple[str, str], dict[str, Subscription]] = {}
        self.stats = OverlayStats()
        self.last_visited: list[str] = []

    def _node(self, node: str) -> BrokerState:
        state = self.nodes.get(node)
        if state is None:
            raise TopologyError(f"unknown node {node!r} (nodes: {list(self.nodes)})",
                                field="node", value=node)
        return state

    def _propagate(self, source: str, msgs: Sequence[LinkMessage]) -> None:
        queue = deque((source, m) for m in msgs)
        while queue:
            src, msg = queue.popleft()
            self.stats.link_messages += 1
            if msg.kind == ADVERTISE:
                self.stats.forwarded_subscription_labels += len(msg.labels)
            else:
                self.stats.forwarded_unsubscription_labels += len(msg.labels)
            for out in self.nodes[msg.to].on_link(src, msg.kind, msg.labels):
                queue.append((msg.to, out))

    def subscribe(self, node: str, client: str, sub_id: str, where: Any) -> Subscription:
        """Compile, map and register a subscription, then let the overlay settle."""
        state = self._node(node)
        sub = Subscription(self.space, where)
        labels = sub.labels()
        msgs = state.subscribe(client, sub_id, labels)
        if self.edges is not None:
            self.edges[node].add(client, sub_id, sub)
        self._client_subs.setdefault((node, client), {})[sub_id] = sub
        self.stats.subscriptions += 1
        self.stats.subscription_labels += len(labels)
        self._propagate(node, msgs)
        return sub

    def unsubscribe(self, node: str, client: str, sub_id: str) -> None:
        """Remove a subscription, then let the overlay settle."""
        state = self._node(node)
        msgs = state.unsubscribe(client, sub_id)
        if self.edges is not None:
            self.edges[node].remove(client, sub_id)
        subs = self._client_subs.get((node, client), {})
        if subs.pop(sub_id, None) is None:  # pragma: no cover - state already checked it
            raise UnknownSubscriptionError(f"unknown subscription id {sub_id!r}", field="id",
                                           value=sub_id)
        self.stats.unsubscriptions += 1
        self._propagate(node, msgs)

    def publish(self, node: str, client: str, attrs: Mapping[str, Any]
                ) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
        """Route one event from a client at ``node``; returns (delivered, matched)."""
        self._node(node)
        label = event_label(self.space, attrs)
        self.stats.publishes += 1
        delivered: list[tuple[str, str]] = []
        matched: list[tuple[str, str]] = []
        queue: deque[tuple[str, str | None]] = deque([(node, None)])
        self.last_visited = []
        while queue:
            at, came_from = queue.popleft()
            self.last_visited.append(at)
            state = self.nodes[at]
            clients, onward = state.route_one(
                label, origin_client=client if came_from is None else None,
                origin_node=came_from)
            if self.edges is not None and clients:
                clients = self._exact(self.edges[at], label, clients, attrs)
            for c in clients:
                delivered.append((at, c))
                subs = self._client_subs.get((at, c), {})
                if any(s.matches(attrs) for s in subs.values()):
                    matched.append((at, c))
                else:
                    self.stats.false_positives += 1
            for n in onward:
                self.stats.event_hops += 1
                queue.append((n, at))
        self.stats.deliveries += len(delivered)
        self.stats.matched += len(matched)
        return sorted(delivered), sorted(matched)

    def _exact(self, edge: EdgeTable, label: int, clients: list[str],
               attrs: Mapping[str, Any]) -> list[str]:
        """The label-matched ``clients`` the event really matches (the node's exact check)."""
        given = (attrs.get(a) for a in edge.numeric_names)
        values = np.array([v if is_number(v) else np.nan for v in given], dtype=np.float64)
        event = dict(attrs)
        kept = [c for c, v in zip(clients, edge.verdicts(label, clients), strict=True)
                if values_match(v, values, event)]
        self.stats.edge_removed += len(clients) - len(kept)
        return kept

    # -- trace ops -------------------------------------------------------------------------
    def apply(self, op: Any) -> dict[str, Any] | None:
        """Apply one trace op (see ``dlsroute simulate``); returns a publish record."""
        if not isinstance(op, Mapping):
            raise BrokerError(f"an op must be an object, got {op!r}", field="op", value=op)
        kind = op.get("op")
        need = _OP_FIELDS.get(kind) if isinstance(kind, str) else None
        if need is None:
            raise BrokerError(f"unknown op {kind!r} (subscribe, unsubscribe or publish)",
                              field="op", value=kind)
        for key in need:
            if key not in op:
                raise BrokerError(f"{kind} op lacks {key!r}", field=key, value=None)
        for key in ("node", "client", "id"):
            if not isinstance(op[key], str) or not op[key]:
                raise BrokerError(f"{kind} op: {key} must be a non-empty string, got "
                                  f"{op[key]!r}", field=key, value=op[key])
        if kind == "subscribe":
            self.subscribe(op["node"], op["client"], op["id"], op["where"])
            return None
        if kind == "unsubscribe":
            self.unsubscribe(op["node"], op["client"], op["id"])
            return None
        delivered, matched = self.publish(op["node"], op["client"], op["attrs"])
        return {"id": op["id"], "delivered": [list(x) for x in delivered],
                "matched": [list(x) for x in matched]}
