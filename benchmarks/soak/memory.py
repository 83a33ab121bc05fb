"""Resident memory of the soak's processes, and whether it is flat.

:func:`read_status` reads one process's ``/proc/<pid>/status`` (``VmRSS``, ``RssAnon``,
``VmHWM``) and CPU time; :func:`fit_slope` fits a straight line to RSS over time and says
whether its slope is distinguishable from the sampling noise.

**Flat**, numerically (:func:`fit_slope`): over the fitted window (the soak's last 8
minutes, one sample every 10 s), the least-squares slope ``b`` (MiB/min) is flat when

1. its 95 % confidence interval contains 0: ``|b| <= t(0.975, df) * SE(b) * k``, where
   ``SE(b)`` comes from the residuals around the line and ``k = sqrt((1 + r) / (1 - r))``
   widens it for the residuals' lag-1 autocorrelation ``r`` (RSS moves in steps: an
   allocator arena, a Kafka fetch buffer; consecutive samples are not independent, so the
   plain OLS interval would be too narrow), with ``df = n (1 - r) / (1 + r) - 2``; or
2. the fitted growth over the whole window, ``|b| * window``, is under
   :data:`RESOLUTION_MIB` (1 MiB): one pymalloc arena, the smallest step by which a Python
   heap's RSS grows, so a smaller change is not a trend that can be told from one
   allocation.

The interval's half-width is the *noise* reported with each slope; ``|b|`` plus it bounds
the growth rate (95 %): a leak faster than that would have been seen. Otherwise the slope
*grows* (``b > 0``) or *shrinks*; the soak's requirement is that no node's RSS grows (a
fall, memory handed back as the allocator trims, is no leak).
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

#: MiB: growth over the window below this is within RSS's granularity (one pymalloc arena).
RESOLUTION_MIB = 1.0
#: Largest lag-1 autocorrelation used (above it the widening factor explodes on a few
#: samples; 0.9 already widens the interval 4.4 times).
MAX_RHO = 0.9

#: Student's t, two-sided 95 % (0.975 quantile), by degrees of freedom.
_T975 = ((1, 12.706), (2, 4.303), (3, 3.182), (4, 2.776), (5, 2.571), (6, 2.447),
         (7, 2.365), (8, 2.306), (9, 2.262), (10, 2.228), (12, 2.179), (15, 2.131),
         (20, 2.086), (25, 2.060), (30, 2.042), (40, 2.021), (60, 2.000), (120, 1.980))


def t975(df: float) -> float:
    """The 0.975 quantile of Student's t with ``df`` (>= 1, may be fractional) degrees.

    Linear in ``1/df`` between tabulated values (exact to 3 decimals at them, within 0.01
    between), 1.960 at infinity.
    """
    df = max(1.0, df)
    pts = [(1.0 / d, t) for d, t in _T975] + [(0.0, 1.960)]
    x = 1.0 / df
    for (x0, t0), (x1, t1) in zip(pts, pts[1:], strict=False):
        if x1 <= x <= x0:
            return t1 + (t0 - t1) * (x - x1) / (x0 - x1)
    return pts[0][1]


@dataclass(frozen=True)
class Fit:
    """A straight line through RSS samples, with its noise and verdict."""

    n: int  # samples in the window
    window_min: float  # span of the window's samples, minutes
    slope_mib_per_min: float
    ci95_mib_per_min: float  # half-width of the slope's 95 % interval (the noise)
    rho: float  # lag-1 autocorrelation of the residuals (clipped to [0, MAX_RHO])
    df: float  # degrees of freedom after the autocorrelation
    resid_sd_mib: float  # sampling noise around the line
    growth_mib: float  # slope * window: the fitted change over the window
    first_mib: float
    last_mib: float
    flat: bool
    why: str  # "ci_contains_0", "below_resolution" or "grows"/"shrinks"

    @property
    def bound_mib_per_hour(self) -> float:
        """Upper 95 % bound on the growth rate, MiB per hour."""
        return 60.0 * (abs(self.slope_mib_per_min) + self.ci95_mib_per_min)

    @property
    def grows(self) -> bool:
        """The slope is positive beyond the noise and the resolution: a leak, or warm-up."""
        return self.why == "grows"

    def record(self) -> dict[str, Any]:
        out = asdict(self)
        out["bound_mib_per_hour"] = self.bound_mib_per_hour
        out["grows"] = self.grows
        return {k: round(v, 4) if isinstance(v, float) else v for k, v in out.items()}


def fit_slope(t_s: Sequence[float], rss_mib: Sequence[float]) -> Fit:
    """Least-squares line of ``rss_mib`` over ``t_s`` (seconds); flat as the module says."""
    n = len(t_s)
    if n != len(rss_mib) or n < 3:
        raise ValueError(f"need >= 3 paired samples, got {n} and {len(rss_mib)}")
    t = [x / 60.0 for x in t_s]
    tm, ym = sum(t) / n, sum(rss_mib) / n
    sxx = sum((x - tm) ** 2 for x in t)
    if sxx <= 0:
        raise ValueError("samples all at one time")
    b = sum((x - tm) * (y - ym) for x, y in zip(t, rss_mib, strict=True)) / sxx
    a = ym - b * tm
    res = [y - (a + b * x) for x, y in zip(t, rss_mib, strict=True)]
    ss = sum(r * r for r in res)
    s = math.sqrt(ss / (n - 2))
    rho = sum(r0 * r1 for r0, r1 in zip(res, res[1:], strict=False)) / ss if ss > 0 else 0.0
    rho = min(MAX_RHO, max(0.0, rho))
    widen = math.sqrt((1 + rho) / (1 - rho))
    df = max(1.0, n * (1 - rho) / (1 + rho) - 2)
    half = t975(df) * s / math.sqrt(sxx) * widen
    window = t[-1] - t[0]
    growth = b * window
    if abs(b) <= half:
        why = "ci_contains_0"
    elif abs(growth) < RESOLUTION_MIB:
        why = "below_resolution"
    else:
        why = "grows" if b > 0 else "shrinks"
    return Fit(n, window, b, half, rho, df, s, growth, rss_mib[0], rss_mib[-1],
               why in ("ci_contains_0", "below_resolution"), why)


def read_status(pid: int) -> dict[str, float] | None:
    """``VmRSS``, ``RssAnon``, ``VmHWM`` (MiB) and CPU seconds of ``pid``; None if gone."""
    out: dict[str, float] = {}
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as fh:
            for line in fh:
                key, _, rest = line.partition(":")
                if key in ("VmRSS", "RssAnon", "VmHWM"):
                    out[key] = int(rest.split()[0]) / 1024.0  # kB -> MiB
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        ticks = os.sysconf("SC_CLK_TCK")
        out["cpu_s"] = (int(fields[11]) + int(fields[12])) / ticks  # utime + stime
    except (OSError, ValueError, IndexError):
        return None
    return out if "VmRSS" in out else None


def loadavg() -> float | None:
    """The machine's 1-minute load average (other sessions share the cores)."""
    try:
        with open("/proc/loadavg", encoding="ascii") as fh:
            return float(fh.read().split()[0])
    except (OSError, ValueError):
        return None
