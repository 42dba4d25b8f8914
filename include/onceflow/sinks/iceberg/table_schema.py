"""The Iceberg table's columns: the mode's layout (sinks.lake.layout) of the coordinates and
txid (required) and the transform's columns (optional), typed from Spark's types as
Iceberg names them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from onceflow.sinks.lake.layout import LakeColumn, Layout, Types

if TYPE_CHECKING:
    from onceflow.sinks.lake.modes import LakeMode
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


TYPES = Types(
    long="long",
    boolean="boolean",
    sums={"int": "long", "long": "long", "float": "double", "double": "double"},
    decimal_prefix="decimal(",
)


def table_layout(name: str, mode: LakeMode, fields: Iterable[tuple[str, str]]) -> Layout:
    """The Iceberg table's and staged files' columns for a transform's output ((name, Spark
    type) pairs) in the sink's mode."""
    return mode.layout(name, FIXED_COLUMNS, typed_columns(fields, iceberg_type), TYPES)


def iceberg_schema(columns: tuple[LakeColumn, ...]) -> Any:
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
