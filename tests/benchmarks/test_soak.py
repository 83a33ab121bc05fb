"""The soak's pure parts (no broker): the memory slope and its flatness, and the vectorised
checker against the chaos checker on random histories."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from benchmarks.chaos.check import check as chaos_check
from benchmarks.chaos.common import random_event, random_where
from benchmarks.soak.check import check as soak_check
from benchmarks.soak.memory import RESOLUTION_MIB, fit_slope, read_status, t975

T = [10.0 * i for i in range(49)]  # the soak's window: 8 minutes, a sample every 10 s


def test_t_quantile_at_and_between_table_points() -> None:
    assert t975(1) == pytest.approx(12.706)
    assert t975(10) == pytest.approx(2.228)
    assert t975(35) == pytest.approx(2.030, abs=0.005)  # scipy: 2.0301
    assert t975(1e9) == pytest.approx(1.96, abs=1e-3)
    assert t975(0.2) == pytest.approx(12.706)  # below 1: as 1


def test_noise_without_trend_is_flat() -> None:
    rng = random.Random(1)
    y = [100.0 + rng.gauss(0, 0.3) for _ in T]
    f = fit_slope(T, y)
    assert f.flat and f.why == "ci_contains_0"
    assert abs(f.slope_mib_per_min) <= f.ci95_mib_per_min


def test_a_steady_leak_is_found_with_its_rate() -> None:
    rng = random.Random(2)
    y = [100.0 + 0.5 * t / 60.0 + rng.gauss(0, 0.3) for t in T]  # 0.5 MiB/min: 4 MiB in 8
    f = fit_slope(T, y)
    assert not f.flat and f.why == "grows"
    assert abs(f.slope_mib_per_min - 0.5) < f.ci95_mib_per_min
    assert f.growth_mib == pytest.approx(4.0, abs=0.5)
    assert f.bound_mib_per_hour > 30.0


def test_one_step_of_an_arena_is_not_a_trend() -> None:
    # constant RSS that steps up once (a new arena, a bigger fetch buffer): the residuals
    # are autocorrelated, which widens the interval; a step under 1 MiB is below resolution
    y = [120.0 + (0.75 if t > 200 else 0.0) for t in T]
    f = fit_slope(T, y)
    assert f.flat
    assert f.rho > 0.5
    y = [120.0 + (0.75 if t > 200 else 0.0) + 0.001 * (i % 2) for i, t in enumerate(T)]
    assert fit_slope(T, y).flat


def test_a_small_slow_trend_under_the_resolution_is_flat_but_not_by_chance() -> None:
    y = [80.0 + 0.05 * t / 60.0 for t in T]  # 0.4 MiB over 8 min, exactly linear
    f = fit_slope(T, y)
    assert f.why == "below_resolution" and abs(f.growth_mib) < RESOLUTION_MIB
    y = [80.0 + 0.2 * t / 60.0 for t in T]  # 1.6 MiB over 8 min: a trend
    assert not fit_slope(T, y).flat


def test_fit_refuses_too_few_samples() -> None:
    with pytest.raises(ValueError, match="need >= 3"):
        fit_slope([0.0, 10.0], [1.0, 2.0])


def test_read_status_of_this_process() -> None:
    import os

    st = read_status(os.getpid())
    assert st is not None and st["VmRSS"] > 1.0 and st["cpu_s"] >= 0.0
    assert read_status(2**22 + 12345) is None  # above pid_max: no such process


# -- the vectorised checker against the chaos checker ---------------------------------------
def _write(path: Path, recs: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as fh:
        for r in recs:
            fh.write(json.dumps(r) + "\n")


def _history(root: Path, seed: int) -> None:
    """A random history with every case the checkers tell apart.

    Events confirmed, failed, unreported and never sent; one without ``price``;
    subscriptions acknowledged, failed, never cancelled, with the ``=`` and ``>=`` ops;
    deliveries of owed pairs (some dropped), repeats at the same and at other offsets,
    false positives, unknown ids, a restarted client.
    """
    rng = random.Random(seed)
    events: list[tuple[str, dict[str, Any], float]] = []
    for pub in ("pA", "pB"):
        recs: list[dict[str, Any]] = []
        for n in range(400):
            eid, t0 = f"{pub}-{n}", rng.uniform(0, 100)
            attrs = random_event(rng)
            if rng.random() < 0.01:
                del attrs["price"]
            recs.append({"k": "pub", "id": eid, "a": attrs, "t0": t0,
                         "t1": t0 + rng.uniform(0.0, 0.05)})
            fate = rng.random()
            if fate < 0.9:
                recs.append({"k": "dr", "id": eid, "ok": True, "t": t0 + 0.1})
            elif fate < 0.95:
                recs.append({"k": "dr", "id": eid, "ok": False, "t": t0 + 0.1})
            elif fate < 0.97:
                recs.append({"k": "pub_fail", "id": eid, "t0": t0, "t": t0})
            events.append((eid, attrs, t0))
        _write(root / "publishers" / f"{pub}.jsonl", recs)
    for c in ("cA0", "cB0", "cC0"):
        subs: list[dict[str, Any]] = [{"k": "start", "t": 0.0, "restart": False}]
        for i in range(12):
            sid, call = f"{c}-{i}", rng.uniform(0, 90)
            where = random_where(rng)
            if i == 0:
                where = [{"attr": "sym", "op": "=", "value": "A"}]
            elif i == 1:
                where = [{"attr": "price", "op": ">=", "value": 60.0}]
            subs.append({"k": "sub_call", "sid": sid, "where": where, "t": call})
            if rng.random() < 0.1:
                subs.append({"k": "sub_fail", "sid": sid, "t": call + 0.5})
            else:
                subs.append({"k": "sub_ack", "sid": sid, "t": call + rng.uniform(0.01, 1)})
            if rng.random() < 0.7:
                cancel = call + rng.uniform(1, 30)
                subs.append({"k": "unsub_call", "sid": sid, "t": cancel})
                subs.append({"k": "unsub_done", "sid": sid, "t": cancel + 0.01})
        subs.append({"k": "start", "t": 50.0, "restart": True})
        subs.sort(key=lambda r: r["t"])
        _write(root / "clients" / f"{c}.subs.jsonl", subs)
        deliv, offset = [], 0
        for eid, _, _ in events:
            if rng.random() < 0.45:  # a superset: owed or not, as the network delivers
                deliv.append({"id": eid, "p": 0, "o": offset, "t": 0.0})
                if rng.random() < 0.05:
                    deliv.append({"id": eid, "p": 0, "o": offset, "t": 0.0})  # re-read
                if rng.random() < 0.05:
                    deliv.append({"id": eid, "p": 0, "o": offset + 1, "t": 0.0})  # a repeat
                offset += 2
        deliv.append({"id": "nobody-1", "p": 0, "o": offset, "t": 0.0})
        deliv.append({"id": "nobody-1", "p": 0, "o": offset + 1, "t": 0.0})
        _write(root / "clients" / f"{c}.deliv.jsonl", deliv)


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_vectorised_checker_agrees_with_the_chaos_checker(tmp_path: Path, seed: int) -> None:
    _history(tmp_path, seed)
    slow, fast = chaos_check(tmp_path), soak_check(tmp_path)
    for v in (slow, fast):
        v.pop("missing_sample")
    assert fast == slow
    assert slow["missing"] > 0 and slow["duplicates"] > 0 and slow["expected"] > 50
    assert set(slow["unexpected_by_reason"]) >= {"false_positive", "unknown_event"}
    assert slow["publish_failed"] > 0 and slow["client_restarts"] == 3


def test_vectorised_checker_on_an_empty_run(tmp_path: Path) -> None:
    (tmp_path / "publishers").mkdir()
    _write(tmp_path / "clients" / "c.subs.jsonl",
           [{"k": "sub_call", "sid": "s", "where": random_where(random.Random(0)), "t": 1.0},
            {"k": "sub_ack", "sid": "s", "t": 2.0}])
    fast = soak_check(tmp_path)
    assert (fast["published"], fast["expected"], fast["missing"]) == (0, 0, 0)
    assert fast == chaos_check(tmp_path)


def test_the_default_warm_up_fills_the_routed_id_memory_within_bounds() -> None:
    from benchmarks.soak.run import WARMUP_MAX_S, WARMUP_MIN_S, WARMUP_ROUTED, default_warmup
    from broker_node.inbox import ROUTED_MEMORY

    rate = 1000.0
    assert default_warmup(rate) == round(WARMUP_ROUTED * ROUTED_MEMORY / rate)
    assert default_warmup(1e9) == WARMUP_MIN_S  # a fast network still warms up
    assert default_warmup(1.0) == WARMUP_MAX_S
