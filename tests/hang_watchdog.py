"""A watchdog that names a stuck test and where each of its threads waits, then ends the run.

pytest's own ``faulthandler_timeout`` dumps every thread most-recent-call *first*, main
thread last, so when only the tail of a CI log survives it shows pytest's runner frames and
neither the test nor the call it is stuck in. This watchdog is a separate process, so it
works even when a hung thread holds the GIL:

* the test process tells it, over a pipe, when each test starts and ends
  (:class:`HangWatchdog`, armed by ``tests/conftest.py`` for setup, call and teardown);
* when one test runs past the limit, the watchdog sends the test process ``SIGUSR1``, on
  which ``faulthandler`` (C level, no GIL needed) writes every thread's stack to a file;
* the watchdog prints those stacks oldest call first (this project's frames and the
  library calls they wait in), then a last line
  ``HUNG TEST <nodeid> after N s; [thread] file:line in func; ...`` with the innermost
  project frame of each thread, so the tail of any log names the test and the call;
* then it kills the test process (a hung librdkafka call cannot be interrupted).

The limit is ``DLS_TEST_HANG_SECONDS`` (default 480, under pytest's 600; 0 turns it off).
"""

from __future__ import annotations

import faulthandler
import linecache
import os
import re
import select
import signal
import subprocess
import sys
import tempfile
import time
from typing import IO

DEFAULT_LIMIT_S = 480.0
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The hooks that arm the watchdog sit under every test's stack; they say nothing.
_OWN_HOOKS = {os.path.abspath(__file__), os.path.join(_ROOT, "tests", "conftest.py")}
_THREAD = re.compile(r"^(Current thread|Thread) (0x[0-9a-f]+)")
_FRAME = re.compile(r'^\s+File "(.*)", line (\d+) in (.*)$')


_LIBRARY_ROOTS = tuple({os.path.abspath(p) + os.sep for p in
                        (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix)})


def _is_project(filename: str) -> bool:
    """Tell whether a frame is code under test: not the stdlib, not an installed package."""
    if filename.startswith("<"):  # <frozen runpy> and the like
        return False
    path = os.path.abspath(filename)
    if path in _OWN_HOOKS:
        return False
    if f"{os.sep}site-packages{os.sep}" in path or f"{os.sep}dist-packages{os.sep}" in path:
        return False
    return not path.startswith(_LIBRARY_ROOTS)


Frame = tuple[str, int, str]  # (file, line, function)


def parse_dump(text: str) -> list[tuple[str, list[Frame]]]:
    """Threads of a ``faulthandler`` dump: ``(thread label, frames oldest first)``."""
    threads: list[tuple[str, list[Frame]]] = []
    for line in text.splitlines():
        m = _THREAD.match(line)
        if m:
            label = ("current " if m.group(1) == "Current thread" else "") + m.group(2)
            threads.append((label, []))
            continue
        f = _FRAME.match(line)
        if f and threads:
            threads[-1][1].append((f.group(1), int(f.group(2)), f.group(3)))
    return [(label, frames[::-1]) for label, frames in threads]  # dumps are newest first


def describe(frames: list[Frame], keep_library: int = 3) -> list[str]:
    """Lines for one thread, oldest call first, the waiting call last.

    Project frames are all kept; frames before the first project frame are dropped, and at
    most ``keep_library`` library frames are kept after the last project frame (the call
    the project waits in). A thread with no project frame keeps its last frames.
    """
    own = [i for i, (file, _, _) in enumerate(frames) if _is_project(file)]
    if own:
        frames = frames[own[0]:own[-1] + 1 + keep_library]
    else:
        frames = frames[-keep_library:]
    out = []
    for file, line, func in frames:
        src = linecache.getline(file, line).strip()
        out.append(f"  {file}:{line} in {func}" + (f"\n      {src}" if src else ""))
    return out


def innermost(frames: list[Frame]) -> str:
    """``file:line in func`` of the newest project frame of a stack, or its newest frame."""
    own = [f for f in frames if _is_project(f[0])] or frames[-1:]
    if not own:
        return "?"
    file, line, func = own[-1]
    shown = os.path.relpath(file, _ROOT) if file.startswith(_ROOT + os.sep) else file
    return f"{shown}:{line} in {func}"


def report(nodeid: str, elapsed: float, dump: str) -> str:
    """The report of a stuck test from the ``faulthandler`` dump; its last line is the summary."""
    out = [f"\n=== HUNG TEST {nodeid}: running for {elapsed:.0f} s; stacks, oldest call first ==="]
    where = []
    for label, frames in parse_dump(dump):
        out.append(f"--- thread {label}")
        out.extend(describe(frames))
        if any(_is_project(f[0]) for f in frames):
            where.append(f"[{label}] {innermost(frames)}")
    if not where:
        where.append("no thread in this project's code (see the stacks above)")
    out.append(f"HUNG TEST {nodeid} after {elapsed:.0f} s; " + "; ".join(where))
    return "\n".join(out) + "\n"


def _watch(pid: int, limit_s: float, dump_path: str, out: IO[str]) -> int:
    """The watchdog process: read ``arm <nodeid>`` / ``disarm`` lines from stdin."""
    current: tuple[str, float] | None = None
    buf = b""
    stdin = sys.stdin.fileno()
    while True:
        wait = 5.0 if current is None else max(0.1, min(5.0, current[1] + limit_s
                                                         - time.monotonic()))
        ready, _, _ = select.select([stdin], [], [], wait)
        if ready:
            chunk = os.read(stdin, 65536)
            if not chunk:
                return 0  # the test process ended
            buf += chunk
            *lines, buf = buf.split(b"\n")
            for raw in lines:
                line = raw.decode("utf-8", "replace")
                if line.startswith("arm "):
                    current = (line[4:], time.monotonic())
                elif line == "disarm":
                    current = None
        if current is None or time.monotonic() - current[1] < limit_s:
            continue
        nodeid, start = current
        try:
            os.kill(pid, signal.SIGUSR1)
        except ProcessLookupError:
            return 0
        size, stable = -1, 0
        for _ in range(50):  # until the dump stops growing (at most ~5 s)
            time.sleep(0.1)
            now = os.path.getsize(dump_path)
            stable = stable + 1 if now == size and now > 0 else 0
            size = now
            if stable >= 3:
                break
        with open(dump_path, encoding="utf-8", errors="replace") as f:
            dump = f.read()
        out.write(dump)
        out.write(report(nodeid, time.monotonic() - start, dump))
        out.flush()
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        return 0


class HangWatchdog:
    """The test process's end: start the watchdog process and tell it each test's start."""

    def __init__(self, limit_s: float, out_fd: int) -> None:
        self.limit_s = limit_s
        # Kept open as long as the watchdog: faulthandler writes to its descriptor.
        self._dump = tempfile.NamedTemporaryFile(prefix="dls-hang-", suffix=".txt",
                                                 delete=False)
        faulthandler.register(signal.SIGUSR1, file=self._dump, all_threads=True, chain=False)
        self._proc = subprocess.Popen(  # noqa: S603 - this interpreter, this module
            [sys.executable, os.path.abspath(__file__), str(os.getpid()), str(limit_s),
             self._dump.name],
            stdin=subprocess.PIPE, stdout=out_fd, stderr=out_fd, close_fds=True)

    def _tell(self, line: str) -> None:
        stdin = self._proc.stdin
        if stdin is None:
            return
        try:
            stdin.write((line.replace("\n", " ") + "\n").encode())
            stdin.flush()
        except (BrokenPipeError, OSError):
            pass

    def arm(self, nodeid: str) -> None:
        """Start the clock for test ``nodeid``."""
        self._tell(f"arm {nodeid}")

    def disarm(self) -> None:
        """Stop the clock (the test ended)."""
        self._tell("disarm")

    def close(self) -> None:
        """End the watchdog process and remove the dump file."""
        if self._proc.stdin is not None:
            try:
                self._proc.stdin.close()
            except OSError:
                pass
        try:
            self._proc.wait(10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
        faulthandler.unregister(signal.SIGUSR1)
        self._dump.close()
        try:
            os.unlink(self._dump.name)
        except OSError:
            pass


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


if __name__ == "__main__":
    sys.exit(_watch(int(sys.argv[1]), float(sys.argv[2]), sys.argv[3], sys.stdout))
