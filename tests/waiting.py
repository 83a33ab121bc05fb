"""Polling helper for tests that wait on a running node, query or client."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_for(cond: Callable[[], bool], timeout: float = 30.0, what: str = "",
             interval: float = 0.05) -> None:
    """Return once ``cond()`` is true; fail the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(interval)
    raise AssertionError(f"timed out waiting for {what}")
