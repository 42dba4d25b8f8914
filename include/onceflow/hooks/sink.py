"""A pipeline's sink, built from its [pipelines.NAME.sink] table with the connections it
needs (looked up through the hooks when first used: a process job, which is handed its
storage in its environment, never reads a connection)."""

from __future__ import annotations

import functools

from onceflow.config.pipeline import PipelineConfig
from onceflow.config.sink import SinkConfig
from onceflow.hooks.kafka import sink_cluster
from onceflow.hooks.lake import default_warehouse, lake_storage
from onceflow.sinks.base import Sink


def sink_for(cfg: PipelineConfig) -> Sink:
    """The pipeline's sink: its [pipelines.NAME.sink] table."""
    if cfg.sink.kind in ("iceberg", "delta"):
        if cfg.sink.kind == "iceberg":
            from onceflow.sinks.iceberg.sink import iceberg_sink as lake_sink
        else:
            from onceflow.sinks.delta.sink import delta_sink as lake_sink
        warehouse = cfg.sink.warehouse or default_warehouse()
        storage = functools.partial(lake_storage, cfg)
        if cfg.sink.tables is not None:
            from onceflow.sinks.tables import LakeTablesSink

            def table_sink(table: SinkConfig) -> Sink:
                return lake_sink(cfg.sink_schema, table, warehouse, storage=storage)

            return LakeTablesSink(cfg.sink_schema, cfg.sink, cfg.name, table_sink)
        return lake_sink(cfg.sink_schema, cfg.sink, warehouse, storage=storage)
    if cfg.sink.kind == "kafka":
        from onceflow.sinks.kafka.sink import KafkaSink

        return KafkaSink(cfg.sink_schema, cfg.sink, functools.partial(sink_cluster, cfg))
    if cfg.sink.tables is not None:
        from onceflow.sinks.tables import TablesSink

        return TablesSink(cfg.sink_schema, cfg.sink, cfg.name)
    from onceflow.sinks.postgres.sink import PostgresSink

    return PostgresSink(cfg.sink_schema, cfg.sink, aggregating=cfg.aggregating)
