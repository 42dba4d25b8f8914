"""Commit: its order, and the conflicts (CommitConflictError) with the ledger, the stage
or the sink that make it commit nothing."""

from __future__ import annotations

from onceflow.errors.base import OnceflowError


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
