"""Write ``benchmarks/REPORT.md`` and its plots from ``benchmarks/results/paper.json``.

Run::

    .venv/bin/python -m benchmarks.report [--results benchmarks/results/paper.json]
        [--out benchmarks/REPORT.md] [--plots benchmarks/results/paper]

For every table of the paper's §6 the published numbers (transcribed from the paper,
Shi et al., tables cited by number) sit beside ours; figures are redrawn in the paper's
style (one panel per distribution, one line per system and configuration) as PNGs.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

DEFAULT_RESULTS = Path("benchmarks/results/paper.json")
DEFAULT_OUT = Path("benchmarks/REPORT.md")
DEFAULT_PLOTS = Path("benchmarks/results/paper")
SIZES = (100_000, 200_000, 300_000, 400_000, 500_000)
DIMS = ((2, 128), (3, 32), (4, 16))
GRANULES = (16, 32, 64, 128, 256)
FP_MS = (2**8, 2**10, 2**12, 2**14, 2**16)

# --- the paper's published numbers (Shi et al., §6), times in 10^-3 ms = µs -------------
PAPER: dict[str, Any] = {
    "table1": {  # insertion time, uniform, µs per subscription
        ("dls", 2, 128): (0.628, 0.586, 0.556, 0.536, 0.516),
        ("dls", 3, 32): (0.648, 0.623, 0.688, 0.563, 0.594),
        ("dls", 4, 16): (1.013, 0.864, 0.878, 0.762, 0.813),
        ("mics", 2, 128): (1.840, 2.215, 2.460, 2.695, 2.804),
        ("mics", 3, 32): (1.760, 2.175, 2.420, 2.620, 2.762),
        ("mics", 4, 16): (2.660, 3.070, 3.027, 3.320, 3.626),
    },
    "table2": {  # insertion time, Zipf
        ("dls", 2, 128): (0.308, 0.309, 0.310, 0.302, 0.317),
        ("dls", 3, 32): (0.357, 0.352, 0.391, 0.359, 0.362),
        ("dls", 4, 16): (0.413, 0.451, 0.446, 0.436, 0.488),
        ("mics", 2, 128): (0.280, 0.280, 0.313, 0.345, 0.388),
        ("mics", 3, 32): (0.150, 0.165, 0.173, 0.173, 0.188),
        ("mics", 4, 16): (0.130, 0.140, 0.137, 0.183, 0.174),
    },
    "table3": {  # forwarding traffic, uniform: labels (DLS) / ranges (MICS)
        ("dls", 2, 128): (16345, 16378, 16376, 16374, 16378),
        ("dls", 3, 32): (31206, 32697, 32756, 32762, 32760),
        ("dls", 4, 16): (51217, 62461, 64832, 65394, 65493),
        ("mics", 2, 128): (100000, 200000, 300000, 400000, 500000),
        ("mics", 3, 32): (100000, 200000, 300000, 400000, 500000),
        ("mics", 4, 16): (100000, 200000, 300000, 400000, 500000),
    },
    "table4": {  # forwarding traffic, Zipf
        ("dls", 2, 128): (128, 128, 128, 127, 129),
        ("dls", 3, 32): (32, 32, 33, 32, 32),
        ("dls", 4, 16): (16, 16, 17, 16, 16),
        ("mics", 2, 128): (129, 128, 128, 128, 128),
        ("mics", 3, 32): (32, 32, 32, 32, 33),
        ("mics", 4, 16): (16, 16, 16, 16, 17),
    },
    "table5": {  # deletion time, uniform (DLS only: the paper's MICS has no deletion)
        ("dls", 2, 128): (1.212, 1.158, 1.137, 1.122, 1.000),
        ("dls", 3, 32): (1.255, 1.289, 1.178, 1.294, 1.409),
        ("dls", 4, 16): (1.540, 1.394, 1.532, 1.551, 1.282),
    },
    "table6": {  # deletion time, Zipf
        ("dls", 2, 128): (0.661, 0.663, 0.713, 0.659, 0.747),
        ("dls", 3, 32): (0.825, 0.807, 0.787, 0.808, 0.776),
        ("dls", 4, 16): (0.938, 0.869, 0.854, 1.009, 0.879),
    },
    "table8": {  # insertion time vs granules 16..256 (d=3, 8,000 subscriptions)
        ("uniform", "dls"): (0.791, 1.021, 1.250, 0.875, 1.000),
        ("uniform", "mics"): (2.5, 3.75, 7, 17.125, 47.75),
        ("zipf", "dls"): (0.688, 0.458, 0.375, 0.479, 0.375),
        ("zipf", "mics"): (4, 6.25, 11.25, 21.875, 63.0),
    },
    "table9": {  # event matching time vs granules
        ("uniform", "dls"): (0.31, 0.35, 0.34, 0.405, 0.39),
        ("uniform", "mics"): (36.6, 75.1, 84.9, 86.1, 88.1),
        ("zipf", "dls"): (0.295, 0.35, 0.38, 0.38, 0.38),
        ("zipf", "mics"): (0.1, 0.21, 0.36, 0.87, 2.51),
    },
    "table10": {  # false-positive rate (%) vs Bloom filter size m = 2^8..2^16, g = 32
        "uniform": (5.704, 5.817, 6.530, 3.361, 2.697),
        "zipf": (89.209, 11.396, 0.423, 0.363, 0.343),
    },
}
NOT = ["*Not measured in this run.*", ""]
NARROW = 1 / 16  # the §6.2.2 interval limit (fraction of the domain) of the headline runs
SYSTEM_ORDER = ("dls", "dls-paper", "mics", "rtree", "bruteforce")
LABEL = {"dls": "DLS", "dls-tuned": "DLS (equi-depth cells)",
         "dls-fitted": "DLS (slack-optimal cells)", "dls-paper": "DLS (paper mode)",
         "mics": "MICS", "rtree": "R-tree", "bruteforce": "brute force"}


class Results:
    """Records of one run with lookups by system, metric and params."""

    def __init__(self, records: list[dict[str, Any]], meta: dict[str, Any]) -> None:
        self.records = records
        self.meta = meta
        self.systems = [s for s in SYSTEM_ORDER
                        if any(r["system"] == s for r in records)]

    def get(self, system: str, metric: str, **match: Any) -> float | None:
        for r in reversed(self.records):
            if (r["system"] == system and r["metric"] == metric
                    and all(r["params"].get(k) == v for k, v in match.items())):
                return float(r["value"])
        return None

    def values(self, metric: str, **match: Any) -> list[dict[str, Any]]:
        return [r for r in self.records if r["metric"] == metric
                and all(r["params"].get(k) == v for k, v in match.items())]

    def sizes(self, experiment: str) -> list[int]:
        return sorted({r["params"]["n_subs"] for r in self.records
                       if r["params"].get("experiment") == experiment
                       and "n_subs" in r["params"] and r["metric"] == "insert_time"})


def _fmt(v: float | None, digits: int = 3) -> str:
    if v is None:
        return "—"
    if digits == 0 or abs(v) >= 1000:
        return f"{v:,.0f}"
    if abs(v) >= 100:
        return f"{v:.1f}"
    return f"{v:.{digits}f}"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return out


def _k(n: int) -> str:
    return f"{n // 1000}K" if n < 1_000_000 else f"{n / 1e6:g}M"


def scaling_table(res: Results, table: str, metric: str, dist: str, digits: int = 3,
                  systems: Sequence[str] | None = None) -> list[str]:
    """Paper's rows (``paper``) beside ours (``ours``) for every system and (d, g)."""
    sizes = res.sizes("scaling") or list(SIZES)
    header = ["system", "d, g", "source", *(_k(n) for n in sizes)]
    rows = []
    pub = PAPER.get(table, {})
    for system in systems or res.systems:
        for d, g in DIMS:
            ours = [res.get(system, metric, experiment="scaling", distribution=dist, d=d, g=g,
                            n_subs=n) for n in sizes]
            if (system, d, g) in pub and set(sizes) & set(SIZES):
                vals = dict(zip(SIZES, pub[(system, d, g)], strict=True))
                rows.append([LABEL[system], f"{d}, {g}", "paper",
                             *(_fmt(vals.get(n), digits) for n in sizes)])
            if any(v is not None for v in ours):
                rows.append([LABEL[system], f"{d}, {g}", "**ours**",
                             *(_fmt(v, digits) for v in ours)])
    return _table(header, rows)


def _plot_lib() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def _style(ax: Any, xlabel: str, ylabel: str, title: str | None = None,
           legend: dict[str, Any] | None = None) -> None:
    """Labels, grid and legend of one panel."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(**(legend or {"fontsize": 7}))


def _save(plt: Any, fig: Any, path: Path, title: str | None = None) -> bool:
    """Title, lay out, write and close a figure; True."""
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


MARKERS = {"dls": "o", "dls-paper": "s", "mics": "^", "rtree": "D", "bruteforce": "x"}
DIM_STYLE = {(2, 128): "-", (3, 32): "--", (4, 16): ":"}


def _dist_panels(res: Results, metric: str, experiment: str,
                 size: tuple[float, float]) -> tuple[Any, Any, Any, list[str]] | None:
    """A figure with one panel per distribution that has ``metric`` records, or None."""
    plt = _plot_lib()
    dists = [d for d in ("uniform", "zipf") if res.values(metric, experiment=experiment,
                                                           distribution=d)]
    if plt is None or not dists:
        return None
    fig, axes = plt.subplots(1, len(dists), figsize=(size[0] * len(dists), size[1]),
                             squeeze=False)
    return plt, fig, axes, dists


def plot_scaling(res: Results, metric: str, ylabel: str, title: str, path: Path,
                 log_y: bool = True) -> bool:
    panels = _dist_panels(res, metric, "scaling", (6.2, 4.6))
    if panels is None:
        return False
    plt, fig, axes, dists = panels
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, dist, tag in zip(axes[0], dists, "ab", strict=False):
        for si, system in enumerate(res.systems):
            for d, g in DIMS:
                pts = sorted((r["params"]["n_subs"], r["value"]) for r in res.values(
                    metric, experiment="scaling", distribution=dist, d=d, g=g)
                    if r["system"] == system)
                if pts:
                    xs, ys = zip(*pts, strict=True)
                    ax.plot(xs, ys, DIM_STYLE[(d, g)], marker=MARKERS[system],
                            color=colors[si % len(colors)], markersize=4,
                            label=f"{LABEL[system]}(d={d}, g={g})")
        if log_y:
            ax.set_yscale("log")
        _style(ax, "number of subscriptions", ylabel, f"({tag}) {dist.capitalize()} "
               "Distribution", {"fontsize": 6, "ncol": 2})
    return _save(plt, fig, path, title)


def plot_granules(res: Results, metric: str, ylabel: str, title: str, path: Path) -> bool:
    panels = _dist_panels(res, metric, "granules", (6, 4.4))
    if panels is None:
        return False
    plt, fig, axes, dists = panels
    for ax, dist, tag in zip(axes[0], dists, "ab", strict=False):
        for system in res.systems:
            pts = sorted((r["params"]["g"], r["value"]) for r in res.values(
                metric, experiment="granules", distribution=dist) if r["system"] == system)
            if pts:
                xs, ys = zip(*pts, strict=True)
                ax.plot(xs, ys, "-", marker=MARKERS[system], label=LABEL[system])
        key = "table8" if metric == "insert_time" else "table9"
        for system in ("dls", "mics"):
            pub = PAPER[key].get((dist, system))
            if pub:
                ax.plot(GRANULES, pub, ":", marker=MARKERS[system], alpha=0.6,
                        label=f"{LABEL[system]} (paper)")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        _style(ax, "attribute partition granules", ylabel,
               f"({tag}) {dist.capitalize()} Distribution")
    return _save(plt, fig, path, title)


def plot_fp(res: Results, experiment: str, xkey: str, path: Path, title: str) -> bool:
    plt = _plot_lib()
    if plt is None:
        return False
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    drew = False
    for dist, color in (("uniform", "red"), ("zipf", "green")):
        for metric, style, what in (("fp_client_per_negative", "-v", "client, of neg. pairs"),
                                    ("fp_network_per_event", "-o", "network, of events"),
                                    ("fp_client", "--s", "client deliveries")):
            pts = sorted((r["params"][xkey], 100 * r["value"]) for r in res.values(
                metric, experiment=experiment, distribution=dist)
                if r["params"].get("length_frac", NARROW) == NARROW)
            if pts:
                xs, ys = zip(*pts, strict=True)
                ax.plot(xs, ys, style, color=color, label=f"{dist}: {what}", markersize=4)
                drew = True
        if experiment == "fp_m":
            ax.plot(FP_MS, PAPER["table10"][dist], ":^", color=color, alpha=0.6,
                    label=f"{dist}: paper Table 10")
    if not drew:
        plt.close(fig)
        return False
    ax.set_xscale("log", base=2)
    _style(ax, "m (counters)" if xkey == "m" else "attribute partition granules",
           "false positive rate (%)", title)
    return _save(plt, fig, path)


def plot_growth(res: Results, experiment: str, xkey: str, path: Path, title: str) -> bool:
    plt = _plot_lib()
    if plt is None:
        return False
    metrics = (("insert_time", "insert (µs/sub)"), ("matching_time", "matching (µs/event)"),
               ("bytes_per_subscription", "memory (bytes/sub)"))
    if not res.values("matching_time", experiment=experiment):
        return False
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.4))
    for ax, (metric, ylabel) in zip(axes, metrics, strict=True):
        for system in res.systems:
            pts = sorted((r["params"][xkey], r["value"]) for r in res.values(
                metric, experiment=experiment) if r["system"] == system)
            if pts:
                xs, ys = zip(*pts, strict=True)
                ax.plot(xs, ys, "-", marker=MARKERS[system], label=LABEL[system])
        ax.set_xscale("log")
        ax.set_yscale("log")
        _style(ax, xkey.replace("n_subs", "subscriptions").replace("n_clients", "clients"),
               ylabel)
    return _save(plt, fig, path, title)


def _bar_experiment(res: Results) -> tuple[str, int]:
    """Where the matching bars are read: the interleaved ``matching`` experiment when the
    run has it, else the largest size of ``scaling``."""
    rows = res.values("matching_time", experiment="matching", d=3, g=32)
    if rows:
        return "matching", max(int(r["params"]["n_subs"]) for r in rows)
    return "scaling", max(res.sizes("scaling") or [0])


def _matching_load(res: Results, dist: str | None = None) -> str:
    loads = sorted({float(r["params"][k]) for r in res.values("matching_time",
                                                               experiment="matching")
                    for k in ("load_avg_1m_before", "load_avg_1m_after")
                    if k in r["params"] and (dist is None
                                             or r["params"]["distribution"] == dist)})
    return (f"{loads[0]:.1f}" if len(loads) == 1 else
            f"{loads[0]:.1f}–{loads[-1]:.1f}") if loads else "?"


def _bar_lines(res: Results) -> list[str]:
    out = []
    exp, n = _bar_experiment(res)
    for dist in ("uniform", "zipf"):
        dls = res.get("dls", "matching_time", experiment=exp, distribution=dist, d=3,
                      g=32, n_subs=n)
        if dls is None:
            continue
        how = (f"interleaved, load {_matching_load(res, dist)}" if exp == "matching"
               else "scaling run")
        for other, need in (("bruteforce", 100), ("mics", 10), ("rtree", 10)):
            o = res.get(other, "matching_time", experiment=exp, distribution=dist, d=3,
                        g=32, n_subs=n)
            if o is None:
                out.append(f"* DLS matching ≥ {need}× {LABEL[other]} ({dist}, {_k(n)}, d=3, "
                           f"g=32): **not measured** ({LABEL[other]} did not run)")
                continue
            ratio = o / dls
            ok = "met" if ratio >= need else "not met"
            out.append(f"* DLS batched matching ≥ {need}× {LABEL[other]} ({dist}, {_k(n)} "
                       f"subscriptions, d=3, g=32, {_clients(res, exp)} clients; {how}): "
                       f"**{ok}** — {ratio:,.1f}× ({_fmt(dls)} vs {_fmt(o)} µs/event)")
    for dist in ("uniform", "zipf"):
        paper = PAPER["table10"][dist][-1]
        for metric, what in FP_READINGS:
            v = res.get("dls", metric, experiment="fp_m", distribution=dist, m=2**16,
                        length_frac=NARROW)
            if v is None:
                continue
            ok = "met" if 100 * v <= paper else "not met"
            out.append(f"* FP rate at Table 10's m = 2^16, g = 32 ({dist}, {what}) ≤ paper's "
                       f"{paper}%: **{ok}** — {100 * v:.3f}%")
        for system, cells in (("dls-tuned", "equi-depth"), ("dls-fitted", "slack-optimal")):
            v = res.get(system, "fp_client_per_negative", experiment="fp_m",
                        distribution=dist, m=2**16, length_frac=NARROW)
            if v is not None:
                ok = "met" if 100 * v <= paper else "not met"
                out.append(f"* FP rate at Table 10's m = 2^16, g = 32 ({dist}, client filters, "
                           f"of negative pairs, with {cells} cells fitted to a training "
                           f"sample) ≤ paper's {paper}%: **{ok}** — {100 * v:.3f}%")
    return out


BAR_UPDATE_US = 0.5  # issue 17: insert and delete per subscription, amortised
BAR_MEMORY_B = 100.0  # issue 17: bytes per subscription at d = 3, g = 32
# The last full run before the compiled kernels (benchmarks/results/paper.json of
# 2026-11-26, commit 903b9ac, the numpy core), 500K subscriptions, d = 3, g = 32:
# (insert, delete) us per subscription, matching us per event, bytes per subscription.
BEFORE_KERNELS = {"uniform": (4.764, 3.945, 0.994, 163.0), "zipf": (2.506, 2.970, 1.420, 136.0)}


def _bar17_lines(res: Results) -> list[str]:
    """The bars of issue 17, read off the scaling run's largest size and the matching run."""
    n = max(res.sizes("scaling") or [0])
    if not n or res.get("dls", "insert_time", experiment="scaling", n_subs=n) is None:
        return []
    threads = res.meta.get("settings", {}).get("update_threads", 1)
    batch = res.meta.get("settings", {}).get("batch_size")
    out = [f"Insert and delete are amortised over the scaling run's whole fill to {_k(n)} "
           "subscriptions (`insert_time_cumulative`) and its whole emptying (the delete "
           f"steps weighted by their size); {_clients(res)} clients, batches of "
           f"{'?' if batch is None else f'{batch:,}'}, {threads} update "
           f"thread{'s' if threads != 1 else ''}; an insert includes mapping the boxes to "
           "labels.", ""]
    for what in ("insert", "delete"):
        for dist in ("uniform", "zipf"):
            for d, g in DIMS:
                v = (res.get("dls", "insert_time_cumulative", experiment="scaling",
                             distribution=dist, d=d, g=g, n_subs=n) if what == "insert"
                     else _amortised_delete(res, dist, d, g))
                if v is None:
                    continue
                ok = "met" if v <= BAR_UPDATE_US else "not met"
                out.append(f"* DLS {what} ≤ {BAR_UPDATE_US} µs per subscription ({dist}, "
                           f"d={d}, g={g}): **{ok}** — {_fmt(v)} µs")
    exp, nm = _bar_experiment(res)
    dls = res.get("dls", "matching_time", experiment=exp, distribution="uniform", d=3, g=32,
                  n_subs=nm)
    for other, need in (("mics", 10), ("bruteforce", 300)):
        o = res.get(other, "matching_time", experiment=exp, distribution="uniform", d=3,
                    g=32, n_subs=nm)
        if dls is None or o is None:
            continue
        ok = "met" if o / dls >= need else "not met"
        out.append(f"* DLS batched matching ≥ {need}× {LABEL[other]} (uniform, {_k(nm)}, "
                   f"d=3, g=32): **{ok}** — {o / dls:,.1f}× ({_fmt(dls)} vs {_fmt(o)} "
                   "µs/event)")
    for dist in ("uniform", "zipf"):
        v = res.get("dls", "bytes_per_subscription", experiment="scaling", distribution=dist,
                    d=3, g=32, n_subs=n)
        if v is not None:
            ok = "met" if v <= BAR_MEMORY_B else "not met"
            out.append(f"* DLS memory ≤ {BAR_MEMORY_B:.0f} B per subscription ({dist}, d=3, "
                       f"g=32, {_k(n)}; every array the broker keeps): **{ok}** — {v:.1f} B")
    return out


def _amortised_delete(res: Results, dist: str, d: int, g: int) -> float | None:
    """DLS's delete time over the scaling run's whole emptying (steps weighted by size)."""
    rows = [r for r in res.values("delete_time", experiment="scaling", distribution=dist,
                                  d=d, g=g) if r["system"] == "dls"]
    if not rows or any("partial" in r["params"] for r in rows):
        return None
    total = sum(int(r["params"].get("deleted", 0)) for r in rows)
    if not total:
        return None
    return sum(float(r["value"]) * int(r["params"].get("deleted", 0)) for r in rows) / total


def _kernels_note(res: Results) -> list[str]:
    """What the compiled kernels changed: this run beside the last numpy-core run."""
    n = max(res.sizes("scaling") or [0])
    rows = []
    for dist, (ins0, del0, match0, mem0) in BEFORE_KERNELS.items():
        now: list[float | None] = [
            res.get("dls", "insert_time_cumulative", experiment="scaling", distribution=dist,
                    d=3, g=32, n_subs=n), _amortised_delete(res, dist, 3, 32)]
        now.append(res.get("dls", "matching_time", experiment="matching",
                           distribution=dist, d=3, g=32))
        now.append(res.get("dls", "bytes_per_subscription", experiment="scaling",
                           distribution=dist, d=3, g=32, n_subs=n))
        if any(v is None for v in now):
            continue
        rows.append(f"| {dist} | {ins0:.2f} → {_fmt(now[0])} | {del0:.2f} → {_fmt(now[1])} "
                    f"| {match0:.3f} → {_fmt(now[2])} | {mem0:.0f} → {now[3]:.1f} |")
    if not rows or n != 500_000:
        return []
    return ["## What the compiled kernels changed", "",
            "DLS at 500K subscriptions, d = 3, g = 32, 1,000 clients: the last full run on "
            "the numpy core (2026-11-26, commit `903b9ac`, its last step's time) → this run "
            "(amortised, as the bars above).", "",
            "| data | insert µs/sub | delete µs/sub | matching µs/event | bytes/sub |",
            "|---|---|---|---|---|", *rows, "",
            "What changed where: the counter updates, hashing, the registry's id index and "
            "the mapping of boxes to labels became compiled loops (`numba`: "
            "`dls/_kernels.py`, `_rowkernels.py`, `_idkernels.py`, `_mapkernels.py`), where "
            "the numpy core sorted every batch's counter keys, kept ids in a dict and built "
            "labels with a division per attribute and label; a large batch now walks the "
            "counter matrix once, row after row. Matching was already one pass of ANDs and "
            "one decode in numpy; compiled, what remains is reading k bitset rows per event. "
            "Memory fell with the packed 4-bit counters and the compact registry, which the "
            "kernels made affordable, not with the kernels themselves. Both paths give "
            "identical results (`tests/dls/test_jit_parity.py`; `make test-reference` runs "
            "the core's tests with `DLS_NO_JIT=1`).", "",
            "Since 2026-11-28 the client filters take 5 hash functions where the optimum "
            "is 7 (`dls.cbf.size_for`: the fewest within 3 % of the optimal counters, for "
            "the same false-positive rate), so an insert or delete updates 2/7 fewer "
            "counters and a match reads 2/7 fewer rows; the row walk reads a batch's "
            "clients as 16-bit slots; and the benchmark's broker sizes its id index once "
            "for the subscriptions it announces (`BrokerState.expect_subscriptions`) "
            "instead of rebuilding it four times during the fill. What the kernels did not "
            "change: an insert still updates one counter per label and hash function "
            "(about 38 at d = 3, 68 at d = 4, each a few ns), which is why d = 4 stays "
            "above 0.5 µs. This machine's speed varied up to twice between days on one "
            "commit: compare timings within one run.", ""]


def _clients(res: Results, experiment: str = "scaling") -> str:
    r = res.values("matching_time", experiment=experiment)
    return f"{r[0]['params']['n_clients']:,}" if r else "?"


def granule_table(res: Results, table: str, metric: str) -> list[str]:
    gs = sorted({r["params"]["g"] for r in res.values(metric, experiment="granules")})
    gs = gs or list(GRANULES)
    rows = []
    for dist in ("uniform", "zipf"):
        for system in res.systems:
            pub = PAPER[table].get((dist, system))
            if pub:
                vals = dict(zip(GRANULES, pub, strict=True))
                rows.append([f"{dist}, {LABEL[system]}", "paper",
                             *(_fmt(vals.get(g)) for g in gs)])
            ours = [res.get(system, metric, experiment="granules", distribution=dist, g=g)
                    for g in gs]
            if any(v is not None for v in ours):
                rows.append([f"{dist}, {LABEL[system]}", "**ours**", *(_fmt(v) for v in ours)])
    return _table(["system", "source", *(str(g) for g in gs)], rows)


TUNED_ROWS = (
    ("dls-tuned", "fp_client_per_negative",
     "ours, equi-depth cells: client filters, of negative pairs"),
    ("dls-tuned", "fp_client_cells_per_negative",
     "ours, equi-depth cells: cells only, of neg. pairs"),
    ("dls-tuned", "fp_client", "ours, equi-depth cells: client deliveries"),
    ("dls-fitted", "fp_client_per_negative",
     "ours, slack-optimal cells: client filters, of negative pairs"),
    ("dls-fitted", "fp_client_cells_per_negative",
     "ours, slack-optimal cells: cells only, of neg. pairs"),
)


def tuned_note(res: Results) -> list[str]:
    """What the equi-depth and slack-optimal rows are, and what they cost, when measured."""
    parts, costlier = [], []
    for dist in ("uniform", "zipf"):
        kw = {"experiment": "fp_m", "distribution": dist, "m": 2**16, "length_frac": NARROW}
        eq, tu = (res.get(sys_, "labels_per_subscription", **kw) for sys_ in ("dls",
                                                                               "dls-tuned"))
        c_eq = res.get("dls", "fp_client_cells_per_negative", **kw)
        c_tu = res.get("dls-tuned", "fp_client_cells_per_negative", **kw)
        if eq is not None and tu is not None and c_eq is not None and c_tu is not None:
            parts.append(f"{dist}: cells-only rate {100 * c_eq:.3f}% → {100 * c_tu:.3f}%, "
                         f"{eq:.1f} → {tu:.1f} labels per subscription")
            if tu > SAME * eq:
                costlier.append(dist)
    if not parts:
        return []
    out = ["", "*Equi-depth cells* (beyond the paper, which leaves the tuning of cells to "
           "future work): the same 32 cells per attribute, with breakpoints at quantiles of "
           "the events of a training workload drawn with another seed (`dls.tuning`, "
           "`dlsroute tune-space`): " + "; ".join(parts) + "."
           + (f" They cost more labels per subscription ({', '.join(costlier)}): cells are "
              "narrow where events are dense, and subscriptions there cover more of them."
              if costlier else "")]
    return out + _fitted_note(res)


def _fitted_note(res: Results) -> list[str]:
    floors, zipf_floor = [], None
    for dist in ("uniform", "zipf"):
        kw = {"experiment": "fp_m", "distribution": dist, "length_frac": NARROW}
        fit = res.get("dls-fitted", "fp_client_cells_per_negative", m=2**16, **kw)
        lps = res.get("dls-fitted", "labels_per_subscription", m=2**16, **kw)
        floor = res.get("dls-fitted", "fp_client_cells_per_negative_in_sample", **kw)
        lps_in = res.get("dls-fitted", "labels_per_subscription_in_sample", **kw)
        if fit is not None and lps is not None and floor is not None and lps_in is not None:
            floors.append(f"{dist}: {100 * fit:.3f}% ({lps:.1f} labels per subscription) "
                          f"fitted to the training workload, {100 * floor:.3f}% "
                          f"({lps_in:.1f} labels) fitted to the measured workload itself")
            if dist == "zipf":
                zipf_floor = 100 * floor
    if not floors:
        return []
    paper = PAPER["table10"]["zipf"][-1]
    verdict = ("" if zipf_floor is None else
               f" The Bloom filters only add to this rate. On our Zipf workload the in-sample "
               f"floor is {zipf_floor:.3f}%, " + (
                   f"above the paper's {paper}%: on this workload the cells alone keep the "
                   "rate above the paper's figure (the paper gives neither its Zipf exponent "
                   "nor how its events are drawn)." if zipf_floor > paper else
                   f"not above the paper's {paper}%."))
    return ["", "*Slack-optimal cells* (`benchmarks/cells_fit.py`, analysis rather than "
            "product): the same 32 cells per attribute, with breakpoints chosen to minimise "
            "the event mass in the part of each subscription's rounded box that lies outside "
            "the box, over a sample of events *and* subscriptions (exact dynamic programme "
            "per attribute over 1,200 candidate cuts, two rounds of coordinate descent; the "
            "descent and the sum over subscriptions, which counts a client's overlapping "
            "subscriptions twice, are approximations, so the in-sample fit is a measured "
            "floor, not a proven one). Cells-only rate of negative pairs: "
            + "; ".join(floors) + "." + verdict]


def fp_tables(res: Results) -> list[str]:
    out: list[str] = []
    ms = sorted({r["params"]["m"] for r in res.values("fp_client", experiment="fp_m")})
    if ms:
        rows = []
        fracs = sorted({r["params"].get("length_frac", NARROW)
                        for r in res.values("fp_client", experiment="fp_m")}, reverse=True)
        for dist, frac in ((d, f) for d in ("uniform", "zipf") for f in fracs):
            pub = dict(zip(FP_MS, PAPER["table10"][dist], strict=True))
            if frac == fracs[0]:
                rows.append([dist, "paper (Table 10)", *(_fmt(pub.get(m)) for m in ms)])
            tag = "" if frac == NARROW else f" [intervals ≤ 1/{round(1 / frac)} of domain]"
            for metric, what in (
                    ("fp_client_per_negative", "ours: client filters, of negative pairs"),
                    ("fp_client_cells_per_negative", "ours: client, cells only, of neg. pairs"),
                    ("fp_network_per_event", "ours: network, of all events"),
                    ("fp_network", "ours: network, of passed"),
                    ("fp_network_cells", "ours: network, cells only, of passed"),
                    ("fp_client", "ours: client deliveries"),
                    ("fp_client_cells", "ours: client, cells only")):
                vals = [res.get("dls", metric, experiment="fp_m", distribution=dist, m=m,
                                length_frac=frac) for m in ms]
                what += tag
                if any(v is not None for v in vals):
                    rows.append([dist, what,
                                 *(_fmt(None if v is None else 100 * v) for v in vals)])
            if frac != NARROW:
                continue
            for system, metric, what in TUNED_ROWS:
                vals = [res.get(system, metric, experiment="fp_m", distribution=dist,
                                m=m, length_frac=frac) for m in ms]
                if any(v is not None for v in vals):
                    rows.append([dist, what,
                                 *(_fmt(None if v is None else 100 * v) for v in vals)])
        out += ["False-positive rate (%) vs m at g = 32 (Table 10):", ""]
        out += _table(["data", "source", *(f"2^{m.bit_length() - 1}" for m in ms)], rows)
        out += tuned_note(res)
    gs = sorted({r["params"]["g"] for r in res.values("fp_client", experiment="fp_granules")})
    if gs:
        rows = []
        for dist in ("uniform", "zipf"):
            for metric, what in (("fp_client_per_negative", "client filters, of negative pairs"),
                                 ("fp_client", "client deliveries"),
                                 ("fp_client_cells", "client, cells only"),
                                 ("fp_network_per_event", "network, of all events"),
                                 ("fp_network", "network, of passed"),
                                 ("fp_network_cells", "network, cells only")):
                vals = [res.get("dls", metric, experiment="fp_granules", distribution=dist,
                                g=g) for g in gs]
                if any(v is not None for v in vals):
                    rows.append([dist, what,
                                 *(_fmt(None if v is None else 100 * v) for v in vals)])
        out += ["", "False-positive rate (%) vs granules at m = 2^16 (Figure 9; the paper "
                "publishes only the plot):", ""]
        out += _table(["data", "ours", *(str(g) for g in gs)], rows)
    return out


def growth_table(res: Results, experiment: str, xkey: str) -> list[str]:
    xs = sorted({r["params"][xkey] for r in res.values("matching_time",
                                                          experiment=experiment)})
    rows = []
    for system in res.systems:
        for metric, unit in (("insert_time", "insert µs/sub"),
                             ("matching_time", "match µs/event"),
                             ("delete_time", "delete µs/sub"),
                             ("bytes_per_subscription", "bytes/sub")):
            vals = [res.get(system, metric, experiment=experiment, **{xkey: x}) for x in xs]
            if any(v is not None for v in vals):
                rows.append([LABEL[system], unit, *(_fmt(v) for v in vals)])
        stop = [r for r in res.values("stopped_at", experiment=experiment)
                if r["system"] == system]
        if stop:
            rows.append([LABEL[system], "stopped (time budget)",
                         *(("stopped" if x > stop[0]["value"] else "") for x in xs)])
    head = [_k(x) if xkey == "n_subs" else f"{x:,}" for x in xs]
    return _table(["system", "metric", *head], rows)


def matching_section(res: Results) -> list[str]:
    """The interleaved matching runs at the bars' setting (``experiment = matching``)."""
    rows_all = res.values("matching_time", experiment="matching")
    if not rows_all:
        return []
    p0 = rows_all[0]["params"]
    n = max(int(r["params"]["n_subs"]) for r in rows_all)
    dists = [d for d in ("uniform", "zipf") if any(r["params"]["distribution"] == d
                                                   for r in rows_all)]
    L = [f"## Matching at the bars' setting, systems interleaved ({_k(n)} subscriptions, "
         f"d = {p0['d']}, g = {p0['g']}, {p0['n_clients']:,} clients)", "",
         "Every system is filled with the same subscriptions, then each one's `match()` of "
         f"the same events is timed in {p0.get('match_rounds', '?')} rounds, one call per "
         "system a round, the order rotated each round, so that load changes on the shared "
         "machine fall on every system alike; the best round counts. Load average (1 min) "
         f"around the rounds: {_matching_load(res)}. Deliveries are counted on "
         "the check sample; DLS's include the cells' and the client filters' false "
         "positives, MICS (exact) checks its candidates' boxes."
         + (" This experiment was re-run (see Machine): the Figure 6 rows above are the "
            "first run's, with the code of that run; the bars are read from this table."
            if any("matching" in rr.get("experiments", [])
                   for rr in res.meta.get("reruns") or []) else ""), ""]
    rows = []
    for system in res.systems:
        t = [res.get(system, "matching_time", experiment="matching", distribution=d,
                     n_subs=n) for d in dists]
        if all(v is None for v in t):
            continue
        dpe = [res.get(system, "deliveries_per_event", experiment="matching",
                       distribution=d) for d in dists]
        fn = [res.get(system, "false_negatives", experiment="matching", distribution=d)
              for d in dists]
        rows.append([LABEL.get(system, system), *(_fmt(v) for v in t),
                     *(_fmt(v, 1) for v in dpe), *(_fmt(v, 0) for v in fn)])
    L += _table(["system", *(f"{d} µs/event" for d in dists),
                 *(f"{d} deliveries/event" for d in dists),
                 *(f"{d} false negatives" for d in dists)], rows) + [""]
    for d in dists:
        L += [f"DLS, {d}: {_speedup_line(res, 'matching', distribution=d, n_subs=n)}."]
    return L + [""]


def _speedup_line(res: Results, experiment: str, **match: Any) -> str:
    parts = []
    for other in ("bruteforce", "mics", "rtree"):
        v = res.get("dls", f"speedup_vs_{other}", experiment=experiment, **match)
        if v is not None:
            parts.append(f"{v:,.1f}× {LABEL[other]}")
    return ", ".join(parts) if parts else "—"


def build_report(res: Results, plots: dict[str, str]) -> str:
    meta = res.meta
    mach = meta.get("machine", {})
    L: list[str] = ["# DLS vs the paper: reproduction report", ""]
    L += [f"Generated by `benchmarks/report.py` from `{meta.get('results_path', 'paper.json')}` "
          f"(mode **{meta.get('mode', '?')}**, run started {meta.get('started_utc', '?')}, "
          f"wall time {meta.get('wall_time_s', 0) / 60:.1f} min).", ""]
    dirty = (" (uncommitted changes to dls/ or broker_node/)"
             if mach.get("git_dirty_core_files") else "")
    cmd = " ".join(Path(c).name if i == 0 else c for i, c in enumerate(meta.get("command", [])))
    L += ["## Machine", "",
          f"{mach.get('cpu_count', '?')} cores ({mach.get('cpu_model', '?')}), Python "
          f"{mach.get('python', '?')}, numpy {mach.get('numpy', '?')}, "
          f"{mach.get('platform', '?')}; code at commit `{mach.get('git_commit', '?')[:12]}`"
          f"{dirty}."
          f" Command: `{cmd}`. The paper's machine: 2.6 GHz 6-core Xeon, 64 GB, Java (§6.1).",
          ""]
    for rr in meta.get("reruns") or []:
        rc = " ".join(Path(c).name if i == 0 else c for i, c in enumerate(rr.get("command", [])))
        rdirty = (" (uncommitted changes to dls/ or broker_node/)"
                  if rr.get("machine", {}).get("git_dirty_core_files") else "")
        L += [f"Re-run of {', '.join(rr.get('experiments', []))}, merged into these results: "
              f"started {rr.get('started_utc', '?')}, {rr.get('wall_time_s', 0) / 60:.1f} min, "
              f"code at commit `{rr.get('machine', {}).get('git_commit', '?')[:12]}`{rdirty}, "
              f"command `{rc}`; its records replace that experiment's records of the first "
              "run.", ""]
    ran = meta.get("systems", res.systems)
    L += ["## Systems", "",
          "| system | what |", "|---|---|",
          "| DLS | `BrokerState`, exact aggregation (the default): bit-sliced CBF client bank "
          "sized for the mean distinct labels per client at 1 %, CBF routing tables m = 2^20, "
          "k = 7; one broker, two neighbours; events matched as one numpy batch |",
          "| DLS (paper mode) | the same broker with the paper's SFF-based aggregation "
          "(Algorithms 2–3) |",
          "| MICS | `benchmarks/baselines/mics.py`: cells numbered along a Hilbert curve, a "
          "subscription's cells as ranges of curve positions in one sorted segment index "
          "(a B+-tree's leaf level), aggregation against the ranges already advertised, "
          "deletion; candidates are checked against their boxes (`precision=\"exact\"`), so "
          "it delivers exactly, where the paper's MICS stops at the cells |",
          "| R-tree | `benchmarks/baselines/rtree_index.py`: libspatialindex R*-tree of the "
          "boxes, bulk-loaded when empty (or when a batch is ≥ 1/4 of the live entries), "
          "otherwise one insert per entry; events as point queries (`intersection_v`) |",
          "| brute force | column-major float32 comparisons, one event at a time |", "",
          f"Ran: {', '.join(LABEL.get(s, s) for s in ran)}."]
    skipped = meta.get("systems_skipped") or []
    if skipped:
        L += [f"Skipped (module missing at run time): {', '.join(skipped)}."]
    for f in meta.get("failures") or []:
        L += [f"* **failed**: {f}"]
    fns = res.values("false_negatives")
    missed = [r for r in fns if r["value"] != 0]
    L += ["", "Units: times are wall clock in µs (the paper's 10^-3 ms); traffic in labels "
          "(DLS) or ranges (MICS); exact matchers forward nothing. Every system's deliveries "
          "on a sample of events are checked against brute force in the same run: "
          + (f"{len(missed)} of the {len(fns)} `false_negatives` records are not 0 ("
             + ", ".join(sorted({LABEL.get(r['system'], r['system']) for r in missed}))
             + ")." if missed else
             f"all {len(fns)} `false_negatives` records are 0."), ""]
    L += ["## The bars of issue 5", ""] + (_bar_lines(res) or ["* not measured in this run"])
    L += ["", "## The bars of issue 17", ""] + (_bar17_lines(res)
                                               or ["* not measured in this run"])
    L += [""] + _kernels_note(res)

    for table, dist, metric, what, unit, digits in (
            ("table1", "uniform", "insert_time", "insertion time", "µs per subscription", 3),
            ("table2", "zipf", "insert_time", "insertion time", "µs per subscription", 3),
            ("table3", "uniform", "forwarded", "forwarding traffic", "labels / ranges", 0),
            ("table4", "zipf", "forwarded", "forwarding traffic", "labels / ranges", 0),
            ("table5", "uniform", "delete_time", "deletion time", "µs per subscription", 3),
            ("table6", "zipf", "delete_time", "deletion time", "µs per subscription", 3)):
        L += [f"## Table {table[-1]}: subscription {what}, {dist} ({unit})", ""]
        if not res.values(metric, experiment="scaling", distribution=dist):
            L += NOT
            continue
        L += scaling_table(res, table, metric, dist, digits) + [""]
        if table in ("table5", "table6"):
            L += _stop_notes(res, "scaling", "delete_stopped_at", dist)
    L += _stop_notes(res, "scaling", "stopped_at")
    L += ["## Figure 6: event matching time vs subscriptions (µs per event)", ""]
    if not res.values("matching_time", experiment="scaling"):
        L += NOT
    else:
        L += [f"![Figure 6]({plots.get('fig6', '')})", ""] if "fig6" in plots else []
        rows = []
        sizes = res.sizes("scaling")
        for dist in ("uniform", "zipf"):
            for system in res.systems:
                for d, g in DIMS:
                    vals = [res.get(system, "matching_time", experiment="scaling",
                                    distribution=dist, d=d, g=g, n_subs=n) for n in sizes]
                    if any(v is not None for v in vals):
                        rows.append([dist, LABEL[system], f"{d}, {g}", *(_fmt(v) for v in vals)])
        L += _table(["data", "system", "d, g", *(_k(n) for n in sizes)], rows) + [""]
        L += ["The paper publishes Figure 6 only as a plot (DLS flat and below MICS).", ""]
    L += matching_section(res)
    if not res.values("insert_time", experiment="granules"):
        L += ["## Table 8 / Figure 7: insertion time vs granules", "", *NOT,
              "## Table 9 / Figure 8: event matching time vs granules", "", *NOT]
    else:
        L += ["## Table 8 / Figure 7: insertion time vs granules (µs per subscription)", ""]
        L += [f"![Figure 7]({plots['fig7']})", ""] if "fig7" in plots else []
        L += granule_table(res, "table8", "insert_time") + [""]
        L += ["## Table 9 / Figure 8: event matching time vs granules (µs per event)", ""]
        L += [f"![Figure 8]({plots['fig8']})", ""] if "fig8" in plots else []
        L += granule_table(res, "table9", "matching_time") + [""]
        lp = [res.get("dls", "labels_per_subscription", experiment="granules",
                      distribution="uniform", g=g) for g in GRANULES]
        L += ["Labels per subscription (uniform): "
              + ", ".join(f"g={g}: {_fmt(v, 1)}" for g, v in zip(GRANULES, lp, strict=True)
                          if v is not None) + ".", ""]
    L += ["## Figure 9 / Table 10: false-positive rate", ""]
    if not res.values("fp_client"):
        L += NOT
    else:
        for key, cap in (("fig9", "Figure 9"), ("fig10", "Figure 10 / Table 10")):
            if key in plots:
                L += [f"![{cap}]({plots[key]})", ""]
        fp0 = res.values("fp_client")[0]["params"]
        L += [x.format(**fp0) for x in FP_DEFINITION] + [""] + fp_tables(res) + [""]
        L += _fp_baselines(res)
    for exp, xkey, title in (("growth_subs", "n_subs", "Beyond the paper: growth in "
                              "subscriptions (uniform, d=3, g=32, {other} clients)"),
                             ("growth_clients", "n_clients", "Beyond the paper: growth in "
                              "clients (uniform, d=3, g=32, {other} subscriptions)")):
        rs = res.values("matching_time", experiment=exp)
        if not rs:
            L += [f"## {title.format(other='?')}", "", *NOT]
        else:
            other = rs[0]["params"]["n_clients" if xkey == "n_subs" else "n_subs"]
            L += [f"## {title.format(other=f'{other:,}')}", ""]
            if exp in plots:
                L += [f"![{exp}]({plots[exp]})", ""]
            L += growth_table(res, exp, xkey) + [""] + _stop_notes(res, exp)
    L += ["## Memory, bytes per subscription", ""]
    L += _memory_table(res) + [""]
    L += ["## Where we agree, where we differ, and why", ""] + discussion(res)
    return "\n".join(L) + "\n"


FP_READINGS = (
    ("fp_client_per_negative", "client filters, false deliveries / (event, client) pairs that "
     "should not be delivered — the classic per-query Bloom rate"),
    ("fp_network_per_event", "network filter, false passes / all events"),
    ("fp_network", "network filter, false passes / passed events"),
    ("fp_client", "client deliveries, false / all deliveries"),
)
FP_DEFINITION = [
    "The paper does not define its rate beyond its two sources (the cells and the Bloom "
    "filters, §5.1/§6.2.3) and does not give k, the number of clients or how events are "
    "drawn. We measure on the §6.2.2 workloads (d = 3, {n_subs:,} subscriptions, domain "
    "[0, 2^20 − 1], interval length up to 2^20/16, {n_clients:,} clients, {n_events:,} "
    "events drawn like the subscriptions' lower bounds), against brute force on every "
    "event, two ways:",
    "",
    "* **client deliveries** (Algorithm 4): each client's CBF has m counters (4-bit) and "
    "k = round(m/n·ln 2) hash functions (n = mean distinct labels per client, k in "
    "[1, 16]). A false positive is a delivery (event, client) where none of the client's "
    "subscriptions contains the event; the rate is false-positive deliveries / all "
    "deliveries — the share of what clients receive that their SDK drops. *cells only* is "
    "the same with exact label sets (no Bloom error). *of negative pairs* divides the same "
    "false deliveries by the (event, client) pairs that should not be delivered instead: "
    "the classic Bloom-filter false-positive rate, one filter query per pair.",
    "* **network** (SFF/ERT): one CBF of m counters holding every distinct label of the "
    "subscriptions (what the broker advertises and a neighbour's ERT holds), k by the "
    "same rule. A false positive is an event the filter passes although no subscription "
    "contains it; the rate is false positives / passed events (also given per event).",
    "",
    "All count the same thing as the paper (deliveries or forwarded events nobody asked "
    "for, from cells plus Bloom error); they differ in the denominator, which the paper "
    "does not state, so the bar above is judged on each.",
]


def _fp_baselines(res: Results) -> list[str]:
    rows = []
    gs = sorted({r["params"]["g"] for r in res.values("false_positive_rate",
                                                        experiment="granules")})
    for dist in ("uniform", "zipf"):
        for system in res.systems:
            vals = [res.get(system, "false_positive_rate", experiment="granules",
                            distribution=dist, g=g) for g in gs]
            if any(v is not None for v in vals):
                rows.append([dist, LABEL[system],
                             *(_fmt(None if v is None else 100 * v) for v in vals)])
    if not rows:
        return []
    return (["Every system's false-positive rate of client deliveries (%) on a sample of the "
             "same workloads with its default filters (DLS client filters sized at 1 %):", ""]
            + _table(["data", "system", *(str(g) for g in gs)], rows) + [""])


def _stop_notes(res: Results, experiment: str, metric: str = "stopped_at",
                dist: str | None = None) -> list[str]:
    out = []
    for r in res.values(metric, experiment=experiment):
        p = r["params"]
        if dist is not None and p.get("distribution") != dist:
            continue
        who = (f"{LABEL.get(r['system'], r['system'])} ({p.get('distribution')}, d={p.get('d')}, "
               f"g={p.get('g')}, {p.get('n_clients'):,} clients)")
        if metric == "delete_stopped_at":
            out.append(f"* {who}: deletes stopped at size {int(r['value']):,} when the "
                       f"{p.get('budget_s'):.0f} s delete budget ran out; the last time shown "
                       "is measured on the subscriptions deleted by then.")
            continue
        probe = res.get(r["system"], "insert_time_probe", experiment=experiment,
                        distribution=p.get("distribution"), d=p.get("d"), g=p.get("g"),
                        n_clients=p.get("n_clients"))
        rate = f" (measured rate {probe:,.1f} µs/sub)" if probe else ""
        if r["value"] == 0:
            out.append(f"* {who} did not run: inserting even the first step would have "
                       f"exceeded the {p.get('budget_s'):.0f} s budget{rate}.")
        else:
            out.append(f"* {who} stopped at {int(r['value']):,} subscriptions: the next step "
                       f"would have exceeded the {p.get('budget_s'):.0f} s budget{rate}.")
    return out + ([""] if out else [])


def _memory_table(res: Results) -> list[str]:
    rows = []
    n = max(res.sizes("scaling") or [0])
    for system in res.systems:
        vals = [res.get(system, "bytes_per_subscription", experiment="scaling",
                        distribution=dist, d=d, g=g, n_subs=n)
                for dist in ("uniform", "zipf") for d, g in DIMS]
        if any(v is not None for v in vals):
            rows.append([LABEL[system], *(_fmt(v, 1) for v in vals)])
    head = [f"{dist[:4]} d={d}" for dist in ("uniform", "zipf") for d, _ in DIMS]
    return ([f"At {_k(n)} subscriptions (Tables 1–6 runs), `memory_bytes()` / "
             "subscriptions:", ""] + _table(["system", *head], rows))


def _pct(v: float | None) -> str:
    return "—" if v is None else f"{100 * v:.3f}%"


def _ratio(a: float | None, b: float | None) -> str:
    return "—" if a is None or b is None or b == 0 else f"{a / b:,.1f}×"


# -- conclusions drawn from comparisons ------------------------------------------------------
FLAT = 1.5
"""A change by less than this factor, either way, reads as "no trend"."""
SAME = 1.25
"""Two values within this factor of each other read as "about the same"."""
CLOSE = 2.0
"""Two values within this factor of each other read as "close" in level."""


def _div(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b == 0 else a / b


def _trend(r: float | None) -> str | None:
    """``"flat"``, ``"grows"`` or ``"falls"`` for a ratio last / first (None: unknown)."""
    if r is None:
        return None
    return "flat" if 1 / FLAT <= r <= FLAT else ("grows" if r > 1 else "falls")


def _moves(r: float | None) -> str:
    """A ratio last / first in words: "grows 3.2×", "falls 2.0×" or "stays within 1.5×"."""
    t = _trend(r)
    if r is None or t is None:
        return "is not recorded at both ends"
    if t == "flat":
        return f"stays within {FLAT:g}× ({r:.2f}×)"
    return f"grows {r:,.1f}×" if t == "grows" else f"falls {1 / r:,.1f}×"


def _within(a: float | None, b: float | None, factor: float) -> bool | None:
    r = _div(a, b)
    return None if r is None else 1 / factor <= r <= factor


def _versus(ours: float | None, theirs: float | None, whose: str = "the paper's") -> str:
    """How ``ours`` compares with ``theirs``: "about the paper's", "3.1× the paper's"..."""
    r = _div(ours, theirs)
    if r is None:
        return f"not comparable with {whose}"
    if 1 / SAME <= r <= SAME:
        return f"about {whose} ({r:.2f}×)"
    return f"{r:,.1f}× {whose}" if r > 1 else f"{1 / r:,.1f}× below {whose}"


def _agree(ours: Sequence[str | None], theirs: Sequence[str | None]) -> str | None:
    """``"agrees with"`` / ``"differs from"`` for two lists of trends (None: unknown)."""
    pairs = [(a, b) for a, b in zip(ours, theirs, strict=True) if a and b]
    if not pairs:
        return None
    return "agrees with" if all(a == b for a, b in pairs) else "differs from"


def _deliveries_note(res: Results, first: int, last: int) -> str:
    parts = []
    for dist in ("uniform", "zipf"):
        a, b = (res.get("dls", "deliveries_per_event", experiment="scaling", distribution=dist,
                        d=3, g=32, n_subs=k) for k in (first, last))
        if a is not None and b is not None:
            parts.append(f"{dist}: {a:.1f} → {b:.1f} clients per event")
    return "d = 3, " + "; ".join(parts) if parts else "not recorded"


def _withdraw_note(res: Results) -> str:
    bad = res.values("withdrawn_mismatch")
    complete = [r for r in res.values("withdrawn") if r["system"] == "dls"]
    txt = ""
    if any(r["system"] == "dls" for r in bad):
        txt = ("DLS's withdrawals differ from its advertisements in some runs (see the "
               "`withdrawn_mismatch` records). ")
    elif complete:
        txt = ("DLS withdrew exactly the labels it advertised in every run that deleted "
               "everything (no `withdrawn_mismatch` record). ")
    paper = [r for r in bad if r["system"] == "dls-paper"]
    if paper:
        where = ", ".join(dict.fromkeys(  # one entry per run, not per repeated record
            f"{r['params'].get('experiment', '')} {r['params']['distribution']} "
            f"d = {r['params']['d']}: {int(r['value']):,} labels".strip() for r in paper))
        txt += ("Paper mode, after every subscription was deleted, still had labels "
                f"advertised that it never withdrew ({where}). Its SFF counters are 4-bit "
                "and saturate at 15; a saturated counter is never decremented, so the "
                "paper's 'withdraw when the count is 1' cannot fire for a label once more "
                "than 15 subscriptions held it. ")
    return txt


def _paper_mode_note(res: Results) -> str:
    ins = sorted((r["params"]["n_subs"], r["value"], r["params"]["d"], r["params"]["g"])
                 for r in res.values("insert_time", experiment="scaling",
                                     distribution="uniform") if r["system"] == "dls-paper")
    probes = [r for r in res.values("insert_time_probe", experiment="scaling")
              if r["system"] == "dls-paper"]
    cut = [r for r in res.values("stopped_at", experiment="scaling")
           if r["system"] == "dls-paper"]
    if not ins and not probes:
        return ""
    txt = ("Paper mode applies the paper's query-then-add rule label by label through "
           "scalar CBF calls (`broker_node.state._paper_add`): ")
    if ins:
        first_per_d = {d: (n_, v, g) for n_, v, d, g in sorted(ins, reverse=True)}
        parts = []
        for d, (n_, v, g) in sorted(first_per_d.items()):
            dls = res.get("dls", "insert_time", experiment="scaling",
                          distribution="uniform", d=d, g=g, n_subs=n_)
            parts.append(f"{_fmt(v)} µs/sub (uniform d = {d}, {_k(n_)}; "
                         f"{_versus(v, dls, 'the default')})")
        txt += ", ".join(parts)
    else:
        txt += ", ".join(f"{_fmt(r['value'])} µs/sub (probe, {r['params'].get('distribution')}"
                         f" d = {r['params'].get('d')})" for r in probes[:3])
    if cut:
        txt += (f"; the time budget stopped it in {len(cut)} of the scaling configurations "
                "(notes under Table 6)")
    return txt + "."


def _delete_cut_note(res: Results) -> str:
    cut = sorted({(LABEL.get(r["system"], r["system"]), r["params"].get("distribution"),
                   r["params"].get("d")) for r in res.values("delete_stopped_at",
                                                               experiment="scaling")})
    if not cut:
        return "Every system deleted every subscription within its budget."
    return ("These ran out of the delete budget, so their delete rows are measured on the "
            "subscriptions deleted by then: " + ", ".join(f"{s_} ({d_}, d = {dd})"
                                                          for s_, d_, dd in cut) + ".")


class _Scaling:
    """Lookups in the ``scaling`` experiment at its largest size (or ``size``)."""

    def __init__(self, res: Results) -> None:
        self.res = res
        self.sizes = res.sizes("scaling")
        self.n = max(self.sizes or [0])
        self.first = min(self.sizes or [0])
        # the paper's sizes to compare with: the run's own where the paper has them
        self.paper_n = self.n if self.n in SIZES else SIZES[-1]
        self.paper_first = self.first if self.first in SIZES else SIZES[0]
        self.paper_is = ("the paper" if self.paper_n == self.n
                         else f"the paper at {_k(self.paper_n)}")

    def __call__(self, system: str, metric: str, dist: str = "uniform", d: int = 3,
                 g: int = 32, size: int | None = None) -> float | None:
        return self.res.get(system, metric, experiment="scaling", distribution=dist, d=d,
                            g=g, n_subs=self.n if size is None else size)

    def paper(self, table: str, system: str, d: int, g: int,
              size: int | None = None) -> float | None:
        """The paper's value at ``size`` (default: ``paper_n``), if it has one."""
        row = PAPER[table].get((system, d, g))
        at = self.paper_n if size is None else size
        return None if row is None or at not in SIZES else row[SIZES.index(at)]


def _insertion(res: Results, sc: _Scaling) -> list[str]:
    dls_ins = [sc("dls", "insert_time", "uniform", d, g) for d, g in DIMS]
    if all(v is None for v in dls_ins):
        return []
    mics_ins = [sc("mics", "insert_time", "uniform", d, g) for d, g in DIMS]
    pub = [sc.paper("table1", "dls", d, g) for d, g in DIMS]
    steps = [v for v in (sc("dls", "insert_time", "uniform", 3, 32, k) for k in sc.sizes)
             if v is not None]
    swing = (max(steps) / min(steps)) if steps else None
    ratios = [r for r in map(_div, dls_ins, pub) if r is not None]
    level = ("" if not ratios else
             " DLS's times are " + (f"{min(ratios):,.1f}" if len(set(ratios)) == 1 else
                                    f"{min(ratios):,.1f}–{max(ratios):,.1f}")
             + f"× {sc.paper_is}'s. Our insert "
             "time covers the whole path from raw boxes (input checks, cells, label "
             "expansion, exact aggregation counts, the registry, k counters per label in the "
             "bit-sliced client bank), in Python driving numpy; the paper's Algorithm 2 "
             "starts from labels, in Java.")
    ours_t = [_trend(_div(sc("dls", "insert_time", "uniform", d, g),
                          sc("dls", "insert_time", "uniform", d, g, sc.first)))
              for d, g in DIMS]
    paper_t = [_trend(_div(sc.paper("table1", "dls", d, g), sc.paper("table1", "dls", d, g,
                                                                      sc.paper_first)))
               for d, g in DIMS]
    same_range = (sc.paper_first, sc.paper_n) == (sc.first, sc.n)
    shape = _agree(ours_t, paper_t)
    pub_mics = [sc.paper("table1", "mics", d, g) for d, g in DIMS]

    def shape_of(trends: list[str | None]) -> str:
        return ", ".join(f"{t} for d = {d}" for t, (d, _) in zip(trends, DIMS, strict=True)
                         if t)

    return [
        "**Insertion (Tables 1–2).** At " + _k(sc.n) + " uniform subscriptions DLS inserts at "
        + " / ".join(_fmt(v) for v in dls_ins) + " µs per subscription for d = 2 / 3 / 4 "
        f"({sc.paper_is}: " + " / ".join(_fmt(v) for v in pub) + ") and MICS at "
        + " / ".join(_fmt(v) for v in mics_ins) + f" ({sc.paper_is}: "
        + " / ".join(_fmt(v) for v in pub_mics) + ")." + level
        + (f" Steps of the d = 3 configuration differ by up to {_fmt(swing, 1)}× in this "
           "run." if swing else "")
        + (f" From {_k(sc.first)} to {_k(sc.n)} subscriptions DLS's cost per subscription: "
           + shape_of(ours_t) + "; the paper's" + ("" if same_range else
                                                    f" ({_k(sc.paper_first)} → "
                                                    f"{_k(sc.paper_n)})")
           + ": " + shape_of(paper_t)
           + f" (a change within {FLAT:g}× counts as flat): the shape {shape} the paper's."
           if shape else "")
        + " " + _paper_mode_note(res), ""]


def _traffic(res: Results, sc: _Scaling) -> list[str]:
    fu = [sc("dls", "forwarded", "uniform", d, g) for d, g in DIMS]
    if all(v is None for v in fu):
        return []
    fz = [sc("dls", "forwarded", "zipf", d, g) for d, g in DIMS]
    mu = [sc("mics", "forwarded", "uniform", d, g) for d, g in DIMS]
    mz = [sc("mics", "forwarded", "zipf", d, g) for d, g in DIMS]
    cells = [g**d for d, g in DIMS]
    pu = [sc.paper("table3", "dls", d, g) for d, g in DIMS]
    pz = [sc.paper("table4", "dls", d, g) for d, g in DIMS]
    full = [_div(v, c) for v, c in zip(fu, cells, strict=True)]
    if all(f is not None and f >= 0.95 for f in full) and all(
            p is not None and p / c >= 0.95 for p, c in zip(pu, cells, strict=True)):
        uni = "both are 95 % or more of every cell ("
    else:
        uni = "ours cover " + " / ".join(
            "—" if f is None else f"{100 * f:.0f} %" for f in full) + " of the cells ("
    uni += " / ".join(f"{c:,}" for c in cells) + ")"
    agree = [_within(a, b, 1.05) for a, b in zip(fu, pu, strict=True)]
    uni += ("; within 5 % of the paper's for every d: agreement." if agree and all(agree)
            else "; not within 5 % of the paper's for every d.")
    zr = [r for r in map(_div, fz, pz) if r is not None]
    zipf = ("" if not zr else
            f" Ours are {min(zr):,.0f}–{max(zr):,.0f}× the paper's. Our generator draws "
            "each dimension's lower bound from a truncated Zipf law over the g cells "
            "(s = 1.2) and adds up to two cells of length; the paper does not describe its "
            "Zipf generator.")
    below = [m < d_ for m, d_ in zip(mu, fu, strict=True) if m is not None and d_ is not None]
    mics = ("" if not below else
            " Our MICS forwards only the curve positions nobody covered yet, so its traffic "
            "is bounded by the cells too: " + ("below DLS's for every d"
                                               if all(below) else "not below DLS's for every d")
            + ". The paper's uniform MICS rows are one range per subscription (100,000 … "
            "500,000), no aggregation at all.")
    return [
        "**Forwarding traffic (Tables 3–4).** DLS forwards a label once, when its count "
        "goes from 0 to 1, so its traffic is bounded by the cells the subscriptions touch. "
        "Uniform: " + " / ".join(_fmt(v, 0) for v in fu) + " labels for d = 2 / 3 / 4 at "
        + _k(sc.n) + f", against {sc.paper_is}: " + " / ".join(_fmt(v, 0) for v in pu)
        + ": " + uni + " Zipf: " + " / ".join(_fmt(v, 0) for v in fz)
        + f" against {sc.paper_is}: " + " / ".join(_fmt(v, 0) for v in pz) + "." + zipf
        + " MICS traffic: " + " / ".join(_fmt(v, 0) for v in mu) + " ranges (uniform) and "
        + " / ".join(_fmt(v, 0) for v in mz) + " (Zipf)." + mics, ""]


def _deletion(res: Results, sc: _Scaling) -> list[str]:
    dd = [sc("dls", "delete_time", "uniform", d, g) for d, g in DIMS]
    if all(v is None for v in dd):
        return []
    di = [sc("dls", "insert_time", "uniform", d, g) for d, g in DIMS]
    ours = [_div(a, b) for a, b in zip(dd, di, strict=True)]
    pub = [_div(sc.paper("table5", "dls", d, g), sc.paper("table1", "dls", d, g))
           for d, g in DIMS]
    same_order = [r is not None and 1 / 3 <= r <= 3 for r in ours if r is not None]
    verdict = ""
    if same_order:
        verdict = (" A deletion mirrors an insertion (exact counts, then the client bank); "
                   "here it costs " + " / ".join("—" if r is None else f"{r:.1f}×"
                                                 for r in ours)
                   + " an insertion, " + ("the same order (within 3×) for every d"
                                          if all(same_order) else "not the same order for "
                                          "every d")
                   + f"; in {sc.paper_is} " + " / ".join("—" if r is None else f"{r:.1f}×"
                                                    for r in pub) + ".")
    return [
        "**Deletion (Tables 5–6).** DLS deletes at " + " / ".join(_fmt(v) for v in dd)
        + " µs per subscription (uniform, d = 2 / 3 / 4, the step ending at " + _k(sc.n)
        + f"; {sc.paper_is}: " + " / ".join(_fmt(sc.paper("table5", "dls", d, g))
                                            for d, g in DIMS)
        + ")." + verdict + " " + _withdraw_note(res)
        + "The paper's MICS has no deletion; ours does (it rebuilds its sorted "
        "index once per delete batch), as do the R-tree (one delete per entry) and brute "
        "force (compaction). " + _delete_cut_note(res), ""]


def _matching(res: Results, sc: _Scaling) -> list[str]:
    mt = {s_: v for s_ in res.systems if (v := sc(s_, "matching_time")) is not None}
    if not mt:
        return []
    speed = _speedup_line(res, "scaling", distribution="uniform", d=3, g=32, n_subs=sc.n)
    grow = {s_: _div(sc(s_, "matching_time"), sc(s_, "matching_time", size=sc.first))
            for s_ in res.systems}
    size_ratio = sc.n / sc.first if sc.first else None
    bf = grow.get("bruteforce")
    linear = ("" if bf is None or not size_ratio else
              f" Brute force's time grows {bf:.1f}× for {size_ratio:.0f}× the subscriptions"
              + (", in proportion." if _within(bf, size_ratio, SAME) else "."))
    dls_g = _trend(grow.get("dls"))
    flat = ("" if dls_g is None else
            " DLS matches a batch of events with k row gathers and ANDs over the bit-sliced "
            "client filters, which do not depend on the number of subscriptions; its "
            f"per-event time {_moves(grow.get('dls'))}, while the clients each event goes to, "
            "which DLS decodes and hands out, change (" + _deliveries_note(res, sc.first, sc.n)
            + ").")
    paper_gap = PAPER["table9"][("uniform", "mics")][1] / PAPER["table9"][("uniform", "dls")][1]
    ours_gap = _div(mt.get("mics"), mt.get("dls"))
    gap = ("" if ours_gap is None else
           f" In the paper's Table 9 (uniform, g = 32) MICS is {paper_gap:,.0f}× slower than "
           "DLS; here " + (f"{ours_gap:,.1f}× slower" if ours_gap >= 1 else
                           f"{1 / ours_gap:,.1f}× faster")
           + ", a " + ("smaller" if ours_gap < paper_gap else "larger")
           + " gap. Our MICS is a vectorised sorted-array index that answers a batch with one "
           "`searchsorted`, not a per-event B+-tree walk.")
    return [
        "**Matching (Figure 6).** At " + _k(sc.n) + " uniform d = 3 / g = 32 subscriptions: "
        + ", ".join(f"{LABEL[s_]} {_fmt(v)} µs/event" for s_, v in mt.items())
        + f" (DLS is {speed}). From {_k(sc.first)} to {_k(sc.n)} subscriptions the per-event "
        "time changes by " + ", ".join(f"{LABEL[s_]} {_ratio(r, 1.0)}"
                                       for s_, r in grow.items() if r is not None)
        + "." + flat + linear + gap, ""]


def _matching_bars_note(res: Results) -> list[str]:
    """The MICS bar against the interleaved matching records."""
    exp, n = _bar_experiment(res)
    if exp != "matching":
        return []

    def get(system: str, metric: str, dist: str = "uniform") -> float | None:
        return res.get(system, metric, experiment="matching", distribution=dist)

    dls, mics = get("dls", "matching_time"), get("mics", "matching_time")
    dd, md = get("dls", "deliveries_per_event"), get("mics", "deliveries_per_event")
    if dls is None or mics is None or dd is None or md is None:
        return []
    clients = int(res.values("matching_time", experiment="matching")[0]["params"]
                  ["n_clients"])
    slots = -(-clients // 64) * 64
    zd, zm = get("dls", "matching_time", "zipf"), get("mics", "matching_time", "zipf")
    zipf = ("" if zd is None or zm is None else
            "; on Zipf data DLS is " + (f"{zm / zd:,.1f}× faster" if zm >= zd
                                         else f"{zd / zm:,.1f}× slower") + " than MICS")
    return [
        "**DLS's matching time and the MICS bar.** In the interleaved runs at "
        f"{_k(n)} uniform subscriptions DLS takes {_fmt(dls)} µs per event against MICS's "
        f"{_fmt(mics)}: DLS is " + (f"{mics / dls:,.1f}× faster" if mics >= dls
                                    else f"{dls / mics:,.1f}× slower")
        + ", so the 10× bar is " + ("met" if mics / dls >= 10 else "not met") + zipf
        + f". DLS decodes {slots:,} client slots per event for {clients:,} clients and "
        f"delivers {_fmt(dd, 1)} per event: a subscription covers every cell its box "
        f"touches, so an event goes to every client with a subscription in its cell. MICS "
        f"checks its candidates' boxes and delivers {_fmt(md, 1)} per event.", ""]


def _granules(res: Results) -> list[str]:
    gs = sorted({r["params"]["g"] for r in res.values("insert_time", experiment="granules")})
    if not gs:
        return []

    def row(system: str, metric: str) -> list[float | None]:
        return [res.get(system, metric, experiment="granules", distribution="uniform", g=g_)
                for g_ in gs]

    lp, di, dm = (row("dls", m) for m in ("labels_per_subscription", "insert_time",
                                           "matching_time"))
    mi, mm = row("mics", "insert_time"), row("mics", "matching_time")
    pub = {(s_, m): dict(zip(GRANULES, PAPER[t][("uniform", s_)], strict=True))
           for s_ in ("dls", "mics") for m, t in (("insert_time", "table8"),
                                                  ("matching_time", "table9"))}

    def sentence(name: str, ours: list[float | None], system: str, metric: str) -> str:
        p = pub[(system, metric)]
        ours_t = _trend(_div(ours[-1], ours[0]))
        paper_t = _trend(_div(p.get(gs[-1]), p.get(gs[0])))
        line = (f"{name} " + " → ".join(_fmt(v) for v in ours) + " µs, "
                + (ours_t or "not recorded at both ends"))
        if paper_t and ours_t:
            line += (f"; the paper's {_fmt(p.get(gs[0]))} → {_fmt(p.get(gs[-1]))} µs, "
                     f"{paper_t}: " + ("as in the paper" if ours_t == paper_t
                                       else "unlike the paper"))
        return line

    return [
        "**Granules (Tables 8–9, Figures 7–8).** With interval lengths fixed in domain "
        "units, labels per subscription go from " + _fmt(lp[0], 1) + " to "
        + _fmt(lp[-1], 1) + f" between g = {gs[0]} and g = {gs[-1]} (uniform; the paper "
        "only says 'the subscription size is 4'). "
        + "; ".join(sentence(name, ours, s_, m) for name, ours, s_, m in (
            ("DLS insertion", di, "dls", "insert_time"),
            ("DLS matching", dm, "dls", "matching_time"),
            ("MICS insertion", mi, "mics", "insert_time"),
            ("MICS matching", mm, "mics", "matching_time"))
            if any(v is not None for v in ours))
        + f" (a change within {FLAT:g}× counts as flat).", ""]


def _false_positives(res: Results) -> list[str]:
    if not res.values("fp_client"):
        return []

    def fp(metric: str, dist: str, m: int = 2**16, frac: float = NARROW) -> float | None:
        return res.get("dls", metric, experiment="fp_m", distribution=dist, m=m,
                       length_frac=frac)

    cu, cz = fp("fp_client_cells", "uniform"), fp("fp_client_cells", "zipf")
    bu, bz = fp("fp_client", "uniform"), fp("fp_client", "zipf")
    extra = max((b_ - c_ for b_, c_ in ((bu, cu), (bz, cz))
                 if b_ is not None and c_ is not None), default=0.0)
    bloom = ("the Bloom filters add less than a point" if extra < 0.01 else
             f"the Bloom filters add up to {100 * extra:.1f} points")
    nu, nz = fp("fp_client_per_negative", "uniform"), fp("fp_client_per_negative", "zipf")
    paper_u, paper_z = PAPER["table10"]["uniform"][-1], PAPER["table10"]["zipf"][-1]
    harder = ("" if nu is None or nz is None else
              " Zipf is the " + ("harder" if nz > nu else "easier") + " case here; in the "
              "paper it is the " + ("easier" if paper_z < paper_u else "harder") + " one.")
    climb = []
    for dist in ("uniform", "zipf"):
        lo, hi = fp("fp_client_per_negative", dist, m=2**8), fp("fp_client_per_negative", dist)
        if lo is not None and hi is not None:
            climb.append(f"{dist} {_pct(hi)} → {_pct(lo)}")
    smaller = ("" if not climb else
               " From m = 2^16 down to m = 2^8 the per-pair rate goes " + ", ".join(climb)
               + ".")
    wide = []
    for dist, row in (("uniform", PAPER["table10"]["uniform"]),
                      ("zipf", PAPER["table10"]["zipf"])):
        a = fp("fp_network_per_event", dist, m=2**8, frac=0.25)
        b = fp("fp_network_per_event", dist, frac=0.25)
        if a is None or b is None:
            continue
        close = (_within(100 * a, row[0], CLOSE) and _within(100 * b, row[-1], CLOSE))
        wide.append(f"{dist} {_pct(a)} → {_pct(b)} against the paper's {row[0]}% → "
                    f"{row[-1]}%, " + (f"close in level (within {CLOSE:g}× at both ends)"
                                       if close else f"not within {CLOSE:g}× at both ends"))
    wide_s = ("" if not wide else
              " With intervals up to a quarter of the domain (the sensitivity rows) the "
              "network rate per event from m = 2^8 to 2^16 is " + "; ".join(wide) + ".")
    return [
        "**False positives (Figure 9, Table 10).** At m = 2^16 and g = 32 the cells "
        "alone make " + _pct(cu) + " (uniform) and " + _pct(cz) + " (Zipf) of client "
        "deliveries false, and " + bloom + " (" + _pct(bu) + " / " + _pct(bz) + " with "
        "them): a box that covers a sliver of a cell brings the whole cell. Counted per "
        "(event, client) query that should have said no, the classic Bloom-filter rate, it "
        "is " + _pct(nu) + f" (uniform; the paper {paper_u}%) and " + _pct(nz)
        + f" (Zipf; the paper {paper_z}%)." + harder + smaller + wide_s, ""]


def _memory(res: Results, sc: _Scaling) -> list[str]:
    mem = {s_: v for s_ in res.systems
           if (v := sc(s_, "bytes_per_subscription")) is not None}
    if not mem:
        return []
    lp3 = res.get("dls", "labels_per_subscription", experiment="granules",
                  distribution="uniform", g=32)
    largest = max(mem, key=lambda s_: mem[s_])
    return ["**Memory.** Bytes per subscription at " + _k(sc.n) + " uniform d = 3 / g = 32: "
            + ", ".join(f"{LABEL[s_]} {_fmt(v, 1)}" for s_, v in mem.items())
            + ". Brute force keeps the box and the owner (2·d·4 + 4 bytes); the R-tree adds "
            "its nodes; DLS keeps every subscription's labels (8 bytes each"
            + (f", {_fmt(lp3, 1)} labels per subscription in the granules workload at "
               "g = 32" if lp3 else "")
            + ") so that a deletion removes exactly what was added, plus the client bank, "
            "the routing filters and the exact count tables. "
            + ("DLS takes the most per subscription here, as the paper says it trades memory "
               "for speed." if largest == "dls" else
               f"The largest per subscription here is {LABEL[largest]}, not DLS."), ""]


def _growth_subs(res: Results) -> list[str]:
    gsz = sorted({r["params"]["n_subs"] for r in res.values("matching_time",
                                                              experiment="growth_subs")})
    if not gsz:
        return []

    def gr(system: str, metric: str, size: int) -> float | None:
        return res.get(system, metric, experiment="growth_subs", n_subs=size)

    parts = []
    for s_ in res.systems:
        pts = [(k, v) for k in gsz if (v := gr(s_, "matching_time", k)) is not None]
        if pts:
            parts.append(f"{LABEL[s_]} {_fmt(pts[0][1])} → {_fmt(pts[-1][1])} µs/event "
                         f"({_k(pts[0][0])} → {_k(pts[-1][0])})")
    dpe = [res.get("dls", "deliveries_per_event", experiment="growth_subs", n_subs=k)
           for k in (gsz[0], gsz[-1])]
    mem_ = [gr("dls", "bytes_per_subscription", k) for k in (gsz[0], gsz[-1])]
    t_dls = _div(gr("dls", "matching_time", gsz[-1]), gr("dls", "matching_time", gsz[0]))
    t_dpe = _div(dpe[1], dpe[0])
    pace = ("" if t_dls is None or t_dpe is None else
            "; its deliveries per event (" + " → ".join(_fmt(v, 1) for v in dpe)
            + ") grow " + (f"faster ({t_dpe:,.1f}×)" if t_dpe > t_dls
                           else f"no faster ({t_dpe:,.1f}×)"))
    mem_t = _trend(_div(mem_[1], mem_[0]))
    memory = ("" if mem_t is None else
              " DLS memory per subscription " + {"falls": "falls", "grows": "grows",
                                                 "flat": "stays flat"}[mem_t]
              + " (" + " → ".join(_fmt(v, 1) for v in mem_) + " bytes)"
              + (", as the fixed parts (client bank, routing filters, count tables) are "
                 "shared by more subscriptions." if mem_t == "falls" else "."))
    return ["**Growth in subscriptions (beyond the paper).** " + "; ".join(parts)
            + f". Over a {gsz[-1] // gsz[0]}× growth in subscriptions DLS's per-event "
            "time changes by " + _ratio(t_dls, 1.0)
            + ", brute force's " + _ratio(gr("bruteforce", "matching_time", gsz[-1]),
                                          gr("bruteforce", "matching_time", gsz[0]))
            + " and MICS's " + _ratio(gr("mics", "matching_time", gsz[-1]),
                                      gr("mics", "matching_time", gsz[0]))
            + pace + "." + memory, ""]


def _growth_clients(res: Results) -> list[str]:
    gcl = sorted({r["params"]["n_clients"] for r in res.values("matching_time",
                                                                experiment="growth_clients")})
    if not gcl:
        return []

    def at(system: str, clients: int) -> float | None:
        return res.get(system, "matching_time", experiment="growth_clients",
                       n_clients=clients)

    parts, grow = [], {}
    for s_ in res.systems:
        pts = [(c, v) for c in gcl if (v := at(s_, c)) is not None]
        if pts:
            parts.append(f"{LABEL[s_]} {_fmt(pts[0][1])} → {_fmt(pts[-1][1])} µs/event "
                         f"({pts[0][0]:,} → {pts[-1][0]:,} clients)")
            grow[s_] = _div(pts[-1][1], pts[0][1])
    top = gcl[-1]
    dls_top = at("dls", top)
    faster = [LABEL[s_] for s_ in res.systems
              if s_ != "dls" and dls_top is not None and (v := at(s_, top)) is not None
              and v < dls_top]
    exact = [f"{LABEL[s_]} {_moves(grow.get(s_))}" for s_ in ("mics", "rtree", "bruteforce")
             if s_ in grow]
    return ["**Growth in clients (beyond the paper).** " + "; ".join(parts)
            + ". Each bank row of DLS is a bitset over clients (clients/64 words), and "
            f"its per-event time {_moves(grow.get('dls'))}"
            + (("; the exact matchers' " + ", ".join(exact)) if exact else "")
            + (f". At {top:,} clients DLS is slower than " + ", ".join(faster)
               if faster else f". At {top:,} clients no other system is faster than DLS")
            + ".", ""]


def discussion(res: Results) -> list[str]:
    """A paragraph per experiment; every number and every conclusion comes from this run's
    records (and the paper's published tables), compared by the rules above."""
    sc = _Scaling(res)
    return (_insertion(res, sc) + _traffic(res, sc) + _deletion(res, sc)
            + _matching(res, sc) + _matching_bars_note(res) + _granules(res)
            + _false_positives(res) + _memory(res, sc) + _growth_subs(res)
            + _growth_clients(res))


def write(results: Path, out: Path, plots_dir: Path) -> Path:
    records = json.loads(results.read_text())
    meta_path = results.with_name(results.stem + ".meta.json")
    meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
    meta["results_path"] = os.path.relpath(results, out.parent)
    res = Results(records, meta)
    plots: dict[str, str] = {}
    specs = (
        ("fig6", lambda p: plot_scaling(res, "matching_time", "event matching time (µs)",
                                        "Figure 6: event matching time vs subscriptions", p)),
        ("fig6_insert", lambda p: plot_scaling(res, "insert_time", "insertion time (µs/sub)",
                                               "Tables 1-2: insertion time", p)),
        ("fig7", lambda p: plot_granules(res, "insert_time", "insertion time (µs/sub)",
                                         "Figure 7: insertion time vs granules", p)),
        ("fig8", lambda p: plot_granules(res, "matching_time", "matching time (µs/event)",
                                         "Figure 8: matching time vs granules", p)),
        ("fig9", lambda p: plot_fp(res, "fp_granules", "g", p,
                                   "Figure 9: false positive rate vs granules (m=2^16)")),
        ("fig10", lambda p: plot_fp(res, "fp_m", "m", p,
                                    "Figure 10: false positive rate vs m (g=32)")),
        ("growth_subs", lambda p: plot_growth(res, "growth_subs", "n_subs", p,
                                              "Growth: 100K to 5M subscriptions")),
        ("growth_clients", lambda p: plot_growth(res, "growth_clients", "n_clients", p,
                                                 "Growth: clients")),
    )
    for key, fn in specs:
        path = plots_dir / f"{key}.png"
        if fn(path):
            plots[key] = os.path.relpath(path, out.parent)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(build_report(res, plots))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", type=Path, default=DEFAULT_RESULTS)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--plots", type=Path, default=DEFAULT_PLOTS)
    args = ap.parse_args(argv)
    if not args.results.exists():
        raise SystemExit(f"--results: {args.results} does not exist (run benchmarks.paper)")
    path = write(args.results, args.out, args.plots)
    print(f"wrote {path} and plots in {args.plots}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
