"""The DAG folder imports cleanly and declares plan -> process -> commit per pipeline."""

import os
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[1]


def test_dag_folder_imports_without_errors(tmp_path, monkeypatch):
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path))
    monkeypatch.setenv("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
    monkeypatch.setenv("ONCEFLOW_PIPELINES", str(ROOT / "dags" / "pipelines.toml"))
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(ROOT / "dags"))
    assert bag.import_errors == {}
    dag = bag.dags["onceflow_orders"]
    assert [t.task_id for t in dag.topological_sort()] == ["plan", "process", "commit"]
    process = dag.get_task("process")
    assert process.application.endswith("spark_jobs/process.py")
    assert "{{ run_id }}" in process.application_args
    commit = dag.get_task("commit")
    assert type(commit).__name__ == "CommitOperator"
    assert commit.poll_interval == 2.0  # waits as a trigger in the triggerer, not in a worker
    # no logical-date macros: they are NULL for runs triggered through the API
    source = (ROOT / "include" / "onceflow" / "airflow" / "dag_factory.py").read_text()
    assert "{{ ds" not in source and "logical_date" not in source


def test_bad_pipeline_file_becomes_an_import_error(tmp_path, monkeypatch):
    bad = tmp_path / "pipelines.toml"
    bad.write_text('[pipelines.x]\ntopics = ["ok"]\nsink_schema = "a; drop table b"\n')
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path))
    monkeypatch.setenv("ONCEFLOW_PIPELINES", str(bad))
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(ROOT / "dags"))
    assert len(bag.import_errors) == 1
    assert "sink_schema" in next(iter(bag.import_errors.values()))
    assert os.environ["ONCEFLOW_PIPELINES"] == str(bad)
