"""Fault 7: the stack's broker killed -9 and restarted, on its log (log_kept: nothing may be
lost, no plan may refuse the log) or on a new, empty one after its log folder is deleted
(log_lost: plan must refuse the new log, then reset-offsets)."""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

from onceflow.ledger.states import BatchState
from onceflow.sinks.kafka.sink import KafkaSink

from onceflow_dev.chaos.config import PARTITIONS
from onceflow_dev.chaos.faults.reset import PRE_RESET_RECORDS, reset_offsets, wait_new_epoch
from onceflow_dev.chaos.faults.schedule import Fault
from onceflow_dev.chaos.faults.steps import (
    INJECT_TIMEOUT,
    FaultSkipped,
    newest_seq,
    runs_go_on,
    trigger_until_fired,
    wait,
    wait_recovered,
)
from onceflow_dev.chaos.processes import kill_tree

if TYPE_CHECKING:
    from onceflow_dev.chaos.harness import Harness

# seconds between killing the broker and restarting it on a new log: plans in flight record
# their batches
PLAN_SETTLE_S = 3.0
# the broker fault with its log kept: how long the Spark task (or, for a Kafka sink, the
# commit with its Kafka transaction open) stalls, long enough for the kill -9 to land inside it
BROKER_KILL_STALL_S = 20


def broker_restart(h: Harness, f: Fault) -> Iterator[None]:
    if f.variant == "log_lost":
        yield from broker_lost(h, f)
    else:
        yield from broker_killed(h, f)


def kill_broker(h: Harness, point: str | None = None) -> tuple[int, str]:
    """kill -9 of a broker of the stack, the JVM its pid file names: its only one; on three
    brokers (ONCEFLOW_KAFKA_BROKERS=3), the one whose death moves what `point` is in the
    middle of: for a Kafka sink's commit (its transaction open), the coordinator of the
    pipeline's transactions; else the leader of the source's partition 0, which process
    reads. Returns (its PID, its service)."""
    from onceflow.sinks.kafka.transaction import transactional_id

    from onceflow_dev import stack
    from onceflow_dev.apache_kafka import leader_of, transaction_coordinator

    name = "broker"
    if h.settings.kafka_brokers > 1:
        bootstrap = h.settings.kafka_bootstrap
        if point == "commit.before_sink_commit":
            node = transaction_coordinator(bootstrap, transactional_id(h.pipeline))
        else:
            node = leader_of(bootstrap, h.topics[0], 0)
        name = stack.broker_service(node)
    proc = stack.service_process(h.settings, name)
    if proc is None:
        raise FaultSkipped(f"the stack's {name} is not running")
    kill_tree([proc])
    return proc.pid, name


def broker_killed(h: Harness, f: Fault) -> Iterator[None]:
    """The stack's broker killed -9 and restarted on its log, while a Spark task of a run
    stalls after committing its part (the job's other tasks read from the broker, its
    driver asks for the topic ids after the job) or, for a Kafka topic sink, while a
    commit's Kafka transaction is open (its records produced, not committed). Nothing may
    be lost: no plan refuses the log (task_logs.PLAN_REFUSALS), the broker's end offsets
    still hold every acknowledged record, and the run (failed or not) and the runs after it
    commit."""
    from onceflow.kafka import broker

    if isinstance(h.sink, KafkaSink):
        point, what = "commit.before_sink_commit", " of {txid} (Kafka transaction open)"
    else:
        point, what = "stage.after_part_commit", " of {txid} (its job still running)"
    txid = yield from trigger_until_fired(h, f, point, f"sleep:{BROKER_KILL_STALL_S}", point + what)
    h.producer.pause()  # every record in flight acknowledged before the kill
    acked = h.producer.ends_of(h.epoch)
    wall = time.time()
    max_seq = newest_seq(h)
    t0 = time.monotonic()
    try:
        pid, name = kill_broker(h, point)
        f.injected = True
        fired = h.failpoints.fired_at(point, txid)
        # the kill landed inside the stall (for a Kafka sink: its transaction still open)
        f.detail["killed_pid"] = pid
        f.detail["killed_service"] = name
        f.detail["killed_after_fire_s"] = fired and round(wall - fired, 1)
        f.detail["inside_stall"] = bool(fired) and wall - fired < BROKER_KILL_STALL_S
        h.log(f"kill -9 {name} (pid {pid}) at {point} of {txid}; restarting it on its log")
        h.supervisor.up()
    finally:
        h.producer.resume()
    f.detail["restart_s"] = round(time.monotonic() - t0, 1)
    f.detail["seq_before"] = max_seq
    ends: dict[int, int] = {}

    def answers() -> bool:  # its partitions may have no leader for a moment
        snap = broker.snapshot(h.settings.kafka_bootstrap, h.pipeline, h.topics)
        ends.update({p: e for (_, p), e in snap.ends.items()})
        return True

    yield from wait(h, answers, INJECT_TIMEOUT, "the restarted broker's end offsets")
    short = {p: (ends.get(p), e) for p, e in acked.items() if ends.get(p, 0) < e}
    f.detail["log_kept"] = not short
    if short:
        f.error = f"the restarted broker lost acknowledged records: (end, acked) {short}"
    h.log(f"broker back on its log ({f.detail['restart_s']}s); ends {ends}")

    yield from wait_recovered(h, f, [txid])
    refusals = yield from runs_go_on(h, max_seq, wall)
    f.detail["plan_refusals"] = refusals  # must stay empty: the log was kept
    if refusals or f.error:
        f.recovered = False
        f.error = f.error or f"plan refused the log after the restart: {refusals}"


def broker_lost(h: Harness, f: Fault) -> Iterator[None]:
    """A lost broker: the stack's broker killed -9 and its log folder deleted, then
    started again on a new, empty log (a new cluster), the topic created anew and a few
    records written to it. Plan must refuse the new log (task_logs.PLAN_REFUSALS: its topic
    id is not the ledger's, or it ends below the committed offset) and nothing may be planned
    on it; then `onceflow reset-offsets` starts a new epoch. The acknowledged records the
    old log held above the committed offset go with it (lost_with_broker)."""
    from onceflow.kafka import broker

    from onceflow_dev import stack

    max_seq = newest_seq(h)
    if max_seq < 3:
        raise FaultSkipped("too few batches planned yet")
    bootstrap = h.settings.kafka_bootstrap
    h.hold_clears = True
    try:
        h.producer.pause()
        wall = time.time()
        pid, _ = kill_broker(h)  # the one node: a cluster never loses a log this way
        # a plan that took its snapshot of the old log just before the kill records its
        # batch a moment later: wait for it with no broker up (no plan can start on the
        # new log meanwhile), then count every batch recorded by now as the old log's
        time.sleep(PLAN_SETTLE_S)
        max_seq = h.db.query(
            "ledger",
            "select coalesce(max(seq), 0) from onceflow.batches where pipeline = %s",
            (h.pipeline,),
        )[0][0]
        folder = stack.broker_log_dir(h.settings)
        shutil.rmtree(folder)
        h.log(f"kill -9 broker (pid {pid}), {folder} deleted: restarting it on a new log")
        h.supervisor.up()
        f.injected = True
        h.epoch += 1
        f.detail["seq_before"] = max_seq

        def created() -> bool:  # explicitly: the stack's broker auto-creates no topic
            broker.create_topic(bootstrap, h.topic, PARTITIONS)  # False: it exists
            snap = broker.snapshot(bootstrap, h.pipeline, (h.topic,))
            return len(snap.ends) == PARTITIONS

        yield from wait(h, created, INJECT_TIMEOUT, f"topic {h.topic} created on the new log")
        h.producer.resume(epoch=h.epoch, allowance=PRE_RESET_RECORDS * PARTITIONS)
        before = set(h.runs)
        seen: list[tuple[str, str]] = []

        def refused() -> bool:
            for run_id in sorted(set(h.runs) - before) + sorted(before):
                if how := h.task_logs.plan_refused_log(run_id, wall):
                    seen.append((run_id, how))
                    return True
            return False

        yield from wait(h, refused, INJECT_TIMEOUT, "a plan refuses the broker's new log")
        new_plans = [
            b["txid"]
            for b in h.batches.values()
            if b["seq"] > max_seq and b["state"] != BatchState.ABANDONED
        ]
        run_id, how = seen[0]
        f.detail["plan_refused"] = {"run": run_id, "with": how}
        f.detail["batches_planned_after_restart"] = new_plans  # must stay empty
        if new_plans:
            f.error = f"batches planned after the broker lost its log: {new_plans}"
        h.log(f"plan of {run_id} refused the new log ({how}), as it must")
        reset_seq = reset_offsets(h, f, f"chaos harness: the broker lost its log (epoch {h.epoch})")
        h.producer.resume(allowance=None)
    finally:
        h.hold_clears = False
    yield from wait_new_epoch(h, f, reset_seq)
