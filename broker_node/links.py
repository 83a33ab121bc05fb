"""What a broker tells its neighbours, and the exact counts it decides that from.

A broker advertises a label to neighbour *j* so that *j* routes matching events towards it,
and withdraws it when nothing here (nor behind any other neighbour) wants it any more.

In ``exact`` mode (the default) the decision is made on exact counts: the count of every
label over local subscriptions and all neighbours' advertisements. The count *advertised
to* neighbour *j* is that total minus *j*'s own advertisement; a label is advertised to *j*
when that count goes 0 -> 1 and withdrawn when it goes 1 -> 0 (paper Algorithms 2 and 3
with the fix of docs/architecture.md#exact-aggregation).
The ``paper`` mode's rules are in :mod:`broker_node.paper`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from broker_node.exceptions import BrokerError
from broker_node.tables import LabelTable, unique_counts

__all__ = ["ADVERTISE", "WITHDRAW", "Aggregation", "ExactCounts", "LinkCounters", "LinkMessage"]

ADVERTISE = "advertise"
WITHDRAW = "withdraw"


@dataclass(frozen=True)
class LinkMessage:
    """Labels advertised to or withdrawn from a neighbour."""

    to: str
    kind: str
    labels: np.ndarray

    def __repr__(self) -> str:
        return f"LinkMessage(to={self.to!r}, kind={self.kind!r}, n={len(self.labels)})"


@dataclass
class LinkCounters:
    """Labels advertised and withdrawn so far, and those live per neighbour."""

    advertised: int = 0
    withdrawn: int = 0
    per_neighbour_live: dict[str, int] = field(default_factory=dict)

    def count(self, n: str, kind: str, k: int) -> None:
        """Count ``k`` labels of kind ``kind`` sent to neighbour ``n``."""
        if kind == ADVERTISE:
            self.advertised += k
            self.per_neighbour_live[n] += k
        else:
            self.withdrawn += k
            self.per_neighbour_live[n] -= k


class Aggregation(Protocol):
    """How a broker turns label changes into messages to its neighbours."""

    def add(self, labels: np.ndarray, source: str | None) -> list[LinkMessage]:
        """One occurrence more of each label (from a subscription or from ``source``)."""
        ...

    def remove(self, labels: np.ndarray, source: str | None) -> list[LinkMessage]:
        """One occurrence less of each label (from an unsubscription or from ``source``)."""
        ...


class ExactCounts:
    """The ``exact`` mode: advertise on 0 -> 1, withdraw on 1 -> 0, per neighbour.

    ``total`` counts every label over local subscriptions and neighbours' advertisements,
    ``recv[n]`` what neighbour ``n`` advertised (the broker keeps both up to date for link
    messages; this class adds the local and received changes to ``total``).
    """

    def __init__(self, node_id: str, neighbours: Sequence[str], total: LabelTable,
                 recv: dict[str, LabelTable], counters: LinkCounters, *,
                 label_base: int | None = None, label_space_size: int | None = None):
        """Decide on the broker's own tables (shared, not copied)."""
        self.node_id = node_id
        self.neighbours = tuple(neighbours)
        self.total = total
        self.recv = recv
        self.counters = counters
        self.label_base = label_base
        self.label_space_size = label_space_size

    def add(self, labels: np.ndarray, source: str | None) -> list[LinkMessage]:
        """+1 per occurrence of each label; the advertisements it causes."""
        return self.change(labels, +1, source)

    def remove(self, labels: np.ndarray, source: str | None) -> list[LinkMessage]:
        """-1 per occurrence of each label; the withdrawals it causes."""
        return self.change(labels, -1, source)

    def change(self, labels: np.ndarray, sign: int, source: str | None
               ) -> list[LinkMessage]:
        """Apply +1/-1 per occurrence of each label; emit 0<->1 transitions per neighbour."""
        u, c = unique_counts(labels, self.label_base, self.label_space_size)
        old = self.total.get(u)
        new = old + sign * c
        if sign < 0 and (new < 0).any():
            raise BrokerError(f"node {self.node_id!r}: exact count would go negative",
                              field="labels", value=int(u[new < 0][0]))
        self.total.add(u, sign * c)
        out: list[LinkMessage] = []
        kind = ADVERTISE if sign > 0 else WITHDRAW
        for n in self.neighbours:
            if n == source:
                continue
            mine = self.recv[n].get(u)
            before, after = old - mine, new - mine
            hit = u[(before == 0) & (after > 0)] if sign > 0 else u[(before > 0) & (after == 0)]
            if hit.size:
                out.append(LinkMessage(n, kind, hit))
                self.counters.count(n, kind, len(hit))
        return out
