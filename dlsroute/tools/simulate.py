"""``dlsroute simulate``: play a trace of ops through an in-process overlay."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

from broker_node.overlay import Overlay, Topology
from dls.exceptions import DLSError
from dls.space import ContentSpace

__all__ = ["read_ops", "run_trace", "simulate_files"]


def read_ops(lines: Iterable[str]) -> Iterator[tuple[int, Any, str | None]]:
    """Yield ``(line number, op or None, parse error or None)`` for a JSONL trace."""
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            yield n, json.loads(line), None
        except json.JSONDecodeError as exc:
            yield n, None, f"line {n}: not valid JSON: {exc.msg}"


def run_trace(overlay: Overlay, ops: Iterable[tuple[int, Any, str | None]], out: IO[str]
              ) -> dict[str, Any]:
    """Apply every op in order, writing one record per publish; bad ops are skipped."""
    stats = overlay.stats
    for n, op, error in ops:
        if error is None:
            try:
                record = overlay.apply(op)
            except DLSError as exc:
                error = f"line {n}: {exc}"
                record = None
            if record is not None:
                out.write(json.dumps(record) + "\n")
        if error is not None:
            stats.rejected.append({"line": n, "op": op, "reason": error})
            if isinstance(op, dict) and op.get("op") == "publish":
                out.write(json.dumps({"id": op.get("id"), "delivered": [], "matched": [],
                                      "rejected": error}) + "\n")
    summary = stats.to_json()
    summary["mode"] = next(iter(overlay.nodes.values())).config.mode
    summary["nodes"] = {name: st.stats() for name, st in overlay.nodes.items()}
    out.write(json.dumps({"summary": summary}) + "\n")
    return summary


def simulate_files(space_path: str | Path, topology_path: str | Path, ops_path: str | Path,
                   out_path: str | Path, **config: Any) -> dict[str, Any]:
    """File-level entry point of ``dlsroute simulate``."""
    space = ContentSpace.from_json(space_path)
    topology = Topology.from_spec(json.loads(Path(topology_path).read_text()))
    overlay = Overlay(space, topology, **config)
    with open(ops_path) as src, open(out_path, "w") as out:
        return run_trace(overlay, read_ops(src), out)
