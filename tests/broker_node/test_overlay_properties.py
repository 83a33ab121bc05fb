"""No false negatives, ever: random spaces, trees and op sequences against brute force."""

from __future__ import annotations

import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker_node.overlay import Overlay, Topology
from dls.predicates import Subscription
from dls.space import ContentSpace, DiscreteAttribute

VALUES = ["A", "B", "C", "D"]


@st.composite
def spaces(draw):
    attrs = []
    for i in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["uniform", "breakpoints", "discrete"]))
        if kind == "discrete":
            vals = draw(st.lists(st.sampled_from(VALUES), min_size=1, max_size=4, unique=True))
            attrs.append({"name": f"a{i}", "type": "discrete", "values": vals})
        elif kind == "uniform":
            attrs.append({"name": f"a{i}", "type": "numeric", "low": 0, "high": 100,
                          "granules": draw(st.integers(1, 12))})
        else:
            bps = sorted(draw(st.sets(st.integers(1, 99), min_size=1, max_size=4)))
            attrs.append({"name": f"a{i}", "type": "numeric", "low": 0, "high": 100,
                          "breakpoints": bps})
    # Tiny filters on purpose: many false positives and saturated counters.
    m = draw(st.sampled_from([8, 16, 32, 4096]))
    filters = {"client": {"m": m, "k": draw(st.integers(1, 4))},
               "routing": {"m": m, "k": draw(st.integers(1, 4))}}
    app_id = draw(st.one_of(st.none(), st.integers(0, 65535)))
    return ContentSpace.from_spec({"attributes": attrs, "filters": filters, "app_id": app_id})


@st.composite
def trees(draw):
    n = draw(st.integers(1, 5))
    nodes = [f"N{i}" for i in range(n)]
    links = [[nodes[i], nodes[draw(st.integers(0, i - 1))]] for i in range(1, n)]
    return Topology.from_spec({"nodes": nodes, "links": links})


def value_for(attr, draw):
    if isinstance(attr, DiscreteAttribute):
        return draw(st.sampled_from(attr.values))
    edges = [0.0, 100.0, 50.0]
    if hasattr(attr, "breakpoints"):
        edges += list(attr.breakpoints)
    else:
        edges += [100.0 * j / attr.granules for j in range(attr.granules)]
    e = draw(st.sampled_from(edges))
    near = [v for v in (e, math.nextafter(e, -1), math.nextafter(e, 101)) if 0 <= v <= 100]
    return draw(st.sampled_from(near))


@st.composite
def predicates(draw, space):
    preds = []
    for attr in space.attributes:
        if draw(st.booleans()):
            continue
        if isinstance(attr, DiscreteAttribute):
            preds.append({"attr": attr.name, "op": "in",
                          "values": draw(st.lists(st.sampled_from(attr.values), min_size=1,
                                                  unique=True))})
            continue
        op = draw(st.sampled_from(["between", "<", "<=", ">", ">=", "="]))
        a = value_for(attr, draw)
        if op == "between":
            b = value_for(attr, draw)
            preds.append({"attr": attr.name, "op": op, "low": min(a, b), "high": max(a, b)})
        else:
            preds.append({"attr": attr.name, "op": op, "value": a})
    return preds


@st.composite
def scenarios(draw):
    space = draw(spaces())
    topo = draw(trees())
    config = draw(st.sampled_from([
        {}, {"client_filter": "direct"}, {"routing_filter": "direct"},
        {"client_filter": "direct", "routing_filter": "direct"}]))
    ops = []
    live = []
    for i in range(draw(st.integers(1, 60))):
        kind = draw(st.sampled_from(["subscribe", "subscribe", "unsubscribe", "unsubscribe",
                                     "publish", "publish", "publish"]))
        node = draw(st.sampled_from(topo.nodes))
        client = draw(st.sampled_from(["c1", "c2", "c3"]))
        if kind == "subscribe":
            ops.append({"op": "subscribe", "node": node, "client": client, "id": f"s{i}",
                        "where": draw(predicates(space))})
            live.append((node, client, f"s{i}"))
        elif kind == "unsubscribe" and live:
            node, client, sid = live.pop(draw(st.integers(0, len(live) - 1)))
            ops.append({"op": "unsubscribe", "node": node, "client": client, "id": sid})
        else:
            attrs = {a.name: value_for(a, draw) for a in space.attributes}
            ops.append({"op": "publish", "node": node, "client": client, "id": f"e{i}",
                        "attrs": attrs})
    return space, topo, config, ops


@settings(max_examples=250, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(scenarios(), st.booleans())
def test_exact_mode_never_misses_and_matched_equals_brute_force(scenario, exact_delivery):
    """With exact delivery at the clients' nodes, what is delivered is what matches."""
    space, topo, config, ops = scenario
    overlay = Overlay(space, topo, exact_delivery=exact_delivery, **config)
    live: dict[tuple[str, str, str], Subscription] = {}
    for op in ops:
        if op["op"] == "subscribe":
            try:
                sub = Subscription(space, op["where"])
            except Exception as exc:  # noqa: BLE001 - predicates that match nothing
                assert "can match nothing" in str(exc)
                continue
            overlay.apply(op)
            live[(op["node"], op["client"], op["id"])] = sub
        elif op["op"] == "unsubscribe":
            key = (op["node"], op["client"], op["id"])
            if key in live:
                overlay.apply(op)
                del live[key]
        else:
            record = overlay.apply(op)
            want = sorted({(n, c) for (n, c, _), s in live.items()
                           if s.matches(op["attrs"]) and (n, c) != (op["node"], op["client"])})
            delivered = {tuple(x) for x in record["delivered"]}
            assert set(want) <= delivered, f"false negative: {set(want) - delivered}"
            assert [tuple(x) for x in record["matched"]] == want
            if exact_delivery:
                assert sorted(delivered) == want, f"delivered {delivered - set(want)} too"
