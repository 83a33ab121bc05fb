"""The soak's picture: resident memory of every process over time, with the fitted slopes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

PANELS = (("node", "nodes"), ("client", "clients (SDK subscriber + raw recorder)"),
          ("publisher", "publishers (SDK)"), ("broker", "Kafka broker (JVM)"))


def plot(results: dict[str, Any], out: Path) -> None:
    """RSS (MiB) against minutes, one panel per kind; the window's fit dashed."""
    s = results["soak"]
    params = results["params"]
    warm = s.get("warmup_s", 0.0) / 60.0
    t_end = warm + params["duration"] / 60.0
    t_from = t_end - params["window_s"] / 60.0
    fig, axes = plt.subplots(len(PANELS), 1, figsize=(9, 11), sharex=True)
    for ax, (kind, title) in zip(axes, PANELS, strict=True):
        names = [n for n, m in s["memory"].items() if m["kind"] == kind]
        for name in names:
            pts = [(r["t"] / 60.0, r["VmRSS"]) for r in s["samples"]
                   if r["name"] == name and "VmRSS" in r]
            line, = ax.plot([t for t, _ in pts], [y for _, y in pts], marker=".", ms=3,
                            lw=1, label=_label(name, s["memory"][name]))
            fit = s["memory"][name].get("rss")
            win = [(t, y) for t, y in pts if t >= t_from - 1e-6]
            if fit and win:  # the least-squares line passes through the window's means
                tm = sum(t for t, _ in win) / len(win)
                ym = sum(y for _, y in win) / len(win)
                b = fit["slope_mib_per_min"]
                ends = [win[0][0], win[-1][0]]
                ax.plot(ends, [ym + b * (t - tm) for t in ends], ls="--",
                        color=line.get_color(), lw=1)
        ax.axvspan(t_from, t_end, color="0.93", zorder=0)
        if warm:
            ax.axvline(warm, color="0.5", lw=0.8, ls=":")
        ax.set_title(title, fontsize=9)
        ax.set_ylabel("RSS, MiB")
        if names:
            ax.legend(fontsize=7, loc="best", ncol=2)
    axes[-1].set_xlabel("minutes since publishing started (dotted: end of the warm-up; "
                        "shaded: the fitted window)")
    fig.suptitle(f"soak: {s['rate']} events/s, {s['published']} events, missing "
                 f"{s['missing']}, duplicates {s['duplicates']}", fontsize=10)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)


def _label(name: str, m: dict[str, Any]) -> str:
    fit = m.get("rss")
    if not fit:
        return name
    return (f"{name}: {fit['slope_mib_per_min']:+.3f} ± {fit['ci95_mib_per_min']:.3f} MiB/min"
            f"{' GROWS' if fit['grows'] else ''}")
