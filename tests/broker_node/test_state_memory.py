"""BrokerState.memory_bytes: the same total the benchmarks used to add up by hand."""

import numpy as np
import pytest

from broker_node.state import BrokerState
from dls.space import ContentSpace

SPACE = ContentSpace.from_spec({"attributes": [
    {"name": "x", "type": "numeric", "low": 0, "high": 256, "granules": 256},
    {"name": "y", "type": "numeric", "low": 0, "high": 64, "granules": 64}]})

CONFIGS = [
    {},
    {"client_filter": "direct", "routing_filter": "direct"},
    {"mode": "paper"},
    {"mode": "paper", "client_filter": "direct"},
]


def parts_by_hand(st: BrokerState) -> int:
    """The sum benchmarks/baselines/dls.py computed from the private members before."""
    total = st._bank.memory_bytes()
    for f in (*st._ert.values(), *st._sff.values()):
        total += int(f.counters.nbytes)
    total += st._total.memory_bytes()
    total += sum(t.memory_bytes() for t in st._recv.values())
    for fn in st._position_fns.values():
        table = getattr(getattr(fn, "__self__", None), "table", None)
        if isinstance(table, np.ndarray):
            total += int(table.nbytes)
    for offsets, labels, clients, _ in st._registry.batches.values():
        total += int(offsets.nbytes + labels.nbytes + np.asarray(clients).nbytes)
    return total + st._registry.index_bytes()


def churn(st: BrokerState, rng: np.random.Generator, base: int, size: int) -> None:
    """Batches of subscriptions, link messages and unsubscriptions."""
    ids: list[str] = []
    for b in range(4):
        n = int(rng.integers(1, 40))
        lens = rng.integers(1, 6, n)
        offsets = np.r_[0, np.cumsum(lens)]
        flat = (base + rng.integers(0, size, int(offsets[-1]))).astype(np.uint64)
        batch = [f"s{b}-{i}" for i in range(n)]
        st.subscribe_many([f"c{int(c)}" for c in rng.integers(0, 7, n)], batch, offsets, flat)
        ids += batch
        st.on_link("A", "advertise", (base + rng.integers(0, size, 5)).astype(np.uint64))
        assert st.memory_bytes() == parts_by_hand(st)
    gone = ids[::2]
    st.unsubscribe_many([st.subscription(s)[0] for s in gone], gone)
    st.on_link("A", "withdraw", st.received_from("A")[:2])


@pytest.mark.parametrize("config", CONFIGS)
def test_memory_bytes_is_the_sum_over_the_parts(config):
    st = BrokerState.for_space("B", ["A", "C"], SPACE, **config)
    empty = st.memory_bytes()
    assert empty == parts_by_hand(st)
    churn(st, np.random.default_rng(7), SPACE.app_prefix, SPACE.label_space_size)
    assert st.memory_bytes() == parts_by_hand(st)
    parts = st.memory_breakdown()
    assert sum(parts.values()) == st.memory_bytes()
    assert parts["registry"] > 0  # the live subscriptions' arrays
    assert (parts["paper_filters"] > 0) == (config.get("mode") == "paper")
    assert parts["position_tables"] > 0  # a small label space hashes through tables
    assert st.memory_bytes() > empty


def test_memory_bytes_without_a_known_label_space():
    """Sparse count tables and no position tables: still the same sum."""
    st = BrokerState("B", ["A"])
    churn(st, np.random.default_rng(3), 1 << 40, 1 << 30)
    assert st.memory_bytes() == parts_by_hand(st)
    parts = st.memory_breakdown()
    assert parts["position_tables"] == 0
    assert parts["label_counts"] > 0  # the sparse tables hold the live labels


def test_registry_bytes_go_with_the_last_subscription_of_a_batch():
    st = BrokerState.for_space("B", ["A"], SPACE)
    st.subscribe_many(["c1", "c2"], ["s1", "s2"], np.array([0, 2, 3]),
                      np.array([1, 2, 3], dtype=np.uint64) + SPACE.app_prefix)
    # int32 offsets, labels as uint16 offsets into the 16,384 labels, uint8 clients
    compact = 3 * 4 + 3 * 2 + 2 * 1
    assert st.memory_breakdown()["registry"] == compact
    st.unsubscribe("c1", "s1")
    assert st.memory_breakdown()["registry"] == compact  # s2 still holds it
    st.unsubscribe("c2", "s2")
    assert st.memory_breakdown()["registry"] == 0


def test_registry_keeps_labels_relative_and_gives_them_back_whole():
    """Compact storage (uint16 offsets from the space's base) is invisible to readers."""
    st = BrokerState.for_space("B", ["A"], SPACE)
    base = SPACE.app_prefix
    labels = np.array([0, 5, 16383, 7], dtype=np.uint64) + base
    st.subscribe_many(["c1", "c300"], ["s1", "s2"], np.array([0, 3, 4]), labels)
    _, stored, clients, _ = next(iter(st._registry.batches.values()))
    assert stored.dtype == np.uint16 and clients.dtype == np.uint8
    assert st.subscription("s1")[1].tolist() == sorted(labels[:3].tolist())
    assert st.subscription("s1")[1].dtype == np.uint64
    ids, owners, offsets, flat = st._registry.live()
    assert ids == ["s1", "s2"] and owners.tolist() == [0, 1]
    assert flat.tolist() == sorted(labels[:3].tolist()) + [labels[3]]
    st.unsubscribe("c1", "s1")
    assert st.received_from("A").size == 0 and len(st) == 1


def test_registry_compacts_when_most_seqs_are_dead(monkeypatch):
    """Live rows are copied into one batch, renumbered, and every answer stays."""
    import broker_node.registry as registry_mod

    monkeypatch.setattr(registry_mod, "_COMPACT_MIN", 8)
    st = BrokerState.for_space("B", ["A"], SPACE)
    base = SPACE.app_prefix
    rng = np.random.default_rng(5)
    want = {}
    for b in range(5):
        ids = [f"s{b}-{i}" for i in range(10)]
        flat = (base + rng.integers(0, 100, 20)).astype(np.uint64)
        st.subscribe_many([f"c{i % 3}" for i in range(10)], ids, np.arange(0, 21, 2), flat)
        want.update({sid: st.subscription(sid) for sid in ids})
    gone = [sid for sid in want if not sid.endswith(("-3", "-7"))]
    st.unsubscribe_many([want[sid][0] for sid in gone], gone)
    for sid in gone:
        del want[sid]
    reg = st._registry
    assert len(reg.batches) == 1 and reg._next == len(want) == 10
    ids, owners, offsets, flat = reg.live()
    assert ids == list(want)  # registration order kept
    for sid in ids:
        client, labels = st.subscription(sid)
        assert client == want[sid][0] and labels.tolist() == want[sid][1].tolist()
    st.subscribe_many(["c0"], ["s9-0"], np.array([0, 1]), np.array([base], dtype=np.uint64))
    st.unsubscribe_many([want[sid][0] for sid in ids], ids)
    assert len(st) == 1 and st.subscription("s9-0")[0] == "c0"


def test_registry_closes_the_gaps_of_batches_gone(monkeypatch):
    """Batches gone leave seqs behind; the live ones are renumbered back to back."""
    import broker_node.registry as registry_mod

    monkeypatch.setattr(registry_mod, "_COMPACT_MIN", 8)
    monkeypatch.setattr(registry_mod, "_MERGE_ROWS", 0)  # four batches stay four
    st = BrokerState.for_space("B", ["A"], SPACE)
    base = SPACE.app_prefix
    batches = [[f"s{b}-{i}" for i in range(10)] for b in range(4)]
    for b, ids in enumerate(batches):
        flat = (base + np.arange(b, b + 10)).astype(np.uint64)
        st.subscribe_many(["c1"] * 10, ids, np.arange(11), flat)
    st.unsubscribe_many(["c1"] * 20, batches[0] + batches[1])
    st.unsubscribe_many(["c1"], [batches[2][4]])  # a dead row inside a live batch
    reg = st._registry
    assert sorted(reg.batches) == [0, 10] and reg._next == 20
    ids, owners, offsets, flat = reg.live()
    assert ids == [s for s in batches[2] + batches[3] if s != batches[2][4]]
    assert st.subscription(batches[3][9])[1].tolist() == [base + 12]
    st.unsubscribe_many(["c1"] * 19, ids)
    assert len(st) == 0 and reg.batches == {}


def test_subscriptions_one_at_a_time_share_batches():
    """Small batches take the next ones in: few batches, the same answers."""
    st = BrokerState.for_space("B", ["A"], SPACE)
    base = SPACE.app_prefix
    for i in range(3000):
        st.subscribe(f"c{i % 5}", f"s{i}", [base + i % 300, base + 300 + i % 7])
    reg = st._registry
    assert len(reg.batches) == 3 and reg._rows == 3000  # 1,024 rows, 1,024, the rest
    assert st.memory_bytes() == parts_by_hand(st)
    for i in (0, 1023, 1024, 2999):
        client, labels = st.subscription(f"s{i}")
        assert client == f"c{i % 5}"
        assert labels.tolist() == sorted([base + i % 300, base + 300 + i % 7])
    for i in range(0, 3000, 2):
        st.unsubscribe(f"c{i % 5}", f"s{i}")
    ids, owners, offsets, flat = reg.live()
    assert ids == [f"s{i}" for i in range(1, 3000, 2)]
    assert owners.tolist() == [i % 5 for i in range(1, 3000, 2)]
