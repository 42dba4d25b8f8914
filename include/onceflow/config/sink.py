"""What a pipeline's sink is, once validated (SinkConfig): where the transform's output is
published, and the kinds and modes Onceflow knows. Parsing the TOML table is
onceflow.config.sink_table's."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from onceflow.config.partitions import PartitionField
from onceflow.config.table_map import TableMap

SINK_KINDS = ("postgres", "iceberg", "delta", "kafka")
# The lake table kinds: a table in a warehouse, published by data files.
LAKE_KINDS = ("iceberg", "delta")
SINK_MODES = ("append", "upsert", "merge")
# A lake table's maintenance (onceflow.maintenance): compacted files' size, and how long
# its history is kept.
TARGET_FILE_MB = 128.0
RETAIN_HOURS = 24.0
# A Kafka topic sink keeps its markers in a commit-log topic named after the output topic.
COMMIT_LOG_SUFFIX = ".onceflow-commits"
# Columns the sink tables hold besides the user's: a key or aggregate column of the same
# name would collide with them.
RESERVED_COLUMNS = frozenset(
    (
        "txid",
        "attempt",
        "part",
        "seq",
        "last_seq",
        "epoch",
        "topic",
        "partition",
        "offset",
        "error",
        "key",
        "value",
        "row_hash",
        "records",
        "tombstone",
        "published_at",
    )
)


@dataclass(frozen=True)
class SinkConfig:
    """A `[pipelines.NAME.sink]` table: where the transform's output is published."""

    table: str  # kafka: "" (the stage table is the sink's own)
    mode: Literal["append", "upsert", "merge"] = "append"
    key: tuple[str, ...] = ()  # upsert: the row's identity; merge: the group; kafka: the record key
    aggregates: tuple[str, ...] = ()  # merge: summed per key
    # upsert (postgres): the columns, compared in order, whose highest values make a key's
    # row (ties: the newest record); a record below its key's row changes nothing. (): the
    # newest record wins
    order_by: tuple[str, ...] = ()
    # change events of several tables (envelope "debezium"): each topic's table
    # (config.table_map); `table` is then "", and `key`, if given, every table's (else each
    # table's record key)
    tables: TableMap | None = None
    kind: Literal["postgres", "iceberg", "delta", "kafka"] = "postgres"
    # iceberg, delta: the table's namespace ("" = the pipeline's sink_schema; `table =
    # "ns.t"` sets it) and the warehouse new tables go to (None = a folder under
    # ONCEFLOW_HOME)
    namespace: str = ""
    warehouse: str | None = None
    # iceberg, delta: the table's partitioning (sinks.lake.partitions), and its maintenance:
    # every `maintain_every` committed batches (0: never; `onceflow maintain` any time),
    # with these compacted files' size and history kept
    partition_by: tuple[PartitionField, ...] = ()
    # object storage's endpoint and credentials: an Airflow connection of type `aws`
    # (sinks.lake.storage; None: ONCEFLOW_LAKE_STORAGE, else each library's defaults)
    storage_conn_id: str | None = None
    maintain_every: int = 0
    target_file_mb: float = TARGET_FILE_MB
    retain_hours: float = RETAIN_HOURS
    # kafka: the output topic, its partition count when Onceflow creates it, whether it may
    # create it (and the commit log), and the cluster: a `kafka` Airflow connection
    # (conn_id), or a bootstrap with the source cluster's client config, or (neither) the
    # source cluster itself
    topic: str = ""
    partitions: int = 1
    create_topic: bool = True
    bootstrap: str | None = None
    conn_id: str | None = None

    @property
    def commit_log(self) -> str:
        """A Kafka sink's commit-log topic: one marker record per committed seq."""
        return f"{self.topic}{COMMIT_LOG_SUFFIX}"
