"""A pipeline's ledger database and source cluster, from their hooks."""

from __future__ import annotations

from dataclasses import dataclass

from onceflow.config.pipeline import PipelineConfig
from onceflow.hooks.kafka import kafka_cluster
from onceflow.hooks.ledger import ledger_of
from onceflow.kafka.client import KafkaCluster
from onceflow.ledger.db import Ledger


@dataclass(frozen=True)
class Services:
    """A pipeline's ledger database and source cluster, with where each came from."""

    ledger: Ledger
    kafka: KafkaCluster

    def __repr__(self) -> str:
        return f"Services({self.ledger!r}, kafka {self.kafka.describe()})"


def services(cfg: PipelineConfig) -> Services:
    """A pipeline's ledger and source cluster."""
    ledger = ledger_of(cfg.ledger_conn_id, cfg.source)
    return Services(ledger, kafka_cluster(cfg.kafka_conn_id, cfg.source))
