"""The hang watchdog's report names the stuck test and the call each thread waits in."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading

import pytest

from tests.hang_watchdog import describe_stack, limit_from_env, report


def _parked(ready: threading.Event, release: threading.Event) -> None:
    ready.set()
    release.wait(30)


def test_report_names_the_test_and_the_waiting_call(tmp_path) -> None:
    ready, release = threading.Event(), threading.Event()
    t = threading.Thread(target=_parked, args=(ready, release), name="parked")
    t.start()
    try:
        assert ready.wait(5)
        path = tmp_path / "report.txt"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT)
        try:
            summary = report("tests/x.py::test_y", 301.0, fd)
        finally:
            os.close(fd)
    finally:
        release.set()
        t.join()
    text = path.read_text()
    assert summary.startswith("HUNG TEST tests/x.py::test_y after 301 s; ")
    assert "[parked] tests/test_hang_watchdog.py:" in summary
    assert "in _parked" in summary
    # The summary is the last line, so the tail of a cut log still shows it.
    assert text.rstrip("\n").splitlines()[-1] == summary
    # Oldest call first: the thread's stack ends in the wait it is parked in.
    block = text.split("--- thread parked\n", 1)[1].split("--- thread", 1)[0]
    assert "release.wait(30)" in block


def test_describe_stack_keeps_project_frames_and_the_library_call() -> None:
    lines = describe_stack(sys._getframe())
    assert any("test_describe_stack_keeps_project_frames" in ln for ln in lines)
    assert not any("_pytest" in ln for ln in lines)


@pytest.mark.parametrize("raw, want", [("", 480.0), ("0", 0.0), (" 12.5 ", 12.5)])
def test_limit_from_env(monkeypatch, raw, want) -> None:
    monkeypatch.setenv("DLS_TEST_HANG_SECONDS", raw)
    assert limit_from_env() == want


@pytest.mark.parametrize("raw", ["soon", "-1"])
def test_limit_from_env_refuses_bad_values(monkeypatch, raw) -> None:
    monkeypatch.setenv("DLS_TEST_HANG_SECONDS", raw)
    with pytest.raises(ValueError, match=f"DLS_TEST_HANG_SECONDS .*{raw!r}"):
        limit_from_env()


def test_a_stuck_test_ends_the_run_with_its_name_last(tmp_path) -> None:
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    stuck = tmp_path / "test_stuck.py"
    stuck.write_text(textwrap.dedent("""
        import time
        def test_sleeps_forever():
            time.sleep(120)
    """))
    # The project's hooks, as tests/conftest.py registers them, in a session of its own.
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "conftest.py").write_text(
        "from tests.conftest import pytest_configure, pytest_runtest_protocol  # noqa: F401\n")
    env = dict(os.environ, DLS_TEST_HANG_SECONDS="2")
    proc = subprocess.run(  # noqa: S603 - this interpreter, a test file of ours
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(stuck)],
        cwd=root, env=env, capture_output=True, text=True, timeout=90)
    assert proc.returncode == 70, proc.stdout + proc.stderr
    last = (proc.stdout + proc.stderr).rstrip("\n").splitlines()[-1]
    assert last.startswith("HUNG TEST ") and "test_sleeps_forever" in last
    assert "test_stuck.py:4 in test_sleeps_forever" in last
