"""Fault 8: a committed run cleared and re-run by run id through Airflow's API (a backfill by
run id): a sink that replaces its output republishes the same output; an append-only sink (a
Kafka topic) must refuse it in plan, the batch and its output staying as they were."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from onceflow.ledger.states import BatchState

from onceflow_dev.chaos.faults.schedule import Fault
from onceflow_dev.chaos.faults.steps import RECOVER_TIMEOUT, FaultSkipped, wait

if TYPE_CHECKING:
    from onceflow_dev.chaos.harness import Harness

# seconds a cleared run may show success with unrun tasks before it is cleared again
CLEAR_LOST_S = 30.0


def rerun(h: Harness, f: Fault) -> Iterator[None]:
    if not h.sink.replaces_output:
        yield from rerun_refused(h, f)
        return
    txid, before, rows_before = _rerun_target(h, f)
    h.clear(txid, "re-run of a committed run by run id (backfill)")
    f.injected = True
    f.detail["published_attempt_before"] = before["published_attempt"]
    cleared = time.monotonic()

    def republished() -> bool:
        nonlocal cleared
        if (h.batches[txid]["published_attempt"] or 0) > before["published_attempt"]:
            return h.runs[txid].state == "success"
        lost = h.runs[txid].state == "success" and all(
            state is None for (r, _), (state, _) in h.ti.items() if r == txid
        )
        if lost and time.monotonic() - cleared > CLEAR_LOST_S:  # the clear lost a race
            f.detail["cleared_again"] = f.detail.get("cleared_again", 0) + 1
            h.clear(txid, "the re-run's clear was lost: the run is success, its tasks unrun")
            cleared = time.monotonic()
        return False

    yield from wait(h, republished, RECOVER_TIMEOUT, f"re-run of {txid} republished")
    after = h.batches[txid]
    rows_after = _published(h, txid)
    f.detail["published_attempt_after"] = after["published_attempt"]
    f.detail["rows"] = [rows_before, rows_after]
    same = all(after[k] == before[k] for k in ("records_out", "records_dead", "checksum"))
    if same and rows_before == rows_after:
        f.recovered = True
    else:
        f.error = (
            f"re-run changed the output: {before} -> {after}, rows {rows_before} -> {rows_after}"
        )


def rerun_refused(h: Harness, f: Fault) -> Iterator[None]:
    """A re-run of a committed txid into an append-only sink (a Kafka topic): plan must
    refuse it (the run fails, its log saying the sink is append-only), the batch stays
    committed as it was and the sink's output of the txid does not change. The run is
    left failed: clearing it again would be refused again."""
    txid, before, rows_before = _rerun_target(h, f)
    h.runs[txid].refused = True
    wall = time.time()
    h.clear(txid, "re-run of a committed run by run id: the append-only sink must refuse")
    f.injected = True
    yield from wait(
        h,
        lambda: h.runs[txid].state == "failed",
        RECOVER_TIMEOUT,
        f"re-run of {txid} refused (the run fails)",
    )
    said = h.task_logs.plan_log_matches(txid, "append-only", wall)
    after = h.batches[txid]
    rows_after = _published(h, txid)
    kept = ("state", "published_attempt", "records_out", "records_dead", "checksum")
    same = all(after[k] == before[k] for k in kept)
    f.detail["plan_refused"] = said
    f.detail["rows"] = [rows_before, rows_after]
    f.detail["published_attempt"] = after["published_attempt"]
    if said and same and rows_before == rows_after:
        f.recovered = True
    else:
        f.error = (
            f"refusal in the plan log: {said}; batch {before} -> {after}; "
            f"output {rows_before} -> {rows_after}"
        )


def _rerun_target(h: Harness, f: Fault) -> tuple[str, dict[str, Any], tuple[int, int]]:
    """A committed run of the current epoch that no fault uses, picked to be re-run by
    run id and counted as `f`'s: its txid, its batch and its output before the re-run."""
    epoch_txids = _current_epoch_committed(h)
    busy = {t for fault in h.faults for t in fault.txids}
    # a run the scheduler has marked done: one cleared while its commit's end is still being
    # recorded can be marked success over the clear, its tasks left without a state
    candidates = sorted(
        t for t in epoch_txids if t in h.runs and t not in busy and h.runs[t].state == "success"
    )
    if not candidates:
        raise FaultSkipped("no committed run of the current epoch to re-run")
    txid = h.rng.choice(candidates)
    before = dict(h.batches[txid])
    rows_before = _published(h, txid)
    f.txids.append(txid)
    return txid, before, rows_before


def _current_epoch_committed(h: Harness) -> set[str]:
    rows = h.db.query(
        "ledger",
        "select b.txid from onceflow.batches b where b.pipeline = %s and b.state = %s"
        " and not exists (select 1 from onceflow.ranges r join onceflow.offsets o"
        " using (pipeline, topic, partition) where r.pipeline = b.pipeline and r.txid = b.txid"
        " and r.epoch <> o.epoch)",
        (h.pipeline, BatchState.COMMITTED),
    )
    return {r[0] for r in rows}


def _published(h: Harness, txid: str) -> tuple[int, int]:
    """(records the sink's output of txid accounts for, its dead letters)."""
    from onceflow.ledger.db import transaction

    # in a transaction: an Iceberg sink reads its scan through a temporary table
    with transaction(h.settings.ledger) as cur:
        rows = h.sink.published_per_txid(cur).get(txid, 0)
    dead = h.db.query(
        "ledger",
        "select count(*) from onceflow.dead_letters where pipeline = %s and txid = %s",
        (h.pipeline, txid),
    )[0][0]
    return int(rows), int(dead)
