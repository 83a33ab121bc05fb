"""Spark benchmark: the DLS mapping job vs a plain Kafka->Kafka Spark passthrough, one run.

Run (a Kafka must answer at ``--bootstrap``)::

    .venv/bin/python -m benchmarks.spark [--quick] [--bootstrap 127.0.0.1:9092]
        [--out benchmarks/results/spark.json] [--events N] [--subscriptions N]
        [--rounds R] [--catalyst | --no-catalyst] [--tuned | --no-tuned] [--no-plot]
        [--keep-topics]

Everything runs under a fresh topic prefix (``sb<hex>``) whose topics are deleted at the
end, with one local SparkSession (``spark.session.spark_session``, ``local[2]``).

1. **Fill.** :mod:`spark.workload` writes ``n_events`` raw events and ``n_subs`` raw
   subscriptions (uniform, d=3, g=32, JSON values, key = client) to the raw topics
   (``partitions`` partitions each); ``workload_write_throughput`` is rows/s of that job.
2. **Systems**, each one Spark batch job (the Kafka source from the earliest to the latest
   offset, ``includeHeaders``; the Kafka sink), timed from the action's start to its end:

   * ``passthrough``: the raw topic's ``key``, ``value`` and ``headers`` written unchanged to
     one output topic -- the cost of moving the bytes through Spark and Kafka;
   * ``dls-mapping``: ``spark.mapping.map_events`` / ``map_subscriptions`` of the same
     topic, written where they say (the node topics; dead letters to ``dls.deadletter``),
     as ``spark-map`` runs them: through the project's Java UDFs when the session has
     their jar (``params.jvm`` says whether it did);
   * ``dls-mapping-catalyst`` (full run, ``--catalyst``): the same mapping with
     ``fast=False``, the Catalyst expressions alone in the plan, to show what the Java
     path is worth;
   * ``dls-mapping-hm8000`` (``--tuned``): the Catalyst-only mapping with the SQL setting
     ``spark.sql.codegen.hugeMethodLimit`` at 8,000 for its duration (see
     :data:`HUGE_METHOD_LIMIT`), to show what that setting is worth.

   For each kind (``events``, ``subscriptions``) the systems run in turn, ``rounds``
   times, in reverse order every other round, so that drift of the
   shared machine hits all alike; each system's ``throughput`` is its best round (rows/s, and
   the median round as ``throughput_median``). Subscriptions also get
   ``labels_throughput`` (labels written per second; the label count is computed apart,
   in Spark, from the cell formula). ``throughput_ratio`` is mapping / passthrough
   (best rounds), with ``bar`` 0.7 and ``met`` in its params. ``plan_time`` is the time
   Catalyst takes to analyse, optimise and plan each system's query, measured apart
   (every timed job pays it once more inside).
3. **Check.** The output topics are counted: every raw row must have become exactly one
   node message and no dead letter (``output_rows``, ``dead_letters``).

Output: JSON records ``{"benchmark", "system", "params", "metric", "value", "unit"}``
(as :mod:`benchmarks.core`), ``spark.meta.json`` beside them (machine, commit, command,
wall time, settings, load averages at start and end) and ``spark.png`` (throughput bars),
unless ``--no-plot``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

from benchmarks.core import write_results
from connectors.kafka import ensure_topics
from connectors.topics import Topics
from dls.space import ContentSpace

BENCHMARK = "spark"
DEFAULT_OUT = Path("benchmarks/results/spark.json")
PLOT_NAME = "spark.png"
BAR = 0.7
TUNED = "dls-mapping-hm8000"
CATALYST = "dls-mapping-catalyst"
HUGE_METHOD_LIMIT = 8000
"""``spark.sql.codegen.hugeMethodLimit`` of the tuned variant: HotSpot does not JIT-compile
methods over 8,000 bytes of bytecode, and Spark's default limit (65,535) lets whole-stage
code that large run, interpreted."""
NODES = ("A", "B")


@dataclass(frozen=True)
class RunSettings:
    """Sizes of one run (full or quick)."""

    n_events: int
    n_subs: int
    rounds: int
    n_clients: int = 1_000
    distribution: str = "uniform"
    d: int = 3
    g: int = 32
    partitions: int = 2
    seed: int = 0
    tuned: bool = False
    catalyst: bool = True


FULL = RunSettings(n_events=100_000, n_subs=30_000, rounds=2)
QUICK = RunSettings(n_events=4_000, n_subs=2_000, rounds=1, n_clients=50, catalyst=False)


class Recorder:
    """Collects records and logs as the run goes."""

    def __init__(self, log: Callable[[str], None] = print) -> None:
        self.records: list[dict[str, Any]] = []
        self.log = log

    def add(self, system: str, params: dict[str, Any], metric: str, value: float,
            unit: str) -> None:
        self.records.append({"benchmark": BENCHMARK, "system": system, "params": dict(params),
                             "metric": metric, "value": float(value), "unit": unit})


def _read(spark: Any, bootstrap: str, topic: str) -> Any:
    return (spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic).option("startingOffsets", "earliest")
            .option("endingOffsets", "latest").option("includeHeaders", "true").load())


def _write(df: Any, bootstrap: str, topic: str | None = None) -> None:
    w = df.write.format("kafka").option("kafka.bootstrap.servers", bootstrap)
    if topic is not None:
        w = w.option("topic", topic)
    w.save()


def _plan(df: Any) -> None:
    """Have Catalyst analyse, optimise and plan ``df`` (what every action does first)."""
    df._jdf.queryExecution().executedPlan()  # noqa: SLF001 - no public API for this


def _timed(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def count_labels(subscriptions: Any, space: ContentSpace) -> int:
    """Total labels of workload subscriptions (integer bounds ``lo``/``hi``), in Spark.

    Uses the uniform cell formula of ``dls.space`` (``min(g-1, floor((v-low)*g/(high-low)))``
    in float64) on each bound; independent of the mapping being measured.
    """
    from pyspark.sql import functions as F

    n = F.lit(1).cast("long")
    for i, a in enumerate(space.attributes):
        def cell(v: Any, a: Any = a) -> Any:
            raw = F.floor(((v.cast("double") - F.lit(float(a.low))) * F.lit(float(a.granules)))
                          / F.lit(float(a.high - a.low)))
            return F.least(F.lit(a.granules - 1), raw.cast("long"))
        n = n * (cell(F.col("hi")[i]) - cell(F.col("lo")[i]) + 1)
    return int(subscriptions.agg(F.sum(n)).collect()[0][0])


def _git_status() -> list[str]:
    """``git status --porcelain`` of ``spark/``: the mapping measured may be uncommitted."""
    import subprocess

    try:
        out = subprocess.run(["git", "status", "--porcelain", "--", "spark"],  # noqa: S603,S607
                             capture_output=True, text=True, check=False,
                             cwd=Path(__file__).resolve().parent.parent).stdout
    except OSError:
        return []
    return out.splitlines()


def _count_topics(spark: Any, bootstrap: str, topics: Sequence[str]) -> dict[str, int]:
    df = (spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap)
          .option("subscribe", ",".join(topics)).option("startingOffsets", "earliest")
          .option("endingOffsets", "latest").load())
    got = {r["topic"]: int(r["count"]) for r in df.groupBy("topic").count().collect()}
    return {t: got.get(t, 0) for t in topics}


def run(s: RunSettings, bootstrap: str, rec: Recorder, *, keep_topics: bool = False
        ) -> dict[str, Any]:
    """Every phase; records go to ``rec``; returns facts for the meta file."""
    from pyspark.sql import SparkSession

    from spark.mapping import map_events, map_subscriptions
    from spark.session import spark_session
    from spark.workload import WorkloadSpec, generate, space_spec, write_kafka

    created = SparkSession.getActiveSession() is None
    spark = spark_session("dlsroute-bench-spark")
    prefix = f"sb{uuid.uuid4().hex[:8]}"
    topics = Topics(prefix)
    spec = WorkloadSpec(distribution=s.distribution, d=s.d, g=s.g, n_subs=s.n_subs,
                        n_events=s.n_events, n_clients=s.n_clients, nodes=NODES,
                        seed=s.seed, partitions=s.partitions)
    space = ContentSpace.from_spec(space_spec(spec))
    base = {"distribution": s.distribution, "d": s.d, "g": s.g, "n_clients": s.n_clients,
            "nodes": len(NODES), "partitions": s.partitions, "master": spark.sparkContext.master}
    facts: dict[str, Any] = {"topic_prefix": prefix, "git_status_spark": _git_status()}
    try:
        w = generate(spark, spec)
        ensure_topics(bootstrap, [topics.raw_events, topics.raw_subscriptions],
                      partitions=s.partitions)
        for kind, n in (("events", s.n_events), ("subscriptions", s.n_subs)):
            t = _timed(partial(write_kafka, w, bootstrap, topics, kinds=(kind,),
                               partitions=s.partitions))
            rec.add("workload", base | {"kind": kind, "n_rows": n}, "workload_write_throughput",
                    n / t, "rows/s")
            rec.log(f"fill: {n:,} raw {kind} in {t:.1f} s ({n / t:,.0f} rows/s)")
        n_labels = count_labels(w.subscriptions, space)
        rec.log(f"subscriptions expand to {n_labels:,} labels "
                f"({n_labels / s.n_subs:.2f} per subscription)")
        outputs = [topics.node_publish(n) for n in NODES] + [
            topics.node_subscribe(n) for n in NODES] + [topics.deadletter]
        passthrough_out = {"events": f"{prefix}.bench.passthrough.events",
                           "subscriptions": f"{prefix}.bench.passthrough.subscriptions"}
        ensure_topics(bootstrap, outputs + list(passthrough_out.values()),
                      partitions=s.partitions)
        source = {"events": topics.raw_events, "subscriptions": topics.raw_subscriptions}
        mapper = {"events": map_events, "subscriptions": map_subscriptions}
        for kind, n in (("events", s.n_events), ("subscriptions", s.n_subs)):
            def passthrough(kind: str = kind) -> None:
                raw = _read(spark, bootstrap, source[kind])
                _write(raw.select("key", "value", "headers"), bootstrap, passthrough_out[kind])

            def mapping(kind: str = kind, fast: bool | None = None) -> None:
                _write(mapper[kind](space, _read(spark, bootstrap, source[kind]), topics,
                                    fast=fast), bootstrap)

            def mapping_tuned(kind: str = kind) -> None:
                key = "spark.sql.codegen.hugeMethodLimit"
                before = spark.conf.get(key)
                spark.conf.set(key, str(HUGE_METHOD_LIMIT))
                try:
                    mapping(kind, fast=False)
                finally:
                    if before is None:
                        spark.conf.unset(key)
                    else:
                        spark.conf.set(key, before)

            # Catalyst's analysis + optimisation + physical planning, measured apart on a
            # frame of the same plan (the write repeats it inside the timed job).
            plan_mapped = mapper[kind](space, _read(spark, bootstrap, source[kind]), topics)
            plan_time = _timed(partial(_plan, plan_mapped))
            # Whether the mapping ran through the Java UDFs (the session had their jar).
            jvm = "dlsroute_fast_map" in str(
                plan_mapped._jdf.queryExecution().analyzed().toString())  # noqa: SLF001
            plan_pass = _timed(partial(_plan, _read(spark, bootstrap, source[kind]).select(
                "key", "value", "headers")))
            rec.log(f"{kind}: planning the query takes {plan_time:.2f} s (mapping), "
                    f"{plan_pass:.2f} s (passthrough)")
            runs: list[tuple[str, Callable[[], None]]] = [
                ("passthrough", passthrough), ("dls-mapping", mapping)]
            if s.catalyst:
                runs.append((CATALYST, partial(mapping, kind, False)))
            if s.tuned:
                runs.append((TUNED, mapping_tuned))
            times: dict[str, list[float]] = {name: [] for name, _ in runs}
            for r in range(s.rounds):
                for system, fn in (runs if r % 2 == 0 else runs[::-1]):
                    t = _timed(fn)
                    times[system].append(t)
                    rec.log(f"{kind} round {r + 1}: {system:<18} {t:6.2f} s  "
                            f"{n / t:>10,.0f} rows/s")
            params = base | {"kind": kind, "n_rows": n, "rounds": s.rounds, "jvm": jvm,
                             "timing": "one Spark batch job Kafka->Kafka, best of rounds"}
            best = {k: min(v) for k, v in times.items()}
            for system, ts in times.items():
                rec.add(system, params, "throughput", n / best[system], "rows/s")
                rec.add(system, params, "throughput_median", n / statistics.median(ts),
                        "rows/s")
                rec.add(system, params, "job_time", best[system], "s")
            rec.add("dls-mapping", params, "plan_time", plan_time, "s")
            rec.add("passthrough", params, "plan_time", plan_pass, "s")
            labels = n if kind == "events" else n_labels
            for system in [name for name, _ in runs if name != "passthrough"]:
                extra = {"spark.sql.codegen.hugeMethodLimit": HUGE_METHOD_LIMIT} if (
                    system == TUNED) else {}
                rec.add(system, params | extra | {"labels": labels}, "labels_throughput",
                        labels / best[system], "labels/s")
                ratio = best["passthrough"] / best[system]
                rec.add(system, params | extra | {"bar": BAR, "met": ratio >= BAR},
                        "throughput_ratio", ratio, "x")
                rec.log(f"{kind}: {system} {n / best[system]:,.0f} rows/s "
                        f"({labels / best[system]:,.0f} labels/s), passthrough "
                        f"{n / best['passthrough']:,.0f} rows/s: ratio {ratio:.2f} "
                        f"({'meets' if ratio >= BAR else 'misses'} the {BAR:.0%} bar)")
        counts = _count_topics(spark, bootstrap, outputs)
        rounds = s.rounds
        node_events = sum(counts[topics.node_publish(n)] for n in NODES)
        node_subs = sum(counts[topics.node_subscribe(n)] for n in NODES)
        mapping_runs = rounds * (1 + s.tuned + s.catalyst)  # every mapping system writes there
        check = base | {"rounds": rounds, "mapping_runs": mapping_runs}
        rec.add("dls-mapping", check | {"kind": "events", "expected": s.n_events * mapping_runs},
                "output_rows", node_events, "rows")
        rec.add("dls-mapping", check | {"kind": "subscriptions",
                                        "expected": s.n_subs * mapping_runs},
                "output_rows", node_subs, "rows")
        rec.add("dls-mapping", check, "dead_letters", counts[topics.deadletter], "rows")
        rec.log(f"check: {node_events:,} node events (want {s.n_events * mapping_runs:,}), "
                f"{node_subs:,} node subscriptions (want {s.n_subs * mapping_runs:,}), "
                f"{counts[topics.deadletter]} dead letters")
        facts["labels"] = n_labels
    finally:
        if not keep_topics:
            from benchmarks.kafka import delete_run_topics

            facts["deleted_topics"] = delete_run_topics(bootstrap, prefix, [])
        if created:
            spark.stop()
    return facts


def plot(records: list[dict[str, Any]], path: Path) -> bool:
    """Throughput bars (best round) of both systems per kind; False without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    kinds = ["events", "subscriptions"]
    systems = [x for x in ("passthrough", "dls-mapping", CATALYST, TUNED)
               if any(r["system"] == x for r in records)]
    fig, ax = plt.subplots(figsize=(7, 4))
    width = 0.8 / len(systems)
    for j, system in enumerate(systems):
        vals = [next((r["value"] for r in records if r["system"] == system
                      and r["metric"] == "throughput" and r["params"]["kind"] == k), 0.0)
                for k in kinds]
        bars = ax.bar([i + (j - (len(systems) - 1) / 2) * width for i in range(len(kinds))],
                      vals, width,
                      label=system)
        ax.bar_label(bars, labels=[f"{v:,.0f}" for v in vals], fontsize=8)
    for i, k in enumerate(kinds):
        ratio = next((r for r in records if r["metric"] == "throughput_ratio"
                      and r["system"] == "dls-mapping" and r["params"]["kind"] == k), None)
        if ratio is not None:
            ax.text(i, 0, f"ratio {ratio['value']:.2f}", ha="center", va="bottom",
                    fontsize=8, color="white")
    ax.set_xticks(range(len(kinds)), kinds)
    ax.set_ylabel("rows/s (best round)")
    ax.set_title("Spark batch Kafka->Kafka: DLS mapping vs passthrough")
    ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small sizes, one round (tests)")
    ap.add_argument("--bootstrap", default="127.0.0.1:9092")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON records file")
    ap.add_argument("--events", type=int, default=None)
    ap.add_argument("--subscriptions", type=int, default=None)
    ap.add_argument("--rounds", type=int, default=None)
    ap.add_argument("--tuned", action=argparse.BooleanOptionalAction, default=None,
                    help="also run the Catalyst-only mapping with hugeMethodLimit=8000")
    ap.add_argument("--catalyst", action=argparse.BooleanOptionalAction, default=None,
                    help="also run the Catalyst-only mapping (fast=False; default: full run)")
    ap.add_argument("--no-plot", action="store_true")
    ap.add_argument("--keep-topics", action="store_true")
    args = ap.parse_args(argv)
    s = QUICK if args.quick else FULL
    for field, value in (("n_events", args.events), ("n_subs", args.subscriptions),
                         ("rounds", args.rounds)):
        if value is not None:
            if value < 1:
                ap.error(f"--{field} must be positive, got {value}")
            s = replace(s, **{field: value})
    if args.tuned is not None:
        s = replace(s, tuned=args.tuned)
    if args.catalyst is not None:
        s = replace(s, catalyst=args.catalyst)
    started = datetime.now(UTC).isoformat(timespec="seconds")
    rec = Recorder()
    load_start = os.getloadavg()
    t0 = time.perf_counter()
    facts = run(s, args.bootstrap, rec, keep_topics=args.keep_topics)
    wall = time.perf_counter() - t0
    # The machine is shared: its load over the run, as benchmarks.kafka records it.
    facts["loadavg_1_5_15_start"] = [round(x, 2) for x in load_start]
    facts["loadavg_1_5_15_end"] = [round(x, 2) for x in os.getloadavg()]
    out: Path = args.out
    meta_path = write_results(out, rec.records, benchmark=BENCHMARK, module="benchmarks.spark",
                              argv=argv, started=started, wall=wall, quick=args.quick,
                              settings=asdict(s), **facts)
    rec.log(f"wrote {len(rec.records)} records to {out} and {meta_path} in {wall:.1f} s")
    if not args.no_plot:
        png = out.with_name(PLOT_NAME)
        rec.log(f"wrote {png}" if plot(rec.records, png) else "matplotlib missing: no plot")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
