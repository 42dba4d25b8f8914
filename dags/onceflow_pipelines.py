"""Onceflow: one DAG per pipeline in pipelines.toml (plan -> process -> commit).

Configuration errors surface here as DAG import errors that name the file and key.
"""

from onceflow.airflow.dag_factory import build_dags

globals().update(build_dags())
