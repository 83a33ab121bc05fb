"""The README's example runs and prints what it says."""

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_example_runs(capsys):
    block = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)[0]
    exec(compile(block, "README.md", "exec"), {})  # noqa: S102 - our own README
    assert capsys.readouterr().out.strip() == "[('A', 'alice')]"


def test_readme_first_screen_has_the_two_commands():
    first = "\n".join(README.read_text().splitlines()[:20])
    assert "make demo" in first and "make test" in first


def test_demo_runs_without_misses():
    import io

    from dlsroute.demo import run_demo

    out = io.StringIO()
    assert run_demo(seconds=0.5, out=out) == 0
    assert "0 missed deliveries" in out.getvalue()
