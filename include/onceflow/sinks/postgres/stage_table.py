"""The stage table alone, for a sink outside the database that stages in PostgreSQL and
whose commit reads the valid rows back and publishes them itself (a Kafka topic:
sinks.kafka).
"""

from __future__ import annotations

from onceflow.sinks.postgres.columns import Column
from onceflow.sinks.postgres.sink import PostgresSink


class StageTable(PostgresSink):
    """Only the stage table of an append sink, without a published table: the stage of a
    sink outside the database whose commit reads the valid rows back and publishes them
    itself (onceflow.sinks.kafka). Created and checked from the output schema like every
    stage table (bind_output), under the name `stage_<table>`."""

    def _expected_tables(self) -> dict[str, tuple[tuple[Column, ...], tuple[str, ...]]]:
        return {self.stage_table: super()._expected_tables()[self.stage_table]}

    @property
    def _label(self) -> str:
        return f"the stage table {self.schema}.{self.stage_table}"

    @property
    def _publishes_tables(self) -> bool:
        return False  # what it stages is published elsewhere (a Kafka topic)
