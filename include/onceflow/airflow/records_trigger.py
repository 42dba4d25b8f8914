"""RecordsArrivedTrigger: the watcher of an `on_records` pipeline, in Airflow's triggerer.

The pipeline's DAG is scheduled on an Asset whose AssetWatcher runs this trigger (Airflow 3
event-driven scheduling). It runs for as long as the DAG exists; every
`watch_interval_seconds` it reads the topics' end offsets (kafka.end_offsets: one ListOffsets
request) and where the ledger's next plan starts (ledger.frontier: one query), and yields an
event when airflow.arrivals says a run is due. Airflow turns each event into an asset
event, and the scheduler into a run whose run id is the txid, planned like any other.

No task process is started while the topics are quiet. The loop, and what it does when the
broker or the ledger is unavailable, is airflow.watcher's.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import TriggerEvent

from onceflow.airflow.arrivals import ArrivalWatch
from onceflow.airflow.watcher import Watcher
from onceflow.config.schedule import OnRecords
from onceflow.ranges import TopicPartition


class RecordsArrivedTrigger(Watcher):
    """Serialises the pipeline's name, topics, connection ids and `on_records` rule only: no
    credentials land in the trigger table, and the same pipeline always hashes to the same
    watcher (Airflow keeps one per hash)."""

    what = "on_records watcher"

    def __init__(
        self,
        pipeline: str,
        topics: list[str],
        min_records: int = 1,
        max_wait_seconds: float = 60.0,
        watch_interval_seconds: float = 1.0,
        ledger_conn_id: str | None = None,
        kafka_conn_id: str | None = None,
        topic_pattern: str = "",
    ) -> None:
        super().__init__(
            pipeline,
            topics,
            float(watch_interval_seconds),
            ledger_conn_id,
            kafka_conn_id,
            topic_pattern,
        )
        self.rule = OnRecords(
            int(min_records), float(max_wait_seconds), float(watch_interval_seconds)
        )

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
                # only when set: a pipeline of listed topics hashes as it did before
                **({"topic_pattern": self.topic_pattern} if self.topic_pattern else {}),
            },
        )

    def plan_starts(self, cur: Any) -> dict[TopicPartition, int] | None:
        """Where the ledger's next plan starts (None: never planned)."""
        from onceflow.ledger.frontier import last_batch, next_plan_starts

        last = last_batch(cur, self.pipeline)
        starts = next_plan_starts(cur, self.pipeline, last)
        return starts if last or starts else None

    async def run(self) -> AsyncIterator[TriggerEvent]:
        watch = ArrivalWatch(self.rule)
        self.log.info(
            "on_records watcher of pipeline %s: topics %s, a run at %d record(s) or after "
            "%.0fs of waiting, looking every %.1fs",
            self.pipeline,
            ", ".join(map(str, self.subscription)),
            self.rule.min_records,
            self.rule.max_wait_seconds,
            self.rule.watch_interval_seconds,
        )
        async for ends, starts, _ in self.looks(self.plan_starts):
            start = watch.look(time.monotonic(), ends, starts)
            if start is not None:
                self.log.info(
                    "on_records watcher of pipeline %s: a run is due: %s",
                    self.pipeline,
                    start.reason,
                )
                yield TriggerEvent({"pipeline": self.pipeline, **start.as_extra()})
