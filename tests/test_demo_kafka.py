"""The demo on a real Kafka: a short run keeps exactly what the brute-force matcher expects."""

from __future__ import annotations

import io
import re

from dlsroute.demo import SUBSCRIPTIONS
from dlsroute.demo_kafka import run_kafka_demo


def test_kafka_demo_misses_nothing(kafka_bootstrap: str) -> None:
    out = io.StringIO()
    code = run_kafka_demo(seconds=3, out=out, bootstrap=kafka_bootstrap)
    text = out.getvalue()
    assert code == 0, text
    assert "check against brute force: 0 missed" in text, text
    assert ", 0 unexpected)" in text, text
    assert "; 0 dead letters" in text, text
    # 3 s at 300 quotes/s, and the thirteen clients in the table (one with OR and !=).
    assert "events: 900 published" in text, text
    rows = re.findall(r"^[ABC]:[a-z-]+ +\d+ +\d+ +\d+ +\d+ +0$", text, re.M)
    assert len(rows) == len(SUBSCRIPTIONS), text
    # Exact delivery: the clients' nodes removed the network's false positives.
    assert " 0 false positives (0.00%) reached clients" in text, text
    removed = re.search(r"the clients' nodes removed (\d+) before writing them", text)
    assert removed is not None and int(removed.group(1)) > 0, text
