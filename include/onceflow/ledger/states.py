"""The states of a batch (onceflow.batches.state) and the steps between them.

The values are stored in the ledger and shown verbatim by the UI, the CLI, the metrics and
every JSON answer, so they never change; this module is the only place they are spelled
(SQL passes them as parameters). `TRANSITIONS` is the whole state machine; the ledger moves
a batch only through onceflow.ledger.transitions.move, which refuses any other step.
"""

from __future__ import annotations

from onceflow.compat.python import StrEnum


class BatchState(StrEnum):
    """In the order a batch goes through them (the UI and the metrics list them so)."""

    PLANNED = "planned"
    PROCESSING = "processing"
    STAGED = "staged"
    COMMITTED = "committed"
    ABANDONED = "abandoned"


class Step(StrEnum):
    """What moves a batch: one phase or operator action each."""

    PLAN = "plan"  # plan records the txid's ranges
    CLAIM = "claim"  # a process attempt starts (and fences every earlier one)
    STAGE = "stage"  # the newest attempt's output is staged and counted
    COMMIT = "commit"  # the staged output is published and the offsets advance
    ABANDON = "abandon"  # reset-offsets gives up a batch whose ranges the broker lost


#: (state before, step) -> state after; None before PLAN: the txid is not in the ledger yet.
#: A committed batch stays committed when it is processed, staged and published again (a
#: re-run by run id replaces its output; its offsets, already past it, stay). An abandoned
#: batch takes no step at all. Every pair missing here is refused.
TRANSITIONS: dict[tuple[BatchState | None, Step], BatchState] = {
    (None, Step.PLAN): BatchState.PLANNED,
    (BatchState.PLANNED, Step.CLAIM): BatchState.PROCESSING,
    (BatchState.PROCESSING, Step.CLAIM): BatchState.PROCESSING,
    (BatchState.STAGED, Step.CLAIM): BatchState.PROCESSING,
    (BatchState.COMMITTED, Step.CLAIM): BatchState.COMMITTED,
    (BatchState.PROCESSING, Step.STAGE): BatchState.STAGED,
    (BatchState.STAGED, Step.STAGE): BatchState.STAGED,
    (BatchState.COMMITTED, Step.STAGE): BatchState.COMMITTED,
    (BatchState.STAGED, Step.COMMIT): BatchState.COMMITTED,
    (BatchState.COMMITTED, Step.COMMIT): BatchState.COMMITTED,
    (BatchState.PLANNED, Step.ABANDON): BatchState.ABANDONED,
    (BatchState.PROCESSING, Step.ABANDON): BatchState.ABANDONED,
    (BatchState.STAGED, Step.ABANDON): BatchState.ABANDONED,
}

#: states a batch never leaves: no commit waits for a closed batch, and the audit's prefix of
#: closed batches ends at the first batch in another state. A tuple, so that psycopg2 passes
#: it as an SQL list (`state not in %s`).
CLOSED = (BatchState.COMMITTED, BatchState.ABANDONED)
