import numpy as np
import pytest

from broker_node.exceptions import BrokerError, LabelSpaceError
from broker_node.tables import DenseLabelTable, SparseLabelTable, make_table, unique_counts


def test_unique_counts():
    u, c = unique_counts(np.array([5, 1, 5, 5, 2], dtype=np.uint64))
    assert u.tolist() == [1, 2, 5] and c.tolist() == [1, 1, 3]
    u, c = unique_counts(np.array([], dtype=np.uint64))
    assert u.size == 0 and c.size == 0


@pytest.mark.parametrize("table", [DenseLabelTable(100, 50), SparseLabelTable()])
def test_tables_agree(table):
    labels = np.array([100, 120, 149], dtype=np.uint64)
    table.add(labels, np.array([2, 1, 5]))
    table.add(labels[:2], -1)
    assert table.get(labels).tolist() == [1, 0, 5]
    assert table.nonzero().tolist() == [100, 149]
    assert table.memory_bytes() > 0


def test_dense_refuses_labels_outside_its_space():
    t = DenseLabelTable(100, 50)
    with pytest.raises(ValueError, match="outside this table's label space"):
        t.get(np.array([150], dtype=np.uint64))
    with pytest.raises(LabelSpaceError, match=r"label 0x63 .* \(0x64 to 0x95\)") as info:
        t.add(np.array([120, 99], dtype=np.uint64), 1)
    assert isinstance(info.value, BrokerError)
    assert (info.value.field, info.value.value) == ("labels", 99)
    assert t.nonzero().tolist() == []  # nothing was added


def test_make_table_picks_layout():
    assert isinstance(make_table(0, 1 << 10), DenseLabelTable)
    assert isinstance(make_table(0, 1 << 40), SparseLabelTable)
    assert isinstance(make_table(None, None), SparseLabelTable)


def test_unique_counts_dense_path_equals_sort_path():
    rng = np.random.default_rng(0)
    labels = rng.integers(1000, 1100, 500).astype(np.uint64)
    a = unique_counts(labels)
    b = unique_counts(labels, base=1000, size=100)
    assert a[0].tolist() == b[0].tolist() and a[1].tolist() == b[1].tolist()


@pytest.mark.parametrize("make", [lambda: DenseLabelTable(0, 1 << 16), SparseLabelTable])
def test_nonzero_read_from_another_thread_while_the_owner_writes(make):
    # A test or a probe reads a node's tables from its own thread; numpy's nonzero on an
    # array that changes mid-call raises (CI saw it once in test_operators).
    import threading

    table = make()
    stop = threading.Event()

    def write() -> None:
        i = 0
        while not stop.is_set():
            label = np.array([(i * 7) % (1 << 16)], dtype=np.uint64)
            table.add(label, 1 if i % 2 == 0 else -1)
            i += 1

    writer = threading.Thread(target=write)
    writer.start()
    try:
        for _ in range(200):
            got = table.nonzero()
            assert got.dtype == np.uint64 and np.all(np.diff(got.astype(np.int64)) > 0)
    finally:
        stop.set()
        writer.join()
