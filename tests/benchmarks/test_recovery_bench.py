"""The recovery benchmark at a tiny size on a real broker: records and checks, no timings."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import recovery
from benchmarks.kafka import Recorder
from broker_node.config import NodeSettings

BOUND = NodeSettings.model_fields["snapshot_every_messages"].default  # above 1 % of 600
TINY = recovery.RunSettings(live=(300, 600), churn_live=600, churn_ops=3_000, churn_rounds=2,
                            n_clients=7, samples=1, wait_s=120.0)


@pytest.fixture(scope="module")
def tiny_run(kafka_bootstrap: str) -> tuple[Recorder, dict]:
    rec = Recorder()
    facts = recovery.run(TINY, kafka_bootstrap, rec)
    return rec, facts


def test_every_case_is_measured_both_ways(tiny_run: tuple[Recorder, dict]) -> None:
    rec, facts = tiny_run
    medians = {(r["system"], r["params"]["case"]) for r in rec.records
               if r["metric"] == "recovery_time_median"}
    for case in ("live-300", "live-600", "churn", "churn-worst"):
        assert {("snapshot", case), ("replay", case)} <= medians, case
    assert set(facts) == {"churn_ratio", "churn_worst_ratio"}


def test_the_tails_replayed_are_what_the_cases_say(tiny_run: tuple[Recorder, dict]) -> None:
    rec, _ = tiny_run
    restarts = [r for r in rec.records if r["metric"] == "recovery_time"]
    for r in restarts:
        p = r["params"]
        if r["system"] == "replay":
            assert p["messages_replayed"] == p["history_ops"]
        elif p["case"] == "churn-worst":  # just under the bound of the defaults
            assert BOUND - 10 <= p["messages_replayed"] < BOUND
        else:
            assert p["messages_replayed"] < BOUND < p["history_ops"] or p["case"] != "churn"
    pauses = [r for r in rec.records if r["metric"] == "snapshot_pause"]
    assert {r["params"]["live"] for r in pauses} == {300, 600}


def test_the_plot_is_drawn(tiny_run: tuple[Recorder, dict], tmp_path: Path) -> None:
    rec, _ = tiny_run
    pytest.importorskip("matplotlib")
    assert recovery.plot(rec.records, tmp_path / "r.png")
    assert (tmp_path / "r.png").stat().st_size > 1000
