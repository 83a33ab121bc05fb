"""DLS behind the :class:`benchmarks.baselines.base.Matcher` interface.

One :class:`broker_node.state.BrokerState` ``B`` with two neighbours (``N1``, ``N2``), set
up as ``benchmarks.core`` sets it up: the ``n_clients`` clients are registered in order (so
bank index ``j`` is workload client ``j``) and the client bank is pre-grown to all of
them. Subscriptions are mapped to labels with ``benchmarks.core.map_boxes`` (cells, then
``box_labels_batch``), named ``s<insertion number>`` and owned by ``c<owner>``; events are
mapped with ``event_labels_batch`` and matched with ``state.route``. Traffic is the number
of labels advertised (on insert) or withdrawn (on delete) towards one neighbour, ``N1``:
the paper's forwarding traffic.

Variants (``name`` defaults to the first column):

==================  ========  ==============  ===============
name                mode      client filter   routing filter
==================  ========  ==============  ===============
``dls``             exact     CBF bank        CBF ERTs
``dls-direct``      exact     direct bank     exact tables
``dls-paper``       paper     CBF bank        CBF ERTs + SFFs
``dls-paper-direct``  paper   direct bank     CBF ERTs + SFFs
==================  ========  ==============  ===============

Deliveries include the model's false positives (cells, and the CBFs' own); they never
miss an exact match. ``paper`` mode changes what is advertised to neighbours (and, as the
architecture notes show, can lose events at *other* brokers), not what this broker
delivers to its own clients.

:meth:`DLSMatcher.memory_bytes` is ``BrokerState.memory_bytes``: the arrays of the broker
state (client bank, ERTs, SFFs, exact count tables, label -> positions tables, the
registry's label arrays), without the id dictionary.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np

from benchmarks.baselines._common import check_boxes, check_events, check_ids
from benchmarks.core import NEIGHBOURS, ROUTING_FILTER, distinct_labels_per_client, map_boxes
from benchmarks.workload import DOMAIN_HIGH, Workload, attr_names, space_spec
from broker_node.state import BrokerState
from dls.mapping import event_labels_batch
from dls.space import ContentSpace

__all__ = ["DLSMatcher"]


def _id_strings(a: int, b: int) -> np.ndarray:
    """The ids ``s<a>`` .. ``s<b - 1>`` as an object array (sliced and listed per batch)."""
    return np.array([f"s{i}" for i in range(a, b)], dtype=object)


class DLSMatcher:
    """A DLS broker (``BrokerState``) as a matcher.

    Args:
        d: Number of numeric attributes.
        g: Cells per attribute.
        n_clients: Owners are client indexes in ``[0, n_clients)``.
        mode: ``exact`` (the project's aggregation) or ``paper`` (the paper's SFF rule).
        client_filter: ``cbf`` (bit-sliced CBF bank) or ``direct`` (direct-address bank).
        client_expected_items: Labels each client filter is sized for (CBF bank).
        client_fp_rate: Target false-positive rate of the client filters at that size.
        routing_m: Counters of each ERT (and SFF).
        routing_k: Hash functions of each ERT (and SFF).
        high: Upper end of every attribute's domain (the low end is 0).
        name: Benchmark system name (default from the table in the module docstring).
        match_threads: Threads the client bank may match a large batch on. 1 (the
            default) keeps DLS single-threaded like the baselines it is compared with.
        update_threads: Threads a large batch's client-bank updates may run on (1, the
            default, as ``match_threads``).
        expected_subscriptions: Subscriptions whose string ids are made here, untimed
            (``paper_systems.build_kwargs`` passes the experiment's largest size).
    """

    supports_delete = True
    #: What ``insert`` / ``delete`` count.
    traffic_unit = "labels"

    def __init__(self, d: int, g: int, n_clients: int, *,
                 mode: Literal["exact", "paper"] = "exact",
                 client_filter: Literal["cbf", "direct"] = "cbf",
                 client_expected_items: int = 64, client_fp_rate: float = 0.01,
                 routing_m: int = ROUTING_FILTER["m"], routing_k: int = ROUTING_FILTER["k"],
                 high: int = DOMAIN_HIGH, name: str | None = None,
                 match_threads: int = 1, update_threads: int = 1,
                 expected_subscriptions: int = 0) -> None:
        if not isinstance(n_clients, int) or n_clients < 1:
            raise ValueError(f"n_clients must be a positive integer, got {n_clients!r}")
        if mode not in ("exact", "paper"):
            raise ValueError(f"mode must be 'exact' or 'paper', got {mode!r}")
        if client_filter not in ("cbf", "direct"):
            raise ValueError(f"client_filter must be 'cbf' or 'direct', got {client_filter!r}")
        self.d, self.g, self.n_clients = d, g, n_clients
        self.low, self.high = 0.0, float(high)
        self.mode = mode
        self.client_filter = client_filter
        suffix = "" if client_filter == "cbf" else "-direct"
        self.name = name or ("dls" if mode == "exact" else "dls-paper") + suffix
        filters = {"client": {"expected_items": client_expected_items,
                              "fp_rate": client_fp_rate},
                   "routing": {"m": routing_m, "k": routing_k}}
        self.space = ContentSpace.from_spec(space_spec(d, g, filters, high=high))
        routing: Literal["cbf", "direct"] = (
            "direct" if client_filter == "direct" and mode == "exact" else "cbf")
        self.state = BrokerState.for_space("B", list(NEIGHBOURS), self.space, mode=mode,
                                           client_filter=client_filter,
                                           routing_filter=routing,
                                           match_threads=match_threads,
                                           update_threads=update_threads,
                                           resize_filters=False)  # the paper's sizes
        for j in range(n_clients):
            self.state.client_index(f"c{j}")
        last = f"c{n_clients - 1}"
        first_label = np.array([self.space.app_prefix or 0], dtype=np.uint64)
        self.state.subscribe_many([last], ["warm-up"], np.array([0, 1]), first_label)
        self.state.unsubscribe_many([last], ["warm-up"])
        self._names = np.array([f"c{j}" for j in range(n_clients)], dtype=object)
        # The string ids the broker's API takes, prepared untimed for the subscriptions
        # the experiment announces (a caller holds its ids before it subscribes); more
        # are made when an insert needs them (then inside its time).
        self._ids = _id_strings(0, max(0, int(expected_subscriptions)))
        self.state.expect_subscriptions(len(self._ids))  # as a caller knowing its size may
        self._owner = np.empty(0, dtype=np.int64)
        self._alive = np.empty(0, dtype=bool)
        self._n = 0

    @classmethod
    def for_workload(cls, w: Workload, *, client_fp_rate: float = 0.01,
                     **kw: Any) -> DLSMatcher:
        """A matcher whose client filters are sized as ``benchmarks.core`` sizes them.

        The CBF bank is sized for the mean number of distinct labels per client of the
        whole workload ``w`` at ``client_fp_rate``.
        """
        p = w.params
        space = ContentSpace.from_spec(space_spec(p.d, p.g, high=p.domain_high))
        offsets, labels = map_boxes(space, w.lo, w.hi)
        per_client = distinct_labels_per_client(offsets, labels, w.owners, p.n_clients,
                                                space.label_space_size)
        items = max(1, int(np.ceil(per_client)))
        return cls(p.d, p.g, p.n_clients, client_expected_items=items,
                   client_fp_rate=client_fp_rate, high=p.domain_high, **kw)

    def __len__(self) -> int:
        return len(self.state)

    def _traffic(self, msgs: list[Any]) -> int:
        return sum(len(m.labels) for m in msgs if m.to == NEIGHBOURS[0])

    def insert(self, lo: np.ndarray, hi: np.ndarray, owners: np.ndarray) -> int:
        """Subscribe a batch; return the labels advertised to one neighbour."""
        lo_f, hi_f, own = check_boxes(lo, hi, owners, self.d, self.n_clients, self.low,
                                      self.high)
        n = len(own)
        if n == 0:
            return 0
        offsets, labels = map_boxes(self.space, lo_f, hi_f)
        if self._n + n > len(self._ids):
            self._ids = np.concatenate([self._ids, _id_strings(len(self._ids), self._n + n)])
        ids = self._ids[self._n:self._n + n].tolist()
        clients = self._names[own].tolist()
        msgs = self.state.subscribe_many(clients, ids, offsets, labels)
        self._owner = np.concatenate([self._owner, own])
        self._alive = np.concatenate([self._alive, np.ones(n, dtype=bool)])
        self._n += n
        return self._traffic(msgs)

    def delete(self, ids: np.ndarray) -> int:
        """Unsubscribe by insertion number; return the labels withdrawn from one neighbour."""
        a = check_ids(ids, self._alive)
        if len(a) == 0:
            return 0
        names = self._ids[a].tolist()
        clients = self._names[self._owner[a]].tolist()
        msgs = self.state.unsubscribe_many(clients, names)
        self._alive[a] = False
        return self._traffic(msgs)

    def match(self, events: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Route events ``(E, d)``: CSR ``(offsets, clients)``, clients sorted per event.

        An event outside the domain has no label and is delivered to nobody.
        """
        ev = check_events(events, self.d)
        cols = {n: ev[:, i] for i, n in enumerate(attr_names(self.d))}
        labels, valid = event_labels_batch(self.space, cols)
        if valid.all():
            r = self.state.route(labels)
            return r.offsets, r.clients
        r = self.state.route(labels[valid])
        counts = np.zeros(len(ev), dtype=np.int64)
        counts[valid] = np.diff(r.offsets)
        offsets = np.zeros(len(ev) + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        return offsets, r.clients

    def memory_bytes(self) -> int:
        """Bytes of the broker state's arrays (see the module docstring)."""
        return self.state.memory_bytes()
