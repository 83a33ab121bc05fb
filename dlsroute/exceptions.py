"""Errors of the ``dlsroute`` command and of the tools that drive nodes.

:class:`CLIError` is the root; each subclass also inherits the builtin that a caller may
already catch (``ValueError`` for bad input, ``TimeoutError`` for a wait that ran out, ...).
The command line prints an error's message on one line and exits with status 2
(:func:`dlsroute.cli.main`).
"""

from __future__ import annotations

from dls.exceptions import DLSError

__all__ = [
    "CLIError",
    "DemoError",
    "EventSampleError",
    "NodeFailedError",
    "OptionError",
    "SettleTimeoutError",
    "TopicWatchError",
]


class CLIError(DLSError):
    """Root of the errors of the command line and its tools."""


class OptionError(CLIError, ValueError):
    """A command-line option has a bad value (``--group`` without ``=``, an unknown node)."""


class EventSampleError(CLIError, ValueError):
    """A sample of events (``tune-space --events``) cannot be read or has no values."""


class NodeFailedError(CLIError, RuntimeError):
    """A node service running on a thread of this process has failed."""


class SettleTimeoutError(CLIError, TimeoutError):
    """The nodes did not settle (take a change everywhere) within the time allowed."""


class TopicWatchError(CLIError):
    """A node's input topic cannot be read (not created yet, or no such node running)."""


class DemoError(CLIError, RuntimeError):
    """The demo on Kafka cannot go on (a client failed, the network did not settle, ...)."""
