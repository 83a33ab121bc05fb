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
