"""The switch between compiled kernels and the numpy reference (dls._jit)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from dls import _jit, bank

ROOT = Path(__file__).resolve().parents[2]
PROBE = "import dls._jit as j; print(j.ENABLED, repr(j.REASON))"


def _probe(value: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if k != "DLS_NO_JIT"}
    if value is not None:
        env["DLS_NO_JIT"] = value
    out = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, env=env,  # noqa: S603
                         capture_output=True, text=True, check=True, timeout=120)
    return out.stdout.strip()


def test_switch_forces_the_reference() -> None:
    assert _probe("1") == "False 'DLS_NO_JIT is set'"


@pytest.mark.parametrize("value", [None, "", "0"])
def test_compiled_unless_switched_off(value: str | None) -> None:
    pytest.importorskip("numba")
    assert _probe(value) == "True ''"


def test_njit_is_the_identity_on_the_reference_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_jit, "ENABLED", False)

    def f(x: int) -> int:
        return x + 1

    assert _jit.njit(f) is f
    assert bank.warm_up_kernels() == 0.0


def test_warm_up_compiles_every_kernel() -> None:
    if not _jit.ENABLED:
        pytest.skip(_jit.REASON)
    assert bank.warm_up_kernels() >= 0.0
    from dls import _idkernels, _kernels

    for mod in (_kernels, _idkernels):
        compiled = [name for name in mod.__all__ if name != "warm_up"]
        assert all(getattr(mod, name).signatures for name in compiled), compiled


NODE_WORK = """
import numpy as np
import dls._jit as j
from dls import _idkernels as I, _kernels as K
from dls.bank import warm_up_kernels
from broker_node.state import BrokerState
from dls.space import ContentSpace
warm_up_kernels()
names = [(m, n) for m in (K, I) for n in m.__all__ if n != "warm_up"]
before = {n: set(getattr(m, n).signatures) for m, n in names}
space = ContentSpace.from_spec({"attributes": [
    {"name": f"a{i}", "type": "numeric", "low": 0, "high": 1, "granules": 32}
    for i in range(3)]})
for kw in ({}, {"client_filter": "direct", "routing_filter": "direct"}):
    st = BrokerState.for_space("B", ["N1"], space, **kw)
    st.subscribe_many(["c1", "c2"], ["s1", "s2"], np.array([0, 2, 3]),
                      np.array([1, 2, 5], dtype=np.uint64))
    st.on_link("N1", "advertise", np.array([5, 9], dtype=np.uint64))
    st.route(np.array([1, 5, 7], dtype=np.uint64), np.array([0, -1, 1]))
    st.on_link("N1", "withdraw", np.array([9], dtype=np.uint64))
    st.unsubscribe_many(["c1"], ["s1"])
print(sorted(n for m, n in names if set(getattr(m, n).signatures) - before[n]))
"""


def test_warm_up_covers_what_a_broker_calls() -> None:
    """A node that warms up compiles nothing more on its first batches."""
    if not _jit.ENABLED:
        pytest.skip(_jit.REASON)
    out = subprocess.run([sys.executable, "-c", NODE_WORK], cwd=ROOT,  # noqa: S603
                         capture_output=True, text=True, check=True, timeout=300)
    assert out.stdout.strip() == "[]"


WARM_UP_TOGETHER = """
import threading
from dls.bank import warm_up_kernels
threads = [threading.Thread(target=warm_up_kernels) for _ in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print("ok")
"""


def test_engines_warming_up_together_on_a_cold_cache_do_not_crash(tmp_path: Path) -> None:
    """Regression: a replica process starts its shards' engines together, each warming the
    kernels up on its thread; on an empty disk cache numba crashed the process (SIGSEGV,
    twice in two runs) until the warm-up was made one thread at a time."""
    if not _jit.ENABLED:
        pytest.skip(_jit.REASON)
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "numba")}
    out = subprocess.run([sys.executable, "-c", WARM_UP_TOGETHER], cwd=ROOT, env=env,  # noqa: S603
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0 and out.stdout.strip() == "ok", (out.returncode, out.stderr[-2000:])
