"""After a new log (a lost broker, a re-created topic) and plan's refusal of it: what
`onceflow reset-offsets` does, a new epoch at the new log's first offset and the runs of the
batches it abandons marked failed; then a batch of the new epoch must commit."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from onceflow.ledger.states import BatchState

from onceflow_dev.chaos.faults.schedule import Fault
from onceflow_dev.chaos.faults.steps import RECOVER_TIMEOUT, wait

if TYPE_CHECKING:
    from onceflow_dev.chaos.harness import Harness

# per partition, written to the new log before reset-offsets (past the committed offset, for a
# re-created topic)
PRE_RESET_RECORDS = 8


def reset_offsets(h: Harness, f: Fault, reason: str) -> int:
    """What `onceflow reset-offsets` does: a new epoch at the new log's first offset, and
    the runs of the batches it abandons marked failed in Airflow (the harness never
    clears them). Returns the last seq before the epoch."""
    from onceflow.cli.abandoned_runs import stop_abandoned_runs
    from onceflow.cli.airflow_api import AirflowNotFound
    from onceflow.kafka import broker
    from onceflow.ledger.resets import reset_offsets

    reset = reset_offsets(
        h.settings.ledger,
        h.cfg,
        lambda at: broker.snapshot(h.settings.kafka_bootstrap, h.pipeline, h.cfg.subscription, at),
        reason=reason,
    )
    for p in reset.partitions:
        h.log(
            f"  {p['topic']}[{p['partition']}]: committed {p['committed_before']} -> "
            f"restarts at {p['new_offset']} (a new epoch)"
        )
    for txid, error in stop_abandoned_runs(h.client, h.dag_id, reset.abandoned):
        if error is not None and not isinstance(error, AirflowNotFound):
            h.log(f"  could not mark the abandoned run {txid} failed: {error}")
    h.poll()
    abandoned = sorted(t for t, b in h.batches.items() if b["state"] == BatchState.ABANDONED)
    for t in abandoned:
        if t in h.runs:
            h.runs[t].abandoned = True
    f.detail["abandoned"] = abandoned
    reset_seq = max(b["seq"] for b in h.batches.values())
    h.log(f"reset done after seq {reset_seq}; abandoned {abandoned}")
    return reset_seq


def wait_new_epoch(h: Harness, f: Fault, reset_seq: int) -> Iterator[None]:
    yield from wait(
        h,
        lambda: any(
            b["seq"] > reset_seq and b["state"] == BatchState.COMMITTED for b in h.batches.values()
        ),
        RECOVER_TIMEOUT,
        "a batch of the new epoch commits",
    )
    f.recovered = f.error is None
