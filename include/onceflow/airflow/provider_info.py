"""Provider metadata: Airflow lists Onceflow among its providers and plugins. Airflow reads it
while its configuration loads, so this module imports nothing of Airflow (nor onceflow.airflow).

Onceflow defines no connection type of its own: the ledger and PostgreSQL sinks use the
`postgres` type (apache-airflow-providers-postgres) and Kafka the `kafka` type
(apache-airflow-providers-apache-kafka), whose forms the UI already offers; both are
dependencies, so their fields are there wherever Onceflow is installed.
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
    }
