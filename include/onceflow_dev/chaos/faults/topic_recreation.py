"""Fault 10: the pipeline's topic deleted and re-created while the broker keeps running, and
refilled past every partition's planned offset: plan must refuse the new log by its identity,
then reset-offsets, and the new log is processed from its first offset."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from onceflow_dev.chaos.config import PARTITIONS
from onceflow_dev.chaos.faults.reset import PRE_RESET_RECORDS, reset_offsets, wait_new_epoch
from onceflow_dev.chaos.faults.schedule import Fault
from onceflow_dev.chaos.faults.steps import INJECT_TIMEOUT, FaultSkipped, wait
from onceflow_dev.chaos.task_logs import NOT_THE_LEDGERS_LOG

if TYPE_CHECKING:
    from onceflow_dev.chaos.harness import Harness


def topic_recreated(h: Harness, f: Fault) -> Iterator[None]:
    """The pipeline's topic deleted and re-created with its partitions while the broker
    keeps running, then refilled past every partition's planned (so committed) offset
    before the next plan: by its end offsets the new log looks like the old one read on.
    That plan must refuse it (log_identity: the topic id, the record of the ledger's
    print); one that plans is a protocol failure (recreated_topic_checks). The runs in
    flight meet the new log in process or commit, as with a broker that lost its log.
    Then `onceflow reset-offsets` starts a new epoch at the new log's first offset: every
    record of it must reach the sink once; the old log's records above the committed
    offset go with it."""
    from onceflow.kafka import broker

    if max((b["seq"] for b in h.batches.values()), default=0) < 3:
        raise FaultSkipped("too few batches planned yet")
    bootstrap = h.settings.kafka_bootstrap
    # the runs triggered so far plan on the old log first, and no other run starts before
    # the refill: the offsets it must pass are then final, the next plan meets it whole
    h.hold_triggers = True
    try:
        yield from wait(h, h.all_planned, INJECT_TIMEOUT, "every run triggered planned")
        committed = {p: c for p, (c, _) in h.offsets.items()}
        planned = dict(h.planned)
        in_flight = sorted(r.run_id for r in h.unfinished())
        max_seq = max(b["seq"] for b in h.batches.values())
        old_id = broker.snapshot(bootstrap, h.pipeline, (h.topic,)).topic_ids[h.topic]
        h.hold_clears = True
        h.producer.pause()
        broker.delete_topic(bootstrap, h.topic)
        wall = time.time()
        f.injected = True
        h.epoch += 1
        h.log(
            f"topic {h.topic} (id {old_id}) deleted; committed {committed}, planned "
            f"{planned}, runs in flight {in_flight}"
        )
        # explicitly: an auto-created topic gets the broker's default partition count
        yield from wait(
            h,
            lambda: broker.create_topic(bootstrap, h.topic, PARTITIONS),
            INJECT_TIMEOUT,
            f"topic {h.topic} created again with {PARTITIONS} partitions",
        )
        per_partition = max(planned.values()) + PRE_RESET_RECORDS
        h.producer.resume(epoch=h.epoch, allowance=per_partition * PARTITIONS)
        now: dict[str, Any] = {}

        def refilled() -> bool:  # acknowledged, and past the planned offsets as plan sees
            acked = h.producer.ends_of(h.epoch)
            if any(acked.get(p, 0) < per_partition for p in range(PARTITIONS)):
                return False
            snap = broker.snapshot(bootstrap, h.pipeline, (h.topic,))
            now["id"] = snap.topic_ids[h.topic]
            now["ends"] = {p: e for (_, p), e in snap.ends.items()}
            return all(now["ends"].get(p, 0) > o for p, o in planned.items())

        yield from wait(
            h, refilled, INJECT_TIMEOUT, f"{per_partition} records in each new partition"
        )
        f.detail.update(
            seq_before=max_seq,
            committed=committed,
            planned=planned,
            records_per_partition=per_partition,
            end_offsets=now["ends"],
            topic_ids={"old": old_id, "new": now["id"]},
        )
        h.log(f"topic {h.topic} re-created (id {now['id']}), ends {now['ends']}")
        before = set(h.runs)
        h.hold_triggers = False
        refused: list[str] = []

        def planned_on() -> list[str]:
            return sorted(t for t, b in h.batches.items() if b["seq"] > max_seq)

        def met() -> bool:
            new = sorted(set(h.runs) - before)
            refused[:] = [
                r for r in new if h.task_logs.plan_log_matches(r, NOT_THE_LEDGERS_LOG, wall)
            ]
            return bool(refused or planned_on())

        yield from wait(h, met, INJECT_TIMEOUT, "the next plan refuses the new log")
        accepted = planned_on()
        f.txids.extend(refused)
        f.detail["plan_refused"] = {r: h.task_logs.task_error(r, "plan") for r in refused}
        f.detail["planned_on_new_log"] = accepted  # must stay empty
        if accepted:
            f.error = (
                f"plan accepted the re-created topic's log: {accepted} planned on from the "
                "old committed offsets, skipping the new log's records below them"
            )
            h.log(f"protocol failure: {f.error}")
        else:
            h.log(f"plan of {refused} refused the new log, as it must")
        reset_seq = reset_offsets(
            h, f, f"chaos harness: topic {h.topic} deleted and re-created (epoch {h.epoch})"
        )
        # partition: (committed before, the new epoch's first offset)
        starts = {
            p: (committed_before, new)
            for p, committed_before, new in h.db.query(
                "ledger",
                "select partition, committed_before, new_offset from onceflow.resets"
                " where pipeline = %s and topic = %s order by id desc limit %s",
                (h.pipeline, h.topic, PARTITIONS),
            )
        }
        f.detail["reset"] = starts
        f.detail["in_flight"] = {t: h.batches[t]["state"] for t in in_flight}
        if len(starts) != PARTITIONS or any(new for _, new in starts.values()):
            f.error = f.error or f"the new epoch does not start at offset 0: {starts}"
        h.producer.resume(allowance=None)
    finally:
        h.hold_triggers = False
        h.hold_clears = False
    yield from wait_new_epoch(h, f, reset_seq)
