"""Airflow plugin: the Onceflow ledger view inside Airflow's UI.

- `fastapi_apps`: the ledger pages, JSON API and Prometheus metrics at /onceflow (every route
  requires Airflow's authentication, see onceflow.ui.app.require_user).
- `external_views`: a top-level nav entry opening the ledger, and tabs on a DAG, a DAG run and
  a task instance page that open the pipeline's ledger / that txid's ledger entry (the txid is
  the run id; the pipeline comes from the DAG id `onceflow_<pipeline>`).
"""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from onceflow.ui.app import MOUNT, create_app


class OnceflowPlugin(AirflowPlugin):
    name = "onceflow"
    fastapi_apps = [{"app": create_app(), "url_prefix": MOUNT, "name": "Onceflow ledger"}]
    external_views = [
        {
            "name": "Ledger",  # the nav bar shows ~8 characters
            "href": f"{MOUNT}/",
            "destination": "nav",
            "url_route": "onceflow",
            "nav_top_level": True,
        },
        {
            "name": "Ledger",
            "href": f"{MOUNT}/dags/{{DAG_ID}}",
            "destination": "dag",
            "url_route": "onceflow-dag",
        },
        {
            "name": "Ledger entry",
            "href": f"{MOUNT}/dags/{{DAG_ID}}/runs/{{RUN_ID}}",
            "destination": "dag_run",
            "url_route": "onceflow-run",
        },
        {
            "name": "Ledger entry",
            "href": f"{MOUNT}/dags/{{DAG_ID}}/runs/{{RUN_ID}}/tasks/{{TASK_ID}}",
            "destination": "task_instance",
            "url_route": "onceflow-task",
        },
    ]
