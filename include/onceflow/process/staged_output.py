"""The transform's output as its sink stages it: the staged frame.

Whatever the transform gives, the stage writer (onceflow.staging.writer) takes one shape:
the record's coordinates, the user's columns, `error` (a dead letter's reason), `key` and
`value` (kept for dead letters only), `tombstone`, an aggregating transform's `records`,
and the row hash (onceflow.staging.checksum.HASH_COLUMN). The sink's tables are bound to
this frame's columns (`output_fields`) before anything is staged.
"""

from __future__ import annotations

from typing import Any

from onceflow.config.pipeline import PipelineConfig
from onceflow.kafka.client import KafkaCluster
from onceflow.ranges import OffsetRange
from onceflow.reader.frame import ranges_frame
from onceflow.staging.checksum import HASH_COLUMN
from onceflow.transforms import (
    RECORDS,
    aggregate_row_violation,
    check_aggregate_output,
    check_output,
    load_transform,
    user_columns,
)

DEAD_VALUE_BYTES = 64 << 10  # a dead letter keeps the value's first 64 KiB


def staged_frame(
    spark: Any,
    pieces: list[OffsetRange],
    *,
    bootstrap: KafkaCluster | str,
    cfg: PipelineConfig,
    **read: Any,
) -> Any:
    """The transform's output for `pieces` (Spark partition k = pieces[k]) as the stage
    writer takes it (stage_columns)."""
    return stage_columns(ranges_frame(spark, pieces, bootstrap, **read), cfg)


def stage_columns(src: Any, cfg: PipelineConfig) -> Any:
    """Records (the reader's schema) -> the pipeline's transform's output as its sink stages
    it: the coordinates, the user's columns, error (a null key column of a record-wise
    transform's upsert or merge sink is one), key and value (kept for dead letters only, value
    cut to 64 KiB), tombstone (the output's value is null), an aggregating transform's
    `records`, and the row hash (HASH_COLUMN): staged_output of the transform's output."""
    return staged_output(load_transform(cfg.transform)(src), cfg)


def staged_output(out: Any, cfg: PipelineConfig) -> Any:
    """The transform's output frame `out` as the sink stages it (stage_columns).

    An aggregating transform's rows carry coordinates only as dead letters; a row that
    breaks its contract (transforms.aggregate_row_violation) fails the Spark task that
    stages it, before its part commits, and the job with it (stage_job raises it as a
    TransformError: onceflow.process.failures): the attempt is never marked staged."""
    from pyspark.sql import functions as F

    columns = out.columns
    error = F.col("error").cast("string") if "error" in columns else F.lit(None).cast("string")
    if cfg.aggregating:
        check_aggregate_output(cfg.transform, cfg.name, columns, cfg.sink)
        violation = aggregate_row_violation(cfg.transform, cfg.name, columns, cfg.sink)
        error = F.coalesce(
            F.when(violation.isNotNull(), F.raise_error(violation)).cast("string"), error
        )
    else:
        check_output(cfg.transform, cfg.name, columns, cfg.sink, decoded=cfg.uses_registry)
        # a row's identity in upsert and merge; a Kafka record key may be null
        for k in cfg.sink.key if cfg.sink.mode in ("upsert", "merge") else ():
            error = F.coalesce(error, F.when(F.col(k).isNull(), F.lit(f"key column '{k}' is null")))
    dead = error.isNotNull()
    key = F.col("key").cast("binary") if "key" in columns else F.lit(None).cast("binary")
    if "value" in columns and not cfg.aggregating:
        value = F.col("value").cast("binary")
        tombstone = error.isNull() & value.isNull()
    else:  # a transform that drops value, or an aggregating one, marks no tombstone
        value = F.col("value").cast("binary") if "value" in columns else F.lit(None)
        tombstone = F.lit(False)
    coordinates = []
    for name, spark_type in (("topic", "string"), ("partition", "int"), ("offset", "bigint")):
        c = F.col(name).cast(spark_type) if name in columns else F.lit(None).cast(spark_type)
        coordinates.append((F.when(dead, c) if cfg.aggregating else c).alias(name))
    counted = (
        [F.when(~dead, F.col(RECORDS).cast("bigint")).alias(RECORDS)] if cfg.aggregating else []
    )
    users = user_columns(columns, cfg.aggregating)
    staged = out.select(
        *coordinates,
        *users,
        error.alias("error"),
        F.when(dead, key).alias("key"),
        F.when(dead, F.substring(value.cast("binary"), 1, DEAD_VALUE_BYTES)).alias("value"),
        tombstone.alias("tombstone"),
        *counted,
    )
    # the select's names, known here: asking the frame for them costs a Spark Connect
    # session a round trip to the server's analyzer
    hashed = ["topic", "partition", "offset", *users, "error", "tombstone"]
    hashed += [RECORDS] if counted else []
    return staged.withColumn(HASH_COLUMN, F.xxhash64(*hashed))


def output_fields(df: Any) -> list[tuple[str, str]]:
    """(name, Spark type) of a staged frame's columns, for Sink.bind_output: what the stage
    adds itself (tombstone, the meta columns) left out."""
    return [
        (f.name, f.dataType.simpleString())
        for f in df.schema.fields
        if f.name != "tombstone" and not f.name.startswith("_meta_")
    ]
