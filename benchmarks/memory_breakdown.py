"""Bytes per subscription a broker keeps, by part, against the number of subscriptions.

Run::

    .venv/bin/python -m benchmarks.memory_breakdown [--sizes 100000,500000,1000000,5000000]
        [--dists uniform,zipf] [--dims 3x32] [--out FILE.json]

Builds the broker of :mod:`benchmarks.core` (one node, two neighbours, 1,000 clients, the
CBF client bank sized for the mean distinct labels per client of that size at 1 %, CBF
ERTs m = 2**20, k = 7), inserts the first ``n`` subscriptions of the workload in batches
of 50,000 and reports what it holds, divided by ``n``:

* the parts of :meth:`broker_node.state.BrokerState.memory_breakdown`: ``client_bank``
  (counters, bitset, per-client item counts, the transposed position table),
  ``routing_filters`` (the ERTs), ``label_counts`` (exact count tables),
  ``position_tables`` (label -> positions), ``registry`` (the registry's label arrays),
  ``registry_index`` (its id index: the ids' bytes, their offsets and the hash table of
  :class:`dls.ids.HashIdIndex`; on the reference path, ``DLS_NO_JIT=1``, a dict counted
  with its keys);
* ``arrays``: every part but the id index; ``everything``: all of them, what
  ``BrokerState.memory_bytes`` and the paper benchmark's ``bytes_per_subscription``
  count.

The id strings are the benchmark's (``s<number>``, 2 to 8 characters).
"""

from __future__ import annotations

import argparse
import gc
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.core import (
    CLIENT_FP_RATE,
    NEIGHBOURS,
    ROUTING_FILTER,
    distinct_labels_per_client,
    map_boxes,
)
from benchmarks.workload import WorkloadParams, generate, space_spec
from broker_node.state import BrokerState
from dls.space import ContentSpace

DEFAULT_SIZES = (100_000, 500_000, 1_000_000, 5_000_000)
BATCH = 50_000
N_CLIENTS = 1_000


def measure(dist: str, d: int, g: int, sizes: Sequence[int]) -> list[dict[str, Any]]:
    """One record per size: bytes per subscription by part."""
    n_max = max(sizes)
    w = generate(WorkloadParams(dist, d, g, n_max, N_CLIENTS, 100, seed=0))
    space0 = ContentSpace.from_spec(space_spec(d, g))
    offsets, labels = map_boxes(space0, w.lo, w.hi)
    ids = [f"s{i}" for i in range(n_max)]
    names = [f"c{o}" for o in w.owners.tolist()]
    out = []
    for n in sorted(sizes):
        per_client = distinct_labels_per_client(offsets[:n + 1], labels[:offsets[n]],
                                                w.owners[:n], N_CLIENTS,
                                                space0.label_space_size)
        filters = {"client": {"expected_items": max(1, int(np.ceil(per_client))),
                              "fp_rate": CLIENT_FP_RATE},
                   "routing": dict(ROUTING_FILTER)}
        space = ContentSpace.from_spec(space_spec(d, g, filters))
        state = BrokerState.for_space("B", list(NEIGHBOURS), space, resize_filters=False)
        for j in range(N_CLIENTS):
            state.client_index(f"c{j}")
        gc.collect()
        t0 = time.perf_counter()
        for a in range(0, n, BATCH):
            b = min(n, a + BATCH)
            state.subscribe_many(names[a:b], ids[a:b], offsets[a:b + 1] - offsets[a],
                                 labels[offsets[a]:offsets[b]])
        t_ins = time.perf_counter() - t0
        parts = {k: v / n for k, v in state.memory_breakdown().items()}
        idx = parts.pop("registry_index", 0.0)
        arrays = sum(parts.values())
        rec = {"distribution": dist, "d": d, "g": g, "n_subs": n, "n_clients": N_CLIENTS,
               "labels_per_subscription": int(offsets[n]) / n,
               "client_m": state.config.client_m, "client_k": state.config.client_k,
               "bytes_per_subscription": {**parts, "registry_index": idx, "arrays": arrays,
                                          "everything": arrays + idx},
               "insert_us_per_sub": t_ins / n * 1e6}
        out.append(rec)
        del state
        gc.collect()
    return out


def _print(recs: list[dict[str, Any]]) -> None:
    keys = ["client_bank", "routing_filters", "label_counts", "position_tables", "registry",
            "registry_index", "arrays", "everything"]
    short = ["bank", "erts", "counts", "postab", "registry", "reg.index", "arrays", "all"]
    print(f"{'dist':>7} {'d':>2} {'g':>4} {'n_subs':>8} {'lab/sub':>7} "
          + " ".join(f"{s:>9}" for s in short) + f" {'ins us':>7}")
    for r in recs:
        b = r["bytes_per_subscription"]
        print(f"{r['distribution']:>7} {r['d']:>2} {r['g']:>4} {r['n_subs']:>8} "
              f"{r['labels_per_subscription']:>7.2f} "
              + " ".join(f"{b.get(k, 0.0):>9.1f}" for k in keys)
              + f" {r['insert_us_per_sub']:>7.3f}", flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default=",".join(map(str, DEFAULT_SIZES)))
    ap.add_argument("--dists", default="uniform,zipf")
    ap.add_argument("--dims", default="3x32")
    ap.add_argument("--out", type=Path, default=None, help="JSON records file")
    args = ap.parse_args(argv)
    sizes = [int(x) for x in args.sizes.split(",")]
    recs: list[dict[str, Any]] = []
    for dist in args.dists.split(","):
        for dg in args.dims.split(","):
            d, g = (int(x) for x in dg.split("x"))
            got = measure(dist, d, g, sizes)
            _print(got)
            recs += got
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(recs, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
