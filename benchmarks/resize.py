"""Filters that resize themselves: what a rebuild costs the loop, and what it gives back.

No Kafka: ``BrokerState`` alone, as the node's loop drives it (a rebuild runs inside the
``subscribe_many`` / ``on_link`` call that finds a filter over its target, and the loop
routes nothing meanwhile, so the time of that call is the pause). Label space: ``d``
attributes of ``g`` cells (default 4 x 32: 2^20 labels, so the node keeps precomputed
position tables, and a rebuild builds one for the new size too).

Per round, with fresh random labels:

* ``ert``: a neighbour advertises ``labels`` distinct labels in advertisements of
  ``batch`` labels; the routing filter has the default spec (65,536 items at 0.001), so it
  is rebuilt several times on the way. Recorded: each rebuild (sizes, estimated rate before
  and after, seconds), the time of the advertisements that did and did not rebuild, and a
  rebuild forced at the end (all ``labels``: the pause at that size). The false-positive
  rate measured on labels never advertised, with resizing on and off.
* ``client_bank``: ``clients`` clients subscribe ``labels`` (client, label) pairs in
  subscriptions of ``sub_labels`` labels, ``batch`` pairs per ``subscribe_many``; the client
  filter spec is 64 items at 0.01, so the bank passes its target early and grows. Recorded
  as for the ERT, plus the check's cost after a batch when nothing is due (the item-count
  test) and the scan of the counters (the fill of every client) when it is. The
  false-positive rate measured per client and probe label, true matches left out.

Output: ``resize.json`` (records ``{"benchmark", "system", "params", "metric", "value",
"unit"}``) and ``resize.meta.json``. ``--quick`` is a small run for the tests.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np

from benchmarks.core import write_results
from benchmarks.workload import space_spec
from broker_node.state import BrokerState
from dls.bank import BitSlicedCBFBank
from dls.hashing import make_position_fn
from dls.space import ContentSpace

CLIENT_SPEC = {"expected_items": 64, "fp_rate": 0.01}
ROUTING_SPEC = {"expected_items": 65536, "fp_rate": 0.001}


@dataclass(frozen=True)
class Settings:
    """One run's size."""

    labels: int = 500_000
    clients: int = 1000
    sub_labels: int = 5
    batch: int = 10_000
    probes: int = 200_000
    rounds: int = 3
    d: int = 4
    g: int = 32


QUICK = Settings(labels=8_000, clients=64, batch=1_000, probes=4_000, rounds=1, d=2, g=128)


def _state(s: Settings, resize: bool) -> BrokerState:
    space = ContentSpace.from_spec(space_spec(s.d, s.g, {"client": CLIENT_SPEC,
                                                         "routing": ROUTING_SPEC}))
    state = BrokerState.for_space("B", ["A", "C"], space, resize_filters=resize)
    for j in range(s.clients):
        state.client_index(f"c{j}")
    return state


def _labels(state: BrokerState, n: int, rng: np.random.Generator) -> np.ndarray:
    base, size = state.label_base or 0, state.label_space_size or 0
    return (rng.permutation(size)[:n] + base).astype(np.uint64)


def _ert_round(s: Settings, r: int, rng: np.random.Generator, add: Any) -> None:
    labels = _labels(_state(s, True), s.labels + s.probes, rng)
    held, probes = labels[:s.labels], labels[s.labels:]
    for resize in (True, False):
        state = _state(s, resize)
        plain, rebuilt = [], []
        for a in range(0, s.labels, s.batch):
            before = sum(state.resizer.rebuilds.values())
            t0 = time.perf_counter()
            state.on_link("A", "advertise", held[a:a + s.batch])
            dt = time.perf_counter() - t0
            (rebuilt if sum(state.resizer.rebuilds.values()) > before else plain).append(dt)
        system = "ert" if resize else "ert-fixed"
        fp = float(state.route(probes).neighbours[:, 0].mean())
        ert = state._ert["A"]
        add(system, r, "false_positive_rate", fp, "share of probes", m=ert.m, k=ert.k)
        add(system, r, "estimated_fpr", ert.estimated_fpr(), "rate", m=ert.m, k=ert.k)
        add(system, r, "advertise_s", float(np.median(plain)), "s (median, no rebuild)")
        if not resize:
            continue
        for rb in state.resizer.history:
            add(system, r, "rebuild_s", rb.seconds, "s", filter=rb.filter, labels=rb.labels,
                old=list(rb.old), new=list(rb.new), rate_before=rb.rate_before,
                rate_after=rb.rate_after)
        add(system, r, "advertise_with_rebuild_s", max(rebuilt, default=0.0), "s (longest)")
        t0 = time.perf_counter()
        state.resizer._rebuild_ert(state, "A", ert.estimated_fpr())
        add(system, r, "forced_rebuild_s", time.perf_counter() - t0, "s",
            labels=s.labels, new=[state._ert["A"].m, state._ert["A"].k])
        _table_time(system, r, state, state._ert["A"].m, state._ert["A"].k, add)


def _bank_round(s: Settings, r: int, rng: np.random.Generator, add: Any) -> None:
    n_subs = s.labels // s.sub_labels
    probe_state = _state(s, True)
    flat = (rng.integers(0, probe_state.label_space_size or 1, n_subs * s.sub_labels)
            .astype(np.uint64) + np.uint64(probe_state.label_base or 0))
    owner_idx = rng.integers(0, s.clients, n_subs)
    owners = [f"c{j}" for j in owner_idx.tolist()]  # client c<j> has bank index j
    probes = _labels(probe_state, s.probes, rng)
    true = _true_hits(probe_state, owner_idx, flat, probes, s.sub_labels)
    per_batch = max(1, s.batch // s.sub_labels)
    for resize in (True, False):
        state = _state(s, resize)
        plain, rebuilt = [], []
        for a in range(0, n_subs, per_batch):
            b = min(n_subs, a + per_batch)
            offs = np.arange(a, b + 1, dtype=np.int64) * s.sub_labels
            before = sum(state.resizer.rebuilds.values())
            t0 = time.perf_counter()
            state.subscribe_many(owners[a:b], [f"s{i}" for i in range(a, b)],
                                 offs - offs[0], flat[offs[0]:offs[-1]])
            dt = time.perf_counter() - t0
            (rebuilt if sum(state.resizer.rebuilds.values()) > before else plain).append(dt)
        system = "client_bank" if resize else "client_bank-fixed"
        bank = cast(BitSlicedCBFBank, state._bank)
        routes = state.route(probes)
        fp = (int(routes.offsets[-1]) - true) / (len(probes) * s.clients - true)
        add(system, r, "false_positive_rate", fp, "per client and probe", m=bank.m, k=bank.k)
        add(system, r, "estimated_fpr", float(bank.estimated_fprs().max()),
            "rate (worst client)", m=bank.m, k=bank.k)
        add(system, r, "subscribe_s", float(np.median(plain)), "s (median, no rebuild)",
            pairs=s.batch)
        if not resize:
            continue
        for rb in state.resizer.history:
            add(system, r, "rebuild_s", rb.seconds, "s", filter=rb.filter, labels=rb.labels,
                old=list(rb.old), new=list(rb.new), rate_before=rb.rate_before,
                rate_after=rb.rate_after)
        add(system, r, "subscribe_with_rebuild_s", max(rebuilt, default=0.0), "s (longest)")
        cidx = np.arange(min(s.clients, per_batch), dtype=np.int64)
        t0 = time.perf_counter()
        state.resizer.after_subscribe(state, cidx)  # under its target: the item counts only
        add(system, r, "check_s", time.perf_counter() - t0, "s (nothing due)")
        t0 = time.perf_counter()
        fill = bank.fill_ratios()
        add(system, r, "scan_s", time.perf_counter() - t0, "s (fill of every client)")
        t0 = time.perf_counter()
        state.resizer._rebuild_bank(state, bank, float(fill.max()) ** bank.k, fill)
        new = cast(BitSlicedCBFBank, state._bank)
        add(system, r, "forced_rebuild_s", time.perf_counter() - t0, "s",
            labels=s.labels, new=[new.m, new.k])
        _table_time(system, r, state, new.m, new.k, add)


def _table_time(system: str, r: int, state: BrokerState, m: int, k: int, add: Any) -> None:
    """The part of a rebuild that builds the new size's position table, timed apart."""
    t0 = time.perf_counter()
    make_position_fn(m, k, state.config.seed, state.label_space_size,
                     base=state.label_base or 0)
    add(system, r, "position_table_s", time.perf_counter() - t0, "s", m=m, k=k)


def _true_hits(state: BrokerState, owner_idx: np.ndarray, flat: np.ndarray,
               probes: np.ndarray, sub_labels: int) -> int:
    """(probe, client) pairs where the client did subscribe the probe's label."""
    size = np.uint64(state.label_space_size or 1)
    rel = flat - np.uint64(state.label_base or 0)
    pairs = np.unique(np.repeat(owner_idx.astype(np.uint64), sub_labels) * size + rel)
    holders = np.bincount((pairs % size).astype(np.int64), minlength=int(size))
    return int(holders[(probes - np.uint64(state.label_base or 0)).astype(np.int64)].sum())


def run(s: Settings, out: Path, argv: list[str] | None) -> list[dict[str, Any]]:
    """Every round of both filters; writes ``out`` and its meta file."""
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    t_start = time.perf_counter()
    records: list[dict[str, Any]] = []

    def add(system: str, r: int, metric: str, value: float, unit: str, **extra: Any) -> None:
        params = {"labels": s.labels, "clients": s.clients, "d": s.d, "g": s.g, "round": r,
                  **extra}
        records.append({"benchmark": "resize", "system": system, "params": params,
                        "metric": metric, "value": value, "unit": unit})
        print(f"{system:18s} r{r} {metric:26s} {value:.6g} {unit} {extra or ''}", flush=True)

    rng = np.random.default_rng(0)
    _state(s, True).route(np.zeros(1, dtype=np.uint64))  # kernels loaded before timing
    for r in range(s.rounds):
        _ert_round(s, r, rng, add)
        _bank_round(s, r, rng, add)
    write_results(out, records, benchmark="resize", module="benchmarks.resize", argv=argv,
                  started=started, wall=time.perf_counter() - t_start, settings=asdict(s),
                  client_spec=CLIENT_SPEC, routing_spec=ROUTING_SPEC)
    return records


def main(argv: list[str] | None = None) -> int:
    """Command line: ``python -m benchmarks.resize [--quick] [--labels N] [--out PATH]``."""
    a = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    a.add_argument("--out", type=Path, default=Path("benchmarks/results/resize.json"))
    a.add_argument("--quick", action="store_true")
    a.add_argument("--labels", type=int, default=None)
    a.add_argument("--rounds", type=int, default=None)
    args = a.parse_args(argv)
    s = QUICK if args.quick else Settings()
    over = {k: v for k, v in (("labels", args.labels), ("rounds", args.rounds))
            if v is not None}
    run(Settings(**{**asdict(s), **over}), args.out, argv)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
