"""The plan and maintain tasks: what PlanOperator and MaintainOperator call (tasks.py).

A refusal a retry cannot mend (data loss, an offset regression, a log that is not the
ledger's, a removed partition, a bad configuration, refused credentials, a reader schema the
sink cannot follow) ends the task at once, without retries; the broker, the ledger or the
schema registry unreachable is retried as configured.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from onceflow.compat.airflow_exceptions import AirflowFailException
from onceflow.config.pipeline import PipelineConfig
from onceflow.config.pipelines_file import get_pipeline
from onceflow.errors import (
    ConfigError,
    DataLossError,
    IncompatibleSchemaError,
    KafkaAccessError,
    LogIdentityError,
    OffsetRegressionError,
    PartitionRemovedError,
    RerunRefusedError,
)
from onceflow.hooks.ledger import ledger_of
from onceflow.hooks.registry import reader_schemas_of
from onceflow.hooks.services import services
from onceflow.hooks.sink import sink_for
from onceflow.kafka import broker
from onceflow.ledger.log_checks import BrokerSnapshot
from onceflow.ledger.planning import plan
from onceflow.ledger.states import BatchState
from onceflow.settings import Settings

log = logging.getLogger("onceflow")


def maintain_task(pipeline: str, txid: str, pipelines_file: str | None = None) -> dict[str, Any]:
    """After commit, every `maintain_every` committed batches of a lake, append or upsert sink
    (seq a multiple of it): maintain its table, or each of its tables (onceflow.maintenance),
    then prune the ledger by the pipeline's retention (onceflow.ledger.retention); other runs
    skip it."""
    from onceflow.compat.airflow_exceptions import AirflowSkipException
    from onceflow.ledger.batches import get_batch
    from onceflow.ledger.retention import prune
    from onceflow.maintenance import maintain

    cfg = get_pipeline(
        pipelines_file or Settings.from_env().pipelines_file, pipeline, check_references=False
    )
    ledger = ledger_of(cfg.ledger_conn_id, cfg.source)
    batch = get_batch(ledger, cfg.name, txid)
    every = cfg.sink.maintain_every
    if batch.state != BatchState.COMMITTED or batch.seq % every:
        raise AirflowSkipException(
            f"seq {batch.seq} ({batch.state}): the table is maintained every {every} committed "
            f"batches, next after seq {batch.seq - batch.seq % every + every}"
        )
    reports = maintain(ledger, cfg)
    pruned = prune(ledger, cfg)
    for report in reports:
        log.info(
            "onceflow maintain pipeline=%s table=%s after seq %d: %d %s -> %d (compacted %d "
            "into %d), %d snapshot(s)/version(s) expired, %d data file(s) deleted, %.1fs",
            cfg.name,
            report.table,
            batch.seq,
            report.files_before,
            report.unit,
            report.files_after,
            report.compacted,
            report.written,
            report.expired,
            report.removed,
            report.seconds,
        )
    return {"tables": [r.as_dict() for r in reports], "prune": pruned.as_dict()}


def tables_checked(cfg: PipelineConfig, snap: BrokerSnapshot) -> BrokerSnapshot:
    """`snap`, once each of its topics has its table when the pipeline has a table per topic
    (config.table_map): a pattern's topics are known only now. ConfigError naming a topic
    without one, before anything is planned."""
    if cfg.sink.tables is not None:
        cfg.sink.tables.tables(sorted(snap.topic_ids))
    return snap


def plan_task(pipeline: str, txid: str, pipelines_file: str | None = None) -> dict[str, Any]:
    """Plan txid (the run id): replay its recorded ranges, or snapshot the
    broker's end offsets and record new ones."""
    cfg = get_pipeline(
        pipelines_file or Settings.from_env().pipelines_file, pipeline, check_references=False
    )
    started = time.monotonic()
    sink = sink_for(cfg)
    try:
        svc = services(cfg)
        log.info("onceflow plan: ledger %s, Kafka %s", svc.ledger, svc.kafka.describe())
        batch = plan(
            svc.ledger,
            cfg,
            txid,
            lambda at: tables_checked(
                cfg,
                broker.snapshot(
                    svc.kafka, cfg.name, cfg.subscription, at, starting_time_ms=cfg.starting_time_ms
                ),
            ),
            sink,
            reader_schemas_of(cfg),
        )
    except (
        DataLossError,
        OffsetRegressionError,
        LogIdentityError,
        PartitionRemovedError,
        ConfigError,
        KafkaAccessError,
        IncompatibleSchemaError,
    ) as e:
        # The broker's state, the configuration or the connection's credentials must change
        # first: retrying replans the same (or knocks at the broker's door again).
        raise AirflowFailException(f"onceflow plan txid={txid}: {e}") from e
    if batch.replayed and batch.state == BatchState.COMMITTED:
        try:  # a re-run: refused before anything is processed if the sink is append-only
            sink.refuse_rerun(cfg.name, txid, batch.seq)
        except RerunRefusedError as e:
            raise AirflowFailException(f"onceflow plan txid={txid}: {e}") from e
    for r in batch.ranges:
        log.info(
            "range %s[%d] [%d, %d) up to %d records",
            r.topic,
            r.partition,
            r.from_offset,
            r.until_offset,
            r.size,
        )
    for loss in batch.losses:
        log.warning(
            "loss event %s[%d] [%d, %d): deleted before processing, skipped by policy on_data_loss=skip",
            loss.topic,
            loss.partition,
            loss.from_offset,
            loss.until_offset,
        )
    upper = sum(r.size for r in batch.ranges)
    log.info(
        "onceflow plan pipeline=%s txid=%s seq=%d %s ranges=%d offsets=%d seconds=%.2f",
        cfg.name,
        txid,
        batch.seq,
        "replayed" if batch.replayed else BatchState.PLANNED,
        len(batch.ranges),
        upper,
        time.monotonic() - started,
    )
    return {"txid": txid, "seq": batch.seq, "replayed": batch.replayed, "offsets": upper}
