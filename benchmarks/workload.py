"""Seeded synthetic workloads of the paper's §6.1 / §6.2.1 (numpy only).

A workload is ``n_subs`` box subscriptions over ``d`` numeric attributes ``a0..a{d-1}``, each
with the domain ``[0, 2**20 - 1]`` cut into ``g`` equal cells, owned by ``n_clients``
clients, plus ``n_events`` point events.

Exact generator (every draw from one ``numpy.random.default_rng(seed)``, in this order):

* **Values are integers** in ``[0, H]``, ``H = 2**20 - 1``, so that float32 (the brute-force
  baseline) and float64 (the DLS mapping) represent every bound and event exactly.
* **Lower bounds** (per subscription and per dimension) are drawn from ``distribution``:

  - ``uniform``: uniform integers over ``[0, H]``;
  - ``zipf``: a cell index ``c`` from a *truncated* Zipf law over the ``g`` cells,
    ``P(c) ∝ (c + 1) ** -zipf_s`` for ``c = 0..g-1`` (rank 1 is cell 0; renormalised over
    the ``g`` cells rather than clipped, so the last cell gets no spike of the tail mass),
    then a uniform integer among the integers of that cell
    (``ceil(c*H/g) .. ceil((c+1)*H/g) - 1``, the last cell ending at ``H``).

* **Upper bound** = ``min(H, lower + length)`` with ``length`` a uniform integer in
  ``[0, floor(length_cells * H / g)]`` (default ``length_cells = 2``: a subscription
  touches 1 to 3 cells per dimension).
* **Owners**: uniform integers in ``[0, n_clients)``.
* **Events**: one value per dimension drawn from the same distribution as the lower bounds.

Columns are drawn dimension by dimension; subscriptions first (lower bounds of all
dimensions, then lengths, then owners), then events.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

__all__ = [
    "DOMAIN_HIGH",
    "Workload",
    "WorkloadParams",
    "attr_names",
    "cell_value_bounds",
    "draw_values",
    "generate",
    "space_spec",
]

DOMAIN_HIGH = 2**20 - 1
DISTRIBUTIONS = ("uniform", "zipf")


@dataclass(frozen=True)
class WorkloadParams:
    """Everything that determines a workload (recorded in every benchmark record)."""

    distribution: str
    d: int
    g: int
    n_subs: int
    n_clients: int
    n_events: int
    length_cells: float = 2.0
    zipf_s: float = 1.2
    seed: int = 0
    domain_low: int = 0
    domain_high: int = DOMAIN_HIGH

    def __post_init__(self) -> None:
        if self.distribution not in DISTRIBUTIONS:
            raise ValueError(f"distribution must be one of {DISTRIBUTIONS}, "
                             f"got {self.distribution!r}")
        if self.domain_low != 0:
            raise ValueError("only domain_low = 0 is supported")
        if min(self.d, self.g, self.n_subs, self.n_clients, self.n_events) < 1:
            raise ValueError("d, g, n_subs, n_clients and n_events must be positive")

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready dict of the parameters."""
        return asdict(self)


@dataclass(frozen=True)
class Workload:
    """Subscriptions as integer boxes ``lo``/``hi`` (N, d), owners (N,), events (E, d)."""

    params: WorkloadParams
    lo: np.ndarray
    hi: np.ndarray
    owners: np.ndarray
    events: np.ndarray

    def head(self, n_subs: int) -> Workload:
        """The first ``n_subs`` subscriptions (same events), with params updated."""
        p = WorkloadParams(**{**self.params.as_dict(), "n_subs": n_subs})
        return Workload(p, self.lo[:n_subs], self.hi[:n_subs], self.owners[:n_subs],
                        self.events)


def attr_names(d: int) -> list[str]:
    """Attribute names of a d-dimensional workload."""
    return [f"a{i}" for i in range(d)]


def space_spec(d: int, g: int, filters: dict[str, Any] | None = None,
               high: int = DOMAIN_HIGH) -> dict[str, Any]:
    """JSON spec of the content space of a workload (for ``ContentSpace.from_spec``)."""
    spec: dict[str, Any] = {
        "attributes": [{"name": n, "type": "numeric", "low": 0, "high": high, "granules": g}
                       for n in attr_names(d)],
    }
    if filters is not None:
        spec["filters"] = filters
    return spec


def cell_value_bounds(g: int, high: int = DOMAIN_HIGH) -> tuple[np.ndarray, np.ndarray]:
    """Smallest and largest integer value of each of the ``g`` cells of ``[0, high]``."""
    c = np.arange(g + 1, dtype=np.int64)
    starts = (c * high + g - 1) // g  # ceil(c * high / g)
    first = starts[:-1]
    last = starts[1:] - 1
    last[-1] = high
    return first, last


def _zipf_probs(g: int, s: float) -> np.ndarray:
    w = np.arange(1, g + 1, dtype=np.float64) ** -s
    return w / w.sum()


def draw_values(rng: np.random.Generator, n: int, p: WorkloadParams) -> np.ndarray:
    """``n`` integer values of one dimension drawn from ``p.distribution``."""
    high = p.domain_high
    if p.distribution == "uniform":
        return rng.integers(0, high + 1, size=n, dtype=np.int64)
    cells = rng.choice(p.g, size=n, p=_zipf_probs(p.g, p.zipf_s))
    first, last = cell_value_bounds(p.g, high)
    return rng.integers(first[cells], last[cells] + 1, dtype=np.int64)


def generate(p: WorkloadParams) -> Workload:
    """Draw a workload (deterministic in ``p``)."""
    rng = np.random.default_rng(p.seed)
    high = p.domain_high
    lo = np.empty((p.n_subs, p.d), dtype=np.int64)
    for i in range(p.d):
        lo[:, i] = draw_values(rng, p.n_subs, p)
    max_len = int(p.length_cells * high / p.g)
    length = rng.integers(0, max_len + 1, size=(p.n_subs, p.d), dtype=np.int64)
    hi = np.minimum(lo + length, high)
    owners = rng.integers(0, p.n_clients, size=p.n_subs, dtype=np.int64)
    events = np.empty((p.n_events, p.d), dtype=np.int64)
    for i in range(p.d):
        events[:, i] = draw_values(rng, p.n_events, p)
    return Workload(p, lo, hi, owners, events)
