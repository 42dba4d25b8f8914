"""Process: an attempt's fencing and stage, reading its range, how the process job exits,
and the class archive its driver JVM maps."""

from __future__ import annotations

import enum

from onceflow.errors.base import OnceflowError


class FencedAttemptError(OnceflowError):
    """A process attempt tried to stage after a newer attempt claimed the txid (a zombie)."""

    def __init__(
        self, pipeline: str, txid: str, attempt: int, newest: int, context: str = ""
    ) -> None:
        self.pipeline, self.txid, self.attempt, self.newest = pipeline, txid, attempt, newest
        super().__init__(
            f"{context}process attempt {attempt} of txid {txid!r} was superseded by attempt "
            f"{newest}; its staged output will never be published (a zombie or an overtaken "
            "retry)"
        )


class IncompleteStageError(OnceflowError):
    """An attempt's stage lacks parts or rows its part fence rows claim (a crash mid-job, or
    PostgreSQL emptied the UNLOGGED stage table): the attempt cannot be marked staged."""

    def __init__(
        self, pipeline: str, txid: str, attempt: int, found: int, parts: int, rows: int, lost: bool
    ) -> None:
        self.pipeline, self.txid, self.attempt = pipeline, txid, attempt
        self.found, self.parts, self.rows = found, parts, rows
        lost_text = " but none in the stage table (lost in a database crash?)" if lost else ""
        super().__init__(
            f"stage of txid {txid!r} attempt {attempt} is incomplete: {found} of {parts} "
            f"parts, {rows} rows claimed by the parts{lost_text}"
        )


class RangeReadError(OnceflowError):
    """Reading a planned range from the broker did not reach its until_offset."""


class SparkArchiveError(OnceflowError):
    """The training run that writes the driver JVM's class archive (`onceflow spark-archive`,
    onceflow.spark.jvm_archive) failed: no archive was written, and process tasks submit
    without one (slower to start, nothing else changes). `tail`: the run's last lines."""

    def __init__(self, job: str, code: int, wrote: bool, tail: list[str]) -> None:
        self.job, self.code, self.tail = job, code, tail
        super().__init__(
            f"spark archive: the training run {job} exited {code}"
            + ("" if wrote else " without writing the archive")
            + ":\n"
            + "\n".join(tail)
        )


class ProcessExit(enum.IntEnum):
    """Exit codes of the process job (onceflow.process, run by onceflow/spark_app/process.py).

    Only FAILED is worth a retry; the DAG's process task ends at once, without retries, on
    the others (onceflow.airflow.tasks.ProcessOperator).
    """

    OK = 0
    FAILED = 1  # recorded in the ledger as last_error; a retry may succeed
    USAGE = 2  # bad arguments, unknown pipeline or txid (plan must run first), or a transform
    # that cannot load, whose output does not fit its sink table, or that raised on a record
    # (on_transform_error = "fail"): fix it, then clear the run
    FENCED = 3  # a newer attempt of the txid claimed it: this attempt's output is never published
    ABANDONED = 4  # `onceflow reset-offsets` abandoned the txid: it never processes again

    @property
    def retryable(self) -> bool:
        return self is ProcessExit.FAILED
