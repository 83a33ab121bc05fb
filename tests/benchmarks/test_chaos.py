"""A short run of the fault harness (``benchmarks.chaos``) on a Kafka broker of its own.

The harness starts, SIGKILLs and restarts its own broker (``docker/kafka/kafka.sh`` on
``DLS_CHAOS_TEST_PORT``, default 29096; never the shared test broker), three nodes A-B-C,
six clients and three publishers in processes of their own, and asserts the checker's
verdict: no expected (event, client) pair missing and, exactly once, no duplicate.

What runs here is what passes on today's code, and the lead widens :data:`CASES` as the
fixes of issue 19 land. Left out for now, and why (``make chaos`` runs them all):

- subscription churn while publishing (every scenario of ``make chaos``): a subscription
  does not reach the far end of the line before ``subscribe()`` returns, and an
  unsubscription overtakes events in flight, so pairs at the window's edges go missing
  even without a fault (the ORDER rule and the acknowledgement of item 0 and 3). Here the
  clients keep their first subscriptions (``churn=False``) and publishing starts after a
  settling pause;
- ``broker_kill``: nodes with a transaction in flight hang for minutes and lose pairs;
- ``node_stop`` (SIGSTOP past the 45 s session timeout): over a minute by itself;
- ``client_kill`` passes without churn but adds a minute; ``make chaos`` runs it;
- ``spark_kill``: the Spark job's start alone takes most of a minute on two cores.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from benchmarks.chaos.run import Params, run
from benchmarks.chaos.scenarios import FaultCounts

pytestmark = pytest.mark.integration

#: (scenario, subscription churn while publishing): what passes today.
CASES = [("node_kill-eos-topics", False)]


def _java() -> bool:
    return shutil.which(os.environ.get("JAVA", "java")) is not None


@pytest.mark.skipif(not _java(), reason="the harness runs its own Kafka: needs Java 17+")
@pytest.mark.parametrize(("scenario", "churn"), CASES)
def test_no_pair_lost_under_faults(tmp_path: Path, scenario: str, churn: bool) -> None:
    params = Params(seed=int(os.environ.get("DLS_CHAOS_TEST_SEED", "19")), duration=40.0,
                    rate=30.0, churn=churn, settle_s=0.0 if churn else 3.0, drain_max=60.0,
                    port=int(os.environ.get("DLS_CHAOS_TEST_PORT", "29096")),
                    counts=FaultCounts(node_kills=3, broker_kills=1, client_kills=1,
                                       stop_s=50.0))
    results = run([scenario], params, tmp_path / "chaos.json", tmp_path / "history")
    (rec,) = results["scenarios"]
    brief = {k: rec.get(k) for k in ("error", "published", "expected", "missing",
                                     "missing_by_margin", "duplicates", "faults_done",
                                     "node_exits", "missing_sample")}
    assert "error" not in rec, brief
    assert rec["faults_done"] == 3, brief  # the faults did strike
    assert rec["published"] > 500 and rec["expected"] > 500, brief  # not a vacuous pass
    assert rec["missing"] == 0, brief
    if rec["delivery"] == "exactly_once":
        assert rec["duplicates"] == 0, brief
    assert rec["ok"], brief
