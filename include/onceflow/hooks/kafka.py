"""Kafka clusters: the source, a `kafka` connection whose extra is librdkafka's client config
(default id `onceflow_kafka`, per pipeline `kafka_conn_id`; without the default one,
ONCEFLOW_KAFKA_BOOTSTRAP and ONCEFLOW_KAFKA_CONFIG when they are set), and a Kafka sink's."""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Any

from onceflow.config.pipeline import KAFKA_CONN, PipelineConfig
from onceflow.errors import ConfigError
from onceflow.hooks.connection import airflow_connection_async, extra, lookup, missing, named_by
from onceflow.kafka.client import KafkaCluster, cluster_from_config, cluster_from_env
from onceflow.settings import KAFKA_ENV


def kafka_from(conn: Any, conn_id: str) -> KafkaCluster:
    """A KafkaCluster from a `kafka` connection: its extra is librdkafka's client config."""
    if conn.conn_type != "kafka":
        raise ConfigError(
            f"Airflow connection {conn_id!r} is of type {conn.conn_type!r}; Kafka needs a "
            "'kafka' connection whose extra holds the client config (bootstrap.servers, "
            "security.protocol, ...)"
        )
    return cluster_from_config(extra(conn, conn_id), f"Airflow connection {conn_id!r}")


def kafka_cluster(
    conn_id: str | None = None,
    source: str = "",
    key: str = "kafka_conn_id",
    _found: Any | None = None,
) -> KafkaCluster:
    """The named `kafka` connection, else the default one, else ONCEFLOW_KAFKA_BOOTSTRAP and
    ONCEFLOW_KAFKA_CONFIG; none of them is a ConfigError naming the connection."""
    cid = conn_id or KAFKA_CONN
    conn = lookup(cid, named_by(source, key) if conn_id else None, _found, "kafka")
    if conn is not None:
        return kafka_from(conn, cid)
    if os.environ.get(KAFKA_ENV):
        return cluster_from_env(os.environ[KAFKA_ENV])
    raise missing(cid, "kafka", f"the source cluster; or set {KAFKA_ENV}")


async def kafka_cluster_async(conn_id: str | None, source: str) -> KafkaCluster:
    """kafka_cluster inside a trigger (the lookup awaited, not blocking the triggerer's loop)."""
    found = await airflow_connection_async(conn_id or KAFKA_CONN)
    return kafka_cluster(conn_id, source, _found=found)


def sink_cluster(cfg: PipelineConfig) -> KafkaCluster:
    """A Kafka sink's cluster: its `conn_id` connection; else its
    `bootstrap` with the source cluster's client settings; else the source cluster."""
    if cfg.sink.conn_id:
        return kafka_cluster(cfg.sink.conn_id, cfg.source, key="sink.conn_id")
    source = kafka_cluster(cfg.kafka_conn_id, cfg.source)
    return replace(source, bootstrap=cfg.sink.bootstrap) if cfg.sink.bootstrap else source
