"""Sinks: where a pipeline's output is staged by process and published by commit.

The interface the ledger and the commit use is onceflow.sinks.base (Sink, OutsideSink); one
package per kind of sink: postgres (tables in the ledger's database), kafka (a topic),
iceberg and delta (lake tables). `sink_for` builds a pipeline's from its [pipelines.NAME.sink] table.
"""

from __future__ import annotations

import functools

from onceflow.config.pipeline import PipelineConfig
from onceflow.kafka.client import KafkaCluster
from onceflow.sinks.base import (
    OutsideSink,
    Publication,
    PublishTarget,
    Sink,
    SinkReading,
    StagedCounts,
)
from onceflow.sinks.delta import DeltaSink
from onceflow.sinks.iceberg import IcebergSink
from onceflow.sinks.kafka import KafkaSink
from onceflow.sinks.lake.storage import Storage
from onceflow.sinks.postgres import PostgresSink

__all__ = [
    "OutsideSink",
    "Publication",
    "PublishTarget",
    "Sink",
    "SinkReading",
    "StagedCounts",
    "default_warehouse",
    "sink_for",
]


def sink_for(cfg: PipelineConfig) -> Sink:
    """The pipeline's sink: its [pipelines.NAME.sink] table."""
    if cfg.sink.kind in ("iceberg", "delta"):
        lake = IcebergSink if cfg.sink.kind == "iceberg" else DeltaSink
        warehouse = cfg.sink.warehouse or default_warehouse()
        storage = functools.partial(lake_storage, cfg)  # looked up when first needed
        return lake(cfg.sink_schema, cfg.sink, warehouse, storage=storage)
    if cfg.sink.kind == "kafka":
        return KafkaSink(cfg.sink_schema, cfg.sink, functools.partial(sink_cluster, cfg))
    return PostgresSink(cfg.sink_schema, cfg.sink, aggregating=cfg.aggregating)


def sink_cluster(cfg: PipelineConfig) -> KafkaCluster:
    """A Kafka sink's cluster: its `conn_id` connection; else its `bootstrap` with the source
    cluster's client settings; else the source cluster (onceflow.connections)."""
    from dataclasses import replace

    from onceflow import connections

    if cfg.sink.conn_id:
        return connections.kafka_cluster(cfg.sink.conn_id, cfg.source, key="sink.conn_id")
    source = connections.kafka_cluster(cfg.kafka_conn_id, cfg.source)
    return replace(source, bootstrap=cfg.sink.bootstrap) if cfg.sink.bootstrap else source


def lake_storage(cfg: PipelineConfig) -> Storage:
    """A lake sink's storage (onceflow.connections.lake_storage)."""
    from onceflow import connections

    return connections.lake_storage(cfg)


def default_warehouse() -> str:
    """Where lake tables go without a `warehouse`: ONCEFLOW_HOME/warehouse, as a URI (Iceberg
    puts a table in `<namespace>.db/<table>`, Delta in `<namespace>/<table>`)."""
    from onceflow.settings import Settings

    return (Settings.from_env().home / "warehouse").as_uri()
