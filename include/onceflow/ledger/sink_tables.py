"""The tables of a pipeline of change events with a table per topic (a sink's `tables`), as
the ledger keeps them (onceflow.sink_tables): each topic's table and its key, recorded by
process the first time it stages the table, read by commit, the audit and the Ledger view."""

from __future__ import annotations

from dataclasses import dataclass

from onceflow.errors import SinkSchemaError


@dataclass(frozen=True)
class SinkTable:
    topic: str
    table: str
    key: tuple[str, ...]


def record_table(cur, pipeline: str, txid: str, table: SinkTable) -> None:
    """Record `table` of the pipeline, once; SinkSchemaError if it is recorded with another
    key (a primary key cannot change in place) or its topic with another table."""
    cur.execute(
        "insert into onceflow.sink_tables (pipeline, topic, sink_table, key_columns,"
        " first_txid) values (%s, %s, %s, %s, %s) on conflict do nothing",
        (pipeline, table.topic, table.table, list(table.key), txid),
    )
    if cur.rowcount == 1:
        return
    cur.execute(
        "select topic, sink_table, key_columns from onceflow.sink_tables"
        " where pipeline = %s and (topic = %s or sink_table = %s)",
        (pipeline, table.topic, table.table),
    )
    for topic, name, key in cur.fetchall():
        if (topic, name, tuple(key)) != (table.topic, table.table, table.key):
            raise SinkSchemaError(
                f"pipeline {pipeline!r}: topic {table.topic!r} now gives table "
                f"{table.table!r} keyed by {list(table.key)}, but the ledger has topic "
                f"{topic!r} in table {name!r} keyed by {list(key)} (a table's key cannot "
                "change in place; a new table needs a new topic or mapping). Nothing was staged."
            )


def sink_tables(cur, pipeline: str) -> list[SinkTable]:
    """The pipeline's recorded tables, by topic."""
    cur.execute(
        "select topic, sink_table, key_columns from onceflow.sink_tables where pipeline = %s"
        " order by topic",
        (pipeline,),
    )
    return [SinkTable(topic, table, tuple(key)) for topic, table, key in cur.fetchall()]
