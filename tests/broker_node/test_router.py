"""The node's route cache changes no output: cached and uncached nodes send the same.

No broker: the messages are built by hand, and the producer records what it is given.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Message
from hypothesis import given, settings
from hypothesis import strategies as st

from broker_node.committers import AtLeastOnce
from broker_node.config import NodeSettings
from broker_node.service import NodeService
from broker_node.state import ADVERTISE, WITHDRAW
from connectors.topics import (
    HEADER_CLIENTS,
    HEADER_EVENT_ID,
    HEADER_LABEL,
    HEADER_ORIGIN,
    HEADER_PUBLISHED,
    decode_clients,
)
from dls.mapping import event_label
from dls.space import ContentSpace

SPEC = {"attributes": [{"name": "x", "type": "numeric", "low": 0, "high": 100,
                        "granules": 8}]}
CLIENTS = ("ann", "bob", "cy", "dee", "eve")


def _msg(topic: str, offset: int, headers: list[tuple[str, bytes]]) -> Message:
    return Message(topic=topic, partition=0, offset=offset, value=b"payload-%d" % offset,
                   headers=headers)


class _Producer:
    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes, list[tuple[str, bytes]], int]] = []
        self.stamps: list[int] = []

    def produce(self, topic: str, value: bytes, headers: Any = None, partition: int = -1,
                on_delivery: Any = None, timestamp: int = 0, key: Any = None) -> None:
        self.sent.append((topic, value, list(headers or []), partition))
        self.stamps.append(timestamp)

    def poll(self, timeout: float = 0) -> int:
        return 0


def _node(space_file: Path, *, cache: float, partitions: int, delivery: str,
          **settings: Any) -> NodeService:
    svc = NodeService(NodeSettings(node="A", neighbours=("B",), space=space_file,
                                   route_cache_mb=cache, delivery=delivery,
                                   shared_delivery_partitions=partitions, **settings))
    svc.connect(_Producer())  # type: ignore[arg-type]
    return svc


def _outputs(svc: NodeService) -> list[Any]:
    """Everything sent, plus the messages held back at least once, as one sorted list."""
    sent = list(svc.committer.producer.sent)  # type: ignore[union-attr]
    held = svc.committer.held if isinstance(svc.committer, AtLeastOnce) else {}
    for (topic, part), (value, hdrs) in held.items():
        sent.append((topic, value, list(hdrs), part))
    return sorted(sent, key=repr)


def _per_client(outputs: list[Any]) -> dict[str, int]:
    """Deliveries by client in the outputs (a topic per client, or the shared topic)."""
    counts: dict[str, int] = {}
    for topic, _, headers, _ in outputs:
        if topic == "dls.deliver":
            names = decode_clients(dict(headers)[HEADER_CLIENTS])
        elif topic.startswith("dls.deliver."):
            names = {topic[len("dls.deliver."):]}
        else:
            continue
        for name in names:
            counts[name] = counts.get(name, 0) + 1
    return counts


_OP = st.one_of(
    st.tuples(st.just("sub"), st.sampled_from(CLIENTS), st.integers(0, 100),
              st.integers(0, 40)),
    st.tuples(st.just("unsub"), st.integers(0, 50)),
    st.tuples(st.just("link"), st.sampled_from((ADVERTISE, WITHDRAW)),
              st.lists(st.integers(0, 100), min_size=1, max_size=6)),
    st.tuples(st.just("cache")),  # the cached node's cache off, or on again
    st.tuples(st.just("events"),
              st.lists(st.tuples(st.integers(0, 100),
                                 st.sampled_from(("pub", *CLIENTS, "B"))),
                       min_size=1, max_size=25)),
)


@settings(max_examples=80, deadline=None)
@given(ops=st.lists(_OP, max_size=25), cache=st.sampled_from([0.0005, 0.002, 64.0]),
       partitions=st.sampled_from([0, 1, 3]),
       delivery=st.sampled_from(["exactly_once", "at_least_once"]))
def test_cached_routes_equal_fresh_ones(tmp_path_factory: pytest.TempPathFactory,
                                        ops: list[Any], cache: float, partitions: int,
                                        delivery: str) -> None:
    space_file = tmp_path_factory.mktemp("s") / "space.json"
    space_file.write_text(json.dumps(SPEC))
    space = ContentSpace.from_json(space_file)
    label_of = [event_label(space, {"x": x}) for x in range(101)]
    cached = _node(space_file, cache=cache, partitions=partitions, delivery=delivery)
    fresh = _node(space_file, cache=0, partitions=partitions, delivery=delivery)
    subs: list[tuple[str, str]] = []
    offset = 0
    for op in ops:
        for svc in (cached, fresh):  # the same change on both nodes
            if op[0] == "sub":
                _, client, lo, width = op
                labels = sorted({label_of[x] for x in range(lo, min(100, lo + width) + 1)})
                svc.state.subscribe(client, f"s{len(subs)}", labels)
            elif op[0] == "unsub" and op[1] < len(subs) and subs[op[1]][0]:
                svc.state.unsubscribe(*subs[op[1]])
            elif op[0] == "link":
                svc.state.on_link("B", op[1], [label_of[x] for x in op[2]])
        if op[0] == "cache":  # as a benchmark does between rounds, cache kept meanwhile
            on = not cached.settings.route_cache_mb
            cached.settings = cached.settings.model_copy(
                update={"route_cache_mb": cache if on else 0.0})
        if op[0] == "sub":
            subs.append((op[1], f"s{len(subs)}"))
        elif op[0] == "unsub" and op[1] < len(subs):
            subs[op[1]] = ("", "")
        elif op[0] == "events":
            run = []
            for x, who in op[1]:
                offset += 1
                topic = "dls.fwd.B.A" if who == "B" else "dls.node.A.publish"
                origin = b"B/pub" if who == "B" else b"A/" + who.encode()
                run.append(_msg(topic, offset, [
                    (HEADER_LABEL, label_of[x].to_bytes(8, "big")),
                    (HEADER_ORIGIN, origin), (HEADER_EVENT_ID, b"e%d" % offset)]))
            cached.process(list(run))
            fresh.process(list(run))
            assert _outputs(cached) == _outputs(fresh)
    assert cached.metrics.deliveries == fresh.metrics.deliveries
    # Per-client deliveries: the tally agrees with what was sent, cached or not.
    for svc in (cached, fresh):
        totals = svc.metrics.per_client.totals()
        assert int(totals.sum()) == svc.metrics.deliveries
        got = {svc.state.clients[i]: int(n) for i, n in enumerate(totals) if n}
        assert got == _per_client(_outputs(svc))
    assert cached.metrics.events_forwarded == fresh.metrics.events_forwarded
    assert not fresh.router.cached
    assert cached.router.cache_bytes <= cache * 1e6


def test_a_repeated_label_is_routed_once_and_a_subscription_change_is_seen(
        tmp_path: Path) -> None:
    space_file = tmp_path / "space.json"
    space_file.write_text(json.dumps(SPEC))
    label = event_label(ContentSpace.from_json(space_file), {"x": 50})
    svc = _node(space_file, cache=1.0, partitions=1, delivery="exactly_once")
    sent = svc.committer.producer.sent  # type: ignore[union-attr]

    def publish(n: int) -> list[bytes]:
        start = len(sent)
        svc.process([_msg("dls.node.A.publish", svc.metrics.events_in + i, [
            (HEADER_LABEL, label.to_bytes(8, "big")), (HEADER_ORIGIN, b"A/pub"),
            (HEADER_EVENT_ID, b"e%d" % (svc.metrics.events_in + i))]) for i in range(n)])
        return [dict(h)[HEADER_CLIENTS] for _, _, h, _ in sent[start:]]

    svc.state.subscribe("ann", "s1", [label])
    assert publish(4) == [b"ann"] * 4
    assert (svc.metrics.route_cache_misses, svc.metrics.route_cache_hits) == (1, 3)
    assert publish(2) == [b"ann"] * 2
    assert svc.metrics.route_cache_hits == 5
    svc.state.subscribe("bob", "s2", [label])  # the cached plan names ann only
    assert publish(1) == [b"ann,bob"]
    svc.state.unsubscribe("ann", "s1")
    assert publish(1) == [b"bob"]
    svc.state.unsubscribe("bob", "s2")
    assert publish(1) == []
    assert svc.metrics.route_cache_misses == 4


def test_every_state_change_moves_the_version(tmp_path: Path) -> None:
    space_file = tmp_path / "space.json"
    space_file.write_text(json.dumps(SPEC))
    space = ContentSpace.from_json(space_file)
    state = _node(space_file, cache=1.0, partitions=0, delivery="exactly_once").state
    label = event_label(space, {"x": 1})
    seen = [state.version]

    def moved() -> bool:
        seen.append(state.version)
        return seen[-1] != seen[-2]

    state.client_index("ann", create=False)
    assert not moved()  # a lookup changes nothing
    state.client_index("ann")
    assert moved()
    state.subscribe("ann", "s1", [label])
    assert moved()
    state.on_link("B", ADVERTISE, [label])
    assert moved()
    state.on_link("B", WITHDRAW, [label])
    assert moved()
    state.unsubscribe("ann", "s1")
    assert moved()


def test_the_cache_switched_off_and_on_again_keeps_its_plans_and_counts(
        tmp_path: Path) -> None:
    """A benchmark turns the cache off for a round, then on: cached plans still count."""
    space_file = tmp_path / "space.json"
    space_file.write_text(json.dumps(SPEC))
    label = event_label(ContentSpace.from_json(space_file), {"x": 50})
    svc = _node(space_file, cache=1.0, partitions=0, delivery="exactly_once")
    svc.state.subscribe("ann", "s1", [label])
    on = svc.settings

    def publish(n: int) -> None:
        start = svc.metrics.events_in
        svc.process([_msg("dls.node.A.publish", start + i, [
            (HEADER_LABEL, label.to_bytes(8, "big")), (HEADER_ORIGIN, b"A/pub"),
            (HEADER_EVENT_ID, b"e%d" % (start + i))]) for i in range(n)])

    publish(2)
    svc.settings = on.model_copy(update={"route_cache_mb": 0.0})
    publish(3)
    svc.settings = on
    publish(4)  # all from the plan cached in the first run
    assert (svc.metrics.route_cache_misses, svc.metrics.route_cache_hits) == (2, 7)
    assert svc.metrics.per_client.totals().tolist() == [9]
    assert svc.metrics.deliveries == 9


def test_a_full_cache_starts_over_with_the_plans_just_made_and_counts_them(
        tmp_path: Path) -> None:
    space_file = tmp_path / "space.json"
    space_file.write_text(json.dumps(SPEC))
    space = ContentSpace.from_json(space_file)
    a, b = event_label(space, {"x": 10}), event_label(space, {"x": 90})
    svc = _node(space_file, cache=0.0005, partitions=0, delivery="exactly_once")  # one plan
    svc.state.subscribe("ann", "s1", [a, b])
    svc.state.subscribe("bob", "s2", [b])

    def publish(label: int) -> None:
        n = svc.metrics.events_in
        svc.process([_msg("dls.node.A.publish", n, [
            (HEADER_LABEL, label.to_bytes(8, "big")), (HEADER_ORIGIN, b"A/pub"),
            (HEADER_EVENT_ID, b"e%d" % n)])])

    publish(a)
    assert svc.router.cached == 1
    publish(b)  # does not fit beside a's plan: the cache starts over with b's
    assert svc.router.cached == 1
    publish(b)
    publish(b)
    assert (svc.metrics.route_cache_misses, svc.metrics.route_cache_hits) == (2, 2)
    assert svc.metrics.per_client.totals().tolist() == [4, 3]  # ann: a + 3 b; bob: 3 b
    assert svc.metrics.deliveries == 7


@pytest.mark.parametrize("partitions", [0, 3])
@pytest.mark.parametrize("delivery", ["exactly_once", "at_least_once"])
def test_deliveries_and_forwards_keep_the_publication_time(tmp_path: Path, partitions: int,
                                                           delivery: str) -> None:
    """A node keeps each event's timestamp (its publication time) on every copy it makes.

    The order rule measures how far a node has got in publication time, and the SDK tells
    an event published before an unsubscription by it.
    """
    space_file = tmp_path / "space.json"
    space_file.write_text(json.dumps(SPEC))
    label = event_label(ContentSpace.from_json(space_file), {"x": 50})
    svc = _node(space_file, cache=1.0, partitions=partitions, delivery=delivery)
    svc.state.subscribe("ann", "s1", [label])
    svc.state.on_link("B", ADVERTISE, [label])
    published = [1_700_000_000_000 + 7 * i for i in range(6)]
    # Events 4 and 5 come through the Spark job: written later, their publication time
    # in a header (which every copy keeps).
    svc.process([Message(topic="dls.node.A.publish", partition=0, offset=i,
                         value=b"v%d" % i, timestamp=(1, ts if i < 4 else ts + 30_000),
                         headers=[(HEADER_LABEL, label.to_bytes(8, "big")),
                                  (HEADER_ORIGIN, b"A/pub"), (HEADER_EVENT_ID, b"e%d" % i),
                                  *([(HEADER_PUBLISHED, ts.to_bytes(8, "big"))] if i >= 4
                                    else [])])
                 for i, ts in enumerate(published)])
    assert svc.committer is not None
    if delivery == "at_least_once":
        svc.committer.commit([])  # the held-back last messages go out
    producer = svc.committer.producer
    by_topic: dict[str, list[int]] = {}
    for (topic, _, headers, _), ts in zip(producer.sent, producer.stamps, strict=True):
        by_topic.setdefault(topic, []).append(ts)
        if ts in published[4:]:
            assert (HEADER_PUBLISHED, ts.to_bytes(8, "big")) in headers
    assert by_topic["dls.fwd.A.B"] == published
    deliver = "dls.deliver" if partitions else "dls.deliver.ann"
    assert by_topic[deliver] == published


def test_an_event_stamped_far_ahead_is_copied_stamped_when_sent(tmp_path: Path) -> None:
    """A broker refuses records an hour ahead: a copy of one past FUTURE_STAMP_MS gets 0."""
    import time

    from broker_node.router import FUTURE_STAMP_MS

    space_file = tmp_path / "space.json"
    space_file.write_text(json.dumps(SPEC))
    label = event_label(ContentSpace.from_json(space_file), {"x": 50})
    svc = _node(space_file, cache=1.0, partitions=1, delivery="exactly_once")
    svc.state.subscribe("ann", "s1", [label])
    now = int(time.time() * 1000)
    times = [now - 86_400_000, now + FUTURE_STAMP_MS // 2, now + 3 * 3_600_000, 0]
    svc.process([Message(topic="dls.node.A.publish", partition=0, offset=i, value=b"v",
                         timestamp=(1, now),
                         headers=[(HEADER_LABEL, label.to_bytes(8, "big")),
                                  (HEADER_ORIGIN, b"A/pub"), (HEADER_EVENT_ID, b"e%d" % i),
                                  (HEADER_PUBLISHED, ts.to_bytes(8, "big"))])
                 for i, ts in enumerate(times)])
    producer = svc.committer.producer  # type: ignore[union-attr]
    assert producer.stamps == [times[0], times[1], 0, 0]  # a day ago, 5 min ahead kept
    assert svc.metrics.future_stamps == 1
    published = [dict(h)[HEADER_PUBLISHED] for _, _, h, _ in producer.sent]
    assert published == [t.to_bytes(8, "big") for t in times]  # what each said, kept


def test_the_node_says_once_what_many_delivery_topics_cost(tmp_path: Path,
                                                          caplog: pytest.LogCaptureFixture
                                                          ) -> None:
    """Crossing 1,000 and then 10,000 per-client topics is logged once each, with the fix."""
    space_file = tmp_path / "space.json"
    space_file.write_text(json.dumps(SPEC))
    svc = NodeService(NodeSettings(node="A", space=space_file))
    router = svc.router

    def warnings() -> list[str]:
        return [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]

    caplog.set_level("WARNING", logger="broker_node")
    for i in range(999):
        svc.state.client_index(f"c{i}")
    assert len(router._delivery_topics()) == 999 and warnings() == []
    svc.state.client_index("c999")
    router._delivery_topics()
    router._delivery_topics()  # nothing new: said once
    assert len(warnings()) == 1
    assert "node A: 1000 per-client delivery topics" in warnings()[0]
    assert "shared_delivery_partitions" in warnings()[0]
    for i in range(1000, 10_500):  # one step past 10,000 at once: said once more
        svc.state.client_index(f"c{i}")
    assert len(router._delivery_topics()) == 10_500
    assert len(warnings()) == 2 and "10500 per-client delivery topics" in warnings()[1]


_NAME = st.text("abcXYZ09_-", min_size=1, max_size=12)


@settings(max_examples=150, deadline=None)
@given(names=st.lists(_NAME, min_size=1, max_size=30, unique=True),
       routes=st.lists(st.lists(st.integers(0, 29), max_size=30, unique=True), min_size=1,
                       max_size=8),
       partitions=st.sampled_from([1, 3]), budget=st.integers(1, 80))
def test_names_past_the_header_budget_go_in_more_messages_each_named_once(
        tmp_path_factory: pytest.TempPathFactory, names: list[str], routes: list[list[int]],
        partitions: int, budget: int) -> None:
    """Each (event, partition) names its clients once, over messages of bounded headers."""
    import numpy as np

    from broker_node import router as router_module
    from connectors.topics import delivery_partition

    space_file = tmp_path_factory.mktemp("s") / "space.json"
    space_file.write_text(json.dumps(SPEC))
    svc = NodeService(NodeSettings(node="A", space=space_file,
                                   shared_delivery_partitions=partitions))
    for name in names:
        svc.state.client_index(name)
    routes = [[c for c in r if c < len(names)] for r in routes]
    offsets = np.r_[0, np.cumsum([len(r) for r in routes])].astype(np.int64)
    clients = np.array([c for r in routes for c in r], dtype=np.int64)
    whole = svc.router.shared_deliveries(offsets, clients)  # the default budget: no cut
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(router_module, "CLIENTS_HEADER_BYTES", budget)
        events, parts, named = svc.router.shared_deliveries(offsets, clients)
    assert events == sorted(events)  # batch order
    longest = max(map(len, names))
    got: dict[tuple[int, int], list[str]] = {}
    for e, part, header in zip(events, parts, named, strict=True):
        assert 0 < len(header) <= budget + longest - 1
        got.setdefault((e, part), []).extend(header.decode().split(","))
    want: dict[tuple[int, int], list[str]] = {}
    for e, r in enumerate(routes):
        for c in r:
            want.setdefault((e, delivery_partition(names[c], partitions)), []).append(
                names[c])
    assert {k: sorted(v) for k, v in got.items()} == {k: sorted(v) for k, v in want.items()}
    # Without a cut, one message per (event, partition), as before the budget existed;
    # the cut messages are its header in pieces, in order.
    assert sorted(zip(whole[0], whole[1], strict=True)) == sorted(want)
    pieces: dict[tuple[int, int], list[bytes]] = {}
    for e, part, header in zip(events, parts, named, strict=True):
        pieces.setdefault((e, part), []).append(header)
    assert {k: b",".join(v) for k, v in pieces.items()} == {
        (e, part): header for e, part, header in zip(*whole, strict=True)}
