"""The small interface every matcher of the paper benchmarks implements.

A workload is ``n`` box subscriptions over ``d`` numeric attributes, given row-major as
``lo`` / ``hi`` arrays of shape ``(n, d)`` (inclusive bounds) with the owner client index of
each one (``owners``, shape ``(n,)``, values in ``[0, n_clients)``), and point events of
shape ``(E, d)``. Subscriptions are numbered by insertion order across every ``insert``
call (0, 1, 2, ...); ``delete`` takes those numbers.

Units of forwarding traffic are the system's own: labels for DLS, ranges for MICS, and 0
for the exact matchers, which forward nothing in the paper's sense.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np

__all__ = ["Matcher"]


@runtime_checkable
class Matcher(Protocol):
    """Insert, delete (where it exists), match a batch of events, report memory."""

    #: Short name used as the ``system`` of benchmark records.
    name: str
    #: False for a system without deletion (``delete`` then raises NotImplementedError).
    supports_delete: bool

    def insert(self, lo: np.ndarray, hi: np.ndarray, owners: np.ndarray) -> int:
        """Add subscriptions ``(n, d)``; return the forwarding traffic they caused."""
        ...

    def delete(self, ids: np.ndarray) -> int:
        """Remove subscriptions by insertion number; return the forwarding traffic caused."""
        ...

    def match(self, events: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Match events ``(E, d)``: CSR ``(offsets (E+1,), clients)``, sorted per event."""
        ...

    def memory_bytes(self) -> int:
        """Bytes the live structures take (arrays and index nodes, not the interpreter)."""
        ...
