"""Plan: a txid's ranges, recorded once and replayed on every retry.

Serialised per pipeline by a row lock on the pipeline, held while the broker is asked, so
two planners can never hand out overlapping ranges or the same seq. The offset arithmetic
is onceflow.ranges.plan_ranges (pure); the log checks are ledger.log_checks.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from onceflow.config.pipeline import PipelineConfig
from onceflow.formats.registry_client import RegisteredSchema
from onceflow.ledger.batches import Batch, ensure_pipeline, read_batch
from onceflow.ledger.db import transaction
from onceflow.ledger.frontier import last_batch, next_plan_starts
from onceflow.ledger.log_checks import Snapshot, ledger_logs, prints_at, verify_logs
from onceflow.ledger.reader_schemas import record_reader_schemas
from onceflow.ledger.transitions import move
from onceflow.ranges import plan_ranges
from onceflow.sinks.base import Sink
from onceflow.states import BatchState, Step


def plan(
    dsn: str,
    cfg: PipelineConfig,
    txid: str,
    snapshot: Snapshot,
    sink: Sink,
    reader_schemas: Callable[[], dict[str, RegisteredSchema]] | None = None,
) -> Batch:
    """Plan txid: replay its recorded ranges, or snapshot the broker and record new ones,
    once every partition's log is proven the one the ledger read (verify_logs). A registry
    format's new txid with records to read also records its reader schemas,
    `reader_schemas()` (ledger.reader_schemas)."""
    started = time.monotonic()
    ensure_pipeline(dsn, cfg, sink)
    with transaction(dsn) as cur:
        cur.execute("select name from onceflow.pipelines where name = %s for update", (cfg.name,))
        recorded = read_batch(cur, cfg.name, txid, replayed=True)
        if recorded is not None:
            return recorded

        last = last_batch(cur, cfg.name)
        seq = (last[1] if last else 0) + 1
        previous = next_plan_starts(cur, cfg.name, last)

        logs = ledger_logs(cur, cfg.name)
        snap = snapshot(prints_at(logs))
        verify_logs(cfg.name, logs, snap)
        planned = plan_ranges(
            cfg.name,
            previous,
            snap.beginnings,
            snap.ends,
            starting_position="time" if cfg.starting_time_ms is not None else cfg.starting_position,  # type: ignore[arg-type]
            at_time=snap.at_time,
            max_records_per_partition=cfg.max_records_per_partition,
            on_data_loss=cfg.on_data_loss,
        )
        move(
            cur,
            cfg.name,
            txid,
            Step.PLAN,
            {"seq": seq, "plan_seconds": time.monotonic() - started},
        )
        new = set(planned.new_partitions)
        for r in planned.ranges:
            if r.tp in new:
                cur.execute(
                    "insert into onceflow.offsets (pipeline, topic, partition, start_offset,"
                    " committed_offset, topic_id) values (%s, %s, %s, %s, %s, %s)"
                    " on conflict do nothing",
                    (
                        cfg.name,
                        r.topic,
                        r.partition,
                        r.from_offset,
                        r.from_offset,
                        snap.topic_ids.get(r.topic),
                    ),
                )
        for topic, topic_id in snap.topic_ids.items():  # ledgers older than topic ids
            if topic_id:
                cur.execute(
                    "update onceflow.offsets set topic_id = %s"
                    " where pipeline = %s and topic = %s and topic_id is null",
                    (topic_id, cfg.name, topic),
                )
        for r in planned.ranges:
            cur.execute(
                "insert into onceflow.ranges (pipeline, txid, topic, partition, from_offset,"
                " until_offset, epoch) select %s, %s, %s, %s, %s, %s, coalesce((select epoch"
                " from onceflow.offsets where pipeline = %s and topic = %s and partition = %s), 0)",
                (
                    cfg.name,
                    txid,
                    r.topic,
                    r.partition,
                    r.from_offset,
                    r.until_offset,
                    cfg.name,
                    r.topic,
                    r.partition,
                ),
            )
        if reader_schemas is not None and any(r.size for r in planned.ranges):
            record_reader_schemas(cur, cfg, txid, reader_schemas)
        for loss in planned.losses:
            cur.execute(
                "insert into onceflow.loss_events (pipeline, txid, topic, partition, from_offset,"
                " until_offset) values (%s, %s, %s, %s, %s, %s)",
                (cfg.name, txid, loss.topic, loss.partition, loss.from_offset, loss.until_offset),
            )
        return Batch(txid, seq, BatchState.PLANNED, planned.ranges, planned.losses)
