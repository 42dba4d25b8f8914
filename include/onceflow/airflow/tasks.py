"""The plan and commit tasks. Thin: they log, call the ledger and report counts."""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime
from typing import Any

from airflow.sdk.bases.sensor import BaseSensorOperator

from onceflow import broker, ledger
from onceflow.config import get_pipeline
from onceflow.errors import CommitOrderError
from onceflow.settings import Settings

log = logging.getLogger("onceflow")


def plan_task(pipeline: str, run_id: str) -> dict[str, Any]:
    """Plan txid = run_id: replay its recorded ranges or snapshot the broker's end offsets."""
    settings = Settings.from_env()
    cfg = get_pipeline(settings.pipelines_file, pipeline)
    started = time.monotonic()
    batch = ledger.plan(
        settings.postgres_dsn,
        cfg,
        run_id,
        lambda: broker.snapshot(settings.kafka_bootstrap, cfg.name, cfg.topics),
    )
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
        run_id,
        batch.seq,
        "replayed" if batch.replayed else "planned",
        len(batch.ranges),
        upper,
        time.monotonic() - started,
    )
    return {"txid": run_id, "seq": batch.seq, "replayed": batch.replayed, "offsets": upper}


class CommitSensor(BaseSensorOperator):
    """Commit txid = run_id once seq-1 has committed; waits without holding a worker slot.

    Each poke asks the ledger which batch blocks the commit. While blocked it logs whom it
    waits for and that batch's state (on the first poke and then every minute); once free it
    runs the commit transaction (publish + mark committed + offset compare-and-set).
    """

    template_fields = ("pipeline",)

    def __init__(self, *, pipeline: str, **kwargs: Any) -> None:
        kwargs.setdefault("mode", "reschedule")
        super().__init__(**kwargs)
        self.pipeline = pipeline

    def poke(self, context: Any) -> bool:
        settings = Settings.from_env()
        cfg = get_pipeline(settings.pipelines_file, self.pipeline)
        txid = context["run_id"]
        wait = ledger.blocking_predecessor(settings.postgres_dsn, cfg.name, txid)
        if wait is not None:
            self._log_wait(context, txid, wait)
            return False
        try:
            result = ledger.commit(settings.postgres_dsn, cfg, txid)
        except CommitOrderError as e:  # a predecessor was re-opened between the check and commit
            self.log.info("%s", e)
            return False
        self.log.info(
            "onceflow commit pipeline=%s txid=%s seq=%d outcome=%s published=%d dead_lettered=%d",
            cfg.name,
            txid,
            result.seq,
            result.outcome,
            result.published,
            result.dead,
        )
        return True

    def _log_wait(self, context: Any, txid: str, wait: ledger.Wait) -> None:
        ti = context["ti"]
        start = ti.start_date or datetime.now(UTC)
        waited = (datetime.now(UTC) - start).total_seconds()
        first = waited < max(self.poke_interval, 1) * 1.5
        if first or int(waited) % 60 < max(self.poke_interval, 1):
            hint = f"; its last error: {wait.last_error}" if wait.last_error else ""
            self.log.info(
                "commit of txid %s waits for txid %s (seq %d), which is %s%s (waited %.0fs)",
                txid,
                wait.txid,
                wait.seq,
                wait.state,
                hint,
                waited,
            )
