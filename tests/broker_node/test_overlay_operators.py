"""``simulate`` with every operator and attribute type: no false negative, and with exact
delivery on, delivered equals matched (the brute force of tests/dls/test_operators.py)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker_node.overlay import Overlay
from dls.exceptions import PredicateError
from dls.predicates import Subscription
from tests.broker_node.test_overlay_properties import trees
from tests.dls.test_operators import ALTS, SPACE, _constants, brute, events


@st.composite
def scenarios(draw: Any) -> tuple[Any, list[dict[str, Any]]]:
    topo = draw(trees())
    ops: list[dict[str, Any]] = []
    live: list[tuple[str, str, str]] = []
    near: dict[str, list[Any]] = {}
    for i in range(draw(st.integers(1, 40))):
        kind = draw(st.sampled_from(["subscribe", "subscribe", "unsubscribe", "publish",
                                     "publish", "publish"]))
        node = draw(st.sampled_from(topo.nodes))
        client = draw(st.sampled_from(["c1", "c2", "c3"]))
        if kind == "subscribe":
            alts = draw(ALTS)
            for k, v in _constants(alts).items():
                near.setdefault(k, []).extend(v)
            ops.append({"op": "subscribe", "node": node, "client": client, "id": f"s{i}",
                        "where": alts[0] if len(alts) == 1 else {"any": alts}, "alts": alts})
            live.append((node, client, f"s{i}"))
        elif kind == "unsubscribe" and live:
            node, client, sid = live.pop(draw(st.integers(0, len(live) - 1)))
            ops.append({"op": "unsubscribe", "node": node, "client": client, "id": sid})
        else:
            attrs = draw(events({k: near.get(k, []) for k in ("price", "vol", "sym", "name",
                                                               "user")}))
            ops.append({"op": "publish", "node": node, "client": client, "id": f"e{i}",
                        "attrs": attrs})
    return topo, ops


@pytest.mark.parametrize("exact_delivery", [True, False])
@settings(max_examples=80, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(scenario=scenarios())
def test_operators_through_the_overlay(exact_delivery: bool, scenario: Any) -> None:
    topo, ops = scenario
    overlay = Overlay(SPACE, topo, exact_delivery=exact_delivery)
    live: dict[tuple[str, str, str], list[list[dict[str, Any]]]] = {}
    for op in ops:
        key = (op["node"], op["client"], op["id"])
        if op["op"] == "subscribe":
            try:
                Subscription(SPACE, op["where"])
            except PredicateError as exc:
                assert "can match nothing" in str(exc)
                continue
            overlay.apply({k: v for k, v in op.items() if k != "alts"})
            live[key] = op["alts"]
        elif op["op"] == "unsubscribe":
            if key in live:
                overlay.apply(op)
                del live[key]
        else:
            record = overlay.apply(op)
            want = sorted({(n, c) for (n, c, _), alts in live.items()
                           if brute(alts, op["attrs"]) and (n, c) != (op["node"], op["client"])})
            delivered = {tuple(x) for x in record["delivered"]}
            assert set(want) <= delivered, f"false negative: {set(want) - delivered}"
            assert [tuple(x) for x in record["matched"]] == want
            if exact_delivery:
                assert sorted(delivered) == want, f"delivered {delivered - set(want)} too"
