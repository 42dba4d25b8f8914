"""Airflow's task exceptions, from where the installed Airflow keeps them: the Task SDK's
`airflow.sdk.exceptions` (newer releases, which deprecate `airflow.exceptions`' names), or
`airflow.exceptions` (Airflow 3.1, whose Task SDK has none of them)."""

from __future__ import annotations

try:
    from airflow.sdk.exceptions import (
        AirflowFailException,
        AirflowNotFoundException,
        AirflowSkipException,
        TaskDeferred,
    )
except ImportError:  # Airflow 3.1
    from airflow.exceptions import (  # type: ignore[no-redef]
        AirflowFailException,
        AirflowNotFoundException,
        AirflowSkipException,
        TaskDeferred,
    )

__all__ = [
    "AirflowFailException",
    "AirflowNotFoundException",
    "AirflowSkipException",
    "TaskDeferred",
]
