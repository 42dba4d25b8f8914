"""What the command line and the Ledger view read of the environment.

No value here points at a service: the ledger's database, the Kafka cluster and Airflow's API
come from Airflow connections (onceflow.hooks) or from the ONCEFLOW_* variables a user sets.
One that is needed and given by neither is a ConfigError naming both ways to give it. The
embedded stack's addresses and logins are the checkout's (onceflow_dev.settings), which sets
these variables for what it starts (`onceflow-dev env` prints them).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from onceflow.errors import ConfigError
from onceflow.ledger.db import Ledger

LEDGER_ENV = "ONCEFLOW_POSTGRES_DSN"
KAFKA_ENV = "ONCEFLOW_KAFKA_BOOTSTRAP"


def home() -> Path:
    """ONCEFLOW_HOME, else ./.onceflow: the default warehouse of lake sinks lives there."""
    return Path(os.environ.get("ONCEFLOW_HOME") or Path.cwd() / ".onceflow").resolve()


def _given(name: str) -> str | None:
    return os.environ.get(name) or None


@dataclass(frozen=True)
class Settings:
    """The environment's settings; build with `Settings.from_env()`. A service's address is
    read when it is asked for, so a command that needs none runs without any."""

    pipelines_file: Path
    ledger_db: Ledger | None = None
    bootstrap: str | None = None
    airflow: str | None = None
    airflow_user: str | None = None
    airflow_password: str | None = field(default=None, repr=False)

    @property
    def ledger(self) -> Ledger:
        """The ledger's database."""
        if self.ledger_db is None:
            raise ConfigError(
                f"no ledger database: set {LEDGER_ENV} to its libpq DSN, or name its Airflow "
                "connection (type 'postgres') with --ledger-conn, e.g. --ledger-conn "
                "onceflow_ledger"
            )
        return self.ledger_db

    @property
    def kafka_bootstrap(self) -> str:
        """The source cluster's bootstrap servers."""
        if self.bootstrap is None:
            raise ConfigError(
                f"no Kafka cluster: set {KAFKA_ENV} (and ONCEFLOW_KAFKA_CONFIG for TLS or "
                "SASL), or name its Airflow connection (type 'kafka') with --kafka-conn, e.g. "
                "--kafka-conn onceflow_kafka"
            )
        return self.bootstrap

    @property
    def airflow_url(self) -> str:
        """Airflow's API server, for the commands that trigger or read runs."""
        if self.airflow is None:
            raise ConfigError(
                "no Airflow API server: set ONCEFLOW_AIRFLOW_URL (e.g. "
                "https://airflow.example.com), with ONCEFLOW_AIRFLOW_USER and "
                "ONCEFLOW_AIRFLOW_PASSWORD for its login"
            )
        return self.airflow.rstrip("/")

    @classmethod
    def from_env(cls) -> Settings:
        pipelines = os.environ.get("ONCEFLOW_PIPELINES") or Path.cwd() / "dags" / "pipelines.toml"
        return cls(
            pipelines_file=Path(pipelines).resolve(),
            ledger_db=Ledger(os.environ[LEDGER_ENV], LEDGER_ENV) if _given(LEDGER_ENV) else None,
            bootstrap=_given(KAFKA_ENV),
            airflow=_given("ONCEFLOW_AIRFLOW_URL"),
            airflow_user=_given("ONCEFLOW_AIRFLOW_USER"),
            airflow_password=_given("ONCEFLOW_AIRFLOW_PASSWORD"),
        )
