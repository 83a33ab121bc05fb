"""What a content space does to a sample of subscriptions and events (``dlsroute analyze``).

For a space spec and raw subscriptions (and optionally raw events) read from files (JSON
lines or Parquet, as :mod:`spark.workload` writes them) or from Kafka topics, a Spark job
computes:

* **label-set sizes**: the exact distribution of the number of labels per subscription
  (histogram, mean, quantiles) and the number of distinct labels of the sample, overall and
  per client;
* **quantisation false-positive rate**, two ways. *Volume*: with events spread uniformly over
  the domain, the share of the volume of a subscription's cells that its box does not
  cover, ``1 - vol(box) / vol(cells)`` (per subscription, then the mean, and pooled as
  ``1 - sum vol(box) / sum vol(cells)``); a discrete attribute counts values. *Events*:
  with an event sample, every (event, subscription) pair whose labels agree is checked
  exactly; the rate is the share of those pairs that do not match (pooled, and the mean
  over subscriptions that some event reached);
* **Bloom false-positive rate**, ``(1 - exp(-k n / m)) ** k``, of a filter of ``m``
  counters and ``k`` hashes holding ``n`` labels: for the space's own client and routing
  filters and for every size asked for. Client filters hold one client's distinct labels
  (the rate is averaged over clients); a routing filter is charged with every distinct
  label of the sample (a node that hears of every subscription).

Records that cannot be used (undecodable, bad predicate, over the label budget, event
outside the domain) are counted with their first reasons, never dropped silently. The
per-record work (decoding, compiling predicates, expanding labels, the exact checks) runs
in Python workers over partitions with the ``dls`` core; counting, distinct labels and the
histograms are Spark aggregations.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from dls.cbf import size_for
from dls.exceptions import DLSError
from dls.space import ContentSpace, DiscreteAttribute, UniformAttribute
from spark.exceptions import AnalyzeError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = [
    "AnalyzeError",
    "FilterSize",
    "analyze",
    "bloom_fpr",
    "format_table",
    "parse_filter_sizes",
    "plot",
    "read_raw",
    "subscription_volumes",
]

_SAMPLE_REASONS = 5


@dataclass(frozen=True)
class FilterSize:
    """A Bloom filter size to evaluate: ``m`` counters, ``k`` hashes (None: optimal)."""

    m: int
    k: int | None = None


def parse_filter_sizes(text: str) -> list[FilterSize]:
    """``"4096,65536:7"`` -> filter sizes (``m`` or ``m:k``, comma separated)."""
    out: list[FilterSize] = []
    for item in (t.strip() for t in text.split(",")):
        if not item:
            continue
        m_text, _, k_text = item.partition(":")
        try:
            m = int(m_text)
            k = int(k_text) if k_text else None
        except ValueError:
            raise AnalyzeError(f"filter size must be M or M:K with integers, got {item!r}",
                               field="filter_sizes", value=item) from None
        if m < 1 or (k is not None and not 1 <= k <= 64):
            raise AnalyzeError(f"filter size needs M >= 1 and K in [1, 64], got {item!r}",
                               field="filter_sizes", value=item)
        out.append(FilterSize(m, k))
    return out


def bloom_fpr(m: int, k: int, n: float | np.ndarray) -> Any:
    """Expected false-positive rate of a Bloom filter (``m``, ``k``) holding ``n`` items."""
    return (1.0 - np.exp(-k * np.asarray(n, dtype=np.float64) / m)) ** k


def _optimal_k(m: int, n: float) -> int:
    return min(64, max(1, round(m / max(n, 1.0) * math.log(2))))


def _spec_filter(spec: dict[str, Any]) -> tuple[int, int]:
    """``(m, k)`` of a space's filter spec, sized as ``CountingBloomFilter`` does."""
    if "m" in spec:
        return int(spec["m"]), int(spec["k"])
    return size_for(int(spec["expected_items"]), float(spec["fp_rate"]))


# -- reading raw records --------------------------------------------------------------------
def _is_parquet(path: str) -> bool:
    p = Path(path)
    if p.suffix == ".parquet":
        return True
    return p.is_dir() and any(p.glob("*.parquet"))


def read_raw(spark: SparkSession, source: str, *, bootstrap: str | None = None,
             kafka_options: dict[str, str] | None = None) -> DataFrame:
    """Raw records of ``source`` as a one-column (``value``, binary) DataFrame.

    ``source`` is ``kafka:TOPIC`` (read from the earliest to the latest offset; needs
    ``bootstrap``), a Parquet file or directory (each row becomes its JSON object), or a
    text file or directory of JSON lines (blank lines skipped). ``kafka_options``: more
    ``kafka.*`` options of the Kafka source (security:
    :func:`connectors.kafka_config.spark_options`).

    Raises:
        AnalyzeError: A Kafka source without ``bootstrap``, or a path that does not exist.
    """
    from pyspark.sql import functions as F

    if source.startswith("kafka:"):
        topic = source[len("kafka:"):]
        if not topic:
            raise AnalyzeError("a Kafka source needs a topic: kafka:TOPIC", field="source",
                               value=source)
        if not bootstrap:
            raise AnalyzeError(f"reading {source} needs --bootstrap", field="bootstrap",
                               value=bootstrap)
        return (spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap)
                .option("subscribe", topic).option("startingOffsets", "earliest")
                .option("endingOffsets", "latest").options(**(kafka_options or {}))
                .load().select("value"))
    if not Path(source).exists():
        raise AnalyzeError(f"no such file or directory: {source}", field="source", value=source)
    if _is_parquet(source):
        df = spark.read.parquet(source)
        return df.select(F.to_json(F.struct(*df.columns)).cast("binary").alias("value"))
    df = spark.read.text(source)
    return (df.where(F.trim(F.col("value")) != "")
            .select(F.col("value").cast("binary").alias("value")))


# -- per-record work (runs in Python workers) ------------------------------------------------
def _cell_edges(a: Any) -> np.ndarray:
    """Edges ``e_0 < ... < e_cells`` of a numeric attribute's cells."""
    if isinstance(a, UniformAttribute):
        c = np.arange(a.granules + 1, dtype=np.float64)
        edges = a.low + c * (a.high - a.low) / a.granules
        edges[-1] = a.high
        return edges
    return np.asarray([a.low, *a.breakpoints, a.high], dtype=np.float64)


def subscription_volumes(space: ContentSpace, sub: Any) -> tuple[float, float] | None:
    """``(vol(box), vol(cells))`` of a compiled subscription, as fractions of the space.

    Numeric attributes measure lengths (a set of single values has length 0), discrete
    attributes count values. None for a subscription that is not
    :attr:`~dls.predicates.Subscription.is_simple` (OR, exclusions, string, hashed or
    optional attributes): it has no box to measure.
    """
    if not sub.is_simple:
        return None
    box = 1.0
    cells = 1.0
    for a in space.attributes:
        c = sub.constraints.get(a.name)
        touched = sub.cells(a)
        if isinstance(a, DiscreteAttribute):
            n = a.n_cells
            box *= (len(c.values) if c is not None else n) / n
            cells *= len(touched) / n
            continue
        edges = _cell_edges(a)
        span = a.high - a.low  # type: ignore[union-attr]
        cells *= float(np.sum(edges[touched + 1] - edges[touched])) / span
        if c is None:
            continue
        if c.values is not None:
            box = 0.0
            continue
        lo, hi = max(c.lo, a.low), min(c.hi, a.high)  # type: ignore[union-attr]
        box *= max(0.0, hi - lo) / span
    return box, cells


@dataclass
class _Events:
    """An event sample sorted by label: numeric columns float64, discrete columns str."""

    labels: np.ndarray
    columns: dict[str, np.ndarray]


def _events_in(ev: _Events, labels: np.ndarray) -> np.ndarray:
    lo = np.searchsorted(ev.labels, labels, side="left")
    hi = np.searchsorted(ev.labels, labels, side="right")
    keep = hi > lo
    if not keep.any():
        return np.empty(0, dtype=np.int64)
    return np.concatenate([np.arange(a, b) for a, b in zip(lo[keep], hi[keep], strict=True)])


def _exact(space: ContentSpace, sub: Any, ev: _Events, idx: np.ndarray) -> int:
    if not sub.is_simple:  # one event at a time; NaN is an absent numeric value
        def value(col: np.ndarray, i: int) -> Any:
            v = col[i]
            return None if isinstance(v, float) and math.isnan(v) else v

        return sum(bool(sub.matches({a.name: value(ev.columns[a.name], int(i))
                                     for a in space.attributes})) for i in idx)
    ok = np.ones(len(idx), dtype=bool)
    for a in space.attributes:
        c = sub.constraints.get(a.name)
        if c is None:
            continue
        col = ev.columns[a.name][idx]
        if isinstance(a, DiscreteAttribute):
            ok &= np.isin(col, np.asarray(sorted(c.values), dtype=str))
        else:
            ok &= c.contains_many(col)
    return int(ok.sum())


def _reason(exc: Exception) -> str:
    field = getattr(exc, "field", None)
    return f"{type(exc).__name__}: {exc}" + (f" (field {field})" if field else "")


def _subscription_rows(spec_json: str, events: Any) -> Any:
    """The mapPartitions function: raw subscription bytes -> one analysis row each."""

    def run(rows: Iterable[Any]) -> Iterator[tuple[Any, ...]]:
        from connectors.serde import decode_raw
        from dls.predicates import Subscription

        space = ContentSpace.from_spec(json.loads(spec_json))
        ev: _Events | None = events.value if events is not None else None
        for row in rows:
            try:
                rec = decode_raw(row[0], "subscription")
                sub = Subscription(space, rec["where"])
                labels = sub.labels()
            except (DLSError, ValueError) as exc:
                yield (None, 0, [], 0.0, 0.0, 0, 0, _reason(exc))
                continue
            box, cells = subscription_volumes(space, sub) or (None, None)
            hits = matches = 0
            if ev is not None and len(ev.labels):
                idx = _events_in(ev, labels)
                hits = len(idx)
                matches = _exact(space, sub, ev, idx) if hits else 0
            yield (rec["client"], len(labels), labels.view(np.int64).tolist(), box, cells,
                   hits, matches, None)

    return run


def _event_rows(spec_json: str) -> Any:
    """The mapPartitions function: raw event bytes -> (label, values as JSON, error)."""

    def run(rows: Iterable[Any]) -> Iterator[tuple[Any, ...]]:
        from connectors.serde import decode_raw
        from dls.mapping import event_label

        space = ContentSpace.from_spec(json.loads(spec_json))
        names = space.names
        for row in rows:
            try:
                rec = decode_raw(row[0], "event")
                label = event_label(space, rec["attrs"])
            except (DLSError, ValueError) as exc:
                yield (None, None, _reason(exc))
                continue
            signed = label - (1 << 64) if label >= 1 << 63 else label
            yield (signed, json.dumps([rec["attrs"].get(n) for n in names]), None)

    return run


def _load_events(spark: SparkSession, space: ContentSpace, raw: DataFrame,
                 max_events: int) -> tuple[_Events, dict[str, Any]]:
    from pyspark.sql import functions as F
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    schema = StructType([StructField("label", LongType()), StructField("values", StringType()),
                         StructField("error", StringType())])
    spec_json = json.dumps(space.to_spec())
    df = spark.createDataFrame(raw.rdd.mapPartitions(_event_rows(spec_json)), schema).cache()
    try:
        good = df.where(F.col("error").isNull()).limit(max_events).collect()
        bad = df.where(F.col("error").isNotNull())
        n_bad = bad.count()
        reasons = [r["error"] for r in bad.limit(_SAMPLE_REASONS).collect()]
        n_total = df.count()
    finally:
        df.unpersist()
    labels = np.asarray([r["label"] for r in good], dtype=np.int64).view(np.uint64)
    values = [json.loads(r["values"]) for r in good]
    order = np.argsort(labels, kind="stable")
    columns: dict[str, np.ndarray] = {}
    for i, a in enumerate(space.attributes):
        col = [v[i] for v in values]
        arr = (np.asarray(col, dtype=np.float64) if a.kind == "numeric"
               else np.asarray(col, dtype=object) if a.optional or a.kind != "discrete"
               else np.asarray(col, dtype=str))
        columns[a.name] = arr[order] if len(arr) else arr
    ev = _Events(labels[order], columns)
    info = {"read": int(n_total), "used": len(good), "rejected": int(n_bad),
            "rejected_reasons": reasons,
            "distinct_labels": int(len(np.unique(ev.labels)))}
    return ev, info


# -- the analysis ---------------------------------------------------------------------------
def _quantiles(hist: Sequence[tuple[int, int]], qs: Sequence[float]) -> dict[str, int]:
    sizes = np.asarray([h[0] for h in hist], dtype=np.int64)
    counts = np.cumsum([h[1] for h in hist])
    total = counts[-1]
    out = {}
    for q in qs:
        pos = int(np.searchsorted(counts, math.ceil(q * total), side="left"))
        out[f"p{round(q * 100)}"] = int(sizes[min(pos, len(sizes) - 1)])
    return out


def analyze(spark: SparkSession, space: ContentSpace, subscriptions: DataFrame,
            events: DataFrame | None = None, *, filter_sizes: Sequence[FilterSize] = (),
            max_events: int = 100_000) -> dict[str, Any]:
    """Analyse raw subscriptions (and events) read by :func:`read_raw`; JSON-ready result.

    Raises:
        AnalyzeError: ``max_events`` is not positive, or no subscription could be used.
    """
    from pyspark.sql.types import (
        ArrayType,
        DoubleType,
        LongType,
        StringType,
        StructField,
        StructType,
    )

    if not isinstance(max_events, int) or isinstance(max_events, bool) or max_events < 1:
        raise AnalyzeError(f"max_events must be a positive integer, got {max_events!r}",
                           field="max_events", value=max_events)
    result: dict[str, Any] = {"space": space.to_spec()}
    ev_bc = None
    if events is not None:
        ev, result["events"] = _load_events(spark, space, events, max_events)
        ev_bc = spark.sparkContext.broadcast(ev)
    schema = StructType([
        StructField("client", StringType()), StructField("n_labels", LongType()),
        StructField("labels", ArrayType(LongType())), StructField("box", DoubleType()),
        StructField("cells", DoubleType()), StructField("hits", LongType()),
        StructField("matches", LongType()), StructField("error", StringType())])
    rows = subscriptions.rdd.mapPartitions(_subscription_rows(json.dumps(space.to_spec()),
                                                              ev_bc))
    df = spark.createDataFrame(rows, schema).cache()
    try:
        result.update(_summarise(df, space, filter_sizes))
    finally:
        df.unpersist()
        if ev_bc is not None:
            ev_bc.unpersist()
    return result


def _summarise(df: DataFrame, space: ContentSpace,
               filter_sizes: Sequence[FilterSize]) -> dict[str, Any]:
    from pyspark.sql import functions as F

    bad = df.where(F.col("error").isNotNull())
    good = df.where(F.col("error").isNull())
    n_bad = bad.count()
    reasons = [r["error"] for r in bad.limit(_SAMPLE_REASONS).collect()]
    agg = good.agg(F.count("*").alias("n"), F.sum("n_labels").alias("labels"),
                   F.sum("box").alias("box"), F.sum("cells").alias("cells"),
                   F.avg(F.lit(1.0) - F.col("box") / F.col("cells")).alias("vol_mean"),
                   F.sum("hits").alias("hits"), F.sum("matches").alias("matches"),
                   F.avg(F.when(F.col("hits") > 0, F.lit(1.0) - F.col("matches") / F.col("hits"))
                         ).alias("ev_mean"),
                   F.sum(F.when(F.col("hits") > 0, 1).otherwise(0)).alias("reached"),
                   ).collect()[0]
    n = int(agg["n"])
    subs = {"used": n, "rejected": int(n_bad), "rejected_reasons": reasons}
    if n == 0:
        raise AnalyzeError(f"no subscription could be used ({n_bad} rejected"
                           + (f"; first: {reasons[0]}" if reasons else "") + ")",
                           field="subscriptions", value=n_bad)
    hist = sorted((int(r[0]), int(r[1])) for r in good.groupBy("n_labels").count().collect())
    sizes = {"mean": float(agg["labels"]) / n, "min": hist[0][0], "max": hist[-1][0],
             **_quantiles(hist, (0.5, 0.9, 0.99)), "histogram": [list(h) for h in hist]}
    exploded = good.select("client", F.explode("labels").alias("label"))
    distinct = exploded.select("label").distinct().count()
    per_client = np.asarray(
        [int(r[1]) for r in exploded.distinct().groupBy("client").count().collect()],
        dtype=np.float64)
    measured = agg["cells"] is not None  # None: no subscription had a box (OR, strings...)
    quant: dict[str, Any] = {
        "volume_mean": float(agg["vol_mean"]) if measured else None,
        "volume_pooled": 1.0 - float(agg["box"]) / float(agg["cells"]) if measured else None,
    }
    hits = int(agg["hits"] or 0)
    if hits:
        quant |= {"events_pooled": 1.0 - int(agg["matches"]) / hits,
                  "events_mean": float(agg["ev_mean"]),
                  "label_matched_pairs": hits, "exact_pairs": int(agg["matches"]),
                  "subscriptions_reached": int(agg["reached"])}
    bloom = _bloom_rows(space, per_client, distinct, filter_sizes)
    return {"subscriptions": subs, "label_set_size": sizes, "distinct_labels": int(distinct),
            "label_space_size": int(space.n_cells),
            "clients": len(per_client),
            "distinct_labels_per_client": {"mean": float(per_client.mean()),
                                           "max": int(per_client.max())},
            "quantisation_fp": quant, "bloom": bloom}


def _bloom_rows(space: ContentSpace, per_client: np.ndarray, distinct: int,
                sizes: Sequence[FilterSize]) -> list[dict[str, Any]]:
    spec = space.filters.to_spec()
    rows: list[dict[str, Any]] = []

    def add(name: str, holds: str, m: int, k: int) -> None:
        if holds == "client":
            fpr = float(np.mean(bloom_fpr(m, k, per_client)))
            n: float = float(per_client.mean())
        else:
            fpr = float(bloom_fpr(m, k, distinct))
            n = float(distinct)
        rows.append({"filter": name, "holds": holds, "m": m, "k": k, "items": n,
                     "expected_fpr": fpr})

    add("space client", "client", *_spec_filter(spec["client"]))
    add("space routing", "all", *_spec_filter(spec["routing"]))
    mean_client = float(per_client.mean())
    for s in sizes:
        add(f"m={s.m}", "client", s.m, s.k or _optimal_k(s.m, mean_client))
        add(f"m={s.m}", "all", s.m, s.k or _optimal_k(s.m, float(distinct)))
    return rows


# -- output ---------------------------------------------------------------------------------
def format_table(result: dict[str, Any]) -> str:
    """The analysis as a plain-text table for people."""
    s = result["label_set_size"]
    sub = result["subscriptions"]
    q = result["quantisation_fp"]
    lines = [
        f"subscriptions used        {sub['used']:>12,}   rejected {sub['rejected']:,}",
        f"labels per subscription   mean {s['mean']:.2f}  min {s['min']}  p50 {s['p50']}  "
        f"p90 {s['p90']}  p99 {s['p99']}  max {s['max']}",
        f"distinct labels           {result['distinct_labels']:>12,}   of "
        f"{result['label_space_size']:,} cells",
        f"clients                   {result['clients']:>12,}   distinct labels per client: "
        f"mean {result['distinct_labels_per_client']['mean']:.1f}  "
        f"max {result['distinct_labels_per_client']['max']}",
        f"quantisation FP (volume)  mean {q['volume_mean']:.4f}  pooled {q['volume_pooled']:.4f}"
        if q["volume_mean"] is not None else
        "quantisation FP (volume)  n/a (no subscription has a box: OR, strings, hashed or "
        "optional attributes)",
    ]
    if "events" in result:
        e = result["events"]
        lines.append(f"events used               {e['used']:>12,}   rejected {e['rejected']:,}  "
                     f"distinct labels {e['distinct_labels']:,}")
    if "events_pooled" in q:
        lines.append(f"quantisation FP (events)  pooled {q['events_pooled']:.4f}  mean "
                     f"{q['events_mean']:.4f}  over {q['label_matched_pairs']:,} label-matched "
                     f"pairs")
    lines.append("")
    lines.append(f"{'filter':<16}{'holds':<8}{'m':>12}{'k':>4}{'items':>12}{'expected FPR':>14}")
    for b in result["bloom"]:
        lines.append(f"{b['filter']:<16}{b['holds']:<8}{b['m']:>12,}{b['k']:>4}"
                     f"{b['items']:>12,.1f}{b['expected_fpr']:>14.3e}")
    for reason in (result["subscriptions"]["rejected_reasons"]
                   + result.get("events", {}).get("rejected_reasons", [])):
        lines.append(f"rejected: {reason}")
    return "\n".join(lines)


def plot(result: dict[str, Any], path: str | Path) -> Path:
    """A PNG: label-set size histogram, and expected Bloom FPR against the filter size."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    hist = result["label_set_size"]["histogram"]
    ax1.bar([h[0] for h in hist], [h[1] for h in hist], width=0.8, color="tab:blue")
    ax1.set_xlabel("labels per subscription")
    ax1.set_ylabel("subscriptions")
    ax1.set_title(f"label-set sizes (mean {result['label_set_size']['mean']:.2f})")
    per_client = result["distinct_labels_per_client"]["mean"]
    distinct = result["distinct_labels"]
    evaluated = [b["m"] for b in result["bloom"]]
    ms = np.unique(np.geomspace(max(8.0, min([per_client / 2, *evaluated])),
                                max([64.0, distinct * 40.0, *evaluated]), 80).astype(int))
    for n, name in ((per_client, "client filter (mean n per client)"),
                    (float(distinct), "all labels (n = distinct labels)")):
        ks = np.asarray([_optimal_k(int(m), n) for m in ms])
        ax2.plot(ms, [max(float(bloom_fpr(int(m), int(k), n)), 1e-12)
                      for m, k in zip(ms, ks, strict=True)],
                 label=f"{name}, optimal k")
    for b in result["bloom"]:
        ax2.scatter([b["m"]], [max(b["expected_fpr"], 1e-12)], marker="o" if
                    b["holds"] == "client" else "s", color="black", s=18, zorder=3)
    ax2.set_ylim(1e-12, 2.0)
    ax2.set_xscale("log")
    ax2.set_yscale("log")
    ax2.set_xlabel("filter counters m")
    ax2.set_ylabel("expected false-positive rate")
    ax2.set_title("Bloom FPR (dots: evaluated filters)")
    ax2.legend(fontsize=8)
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
