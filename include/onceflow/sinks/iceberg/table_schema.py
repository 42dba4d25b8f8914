"""The Iceberg table's schema: topic, partition, epoch, offset (the record's coordinates) and
txid, required, then the transform's columns, optional, typed from Spark's types.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from onceflow.sinks.output_schema import sink_type, typed_columns

# The columns Onceflow writes before the transform's: (name, Iceberg type name).
FIXED_COLUMNS = (
    ("topic", "string"),
    ("partition", "int"),
    ("epoch", "int"),
    ("offset", "long"),
    ("txid", "string"),
)
# Spark SQL types (DataType.simpleString(), or typeName() spellings) -> Iceberg types.
_SPARK_TO_ICEBERG = {
    "string": "string",
    "bigint": "long",
    "long": "long",
    "int": "int",
    "integer": "int",
    "double": "double",
    "float": "float",
    "timestamp": "timestamptz",
    "timestamp_ntz": "timestamp",
    "date": "date",
    "boolean": "boolean",
    "binary": "binary",
}


def iceberg_type(column: str, spark_type: str) -> str:
    """The Iceberg type (as pyiceberg prints it) of an output column, or SinkSchemaError."""
    return sink_type(column, spark_type, _SPARK_TO_ICEBERG, "decimal({p}, {s})", "an Iceberg sink")


@dataclass(frozen=True)
class Column:
    name: str
    type: str  # an Iceberg primitive type as pyiceberg prints it ("long", "decimal(10, 2)")
    required: bool = False


def table_columns(fields: Iterable[tuple[str, str]]) -> tuple[Column, ...]:
    """The Iceberg table's columns for a transform's output ((name, Spark type) pairs):
    the fixed ones (required), then the user's (optional)."""
    fixed = (Column(n, t, required=True) for n, t in FIXED_COLUMNS)
    return (*fixed, *(Column(n, t) for n, t in typed_columns(fields, iceberg_type)))


def iceberg_schema(columns: tuple[Column, ...]) -> Any:
    """The pyiceberg Schema of a new table of these columns (field ids from 1, in order)."""
    from pyiceberg.schema import Schema
    from pyiceberg.types import NestedField

    return Schema(
        *(
            NestedField(i, c.name, primitive(c.type), required=c.required)
            for i, c in enumerate(columns, start=1)
        )
    )


def primitive(name: str) -> Any:
    """The pyiceberg type a type name of _SPARK_TO_ICEBERG or "decimal(p, s)" stands for."""
    from pyiceberg import types

    m = re.match(r"^decimal\((\d+), (\d+)\)$", name)
    if m:
        return types.DecimalType(int(m.group(1)), int(m.group(2)))
    return {
        "string": types.StringType,
        "long": types.LongType,
        "int": types.IntegerType,
        "double": types.DoubleType,
        "float": types.FloatType,
        "timestamptz": types.TimestamptzType,
        "timestamp": types.TimestampType,
        "date": types.DateType,
        "boolean": types.BooleanType,
        "binary": types.BinaryType,
    }[name]()
