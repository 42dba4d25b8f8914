"""A pipeline's schema registry (Avro or Protobuf records): its `registry_conn_id`, default
`onceflow_registry`, a `schema_registry` connection (0.1.0's `http` ones still work): the
registry's URL as host (or host, port and schema http/https), basic auth as login and
password, or extra `bearer_token`; extra `ca_file` verifies its TLS certificate. ONCEFLOW_REGISTRY, when set, comes first: what a
process task hands spark-submit (the connection's registry), or the embedded stack's URL."""

from __future__ import annotations

import os
from typing import Any

from onceflow.config.pipeline import REGISTRY_CONN, PipelineConfig
from onceflow.errors import ConfigError
from onceflow.formats.reader_checks import PlannedReaderSchemas
from onceflow.formats.registry_client import Registry
from onceflow.hooks.connection import extra, lookup, named_by
from onceflow.ledger.registered_schema import RegisteredSchema

REGISTRY_ENV = "ONCEFLOW_REGISTRY"
# Onceflow's own type (SchemaRegistryHook); 0.1.0 took an `http` connection, which still works
REGISTRY_TYPES = ("schema_registry", "http")


def registry_from(conn: Any, conn_id: str) -> Registry:
    """A Registry from an Airflow connection (see the module)."""
    if conn.conn_type not in REGISTRY_TYPES:
        raise ConfigError(
            f"Airflow connection {conn_id!r} is of type {conn.conn_type!r}; a schema registry "
            "needs a 'schema_registry' connection (its URL as host)"
        )
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
        # a form of Airflow's that still prefixes its extra fields keeps them so
        token=keys.get("bearer_token") or keys.get("extra__schema_registry__bearer_token") or None,
        ca_file=keys.get("ca_file") or keys.get("extra__schema_registry__ca_file") or None,
        name=f"schema registry (Airflow connection {conn_id!r})",
    )


def pipeline_registry(cfg: PipelineConfig) -> Registry:
    """The registry of a pipeline whose values are in a registry format: ONCEFLOW_REGISTRY
    when set, else its `registry_conn_id` (which must exist), else `onceflow_registry`."""
    if os.environ.get(REGISTRY_ENV):
        return Registry.from_env(os.environ[REGISTRY_ENV], REGISTRY_ENV)
    cid = cfg.registry_conn_id or REGISTRY_CONN
    conn = lookup(
        cid,
        named_by(cfg.source, "registry_conn_id") if cfg.registry_conn_id else None,
        conn_type="schema_registry",
    )
    if conn is None:
        raise ConfigError(
            f"{cfg.source}: pipeline {cfg.name!r} reads {cfg.format_summary} but no "
            f"schema registry is configured: create the Airflow connection {REGISTRY_CONN!r} "
            "(a schema_registry connection with the registry's URL as host), name one with "
            f"`registry_conn_id`, or set {REGISTRY_ENV} to its URL"
        )
    return registry_from(conn, cid)


def reader_schemas_of(cfg: PipelineConfig) -> PlannedReaderSchemas | None:
    """What plan asks for a new txid's reader schemas (ledger.reader_schemas), by role:
    "value", the subject's pinned version, else its latest; "key", its key subject's latest.
    None for a pipeline without a registry format."""
    if not cfg.decoded_roles:  # an envelope's events have none (formats.debezium_avro)
        return None

    def fetch() -> dict[str, RegisteredSchema]:
        registry = pipeline_registry(cfg)
        pinned = {"value": cfg.reader_schema_version}  # keys read their latest
        return {
            role: registry.version(
                subject,
                pinned.get(role) or "latest",
                # a Protobuf schema as its FileDescriptorProto, not .proto text
                serialized=fmt == "protobuf",
            )
            for role, (fmt, subject) in cfg.decoded_roles.items()
        }

    return PlannedReaderSchemas(cfg, fetch)
