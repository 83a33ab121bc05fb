"""``freeze_heap``: what lives at start-up leaves garbage collection; no broker needed."""

from __future__ import annotations

import gc

from broker_node.heap import freeze_heap


def _tracked(obj: object) -> bool:
    return any(o is obj for o in gc.get_objects())


def test_freeze_heap_moves_live_objects_out_of_collection() -> None:
    before = [object()]  # a tracked container alive at "start-up"
    assert _tracked(before)
    try:
        frozen = freeze_heap("A")
        # Frozen objects leave the permanent generation only when freed (another thread of
        # the test process may free some meanwhile): the count can only have shrunk.
        assert frozen >= gc.get_freeze_count() > 0
        assert not _tracked(before)  # full collections no longer scan it
        after = [object()]
        assert _tracked(after)  # what comes later is collected as usual
    finally:
        gc.unfreeze()
    assert _tracked(before)


def test_a_frozen_object_is_still_freed_by_reference_counting() -> None:
    import weakref

    class Box:
        pass

    box = Box()
    ref = weakref.ref(box)
    try:
        freeze_heap("A")
        del box
        assert ref() is None
    finally:
        gc.unfreeze()


def test_set_young_threshold_sets_generation_0_only_and_returns_the_old_one() -> None:
    from broker_node.heap import set_young_threshold

    original = gc.get_threshold()  # given back after the test by the _gc_thresholds fixture
    before = set_young_threshold("node A", 50_000)
    assert before == original
    assert gc.get_threshold() == (50_000, *original[1:])
