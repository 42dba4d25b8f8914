"""Sinks: where a pipeline's output is staged by process and published by commit.

The interface the ledger and the commit use is onceflow.sinks.base (Sink, OutsideSink); one
package per kind of sink, its sink class in its `sink` module: postgres (tables in the
ledger's database), kafka (a topic), lake (an Iceberg or a Delta table, whose table formats
are sinks.iceberg and sinks.delta). A sink is made of parts (its tables or table format, its
mode, its stage, its audit), never more than two classes below Sink. onceflow.hooks.sink builds a pipeline's sink from its [pipelines.NAME.sink] table.
"""
