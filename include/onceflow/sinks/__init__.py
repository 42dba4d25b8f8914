"""Sinks: where a pipeline's output is staged by process and published by commit
(onceflow.sinks.base.Sink)."""

from __future__ import annotations

from onceflow.config import PipelineConfig
from onceflow.sinks.base import PublishTarget, Sink, StagedCounts
from onceflow.sinks.orders import OrdersSink

__all__ = ["PublishTarget", "Sink", "StagedCounts", "sink_for"]


def sink_for(cfg: PipelineConfig) -> Sink:
    """The pipeline's sink: today every pipeline runs the orders transform into its sink."""
    return OrdersSink(cfg.sink_schema)
