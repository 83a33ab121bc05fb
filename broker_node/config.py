"""Settings of one broker-node process: a frozen object, loaded once, logged once.

Sources, the first one that has a field winning (pydantic-settings merges them, in the
order :meth:`NodeSettings.settings_customise_sources` declares):

1. keyword arguments (:func:`load_settings`' overrides: what the command line gives);
2. environment variables ``DLS_NODE_<FIELD>`` (e.g. ``DLS_NODE_BOOTSTRAP``);
3. the TOML file given to :func:`load_settings` (``--config``);
4. the defaults below.

Example ``node.toml``::

    node = "B"
    neighbours = ["A", "C"]
    bootstrap = "127.0.0.1:9092"
    space = "examples/space.json"
    # On a cluster of three or more brokers (`make kafka-up BROKERS=3`, or a real one):
    # replication_factor = 3
    # min_insync_replicas = 2
"""

from __future__ import annotations

import tomllib
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, PrivateAttr, ValidationError, field_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from broker_node.exceptions import BrokerError
from connectors.replication import TopicReplication
from connectors.topics import MAX_SHARDS, NAME_PATTERN, NAME_RE, Topics

__all__ = ["NodeConfigError", "NodeSettings", "load_settings"]

_TOML_FILE: ContextVar[Path | None] = ContextVar("node_toml_file", default=None)
"""The TOML file :func:`load_settings` is reading (None: no file)."""


class NodeConfigError(BrokerError, ValueError):
    """A node configuration that cannot be read, or a setting that cannot be used."""


class NodeSettings(BaseSettings):
    """Everything one node process needs; immutable after loading.

    Precedence: keyword arguments > environment ``DLS_NODE_*`` > the TOML file of
    :func:`load_settings` > defaults. Built directly (``NodeSettings(node=...)``), the
    settings read no file. A setting that cannot be used raises :class:`NodeConfigError`
    naming the field.
    """

    model_config = SettingsConfigDict(env_prefix="DLS_NODE_", frozen=True, extra="forbid")

    node: str = Field(description="this node's name")
    neighbours: tuple[str, ...] = Field(default=(), description="adjacent nodes")
    space: Path = Field(description="content space spec (JSON)")
    bootstrap: str = "127.0.0.1:9092"
    topic_prefix: str = "dls"
    group_id: str | None = Field(default=None,
                                 description="default <topic_prefix>-node-<node>")
    shards: int = Field(
        default=1, ge=1, le=MAX_SHARDS,
        description="label shards of the network (the same on every node and client): "
                    "each shard is routed on topics of its own by one engine at a time; "
                    "the processes that run this node's config share its shards as a "
                    "consumer group (docs/scaling.md). 1: unsharded, one process")
    shard: int | None = Field(
        default=None, ge=0, lt=MAX_SHARDS,
        description="the one shard an engine serves (set by the process for each shard "
                    "it is given; not a setting of a config file)")
    mode: Literal["exact", "paper"] = "exact"
    exact_delivery: bool = Field(
        default=True,
        description="check label-matched deliveries against the clients' subscriptions "
                    "(their where), so that clients receive exactly their matches; false: "
                    "deliver by label, false positives included, as the paper does")
    index_slices: int = Field(
        default=1, ge=0, le=64,
        description="with exact delivery, slices per cell of the label index in the first "
                    "required numeric attribute cut into equal cells, so that an event "
                    "reads only its value's slice of its label's subscriptions (about "
                    "twice as fast a match at a million narrow ranges, slower to take "
                    "subscriptions); 1: one list per label; 0: chosen by the index as its "
                    "lists grow, re-listing every entry at each change")
    client_filter: Literal["cbf", "direct"] = "cbf"
    routing_filter: Literal["cbf", "direct"] = "cbf"
    resize_filters: bool = Field(
        default=True,
        description="rebuild the client bank or a routing filter (ERT) larger, from the "
                    "node's exact tables, once its estimated false-positive rate passes "
                    "its target (the fp_rate of the space's filters spec; 2**-k for a spec "
                    "of m and k); routing waits for the rebuild "
                    "(docs/architecture.md#filters-that-resize-themselves). false: keep "
                    "the sizes of the spec")
    update_threads: int = Field(
        default=1, ge=1, le=64,
        description="threads a large batch of subscriptions updates the client bank on "
                    "(ranges of its rows, the same state on any number); more than 1 only "
                    "pays with a core to spare")
    batch_size: int = Field(default=1000, ge=1, le=100_000)
    poll_timeout_s: float = Field(default=0.05, gt=0, le=10)
    delivery: Literal["exactly_once", "at_least_once"] = Field(
        default="exactly_once",
        description="exactly_once: outputs and input offsets in one Kafka transaction; "
                    "at_least_once: offsets committed once all outputs before them are "
                    "acknowledged -- no transaction markers on the delivery partitions, "
                    "repeats possible after a crash (dropped by event id downstream)")
    commit_interval_s: float = Field(
        default=0.5, gt=0, le=60,
        description="at_least_once: longest time between commits under steady load")
    shared_delivery_partitions: int = Field(
        default=0, ge=0, le=4096,
        description="0: one delivery topic per client (<prefix>.deliver.<client>); N > 0: "
                    "all deliveries go to <prefix>.deliver with N partitions, one message "
                    "per event and partition listing its clients in the dls-clients "
                    "header (clients must be told the same N)")
    transaction_timeout_ms: int = Field(default=60_000, ge=1000)
    session_timeout_ms: int = Field(
        default=45_000, ge=1000, le=3_600_000,
        description="the consumer group session: how long the broker waits for a silent "
                    "node (stopped, cut off) before it takes its partitions away")
    publish_delay_s: float = Field(
        default=60.0, gt=0, le=86_400,
        description="the oldest an event may be when it reaches the broker: the node's "
                    "publish topic refuses records whose timestamp is older "
                    "(message.timestamp.before.max.ms), so a cancelled subscription is "
                    "removed once the node has read its inputs this long past the "
                    "cancellation (docs/architecture.md#order-of-changes-and-events)")
    clock_skew_s: float = Field(
        default=1.0, ge=0, le=3600,
        description="the largest difference between the clocks of publishers, "
                    "subscribers, nodes and brokers that the order rule tolerates")
    heartbeat_s: float = Field(
        default=0.25, gt=0, le=60,
        description="how often a node tells its neighbours how far it has got (when that "
                    "moved; at least every 4 times this otherwise), and checks how far it "
                    "has read its publish topic")
    watchdog_s: float | None = Field(
        default=None, gt=0,
        description="the longest any call into the Kafka client may block (a commit, a "
                    "flush, waiting for room in the producer queue) before the node ends "
                    "itself for its supervisor to restart it (docs/architecture.md#liveness); "
                    "default: the transaction timeout plus 30 s")
    producer_queue_messages: int = Field(
        default=1_000_000, ge=1, le=10_000_000,
        description="librdkafka's local queue (queue.buffering.max.messages); a batch "
                    "that causes more outputs waits for room")
    unsubscribe_grace_s: float = Field(
        default=30.0, ge=0,
        description="how long an unsubscription of a not-yet-seen id waits for it (and at "
                    "least until the subscribe topic is read past where it ended when the "
                    "unsubscription was read)")
    route_cache_mb: float = Field(
        default=64.0, ge=0, le=65536,
        description="memory for routes remembered per (label, origin): the messages an "
                    "event of that label is sent as, kept until the subscriptions or a "
                    "neighbour's labels change (emptied when full); 0: match every event")
    gc_freeze: bool = Field(
        default=True,
        description="once the state is rebuilt at start, move every live object into "
                    "Python's permanent generation (gc.freeze): full collections then scan "
                    "only what came later, not the whole state "
                    "(docs/architecture.md#the-node-loop)")
    gc_young_threshold: int = Field(
        default=50_000, ge=0,
        description="Python's generation-0 collection threshold for the node process "
                    "(gc.set_threshold): a batch keeps thousands of short-lived objects "
                    "alive (each message and its header list), so Python's default of 700 "
                    "would collect many times per batch "
                    "(docs/architecture.md#the-node-loop); 0 keeps the default")
    snapshot_every_messages: int = Field(
        default=1_000, ge=0,
        description="write a snapshot of the state to <prefix>.node.<node>.snapshot once "
                    "this many control messages (or 1% of the live subscriptions, if more) "
                    "were applied since the last one, and ten times its own pause has "
                    "passed; a restart reads the latest snapshot and replays only the "
                    "control messages after it (docs/architecture.md#repeats-and-recovery). "
                    "0: no snapshots, a restart replays the whole history")
    snapshot_interval_s: float = Field(
        default=300.0, gt=0,
        description="also write one when this long has passed since the last one and a "
                    "control message was applied since")
    recovery_stall_s: float = Field(
        default=120.0, gt=0,
        description="a recovering node that reads nothing from Kafka for this long stops "
                    "with an error (the broker does not answer); a recovery that keeps "
                    "reading is never cut short, however long the history")
    client_inputs: bool = Field(
        default=False,
        description="also read every client's own input topics, <prefix>.node.<node>.client."
                    "<client>.subscribe|unsubscribe|publish (found by pattern), and take the "
                    "client of a subscription and the origin of an event from the topic, "
                    "never from what the client wrote: the secure layout "
                    "(docs/security.md); the node's shared input topics stay, for the Spark "
                    "mapping job")
    client_inputs_refresh_s: float = Field(
        default=5.0, gt=0, le=3600,
        description="with client_inputs: how often the node looks for new client input "
                    "topics (librdkafka's topic.metadata.refresh.interval.ms)")
    metrics_port: int | None = Field(default=None, ge=0, le=65535)
    metrics_host: str = Field(
        default="127.0.0.1", min_length=1, max_length=253, pattern=r"^[A-Za-z0-9._:-]+$",
        description="address the metrics page binds to (0.0.0.0: every interface, as in "
                    "the compose deployment)")
    replication_factor: int | None = Field(
        default=None, ge=1, le=32767,
        description="replication factor of every topic the node creates (its inputs, "
                    "links, forwards, delivery topics, dead letters, snapshots); unset: "
                    "the cluster's default.replication.factor (1 on one broker; 3 on "
                    "`make kafka-up BROKERS=3`). A real multi-broker cluster: 3")
    min_insync_replicas: int | None = Field(
        default=None, ge=1, le=32767,
        description="min.insync.replicas of every topic the node creates, at most "
                    "replication_factor: an acks=all write (every producer's) is "
                    "acknowledged once this many replicas have it, refused while fewer "
                    "are in sync; unset: the cluster's default. With 3 replicas: 2")
    kafka_config: Path | None = Field(
        default=None,
        description="a librdkafka properties file (key=value lines: security.protocol, "
                    "sasl.mechanism, sasl.username, sasl.password, ssl.ca.location, ...) "
                    "whose settings every Kafka client of the node gets; `dlsroute access "
                    "add-node` writes one (docs/security.md)")
    _kafka: dict[str, str] = PrivateAttr(default_factory=dict)

    def __init__(self, **values: Any) -> None:
        """Validate ``values`` and the other sources (see the class doc).

        Raises:
            NodeConfigError: a setting that cannot be used, naming the first such field.
        """
        try:
            super().__init__(**values)
        except ValidationError as exc:
            first = exc.errors()[0]
            cause = first.get("ctx", {}).get("error")
            if isinstance(cause, NodeConfigError) and cause.field == "kafka_config":
                raise cause from exc
            field = ".".join(str(p) for p in first.get("loc", ())) or "config"
            raise NodeConfigError(f"node config: {field}: {first.get('msg')}", field=field,
                                  value=first.get("input")) from exc

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """The sources by precedence: keyword arguments, environment, TOML file.

        No dotenv file and no secrets directory: the node has neither.
        """
        return (init_settings, env_settings,
                TomlConfigSettingsSource(settings_cls, toml_file=_TOML_FILE.get()))

    def model_post_init(self, context: Any, /) -> None:
        """Read the ``kafka_config`` file once (checked: an error names its line)."""
        if self.kafka_config is not None:
            from connectors.kafka_config import KafkaConfigError, load_kafka_config

            try:
                self._kafka = load_kafka_config(self.kafka_config)
            except KafkaConfigError as exc:
                raise NodeConfigError(f"node config: kafka_config: {exc}",
                                      field="kafka_config", value=str(self.kafka_config)) from exc

    @field_validator("node")
    @classmethod
    def _node_name(cls, v: str) -> str:
        if NAME_RE.fullmatch(v) is None:
            raise NodeConfigError(f"node must be {NAME_PATTERN}, got {v!r}", field="node",
                                  value=v)
        return v

    @field_validator("neighbours")
    @classmethod
    def _neighbour_names(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        for n in v:
            if NAME_RE.fullmatch(n) is None:
                raise NodeConfigError(f"neighbour names must be {NAME_PATTERN}, got {n!r}",
                                      field="neighbours", value=n)
        if len(set(v)) != len(v):
            raise NodeConfigError(f"neighbours repeat: {list(v)}", field="neighbours",
                                  value=list(v))
        return v

    @field_validator("shard")
    @classmethod
    def _shard_in_range(cls, v: int | None, info: Any) -> int | None:
        shards = info.data.get("shards", 1)
        if v is not None and not v < shards:
            raise NodeConfigError(f"shard must be below shards ({shards}), got {v}",
                                  field="shard", value=v)
        return v

    @field_validator("min_insync_replicas")
    @classmethod
    def _insync_within_replicas(cls, v: int | None, info: Any) -> int | None:
        rf = info.data.get("replication_factor")
        if v is not None and rf is not None and v > rf:
            raise NodeConfigError(f"min_insync_replicas ({v}) must not exceed "
                                  f"replication_factor ({rf}): no acks=all write would "
                                  f"ever have enough in-sync replicas",
                                  field="min_insync_replicas", value=v)
        return v

    def topic_replication(self) -> TopicReplication:
        """The replication settings, for ``**`` into every ``ensure_topics`` of the node."""
        return TopicReplication(replication=self.replication_factor,
                                min_insync=self.min_insync_replicas)

    @property
    def consumer_group(self) -> str:
        """The consumer group (and transactional id stem) of this node, or of its shard."""
        base = self.group_id or f"{self.topic_prefix}-node-{self.node}"
        return base if self.shard is None else f"{base}-s{self.shard}"

    @property
    def replica_group(self) -> str:
        """The consumer group in which this node's processes share its shards."""
        return f"{self.group_id or f'{self.topic_prefix}-node-{self.node}'}-replicas"

    def topics(self) -> Topics:
        """The names of this node's topics (of its shard, if it serves one)."""
        return Topics(self.topic_prefix, self.shard)

    @property
    def watchdog_bound_s(self) -> float:
        """The watchdog's bound on a blocking Kafka call (``watchdog_s`` or its default)."""
        if self.watchdog_s is not None:
            return self.watchdog_s
        return self.transaction_timeout_ms / 1000.0 + 30.0

    def kafka_security(self) -> dict[str, str]:
        """The librdkafka settings of ``kafka_config`` (a fresh dict; empty without one).

        Every Kafka client the node opens takes them: producers, consumers, admin clients.
        """
        return dict(self._kafka)

    def masked(self) -> dict[str, Any]:
        """The settings for the start-up log line, with the Kafka settings' secrets masked."""
        from connectors.kafka_config import masked

        out = self.model_dump(mode="json")
        out["kafka"] = masked(self._kafka)
        return out


def load_settings(config: str | Path | None = None, **overrides: Any) -> NodeSettings:
    """The node's settings from ``overrides``, the environment and the TOML file ``config``.

    The one place that builds settings from a file. Overrides that are None are left out;
    the precedence is :class:`NodeSettings`'.

    Raises:
        NodeConfigError: the file cannot be read or is not TOML, or a setting cannot be
            used (the error names the field).
    """
    path = None if config is None else Path(config)
    token = _TOML_FILE.set(path)
    try:
        if path is not None:
            path.open("rb").close()  # a missing file is an error (the TOML source skips it)
        return NodeSettings(**{k: v for k, v in overrides.items() if v is not None})
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise NodeConfigError(f"cannot read node config {config}: {exc}", field="config",
                              value=str(config)) from exc
    finally:
        _TOML_FILE.reset(token)
