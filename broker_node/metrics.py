"""The node's metrics: plain counters on the hot path, Prometheus families at scrape time.

The loop only adds to int fields of :class:`Metrics` (and counts plan uses in a
:class:`DeliveryTally`, one numpy call per run of events); :class:`NodeCollector` turns
them, and gauges read from the state, into ``prometheus_client`` families when the page is
fetched. Each node has its own :class:`~prometheus_client.CollectorRegistry` (several nodes
may share a process), served by :class:`MetricsServer` on ``metrics_host:metrics_port``.

Names: every counter ``dls_<name>_total`` with the label ``node``; gauges
``dls_subscriptions``, ``dls_clients``, ``dls_ert_fill`` and ``dls_ert_estimated_fpr``
(label ``neighbour``), ``dls_client_filter_fill`` and ``dls_client_filter_estimated_fpr``
(label ``client``); per-client counters ``dls_client_deliveries_total`` and
``dls_client_edge_removed_total`` (label ``client``); filter rebuilds
``dls_filter_rebuilds_total`` (label ``filter``). Per-client series are bounded: the
:data:`CLIENT_SERIES` busiest clients get their own, the rest share ``client="(others)"``.
"""

from __future__ import annotations

import logging
import threading
import time
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

log = logging.getLogger(__name__)


class DeliveryTally:
    """Deliveries per client, counted per use of a routing plan, summed up when read.

    The router registers each batch of plans it makes (:meth:`add_plans`: the client
    indexes of every plan, as offsets and a flat array) and gets their slot numbers; for a
    run of events it counts the slot of each event's plan (:meth:`count`, one numpy call).
    The counts are folded into per-client totals when read (:meth:`totals`) and when plans
    are dropped (:meth:`forget`, :meth:`release`). Thread-safe: the loop counts while a
    scrape reads.

    Beside deliveries a plan may name the clients the node's exact check removed (label
    matches that no subscription of theirs holds): those are counted per use the same way,
    as removed deliveries (:meth:`removed_totals`).
    """

    def __init__(self) -> None:
        """An empty tally."""
        self._lock = threading.Lock()
        self._totals = np.zeros(0, dtype=np.int64)  # by client index
        self._removed = np.zeros(0, dtype=np.int64)  # by client index
        # slot, sizes, clients, then the same of the removed clients (or None)
        self._blocks: list[_Block] = []
        self._next = 0  # the slot of the next plan
        self._uses = np.zeros(0, dtype=np.int64)  # by slot, since the last fold

    def add_plans(self, offsets: np.ndarray, clients: np.ndarray,
                  removed: tuple[np.ndarray, np.ndarray] | None = None) -> int:
        """Register plans: plan ``i`` delivers to ``clients[offsets[i]:offsets[i + 1]]``.

        ``removed``: offsets and clients of the candidates each plan removed, alike.
        Returns the slot of the first; the others follow in order.
        """
        sizes = np.diff(offsets)
        gone = None if removed is None or not len(removed[1]) else (
            np.diff(removed[0]), np.asarray(removed[1], dtype=np.int64))
        with self._lock:
            base = self._next
            self._next += len(sizes)
            if self._next > len(self._uses):
                grown = np.zeros(max(self._next, 2 * len(self._uses)), dtype=np.int64)
                grown[:len(self._uses)] = self._uses
                self._uses = grown
            self._blocks.append((base, sizes, np.asarray(clients, dtype=np.int64), gone))
        return base

    def add_direct(self, clients: list[int], removed: list[int] | None = None) -> None:
        """Count deliveries made outside any plan (the exact check's), one per client.

        ``removed``: one removed delivery to each of these clients.
        """
        with self._lock:
            if clients:
                self._totals = _added(self._totals, np.bincount(clients))
            if removed:
                self._removed = _added(self._removed, np.bincount(removed))

    def add_counts(self, clients: np.ndarray, removed: np.ndarray,
                   times: np.ndarray | None = None) -> None:
        """Count one delivery per entry of ``clients``, and removed deliveries.

        ``removed[i]`` had ``times[i]`` of them (one each if ``times`` is None).
        """
        with self._lock:
            if len(clients):
                self._totals = _added(self._totals, np.bincount(clients))
            if len(removed):
                self._removed = _added(self._removed, np.bincount(
                    removed, weights=times).astype(np.int64))

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
            self._blocks = [(b[0] - keep, b[1], b[2], b[3]) for b in self._blocks
                            if b[0] >= keep]
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

    def removed_totals(self) -> np.ndarray:
        """Deliveries the exact check removed so far, by client index (a copy)."""
        with self._lock:
            self._fold()
            return self._removed.copy()

    def _fold(self, blocks: list[_Block] | None = None) -> None:
        """Add the uses counted since the last fold to the totals (the lock held).

        ``blocks``: only those plans (their uses are then reset); None: every plan.
        """
        for base, sizes, clients, gone in self._blocks if blocks is None else blocks:
            used = self._uses[base:base + len(sizes)]
            if used.any():
                if len(clients):
                    self._totals = _added(self._totals, np.bincount(
                        clients, weights=np.repeat(used, sizes)))
                if gone is not None:
                    self._removed = _added(self._removed, np.bincount(
                        gone[1], weights=np.repeat(used, gone[0])))
            used[:] = 0


_Block = tuple[int, np.ndarray, np.ndarray, tuple[np.ndarray, np.ndarray] | None]


def _added(totals: np.ndarray, add: np.ndarray) -> np.ndarray:
    """``totals + add`` (int64, as long as the longer; ``add`` may be float counts)."""
    if len(add) > len(totals):
        totals = np.concatenate([totals, np.zeros(len(add) - len(totals), dtype=np.int64)])
    totals[:len(add)] += np.rint(add).astype(np.int64)
    return totals


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
    future_stamps: int = _counter(
        "events stamped more than 10 minutes ahead of the node's clock: copies stamped when "
        "sent")
    outputs_too_large: int = _counter(
        "outputs larger than the node's producer sends, written as dead letters instead")
    origins_replaced: int = _counter(
        "events on a client's own topic that named another origin (replaced by the client's)")
    duplicates: int = _counter("repeated events and unsubscriptions dropped")
    retention_lost: int = _counter(
        "input messages deleted by their topic's retention before the node read them (at "
        "most: transaction markers count too); each gap is logged as an error")
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
        "candidate deliveries the exact check removed (false positives of the filters; "
        "with a label index counted when the node has slack, at least every 30 s)")
    edge_checked: int = _counter("events whose value the exact check read")
    edge_unreadable: int = _counter(
        "events the exact check could not read (not a RawEvent, or a numeric attribute "
        "missing or not a number): delivered by label")
    edge_unchecked: int = _counter(
        "subscriptions without a where the node could compile: delivered by label")
    loop_consume_seconds: float = _counter(
        "seconds of the node's loop spent consuming (waiting for input included)")
    loop_process_seconds: float = _counter(
        "seconds of the node's loop spent applying batches: control, routing, producing")
    loop_commit_seconds: float = _counter(
        "seconds of the node's loop spent committing batches (a transaction each, exactly "
        "once)")
    loop_settle_seconds: float = _counter(
        "seconds of the node's loop spent counting deferred removed matches (folds)")
    #: deliveries by client (``dls_client_deliveries_total``)
    per_client: DeliveryTally = field(default_factory=DeliveryTally)

    def lap(self, part: str, since: float) -> float:
        """Add the seconds from ``since`` (``perf_counter``) to the loop's ``part``; now."""
        now = time.perf_counter()
        name = f"loop_{part}_seconds"
        setattr(self, name, getattr(self, name) + now - since)
        return now

    def counters(self) -> dict[str, tuple[float, str]]:
        """Every counter by name: (value, doc)."""
        return {f.name: (getattr(self, f.name), f.metadata["doc"]) for f in fields(self)
                if f.name != "per_client"}


class NodeCollector:
    """A ``prometheus_client`` collector of one node: its counters and its state's gauges."""

    def __init__(self, node: str, metrics: Metrics, state: BrokerState,
                 client_series: int = 0) -> None:
        """Read ``metrics`` and ``state`` at each scrape.

        ``client_series``: how many clients get series of their own (0:
        :data:`CLIENT_SERIES`); see :meth:`_client_families`.
        """
        self.node, self.metrics, self.state = node, metrics, state
        self.client_series = client_series or CLIENT_SERIES

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
        """Per client: deliveries, removed at the edge, filter fill and estimated rate.

        At most :attr:`client_series` clients get series of their own: those with the
        most deliveries plus removed deliveries (ties: the first known). The others are
        one series, ``client="(others)"``: the sum of their counters and the largest of
        their gauges (the worst filter). ``(others)`` cannot be a client's name.
        """
        names = self.state.clients
        n = len(names)
        tally = self.metrics.per_client
        delivered, removed = _padded(tally.totals(), n), _padded(tally.removed_totals(), n)
        fill = _padded(self.state.client_fill(), n)
        fpr = client_estimated_fpr(self.state, fill)
        shown = np.arange(n)
        if n > self.client_series:
            order = np.argsort(-(delivered + removed), kind="stable")
            shown = np.sort(order[:self.client_series])
        rest = np.ones(n, dtype=bool)
        rest[shown] = False
        labels = ["node", "client"]
        docs = ("deliveries to the client", "deliveries the exact check removed (label "
                "matches that no subscription of the client matches; a node with a label "
                "index counts them when it has slack, at least every 30 s)",
                "share of set positions in the client's filter (0 while the label index "
                "finds the clients: the bank is not kept then)",
                "estimated false-positive rate of the client's filter (fill ** k; 0 for a "
                "direct filter, and while the bank is not kept)")
        for k, (name, values, doc) in enumerate(zip(
                _CLIENT_FAMILIES, (delivered, removed, fill, fpr), docs, strict=True)):
            counter = k < 2  # counters: the others' sum; gauges: the largest of theirs
            f: CounterMetricFamily | GaugeMetricFamily = (
                CounterMetricFamily(name, doc, labels=labels) if counter
                else GaugeMetricFamily(name, doc, labels=labels))
            for i, v in zip(shown.tolist(), values[shown].tolist(), strict=True):
                f.add_metric([self.node, names[i]], v)
            if rest.any():
                f.add_metric([self.node, OTHERS], float(
                    values[rest].sum() if counter else values[rest].max()))
            yield f


#: the per-client families (:meth:`NodeCollector._client_families`)
_CLIENT_FAMILIES = ("dls_client_deliveries", "dls_client_edge_removed",
                    "dls_client_filter_fill", "dls_client_filter_estimated_fpr")

#: the ``client`` label of the clients without series of their own
OTHERS = "(others)"

#: how many clients get per-client series of their own by default
CLIENT_SERIES = 100


def _padded(a: np.ndarray, n: int) -> np.ndarray:
    """``a`` cut or padded with zeros to ``n`` entries (float64)."""
    out = np.zeros(n, dtype=np.float64)
    m = min(n, len(a))
    out[:m] = a[:m]
    return out


def client_estimated_fpr(state: BrokerState, fill: np.ndarray) -> np.ndarray:
    """The estimated false-positive rate of each client's filter from its ``fill``.

    A counting Bloom filter answers a label it does not hold when its ``k`` positions are
    all set: ``fill ** k`` (``BitSlicedCBFBank.estimated_fprs``). A direct filter holds
    exactly its labels: 0.
    """
    k = getattr(state._client_bank, "k", None)  # the bank's own: a rebuilt bank may change it
    if state.config.client_filter != "cbf" or k is None:
        return np.zeros_like(fill)
    return np.power(fill, int(k))


def node_registry(node: str, metrics: Metrics, state: BrokerState, client_series: int = 0
                  ) -> CollectorRegistry:
    """A registry of its own for one node (no process-wide registry: nodes share processes)."""
    registry = CollectorRegistry()
    registry.register(NodeCollector(node, metrics, state, client_series))
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
