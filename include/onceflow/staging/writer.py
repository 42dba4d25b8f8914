"""The stage writer: the Spark side of staging, each partition of a frame as one part.

process stages a frame through `stage_frame`, a mapInArrow (no data source workers to start
on the driver): the Spark task of partition k stages it as part `first_part + k` (the part
numbering: onceflow.staging.fence) with `stage_part`, which sends it to the sink's backend,
and reports one row (part, rows, skipped). The fast form's worker calls `stage_part` itself
for its own parts (onceflow.staging.fast_stage).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from onceflow.errors.transform import StageColumnsError
from onceflow.spark.arrow_columns import fixed_array
from onceflow.staging.attempt_table import stage_attempt_part
from onceflow.staging.fence import StageCommitMessage
from onceflow.staging.file_stage import stage_file_part
from onceflow.staging.table_stage import stage_table_part
from onceflow.staging.target import StageTarget

MESSAGE_SCHEMA = "part int, rows bigint, skipped boolean"


def stage_part(target: StageTarget, part: int, batches: Iterable[Any]) -> StageCommitMessage:
    """Stage one part (Arrow record batches) under the part fence, in one transaction: its
    rows COPYed into the stage table (onceflow.staging.table_stage); or its valid rows as a
    data file for a sink with a file stage (target.files: onceflow.staging.file_stage), or
    into the attempt's own table (target.attempt_table: onceflow.staging.attempt_table)."""
    if target.files is not None:
        return stage_file_part(target, part, batches)
    if target.attempt_table is not None:
        return stage_attempt_part(target, part, batches)
    return stage_table_part(target, part, batches)


class StagePartFn:
    """mapInArrow function of `stage_frame`: stages Spark partition k as part first_part + k."""

    def __init__(self, target: StageTarget, first_part: int = 0) -> None:
        self.target = target
        self.first_part = first_part

    def __call__(self, batches: Iterator[Any]) -> Iterator[Any]:
        import numpy as np
        import pyarrow as pa
        from pyspark import TaskContext

        ctx = TaskContext.get()
        if ctx is None:
            raise RuntimeError("onceflow_stage: stage_frame must run in a Spark task")
        msg = stage_part(self.target, self.first_part + ctx.partitionId(), batches)
        if msg.skipped:
            # Read the input to its end all the same: the reader counts the records it hands
            # on (process's records-read check), and this task's count is the one Spark keeps.
            for _ in batches:
                pass
        # from buffers: pa.array / from_pylist would import pandas into the worker
        yield pa.RecordBatch.from_arrays(
            [
                fixed_array(pa.int32(), np.array([msg.part], dtype=np.int32)),
                fixed_array(pa.int64(), np.array([msg.rows], dtype=np.int64)),
                pa.Array.from_buffers(
                    pa.bool_(), 1, [None, pa.py_buffer(np.array([int(msg.skipped)], np.uint8))]
                ),
            ],
            names=["part", "rows", "skipped"],
        )


def stage_frame(df: Any, target: StageTarget, first_part: int = 0) -> Any:
    """A DataFrame that, when collected, stages each Spark partition k of `df` as part
    first_part + k (under the part fence) and gives one row (part, rows, skipped) per
    partition. Its mapInArrow asks for df's columns: a Spark Connect frame whose schema is
    not given (DataFrame.to, as staged_output's) asks the server's analyzer for them."""
    unknown = target.unknown_columns(df.columns)
    if unknown:
        raise StageColumnsError(
            target.attempt.pipeline,
            f"{target.schema}.{target.table}",
            None,
            unknown,
            list(target.columns),
        )
    return df.mapInArrow(StagePartFn(target, first_part), MESSAGE_SCHEMA)
