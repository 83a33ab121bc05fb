"""``RecentKeys``: the bounded memory of routed event ids (node) and deliveries (SDK)."""

from __future__ import annotations

import logging

import pytest
from hypothesis import given
from hypothesis import strategies as st

from connectors.recent import RecentKeys, RepeatNotice


@given(size=st.integers(1, 20),
       batches=st.lists(st.lists(st.integers(0, 10_000), max_size=15), max_size=30))
def test_the_last_size_keys_are_always_remembered(size: int, batches: list[list[int]]) -> None:
    recent = RecentKeys(size)
    added: list[int] = []
    biggest = 0
    for batch in batches:
        keys = {k: None for k in batch if k not in recent}  # the node adds unseen keys only
        recent.update(keys)
        added.extend(keys)
        biggest = max(biggest, len(keys))
        for k in added[-size:]:
            assert k in recent
        # a generation is replaced once it reaches size: it holds less than size plus
        # the batch that filled it
        assert len(recent) <= 2 * (size - 1 + biggest)


def test_old_keys_are_forgotten_a_generation_at_a_time() -> None:
    recent = RecentKeys(3)
    recent.update({1: None, 2: None})
    recent.update({3: None})  # new is full: it becomes old
    assert all(k in recent for k in (1, 2, 3)) and len(recent) == 3
    recent.update({4: None, 5: None, 6: None})  # and again: 1, 2, 3 are dropped
    assert 1 not in recent and 3 not in recent and 6 in recent
    assert len(recent) == 3


def test_size_must_be_positive() -> None:
    with pytest.raises(ValueError, match="size must be at least 1, got 0"):
        RecentKeys(0)


def test_routed_ids_are_bytes_keys_that_the_collector_never_scans() -> None:
    import gc

    from connectors.recent import routed_key

    assert routed_key("A/pub", "e1") == routed_key(b"A/pub", b"e1") == b"A/pub\x00e1"
    recent = RecentKeys(10)
    recent.update({routed_key("A/pub", f"e{i}"): None for i in range(5)})
    assert ("A/pub", "e3") in recent and routed_key("A/pub", "e3") in recent
    assert ("A/pub", "e9") not in recent
    assert not gc.is_tracked(recent.new)  # only bytes and None inside


def test_a_long_key_is_kept_as_a_digest_that_no_short_key_equals() -> None:
    from connectors.recent import ROUTED_KEY_BYTES, bounded_key, routed_key

    short = routed_key("A/pub", "e" * (ROUTED_KEY_BYTES - 6))  # exactly the limit: as is
    assert short == b"A/pub\x00" + b"e" * (ROUTED_KEY_BYTES - 6)
    long_a, long_b = routed_key("A/pub", "e" * 10_000), routed_key("A/pub", "e" * 10_001)
    assert len(routed_key("A/" + "c" * 249, "s" * 200)) == 452  # names a client makes: as is
    assert len(long_a) == len(long_b) == 21 and long_a != long_b
    assert long_a[0] == 0xFF and routed_key(b"A/pub", b"e" * 10_000) == long_a
    assert bounded_key(b"A/pub\x00" + b"e" * 10_000) == long_a


def test_discard_forgets_a_key_of_either_generation() -> None:
    keys = RecentKeys(2)
    keys.add(("A/x", "e1"))
    keys.add(("A/x", "e2"))  # e1 and e2 are the old generation now
    keys.add(("A/x", "e3"))
    keys.discard(("A/x", "e1"))
    keys.discard(("A/x", "e3"))
    keys.discard(("A/x", "e9"))  # never there: nothing happens
    assert [e for e in ("e1", "e2", "e3") if ("A/x", e) in keys] == ["e2"]


def test_repeats_are_said_once_a_minute_at_most_with_their_count(
        caplog: pytest.LogCaptureFixture) -> None:
    now = [100.0]
    notice = RepeatNotice("node A", logging.getLogger("dlsroute.node"), every_s=60.0,
                          clock=lambda: now[0])
    with caplog.at_level(logging.WARNING, logger="dlsroute.node"):
        notice.add("t[0]@5", "e1", "A/alice")  # the first is said at once
        for offset in range(6, 10):
            now[0] += 10
            notice.add(f"t[0]@{offset}", "e1", "A/alice")
        said = [r.getMessage() for r in caplog.records]
        assert len(said) == 1 and said[0].startswith("node A: 1 repeated event(s) skipped, ")
        assert "'e1' of A/alice at t[0]@5" in said[0] and "ids must be unique" in said[0]
        now[0] += 30  # 70 s after the first notice
        notice.add("t[0]@10", "x" * 500, "A/alice")
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 2 and said[1].startswith(
        "node A: 5 repeated event(s) skipped in the last 60 s or more, the latest "
        f"'{'x' * 77}...' of A/alice at t[0]@10")
    assert notice.unsaid == 0


def test_repeats_not_said_yet_are_said_at_close(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    notice = RepeatNotice("client alice", logging.getLogger("dlsroute.client"), every_s=60.0,
                          clock=lambda: now[0])
    with caplog.at_level(logging.WARNING, logger="dlsroute.client"):
        notice.close()  # nothing to say
        assert not caplog.records
        for offset in range(3):
            now[0] += 1
            notice.add(f"t[0]@{offset}", "e1", "A/bob")
        notice.close()
        notice.close()  # said once
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 2 and said[1] == ("client alice: 2 more repeated event(s) skipped since "
                                          "the last notice (ids must be unique per publisher)")
