"""The state digest: equal states give equal digests, and every change moves it."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker_node.digest import state_digest
from broker_node.state import ADVERTISE, WITHDRAW, BrokerState
from dls.exceptions import DLSError
from dls.space import ContentSpace

SPACE = ContentSpace.from_spec({"attributes": [
    {"name": "x", "type": "numeric", "low": 0, "high": 100, "granules": 16}]})
L = [SPACE.app_prefix + i for i in range(SPACE.label_space_size)]
CONFIGS: list[dict[str, Any]] = [
    {}, {"client_filter": "direct", "routing_filter": "direct"}, {"mode": "paper"}]


def _state(**config: Any) -> BrokerState:
    return BrokerState.for_space("A", ["B", "C"], SPACE, **config)


def _subs() -> list[tuple[str, str, list[int]]]:
    return [("ann", "s1", [L[0], L[3]]), ("bob", "s2", [L[3]]), ("ann", "s3", [L[5], L[0]]),
            ("cy", "s4", [L[9], L[10], L[11]])]


@pytest.mark.parametrize("config", CONFIGS)
def test_one_batch_or_one_by_one_give_the_same_digest(config: dict[str, Any]) -> None:
    one, many = _state(**config), _state(**config)
    for client, sid, labels in _subs():
        one.subscribe(client, sid, labels)
    rows = _subs()
    offsets = np.cumsum([0] + [len(r[2]) for r in rows])
    many.subscribe_many([r[0] for r in rows], [r[1] for r in rows], offsets,
                        np.array([x for r in rows for x in r[2]], dtype=np.uint64))
    assert state_digest(one) == state_digest(many)
    assert len(state_digest(one)) == 40


@pytest.mark.parametrize("config", CONFIGS)
def test_every_subscription_and_link_change_moves_the_digest(config: dict[str, Any]) -> None:
    state = _state(**config)
    seen = [state_digest(state)]

    def moved() -> str:
        seen.append(state_digest(state))
        assert seen[-1] not in seen[:-1]
        return seen[-1]

    state.subscribe("ann", "s1", [L[1]])
    moved()
    state.subscribe("ann", "s2", [L[1]])  # same labels, same client: counts change
    moved()
    state.subscribe("bob", "s3", [L[1]])
    moved()
    state.on_link("B", ADVERTISE, [L[2]])
    moved()
    state.on_link("C", ADVERTISE, [L[2]])
    moved()
    state.unsubscribe("ann", "s2")
    moved()


@pytest.mark.parametrize("config", CONFIGS)
def test_undoing_a_change_gives_the_digest_back(config: dict[str, Any]) -> None:
    state = _state(**config)
    state.subscribe("ann", "s1", [L[1], L[2]])
    before = state_digest(state)
    state.on_link("B", ADVERTISE, [L[2], L[4]])
    assert state_digest(state) != before
    state.on_link("B", WITHDRAW, [L[2], L[4]])
    assert state_digest(state) == before
    state.subscribe("ann", "s2", [L[7]])
    state.unsubscribe("ann", "s2")
    assert state_digest(state) == before


@pytest.mark.parametrize(("a", "b"), [
    (("ann", "s1", [L[1]]), ("bob", "s1", [L[1]])),  # another client
    (("ann", "s1", [L[1]]), ("ann", "s2", [L[1]])),  # another id
    (("ann", "s1", [L[1]]), ("ann", "s1", [L[2]])),  # other labels
    (("ann", "s1", [L[1]]), ("ann", "s1", [L[1], L[2]])),
])
def test_states_that_differ_in_one_field_differ(a: Any, b: Any) -> None:
    x, y = _state(), _state()
    x.client_index("bob")  # the same clients on both sides
    y.client_index("bob")
    x.client_index("ann")
    y.client_index("ann")
    x.subscribe(*a)
    y.subscribe(*b)
    assert state_digest(x) != state_digest(y)


def test_configuration_and_neighbours_are_part_of_the_digest() -> None:
    assert state_digest(_state()) != state_digest(_state(mode="paper"))
    assert state_digest(_state()) != state_digest(BrokerState.for_space("A", ["B"], SPACE))
    assert state_digest(_state()) != state_digest(BrokerState.for_space("Z", ["B", "C"], SPACE))


@pytest.mark.parametrize("config", CONFIGS)
def test_refused_changes_leave_the_digest(config: dict[str, Any]) -> None:
    state = _state(**config)
    state.subscribe("ann", "s1", [L[1]])
    state.on_link("B", ADVERTISE, [L[3]])
    before = state_digest(state)
    refused = [
        lambda: state.subscribe("bob", "s2", [1 << 40]),  # outside the space
        lambda: state.subscribe("bob", "s1", [L[1]]),  # another client's id
        lambda: state.subscribe("ann", "s1", [L[2]]),  # the id with other labels
        lambda: state.unsubscribe("bob", "s1"),  # not bob's
        lambda: state.unsubscribe("ann", "nope"),
        lambda: state.on_link("B", ADVERTISE, [L[0], 1 << 40]),
        lambda: state.on_link("Z", ADVERTISE, [L[0]]),
        lambda: state.on_link("B", "shout", [L[0]]),
        lambda: state.subscribe_many(["ann", "bob"], ["s5", "s6"], [0, 1, 2],
                                     np.array([L[4], 1 << 40], dtype=np.uint64)),
    ]
    for change in refused:
        with pytest.raises(DLSError):
            change()
        assert state_digest(state) == before


_OPS = st.lists(st.one_of(
    st.tuples(st.just("sub"), st.sampled_from(["ann", "bob", "cy"]), st.integers(0, 12),
              st.lists(st.integers(0, len(L) - 1), min_size=1, max_size=4)),
    st.tuples(st.just("unsub"), st.integers(0, 12)),
    st.tuples(st.just("link"), st.sampled_from(["B", "C"]),
              st.sampled_from([ADVERTISE, WITHDRAW]),
              st.lists(st.integers(0, len(L) - 1), min_size=1, max_size=4)),
), max_size=30)


def _apply(state: BrokerState, op: Any, owner: dict[int, str]) -> bool:
    """Apply one op; True when the state accepted it."""
    try:
        if op[0] == "sub":
            state.subscribe(op[1], f"s{op[2]}", [L[i] for i in op[3]])
            owner.setdefault(op[2], op[1])
        elif op[0] == "unsub":
            state.unsubscribe(owner.get(op[1], "ann"), f"s{op[1]}")
            owner.pop(op[1], None)
        else:
            state.on_link(op[1], op[2], [L[i] for i in op[3]])
    except DLSError:
        return False
    return True


@settings(max_examples=60, deadline=None)
@given(ops=_OPS, config=st.sampled_from(CONFIGS))
def test_the_same_history_gives_the_same_digest_and_a_new_subscription_moves_it(
        ops: list[Any], config: dict[str, Any]) -> None:
    x, y = _state(**config), _state(**config)
    ox: dict[int, str] = {}
    oy: dict[int, str] = {}
    for op in ops:
        before = state_digest(x)
        accepted = _apply(x, op, ox)
        assert _apply(y, op, oy) == accepted
        if not accepted:
            assert state_digest(x) == before
    assert state_digest(x) == state_digest(y)
    before = state_digest(x)
    x.subscribe("dee", "fresh", [L[0]])
    assert state_digest(x) != before
