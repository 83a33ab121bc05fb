"""One quick side-by-side run of every baseline matcher on one workload (a smoke benchmark).

Run::

    .venv/bin/python -m benchmarks.baselines.quickcompare [--n 100000] [--d 3] [--g 32]
        [--dist uniform] [--clients 1000] [--events 10000] [--systems a,b,...]
        [--out records.json]

Every system gets the same :mod:`benchmarks.workload` workload, inserted in batches of
``--batch`` and deleted in the same batches. Matching is one ``match`` call on all events
(best of ``--repeats``); the brute force, which loops over events in Python, is timed on
the first ``--bf-events`` events only. Deliveries of every system are checked against the
brute force on that sample (false negatives must be 0 for all; false positives are 0 for
the exact systems). The full paper experiments are ``benchmarks.paper``; this is the
quick look.

Times are wall clock (``time.perf_counter``), as everywhere in ``benchmarks/``; beside
insert and matching the process CPU time (``time.process_time``) is recorded too
(``*_cpu_time``), which other processes sharing the cores disturb less.
"""

from __future__ import annotations

import argparse
import gc
import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.baselines.base import Matcher
from benchmarks.baselines.bruteforce import BruteForceBaseline
from benchmarks.baselines.dls import DLSMatcher
from benchmarks.baselines.mics import MICSMatcher
from benchmarks.baselines.rtree_index import RTreeMatcher
from benchmarks.core import delivery_check
from benchmarks.workload import Workload, WorkloadParams, generate

MAKERS: dict[str, Callable[[Workload], Matcher]] = {
    "bruteforce": lambda w: BruteForceBaseline(w.params.d, w.params.n_clients),
    "rtree": lambda w: RTreeMatcher(w.params.d, w.params.n_clients),
    "mics": lambda w: MICSMatcher(w.params.d, w.params.g, w.params.n_clients),
    "mics-cell": lambda w: MICSMatcher(w.params.d, w.params.g, w.params.n_clients,
                                       precision="cell"),
    "dls": lambda w: DLSMatcher.for_workload(w),
    "dls-direct": lambda w: DLSMatcher.for_workload(w, client_filter="direct"),
    "dls-paper": lambda w: DLSMatcher.for_workload(w, mode="paper"),
}
DEFAULT_SYSTEMS = ("bruteforce", "rtree", "mics", "mics-cell", "dls", "dls-direct")


def run(w: Workload, systems: Sequence[str], batch: int, repeats: int, bf_events: int,
        log: Callable[[str], None] = print) -> list[dict[str, Any]]:
    """Insert, match, check, delete with each system; return core-shaped records."""
    n = w.params.n_subs
    nc = w.params.n_clients
    chunks = [(a, min(n, a + batch)) for a in range(0, n, batch)]
    sample = w.events[:bf_events]
    ref = BruteForceBaseline(w.params.d, nc)
    ref.insert(w.lo, w.hi, w.owners)
    exact = ref.match(sample)
    base = {**w.params.as_dict(), "batch_size": batch, "match_repeats": repeats}
    records: list[dict[str, Any]] = []
    log(f"{'system':>11} {'insert us':>9} {'(cpu)':>7} {'traffic':>8} {'match us/ev':>11} "
        f"{'(cpu)':>7} {'delete us':>9} {'B/sub':>7} {'fn':>3} {'fp rate':>8} {'wall s':>6}")
    for name in systems:
        t_all = time.perf_counter()
        m = MAKERS[name](w)
        gc.collect()
        t0, c0 = time.perf_counter(), time.process_time()
        traffic = sum(m.insert(w.lo[a:b], w.hi[a:b], w.owners[a:b]) for a, b in chunks)
        t_ins, c_ins = time.perf_counter() - t0, time.process_time() - c0
        mem = m.memory_bytes()
        ev = sample if name == "bruteforce" else w.events
        best = best_cpu = float("inf")
        for _ in range(repeats):
            gc.collect()
            t0, c0 = time.perf_counter(), time.process_time()
            m.match(ev)
            best = min(best, time.perf_counter() - t0)
            best_cpu = min(best_cpu, time.process_time() - c0)
        off, cli = m.match(sample)
        fn, fp, tot = delivery_check(off, cli, exact[0], exact[1], nc, len(sample))
        gc.collect()
        t0 = time.perf_counter()
        withdrawn = sum(m.delete(np.arange(a, b)) for a, b in chunks)
        t_del = time.perf_counter() - t0
        p = {**base, "match_events": len(ev), "check_events": len(sample)}
        vals = {"insert_time": (t_ins / n * 1e6, "us/sub"),
                "insert_cpu_time": (c_ins / n * 1e6, "us/sub"),
                "forwarded": (traffic, "units"),
                "matching_time": (best / len(ev) * 1e6, "us/event"),
                "matching_cpu_time": (best_cpu / len(ev) * 1e6, "us/event"),
                "delete_time": (t_del / n * 1e6, "us/sub"), "withdrawn": (withdrawn, "units"),
                "bytes_per_subscription": (mem / n, "bytes/sub"),
                "false_negatives": (fn, "count"),
                "false_positive_rate": (fp / tot if tot else 0.0, "fraction")}
        for metric, (value, unit) in vals.items():
            records.append({"benchmark": "quickcompare", "system": m.name, "params": p,
                            "metric": metric, "value": float(value), "unit": unit})
        log(f"{m.name:>11} {vals['insert_time'][0]:>9.2f} {vals['insert_cpu_time'][0]:>7.2f} "
            f"{traffic:>8} {vals['matching_time'][0]:>11.2f} "
            f"{vals['matching_cpu_time'][0]:>7.2f} {vals['delete_time'][0]:>9.2f} "
            f"{mem / n:>7.0f} {fn:>3} {vals['false_positive_rate'][0]:>8.4f} "
            f"{time.perf_counter() - t_all:>6.1f}")
        del m
    return records


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000, help="subscriptions")
    ap.add_argument("--d", type=int, default=3)
    ap.add_argument("--g", type=int, default=32)
    ap.add_argument("--dist", default="uniform", choices=("uniform", "zipf"))
    ap.add_argument("--clients", type=int, default=1_000)
    ap.add_argument("--events", type=int, default=10_000)
    ap.add_argument("--batch", type=int, default=50_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--bf-events", type=int, default=500)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--systems", default=",".join(DEFAULT_SYSTEMS),
                    help=f"comma list of {sorted(MAKERS)}")
    ap.add_argument("--out", type=Path, default=None, help="write the records here (JSON)")
    args = ap.parse_args(argv)
    systems = [s for s in args.systems.split(",") if s]
    unknown = [s for s in systems if s not in MAKERS]
    if unknown:
        ap.error(f"unknown systems {unknown}; known: {sorted(MAKERS)}")
    w = generate(WorkloadParams(args.dist, args.d, args.g, args.n, args.clients, args.events,
                                seed=args.seed))
    records = run(w, systems, args.batch, args.repeats, min(args.bf_events, args.events))
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(records, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
