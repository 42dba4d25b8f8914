"""A lake sink's object storage: ONCEFLOW_LAKE_STORAGE, or the sink's `storage_conn_id` (an
`aws` connection: access key id as login, secret as password, extra `endpoint_url` and
`region_name`), or each library's defaults."""

from __future__ import annotations

import os
from typing import Any

from onceflow.config.pipeline import PipelineConfig
from onceflow.errors import ConfigError
from onceflow.hooks.connection import extra, lookup, named_by
from onceflow.sinks.lake.storage import STORAGE_ENV, Storage


def lake_storage(cfg: PipelineConfig) -> Storage:
    """A lake sink's storage: ONCEFLOW_LAKE_STORAGE when set (what a
    process task hands spark-submit, or the local stack's S3 emulator), else the sink's
    `storage_conn_id` connection, else each library's defaults."""
    if os.environ.get(STORAGE_ENV):
        return Storage.from_env(os.environ[STORAGE_ENV])
    conn_id = cfg.sink.storage_conn_id
    if not conn_id:
        return Storage()
    conn = lookup(conn_id, named_by(cfg.source, "sink.storage_conn_id"), conn_type="aws")
    return storage_from(conn, conn_id)


def storage_from(conn: Any, conn_id: str) -> Storage:
    """A Storage from an `aws` connection (see the module)."""
    if conn.conn_type not in ("aws", "s3"):
        raise ConfigError(
            f"Airflow connection {conn_id!r} is of type {conn.conn_type!r}; a lake sink's "
            "storage needs an 'aws' connection (access key id as login, secret as password, "
            "extra endpoint_url and region_name)"
        )
    keys = extra(conn, conn_id)
    return Storage(
        endpoint=keys.get("endpoint_url"),
        region=keys.get("region_name"),
        access_key=conn.login or None,
        secret_key=conn.password or None,
    )


def default_warehouse() -> str:
    """Where lake tables go without a `warehouse`: ONCEFLOW_HOME/warehouse, as a URI (Iceberg
    puts a table in `<namespace>.db/<table>`, Delta in `<namespace>/<table>`)."""
    from onceflow.settings import home

    return (home() / "warehouse").as_uri()
