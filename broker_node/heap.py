"""Python's garbage collector tuned for the node's loop (see docs/architecture.md).

Two settings, both applied once at start (``NodeSettings.gc_freeze`` and
``gc_young_threshold``): what is alive once the state is rebuilt leaves the collector
(:func:`freeze_heap`), and generation 0 is collected less often (:func:`set_young_threshold`).
"""

from __future__ import annotations

import gc
import logging
import time

__all__ = ["freeze_heap", "set_young_threshold"]

log = logging.getLogger(__name__)


def freeze_heap(node: str) -> int:
    """Collect once, then move every live object into the permanent generation.

    Python's full (generation 2) collections scan every tracked object, and a node holds a
    big heap (the modules, the rebuilt state, anything its host keeps): each such scan is a
    pause of the loop. Frozen objects are never scanned again; an object freed later is
    still freed by reference counting (only a frozen reference cycle would stay). Returns
    how many objects are frozen.
    """
    t0 = time.perf_counter()
    gc.collect()
    gc.freeze()
    frozen = gc.get_freeze_count()
    log.info("node %s: %d objects frozen out of garbage collection in %.0f ms", node, frozen,
             1e3 * (time.perf_counter() - t0))
    return frozen


def set_young_threshold(who: str, threshold: int) -> tuple[int, ...]:
    """Set Python's generation-0 collection threshold; return the thresholds before.

    ``who`` names the process in the log line (``"node A"``).

    Python collects generation 0 each time the tracked objects alive grow by its threshold
    (700 by default), and survivors move up until a full collection. A batch keeps several
    tracked objects per event alive until it is produced (each message, its header list and
    tuples), so at the default every batch pays several collections, each a pause of the
    loop. What a batch allocates is freed by reference counting when the batch ends, so a
    higher threshold adds no memory but that of reference cycles, which wait longer for a
    collection.
    """
    before = gc.get_threshold()
    gc.set_threshold(threshold, *before[1:])
    log.info("%s: garbage collection thresholds %s (were %s)", who, gc.get_threshold(),
             before)
    return before
