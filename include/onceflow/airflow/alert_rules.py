"""When a pipeline's alert fires and when it clears: the rule, pure. The trigger measures
(onceflow.airflow.alerts_trigger), the ledger keeps each incident open until it clears
(onceflow.ledger.alert_incidents), so that each is notified once when it starts and once when
it ends.

An alert fires when its value reaches its threshold and no incident of it is open; it clears
when the value is below the threshold again. A value that cannot be measured (the broker
unavailable for lag, a pipeline never planned) changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from onceflow.config.alerts import Alerts

LAG = "lag"
COMMIT_BLOCKED = "commit_blocked"
NO_COMMIT = "no_commit"
UNITS = {LAG: "records", COMMIT_BLOCKED: "minutes", NO_COMMIT: "minutes"}
KEYS = {
    LAG: "alert_lag_records",
    COMMIT_BLOCKED: "alert_commit_blocked_minutes",
    NO_COMMIT: "alert_no_commit_minutes",
}


@dataclass(frozen=True)
class Measures:
    """A pipeline's values now; None where they cannot be measured."""

    lag_records: int | None
    commit_blocked_minutes: float | None  # 0 when no staged batch waits
    no_commit_minutes: float | None  # since its last commit (or its first plan)

    def value(self, alert: str) -> float | None:
        return {
            LAG: self.lag_records,
            COMMIT_BLOCKED: self.commit_blocked_minutes,
            NO_COMMIT: self.no_commit_minutes,
        }[alert]


@dataclass(frozen=True)
class Change:
    """An alert that fires or clears."""

    alert: str
    state: Literal["firing", "cleared"]
    value: float
    threshold: float

    def message(self, pipeline: str) -> str:
        unit = UNITS[self.alert]
        shown = f"{self.value:,.0f}" if unit == "records" else f"{self.value:,.1f}"
        what = {
            LAG: f"lag {shown} records past the committed offsets",
            COMMIT_BLOCKED: f"a staged batch has waited {shown} minutes for an earlier one",
            NO_COMMIT: f"no commit for {shown} minutes",
        }[self.alert]
        if self.state == "firing":
            return (
                f"onceflow pipeline {pipeline}: {what} (>= {KEYS[self.alert]} {self.threshold:g})"
            )
        return f"onceflow pipeline {pipeline}: cleared: {what} (< {KEYS[self.alert]} {self.threshold:g})"

    def as_extra(self, pipeline: str) -> dict:
        """The asset event's extra, which the alerts DAG's task hands to the notifier."""
        return {
            "pipeline": pipeline,
            "alert": self.alert,
            "state": self.state,
            "value": self.value,
            "threshold": self.threshold,
            "message": self.message(pipeline),
        }


def thresholds(alerts: Alerts) -> dict[str, float]:
    """The pipeline's alerts that are on, with their thresholds."""
    set_ = {
        LAG: alerts.lag_records,
        COMMIT_BLOCKED: alerts.commit_blocked_minutes,
        NO_COMMIT: alerts.no_commit_minutes,
    }
    return {alert: float(t) for alert, t in set_.items() if t is not None}


def changes(alerts: Alerts, now: Measures, open_: set[str]) -> list[Change]:
    """The alerts that fire or clear given the values `now` and the incidents open."""
    out = []
    for alert, threshold in thresholds(alerts).items():
        value = now.value(alert)
        if value is None:
            continue
        if value >= threshold and alert not in open_:
            out.append(Change(alert, "firing", float(value), threshold))
        elif value < threshold and alert in open_:
            out.append(Change(alert, "cleared", float(value), threshold))
    return out
