"""Sinks: where a pipeline's output is staged by process and published by commit.

The interface the ledger and the commit use is onceflow.sinks.base (Sink, OutsideSink); one
package per kind of sink, its sink class in its `sink` module: postgres (tables in the
ledger's database), kafka (a topic), iceberg and delta (lake tables, on what sinks.lake
shares). onceflow.hooks.sink builds a pipeline's sink from its [pipelines.NAME.sink] table.
"""
