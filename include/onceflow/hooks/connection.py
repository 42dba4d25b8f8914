"""Looking up an Airflow connection, for the hooks: inside a task, the dag-processor or a
trigger through the Task SDK; elsewhere through Airflow's secrets backends."""

from __future__ import annotations

import json
import sys
from typing import Any

from onceflow.errors import ConfigError


def airflow_connection(conn_id: str) -> Any | None:
    """The Airflow connection, or None when it does not exist (or Airflow is not installed).

    A task, the dag-processor and a trigger ask through the Task SDK (the API server answers);
    a process outside them (the API server's Ledger view, `onceflow --ledger-conn`) reads
    Airflow's secrets backends itself, its database included, as Airflow's own CLI does."""
    try:
        from airflow.sdk import BaseHook
    except ImportError:
        return None
    from onceflow.compat.airflow_exceptions import AirflowNotFoundException

    runner = sys.modules.get("airflow.sdk.execution_time.task_runner")
    if getattr(runner, "SUPERVISOR_COMMS", None) is not None:
        try:
            return BaseHook.get_connection(conn_id)
        except AirflowNotFoundException:
            return None
    from airflow.models.connection import Connection

    try:
        return Connection.get_connection_from_secrets(conn_id)
    except AirflowNotFoundException:
        pass
    try:  # one whose extra is not JSON is "not defined" there, but found here, so we can say why
        return BaseHook.get_connection(conn_id)
    except AirflowNotFoundException:
        return None
    except ImportError:  # Airflow 3.1's Task SDK looks connections up only inside a task
        return None


async def airflow_connection_async(conn_id: str) -> Any | None:
    """airflow_connection for a trigger, which runs in the triggerer's event loop."""
    try:
        from airflow.sdk import BaseHook
    except ImportError:
        return None
    from onceflow.compat.airflow_exceptions import AirflowNotFoundException

    try:
        return await BaseHook.aget_connection(conn_id)
    except AirflowNotFoundException:
        return None


# What `airflow connections add ID` needs for each type a pipeline uses: the line a missing
# connection's error shows (placeholders in capitals).
ADD_ARGUMENTS = {
    "postgres": "--conn-type postgres --conn-host HOST --conn-port 5432 --conn-login USER "
    "--conn-password PASSWORD --conn-schema DATABASE",
    "kafka": '--conn-type kafka --conn-extra \'{"bootstrap.servers": "HOST:9092"}\'',
    "schema_registry": "--conn-type schema_registry --conn-host https://HOST:8081",
    "aws": "--conn-type aws --conn-login ACCESS_KEY_ID --conn-password SECRET "
    '--conn-extra \'{"endpoint_url": "https://HOST", "region_name": "REGION"}\'',
    "spark_connect": "--conn-type spark_connect --conn-host HOST --conn-port 15002",
}


def missing(conn_id: str, conn_type: str, why: str) -> ConfigError:
    """The error of a connection that does not exist: its id, its type, why it is needed
    and the command that creates it."""
    args = ADD_ARGUMENTS.get(conn_type, f"--conn-type {conn_type} ...")
    return ConfigError(
        f"Airflow connection {conn_id!r} (type {conn_type!r}) does not exist ({why}); "
        f"create it in Admin > Connections, or: airflow connections add {conn_id} {args}"
    )


def require(conn_id: str, conn_type: str, why: str) -> Any:
    """The connection, which must exist (`missing` names it otherwise)."""
    conn = airflow_connection(conn_id)
    if conn is None:
        raise missing(conn_id, conn_type, why)
    return conn


def lookup(
    conn_id: str, named_by: str | None, conn: Any | None = None, conn_type: str = ""
) -> Any | None:
    """The connection; one that `named_by` (a file's key, a command-line option) names must
    exist, a default id may not. `conn`: one already looked up."""
    conn = conn or airflow_connection(conn_id)
    if conn is None and named_by:
        raise missing(conn_id, conn_type, f"{named_by} names it")
    return conn


def named_by(source: str, key: str) -> str:
    """Who names a connection: a pipelines file's key, or a command-line option."""
    return f"{source}: `{key}`" if key else source


def extra(conn: Any, conn_id: str) -> dict[str, Any]:
    """The connection's extra, a JSON object (empty when none)."""
    raw = conn.extra or ""
    if not raw.strip():
        return {}
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as e:
        raise ConfigError(
            f"Airflow connection {conn_id!r}: its extra is not valid JSON ({e.msg} at "
            f"line {e.lineno} column {e.colno})"
        ) from None
    if not isinstance(value, dict):
        raise ConfigError(f"Airflow connection {conn_id!r}: its extra must be a JSON object")
    return value
