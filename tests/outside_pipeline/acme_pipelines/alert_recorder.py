"""A user's alert notifier (`alert_notifier = "acme_pipelines.alert_recorder:notifier"`): an
Airflow BaseNotifier that records each call, one JSON line per alert, in
$ONCEFLOW_HOME/alert-calls.jsonl (tests/e2e/test_alerts_e2e.py reads them)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from airflow.sdk.bases.notifier import BaseNotifier


class Recorder(BaseNotifier):
    template_fields = ("subject",)

    def __init__(self, subject: str) -> None:
        super().__init__()
        self.subject = subject

    def notify(self, context):
        alert = context["onceflow_alert"]
        line = {"subject": self.subject, "dag_id": context["dag"].dag_id, **alert}
        with (Path(os.environ["ONCEFLOW_HOME"]) / "alert-calls.jsonl").open("a") as f:
            f.write(json.dumps(line) + "\n")


def notifier() -> Recorder:
    # a template, as a team's SmtpNotifier subject would be: rendered with the task's context
    return Recorder(subject="[{{ onceflow_alert.state }}] {{ onceflow_alert.pipeline }}")
