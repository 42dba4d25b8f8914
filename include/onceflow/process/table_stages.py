"""The stage jobs of a pipeline with a table per topic (a sink's `tables`, docs/cdc.md): one
per table, several at once in the attempt's one Spark session, each reading its topic's
ranges with a decoder of that table's change events (onceflow.formats.debezium) into the
table's own sink (onceflow.sinks.tables: PerTopic.table_sink), PostgreSQL or lake. Their
parts are numbered one after the other, so that the attempt's part fence and mark_staged's
count see one numbering (onceflow.staging.fence).

A table's key is the sink's `key` if given, else its record key's fields; the ledger
records it with the table the first time the table is staged
(onceflow.ledger.sink_tables), and refuses another key later."""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

from onceflow.formats.debezium import DebeziumDecoder
from onceflow.ledger.db import transaction
from onceflow.ledger.sink_tables import SinkTable, record_table
from onceflow.process.decoding import events_registry, newest_shape
from onceflow.process.stage_job import StageInputs, StageJob, stage_job
from onceflow.ranges import OffsetRange
from onceflow.reader.input_ranges import input_partitions, input_ranges
from onceflow.sinks.tables import PerTopic

log = logging.getLogger("onceflow.process")


# table stage jobs at once: each mostly waits (its Kafka reads, the ledger, the JVM's
# scheduling of a few small tasks), so several keep the session's cores busy
CONCURRENT_TABLES = 4


@dataclass(frozen=True)
class _TableJob:
    """One table's stage job: its topic's ranges, their pieces, its first part and how many
    it stages."""

    topic: str
    table: str
    ranges: list[OffsetRange]
    pieces: list[OffsetRange]
    first_part: int
    parts: int


def stage_tables(
    spark: Any, ranges: list[OffsetRange], inputs: StageInputs, timings: dict[str, float]
) -> StageJob:
    """Stage each table whose topic has records in `ranges`, CONCURRENT_TABLES jobs at a
    time; what the jobs staged and read, summed. Each job's parts are numbered before any
    runs (a table's job stages one part per input partition), in topic order, so every
    attempt numbers them alike."""
    cfg = inputs.cfg
    if not isinstance(inputs.sink, PerTopic) or cfg.sink.tables is None:
        raise TypeError(f"pipeline {cfg.name!r} has no table per topic")
    tables = inputs.sink
    names = cfg.sink.tables.tables(sorted({r.topic for r in ranges}))
    jobs: list[_TableJob] = []
    parts = 0
    for topic in sorted({r.topic for r in ranges}):
        mine = [r for r in ranges if r.topic == topic]
        pieces = input_ranges(mine, cfg.records_per_input_partition)
        if pieces:
            m = len(input_partitions(pieces, cfg.records_per_input_partition))
            jobs.append(_TableJob(topic, names[topic], mine, pieces, parts, m))
            parts += m
    t0 = time.monotonic()
    # the first alone: it makes what every table shares (a schema, a lake namespace), which
    # jobs at once would race to create
    done = [_stage_table(spark, job, inputs, tables) for job in jobs[:1]]
    with ThreadPoolExecutor(CONCURRENT_TABLES, thread_name_prefix="onceflow-table") as pool:
        done += pool.map(lambda job: _stage_table(spark, job, inputs, tables), jobs[1:])
    timings["job"] = time.monotonic() - t0
    log.info("%d table(s) staged in %.1f s", len(jobs), timings["job"])
    return StageJob(
        parts=sum(d.parts for d in done),
        records_read=sum(d.records_read for d in done),
        bytes_read=sum(d.bytes_read for d in done),
        reads=[r for d in done for r in d.reads],
    )


def _stage_table(spark: Any, job: _TableJob, inputs: StageInputs, sink: PerTopic) -> StageJob:
    cfg = inputs.cfg
    registry = events_registry(cfg)
    shape = newest_shape(job.ranges, inputs.kafka, inputs.options.read.reader_args(), registry)
    table = SinkTable(job.topic, job.table, cfg.sink.key or shape.key)
    with transaction(inputs.ledger) as cur:
        record_table(cur, cfg.name, inputs.attempt.txid, table)
    table_sink = sink.table_sink(table)
    staged = stage_job(
        spark,
        job.pieces,
        replace(
            inputs,
            cfg=replace(cfg, sink=table_sink.cfg),
            sink=table_sink,
            decoder=DebeziumDecoder(shape.fields, table.key, registry),
        ),
        timings={},
        first_part=job.first_part,
    )
    if staged.parts != job.parts:  # the next table's parts were numbered after these
        raise RuntimeError(
            f"table {job.table}: its stage job staged {staged.parts} part(s), "
            f"{job.parts} were numbered for it"
        )
    log.info(
        "table %s.%s (topic %s): %d record(s) in %d part(s) from part %d",
        sink.schema,
        table.table,
        job.topic,
        staged.records_read,
        staged.parts,
        job.first_part,
    )
    return staged
