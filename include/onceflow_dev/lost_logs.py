"""Whether the broker still holds the logs every pipeline's ledger read, asked of all the
pipelines at once: what `onceflow-dev up` reports after starting the stack and what
`onceflow-dev demo` checks before it produces.

The rules are plan's (ledger.log_checks.log_lost: plan_ranges' offset regression, ledger.log_checks.verify_logs with
log_identity); this only asks them early, so that a lost log is said in the operator's words when the stack
comes up, not first as a failed plan task.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from onceflow.config.pipeline import PipelineConfig
from onceflow.errors import TopicMissingError
from onceflow.kafka.client import KafkaCluster
from onceflow.ledger.db import Ledger, transaction


@dataclass(frozen=True)
class LostLog:
    """A partition whose log is not the one the pipeline's ledger read (partition None: the
    whole topic is gone)."""

    pipeline: str
    topic: str
    partition: int | None
    why: str  # in the operator's words


def lost_logs(
    ledger: Ledger, bootstrap: KafkaCluster | str, cfgs: Iterable[PipelineConfig]
) -> list[LostLog]:
    """Per pipeline with a ledger, the partitions whose log the broker no longer holds."""
    from onceflow.kafka import broker
    from onceflow.ledger.log_checks import ledger_logs, log_lost, prints_at

    out: list[LostLog] = []
    for cfg in cfgs:
        with transaction(ledger) as cur:
            logs = ledger_logs(cur, cfg.name)
        if not logs:
            continue
        try:
            snap = broker.snapshot(bootstrap, cfg.name, cfg.subscription, prints_at(logs))
        except TopicMissingError as e:
            committed = ", ".join(
                f"{p}: {k.committed_offset}" for (t, p), k in sorted(logs.items()) if t == e.topic
            )
            out.append(
                LostLog(
                    cfg.name,
                    e.topic,
                    None,
                    f"the broker has no topic {e.topic!r}; the ledger committed its partitions "
                    f"up to offsets {{{committed}}}",
                )
            )
            continue
        for tp, known in sorted(logs.items()):
            why = log_lost(cfg.name, tp, known, snap)
            if why is not None:
                out.append(LostLog(cfg.name, tp[0], tp[1], why))
    return out
