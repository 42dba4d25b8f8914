"""A pipeline's schema registry (Avro or Protobuf records): its `registry_conn_id`, default
`onceflow_registry`, an `http` connection: the registry's URL as host (or host, port and
schema http/https), basic auth as login and password, or extra `bearer_token`; extra
`ca_file` verifies its TLS certificate. Without a default connection, ONCEFLOW_REGISTRY_URL
(the embedded stack's registry)."""

from __future__ import annotations

import os
from typing import Any

from onceflow.config.pipeline import REGISTRY_CONN, PipelineConfig
from onceflow.errors import ConfigError
from onceflow.formats.registry_client import Registry
from onceflow.hooks.connection import extra, lookup, named_by

REGISTRY_ENV = "ONCEFLOW_REGISTRY_URL"


def registry_from(conn: Any, conn_id: str) -> Registry:
    """A Registry from an Airflow connection (see the module)."""
    host = (conn.host or "").strip()
    if not host:
        raise ConfigError(
            f"Airflow connection {conn_id!r} has no host: a schema registry's connection "
            "holds its URL (e.g. https://registry.example.com:8081) as host"
        )
    if "://" not in host:
        scheme = conn.schema or "http"
        host = f"{scheme}://{host}" + (f":{conn.port}" if conn.port else "")
    keys = extra(conn, conn_id)
    return Registry(
        url=host,
        user=conn.login or None,
        password=conn.password or None,
        token=keys.get("bearer_token") or None,
        ca_file=keys.get("ca_file") or None,
        name=f"schema registry (Airflow connection {conn_id!r})",
    )


def pipeline_registry(cfg: PipelineConfig) -> Registry:
    """The registry of a pipeline whose keys or values are Avro or Protobuf: its
    `registry_conn_id` (which must exist), else `onceflow_registry`, else
    ONCEFLOW_REGISTRY_URL."""
    cid = cfg.registry_conn_id or REGISTRY_CONN
    conn = lookup(cid, named_by(cfg.source, "registry_conn_id") if cfg.registry_conn_id else None)
    if conn is not None:
        return registry_from(conn, cid)
    url = os.environ.get(REGISTRY_ENV)
    if not url:
        raise ConfigError(
            f"{cfg.source}: pipeline {cfg.name!r} reads {cfg.format_summary} records but no "
            f"schema registry is configured: create the Airflow connection {REGISTRY_CONN!r} "
            f"(an http connection with the registry's URL), name one with `registry_conn_id`, "
            f"or set {REGISTRY_ENV}"
        )
    return Registry(url=url, name=f"schema registry ({REGISTRY_ENV})")
