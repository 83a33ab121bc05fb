"""Cells fitted to the quantisation false positives themselves: how low can a grid go?

The false positives of the cells alone come from *slack*: the part of a subscription's
cell-rounded box that lies outside the box. An event there carries a label of the
subscription and is not in it. :mod:`dls.tuning` places breakpoints at quantiles of the
events (equi-depth), which makes cells narrow where events are dense but does not look at
where the subscriptions' bounds are. This module places them to minimise the slack
directly, on a training sample of events *and* subscriptions, to measure the lowest
cells-only false-positive rate that a grid of ``g`` cells per attribute reaches on a
workload (the report's Table 10 uses it to show where the floor of a workload is).

**One attribute.** With breakpoints ``c_1 < ... < c_{K-1}`` (cell ``i`` is
``[c_i, c_{i+1})``, as in :class:`dls.space.ContentSpace`), subscription ``s`` with the
interval ``[lo_s, hi_s]`` has slack event mass ``F(lo_s) - F(a_s)`` on the left and
``F(b_s) - F(hi_s + 1)`` on the right, where ``F(x)`` is the share of sample events
below ``x``, ``a_s`` the start of ``lo_s``'s cell and ``b_s`` the end of ``hi_s``'s. The
cost ``sum_s w_s * slack_s`` splits into one term per cell, so the best ``K`` cells over a
set of candidate cut positions come from a dynamic programme over (cells so far, last
cut): :func:`slack_optimal_cuts`, exact over its candidates.

**Several attributes.** For a box the events inside the rounded box but outside the box
are ``prod_j R_j - prod_j I_j`` (rounded and interval masses, attributes independent).
Holding the other attributes' cells fixed, that is ``slack_d * prod_{j != d} R_j`` plus a
term that does not depend on attribute ``d``'s cuts. :func:`fit_attributes` therefore
runs coordinate descent: each attribute in turn gets :func:`slack_optimal_cuts` with
weights ``w_s = prod_{j != d} R_j(s)``, starting from equi-depth cells. This sums over
subscriptions, not over clients, so overlapping subscriptions of one client are counted
twice: an upper bound of the true cells-only false positives, which it tracks closely on
the paper's workloads.

This is analysis code for the benchmarks, not part of the product: a network fixes its
space once, and the cost of fitting it to the subscriptions (which change) is not
something the paper or the issue asks for.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from dls.tuning import equi_depth_breakpoints

__all__ = ["fit_attributes", "rounded_mass", "slack_cost", "slack_optimal_cuts"]


def _cdf(events: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Share of the sorted ``events`` below each ``x``."""
    return np.searchsorted(events, x, side="left") / max(1, len(events))


def _edges(cuts: Sequence[float], low: float, high: float) -> np.ndarray:
    """Cell starts plus one past the end: ``[low, *cuts, high + 1]`` (integer domains)."""
    return np.array([low, *cuts, high + 1], dtype=np.float64)


def _rounded(cuts: Sequence[float], lo: np.ndarray, hi: np.ndarray, low: float,
             high: float) -> tuple[np.ndarray, np.ndarray]:
    """Each interval rounded out to whole cells: (start of lo's cell, end of hi's cell)."""
    e = _edges(cuts, low, high)
    return (e[np.searchsorted(e, lo, side="right") - 1],
            e[np.searchsorted(e, hi, side="right")])  # the end is exclusive


def slack_cost(cuts: Sequence[float], events: np.ndarray, lo: np.ndarray, hi: np.ndarray,
               weights: np.ndarray, low: float, high: float) -> float:
    """``sum_s w_s * slack_s`` of the cells ``cuts`` (see the module doc), computed directly.

    ``events`` must be sorted. Values are integers in ``[low, high]``.
    """
    a, b = _rounded(cuts, lo, hi, low, high)
    slack = (_cdf(events, lo) - _cdf(events, a)) + (_cdf(events, b) - _cdf(events, hi + 1))
    return float(np.dot(weights, slack))


def rounded_mass(cuts: Sequence[float], events: np.ndarray, lo: np.ndarray, hi: np.ndarray,
                 low: float, high: float) -> np.ndarray:
    """Share of the sorted ``events`` inside each interval rounded out to whole cells."""
    a, b = _rounded(cuts, lo, hi, low, high)
    return _cdf(events, b) - _cdf(events, a)


def slack_optimal_cuts(events: Any, lo: Any, hi: Any, cells: int, low: float, high: float,
                       *, weights: Any = None, candidates: Any = None,
                       n_candidates: int = 1200) -> tuple[tuple[float, ...], float]:
    """The ``cells - 1`` cuts among ``candidates`` with the least weighted slack.

    Args:
        events: Sample of event values of the attribute.
        lo: Lower bounds of the sample subscriptions on the attribute.
        hi: Their upper bounds (inclusive).
        cells: Number of cells wanted.
        low: Lower end of the domain (integers ``low..high``).
        high: Upper end of the domain.
        weights: One weight per subscription (default 1).
        candidates: Cut positions to choose from, inside ``(low, high]``; default
            ``n_candidates`` quantiles of the events and the bounds together (rounded).
        n_candidates: See ``candidates``.

    Returns:
        ``(cuts, cost)``: strictly increasing cuts (fewer than ``cells - 1`` only when
        there are too few candidates) and their :func:`slack_cost`.
    """
    ev = np.sort(np.asarray(events, dtype=np.float64).ravel())
    lo = np.asarray(lo, dtype=np.float64).ravel()
    hi = np.asarray(hi, dtype=np.float64).ravel()
    w = np.ones(len(lo)) if weights is None else np.asarray(weights, dtype=np.float64)
    if candidates is None:
        pts = np.concatenate([ev, lo, hi + 1])
        candidates = np.round(np.quantile(pts, np.linspace(0, 1, n_candidates)))
    cand = np.asarray(candidates, dtype=np.float64)
    cand = np.unique(np.concatenate([[low], cand[(cand > low) & (cand <= high)],
                                     [high + 1]]))
    n_c = len(cand)
    k = max(1, min(int(cells), n_c - 1))
    f_c = _cdf(ev, cand)
    # per-bucket sums: bucket i holds the bounds in [cand[i], cand[i + 1])
    bl = np.searchsorted(cand, lo, side="right") - 1
    bh = np.searchsorted(cand, hi, side="right") - 1

    def prefix(bucket: np.ndarray, weights: np.ndarray) -> np.ndarray:
        return np.r_[0.0, np.cumsum(np.bincount(bucket, weights=weights, minlength=n_c))]

    w_l, wf_l = prefix(bl, w), prefix(bl, w * _cdf(ev, lo))
    w_h, wf_h = prefix(bh, w), prefix(bh, w * _cdf(ev, hi + 1))
    i = np.arange(n_c)[:, None]
    j = np.arange(n_c)[None, :]
    # cost of one cell [cand[i], cand[j]): the slack of the bounds of buckets i..j-1
    with np.errstate(invalid="ignore"):
        cost = ((wf_l[j] - wf_l[i]) - (w_l[j] - w_l[i]) * f_c[i]
                + (w_h[j] - w_h[i]) * f_c[j] - (wf_h[j] - wf_h[i]))
    cost = np.where(j > i, np.maximum(cost, 0.0), np.inf)
    best = cost[0].copy()  # best[j]: one cell [low, cand[j])
    back = []
    cols = np.arange(n_c)
    for _ in range(1, k):  # loop over cells, not over candidates
        total = best[:, None] + cost
        arg = np.argmin(total, axis=0)
        back.append(arg)
        best = total[arg, cols]
    cuts: list[float] = []
    at = n_c - 1
    for arg in reversed(back):
        at = int(arg[at])
        cuts.append(float(cand[at]))
    return tuple(sorted(cuts)), float(best[n_c - 1])


def fit_attributes(attributes: Sequence[dict[str, Any]], events: np.ndarray, lo: np.ndarray,
                   hi: np.ndarray, *, cells: int | None = None, rounds: int = 2,
                   n_candidates: int = 1200) -> list[dict[str, Any]]:
    """Numeric attributes with breakpoints fitted to the slack of a training sample.

    ``events`` is ``(n_events, d)``, ``lo``/``hi`` are ``(n_subs, d)``, column ``j`` for
    ``attributes[j]`` (each with ``low``/``high`` and ``granules`` or ``breakpoints``).
    Starts from equi-depth cells of the events, then ``rounds`` passes of coordinate
    descent (see the module doc). Returns copies of the attributes with ``breakpoints``.
    """
    d = len(attributes)
    ev_sorted = [np.sort(np.asarray(events[:, j], dtype=np.float64)) for j in range(d)]
    lows = [float(a["low"]) for a in attributes]
    highs = [float(a["high"]) for a in attributes]
    n_cells = [cells if cells is not None else
               int(a["granules"]) if "granules" in a else len(a["breakpoints"]) + 1
               for a in attributes]
    cuts = [list(equi_depth_breakpoints(events[:, j], n_cells[j], lows[j], highs[j]))
            for j in range(d)]
    lo = np.asarray(lo, dtype=np.float64)
    hi = np.asarray(hi, dtype=np.float64)
    for _ in range(rounds):
        for j in range(d):
            w = np.ones(len(lo))
            for o in range(d):
                if o != j:
                    w *= rounded_mass(cuts[o], ev_sorted[o], lo[:, o], hi[:, o], lows[o],
                                      highs[o])
            cuts[j] = list(slack_optimal_cuts(ev_sorted[j], lo[:, j], hi[:, j], n_cells[j],
                                              lows[j], highs[j], weights=w,
                                              n_candidates=n_candidates)[0])
    out = []
    for a, c in zip(attributes, cuts, strict=True):
        b = {k: v for k, v in a.items() if k != "granules"}
        b["breakpoints"] = [int(x) if float(x).is_integer() else x for x in c]
        out.append(b)
    return out
