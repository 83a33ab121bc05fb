"""Reading events' numeric values: the edge's per-event Python path against NumericReader.

10,000 events of the quotes workload (``benchmarks.quotes.draw_events``), encoded as the
SDK encodes them (``encode_raw_event``), read in batches of 1,000 by

* ``EdgeTable.read``, one event at a time (decode_raw_event, then values_of): the node's
  per-event path today;
* ``NumericReader(mode="python")``: the same Python path behind the batch interface;
* ``NumericReader``: the batch kernel (numba, compiled and warmed up before timing).

Prints the best of ``--repeats`` passes in ns per event (the three take turns, so that a
busy machine slows each alike). With ``DLS_NO_JIT=1`` the reader
takes the Python path too. Run: ``python -m benchmarks.raw_numbers``.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Sequence

import numpy as np

from benchmarks.quotes import draw_events, space
from broker_node.edge import EdgeTable
from connectors.serde.messages import encode_raw_event
from connectors.serde.raw_numbers import NumericReader
from dls import _jit


def _encoded(n: int, seed: int) -> list[bytes]:
    ev = draw_events(n, seed)
    return [encode_raw_event("node-1", "publisher-7", f"evt-{i:08d}", ev.attrs(i), b"")
            for i in range(n)]


def _best_ns(fns: dict[str, Callable[[Sequence[bytes]], object]], batches: list[list[bytes]],
             n: int, repeats: int) -> dict[str, float]:
    """Each function's best pass over the batches, in ns per event (passes interleaved)."""
    best = dict.fromkeys(fns, float("inf"))
    for _ in range(repeats):
        for name, fn in fns.items():
            t0 = time.perf_counter_ns()
            for b in batches:
                fn(b)
            best[name] = min(best[name], (time.perf_counter_ns() - t0) / n)
    return best


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--events", type=int, default=10_000)
    p.add_argument("--batch", type=int, default=1_000)
    p.add_argument("--repeats", type=int, default=9)
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args(argv)

    values = _encoded(args.events, args.seed)
    batches = [values[i:i + args.batch] for i in range(0, len(values), args.batch)]
    table = EdgeTable(space())
    optional = [a.optional for a in table.space.attributes if a.kind == "numeric"]
    reader = NumericReader(table.numeric_names, optional)
    python_reader = NumericReader(table.numeric_names, optional, mode="python")

    # the same answers, and the kernel compiled (or loaded from the cache) before timing
    out, ok = reader.read(values)
    want = [table.read(v) for v in values]
    assert ok.all() and all(w is not None for w in want)  # noqa: S101
    assert np.array_equal(out, np.stack([w[1] for w in want if w is not None]))  # noqa: S101

    def per_event(batch: Sequence[bytes]) -> None:
        read = table.read
        for v in batch:
            read(v)

    timings = _best_ns({"EdgeTable.read (per event)": per_event,
                        "NumericReader, python path": python_reader.read,
                        "NumericReader": reader.read}, batches, len(values), args.repeats)
    print(f"{len(values):,} quote events ({len(table.numeric_names)} numeric attributes "
          f"of {len(table.space.attributes)}), batches of {args.batch:,}, best of "
          f"{args.repeats}; kernel {'compiled' if _jit.ENABLED else 'off: ' + _jit.REASON}")
    base = timings["EdgeTable.read (per event)"]
    for name, ns in timings.items():
        print(f"  {name:<28} {ns:9.1f} ns/event  ({base / ns:5.1f}x)")


if __name__ == "__main__":
    main()
