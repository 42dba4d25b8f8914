"""The DAG factory's first step: the installed Airflow and pyspark are ones this Onceflow
supports (onceflow.compat.versions), so that a DAG file on any other fails its import with
one line naming the supported range, not with a traceback from deep inside Airflow."""

from __future__ import annotations

from onceflow.compat.versions import check_versions


def check() -> None:
    check_versions()
