"""The hang watchdog names the stuck test and the call each thread waits in, GIL held or not."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from tests.hang_watchdog import describe, limit_from_env, parse_dump, report

ROOT = Path(__file__).resolve().parents[1]
HERE = str(Path(__file__).resolve())
STDLIB = threading.__file__

DUMP = f"""Thread 0x00007f0000000002 (most recent call first):
  File "{STDLIB}", line 320 in wait
  File "{HERE}", line 20 in parked
  File "{STDLIB}", line 975 in run

Current thread 0x00007f0000000001 (most recent call first):
  File "{ROOT}/.venv/lib/python3.11/site-packages/x.py", line 5 in close
  File "{HERE}", line 30 in test_y
  File "{ROOT}/.venv/lib/python3.11/site-packages/_pytest/python.py", line 187 in call
  File "<frozen runpy>", line 88 in _run_code
"""


def test_parse_dump_orders_frames_oldest_first() -> None:
    threads = parse_dump(DUMP)
    assert [label for label, _ in threads] == ["0x00007f0000000002", "current 0x00007f0000000001"]
    assert [f[2] for f in threads[1][1]] == ["_run_code", "call", "test_y", "close"]


def test_describe_keeps_project_frames_and_the_call_they_wait_in() -> None:
    lines = describe(parse_dump(DUMP)[1][1])
    assert [ln.split(" in ")[-1].split("\n")[0] for ln in lines] == ["test_y", "close"]


def test_report_ends_with_the_test_and_each_thread_s_innermost_frame() -> None:
    text = report("tests/x.py::test_y", 481.0, DUMP)
    last = text.rstrip("\n").splitlines()[-1]
    assert last == ("HUNG TEST tests/x.py::test_y after 481 s; "
                    "[0x00007f0000000002] tests/test_hang_watchdog.py:20 in parked; "
                    "[current 0x00007f0000000001] tests/test_hang_watchdog.py:30 in test_y")


@pytest.mark.parametrize("raw, want", [("", 480.0), ("0", 0.0), (" 12.5 ", 12.5)])
def test_limit_from_env(monkeypatch, raw, want) -> None:
    monkeypatch.setenv("DLS_TEST_HANG_SECONDS", raw)
    assert limit_from_env() == want


@pytest.mark.parametrize("raw", ["soon", "-1"])
def test_limit_from_env_refuses_bad_values(monkeypatch, raw) -> None:
    monkeypatch.setenv("DLS_TEST_HANG_SECONDS", raw)
    with pytest.raises(ValueError, match=f"DLS_TEST_HANG_SECONDS .*{raw!r}"):
        limit_from_env()


def _run_stuck(tmp_path: Path, body: str) -> subprocess.CompletedProcess[str]:
    """Run one stuck test file in its own pytest session, with the project's hooks."""
    stuck = tmp_path / "test_stuck.py"
    stuck.write_text(textwrap.dedent(body))
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "conftest.py").write_text(
        "from tests.conftest import (  # noqa: F401\n"
        "    pytest_configure, pytest_runtest_protocol, pytest_unconfigure)\n")
    env = dict(os.environ, DLS_TEST_HANG_SECONDS="2")
    return subprocess.run(  # noqa: S603 - this interpreter, a test file of ours
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(stuck)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=90)


def test_a_stuck_test_ends_the_run_with_its_name_last(tmp_path: Path) -> None:
    proc = _run_stuck(tmp_path, """
        import time
        def test_sleeps_forever():
            time.sleep(120)
    """)
    assert proc.returncode != 0, proc.stdout + proc.stderr
    last = (proc.stdout + proc.stderr).rstrip("\n").splitlines()[-1]
    assert last.startswith("HUNG TEST ") and "test_sleeps_forever" in last, last
    assert "test_stuck.py:4 in test_sleeps_forever" in last


def test_a_hang_holding_the_gil_is_named_too(tmp_path: Path) -> None:
    # A busy loop in C that never releases the GIL: no Python thread can run, but the
    # watchdog process and faulthandler's C-level dump still can.
    proc = _run_stuck(tmp_path, """
        import re
        def test_holds_the_gil():
            re.match(r"(a+)+$", "a" * 64 + "b")
    """)
    assert proc.returncode != 0, proc.stdout + proc.stderr
    last = (proc.stdout + proc.stderr).rstrip("\n").splitlines()[-1]
    assert "test_stuck.py:4 in test_holds_the_gil" in last, last


def test_a_quick_session_leaves_no_watchdog_behind(tmp_path: Path) -> None:
    proc = _run_stuck(tmp_path, """
        def test_ok():
            assert True
    """)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "HUNG TEST" not in proc.stdout + proc.stderr
