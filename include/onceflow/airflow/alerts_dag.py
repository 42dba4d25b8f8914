"""A pipeline's alerts DAG, `onceflow_<pipeline>_alerts`: what delivers its alerts.

Scheduled on the Asset `onceflow_<pipeline>_alerts`, whose watcher (AlertsTrigger, in the
triggerer) checks the alerts; each incident that starts or clears is one asset event, and
so one run of this DAG, whose one task calls the pipeline's notifier (`alert_notifier`:
"module:function" returning any Airflow BaseNotifier, or a list of them) with the task's
context and the alert in `context["onceflow_alert"]` (pipeline, alert, state firing or
cleared, value, threshold, message). Its runs are the alerts' history in the Airflow UI; a
notifier that fails fails the task, which Airflow retries.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from airflow.sdk import DAG, Asset, AssetWatcher, BaseOperator

from onceflow.airflow.alerts_trigger import AlertsTrigger
from onceflow.airflow.watcher import watching
from onceflow.config.pipeline import PipelineConfig
from onceflow.config.pipelines_file import get_pipeline
from onceflow.errors import ConfigError
from onceflow.settings import Settings


def notifiers(spec: str) -> list[Any]:
    """The notifiers of `alert_notifier` "module:function" (its function's result, one or a
    list); ConfigError naming what is wrong."""
    from onceflow.transforms import load_module

    module = load_module(spec, "alert notifier")
    made = getattr(module, spec.partition(":")[2], None)
    if not callable(made):
        raise ConfigError(f"alert notifier {spec!r}: {module.__name__} has no such function")
    found = made()
    found = list(found) if isinstance(found, list | tuple) else [found]
    if not found or not all(callable(n) for n in found):
        raise ConfigError(
            f"alert notifier {spec!r} returned {found!r}: give an Airflow notifier "
            "(a BaseNotifier, e.g. SmtpNotifier(...)) or a list of them"
        )
    return found


class AlertNotifyOperator(BaseOperator):
    """Send each alert of the asset events that started this run through the pipeline's
    notifiers (module docstring)."""

    def __init__(self, *, pipeline: str, pipelines_file: str | None = None, **kwargs: Any):
        super().__init__(**kwargs)
        self.pipeline = pipeline
        self.pipelines_file = pipelines_file

    def execute(self, context: Any) -> list[dict[str, Any]]:
        cfg = get_pipeline(
            self.pipelines_file or Settings.from_env().pipelines_file,
            self.pipeline,
            check_references=False,
        )
        if cfg.alerts is None:
            self.log.info("pipeline %s has no alerts any more: nothing sent", cfg.name)
            return []
        sent = []
        for events in context["triggering_asset_events"].values():
            for event in events:
                # a watcher's event: Airflow keeps the trigger's payload under "payload"
                alert = dict(event.extra.get("payload", event.extra))
                for notifier in notifiers(cfg.alerts.notifier):
                    notifier({**context, "onceflow_alert": alert})
                self.log.info("sent through %s: %s", cfg.alerts.notifier, alert["message"])
                sent.append(alert)
        return sent


def build_alerts_dag(cfg: PipelineConfig, pipelines_file: str) -> DAG:
    """The pipeline's alerts DAG (module docstring); cfg.alerts must be set."""
    alerts = cfg.alerts
    assert alerts is not None
    watcher = AlertsTrigger(
        **watching(cfg),
        lag_records=alerts.lag_records,
        commit_blocked_minutes=alerts.commit_blocked_minutes,
        no_commit_minutes=alerts.no_commit_minutes,
        interval_seconds=alerts.interval_seconds,
    )
    asset = Asset(
        name=f"onceflow_{cfg.name}_alerts",
        uri=f"x-onceflow://{cfg.name}/alerts",
        watchers=[AssetWatcher(name=f"onceflow_{cfg.name}_alerts", trigger=watcher)],
    )
    with DAG(
        dag_id=cfg.alerts_dag_id,
        description=f"Alerts of Onceflow pipeline {cfg.name}, checked in the triggerer",
        schedule=[asset],
        catchup=False,
        # paused, it would leave the alerts unwatched: it runs only when an alert changes
        is_paused_upon_creation=False,
        tags=["onceflow", "onceflow-alerts"],
        default_args={"owner": "onceflow"},
    ) as dag:
        AlertNotifyOperator(
            task_id="notify",
            pipeline=cfg.name,
            pipelines_file=pipelines_file,
            retries=2,
            retry_delay=timedelta(seconds=10),
        )
    return dag
