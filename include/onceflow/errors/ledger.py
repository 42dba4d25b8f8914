"""A txid the ledger refuses whatever the phase: not in it, abandoned by a reset, or asked
for a step its state does not take."""

from __future__ import annotations

from onceflow.errors.base import ConfigError, OnceflowError


class UnknownTxidError(OnceflowError):
    def __init__(self, pipeline: str, txid: str, hint: str = "") -> None:
        self.pipeline, self.txid = pipeline, txid
        msg = f"txid {txid!r} is not in the ledger of pipeline {pipeline!r}"
        super().__init__(msg + (f"; {hint}" if hint else ""))


class InvalidTxidError(ConfigError):
    """A run id that is not a txid (ledger.txids.TXID_RE): plan refuses it before the ledger
    changes, so it never holds a batch that no process could run."""

    def __init__(self, pipeline: str, txid: str, problem: str) -> None:
        self.pipeline, self.txid = pipeline, txid
        super().__init__(
            f"pipeline {pipeline!r}: plan refuses this run: {problem}; nothing was recorded, "
            "and later runs are not held up by it"
        )


class PrunedTxidError(UnknownTxidError):
    """The txid's ranges were pruned from the ledger (onceflow.ledger.retention): it can never
    be planned, processed or re-run again; its batch row and published output remain."""

    def __init__(self, pipeline: str, txid: str, seq: int, kept_from: int | None) -> None:
        self.pipeline, self.txid, self.seq, self.kept_from = pipeline, txid, seq, kept_from
        kept = f"from seq {kept_from} on" if kept_from else "of no batch now"
        OnceflowError.__init__(
            self,
            f"txid {txid!r} (seq {seq}) of pipeline {pipeline!r} was pruned from the ledger, "
            f"which keeps the ranges {kept} (ledger_retain_batches, ledger_retain_hours): a "
            "pruned txid cannot be planned, processed or re-run again; its published output "
            "stays, and the audit still counts it",
        )


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
    (onceflow.ledger.states.TRANSITIONS): a bug or a hand-edited ledger, never a retry's doing."""

    def __init__(self, pipeline: str, txid: str, state: str | None, event: str) -> None:
        self.pipeline, self.txid, self.state, self.event = pipeline, txid, state, event
        super().__init__(
            f"txid {txid!r} of pipeline {pipeline!r} is {state or 'not in the ledger'}: "
            f"{event} is not a step a batch in that state takes; the ledger was not changed"
        )


class MigrationError(OnceflowError):
    """A ledger migration failed (onceflow.ledger.db.migrate): it was rolled back, and the
    earlier ones stay applied."""

    def __init__(self, name: str, applied_now: list[str], why: str) -> None:
        self.migration = name
        first = why.strip().splitlines()[0] if why.strip() else why
        before = ", ".join(applied_now) if applied_now else "none applied now"
        super().__init__(
            f"ledger migration {name} failed and was rolled back: {first}; "
            f"applied before it: {before}; fix what it names and run `onceflow migrate` again"
        )
