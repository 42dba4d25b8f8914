"""Sinks: where a pipeline's output is staged by process and published by commit
(onceflow.sinks.base.Sink)."""

from __future__ import annotations

from onceflow.config import PipelineConfig
from onceflow.sinks.base import PublishTarget, Sink, StagedCounts
from onceflow.sinks.orders import OrdersSink
from onceflow.sinks.postgres import PostgresSink

__all__ = ["PublishTarget", "Sink", "StagedCounts", "sink_for"]


def sink_for(cfg: PipelineConfig) -> Sink:
    """The pipeline's sink: its [pipelines.NAME.sink] table, or without one (the built-in
    orders transform) the orders sink."""
    if cfg.sink is None:
        return OrdersSink(cfg.sink_schema)
    return PostgresSink(cfg.sink_schema, cfg.sink)
