"""The reader's rows as Arrow record batches: their schema, and the batches the clients fill.

Rows have the schema of Spark's own Kafka source, minus headers:

    topic string, partition int, offset bigint, key binary, value binary,
    timestamp timestamp  -- the record's timestamp (create or log-append time) in UTC, NULL if none

A client adds the records it fetched column by column, and hands on a batch once it holds
`batch_records` records or BATCH_BYTES of values: Spark's Arrow exchange and a fast form
work on whole batches, and a bounded batch bounds a Python worker's memory.
"""

from __future__ import annotations

from typing import Any

from onceflow.ranges import OffsetRange
from onceflow.spark.arrow_columns import binary_array, fixed_array, string_repeat, timestamp_array

SCHEMA = "topic string, partition int, offset bigint, key binary, value binary, timestamp timestamp"
DEFAULT_BATCH_RECORDS = 20_000
BATCH_BYTES = 32 << 20  # flush an Arrow batch early when its values reach this size


class RecordBatcher:
    """Collects the columns of one range's records and turns them into one Arrow batch
    (schema SCHEMA) at a time."""

    def __init__(self, r: OffsetRange) -> None:
        self.r = r
        self.reset()

    def reset(self) -> None:
        self.offsets: list[int] = []
        self.keys: list[bytes | None] = []
        self.values: list[bytes | None] = []
        self.ts: list[int] = []  # epoch milliseconds, negative when the record has none
        self.nbytes = 0

    def __len__(self) -> int:
        return len(self.offsets)

    def add(
        self,
        offsets: list[int],
        keys: list[bytes | None],
        values: list[bytes | None],
        ts: list[int],
        nbytes: int,
    ) -> None:
        """Records in offset order; `nbytes` counts toward BATCH_BYTES (the clients pass the
        values' size)."""
        self.offsets += offsets
        self.keys += keys
        self.values += values
        self.ts += ts
        self.nbytes += nbytes

    def flush(self) -> Any:
        """The records added since the last flush, as a pyarrow.RecordBatch; then empty."""
        import numpy as np
        import pyarrow as pa

        n = len(self.offsets)
        batch = pa.RecordBatch.from_arrays(
            [
                string_repeat(self.r.topic, n),
                fixed_array(pa.int32(), np.full(n, self.r.partition, dtype="int32")),
                fixed_array(pa.int64(), np.array(self.offsets, dtype="int64")),
                binary_array(self.keys),
                binary_array(self.values),
                timestamp_array(self.ts),
            ],
            names=["topic", "partition", "offset", "key", "value", "timestamp"],
        )
        self.reset()
        return batch
