"""Sinks: where a pipeline's output is staged by process and published by commit
(onceflow.sinks.base.Sink)."""

from __future__ import annotations

from onceflow.config import PipelineConfig
from onceflow.sinks.base import (
    OutsideSink,
    Publication,
    PublishTarget,
    Sink,
    SinkReading,
    StagedCounts,
)
from onceflow.sinks.iceberg import IcebergSink
from onceflow.sinks.kafka import KafkaSink
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
    if cfg.sink.kind == "iceberg":
        return IcebergSink(cfg.sink_schema, cfg.sink, cfg.sink.warehouse or default_warehouse())
    if cfg.sink.kind == "kafka":
        return KafkaSink(cfg.sink_schema, cfg.sink, cfg.sink.bootstrap or source_bootstrap())
    return PostgresSink(cfg.sink_schema, cfg.sink, aggregating=cfg.aggregating)


def source_bootstrap() -> str:
    """The pipelines' source cluster (ONCEFLOW_KAFKA_BOOTSTRAP): a Kafka sink's default."""
    from onceflow.settings import Settings

    return Settings.from_env().kafka_bootstrap


def default_warehouse() -> str:
    """Where Iceberg tables go without a `warehouse`: ONCEFLOW_HOME/warehouse, as a URI."""
    from onceflow.settings import Settings

    return (Settings.from_env().home / "warehouse").as_uri()
