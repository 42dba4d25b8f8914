"""Onceflow: one DAG per pipeline in pipelines.toml (plan -> process -> commit); the same
two lines a user's DAG file holds. Configuration errors show as DAG import errors naming the
file and key."""

from onceflow.airflow import pipelines_dags

globals().update(pipelines_dags(__file__))
