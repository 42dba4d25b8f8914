"""The Delta table's schema: topic, partition, epoch, offset (the record's coordinates) and
txid, not null, then the transform's columns, nullable, typed from Spark's types as Delta
names its primitive types.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from onceflow.sinks.output_schema import sink_type, typed_columns

# The columns Onceflow writes before the transform's: (name, Delta type name).
FIXED_COLUMNS = (
    ("topic", "string"),
    ("partition", "integer"),
    ("epoch", "integer"),
    ("offset", "long"),
    ("txid", "string"),
)
# Spark SQL types (DataType.simpleString(), or typeName() spellings) -> Delta types.
_SPARK_TO_DELTA = {
    "string": "string",
    "bigint": "long",
    "long": "long",
    "int": "integer",
    "integer": "integer",
    "double": "double",
    "float": "float",
    "timestamp": "timestamp",
    "timestamp_ntz": "timestamp_ntz",
    "date": "date",
    "boolean": "boolean",
    "binary": "binary",
}


def delta_type(column: str, spark_type: str) -> str:
    """The Delta type name of an output column, or SinkSchemaError."""
    return sink_type(column, spark_type, _SPARK_TO_DELTA, "decimal({p},{s})", "a Delta sink")


@dataclass(frozen=True)
class Column:
    name: str
    type: str  # a Delta primitive type name ("long", "decimal(10,2)")
    nullable: bool = True


def table_columns(fields: Iterable[tuple[str, str]]) -> tuple[Column, ...]:
    """The Delta table's columns for a transform's output ((name, Spark type) pairs): the
    fixed ones (not null), then the user's (nullable)."""
    fixed = (Column(n, t, nullable=False) for n, t in FIXED_COLUMNS)
    return (*fixed, *(Column(n, t) for n, t in typed_columns(fields, delta_type)))


def delta_field(column: Column) -> Any:
    from deltalake import Field
    from deltalake.schema import PrimitiveType

    return Field(column.name, PrimitiveType(column.type), nullable=column.nullable)


def delta_schema(columns: Iterable[Column]) -> Any:
    """The deltalake Schema of a new table of these columns."""
    from deltalake import Schema

    return Schema([delta_field(c) for c in columns])
