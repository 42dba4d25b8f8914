"""The transform's output as its sink stages it: the staged frame.

Whatever the transform gives, the stage writer (onceflow.staging.writer) takes one shape:
the record's coordinates, the user's columns, `error` (a dead letter's reason), `key` and
`value` (kept for dead letters only), `tombstone`, an aggregating transform's `records`,
and the row hash (onceflow.staging.checksum.HASH_COLUMN). The sink's tables are fitted to
this frame's columns (`output_fields`) before anything is staged.

The staged frame's names and types are known here (STAGE_TYPES, the user's columns as the
transform gives them: `staged_schema`), and the frame carries them (DataFrame.to): asking a
Spark Connect frame for them costs a round trip to the server's analyzer each (0.04-0.09 s
of a small batch), and the stage writer's mapInArrow asks for its input's columns.
"""

from __future__ import annotations

from collections.abc import Sequence
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
# The Spark types of the columns the stage adds (the user's keep the transform's types).
STAGE_TYPES = {
    "topic": "string",
    "partition": "int",
    "offset": "bigint",
    "error": "string",
    "key": "binary",
    "value": "binary",
    "tombstone": "boolean",
    RECORDS: "bigint",
    HASH_COLUMN: "bigint",
}


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
    """The transform's output frame `out` as the sink stages it (stage_columns), its schema
    given (staged_schema), so that neither the sink's binding nor the stage writer asks."""
    return staged_select(out, cfg).to(staged_schema(out, cfg))


def staged_select(out: Any, cfg: PipelineConfig) -> Any:
    """The staged frame's columns computed from the transform's output frame `out`.

    An aggregating transform's rows carry coordinates only as dead letters; a row that
    breaks its contract (transforms.aggregate_row_violation) fails the Spark task that
    stages it, before its part commits, and the job with it (stage_job raises it as a
    TransformError: onceflow.process.failures): the attempt is never marked staged."""
    from pyspark.sql import functions as F

    columns = out.columns
    t = STAGE_TYPES
    error = F.col("error").cast(t["error"]) if "error" in columns else F.lit(None).cast(t["error"])
    if cfg.aggregating:
        check_aggregate_output(cfg.transform, cfg.name, columns, cfg.sink)
        violation = aggregate_row_violation(cfg.transform, cfg.name, columns, cfg.sink)
        error = F.coalesce(
            F.when(violation.isNotNull(), F.raise_error(violation)).cast("string"), error
        )
    else:
        check_output(cfg.transform, cfg.name, columns, cfg.sink, decoded=cfg.decodes)
        # a row's identity in upsert and merge; a Kafka record key may be null
        for k in cfg.sink.key if cfg.sink.mode in ("upsert", "merge") else ():
            error = F.coalesce(error, F.when(F.col(k).isNull(), F.lit(f"key column '{k}' is null")))
    dead = error.isNotNull()
    key = F.col("key").cast(t["key"]) if "key" in columns else F.lit(None).cast(t["key"])
    if "value" in columns and not cfg.aggregating:
        value = F.col("value").cast(t["value"])
        tombstone = error.isNull() & value.isNull()
    else:  # a transform that drops value, or an aggregating one, marks no tombstone
        value = F.col("value").cast(t["value"]) if "value" in columns else F.lit(None)
        tombstone = F.lit(False)
    coordinates = []
    for name in ("topic", "partition", "offset"):
        c = F.col(name).cast(t[name]) if name in columns else F.lit(None).cast(t[name])
        coordinates.append((F.when(dead, c) if cfg.aggregating else c).alias(name))
    counted = (
        [F.when(~dead, F.col(RECORDS).cast(t[RECORDS])).alias(RECORDS)] if cfg.aggregating else []
    )
    users = user_columns(columns, cfg.aggregating)
    staged = out.select(
        *coordinates,
        *users,
        error.alias("error"),
        F.when(dead, key).alias("key"),
        F.when(dead, F.substring(value.cast(t["value"]), 1, DEAD_VALUE_BYTES)).alias("value"),
        tombstone.alias("tombstone"),
        *counted,
    )
    names = staged_names(users, cfg.aggregating)
    hashed = [n for n in names if n not in ("key", "value", HASH_COLUMN)]
    return staged.withColumn(HASH_COLUMN, F.xxhash64(*hashed))


def staged_names(users: Sequence[str], aggregating: bool) -> list[str]:
    """The staged frame's columns, in order (staged_select's select, then the row hash)."""
    names = ["topic", "partition", "offset", *users, "error", "key", "value", "tombstone"]
    return names + ([RECORDS] if aggregating else []) + [HASH_COLUMN]


def staged_schema(out: Any, cfg: PipelineConfig) -> Any:
    """The schema of staged_select(out, cfg), from the transform's output `out` (whose
    schema staged_select asks for anyway): the user's columns' own types, STAGE_TYPES for
    the rest, every column nullable."""
    from pyspark.sql import types as T

    stage_types = {
        "string": T.StringType(),
        "int": T.IntegerType(),
        "bigint": T.LongType(),
        "binary": T.BinaryType(),
        "boolean": T.BooleanType(),
    }
    users = {f.name: f.dataType for f in out.schema.fields}
    users = {name: users[name] for name in user_columns(users, cfg.aggregating)}
    return T.StructType(
        [
            T.StructField(name, users[name] if name in users else stage_types[STAGE_TYPES[name]])
            for name in staged_names(tuple(users), cfg.aggregating)
        ]
    )


def output_fields(staged: Any) -> list[tuple[str, str]]:
    """(name, Spark type) of the columns of the staged frame (staged_output), for
    Sink.stage_writer: what the stage adds itself (tombstone, the meta columns) left out."""
    return [
        (f.name, f.dataType.simpleString())
        for f in staged.schema.fields
        if f.name != "tombstone" and not f.name.startswith("_meta_")
    ]
