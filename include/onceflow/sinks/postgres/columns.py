"""The user's columns of a transform's output as a PostgreSQL sink types them, the columns
every stage table holds besides them, and the column lists the sink's SQL is built from.

Types are spelled as format_type() prints them, so that a table's columns compare with the
output's as text (sinks.postgres.binding).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from psycopg2 import sql

from onceflow.sinks.output_schema import sink_type, typed_columns

# Spark SQL types (DataType.simpleString(), or typeName() spellings) -> PostgreSQL types,
# spelled as format_type() prints them, so a table's columns compare as text.
_SPARK_TO_PG = {
    "string": "text",
    "bigint": "bigint",
    "long": "bigint",
    "int": "integer",
    "integer": "integer",
    "double": "double precision",
    "timestamp": "timestamp with time zone",
    "date": "date",
    "boolean": "boolean",
    "binary": "bytea",
}
# Columns the stage table holds besides the tags and the user's columns, and their types.
STAGE_FIXED = (
    ("topic", "text"),
    ("partition", "integer"),
    ("offset", "bigint"),
    ("error", "text"),
    ("key", "bytea"),
    ("value", "bytea"),
    ("tombstone", "boolean"),
    ("row_hash", "bigint"),
)
# A sum of integers can leave the integer range; numerics keep their scale.
SUM_TYPES = {"integer": "bigint", "bigint": "bigint", "double precision": "double precision"}


@dataclass(frozen=True)
class Column:
    name: str
    type: str  # a PostgreSQL type as format_type() prints it


def pg_type(column: str, spark_type: str) -> str:
    """The PostgreSQL type of an output column, or SinkSchemaError naming column and type."""
    return sink_type(column, spark_type, _SPARK_TO_PG, "numeric({p},{s})", "a PostgreSQL sink")


def output_columns(
    fields: Iterable[tuple[str, str]], aggregating: bool = False
) -> tuple[Column, ...]:
    """The user's columns of a transform's output ((name, Spark type) pairs), typed for
    PostgreSQL; the coordinates, error, key and value (and an aggregating transform's
    records) are the stage's own."""
    return tuple(Column(n, t) for n, t in typed_columns(fields, pg_type, aggregating))


def ids(names: Iterable[str]) -> sql.Composed:
    return sql.SQL(", ").join(sql.Identifier(n) for n in names)


def prefixed(prefix: str, names: Iterable[str]) -> sql.Composed:
    return sql.SQL(", ").join(sql.SQL(prefix + ".") + sql.Identifier(n) for n in names)


def more(names: Iterable[str], prefix: str = "") -> sql.Composed:
    """ ", a, b" (each name prefixed "s." with prefix "s"), or nothing for no names: the
    user's columns after fixed ones, where there may be none."""
    p = sql.SQL(f"{prefix}." if prefix else "")
    return sql.SQL("").join(sql.SQL(", ") + p + sql.Identifier(n) for n in names)


def defs(columns: Iterable[Column], not_null: Iterable[str] = ()) -> sql.Composed:
    required = set(not_null)
    return sql.SQL(", ").join(
        sql.SQL("{} {}{}").format(
            sql.Identifier(c.name),
            sql.SQL(c.type),  # a type this module spells (or SUM_TYPES): never user text
            sql.SQL(" not null" if c.name in required else ""),
        )
        for c in columns
    )
