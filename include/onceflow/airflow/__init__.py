"""Airflow glue: thin operators and the DAG factory; the logic lives in the ledger.

A user's DAG file, next to their pipelines.toml:

    from onceflow.airflow import pipelines_dags
    globals().update(pipelines_dags(__file__))
"""

from __future__ import annotations

from typing import Any

__all__ = ["build_dags", "pipelines_dags"]


def __getattr__(name: str) -> Any:
    # Imported on first use: Airflow imports onceflow.airflow.plugin while its own
    # configuration is still loading, when the operators' modules cannot be imported yet.
    if name in __all__:
        from onceflow.airflow import supported

        supported.check()
        from onceflow.airflow import dag_factory

        return getattr(dag_factory, name)
    raise AttributeError(name)
