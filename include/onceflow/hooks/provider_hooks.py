"""The hooks as Airflow knows them: BaseHook subclasses, one per service a pipeline connects
to, declared in get_provider_info's `connection-types` where the type is Onceflow's own. Airflow's
connection form takes each type's fields and labels from them; operators and the command line
ask them for a client.

| hook                | connection type                     | default id            |
| ------------------- | ----------------------------------- | --------------------- |
| LedgerHook          | postgres (the postgres provider's)  | onceflow_ledger       |
| KafkaClusterHook    | kafka (the apache-kafka provider's) | onceflow_kafka        |
| SchemaRegistryHook  | schema_registry (Onceflow's own)    | onceflow_registry     |
| LakeStorageHook     | aws (the Amazon provider's form)    | none: storage_conn_id |

Spark's are the Spark provider's own: SparkSubmitHook (`spark`) and SparkConnectHook
(`spark_connect`, onceflow.hooks.spark_connect). Each hook reads its connection through the
service module beside it (ledger, kafka, registry, lake), which keeps the rules of what a
connection may hold; this module imports Airflow, which a Spark job never needs to.
"""

from __future__ import annotations

from typing import Any

from airflow.sdk import BaseHook

from onceflow.config.pipeline import KAFKA_CONN, LEDGER_CONN, REGISTRY_CONN
from onceflow.formats.registry_client import Registry
from onceflow.hooks import kafka, ledger, registry
from onceflow.hooks.connection import require
from onceflow.kafka.client import KafkaCluster
from onceflow.sinks.lake.storage import Storage


class LedgerHook(BaseHook):
    """The ledger's database, which also holds the PostgreSQL sinks and the stage."""

    conn_name_attr = "ledger_conn_id"
    default_conn_name = LEDGER_CONN
    conn_type = "postgres"
    hook_name = "Onceflow ledger (PostgreSQL)"

    def __init__(self, ledger_conn_id: str = LEDGER_CONN, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.ledger_conn_id = ledger_conn_id

    def dsn(self) -> str:
        """A libpq DSN (it holds the password: never log it)."""
        conn = require(self.ledger_conn_id, self.conn_type, "the ledger")
        return ledger.ledger_dsn_from(conn, self.ledger_conn_id)


class KafkaClusterHook(BaseHook):
    """A Kafka cluster: its extra is librdkafka's client config (bootstrap.servers, TLS, SASL)."""

    conn_name_attr = "kafka_conn_id"
    default_conn_name = KAFKA_CONN
    conn_type = "kafka"
    hook_name = "Onceflow Kafka cluster"

    def __init__(self, kafka_conn_id: str = KAFKA_CONN, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.kafka_conn_id = kafka_conn_id

    def cluster(self) -> KafkaCluster:
        conn = require(self.kafka_conn_id, self.conn_type, "a Kafka cluster")
        return kafka.kafka_from(conn, self.kafka_conn_id)


class SchemaRegistryHook(BaseHook):
    """A Confluent-compatible schema registry: its URL as host, basic auth as login and
    password or a bearer token, and a CA file that verifies its TLS certificate."""

    conn_name_attr = "registry_conn_id"
    default_conn_name = REGISTRY_CONN
    conn_type = "schema_registry"
    hook_name = "Schema Registry (Onceflow)"

    def __init__(self, registry_conn_id: str = REGISTRY_CONN, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.registry_conn_id = registry_conn_id

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        return {
            "hidden_fields": ["schema", "port"],
            "relabeling": {"host": "Registry URL", "login": "User (basic auth)"},
            "placeholders": {
                "host": "https://registry.example.com:8081",
                "extra": '{"bearer_token": "...", "ca_file": "/etc/ssl/registry-ca.pem"}',
            },
        }

    @classmethod
    def get_connection_form_widgets(cls) -> dict[str, Any]:
        """The two extra fields, for Airflow's forms that still take wtforms widgets."""
        from flask_babel import lazy_gettext
        from wtforms import PasswordField, StringField

        return {
            "bearer_token": PasswordField(lazy_gettext("Bearer token")),
            "ca_file": StringField(lazy_gettext("CA file")),
        }

    def registry(self) -> Registry:
        conn = require(self.registry_conn_id, self.conn_type, "a schema registry")
        return registry.registry_from(conn, self.registry_conn_id)


class LakeStorageHook(BaseHook):
    """A lake sink's object storage: access key id as login, secret as password, extra
    `endpoint_url` and `region_name` (the fields of an Amazon `aws` connection)."""

    conn_name_attr = "storage_conn_id"
    default_conn_name = "aws_default"
    conn_type = "aws"
    hook_name = "Onceflow lake storage"

    def __init__(self, storage_conn_id: str = default_conn_name, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.storage_conn_id = storage_conn_id

    def storage(self) -> Storage:
        from onceflow.hooks.lake import storage_from

        conn = require(self.storage_conn_id, self.conn_type, "a lake sink's storage")
        return storage_from(conn, self.storage_conn_id)
