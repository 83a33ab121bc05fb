"""A watchdog that names a stuck test and where each of its threads waits, then ends the run.

pytest's own ``faulthandler_timeout`` dumps every thread most-recent-call *first*, main
thread last, so when only the tail of a CI log survives it shows pytest's runner frames and
neither the test nor the call it is stuck in. This watchdog, armed for each test, prints
instead (to the stderr pytest started with, past output capture):

1. the C-level dump of every thread (``faulthandler``), as before;
2. each thread's stack oldest-call-first, the waiting call last, from this project's frames
   and the library frame they called into;
3. a last line ``HUNG TEST <nodeid> after N s`` with the innermost project frame of each
   thread, so the tail of any log names the test and the call.

Then it ends the process (exit code 70): a hung librdkafka call cannot be interrupted.
The limit is ``DLS_TEST_HANG_SECONDS`` (default 480, under pytest's 600; 0 turns it off). It is a
Python thread, so a hang that holds the GIL is left to pytest's ``faulthandler_timeout``.
"""

from __future__ import annotations

import faulthandler
import os
import sys
import threading
import time
import traceback
from types import FrameType

DEFAULT_LIMIT_S = 480.0
EXIT_CODE = 70
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The hooks that arm the watchdog sit under every test's stack; they say nothing.
_OWN_HOOKS = {os.path.abspath(__file__), os.path.join(_ROOT, "tests", "conftest.py")}


def _is_project(filename: str) -> bool:
    """Tell whether a frame's file belongs to this project (not the venv, not the stdlib)."""
    if filename.startswith("<"):  # <frozen runpy> and the like
        return False
    path = os.path.abspath(filename)
    if path in _OWN_HOOKS:
        return False
    return path.startswith(_ROOT + os.sep) and f"{os.sep}.venv{os.sep}" not in path


def describe_stack(frame: FrameType, keep_library: int = 3) -> list[str]:
    """Lines for one thread, oldest call first, the waiting call last.

    Project frames are all kept; pytest and stdlib frames before the first project frame are
    dropped, and at most ``keep_library`` library frames are kept after the last project
    frame (the call the project is waiting in).
    """
    entries = traceback.extract_stack(frame)
    own = [i for i, e in enumerate(entries) if _is_project(e.filename)]
    if own:
        entries = entries[own[0]:own[-1] + 1 + keep_library]
    else:
        entries = entries[-keep_library:]
    return [f"  {e.filename}:{e.lineno} in {e.name}" + (f"\n      {e.line}" if e.line else "")
            for e in entries]


def innermost_project_frame(frame: FrameType) -> str:
    """``file:line in func`` of the newest project frame of a stack, or its newest frame."""
    entries = traceback.extract_stack(frame)
    own = [e for e in entries if _is_project(e.filename)] or entries[-1:]
    e = own[-1]
    return f"{os.path.relpath(e.filename, _ROOT)}:{e.lineno} in {e.name}"


def report(nodeid: str, elapsed: float, fd: int) -> str:
    """Write the full report of every thread to ``fd`` and return the one-line summary."""
    names = {t.ident: t.name for t in threading.enumerate()}
    me = threading.get_ident()
    frames = {k: v for k, v in sys._current_frames().items() if k != me}
    out = [f"\n=== HUNG TEST {nodeid}: running for {elapsed:.0f} s; stacks, oldest call first ==="]
    where = []
    for ident, frame in frames.items():
        name = names.get(ident, hex(ident))
        out.append(f"--- thread {name}")
        out.extend(describe_stack(frame))
        where.append(f"[{name}] {innermost_project_frame(frame)}")
    summary = f"HUNG TEST {nodeid} after {elapsed:.0f} s; " + "; ".join(where)
    out.append(summary)
    os.write(fd, ("\n".join(out) + "\n").encode("utf-8", "replace"))
    return summary


class HangWatchdog:
    """Arm per test; if one runs past the limit, report every thread and end the process."""

    def __init__(self, limit_s: float, fd: int) -> None:
        self.limit_s = limit_s
        self.fd = fd
        self._lock = threading.Lock()
        self._current: tuple[str, float] | None = None
        self._thread = threading.Thread(target=self._watch, name="hang-watchdog", daemon=True)
        self._thread.start()

    def arm(self, nodeid: str) -> None:
        """Start the clock for test ``nodeid``."""
        with self._lock:
            self._current = (nodeid, time.monotonic())

    def disarm(self) -> None:
        """Stop the clock (the test ended)."""
        with self._lock:
            self._current = None

    def _watch(self) -> None:
        while True:
            time.sleep(min(5.0, self.limit_s / 4))
            with self._lock:
                current = self._current
            if current is None:
                continue
            nodeid, start = current
            elapsed = time.monotonic() - start
            if elapsed < self.limit_s:
                continue
            faulthandler.dump_traceback(file=self.fd, all_threads=True)
            report(nodeid, elapsed, self.fd)
            os._exit(EXIT_CODE)


def limit_from_env() -> float:
    """The watchdog limit in seconds from ``DLS_TEST_HANG_SECONDS`` (0: off)."""
    raw = os.environ.get("DLS_TEST_HANG_SECONDS", "").strip()
    if not raw:
        return DEFAULT_LIMIT_S
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(
            f"DLS_TEST_HANG_SECONDS must be a number of seconds, got {raw!r}") from None
    if value < 0:
        raise ValueError(f"DLS_TEST_HANG_SECONDS must be >= 0, got {raw!r}")
    return value
