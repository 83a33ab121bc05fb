"""The paper's §6.1 workload generator as a Spark batch job (``dlsroute workload``).

It follows the definitions of the numpy generator ``benchmarks/workload.py``: ``d`` numeric
attributes ``a0..a{d-1}`` over the integer domain ``[0, H]`` (``H = 2**20 - 1`` by default)
cut into ``g`` equal cells;

* a subscription's **lower bound** per attribute, and an event's **value**, come from
  ``distribution``: ``uniform`` integers over ``[0, H]``, or ``zipf``: a cell ``c`` with
  ``P(c) ∝ (c + 1) ** -zipf_s`` over the ``g`` cells (truncated and renormalised), then a
  uniform integer among the integers of that cell (``ceil(c*H/g) .. ceil((c+1)*H/g) - 1``,
  the last cell ending at ``H``);
* its **upper bound** is ``min(H, lower + length)``, ``length`` uniform in
  ``[0, floor(length_cells * H / g)]``;
* its **owner** is a uniform client ``c{j}``, ``j`` in ``[0, n_clients)``; client ``c{j}``
  is attached to node ``nodes[j % len(nodes)]``; an event's publisher is drawn the same way;
* with ``unsub_fraction`` > 0, a subscription is also unsubscribed with that probability.

Randomness differs from the numpy generator on purpose: every draw is a function of
``(seed, purpose, row id)`` alone — the top 53 bits of Spark's ``xxhash64`` of the three,
scaled to ``[0, 1)`` — so the rows do not depend on partitioning, on the number of
executors or on the order of evaluation, and row ``i`` is the same whatever the total.
Zipf cells are drawn with Walker's alias method (two draws, two array lookups), which is
exact for the renormalised probabilities and needs no per-row search.

Records are the raw formats of the mapping job (the trace ops of ``dlsroute simulate``):
event ``{"node", "client", "id", "attrs"}``, subscription ``{"node", "client", "id",
"where"}`` (text form ``a0 between L and H and ...``), unsubscription ``{"node",
"client", "id"}``. :func:`write_files` writes them as JSON lines or Parquet with the space
spec beside them; :func:`write_kafka` as JSON values of the raw topics.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from connectors.topics import Topics, check_name
from spark.exceptions import WorkloadError

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

__all__ = [
    "DISTRIBUTIONS",
    "DOMAIN_HIGH",
    "FORMATS",
    "SparkWorkload",
    "WorkloadError",
    "WorkloadSpec",
    "alias_table",
    "alias_probabilities",
    "cell_value_bounds",
    "generate",
    "space_spec",
    "write_files",
    "write_kafka",
    "zipf_probabilities",
]

DOMAIN_HIGH = 2**20 - 1
DISTRIBUTIONS = ("uniform", "zipf")
FORMATS = ("jsonl", "parquet")
_TWO_53 = float(2**53)


def _positive_int(name: str, value: Any, low: int = 1, high: int | None = None) -> None:
    if (not isinstance(value, int) or isinstance(value, bool) or value < low
            or (high is not None and value > high)):
        rng = f"[{low}, {high}]" if high is not None else f">= {low}"
        raise WorkloadError(f"{name} must be an integer {rng}, got {value!r}", field=name,
                            value=value)


def _finite(name: str, value: Any, low: float, high: float, *, low_open: bool = False) -> None:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if ok:
        ok = (value > low if low_open else value >= low) and value <= high
    if not ok:
        bracket = "(" if low_open else "["
        raise WorkloadError(f"{name} must be a number in {bracket}{low}, {high}], got {value!r}",
                            field=name, value=value)


@dataclass(frozen=True)
class WorkloadSpec:
    """Everything that determines a workload; checked when built.

    ``nodes`` are the node names (topic name parts); ``n_unsubs`` is not a parameter:
    each subscription is unsubscribed with probability ``unsub_fraction``.
    """

    distribution: str = "uniform"
    d: int = 3
    g: int = 32
    n_subs: int = 10_000
    n_events: int = 10_000
    n_clients: int = 100
    nodes: tuple[str, ...] = ("n0",)
    length_cells: float = 2.0
    zipf_s: float = 1.2
    domain_high: int = DOMAIN_HIGH
    unsub_fraction: float = 0.0
    seed: int = 0
    partitions: int = 2

    def __post_init__(self) -> None:
        if self.distribution not in DISTRIBUTIONS:
            raise WorkloadError(f"distribution must be one of {list(DISTRIBUTIONS)}, got "
                                f"{self.distribution!r}", field="distribution",
                                value=self.distribution)
        _positive_int("d", self.d, 1, 16)
        _positive_int("g", self.g, 1, 1 << 16)
        _positive_int("n_subs", self.n_subs, 0)
        _positive_int("n_events", self.n_events, 0)
        _positive_int("n_clients", self.n_clients, 1)
        _positive_int("domain_high", self.domain_high, 1, 2**52)
        _positive_int("seed", self.seed, 0, 2**63 - 1)
        _positive_int("partitions", self.partitions, 1, 100_000)
        _finite("length_cells", self.length_cells, 0.0, float(self.g))
        _finite("zipf_s", self.zipf_s, 0.0, 100.0)
        _finite("unsub_fraction", self.unsub_fraction, 0.0, 1.0)
        if self.g > self.domain_high:
            raise WorkloadError(f"g must not exceed domain_high ({self.domain_high}): every "
                                f"cell needs an integer, got {self.g}", field="g", value=self.g)
        if not isinstance(self.nodes, tuple) or not self.nodes:
            raise WorkloadError(f"nodes must be a non-empty tuple of names, got {self.nodes!r}",
                                field="nodes", value=self.nodes)
        for n in self.nodes:
            check_name(n, "nodes")
        if len(set(self.nodes)) != len(self.nodes):
            raise WorkloadError(f"nodes must be distinct, got {list(self.nodes)}",
                                field="nodes", value=list(self.nodes))
        bits = max(1, math.ceil(math.log2(self.g))) * self.d
        if bits > 64:
            raise WorkloadError(f"d={self.d} attributes of g={self.g} cells need {bits} label "
                                f"bits, more than 64", field="d", value=self.d)

    @property
    def max_length(self) -> int:
        """Largest interval length, ``floor(length_cells * H / g)``."""
        return int(self.length_cells * self.domain_high / self.g)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready parameters."""
        out = asdict(self)
        out["nodes"] = list(self.nodes)
        return out


def space_spec(spec: WorkloadSpec) -> dict[str, Any]:
    """The content space of a workload (``ContentSpace.from_spec`` format)."""
    return {"attributes": [{"name": f"a{i}", "type": "numeric", "low": 0,
                            "high": spec.domain_high, "granules": spec.g}
                           for i in range(spec.d)]}


def cell_value_bounds(g: int, high: int = DOMAIN_HIGH) -> tuple[list[int], list[int]]:
    """Smallest and largest integer value of each of the ``g`` cells of ``[0, high]``."""
    starts = [(c * high + g - 1) // g for c in range(g + 1)]  # ceil(c * high / g)
    first = starts[:-1]
    last = [s - 1 for s in starts[1:]]
    last[-1] = high
    return first, last


def zipf_probabilities(g: int, s: float) -> list[float]:
    """``P(c) ∝ (c + 1) ** -s`` for ``c = 0..g-1``, renormalised over the ``g`` cells."""
    w = [(c + 1) ** -s for c in range(g)]
    total = math.fsum(w)
    return [x / total for x in w]


def alias_table(probs: list[float]) -> tuple[list[float], list[int]]:
    """Walker/Vose alias table: cell ``i`` keeps ``i`` with ``prob[i]``, else ``alias[i]``."""
    n = len(probs)
    scaled = [p * n for p in probs]
    prob = [1.0] * n
    alias = list(range(n))
    small = [i for i, x in enumerate(scaled) if x < 1.0]
    large = [i for i, x in enumerate(scaled) if x >= 1.0]
    while small and large:
        s, big = small.pop(), large.pop()
        prob[s] = scaled[s]
        alias[s] = big
        scaled[big] = (scaled[big] + scaled[s]) - 1.0
        (small if scaled[big] < 1.0 else large).append(big)
    for i in small + large:  # left-overs are 1 up to rounding
        prob[i] = 1.0
        alias[i] = i
    return prob, alias


def alias_probabilities(prob: list[float], alias: list[int]) -> list[float]:
    """The distribution an alias table draws from (for checking it)."""
    n = len(prob)
    out = [0.0] * n
    for i in range(n):
        out[i] += prob[i] / n
        out[alias[i]] += (1.0 - prob[i]) / n
    return out


# -- Spark column expressions ----------------------------------------------------------------
def _u(seed: int, purpose: str) -> Column:
    """A uniform double in ``[0, 1)``: top 53 bits of ``xxhash64(seed, purpose, id)``."""
    from pyspark.sql import functions as F

    h = F.xxhash64(F.lit(seed), F.lit(purpose), F.col("id"))
    return F.shiftrightunsigned(h, 11).cast("double") / F.lit(_TWO_53)


def _uniform_int(u: Column, low: Column | int, n: Column | int) -> Column:
    """``low + floor(u * n)``, clamped to ``low + n - 1`` (``n`` values from ``low``)."""
    from pyspark.sql import functions as F

    lo = low if not isinstance(low, int) else F.lit(low)
    cnt = n if not isinstance(n, int) else F.lit(n)
    off = F.least(F.floor(u * cnt.cast("double")).cast("long"), cnt.cast("long") - 1)
    return lo.cast("long") + off


def _value(spec: WorkloadSpec, purpose: str) -> Column:
    """One attribute value drawn from ``spec.distribution`` (a long)."""
    from pyspark.sql import functions as F

    high = spec.domain_high
    if spec.distribution == "uniform":
        return _uniform_int(_u(spec.seed, purpose), 0, high + 1)
    prob, alias = alias_table(zipf_probabilities(spec.g, spec.zipf_s))
    g = spec.g
    slot = _uniform_int(_u(spec.seed, purpose + ".slot"), 0, g)
    keep = _u(spec.seed, purpose + ".keep") < F.element_at(
        F.array(*[F.lit(float(p)) for p in prob]), (slot + 1).cast("int"))
    cell = F.when(keep, slot).otherwise(
        F.element_at(F.array(*[F.lit(int(a)) for a in alias]), (slot + 1).cast("int")).cast("long"))
    firsts, lasts = cell_value_bounds(g, high)
    first = F.element_at(F.array(*[F.lit(v).cast("long") for v in firsts]), (cell + 1).cast("int"))
    last = F.element_at(F.array(*[F.lit(v).cast("long") for v in lasts]), (cell + 1).cast("int"))
    return _uniform_int(_u(spec.seed, purpose + ".val"), first, last - first + 1)


def _client(spec: WorkloadSpec, purpose: str) -> tuple[Column, Column]:
    """``(node, client)`` name columns of a uniformly drawn client."""
    from pyspark.sql import functions as F

    j = _uniform_int(_u(spec.seed, purpose), 0, spec.n_clients)
    nodes = F.array(*[F.lit(n) for n in spec.nodes])
    node = F.element_at(nodes, (j % len(spec.nodes) + 1).cast("int"))
    return node.alias("node"), F.concat(F.lit("c"), j.cast("string")).alias("client")


@dataclass(frozen=True)
class SparkWorkload:
    """The DataFrames of one workload (lazy; nothing runs until they are written)."""

    spec: WorkloadSpec
    subscriptions: DataFrame
    """``node, client, id, where`` plus the integer bounds ``lo`` and ``hi`` (arrays)."""
    events: DataFrame
    """``node, client, id, attrs`` (a struct of longs ``a0..``)."""
    unsubscriptions: DataFrame
    """``node, client, id`` of the unsubscribed subscriptions (same owners)."""

    def raw(self, kind: str) -> DataFrame:
        """The raw-record columns of ``kind`` (subscriptions, events or unsubscriptions)."""
        cols = {"subscriptions": ("node", "client", "id", "where"),
                "events": ("node", "client", "id", "attrs"),
                "unsubscriptions": ("node", "client", "id")}
        if kind not in cols:
            raise WorkloadError(f"kind must be one of {sorted(cols)}, got {kind!r}",
                                field="kind", value=kind)
        return getattr(self, kind).select(*cols[kind])


def generate(spark: SparkSession, spec: WorkloadSpec) -> SparkWorkload:
    """Build the workload's DataFrames (deterministic in ``spec``, whatever the partitioning)."""
    from pyspark.sql import functions as F

    high = spec.domain_high
    subs = spark.range(0, spec.n_subs, numPartitions=spec.partitions)
    lo = [_value(spec, f"sub.lo.{i}") for i in range(spec.d)]
    length = [_uniform_int(_u(spec.seed, f"sub.len.{i}"), 0, spec.max_length + 1)
              for i in range(spec.d)]
    hi = [F.least(lo[i] + length[i], F.lit(high)) for i in range(spec.d)]
    node, client = _client(spec, "sub.owner")
    subs = subs.select(
        "id", node, client,
        F.array(*lo).alias("lo"), F.array(*hi).alias("hi"),
        (_u(spec.seed, "sub.unsub") < F.lit(spec.unsub_fraction)).alias("unsub"))
    where = F.concat_ws(" and ", *[
        F.concat(F.lit(f"a{i} between "), F.col("lo")[i].cast("string"), F.lit(" and "),
                 F.col("hi")[i].cast("string")) for i in range(spec.d)])
    subs = subs.select(
        "node", "client", F.concat(F.lit("s"), F.col("id").cast("string")).alias("id"),
        where.alias("where"), "lo", "hi", "unsub")
    unsubs = subs.where(F.col("unsub")).select("node", "client", "id")
    subs = subs.drop("unsub")

    events = spark.range(0, spec.n_events, numPartitions=spec.partitions)
    enode, eclient = _client(spec, "event.publisher")
    attrs = F.struct(*[_value(spec, f"event.v.{i}").alias(f"a{i}") for i in range(spec.d)])
    events = events.select(
        enode, eclient, F.concat(F.lit("e"), F.col("id").cast("string")).alias("id"),
        attrs.alias("attrs"))
    return SparkWorkload(spec, subs, events, unsubs)


_KINDS = ("subscriptions", "unsubscriptions", "events")


def write_files(w: SparkWorkload, out: str | Path, fmt: str = "jsonl") -> dict[str, Any]:
    """Write the raw records under ``out``: one directory per kind and ``space.json``.

    ``out/subscriptions``, ``out/unsubscriptions`` and ``out/events`` are Spark output
    directories (JSON lines or Parquet part files, replaced if present); ``out/space.json``
    is the space spec and ``out/workload.json`` the parameters and row counts.
    Returns what ``workload.json`` holds.
    """
    if fmt not in FORMATS:
        raise WorkloadError(f"format must be one of {list(FORMATS)}, got {fmt!r}",
                            field="format", value=fmt)
    root = Path(out)
    root.mkdir(parents=True, exist_ok=True)
    counts: dict[str, int] = {}
    for kind in _KINDS:
        df = w.raw(kind)
        writer = df.write.mode("overwrite")
        path = str(root / kind)
        if fmt == "jsonl":
            writer.json(path)
        else:
            writer.parquet(path)
    counts = _counts(w)
    (root / "space.json").write_text(json.dumps(space_spec(w.spec), indent=1) + "\n",
                                     encoding="utf-8")
    meta = {"params": w.spec.as_dict(), "format": fmt, "counts": counts}
    (root / "workload.json").write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")
    return meta


def _counts(w: SparkWorkload) -> dict[str, int]:
    n_unsubs = w.unsubscriptions.count() if w.spec.unsub_fraction > 0 else 0
    return {"subscriptions": w.spec.n_subs, "unsubscriptions": int(n_unsubs),
            "events": w.spec.n_events}


def kafka_frame(w: SparkWorkload, kind: str) -> DataFrame:
    """A Kafka-sink-shaped frame (``key`` = client, ``value`` = the JSON record) of ``kind``."""
    from pyspark.sql import functions as F

    df = w.raw(kind)
    return df.select(F.col("client").cast("binary").alias("key"),
                     F.to_json(F.struct(*df.columns)).cast("binary").alias("value"))


def write_kafka(w: SparkWorkload, bootstrap: str, topics: Topics, *, partitions: int = 2,
                kinds: tuple[str, ...] = _KINDS,
                kafka: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Append the raw records to the raw topics (created if missing) as JSON values.

    The Spark session must have the Kafka connector (``spark.session.spark_session``).
    ``kafka``: librdkafka settings (security) for the topics' creation; the Spark writer
    gets them translated (:func:`connectors.kafka_config.spark_options`).
    Returns the parameters, the topic of each kind and the row counts.
    """
    from connectors.kafka import ensure_topics
    from connectors.kafka_config import spark_options

    for k in kinds:
        if k not in _KINDS:
            raise WorkloadError(f"kind must be one of {list(_KINDS)}, got {k!r}", field="kinds",
                                value=k)
    names = {"subscriptions": topics.raw_subscriptions,
             "unsubscriptions": topics.raw_unsubscriptions, "events": topics.raw_events}
    ensure_topics(bootstrap, [names[k] for k in kinds], partitions=partitions, kafka=kafka)
    java = spark_options(kafka or {})
    for k in kinds:
        (kafka_frame(w, k).write.format("kafka")
         .option("kafka.bootstrap.servers", bootstrap)
         .option("topic", names[k])
         .options(**java)
         .save())
    counts = _counts(w)
    return {"params": w.spec.as_dict(), "topics": {k: names[k] for k in kinds},
            "counts": {k: counts[k] for k in kinds}}
