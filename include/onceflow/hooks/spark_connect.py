"""The Spark Connect server a pipeline with process_mode = "connect" processes on: its
`spark_connect_conn_id` connection, read through the provider's SparkConnectHook."""

from __future__ import annotations

from onceflow.config.pipeline import PipelineConfig
from onceflow.errors import ConfigError
from onceflow.hooks.connection import airflow_connection, missing


def spark_connect(cfg: PipelineConfig) -> tuple[str, str]:
    """(URL, description) of the server: its `spark_connect_conn_id`
    connection (type spark_connect: host, port, user id as login, token as password, extra
    use_ssl). It must exist, the default id too. The description names no token."""
    conn_id = cfg.spark_connect_conn_id
    conn = airflow_connection(conn_id)
    if conn is None:
        raise missing(
            conn_id,
            "spark_connect",
            f'{cfg.source}: pipeline {cfg.name!r} has process_mode = "connect"',
        )
    if conn.conn_type != "spark_connect":
        raise ConfigError(
            f"Airflow connection {conn_id!r} is of type {conn.conn_type!r}; process_mode = "
            "\"connect\" needs a 'spark_connect' connection (host, port; user id as login, "
            "token as password, extra use_ssl)"
        )
    from airflow.providers.apache.spark.hooks.spark_connect import SparkConnectHook

    try:
        url = SparkConnectHook(conn_id).get_connection_url()
    except ValueError as e:
        raise ConfigError(f"Airflow connection {conn_id!r}: {e}") from None
    where = f"{conn.host}:{conn.port}" if conn.port else str(conn.host)
    return url, f"the Spark Connect server {where} (Airflow connection {conn_id!r})"
