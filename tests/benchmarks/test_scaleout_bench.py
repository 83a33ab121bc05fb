"""The scale-out benchmark's pieces that need no broker: pages, /proc, the workload split."""

from __future__ import annotations

import os

import numpy as np

from benchmarks.scaleout import Workload, cpu_seconds, rss_mb
from connectors.serde import SERDE
from dls.shards import label_shards


def test_the_workload_is_split_by_shard_as_the_sdk_splits_it() -> None:
    w = Workload(200, 20, 300, 4, seed=1)
    assert w.n_events == 300 and sum(len(v) for v, _ in w.events.values()) == 300
    ids: dict[str, set[int]] = {}
    for k, parts in w.parts.items():
        for value in parts:
            _, rec = SERDE.decode(value)
            labels = np.frombuffer(rec["labels"], dtype=">u8")
            assert set(label_shards(labels, 4).tolist()) == {k}  # a part holds its shard's
            ids.setdefault(rec["id"], set()).add(k)
    assert len(ids) == 200 and w.n_parts == sum(len(s) for s in ids.values())
    for k, (_, headers) in w.events.items():
        labels = np.array([int.from_bytes(h[0][1], "big") for h in headers], dtype=np.uint64)
        assert set(label_shards(labels, 4).tolist()) <= {k}


def test_cpu_and_memory_of_a_process_are_read_from_proc() -> None:
    assert cpu_seconds(os.getpid()) > 0
    assert 10 < rss_mb(os.getpid()) < 100_000
