"""Errors of the pure DLS core.

Every error of the project derives from :class:`DLSError`. Errors about input carry the
offending ``field`` and ``value`` so that a caller (or a dead-letter record) can say
exactly what was wrong.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "FilterTypeError",
    "FilterInputError",
    "AbsentLabelError",
    "DLSError",
    "EventError",
    "FilterParamsError",
    "IdIndexError",
    "IncompatibleFiltersError",
    "LabelBudgetError",
    "LabelError",
    "LabelTypeError",
    "PredicateError",
    "SpaceSpecError",
]

_MISSING = object()


class DLSError(Exception):
    """Root of every dlsroute error."""

    def __init__(self, message: str, *, field: str | None = None, value: Any = _MISSING):
        super().__init__(message)
        self.message = message
        self.field = field
        self.value = None if value is _MISSING else value

    def __str__(self) -> str:
        return self.message


class SpaceSpecError(DLSError, ValueError):
    """The content-space specification is invalid."""


class PredicateError(DLSError, ValueError):
    """A subscription (or one of its predicates) is invalid or can match nothing."""


class LabelBudgetError(PredicateError):
    """A subscription would expand to more labels than the configured budget."""


class EventError(DLSError, ValueError):
    """An event is invalid: missing, unknown or out-of-domain attribute."""


class FilterParamsError(DLSError, ValueError):
    """Counting Bloom filter parameters are invalid."""


class IncompatibleFiltersError(DLSError, ValueError):
    """Two filters with different parameters cannot be combined."""


class LabelError(DLSError, ValueError):
    """A label (or an array of labels) outside ``[0, 2**64)`` or outside a table's range."""


class LabelTypeError(LabelError, TypeError):
    """A label (or an array of labels) that is not an integer."""


class IdIndexError(DLSError, ValueError):
    """An id index asked to break its own order (a seq below the next free one)."""


class AbsentLabelError(DLSError, KeyError):
    """A removal names a label that a filter (or a client's filter) definitely lacks.

    Nothing was changed. ``field`` is ``"label"``; ``value`` is the label, or for a bank
    the ``(client, label)`` pair.
    """


class FilterInputError(DLSError, ValueError):
    """An argument of a filter or bank operation has a bad value or shape.

    For example clients and labels of different lengths, a negative client index, or an
    ``exclude`` array of the wrong shape.
    """


class FilterTypeError(DLSError, TypeError):
    """An argument of a filter or bank operation has the wrong type.

    For example a client index that is not an integer, or a filter to combine or load that
    is not a :class:`~dls.cbf.CountingBloomFilter`.
    """
