"""One logical DLS broker of an acyclic overlay, as a pure state machine.

Nothing here does I/O: every operation takes labels and returns the messages to send.

State (paper Algorithm 1, generalised to many neighbours):

* per local client, a counting Bloom filter of the labels of its live subscriptions, kept in
  one bank so that an event is matched against every client at once (:mod:`dls.bank`);
* the exact registry ``subscription id -> (client, labels)``, so that an unsubscription
  removes exactly the labels its subscription added (:mod:`broker_node.registry`);
* per neighbour *n*, the labels *n* advertised to us (exact) and the event routing table
  ``ERT_n`` (a CBF of the same labels, or the exact table itself);
* in ``exact`` mode (the default), the exact count of every label over local
  subscriptions and all neighbours' advertisements, from which the advertisements and
  withdrawals towards each neighbour are decided (:mod:`broker_node.links`);
* in ``paper`` mode, per neighbour *j* an ``SFF_j`` counting Bloom filter of the same size
  as the ERTs, with the paper's query-then-add / query-then-delete rules
  (:mod:`broker_node.paper`). That mode reproduces the paper, including its false
  negatives; never use it to route real traffic.

Events (paper Algorithm 4) go to every client whose filter contains the label and to every
neighbour whose ERT does, never back to the client or neighbour they came from. The why of
these rules is in docs/architecture.md#exact-aggregation.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import repeat
from typing import Any, cast

import numpy as np

from broker_node.broker_config import BrokerConfig
from broker_node.exceptions import (
    BrokerError,
    DuplicateSubscriptionError,
    SubscriptionOwnerError,
    UnknownNeighbourError,
    UnknownSubscriptionError,
)
from broker_node.links import (
    ADVERTISE,
    WITHDRAW,
    Aggregation,
    ExactCounts,
    LinkCounters,
    LinkMessage,
)
from broker_node.paper import PaperCounts
from broker_node.registry import (
    SubscriptionRegistry,
    client_table,
    first_repeat,
    look_up,
    sorted_unique_rows,
    take_rows,
)
from broker_node.resize import FilterResizer
from broker_node.tables import LabelTable, make_table
from dls.bank import BitSlicedCBFBank, ClientFilterBank, DirectLabelBank
from dls.cbf import CountingBloomFilter
from dls.hashing import PositionFn, make_position_fn
from dls.space import ContentSpace

#: ADVERTISE, WITHDRAW and LinkMessage live in :mod:`broker_node.links`, BrokerConfig in
#: :mod:`broker_node.broker_config`; they are re-exported here, where the node service,
#: the overlay and the benchmarks import them from.
__all__ = ["ADVERTISE", "WITHDRAW", "BrokerConfig", "BrokerState", "LinkMessage", "Routes"]

_TABLE_LABELS = 1 << 20  # label spaces up to this size hash through a precomputed table
_EMPTY_SCAN_RATIO = 200  # cost of probing one (label, hash) over scanning one counter


@dataclass(frozen=True)
class Routes:
    """Where each event of a batch goes: clients as CSR, neighbours as a bool matrix."""

    offsets: np.ndarray
    clients: np.ndarray
    neighbours: np.ndarray
    neighbour_names: tuple[str, ...]

    def clients_of(self, e: int) -> np.ndarray:
        """Client indexes that event ``e`` is delivered to."""
        return self.clients[self.offsets[e]:self.offsets[e + 1]]

    def neighbours_of(self, e: int) -> list[str]:
        """Neighbours that event ``e`` is forwarded to."""
        return [n for n, hit in zip(self.neighbour_names, self.neighbours[e], strict=True)
                if hit]


class BrokerState:
    """The broker: subscriptions, aggregation towards neighbours, and event routing."""

    def __init__(self, node_id: str, neighbours: Sequence[str],
                 config: BrokerConfig | None = None, *, label_base: int | None = None,
                 label_space_size: int | None = None):
        """Create an empty broker; the label space, when known, lets tables be dense."""
        self.node_id = node_id
        if len(set(neighbours)) != len(neighbours) or node_id in neighbours:
            raise BrokerError(f"node {node_id!r}: neighbours must be distinct other nodes, "
                              f"got {list(neighbours)}", field="neighbours",
                              value=list(neighbours))
        self.neighbours: tuple[str, ...] = tuple(neighbours)
        self._nidx = {n: i for i, n in enumerate(self.neighbours)}
        self.config = cfg = config or BrokerConfig()
        self.label_base = label_base
        self.label_space_size = label_space_size
        self._clients: dict[str, int] = {}
        self._client_names: list[str] = []  # only ever appended to
        self._names: tuple[str, ...] = ()  # what clients returns, made again when one is added
        self._client_table = client_table()  # compiled batch look-ups (None: the dict)
        self._position_fns: dict[tuple[int, int], PositionFn] = {}
        self._registry = SubscriptionRegistry(label_base, label_space_size)
        if cfg.client_filter == "direct":
            if label_base is None or label_space_size is None:
                raise BrokerError("client_filter 'direct' needs a known label space",
                                  field="client_filter", value="direct")
            self._client_bank: ClientFilterBank = DirectLabelBank(label_space_size,
                                                                  base=label_base)
        else:
            self._client_bank = BitSlicedCBFBank(cfg.client_m, cfg.client_k,
                                          counter_bits=cfg.counter_bits, seed=cfg.seed,
                                          position_fn=self._position_fn(cfg.client_m,
                                                                        cfg.client_k))
        self._client_bank.match_threads = cfg.match_threads
        self._client_bank.update_threads = cfg.update_threads
        #: True: the client bank is not kept up to date (the node finds its clients by an
        #: exact index instead); it is made again from the registry when next read.
        self._bank_deferred = False
        self._bank_stale = False
        self._ert = {n: self._new_routing_cbf() for n in self.neighbours}
        # exact mode tables (also kept in paper mode for "direct" checks: cheap, exact)
        self._total: LabelTable = make_table(label_base, label_space_size)
        self._recv: dict[str, LabelTable] = {
            n: make_table(label_base, label_space_size, np.int8) for n in self.neighbours}
        self._sff = ({n: self._new_routing_cbf() for n in self.neighbours}
                     if cfg.mode == "paper" else {})
        self.resizer = FilterResizer(cfg.client_fp_target or 2.0 ** -cfg.client_k,
                                     cfg.routing_fp_target or 2.0 ** -cfg.routing_k)
        self.counters = LinkCounters(per_neighbour_live=dict.fromkeys(self.neighbours, 0))
        self._aggregation: Aggregation = (
            PaperCounts(self._sff, self._total, self.counters) if cfg.mode == "paper"
            else ExactCounts(node_id, self.neighbours, self._total, self._recv, self.counters,
                             label_base=label_base, label_space_size=label_space_size))
        #: Bumped by every call that may change what :meth:`route` returns (subscribe,
        #: unsubscribe, link messages, a new client): a cache of routes is valid while it
        #: stays the same.
        self.version = 0

    @classmethod
    def for_space(cls, node_id: str, neighbours: Sequence[str], space: ContentSpace,
                  **config: Any) -> BrokerState:
        """A broker for one content space; filter sizes come from the space spec."""
        return cls(node_id, neighbours, BrokerConfig.from_space(space, **config),
                   label_base=space.app_prefix, label_space_size=space.label_space_size)

    def _position_fn(self, m: int, k: int) -> PositionFn | None:
        """A precomputed label -> positions table when the label space is small enough."""
        if self.label_space_size is None or self.label_space_size > _TABLE_LABELS:
            return None
        key = (m, k)
        fn = self._position_fns.get(key)
        if fn is None:
            fn = make_position_fn(m, k, self.config.seed, self.label_space_size,
                                  base=self.label_base or 0)
            self._position_fns[key] = fn
        return fn

    def _new_routing_cbf(self) -> CountingBloomFilter:
        c = self.config
        return CountingBloomFilter.with_params(
            c.routing_m, c.routing_k, counter_bits=c.counter_bits, seed=c.seed,
            position_fn=self._position_fn(c.routing_m, c.routing_k))

    # -- clients ------------------------------------------------------------------------
    def client_index(self, name: str, *, create: bool = True) -> int:
        """Index of a client in the filter bank (-1 if unknown and not created)."""
        idx = self._clients.get(name)
        if idx is None:
            if not create:
                return -1
            self.version += 1
            idx = len(self._client_names)
            self._clients[name] = idx
            self._client_names.append(name)
            if self._client_table is not None:
                self._client_table.reserve([name], idx)
        return idx

    def _client_indexes(self, clients: Sequence[str]) -> np.ndarray:
        """Bank indexes of many clients, creating the new ones (C-level dict lookups)."""
        if self._client_table is not None:  # compiled: one kernel call
            got = look_up(self._client_table, clients)
            if not got.size or got.min() >= 0:
                return got
        try:  # every client known: one C-level pass
            return np.fromiter(map(self._clients.__getitem__, clients), dtype=np.int64,
                               count=len(clients))
        except KeyError:
            return np.array([self.client_index(c) for c in clients], dtype=np.int64)

    def client_name(self, index: int) -> str:
        """Name of the client at a bank index."""
        return self._client_names[index]

    @property
    def clients(self) -> tuple[str, ...]:
        """Every client that has ever subscribed here (one tuple until another is added)."""
        if len(self._names) != len(self._client_names):
            self._names = tuple(self._client_names)
        return self._names

    def subscription(self, sub_id: str) -> tuple[str, np.ndarray]:
        """(client, labels) of a live subscription."""
        if sub_id not in self._registry:
            raise UnknownSubscriptionError(f"unknown subscription id {sub_id!r}",
                                           field="id", value=sub_id)
        client, labels = self._registry.get(sub_id)
        return self._client_names[client], labels

    def __len__(self) -> int:
        return len(self._registry)

    # -- validation ---------------------------------------------------------------------
    def _check_labels(self, labels: Any, what: str) -> np.ndarray:
        arr = np.asarray(labels)
        if arr.ndim != 1 or arr.size == 0:
            raise BrokerError(f"{what}: labels must be a non-empty 1-d array",
                              field="labels", value=arr.shape)
        if arr.dtype.kind not in "ui":
            raise BrokerError(f"{what}: labels must be integers, got dtype {arr.dtype}",
                              field="labels", value=str(arr.dtype))
        if arr.dtype.kind == "i" and arr.min() < 0:
            raise BrokerError(f"{what}: negative label {int(arr.min())}", field="labels",
                              value=int(arr.min()))
        arr = arr.astype(np.uint64, copy=False)
        if self.label_base is not None and self.label_space_size is not None:
            low, high = np.uint64(self.label_base), np.uint64(self.label_space_size)
            if arr.min() >= low and arr.max() - low < high:  # two passes, no temporaries
                return arr
            rel = arr - low
            bad = (arr < low) | (rel >= high)
            if bad.any():
                label = int(arr[bad][0])
                raise BrokerError(f"{what}: label {label:#x} is outside this node's label "
                                  f"space", field="labels", value=label)
        return arr

    # -- subscriptions ------------------------------------------------------------------
    def expect_subscriptions(self, n: int) -> None:
        """Size the ids' index for ``n`` more subscriptions now, not as they come (optional)."""
        self._registry.expect(n)

    def subscribe(self, client: str, sub_id: str, labels: Any) -> list[LinkMessage]:
        """Register a subscription; return the advertisements it causes."""
        return self.subscribe_many([client], [sub_id], np.array([0, len(labels)]), labels)

    def subscribe_many(self, clients: Sequence[str], sub_ids: Sequence[str],
                       offsets: Any, labels: Any) -> list[LinkMessage]:
        """Register a batch of subscriptions given as CSR ``(offsets, labels)``.

        Every check happens before anything changes: a bad batch changes nothing. A
        repeated id with the same client and labels is a no-op (replays are harmless); with
        other content it is refused.
        """
        self.version += 1
        n = len(sub_ids)
        offs = np.asarray(offsets, dtype=np.int64)
        if len(clients) != n or offs.shape != (n + 1,):
            raise BrokerError("subscribe_many: clients, ids and offsets disagree in length",
                              field="offsets", value=len(offs))
        if n == 0:
            return []
        flat = self._check_labels(labels, "subscription")
        lens = np.diff(offs)
        if offs[0] != 0 or offs[-1] != len(flat) or (lens < 0).any():
            raise BrokerError("subscribe_many: offsets do not describe the label array",
                              field="offsets", value=offs[:3].tolist())
        if (lens == 0).any():
            sid = sub_ids[int(np.flatnonzero(lens == 0)[0])]
            raise BrokerError(f"subscription {sid!r} has no labels", field="labels", value=sid)
        offs, flat = sorted_unique_rows(offs, flat)
        known = self._registry.reserve(sub_ids)  # all new: registered already
        if known:
            keep = np.ones(n, dtype=bool)
            for i in known:
                sid = sub_ids[i]
                old_client, old_labels = self._registry.get(sid)
                if (self._client_names[old_client] == clients[i]
                        and np.array_equal(old_labels, flat[offs[i]:offs[i + 1]])):
                    keep[i] = False
                    continue
                raise DuplicateSubscriptionError(
                    f"subscription id {sid!r} is already used by client "
                    f"{self._client_names[old_client]!r} with other labels",
                    field="id", value=sid)
            if not keep.any():
                return []
            rows = np.flatnonzero(keep)
            sub_ids = [sub_ids[i] for i in rows.tolist()]
            clients = [clients[i] for i in rows.tolist()]
            offs, flat = take_rows(offs, flat, rows)
        try:
            cidx = self._client_indexes(clients)
        except BaseException:
            if not known:
                self._registry.release(sub_ids)
            raise
        lens = np.diff(offs)
        self._registry.add(sub_ids, cidx, offs, flat, reserved=not known)
        if self._bank_deferred:
            self._bank_stale = True
        else:
            self._bank.add(np.repeat(cidx, lens), flat)
        out = self._aggregation.add(flat, None)
        if not self._bank_deferred:
            self.resizer.after_subscribe(self, cidx)  # may rebuild the bank larger
        return out

    def unsubscribe(self, client: str, sub_id: str) -> list[LinkMessage]:
        """Remove exactly the labels a subscription added; return the withdrawals."""
        return self.unsubscribe_many([client], [sub_id])

    def unsubscribe_many(self, clients: Sequence[str], sub_ids: Sequence[str]
                         ) -> list[LinkMessage]:
        """Remove a batch of subscriptions; an unknown id or a wrong owner changes nothing."""
        self.version += 1
        if len(clients) != len(sub_ids):
            raise BrokerError("unsubscribe_many: clients and ids disagree in length",
                              field="id", value=len(sub_ids))
        if not sub_ids:
            return []
        codes, repeat_at = self._registry.lookup(sub_ids)
        unknown = np.flatnonzero(codes < 0)
        if unknown.size:
            i = int(unknown[0])
            raise UnknownSubscriptionError(
                f"unknown subscription id {sub_ids[i]!r} (client {clients[i]!r})", field="id",
                value=sub_ids[i])
        if repeat_at >= 0:
            dup = first_repeat(sub_ids)
            raise UnknownSubscriptionError(f"subscription id {dup!r} repeats in one batch",
                                           field="id", value=dup)
        owners, lens, flat = self._registry.gather(codes)
        if self._client_table is not None:  # names compared with the owners' (no hashing)
            wrong_at = self._client_table.first_other(owners, clients)
            asked = owners if wrong_at < 0 else look_up(self._client_table, clients)
        else:
            asked = np.fromiter(map(self._clients.get, clients, repeat(-1)), dtype=np.int64,
                                count=len(clients))
        wrong = np.flatnonzero(asked != owners)
        if wrong.size:
            i = int(wrong[0])
            owner = self._client_names[int(owners[i])]
            raise SubscriptionOwnerError(
                f"subscription {sub_ids[i]!r} belongs to client {owner!r}, not {clients[i]!r}",
                field="client", value=clients[i])
        if self._bank_deferred:
            self._bank_stale = True
        else:
            self._bank.remove(np.repeat(owners, lens), flat)
        self._registry.remove(sub_ids, codes)
        return self._aggregation.remove(flat, None)

    # -- link messages from neighbours ----------------------------------------------------
    def on_link(self, source: str, kind: str, labels: Any) -> list[LinkMessage]:
        """Apply labels advertised or withdrawn by neighbour ``source``.

        Re-advertising a label the neighbour already advertised, or withdrawing one it
        never did, is ignored (link topics are at-least-once).
        """
        self.version += 1
        if source not in self._nidx:
            raise UnknownNeighbourError(f"node {self.node_id!r}: {source!r} is not a "
                                        f"neighbour", field="source", value=source)
        if kind not in (ADVERTISE, WITHDRAW):
            raise BrokerError(f"link message kind must be advertise or withdraw, got {kind!r}",
                              field="kind", value=kind)
        ls = np.unique(self._check_labels(labels, f"link message from {source!r}"))
        recv = self._recv[source]
        have = recv.get(ls) > 0
        if kind == ADVERTISE:
            ls = ls[~have]
            if ls.size == 0:
                return []
            recv.add(ls, 1)
            self._ert[source].add_many(ls)
            self.resizer.after_advertise(self, source)  # may rebuild the ERT larger
            return self._aggregation.add(ls, source)
        ls = ls[have]
        if ls.size == 0:
            return []
        recv.add(ls, -1)
        ert = self._ert[source]
        if self.config.mode == "paper":
            # Algorithm 3 on the ERT: delete only where the CBF says present.
            ert.remove_many(ls[ert.count_many(ls) != 0])
        else:
            ert.remove_many(ls)
        return self._aggregation.remove(ls, source)

    # -- the client bank ----------------------------------------------------------------
    @property
    def _bank(self) -> ClientFilterBank:
        """The client bank, made again from the registry first if it fell behind."""
        if self._bank_stale:
            self._rebuild_client_bank()
        return self._client_bank

    @_bank.setter
    def _bank(self, bank: ClientFilterBank) -> None:
        self._client_bank = bank

    def defer_client_bank(self, on: bool) -> None:
        """Stop (``on``) or resume keeping the client bank up to date.

        A node that finds its local clients by an exact index of its own does not read
        the bank; keeping it costs more than the rest of taking a subscription. While
        deferred, subscriptions change the registry only, and the first read of the bank
        (a route that asks for clients, a digest) makes it again from every live
        subscription in the registry, at once.
        """
        self._bank_deferred = on

    def _rebuild_client_bank(self) -> None:
        self._bank_stale = False
        old = self._client_bank
        reg = self._registry
        owners, lens, flat = reg.gather(reg.index.live())  # every live (client, label)
        if isinstance(old, BitSlicedCBFBank):
            new: ClientFilterBank = old.resized(old.m, old.k, np.repeat(owners, lens), flat,
                                                position_fn=self._position_fn(old.m, old.k))
        else:
            new = DirectLabelBank(cast(int, self.label_space_size),
                                  base=cast(int, self.label_base))
            new.add(np.repeat(owners, lens), flat)
        new.match_threads, new.update_threads = old.match_threads, old.update_threads
        self._client_bank = new  # what the registry holds: no route changes (same version)
        if len(self._client_names):
            self.resizer.after_subscribe(self, np.arange(len(self._client_names)))

    # -- events ---------------------------------------------------------------------------
    def route(self, labels: Any, origin_clients: Any = None, origin_nodes: Any = None,
              *, clients: bool = True) -> Routes:
        """Route a batch of event labels (paper Algorithm 4).

        ``origin_clients[e]`` is the bank index of the publishing client (-1: not a local
        subscriber); ``origin_nodes[e]`` the index of the neighbour it came from (-1: local).
        ``clients`` False: the neighbours only (the caller finds the clients otherwise).
        """
        ls = np.asarray(labels, dtype=np.uint64)
        e = len(ls)
        oc = (np.full(e, -1, dtype=np.int64) if origin_clients is None
              else np.asarray(origin_clients, dtype=np.int64))
        on = (np.full(e, -1, dtype=np.int64) if origin_nodes is None
              else np.asarray(origin_nodes, dtype=np.int64))
        inside = self._in_space(ls)
        if not inside.all():  # a label of another space matches nothing here
            sub = self.route(ls[inside], oc[inside], on[inside], clients=clients)
            counts = np.zeros(e, dtype=np.int64)
            counts[inside] = np.diff(sub.offsets)
            offsets = np.zeros(e + 1, dtype=np.int64)
            np.cumsum(counts, out=offsets[1:])
            hits = np.zeros((e, len(self.neighbours)), dtype=bool)
            hits[inside] = sub.neighbours
            return Routes(offsets, sub.clients, hits, self.neighbours)
        if self._client_names and clients:
            offsets, matched = self._bank.match(
                ls, exclude=None if origin_clients is None else oc)
        else:
            offsets, matched = np.zeros(e + 1, dtype=np.int64), np.zeros(0, dtype=np.int64)
        hits = np.zeros((e, len(self.neighbours)), dtype=bool)
        direct = self.config.routing_filter == "direct"
        # ERTs of the same (m, k, seed) hash a label to the same counters: hash once.
        pos: dict[tuple[int, int, int], np.ndarray] = {}
        for j, n in enumerate(self.neighbours):
            if direct:
                col = self._recv[n].get(ls) > 0
            else:
                ert = self._ert[n]
                counters = ert.counters
                # An ERT with no counter set passes no label. Scanning its m counters for
                # one is worth it when probing the batch's e * k positions would cost more,
                # i.e. for large batches (_EMPTY_SCAN_RATIO is measured; see
                # docs/architecture.md#decode-and-match-choices).
                if _EMPTY_SCAN_RATIO * e * ert.k >= ert.m and not counters.any():
                    continue
                key = (ert.m, ert.k, ert.seed)
                if key not in pos:
                    pos[key] = ert.positions(ls)
                col = counters[pos[key]].min(axis=1) > 0
            hits[:, j] = col & (on != j)
        return Routes(offsets, matched, hits, self.neighbours)

    def _in_space(self, ls: np.ndarray) -> np.ndarray:
        if self.label_base is None or self.label_space_size is None:
            return np.ones(len(ls), dtype=bool)
        rel = ls - np.uint64(self.label_base)
        return (ls >= np.uint64(self.label_base)) & (rel < np.uint64(self.label_space_size))

    def route_one(self, label: int, origin_client: str | None = None,
                  origin_node: str | None = None) -> tuple[list[str], list[str]]:
        """Route one event; returns (client names, neighbour names)."""
        oc = -1 if origin_client is None else self.client_index(origin_client, create=False)
        if origin_node is not None and origin_node not in self._nidx:
            raise UnknownNeighbourError(f"node {self.node_id!r}: {origin_node!r} is not a "
                                        f"neighbour", field="origin", value=origin_node)
        on = -1 if origin_node is None else self._nidx[origin_node]
        r = self.route(np.array([label], dtype=np.uint64), [oc], [on])
        return [self._client_names[i] for i in r.clients_of(0).tolist()], r.neighbours_of(0)

    def neighbour_index(self, name: str) -> int:
        """Index of a neighbour (as used by :meth:`route`)."""
        if name not in self._nidx:
            raise UnknownNeighbourError(f"node {self.node_id!r}: {name!r} is not a neighbour",
                                        field="origin", value=name)
        return self._nidx[name]

    # -- introspection ----------------------------------------------------------------------
    def advertised_to(self, neighbour: str) -> np.ndarray:
        """Exact labels currently advertised to a neighbour (exact mode)."""
        live = self._total.nonzero()
        return live[(self._total.get(live) - self._recv[neighbour].get(live)) > 0]

    def received_from(self, neighbour: str) -> np.ndarray:
        """Labels the neighbour has advertised to us and not withdrawn."""
        return self._recv[neighbour].nonzero()

    def stats(self) -> dict[str, Any]:
        """Sizes, traffic and filter health for metrics."""
        return {
            "node": self.node_id,
            "mode": self.config.mode,
            "subscriptions": len(self._registry),
            "clients": len(self._client_names),
            "labels_advertised": self.counters.advertised,
            "labels_withdrawn": self.counters.withdrawn,
            "labels_live_per_neighbour": dict(self.counters.per_neighbour_live),
            "client_bank_bytes": self._client_bank.memory_bytes(),
            "ert_fill": {n: f.fill_ratio() for n, f in self._ert.items()},
            "ert_estimated_fpr": {n: f.estimated_fpr() for n, f in self._ert.items()},
            "filter_rebuilds": dict(self.resizer.rebuilds),
        }

    def client_fill(self) -> np.ndarray:
        """Share of set counters (labels, for direct filters) in each client's filter.

        Indexed like :attr:`clients`; read by the node's metrics at each scrape.
        """
        fill = self._client_bank.fill_ratios()  # as it is: a scrape rebuilds nothing
        # a client known but never given a label has no column in the bank yet
        return np.pad(fill, (0, max(0, len(self._client_names) - len(fill))))

    def memory_breakdown(self) -> dict[str, int]:
        """Bytes held in the broker's arrays, per part.

        ``client_bank``: the client filter bank; ``routing_filters``: the ERTs' counters;
        ``paper_filters``: the SFFs' counters (paper mode, else 0); ``label_counts``: the
        exact count tables (the total and one per neighbour); ``position_tables``: the
        precomputed label -> positions tables; ``registry``: the registry's CSR arrays;
        ``registry_index``: its id index (a byte arena and hash table; on the reference
        path a dict, counted with its keys). Other Python objects are not counted.
        """
        return {
            "client_bank": self._client_bank.memory_bytes(),
            "routing_filters": sum(int(f.counters.nbytes) for f in self._ert.values()),
            "paper_filters": sum(int(f.counters.nbytes) for f in self._sff.values()),
            "label_counts": self._total.memory_bytes()
            + sum(t.memory_bytes() for t in self._recv.values()),
            "position_tables": sum(_table_bytes(fn) for fn in self._position_fns.values()),
            "registry": self._registry.memory_bytes(),
            "registry_index": self._registry.index_bytes(),
        }

    def memory_bytes(self) -> int:
        """Bytes the broker keeps: the sum of :meth:`memory_breakdown`."""
        return sum(self.memory_breakdown().values())


def _table_bytes(fn: PositionFn) -> int:
    """Bytes of the table behind a position function (0 when it hashes instead)."""
    table = getattr(getattr(fn, "__self__", None), "table", None)
    return int(table.nbytes) if isinstance(table, np.ndarray) else 0
