"""The paper's experiments (§6), every system side by side in one run, and beyond.

Run::

    .venv/bin/python -m benchmarks.paper [--quick] [--out benchmarks/results/paper.json]
        [--experiments scaling,matching,granules,fp,growth_subs,growth_clients]
        [--systems dls,dls-paper,mics,rtree,bruteforce] [--require-all] [--merge]

``--merge`` keeps the records of ``--out`` from experiments not run now (a partial re-run,
e.g. ``--experiments matching --merge``) and notes the re-run in the meta file.

Systems (:mod:`benchmarks.paper_systems`): ``dls`` (exact aggregation, the default),
``dls-paper`` (the paper's CBF aggregation), ``mics``, ``rtree`` and ``bruteforce``, each
behind the ``Matcher`` interface of ``benchmarks/baselines/base.py``. A baseline module
that is missing is skipped with a notice on stderr (``--require-all``: an error).

Experiments (``params["experiment"]`` of every record):

* ``scaling`` — paper Tables 1–6 and Figure 6 (§6.2.1): uniform and Zipf; (d, g) = (2,
  128), (3, 32), (4, 16); 100K..500K subscriptions of 1,000 clients; 10,000 events. Each
  system is filled once, in batches of ``batch_size``, with a checkpoint at every size:
  ``insert_time`` is the time of the step that reached the size / the step's
  subscriptions (``insert_time_cumulative``: total / size), ``forwarded`` the cumulative
  forwarding traffic (labels to one neighbour for DLS, ranges for MICS, 0 for exact
  matchers), then matching, checks and memory at that size. After the largest size the
  subscriptions are deleted newest step first: ``delete_time`` at size N is the time of
  deleting the step (N - step .. N) / its size.
* ``matching`` — the bars of issue 5: (d, g) = ``match_dg`` (3, 32), the largest size,
  ``n_clients`` clients, both distributions (the scaling workload). Every system is filled,
  then the matching of each is timed in ``match_rounds`` rounds, one call per system a
  round, the order rotated each round, so that the load of a shared machine falls on
  every system alike (``scaling`` times one system minutes after another); best round per
  system. The 1-minute load average before and after the rounds is in the params.
* ``granules`` — Tables 8–9, Figures 7–8 (§6.2.2): d = 3, 8,000 subscriptions, domain
  [0, 2^20 - 1], g = 16..256. The interval length is fixed in domain units (uniform in
  [0, 2^20/16], i.e. ``length_cells = g/16``), so finer cells mean more labels per
  subscription, as in the paper. Insert time is best of ``gran_repeats`` fresh fills.
* ``fp`` — Figure 9 and Table 10 (§6.2.3): false-positive rate vs granules at m = 2^16
  and vs m = 2^8..2^16 at g = 32 (d = 3, 8,000 subscriptions, same workloads as
  ``granules``). See :func:`run_fp` for exactly what is counted.
* ``growth_subs`` — beyond the paper: uniform, d = 3, g = 32, 1,000 clients, 100K..5M
  subscriptions. A system whose next step would take longer than ``growth_budget_s`` to
  insert stops there (a ``stopped_at`` record says where).
* ``growth_clients`` — beyond the paper: uniform, d = 3, g = 32, 200K subscriptions over
  100..100K clients.

Every record is ``{"benchmark": "paper", "system", "params", "metric", "value", "unit"}``
(the shape of ``core.json``); metrics:

===========================  ==========  ==============================================
metric                       unit        meaning
===========================  ==========  ==============================================
insert_time                  us/sub      wall time of one insert step / its subscriptions
insert_time_cumulative       us/sub      all inserts so far / subscriptions (scaling)
forwarded                    labels|     cumulative forwarding traffic (``traffic_unit``
                             ranges      in params)
delete_time                  us/sub      deleting one step / its subscriptions
withdrawn                    labels      traffic the deletes of that step caused
matching_time                us/event    ``match`` of ``match_events`` events (one call),
                                         best of ``match_repeats`` / events
deliveries_per_event         clients     mean clients per event on the check sample
false_negatives              count       exact (event, client) pairs the system missed
false_positive_rate          fraction    deliveries not in the exact set / deliveries
memory_bytes                 bytes       ``memory_bytes()`` at that size
bytes_per_subscription       bytes/sub   memory_bytes / live subscriptions
labels_per_subscription      labels      mean labels of a subscription (DLS mapping)
labels_per_subscription_     labels      the same, on cells fitted to the measured workload
in_sample                                (``fp``, system ``dls-fitted``)
speedup_vs_<system>          x           that system's matching_time / this one's
fp_*                         fraction    see :func:`run_fp`
===========================  ==========  ==============================================

The run also writes ``<out>.meta.json`` (machine, commit, command, settings, wall time,
the systems that ran and those skipped) beside ``<out>``; ``benchmarks.report`` turns
both into ``benchmarks/REPORT.md`` and the plots.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import core
from benchmarks.baselines.base import Matcher
from benchmarks.baselines.bruteforce import BruteForceMatcher
from benchmarks.cells_fit import fit_attributes
from benchmarks.paper_systems import (
    BrokerMatcher,
    SystemSpec,
    available_systems,
    build,
    build_kwargs,
)
from benchmarks.workload import Workload, WorkloadParams, attr_names, generate, space_spec
from dls.bank import warm_up_kernels
from dls.cbf import CountingBloomFilter
from dls.space import ContentSpace
from dls.tuning import tune_space

BENCHMARK = "paper"
DEFAULT_OUT = Path("benchmarks/results/paper.json")
GRAN_PROBE = 200  # subscriptions of the rate probe of the granules experiment
PROBE = 1_000  # subscriptions of the first, rate-measuring batch under a budget
EXPERIMENTS = ("scaling", "matching", "granules", "fp", "growth_subs", "growth_clients")
#: ``params["experiment"]`` values of each experiment's records.
RECORD_EXPERIMENTS = {"fp": ("fp_granules", "fp_m")}


@dataclass(frozen=True)
class PaperSettings:
    """Sizes of one run (full or quick)."""

    distributions: tuple[str, ...] = ("uniform", "zipf")
    dims: tuple[tuple[int, int], ...] = ((2, 128), (3, 32), (4, 16))
    sizes: tuple[int, ...] = (100_000, 200_000, 300_000, 400_000, 500_000)
    n_clients: int = 1_000
    n_events: int = 10_000
    batch_size: int = 50_000
    check_events: int = 500
    match_budget_s: float = 1.5
    match_repeats: int = 3
    match_dg: tuple[int, int] = (3, 32)
    match_rounds: int = 5
    gran_granules: tuple[int, ...] = (16, 32, 64, 128, 256)
    gran_d: int = 3
    gran_n_subs: int = 8_000
    gran_repeats: int = 3
    fp_g: int = 32
    fp_ms: tuple[int, ...] = (2**8, 2**10, 2**12, 2**14, 2**16)
    fp_m_granules: int = 2**16
    #: Interval length limits (fraction of the domain) of the Table 10 runs: the
    #: §6.2.2 workload's, then wide subscriptions as a sensitivity check.
    fp_length_fracs: tuple[float, ...] = (1 / 16, 1 / 4)
    growth_sizes: tuple[int, ...] = (100_000, 500_000, 1_000_000, 2_000_000, 5_000_000)
    growth_budget_s: float = 60.0
    scaling_budget_s: float = 25.0
    growth_batch: int = 250_000
    growth_clients: tuple[int, ...] = (100, 1_000, 10_000, 100_000)
    growth_clients_subs: int = 200_000
    growth_dg: tuple[int, int] = (3, 32)
    seed: int = 0
    #: update_threads of the DLS systems (1: single-threaded like every other system).
    update_threads: int = 1
    experiments: tuple[str, ...] = EXPERIMENTS
    systems: tuple[str, ...] | None = None
    extra: dict[str, Any] = field(default_factory=dict)


FULL = PaperSettings()
QUICK = PaperSettings(
    distributions=("uniform", "zipf"),
    dims=((3, 32),),
    sizes=(20_000, 40_000),
    n_clients=200,
    n_events=5_000,
    batch_size=5_000,
    check_events=200,
    match_budget_s=0.3,
    gran_granules=(16, 32, 64),
    gran_n_subs=2_000,
    gran_repeats=1,
    fp_ms=(2**8, 2**12, 2**16),
    growth_sizes=(20_000, 100_000),
    growth_budget_s=10.0,
    scaling_budget_s=5.0,
    growth_batch=20_000,
    growth_clients=(10, 100, 1_000),
    growth_clients_subs=10_000,
)
TINY = replace(QUICK, distributions=("uniform",), sizes=(1_000, 2_000), n_clients=10,
               n_events=200, batch_size=1_000, check_events=100, match_budget_s=0.02,
               match_repeats=1, match_rounds=2, gran_granules=(16, 32), gran_n_subs=300,
               fp_ms=(2**8, 2**16), growth_sizes=(1_000, 2_000), growth_batch=1_000,
               growth_clients=(5, 20), growth_clients_subs=1_000, scaling_budget_s=5.0,
               growth_budget_s=5.0)


class Recorder(core.Recorder):
    """``core.Recorder`` writing ``benchmark = "paper"`` records, plus system failures."""

    def __init__(self) -> None:
        super().__init__()
        self.failures: list[dict[str, Any]] = []

    def add(self, system: str, params: dict[str, Any], metric: str, value: float,
            unit: str) -> None:
        super().add(system, params, metric, value, unit)
        self.records[-1]["benchmark"] = BENCHMARK


class Progress:
    """Plain progress lines on stderr: what runs, how far, how long so far."""

    def __init__(self, stream: Any = None) -> None:
        self.stream = stream or sys.stderr
        self.t0 = time.perf_counter()

    def __call__(self, msg: str) -> None:
        print(f"[paper {time.perf_counter() - self.t0:7.1f}s] {msg}", file=self.stream,
              flush=True)

    def bar(self, what: str, done: int, total: int) -> None:
        width = 24
        k = round(width * done / max(1, total))
        self(f"{what} [{'#' * k}{'.' * (width - k)}] {done:,}/{total:,}")


def _timed(fn: Callable[..., Any], *args: Any) -> tuple[float, Any]:
    gc.collect()
    t0 = time.perf_counter()
    out = fn(*args)
    return time.perf_counter() - t0, out


def workload(dist: str, d: int, g: int, n: int, nc: int, ne: int, s: PaperSettings,
             length_cells: float = 2.0) -> Workload:
    return generate(WorkloadParams(dist, d, g, n, nc, ne, length_cells=length_cells,
                                   seed=s.seed))


def client_items(w: Workload) -> int:
    """Mean distinct labels per client (how DLS sizes its client filters, as in core)."""
    sp = ContentSpace.from_spec(space_spec(w.params.d, w.params.g))
    offsets, labels = core.map_boxes(sp, w.lo, w.hi)
    per = core.distinct_labels_per_client(offsets, labels, w.owners, w.params.n_clients,
                                          sp.label_space_size)
    return max(1, math.ceil(per))


def exact_at(w: Workload, sizes: Sequence[int], n_check: int
             ) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Exact deliveries of the first ``n_check`` events at every size (brute force)."""
    bf = BruteForceMatcher(w.params.d, w.params.n_clients)
    out: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    prev = 0
    for n in sizes:
        bf.add(w.lo[prev:n], w.hi[prev:n], w.owners[prev:n])
        prev = n
        out[n] = bf.match(w.events[:n_check])
    return out


def time_match(m: Matcher, events: np.ndarray, budget_s: float, repeats: int
               ) -> tuple[float, int]:
    """(best seconds per event, events used): as many events as fit the budget."""
    probe = min(len(events), 50)
    t, _ = _timed(m.match, events[:probe])
    per = max(t / probe, 1e-9)
    n = int(min(len(events), max(probe, budget_s / per)))
    best = float("inf")
    for _ in range(max(1, min(repeats, int(3 * budget_s / (n * per))))):
        t, _ = _timed(m.match, events[:n])
        best = min(best, t)
    return best / n, n


def check(m: Matcher, events: np.ndarray, exact: tuple[np.ndarray, np.ndarray], nc: int
          ) -> tuple[int, float, float]:
    """(false negatives, false-positive rate of deliveries, deliveries per event)."""
    off, cli = m.match(events)
    n = len(events)
    fn, fp, tot = core.delivery_check(np.asarray(off), np.asarray(cli), exact[0], exact[1],
                                      nc, n)
    return fn, (fp / tot if tot else 0.0), tot / n


def _traffic_unit(name: str) -> str:
    return "labels" if name.startswith("dls") else "ranges" if name == "mics" else "none"


def measure_at(rec: Recorder, m: Matcher, name: str, params: dict[str, Any], n_live: int,
               events: np.ndarray, exact: tuple[np.ndarray, np.ndarray], s: PaperSettings,
               nc: int) -> dict[str, float]:
    """Matching time, checks and memory of a filled system; records them."""
    per, n_used = time_match(m, events, s.match_budget_s, s.match_repeats)
    mp = {**params, "match_events": n_used, "match_repeats": s.match_repeats,
          "timing": "one match() call over the first match_events events, best of repeats"}
    rec.add(name, mp, "matching_time", per * 1e6, "us/event")
    fn, fpr, dpe = check(m, events[:len(exact[0]) - 1], exact, nc)
    cp = {**params, "check_events": len(exact[0]) - 1}
    rec.add(name, cp, "false_negatives", fn, "count")
    rec.add(name, cp, "false_positive_rate", fpr, "fraction")
    rec.add(name, cp, "deliveries_per_event", dpe, "clients")
    mem = m.memory_bytes()
    rec.add(name, params, "memory_bytes", mem, "bytes")
    rec.add(name, params, "bytes_per_subscription", mem / max(1, n_live), "bytes/sub")
    return {"match": per * 1e6, "fn": fn, "fp": fpr, "mem": mem / max(1, n_live)}


def _ranges(a: int, b: int, step: int) -> list[tuple[int, int]]:
    return [(x, min(b, x + step)) for x in range(a, b, step)]


def fill_and_measure(rec: Recorder, spec: SystemSpec, w: Workload, sizes: Sequence[int],
                     exact: dict[int, tuple[np.ndarray, np.ndarray]], base: dict[str, Any],
                     s: PaperSettings, log: Progress, *, batch: int, delete: bool,
                     items: int, budget_s: float | None = None) -> dict[int, dict[str, float]]:
    """Insert up to every size (checkpoints), measure at each, then delete step by step.

    ``items`` sizes DLS client filters (mean distinct labels per client at the largest
    size).
    """
    nc = w.params.n_clients
    kw = build_kwargs(w.params.d, w.params.g, nc, high=w.params.domain_high,
                      client_items=items, n_subs=w.params.n_subs,
                      update_threads=s.update_threads)
    m = build(spec, kw)
    name = spec.name
    unit = _traffic_unit(name)
    rows: dict[int, dict[str, float]] = {}
    prev, t_total, traffic = 0, 0.0, 0
    done = 0  # subscriptions inserted (may run past ``prev`` inside a step)
    probe_rate = None
    if budget_s is not None:  # a throwaway instance measures the rate before a big batch
        k = min(PROBE, sizes[0])
        t_probe, _ = _timed(build(spec, kw).insert, w.lo[:k], w.hi[:k], w.owners[:k])
        probe_rate = t_probe / k
    for n in sizes:
        t_step = 0.0
        stopped = False
        for a, b in _ranges(prev, n, batch):
            if budget_s is not None and (done or probe_rate is not None):
                rate = (t_total + t_step) / done if done else probe_rate or 0.0
                if rate * (n - a) + t_step > budget_s:
                    log(f"  {name}: the step to {n:,} would take ~{rate * (n - prev):.0f} s"
                        f" > {budget_s:.0f} s budget: stopped at {prev:,}")
                    rec.add(name, {**base, "n_subs": prev, "next_n_subs": n,
                                   "budget_s": budget_s, "insert_rate_us": rate * 1e6},
                            "stopped_at", prev, "subscriptions")
                    rec.add(name, {**base, "n_subs": done, "budget_s": budget_s},
                            "insert_time_probe", rate * 1e6, "us/sub")
                    stopped = True
                    break
            t, out = _timed(m.insert, w.lo[a:b], w.hi[a:b], w.owners[a:b])
            t_step += t
            done = b
            traffic += int(out)
            log.bar(f"  {name} insert", b, sizes[-1])
        if stopped:
            break
        t_total += t_step
        params = {**base, "n_subs": n, "batch_size": batch, "step": n - prev,
                  "system_class": type(m).__name__}
        rec.add(name, params, "insert_time", t_step / (n - prev) * 1e6, "us/sub")
        rec.add(name, params, "insert_time_cumulative", t_total / n * 1e6, "us/sub")
        rec.add(name, {**params, "traffic_unit": unit}, "forwarded", traffic, unit)
        r = measure_at(rec, m, name, params, n, w.events, exact[n], s, nc)
        r["insert"] = t_step / (n - prev) * 1e6
        r["fwd"] = traffic
        rows[n] = r
        log(f"  {name:10} n={n:>9,} insert {r['insert']:8.3f} us/sub  match "
            f"{r['match']:10.3f} us/ev  fwd {traffic:>9,}  fp {r['fp']:.4f}  fn {r['fn']:.0f}"
            f"  {r['mem']:8.1f} B/sub")
        prev = n
    reached = [n for n in sizes if n in rows]
    if delete and getattr(m, "supports_delete", False) and reached and done == reached[-1]:
        withdrawn_total, t_spent, cut = 0, 0.0, False
        last: tuple[int, float] | None = None  # (size, seconds) of the last delete chunk
        del_budget = None if budget_s is None else 2 * budget_s
        bounds = [0, *reached]
        for lo_n, hi_n in reversed(list(zip(bounds[:-1], bounds[1:], strict=True))):
            t_step, wd, gone = 0.0, 0, 0
            top = hi_n
            while top > lo_n:
                if del_budget is None:
                    size = batch
                elif last is None:
                    size = PROBE
                else:  # grow x4 while even a linear cost would fit; stop when nothing fits
                    left = del_budget - t_spent - t_step
                    size = (min(batch, 4 * last[0]) if last[1] * 4 <= left
                            else last[0] if last[1] <= left else 0)
                    if size == 0:
                        cut = True
                        break
                a = max(lo_n, top - size)
                t, out = _timed(m.delete, np.arange(a, top, dtype=np.int64))
                last = (top - a, t)
                t_step += t
                gone += top - a
                wd += int(out)
                top = a
            withdrawn_total += wd
            t_spent += t_step
            if gone == 0:
                log(f"  {name}: delete budget spent before size {hi_n:,}")
                rec.add(name, {**base, "n_subs": hi_n, "budget_s": del_budget},
                        "delete_stopped_at", hi_n, "subscriptions")
                break
            params = {**base, "n_subs": hi_n, "batch_size": batch, "step": hi_n - lo_n,
                      "deleted": gone,
                      "delete_order": "newest first",
                      "delete_chunks": ("batch_size" if del_budget is None else
                                        f"{PROBE} first, then x4 up to batch_size while the "
                                        f"{del_budget:.0f} s budget allows")}
            if gone < hi_n - lo_n:
                params["partial"] = "delete budget reached: time of the first `deleted` only"
            rec.add(name, params, "delete_time", t_step / gone * 1e6, "us/sub")
            if not cut:
                rec.add(name, {**params, "traffic_unit": unit}, "withdrawn", wd, unit)
            rows[hi_n]["delete"] = t_step / gone * 1e6
            if cut:
                log(f"  {name}: deletes stopped by the {del_budget:.0f} s budget at size "
                    f"{hi_n:,} after {gone:,} ({t_step / gone * 1e6:.1f} us/sub)")
                rec.add(name, {**base, "n_subs": hi_n, "budget_s": del_budget},
                        "delete_stopped_at", hi_n, "subscriptions")
                break
        if not cut:
            log(f"  {name}: deleted all, withdrawn {withdrawn_total:,} (forwarded {traffic:,})")
            if name.startswith("dls") and withdrawn_total != traffic:
                rec.add(name, base, "withdrawn_mismatch", traffic - withdrawn_total, "labels")
    del m
    gc.collect()
    return rows


def _guard(rec: Recorder, spec: SystemSpec, log: Progress, base: dict[str, Any],
           fn: Callable[[], Any]) -> Any:
    """Run one system's part; a failure is logged and kept, and the run goes on."""
    try:
        return fn()
    except Exception as exc:  # noqa: BLE001 - a baseline's bug must not end the whole run
        where: dict[str, Any] = {k: base.get(k) for k in ("experiment", "distribution", "d",
                                                          "g", "n_clients") if k in base}
        log(f"  FAILED {spec.name} ({where}): {type(exc).__name__}: {exc}")
        rec.failures.append({"system": spec.name, **where,
                             "error": f"{type(exc).__name__}: {exc}"})
        gc.collect()
        return None


def _speedups(rec: Recorder, rows: dict[str, dict[int, dict[str, float]]],
              base: dict[str, Any], sizes: Sequence[int]) -> None:
    for n in sizes:
        for sysname, r in rows.items():
            if not sysname.startswith("dls") or n not in r:
                continue
            for other, ro in rows.items():
                if other.startswith("dls") or n not in ro:
                    continue
                rec.add(sysname, {**base, "n_subs": n}, f"speedup_vs_{other}",
                        ro[n]["match"] / r[n]["match"], "x")


def run_scaling(rec: Recorder, s: PaperSettings, systems: list[SystemSpec],
                log: Progress) -> None:
    """Tables 1–6 and Figure 6."""
    for dist in s.distributions:
        for d, g in s.dims:
            log(f"scaling: {dist} d={d} g={g}, up to {max(s.sizes):,} subscriptions")
            w = workload(dist, d, g, max(s.sizes), s.n_clients, s.n_events, s)
            exact = exact_at(w, s.sizes, s.check_events)
            base = {**w.params.as_dict(), "experiment": "scaling"}
            base.pop("n_subs")
            items = client_items(w)
            rows = {}
            for spec in systems:
                r = _guard(rec, spec, log, base, partial(
                    fill_and_measure, rec, spec, w, s.sizes, exact, base, s, log,
                    batch=s.batch_size, delete=True, items=items,
                    budget_s=s.scaling_budget_s))
                if r is not None:
                    rows[spec.name] = r
            _speedups(rec, rows, base, s.sizes)


def _fill(spec: SystemSpec, kw: dict[str, Any], w: Workload, batch: int, log: Progress
          ) -> Matcher:
    m = build(spec, kw)
    n = w.params.n_subs
    for a, b in _ranges(0, n, batch):
        m.insert(w.lo[a:b], w.hi[a:b], w.owners[a:b])
        log.bar(f"  {spec.name} insert", b, n)
    return m


def _load() -> float:
    return round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else -1.0


def run_matching(rec: Recorder, s: PaperSettings, systems: list[SystemSpec],
                 log: Progress) -> None:
    """The bars' setting, every system filled at once and timed interleaved."""
    d, g = s.match_dg
    n = max(s.sizes)
    for dist in s.distributions:
        log(f"matching: {dist} d={d} g={g}, {n:,} subscriptions, {s.n_clients:,} clients, "
            f"{s.match_rounds} interleaved rounds")
        w = workload(dist, d, g, n, s.n_clients, s.n_events, s)
        exact = exact_at(w, [n], s.check_events)[n]
        base = {**w.params.as_dict(), "experiment": "matching"}
        kw = build_kwargs(d, g, s.n_clients, high=w.params.domain_high,
                          client_items=client_items(w), n_subs=w.params.n_subs,
                          update_threads=s.update_threads)
        filled: dict[str, Matcher] = {}
        for spec in systems:
            m = _guard(rec, spec, log, base, partial(_fill, spec, kw, w, s.batch_size, log))
            if m is not None:
                filled[spec.name] = m
        n_ev: dict[str, int] = {}
        for name, m in filled.items():  # as many events as fit the budget, as time_match
            probe = min(len(w.events), 50)
            t, _ = _timed(m.match, w.events[:probe])
            n_ev[name] = int(min(len(w.events), max(probe, s.match_budget_s * probe
                                                    / max(t, 1e-9))))
        best = dict.fromkeys(filled, float("inf"))
        names = list(filled)
        load_before = _load()
        for r in range(s.match_rounds):
            k = r % max(1, len(names))
            for name in names[k:] + names[:k]:
                t, _ = _timed(filled[name].match, w.events[:n_ev[name]])
                best[name] = min(best[name], t / n_ev[name])
        load_after = _load()
        rows: dict[str, dict[int, dict[str, float]]] = {}
        for name, m in filled.items():
            mp = {**base, "match_events": n_ev[name], "match_rounds": s.match_rounds,
                  "load_avg_1m_before": load_before, "load_avg_1m_after": load_after,
                  "timing": "one match() call over the first match_events events per "
                            "round, systems interleaved (order rotated), best round"}
            rec.add(name, mp, "matching_time", best[name] * 1e6, "us/event")
            fn, fpr, dpe = check(m, w.events[:len(exact[0]) - 1], exact, s.n_clients)
            cp = {**base, "check_events": len(exact[0]) - 1}
            rec.add(name, cp, "false_negatives", fn, "count")
            rec.add(name, cp, "false_positive_rate", fpr, "fraction")
            rec.add(name, cp, "deliveries_per_event", dpe, "clients")
            rows[name] = {n: {"match": best[name] * 1e6}}
            log(f"  {name:10} match {best[name] * 1e6:10.3f} us/ev ({n_ev[name]:,} events)  "
                f"{dpe:8.2f} deliveries/ev  fn {fn}")
        log(f"  load average (1 min) {load_before} before, {load_after} after the rounds")
        _speedups(rec, rows, base, [n])
        filled.clear()
        gc.collect()


def gran_workload(dist: str, g: int, s: PaperSettings, length_frac: float = 1 / 16
                  ) -> Workload:
    """§6.2.2 workload: d = 3, fixed absolute interval length (up to ``length_frac`` of the
    domain, 2^20/16 by default)."""
    return workload(dist, s.gran_d, g, s.gran_n_subs, s.n_clients, s.n_events, s,
                    length_cells=g * length_frac)


def run_granules(rec: Recorder, s: PaperSettings, systems: list[SystemSpec],
                 log: Progress) -> None:
    """Tables 8–9 and Figures 7–8 (and every system's false positives per g)."""
    for dist in s.distributions:
        for g in s.gran_granules:
            w = gran_workload(dist, g, s)
            n = w.params.n_subs
            log(f"granules: {dist} d={s.gran_d} g={g} n={n:,}")
            exact = exact_at(w, [n], s.check_events)[n]
            base = {**w.params.as_dict(), "experiment": "granules"}
            sp = ContentSpace.from_spec(space_spec(s.gran_d, g))
            off, _ = core.map_boxes(sp, w.lo, w.hi)
            rec.add("dls", base, "labels_per_subscription", off[-1] / n, "labels")
            kw = build_kwargs(s.gran_d, g, w.params.n_clients, client_items=client_items(w),
                              n_subs=w.params.n_subs, update_threads=s.update_threads)
            rows: dict[str, dict[int, dict[str, float]]] = {}
            for spec in systems:
                r = _guard(rec, spec, log, base, partial(_gran_one, rec, spec, w, kw, exact,
                                                         base, s, log))
                if r is not None:
                    rows[spec.name] = {n: r}
            _speedups(rec, rows, {**base, "n_subs": n}, [n])


def _gran_one(rec: Recorder, spec: SystemSpec, w: Workload, kw: dict[str, Any],
              exact: tuple[np.ndarray, np.ndarray], base: dict[str, Any], s: PaperSettings,
              log: Progress) -> dict[str, float] | None:
    n = w.params.n_subs
    probe = min(n, GRAN_PROBE)
    t_probe, _ = _timed(build(spec, kw).insert, w.lo[:probe], w.hi[:probe], w.owners[:probe])
    if probe < n and t_probe / probe * n > s.scaling_budget_s:
        log(f"  {spec.name:10} insert would take ~{t_probe / probe * n:.0f} s > "
            f"{s.scaling_budget_s:.0f} s budget: only the {probe:,}-subscription probe ran")
        rec.add(spec.name, {**base, "n_subs": probe, "budget_s": s.scaling_budget_s},
                "insert_time_probe", t_probe / probe * 1e6, "us/sub")
        rec.add(spec.name, {**base, "budget_s": s.scaling_budget_s}, "stopped_at", 0,
                "subscriptions")
        return None
    best, m, traffic = float("inf"), None, 0
    for rep in range(s.gran_repeats):
        m = build(spec, kw)
        t, traffic = _timed(m.insert, w.lo, w.hi, w.owners)
        best = min(best, t)
        if rep == 0 and t > 1.0:
            break
    assert m is not None  # noqa: S101
    params = {**base, "insert_repeats": s.gran_repeats,
              "timing": "one insert() of all subscriptions, best of repeats",
              "system_class": type(m).__name__}
    rec.add(spec.name, params, "insert_time", best / n * 1e6, "us/sub")
    unit = _traffic_unit(spec.name)
    rec.add(spec.name, {**base, "traffic_unit": unit}, "forwarded", int(traffic), unit)
    r = measure_at(rec, m, spec.name, base, n, w.events, exact, s, w.params.n_clients)
    log(f"  {spec.name:10} insert {best / n * 1e6:9.3f} us/sub  match "
        f"{r['match']:10.3f} us/ev  fp {r['fp']:.4f}  fn {r['fn']:.0f}")
    return r


def _optimal_k(m: int, n: int) -> int:
    return int(min(16, max(1, round(m / max(1, n) * math.log(2)))))


def run_fp(rec: Recorder, s: PaperSettings, log: Progress) -> None:
    """Figure 9 (vs granules, m = 2^16) and Table 10 (vs m at g = 32).

    Same workloads as ``granules`` (d = 3, 8,000 subscriptions, events drawn like the
    subscriptions' lower bounds). Two places where a DLS network meets false positives,
    both measured on all the workload's events against the exact brute-force answer:

    * **client level** (``fp_client``, the paper's Algorithm 4): one broker whose client
      filters have ``m`` counters each and ``k`` hash functions (optimal for the mean
      distinct labels per client, capped at 16). A false positive is a delivery (event,
      client) where the client has no subscription containing the event; the rate is
      false-positive deliveries / all deliveries — the share of what clients receive that
      their SDK drops. ``fp_client_per_negative`` divides the same false positives by the
      (event, client) pairs that should not be delivered (the classic Bloom-filter FPR,
      per filter query). ``fp_client_cells*`` are the same with exact per-client label
      sets (the cells alone, no Bloom error).
    * **network level** (``fp_network``, the SFF/ERT): one filter of ``m`` counters that
      holds every distinct label of the 8,000 subscriptions (what the broker advertises
      and a neighbour's ERT holds), ``k`` optimal for that count. A false positive is an
      event the filter passes although no subscription contains it; the rate is false
      positives / events passed (``fp_network``), / all events (``fp_network_per_event``)
      and / events no subscription contains (``fp_network_per_negative``, the classic
      Bloom-filter FPR). ``fp_network_cells`` is the cells-only share.

    With only inserts the paper's aggregation advertises exactly the labels whose
    positions the SFF lacks, and the ERT ends up with the same non-zero counters as the SFF
    (same m, k, hashes), so ``dls-paper`` has the same false positives here as ``dls``.
    """
    points = [("fp_granules", g, s.fp_m_granules, 1 / 16, "dls") for g in s.gran_granules]
    points += [("fp_m", s.fp_g, m, frac, "dls") for frac in s.fp_length_fracs
               for m in s.fp_ms]
    # Beyond the paper: the Table 10 sweep again with equi-depth cells (dls.tuning) fitted
    # to the events of a training workload (another seed), as system ``dls-tuned``.
    points += [("fp_m", s.fp_g, m, s.fp_length_fracs[0], "dls-tuned") for m in s.fp_ms]
    # And with cells fitted to the slack of the training workload's events and
    # subscriptions (benchmarks.cells_fit), as ``dls-fitted``: where the cells' floor is.
    points += [("fp_m", s.fp_g, m, s.fp_length_fracs[0], "dls-fitted") for m in s.fp_ms]
    for dist in s.distributions:
        cache: dict[tuple[int, float, str], Any] = {}
        # the workload and its exact answer, shared by both sets of cells
        exacts: dict[tuple[int, float], tuple[Workload, Any]] = {}
        for exp, g, m, frac, system in points:
            if (g, frac, system) not in cache:
                if (g, frac) not in exacts:
                    w = gran_workload(dist, g, s, frac)
                    n = w.params.n_subs
                    exacts[(g, frac)] = (w, exact_at(w, [n], len(w.events))[n])
                w, exact = exacts[(g, frac)]
                if system == "dls":
                    attrs = None
                elif system == "dls-tuned":
                    attrs = tuned_attributes(w, s)
                else:
                    attrs = fitted_attributes(w)
                    _fp_floor(rec, w, exact, s, {**w.params.as_dict(), "experiment": exp,
                                                 "length_frac": frac}, log)
                cache = {(g, frac, system): _fp_cells(w, exact, attrs, s)}
                gc.collect()
            (w, exact, per_client, distinct, positive, in_cells, ev_labels,
             cells_fp, cells_neg, attrs, labels_per_sub) = cache[(g, frac, system)]
            nc = w.params.n_clients
            k_client = _optimal_k(m, round(per_client))
            k_net = _optimal_k(m, len(distinct))
            base = {**w.params.as_dict(), "experiment": exp, "m": m, "length_frac": frac,
                    "k_client": k_client, "k_network": k_net, "counter_bits": 4,
                    "events": len(w.events), "distinct_labels": len(distinct),
                    "distinct_labels_per_client": per_client,
                    "k_rule": "round(m / n * ln 2) clipped to [1, 16]"}
            if attrs is not None:
                base.update(cells=CELLS_OF[system],
                            cells_per_attribute=[len(a["breakpoints"]) + 1 for a in attrs])
            bm = BrokerMatcher(s.gran_d, g, nc, client_m=m, client_k=k_client,
                               attributes=attrs)
            bm.insert(w.lo, w.hi, w.owners)
            fn, fp_c, dpe, fp_c_neg = _pairs_check(bm.match(w.events), exact, nc)
            del bm
            net = CountingBloomFilter.with_params(m, k_net)
            net.add_many(distinct)
            passed = net.contains_many(ev_labels)
            fp_ev = passed & ~positive
            neg = int((~positive).sum())
            cells_net = in_cells & ~positive
            for metric, value in (
                    ("fp_client", fp_c), ("fp_client_cells", cells_fp),
                    ("fp_client_per_negative", fp_c_neg),
                    ("fp_client_cells_per_negative", cells_neg),
                    ("false_negatives", fn), ("deliveries_per_event", dpe),
                    ("fp_network", fp_ev.sum() / max(1, passed.sum())),
                    ("fp_network_per_event", fp_ev.mean()),
                    ("fp_network_per_negative", fp_ev.sum() / max(1, neg)),
                    ("fp_network_cells", cells_net.sum() / max(1, in_cells.sum())),
                    ("fp_network_cells_per_event", cells_net.mean()),
                    ("events_without_match", neg / len(w.events)),
                    ("labels_per_subscription", labels_per_sub)):
                unit = ("count" if metric == "false_negatives" else
                        "clients" if metric == "deliveries_per_event" else
                        "labels" if metric == "labels_per_subscription" else "fraction")
                rec.add(system, base, metric, float(value), unit)
            log(f"fp: {dist} {exp} {system} g={g} len<={frac:g} m=2^{int(math.log2(m))}: "
                f"client {fp_c:.4%} (cells {cells_fp:.4%}; of negative pairs {fp_c_neg:.4%}), "
                f"network {fp_ev.sum() / max(1, passed.sum()):.4%} of passed, "
                f"{fp_ev.mean():.4%} of events; fn {fn}")


CELLS_OF = {
    "dls-tuned": "equi-depth (dls.tuning), fitted to the events of a training workload "
                 "(seed + 1)",
    "dls-fitted": "slack-optimal (benchmarks.cells_fit), fitted to the events and "
                  "subscriptions of a training workload (seed + 1)",
}


def _training(w: Workload) -> Workload:
    """A workload with ``w``'s parameters and the next seed: what cells are fitted to."""
    return generate(WorkloadParams(**{**w.params.as_dict(), "seed": w.params.seed + 1}))


def fitted_attributes(w: Workload, *, in_sample: bool = False) -> list[dict[str, Any]]:
    """Slack-optimal cells (as many as ``g``) fitted to another seed's workload.

    ``in_sample``: fitted to ``w`` itself instead, the events and subscriptions they are
    then measured on. No deployment knows its future events; it shows how low any grid of
    ``g`` cells per attribute gets on this workload (:func:`_fp_floor`).
    """
    train = w if in_sample else _training(w)
    attrs = space_spec(w.params.d, w.params.g)["attributes"]
    return fit_attributes(attrs, train.events, train.lo, train.hi)


def _fp_floor(rec: Recorder, w: Workload, exact: tuple[np.ndarray, np.ndarray],
              s: PaperSettings, base: dict[str, Any], log: Progress) -> None:
    """The cells-only rate of negative pairs with slack-optimal cells fitted in sample."""
    *_, cells_neg, _, labels_per_sub = _fp_cells(w, exact, fitted_attributes(w, in_sample=True),
                                                 s)
    params = {**base, "cells": "slack-optimal (benchmarks.cells_fit), fitted to the "
                               "measured workload itself (in sample)"}
    rec.add("dls-fitted", params, "fp_client_cells_per_negative_in_sample", float(cells_neg),
            "fraction")
    rec.add("dls-fitted", params, "labels_per_subscription_in_sample", labels_per_sub,
            "labels")
    log(f"fp: {w.params.distribution} g={w.params.g}: cells fitted in sample, cells-only "
        f"rate of negative pairs {cells_neg:.4%}, {labels_per_sub:.1f} labels per "
        f"subscription")


def tuned_attributes(w: Workload, s: PaperSettings) -> list[dict[str, Any]]:
    """Equi-depth cells (as many as ``g``) fitted to the events of another seed's workload.

    The training workload has the same parameters but ``seed + 1``: the cells are fitted
    to the distribution, not to the events they are then measured on.
    """
    p = w.params
    train = _training(w)
    spec = space_spec(p.d, p.g)
    names = attr_names(p.d)
    tuned = tune_space(spec, {n: train.events[:, i] for i, n in enumerate(names)})
    return list(tuned["attributes"])


def _fp_cells(w: Workload, exact: tuple[np.ndarray, np.ndarray],
              attrs: list[dict[str, Any]] | None, s: PaperSettings) -> tuple[Any, ...]:
    """What the false-positive points of one workload and one set of cells share."""
    n = w.params.n_subs
    ex_off, ex_cli = exact
    spec = space_spec(s.gran_d, w.params.g)
    if attrs is not None:
        spec["attributes"] = attrs
    sp = ContentSpace.from_spec(spec)
    off, labels = core.map_boxes(sp, w.lo, w.hi)
    nc = w.params.n_clients
    owner_rep = np.repeat(w.owners, np.diff(off)).astype(np.uint64)
    pair_keys = np.unique(labels * np.uint64(nc) + owner_rep)  # (label, client)
    ev_labels = BrokerMatcher(s.gran_d, w.params.g, 1, attributes=attrs).event_labels(w.events)
    cells_fn, cells_fp, _, cells_neg = _pairs_check(
        _cell_deliveries(pair_keys, ev_labels, nc), (ex_off, ex_cli), nc)
    if cells_fn:
        raise AssertionError(f"direct DLS missed {cells_fn} deliveries")
    distinct = np.unique(labels)
    positive = np.diff(ex_off) > 0
    in_cells = np.isin(ev_labels, distinct)
    return (w, (ex_off, ex_cli), len(pair_keys) / nc, distinct, positive, in_cells,
            ev_labels, cells_fp, cells_neg, attrs, float(off[-1]) / n)


def _cell_deliveries(pair_keys: np.ndarray, ev_labels: np.ndarray, nc: int
                     ) -> tuple[np.ndarray, np.ndarray]:
    """Exact label-set deliveries (cells only, no Bloom error) as CSR, from sorted
    ``label * nc + client`` keys: every client holding the event's label."""
    lab = ev_labels.astype(np.uint64)
    lo = np.searchsorted(pair_keys, lab * np.uint64(nc))
    hi = np.searchsorted(pair_keys, (lab + np.uint64(1)) * np.uint64(nc))
    counts = (hi - lo).astype(np.int64)
    offsets = np.zeros(len(lab) + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    idx = np.repeat(lo - offsets[:-1], counts) + np.arange(int(offsets[-1]))
    return offsets, (pair_keys[idx] % np.uint64(nc)).astype(np.int64)


def _pairs_check(got: tuple[np.ndarray, np.ndarray], exact: tuple[np.ndarray, np.ndarray],
                 nc: int) -> tuple[int, float, float, float]:
    """(false negatives, FP / deliveries, deliveries per event, FP / negative pairs)."""
    n = len(exact[0]) - 1
    fn, fp, tot = core.delivery_check(np.asarray(got[0]), np.asarray(got[1]), exact[0],
                                      exact[1], nc, n)
    negatives = n * nc - int(exact[0][n])
    return fn, (fp / tot if tot else 0.0), tot / n, fp / max(1, negatives)


def run_growth_subs(rec: Recorder, s: PaperSettings, systems: list[SystemSpec],
                    log: Progress) -> None:
    """Beyond the paper: 100K..5M subscriptions."""
    d, g = s.growth_dg
    log(f"growth_subs: uniform d={d} g={g}, up to {max(s.growth_sizes):,} subscriptions")
    w = workload("uniform", d, g, max(s.growth_sizes), s.n_clients, s.n_events, s)
    exact = exact_at(w, s.growth_sizes, s.check_events)
    base = {**w.params.as_dict(), "experiment": "growth_subs"}
    base.pop("n_subs")
    items = client_items(w)
    rows = {}
    for spec in systems:
        r = _guard(rec, spec, log, base, partial(
            fill_and_measure, rec, spec, w, s.growth_sizes, exact, base, s, log,
            batch=s.growth_batch, delete=False, items=items, budget_s=s.growth_budget_s))
        if r is not None:
            rows[spec.name] = r
    _speedups(rec, rows, base, s.growth_sizes)


def run_growth_clients(rec: Recorder, s: PaperSettings, systems: list[SystemSpec],
                       log: Progress) -> None:
    """Beyond the paper: the same subscriptions spread over 100..100K clients."""
    d, g = s.growth_dg
    n = s.growth_clients_subs
    for nc in s.growth_clients:
        log(f"growth_clients: uniform d={d} g={g}, {n:,} subscriptions, {nc:,} clients")
        w = workload("uniform", d, g, n, nc, s.n_events, s)
        exact = exact_at(w, [n], s.check_events)
        base = {**w.params.as_dict(), "experiment": "growth_clients"}
        base.pop("n_subs")
        items = client_items(w)
        rows = {}
        for spec in systems:
            r = _guard(rec, spec, log, base, partial(
                fill_and_measure, rec, spec, w, [n], exact, base, s, log,
                batch=s.batch_size, delete=True, items=items, budget_s=s.scaling_budget_s))
            if r is not None:
                rows[spec.name] = r
        _speedups(rec, rows, base, [n])


def run(s: PaperSettings, log: Progress | None = None, *, require_all: bool = False,
        checkpoint: Callable[[list[dict[str, Any]]], None] | None = None
        ) -> tuple[list[dict[str, Any]], list[str], list[dict[str, Any]]]:
    """Run the experiments of ``s``; return (records, systems that ran, failures).

    ``checkpoint`` gets the records so far after every experiment (partial results survive
    a crash or an interrupted run).
    """
    log = log or Progress()
    systems = available_systems(s.systems, require_all=require_all, log=log)
    rec = Recorder()
    log(f"systems: {', '.join(x.name for x in systems)}; experiments: "
        f"{', '.join(s.experiments)}")
    # Untimed, as a node does at start: no first batch waits for a kernel to compile.
    log(f"kernels compiled or loaded in {warm_up_kernels():.1f} s (untimed)")
    for exp in s.experiments:
        t0 = time.perf_counter()
        runner = {"scaling": lambda: run_scaling(rec, s, systems, log),
                  "matching": lambda: run_matching(rec, s, systems, log),
                  "granules": lambda: run_granules(rec, s, systems, log),
                  "fp": lambda: run_fp(rec, s, log),
                  "growth_subs": lambda: run_growth_subs(rec, s, systems, log),
                  "growth_clients": lambda: run_growth_clients(rec, s, systems, log)}.get(exp)
        if runner is None:
            raise ValueError(f"experiments: unknown experiment {exp!r}; known: {EXPERIMENTS}")
        try:
            runner()
        except Exception as exc:  # noqa: BLE001 - keep the other experiments' results
            log(f"FAILED experiment {exp}: {type(exc).__name__}: {exc}")
            rec.failures.append({"experiment": exp, "error": f"{type(exc).__name__}: {exc}"})
        log(f"{exp} done in {time.perf_counter() - t0:.1f} s")
        if checkpoint is not None:
            checkpoint(rec.records)
    return rec.records, [x.name for x in systems], rec.failures


def merge_results(out: Path, records: list[dict[str, Any]], experiments: Sequence[str], *,
                  argv: Sequence[str] | None, started: str, wall: float,
                  **facts: Any) -> Path:
    """Replace ``out``'s records of ``experiments`` by ``records``; note the re-run.

    The meta file keeps the first run's facts and gets a ``reruns`` entry (experiments,
    command, start, wall time, machine and commit) per merge.
    """
    replaced = {x for e in experiments for x in RECORD_EXPERIMENTS.get(e, (e,))}
    old = json.loads(out.read_text())
    kept = [r for r in old if r["params"].get("experiment") not in replaced]
    out.write_text(json.dumps(kept + records, indent=1) + "\n")
    meta_path = out.with_name(out.stem + ".meta.json")
    meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
    meta.setdefault("reruns", []).append({
        "experiments": list(experiments),
        "command": [sys.executable, "-m", "benchmarks.paper",
                    *(argv if argv is not None else sys.argv[1:])],
        "started_utc": started, "wall_time_s": round(wall, 2), "n_records": len(records),
        "machine": core.machine_info(), **facts})
    meta["n_records"] = len(kept) + len(records)
    meta_path.write_text(json.dumps(meta, indent=1) + "\n")
    return meta_path


def _csv(value: str, what: str, known: Sequence[str] | None = None) -> tuple[str, ...]:
    items = tuple(x.strip() for x in value.split(",") if x.strip())
    if not items:
        raise SystemExit(f"--{what}: empty list")
    if known is not None:
        bad = [x for x in items if x not in known]
        if bad:
            raise SystemExit(f"--{what}: unknown {bad[0]!r}; known: {', '.join(known)}")
    return items


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point."""
    from benchmarks.paper_systems import SYSTEMS

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="reduced sizes (a few minutes)")
    ap.add_argument("--tiny", action="store_true", help="seconds; for tests")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON records file")
    ap.add_argument("--experiments", default=None, help=f"comma list of {EXPERIMENTS}")
    ap.add_argument("--systems", default=None, help="comma list of systems to run")
    ap.add_argument("--require-all", action="store_true",
                    help="fail instead of skipping a system whose module is missing")
    ap.add_argument("--merge", action="store_true",
                    help="keep --out's records of the experiments not run now")
    ap.add_argument("--update-threads", type=int, default=1,
                    help="threads of the DLS systems' large batch updates (default 1)")
    args = ap.parse_args(argv)
    if args.update_threads < 1:
        ap.error(f"--update-threads must be at least 1, got {args.update_threads}")
    s = TINY if args.tiny else QUICK if args.quick else FULL
    s = replace(s, update_threads=args.update_threads)
    if args.experiments:
        s = replace(s, experiments=_csv(args.experiments, "experiments", EXPERIMENTS))
    if args.systems:
        s = replace(s, systems=_csv(args.systems, "systems", [x.name for x in SYSTEMS]))
    started = datetime.now(UTC).isoformat(timespec="seconds")
    t0 = time.perf_counter()
    out: Path = args.out
    out.parent.mkdir(parents=True, exist_ok=True)
    partial_path = out.with_name(out.stem + ".partial.json")

    def save_partial(recs: list[dict[str, Any]]) -> None:
        partial_path.write_text(json.dumps(recs, indent=1) + "\n")

    records, ran, failures = run(s, require_all=args.require_all, checkpoint=save_partial)
    wall = time.perf_counter() - t0
    mode = "tiny" if args.tiny else "quick" if args.quick else "full"
    if args.merge and out.exists():
        path = merge_results(out, records, s.experiments, argv=argv, started=started,
                             wall=wall, mode=mode, systems=ran, failures=failures)
        partial_path.unlink(missing_ok=True)
        print(f"merged {len(records)} records of {', '.join(s.experiments)} into {out}; "
              f"re-run noted in {path}")
        return 1 if failures and args.require_all else 0
    skipped = [x.name for x in SYSTEMS
               if x.name not in ran and (s.systems is None or x.name in s.systems)]
    meta_path = core.write_results(
        out, records, benchmark=BENCHMARK, module="benchmarks.paper", argv=argv,
        started=started, wall=wall, mode=mode, systems=ran, systems_skipped=skipped,
        failures=failures, settings=asdict(s))
    partial_path.unlink(missing_ok=True)
    print(f"wrote {len(records)} records to {out} and {meta_path} in {wall:.1f} s")
    if failures:
        print(f"{len(failures)} system runs failed: see 'failures' in {meta_path}")
    return 1 if failures and args.require_all else 0


if __name__ == "__main__":
    raise SystemExit(main())
