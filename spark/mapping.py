"""The DLS mapping in native Spark SQL: raw records in, Kafka-sink records out.

Three functions take a DataFrame shaped like Spark's Kafka source (``value``, ``topic``,
``partition``, ``offset`` and, when read with ``includeHeaders``, ``headers``) holding
records of one raw topic, and return a DataFrame ready for the Kafka sink (``topic``,
``key``, ``value``, ``headers``):

* :func:`map_events`: a raw event becomes the event on ``dls.node.N.publish``, with the
  ``dls-label``, ``dls-origin`` and ``dls-event-id`` headers and the value bytes the client
  SDK writes (a JSON event is encoded as the SDK's RawEvent; an Avro RawEvent is passed on
  byte for byte);
* :func:`map_subscriptions`: a raw subscription becomes a ``LabelSubscription`` on
  ``dls.node.N.subscribe`` with the labels of every cell it touches;
* :func:`map_unsubscriptions`: a raw unsubscription becomes a ``LabelUnsubscription`` on
  ``dls.node.N.unsubscribe``.

A record the Python core would refuse becomes a ``DeadLetter`` on ``dls.deadletter``: the
raw bytes and headers, a reason naming the field and value at fault, and its source as
``topic[partition]@offset``, exactly as the nodes write theirs.

Everything is Catalyst expressions: the JSON is read with ``try_parse_json`` (a variant,
which keeps the difference between ``1`` and ``1.0``) and ``from_json`` (which keeps the
order of the keys), Avro with ``from_avro``/``to_avro``, the subscription text with Java
regular expressions, and a subscription's label set is the cross product of per-attribute
cell ranges (``sequence``) built with ``transform``/``flatten``. There is no Python UDF
(the Java UDFs of the Java path below run these same expressions or the SDK's rules).
The cell arithmetic follows :mod:`dls.space` operation by operation in float64, so labels
agree bit for bit with :mod:`dls.mapping` (``tests/spark/test_mapping_parity.py``). The
``nextafter`` a strict bound needs is computed exactly from powers of two.

A ``where`` may be an OR of conjunctions (``{"any": [...]}``, or a text ``or`` with one
pair of parentheses per alternative); its labels are the sorted union of its
alternatives', and a refused one gets the SDK's field and reason
(``tests/spark/test_mapping_ops.py``). The text of a ``where`` is written to the
``LabelSubscription`` as it came (the SDK writes
its normalised form); nodes route on the labels only.

The Java path. The general mapping is a plan of a few thousand expressions, slow to build
from Python and optimised and compiled again in every batch, and Spark runs its
higher-order functions interpreted (``docs/architecture.md`` has the measurements). So,
when the session has the project's jar (:mod:`spark.jvm`), :func:`map_events` and
:func:`map_subscriptions` run a small plan (:func:`spark.fastpath.hybrid`):
``dlsroute.spark.FastMap``, a Java UDF, maps the common JSON records (plain ASCII strings,
each key once, numbers in the domain, a text ``where`` comparing numeric attributes with
finite numbers or excluding them with ``!=`` / ``not in``; none of a space with an
optional, string or hashed attribute) and returns null for anything else;
``dlsroute.spark.General`` runs the Catalyst mapping (:mod:`spark.catalyst`), built once
per space, topics and source schema, on the rows FastMap declines, inside a CASE WHEN that
evaluates it for those rows only. Both give the SDK's bytes
(``tests/spark/test_mapping_fast.py`` runs the records on each edge of FastMap through both
paths); ``fast=False`` runs the Catalyst mapping alone, in the plan. Inside the Catalyst
mapping, the common records take shortcuts of generated code (an event's attribute members
built position by position, a text subscription's intervals read straight from the
predicate pattern's groups, which runs once as a ``regexp_replace``).

Where each rule lives: :mod:`spark.catalyst.decode` (raw records),
:mod:`spark.catalyst.where` (predicates), :mod:`spark.catalyst.preds` (one predicate's
refusal, values as Python shows them), :mod:`spark.catalyst.cells` (cells and labels),
:mod:`spark.catalyst.events`, :mod:`spark.catalyst.subscriptions`,
:mod:`spark.catalyst.sink` (node topics and dead letters), :mod:`spark.fastpath` (the Java
UDFs and their config).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from connectors.topics import MAX_SHARDS, Topics
from dls.space import ContentSpace
from spark.catalyst import build_events, build_subscriptions, build_unsubscriptions
from spark.catalyst.columns import HEADERS_TYPE
from spark.catalyst.sink import RECORDS, explode
from spark.exceptions import MappingArgumentError
from spark.fastpath import FAST_TYPE, fast_config, hybrid

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = [
    "FAST_TYPE",
    "HEADERS_TYPE",
    "SINK_COLUMNS",
    "fast_config",
    "map_events",
    "map_subscriptions",
    "map_unsubscriptions",
]

SINK_COLUMNS = ("topic", "key", "value", "headers")
"""The columns of every DataFrame this module returns, in this order."""


def map_events(space: ContentSpace, raw: DataFrame, topics: Topics, *,
               fast: bool | None = None, shards: int = 1) -> DataFrame:
    """Raw events -> events on ``dls.node.N.publish`` (and dead letters).

    The value is the SDK's RawEvent (``encode_raw_event``) of the input; the headers are
    ``dls-label`` (8 bytes big-endian), ``dls-origin`` (``NODE/CLIENT``) and
    ``dls-event-id``, as :meth:`connectors.client.Client.publish` writes them.

    ``fast``: run through the project's Java UDFs (:func:`spark.fastpath.hybrid`); None does
    when the session has their jar, False never (the Catalyst expressions alone, in the
    plan), True insists.

    ``shards``: the network's label shards (``NodeSettings.shards``); above 1 an event
    goes to its label's shard's topic ``dls.node.N.s<k>.publish``
    (:func:`dls.shards.label_shard`), as the SDK sends it.

    Raises:
        FastPathError: ``fast`` is True and the session cannot run the Java UDFs.
    """
    return hybrid("event", build_events, space, raw, topics, fast, _shards(shards))


def map_subscriptions(space: ContentSpace, raw: DataFrame, topics: Topics, *,
                      fast: bool | None = None, shards: int = 1) -> DataFrame:
    """Raw subscriptions -> ``LabelSubscription`` records on ``dls.node.N.subscribe``.

    The labels are those of :meth:`dls.predicates.Subscription.labels` (sorted, 8 bytes
    big-endian each); ``where`` is the subscription as it came. ``fast`` as
    :func:`map_events`. ``shards`` above 1: one record per shard the labels fall in, on
    ``dls.node.N.s<k>.subscribe``, holding that shard's labels (same id, client and
    ``where``), as the SDK splits a subscription; a refused one is one dead letter.
    """
    return hybrid("subscription", build_subscriptions, space, raw, topics, fast,
                  _shards(shards))


def map_unsubscriptions(space: ContentSpace, raw: DataFrame, topics: Topics, *,
                        shards: int = 1) -> DataFrame:
    """Raw unsubscriptions -> ``LabelUnsubscription`` records on ``dls.node.N.unsubscribe``.

    ``space`` is not needed to map an unsubscription; it is taken for a uniform signature.
    ``shards`` above 1: the record goes to every shard's ``dls.node.N.s<k>.unsubscribe``
    (the job does not know the subscription's labels; a shard without a part of it takes
    the cancellation of an unknown id as the SDK's case).
    """
    df = build_unsubscriptions(space, raw, topics, _shards(shards))
    return explode(df) if RECORDS in df.columns else df


def _shards(shards: int) -> int:
    """``shards`` if it is a network's shard count (1 to ``MAX_SHARDS``), else raise.

    Raises:
        MappingArgumentError: Not an integer in ``[1, MAX_SHARDS]``.
    """
    if type(shards) is not int or not 1 <= shards <= MAX_SHARDS:
        raise MappingArgumentError(
            f"shards must be an integer in [1, {MAX_SHARDS}], got {shards!r}",
            field="shards", value=shards)
    return shards
