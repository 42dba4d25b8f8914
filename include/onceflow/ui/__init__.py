"""The Onceflow ledger UI and API, served inside Airflow's api-server by onceflow_plugin."""

from onceflow.ui.app import MOUNT, create_app

__all__ = ["MOUNT", "create_app"]
