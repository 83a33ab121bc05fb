"""The switch between the compiled kernels and the pure-numpy reference path.

The core's hot loops (hashing and counter updates of inserts and deletes, the bit-sliced
AND and the bitset decode of matching) exist twice: as numpy code, the reference, and as
``numba`` kernels (:mod:`dls._kernels`) that give identical results
(``tests/dls/test_jit_parity.py``). Which one runs is decided once, when this module is
imported:

* compiled when ``numba`` imports and the environment variable ``DLS_NO_JIT`` is unset,
  empty or ``0``;
* the numpy reference otherwise (``DLS_NO_JIT=1``, or no ``numba``): :data:`ENABLED` is
  False and :data:`REASON` says why.

Kernels are compiled on their first call and cached on disk (``cache=True``): numba keeps
the machine code in the ``__pycache__`` folder beside ``dls/_kernels.py`` when that folder
is writable, else in the user's cache folder (``~/.cache/numba/...``), or under
``NUMBA_CACHE_DIR`` when that is set. The cache is keyed by the source's content and the
CPU, so a changed kernel or another machine compiles again. :func:`dls.bank.warm_up_kernels`
compiles (or loads) every kernel on tiny inputs, for a process that would rather pay that at
start than on its first batch.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["ENABLED", "REASON", "njit"]

F = TypeVar("F", bound=Callable[..., Any])

_OFF = os.environ.get("DLS_NO_JIT", "").strip() not in ("", "0")

REASON = ""
"""Why the reference path runs ("" when the kernels are compiled)."""

_numba: Any = None
if _OFF:
    REASON = "DLS_NO_JIT is set"
else:
    try:
        import numba as _numba
    except ImportError as exc:  # pragma: no cover - numba is a dependency
        REASON = f"numba does not import ({exc})"

ENABLED: bool = _numba is not None
"""True when the compiled kernels run, False when the numpy reference does."""


def njit(fn: F) -> F:
    """Compile ``fn`` with numba (no Python objects, no GIL, cached on disk), when enabled.

    Without numba, or with ``DLS_NO_JIT=1``, ``fn`` is returned unchanged; the modules that
    use the kernels then call their numpy reference instead.
    """
    if not ENABLED:
        return fn
    compiled: F = _numba.njit(cache=True, nogil=True, error_model="numpy")(fn)
    return compiled

