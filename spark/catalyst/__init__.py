"""The DLS mapping as Catalyst expressions: every form of raw record, no Python on the rows.

The modules by concern: :mod:`~spark.catalyst.decode` (raw Avro/JSON records -> typed
columns), :mod:`~spark.catalyst.where` (a subscription's predicates),
:mod:`~spark.catalyst.cells` (predicates -> cells -> labels), :mod:`~spark.catalyst.events`
(an event's label and record), :mod:`~spark.catalyst.subscriptions`,
:mod:`~spark.catalyst.sink` (node topic, dead letters) and :mod:`~spark.catalyst.columns`
(shared helpers). :mod:`spark.mapping` is the public face; it runs these builders in the
plan or, through :mod:`spark.fastpath`, inside the project's Java UDFs.

The builders write their expressions as Spark SQL text (:mod:`~spark.catalyst.sqlfns`, the
names and rules of ``pyspark.sql.functions``) and hand each stage to Spark in one
``selectExpr``: a plan costs a few hundred py4j calls, not one per literal, operator and
lambda variable (tens of thousands).
"""

from __future__ import annotations

from spark.catalyst.events import build_events
from spark.catalyst.subscriptions import build_subscriptions, build_unsubscriptions

__all__ = ["build_events", "build_subscriptions", "build_unsubscriptions"]
