"""The README's example runs and prints what it says; the docs' links and anchors resolve."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = (README, ROOT / "docs" / "architecture.md", ROOT / "benchmarks" / "README.md",
        ROOT / "docs" / "security.md")
PRODUCT = ("dls", "connectors", "broker_node", "spark", "dlsroute", "benchmarks")


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
    return {_slug(m) for m in re.findall(r"^#{1,6} +(.+)$", text, flags=re.M)}


def test_readme_example_runs(capsys):
    block = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)[0]
    exec(compile(block, "README.md", "exec"), {})  # noqa: S102 - our own README
    assert capsys.readouterr().out.strip() == "[('A', 'alice')]"


def test_readme_first_screen_has_the_two_commands():
    first = "\n".join(README.read_text().splitlines()[:20])
    assert "make demo" in first and "make test" in first


def test_slug_is_githubs():
    assert _slug("At-least-once hold-back") == "at-least-once-hold-back"
    assert _slug("The `benchmarks.kafka` run: 1, 2") == "the-benchmarkskafka-run-1-2"


def test_doc_links_resolve():
    """Every relative Markdown link of the docs names a file that exists, and its
    ``#anchor``, if any, a heading of that file."""
    bad = []
    for doc in DOCS:
        for target in re.findall(r"\]\(([^)\s]+)\)", doc.read_text()):
            if re.match(r"[a-z]+:", target):
                continue  # http:, mailto:
            path, _, anchor = target.partition("#")
            dest = (doc.parent / path).resolve() if path else doc
            if not dest.exists():
                bad.append(f"{doc.name}: {target} (no such file)")
            elif anchor and anchor not in _anchors(dest):
                bad.append(f"{doc.name}: {target} (no such heading)")
    assert not bad, bad


def test_code_cites_existing_design_sections():
    """A comment pointing to ``architecture.md#anchor`` names a heading that exists."""
    anchors = _anchors(ROOT / "docs" / "architecture.md")
    cited = {}
    for pkg in PRODUCT:
        for path in (ROOT / pkg).rglob("*.py"):
            for anchor in re.findall(r"architecture\.md#([\w\-]+)", path.read_text()):
                cited.setdefault(anchor, path.relative_to(ROOT).as_posix())
    missing = {a: where for a, where in cited.items() if a not in anchors}
    assert not missing, missing


def test_demo_runs_without_misses():
    import io

    from dlsroute.demo import run_demo

    out = io.StringIO()
    assert run_demo(seconds=0.5, out=out) == 0
    assert "0 missed deliveries" in out.getvalue()
