"""Where the ledger pages link to: this app's own pages and JSON (under the mount path, so a
base_url prefix works) and Airflow's DAG, run and task pages."""

from __future__ import annotations

from urllib.parse import quote


class Links:
    """URLs of this app (under `root`, the mount path) and of Airflow's UI (under `airflow`)."""

    def __init__(self, root: str, airflow: str) -> None:
        self.root = root.rstrip("/")
        self.airflow = airflow.rstrip("/")

    def home(self) -> str:
        return f"{self.root}/"

    def pipeline(self, p: str) -> str:
        return f"{self.root}/pipelines/{quote(p, safe='')}"

    def batch(self, p: str, txid: str) -> str:
        return f"{self.pipeline(p)}/batches/{quote(txid, safe='')}"

    def api(self, path: str) -> str:
        return f"{self.root}/api{path}"

    def dag(self, dag_id: str) -> str:
        return f"{self.airflow}/dags/{quote(dag_id, safe='')}"

    def run(self, dag_id: str, run_id: str) -> str:
        return f"{self.dag(dag_id)}/runs/{quote(run_id, safe='')}"

    def task(self, dag_id: str, run_id: str, task_id: str) -> str:
        return f"{self.run(dag_id, run_id)}/tasks/{quote(task_id, safe='')}"
