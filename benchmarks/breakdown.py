"""Where insert, delete and matching time goes inside ``BrokerState`` (a profiling aid).

Run::

    .venv/bin/python -m benchmarks.breakdown [--dist uniform] [--d 3] [--g 32]
        [--n-subs 500000] [--system dls|dls-direct] [--out FILE.json]

Builds the same workload and broker as :mod:`benchmarks.core`, then wraps a few internal
functions of ``broker_node.state``, ``broker_node.links``, ``broker_node.registry``,
``broker_node.tables``, ``dls.bank`` and ``dls.hashing`` with wall-clock accumulators
(the wrapped functions run unchanged; the wrappers cost a few
hundred nanoseconds per call, and they are called once per batch) and prints the time of
each part per subscription (insert, delete) or per event (route). Nested parts are
included in their callers; ``TOTAL`` lines are the public calls. Which internals exist
depends on the core version: missing names are skipped.
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import broker_node.links as links_mod
import broker_node.registry as registry_mod
import broker_node.state as state_mod
import dls.bank as bank_mod
import dls.bitset_bank as bitset_bank_mod
from benchmarks.core import (
    CLIENT_FP_RATE,
    NEIGHBOURS,
    ROUTING_FILTER,
    distinct_labels_per_client,
    event_columns,
    map_boxes,
)
from benchmarks.workload import WorkloadParams, generate, space_spec
from broker_node.state import BrokerState
from dls.mapping import event_labels_batch
from dls.space import ContentSpace

# (owner object, attribute name, label)
TARGETS: list[tuple[Any, str, str]] = [
    (state_mod.BrokerState, "subscribe_many", "TOTAL subscribe_many"),
    (state_mod.BrokerState, "unsubscribe_many", "TOTAL unsubscribe_many"),
    (state_mod.BrokerState, "route", "TOTAL route"),
    (state_mod.BrokerState, "_check_labels", "state._check_labels"),
    (links_mod.ExactCounts, "change", "links.ExactCounts.change"),
    (state_mod.BrokerState, "_client_indexes", "state._client_indexes"),
    (state_mod, "sorted_unique_rows", "registry.sorted_unique_rows"),
    (links_mod, "unique_counts", "tables.unique_counts (in ExactCounts.change)"),
    (registry_mod.SubscriptionRegistry, "add", "registry.add"),
    (registry_mod.SubscriptionRegistry, "gather", "registry.gather"),
    (registry_mod.SubscriptionRegistry, "remove", "registry.remove"),
    (bank_mod.BitSlicedCBFBank, "add", "bank.add"),
    (bank_mod.BitSlicedCBFBank, "remove", "bank.remove"),
    (bank_mod.DirectLabelBank, "add", "bank.add"),
    (bank_mod.DirectLabelBank, "remove", "bank.remove"),
    (bank_mod.BitSlicedCBFBank, "_pair_rows", "bank._pair_rows (hash positions)"),
    (bank_mod.BitSlicedCBFBank, "_match_rows", "bank._match_rows (hash positions)"),
    (bitset_bank_mod, "count_keys", "bank.count_keys (sort/bincount of counter keys)"),
    (bitset_bank_mod.BitsetBank, "_refresh", "bank._refresh (bitset update)"),
    (bitset_bank_mod.BitsetBank, "match", "bank.match"),
    (bitset_bank_mod, "decode", "bank._decode (bitset -> CSR)"),
]


class Timers:
    """Accumulated seconds per label; installs and removes the wrappers."""

    def __init__(self) -> None:
        self.acc: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self._saved: list[tuple[Any, str, Any]] = []

    def install(self) -> None:
        for owner, name, label in TARGETS:
            if name not in vars(owner):
                continue
            orig = vars(owner)[name]
            self._saved.append((owner, name, orig))
            setattr(owner, name, self._wrap(orig, label))

    def uninstall(self) -> None:
        for owner, name, orig in reversed(self._saved):
            setattr(owner, name, orig)
        self._saved.clear()

    def _wrap(self, fn: Callable[..., Any], label: str) -> Callable[..., Any]:
        acc, calls = self.acc, self.calls

        @functools.wraps(fn)
        def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                acc[label] += time.perf_counter() - t0
                calls[label] += 1

        return timed

    def take(self) -> dict[str, float]:
        out = dict(self.acc)
        self.acc.clear()
        self.calls.clear()
        return out


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dist", default="uniform", choices=["uniform", "zipf"])
    ap.add_argument("--d", type=int, default=3)
    ap.add_argument("--g", type=int, default=32)
    ap.add_argument("--n-subs", type=int, default=500_000)
    ap.add_argument("--n-clients", type=int, default=1_000)
    ap.add_argument("--n-events", type=int, default=10_000)
    ap.add_argument("--batch-size", type=int, default=50_000)
    ap.add_argument("--system", default="dls", choices=["dls", "dls-direct"])
    ap.add_argument("--out", type=Path, default=None, help="also write the parts as JSON")
    a = ap.parse_args(argv)
    w = generate(WorkloadParams(a.dist, a.d, a.g, a.n_subs, a.n_clients, a.n_events))
    space0 = ContentSpace.from_spec(space_spec(a.d, a.g))
    offsets, labels = map_boxes(space0, w.lo, w.hi)
    ev_labels, _ = event_labels_batch(space0, event_columns(w))
    items = int(np.ceil(distinct_labels_per_client(offsets, labels, w.owners, a.n_clients,
                                                   space0.label_space_size)))
    space = ContentSpace.from_spec(space_spec(a.d, a.g, {
        "client": {"expected_items": items, "fp_rate": CLIENT_FP_RATE},
        "routing": dict(ROUTING_FILTER)}))
    kw = {} if a.system == "dls" else {"client_filter": "direct", "routing_filter": "direct"}
    state = BrokerState.for_space("B", list(NEIGHBOURS), space, resize_filters=False, **kw)
    for j in range(a.n_clients):
        state.client_index(f"c{j}")
    state.subscribe_many([f"c{a.n_clients - 1}"], ["warm-up"], np.array([0, 1]), labels[:1])
    state.unsubscribe_many([f"c{a.n_clients - 1}"], ["warm-up"])
    names = [f"c{o}" for o in w.owners.tolist()]
    ids = [f"s{i}" for i in range(a.n_subs)]
    bs = a.batch_size
    chunks = [(s, min(a.n_subs, s + bs)) for s in range(0, a.n_subs, bs)]
    timers = Timers()
    timers.install()
    phases: dict[str, tuple[dict[str, float], int, str]] = {}
    try:
        gc.collect()
        for s, e in chunks:
            state.subscribe_many(names[s:e], ids[s:e], offsets[s:e + 1] - offsets[s],
                                 labels[offsets[s]:offsets[e]])
        phases["insert"] = (timers.take(), a.n_subs, "us/sub")
        gc.collect()
        state.route(ev_labels)
        phases["route"] = (timers.take(), len(ev_labels), "us/event")
        gc.collect()
        for s, e in chunks:
            state.unsubscribe_many(names[s:e], ids[s:e])
        phases["delete"] = (timers.take(), a.n_subs, "us/sub")
    finally:
        timers.uninstall()
    result: dict[str, Any] = {"params": {**w.params.as_dict(), "system": a.system,
                                         "batch_size": bs, "client_m": state.config.client_m,
                                         "client_k": state.config.client_k}, "phases": {}}
    print(f"{a.system} {a.dist} d={a.d} g={a.g} n_subs={a.n_subs} clients={a.n_clients} "
          f"batch={bs} client m={state.config.client_m} k={state.config.client_k}")
    for phase, (parts, n, unit) in phases.items():
        print(f"  {phase} ({unit})")
        rows = {k: v / n * 1e6 for k, v in sorted(parts.items(), key=lambda kv: -kv[1])}
        for k, v in rows.items():
            print(f"    {k:50s} {v:8.3f}")
        result["phases"][phase] = {"unit": unit, "parts": rows}
    if a.out is not None:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
