"""Refusals of the command line (onceflow.cli): what a command was given or needs, and
what the Airflow API answered it (onceflow.cli.airflow_api)."""

from __future__ import annotations

from typing import Any

from onceflow.errors.base import OnceflowError


class PipelineNotChosenError(OnceflowError):
    """A command was given no --pipeline while the pipelines file defines more than one (or
    none); `known` names them."""

    def __init__(self, known: tuple[str, ...]) -> None:
        self.known = known
        super().__init__(f"give --pipeline, one of: {', '.join(known)}")


class RunIdError(OnceflowError):
    """A run id given to `onceflow trigger` (or the API client) that is no txid
    (ledger.txids.TXID_RE): refused before Airflow is asked to create the run."""

    def __init__(self, run_id: str, problem: str) -> None:
        self.run_id = run_id
        super().__init__(f"cannot trigger this run: {problem}")


class PartitionCountError(OnceflowError):
    """`onceflow topics create` was asked for topics of fewer than one partition."""

    def __init__(self, pipeline: str, partitions: int) -> None:
        self.pipeline, self.partitions = pipeline, partitions
        super().__init__(f"--partitions {partitions}: a topic has 1 partition or more")


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


class AirflowError(OnceflowError):
    """An Airflow API call failed; carries the URL, HTTP status and Airflow's detail."""

    def __init__(
        self, message: str, *, url: str = "", status: int | None = None, detail: Any = None
    ):
        super().__init__(message)
        self.url = url
        self.status = status
        self.detail = detail


class AirflowNotFound(AirflowError):
    """The DAG or run does not exist (HTTP 404)."""


class AirflowConflict(AirflowError):
    """The run already exists (HTTP 409)."""


class AirflowTimeout(AirflowError, TimeoutError):
    """A wait on Airflow ran out of time: a DAG that did not appear, runs not finished."""
