"""The user's transform: it cannot load, it raised on a record, or its output does not fit
its sink (raised before or while process stages)."""

from __future__ import annotations

from onceflow.errors.base import OnceflowError


class TransformError(OnceflowError):
    """A pipeline's transform cannot be loaded, or its output does not fit its sink; nothing
    is staged. The message names the transform and what is wrong."""


class TransformRaisedError(TransformError):
    """The user's code raised on a record of the batch and the pipeline does not dead-letter
    such records (on_transform_error = "fail"), or the records it raised on could not be set
    aside (onceflow.poison); the message names the record and shows the user's traceback.
    Also the marker of an exception a fast form raised in the reader's worker."""


class SinkSchemaError(OnceflowError):
    """A sink table exists with columns the transform's output does not fit, or the output has
    a column the sink cannot hold; the message names the table and the columns."""


class StageColumnsError(SinkSchemaError):
    """The output being staged has columns its stage table lacks (the transform's output
    changed between the stage table's making and a part's stage): nothing of the part is
    staged. `table`: the stage table; `part`: the part, None before any part was staged."""

    def __init__(
        self, pipeline: str, table: str, part: int | None, unknown: list[str], known: list[str]
    ) -> None:
        self.pipeline, self.table, self.part, self.unknown = pipeline, table, part, unknown
        where = "" if part is None else f" part {part}"
        super().__init__(
            f"stage of pipeline {pipeline!r}{where}: column(s) {unknown} are not columns of "
            f"the stage table {table} {known}"
        )


class SinkLayoutError(SinkSchemaError):
    """A sink table is laid out as an earlier Onceflow version made it (an append table or
    an upsert table's versions not partitioned by seq) or cannot be named as this one needs;
    the message names the table and the command that migrates it."""


class UnrepeatedFailureError(OnceflowError):
    """The user's code raised in a stage job, but on none of its input partitions run again
    alone (onceflow.poison.isolate): the exception does not follow from the records (a
    passing fault, or code that is not deterministic), so no record is set aside; the
    attempt fails, and a retry may pass. `failure`: what failed the job; `partitions`: the
    input partitions probed."""

    def __init__(self, failure: str, partitions: int) -> None:
        self.failure, self.partitions = failure, partitions
        super().__init__(
            f"{failure} failed the stage job, but none of its {partitions} input "
            "partition(s) fails when run again alone: the exception does not follow from the "
            "records (a passing fault, or code that is not deterministic); the attempt fails "
            "and a retry may pass"
        )
