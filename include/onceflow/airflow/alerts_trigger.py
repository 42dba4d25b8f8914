"""AlertsTrigger: a pipeline's alerts, checked in Airflow's triggerer (airflow.watcher's loop).

The pipeline's alerts DAG (`onceflow_<pipeline>_alerts`, dag_factory) is scheduled on an
Asset whose AssetWatcher runs this trigger. Every `alert_interval_seconds` it measures the
lag (the topics' end offsets past the ledger's committed offsets), how long a staged batch
has waited for an earlier one and how long since the last commit; airflow.alert_rules says
which alerts fire or clear, the ledger records each incident (ledger.alert_incidents), and
each change becomes one asset event, whose run of the alerts DAG calls the pipeline's
notifier. So an incident is notified once when it starts and once when it clears, even
across triggerer restarts.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import TriggerEvent

from onceflow.airflow.alert_rules import Measures, changes
from onceflow.airflow.watcher import Watcher
from onceflow.config.alerts import Alerts


class AlertsTrigger(Watcher):
    """Serialises the pipeline's name, topics, connection ids and thresholds only (no
    notifier: the alerts DAG's task loads it)."""

    what = "alerts watcher"

    def __init__(
        self,
        pipeline: str,
        topics: list[str],
        lag_records: int | None = None,
        commit_blocked_minutes: float | None = None,
        no_commit_minutes: float | None = None,
        interval_seconds: float = 30.0,
        ledger_conn_id: str | None = None,
        kafka_conn_id: str | None = None,
        topic_pattern: str = "",
    ) -> None:
        super().__init__(
            pipeline, topics, interval_seconds, ledger_conn_id, kafka_conn_id, topic_pattern
        )
        self.alerts = Alerts(
            "", lag_records, commit_blocked_minutes, no_commit_minutes, float(interval_seconds)
        )

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "pipeline": self.pipeline,
                "topics": self.topics,
                "lag_records": self.alerts.lag_records,
                "commit_blocked_minutes": self.alerts.commit_blocked_minutes,
                "no_commit_minutes": self.alerts.no_commit_minutes,
                "interval_seconds": self.interval_seconds,
                "ledger_conn_id": self.ledger_conn_id,
                "kafka_conn_id": self.kafka_conn_id,
                # only when set: a pipeline of listed topics hashes as it did before
                **({"topic_pattern": self.topic_pattern} if self.topic_pattern else {}),
            },
        )

    def facts(self, cur: Any) -> Any:
        from onceflow.ledger.alert_incidents import ledger_facts

        return ledger_facts(cur, self.pipeline)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        import asyncio

        from onceflow.ledger.alert_incidents import record
        from onceflow.ledger.views import total_lag

        self.log.info(
            "alerts watcher of pipeline %s: %s, looking every %.0fs",
            self.pipeline,
            self.alerts,
            self.interval_seconds,
        )
        async for ends, facts, ledger in self.looks(self.facts):
            now = Measures(
                total_lag(ends, facts.committed) if facts.committed else None,
                facts.commit_blocked_minutes,
                facts.no_commit_minutes,
            )
            for change in changes(self.alerts, now, facts.open_alerts):
                try:
                    kept = await asyncio.to_thread(
                        self.read_ledger,
                        ledger,
                        lambda cur, c=change: record(cur, self.pipeline, c),
                    )
                except Exception as e:  # noqa: BLE001 - the next look tries again
                    self.say_problem("cannot record an alert", e)
                    continue
                if kept:
                    extra = change.as_extra(self.pipeline)
                    self.log.warning("%s", extra["message"])
                    yield TriggerEvent(extra)
