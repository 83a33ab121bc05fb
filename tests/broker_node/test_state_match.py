"""Routing a batch on threads (``match_threads``) delivers exactly what one thread does."""

from __future__ import annotations

from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dls.bitset_bank as bank_mod
from broker_node.exceptions import BrokerError
from broker_node.state import BrokerConfig, BrokerState
from dls import _jit
from dls.space import ContentSpace

SPACE = ContentSpace.from_spec({"attributes": [
    {"name": "x", "type": "numeric", "low": 0, "high": 256, "granules": 256}]})
CONFIGS = [{}, {"mode": "paper"}, {"client_filter": "direct", "routing_filter": "direct"}]


def _filled(config: dict[str, object], seed: int, n_subs: int, threads: int
            ) -> BrokerState:
    node = BrokerState.for_space("B", ["A", "C"], SPACE, match_threads=threads, **config)
    rng = np.random.default_rng(seed)
    for i in range(n_subs):
        node.subscribe(f"c{i % 70}", f"s{i}", rng.integers(0, 256, 4).astype(np.uint64))
    node.on_link("A", "advertise", rng.integers(0, 256, 30).astype(np.uint64))
    return node


@settings(max_examples=40, deadline=None)
@given(config=st.sampled_from(CONFIGS), seed=st.integers(0, 2**32 - 1),
       n_subs=st.integers(0, 200), n_events=st.integers(0, 60),
       threads=st.integers(2, 4), origins=st.booleans())
def test_threads_route_as_one_thread(config: dict[str, object], seed: int, n_subs: int,
                                     n_events: int, threads: int, origins: bool) -> None:
    one = _filled(config, seed, n_subs, 1)
    many = _filled(config, seed, n_subs, threads)
    rng = np.random.default_rng(seed + 1)
    # repeated labels, labels of the space and labels of no space (match nobody)
    ev = np.where(rng.random(n_events) < 0.2, rng.integers(0, 2**63, n_events),
                  rng.integers(0, 256 if rng.random() < 0.5 else 8, n_events)
                  ).astype(np.uint64)
    oc = rng.integers(-1, 70, n_events) if origins else None
    on = rng.integers(-1, 2, n_events) if origins else None
    want = one.route(ev, oc, on)
    with mock.patch.object(bank_mod, "_PARALLEL_MIN_EVENTS", 2):
        got = many.route(ev, oc, on)
    assert got.offsets.dtype == np.int64 and got.clients.dtype == np.int64
    assert np.array_equal(got.offsets, want.offsets)
    assert np.array_equal(got.clients, want.clients)
    assert np.array_equal(got.neighbours, want.neighbours)
    for e in range(0, n_events, 5):  # and both are what one event at a time gives
        names = [one.client_name(i) for i in want.clients_of(e).tolist()]
        origin = None if oc is None or oc[e] < 0 else f"c{oc[e]}"
        if origin is not None and origin not in one.clients:
            continue  # an origin index nobody registered: route_one cannot name it
        node = None if on is None or on[e] < 0 else ["A", "C"][on[e]]
        assert one.route_one(int(ev[e]), origin_client=origin, origin_node=node)[0] == names


def test_match_threads_reaches_the_bank_and_is_validated() -> None:
    node = BrokerState.for_space("B", ["A"], SPACE, match_threads=3)
    assert node.config.match_threads == 3
    assert node._bank.match_threads == 3
    assert BrokerState("B", ["A"])._bank.match_threads == 1
    for bad in (0, -2, True, 2.0):
        with pytest.raises(BrokerError, match="match_threads"):
            BrokerConfig(match_threads=bad)  # type: ignore[arg-type]


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), threads=st.integers(2, 4))
def test_update_threads_give_the_state_one_thread_gives(seed: int, threads: int) -> None:
    """Batches large enough for the row-order updates, on threads: the same bank and routes."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(150, 400))
    offsets = np.arange(0, 4 * n + 1, 4)
    labels = rng.integers(0, 256, 4 * n).astype(np.uint64)
    clients = [f"c{i % 70}" for i in range(n)]
    ids = [f"s{i}" for i in range(n)]
    nodes = [BrokerState.for_space("B", ["A"], SPACE, update_threads=t) for t in (1, threads)]
    gone = rng.permutation(n)[: n // 2].tolist()
    for node in nodes:
        node.subscribe_many(clients, ids, offsets, labels)
        node.unsubscribe_many([clients[i] for i in gone], [ids[i] for i in gone])
    assert nodes[1]._bank.update_threads == threads
    assert (nodes[1]._bank._inverse is not None) == _jit.ENABLED  # the row-order path ran
    assert np.array_equal(nodes[0]._bank.counters, nodes[1]._bank.counters)
    assert np.array_equal(nodes[0]._bank.bits, nodes[1]._bank.bits)
    ev = rng.integers(0, 256, 100).astype(np.uint64)
    want, got = nodes[0].route(ev), nodes[1].route(ev)
    assert np.array_equal(want.offsets, got.offsets)
    assert np.array_equal(want.clients, got.clients)


@pytest.mark.parametrize("field", ["match_threads", "update_threads"])
def test_thread_settings_are_validated(field: str) -> None:
    for bad in (0, True, 2.0):
        with pytest.raises(BrokerError, match=f"{field} must be a positive integer") as err:
            BrokerConfig(**{field: bad})  # type: ignore[arg-type]
        assert err.value.field == field
