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

import logging
import time
from operator import itemgetter
from typing import Any

import numpy as np
from confluent_kafka import Message

from broker_node.committers import Committer
from broker_node.config import NodeSettings
from broker_node.edge import EdgeTable
from broker_node.inbox import EventRun, Key, publication_ms
from broker_node.metrics import Metrics
from broker_node.plan_check import check_run, split_routes
from broker_node.removed_later import RemovedLater
from broker_node.state import BrokerState
from connectors.kafka import source_of
from connectors.topics import HEADER_CLIENTS, Topics, delivery_partition

__all__ = ["CLIENTS_HEADER_BYTES", "FUTURE_STAMP_MS", "MANY_TOPICS", "Plan", "Router",
           "many_topics_warning", "plan_bytes", "slots"]

#: What routing an event of one key produces: (messages, deliveries, neighbour indexes,
#: the plan's slot in the delivery tally as two ints ``lo, hi``, the candidates the exact
#: check decides per event as ``(2, n)`` int32 (client index, edge row) or None, and the
#: false positives it removed); see :meth:`Router.plans`.
Plan = tuple[tuple[Any, ...], int, tuple[int, ...], int, int, np.ndarray | None, int]

_lo, _hi = itemgetter(3), itemgetter(4)

log = logging.getLogger(__name__)

#: Bytes of client names one shared-topic delivery message may name (plus one name): the
#: names of an event's partition past it go in further messages of the event.
CLIENTS_HEADER_BYTES = 256 * 1024

#: How far ahead of the node's clock an event's time may be and still stamp its copies
#: (ms): a broker refuses a record an hour ahead of its own clock by default.
FUTURE_STAMP_MS = 10 * 60 * 1000

#: Counts of per-client delivery topics at which the node says what they cost (once each).
MANY_TOPICS = (1_000, 10_000)


def many_topics_warning(node: str, n: int) -> str:
    """What ``n`` per-client delivery topics cost the node, and what to do instead."""
    return (f"node {node}: {n} per-client delivery topics. librdkafka finds a topic by name "
            f"in a list of every topic its producer has written, so each delivery costs more "
            f"with every client (benchmarks.topic_lookup, clients in turn: 2 us per "
            f"produce call at 1 topic, 5 us at 1,000, 150 us at 10,000). One shared "
            f"delivery topic (shared_delivery_partitions, the same on nodes and clients) "
            f"keeps it at one topic: see docs/architecture.md, 'One delivery topic for "
            f"many clients'")


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
    msgs, ck = plan[0], plan[5]
    checks = 0 if ck is None else 112 + ck.nbytes  # an array's header and its row numbers
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
        self._version: tuple[int, int] = (-1, -1)
        self._cache_bytes = 0  # estimated by plan_bytes
        self._deliver_topics: list[str] = []  # by client index
        self._client_partition = np.zeros(0, dtype=np.int64)  # shared delivery, by client
        self._client_names = np.zeros(0, dtype=object)  # shared delivery: name bytes
        self._client_name_len = np.zeros(0, dtype=np.int64)
        self._edge_ids = np.zeros(0, dtype=np.int64)  # the edge's number of each client
        self._edge_ids_of = (-1, -1)  # (clients, edge clients) when it was made
        self.removed_later: RemovedLater | None = None  # a node's: see defer_removed()

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
        self.state.defer_client_bank(self.indexed)  # off: the bank is made again, then kept
        plans = self.plans(run.keys)
        values = list(map(Message.value, good))
        stamps = list(map(publication_ms, good, carried_of))  # kept on every copy
        if max(stamps) > (ahead := int(time.time() * 1000) + FUTURE_STAMP_MS):
            stamps = self._stamped_now(stamps, good, ahead)
        if self.indexed:
            offsets, clients = self._local(run.keys, values)
            deliveries, messages = self._deliver_local(out, offsets, clients, values,
                                                       carried_of, stamps)
        else:
            deliveries, messages = self._deliver_planned(out, plans, values, carried_of,
                                                         stamps)
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

    def _deliver_planned(self, out: Committer, plans: list[Plan], values: list[bytes | None],
                         carried_of: list[Any], stamps: list[int]) -> tuple[int, int]:
        """Produce the local deliveries the plans name (and the edge's checks of them).

        Returns how many deliveries and how many delivery messages.
        """
        n_parts = self.settings.shared_delivery_partitions
        extra = self._edge(plans, values) if self.edge is not None else None
        if n_parts:
            spreads = list(map(itemgetter(0), plans))
            deliveries = sum(map(itemgetter(1), plans))
            if extra:
                deliveries += self._spread_extra(spreads, extra)
            out.produce_spread(self.topics.shared_deliver, values, carried_of, spreads,
                               n_parts, stamps)
            return deliveries, sum(map(len, spreads))
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
        return deliveries, deliveries

    def _deliver_local(self, out: Committer, offsets: np.ndarray, clients: np.ndarray,
                       values: list[bytes | None], carried_of: list[Any], stamps: list[int]
                       ) -> tuple[int, int]:
        """Produce deliveries to ``clients[offsets[e]:offsets[e + 1]]`` of each event ``e``.

        Returns how many deliveries and how many delivery messages.
        """
        n_parts = self.settings.shared_delivery_partitions
        if n_parts:
            spreads: list[tuple[Any, ...]] = [()] * len(values)
            for e, part, header in zip(*self.shared_deliveries(offsets, clients),
                                       strict=True):
                spreads[e] += ((part, (HEADER_CLIENTS, header)),)
            out.produce_spread(self.topics.shared_deliver, values, carried_of, spreads,
                               n_parts, stamps)
            return len(clients), sum(map(len, spreads))
        deliver = self._delivery_topics()
        produce = out.produce
        at = offsets.tolist()
        named = clients.tolist()
        for e in np.flatnonzero(np.diff(offsets)).tolist():
            value, carried, ts = values[e], carried_of[e], stamps[e]
            for c in named[at[e]:at[e + 1]]:
                produce(deliver[c], value, carried, -1, ts)
        return len(named), len(named)

    @property
    def indexed(self) -> bool:
        """Whether local deliveries come from the edge's label index (not from plans).

        Only while the edge holds as many subscriptions as the state (a node's controls
        give every one to both): a subscription the edge was never given goes by label,
        through plans, rather than be missed.
        """
        edge = self.edge
        return edge is not None and edge.index is not None and len(edge) == len(self.state)

    def _local(self, keys: list[Key], values: list[bytes | None]
               ) -> tuple[np.ndarray, np.ndarray]:
        """The local deliveries of a run from the edge's index: offsets, client indexes.

        Each event's clients ascending; what the check removed and read is counted.
        """
        edge, metrics = self.edge, self.metrics
        assert edge is not None  # noqa: S101 - called with an indexed edge only
        n = len(keys)
        origin = np.full(n, -1, dtype=np.int64)
        joined = b"".join(k for k in keys if type(k) is bytes)
        if len(joined) == 8 * n:  # the usual run: label headers as they came, one read
            labels = np.frombuffer(joined, dtype=">u8").astype(np.uint64)
        else:
            labels = np.empty(n, dtype=np.uint64)
            for e, k in enumerate(keys):
                if type(k) is bytes:
                    labels[e] = int.from_bytes(k, "big")
                else:
                    labels[e] = k[0]
                    origin[e] = k[1]
        ids = self._client_ids()
        cids = np.where(origin >= 0, ids[np.maximum(origin, 0)] if len(ids) else -1, -1)
        assert edge.index is not None  # noqa: S101 - indexed
        later = self.removed_later
        m = edge.index.match_run(labels, cids, values, later is not None)
        to_state = self._state_ids(ids)
        clients = to_state[m.owners]
        metrics.edge_checked += m.checked
        metrics.edge_unreadable += m.unread
        if later is not None:  # deliveries now, removed ones when settled
            metrics.per_client.add_counts(clients, clients[:0])
            later.add(edge.index.labels, m.removed)
            return m.offsets, clients
        gone = np.flatnonzero(m.removed)  # the edge's numbers of clients removed from
        metrics.edge_removed += int(m.removed[gone].sum())
        if len(clients) or len(gone):
            metrics.per_client.add_counts(clients, to_state[gone], m.removed[gone])
        return m.offsets, clients

    def defer_removed(self) -> RemovedLater:
        """Count the removed deliveries of events with no origin later (what a node does)."""
        self.removed_later = RemovedLater(self.metrics,
                                          lambda: self._state_ids(self._client_ids()))
        return self.removed_later

    def _state_ids(self, ids: np.ndarray) -> np.ndarray:
        """The state's index of each of the edge's clients (the inverse of ``ids``).

        A client the edge holds and the state does not know (never so in a node, whose
        controls give the state a subscription before the edge) becomes the state's.
        """
        assert self.edge is not None  # noqa: S101 - called with an edge only
        names = self.edge.client_names
        held = ids >= 0
        if int(held.sum()) < len(names):
            known = set(self.state.clients)
            for name in names:
                if name not in known:
                    self.state.client_index(name)
            ids = self._client_ids()
            held = ids >= 0
        inv = np.full(len(names), -1, dtype=np.int64)
        inv[ids[held]] = np.flatnonzero(held)
        return inv

    def _stamped_now(self, stamps: list[int], good: list[Message], ahead: int) -> list[int]:
        """``stamps`` with those past ``ahead`` replaced by 0 (a copy is stamped when sent).

        A broker refuses a record stamped more than ``message.timestamp.after.max.ms``
        ahead of its clock (the Kafka 4 broker here: 70 minutes refused, 50 taken) and
        fails the rest of its batch with it: the copies of such an event would stop the
        node, again at each restart. Its own headers still carry what it said.
        """
        late = [i for i, t in enumerate(stamps) if t > ahead]
        self.metrics.future_stamps += len(late)
        log.warning("node %s: %d events stamped more than %d s ahead of this node's clock "
                    "(the first: %s, %d ms ahead): their copies are stamped when sent",
                    self.settings.node, len(late), FUTURE_STAMP_MS // 1000,
                    source_of(good[late[0]]), stamps[late[0]] - ahead + FUTURE_STAMP_MS)
        return [0 if t > ahead else t for t in stamps]

    def _delivery_topics(self) -> list[str]:
        """The delivery topic of each client, by index (names made once per client)."""
        names, topics = self.state.clients, self._deliver_topics
        if len(topics) < len(names):
            crossed = any(len(topics) < n <= len(names) for n in MANY_TOPICS)
            while len(topics) < len(names):
                topics.append(self.topics.deliver(names[len(topics)]))
            if crossed:
                log.warning(many_topics_warning(self.settings.node, len(topics)))
        return topics

    def plans(self, keys: list[Key]) -> list[Plan]:
        """The plan of each event ``(label, origin client, origin neighbour)`` of a run.

        A plan is ``(messages, deliveries, neighbours, slot lo, slot hi, checks, removed)``
        (the last two: :func:`broker_node.plan_check.split_routes`). Messages are
        ``(partition, (HEADER_CLIENTS, value))`` pairs with a shared delivery topic, else
        the client indexes to deliver to; neighbours are the indexes of those to forward
        to. Each use of a plan is counted in the per-client delivery tally.
        """
        state, cache, tally = self.state, self._cache, self.metrics.per_client
        budget = self.settings.route_cache_mb * 1e6
        version = (state.version, -1 if self.edge is None else self.edge.version)
        if self._version != version:  # plans name the edge's rows: valid at its version
            cache.clear()
            tally.forget()
            self._version, self._cache_bytes = version, 0
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
                                  np.array([k[2] for k in full], dtype=np.int64),
                                  clients=not self.indexed)
        n = len(keys)
        r_offsets, r_clients = routes.offsets, routes.clients
        checks: list[np.ndarray | None] = [None] * n
        removed, gone = [0] * n, None
        if self.edge is not None and not self.indexed:
            r_offsets, r_clients, checks, out = split_routes(
                self.edge, self._client_ids(), [k[0] for k in full], r_offsets, r_clients)
            per = np.bincount(out[0], minlength=n)
            removed = per.tolist()
            gone = (np.r_[0, np.cumsum(per)], out[1])
        base = self.metrics.per_client.add_plans(r_offsets, r_clients, gone)
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

    def _client_ids(self) -> np.ndarray:
        """The edge's number of each of the state's clients (made again when either grew)."""
        assert self.edge is not None  # noqa: S101 - called with an edge only
        names = self.state.clients
        if self._edge_ids_of != (len(names), self.edge.n_clients):
            self._edge_ids = self.edge.client_ids(names)
            self._edge_ids_of = (len(names), self.edge.n_clients)
        return self._edge_ids

    def _edge(self, plans: list[Plan], values: list[bytes | None]) -> dict[int, list[int]]:
        """The exact check of a run: the clients each checked event goes to, by event.

        Reads an event's value only when its plan has candidates to check; one it cannot
        read goes to all of them (by label, as without the check) and is counted. Every
        checked event of the run is decided in one vectorised step (:func:`check_run`).
        """
        assert self.edge is not None  # noqa: S101 - called with an edge only
        metrics = self.metrics
        removed = sum(map(itemgetter(6), plans))
        events = [e for e, p in enumerate(plans) if p[5] is not None]
        if not events:
            metrics.edge_removed += removed
            return {}
        run = check_run(self.edge, events, [plans[e][5] for e in events],  # type: ignore[misc]
                        [values[e] for e in events])
        metrics.edge_checked += run.values_read
        metrics.edge_unreadable += run.unreadable
        metrics.edge_removed += removed + len(run.removed)
        direct = [c for passed in run.passed.values() for c in passed]
        if direct or run.removed:  # one locked update for the run, not one per event
            metrics.per_client.add_direct(direct, run.removed)
        return run.passed

    def _spread_extra(self, spreads: list[tuple[Any, ...]], extra: dict[int, list[int]]
                      ) -> int:
        """Add to ``spreads[e]`` the shared-topic messages to the clients ``extra[e]``.

        Those of every event at once (:meth:`shared_deliveries`); returns how many
        deliveries they make.
        """
        events = list(extra)
        sizes = [len(extra[e]) for e in events]
        offsets = np.zeros(len(events) + 1, dtype=np.int64)
        np.cumsum(sizes, out=offsets[1:])
        clients = np.fromiter((c for e in events for c in extra[e]), np.int64,
                              int(offsets[-1]))
        added: dict[int, list[Any]] = {}
        for i, part, header in zip(*self.shared_deliveries(offsets, clients), strict=True):
            added.setdefault(events[i], []).append((part, (HEADER_CLIENTS, header)))
        for e, msgs in added.items():
            spreads[e] = spreads[e] + tuple(msgs)
        return len(clients)

    def shared_deliveries(self, offsets: np.ndarray, clients: np.ndarray
                          ) -> tuple[list[int], list[int], list[bytes]]:
        """The messages for the shared delivery topic: ``(events, partitions, clients)``.

        Deliveries of an event are grouped by the partition of each client
        (``delivery_partition``), so an event reaching 30 clients in 8 partitions is
        written 8 times, each copy naming the clients of its partition. Names past
        :data:`CLIENTS_HEADER_BYTES` go in further copies for that partition (a message
        has a size limit: 1 MB by default), each client named once. Message ``i`` is
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
        new_group = np.r_[True, key[1:] != key[:-1]]
        # Every name of the batch joined once (the bytes of encode_clients, without
        # decoding); each message's header is then one slice of it: the names of its group.
        joined = b",".join(self._client_names[grouped].tolist())
        ends = np.cumsum(self._client_name_len[grouped] + 1)  # one past each name's comma
        if ends[-1] > CLIENTS_HEADER_BYTES:  # some group may be too large for one message
            new_group = _split_groups(new_group, ends)
        starts = np.flatnonzero(new_group)
        first = key[starts]
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


def _split_groups(new_group: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """``new_group`` with a new group wherever a name starts past :data:`CLIENTS_HEADER_BYTES`.

    ``ends[i]`` is one past name ``i``'s comma in the joined names; a group's names are
    cut into runs whose first names start within a multiple of the budget of the group's
    first byte, so each run holds at most the budget and one name more.
    """
    starts = np.flatnonzero(new_group)
    begins = np.r_[0, ends[:-1]]  # where each name starts in the joined bytes
    group_begin = np.repeat(begins[starts], np.diff(np.r_[starts, len(ends)]))
    chunk = (begins - group_begin) // CLIENTS_HEADER_BYTES
    return new_group | np.r_[True, chunk[1:] != chunk[:-1]]
