"""Core benchmark: DLS broker state vs an exact brute-force matcher (paper §6.2.1).

Run::

    .venv/bin/python -m benchmarks.core [--quick] [--out benchmarks/results/core.json]
        [--sizes 100000,500000] [--dists uniform,zipf] [--dims 3x32,4x16] [--no-plot]

One broker node ``B`` with two neighbours (``N1``, ``N2``) holds ``n_subs`` subscriptions of
``n_clients`` clients; a batch of ``n_events`` events is matched against them. The workload
is :mod:`benchmarks.workload` (uniform and Zipf; (d, g) = (2, 128), (3, 32), (4, 16);
100K..500K subscriptions over 1,000 clients; 10,000 events). For each distribution and
(d, g) the 500K-subscription workload is drawn once and every size uses its first
``n_subs`` subscriptions (same events).

Systems:

* ``dls``: ``BrokerState`` in exact mode with the bit-sliced CBF client bank and CBF
  ERTs (routing m=2**20, k=7). Client filters are sized for the mean number of distinct
  labels per client of that configuration at a 1% false-positive rate.
* ``dls-direct``: the same with ``client_filter="direct"`` and ``routing_filter="direct"``
  (exact direct-address bitmap).
* ``bruteforce``: :class:`benchmarks.baselines.bruteforce.BruteForceMatcher`.

Output: a JSON list of records ``{"benchmark", "system", "params", "metric", "value",
"unit"}``, the plot ``core_matching.png`` next to it (if matplotlib imports), and a sibling
``<out>.meta.json`` (``core.meta.json``) holding the machine (cpu count, CPU model,
python, numpy, platform), the git commit, the command line, the start time and the wall
time of the run. Metrics (all times are wall-clock ``time.perf_counter``):

=========================  ==========  =================================================
metric                     unit        meaning
=========================  ==========  =================================================
mapping_time               us/sub      raw integer boxes -> cells -> CSR labels (``dls``)
labels_per_subscription    labels      mean labels of a subscription (``dls``)
event_mapping_time         us/event    event values -> labels, whole batch (``dls``)
insert_time                us/sub      ``subscribe_many`` in batches of ``batch_size``,
                                       total / n_subs, best of ``update_repeats`` rounds
                                       (bruteforce: appending arrays, one round)
setup_time                 s           broker creation + client registration + bank
                                       pre-grown to every client (untimed elsewhere)
forwarded_labels           labels      labels advertised to one neighbour (``neighbour``
                                       in params), the paper's forwarding traffic
forwarded_labels_total     labels      sum over both neighbours
matching_time              us/event    ``route`` of the whole batch, best of
                                       ``match_repeats``, / n_events (bruteforce: the first
                                       ``match_sample_events`` events one by one, mean per
                                       event, best of ``match_repeats``)
deliveries_per_event       clients     mean clients an event is delivered to (same events
                                       as matching_time)
false_negatives            count       exact (client, event) deliveries DLS missed on the
                                       first ``check_sample_events`` events (must be 0)
false_positive_rate        fraction    DLS deliveries not in the exact set / DLS
                                       deliveries, same sample
client_bank_bytes          bytes       ``state.stats()["client_bank_bytes"]``
                                       (bruteforce: bytes of its arrays)
delete_time                us/sub      ``unsubscribe_many`` of every subscription in
                                       batches (bruteforce: compaction per batch)
withdrawn_labels_total     labels      labels withdrawn from the neighbours by the deletes
speedup_vs_bruteforce      x           bruteforce matching_time / system matching_time
=========================  ==========  =================================================
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.baselines.bruteforce import BruteForceMatcher
from benchmarks.workload import Workload, WorkloadParams, attr_names, generate, space_spec
from broker_node.state import BrokerState, LinkMessage
from dls.bank import warm_up_kernels
from dls.mapping import box_labels_batch, event_labels_batch
from dls.space import ContentSpace

BENCHMARK = "core"
NEIGHBOURS = ("N1", "N2")
DEFAULT_OUT = Path("benchmarks/results/core.json")
PLOT_NAME = "core_matching.png"
ROUTING_FILTER = {"m": 2**20, "k": 7}
CLIENT_FP_RATE = 0.01


@dataclass(frozen=True)
class RunSettings:
    """Sizes and repetitions of one run (full or quick)."""

    distributions: tuple[str, ...]
    dims: tuple[tuple[int, int], ...]
    sizes: tuple[int, ...]
    n_clients: int
    n_events: int
    batch_size: int = 50_000
    match_repeats: int = 3
    update_repeats: int = 2
    bf_sample_events: int = 500
    bf_match_repeats: int = 2
    check_sample_events: int = 500
    seed: int = 0
    #: BrokerConfig.update_threads of the DLS systems (1: single-threaded like the paper).
    update_threads: int = 1


FULL = RunSettings(
    distributions=("uniform", "zipf"),
    dims=((2, 128), (3, 32), (4, 16)),
    sizes=(100_000, 200_000, 300_000, 400_000, 500_000),
    n_clients=1_000,
    n_events=10_000,
)
QUICK = RunSettings(
    distributions=("uniform",),
    dims=((3, 32),),
    sizes=(20_000,),
    n_clients=100,
    n_events=1_000,
    batch_size=5_000,
    bf_sample_events=200,
    check_sample_events=200,
)


class Recorder:
    """Collects records and prints them as a table while the run goes."""

    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []

    def add(self, system: str, params: dict[str, Any], metric: str, value: float,
            unit: str) -> None:
        self.records.append({"benchmark": BENCHMARK, "system": system, "params": dict(params),
                             "metric": metric, "value": float(value), "unit": unit})

    def value(self, system: str, metric: str, **match: Any) -> float | None:
        for r in reversed(self.records):
            if (r["system"] == system and r["metric"] == metric
                    and all(r["params"].get(k) == v for k, v in match.items())):
                return float(r["value"])
        return None


def _timed(fn: Callable[..., Any], *args: Any) -> tuple[float, Any]:
    gc.collect()
    t0 = time.perf_counter()
    out = fn(*args)
    return time.perf_counter() - t0, out


def map_boxes(space: ContentSpace, lo: np.ndarray, hi: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray]:
    """Raw integer boxes (N, d) -> CSR labels (the timed mapping step)."""
    attrs = space.attributes
    lo_c = np.stack([a.cells(lo[:, i]) for i, a in enumerate(attrs)], axis=1)
    hi_c = np.stack([a.cells(hi[:, i]) for i, a in enumerate(attrs)], axis=1)
    return box_labels_batch(space, lo_c, hi_c)


def event_columns(w: Workload) -> dict[str, np.ndarray]:
    """Event values as the ``{attr: array}`` columns ``event_labels_batch`` takes."""
    return {n: w.events[:, i] for i, n in enumerate(attr_names(w.params.d))}


def distinct_labels_per_client(offsets: np.ndarray, labels: np.ndarray, owners: np.ndarray,
                               n_clients: int, label_space: int) -> float:
    """Mean number of distinct labels a client's filter holds."""
    owner_rep = np.repeat(owners, np.diff(offsets)).astype(np.uint64)
    keys = np.unique(owner_rep * np.uint64(label_space) + labels)
    return len(keys) / n_clients


def _n_forwarded(msgs: Sequence[LinkMessage], totals: dict[str, int]) -> None:
    for m in msgs:
        totals[m.to] = totals.get(m.to, 0) + len(m.labels)


def delivery_check(offsets: np.ndarray, clients: np.ndarray, exact_off: np.ndarray,
                   exact_cli: np.ndarray, n_clients: int, n: int) -> tuple[int, int, int]:
    """(false negatives, false-positive deliveries, deliveries) on the first n events."""
    def pairs(off: np.ndarray, cli: np.ndarray) -> np.ndarray:
        ev = np.repeat(np.arange(n, dtype=np.int64), np.diff(off[: n + 1]))
        return ev * n_clients + cli[: off[n]]

    got, want = pairs(offsets, clients), pairs(exact_off, exact_cli)
    fn = int((~np.isin(want, got)).sum())
    fp = int((~np.isin(got, want)).sum())
    return fn, fp, len(got)


def run_dls(rec: Recorder, system: str, space_sp: dict[str, Any], w: Workload,
            offsets: np.ndarray, labels: np.ndarray, ev_labels: np.ndarray,
            exact: tuple[np.ndarray, np.ndarray], s: RunSettings,
            base: dict[str, Any], state_kw: dict[str, Any]) -> dict[str, float]:
    """Insert, match, check and delete with one broker state; record every metric.

    Insert + delete of all subscriptions is repeated ``s.update_repeats`` times on the same
    state (empty again after each delete) and the best of each is kept; matching and the
    checks run after the first insert.
    """
    n, nc = w.params.n_subs, w.params.n_clients
    space = ContentSpace.from_spec(space_sp)
    t0 = time.perf_counter()
    state = BrokerState.for_space("B", list(NEIGHBOURS), space, resize_filters=False,
                                  **state_kw)  # the paper's fixed sizes
    for j in range(nc):  # bank index j == workload client j
        state.client_index(f"c{j}")
    # Pre-grow the client bank to every client (one dummy subscription of the last client).
    first = labels[:1]
    state.subscribe_many([f"c{nc - 1}"], ["warm-up"], np.array([0, 1]), first)
    state.unsubscribe_many([f"c{nc - 1}"], ["warm-up"])
    t_setup = time.perf_counter() - t0
    cfg = state.config
    params = {**base, "client_filter": cfg.client_filter, "routing_filter": cfg.routing_filter,
              "client_m": cfg.client_m, "client_k": cfg.client_k,
              "routing_m": cfg.routing_m, "routing_k": cfg.routing_k,
              "counter_bits": cfg.counter_bits, "mode": cfg.mode,
              "n_neighbours": len(NEIGHBOURS), "batch_size": s.batch_size,
              "update_threads": cfg.update_threads}
    rec.add(system, {**params, "setup": "BrokerState.for_space + client registration + bank "
                     "pre-grown by one dummy subscribe/unsubscribe"},
            "setup_time", t_setup, "s")
    names = [f"c{o}" for o in w.owners.tolist()]
    ids = [f"s{i}" for i in range(n)]
    bs = s.batch_size
    chunks = [(a, min(n, a + bs)) for a in range(0, n, bs)]
    csr = [(offsets[a:b + 1] - offsets[a], labels[offsets[a]:offsets[b]]) for a, b in chunks]

    def insert(fwd: dict[str, int]) -> None:
        for (a, b), (off, lab) in zip(chunks, csr, strict=True):
            _n_forwarded(state.subscribe_many(names[a:b], ids[a:b], off, lab), fwd)

    def delete(wd: dict[str, int]) -> None:
        for a, b in chunks:
            _n_forwarded(state.unsubscribe_many(names[a:b], ids[a:b]), wd)

    u_params = {**params, "update_repeats": s.update_repeats,
                "timing": "best of repeats, total / n_subs"}
    t_ins = t_del = float("inf")
    fwd0: dict[str, int] = {}
    wd0: dict[str, int] = {}
    out: dict[str, float] = {}
    for rep in range(s.update_repeats):
        fwd: dict[str, int] = {}
        t, _ = _timed(insert, fwd)
        t_ins = min(t_ins, t)
        if rep == 0:
            fwd0 = fwd
            out.update(_match_and_check(rec, system, params, state, ev_labels, exact, s, nc))
        elif fwd != fwd0:
            raise AssertionError(f"{system}: forwarding differs between repeats")
        wd: dict[str, int] = {}
        t, _ = _timed(delete, wd)
        t_del = min(t_del, t)
        if len(state) != 0:
            raise AssertionError(f"{system}: {len(state)} subscriptions left after deletes")
        if rep == 0:
            wd0 = wd
    rec.add(system, u_params, "insert_time", t_ins / n * 1e6, "us/sub")
    rec.add(system, u_params, "delete_time", t_del / n * 1e6, "us/sub")
    for nb in NEIGHBOURS:
        rec.add(system, {**params, "neighbour": nb}, "forwarded_labels", fwd0.get(nb, 0),
                "labels")
    rec.add(system, params, "forwarded_labels_total", sum(fwd0.values()), "labels")
    rec.add(system, params, "withdrawn_labels_total", sum(wd0.values()), "labels")
    if out["fn"]:
        raise AssertionError(f"{system}: {out['fn']:.0f} false negatives ({base})")
    out.update({"insert": t_ins / n * 1e6, "delete": t_del / n * 1e6,
                "fwd": sum(fwd0.values())})
    return out


def _match_and_check(rec: Recorder, system: str, params: dict[str, Any], state: BrokerState,
                     ev_labels: np.ndarray, exact: tuple[np.ndarray, np.ndarray],
                     s: RunSettings, nc: int) -> dict[str, float]:
    best, routes = float("inf"), None
    for _ in range(s.match_repeats):
        t, routes = _timed(state.route, ev_labels)
        best = min(best, t)
    assert routes is not None  # noqa: S101
    n_ev = len(ev_labels)
    m_params = {**params, "match_repeats": s.match_repeats, "timing": "best of repeats"}
    match_us = best / n_ev * 1e6
    rec.add(system, m_params, "matching_time", match_us, "us/event")
    rec.add(system, m_params, "deliveries_per_event", len(routes.clients) / n_ev, "clients")
    n_chk = min(s.check_sample_events, n_ev, len(exact[0]) - 1)
    fn, fp, tot = delivery_check(routes.offsets, routes.clients, exact[0], exact[1], nc, n_chk)
    c_params = {**params, "check_sample_events": n_chk}
    rec.add(system, c_params, "false_negatives", fn, "count")
    fp_rate = fp / tot if tot else 0.0
    rec.add(system, c_params, "false_positive_rate", fp_rate, "fraction")
    bank_bytes = state.stats()["client_bank_bytes"]
    rec.add(system, params, "client_bank_bytes", bank_bytes, "bytes")
    return {"match": match_us, "fp": fp_rate, "fn": fn, "mem": bank_bytes}


def run_bruteforce(rec: Recorder, w: Workload, s: RunSettings, base: dict[str, Any]
                   ) -> tuple[tuple[np.ndarray, np.ndarray], dict[str, float]]:
    """Insert, match a sample of events, delete; return the exact deliveries of the sample."""
    n, nc = w.params.n_subs, w.params.n_clients
    bs = s.batch_size
    chunks = [(a, min(n, a + bs)) for a in range(0, n, bs)]
    bf = BruteForceMatcher(w.params.d, nc)
    params = {**base, "batch_size": bs, "dtype": "float32"}

    def insert() -> None:
        for a, b in chunks:
            bf.add(w.lo[a:b], w.hi[a:b], w.owners[a:b])

    t_ins, _ = _timed(insert)
    rec.add("bruteforce", params, "insert_time", t_ins / n * 1e6, "us/sub")
    n_sample = min(max(s.bf_sample_events, s.check_sample_events), len(w.events))
    t_match, exact = float("inf"), None
    for _ in range(s.bf_match_repeats):
        t, exact = _timed(bf.match, w.events[:n_sample])
        t_match = min(t_match, t)
    assert exact is not None  # noqa: S101
    m_params = {**params, "match_sample_events": n_sample, "match_repeats": s.bf_match_repeats,
                "timing": "events matched one by one; mean over the sample, best of repeats"}
    match_us = t_match / n_sample * 1e6
    rec.add("bruteforce", m_params, "matching_time", match_us, "us/event")
    rec.add("bruteforce", m_params, "deliveries_per_event", len(exact[1]) / n_sample,
            "clients")
    rec.add("bruteforce", params, "client_bank_bytes", bf.memory_bytes(), "bytes")

    def delete() -> None:
        for a, b in chunks:  # same order as DLS: the oldest batch first
            bf.remove_rows(np.arange(b - a))

    t_del, _ = _timed(delete)
    rec.add("bruteforce", {**params, "delete": "remove_rows + compaction per batch"},
            "delete_time", t_del / n * 1e6, "us/sub")
    return exact, {"insert": t_ins / n * 1e6, "delete": t_del / n * 1e6, "match": match_us}


def _row(system: str, base: dict[str, Any], r: dict[str, float]) -> str:
    def f(key: str, fmt: str) -> str:
        width = int(fmt.split(".")[0])
        return format(r[key], fmt) if key in r else "-".rjust(width)

    return (f"{base['distribution']:>7} {base['d']:>2} {base['g']:>4} {base['n_subs']:>7} "
            f"{system:>11} {f('insert', '9.3f')} {f('delete', '9.3f')} {f('match', '11.3f')} "
            f"{f('speedup', '8.1f')} {f('fwd', '8.0f')} {f('fp', '7.4f')} {f('fn', '3.0f')} "
            f"{f('mem', '10.3g')} {f('wall', '6.1f')}")


HEADER = (f"{'dist':>7} {'d':>2} {'g':>4} {'n_subs':>7} {'system':>11} {'ins us':>9} "
          f"{'del us':>9} {'match us/ev':>11} {'speedup':>8} {'fwd':>8} {'fp':>7} {'fn':>3} "
          f"{'bank B':>10} {'wall s':>6}")


def run(s: RunSettings, log: Callable[[str], None] = print) -> list[dict[str, Any]]:
    """Run every configuration of ``s``; return the records."""
    rec = Recorder()
    log(HEADER)
    # Untimed, as a node does at start: no first batch waits for a kernel to compile.
    log(f"kernels compiled or loaded in {warm_up_kernels():.1f} s (untimed)")
    for dist in s.distributions:
        for d, g in s.dims:
            full = generate(WorkloadParams(dist, d, g, max(s.sizes), s.n_clients, s.n_events,
                                           seed=s.seed))
            space0 = ContentSpace.from_spec(space_spec(d, g))
            for n in s.sizes:
                t_cfg = time.perf_counter()
                w = full.head(n)
                base = {**w.params.as_dict(), "n_neighbours": len(NEIGHBOURS)}
                t_map, (offsets, labels) = _timed(map_boxes, space0, w.lo, w.hi)
                map_params = {**base, "mapping": "cells + box_labels_batch"}
                rec.add("dls", map_params, "mapping_time", t_map / n * 1e6, "us/sub")
                rec.add("dls", base, "labels_per_subscription", len(labels) / n, "labels")
                t_ev, (ev_labels, valid) = _timed(event_labels_batch, space0,
                                                  event_columns(w))
                if not valid.all():
                    raise AssertionError("generated events must be inside the domain")
                rec.add("dls", base, "event_mapping_time", t_ev / len(ev_labels) * 1e6,
                        "us/event")
                per_client = distinct_labels_per_client(offsets, labels, w.owners,
                                                        s.n_clients, space0.label_space_size)
                items = max(1, int(np.ceil(per_client)))
                filters = {"client": {"expected_items": items, "fp_rate": CLIENT_FP_RATE},
                           "routing": dict(ROUTING_FILTER)}
                sp = space_spec(d, g, filters)

                t_sys = time.perf_counter()
                exact, bf_row = run_bruteforce(rec, w, s, base)
                bf_row["wall"] = time.perf_counter() - t_sys
                dls_base = {**base, "client_expected_items": items,
                            "client_fp_rate": CLIENT_FP_RATE,
                            "distinct_labels_per_client": per_client}
                rows = {}
                for system, kw in (("dls", {}),
                                   ("dls-direct", {"client_filter": "direct",
                                                   "routing_filter": "direct"})):
                    t_sys = time.perf_counter()
                    r = run_dls(rec, system, sp, w, offsets, labels, ev_labels, exact, s,
                                dls_base, {**kw, "update_threads": s.update_threads})
                    r["speedup"] = bf_row["match"] / r["match"]
                    rec.add(system, {**dls_base, "bruteforce_match_sample_events":
                                     min(s.bf_sample_events, len(w.events))},
                            "speedup_vs_bruteforce", r["speedup"], "x")
                    r["wall"] = time.perf_counter() - t_sys
                    rows[system] = r
                    gc.collect()
                log(_row("bruteforce", base, bf_row))
                for system, r in rows.items():
                    log(_row(system, base, r))
                log(f"{'':>21} configuration wall time {time.perf_counter() - t_cfg:.1f} s")
                del offsets, labels
                gc.collect()
    return rec.records


def machine_info() -> dict[str, Any]:
    """Where the run happened."""
    cpu = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import dls

    code_dir = Path(dls.__file__).resolve().parent.parent

    def git(*args: str) -> str:
        try:
            return subprocess.run(["git", "-C", str(code_dir), *args],  # noqa: S603,S607
                                  capture_output=True, text=True, check=False).stdout.strip()
        except OSError:
            return ""

    from dls import _jit

    try:
        from numba import __version__ as numba_version
    except ImportError:
        numba_version = None
    return {"cpu_count": os.cpu_count(), "cpu_model": cpu, "python": sys.version.split()[0],
            "numpy": np.__version__, "numba": numba_version,
            "compiled_kernels": _jit.ENABLED, "kernels_off_reason": _jit.REASON,
            "platform": platform.platform(),
            "code_dir": str(code_dir), "git_commit": git("rev-parse", "HEAD"),
            "git_dirty_core_files": git("status", "--porcelain", "--", "dls",
                                        "broker_node").splitlines()}


def write_results(out: Path, records: list[dict[str, Any]], *, benchmark: str, module: str,
                  argv: Sequence[str] | None, started: str, wall: float,
                  **meta: Any) -> Path:
    """Write ``records`` to ``out`` and the run's facts to ``<out>.meta.json``.

    The meta file always holds the benchmark, the command, the start time, the wall time,
    the record count and :func:`machine_info`; ``meta`` adds the benchmark's own facts
    (settings, mode, load averages...). Returns the meta file's path.
    """
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(records, indent=1) + "\n")
    facts = {"benchmark": benchmark,
             "command": [sys.executable, "-m", module,
                         *(argv if argv is not None else sys.argv[1:])],
             "started_utc": started, "wall_time_s": round(wall, 2),
             "n_records": len(records), "machine": machine_info(), **meta}
    meta_path = out.with_name(out.stem + ".meta.json")
    meta_path.write_text(json.dumps(facts, indent=1) + "\n")
    return meta_path


def plot(records: list[dict[str, Any]], path: Path) -> bool:
    """Matching time per event vs subscriptions, DLS vs brute force, log y (one panel per
    distribution). Returns False when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    rows = [r for r in records if r["metric"] == "matching_time"]
    dists = sorted({r["params"]["distribution"] for r in rows})
    fig, axes = plt.subplots(1, len(dists), figsize=(6.5 * len(dists), 4.8), squeeze=False)
    styles = {"dls": "-o", "dls-direct": "--s", "bruteforce": ":^"}
    for ax, dist in zip(axes[0], dists, strict=True):
        dgs = sorted({(r["params"]["d"], r["params"]["g"]) for r in rows})
        colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
        for ci, (d, g) in enumerate(dgs):
            for system, style in styles.items():
                pts = sorted((r["params"]["n_subs"], r["value"]) for r in rows
                             if r["system"] == system and r["params"]["distribution"] == dist
                             and (r["params"]["d"], r["params"]["g"]) == (d, g))
                if pts:
                    xs, ys = zip(*pts, strict=True)
                    ax.plot(xs, ys, style, color=colors[ci % len(colors)],
                            label=f"{system} d={d} g={g}", markersize=4)
        ax.set_yscale("log")
        ax.set_xlabel("subscriptions")
        ax.set_ylabel("matching time per event (µs)")
        ax.set_title(f"{dist}: 1 broker, batch matching vs brute force")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7, ncol=3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true",
                    help="one small configuration (seconds), for tests and smoke runs")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON records file")
    ap.add_argument("--no-plot", action="store_true", help="skip the PNG")
    ap.add_argument("--sizes", default=None,
                    help="comma-separated subscription counts instead of the preset's")
    ap.add_argument("--dists", default=None, help="comma-separated: uniform,zipf")
    ap.add_argument("--dims", default=None,
                    help="comma-separated dxg, e.g. 3x32,4x16, instead of the preset's")
    ap.add_argument("--update-threads", type=int, default=1,
                    help="threads of the DLS systems' large batch updates (default 1)")
    args = ap.parse_args(argv)
    settings = QUICK if args.quick else FULL
    if args.update_threads < 1:
        ap.error(f"--update-threads must be at least 1, got {args.update_threads}")
    settings = replace(settings, update_threads=args.update_threads)
    if args.sizes:
        settings = replace(settings, sizes=tuple(int(x) for x in args.sizes.split(",")))
    if args.dists:
        settings = replace(settings, distributions=tuple(args.dists.split(",")))
    if args.dims:
        dims = tuple(tuple(int(x) for x in dg.split("x")) for dg in args.dims.split(","))
        settings = replace(settings, dims=dims)  # type: ignore[arg-type]
    started = datetime.now(UTC).isoformat(timespec="seconds")
    t0 = time.perf_counter()
    records = run(settings)
    wall = time.perf_counter() - t0
    out: Path = args.out
    meta_path = write_results(out, records, benchmark=BENCHMARK, module="benchmarks.core",
                              argv=argv, started=started, wall=wall, quick=args.quick,
                              settings=asdict(settings))
    print(f"wrote {len(records)} records to {out} and {meta_path} in {wall:.1f} s")
    if not args.no_plot:
        png = out.with_name(PLOT_NAME)
        if plot(records, png):
            print(f"wrote {png}")
        else:
            print("matplotlib not available: no plot")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
