"""When a pipeline runs (its `schedule`), parsed from a [pipelines.NAME] table.

- omitted: only when triggered (the UI, `onceflow trigger`, the REST API);
- a cron expression or a preset like "@hourly": Airflow's timetable;
- "continuous": the next run as soon as the last one ends (Airflow's `@continuous`, one run
  in flight), empty or not;
- "on_records": Airflow's event-driven scheduling. The triggerer watches the topics' end
  offsets against where the ledger's next plan starts (onceflow.airflow.records_trigger,
  no worker slot) and starts a run once `min_records` records are unplanned, or some have
  waited `max_wait_seconds`, looking every `watch_interval_seconds`.

A run started by any of them is an ordinary txid: its run id.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from onceflow.errors import PipelineKeyError

CONTINUOUS = "continuous"
ON_RECORDS = "on_records"
ON_RECORDS_KEYS = ("min_records", "max_wait_seconds", "watch_interval_seconds")


@dataclass(frozen=True)
class OnRecords:
    """When the watcher of an `on_records` pipeline starts a run."""

    min_records: int = 1
    max_wait_seconds: float = 60.0
    watch_interval_seconds: float = 1.0


def parse_schedule(source: str, name: str, raw: dict[str, Any]) -> dict[str, Any]:
    """PipelineConfig's `schedule`, `on_records` and `max_active_runs`, checked."""
    schedule = raw.get("schedule")
    if schedule is not None and (not isinstance(schedule, str) or not schedule.strip()):
        raise PipelineKeyError(
            source,
            name,
            "schedule",
            "give a cron expression, a preset like '@hourly', 'continuous', 'on_records', "
            "or omit it",
        )
    if schedule == "@continuous":
        schedule = CONTINUOUS
    runs = _positive_int(source, name, raw, "max_active_runs", 1 if schedule == CONTINUOUS else 3)
    if schedule == CONTINUOUS and runs != 1:
        raise PipelineKeyError(
            source,
            name,
            "max_active_runs",
            f"{runs} with schedule 'continuous': a continuous pipeline runs one at a time "
            "(omit the key); for several runs in flight use schedule 'on_records'",
        )
    if schedule != ON_RECORDS:
        for key in ON_RECORDS_KEYS:
            if key in raw:
                raise PipelineKeyError(source, name, key, "only schedule 'on_records' takes it")
        return {"schedule": schedule, "on_records": None, "max_active_runs": runs}
    min_records = _positive_int(source, name, raw, "min_records", 1)
    return {
        "schedule": schedule,
        "on_records": OnRecords(
            min_records=min_records,
            max_wait_seconds=_seconds(source, name, raw, "max_wait_seconds", 60.0, 0.0, 86400.0),
            watch_interval_seconds=_seconds(
                source, name, raw, "watch_interval_seconds", 1.0, 0.2, 600.0
            ),
        ),
        "max_active_runs": runs,
    }


def _positive_int(source: str, name: str, raw: dict[str, Any], key: str, default: int) -> int:
    value = raw.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise PipelineKeyError(source, name, key, f"{value!r} is not a positive integer")
    return value


def _seconds(
    source: str, name: str, raw: dict[str, Any], key: str, default: float, low: float, high: float
) -> float:
    value = raw.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        raise PipelineKeyError(
            source, name, key, f"{value!r} must be seconds in [{low:g}, {high:g}]"
        )
    return float(value)
