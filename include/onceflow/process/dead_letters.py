"""The records the user's code raised on, as dead-letter rows of the staged frame.

Under on_transform_error = "dead_letter" (onceflow.poison), the stage job runs again with
the poison records set aside by the reader; they are read from the broker once more here
and staged as dead letters with their coordinates and the exception, in one part after all
the others (the part numbering: onceflow.staging.fence).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from onceflow.kafka.client import KafkaCluster
from onceflow.poison import PoisonRecord
from onceflow.process.staged_output import DEAD_VALUE_BYTES
from onceflow.reader.frame import RangeReadFn
from onceflow.reader.record_batches import SCHEMA
from onceflow.spark.arrow_columns import string_repeat
from onceflow.staging.checksum import HASH_COLUMN


class DeadLetterReadFn(RangeReadFn):
    """mapInArrow function of `dead_letter_frame`: the input row with id k reads poison
    record k (a one-offset range) and adds its reason as column `error`."""

    def __init__(
        self, poison: Sequence[PoisonRecord], bootstrap: KafkaCluster | str, **read: Any
    ) -> None:
        super().__init__([p.range for p in poison], bootstrap, **read)
        self.reasons = [p.reason for p in poison]

    def __call__(self, batches: Iterator[Any]) -> Iterator[Any]:
        for ids in batches:
            for k in ids.column(0).to_pylist():
                for batch in self.records(k):
                    error = string_repeat(self.reasons[k], batch.num_rows)
                    yield batch.append_column("error", error)


def dead_letter_frame(
    spark: Any,
    poison: Sequence[PoisonRecord],
    like: Any,
    bootstrap: KafkaCluster | str,
    **read: Any,
) -> Any:
    """The poison records as dead-letter rows of the staged frame `like` (its columns, in
    its order; onceflow.process.staged_output): coordinates, reason, key and value (cut as
    for any dead letter), the user's columns null, hashed like any staged row. One Spark
    partition, so one part. They are read from the broker again here: a record that is
    not there gives no row, and mark_staged's count then refuses the attempt. `read`:
    RangeReadFn's options (client, timeout_s, client_conf)."""
    from pyspark.sql import functions as F

    fn = DeadLetterReadFn(poison, bootstrap, **read)
    n = len(poison)
    records = spark.range(0, n, 1, n).mapInArrow(fn, f"{SCHEMA}, error string").coalesce(1)
    columns = []
    for field in like.schema.fields:
        name, kind = field.name, field.dataType
        if name == HASH_COLUMN:
            continue
        if name in ("topic", "partition", "offset", "error", "key"):
            column = F.col(name).cast(kind)
        elif name == "value":
            column = F.substring(F.col("value"), 1, DEAD_VALUE_BYTES).cast(kind)
        elif name == "tombstone":
            column = F.lit(False)
        else:
            column = F.lit(None).cast(kind)
        columns.append(column.alias(name))
    rows = records.select(*columns)
    hashed = [c for c in rows.columns if c not in ("key", "value")]  # as staged_output
    return rows.withColumn(HASH_COLUMN, F.xxhash64(*hashed))
