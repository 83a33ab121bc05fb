"""The CLI's errors: one root under DLSError, each also the builtin a caller may catch."""

import pytest

from dls.exceptions import DLSError
from dlsroute.exceptions import (
    CLIError,
    DemoError,
    EventSampleError,
    NodeFailedError,
    OptionError,
    SettleTimeoutError,
    TopicWatchError,
)


@pytest.mark.parametrize(("cls", "builtin"), [
    (OptionError, ValueError), (EventSampleError, ValueError),
    (NodeFailedError, RuntimeError), (SettleTimeoutError, TimeoutError),
    (DemoError, RuntimeError), (TopicWatchError, Exception)])
def test_every_cli_error_is_a_dls_error_and_its_builtin(cls, builtin) -> None:
    err = cls("line 3: nodes did not settle", field="settle_timeout_s", value=2.5)
    assert isinstance(err, CLIError) and isinstance(err, DLSError)
    assert isinstance(err, builtin)
    assert str(err) == "line 3: nodes did not settle"
    assert (err.field, err.value) == ("settle_timeout_s", 2.5)


def test_the_dlsroute_package_raises_no_plain_builtin_error() -> None:
    import ast
    from pathlib import Path

    import dlsroute

    plain = {"ValueError", "TypeError", "KeyError", "RuntimeError", "TimeoutError"}
    found = []
    for path in Path(dlsroute.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Raise) and node.exc is not None:
                exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
                if isinstance(exc, ast.Name) and exc.id in plain:
                    found.append(f"{path.name}:{node.lineno} {exc.id}")
    assert found == []
