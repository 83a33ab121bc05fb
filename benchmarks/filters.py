"""Filter micro-benchmark: ``dls.cbf.CountingBloomFilter`` vs fastbloom-rs's counting filter.

Run::

    .venv/bin/python -m benchmarks.filters [--quick] [--out benchmarks/results/filters.json]

For every ``(m, k)`` of the settings both filters get the same ``m`` counters (4-bit) and
``k`` hashes (:class:`benchmarks.baselines.cbf_peer.PeerCountingBloomFilter`), and the same
labels: ``n = round(m ln 2 / k)`` distinct random labels below ``2**62`` (the load at
which ``k`` is optimal) and ``n_queries`` other labels that were never inserted. In the
same run, for each filter:

=========================  ========  ======================================================
metric                     unit      meaning
=========================  ========  ======================================================
insert_batch_time          ns/op     one batch call with all ``n`` labels into an empty
                                     filter (dls ``add_many``, peer ``add_int_batch``)
insert_single_time         ns/op     one call per label, first ``single_ops`` labels
query_batch_time           ns/op     one batch call on the ``n_queries`` absent labels
query_single_time          ns/op     one call per label, first ``single_ops`` absent labels
delete_batch_time          ns/op     remove all ``n`` labels in one call (the peer has no
                                     batch removal: its ``remove_many`` is a Python loop)
delete_single_time         ns/op     one call per label, ``single_ops`` labels
memory_bytes               bytes     packed counters (``m * 4 / 8`` for both)
resident_bytes             bytes     what the counters take in RAM (dls keeps one byte
                                     per counter; the peer keeps them packed)
false_positive_rate        fraction  absent labels reported present, after ``n`` inserts
false_positive_theory      fraction  ``(1 - exp(-k n / m)) ** k``
false_negatives            count     inserted labels reported absent (must be 0)
=========================  ========  ======================================================

Times are ``time.perf_counter`` wall clock, best of ``repeats`` (each repeat on a fresh
filter), divided by the number of operations. Records have the shape of
``benchmarks/core.py``'s: ``{"benchmark": "filters", "system", "params", "metric",
"value", "unit"}``; the systems are ``dls-cbf`` and ``fastbloom-rs``.
"""

from __future__ import annotations

import argparse
import gc
import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from benchmarks.baselines.cbf_peer import PeerCountingBloomFilter
from benchmarks.core import write_results
from dls.cbf import CountingBloomFilter

BENCHMARK = "filters"
DEFAULT_OUT = Path("benchmarks/results/filters.json")


@dataclass(frozen=True)
class FilterSettings:
    """Filter sizes and repetitions of one run."""

    ms: tuple[int, ...] = (1 << 10, 1 << 16, 1 << 20)
    ks: tuple[int, ...] = (4, 7)
    n_queries: int = 200_000
    single_ops: int = 20_000
    repeats: int = 3
    seed: int = 0

    def __post_init__(self) -> None:
        for m in self.ms:
            if m < 16 or m % 16:
                raise ValueError(f"every m must be a positive multiple of 16, got {m}")
        for k in self.ks:
            if not 1 <= k <= 64:
                raise ValueError(f"every k must be in [1, 64], got {k}")
        if min(self.n_queries, self.single_ops, self.repeats) < 1:
            raise ValueError("n_queries, single_ops and repeats must be positive")


FULL = FilterSettings()
QUICK = FilterSettings(ms=(1 << 12,), ks=(7,), n_queries=5_000, single_ops=500, repeats=1)


class _Filter(Protocol):
    def add(self, label: int) -> None: ...
    def remove(self, label: int) -> None: ...
    def add_many(self, labels: np.ndarray) -> None: ...
    def remove_many(self, labels: np.ndarray) -> None: ...
    def contains_many(self, labels: np.ndarray) -> np.ndarray: ...
    def memory_bytes(self) -> int: ...


def _dls_filter(m: int, k: int) -> CountingBloomFilter:
    return CountingBloomFilter.with_params(m, k, counter_bits=4)


def _dls_contains(f: CountingBloomFilter, label: int) -> bool:
    return label in f


def _peer_contains(f: PeerCountingBloomFilter, label: int) -> bool:
    return f.contains(label)


SYSTEMS: dict[str, tuple[Callable[[int, int], Any], Callable[[Any, int], bool],
                         Callable[[Any], int]]] = {
    "dls-cbf": (_dls_filter, _dls_contains, lambda f: int(f.counters.nbytes)),
    "fastbloom-rs": (PeerCountingBloomFilter, _peer_contains, lambda f: f.memory_bytes()),
}


def draw_labels(rng: np.random.Generator, n: int, n_absent: int) -> tuple[np.ndarray,
                                                                           np.ndarray]:
    """``n`` distinct labels and ``n_absent`` distinct other labels, uint64 below 2**62."""
    need = n + n_absent
    pool = np.unique(rng.integers(0, 1 << 62, size=need + need // 8 + 16, dtype=np.int64))
    while len(pool) < need:  # practically never: collisions among 2**62 values
        pool = np.unique(np.concatenate([pool, rng.integers(0, 1 << 62, size=need)]))
    pool = rng.permutation(pool)[:need].astype(np.uint64)
    return pool[:n], pool[n:]


def _best(repeats: int, make: Callable[[], Any], op: Callable[[Any], Any],
          prepare: Callable[[Any], Any] | None = None) -> float:
    best = float("inf")
    for _ in range(repeats):
        f = make()
        if prepare is not None:
            prepare(f)
        gc.collect()
        t0 = time.perf_counter()
        op(f)
        best = min(best, time.perf_counter() - t0)
    return best


def _measure(make_one: Callable[[int, int], Any], contains_one: Callable[[Any, int], bool],
             m: int, k: int, members: np.ndarray, absent: np.ndarray, repeats: int,
             few_members: list[int], few_absent: list[int]) -> list[float]:
    """Seconds per op: insert batch/single, query batch/single, delete batch/single."""
    def make() -> Any:
        return make_one(m, k)

    def fill(f: _Filter) -> None:
        f.add_many(members)

    def add_single(f: _Filter) -> None:
        for x in few_members:
            f.add(x)

    def del_single(f: _Filter) -> None:
        for x in few_members:
            f.remove(x)

    def qry_single(f: Any) -> None:
        for x in few_absent:
            contains_one(f, x)

    def qry_batch(f: _Filter) -> None:
        f.contains_many(absent)

    def del_batch(f: _Filter) -> None:
        f.remove_many(members)

    n, few = len(members), len(few_members)
    return [_best(repeats, make, fill) / n,
            _best(repeats, make, add_single) / few,
            _best(repeats, make, qry_batch, fill) / len(absent),
            _best(repeats, make, qry_single, fill) / len(few_absent),
            _best(repeats, make, del_batch, fill) / n,
            _best(repeats, make, del_single, fill) / few]


def run(settings: FilterSettings = FULL, log: Callable[[str], None] = print
        ) -> list[dict[str, Any]]:
    """Measure both filters at every ``(m, k)``; return the records."""
    s = settings
    rng = np.random.default_rng(s.seed)
    records: list[dict[str, Any]] = []

    def add(system: str, params: dict[str, Any], metric: str, value: float, unit: str
            ) -> None:
        records.append({"benchmark": BENCHMARK, "system": system, "params": dict(params),
                        "metric": metric, "value": float(value), "unit": unit})

    log(f"{'system':>13} {'m':>8} {'k':>2} {'n':>7} {'ins b':>7} {'ins 1':>7} {'qry b':>7} "
        f"{'qry 1':>7} {'del b':>7} {'del 1':>7} {'fpr':>8} {'theory':>8} {'bytes':>8}")
    for m in s.ms:
        for k in s.ks:
            n = max(1, round(m * math.log(2) / k))
            members, absent = draw_labels(rng, n, s.n_queries)
            few = min(s.single_ops, n)
            few_members = [int(x) for x in members[:few]]
            few_absent = [int(x) for x in absent[: min(s.single_ops, len(absent))]]
            theory = (1.0 - math.exp(-k * n / m)) ** k
            params = {"m": m, "k": k, "n_items": n, "n_queries": s.n_queries,
                      "single_ops": few, "repeats": s.repeats, "counter_bits": 4,
                      "seed": s.seed, "timing": "best of repeats, fresh filter each"}
            for system, (make_one, contains_one, resident) in SYSTEMS.items():
                times = _measure(make_one, contains_one, m, k, members, absent, s.repeats,
                                 few_members, few_absent)
                t_ins_b, t_ins_1, t_qry_b, t_qry_1, t_del_b, t_del_1 = times
                f = make_one(m, k)
                f.add_many(members)
                fpr = float(np.mean(f.contains_many(absent)))
                fneg = int((~f.contains_many(members)).sum())
                if fneg:
                    raise AssertionError(f"{system}: {fneg} false negatives at m={m}, k={k}")
                p_sys = {**params}
                if system == "fastbloom-rs":
                    p_sys["library_version"] = PeerCountingBloomFilter.library_version
                    p_sys["delete_batch"] = "Python loop of remove_int (no batch removal)"
                for metric, val in (("insert_batch_time", t_ins_b),
                                    ("insert_single_time", t_ins_1),
                                    ("query_batch_time", t_qry_b),
                                    ("query_single_time", t_qry_1),
                                    ("delete_batch_time", t_del_b),
                                    ("delete_single_time", t_del_1)):
                    add(system, p_sys, metric, val * 1e9, "ns/op")
                add(system, p_sys, "memory_bytes", f.memory_bytes(), "bytes")
                add(system, p_sys, "resident_bytes", resident(f), "bytes")
                add(system, p_sys, "false_positive_rate", fpr, "fraction")
                add(system, p_sys, "false_positive_theory", theory, "fraction")
                add(system, p_sys, "false_negatives", fneg, "count")
                log(f"{system:>13} {m:>8} {k:>2} {n:>7} {t_ins_b * 1e9:>7.0f} "
                    f"{t_ins_1 * 1e9:>7.0f} {t_qry_b * 1e9:>7.0f} {t_qry_1 * 1e9:>7.0f} "
                    f"{t_del_b * 1e9:>7.0f} {t_del_1 * 1e9:>7.0f} {fpr:>8.5f} {theory:>8.5f} "
                    f"{f.memory_bytes():>8}")
    return records


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="one small filter (about a second)")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON records file")
    args = ap.parse_args(argv)
    settings = QUICK if args.quick else FULL
    started = datetime.now(UTC).isoformat(timespec="seconds")
    t0 = time.perf_counter()
    records = run(settings)
    wall = time.perf_counter() - t0
    out: Path = args.out
    meta_path = write_results(out, records, benchmark=BENCHMARK, module="benchmarks.filters",
                              argv=argv, started=started, wall=wall, quick=args.quick,
                              load_average_1_5_15=list(os.getloadavg()),
                              settings=asdict(settings))
    print(f"wrote {len(records)} records to {out} and {meta_path} in {wall:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
