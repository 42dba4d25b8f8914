"""RecordsArrivedTrigger: the watcher of an `on_records` pipeline, in Airflow's triggerer.

The pipeline's DAG is scheduled on an Asset whose AssetWatcher runs this trigger (Airflow 3
event-driven scheduling). It runs for as long as the DAG exists; every
`watch_interval_seconds` it reads the topics' end offsets (kafka.end_offsets: one ListOffsets
request) and where the ledger's next plan starts (ledger.frontier: one query), and yields an
event when airflow.arrivals says a run is due. Airflow turns each event into an asset
event, and the scheduler into a run whose run id is the txid, planned like any other.

No worker slot is held, and no task process is started while the topics are quiet. The
broker, the ledger or a connection being unavailable is logged and looked at again; never
fatal, since a trigger that ended would leave the pipeline without runs.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseEventTrigger, TriggerEvent

from onceflow.airflow.arrivals import ArrivalWatch
from onceflow.config.schedule import OnRecords
from onceflow.ranges import TopicPartition

#: how often an unavailable broker or ledger is logged again while it stays so, in seconds
PROBLEM_LOG_EVERY = 60.0


class RecordsArrivedTrigger(BaseEventTrigger):
    """Serialises the pipeline's name, topics, connection ids and `on_records` rule only: no
    credentials land in the trigger table, and the same pipeline always hashes to the same
    watcher (Airflow keeps one per hash)."""

    def __init__(
        self,
        pipeline: str,
        topics: list[str],
        min_records: int = 1,
        max_wait_seconds: float = 60.0,
        watch_interval_seconds: float = 1.0,
        ledger_conn_id: str | None = None,
        kafka_conn_id: str | None = None,
    ) -> None:
        super().__init__()
        self.pipeline = pipeline
        self.topics = list(topics)
        self.rule = OnRecords(
            int(min_records), float(max_wait_seconds), float(watch_interval_seconds)
        )
        self.ledger_conn_id = ledger_conn_id
        self.kafka_conn_id = kafka_conn_id
        self._conn: Any = None
        self._problem: tuple[str, float] | None = None

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "pipeline": self.pipeline,
                "topics": self.topics,
                "min_records": self.rule.min_records,
                "max_wait_seconds": self.rule.max_wait_seconds,
                "watch_interval_seconds": self.rule.watch_interval_seconds,
                "ledger_conn_id": self.ledger_conn_id,
                "kafka_conn_id": self.kafka_conn_id,
            },
        )

    def plan_starts(self, dsn: str) -> dict[TopicPartition, int] | None:
        """Where the ledger's next plan starts (None: never planned); blocking, in a thread,
        on one connection kept for the watcher's life."""
        from onceflow.ledger.db import connect, transaction
        from onceflow.ledger.frontier import last_batch, next_plan_starts

        if self._conn is None or self._conn.closed:
            self._conn = connect(dsn)
        try:
            with transaction(self._conn) as cur:
                last = last_batch(cur, self.pipeline)
                starts = next_plan_starts(cur, self.pipeline, last)
                return starts if last or starts else None
        except Exception:
            self._conn.close()
            raise

    def _say_problem(self, what: str, e: BaseException) -> None:
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        text = f"{what} ({type(e).__name__}: {first})"
        if (
            self._problem is None
            or self._problem[0] != text
            or (time.monotonic() - self._problem[1] >= PROBLEM_LOG_EVERY)
        ):
            self.log.warning(
                "on_records watcher of pipeline %s: %s; looking again in %.0fs",
                self.pipeline,
                text,
                self.rule.watch_interval_seconds,
            )
            self._problem = (text, time.monotonic())

    async def run(self) -> AsyncIterator[TriggerEvent]:
        from onceflow.hooks.kafka import kafka_cluster_async
        from onceflow.hooks.ledger import ledger_dsn_async
        from onceflow.kafka.end_offsets import EndOffsets

        who = f"the on_records watcher of pipeline {self.pipeline!r}"
        watch = ArrivalWatch(self.rule)
        ends_reader: EndOffsets | None = None
        dsn: str | None = None
        self.log.info(
            "on_records watcher of pipeline %s: topics %s, a run at %d record(s) or after "
            "%.0fs of waiting, looking every %.1fs",
            self.pipeline,
            ", ".join(self.topics),
            self.rule.min_records,
            self.rule.max_wait_seconds,
            self.rule.watch_interval_seconds,
        )
        try:
            while True:
                try:
                    if dsn is None:
                        dsn = await ledger_dsn_async(self.ledger_conn_id, who)
                    if ends_reader is None:
                        cluster = await kafka_cluster_async(self.kafka_conn_id, who)
                        ends_reader = EndOffsets(cluster, tuple(self.topics))
                    ends, missing = await asyncio.to_thread(ends_reader.read)
                    if missing:
                        raise LookupError(f"the broker has no topic {', '.join(missing)} yet")
                    starts = await asyncio.to_thread(self.plan_starts, dsn)
                except asyncio.CancelledError:
                    raise
                except Exception as e:  # noqa: BLE001 - logged, looked at again
                    self._say_problem("cannot look", e)
                    if ends_reader is not None and not isinstance(e, LookupError):
                        await asyncio.to_thread(ends_reader.close)
                        ends_reader = None
                    await asyncio.sleep(self.rule.watch_interval_seconds)
                    continue
                if self._problem is not None:
                    self.log.info("on_records watcher of pipeline %s: looking again", self.pipeline)
                    self._problem = None
                start = watch.look(time.monotonic(), ends, starts)
                if start is not None:
                    self.log.info(
                        "on_records watcher of pipeline %s: a run is due: %s",
                        self.pipeline,
                        start.reason,
                    )
                    yield TriggerEvent({"pipeline": self.pipeline, **start.as_extra()})
                await asyncio.sleep(self.rule.watch_interval_seconds)
        finally:
            if ends_reader is not None:
                ends_reader.close()
            if self._conn is not None:
                self._conn.close()
