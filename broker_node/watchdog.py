"""A bound on every call into the Kafka client that can block: the node never hangs silently.

librdkafka's transactional calls take a timeout, but one of them has been seen to ignore it
when the broker died with a transaction in flight: the node stopped inside
``send_offsets_to_transaction`` for minutes, logging nothing (docs/architecture.md#liveness).
A call that blocks in C cannot be interrupted from Python, so the only safe way on is to
leave: the watchdog ends the process with :data:`STUCK_EXIT_CODE` and a log line that names
the call and how long it has been stuck, and the node's supervisor (systemd, Kubernetes,
``make chaos``) restarts it; the restart recovers from what was committed.

Two mechanisms, because a stuck C call may or may not hold the GIL:

- a monitor thread checks the guarded calls of every thread once a second and runs
  ``on_stuck`` for the first one past its bound (logs, then ``os._exit``);
- with ``hard=True`` (one node per process, as ``dlsroute node`` runs it) each guard also
  arms :func:`faulthandler.dump_traceback_later`, a C-level timer that needs no GIL: a
  little after the bound it prints every thread's stack and exits the process.
"""

from __future__ import annotations

import faulthandler
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

__all__ = ["STUCK_EXIT_CODE", "Watchdog", "exit_stuck"]

log = logging.getLogger(__name__)

#: The exit status of a node that ended itself because a Kafka call was stuck (EX_TEMPFAIL:
#: a restart is the remedy).
STUCK_EXIT_CODE = 75

#: How much later than the monitor the C-level timer fires (the monitor logs first).
HARD_GRACE_S = 10.0


def exit_stuck(node: str, call: str, elapsed: float, bound: float) -> None:
    """The default remedy: log why, flush the logs, end the process for a restart."""
    log.critical("node %s: %s has not returned for %.0f s (bound %.0f s): the Kafka client "
                 "is stuck (the broker gone with a transaction in flight?); exiting with "
                 "status %d so that the supervisor restarts the node, which recovers from "
                 "what was committed", node, call, elapsed, bound, STUCK_EXIT_CODE)
    for handler in logging.getLogger().handlers + log.handlers:
        handler.flush()
    sys.stderr.flush()
    os._exit(STUCK_EXIT_CODE)


class Watchdog:
    """Guards blocking calls with a bound; past it, ``on_stuck(call, elapsed)`` runs once."""

    def __init__(self, node: str, bound_s: float, *,
                 on_stuck: Callable[[str, float], None] | None = None,
                 hard: bool = False, check_every_s: float = 1.0,
                 hard_grace_s: float = HARD_GRACE_S) -> None:
        """A watchdog for ``node``; the monitor thread starts with the first guard."""
        self.node, self.bound_s, self.hard = node, bound_s, hard
        self.hard_grace_s = hard_grace_s
        self.on_stuck = on_stuck or (lambda call, elapsed: exit_stuck(node, call, elapsed,
                                                                      bound_s))
        self.check_every_s = check_every_s
        self._calls: dict[int, tuple[str, float, float]] = {}  # thread -> call, start, bound
        self._lock = threading.Lock()
        self._monitor: threading.Thread | None = None
        self._closed = threading.Event()
        self.fired: list[tuple[str, float]] = []

    @contextmanager
    def guard(self, call: str, bound_s: float | None = None) -> Iterator[None]:
        """Run the body as ``call``, which must return within ``bound_s`` (default: the node's)."""
        bound = self.bound_s if bound_s is None else bound_s
        me = threading.get_ident()
        with self._lock:
            self._calls[me] = (call, time.monotonic(), bound)
            if self._monitor is None:
                self._monitor = threading.Thread(target=self._watch, daemon=True,
                                                 name=f"watchdog-{self.node}")
                self._monitor.start()
        if self.hard:
            faulthandler.dump_traceback_later(bound + self.hard_grace_s, exit=True)
        try:
            yield
        finally:
            if self.hard:
                faulthandler.cancel_dump_traceback_later()
            with self._lock:
                self._calls.pop(me, None)

    def close(self) -> None:
        """Stop the monitor thread (guards after this are still bounded by the hard timer)."""
        self._closed.set()

    def _watch(self) -> None:
        while not self._closed.wait(self.check_every_s):
            now = time.monotonic()
            with self._lock:
                late = [(call, now - start) for call, start, bound in self._calls.values()
                        if now - start > bound]
            for call, elapsed in late:
                self.fired.append((call, elapsed))
                self.on_stuck(call, elapsed)
                with self._lock:  # one report per stuck call
                    self._calls = {t: c for t, c in self._calls.items() if c[0] != call}
