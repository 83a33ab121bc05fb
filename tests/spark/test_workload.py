"""The Spark §6.1 workload generator: definitions, statistics, determinism, files and Kafka."""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from connectors.serde import decode_raw
from connectors.topics import Topics
from dls.mapping import event_label
from dls.predicates import Subscription
from dls.space import ContentSpace
from dlsroute.cli import main
from spark.workload import (
    DOMAIN_HIGH,
    WorkloadError,
    WorkloadSpec,
    alias_probabilities,
    alias_table,
    cell_value_bounds,
    generate,
    write_files,
    write_kafka,
    zipf_probabilities,
)


def _chi2_critical(df: int, z: float = 3.09) -> float:
    """Upper critical value of chi-square at p ~ 0.001 (Wilson-Hilferty)."""
    return df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3


def _chi2(observed: np.ndarray, probs: np.ndarray) -> float:
    expected = probs * observed.sum()
    return float(((observed - expected) ** 2 / expected).sum())


# -- definitions without Spark ----------------------------------------------------------------
@pytest.mark.parametrize(("g", "s"), [(1, 1.2), (16, 1.2), (128, 0.8), (1000, 2.0), (7, 0.0)])
def test_alias_table_draws_the_truncated_zipf_law(g: int, s: float) -> None:
    probs = zipf_probabilities(g, s)
    assert math.isclose(sum(probs), 1.0)
    assert all(a > b for a, b in zip(probs, probs[1:], strict=False)) or s == 0.0
    assert math.isclose(probs[0] / probs[-1], g ** s) if g > 1 else True
    prob, alias = alias_table(probs)
    np.testing.assert_allclose(alias_probabilities(prob, alias), probs, rtol=1e-9, atol=1e-15)


@pytest.mark.parametrize(("g", "high"), [(1, 10), (3, 10), (32, DOMAIN_HIGH), (7, 7)])
def test_cell_value_bounds_tile_the_integers_of_the_domain(g: int, high: int) -> None:
    first, last = cell_value_bounds(g, high)
    assert first[0] == 0 and last[-1] == high
    assert all(last[c] + 1 == first[c + 1] for c in range(g - 1))
    space = ContentSpace.from_spec({"attributes": [
        {"name": "a0", "type": "numeric", "low": 0, "high": high, "granules": g}]})
    a = space.attributes[0]
    for c in range(g):  # every integer of cell c maps to cell c
        assert first[c] <= last[c]
        assert a.cell(first[c]) == c and a.cell(last[c]) == c


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"distribution": "pareto"}, "distribution"),
    ({"d": 0}, "d"),
    ({"g": 1.5}, "g"),
    ({"n_subs": -1}, "n_subs"),
    ({"n_clients": 0}, "n_clients"),
    ({"length_cells": -1.0}, "length_cells"),
    ({"zipf_s": float("nan")}, "zipf_s"),
    ({"unsub_fraction": 1.5}, "unsub_fraction"),
    ({"nodes": ("A", "b.c")}, "nodes"),
    ({"nodes": ("A", "A")}, "nodes"),
    ({"nodes": ()}, "nodes"),
    ({"d": 5, "g": 65536}, "d"),
    ({"g": 20, "domain_high": 10}, "g"),
    ({"seed": True}, "seed"),
])
def test_bad_parameters_are_named(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(Exception) as info:
        WorkloadSpec(**kwargs)  # type: ignore[arg-type]
    assert getattr(info.value, "field", None) == field
    assert isinstance(info.value, ValueError)


# -- statistics on Spark (aggregated in Spark: collecting rows is the slow part) -------------
def _cell_stats(df, g: int) -> dict[str, np.ndarray]:  # type: ignore[no-untyped-def]
    """Per column ``k`` of ``df(k, v)`` and cell of ``v`` (UniformAttribute.cell over
    [0, H]): count, sum, min and max, in one Spark job."""
    from pyspark.sql import functions as F

    v = F.col("v")
    cell = F.least(F.lit(g - 1), F.floor(v.cast("double") * g / DOMAIN_HIGH).cast("long"))
    rows = (df.select("k", cell.alias("c"), "v").groupBy("k", "c")
            .agg(F.count("*").alias("n"), F.sum("v").alias("s"), F.min("v").alias("lo"),
                 F.max("v").alias("hi")).collect())
    out: dict[str, np.ndarray] = {}
    for r in rows:
        if r["k"] not in out:
            out[r["k"]] = np.zeros((g, 4), dtype=np.float64)
            out[r["k"]][:, 2] = np.inf
        out[r["k"]][r["c"]] = (r["n"], r["s"], r["lo"], r["hi"])
    return out


def _long_values(w, d: int):  # type: ignore[no-untyped-def]
    """``(k, v)``: every lower bound (``lo0``..) and event value (``ev0``..) of ``w``."""
    from pyspark.sql import functions as F

    lo = w.subscriptions.select(F.explode(F.arrays_zip(
        F.array(*[F.lit(f"lo{i}") for i in range(d)]).alias("k"), F.col("lo").alias("v"))
    ).alias("p")).select("p.k", "p.v")
    ev = w.events.select(F.explode(F.arrays_zip(
        F.array(*[F.lit(f"ev{i}") for i in range(d)]).alias("k"),
        F.array(*[F.col("attrs")[f"a{i}"] for i in range(d)]).alias("v"))).alias("p")
    ).select("p.k", "p.v")
    return lo.unionByName(ev)


def _check_values(stats: np.ndarray, probs: np.ndarray, g: int) -> None:
    first, last = (np.asarray(x, dtype=np.float64) for x in cell_value_bounds(g))
    n = stats[:, 0]
    assert _chi2(n, probs) < _chi2_critical(g - 1), n
    seen = n > 0
    assert (stats[seen, 2] >= first[seen]).all() and (stats[seen, 3] <= last[seen]).all()
    # within its cell a value is uniform over the cell's integers: mean position ~ 1/2
    pos = (stats[seen, 1] / n[seen] - first[seen] + 0.5) / (last[seen] - first[seen] + 1)
    assert abs(float((pos * n[seen]).sum() / n.sum()) - 0.5) < 0.02


def test_zipf_generator_matches_the_definition(spark) -> None:  # type: ignore[no-untyped-def]
    from pyspark.sql import functions as F

    spec = WorkloadSpec(distribution="zipf", d=2, g=16, n_subs=20_000, n_events=20_000,
                        n_clients=50, nodes=("A", "B", "C"), zipf_s=1.2, seed=7)
    w = generate(spark, spec)
    subs, events = w.subscriptions, w.events
    probs = np.asarray(zipf_probabilities(spec.g, spec.zipf_s))
    stats = _cell_stats(_long_values(w, spec.d), spec.g)
    assert sorted(stats) == ["ev0", "ev1", "lo0", "lo1"]
    for k, st in stats.items():
        assert st[:, 0].sum() == (spec.n_subs if k.startswith("lo") else spec.n_events)
        _check_values(st, probs, spec.g)
    # upper bounds: lo + uniform length in [0, max_length], clipped to the domain
    lengths = subs.select(F.explode(F.arrays_zip("lo", "hi")).alias("b")).select(
        (F.col("b.hi") - F.col("b.lo")).alias("len"), F.col("b.hi").alias("hi"))
    agg = lengths.agg(F.min("len"), F.max("len"), F.max("hi"),
                      F.avg(F.when(F.col("hi") < DOMAIN_HIGH, F.col("len")))).collect()[0]
    assert agg[0] >= 0 and agg[1] <= spec.max_length and agg[2] <= DOMAIN_HIGH
    assert abs(agg[3] / spec.max_length - 0.5) < 0.02
    # owners and publishers: uniform clients c0..c49, each on node nodes[j % 3]
    nodes = F.array(*[F.lit(n) for n in spec.nodes])
    j = F.substring("client", 2, 10).cast("int")
    both = (subs.select(F.lit("s").alias("t"), "node", "client")
            .unionByName(events.select(F.lit("e").alias("t"), "node", "client")))
    counts = {"s": np.zeros(spec.n_clients), "e": np.zeros(spec.n_clients)}
    wrong_node = 0
    for r in both.groupBy("t", j.alias("j"), (F.col("node") == F.element_at(nodes, j % 3 + 1))
                          .alias("ok")).count().collect():
        counts[r["t"]][r["j"]] += r["count"]
        wrong_node += 0 if r["ok"] else r["count"]
    assert wrong_node == 0
    for c in counts.values():
        assert c.sum() == 20_000
        assert _chi2(c, np.full(50, 1 / 50)) < _chi2_critical(49)
    # the text form says the same as the bounds
    r = subs.first()
    assert r["where"] == (f"a0 between {r['lo'][0]} and {r['hi'][0]} and "
                          f"a1 between {r['lo'][1]} and {r['hi'][1]}")


def _fingerprint(w) -> dict[str, tuple[int, int]]:  # type: ignore[no-untyped-def]
    """Row count and XOR of row hashes of every frame of ``w`` (order-free), in one job."""
    from pyspark.sql import functions as F

    parts = [getattr(w, k).select(F.lit(k).alias("k"),
                                  F.xxhash64(*getattr(w, k).columns).alias("h"))
             for k in ("subscriptions", "events", "unsubscriptions")]
    df = parts[0].unionByName(parts[1]).unionByName(parts[2])
    return {r["k"]: (r["n"], r["x"]) for r in
            df.groupBy("k").agg(F.count("*").alias("n"), F.bit_xor("h").alias("x")).collect()}


def test_uniform_generator_is_uniform_and_independent_of_partitioning(spark) -> None:  # type: ignore[no-untyped-def]
    spec = WorkloadSpec(distribution="uniform", d=3, g=8, n_subs=2_000, n_events=12_000,
                        n_clients=10, partitions=1, unsub_fraction=0.25, seed=3)
    w1 = generate(spark, spec)
    for st in _cell_stats(_long_values(w1, spec.d), spec.g).values():
        assert st[:, 2].min() >= 0 and st[:, 3].max() <= DOMAIN_HIGH
        assert _chi2(st[:, 0], np.full(spec.g, 1 / spec.g)) < _chi2_critical(spec.g - 1)
    # same rows whatever the partitioning; another seed gives other rows
    w3 = generate(spark, WorkloadSpec(**{**spec.as_dict(), "nodes": spec.nodes,
                                         "partitions": 3}))
    assert _fingerprint(w1) == _fingerprint(w3)
    other = generate(spark, WorkloadSpec(**{**spec.as_dict(), "nodes": spec.nodes,
                                            "seed": 4}))
    assert other.events.limit(20).collect() != w1.events.limit(20).collect()
    # unsubscriptions: about a quarter, each naming a subscription of the same owner
    unsubs = w1.unsubscriptions.collect()
    assert abs(len(unsubs) / spec.n_subs - 0.25) < 0.04
    owner = {r["id"]: (r["node"], r["client"]) for r in w1.subscriptions.collect()}
    assert all(owner[u["id"]] == (u["node"], u["client"]) for u in unsubs)


# -- files, Kafka and the command -------------------------------------------------------------
@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_files_hold_raw_records_the_mapping_accepts(spark, tmp_path: Path, fmt: str) -> None:  # type: ignore[no-untyped-def]
    spec = WorkloadSpec(distribution="zipf", d=3, g=32, n_subs=150, n_events=100,
                        n_clients=5, nodes=("A", "B"), unsub_fraction=0.1)
    meta = write_files(generate(spark, spec), tmp_path / "w", fmt)
    space = ContentSpace.from_json(tmp_path / "w" / "space.json")
    assert json.loads((tmp_path / "w" / "workload.json").read_text()) == meta
    for kind, raw_kind in (("subscriptions", "subscription"), ("events", "event"),
                           ("unsubscriptions", "unsubscription")):
        rows = spark.read.format("json" if fmt == "jsonl" else "parquet").load(
            str(tmp_path / "w" / kind)).collect()
        assert len(rows) == meta["counts"][kind]
        for r in rows:
            obj = r.asDict(recursive=True)
            rec = decode_raw(json.dumps(obj).encode(), raw_kind)  # type: ignore[arg-type]
            if raw_kind == "subscription":
                assert len(Subscription(space, rec["where"]).labels()) >= 1
            elif raw_kind == "event":
                event_label(space, rec["attrs"])
    assert meta["counts"]["unsubscriptions"] > 0


def test_bad_format_writes_nothing(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    w = generate(spark, WorkloadSpec(n_subs=10, n_events=10))
    with pytest.raises(WorkloadError) as info:
        write_files(w, tmp_path / "w", "csv")
    assert info.value.field == "format" and info.value.value == "csv"
    assert not (tmp_path / "w").exists()


def test_workload_command_writes_files_and_refuses_bad_input(spark, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                             capsys) -> None:
    out = tmp_path / "cli"
    rc = main(["workload", "--distribution", "zipf", "--subscriptions", "50", "--events", "40",
               "--nodes", "2", "--clients", "4", "--out", str(out)])
    assert rc == 0
    meta = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert meta["counts"] == {"subscriptions": 50, "unsubscriptions": 0, "events": 40}
    assert meta["params"]["nodes"] == ["n0", "n1"]
    assert ContentSpace.from_json(out / "space.json").names == ("a0", "a1", "a2")
    rc = main(["workload", "--g", "0", "--out", str(tmp_path / "bad")])
    assert rc == 2
    assert "g must be" in capsys.readouterr().err
    assert not (tmp_path / "bad").exists()


def test_write_kafka_fills_the_raw_topics(spark, kafka_bootstrap: str,  # type: ignore[no-untyped-def]
                                         topic_prefix: str, group_id: str) -> None:
    from confluent_kafka import Consumer

    spec = WorkloadSpec(n_subs=120, n_events=80, n_clients=6, nodes=("A", "B"),
                        unsub_fraction=0.2)
    topics = Topics(topic_prefix)
    meta = write_kafka(generate(spark, spec), kafka_bootstrap, topics)
    c = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": group_id,
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        c.subscribe([topics.raw_subscriptions, topics.raw_events, topics.raw_unsubscriptions])
        got: Counter[str] = Counter()
        want = sum(meta["counts"].values())
        for _ in range(200):
            for msg in c.consume(500, timeout=0.5):
                if msg.error():
                    continue
                kind = {topics.raw_subscriptions: "subscription", topics.raw_events: "event",
                        topics.raw_unsubscriptions: "unsubscription"}[msg.topic()]
                rec = decode_raw(msg.value(), kind)  # type: ignore[arg-type]
                assert msg.key() == rec["client"].encode()
                got[kind] += 1
            if sum(got.values()) >= want:
                break
    finally:
        c.close()
    assert got == Counter({"subscription": 120, "event": 80,
                           "unsubscription": meta["counts"]["unsubscriptions"]})
