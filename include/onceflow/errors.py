"""Named error conditions. Each carries the coordinates an operator needs to act on it."""

from __future__ import annotations

import enum


class OnceflowError(Exception):
    """Base of every error Onceflow raises on purpose."""


class ConfigError(OnceflowError):
    """A pipeline definition or setting is invalid; the message names the file and key."""


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


class UnknownTxidError(OnceflowError):
    def __init__(self, pipeline: str, txid: str, hint: str = "") -> None:
        self.pipeline, self.txid = pipeline, txid
        msg = f"txid {txid!r} is not in the ledger of pipeline {pipeline!r}"
        super().__init__(msg + (f"; {hint}" if hint else ""))


class OffsetRegressionError(OnceflowError):
    """The broker reports an end offset below what the ledger already holds."""

    def __init__(
        self, pipeline: str, topic: str, partition: int, ledger_offset: int, broker_end: int
    ) -> None:
        self.topic, self.partition = topic, partition
        self.ledger_offset, self.broker_end = ledger_offset, broker_end
        super().__init__(
            f"offset regression in pipeline {pipeline!r} at {topic}[{partition}]: the ledger has planned "
            f"up to offset {ledger_offset} but the broker's end offset is {broker_end}. The log was "
            "truncated, the topic re-created or the broker lost data. Nothing was planned. After "
            "investigating, reset the pipeline with `onceflow reset-offsets`."
        )


class LogIdentityError(OnceflowError):
    """The broker's log of a partition is not the log the ledger read (a topic deleted and
    re-created, a broker that lost its log and was refilled), whatever its end offset says."""

    def __init__(
        self, pipeline: str, topic: str, partition: int, committed_offset: int, why: str
    ) -> None:
        self.pipeline, self.topic, self.partition = pipeline, topic, partition
        self.committed_offset, self.why = committed_offset, why
        super().__init__(
            f"the broker's log for {topic}[{partition}] is not the one pipeline {pipeline!r} "
            f"committed up to offset {committed_offset}: {why}. Nothing was planned: reading "
            f"on from offset {committed_offset} would skip the new log's records below it. "
            "If the topic was re-created on purpose, start a new epoch at its first offset with "
            f"`onceflow reset-offsets --pipeline {pipeline} --reason '...' --yes` (every record of "
            "the new log is then processed); otherwise find out what happened to the broker."
        )


class DataLossError(OnceflowError):
    """Records the pipeline never processed were deleted (retention) before it read them."""

    def __init__(
        self, pipeline: str, topic: str, partition: int, from_offset: int, beginning: int
    ) -> None:
        self.topic, self.partition = topic, partition
        self.from_offset, self.beginning = from_offset, beginning
        super().__init__(
            f"data loss in pipeline {pipeline!r} at {topic}[{partition}]: the next range starts at offset "
            f"{from_offset} but the broker's first offset is {beginning}; records "
            f"[{from_offset}, {beginning}) were deleted before they were processed (retention?). "
            'Set on_data_loss = "skip" for this pipeline to record the interval as a loss event and go on.'
        )


class PartitionRemovedError(OnceflowError):
    def __init__(self, pipeline: str, topic: str, partition: int) -> None:
        self.topic, self.partition = topic, partition
        super().__init__(
            f"partition {topic}[{partition}] of pipeline {pipeline!r} is in the ledger but the broker no "
            "longer has it (topic deleted or re-created with fewer partitions). Nothing was planned."
        )


class TopicMissingError(OnceflowError):
    def __init__(self, pipeline: str, topic: str, bootstrap: str) -> None:
        self.pipeline, self.topic = pipeline, topic
        super().__init__(
            f"topic {topic!r} of pipeline {pipeline!r} does not exist on the broker {bootstrap}"
        )


class KafkaAccessError(OnceflowError):
    """The Kafka cluster refuses this client: a TLS handshake (unknown CA, hostname
    mismatch, client certificate) or a SASL login failed. Retrying cannot change it; the
    message names where the settings came from, the broker and the cause."""


class KafkaUnreachableError(OnceflowError):
    """No broker of the cluster answered in time (down, wrong address): worth a retry."""


class AbandonedTxidError(OnceflowError):
    """The txid was abandoned by an operator reset; it will never process or commit."""


class CommitOrderError(OnceflowError):
    """Commit asked for a txid whose predecessor has not committed."""


class CommitConflictError(OnceflowError):
    """The compare-and-set on a committed offset did not change exactly one row."""


class SinkMovedError(OnceflowError):
    """A sink outside the database changed between commit's read and its publish (another
    commit won the sink's optimistic concurrency): nothing was published; read it again."""


class SinkUnavailableError(OnceflowError):
    """A sink outside the database could not be read or written (its storage or catalog
    unreachable, a staged file gone): nothing was published; the message names the sink and
    where it lives, and a retry of the commit may succeed."""


class SinkRejectedError(OnceflowError):
    """A sink outside the database refused a publish for a reason a retry alone cannot mend
    (a record larger than the topic takes, an output topic missing that the pipeline may not
    create): nothing was published; the message says what to change, and the commit's retry
    after that publishes once."""


class RerunRefusedError(OnceflowError):
    """A committed txid cannot be re-run into an append-only sink (a Kafka topic): its records
    were delivered and cannot be replaced; the message says what to do instead."""


class FencedAttemptError(OnceflowError):
    """A process attempt tried to stage after a newer attempt claimed the txid (a zombie)."""


class RangeReadError(OnceflowError):
    """Reading a planned range from the broker did not reach its until_offset."""


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
