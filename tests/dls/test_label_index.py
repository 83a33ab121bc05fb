"""The exact label index against a brute-force model, compiled and numpy, through churn."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dls import _jit, label_index, label_slices
from dls.exceptions import DLSError
from dls.label_index import CUTS, HOLDS, LabelIndex
from dls.label_slices import Slicing

BASE, N_LABELS, N_COLS = 1 << 16, 24, 2
USED = 5  # labels the programs use (few: events meet entries often)
# values on the bounds, and between a bound (0.1; 0.1 + 0.2) and its float32 rounded outwards
VALUES = [-1.0, 0.0, 0.099999997, 0.1, 0.3, 0.300000005, 0.5, 1.0, 2.0]
#: column 0's cells ``[-1 + c, c)`` (cell ``place & 3``, the fourth not a value cell), each
#: in four slices; events' values and labels are drawn apart, as a mapper that disagrees
SLICED = Slicing(column=0, shift=0, width=2, cells=3, low=-1.0, scale=4.0, parts=4)


def _expected(model, bounds, general, label, origin, ok, values, decide):
    """Owners an event goes to, and the owners whose entries gave nothing, by brute force."""
    got, seen = set(), set()
    for slot, (owner, row, entries) in model.items():
        if owner == origin or label not in entries:
            continue
        seen.add(owner)
        kind = entries[label]
        if kind == HOLDS or not ok:
            got.add(owner)
        elif all(bounds[row, j, 0] <= values[j] <= bounds[row, j, 1] for j in range(N_COLS)):
            if not general[row] or decide(slot):
                got.add(owner)
    return got, seen - got


def _resolved(m, decide, n, owner_of):
    """Per event the owners delivered to, with pending pairs decided by ``decide``, and
    ``removed`` by owner (one taken for each pending pair delivered)."""
    out = [set(m.owners[m.offsets[e]:m.offsets[e + 1]].tolist()) for e in range(n)]
    removed = m.removed.copy()
    for e, s in zip(*(a.tolist() for a in m.pending), strict=True):
        if decide(s) and owner_of(s) not in out[e]:
            out[e].add(owner_of(s))
            removed[owner_of(s)] -= 1
    return out, removed


def _read(ix, lab, ok, v):
    """The lists an event of label place ``lab`` reads."""
    lists = ix.slicing.lists
    if lists == 1:
        return {lab}
    if not ok:
        return set(range(lab * lists, (lab + 1) * lists))
    part = int(ix.slicing.part(np.array([v[0]]), ix.slicing.cell_of(np.array([lab]), BASE))[0])
    return {lab * lists, lab * lists + 1 + part}


def _listed(ix, lab, kind, bounds):
    """The lists an entry of label place ``lab`` goes to."""
    first, count = ix.slicing.entry_lists(np.array([lab]), BASE, np.array([kind == CUTS]),
                                          bounds[:1, 0], bounds[:1, 1])
    return set(range(int(first[0]), int(first[0] + count[0])))


def _eight(counts):
    """Counts by owner as 8 (the owners the programs use), any past them zero."""
    assert not np.any(counts[8:])
    return np.pad(counts[:8], (0, max(0, 8 - len(counts))))


def _by_owner(counts):
    """``{owner: count}`` of the owners whose count is not zero."""
    return {o: int(c) for o, c in enumerate(counts) if c}


ops = st.lists(st.one_of(
    st.tuples(st.just("add"), st.lists(st.tuples(
        st.integers(0, 5),  # owner
        st.integers(0, 7),  # row
        st.dictionaries(st.integers(0, USED - 1), st.sampled_from([HOLDS, CUTS, CUTS]),
                        max_size=USED)), min_size=1, max_size=6)),
    st.tuples(st.just("retire"), st.integers(0, 1000)),
    st.tuples(st.just("match"), st.lists(st.tuples(
        st.sampled_from([-1, N_LABELS, *range(USED)]), st.integers(-1, 5),
        st.sampled_from([True, True, True, False]),
        st.lists(st.sampled_from(VALUES), min_size=N_COLS,
                 max_size=N_COLS)), min_size=1, max_size=12), st.booleans()),  # deferred
    st.tuples(st.just("compact"), st.just(0)),
    st.tuples(st.just("fold"), st.just(0)),
    st.tuples(st.just("reslice"), st.sampled_from([1, 2, 4, 8])),
), max_size=30)


@pytest.mark.parametrize("slicing", [None, SLICED, "auto"], ids=["one-list", "sliced", "auto"])
@pytest.mark.parametrize(("compiled", "bulk"), [(False, label_index.BULK)] + (
    [(True, label_index.BULK), (True, 0)] if _jit.ENABLED else []))
@settings(max_examples=150, deadline=None, suppress_health_check=[
    HealthCheck.too_slow, HealthCheck.function_scoped_fixture])  # the patch holds for all
@given(program=ops, seed=st.integers(0, 2**16))
def test_the_index_delivers_what_brute_force_does_through_adds_and_retires(
        compiled, bulk, slicing, program, seed, monkeypatch):
    """``bulk`` 0: every batch at least as large as the index is laid out at once; "auto"
    slicing looks from the first entry on, to slice so that an event reads one entry."""
    monkeypatch.setattr(label_index, "BULK", bulk)
    auto = slicing == "auto"
    if auto:
        monkeypatch.setattr(label_slices, "TUNE_FIRST", 1)
        monkeypatch.setattr(label_slices, "READ_TARGET", 1)
        monkeypatch.setattr(label_slices, "MAX_AUTO_PARTS", 8)
        slicing = SLICED.with_parts(1)
    rng = np.random.default_rng(seed)
    lo = rng.choice([-np.inf, -1.0, 0.0, 0.1, 0.5], size=(8, N_COLS))  # 0.1, 0.3: not
    width = rng.choice([0.0, 0.2, 0.5, 1.0, 3.0, np.inf], size=(8, N_COLS))  # float32's
    hi = lo + np.where(np.isinf(width), 0.0, width)
    hi[np.isinf(width)] = np.inf
    bounds = np.stack([lo, hi], axis=2)
    general = rng.random(8) < 0.3
    ix = LabelIndex(BASE, N_LABELS, N_COLS, compiled=compiled, slicing=slicing,
                    auto_slices=auto)
    model: dict[int, tuple[int, int, dict[int, int]]] = {}

    def decide(slot):  # a general row's own verdict, stable per slot
        return (slot * 7919 + seed) % 3 != 0

    want_total, got_total = np.zeros(8, dtype=np.int64), np.zeros(8, dtype=np.int64)

    def folded():  # what the index counted later: with what it counted at once, all of it
        got_total[:] += _eight(ix.fold())
        assert _by_owner(got_total) == _by_owner(want_total)

    for kind, arg, *more in program:
        if kind == "add":
            owners = [o for o, _, _ in arg]
            rows = [r for _, r, _ in arg]
            sizes = [len(d) for _, _, d in arg]
            labels = [BASE + lab for _, _, d in arg for lab in d]
            kinds = [k for _, _, d in arg for k in d.values()]
            cols = rng.integers(-1, N_COLS, size=len(kinds))  # the column an entry keeps
            slots = ix.add(np.array(owners), np.array(rows), bounds[rows], general[rows],
                           np.r_[0, np.cumsum(sizes)], np.array(labels, dtype=np.uint64),
                           np.array(kinds), cols)
            assert not set(slots.tolist()) & set(model)  # a live slot is never given twice
            for s, (o, r, d) in zip(slots.tolist(), arg, strict=True):
                model[s] = (o, r, dict(d))
        elif kind == "retire" and model:
            s = sorted(model)[arg % len(model)]
            ix.retire(np.array([s]))
            del model[s]
        elif kind == "compact":
            ix.compact()
        elif kind == "reslice" and slicing is None:
            with pytest.raises(DLSError, match="without slicing"):
                ix.reslice(arg)
        elif kind == "reslice":
            ix.reslice(arg)
            assert ix.slicing.parts == arg
        elif kind == "fold":
            folded()
        elif kind == "match":
            labels = np.array([BASE + lab if lab >= 0 else 5 for lab, *_ in arg],
                              dtype=np.uint64)
            origins = np.array([o for _, o, _, _ in arg])
            ok = np.array([k for _, _, k, _ in arg])
            values = np.array([v for *_, v in arg], dtype=np.float64)
            m = ix.match(labels, origins, ok, values, deferred=more[0])
            got, removed = _resolved(m, decide, len(arg), lambda s: model[s][0])
            got_total[:] += _eight(removed)
            want_removed = []
            cutting = [any(o != origin and entries.get(lab) == CUTS
                           and _listed(ix, lab, CUTS, bounds[r]) & _read(ix, lab, k, v)
                           for o, r, entries in model.values())
                       for lab, origin, k, v in arg]
            oks = [k for _, _, k, _ in arg]
            assert m.checked == sum(c and k for c, k in zip(cutting, oks, strict=True))
            assert m.unread == sum(c and not k for c, k in zip(cutting, oks, strict=True))
            for e, (lab, o, k, v) in enumerate(arg):
                want, gone = _expected(model, bounds, general, lab, o, k, v, decide)
                assert got[e] == want, (e, lab)
                want_removed += gone
                owners = m.owners[m.offsets[e]:m.offsets[e + 1]].tolist()
                assert owners == sorted(owners)
            np.add.at(want_total, want_removed, 1)
            if not more[0]:  # deferred: the owners' counts come with the next fold
                assert _by_owner(removed) == _by_owner(np.bincount(want_removed,
                                                                   minlength=8))
        assert len(ix) == len(model)
        assert ix.entries == sum(len(_listed(ix, lab, k, bounds[r]))
                                 for _, r, d in model.values() for lab, k in d.items())
    folded()


def test_labels_outside_the_index_are_refused_and_change_nothing():
    ix = LabelIndex(BASE, N_LABELS, N_COLS)
    free = np.zeros((2, N_COLS, 2))
    with pytest.raises(DLSError, match=r"label 0x10018 lies outside"):
        ix.add(np.array([0, 1]), np.array([0, 0]), free, np.zeros(2, bool), np.array([0, 1, 2]),
               np.array([BASE, BASE + N_LABELS], dtype=np.uint64), np.array([0, 0]))
    assert len(ix) == 0 and ix.entries == 0
    with pytest.raises(DLSError, match="addresses 1 to"):
        LabelIndex(0, 1 << 30, N_COLS)


def test_retiring_a_slot_twice_is_refused():
    ix = LabelIndex(BASE, N_LABELS, N_COLS)
    s = ix.add(np.array([0]), np.array([0]), np.zeros((1, N_COLS, 2)), np.zeros(1, bool),
               np.array([0, 1]), np.array([BASE], dtype=np.uint64), np.array([HOLDS]))
    ix.retire(s)
    with pytest.raises(DLSError, match="is not a live subscription"):
        ix.retire(s)


@pytest.mark.parametrize("compiled", [False, True] if _jit.ENABLED else [False])
def test_lists_that_fill_many_times_in_one_insert_keep_every_entry(compiled):
    """Batches piling onto few labels (lists moving several times in one call) and
    compactions in between: every live entry is found, none twice."""
    rng = np.random.default_rng(7)
    ix = LabelIndex(BASE, N_LABELS, N_COLS, compiled=compiled)
    free = np.zeros((1, N_COLS, 2))
    owner_of = {}
    for batch in range(12):
        n = int(rng.integers(1, 400))
        labels = BASE + rng.integers(0, 3, size=n)  # three lists take everything
        owners = rng.integers(0, 50, size=n)
        slots = ix.add(owners, np.zeros(n, int), np.repeat(free, n, axis=0),
                       np.zeros(n, bool), np.arange(n + 1), labels.astype(np.uint64),
                       np.zeros(n, int))
        owner_of.update(dict(zip(slots.tolist(), zip(owners.tolist(), (labels - BASE).tolist(),
                                                     strict=True), strict=True)))
        if batch % 3 == 2:  # retire a third: a compaction comes when dead passes live
            gone = rng.choice(sorted(owner_of), size=len(owner_of) // 3, replace=False)
            ix.retire(gone)
            for s in gone.tolist():
                del owner_of[s]
        for lab in range(3):
            m = ix.match(np.array([BASE + lab], dtype=np.uint64), np.array([-1]),
                         np.array([True]), np.zeros((1, N_COLS)))
            want = sorted({o for o, lb in owner_of.values() if lb == lab})
            assert m.owners.tolist() == want
        assert ix.entries == len(owner_of)
