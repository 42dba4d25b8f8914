"""Refusals of the command line (onceflow.cli): what a command was given or needs."""

from __future__ import annotations

from onceflow.errors.base import OnceflowError


class LocalToolsMissingError(OnceflowError):
    """A command of the local stack (up, down, status, produce, demo, chaos) needs the tools
    only a checkout has (onceflow_dev, which the wheel does not ship, and what `make setup`
    installs for it); `missing` is the module that was not found."""

    def __init__(self, missing: str | None) -> None:
        self.missing = missing
        super().__init__(
            "this command runs the local stack's tools, which only a checkout of Onceflow has "
            "(the wheel ships none): run it in the repository after `make setup`; "
            f"missing: {missing}"
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


class BackfillArgumentsError(OnceflowError):
    """`onceflow backfill` or `reset-offsets` given options that do not go together, or a
    time that is not one; `why` says which."""

    def __init__(self, why: str) -> None:
        self.why = why
        super().__init__(why)


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
    """`onceflow reset-offsets` without --yes: it abandons batches, so only when confirmed.
    `to`: earliest, latest or time (then `at_time`, the time)."""

    def __init__(self, pipeline: str, to: str, at_time: str | None = None) -> None:
        self.pipeline, self.to, self.at_time = pipeline, to, at_time
        where = f"first record at or after {at_time}" if at_time else f"broker's {to} offset"
        super().__init__(
            "reset-offsets abandons every uncommitted batch and restarts each partition at the "
            f"{where}; add --yes to do it"
        )
