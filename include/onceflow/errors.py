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


class UnprovenLogError(OnceflowError):
    """The broker did not return the record plan asked for to prove a partition's log."""

    def __init__(self, pipeline: str, topic: str, partition: int, offset: int) -> None:
        self.pipeline, self.topic, self.partition, self.offset = pipeline, topic, partition, offset
        super().__init__(
            f"plan of pipeline {pipeline!r} asked the broker for the record at offset {offset} "
            f"of {topic}[{partition}] and got no answer: the log cannot be proven the ledger's, "
            "nothing was planned"
        )


class ResetRefusedError(OnceflowError):
    """`onceflow reset-offsets` was asked for something it cannot do; nothing was reset."""

    def __init__(self, pipeline: str, why: str) -> None:
        self.pipeline, self.why = pipeline, why
        super().__init__(f"reset-offsets of pipeline {pipeline!r}: {why}; nothing was reset")


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

    def __init__(self, pipeline: str, txid: str, context: str = "") -> None:
        self.pipeline, self.txid = pipeline, txid
        super().__init__(
            f"{context}txid {txid!r} of pipeline {pipeline!r} was abandoned by `onceflow "
            "reset-offsets`: its ranges are gone from the broker; it will never process or commit"
        )


class IllegalTransitionError(OnceflowError):
    """A batch was asked to move between two states the protocol does not connect
    (onceflow.states.TRANSITIONS): a bug or a hand-edited ledger, never a retry's doing."""

    def __init__(self, pipeline: str, txid: str, state: str | None, event: str) -> None:
        self.pipeline, self.txid, self.state, self.event = pipeline, txid, state, event
        super().__init__(
            f"txid {txid!r} of pipeline {pipeline!r} is {state or 'not in the ledger'}: "
            f"{event} is not a step a batch in that state takes; the ledger was not changed"
        )


class NotStagedError(OnceflowError):
    """Commit asked for a txid whose process has not staged its output."""

    def __init__(self, pipeline: str, txid: str, seq: int, state: str) -> None:
        self.pipeline, self.txid, self.seq, self.state = pipeline, txid, seq, state
        super().__init__(
            f"txid {txid!r} (seq {seq}) of pipeline {pipeline!r} is {state}: process has not "
            "staged its output, nothing to commit"
        )


class CommitOrderError(OnceflowError):
    """Commit asked for a txid while a lower seq of its pipeline is not closed."""

    def __init__(
        self, pipeline: str, txid: str, seq: int, blocker_txid: str, blocker_seq: int, state: str
    ) -> None:
        self.pipeline, self.txid, self.seq = pipeline, txid, seq
        self.blocker_txid, self.blocker_seq, self.blocker_state = blocker_txid, blocker_seq, state
        super().__init__(
            f"txid {txid!r} (seq {seq}) cannot commit before txid {blocker_txid!r} "
            f"(seq {blocker_seq}), which is {state}"
        )


class CommitConflictError(OnceflowError):
    """Commit found the ledger, the stage or the sink not as its rules require, and
    committed nothing; each cause is a subclass."""


class OffsetConflictError(CommitConflictError):
    """The compare-and-set of a partition's committed offset did not change exactly one row:
    the range was applied already, or the offsets moved under the batch (a reset)."""

    def __init__(
        self,
        pipeline: str,
        txid: str,
        seq: int,
        topic: str,
        partition: int,
        expected: int,
        actual: int | None,
    ) -> None:
        self.pipeline, self.txid, self.seq = pipeline, txid, seq
        self.topic, self.partition, self.expected, self.actual = topic, partition, expected, actual
        super().__init__(
            f"commit of txid {txid!r} (seq {seq}) expected {topic}[{partition}] committed at "
            f"offset {expected} but the ledger has {'no row' if actual is None else actual}: "
            "was this range already applied, or an earlier batch reset? Nothing was committed."
        )


class StagedCountsError(CommitConflictError):
    """What commit publishes is not what process recorded for the staged attempt."""

    def __init__(
        self,
        pipeline: str,
        txid: str,
        attempt: int,
        recorded: tuple[int | None, int | None],
        found: tuple[int, int],
        then: str = "Nothing was committed; retry process.",
    ) -> None:
        self.pipeline, self.txid, self.attempt = pipeline, txid, attempt
        self.recorded, self.found = recorded, found
        super().__init__(
            f"txid {txid!r} attempt {attempt}: staged counts changed since process recorded them "
            f"(ledger: {recorded[0]} rows + {recorded[1]} dead letters; stage now: {found[0]} + "
            f"{found[1]}). {then}"
        )


class SinkContentionError(CommitConflictError):
    """A sink outside the database moved under every one of commit's publishes."""

    def __init__(self, pipeline: str, txid: str, seq: int, sink: str, tries: int) -> None:
        self.pipeline, self.txid, self.seq, self.sink = pipeline, txid, seq, sink
        super().__init__(
            f"txid {txid!r} (seq {seq}): the sink {sink} changed under {tries} publishes in a "
            "row (other writers); nothing was published, retry the commit"
        )


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


class PipelineKeyError(ConfigError):
    """A key of a pipeline's definition is unknown or has a value Onceflow refuses; the
    message names the pipelines file, the pipeline, the key (`sink.KEY` for the sink's
    table) and why."""

    def __init__(self, source: str, pipeline: str, key: str, why: str) -> None:
        self.source, self.pipeline, self.key, self.why = source, pipeline, key, why
        super().__init__(f"{source}: pipeline {pipeline!r}, key {key!r}: {why}")


class LocalToolsMissingError(OnceflowError):
    """A command of the local stack (up, down, status, produce, demo, chaos) needs what only
    the `local` extra installs; `missing` is the module that was not found."""

    def __init__(self, missing: str | None) -> None:
        self.missing = missing
        super().__init__(
            f"this command runs the local stack's tools, which need what the `local` extra "
            f"installs (pip install 'onceflow[local]'); missing: {missing}"
        )


class PipelineNotChosenError(OnceflowError):
    """A command was given no --pipeline while the pipelines file defines more than one (or
    none); `known` names them."""

    def __init__(self, known: tuple[str, ...]) -> None:
        self.known = known
        super().__init__(f"give --pipeline, one of: {', '.join(known)}")


class PartitionCountError(OnceflowError):
    """`onceflow topics create` was asked for topics of fewer than one partition."""

    def __init__(self, pipeline: str, partitions: int) -> None:
        self.pipeline, self.partitions = pipeline, partitions
        super().__init__(f"--partitions {partitions}: a topic has 1 partition or more")


class DemoPipelinesMissingError(OnceflowError):
    """`onceflow demo` runs the shipped example pipelines, and the pipelines file lacks some."""

    def __init__(self, pipelines_file: str, missing: list[str], demo: list[str]) -> None:
        self.pipelines_file, self.missing, self.demo = pipelines_file, missing, demo
        super().__init__(
            f"{pipelines_file} lacks the demo pipeline(s) {missing}; the demo runs "
            f"{demo} as dags/pipelines.toml defines them"
        )


class SeqRangeError(OnceflowError):
    """`onceflow backfill --from-seq A --to-seq B` where A..B is no range of seq numbers."""

    def __init__(self, pipeline: str, from_seq: int, to_seq: int) -> None:
        self.pipeline, self.from_seq, self.to_seq = pipeline, from_seq, to_seq
        super().__init__(f"--from-seq {from_seq} --to-seq {to_seq} is not a range of seq numbers")


class UnknownSeqError(OnceflowError):
    """A seq the pipeline's ledger holds no batch for (`last_seq`: its highest, 0 if none)."""

    def __init__(self, pipeline: str, seq: int, last_seq: int) -> None:
        self.pipeline, self.seq, self.last_seq = pipeline, seq, last_seq
        super().__init__(
            f"pipeline {pipeline!r} has no batch with seq {seq} (last seq: {last_seq})"
        )


class BackfillOpenBatchError(OnceflowError):
    """`onceflow backfill` re-runs committed batches only, and a seq of its range is open."""

    def __init__(self, pipeline: str, seq: int, txid: str, state: str) -> None:
        self.pipeline, self.seq, self.txid, self.state = pipeline, seq, txid, state
        super().__init__(
            f"seq {seq} (txid {txid!r}) is {state}, not committed: "
            "backfill re-runs committed batches; retry open ones with `onceflow rerun`"
        )


class ResetNotConfirmedError(OnceflowError):
    """`onceflow reset-offsets` without --yes: it abandons batches, so only when confirmed."""

    def __init__(self, pipeline: str, to: str) -> None:
        self.pipeline, self.to = pipeline, to
        super().__init__(
            "reset-offsets abandons every uncommitted batch and restarts each partition at the "
            f"broker's {to} offset; add --yes to do it"
        )


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


class CommitterFencedError(CommitConflictError):
    """A newer committer of the pipeline fenced this one at the sink (a Kafka producer's
    epoch, bumped by the newer one's init_transactions): nothing of this commit was
    published, and the newer committer's commit stands. `sink`: the sink as the message
    names it; `doing`: what this committer could not do."""

    def __init__(
        self, pipeline: str, txid: str, seq: int, sink: str, doing: str, cause: str
    ) -> None:
        self.pipeline, self.txid, self.seq, self.sink, self.doing = pipeline, txid, seq, sink, doing
        super().__init__(
            f"{sink}: could not {doing}: a newer committer of the pipeline fenced "
            f"this one ({cause}); nothing of this commit was published, and the newer "
            "committer's commit stands"
        )


class CommitLogAheadError(CommitConflictError):
    """The Kafka sink's commit log ends with a marker of a later seq than the one the ledger
    commits now: another ledger (or a pipeline of the same name) publishes to the topic.
    Nothing was published. `sink`: the sink as the message names it; `marker_seq` and
    `marker_txid`: what the last marker records."""

    def __init__(
        self,
        pipeline: str,
        txid: str,
        seq: int,
        topic: str,
        sink: str,
        marker_seq: int,
        marker_txid: str,
    ) -> None:
        self.pipeline, self.txid, self.seq, self.topic, self.sink = pipeline, txid, seq, topic, sink
        self.marker_seq, self.marker_txid = marker_seq, marker_txid
        super().__init__(
            f"{sink}: the commit log's last marker is seq {marker_seq} (txid "
            f"{marker_txid!r}) but the ledger commits seq {seq} (txid {txid!r}) now: "
            "another ledger (or pipeline of the same name) publishes to this topic. "
            "Nothing was published."
        )


class LakeTableMissingError(OnceflowError):
    """A lake sink's table is gone (dropped?) while the attempt being published staged data
    files for it: nothing was published. `table`: the table as messages name it ("Iceberg
    table ns.t"); `files`: how many data files the attempt staged."""

    def __init__(
        self, pipeline: str, txid: str, seq: int, attempt: int, table: str, files: int
    ) -> None:
        self.pipeline, self.txid, self.seq, self.attempt = pipeline, txid, seq, attempt
        self.table, self.files = table, files
        super().__init__(
            f"{table} does not exist, but txid {txid!r} attempt "
            f"{attempt} staged {files} data file(s) for it: was it dropped?"
        )


class NotALakeSinkError(OnceflowError):
    """`onceflow maintain` (or a DAG's maintain task) for a pipeline whose sink is no lake
    table: there is nothing to compact or expire."""

    def __init__(self, pipeline: str, sink: str) -> None:
        self.pipeline = pipeline
        super().__init__(
            f"pipeline {pipeline!r} publishes to {sink}: maintenance (compaction, expiry) is "
            'for lake tables (kind = "iceberg" or "delta") only'
        )
