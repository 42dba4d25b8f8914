"""`onceflow demo`: the shipped example pipelines end to end on the running stack.

Each pipeline gets its demo records (onceflow_dev.producer, continuing its series, so a second
demo adds new records instead of repeating them), as many DAG runs as its backlog needs at
its per-batch cap, and an audit that re-reads the committed ranges from the broker. These
are the helpers; onceflow.cli.demo.cmd_demo runs and reports them.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the CLI reads PIPELINES at start; the clients load when the demo runs
    from onceflow.config.pipeline import PipelineConfig

#: (pipeline, records produced per demo): an append sink with a fast form and a merge sink
#: over its topic, an upsert and a merge sink, an Iceberg table fed by the inventory topic
#: (0: the pipeline reads records produced above for another one), and Avro values through
#: the schema registry
PIPELINES = (
    ("orders", 100_000),
    ("revenue", 0),
    ("inventory", 20_000),
    ("pageviews", 50_000),
    ("inventory_lake", 0),
    ("payments_avro", 20_000),
)
PARTITIONS = 4


def produce(
    bootstrap: str, cfg: PipelineConfig, count: int, progress=None, registry: str = ""
) -> tuple[int, int]:
    """Produce `count` records of the pipeline's sample to its first topic, after the ones
    already there (the demo is the topic's only producer: its end offsets count them),
    through the schema registry at `registry` for a registry format; returns (the first
    record's number, records acknowledged)."""
    from onceflow.kafka import broker

    from onceflow_dev import producer

    topic = cfg.topics[0]
    broker.create_topic(bootstrap, topic, PARTITIONS)
    start = sum(broker.snapshot(bootstrap, cfg.name, (topic,)).ends.values())
    n = producer.produce(
        bootstrap,
        topic,
        PARTITIONS,
        count,
        sample=producer.load_sample(cfg.transform),
        start=start,
        progress=progress,
        serialize=producer.value_serializer(cfg, registry),
    )
    return start, n


def runs_to_drain(dsn: str, bootstrap: str, cfg: PipelineConfig) -> int:
    """How many runs plan the pipeline's whole backlog: the largest partition's records not
    yet planned over the per-batch cap (at least one run)."""
    from onceflow.kafka import broker
    from onceflow.ledger import views

    snap = broker.snapshot(bootstrap, cfg.name, cfg.topics)
    planned = {
        (r["topic"], r["partition"]): r["planned_offset"] or r["committed_offset"]
        for r in views.partitions(dsn, cfg.name)
    }
    backlog = max(
        end - planned.get(tp, snap.beginnings[tp] if cfg.starting_position == "earliest" else end)
        for tp, end in snap.ends.items()
    )
    cap = cfg.max_records_per_partition
    return max(1, math.ceil(backlog / cap)) if cap else 1


def sink_rows(dsn: str, cfg: PipelineConfig) -> tuple[str, int]:
    """The pipeline's published table (schema.table, or iceberg:namespace.table,
    delta:namespace.table) and how many rows it holds now (a lake table scanned)."""
    from onceflow.hooks.sink import sink_for
    from onceflow.ledger.db import transaction
    from onceflow.sinks.delta.sink import DeltaSink
    from onceflow.sinks.iceberg.catalog import open_catalog
    from onceflow.sinks.iceberg.sink import IcebergSink
    from psycopg2 import sql

    sink = sink_for(cfg)
    if isinstance(sink, DeltaSink):
        table = sink.open_table()
        rows = 0 if table is None else sink.scan(table, ("offset",)).num_rows
        return f"delta:{sink.name}", rows
    with transaction(dsn) as cur:
        if isinstance(sink, IcebergSink):
            with open_catalog(cur, sink.warehouse) as catalog:
                rows = catalog.load_table(sink.identifier).scan(selected_fields=("offset",))
                return f"iceberg:{sink.name}", rows.count()
        cur.execute(
            sql.SQL("select count(*) from {}.{}").format(
                sql.Identifier(sink.schema), sql.Identifier(sink.table)
            )
        )
        return f"{sink.schema}.{sink.table}", int(cur.fetchone()[0])
