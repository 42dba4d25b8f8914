"""A pipeline's alerts (onceflow.airflow.alerts_trigger), parsed from a [pipelines.NAME] table.

- `alert_lag_records`: records on the broker past the committed offsets, summed over the
  partitions the ledger knows, at or above which the pipeline is lagging;
- `alert_commit_blocked_minutes`: how long a staged batch may wait for an earlier one that
  is not committed;
- `alert_no_commit_minutes`: how long the pipeline may go without a commit;
- `alert_notifier`: "module:function" returning the Airflow notifier (any BaseNotifier, e.g.
  the SMTP or Slack provider's) or a list of them, looked up like a transform; required
  with any alert;
- `alert_interval_seconds` (default 30; 1 to 3600): how often the triggerer looks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from onceflow.config.names import FUNCTION_REF_RE
from onceflow.errors import PipelineKeyError

ALERT_KEYS = (
    "alert_lag_records",
    "alert_commit_blocked_minutes",
    "alert_no_commit_minutes",
    "alert_notifier",
    "alert_interval_seconds",
)
THRESHOLD_KEYS = ALERT_KEYS[:3]


@dataclass(frozen=True)
class Alerts:
    """A pipeline's alert thresholds (None: that alert is off) and its notifier."""

    notifier: str
    lag_records: int | None = None
    commit_blocked_minutes: float | None = None
    no_commit_minutes: float | None = None
    interval_seconds: float = 30.0


def parse_alerts(source: str, name: str, raw: dict[str, Any]) -> Alerts | None:
    """The pipeline's Alerts, None without any alert; each key checked by name."""
    if not any(k in raw for k in THRESHOLD_KEYS):
        for key in ("alert_notifier", "alert_interval_seconds"):
            if key in raw:
                raise PipelineKeyError(
                    source, name, key, f"needs an alert: one of {', '.join(THRESHOLD_KEYS)}"
                )
        return None

    def number(key: str, whole: bool = False) -> Any:
        value = raw.get(key)
        if value is None:
            return None
        kinds = int if whole else int | float
        if isinstance(value, bool) or not isinstance(value, kinds) or not value > 0:
            what = "a whole number" if whole else "a number"
            raise PipelineKeyError(source, name, key, f"{value!r} is not {what} > 0")
        return value

    notifier = raw.get("alert_notifier")
    if not isinstance(notifier, str) or not FUNCTION_REF_RE.fullmatch(notifier):
        raise PipelineKeyError(
            source,
            name,
            "alert_notifier",
            f"{notifier!r} is not 'module:function' (a function returning the Airflow "
            "notifier, e.g. an SmtpNotifier, that the alerts send through)",
        )
    interval = raw.get("alert_interval_seconds", 30.0)
    if (
        isinstance(interval, bool)
        or not isinstance(interval, int | float)
        or not (1 <= interval <= 3600)
    ):
        raise PipelineKeyError(
            source, name, "alert_interval_seconds", f"{interval!r} must be seconds in [1, 3600]"
        )
    return Alerts(
        notifier=notifier,
        lag_records=number("alert_lag_records", whole=True),
        commit_blocked_minutes=number("alert_commit_blocked_minutes"),
        no_commit_minutes=number("alert_no_commit_minutes"),
        interval_seconds=float(interval),
    )
