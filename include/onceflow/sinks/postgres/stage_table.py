"""The stage table alone, for a sink outside the database that stages in PostgreSQL and
whose commit reads the valid rows back and publishes them itself (a Kafka topic:
sinks.kafka).
"""

from __future__ import annotations

from onceflow.config.sink import SinkConfig
from onceflow.ledger.attempt import Attempt
from onceflow.sinks.postgres.mode import PublishMode, TableLayout
from onceflow.sinks.postgres.sink import PostgresSink


class StageOnly(PublishMode):
    """Only the stage table, without a published table: what it stages is published
    elsewhere. Created and checked from the output schema like every stage table
    (stage_writer), under the name `stage_<table>`."""

    name = "stage"
    publishes_tables = False

    @property
    def record_table(self) -> str:
        return self.tables.stage_table

    def published_tables(self) -> dict[str, TableLayout]:
        return {}

    def seal(self, cur, t: Attempt) -> None:
        pass  # the publisher reads the stage table as it is

    def publish(self, cur, t: Attempt, replacing: bool) -> int:
        raise NotImplementedError("a stage table alone is published by its own sink")

    def unpublish(self, cur, t: Attempt) -> None:
        pass  # nothing of it was published here


def stage_table(schema: str, table: str) -> PostgresSink:
    """The stage table `stage_<table>` in `schema`, alone."""
    return PostgresSink(schema, SinkConfig(table=table), mode=StageOnly)
