"""Fault 12 (a pipeline of change events): the stack's Kafka Connect worker, Debezium's, killed
-9 while the shop's changes stream, and restarted. Its offsets since the last flush are lost,
so Debezium sends those changes again: the sink must absorb the repeats by their source
position (docs/cdc.md), which the run's mirror check holds it to at the end."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from onceflow_dev.chaos.cdc import resent
from onceflow_dev.chaos.faults.schedule import Fault
from onceflow_dev.chaos.faults.steps import FaultSkipped, wait_recovered
from onceflow_dev.chaos.processes import kill_tree

if TYPE_CHECKING:
    from onceflow_dev.chaos.harness import Harness

# change events before the kill searched for a repeat: a flush interval's worth and more
RESENT_WINDOW = 500


def kafka_connect_killed(h: Harness, f: Fault) -> Iterator[None]:
    from onceflow.kafka import broker

    from onceflow_dev import stack

    worker = stack.service_process(h.settings, "kafka-connect")
    if worker is None:
        raise FaultSkipped("the stack's Kafka Connect worker is not running")
    before = broker.snapshot(h.settings.kafka_bootstrap, h.pipeline, h.topics).ends
    changes = h.producer.acked_count()
    f.detail["killed_pids"] = kill_tree([worker])
    f.injected = True
    h.log(f"kill -9 of the Kafka Connect worker {f.detail['killed_pids']}; restarting it")
    h.supervisor.up()  # waits until its connector's task runs again
    f.detail["changes_before_kill"] = changes
    yield
    txid = h.trigger()  # plans what the restarted worker sent, again or anew
    f.txids.append(txid)
    yield from wait_recovered(h, f, [txid])
    after = broker.snapshot(h.settings.kafka_bootstrap, h.pipeline, h.topics).ends
    around = {tp: (max(0, e - RESENT_WINDOW), after[tp]) for tp, e in before.items()}
    f.detail["resent_changes"] = resent(h.settings.kafka_bootstrap, around)
    h.log(f"Debezium sent {f.detail['resent_changes']} change(s) again after the kill")
