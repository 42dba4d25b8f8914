"""The Delta table's columns: the mode's layout (sinks.lake.layout) of the coordinates and
txid (not null) and the transform's columns (nullable), typed from Spark's types as Delta
names its primitive types.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from onceflow.sinks.lake.layout import LakeColumn, Layout, Types

if TYPE_CHECKING:
    from onceflow.sinks.lake.modes import LakeMode
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


TYPES = Types(
    long="long",
    boolean="boolean",
    sums={"integer": "long", "long": "long", "float": "double", "double": "double"},
    decimal_prefix="decimal(",
)


def table_layout(name: str, mode: LakeMode, fields: Iterable[tuple[str, str]]) -> Layout:
    """The Delta table's and staged files' columns for a transform's output ((name, Spark
    type) pairs) in the sink's mode."""
    return mode.layout(name, FIXED_COLUMNS, typed_columns(fields, delta_type), TYPES)


def delta_field(column: LakeColumn) -> Any:
    from deltalake import Field
    from deltalake.schema import PrimitiveType

    return Field(column.name, PrimitiveType(column.type), nullable=not column.required)


def arrow_schema(columns: Iterable[LakeColumn]) -> Any:
    """The pyarrow schema of data files of these columns."""
    import pyarrow as pa

    return pa.schema(delta_schema(columns).to_arrow())


def delta_schema(columns: Iterable[LakeColumn]) -> Any:
    """The deltalake Schema of a new table of these columns."""
    from deltalake import Schema

    return Schema([delta_field(c) for c in columns])


# the column types a Delta table partitions by (identity only: onceflow.config.partitions)
TAKES = {"identity": ("string", "integer", "long", "date", "boolean")}


def partition_value(value: Any) -> str | None:
    """A partition value as the Delta log writes it (a string; null as null)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    return value.isoformat() if hasattr(value, "isoformat") else str(value)
