"""Provider metadata: Airflow lists Onceflow among its providers and plugins. Airflow reads it
while its configuration loads, so this module imports nothing of Airflow (nor onceflow.airflow).

The schema registry's connection type, `schema_registry`, is Onceflow's own
(onceflow.hooks.provider_hooks.SchemaRegistryHook): its form is declared here, so that Airflow's
connection form shows it without importing the hook. The ledger and PostgreSQL sinks use the
`postgres` type (apache-airflow-providers-postgres), Kafka the `kafka` type
(apache-airflow-providers-apache-kafka) and Spark Connect the `spark_connect` type
(apache-airflow-providers-apache-spark): all three are dependencies, so their forms are there
wherever Onceflow is installed, and their hooks in onceflow.hooks.provider_hooks read them.
"""

from __future__ import annotations

from importlib import metadata
from typing import Any


def get_provider_info() -> dict[str, Any]:
    return {
        "package-name": "onceflow",
        "name": "Onceflow",
        "description": "Exactly-once micro-batches from Kafka through Spark (plan, process, commit).",
        "versions": [metadata.version("onceflow")],
        "plugins": [{"name": "onceflow", "plugin-class": "onceflow.airflow.plugin.OnceflowPlugin"}],
        "connection-types": [
            {
                "hook-class-name": "onceflow.hooks.provider_hooks.SchemaRegistryHook",
                "hook-name": "Schema Registry (Onceflow)",
                "connection-type": "schema_registry",
                "ui-field-behaviour": {
                    "hidden-fields": ["schema", "port"],
                    "relabeling": {"host": "Registry URL", "login": "User (basic auth)"},
                    "placeholders": {"host": "https://registry.example.com:8081"},
                },
                "conn-fields": {
                    "bearer_token": {
                        "label": "Bearer token",
                        "schema": {"type": ["string", "null"], "format": "password"},
                    },
                    "ca_file": {
                        "label": "CA file (verifies the registry's TLS certificate)",
                        "schema": {"type": ["string", "null"]},
                    },
                },
            }
        ],
    }
