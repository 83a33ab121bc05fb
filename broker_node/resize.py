"""Filters that resize themselves: a node rebuilds a filter larger once it is too full.

A broker's client bank and its routing filters (ERTs, one per neighbour) are counting
Bloom filters sized once, from the space's ``filters`` spec. A node that holds more labels
than that sizing expected gets more false positives than its target. The node keeps the
exact tables behind every filter (the registry of live subscriptions behind the client
bank, the labels each neighbour advertised behind its ERT), so it can rebuild a filter at
any size from them, losing nothing.

* **Target.** The ``fp_rate`` of the filter's spec (``{"expected_items", "fp_rate"}``);
  for a spec of ``{"m", "k"}``, the rate those imply at the item count for which ``k`` is
  optimal (``n = m ln 2 / k``): ``2 ** -k``.
* **Estimate.** ``fill ** k`` (``CountingBloomFilter.estimated_fpr``); for the client bank,
  the worst client's (the bank's ``(m, k)`` is shared, so one rebuild serves them all).
* **Where the check runs.** After each batch of subscriptions and each advertisement
  from a neighbour (``BrokerState.subscribe_many``, ``on_link``), never per event. First
  from the item counts alone, ``(1 - exp(-k n / m)) ** k`` (the bank: of the batch's
  clients); only if that passes the target are the counters scanned for the fill (the
  bank: of those clients), and then again only once the item count has grown by
  :data:`RESCAN_GROWTH` since the last scan.
* **Rebuild.** ``m`` doubled until it holds twice the labels held (the client bank: the
  fullest client's, estimated from its fill) at the target rate, with ``k`` the fewest
  that reach it there. Right after it the estimate is under the target by about
  ``2 ** k`` (at least 1.9), which is the hysteresis: the filter must
  take twice its labels again before the next rebuild. Filters never shrink.
* **No false negatives.** The new filter is built whole from the exact tables while the
  old one stays in place, then swapped in, in one assignment, between two batches: every
  route before the swap is the old filter's, every route after it the new one's, and both
  hold every live label. ``BrokerState.version`` moves, so no cached plan outlives it.
  The loop routes nothing while a rebuild runs; how long that is, at 500K labels, is
  measured by ``benchmarks/resize.py`` (docs/architecture.md#filters-that-resize-themselves).
* **Off** with ``BrokerConfig.resize_filters = False`` (``NodeSettings.resize_filters``),
  and always in ``paper`` mode (its filters reproduce the paper) and for direct filters.
* **Restarts.** A snapshot records each filter's ``(m, k)`` (:meth:`FilterResizer.sizes`);
  the restored state makes its filters that size before loading the subscriptions, so a
  restart routes as the node did before (:meth:`FilterResizer.presize`).
"""

from __future__ import annotations

import logging
import math
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from broker_node.exceptions import BrokerError
from broker_node.registry import SubscriptionRegistry
from broker_node.tables import LabelTable
from dls.bank import BitSlicedCBFBank, ClientFilterBank
from dls.cbf import CountingBloomFilter
from dls.hashing import PositionFn

__all__ = ["CLIENTS", "MAX_FILTER_BYTES", "RESCAN_GROWTH", "FilterResizer", "Rebuild",
           "check_target", "expected_rate", "grown_size", "spec_size"]

log = logging.getLogger(__name__)

#: The name of the client bank in logs and metrics (an ERT's is ``ert:<neighbour>``).
CLIENTS = "clients"
#: Growth of a filter's item count since its last scan before its counters are scanned
#: again (the item count alone said it was over its target).
RESCAN_GROWTH = 1 / 16
#: The largest filter a rebuild makes (bytes of counters and bitsets); a filter that would
#: need more is left as it is, with a warning.
MAX_FILTER_BYTES = 1 << 30


class BrokerState(Protocol):
    """What this module reads and swaps of a :class:`broker_node.state.BrokerState`.

    (The state imports this module: a protocol, not an import, names it here.)
    """

    node_id: str
    neighbours: tuple[str, ...]
    config: Any
    version: int
    _bank: ClientFilterBank  # made again first when stale (a property)
    _client_bank: ClientFilterBank  # as it is
    _bank_stale: bool
    _ert: dict[str, CountingBloomFilter]
    _sff: dict[str, CountingBloomFilter]
    _recv: dict[str, LabelTable]
    _registry: SubscriptionRegistry
    _position_fns: dict[tuple[int, int], PositionFn]

    def _position_fn(self, m: int, k: int) -> PositionFn | None: ...


def check_target(value: Any, field: str) -> float | None:
    """A target false-positive rate: None or a number in (0, 1)."""
    if value is None:
        return None
    if (isinstance(value, bool) or not isinstance(value, int | float)
            or not 0.0 < float(value) < 1.0):
        raise BrokerError(f"{field} must be a rate in (0, 1), got {value!r}", field=field,
                          value=value)
    return float(value)


def spec_size(spec: Mapping[str, Any]) -> tuple[int, int, float]:
    """``(m, k, target rate)`` of a filter spec of the space (see the module text)."""
    if "m" in spec:
        return int(spec["m"]), int(spec["k"]), 2.0 ** -int(spec["k"])
    p = float(spec["fp_rate"])
    params = CountingBloomFilter(spec["expected_items"], p).params  # the filter's own rule
    return params.m, params.k, p


def expected_rate(n: int, m: int, k: int) -> float:
    """False-positive rate of an ``(m, k)`` filter holding ``n`` distinct labels."""
    return float((1.0 - math.exp(-k * max(0, n) / m)) ** k)


def grown_size(n: int, target: float, m: int) -> tuple[int, int]:
    """``(m, k)`` for ``2 n`` labels at ``target``: ``m`` doubled until it holds them.

    Doubling (never less than once) keeps the sizes of filters grown from one spec on one
    ladder, so that ERTs of equal size share their position table and their hashing in a
    route; ``k`` is the fewest hash functions that reach ``target`` at that ``m`` (as
    :func:`dls.cbf.size_for` chooses them), at most the optimal ``round(-log2 target)``.
    """
    n2 = max(1, 2 * n)
    ln2 = math.log(2)
    need = math.ceil(-n2 * math.log(target) / ln2 ** 2)
    m2 = 2 * m
    while m2 < need:
        m2 *= 2
    k_target = max(1, round(-math.log2(target)))
    k_best = min(64, k_target, max(1, round(m2 / n2 * ln2)))
    k = next((k for k in range(1, k_best) if expected_rate(n2, m2, k) <= target), k_best)
    return m2, k


@dataclass(frozen=True)
class Rebuild:
    """One rebuild, as logged."""

    filter: str
    old: tuple[int, int]
    new: tuple[int, int]
    rate_before: float
    rate_after: float
    labels: int
    seconds: float


class FilterResizer:
    """Watches a broker's filters and rebuilds one larger when it passes its target."""

    def __init__(self, client_target: float, routing_target: float) -> None:
        """Targets of the client bank and of the ERTs."""
        self.client_target = client_target
        self.routing_target = routing_target
        #: rebuilds so far, by filter name (``dls_filter_rebuilds_total``)
        self.rebuilds: dict[str, int] = {}
        #: the latest rebuilds, newest last
        self.history: deque[Rebuild] = deque(maxlen=64)
        #: True while a snapshot is restored: one check at its end instead
        self.suspended = False
        self._scanned: dict[str, int] = {}  # an ERT's item count at its last scan
        #: per client slot, its item count when its filter was last scanned
        self._client_scanned = np.zeros(0, dtype=np.int64)
        self._capped: set[str] = set()  # filters left as they are (MAX_FILTER_BYTES)

    @staticmethod
    def on(state: BrokerState) -> bool:
        """Whether ``state``'s filters resize (the setting, exact mode)."""
        return state.config.resize_filters and state.config.mode == "exact"

    # -- checks -----------------------------------------------------------------------
    def after_subscribe(self, state: BrokerState, clients: np.ndarray) -> None:
        """After a batch of subscriptions of the bank indexes ``clients``."""
        bank = state._bank
        if (self.suspended or not clients.size or not self.on(state)
                or not isinstance(bank, BitSlicedCBFBank)):
            return
        due = self._due_clients(bank, clients)
        if due.size:
            worst = float(bank.fill_of(due).max()) ** bank.k
            if worst > self.client_target:
                self._rebuild_bank(state, bank, worst, bank.fill_ratios())

    def after_advertise(self, state: BrokerState, neighbour: str) -> None:
        """After labels advertised by ``neighbour`` were added to its ERT."""
        if (self.suspended or not self.on(state)
                or state.config.routing_filter != "cbf"):
            return
        ert = state._ert[neighbour]
        name = f"ert:{neighbour}"
        if self._due(name, ert.n_items, ert.m, ert.k, self.routing_target):
            rate = ert.estimated_fpr()
            if rate > self.routing_target:
                self._rebuild_ert(state, neighbour, rate)

    def check_all(self, state: BrokerState) -> None:
        """Check every filter now (after a restore), whatever was scanned before."""
        self._scanned.clear()
        self._client_scanned[:] = 0
        bank = state._client_bank  # a stale bank is checked when it is made again
        if isinstance(bank, BitSlicedCBFBank) and bank.n_clients and not state._bank_stale:
            self.after_subscribe(state, np.arange(bank.n_clients))
        for n in state.neighbours:
            self.after_advertise(state, n)

    def _due(self, name: str, n: int, m: int, k: int, target: float) -> bool:
        """Whether to scan an ERT's counters: its item count says it may be over."""
        if name in self._capped or expected_rate(n, m, k) <= target:
            return False
        if n < self._scanned.get(name, 0) * (1 + RESCAN_GROWTH):
            return False
        self._scanned[name] = n
        return True

    def _due_clients(self, bank: BitSlicedCBFBank, clients: np.ndarray) -> np.ndarray:
        """The clients of a batch whose filters to scan, client by client as :meth:`_due`.

        A client's item count counts repeated labels (two subscriptions of one label), so
        it may say over when the filter is not: that client is scanned again only once its
        count grew by :data:`RESCAN_GROWTH`, and it hides no other client.
        """
        if CLIENTS in self._capped:
            return clients[:0]
        n = bank.item_counts[clients]  # a client twice in the batch is looked at twice
        m, k = bank.m, bank.k
        if expected_rate(int(n.max()), m, k) <= self.client_target:
            return clients[:0]  # the usual case: one max over the batch
        cli = clients
        over = (-np.expm1(-k * n / m)) ** k > self.client_target
        if len(self._client_scanned) < bank.capacity:
            grown = np.zeros(bank.capacity, dtype=np.int64)
            grown[:len(self._client_scanned)] = self._client_scanned
            self._client_scanned = grown
        due = over & (n >= self._client_scanned[cli] * (1 + RESCAN_GROWTH))
        self._client_scanned[cli[due]] = n[due]
        return cli[due]

    # -- rebuilds -----------------------------------------------------------------------
    def _too_big(self, name: str, nbytes: int) -> bool:
        if nbytes <= MAX_FILTER_BYTES:
            return False
        self._capped.add(name)
        log.warning("filter %s is over its false-positive target but is not rebuilt: the "
                    "larger one would need %d bytes, over %d", name, nbytes, MAX_FILTER_BYTES)
        return True

    def _rebuild_bank(self, state: BrokerState, bank: BitSlicedCBFBank, rate: float,
                      fill: np.ndarray) -> None:
        t0 = time.perf_counter()
        m, k = bank.m, bank.k
        items = bank.item_counts[:len(fill)]
        with np.errstate(divide="ignore"):  # a full filter: its item count instead
            distinct = np.where(fill < 1, -m / k * np.log1p(-np.minimum(fill, 1)), items)
        labels = int(np.ceil(np.minimum(distinct, items).max()))
        m2, k2 = grown_size(labels, self.client_target, m)
        if self._too_big(CLIENTS, m2 * bank.capacity * (bank.counter_bits + 1) // 8):
            return
        reg = state._registry
        owners, lens, flat = reg.gather(reg.index.live())  # every live (client, label)
        new = bank.resized(m2, k2, np.repeat(owners, lens), flat,
                           position_fn=state._position_fn(m2, k2))
        state._bank = new  # the swap: routes from here on use the new bank
        state.version += 1
        self._client_scanned[:] = 0
        self._done(state, CLIENTS, (m, k), (m2, k2), rate, len(flat), t0,
                   float(new.estimated_fprs().max(initial=0.0)))

    def _rebuild_ert(self, state: BrokerState, neighbour: str, rate: float) -> None:
        t0 = time.perf_counter()
        old = state._ert[neighbour]
        labels = state._recv[neighbour].nonzero()  # exactly what the ERT holds
        m2, k2 = grown_size(len(labels), self.routing_target, old.m)
        name = f"ert:{neighbour}"
        if self._too_big(name, m2):
            return
        new = CountingBloomFilter.with_params(
            m2, k2, counter_bits=old.counter_bits, seed=old.seed,
            position_fn=state._position_fn(m2, k2))
        new.add_many(labels)
        state._ert[neighbour] = new  # the swap
        state.version += 1
        self._done(state, name, (old.m, old.k), (m2, k2), rate, len(labels), t0,
                   new.estimated_fpr())

    def _done(self, state: BrokerState, name: str, old: tuple[int, int],
              new: tuple[int, int], before: float, labels: int, t0: float,
              after: float) -> None:
        _prune_position_fns(state)
        seconds = time.perf_counter() - t0
        self.rebuilds[name] = self.rebuilds.get(name, 0) + 1
        self.history.append(Rebuild(name, old, new, before, after, labels, seconds))
        log.info("node %s: filter %s rebuilt larger from the exact tables: m %d -> %d, k %d "
                 "-> %d, estimated false-positive rate %.3g -> %.3g (target %.3g), %d entries,"
                 " in %.3f s", state.node_id, name, old[0], new[0], old[1], new[1], before,
                 after, self.client_target if name == CLIENTS else self.routing_target,
                 labels, seconds)

    # -- snapshots --------------------------------------------------------------------
    @staticmethod
    def sizes(state: BrokerState) -> dict[str, list[int]]:
        """``(m, k)`` of every CBF of ``state`` by filter name (what a snapshot keeps)."""
        out = {f"ert:{n}": [f.m, f.k] for n, f in state._ert.items()}
        bank = state._client_bank  # as it is: a deferred bank is not made again for this
        if isinstance(bank, BitSlicedCBFBank):
            out[CLIENTS] = [bank.m, bank.k]
        return out

    def presize(self, state: BrokerState, sizes: Mapping[str, Any]) -> None:
        """Give ``state``'s empty filters the sizes a snapshot recorded, where larger."""
        if not self.on(state):
            return
        bank = state._bank
        size = sizes.get(CLIENTS)
        if size and isinstance(bank, BitSlicedCBFBank) and int(size[0]) > bank.m:
            m, k = int(size[0]), int(size[1])
            state._bank = bank.resized(m, k, np.zeros(0, np.int64), np.zeros(0, np.uint64),
                                       position_fn=state._position_fn(m, k))
        for n, old in state._ert.items():
            size = sizes.get(f"ert:{n}")
            if size and int(size[0]) > old.m:
                m, k = int(size[0]), int(size[1])
                state._ert[n] = CountingBloomFilter.with_params(
                    m, k, counter_bits=old.counter_bits, seed=old.seed,
                    position_fn=state._position_fn(m, k))
        state.version += 1
        _prune_position_fns(state)


def _prune_position_fns(state: BrokerState) -> None:
    """Drop the position tables of sizes no filter has any more."""
    used = {(f.m, f.k) for f in (*state._ert.values(), *state._sff.values())}
    bank = state._client_bank
    if isinstance(bank, BitSlicedCBFBank):
        used.add((bank.m, bank.k))
    for key in [key for key in state._position_fns if key not in used]:
        del state._position_fns[key]
