"""What a pipeline is, once validated (PipelineConfig): its topics, its transform, its sink,
how its DAG runs, and the Airflow connections it uses. Parsing the TOML table is
onceflow.config.pipeline_table's."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from onceflow.config.alerts import Alerts
from onceflow.config.record_format import REGISTRY_FORMATS
from onceflow.config.retention import Retention
from onceflow.config.schedule import OnRecords
from onceflow.config.sink import SinkConfig
from onceflow.config.times import time_ms
from onceflow.config.topic_pattern import TopicPattern, subscription

# Record-wise: one output row per source record, with its coordinates; aggregating: rows
# that each sum up `records` source records (onceflow.transforms, PROTOCOL.md "Sinks").
TRANSFORM_KINDS = ("record-wise", "aggregating")
# What process does with a record the user's code raises on (onceflow.poison).
ON_TRANSFORM_ERROR = ("fail", "dead_letter")
# What process does when the transform's output adds columns (onceflow.sinks.schema_evolution):
# add them to the sink's tables, or refuse the output.
SCHEMA_EVOLUTIONS = ("add_columns", "fail")
# The Airflow connections a pipeline uses when it names none (onceflow.hooks).
LEDGER_CONN = "onceflow_ledger"
KAFKA_CONN = "onceflow_kafka"
REGISTRY_CONN = "onceflow_registry"


@dataclass(frozen=True)
class PipelineConfig:
    name: str
    topics: tuple[str, ...]  # () when `topic_pattern` names them
    # "module:function" (onceflow.transforms); "" for none (a registry format's records land
    # as decoded)
    transform: str
    sink: SinkConfig
    transform_kind: Literal["record-wise", "aggregating"] = "record-wise"
    # the topics by a pattern (onceflow.config.topic_pattern); "" when `topics` lists them
    topic_pattern: str = ""
    sink_schema: str = ""  # defaults to the pipeline name
    # where a partition the ledger has never seen starts: "earliest", "latest", or an ISO 8601
    # time with its zone (its first record at or after it: onceflow.ranges.plan_ranges)
    starting_position: str = "earliest"
    max_records_per_partition: int | None = None
    on_data_loss: Literal["fail", "skip"] = "fail"
    # a record the user's code raises on: fail the attempt naming it, or stage it as a dead
    # letter (onceflow.poison)
    on_transform_error: Literal["fail", "dead_letter"] = "fail"
    # cron, a preset, "continuous" or "on_records" (onceflow.config.schedule); None: triggered
    schedule: str | None = None
    on_records: OnRecords | None = None  # when an "on_records" pipeline's watcher starts a run
    retention: Retention = field(default_factory=Retention)  # onceflow.config.retention
    alerts: Alerts | None = None  # onceflow.config.alerts; None: no alert
    max_active_runs: int = 3
    commit_poke_interval: float = 2.0
    # how long a blocked commit waits in its task, woken when a batch closes, before it
    # defers: with runs in flight, seq−1 commits a moment later, and a deferral costs a
    # triggerer round trip and a second task start
    commit_wait_seconds: float = 10.0
    records_per_input_partition: int = 250_000
    fast_form: bool = True  # the transform's fast form parses and stages in the reader's worker
    # under Airflow's [openlineage] selective_enable, the DAG is marked for lineage
    openlineage: bool = False
    schema_evolution: Literal["add_columns", "fail"] = "add_columns"
    driver_memory: str = "512m"
    executor_memory: str = "1g"
    spark_conf: dict[str, str] = field(default_factory=dict)
    description: str = ""
    # Airflow connections (onceflow.hooks): None = the default id, else one that must exist
    ledger_conn_id: str | None = None
    kafka_conn_id: str | None = None
    spark_conn_id: str = "spark_default"
    # where process runs its stage job: a spark-submit of its own per attempt, or a session
    # of a long-lived Spark Connect server (onceflow.process.connect_session)
    process_mode: Literal["spark-submit", "connect"] = "spark-submit"
    spark_connect_conn_id: str = "spark_connect_default"
    # how values are encoded (onceflow.config.record_format): bytes, or a registry format
    # read with `subject`'s latest schema at plan, or its `reader_schema_version`
    format: Literal["bytes", "avro", "protobuf", "json"] = "bytes"
    subject: str = ""
    reader_schema_version: int | None = None
    key_format: Literal["bytes", "avro", "protobuf"] = "bytes"  # keys, likewise
    key_subject: str = ""
    registry_conn_id: str | None = None
    # what a value wraps: a Debezium change event's row lands in an upsert sink ordered by
    # its source position (onceflow.formats.debezium); "none": the value itself
    envelope: Literal["none", "debezium"] = "none"
    source: str = field(default="<config>", compare=False)  # the pipelines file, for messages

    @property
    def subscription(self) -> tuple[str | TopicPattern, ...]:
        """What the broker is asked for: the listed topics, or the pattern."""
        return subscription(self.topics, self.topic_pattern)

    def reads(self, topic: str) -> bool:
        """Whether `topic` is one of the pipeline's (listed, or matching its pattern)."""
        if self.topic_pattern:
            return bool(TopicPattern(self.topic_pattern).names_in([topic]))
        return topic in self.topics

    @property
    def topics_label(self) -> str:
        """The topics as people read them."""
        return ", ".join(map(str, self.subscription))

    @property
    def ledger_conn(self) -> str:
        """The id of the ledger's connection: the pipeline's, else the default."""
        return self.ledger_conn_id or LEDGER_CONN

    @property
    def kafka_conn(self) -> str:
        """The id of the source cluster's connection: the pipeline's, else the default."""
        return self.kafka_conn_id or KAFKA_CONN

    @property
    def starting_time_ms(self) -> int | None:
        """The starting position's time (epoch milliseconds), None for earliest or latest."""
        if self.starting_position in ("earliest", "latest"):
            return None
        return time_ms(self.starting_position)

    @property
    def registry_format(self) -> bool:
        """Whether values are decoded with a schema registry's schemas (Avro, Protobuf)."""
        return self.format in REGISTRY_FORMATS

    @property
    def decoded_roles(self) -> dict[str, tuple[str, str]]:
        """Per part of a record decoded with a schema registry's schemas ("value", "key"):
        its format and subject."""
        if self.envelope != "none":  # read by their writer schemas (formats.debezium_avro)
            return {}
        roles = {"value": (self.format, self.subject), "key": (self.key_format, self.key_subject)}
        return {role: fs for role, fs in roles.items() if fs[0] in REGISTRY_FORMATS}

    @property
    def decodes(self) -> bool:
        """Whether records are decoded into columns before the transform: in a registry
        format, or out of an envelope."""
        return self.uses_registry or self.envelope != "none"

    @property
    def uses_registry(self) -> bool:
        """Whether values or keys are decoded with a schema registry's schemas."""
        return bool(self.decoded_roles) or self.format in REGISTRY_FORMATS

    @property
    def format_summary(self) -> str:
        if self.envelope != "none":
            return f"{self.envelope} change events in {self.format}"
        parts = [f"{f} {role}s (subject {s!r})" for role, (f, s) in self.decoded_roles.items()]
        return " and ".join(parts) or "bytes"

    @property
    def aggregating(self) -> bool:
        return self.transform_kind == "aggregating"

    @property
    def dag_id(self) -> str:
        return f"onceflow_{self.name}"

    @property
    def alerts_dag_id(self) -> str:
        """Its alerts DAG's (onceflow.airflow.alerts_dag)."""
        return f"{self.dag_id}_alerts"
