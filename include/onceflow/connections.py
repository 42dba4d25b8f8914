"""Where a pipeline's services and their credentials come from: Airflow connections.

Inside Airflow every task reads them from connections, where an Airflow team keeps (rotates,
hides) them:

- the ledger's database, which also holds the PostgreSQL sinks and the stage (one database:
  the protocol publishes inside sinks in the ledger's transaction): a `postgres` connection,
  default id `onceflow_ledger`, per pipeline `ledger_conn_id`;
- the source Kafka cluster: a `kafka` connection (apache-airflow-providers-apache-kafka)
  whose extra holds librdkafka's client config, `bootstrap.servers` included (onceflow.
  kafka_client reads it), default id `onceflow_kafka`, per pipeline `kafka_conn_id`;
- a Kafka sink's cluster, when not the source's: the sink's `conn_id` (a `kafka` connection);
- a lake sink's object storage: the sink's `storage_conn_id` (an `aws` connection: access
  key id as login, secret as password, extra `endpoint_url` and `region_name`);
- Spark: `spark_conn_id` (default `spark_default`), read by the provider's SparkSubmitHook.

A connection id a pipelines file names must exist. A default id that does not exist falls
back to the ONCEFLOW_* variables (settings), which is how the embedded stack and the command
line outside Airflow run; `onceflow --ledger-conn ID --kafka-conn ID` reads connections there.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from onceflow.errors import ConfigError
from onceflow.kafka.client import KafkaCluster, cluster_from_config, cluster_from_env
from onceflow.settings import Settings

if TYPE_CHECKING:
    from onceflow.sinks.lake.storage import Storage

LEDGER_CONN = "onceflow_ledger"
KAFKA_CONN = "onceflow_kafka"
SPARK_CONN = "spark_default"

# libpq keywords a postgres connection's extra may carry (TLS to the database, timeouts);
# the postgres provider's own extras (cursor, iam, ...) mean nothing to psycopg2 here.
LIBPQ_EXTRA = (
    "sslmode",
    "sslcert",
    "sslkey",
    "sslrootcert",
    "sslcrl",
    "sslpassword",
    "connect_timeout",
    "application_name",
    "options",
    "target_session_attrs",
    "keepalives",
    "keepalives_idle",
)


@dataclass(frozen=True)
class Services:
    """A pipeline's ledger database and source cluster, with where each came from."""

    ledger_dsn: str
    ledger_source: str
    kafka: KafkaCluster

    def __repr__(self) -> str:  # the DSN may hold a password
        return f"Services(ledger from {self.ledger_source}, kafka {self.kafka.describe()})"


def _airflow_connection(conn_id: str) -> Any | None:
    """The Airflow connection, or None when it does not exist (or Airflow is not installed).

    A task, the dag-processor and a trigger ask through the Task SDK (the API server answers);
    a process outside them (the API server's Ledger view, `onceflow --ledger-conn`) reads
    Airflow's secrets backends itself, its database included, as Airflow's own CLI does."""
    import sys

    try:
        from airflow.sdk import BaseHook
        from airflow.sdk.exceptions import AirflowNotFoundException
    except ImportError:
        return None
    runner = sys.modules.get("airflow.sdk.execution_time.task_runner")
    if getattr(runner, "SUPERVISOR_COMMS", None) is not None:
        try:
            return BaseHook.get_connection(conn_id)
        except AirflowNotFoundException:
            return None
    from airflow.exceptions import AirflowNotFoundException as NotFound
    from airflow.models.connection import Connection

    try:
        return Connection.get_connection_from_secrets(conn_id)
    except (NotFound, AirflowNotFoundException):
        pass
    try:  # one whose extra is not JSON is "not defined" there, but found here, so we can say why
        return BaseHook.get_connection(conn_id)
    except AirflowNotFoundException:
        return None


def ledger_dsn_from(conn: Any, conn_id: str) -> str:
    """A libpq DSN from a `postgres` connection (host, port, login, password, schema as the
    database, libpq keywords from its extra)."""
    from psycopg2.extensions import make_dsn

    if conn.conn_type not in ("postgres", "postgresql"):
        raise ConfigError(
            f"Airflow connection {conn_id!r} is of type {conn.conn_type!r}; the ledger needs "
            "a 'postgres' connection"
        )
    extra = _extra(conn, conn_id)
    unknown = sorted(set(extra) - set(LIBPQ_EXTRA))
    if unknown:
        raise ConfigError(
            f"Airflow connection {conn_id!r}: extra key {unknown[0]!r} is not a libpq "
            f"connection keyword Onceflow passes on; accepted: {', '.join(LIBPQ_EXTRA)}"
        )
    params = {
        "host": conn.host or "127.0.0.1",
        "port": conn.port or 5432,
        "user": conn.login,
        "password": conn.password,
        "dbname": conn.schema or "postgres",
        **{k: str(v) for k, v in extra.items()},
    }
    return make_dsn(**{k: v for k, v in params.items() if v not in (None, "")})


def kafka_from(conn: Any, conn_id: str) -> KafkaCluster:
    """A KafkaCluster from a `kafka` connection: its extra is librdkafka's client config."""
    if conn.conn_type != "kafka":
        raise ConfigError(
            f"Airflow connection {conn_id!r} is of type {conn.conn_type!r}; Kafka needs a "
            "'kafka' connection whose extra holds the client config (bootstrap.servers, "
            "security.protocol, ...)"
        )
    return cluster_from_config(_extra(conn, conn_id), f"Airflow connection {conn_id!r}")


def _extra(conn: Any, conn_id: str) -> dict[str, Any]:
    raw = conn.extra or ""
    if not raw.strip():
        return {}
    try:
        extra = json.loads(raw)
    except json.JSONDecodeError as e:
        raise ConfigError(
            f"Airflow connection {conn_id!r}: its extra is not valid JSON ({e.msg} at "
            f"line {e.lineno} column {e.colno})"
        ) from None
    if not isinstance(extra, dict):
        raise ConfigError(f"Airflow connection {conn_id!r}: its extra must be a JSON object")
    return extra


async def _airflow_connection_async(conn_id: str) -> Any | None:
    """_airflow_connection for a trigger, which runs in the triggerer's event loop."""
    try:
        from airflow.sdk import BaseHook
        from airflow.sdk.exceptions import AirflowNotFoundException
    except ImportError:
        return None
    try:
        return await BaseHook.aget_connection(conn_id)
    except AirflowNotFoundException:
        return None


def _lookup(conn_id: str, named_by: str | None, conn: Any | None = None) -> Any | None:
    """The connection; one that `named_by` (a file's key, a command-line option) names must
    exist, a default id may not. `conn`: one already looked up."""
    conn = conn or _airflow_connection(conn_id)
    if conn is None and named_by:
        raise ConfigError(
            f"Airflow connection {conn_id!r} does not exist ({named_by} names it); "
            f"create it (Admin > Connections, or `airflow connections add {conn_id} ...`)"
        )
    return conn


def _named_by(source: str, key: str) -> str:
    return f"{source}: `{key}`" if key else source


def ledger_dsn(
    conn_id: str | None = None,
    source: str = "",
    settings: Settings | None = None,
    key: str = "ledger_conn_id",
    _found: Any | None = None,
) -> tuple[str, str]:
    """(DSN, where it came from): the named connection, else the default one, else
    ONCEFLOW_POSTGRES_DSN (`settings`, default: from the environment)."""
    cid = conn_id or LEDGER_CONN
    conn = _lookup(cid, _named_by(source, key) if conn_id else None, _found)
    if conn is not None:
        return ledger_dsn_from(conn, cid), f"Airflow connection {cid!r}"
    return (settings or Settings.from_env()).postgres_dsn, "ONCEFLOW_POSTGRES_DSN"


async def ledger_dsn_async(conn_id: str | None = None) -> str:
    """ledger_dsn inside a trigger (the lookup awaited, not blocking the triggerer's loop)."""
    found = await _airflow_connection_async(conn_id or LEDGER_CONN)
    return ledger_dsn(conn_id, "the commit trigger", _found=found)[0]


def kafka_cluster(
    conn_id: str | None = None,
    source: str = "",
    key: str = "kafka_conn_id",
    settings: Settings | None = None,
) -> KafkaCluster:
    """The named `kafka` connection, else the default one, else ONCEFLOW_KAFKA_BOOTSTRAP and
    ONCEFLOW_KAFKA_CONFIG (`settings`, default: from the environment)."""
    cid = conn_id or KAFKA_CONN
    conn = _lookup(cid, _named_by(source, key) if conn_id else None)
    if conn is not None:
        return kafka_from(conn, cid)
    return cluster_from_env((settings or Settings.from_env()).kafka_bootstrap)


def lake_storage(cfg: Any) -> Storage:
    """A lake sink's storage (sinks.lake.storage): ONCEFLOW_LAKE_STORAGE when set (what a
    process task hands spark-submit, or the local stack's S3 emulator), else the sink's
    `storage_conn_id` connection, else each library's defaults."""
    import os

    from onceflow.sinks.lake.storage import STORAGE_ENV, Storage

    if os.environ.get(STORAGE_ENV):
        return Storage.from_env(os.environ[STORAGE_ENV])
    conn_id = cfg.sink.storage_conn_id
    if not conn_id:
        return Storage()
    conn = _lookup(conn_id, _named_by(cfg.source, "sink.storage_conn_id"))
    if conn.conn_type not in ("aws", "s3"):
        raise ConfigError(
            f"Airflow connection {conn_id!r} is of type {conn.conn_type!r}; a lake sink's "
            "storage needs an 'aws' connection (access key id as login, secret as password, "
            "extra endpoint_url and region_name)"
        )
    extra = _extra(conn, conn_id)
    return Storage(
        endpoint=extra.get("endpoint_url"),
        region=extra.get("region_name"),
        access_key=conn.login or None,
        secret_key=conn.password or None,
    )


def services(cfg: Any, settings: Settings | None = None) -> Services:
    """A pipeline's ledger and source cluster (cfg: a PipelineConfig)."""
    dsn, source = ledger_dsn(cfg.ledger_conn_id, cfg.source, settings)
    kafka = kafka_cluster(cfg.kafka_conn_id, cfg.source, settings=settings)
    return Services(dsn, source, kafka)


def spark_connect(cfg: Any) -> tuple[str, str]:
    """(URL, description) of the Spark Connect server a pipeline with process_mode =
    "connect" processes on: its `spark_connect_conn_id` connection (type spark_connect, the
    provider's SparkConnectHook: host, port, user id as login, token as password, extra
    use_ssl). It must exist, the default id too. The description names no token."""
    conn_id = cfg.spark_connect_conn_id
    conn = _airflow_connection(conn_id)
    if conn is None:
        raise ConfigError(
            f"Airflow connection {conn_id!r} does not exist ({cfg.source}: pipeline "
            f'{cfg.name!r} has process_mode = "connect"); create it with the Spark Connect '
            f"server's host and port (`airflow connections add {conn_id} --conn-type "
            "spark_connect --conn-host HOST --conn-port 15002`)"
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
