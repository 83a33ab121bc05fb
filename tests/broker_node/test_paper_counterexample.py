"""The paper's CBF-based aggregation (Algorithm 3) loses events; exact does not.

See docs/architecture.md#exact-aggregation.

SFF holds A and B; C arrives and all of C's counters are already non-zero, so C is never
advertised; A is unsubscribed, its advertisement is withdrawn, the neighbour's ERT drops A
and no longer covers C, and events for C stop at the neighbour although C is live.
"""

from __future__ import annotations

import itertools

from broker_node.overlay import Overlay, Topology
from dls.cbf import CountingBloomFilter
from dls.space import ContentSpace

M, K = 16, 2
SPACE = ContentSpace.from_spec({
    "attributes": [{"name": "x", "type": "numeric", "low": 0, "high": 64, "granules": 64}],
    "filters": {"client": {"m": 4096, "k": 3}, "routing": {"m": M, "k": K}},
})
TOPO = Topology.from_spec({"nodes": ["N1", "N2"], "links": [["N1", "N2"]]})


def find_triple() -> tuple[int, int, int]:
    """Labels A, B, C for which the paper's rules lose C (searched with the real CBF)."""
    for a, b, c in itertools.permutations(range(64), 3):
        sff = CountingBloomFilter.with_params(M, K)
        sff.add(a)
        sff.add(b)
        if sff.count(c) == 0:
            continue  # C would be advertised: no trap
        sff.add(c)
        if sff.count(a) != 1:
            continue  # the withdrawal of A would not be forwarded
        ert = CountingBloomFilter.with_params(M, K)
        ert.add(a)
        ert.add(b)
        ert.remove(a)
        if c not in ert:
            return a, b, c
    raise AssertionError("no counterexample with these parameters")


def run(mode: str) -> list[tuple[str, str]]:
    a, b, c = find_triple()
    ov = Overlay(SPACE, TOPO, mode=mode)
    ov.subscribe("N1", "alice", "sa", f"x >= {a} and x < {a + 1}")
    ov.subscribe("N1", "bob", "sb", f"x >= {b} and x < {b + 1}")
    ov.subscribe("N1", "carol", "sc", f"x >= {c} and x < {c + 1}")
    ov.unsubscribe("N1", "alice", "sa")
    _, matched = ov.publish("N2", "publisher", {"x": c + 0.5})
    return matched


def test_paper_mode_loses_a_live_subscription():
    assert run("paper") == []


def test_exact_mode_delivers_it():
    assert run("exact") == [("N1", "carol")]


def busy_label_traffic(mode: str, holders: int) -> tuple[int, int]:
    """Labels advertised and withdrawn after ``holders`` subscribe to one cell, then leave."""
    from broker_node.state import BrokerState

    state = BrokerState.for_space("N1", ["N2"], SPACE, mode=mode)
    advertised = withdrawn = 0
    for i in range(holders):
        for m in state.subscribe(f"c{i}", f"s{i}", SPACE_CELL):
            advertised += len(m.labels)
    for i in range(holders):
        for m in state.unsubscribe(f"c{i}", f"s{i}"):
            withdrawn += len(m.labels)
    return advertised, withdrawn


SPACE_CELL = [5]  # one label


def test_paper_mode_never_withdraws_a_label_held_past_the_counter_limit():
    """4-bit SFF counters stick once they reach 15: after 15 holders, never withdrawn."""
    assert busy_label_traffic("paper", 14) == (1, 1)
    assert busy_label_traffic("paper", 15) == (1, 0)  # events keep coming to N1 for nobody
    assert busy_label_traffic("exact", 15) == (1, 1)
    assert busy_label_traffic("exact", 40) == (1, 1)
