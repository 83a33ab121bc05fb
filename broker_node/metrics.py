"""The node's metrics: plain counters on the hot path, Prometheus families at scrape time.

The loop only adds to int fields of :class:`Metrics` (and counts plan uses in a
:class:`DeliveryTally`, one numpy call per run of events); :class:`NodeCollector` turns
them, and gauges read from the state, into ``prometheus_client`` families when the page is
fetched. Each node has its own :class:`~prometheus_client.CollectorRegistry` (several nodes
may share a process), served by :class:`MetricsServer` on ``metrics_host:metrics_port``.

Names: every counter ``dls_<name>_total`` with the label ``node``; gauges
``dls_subscriptions``, ``dls_clients``, ``dls_ert_fill`` and ``dls_ert_estimated_fpr``
(label ``neighbour``), ``dls_client_filter_fill`` (label ``client``); per-client
deliveries ``dls_client_deliveries_total`` (label ``client``); filter rebuilds
``dls_filter_rebuilds_total`` (label ``filter``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

import numpy as np
from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

    from broker_node.state import BrokerState

__all__ = ["DeliveryTally", "Metrics", "MetricsServer", "NodeCollector", "node_registry"]

log = logging.getLogger("dlsroute.node")


class DeliveryTally:
    """Deliveries per client, counted per use of a routing plan, summed up when read.

    The router registers each batch of plans it makes (:meth:`add_plans`: the client
    indexes of every plan, as offsets and a flat array) and gets their slot numbers; for a
    run of events it counts the slot of each event's plan (:meth:`count`, one numpy call).
    The counts are folded into per-client totals when read (:meth:`totals`) and when plans
    are dropped (:meth:`forget`, :meth:`release`). Thread-safe: the loop counts while a
    scrape reads.
    """

    def __init__(self) -> None:
        """An empty tally."""
        self._lock = threading.Lock()
        self._totals = np.zeros(0, dtype=np.int64)  # by client index
        self._blocks: list[tuple[int, np.ndarray, np.ndarray]] = []  # slot, sizes, clients
        self._next = 0  # the slot of the next plan
        self._uses = np.zeros(0, dtype=np.int64)  # by slot, since the last fold

    def add_plans(self, offsets: np.ndarray, clients: np.ndarray) -> int:
        """Register plans: plan ``i`` delivers to ``clients[offsets[i]:offsets[i + 1]]``.

        Returns the slot of the first; the others follow in order.
        """
        sizes = np.diff(offsets)
        with self._lock:
            base = self._next
            self._next += len(sizes)
            if self._next > len(self._uses):
                grown = np.zeros(max(self._next, 2 * len(self._uses)), dtype=np.int64)
                grown[:len(self._uses)] = self._uses
                self._uses = grown
            self._blocks.append((base, sizes, np.asarray(clients, dtype=np.int64)))
        return base

    def add_direct(self, clients: list[int]) -> None:
        """Count one delivery to each of ``clients`` outside any plan (the exact check's)."""
        with self._lock:
            top = max(clients) + 1
            if top > len(self._totals):
                self._totals = np.concatenate([self._totals, np.zeros(
                    top - len(self._totals), dtype=np.int64)])
            np.add.at(self._totals, clients, 1)

    def count(self, slots: np.ndarray) -> None:
        """Count one use of the plan of each slot (an event routed by it)."""
        with self._lock:
            np.add.at(self._uses, slots, 1)

    def forget(self, keep_from: int | None = None) -> None:
        """Fold the counts, then drop the plans below slot ``keep_from`` (all: None).

        The plans kept are numbered again from slot 0 (the caller moves their slots down
        by ``keep_from``), so that slot numbers stay as small as the plans alive.
        """
        with self._lock:
            self._fold()
            keep = self._next if keep_from is None else keep_from
            self._blocks = [(base - keep, sizes, clients)
                            for base, sizes, clients in self._blocks if base >= keep]
            self._next -= keep

    def release(self, first: int) -> None:
        """Fold the counts, then drop the plans from slot ``first`` on (used no more)."""
        with self._lock:
            self._fold([b for b in self._blocks if b[0] >= first])
            self._blocks = [b for b in self._blocks if b[0] < first]
            self._next = first

    def totals(self) -> np.ndarray:
        """Deliveries so far by client index (a copy; it ends at the last client served)."""
        with self._lock:
            self._fold()
            return self._totals.copy()

    def _fold(self, blocks: list[tuple[int, np.ndarray, np.ndarray]] | None = None) -> None:
        """Add the uses counted since the last fold to the totals (the lock held).

        ``blocks``: only those plans (their uses are then reset); None: every plan.
        """
        for base, sizes, clients in self._blocks if blocks is None else blocks:
            used = self._uses[base:base + len(sizes)]
            if len(clients) and used.any():
                add = np.bincount(clients, weights=np.repeat(used, sizes))
                if len(add) > len(self._totals):
                    self._totals = np.concatenate([self._totals, np.zeros(
                        len(add) - len(self._totals), dtype=np.int64)])
                self._totals[:len(add)] += np.rint(add).astype(np.int64)
            used[:] = 0


def _counter(doc: str) -> Any:
    """A counter field of :class:`Metrics` (its doc is the HELP text of the page)."""
    return field(default=0, metadata={"doc": doc})


@dataclass
class Metrics:
    """The node's counters: plain ints the loop adds to (each is ``dls_<name>_total``)."""

    events_in: int = _counter("events routed (repeats and dead letters not included)")
    deliveries: int = _counter("deliveries to clients")
    delivery_messages: int = _counter("messages written to delivery topics")
    events_forwarded: int = _counter("events forwarded to neighbours")
    control_in: int = _counter("control messages applied (subscribe, unsubscribe, link)")
    labels_advertised: int = _counter("labels advertised to neighbours")
    labels_withdrawn: int = _counter("labels withdrawn from neighbours")
    dead_letters: int = _counter("messages written to the dead-letter topic")
    origins_replaced: int = _counter(
        "events on a client's own topic that named another origin (replaced by the client's)")
    duplicates: int = _counter("repeated events and unsubscriptions dropped")
    stale_links: int = _counter(
        "link control ignored: of an older epoch of its neighbour than one applied")
    unsubscriptions_done: int = _counter(
        "cancelled subscriptions removed, once every input passed the cancellation's time")
    heartbeats: int = _counter("heartbeats sent to neighbours")
    queue_full_waits: int = _counter("waits for room in the producer's local queue")
    route_cache_hits: int = _counter(
        "events routed from a plan made earlier (cached, or for an event of the same key "
        "earlier in the run)")
    route_cache_misses: int = _counter("routing plans made")
    batches: int = _counter("batches committed")
    edge_removed: int = _counter(
        "candidate deliveries the exact check removed (false positives of the filters)")
    edge_checked: int = _counter("events whose value the exact check read")
    edge_unreadable: int = _counter(
        "events the exact check could not read (not a RawEvent, or a numeric attribute "
        "missing or not a number): delivered by label")
    edge_unchecked: int = _counter(
        "subscriptions without a where the node could compile: delivered by label")
    #: deliveries by client (``dls_client_deliveries_total``)
    per_client: DeliveryTally = field(default_factory=DeliveryTally)

    def counters(self) -> dict[str, tuple[int, str]]:
        """Every int counter by name: (value, doc)."""
        return {f.name: (getattr(self, f.name), f.metadata["doc"]) for f in fields(self)
                if f.name != "per_client"}


class NodeCollector:
    """A ``prometheus_client`` collector of one node: its counters and its state's gauges."""

    def __init__(self, node: str, metrics: Metrics, state: BrokerState) -> None:
        """Read ``metrics`` and ``state`` at each scrape."""
        self.node, self.metrics, self.state = node, metrics, state

    def collect(self) -> Iterator[Metric]:
        """The families of one scrape."""
        node, state = self.node, self.state
        for name, (value, doc) in self.metrics.counters().items():
            c = CounterMetricFamily(f"dls_{name}", doc, labels=["node"])
            c.add_metric([node], value)
            yield c
        for name, value, doc in (("subscriptions", len(state), "live subscriptions"),
                                 ("clients", len(state.clients), "clients known"),
                                 ("state_bytes", state.memory_bytes(),
                                  "bytes held in the state's arrays (registry, counts, "
                                  "filters, tables)")):
            g = GaugeMetricFamily(f"dls_{name}", doc, labels=["node"])
            g.add_metric([node], float(value))
            yield g
        yield from self._neighbour_gauges()
        yield from self._client_families()

    def _neighbour_gauges(self) -> Iterator[Metric]:
        stats = self.state.stats()
        for key, doc in (("ert_fill", "share of set bits in the routing filter towards"
                          " the neighbour"),
                         ("ert_estimated_fpr", "estimated false-positive rate of the"
                          " routing filter towards the neighbour")):
            g = GaugeMetricFamily(f"dls_{key}", doc, labels=["node", "neighbour"])
            for neighbour, value in stats[key].items():
                g.add_metric([self.node, neighbour], float(value))
            yield g
        rebuilds = CounterMetricFamily(
            "dls_filter_rebuilds", "filters rebuilt larger from the exact tables (clients: "
            "the client bank; ert:<neighbour>: a routing filter)", labels=["node", "filter"])
        for name, count in stats["filter_rebuilds"].items():
            rebuilds.add_metric([self.node, name], count)
        yield rebuilds

    def _client_families(self) -> Iterator[Metric]:
        names = self.state.clients
        delivered = CounterMetricFamily("dls_client_deliveries",
                                        "deliveries to the client", labels=["node", "client"])
        totals = self.metrics.per_client.totals().tolist()
        for i, name in enumerate(names):  # a client not served yet: 0
            delivered.add_metric([self.node, name], totals[i] if i < len(totals) else 0)
        yield delivered
        fill = GaugeMetricFamily("dls_client_filter_fill",
                                 "share of set positions in the client's filter",
                                 labels=["node", "client"])
        for i, value in enumerate(self.state.client_fill().tolist()[:len(names)]):
            fill.add_metric([self.node, names[i]], value)
        yield fill


def node_registry(node: str, metrics: Metrics, state: BrokerState) -> CollectorRegistry:
    """A registry of its own for one node (no process-wide registry: nodes share processes)."""
    registry = CollectorRegistry()
    registry.register(NodeCollector(node, metrics, state))
    return registry


class MetricsServer:
    """``prometheus_client``'s HTTP server for one registry, on a thread until :meth:`close`."""

    def __init__(self, registry: CollectorRegistry, host: str, port: int, node: str) -> None:
        """Start serving (port 0: any free port; see :attr:`port`)."""
        self._httpd: WSGIServer | None
        self._httpd, self._thread = start_http_server(port, addr=host, registry=registry)
        self.host = host
        self.port: int = self._httpd.server_address[1]
        log.info("node %s serves metrics on %s:%d", node, host, self.port)

    def close(self) -> None:
        """Stop the server and free its port."""
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._thread.join(5)
            self._httpd = None

    def __enter__(self) -> MetricsServer:
        """The server itself."""
        return self

    def __exit__(self, *exc: Any) -> None:
        """Close the server."""
        self.close()
