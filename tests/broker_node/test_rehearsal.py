"""The rehearsal compiles every kernel a node calls: after it, a node compiles nothing more.

Checked in a fresh interpreter (numba's list of a kernel's compiled types is per process):
it rehearses, notes each kernel's types, then runs a node of another space through
subscriptions sent as rows and as where texts, events, cancellations, a restore from a
snapshot and a sliced index, and lists every type compiled after the rehearsal.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from broker_node import snapshot
from broker_node.rehearsal import rehearse
from broker_node.service import NodeService
from dls import _jit

ROOT = Path(__file__).resolve().parents[2]

_CHILD = """
import json, sys
from numba.core.registry import CPUDispatcher
from broker_node.rehearsal import rehearse
from broker_node.service import NodeService
from tests.broker_node import test_rehearsal as t

def kernels():
    out = {}
    for name, mod in list(sys.modules.items()):
        if name.split(".")[0] in ("dls", "broker_node", "connectors"):
            for obj in list(vars(mod).values()):
                if isinstance(obj, CPUDispatcher):
                    f = obj.py_func
                    out[f.__module__ + "." + f.__name__] = set(map(str, obj.signatures))
    return out

import logging
logging.basicConfig()
first = rehearse(NodeService)
before = kernels()
t.workload(sys.argv[1])
after = kernels()
new = sorted(k + str(sorted(s - before.get(k, set()))) for k, s in after.items()
             if s - before.get(k, set()))
print(json.dumps({"first": first, "kernels": len(before), "new": new}))
"""


def workload(tmp: str) -> None:
    """A quotes node's life in this process: what the check runs after the rehearsal."""
    from tests.broker_node.test_router_edge import _Node

    spec = json.loads((ROOT / "docker" / "examples" / "space.json").read_text())
    for slices in (1, 4):
        path = Path(tmp) / f"s{slices}"
        path.mkdir()
        node = _Node(path, spec=spec, slices=slices, partitions=1)
        for i, where in enumerate(["sym in (IBM, TSLA) and price between 412.5 and 419.0",
                                   "price < 100.25 and change >= -1.5",
                                   "sym = MSFT or volume > 20000",
                                   "price between 17.0 and 900.0 and sym != AAPL"]):
            node.send_subscription(f"c{i}", f"s{i}", where, row=i % 2 == 0)
        events = [{"sym": s, "price": p, "change": c, "volume": v}
                  for s, p, c, v in [("IBM", 415.0, 0.5, 1000), ("MSFT", 50.0, -2.0, 30000),
                                     ("TSLA", 417.9, 1.0, 500), ("AAPL", 99.0, 3.0, 10)]]
        assert node.publish(events)  # something is delivered: the path was walked
        node.edge.remove("c1", "s1")
        node.publish(events)
        data = snapshot.capture(node.svc.state, node.svc.controls, group="g", covered={})
        (path / "again").mkdir()
        again = _Node(path / "again", spec=spec, slices=slices, partitions=1)
        snapshot.restore(snapshot.decode(snapshot.encode(data)), again.svc.state,
                         again.svc.controls)
        assert again.publish(events)


def test_rehearsal_runs_once_per_process() -> None:
    rehearse(NodeService)
    assert rehearse(NodeService) == 0.0


def test_a_node_s_environment_does_not_reach_the_rehearsal() -> None:
    """Settings a node takes from DLS_NODE_* (compose sets them) leave the rehearsal as is."""
    env = dict(os.environ, DLS_NODE_SHARDS="2", DLS_NODE_EXACT_DELIVERY="false",
               DLS_NODE_DELIVERY="exactly_once", DLS_NODE_CLIENT_INPUTS="true")
    code = ("from broker_node.rehearsal import rehearse; "
            "from broker_node.service import NodeService; rehearse(NodeService); print('ok')")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env,  # noqa: S603
                          capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0 and proc.stdout.split()[-1] == "ok", proc.stderr[-3000:]
    assert "the rehearsal failed" not in proc.stderr, proc.stderr[-3000:]


@pytest.mark.skipif(not _jit.ENABLED, reason=f"kernels off: {_jit.REASON}")
def test_after_the_rehearsal_a_node_compiles_nothing(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-c", _CHILD, str(tmp_path)], cwd=ROOT,  # noqa: S603
                          capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["first"] > 0 and report["kernels"] > 20
    assert report["new"] == [], "compiled after the rehearsal (add them to it)"
