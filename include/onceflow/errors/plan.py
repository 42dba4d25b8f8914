"""Planning against the broker: its log, its offsets and partitions (and reset-offsets),
the cluster's access and reach."""

from __future__ import annotations

from onceflow.errors.base import OnceflowError


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
        self,
        pipeline: str,
        topic: str,
        partition: int,
        committed_offset: int,
        why: str,
        may_pass: bool = False,
    ) -> None:
        self.pipeline, self.topic, self.partition = pipeline, topic, partition
        self.committed_offset, self.why = committed_offset, why
        # whether a failover may explain it for a moment (a record not served yet), so that
        # plan asks again (ledger.planning.snapshot_ranges); a topic id or a record's content
        # that differs never comes back
        self.may_pass = may_pass
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


class PartitionsUnservedError(OnceflowError):
    """Partitions a plan reads have no leader, or fewer in-sync replicas than their topic's
    min.insync.replicas (kafka.serving): the cluster is short of nodes. Nothing was planned;
    a retry plans once the nodes are back."""

    def __init__(
        self,
        pipeline: str,
        cluster: str,
        leaderless: list[tuple[str, int]],
        short: dict[tuple[str, int], tuple[int, int]],
    ) -> None:
        self.pipeline, self.leaderless, self.short = pipeline, leaderless, short
        parts = []
        if leaderless:
            parts.append(f"{len(leaderless)} partition(s) without a leader: {_named(leaderless)}")
        if short:
            parts.append(
                f"{len(short)} partition(s) with fewer in-sync replicas than min.insync.replicas: "
                + _named(list(short), lambda tp: f" ({short[tp][0]} of {short[tp][1]})")
            )
        super().__init__(
            f"plan of pipeline {pipeline!r}: the Kafka cluster {cluster} cannot serve every "
            f"partition it reads: {'; '.join(parts)}. Are brokers down? Nothing was planned; "
            "a retry plans once they are back."
        )


def _named(tps: list[tuple[str, int]], note=lambda tp: "", most: int = 20) -> str:
    shown = ", ".join(f"{t}[{p}]{note((t, p))}" for t, p in sorted(tps)[:most])
    return shown + (f" and {len(tps) - most} more" if len(tps) > most else "")


class KafkaUnreachableError(OnceflowError):
    """No broker of the cluster answered in time (down, wrong address): worth a retry."""
