"""The edge's verdicts against a brute-force exact matcher (no event a client matches is
removed; no event it does not match is delivered)."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker_node.edge import CHECK, NONE, SURE, EdgeTable, values_match
from dls import _jit
from dls.exceptions import PredicateError
from dls.mapping import event_label
from dls.predicates import Subscription
from dls.space import ContentSpace, DiscreteAttribute
from tests.dls.test_mapping import edge_values, predicates_for, space_and_predicates

CLIENTS = ["c0", "c1", "c2"]


def _numeric_values(space, event):
    return np.array([event[a.name] for a in space.attributes
                     if not isinstance(a, DiscreteAttribute)], dtype=np.float64)



def _event(space, rnd):
    return {a.name: (rnd.choice(a.values) if isinstance(a, DiscreteAttribute)
                     else rnd.choice(edge_values(a) + [rnd.uniform(a.low, a.high)]))
            for a in space.attributes}


@st.composite
def tables(draw):
    space, _ = draw(space_and_predicates())
    subs = []
    for n in range(draw(st.integers(1, 6))):
        preds = draw(predicates_for(space))
        try:
            sub = Subscription(space, preds)
        except Exception:  # noqa: S112 - can match nothing: not a subscription
            continue
        subs.append((draw(st.sampled_from(CLIENTS)), f"s{n}", sub))
    removed = draw(st.sets(st.integers(0, max(0, len(subs) - 1)), max_size=2))
    return space, subs, removed


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tables(), st.randoms(use_true_random=False))
def test_the_edge_delivers_exactly_what_the_subscriptions_match(t, rnd):
    space, subs, removed = t
    table = EdgeTable(space)
    for client, sid, sub in subs:
        table.add(client, sid, sub)
    live = [s for i, s in enumerate(subs) if i not in removed]
    for i in sorted(removed):
        if i < len(subs):
            table.remove(subs[i][0], subs[i][1])
    assert len(table) == len(live)
    for _ in range(60):
        event = _event(space, rnd)
        label = event_label(space, event)
        values = _numeric_values(space, event)
        for client, verdict in zip(CLIENTS, table.verdicts(label, CLIENTS), strict=True):
            mine = [s for c, _, s in live if c == client]
            if not any(c == client for c, _, _ in subs):  # never told of it: by label
                assert verdict.kind == SURE
                continue
            want = any(s.matches(event) for s in mine)
            assert values_match(verdict, values, event) == want, (client, event, mine)
            holds = any(label in set(s.labels(budget=10**7).tolist()) for s in mine)
            assert (verdict.kind == NONE) == (not holds)


def test_sure_check_and_none():
    space = ContentSpace.from_spec({"attributes": [
        {"name": "sym", "type": "discrete", "values": ["A", "B"]},
        {"name": "price", "type": "numeric", "low": 0, "high": 100, "granules": 10}]})
    table = EdgeTable(space)
    table.add("alice", "1", Subscription(space, "sym = A and price between 25 and 55"))
    table.add("bob", "2", None)  # labels alone: delivered by label
    label = lambda sym, price: event_label(space, {"sym": sym, "price": price})  # noqa: E731
    kinds = lambda lab: [v.kind for v in table.verdicts(lab, ["alice", "bob", "carol"])]  # noqa: E731
    # carol: nothing given to the table, so by label
    assert kinds(label("A", 35)) == [SURE, SURE, SURE]  # cell 3 is interior
    assert kinds(label("A", 21)) == [CHECK, SURE, SURE]  # cell 2 is cut at 25
    assert kinds(label("B", 35)) == [NONE, SURE, SURE]  # alice holds no B cell
    v = table.verdicts(label("A", 21), ["alice"])[0]
    assert not values_match(v, np.array([21.0]), {"sym": "A", "price": 21.0})
    assert values_match(v, np.array([25.0]), {"sym": "A", "price": 25.0})
    table.add("alice", "3", Subscription(space, "sym = B and price < 10"))
    assert kinds(label("B", 35)) == [NONE, SURE, SURE]
    table.remove("bob", "2")
    table.remove("alice", "1")
    table.remove("alice", "3")
    table.remove("alice", "3")  # nothing held: nothing changes
    assert len(table) == 0
    assert kinds(label("A", 35)) == [NONE, NONE, SURE]  # alice and bob have nothing left


def test_a_label_outside_the_space_leaves_its_candidates_to_the_label():
    space = ContentSpace.from_spec({"app_id": 7, "attributes": [
        {"name": "price", "type": "numeric", "low": 0, "high": 100, "granules": 10}]})
    table = EdgeTable(space)
    table.add("alice", "1", Subscription(space, "price between 25 and 55"))
    inside = event_label(space, {"price": 21.0})
    [[v_in], [v_out]] = table.verdicts_many([inside, inside ^ (1 << 40)], [["alice"], ["alice"]])
    assert (v_in.kind, v_out.kind) == (CHECK, SURE)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tables(), st.randoms(use_true_random=False))
def test_the_kernels_and_the_numpy_reference_give_the_same_verdicts(t, rnd):
    """dls/_edgekernels.py (compiled when the switch is on) against the numpy path."""
    space, subs, removed = t
    table = EdgeTable(space)
    table.add("c3", "raw", None)  # held without a where: by label
    for i, (client, sid, sub) in enumerate(subs):
        table.add(client, sid, sub)
        if i in removed:
            table.remove(client, sid)
    events = [_event(space, rnd) for _ in range(30)]
    labels = np.array([event_label(space, e) for e in events], dtype=np.uint64)
    names = [*CLIENTS, "c3", "stranger"]
    cands = [rnd.sample(names, rnd.randint(0, len(names))) for _ in events]
    offsets = np.r_[0, np.cumsum([len(c) for c in cands])]
    ids = table.client_ids([n for c in cands for n in c])
    kinds, rows, owner = table.classify(labels, offsets, ids, compiled=False)
    k2, rows2, owner2 = table.classify(labels, offsets, ids, compiled=True)
    assert kinds.tolist() == k2.tolist()
    # the same rows per candidate (the kernels may list a candidate's rows in another order)
    pairs = sorted(zip(owner.tolist(), rows.tolist(), strict=True))
    assert pairs == sorted(zip(owner2.tolist(), rows2.tolist(), strict=True))
    assert owner2.tolist() == sorted(owner2.tolist())


@pytest.mark.skipif(not _jit.ENABLED, reason=f"kernels off: {_jit.REASON}")
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tables())
@pytest.mark.parametrize("slices", [1, 4])
@pytest.mark.parametrize("foreign", [False, True])
def test_the_index_entries_kernel_and_the_numpy_reference_agree(foreign, slices, t):
    """A batch of subscriptions listed in the label index: the kinds and cut columns the
    kernel lists (dls/_indexkernels.held_entries) are the numpy path's; with ``foreign``,
    each subscription also carries the next one's labels, of which its row holds only some
    (the kernel writes its held labels only from the first one left out)."""
    space, subs, _ = t
    got = []
    for compiled in (True, False):
        table = EdgeTable(space, slices)
        if table.index is None:
            return  # a label space too large to index
        table.compiled_kinds = compiled
        seen = []
        add = table.index.labels.add
        table.index.labels.add = lambda *a, _seen=seen, _add=add: (_seen.append(a), _add(*a))[1]
        simple = [(c, s, sub) for c, s, sub in subs if len(sub.alternatives) == 1]
        labels = [sub.labels() for _, _, sub in simple]
        if foreign and labels:
            labels = [np.union1d(own, nxt) for own, nxt in zip(labels, [*labels[1:], labels[0]],
                                                               strict=True)]
        table.add_many([c for c, _, _ in simple], [s for _, s, _ in simple],
                       [sub for _, _, sub in simple], labels)
        got.append([[np.asarray(x).tolist() for x in call] for call in seen])
    assert got[0] == got[1]


# -- every operator (issue 16): simple rows beside general ones ------------------------------
EVERY = {"attributes": [
    {"name": "p", "type": "numeric", "low": 0, "high": 100, "granules": 8},
    {"name": "q", "type": "numeric", "low": 0, "high": 10, "breakpoints": [2, 5],
     "optional": True},
    {"name": "sym", "type": "discrete", "values": ["A", "B", "C"], "optional": True},
    {"name": "s", "type": "string", "breakpoints": ["G", "N", "T"]},
    {"name": "u", "type": "hashed", "buckets": 4, "optional": True}]}
_P = [0, 12.5, 12.4, 25, 30, 37.5, 50, 60, 99, 100]
_Q = [0, 1.5, 2, 3, 5, 7, 10]
_S = ["", "A", "G", "GA", "Gz", "M", "N", "NO", "T", "Tz", "z"]
_U = ["alice", "bob", "carol", "dave"]
_OPTIONAL = {"q", "sym", "u"}
_OPS = {"p": ("=", "!=", "<", "<=", ">", ">=", "between", "in", "not in"),
        "q": ("=", "!=", "<", "<=", ">", ">=", "between", "in", "not in", "exists",
              "missing"),
        "sym": ("=", "!=", "in", "not in", "exists", "missing"),
        "s": ("=", "!=", "<", "<=", ">", ">=", "between", "in", "not in", "prefix"),
        "u": ("=", "!=", "in", "not in", "exists", "missing")}
_POOL = {"p": _P, "q": _Q, "sym": ["A", "B", "C"], "s": _S, "u": _U}


@st.composite
def _predicate(draw):
    attr = draw(st.sampled_from(sorted(_OPS)))
    op = draw(st.sampled_from(_OPS[attr]))
    pool = st.sampled_from(_POOL[attr])
    if op in ("exists", "missing"):
        return {"attr": attr, "op": op}
    if op == "between":
        a, b = sorted([draw(pool), draw(pool)])
        return {"attr": attr, "op": op, "low": a, "high": b}
    if op in ("in", "not in"):
        return {"attr": attr, "op": op, "values": draw(st.lists(pool, min_size=1, max_size=3))}
    if op == "prefix":
        return {"attr": attr, "op": op, "value": draw(st.sampled_from(["", "G", "N", "Ta",
                                                                      "z", "M"]))}
    return {"attr": attr, "op": op, "value": draw(pool)}


_ALT = st.lists(_predicate(), min_size=0, max_size=4)
_WHERE = st.one_of(_ALT, st.lists(st.lists(_predicate(), min_size=1, max_size=3),
                                  min_size=1, max_size=3).map(lambda alts: {"any": alts}))


def _any_event(rnd):
    e = {"p": rnd.choice(_P + [rnd.uniform(0, 100)]),
         "s": rnd.choice(_S + ["".join(rnd.choice("AGMNTz") for _ in range(rnd.randint(0, 3)))]),
         "q": rnd.choice(_Q + [rnd.uniform(0, 10)]), "sym": rnd.choice(["A", "B", "C"]),
         "u": rnd.choice(_U + ["zed"])}
    for name in _OPTIONAL:
        if rnd.random() < 0.3:
            del e[name]
    return e


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from(CLIENTS), _WHERE), min_size=1, max_size=6),
       st.sets(st.integers(0, 5), max_size=2), st.randoms(use_true_random=False))
def test_every_operator_is_exact_and_never_a_false_negative(drawn, removed, rnd):
    space = ContentSpace.from_spec(EVERY)
    subs = []
    for n, (client, where) in enumerate(drawn):
        try:
            subs.append((client, f"s{n}", Subscription(space, where)))
        except PredicateError:  # can match nothing: not a subscription
            continue
    table = EdgeTable(space)
    for client, sid, sub in subs:
        table.add(client, sid, sub)
    for i in sorted(removed):
        if i < len(subs):
            table.remove(subs[i][0], subs[i][1])
    live = [s for i, s in enumerate(subs) if i not in removed]
    # a snapshot of the table restored into another (general rows compiled again)
    clients, ids = [c for c, _, _ in live], [i for _, i, _ in live]
    copy = EdgeTable(space)
    copy.restore(clients, ids, table.export(clients, ids))
    for _ in range(40):
        event = _any_event(rnd)
        label = event_label(space, event)
        values = table.values_of(event)
        assert values is not None
        # as simulate gives them: NaN where an optional attribute is left out
        nan_values = np.array([event.get(n, np.nan) for n in table.numeric_names], dtype=float)
        for t in (table, copy):
            for client, verdict in zip(CLIENTS, t.verdicts(label, CLIENTS), strict=True):
                if not any(c == client for c, _, _ in (subs if t is table else live)):
                    assert verdict.kind == SURE  # never told of it: by label
                    continue
                mine = [s for c, _, s in live if c == client]
                want = any(s.matches(event) for s in mine)
                assert values_match(verdict, values, event) == want, (client, event, mine)
                assert values_match(verdict, nan_values, event) == want
                holds = any(label in set(s.labels().tolist()) for s in mine)
                assert (verdict.kind == NONE) == (not holds)
