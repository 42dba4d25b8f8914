"""A pipeline's ledger database and source cluster, from their hooks."""

from __future__ import annotations

from dataclasses import dataclass

from onceflow.config.pipeline import PipelineConfig
from onceflow.hooks.kafka import kafka_cluster
from onceflow.hooks.ledger import ledger_dsn
from onceflow.kafka.client import KafkaCluster


@dataclass(frozen=True)
class Services:
    """A pipeline's ledger database and source cluster, with where each came from."""

    ledger_dsn: str
    ledger_source: str
    kafka: KafkaCluster

    def __repr__(self) -> str:  # the DSN may hold a password
        return f"Services(ledger from {self.ledger_source}, kafka {self.kafka.describe()})"


def services(cfg: PipelineConfig) -> Services:
    """A pipeline's ledger and source cluster."""
    dsn, source = ledger_dsn(cfg.ledger_conn_id, cfg.source)
    kafka = kafka_cluster(cfg.kafka_conn_id, cfg.source)
    return Services(dsn, source, kafka)
