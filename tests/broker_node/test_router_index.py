"""The node's label index against brute force: every exact match delivered, nothing else.

Random subscriptions over the quotes space (cell edges, interior cells, general rows),
random removals (a removed subscription's slot is reused by the next one), random events:
what the node writes equals ``Subscription.matches`` over the live subscriptions, on the
index and on the plans path alike.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from benchmarks import quotes
from dls.exceptions import DLSError
from dls.predicates import Subscription
from tests.broker_node.test_router_edge import _Node

CELL = 1000 / 64  # the quotes space's price cells
PRICES = st.one_of(st.integers(0, 64).map(lambda c: c * CELL),  # cell edges
                   st.floats(0, 999.99, allow_nan=False).map(lambda v: round(v, 2)))
SYMS = st.lists(st.sampled_from(quotes.SYMBOLS), min_size=1, max_size=3, unique=True)


@st.composite
def wheres(draw: Any) -> tuple[str, float, float, str]:
    """A where of the quotes space: simple mostly, sometimes general (OR, !=).

    With its price range's ends and one of its symbols (events are sent on those ends).
    """
    a, b = sorted((draw(PRICES), draw(PRICES)))
    syms = draw(SYMS)
    parts = [f"sym in ({', '.join(syms)})", f"price between {a} and {b}"]
    if draw(st.booleans()):
        c = draw(st.floats(-20, 20, allow_nan=False).map(lambda v: round(v, 1)))
        parts.append(f"change {draw(st.sampled_from(['>=', '<', '>']))} {c}")
    if draw(st.integers(0, 3)) == 0:
        parts.append(f"volume != {draw(st.sampled_from([0, 1000, 5000]))}")
    where = " and ".join(parts)
    if draw(st.integers(0, 4)) == 0:
        where += f" or price > {draw(PRICES)}"
    return where, a, b, syms[0]


def _compiled(space: Any, where: str) -> Subscription | None:
    try:
        return Subscription(space, where)
    except DLSError:
        return None


ops = st.lists(st.one_of(
    st.tuples(st.just("sub"), st.integers(0, 9), wheres()),
    st.tuples(st.just("unsub"), st.integers(0, 99), st.just(None)),
    st.tuples(st.just("pub"), st.integers(0, 2**16), st.just(None)),
), min_size=1, max_size=25)


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(program=ops)
def test_the_index_delivers_exactly_what_matches(tmp_path: Path, program: list[Any]) -> None:
    (tmp_path / "q").mkdir(exist_ok=True)
    spec = json.loads(quotes.SPACE_FILE.read_text())
    # one shared delivery partition: taking a subscription asks no broker about topics
    nodes = [_Node(tmp_path / "q", spec=spec, partitions=1),
             _Node(tmp_path / "q", spec=spec, partitions=1)]
    plans = nodes[1]
    assert plans.edge is not None and nodes[0].edge.index is not None
    plans.edge.index = None  # the plans path, beside the index
    live: dict[tuple[str, str], Subscription] = {}
    n = 0
    ends: list[dict[str, Any]] = []  # events on the ends of the subscriptions' ranges
    for kind, arg, drawn in program:
        if kind == "sub":
            where, a, b, sym = drawn
            n += 1
            client, sid = f"c{arg % 5}", f"s{n}"
            sub = _compiled(nodes[0].space, where)
            if sub is None:  # a where that can match nothing is refused
                continue
            # through the node's subscribe topic, half of them with the SDK's row
            nodes[0].send_subscription(client, sid, where, row=arg >= 5)
            nodes[1].subscribe(client, sid, where)
            live[(client, sid)] = sub
            ends += [{"sym": sym, "price": p, "change": 0.0, "volume": 1000} for p in (a, b)
                     if p < 1000]
        elif kind == "unsub" and live:
            client, sid = sorted(live)[arg % len(live)]
            for node in nodes:
                node.svc.state.unsubscribe(client, sid)
                node.edge.remove(client, sid)
            del live[(client, sid)]
        elif kind == "pub":
            ev = quotes.draw_events(6, seed=arg)
            events = [ev.attrs(i) for i in range(len(ev))]
            events.append({"sym": "IBM", "price": CELL * (arg % 64), "change": 0.0,
                           "volume": 1000})  # on a cell edge
            events += ends[-6:]
            want = sorted((f"dls.deliver.{c}", i) for i, e in enumerate(events)
                          for (c, _), sub in live.items() if sub.matches(e))
            want = sorted(set(want))  # a client with two matching subscriptions: once
            got = [node.publish(events) for node in nodes]
            assert got[0] == want
            assert got[1] == want
            assert nodes[0].svc.router.indexed
