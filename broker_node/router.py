"""How an event's recipient list is built, and how its outputs are produced.

Routing an event depends only on its key (:data:`broker_node.inbox.Key`: the label, the
local client that published it, the neighbour it came from). What routing a key produces
is a *plan* (:data:`Plan`): the delivery messages (client indexes, or for the shared
delivery topic one message per partition naming its clients), the number of deliveries,
the neighbours to forward to, and the plan's slot in the per-client delivery tally.

Plans come from a route cache while the state's version is the one they were made at
(any subscription or link change empties it; it is bounded by ``route_cache_mb``); the
keys it lacks are routed by ``BrokerState.route`` as one numpy batch, each distinct key
once. :meth:`Router.route` then produces each event's messages through the committer.
"""

from __future__ import annotations

from operator import itemgetter
from typing import Any

import numpy as np
from confluent_kafka import Message

from broker_node.committers import Committer
from broker_node.config import NodeSettings
from broker_node.edge import Checks, EdgeTable, checked, split_routes
from broker_node.inbox import EventRun, Key, publication_ms
from broker_node.metrics import Metrics
from broker_node.state import BrokerState
from connectors.topics import HEADER_CLIENTS, Topics, delivery_partition

__all__ = ["Plan", "Router", "plan_bytes", "slots"]

#: What routing an event of one key produces: (messages, deliveries, neighbour indexes,
#: the plan's slot in the delivery tally as two ints ``lo, hi``, the candidates the exact
#: check decides per event, and the false positives it removed); see :meth:`Router.plans`.
Plan = tuple[tuple[Any, ...], int, tuple[int, ...], int, int, Checks, int]

_lo, _hi = itemgetter(3), itemgetter(4)


def slots(plans: list[Plan]) -> np.ndarray:
    """The tally slot of each plan: ``256 * hi + lo``.

    A slot is kept as two ints from 0 to 255, objects CPython shares (always in the CPU's
    cache): reading the slots of a run's plans touches no memory beyond the plan tuples,
    where a plain int per plan costs a cache miss per event routed from a cache much larger
    than the CPU's.
    """
    n = len(plans)
    return (np.fromiter(map(_lo, plans), np.int64, n)
            + 256 * np.fromiter(map(_hi, plans), np.int64, n))


def plan_bytes(plan: Plan, shared: bool) -> int:
    """About how much memory a cached plan holds (with its key and its dict slot)."""
    msgs = plan[0]
    checks = sum(300 + (v.bounds.nbytes if v.bounds is not None else 0) for _, v in plan[5])
    if shared:  # (partition, (HEADER_CLIENTS, header bytes)) pairs
        return 250 + checks + sum(len(h[1]) + 150 for _, h in msgs)
    return 250 + checks + 40 * len(msgs)  # client indexes


class Router:
    """Plans of events (cached) and the production of their deliveries and forwards."""

    def __init__(self, settings: NodeSettings, topics: Topics, state: BrokerState,
                 metrics: Metrics, edge: EdgeTable | None = None) -> None:
        """The router of one node (``settings`` may be replaced later: read at each run).

        ``edge``: the exact check of local deliveries (None: deliveries by label alone).
        """
        self.settings, self.topics, self.state, self.metrics = settings, topics, state, metrics
        self.edge = edge
        # Key -> Plan of recent events, valid while state.version is _version
        self._cache: dict[Key, Plan] = {}
        self._version = -1
        self._cache_bytes = 0  # estimated by plan_bytes
        self._deliver_topics: list[str] = []  # by client index
        self._client_partition = np.zeros(0, dtype=np.int64)  # shared delivery, by client
        self._client_names = np.zeros(0, dtype=object)  # shared delivery: name bytes
        self._client_name_len = np.zeros(0, dtype=np.int64)

    @property
    def cache_bytes(self) -> int:
        """The estimated memory of the cached plans."""
        return self._cache_bytes

    @property
    def cached(self) -> int:
        """How many plans are cached."""
        return len(self._cache)

    def route(self, run: EventRun, out: Committer) -> None:
        """Produce the deliveries and forwards of a run of events through ``out``."""
        good, carried_of = run.msgs, run.carried
        if not good:
            return
        self.metrics.events_in += len(good)
        plans = self.plans(run.keys)
        values = list(map(Message.value, good))
        stamps = list(map(publication_ms, good, carried_of))  # kept on every copy
        n_parts = self.settings.shared_delivery_partitions
        extra = self._edge(plans, values) if self.edge is not None else None
        if n_parts:
            spreads = list(map(itemgetter(0), plans))
            deliveries = sum(map(itemgetter(1), plans))
            if extra:
                for e, passed in extra.items():
                    spreads[e] = spreads[e] + self.spread_of(passed)
                    deliveries += len(passed)
            messages = sum(map(len, spreads))
            out.produce_spread(self.topics.shared_deliver, values, carried_of, spreads,
                               n_parts, stamps)
        else:
            deliver = self._delivery_topics()
            produce = out.produce
            deliveries = 0
            for (clients, count, *_), value, carried, ts in zip(plans, values, carried_of,
                                                                stamps, strict=True):
                deliveries += count
                for c in clients:
                    produce(deliver[c], value, carried, -1, ts)
            if extra:
                for e, passed in extra.items():
                    deliveries += len(passed)
                    for c in passed:
                        produce(deliver[c], values[e], carried_of[e], -1, stamps[e])
            messages = deliveries
        self.metrics.deliveries += deliveries
        self.metrics.delivery_messages += messages
        if self.state.neighbours:
            node = self.settings.node
            links = [self.topics.forward(node, n) for n in self.state.neighbours]
            produce, forwarded = out.produce, 0
            for (_, _, to, *_), value, carried, ts in zip(plans, values, carried_of, stamps,
                                                          strict=True):
                for j in to:
                    produce(links[j], value, carried, -1, ts)
                forwarded += len(to)
            self.metrics.events_forwarded += forwarded

    def _delivery_topics(self) -> list[str]:
        """The delivery topic of each client, by index (names made once per client)."""
        names, topics = self.state.clients, self._deliver_topics
        while len(topics) < len(names):
            topics.append(self.topics.deliver(names[len(topics)]))
        return topics

    def plans(self, keys: list[Key]) -> list[Plan]:
        """The plan of each event ``(label, origin client, origin neighbour)`` of a run.

        A plan is ``(messages, deliveries, neighbours, slot lo, slot hi, checks, removed)``
        (the last two: :func:`broker_node.edge.split_routes`). Messages are
        ``(partition, (HEADER_CLIENTS, value))`` pairs with a shared delivery topic, else
        the client indexes to deliver to; neighbours are the indexes of those to forward
        to. Each use of a plan is counted in the per-client delivery tally.
        """
        state, cache, tally = self.state, self._cache, self.metrics.per_client
        budget = self.settings.route_cache_mb * 1e6
        if self._version != state.version:
            cache.clear()
            tally.forget()
            self._version, self._cache_bytes = state.version, 0
        found: list[Plan | None] = (list(map(cache.get, keys)) if budget
                                    else [None] * len(keys))
        todo = list(dict.fromkeys(k for k, p in zip(keys, found, strict=True) if p is None))
        self.metrics.route_cache_misses += len(todo)
        self.metrics.route_cache_hits += len(keys) - len(todo)
        if not todo:
            hits: list[Plan] = found  # type: ignore[assignment]
            tally.count(slots(hits))
            return hits
        made = dict(zip(todo, self._route_keys(todo), strict=True))
        plans = [made[k] if p is None else p for k, p in zip(keys, found, strict=True)]
        tally.count(slots(plans))
        self._keep(made, budget)
        return plans

    def _keep(self, made: dict[Key, Plan], budget: float) -> None:
        """Cache plans just made, within the budget (full: start over, not track ages)."""
        tally = self.metrics.per_client
        first = int(slots([next(iter(made.values()))])[0])
        if not budget:  # none of these plans is used again (those cached before may be)
            tally.release(first)
            return
        shared = bool(self.settings.shared_delivery_partitions)
        size = sum(plan_bytes(plan, shared) for plan in made.values())
        if self._cache_bytes + size <= budget:
            self._cache.update(made)
            self._cache_bytes += size
            return
        self._cache.clear()
        self._cache_bytes = 0
        if size > budget:
            tally.forget()
            return
        tally.forget(keep_from=first)  # keep the plans just made, from slot 0 now
        self._cache.update({k: (*p[:3], (s - first) & 255, (s - first) >> 8, *p[5:])
                            for (k, p), s in zip(made.items(), slots(list(made.values())),
                                                 strict=True)})
        self._cache_bytes = size

    def _route_keys(self, keys: list[Key]) -> list[Plan]:
        """Route distinct keys as one numpy batch (``state.route``) into plans."""
        full = [(int.from_bytes(k, "big"), -1, -1) if type(k) is bytes else k for k in keys]
        routes = self.state.route(np.array([k[0] for k in full], dtype=np.uint64),
                                  np.array([k[1] for k in full], dtype=np.int64),
                                  np.array([k[2] for k in full], dtype=np.int64))
        n = len(keys)
        r_offsets, r_clients = routes.offsets, routes.clients
        if self.edge is not None:
            r_offsets, r_clients, checks, removed = split_routes(
                self.edge, self.state.clients, [k[0] for k in full], r_offsets, r_clients)
        else:
            checks, removed = [()] * n, [0] * n
        base = self.metrics.per_client.add_plans(r_offsets, r_clients)
        counts = np.diff(r_offsets).tolist()
        to: list[list[int]] = [[] for _ in range(n)]
        rows, cols = np.nonzero(routes.neighbours)
        for e, j in zip(rows.tolist(), cols.tolist(), strict=True):
            to[e].append(j)
        msgs: list[list[Any]] = [[] for _ in range(n)]
        if self.settings.shared_delivery_partitions:
            events, parts, named = self.shared_deliveries(r_offsets, r_clients)
            for e, part, header in zip(events, parts, named, strict=True):
                msgs[e].append((part, (HEADER_CLIENTS, header)))
        else:
            offsets = r_offsets.tolist()
            clients = r_clients.tolist()
            msgs = [clients[offsets[e]:offsets[e + 1]] for e in range(n)]
        slot = np.arange(base, base + n)
        return [(tuple(m), c, tuple(t), lo, hi, ck, rm) for m, c, t, lo, hi, ck, rm in zip(
            msgs, counts, to, (slot & 255).tolist(), (slot >> 8).tolist(), checks, removed,
            strict=True)]

    def _edge(self, plans: list[Plan], values: list[bytes | None]) -> dict[int, list[int]]:
        """The exact check of a run: the clients each checked event goes to, by event.

        Reads an event's value only when its plan has candidates to check; one it cannot
        read goes to all of them (by label, as without the check) and is counted.
        """
        assert self.edge is not None  # noqa: S101 - called with an edge only
        out: dict[int, list[int]] = {}
        metrics, removed, direct = self.metrics, 0, []
        for e, plan in enumerate(plans):
            checks = plan[5]
            removed += plan[6]
            if not checks:
                continue
            passed = checked(self.edge, checks, values[e])
            metrics.edge_checked += 1
            if passed is None:
                metrics.edge_unreadable += 1
                passed = [c for c, _ in checks]
            removed += len(checks) - len(passed)
            if passed:
                out[e] = passed
                direct += passed
        if direct:  # one locked update for the run, not one per event
            metrics.per_client.add_direct(direct)
        metrics.edge_removed += removed
        return out

    def spread_of(self, clients: list[int]) -> tuple[Any, ...]:
        """Shared-topic messages delivering one event to ``clients``: one per partition."""
        n_parts = self.settings.shared_delivery_partitions
        self._learn_clients(n_parts)
        by_part: dict[int, list[bytes]] = {}
        for c in clients:
            by_part.setdefault(int(self._client_partition[c]), []).append(
                self._client_names[c])
        return tuple((p, (HEADER_CLIENTS, b",".join(names))) for p, names in by_part.items())

    def shared_deliveries(self, offsets: np.ndarray, clients: np.ndarray
                          ) -> tuple[list[int], list[int], list[bytes]]:
        """The messages for the shared delivery topic: ``(events, partitions, clients)``.

        Deliveries of an event are grouped by the partition of each client
        (``delivery_partition``), so an event reaching 30 clients in 8 partitions is
        written 8 times, each copy naming the clients of its partition. Message ``i`` is
        event ``events[i]`` (an index into the batch) for partition ``partitions[i]`` with
        the :data:`HEADER_CLIENTS` value ``clients[i]``; events come in batch order.
        """
        n_parts = self.settings.shared_delivery_partitions
        self._learn_clients(n_parts)
        if len(clients) == 0:
            return [], [], []
        n_events = len(offsets) - 1
        event_of = np.repeat(np.arange(n_events, dtype=np.int64), np.diff(offsets))
        if n_parts == 1:  # one message per event: the deliveries are grouped already
            key, grouped = event_of, clients
        else:
            key = event_of * n_parts + self._client_partition[clients]
            order = np.argsort(key, kind="stable")
            key, grouped = key[order], clients[order]
        starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
        first = key[starts]
        # Every name of the batch joined once (the bytes of encode_clients, without
        # decoding); each message's header is then one slice of it: the names of its group.
        joined = b",".join(self._client_names[grouped].tolist())
        ends = np.cumsum(self._client_name_len[grouped] + 1)  # one past each name's comma
        lo = np.r_[0, ends[starts[1:] - 1]].tolist()
        hi = (np.r_[ends[starts[1:] - 1], ends[-1]] - 1).tolist()
        named = [joined[a:b] for a, b in zip(lo, hi, strict=True)]
        return (first // n_parts).tolist(), (first % n_parts).tolist(), named

    def _learn_clients(self, n_parts: int) -> None:
        """The partition and name bytes of each client, computed once per client."""
        names = self.state.clients
        have = len(self._client_names)
        if have >= len(names):
            return
        self._client_partition = np.concatenate([
            self._client_partition,
            np.array([delivery_partition(c, n_parts) for c in names[have:]], dtype=np.int64)])
        new = [c.encode() for c in names[have:]]
        self._client_names = np.concatenate([self._client_names, np.array(new, dtype=object)])
        self._client_name_len = np.concatenate([
            self._client_name_len, np.array([len(b) for b in new], dtype=np.int64)])
