"""The layout rules of the product packages, checked on the source (no import is run).

- no module over 600 lines and no function over 80 (tests, benchmarks and the Java UDFs
  are not product modules);
- no import circle among the product modules;
- imports run down the layers: ``dls`` -> ``connectors`` -> ``broker_node`` / ``spark``
  -> ``dlsroute``; the node package never imports the client SDK.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("dls", "connectors", "broker_node", "spark", "dlsroute", "schemas")
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 80
#: What each package may import from the others (its own modules always).
MAY_IMPORT = {
    "dls": set(),
    "schemas": set(),
    "connectors": {"dls", "schemas"},
    "broker_node": {"dls", "connectors"},
    "spark": {"dls", "connectors"},
    "dlsroute": {"dls", "connectors", "broker_node", "spark"},
}


def _modules() -> dict[str, Path]:
    """Dotted module name -> file, for every product module."""
    out = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            out[name] = path
    return out


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The product modules that ``name`` imports (``from pkg import mod`` included)."""
    found: set[str] = set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join([*up, base] if base else up)
            subs = [f"{base}.{a.name}" for a in node.names]
            # ``from pkg import mod`` imports the module; ``from mod import name``, mod
            targets = [t for t in subs if t in known] or [base]
        else:
            continue
        for t in targets:
            while t and t not in known:
                t = t.rpartition(".")[0]
            if t and t != name:
                found.add(t)
    return found


def test_no_product_module_or_function_is_too_long() -> None:
    too_long = []
    for name, path in _modules().items():
        text = path.read_text()
        if len(text.splitlines()) > MAX_MODULE_LINES:
            too_long.append(f"{name}: {len(text.splitlines())} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    too_long.append(f"{name}.{node.name}: {lines} lines")
    assert too_long == []


def test_imports_run_down_the_layers() -> None:
    modules = _modules()
    wrong = []
    for name, path in modules.items():
        top = name.split(".")[0]
        for target in _imports(name, path, set(modules)):
            other = target.split(".")[0]
            if other != top and other not in MAY_IMPORT[top]:
                wrong.append(f"{name} -> {target}")
            if top == "broker_node" and target == "connectors.client":
                wrong.append(f"{name} -> {target} (the node must not use the SDK)")
    assert wrong == []


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every circle a depth-first walk of ``graph`` closes, as the path round it."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    circles: list[list[str]] = []

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                circles.append([*path[path.index(nxt):], nxt])
            elif nxt not in state:
                visit(nxt, [*path, nxt])
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    return circles


def test_no_import_circle() -> None:
    modules = _modules()
    graph = {name: _imports(name, path, set(modules)) for name, path in modules.items()}
    # A package's __init__ that re-exports its modules is not a circle with them.
    for name in graph:
        graph[name] = {t for t in graph[name] if not name.startswith(t + ".")}
    assert _circles(graph) == []


def test_the_checks_see_a_circle_and_an_upward_import(tmp_path: Path) -> None:
    """The import reader finds ``from pkg import mod``, names and relative imports."""
    a = tmp_path / "a.py"
    a.write_text("from dls import hashing\nfrom .b import x\nimport connectors.kafka\n")
    known = {"dls", "dls.hashing", "dls.b", "connectors", "connectors.kafka"}
    assert _imports("dls.a", a, known) == {"dls.hashing", "dls.b", "connectors.kafka"}
    assert _circles({"x": {"y"}, "y": {"z"}, "z": {"x"}, "w": {"x"}}) == [["x", "y", "z", "x"]]
    assert _circles({"x": {"y"}, "y": set()}) == []


def test_product_code_raises_no_plain_builtin_error() -> None:
    """Errors come from each package's own classes (under DLSError), not bare builtins."""
    plain = {"ValueError", "TypeError", "KeyError", "IndexError", "RuntimeError",
             "TimeoutError", "Exception", "OSError", "LookupError"}
    found = []
    for name, path in _modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Raise) and node.exc is not None:
                exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
                if isinstance(exc, ast.Name) and exc.id in plain:
                    found.append(f"{name}:{node.lineno} {exc.id}")
    assert found == []


def test_every_product_error_class_is_a_dls_error() -> None:
    """Each exception class a product module defines derives from DLSError."""
    import importlib
    import inspect

    from dls.exceptions import DLSError

    outside = []
    for name in _modules():
        if name.endswith("__main__"):  # runs the command when imported
            continue
        module = importlib.import_module(name)
        for cls_name, cls in inspect.getmembers(module, inspect.isclass):
            if (cls.__module__ == name and issubclass(cls, BaseException)
                    and not issubclass(cls, DLSError)):
                outside.append(f"{name}.{cls_name}")
    assert outside == []
