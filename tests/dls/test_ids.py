"""The id indexes (dls.ids): the compiled hash table answers as the dict reference does.

Random programs of reserves (new ids, known ones, repeats), look-ups, discards and
renumberings run on a :class:`HashIdIndex` and a :class:`DictIdIndex` side by side; every
answer (flags, seqs of the codes, repeats, live seqs, ids) must be the same. Ids include
the empty string, NUL, non-ASCII and lone surrogates. A table whose tags have no bits makes
every probe compare bytes: a hash collision must never confuse two ids.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dls import _jit
from dls import ids as ids_mod
from dls.ids import DictIdIndex, HashIdIndex, make_id_index

compiled = pytest.mark.skipif(not _jit.ENABLED, reason=_jit.REASON or "numba absent")

ALPHABET = st.sampled_from(["a", "b", "s", "0", "1", "\0", "é", "\ud800", "\U0001f600"])
IDS = st.text(ALPHABET, max_size=12)
M32 = 0xFFFFFFFF


def _run(index: Any, program: list[tuple[str, Any]]) -> list[Any]:
    """Apply a program; every answer, in order (codes as their seqs)."""
    out: list[Any] = []
    nxt = 0
    for op, arg in program:
        if op == "reserve":
            flags = index.reserve(arg, nxt)
            out.append(None if flags is None else flags.tolist())
            if flags is None:
                nxt += len(arg)
        elif op == "codes":
            codes, rep = index.codes(arg)
            out.append(([int(c) & M32 if c >= 0 else -1 for c in codes], rep))
        elif op == "discard":
            live = set(index.ids_of(index.live()))
            ids = list(dict.fromkeys(s for s in arg if s in live))
            codes, _ = index.codes(ids)
            index.discard(ids, codes)
            out.append(len(index))
        elif op == "expect":
            index.expect(arg)
            out.append(len(index))
        elif op == "renumber":  # odd seqs, gaps between and after: ids_of must skip them
            seqs = index.live()
            nxt = 2 * len(seqs) + 3
            index.renumber(seqs, 2 * np.arange(len(seqs)) + 1, nxt)
            out.append(nxt)
        out.append((index.live().tolist(), index.ids_of(index.live()), len(index)))
    return out


def _programs() -> st.SearchStrategy[list[tuple[str, Any]]]:
    batch = st.lists(IDS, max_size=12)
    step = st.one_of(st.tuples(st.just("reserve"), batch), st.tuples(st.just("codes"), batch),
                     st.tuples(st.just("discard"), batch), st.tuples(st.just("renumber"),
                                                                      st.none()),
                     st.tuples(st.just("expect"), st.integers(0, 300)))
    return st.lists(step, max_size=25)


@compiled
@settings(max_examples=300, deadline=None)
@given(program=_programs())
def test_hash_index_answers_as_the_dict(program: list[tuple[str, Any]]) -> None:
    assert _run(HashIdIndex(), program) == _run(DictIdIndex(), program)


@compiled
@settings(max_examples=100, deadline=None)
@given(program=_programs(), layout=st.sampled_from([(32, np.uint32), (40, np.uint64)]))
def test_colliding_tags_never_confuse_two_ids(program: list[tuple[str, Any]],
                                              layout: tuple[int, type]) -> None:
    """No tag bits (every probe compares bytes), or 64-bit entries: the same answers."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ids_mod, "_layout", lambda cap, top: layout)
        index = HashIdIndex()
        index._bits, index._table = layout[0], np.zeros(64, dtype=layout[1])
        assert _run(index, program) == _run(DictIdIndex(), program)
        assert index._table.dtype == layout[1]


@compiled
def test_growth_rebuilds_and_compaction_keep_every_id() -> None:
    index, ref = HashIdIndex(), DictIdIndex()
    nxt = 0
    for b in range(30):
        ids = [f"id-{b}-{i}" for i in range(1000)]
        for ix in (index, ref):
            assert ix.reserve(ids, nxt) is None
        nxt += len(ids)
        gone = ids[::3]
        for ix in (index, ref):
            codes, rep = ix.codes(gone)
            assert rep == -1 and (codes >= 0).all()
            ix.discard(gone, codes)
    assert index.live().tolist() == ref.live().tolist()
    assert index.ids_of(index.live()) == ref.ids_of(ref.live())
    for ix in (index, ref):
        ix.renumber(ix.live())
    assert index.live().tolist() == list(range(len(ref)))
    assert index.ids_of(index.live()) == ref.ids_of(ref.live())
    codes, _ = index.codes(["id-3-1", "id-3-0", "nope"])
    assert [int(c) & M32 if c >= 0 else -1 for c in codes] == [
        ref.map["id-3-1"], -1, -1]


@compiled
def test_compact_memory() -> None:
    """At most 4 bytes of offset, the id's bytes and 4 / 0.55 bytes of table per id."""
    index = HashIdIndex()
    ids = [f"s{i}" for i in range(200_000)]
    for a in range(0, len(ids), 50_000):
        assert index.reserve(ids[a:a + 50_000], a) is None
    id_bytes = sum(map(len, ids))
    assert index.nbytes() <= 1.25 * (4 * len(ids) + id_bytes) + 4 / 0.55 * len(ids) + 4096


@compiled
def test_expect_sizes_the_table_once() -> None:
    """Room made ahead: the ids it was made for go in without another rebuild."""
    index = HashIdIndex()
    index.expect(200_000)
    table = index._table
    ids = [f"s{i}" for i in range(200_000)]
    for a in range(0, len(ids), 50_000):
        assert index.reserve(ids[a:a + 50_000], a) is None
    assert index._table is table
    assert len(table) <= 200_000 / 0.7 + 2
    codes, rep = index.codes(ids[::997])
    assert rep == -1 and [int(c) & M32 for c in codes] == list(range(0, 200_000, 997))
    index.expect(10)  # room enough already: the table stays
    assert index._table is table


@pytest.mark.parametrize("make", [HashIdIndex, DictIdIndex])
@pytest.mark.parametrize("bad", [-1, 2.5, "10", True, None])
def test_expect_refuses_a_bad_count(make: Any, bad: Any) -> None:
    if make is HashIdIndex and not _jit.ENABLED:
        pytest.skip("numba absent")
    index = make()
    with pytest.raises(ids_mod.IdIndexError, match=r"expect: n must be a non-negative int, "
                       rf"got {re.escape(repr(bad))}") as err:
        index.expect(bad)
    assert err.value.field == "n" and len(index) == 0


def test_make_id_index_follows_the_switch() -> None:
    assert isinstance(make_id_index(), HashIdIndex if _jit.ENABLED else DictIdIndex)


def test_dict_index_flags_known_and_repeated_ids() -> None:
    index = DictIdIndex()
    assert index.reserve(["a", "b"], 0) is None
    flags = index.reserve(["c", "a", "c", "d"], 2)
    assert flags is not None and flags.tolist() == [0, 1, 2, 0]
    assert len(index) == 2
    codes, rep = index.codes(["b", "x", "b"])
    assert codes.tolist() == [1, -1, 1] and rep == 2
    assert np.array_equal(index.live(), [0, 1])


@compiled
@pytest.mark.parametrize("size", [5, 100])
def test_repeats_in_small_and_large_batches(size: int) -> None:
    """Up to 32 ids are compared with each other, more through a bitmap: same answers."""
    ids = [f"id{i}" for i in range(size)]
    asked = [*ids[: size - 2], "nope", "nope", ids[size // 2], ids[1]]
    for index in (HashIdIndex(), DictIdIndex()):
        assert index.reserve(ids, 0) is None
        codes, rep = index.codes(asked)
        assert rep == size  # ids[size // 2] again; the unknown "nope" twice is no repeat
        assert [int(c) & M32 for c in codes[: size - 2]] == list(range(size - 2))
        assert codes[size - 2] == codes[size - 1] == -1


@compiled
@settings(max_examples=40, deadline=None)
@given(st.lists(IDS, min_size=1, max_size=20, unique=True), st.data())
def test_first_other_compares_the_ids_of_seqs(ids: list[str], data: Any) -> None:
    """first_other names the first id that is not the one of its seq, as the dict would."""
    index = HashIdIndex()
    assert index.reserve(ids, 0) is None
    seqs = data.draw(st.lists(st.integers(0, len(ids) - 1), min_size=1, max_size=10))
    asked = [data.draw(st.sampled_from([ids[q], *ids])) for q in seqs]
    want = next((i for i, (q, sid) in enumerate(zip(seqs, asked, strict=True))
                 if ids[q] != sid), -1)
    assert index.first_other(np.array(seqs), asked) == want


@compiled
def test_first_other_refuses_seqs_without_ids() -> None:
    index = HashIdIndex()
    assert index.reserve(["a", "b"], 0) is None
    assert index.first_other(np.zeros(0, dtype=np.int64), []) == -1
    for seqs, ids in ((np.array([2]), ["a"]), (np.array([0, 1]), ["a"])):
        with pytest.raises(ids_mod.IdIndexError):
            index.first_other(seqs, ids)


@compiled
def test_renumber_keeps_the_table_capacity() -> None:
    """Like a dict, the table does not shrink when ids go (no rebuilds as it fills again)."""
    index = HashIdIndex()
    ids = [f"s{i}" for i in range(5_000)]
    assert index.reserve(ids, 0) is None
    cap = len(index._table)
    codes, _ = index.codes(ids)
    index.discard(ids, codes)
    index.renumber(index.live())
    assert len(index) == 0 and len(index._table) == cap
    assert index.reserve(ids, 0) is None and len(index._table) == cap
